//! What `perf stat` prints beside each count: the unit counts are shown in (clocks
//! in msec) and the derived metric after `#` ("CPUs utilized", "K/sec", ...).
//!
//! Pure: computed from the [`Row`]s of one scope (the whole target, one thread, one
//! CPU) and the wall-clock time they cover.

use super::{Row, Status};
use crate::event::{Hardware, Kind};
use crate::Event;

/// How a count is shown: multiplied by `scale`, followed by `name`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// The factor from the kernel's count to the shown value (1e-6 for clocks: ns to ms).
    pub scale: f64,
    /// The unit's name (`msec`), or empty.
    pub name: &'static str,
}

/// Whether `event` is a software clock (`task-clock`, `cpu-clock`, whose count is
/// nanoseconds): perf shows it in msec with "CPUs utilized", and takes the rate of every
/// other event (`/sec`) per second of it.
fn is_clock(event: &Event) -> bool {
    event.counts_cpu_time()
}

/// The unit `event`'s count is shown in, as perf's: msec for clocks, none otherwise.
pub fn unit_of(event: &Event) -> Unit {
    if is_clock(event) {
        Unit {
            scale: 1e-6,
            name: "msec",
        }
    } else {
        Unit {
            scale: 1.0,
            name: "",
        }
    }
}

/// A derived metric: its value, the value as perf formats it for the table (`text`,
/// fixed width, e.g. `"   0.665"`), and its unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// The value.
    pub value: f64,
    /// The value as perf prints it in its table (`%8.3f` for most).
    pub text: String,
    /// The unit: `CPUs utilized`, `/sec`, `K/sec`, `M/sec`, `G/sec`, `GHz`, ...
    pub unit: String,
}

impl Metric {
    fn new(value: f64, text: String, unit: impl Into<String>) -> Metric {
        Metric {
            value,
            text,
            unit: unit.into(),
        }
    }

    /// The number as perf's CSV and its `--json` metric-only output write it: the
    /// table's text without its padding, digits and the point only.
    pub fn plain(&self) -> &str {
        let t = self.text.trim_start();
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        &t[..end]
    }
}

/// The metric perf derives for `rows[index]`, given the other rows of its scope and
/// the wall-clock nanoseconds they cover: a clock's "CPUs utilized" (its time over
/// the wall time), cycles' GHz, instructions per cycle, branch and cache misses in
/// percent of their references, and for any other event its rate per second of the
/// scope's clock (`task-clock`/`cpu-clock`, their mean if both are counted), with
/// perf's K/M/G steps. `None` when the row was not counted or what it needs is
/// missing (perf then leaves the column blank).
pub fn derive(rows: &[Row], index: usize, wall_ns: f64) -> Option<Metric> {
    let row = rows.get(index)?;
    if row.status != Status::Counted {
        return None;
    }
    let counted = |pred: &dyn Fn(&Event) -> bool| {
        let vals: Vec<f64> = rows
            .iter()
            .filter(|r| r.status == Status::Counted && pred(&r.event))
            .map(|r| r.value)
            .collect();
        (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
    };
    let hw =
        |which: Hardware| move |e: &Event| matches!(e.kind(), Kind::Hardware(h) if *h == which);
    let clock_ns = counted(&is_clock).filter(|&ns| ns > 0.0);
    let v = row.value;
    let f83 = |x: f64| format!("{x:8.3}");
    match row.event.kind() {
        _ if is_clock(&row.event) => {
            (wall_ns > 0.0).then(|| Metric::new(v / wall_ns, f83(v / wall_ns), "CPUs utilized"))
        }
        Kind::Hardware(Hardware::Cycles) => {
            clock_ns.map(|ns| Metric::new(v / ns, f83(v / ns), "GHz"))
        }
        Kind::Hardware(Hardware::Instructions) => counted(&hw(Hardware::Cycles))
            .filter(|&c| c > 0.0)
            .map(|c| Metric::new(v / c, format!("{:7.2} ", v / c), "insn per cycle")),
        Kind::Hardware(Hardware::BranchMisses) => counted(&hw(Hardware::BranchInstructions))
            .filter(|&b| b > 0.0)
            .map(|b| {
                let pct = 100.0 * v / b;
                Metric::new(pct, format!("{pct:7.2}%"), "of all branches")
            }),
        Kind::Hardware(Hardware::CacheMisses) => counted(&hw(Hardware::CacheReferences))
            .filter(|&r| r > 0.0)
            .map(|r| {
                let pct = 100.0 * v / r;
                Metric::new(pct, format!("{pct:8.3} %"), "of all cache refs")
            }),
        _ => clock_ns.map(|ns| {
            let (rate, prefix) = per_second(1e9 * v / ns);
            Metric::new(rate, f83(rate), format!("{prefix}/sec"))
        }),
    }
}

/// A rate with perf's prefixes: above 1000 it is divided by 1000 and gets `K`, then
/// `M`, then `G`.
fn per_second(mut rate: f64) -> (f64, &'static str) {
    let mut prefix = "";
    for p in ["K", "M", "G"] {
        if rate > 1000.0 {
            rate /= 1000.0;
            prefix = p;
        }
    }
    (rate, prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, value: f64) -> Row {
        Row {
            name: name.into(),
            event: Event::parse(name).unwrap(),
            status: Status::Counted,
            value,
            enabled: 1,
            running: 1,
            noise_pct: None,
        }
    }

    #[test]
    fn software_rows_get_perfs_metrics() {
        // perf stat -- ls on this VM: 1.37 msec task-clock, 113 page-faults in 2.06 ms.
        let rows = vec![
            row("task-clock", 1_365_000.0),
            row("context-switches", 0.0),
            row("page-faults", 113.0),
        ];
        let wall = 2_052_533.0;
        let m = derive(&rows, 0, wall).unwrap();
        assert_eq!(
            (m.text.as_str(), m.unit.as_str()),
            ("   0.665", "CPUs utilized")
        );
        let m = derive(&rows, 1, wall).unwrap();
        assert_eq!((m.text.as_str(), m.unit.as_str()), ("   0.000", "/sec"));
        let m = derive(&rows, 2, wall).unwrap();
        assert_eq!((m.text.as_str(), m.unit.as_str()), ("  82.784", "K/sec"));
        assert_eq!(m.plain(), "82.784");
        // Without a clock in the scope there is no rate.
        assert_eq!(derive(&rows[2..], 0, wall), None);
        let mut not_counted = rows.clone();
        not_counted[2].status = Status::NotCounted;
        assert_eq!(derive(&not_counted, 2, wall), None);
        assert_eq!(per_second(2_500_000.0), (2.5, "M"));
        assert_eq!(per_second(1000.0), (1000.0, ""));
    }

    #[test]
    fn hardware_rows_get_perfs_ratios() {
        let rows = vec![
            row("task-clock", 1e9),
            row("cycles", 3e9),
            row("instructions", 6e9),
            row("branches", 1e9),
            row("branch-misses", 2.5e7),
        ];
        let text = |i| derive(&rows, i, 1e9).map(|m| (m.text, m.unit));
        assert_eq!(text(1), Some(("   3.000".into(), "GHz".into())));
        assert_eq!(text(2), Some(("   2.00 ".into(), "insn per cycle".into())));
        assert_eq!(text(4), Some(("   2.50%".into(), "of all branches".into())));
        assert_eq!(unit_of(&rows[0].event).name, "msec");
        assert_eq!(unit_of(&rows[1].event).scale, 1.0);
    }
}
