//! One pprof profile per interval of the samples' time: the output of a profiler that
//! runs for hours and hands each interval's profile on (to a store's
//! [`Queue`](crate::push::Queue), or anywhere).
//!
//! A sample belongs to the interval its *time* falls in, decided here, on the writer
//! thread: intervals are `[origin + k·every, origin + (k+1)·every)` of the events' clock
//! (`CLOCK_MONOTONIC` for a [`Profiler`](crate::profiler::Profiler)), the origin being
//! the clock's time at [`start`](Output::start). An interval is cut — its profile
//! written and handed on — once no sample of it can still come, which the output knows
//! two ways: [`progress`](Output::progress) marks from the draining thread (every
//! sample stamped before the drain began has been given), and, without them, perf's
//! own rule at each round's end (every sample older than the previous round's newest
//! has been given). A sample that comes after its interval was cut (the kernel
//! published it late) goes to the oldest interval still open and is counted
//! ([`IntervalStats::late`]): no sample is in two profiles, none in neither.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::{Output, Pprof, Recording, SampleRef};
use crate::error::Result;
use crate::records::{Record, RecordKind};
use crate::sampler::EventInfo;

/// One interval's profile, as it was cut.
#[derive(Clone, PartialEq, Eq)]
pub struct CutProfile {
    /// The gzipped pprof, as [`Pprof`] writes it.
    pub pprof: Vec<u8>,
    /// The start of the interval (wall clock).
    pub from: SystemTime,
    /// Its end: the next interval's start, or, for the last one, when the recording
    /// ended.
    pub until: SystemTime,
    /// The interval's number, from 0 at the start.
    pub index: u64,
    /// The samples in it.
    pub samples: u64,
    /// Records reported lost while it was open (`LOST` records, the writer's queue).
    pub lost: u64,
}

impl std::fmt::Debug for CutProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CutProfile")
            .field("index", &self.index)
            .field("from", &self.from)
            .field("until", &self.until)
            .field("samples", &self.samples)
            .field("lost", &self.lost)
            .field("bytes", &self.pprof.len())
            .finish()
    }
}

/// What an [`Intervals`] output has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntervalStats {
    /// Profiles cut and handed on.
    pub cut: u64,
    /// Samples in them.
    pub samples: u64,
    /// Samples that came after their interval was cut (placed in the next one).
    pub late: u64,
    /// Intervals that ended without a sample (no profile is cut for them).
    pub empty: u64,
}

/// Reads an [`Intervals`]' counts from another thread, while it runs on the writer's.
#[derive(Debug, Clone)]
pub struct IntervalsHandle(Arc<Mutex<IntervalStats>>);

impl IntervalsHandle {
    /// The counts so far.
    pub fn stats(&self) -> IntervalStats {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The [`Output`] that cuts a pprof profile per interval of the samples' time.
///
/// A sample belongs to the interval its time falls in, `[origin + k·every, origin +
/// (k+1)·every)` of the events' clock, the origin being the clock's time at
/// [`start`](Output::start) (or the first sample's, if the events name no clock). An
/// interval is cut once no sample of it can still come: when the drain's
/// [`progress`](Output::progress) passes its end by the [`grace`](Self::grace), or by
/// perf's rule at a round's end (every sample older than the previous round's newest
/// has come). A sample that comes after its interval was cut goes to the oldest one
/// still open and is counted ([`IntervalStats::late`]): no sample is in two profiles,
/// none in neither. Intervals without samples give no profile.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use perfring::output::Intervals;
/// let (tx, rx) = std::sync::mpsc::channel();
/// let out = Intervals::every(Duration::from_secs(15), move |p| { let _ = tx.send(p); });
/// // Profiler::builder(target).output(out).progress_every(Duration::from_millis(250))…
/// # let _ = rx;
/// ```
pub struct Intervals {
    /// The interval in the clock's nanoseconds; `None`: one profile, at the end.
    every: Option<u64>,
    grace: u64,
    sink: Box<dyn FnMut(CutProfile) + Send>,
    events: Vec<EventInfo>,
    cmdline: Vec<String>,
    program: Option<PathBuf>,
    /// The events' clock, if they name one.
    clock: Option<i32>,
    /// The origin: the clock's time, and the wall clock's then.
    origin: Option<(u64, SystemTime)>,
    /// Intervals with samples, not yet cut, by index.
    open: VecDeque<Open>,
    /// The first interval not yet closed: every one before it has been cut or was
    /// empty.
    next: u64,
    /// The newest time of this round, and of every round before it.
    round_max: u64,
    seen_max: u64,
    /// Records lost before any interval was open.
    pending_lost: u64,
    stats: Arc<Mutex<IntervalStats>>,
    finished: bool,
}

struct Open {
    index: u64,
    pprof: Pprof,
    buf: SharedBuf,
    samples: u64,
    lost: u64,
}

impl std::fmt::Debug for Intervals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intervals")
            .field("every", &self.every.map(Duration::from_nanos))
            .field("open", &self.open.len())
            .field("next", &self.next)
            .field("stats", &self.handle().stats())
            .finish_non_exhaustive()
    }
}

/// How long after an interval's end its samples may still be published by the
/// kernel (stamped, then written to the ring): the interval is cut only once the
/// draining side has passed its end by this much.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(100);

impl Intervals {
    /// A profile per `every` of the samples' time, each handed to `sink` once cut (on
    /// the writer thread: `sink` must not block — hand it to a queue).
    pub fn every(every: Duration, sink: impl FnMut(CutProfile) + Send + 'static) -> Intervals {
        Intervals::new(Some(every.max(Duration::from_millis(1))), sink)
    }

    /// One profile of the whole recording, handed to `sink` at the end.
    pub fn whole(sink: impl FnMut(CutProfile) + Send + 'static) -> Intervals {
        Intervals::new(None, sink)
    }

    fn new(every: Option<Duration>, sink: impl FnMut(CutProfile) + Send + 'static) -> Intervals {
        Intervals {
            every: every.map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64),
            grace: DEFAULT_GRACE.as_nanos() as u64,
            sink: Box::new(sink),
            events: Vec::new(),
            cmdline: Vec::new(),
            program: None,
            clock: None,
            origin: None,
            open: VecDeque::new(),
            next: 0,
            round_max: 0,
            seen_max: 0,
            pending_lost: 0,
            stats: Arc::new(Mutex::new(IntervalStats::default())),
            finished: false,
        }
    }

    /// How long past an interval's end to wait for late samples (default
    /// [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> Intervals {
        self.grace = grace.as_nanos().min(u128::from(u64::MAX)) as u64;
        self
    }

    /// A handle on the counts, readable from any thread.
    pub fn handle(&self) -> IntervalsHandle {
        IntervalsHandle(self.stats.clone())
    }

    fn count(&self, f: impl FnOnce(&mut IntervalStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The origin, set at the first sample if the events name no clock.
    fn origin(&mut self, time: u64) -> (u64, SystemTime) {
        *self.origin.get_or_insert_with(|| (time, SystemTime::now()))
    }

    /// The interval of a sample stamped `time` (`None`: unstamped, the newest open).
    fn index_of(&mut self, time: Option<u64>) -> u64 {
        let Some(t) = time else {
            return self.open.back().map_or(self.next, |o| o.index);
        };
        self.round_max = self.round_max.max(t);
        let (o, _) = self.origin(t);
        match self.every {
            Some(e) if t > o => (t - o) / e,
            _ => 0,
        }
    }

    /// The open interval `index` (or, if it was cut, the oldest still open), created
    /// if need be; `late` if it was cut.
    fn open_for(&mut self, mut index: u64) -> Result<(&mut Open, bool)> {
        let late = index < self.next;
        if late {
            index = self.next;
        }
        let at = match self.open.binary_search_by_key(&index, |o| o.index) {
            Ok(i) => i,
            Err(i) => {
                let buf = SharedBuf::default();
                let mut pprof = Pprof::new(buf.clone(), format!("<interval {index}>"));
                pprof.start(&Recording::new(
                    &self.events,
                    &self.cmdline,
                    self.program.as_deref(),
                ))?;
                let lost = std::mem::take(&mut self.pending_lost);
                if lost > 0 {
                    pprof.lost(lost)?;
                }
                self.open.insert(
                    i,
                    Open {
                        index,
                        pprof,
                        buf,
                        samples: 0,
                        lost,
                    },
                );
                i
            }
        };
        Ok((&mut self.open[at], late))
    }

    /// Cuts every interval that ended, with the grace, before `time`.
    fn close_before(&mut self, time: u64) -> Result<()> {
        let (Some(e), Some((o, _))) = (self.every, self.origin) else {
            return Ok(());
        };
        let Some(past) = time.checked_sub(self.grace).and_then(|t| t.checked_sub(o)) else {
            return Ok(());
        };
        let next = past / e;
        if next <= self.next {
            return Ok(());
        }
        let mut cut = 0;
        while self.open.front().is_some_and(|f| f.index < next) {
            let open = self.open.pop_front().expect("checked");
            self.cut(open, false)?;
            cut += 1;
        }
        let empty = next - self.next - cut;
        self.count(|s| s.empty += empty);
        self.next = next;
        Ok(())
    }

    /// Writes an interval's profile and hands it on; `last`: the recording ended in it.
    fn cut(&mut self, mut open: Open, last: bool) -> Result<()> {
        let (_, wall) = self.origin.unwrap_or((0, SystemTime::now()));
        let (from, until) = match self.every {
            Some(e) => {
                let from = wall + Duration::from_nanos(open.index.saturating_mul(e));
                let end = from + Duration::from_nanos(e);
                let until = if last {
                    SystemTime::now().clamp(from, end)
                } else {
                    end
                };
                (from, until)
            }
            None => (wall, SystemTime::now().max(wall)),
        };
        open.pprof
            .set_span(from, until.duration_since(from).unwrap_or_default());
        open.pprof.finish()?;
        drop(open.pprof);
        let pprof = std::mem::take(&mut *open.buf.0.lock().unwrap_or_else(|p| p.into_inner()));
        let samples = open.samples;
        self.count(|s| {
            s.cut += 1;
            s.samples += samples;
        });
        (self.sink)(CutProfile {
            pprof,
            from,
            until,
            index: open.index,
            samples,
            lost: open.lost,
        });
        Ok(())
    }
}

impl Output for Intervals {
    fn start(&mut self, rec: &Recording<'_>) -> Result<()> {
        self.events = rec.events.to_vec();
        self.cmdline = rec.cmdline.to_vec();
        self.program = rec.program.map(std::path::Path::to_path_buf);
        // The events' clock, if they name one (a Profiler's: CLOCK_MONOTONIC): the
        // origin is now on it, so intervals start with the recording.
        self.clock = self
            .events
            .first()
            .map(EventInfo::attr)
            .filter(|a| a.use_clockid() != 0)
            .map(|a| a.clockid);
        if let Some(clock) = self.clock {
            let now = crate::counter::clock_ns(clock);
            if now > 0 {
                self.origin = Some((now, SystemTime::now()));
            }
        }
        Ok(())
    }

    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> Result<()> {
        let index = self.index_of(s.sample.time());
        let (open, late) = self.open_for(index)?;
        open.samples += 1;
        open.pprof.sample(s)?;
        if late {
            self.count(|c| c.late += 1);
        }
        Ok(())
    }

    fn record(&mut self, event: Option<usize>, record: &Record<'_>, bytes: &[u8]) -> Result<()> {
        // Only LOST records matter to a pprof; each goes to its interval.
        let RecordKind::Lost(l) = record.kind() else {
            return Ok(());
        };
        let index = self.index_of(record.sample_id().time());
        let (open, _) = self.open_for(index)?;
        open.lost += l.lost;
        open.pprof.record(event, record, bytes)
    }

    fn lost(&mut self, records: u64) -> Result<()> {
        match self.open.back_mut() {
            Some(open) => {
                open.lost += records;
                open.pprof.lost(records)
            }
            None => {
                self.pending_lost += records;
                Ok(())
            }
        }
    }

    fn end_round(&mut self) -> Result<()> {
        // perf's rule: what is older than the previous round's newest has come.
        let safe = self.seen_max;
        self.seen_max = self.seen_max.max(self.round_max);
        self.close_before(safe)
    }

    fn progress(&mut self, time: u64) -> Result<()> {
        self.close_before(time)
    }

    fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let mut first = Ok(());
        while let Some(open) = self.open.pop_front() {
            let last = self.open.is_empty();
            if let Err(e) = self.cut(open, last) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

/// A `Write` whose bytes the writer's owner takes back: where each interval's
/// [`Pprof`] writes.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
