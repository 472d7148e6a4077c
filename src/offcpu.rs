//! Off-CPU time: where each thread blocks, and for how long.
//!
//! The kernel counts a `context-switches` software event each time a thread leaves a
//! CPU; sampled at every switch (period 1) with a callchain, each sample holds the
//! stack where the thread gave up the CPU. The same counter with
//! `attr.context_switch` set writes a `PERF_RECORD_SWITCH` when a thread leaves a
//! CPU and when it comes back, each stamped with the time. The time between the two
//! is the time the sample's stack spent off the CPU: its weight, in nanoseconds, the
//! unit of a `cpu-clock` or `task-clock` period. A profile with both shows on-CPU and
//! waiting time side by side, with the same frames.
//!
//! Only a thread that *blocks* (sleeps, waits for I/O or a lock) is counted: a switch
//! the kernel marks preempted (`PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`: the thread was
//! still runnable) is time lost to other work on a busy machine, not time the program
//! waited, and is left out. A thread that exits while switched out is dropped.
//!
//! The samples are taken in kernel mode (in `schedule()`), so the counter cannot
//! exclude the kernel: at `perf_event_paranoid` 2 an unprivileged user gets no
//! samples from it ([`check_allowed`] says so before a recording starts).
//!
//! [`Blocked`] is the bookkeeping the [`Pipeline`](crate::pipeline::Pipeline) does: it
//! holds each thread's switch-out sample until its switch-in, then hands it on with
//! its weight.

use std::collections::HashMap;

use crate::counter::Builder;
use crate::error::{Error, ErrorKind, Result};
use crate::sys;

/// The event an off-CPU profile samples (perf's name for it).
pub const EVENT: &str = "context-switches";

/// The frame every output puts after the innermost frame of an off-CPU sample, so
/// that waiting time can be told from running time under the same caller.
pub const MARKER: &str = "[off-cpu]";

/// Whether `attr` describes an off-CPU counter: `context-switches` that also reports
/// the switches (`context_switch`), as [`configure`] makes it.
pub fn is_off_cpu(attr: &sys::perf_event_attr) -> bool {
    attr.type_ == sys::PERF_TYPE_SOFTWARE
        && attr.config == u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES)
        && attr.context_switch() != 0
}

/// `builder` (a `context-switches` counter) made an off-CPU one: a sample at every
/// switch and the switch records that time it.
pub fn configure(mut builder: Builder) -> Builder {
    builder.attr_mut().set_context_switch(1);
    builder.period(1)
}

/// Checks that this process may sample context switches with the kernel included (the
/// switch happens in the kernel: a counter that excludes it never samples).
///
/// # Errors
/// [`ErrorKind::PermissionDenied`] with the fix (`perf_event_paranoid` at most 1, or
/// `CAP_PERFMON`), or the error of opening the counter.
pub fn check_allowed() -> Result<()> {
    match crate::Counter::builder(EVENT).and_then(|b| b.period(1).open()) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied) => Err(Error::new(
            ErrorKind::PermissionDenied,
            "sample where threads block (--off-cpu)",
            "a thread leaves the CPU inside the kernel (schedule()), and this user may not \
             sample the kernel: a context-switches counter that excludes it is never sampled",
        )
        .with_fix(
            "lower the limit (sysctl kernel.perf_event_paranoid=1) or give the recorder \
             CAP_PERFMON; an on-CPU profile (without --off-cpu) needs neither",
        )),
        Err(e) => Err(e),
    }
}

/// A thread's switch-out sample, waiting for the thread to come back.
#[derive(Debug)]
struct Held {
    event: u32,
    time: u64,
    bytes: Vec<u8>,
}

/// One off-CPU sample, complete: the event, the sample's bytes, and how long its
/// thread was off the CPU.
#[derive(Debug)]
pub(crate) struct Released {
    pub event: u32,
    pub weight: u64,
    pub bytes: Vec<u8>,
}

/// Each blocked thread's switch-out sample, until the thread runs again.
#[derive(Debug, Default)]
pub(crate) struct Blocked {
    held: HashMap<u32, Held>,
    /// Buffers of released samples, reused.
    spare: Vec<Vec<u8>>,
}

impl Blocked {
    /// Thread `tid` was sampled leaving the CPU at `time`.
    pub fn hold(&mut self, tid: u32, event: u32, time: u64, bytes: &[u8]) {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        if let Some(old) = self.held.insert(
            tid,
            Held {
                event,
                time,
                bytes: buf,
            },
        ) {
            self.spare.push(old.bytes);
        }
    }

    /// Thread `tid` left the CPU; `preempted`: still runnable (not counted).
    pub fn switched_out(&mut self, tid: u32, preempted: bool) {
        if preempted {
            self.forget(tid);
        }
    }

    /// Thread `tid` exited: it will not come back.
    pub fn forget(&mut self, tid: u32) {
        if let Some(h) = self.held.remove(&tid) {
            self.spare.push(h.bytes);
        }
    }

    /// Thread `tid` is back on a CPU at `time`: its sample, weighted.
    pub fn switched_in(&mut self, tid: u32, time: u64) -> Option<Released> {
        let h = self.held.remove(&tid)?;
        Some(Released {
            event: h.event,
            weight: time.saturating_sub(h.time),
            bytes: h.bytes,
        })
    }

    /// Gives a released sample's buffer back for reuse.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        self.spare.push(bytes);
    }

    /// Every thread still off the CPU at `now` (the recording's end), weighted up to
    /// it, oldest first.
    pub fn release_all(&mut self, now: u64) -> Vec<Released> {
        let mut out: Vec<Released> = self
            .held
            .drain()
            .map(|(_, h)| Released {
                event: h.event,
                weight: now.saturating_sub(h.time),
                bytes: h.bytes,
            })
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.weight));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_thread_is_weighted_by_its_time_away_and_a_preempted_one_not_at_all() {
        let mut b = Blocked::default();
        b.hold(7, 1, 1_000, b"sample7");
        b.switched_out(7, false);
        b.hold(8, 1, 2_000, b"sample8");
        b.switched_out(8, true);
        assert!(b.switched_in(8, 9_000).is_none(), "preempted: not waiting");
        let r = b.switched_in(7, 31_000).unwrap();
        assert_eq!(
            (r.event, r.weight, &r.bytes[..]),
            (1, 30_000, &b"sample7"[..])
        );
        assert!(b.switched_in(7, 40_000).is_none(), "released once");
        b.hold(9, 0, 100, b"x");
        b.forget(9);
        assert!(
            b.release_all(1_000).is_empty(),
            "an exited thread is dropped"
        );
        b.hold(10, 0, 100, b"y");
        let left = b.release_all(600);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].weight, 500);
    }

    #[test]
    fn configure_makes_what_is_off_cpu_recognizes() {
        let b = configure(crate::Counter::builder(EVENT).unwrap());
        assert!(is_off_cpu(b.attr()));
        assert_eq!(crate::counter::sample_period(b.attr()), 1);
        assert!(!is_off_cpu(crate::Counter::builder(EVENT).unwrap().attr()));
        assert!(!is_off_cpu(
            crate::Counter::builder("cpu-clock").unwrap().attr()
        ));
    }
}
