//! How a sampler is told that records are waiting: the poll driver, a thread signal, or
//! a synchronous `SIGTRAP`. Whatever tells, the same [`Sampler::drain`] reads the rings.
//!
//! [`Sampler::drain`]: super::Sampler::drain

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::counter::Counter;
use crate::notify::signal::Handler;
use crate::notify::sigtrap::TrapHandler;
use crate::notify::{SignalCounter, Sigtrap, SigtrapCounter, ThreadSignal, Token};
use crate::Result;

/// The notification a sampler arms on its counters ([`SamplerBuilder::notify`]).
///
/// With [`Notify::Signal`] or [`Notify::Sigtrap`] the handler runs in signal context
/// (async-signal-safe code only: set a flag, push to a
/// [`NotifyQueue`](crate::notify::NotifyQueue)); the caller's thread then calls
/// [`Sampler::drain`]. The poll driver stays registered either way, so
/// [`Sampler::poll`] also works.
///
/// [`SamplerBuilder::notify`]: super::SamplerBuilder::notify
/// [`Sampler::drain`]: super::Sampler::drain
/// [`Sampler::poll`]: super::Sampler::poll
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Notify {
    /// The poll driver (`epoll`): [`Sampler::poll`](super::Sampler::poll) waits for it.
    #[default]
    Poll,
    /// A real-time signal (`F_SETSIG`, `F_SETOWN_EX`) to thread `tid` (`None`: the
    /// thread that calls [`start`](super::SamplerBuilder::start)) on each wake-up of
    /// each counter, handled by `handler`. For inherited counters the kernel sends the
    /// signals of every inheriting thread to that owner too.
    ///
    /// A signal is not an overflow (count samples from records). With inherited
    /// counters, an overflow in an inheriting thread whose record also wakes the ring
    /// (the event's `wakeup_events` reached, or its watermark) gives **two** signals:
    /// one for the overflow, raised on the inherited copy and sent to its parent's
    /// owner, and one for the ring wake-up, raised on the parent (which owns the
    /// output of all its copies); the kernel may coalesce the second. Measured on
    /// 6.18: 4 threads, 400 samples, `wakeup_events(1)` gave 684 signals with per-CPU
    /// rings (800 with one inherited counter per root and its ring); `wakeup_events(0)`
    /// gave 399 (400), one per sample. A non-inherited counter (per-thread mode,
    /// [`exact_periods`](super::SamplerBuilder::exact_periods), CPUs, the root's own
    /// overflows) is one event, so one signal.
    /// For one signal per overflow, leave `wakeup_events` at 0 with this notification.
    Signal {
        /// The installed signal ([`ThreadSignal::builder`]).
        signal: ThreadSignal,
        /// The thread of this process the signals go to.
        tid: Option<libc::pid_t>,
        /// What the handler does with each signal.
        handler: Handler,
    },
    /// A synchronous `SIGTRAP` in the thread that overflowed, handled by `handler`:
    /// for sampling this very process (a [`Target::Pid`](super::Target::Pid) or
    /// [`Target::Tid`](super::Target::Tid) of its own). Each counter gets its own
    /// `sig_data` ([`SigtrapInfo::token`](crate::notify::SigtrapInfo::token));
    /// [`Sampler::event_of`](super::Sampler::event_of) maps it back to the event.
    /// Inherited counters get `inherit_thread`, so only threads carry them.
    Sigtrap {
        /// The installed handler ([`Sigtrap::install`]).
        trap: Sigtrap,
        /// What the handler does with each `SIGTRAP`.
        handler: TrapHandler,
    },
}

/// `sig_data` of the sampler's sigtrap counters: unique in the process, away from
/// small numbers a caller may use for its own counters.
static NEXT_SIG_DATA: AtomicU64 = AtomicU64::new(0x5a4d_0000_0000_0000);

/// A fresh `sig_data`.
pub(crate) fn next_sig_data() -> u64 {
    NEXT_SIG_DATA.fetch_add(1, Ordering::Relaxed)
}

/// The signal-side registrations of a sampler's counters.
#[derive(Debug, Default)]
pub(crate) struct Armed {
    pub(crate) signals: Vec<SignalCounter>,
    pub(crate) traps: Vec<SigtrapCounter>,
}

impl Armed {
    /// Routes `counter`'s notifications as `notify` says, through a duplicate of its fd
    /// (the registration owns that; `F_SETOWN_EX`, `O_ASYNC` and the event itself are
    /// shared with the original, which the poll driver keeps).
    pub(crate) fn arm(&mut self, notify: &Notify, counter: &Counter, token: Token) -> Result<()> {
        match notify {
            Notify::Poll => Ok(()),
            Notify::Signal {
                signal,
                tid,
                handler,
            } => {
                let dup = duplicate(counter)?;
                let tid = match tid {
                    Some(t) => *t,
                    None => current_tid()?,
                };
                self.signals
                    .push(signal.attach_to(dup, token, tid, handler.clone())?);
                Ok(())
            }
            Notify::Sigtrap { trap, handler } => {
                let dup = duplicate(counter)?;
                self.traps.push(trap.attach(dup, handler.clone())?);
                Ok(())
            }
        }
    }

    /// Signals (or `SIGTRAP`s) handled for this sampler's counters so far.
    pub(crate) fn notifications(&self) -> u64 {
        self.signals
            .iter()
            .map(SignalCounter::notifications)
            .chain(self.traps.iter().map(SigtrapCounter::notifications))
            .sum()
    }
}

/// The calling thread's id, from `/proc/thread-self` (`PID/task/TID`), without unsafe.
fn current_tid() -> Result<libc::pid_t> {
    let link = std::fs::read_link("/proc/thread-self")
        .map_err(|e| crate::Error::from_errno("readlink(/proc/thread-self)", e))?;
    link.file_name()
        .and_then(|n| n.to_str()?.parse().ok())
        .ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::Io,
                "readlink(/proc/thread-self)",
                format!("unexpected link {}", link.display()),
            )
        })
}

fn duplicate(counter: &Counter) -> Result<Counter> {
    let fd = counter
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| crate::Error::from_errno(format!("dup({} fd)", counter.event().name()), e))?;
    Ok(Counter::from_parts(
        fd,
        counter.event().clone(),
        *counter.attr(),
        counter.target(),
    ))
}
