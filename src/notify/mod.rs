//! Every way the kernel tells user space that a counter overflowed.
//!
//! | mode | module | who is told | coalesces? |
//! |---|---|---|---|
//! | `poll`/`epoll` readiness | [`poll`] | any thread waiting in [`Poller::poll`] | yes: one wake-up may cover many samples |
//! | a real-time signal to one thread | [`signal`] | the thread named with `F_SETOWN_EX` (or any thread of a process, [`Owner::Process`]) | one signal per overflow (whatever `wakeup_events` says); lost only if the RT queue (`RLIMIT_SIGPENDING`) is full |
//! | a standard signal (`SIGIO`, `SIGPROF`, ...) | [`signal`] ([`SignalOptions::signal`]) | as above | yes: one pending at a time |
//! | the same signal, read from a `signalfd` | [`signalfd`] | the thread that reads it | as above |
//! | synchronous `SIGTRAP` | [`sigtrap`] | the thread that overflowed, before its next instruction | no |
//!
//! Whatever the mode, **count overflows from the ring, not from notifications**: a
//! wake-up or a signal says "something happened", the ring's `PERF_RECORD_SAMPLE`s say
//! how much. [`Accounting`] keeps both side by side, with what the kernel lost or throttled.
//!
//! Budgets (`PERF_EVENT_IOC_REFRESH`) live in [`budget`]: `N` overflows, then `POLL_HUP`
//! and the counter disables itself.
//!
//! With the cargo feature `tokio`, `tokio::AsyncPoller` drives a [`Poller`] from a
//! tokio runtime, as a `Stream` of notifications.

pub mod budget;
pub mod poll;
mod queue;
mod registry;
pub mod siginfo;
pub mod signal;
pub mod signalfd;
mod signo;
pub mod sigtrap;
#[cfg(feature = "tokio")]
pub mod tokio;

pub use budget::{Budget, Rearm};
pub use poll::{Poller, Waker};
pub use siginfo::SigInfo;
pub use signal::{NotifyQueue, Owner, SignalCounter, SignalOptions, ThreadSignal};
pub use signo::Signal;
pub use sigtrap::{Sigtrap, SigtrapCounter, SigtrapInfo, SigtrapOptions};

use crate::ring::RingStats;

/// The caller's name for a registered counter, handed back with each of its notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Token(pub u64);

/// What the kernel said: more records (`POLL_IN`) or "stopped" (`POLL_HUP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    /// `POLL_IN` / `EPOLLIN`: an overflow (or `wakeup_events` of them) was recorded.
    Overflow,
    /// `POLL_HUP` / `EPOLLHUP`: the `REFRESH` budget ran out (signals) or the watched
    /// task exited (poll); the counter no longer overflows until re-armed.
    Hup,
}

/// One notification, plain data so that a signal handler can build and queue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// The token the counter was registered with (for [`sigtrap`], its `sig_data`).
    pub token: Token,
    /// `POLL_IN` or `POLL_HUP`.
    pub kind: NotifyKind,
    /// The counter's fd (`si_fd` for signals; `-1` for sigtrap, which has none).
    pub fd: i32,
    /// The interrupted instruction pointer (signals and sigtrap; `0` for poll).
    pub ip: u64,
    /// The interrupted stack pointer (signals and sigtrap; `0` for poll and
    /// signalfd), for a frame-pointer walk of the interrupted thread's stack.
    pub sp: u64,
    /// The interrupted frame pointer (`rbp`, `x29`), as `sp`.
    pub fp: u64,
}

/// Notifications received next to overflows recorded: the two differ when the kernel
/// coalesces wake-ups or signals, which it may always do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Notifications received (wake-ups, signals, SIGTRAPs), `Hup`s included.
    pub notifications: u64,
    /// Of which `POLL_HUP`.
    pub hups: u64,
    /// `PERF_RECORD_SAMPLE`s read from the ring: the number of overflows recorded.
    pub samples: u64,
    /// Records read from the ring, any type.
    pub records: u64,
    /// Records the kernel dropped because the ring was full (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Samples dropped (`PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// `PERF_RECORD_THROTTLE`s: the kernel silenced the event for exceeding the
    /// sample rate (`perf_event_max_sample_rate`, `perf_cpu_time_max_percent`).
    pub throttled: u64,
    /// `PERF_RECORD_UNTHROTTLE`s.
    pub unthrottled: u64,
}

impl Accounting {
    /// Notification counts plus a ring's totals.
    pub fn new(notifications: u64, hups: u64, ring: Option<&RingStats>) -> Accounting {
        let mut a = Accounting {
            notifications,
            hups,
            ..Accounting::default()
        };
        if let Some(r) = ring {
            a.samples = r.samples;
            a.records = r.records;
            a.lost = r.lost;
            a.lost_samples = r.lost_samples;
            a.throttled = r.throttled;
            a.unthrottled = r.unthrottled;
        }
        a
    }

    /// Whether anything was lost or throttled, i.e. `samples` undercounts overflows.
    pub fn incomplete(&self) -> bool {
        self.lost > 0 || self.lost_samples > 0 || self.throttled > 0
    }
}
