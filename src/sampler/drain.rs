//! The drain path: each record, in place, to the caller's callback, with its event and
//! thread, while the accounting and the thread table follow along.
//!
//! Nothing here allocates per record: the record is borrowed from the ring (or from
//! its scratch copy if it wrapped), decoded in place, and handed out by value. Only a
//! thread seen for the first time grows the thread table, and only a new thread or an
//! exit to act on is queued (in vectors reserved up front).

use super::stats::{Stats, Threads};
use super::EventInfo;
use crate::records::{Layout, Record, RecordKind};

/// One record, handed to the drain callback in place.
///
/// `record` and `raw` borrow the ring's pages: they are valid during the callback only
/// (the ring space is returned to the kernel after the batch).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Delivery<'a> {
    /// Which event's ring the record came from: the index of the
    /// [`SamplerBuilder::event`](super::SamplerBuilder::event) call, or `None` for the
    /// sampler's tracking counter (`MMAP2`, `COMM`, `FORK`, `EXIT`).
    pub event: Option<usize>,
    /// The record, decoded with that event's layout.
    pub record: Record<'a>,
    /// The record's bytes as the ring holds them (header first), for writers that
    /// copy records verbatim (perf.data).
    pub raw: &'a [u8],
    /// The process the record is about (`FORK`/`EXIT`/`COMM`: the task's; others: the
    /// sample id's), when known.
    pub pid: Option<u32>,
    /// The thread the record is about, as `pid`; for a per-thread counter without
    /// `TID` in its records, the thread the counter watches.
    pub tid: Option<u32>,
    /// The record's timestamp (`PERF_SAMPLE_TIME`, in the event's clock), when it has one.
    pub time: Option<u64>,
    /// The CPU it was written on (`PERF_SAMPLE_CPU`), when recorded.
    pub cpu: Option<u32>,
}

/// What a ring is: the event it carries and, for a per-thread counter, its thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) event: Option<usize>,
    pub(crate) owner: Option<u32>,
    /// Samples drained from this ring (budgets are per counter).
    pub(crate) samples: u64,
    /// Closed (its thread exited): the token is no longer registered.
    pub(crate) closed: bool,
    /// The registered counter is the event's own (not an anchor): `read` sums it.
    pub(crate) counts: bool,
}

/// Task events the sampler acts on after a drain (it cannot open counters mid-drain).
#[derive(Debug, Default)]
pub(crate) struct TaskQueue {
    /// `(pid, tid)` of threads created (`FORK`).
    pub(crate) forks: Vec<(u32, u32)>,
    /// tids that exited (`EXIT`).
    pub(crate) exits: Vec<u32>,
}

/// Delivers one record at a time: everything a record touches, borrowed from the
/// sampler's fields.
pub(crate) struct Deliverer<'s> {
    pub(crate) slots: &'s mut [Slot],
    pub(crate) events: &'s [EventInfo],
    pub(crate) tracking: Option<&'s EventInfo>,
    pub(crate) threads: &'s mut Threads,
    pub(crate) totals: &'s mut Stats,
    pub(crate) tasks: &'s mut TaskQueue,
}

impl<'s> Deliverer<'s> {
    fn layout(&self, event: Option<usize>) -> Option<&'s Layout> {
        let (events, tracking) = (self.events, self.tracking);
        match event {
            Some(i) => events.get(i).map(|e| &e.layout),
            None => tracking.map(|t| &t.layout),
        }
    }

    /// Decodes and accounts one record of ring `slot` and hands it to `f`.
    pub(crate) fn record(&mut self, slot: usize, bytes: &[u8], f: &mut dyn FnMut(Delivery<'_>)) {
        let Some(&Slot { event, owner, .. }) = self.slots.get(slot) else {
            return;
        };
        let Some(layout) = self.layout(event) else {
            return;
        };
        let record = match Record::parse(bytes, layout) {
            Ok(r) => r,
            Err(_) => {
                self.totals.undecoded += 1;
                if let Some(tid) = owner {
                    self.threads.entry(None, tid).stats.undecoded += 1;
                }
                return;
            }
        };
        let id = record.sample_id();
        let (mut pid, mut tid) = (id.pid(), id.tid().or(owner));
        let mut delta = Stats {
            records: 1,
            ..Stats::default()
        };
        match record.kind() {
            RecordKind::Sample(_) => {
                delta.samples = 1;
                self.slots[slot].samples += 1;
            }
            RecordKind::Lost(l) => delta.lost = l.lost,
            RecordKind::LostSamples(l) => delta.lost_samples = l.lost,
            RecordKind::Throttle(_) => delta.throttled = 1,
            RecordKind::Unthrottle(_) => delta.unthrottled = 1,
            RecordKind::Fork(t) => {
                (pid, tid) = (Some(t.pid), Some(t.tid));
                self.tasks.forks.push((t.pid, t.tid));
            }
            RecordKind::Exit(t) => {
                (pid, tid) = (Some(t.pid), Some(t.tid));
                self.threads.entry(pid, t.tid).exited = true;
                self.tasks.exits.push(t.tid);
            }
            RecordKind::Comm(c) => {
                (pid, tid) = (Some(c.pid), Some(c.tid));
                self.threads.entry(pid, c.tid).set_comm(c.comm);
            }
            _ => {}
        }
        add(self.totals, &delta);
        if let Some(t) = tid {
            add(&mut self.threads.entry(pid, t).stats, &delta);
        }
        f(Delivery {
            event,
            record,
            raw: bytes,
            pid,
            tid,
            time: id.time(),
            cpu: id.cpu(),
        });
    }
}

fn add(to: &mut Stats, d: &Stats) {
    to.records += d.records;
    to.samples += d.samples;
    to.lost += d.lost;
    to.lost_samples += d.lost_samples;
    to.throttled += d.throttled;
    to.unthrottled += d.unthrottled;
    to.undecoded += d.undecoded;
}
