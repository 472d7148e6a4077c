//! Synchronous `SIGTRAP` on overflow, to the thread that overflowed (Linux 5.13).
//!
//! A counter built with [`Builder::sigtrap(sig_data)`](crate::Builder::sigtrap) makes
//! the kernel send `SIGTRAP` with `si_code == TRAP_PERF`, `si_perf_data == sig_data`,
//! `si_perf_type` (see [`SigtrapInfo::perf_type`]) and `si_addr` (a watchpoint's
//! address) to the overflowing thread before it runs another user instruction. With `inherit` and
//! `inherit_thread` one counter opened before spawning covers every thread, and each
//! thread's overflow interrupts that thread — the only per-thread delivery across a
//! process with one fd (PITFALLS 6). `remove_on_exec` (set by the builder) keeps an
//! exec'd program from dying of a signal it never asked for (PITFALLS 7).
//!
//! SIGTRAP is a standard signal: two `TRAP_PERF`s raised by one instruction (two
//! counters overflowing on the same access) coalesce into one delivery — give counters
//! that must be told apart different instructions, or count from their rings.
//!
//! The handler dispatches on `si_perf_data` through a growable lock-free registry
//! (≥ 10,000 counters, O(1) lookup; `registry.rs`); any other
//! `SIGTRAP` (`si_code != TRAP_PERF`: a debugger's breakpoint, `kill`) goes to the
//! previous handler, or, if that was `SIG_DFL`, is re-raised with the default action.
//!
//! # Safety
//! `on_sigtrap` only touches atomics, calls the registered callback (async-signal
//! safe by contract), the previous handler, `sigaction` and `raise` (both
//! async-signal-safe, POSIX), and saves/restores `errno`. Slots outlive every handler
//! inside them (`registry.rs`).
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use super::budget::Budget;
use super::queue::NotifyQueue;
use super::registry::Registry;
use super::siginfo::{interrupted_ip, interrupted_sp_fp, ErrnoGuard, SigInfo};
use super::signal::{call_previous, install_handler, HandlerFlags};
use super::{Accounting, Notification, NotifyKind, Token};
use crate::counter::Counter;
use crate::ring::RingStats;
use crate::{sys, Error, ErrorKind, Result};

/// What a `TRAP_PERF` signal says, plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigtrapInfo {
    /// `si_perf_data`: the counter's `sig_data`.
    pub token: Token,
    /// `si_perf_type`: the `attr.type` of the kernel event that overflowed, which is
    /// **not always the type the counter was opened with**. The kernel reports the
    /// opened event's original type, but an inherited copy is made from the event's
    /// attr *after* the kernel resolved it, and `cpu-clock` and `task-clock` resolve to
    /// PMUs of their own with dynamic type ids listed nowhere in sysfs: for
    /// `task-clock` (type 1) the threads that inherited it report 7 here, for
    /// `cpu-clock` 6 (Linux 6.18; a plain C program shows the same). Which copy
    /// overflows in which thread can also move: unless a context holds an inherited
    /// event with `PERF_SAMPLE_READ` (Linux 6.12+), the kernel swaps two threads'
    /// inherited copies at a context switch, and the opening thread then traps with
    /// its sibling's copy (measured: the opening thread saw 1 and 7, the other thread
    /// 1 and 7). Breakpoints, tracepoints and hardware events keep their type. Tell
    /// counters apart by `sig_data` ([`token`](Self::token)), never by this.
    pub perf_type: u32,
    /// `si_addr`: for breakpoints, the watched address.
    pub addr: u64,
    /// The interrupted instruction pointer (just after the overflowing instruction,
    /// for a write watchpoint; the breakpointed instruction for an execute one).
    pub ip: u64,
    /// `si_perf_flags` (`TRAP_PERF_FLAG_ASYNC` if SIGTRAP was blocked at the time).
    pub flags: u32,
    /// The interrupted stack pointer, for a frame-pointer walk (0 if unknown).
    pub sp: u64,
    /// The interrupted frame pointer (`rbp`/`x29`; 0 if unknown).
    pub fp: u64,
}

/// A callback run **in signal context** on the overflowing thread. Async-signal-safe
/// only: no allocation, locks or panics.
pub type TrapCallback = fn(&SigtrapInfo, usize);

/// What the SIGTRAP handler does with a `TRAP_PERF`, besides counting it.
#[derive(Debug, Clone)]
pub enum TrapHandler {
    /// Only count it.
    Count,
    /// Call `fn(&SigtrapInfo, data)` in signal context.
    Callback(TrapCallback, usize),
    /// Push a [`Notification`] (`fd == -1`) to a queue a normal thread pops.
    Queue(Arc<NotifyQueue>),
}

static REGISTRY: Registry = Registry::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
static PREV_ACTION: AtomicUsize = AtomicUsize::new(0);
static PREV_FLAGS: AtomicI32 = AtomicI32::new(0);
/// The `sa_flags` our handler was installed with ([`HandlerFlags::bits`]).
static FLAGS: AtomicI32 = AtomicI32::new(HandlerFlags::DEFAULT.bits());
static INSTALL: Mutex<()> = Mutex::new(());
/// Tag stored in the callback word for [`TrapHandler::Queue`] slots.
const QUEUE_TAG: usize = 1;

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SIGNAL CONTEXT. May call: atomics, the registered `TrapCallback` (async-signal
    // safe by contract), `NotifyQueue::push`, the previous handler, `sigaction`,
    // `raise`. Never allocates, locks, panics or decodes records.
    let _errno = ErrnoGuard::save();
    if info.is_null() {
        return;
    }
    // SAFETY: SA_SIGINFO handlers receive a valid siginfo for the call's duration.
    let si = unsafe { SigInfo::from_ptr(info) };
    if si.code() != sys::TRAP_PERF as i32 {
        let prev = PREV_ACTION.load(SeqCst);
        if prev == libc::SIG_DFL {
            // Someone else's SIGTRAP with nobody to take it: what would have happened
            // without us. It is delivered once this handler returns (SIGTRAP is masked).
            // SAFETY: zeroed sigaction = SIG_DFL with an empty mask; sigaction and
            // raise are async-signal-safe.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut()) };
            // SAFETY: as above.
            unsafe { libc::raise(libc::SIGTRAP) };
        } else {
            // SAFETY: as the kernel passed them; prev_* came from sigaction(2).
            unsafe { call_previous(sig, info, ctx, prev, PREV_FLAGS.load(SeqCst)) };
        }
        return;
    }
    // SAFETY: `ctx` is the handler's third argument.
    unsafe { route_trap(&si, ctx) };
}

/// Routes a `TRAP_PERF` siginfo to its registration: `false` if none has its
/// `si_perf_data` (counted as stray). Async-signal-safe (see `on_sigtrap`).
///
/// # Safety
/// `ctx` is null or the `ucontext` a `SA_SIGINFO` handler received with `si`.
unsafe fn route_trap(si: &SigInfo<'_>, ctx: *mut libc::c_void) -> bool {
    let Some(e) = REGISTRY.enter(si.perf_data()) else {
        // An unregistered (or just unregistered) counter: ignore, never die of it.
        REGISTRY.stray.fetch_add(1, SeqCst);
        return false;
    };
    e.slot.hits.fetch_add(1, SeqCst);
    let cb = e.slot.callback.load(SeqCst);
    if cb == 0 {
        return true;
    }
    // SAFETY: `ctx` is the handler's third argument.
    let (sp, fp) = unsafe { interrupted_sp_fp(ctx) };
    let t = SigtrapInfo {
        sp,
        fp,
        token: Token(si.perf_data()),
        perf_type: si.perf_type(),
        addr: si.addr(),
        // SAFETY: `ctx` is null or the handler's third argument (caller's contract).
        ip: unsafe { interrupted_ip(ctx) },
        flags: si.perf_flags(),
    };
    let data = e.slot.data.load(SeqCst);
    if cb == QUEUE_TAG {
        // SAFETY: `data` is `Arc::as_ptr` of the queue the SigtrapCounter keeps alive
        // until its slot is retired; we are inside the live slot.
        let q = unsafe { &*(data as *const NotifyQueue) };
        q.push(Notification {
            token: t.token,
            kind: NotifyKind::Overflow,
            fd: -1,
            ip: t.ip,
            sp: t.sp,
            fp: t.fp,
        });
    } else {
        // SAFETY: `callback` only ever holds a `TrapCallback` stored by `attach`.
        let f: TrapCallback = unsafe { std::mem::transmute::<usize, TrapCallback>(cb) };
        f(&t, data);
    }
    true
}

/// The installed process-wide SIGTRAP handler: attach `sigtrap` counters to it.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, Event, notify::{Sigtrap, sigtrap::TrapHandler}};
/// static X: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// let trap = Sigtrap::install()?;
/// let counter = Counter::builder_for(Event::breakpoint(perfring::event::Access::Write, &X as *const _ as u64, 8))
///     .period(1)
///     .sigtrap(42)
///     .inherit(true)
///     .inherit_thread(true)
///     .open()?;
/// let counter = trap.attach(counter, TrapHandler::Count)?;
/// counter.counter().enable()?;
/// X.store(1, std::sync::atomic::Ordering::SeqCst); // SIGTRAP here, on this thread
/// assert_eq!(counter.notifications(), 1);
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sigtrap(());

impl Sigtrap {
    /// Installs the SIGTRAP handler once per process (later calls return the handle,
    /// leaving its flags as they are), with the default flags of [`Sigtrap::builder`].
    /// The previous handler is kept and gets every SIGTRAP that is not `TRAP_PERF`.
    ///
    /// # Errors
    /// [`ErrorKind::Signal`] if `sigaction` fails.
    pub fn install() -> Result<Sigtrap> {
        Sigtrap::install_flags(None)
    }

    /// Options for [`SigtrapOptions::install`]: `SA_NODEFER`, `SA_ONSTACK`,
    /// `SA_RESTART`.
    ///
    /// # Examples
    /// ```no_run
    /// use perfring::notify::Sigtrap;
    /// // A trap raised inside the handler (in code its callback calls) is delivered
    /// // there, nested, as the kernel's own sigtrap tests install it.
    /// let trap = Sigtrap::builder().nodefer(true).install()?;
    /// assert!(trap.nodefer());
    /// # Ok::<(), perfring::Error>(())
    /// ```
    pub fn builder() -> SigtrapOptions {
        SigtrapOptions {
            flags: HandlerFlags::DEFAULT,
        }
    }

    /// Installs the handler as `options` say: once per process; a later call with
    /// other flags installs it again with those (for every user: there is one SIGTRAP
    /// handler).
    ///
    /// # Errors
    /// [`ErrorKind::Signal`] if `sigaction` fails.
    pub fn install_with(options: SigtrapOptions) -> Result<Sigtrap> {
        Sigtrap::install_flags(Some(options.flags))
    }

    /// Installs the handler once; `Some(flags)` also changes an installed one's flags.
    fn install_flags(wanted: Option<HandlerFlags>) -> Result<Sigtrap> {
        let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
        let flags = wanted.unwrap_or(HandlerFlags::from_bits(FLAGS.load(SeqCst)));
        let addr = on_sigtrap as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        if INSTALLED.load(SeqCst) && FLAGS.load(SeqCst) != flags.bits() {
            install_handler(libc::SIGTRAP, addr, flags)?;
            FLAGS.store(flags.bits(), SeqCst);
        }
        if !INSTALLED.load(SeqCst) {
            // Record the previous action before ours can run.
            // SAFETY: zeroed sigaction is valid for the kernel to overwrite.
            let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: null new action: only reads the current one.
            unsafe { libc::sigaction(libc::SIGTRAP, std::ptr::null(), &mut cur) };
            PREV_ACTION.store(cur.sa_sigaction, SeqCst);
            PREV_FLAGS.store(cur.sa_flags, SeqCst);
            install_handler(libc::SIGTRAP, addr, flags)?;
            FLAGS.store(flags.bits(), SeqCst);
            INSTALLED.store(true, SeqCst);
        }
        Ok(Sigtrap(()))
    }

    /// Whether the handler is installed with `SA_NODEFER`.
    pub fn nodefer(&self) -> bool {
        HandlerFlags::from_bits(FLAGS.load(SeqCst)).nodefer
    }

    /// Whether the handler is installed with `SA_ONSTACK`.
    pub fn onstack(&self) -> bool {
        HandlerFlags::from_bits(FLAGS.load(SeqCst)).onstack
    }

    /// Whether the handler is installed with `SA_RESTART`.
    pub fn restarts(&self) -> bool {
        HandlerFlags::from_bits(FLAGS.load(SeqCst)).restart
    }

    /// The handler that every `SIGTRAP` which is not `TRAP_PERF` is passed to:
    /// `(sa_sigaction, sa_flags)` as `sigaction(2)` reported them (`SIG_DFL` re-raises
    /// with the default action, `SIG_IGN` drops it).
    pub fn chained() -> (usize, i32) {
        (PREV_ACTION.load(SeqCst), PREV_FLAGS.load(SeqCst))
    }

    /// Replaces the handler that non-`TRAP_PERF` `SIGTRAP`s go to, keeping perfring's
    /// installed. An interposed `sigaction` uses this so that a program installing its
    /// own `SIGTRAP` handler after perfring still receives its own traps.
    ///
    /// # Safety
    /// `action` is `SIG_DFL`, `SIG_IGN` or a function that stays loaded, with the
    /// signature `flags` implies (`SA_SIGINFO`: `fn(int, siginfo_t *, void *)`, else
    /// `fn(int)`); it is called in signal context.
    pub unsafe fn chain_to(action: usize, flags: i32) {
        // A handler running between the two stores may pair one old and one new value:
        // order them so that it then calls a function with at least the arguments it
        // takes (an extra argument is harmless in the C calling convention).
        if flags & libc::SA_SIGINFO != 0 {
            PREV_FLAGS.store(flags, SeqCst);
            PREV_ACTION.store(action, SeqCst);
        } else {
            PREV_ACTION.store(action, SeqCst);
            PREV_FLAGS.store(flags, SeqCst);
        }
    }

    /// `TRAP_PERF` signals whose `si_perf_data` matched no attached counter.
    pub fn stray() -> u64 {
        REGISTRY.stray.load(SeqCst)
    }

    /// Routes a `TRAP_PERF` siginfo obtained outside the handler — e.g. with
    /// `sigtimedwait` by a thread that blocks `SIGTRAP` (the kernel then flags it
    /// `TRAP_PERF_FLAG_ASYNC`) — exactly as the handler does: counts it and runs the
    /// registration's callback or queue, in the calling context (the interrupted `ip`
    /// is unknown: 0). Returns `false`, doing nothing else, for a siginfo that is not
    /// `TRAP_PERF` or whose `si_perf_data` is attached to no counter (counted as stray).
    pub fn dispatch(&self, info: &libc::siginfo_t) -> bool {
        // SAFETY: `info` is a live, initialised siginfo for the call (a reference).
        let si = unsafe { SigInfo::from_ptr(info) };
        if si.code() != sys::TRAP_PERF as i32 {
            return false;
        }
        // SAFETY: a null `ctx` is allowed (no interrupted context).
        unsafe { route_trap(&si, std::ptr::null_mut()) }
    }

    /// Registry keys (`sig_data`s) live right now, old keys kept by
    /// [`SigtrapCounter::set_sig_data`] included.
    pub fn registered() -> usize {
        REGISTRY.live()
    }

    /// Routes `counter`'s SIGTRAPs (keyed by its `sig_data`) to `handler`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] if the counter was not built with `.sigtrap(..)`;
    /// [`ErrorKind::Busy`] if its `sig_data` is taken or the registry is full.
    pub fn attach(&self, counter: Counter, handler: TrapHandler) -> Result<SigtrapCounter> {
        let attr = counter.attr();
        let op = || format!("Sigtrap::attach({})", counter.event().name());
        if attr.sigtrap() == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                op(),
                "the counter was not built with .sigtrap(sig_data)",
            )
            .with_fix("build it with Builder::sigtrap(sig_data)"));
        }
        let key = attr.sig_data;
        let (cb, data, queue) = match handler {
            TrapHandler::Count => (0, 0, None),
            TrapHandler::Callback(f, d) => (f as usize, d, None),
            TrapHandler::Queue(q) => (QUEUE_TAG, Arc::as_ptr(&q) as usize, Some(q)),
        };
        let slot = REGISTRY
            .claim(key, key, cb, data)
            .map_err(|()| {
                Error::new(
                    ErrorKind::Busy,
                    op(),
                    format!("sig_data {key:#x} is already attached"),
                )
                .with_fix("give each sigtrap counter its own sig_data")
            })?
            .ok_or_else(|| {
                Error::new(ErrorKind::Busy, op(), "the sigtrap registry is full")
                    .with_fix("drop counters you no longer need")
            })?;
        Ok(SigtrapCounter {
            counter,
            slot,
            key,
            old_keys: Vec::new(),
            released_hits: 0,
            _queue: queue,
            live: true,
            pid: std::process::id(),
        })
    }
}

/// How [`Sigtrap::install_with`] installs the handler; from [`Sigtrap::builder`].
/// Default: `SA_SIGINFO | SA_ONSTACK | SA_RESTART`, `SIGTRAP` blocked while the handler
/// runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigtrapOptions {
    flags: HandlerFlags,
}

impl SigtrapOptions {
    /// `SA_NODEFER` (default `false`): `SIGTRAP` is not blocked while the handler runs,
    /// so an overflow in code the callback calls traps there, nested, instead of
    /// pending until the handler returns (where a second `TRAP_PERF` would coalesce
    /// with it). The handler is re-entrant (atomics only); a callback must be too, and
    /// must not recurse without bound (a trap per call it makes).
    ///
    /// Nested frames need stack: with [`onstack`](Self::onstack) they pile up on the
    /// thread's alternate stack, and the one Rust's std gives each thread (for its
    /// stack overflow message) is a few KiB — two nested frames overflowed it
    /// (`SIGSEGV`). Use `onstack(false)` with `nodefer(true)`, or a larger
    /// `sigaltstack` of your own.
    pub fn nodefer(mut self, yes: bool) -> Self {
        self.flags.nodefer = yes;
        self
    }

    /// `SA_ONSTACK` (default `true`): the handler runs on the thread's alternate
    /// signal stack (`sigaltstack`) when it has one.
    pub fn onstack(mut self, yes: bool) -> Self {
        self.flags.onstack = yes;
        self
    }

    /// `SA_RESTART` (default `true`): a blocking call a trap interrupts is restarted.
    pub fn restart(mut self, yes: bool) -> Self {
        self.flags.restart = yes;
        self
    }

    /// [`Sigtrap::install_with`] these options.
    ///
    /// # Errors
    /// As [`Sigtrap::install_with`].
    pub fn install(self) -> Result<Sigtrap> {
        Sigtrap::install_with(self)
    }
}

/// A sigtrap counter attached to the handler. Dropping it disables the counter,
/// retires its slot (waiting for handlers inside it) and then closes the fd; a SIGTRAP
/// already on its way is then ignored as stray.
///
/// # After `fork`
/// A child shares the counter (one kernel event) with the parent: disabling it there
/// would silence the parent. Dropped in any process but the one that attached it, a
/// `SigtrapCounter` only closes its fd.
pub struct SigtrapCounter {
    counter: Counter,
    slot: u32,
    key: u64,
    /// `(sig_data, slot)` of keys replaced by `set_sig_data`, still routed here.
    old_keys: Vec<(u64, u32)>,
    /// Hits of old keys already released.
    released_hits: u64,
    _queue: Option<Arc<NotifyQueue>>,
    live: bool,
    /// The process that attached it: teardown acts only there (see the type docs).
    pid: u32,
}

impl std::fmt::Debug for SigtrapCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigtrapCounter")
            .field("counter", &self.counter)
            .field("sig_data", &self.key)
            .field("notifications", &self.notifications())
            .finish()
    }
}

impl SigtrapCounter {
    /// The counter.
    pub fn counter(&self) -> &Counter {
        &self.counter
    }

    /// Its `sig_data`.
    pub fn sig_data(&self) -> u64 {
        self.key
    }

    /// SIGTRAPs received for it, on every thread, under its current and old `sig_data`s.
    pub fn notifications(&self) -> u64 {
        self.old_keys
            .iter()
            .map(|&(_, s)| REGISTRY.slot(s).hits.load(SeqCst))
            .sum::<u64>()
            + self.released_hits
            + REGISTRY.slot(self.slot).hits.load(SeqCst)
    }

    /// `sig_data`s this counter had before [`set_sig_data`](Self::set_sig_data), still
    /// routed to it until [`release_old_sig_data`](Self::release_old_sig_data) or drop.
    pub fn old_sig_data(&self) -> impl Iterator<Item = u64> + '_ {
        self.old_keys.iter().map(|&(k, _)| k)
    }

    /// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` while attached (breakpoints only, Linux 4.17;
    /// a new `sig_data` needs Linux 5.13). A changed `attr.sig_data` re-keys the
    /// registration; everything else (address, length, type, `disabled`) is the kernel's.
    /// Note that the kernel sets the breakpoint's state from `attr.disabled`: clear it
    /// to keep the counter running (a builder's attr has it set).
    ///
    /// # Ordering: no overflow lost or misdirected
    /// 1. The new `sig_data` is claimed in the registry (same handler and data) *before*
    ///    the ioctl, so a SIGTRAP carrying it finds this counter from the first one.
    /// 2. The old `sig_data` stays registered to this counter *after* the ioctl: the
    ///    kernel reads `sig_data` when it delivers (`perf_sigtrap`), and a thread of an
    ///    inherited counter may still have a trap from before the change on its way.
    ///    Both keys name this counter, so whichever a trap carries, it is counted here
    ///    and the callback sees that key as `token`.
    /// 3. Claiming a key that another counter holds fails *before* the kernel is told,
    ///    so a trap is never routed to a stranger's slot.
    ///
    /// What the kernel does not count is not notified either: it disables a breakpoint
    /// for the instant of the ioctl (`perf_event_modify_breakpoint`), so an access by
    /// another thread racing with it is neither counted nor trapped. Every overflow it
    /// does count is delivered and routed here (`tests/signal_options.rs` checks traps
    /// == count while threads write and the key flips).
    ///
    /// Old keys are released on drop or with
    /// [`release_old_sig_data`](Self::release_old_sig_data).
    ///
    /// # Errors
    /// [`ErrorKind::Busy`] if the new `sig_data` is attached elsewhere; the ioctl's error
    /// (e.g. `EOPNOTSUPP` for a non-breakpoint counter) with the registration unchanged.
    #[doc(alias = "PERF_EVENT_IOC_MODIFY_ATTRIBUTES")]
    pub fn modify_attributes(&mut self, attr: &sys::perf_event_attr) -> Result<()> {
        let new_key = attr.sig_data;
        if new_key == self.key || attr.sigtrap() == 0 {
            return self.counter.modify_attributes(attr);
        }
        let op = || {
            format!(
                "SigtrapCounter::modify_attributes({})",
                self.counter.event().name()
            )
        };
        // Re-use a slot this counter still holds for `new_key` (switching back).
        if let Some(pos) = self.old_keys.iter().position(|&(k, _)| k == new_key) {
            self.counter.modify_attributes(attr)?;
            let (_, s) = self.old_keys.swap_remove(pos);
            self.old_keys.push((self.key, self.slot));
            self.slot = s;
            self.key = new_key;
            return Ok(());
        }
        let cur = REGISTRY.slot(self.slot);
        let slot = REGISTRY
            .claim(
                new_key,
                new_key,
                cur.callback.load(SeqCst),
                cur.data.load(SeqCst),
            )
            .map_err(|()| {
                Error::new(
                    ErrorKind::Busy,
                    op(),
                    format!("sig_data {new_key:#x} is already attached"),
                )
                .with_fix("give each sigtrap counter its own sig_data")
            })?
            .ok_or_else(|| Error::new(ErrorKind::Busy, op(), "the sigtrap registry is full"))?;
        if let Err(e) = self.counter.modify_attributes(attr) {
            REGISTRY.retire(slot);
            return Err(e);
        }
        self.old_keys.push((self.key, self.slot));
        self.slot = slot;
        self.key = new_key;
        Ok(())
    }

    /// Gives the attached breakpoint counter a new `sig_data` in place, leaving it
    /// enabled or disabled as `enabled` says (`MODIFY_ATTRIBUTES` sets a breakpoint's
    /// state from `attr.disabled`). See [`modify_attributes`](Self::modify_attributes)
    /// for why no trap is lost or misdirected.
    ///
    /// # Errors
    /// As [`modify_attributes`](Self::modify_attributes).
    pub fn set_sig_data(&mut self, sig_data: u64, enabled: bool) -> Result<()> {
        let mut attr = *self.counter.attr();
        attr.sig_data = sig_data;
        attr.set_disabled((!enabled).into());
        self.modify_attributes(&attr)
    }

    /// Stops routing the old `sig_data`s to this counter (their counts stay in
    /// [`notifications`](Self::notifications)). Call it once no trap from before the
    /// change can still be on its way (e.g. every thread has run since, or the counter
    /// was disabled); a late one is then counted as [`Sigtrap::stray`].
    pub fn release_old_sig_data(&mut self) {
        for (_, s) in self.old_keys.drain(..) {
            let (hits, _) = REGISTRY.retire(s);
            self.released_hits += hits;
        }
    }

    /// SIGTRAP counts plus a ring's totals.
    pub fn accounting(&self, ring: Option<&RingStats>) -> Accounting {
        Accounting::new(self.notifications(), 0, ring)
    }

    /// Gives the counter a new budget, reopening it when the budget says so (same
    /// `sig_data`, so the registration stays). Returns `true` if the fd changed.
    ///
    /// A reopened counter takes the budget builder's `sig_data`: after
    /// [`set_sig_data`](Self::set_sig_data), build the budget with the new one.
    pub fn rearm(&mut self, budget: &Budget) -> Result<bool> {
        budget.rearm(&mut self.counter)
    }

    fn teardown(&mut self) {
        if self.live {
            self.live = false;
            if std::process::id() != self.pid {
                // A forked child's copy of the parent's event: just close it.
                return;
            }
            let _ = self.counter.disable();
            self.release_old_sig_data();
            REGISTRY.retire(self.slot);
        }
    }

    /// Detaches and returns the counter (disabled).
    pub fn detach(mut self) -> Counter {
        self.teardown();
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; each field is read once.
        let counter = unsafe { std::ptr::read(&this.counter) };
        // SAFETY: as above, to release the queue handle.
        drop(unsafe { std::ptr::read(&this._queue) });
        // SAFETY: as above, to free the (emptied) list of old keys.
        drop(unsafe { std::ptr::read(&this.old_keys) });
        counter
    }

    /// The raw fd, for `poll`ing the same counter's ring.
    pub fn raw_fd(&self) -> i32 {
        self.counter.as_raw_fd()
    }
}

impl Drop for SigtrapCounter {
    fn drop(&mut self) {
        self.teardown();
    }
}
