//! Repeated runs (`perf stat -r N`): each event's mean over the runs and the spread
//! perf prints as `( +- x% )`.

use super::{Reading, Row, Status};

/// A running mean and variance (Welford's method), as perf keeps its `struct stats`.
///
/// # Examples
/// ```
/// let mut s = perfring::stat::Spread::default();
/// for x in [10.0, 12.0, 14.0] {
///     s.add(x);
/// }
/// assert_eq!(s.mean(), 12.0);
/// // The standard deviation of the mean: sqrt(variance / n) = sqrt(4 / 3).
/// assert!((s.stddev_of_mean() - (4.0f64 / 3.0).sqrt()).abs() < 1e-12);
/// assert!((s.relative_pct() - 100.0 * (4.0f64 / 3.0).sqrt() / 12.0).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    n: u32,
    mean: f64,
    m2: f64,
}

impl Spread {
    /// Adds one run's value.
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / f64::from(self.n);
        self.m2 += delta * (x - self.mean);
    }

    /// How many values were added.
    pub fn count(&self) -> u32 {
        self.n
    }

    /// The mean (0 with no values).
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// The standard deviation of the mean, `sqrt(variance / n)` with the sample
    /// variance (`n - 1`): what perf calls `stddev_stats`. 0 with fewer than two values.
    pub fn stddev_of_mean(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = f64::from(self.n);
        (self.m2 / (n - 1.0) / n).sqrt()
    }

    /// [`stddev_of_mean`](Self::stddev_of_mean) in percent of the mean (0 when the mean
    /// is 0): the `x` of perf's `( +- x% )`.
    pub fn relative_pct(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            100.0 * self.stddev_of_mean() / self.mean
        }
    }
}

/// The readings of repeated runs of one command, combined as `perf stat -r N` does:
/// each event's count, times enabled and running averaged, its spread kept.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    events: Vec<EventRuns>,
    wall: Spread,
}

#[derive(Debug, Clone)]
struct EventRuns {
    name: String,
    event: crate::Event,
    supported: bool,
    value: Spread,
    enabled: Spread,
    running: Spread,
}

impl Runs {
    /// No runs yet.
    pub fn new() -> Runs {
        Runs::default()
    }

    /// Adds one run's final reading. The events must be those of the earlier runs, in
    /// the same order (the same [`StatBuilder`](super::StatBuilder) opened again).
    pub fn add(&mut self, reading: &Reading) {
        self.wall.add(reading.elapsed.as_nanos() as f64);
        for (i, e) in reading.events.iter().enumerate() {
            if self.events.len() <= i {
                self.events.push(EventRuns {
                    name: e.name.clone(),
                    event: e.event.clone(),
                    supported: e.supported,
                    value: Spread::default(),
                    enabled: Spread::default(),
                    running: Spread::default(),
                });
            }
            let r = &mut self.events[i];
            r.supported &= e.supported;
            r.value.add(e.total.scaled());
            r.enabled.add(e.total.time_enabled.unwrap_or(0) as f64);
            r.running.add(e.total.time_running.unwrap_or(0) as f64);
        }
    }

    /// How many runs were added.
    pub fn count(&self) -> u32 {
        self.wall.count()
    }

    /// The wall-clock time of the runs, in nanoseconds.
    pub fn wall_ns(&self) -> Spread {
        self.wall
    }

    /// One row per event: the means, with each count's spread in
    /// [`Row::noise_pct`].
    pub fn rows(&self) -> Vec<Row> {
        self.events
            .iter()
            .map(|e| {
                let (enabled, running) = (e.enabled.mean(), e.running.mean());
                Row {
                    name: e.name.clone(),
                    event: e.event.clone(),
                    status: if !e.supported {
                        Status::NotSupported
                    } else if running == 0.0 || enabled == 0.0 {
                        Status::NotCounted
                    } else {
                        Status::Counted
                    },
                    value: e.value.mean(),
                    enabled: enabled.round() as u64,
                    running: running.round() as u64,
                    noise_pct: Some(e.value.relative_pct()),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_the_textbook_formulas() {
        let xs = [112.0, 113.0, 111.0, 115.0, 112.0];
        let mut s = Spread::default();
        xs.iter().for_each(|&x| s.add(x));
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        assert!((s.mean() - mean).abs() < 1e-9);
        assert!((s.stddev_of_mean() - (var / n).sqrt()).abs() < 1e-9);
        assert_eq!(Spread::default().relative_pct(), 0.0);
        let mut one = Spread::default();
        one.add(5.0);
        assert_eq!(one.stddev_of_mean(), 0.0);
    }
}
