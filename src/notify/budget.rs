//! Overflow budgets: `PERF_EVENT_IOC_REFRESH(n)` allows `n` overflows, then the
//! counter reports `POLL_HUP` and disables itself; re-arming it again is not always
//! honoured, so [`Budget`] can reopen the counter instead.
//!
//! Facts measured on Linux 6.18 (see `tests/refresh.rs`):
//! - `page-faults` (and other software events): a second `REFRESH(n)` after the budget
//!   ran out gives exactly `n` more overflows.
//! - Execute and write breakpoints: once the budget ran out, a second `REFRESH`,
//!   `ENABLE`, `DISABLE`+`ENABLE` and even `MODIFY_ATTRIBUTES` with the same attr all
//!   return 0 and change nothing: the breakpoint never fires again. A fresh
//!   `perf_event_open` with the same attr works.
//! - `REFRESH` on an inherited counter is `EINVAL` ([`ErrorKind::Inherited`]).
//! - Kernels 6.16 and 6.17 were seen to hang with `REFRESH` on `cpu-clock`; use
//!   [`Counter::enable`]/[`Counter::disable`] there and count samples yourself.
//!
//! [`ErrorKind::Inherited`]: crate::ErrorKind::Inherited

use crate::counter::{Builder, Counter};
use crate::{sys, Error, ErrorKind, Result};

/// How [`Budget::rearm`] gives a spent counter a new budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rearm {
    /// `REFRESH(n)` on the same fd.
    Refresh,
    /// Close the counter and open a new one from the same builder, then `REFRESH(n)`.
    Reopen,
    /// [`Reopen`](Self::Reopen) for breakpoints (whose refresh the kernel ignores once
    /// spent), [`Refresh`](Self::Refresh) for everything else.
    #[default]
    Auto,
}

/// A counter allowed `n` overflows at a time.
///
/// Each overflow but the last is notified as `POLL_IN`, the last as `POLL_HUP`
/// ([`NotifyKind::Hup`](super::NotifyKind::Hup), for signal modes; poll does not see
/// it), after which the counter is disabled until [`rearm`](Self::rearm)ed.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, Event, notify::Budget};
/// # fn f() {}
/// let budget = Budget::new(Counter::builder_for(Event::breakpoint(perfring::event::Access::Execute, f as usize as u64, 8)).period(100), 5);
/// let mut counter = budget.open()?;
/// budget.arm(&counter)?;
/// // ... 5 overflows later the counter is disabled ...
/// let reopened = budget.rearm(&mut counter)?;
/// // if `reopened`, map a new ring and register the counter again: its fd changed.
/// # Ok::<(), perfring::Error>(())
/// ```
///
/// A budget is a builder and a number: dropping one (in a forked child too) touches no
/// counter; the kernel's remaining overflows belong to the event, which a child's
/// closing its copy of the fd leaves as it was.
#[derive(Debug, Clone)]
pub struct Budget {
    builder: Builder,
    n: u32,
    policy: Rearm,
}

impl Budget {
    /// `n` overflows per arming of counters built by `builder` (opened disabled).
    ///
    /// # Panics
    /// Never; `n == 0` is accepted and means "disable at the next overflow" to the kernel
    /// (`REFRESH(0)` is `EINVAL`, reported by [`arm`](Self::arm)).
    pub fn new(builder: Builder, n: u32) -> Budget {
        Budget {
            builder: builder.enabled(false),
            n,
            policy: Rearm::Auto,
        }
    }

    /// Chooses how [`rearm`](Self::rearm) works (default [`Rearm::Auto`]).
    pub fn policy(mut self, policy: Rearm) -> Budget {
        self.policy = policy;
        self
    }

    /// The budget per arming.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The builder counters are opened from.
    pub fn builder(&self) -> &Builder {
        &self.builder
    }

    /// Opens a counter (disabled, not armed).
    ///
    /// # Errors
    /// As [`Builder::open`]; [`ErrorKind::Inherited`] for an inherited builder, since
    /// the kernel refuses `REFRESH` on those.
    pub fn open(&self) -> Result<Counter> {
        if self.builder.attr().inherit() != 0 {
            return Err(Error::new(
                ErrorKind::Inherited,
                format!("Budget::open({})", self.builder.event().name()),
                "REFRESH budgets are not allowed on inherited counters (EINVAL)",
            )
            .with_fix("drop .inherit(true), or use enable()/disable() and count samples"));
        }
        self.builder.open()
    }

    /// `REFRESH(n)`: enables the counter for `n` overflows.
    pub fn arm(&self, counter: &Counter) -> Result<()> {
        counter.refresh(self.n)
    }

    /// Whether [`rearm`](Self::rearm) will reopen `counter` rather than refresh it.
    pub fn reopens(&self) -> bool {
        match self.policy {
            Rearm::Refresh => false,
            Rearm::Reopen => true,
            Rearm::Auto => self.builder.attr().type_ == sys::PERF_TYPE_BREAKPOINT,
        }
    }

    /// Gives `counter` a new budget of `n` and enables it. Returns `true` when the
    /// counter was reopened: its fd changed, so map a new ring and register it again
    /// (the old fd is closed when the old counter is dropped, here).
    ///
    /// # Errors
    /// As [`Builder::open`] and [`Counter::refresh`]. On a reopen failure `counter` is
    /// left as it was (spent).
    pub fn rearm(&self, counter: &mut Counter) -> Result<bool> {
        if self.reopens() {
            let fresh = self.builder.open()?;
            fresh.refresh(self.n)?;
            let old = std::mem::replace(counter, fresh);
            drop(old);
            Ok(true)
        } else {
            counter.refresh(self.n)?;
            Ok(false)
        }
    }
}
