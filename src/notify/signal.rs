//! Overflow notifications as a signal delivered to one chosen thread (or process).
//!
//! Set-up per counter (`man 2 fcntl`): `F_SETSIG` with the signal (so `si_fd` is
//! filled; a real-time signal also queues rather than merges),
//! `F_SETOWN_EX(F_OWNER_TID, tid)` so the signal lands on *that* thread (plain
//! `F_SETOWN` lets the kernel pick any; [`Owner::Process`] asks for exactly that,
//! `F_OWNER_PID`), then `O_ASYNC` last, once the registry knows the fd.
//!
//! One process-wide handler per signal number, installed with `SA_SIGINFO` and the
//! signal itself in `sa_mask` (no re-entry; [`SignalOptions::nodefer`] allows it),
//! dispatches on `si_fd` through a growable lock-free registry (`registry.rs`: O(1)
//! per signal, ≥ 10,000 counters).
//!
//! # Standard signals coalesce
//! [`SignalOptions::signal`] also accepts a standard signal (`SIGIO`, `SIGPROF`,
//! `SIGUSR1`, ...). With `F_SETSIG` set to it the kernel still fills `si_fd`, but a
//! standard signal does not queue: while one is pending, further ones are dropped, so
//! one signal may stand for many overflows. Count overflows from the ring (or use a
//! real-time signal, which queues one per overflow up to `RLIMIT_SIGPENDING`).
//!
//! # `SA_RESTART`
//! By default the handler is installed with `SA_RESTART`: a notification never makes a
//! blocking call fail. [`SignalOptions::restart(false)`](SignalOptions::restart) leaves
//! it out, so a notification arriving during `waitpid`, `read`, `poll`, ... makes the
//! call return `EINTR` (what a watchdog wants). The flag belongs to the signal number:
//! installing the same signal again with another choice changes it for every user. It ignores (and counts as stray) signals with `si_code <= 0`
//! (sent by `kill`/`tgkill`/`sigqueue`) and fds it does not know, passing those to the
//! previous handler when chaining was asked for.
//!
//! For inherited counters the kernel sends child threads' signals to the *parent*
//! event's owner; per-thread delivery across a process is [`super::sigtrap`]'s job.
//!
//! # Safety
//! The handler, `on_signal`, only loads and stores atomics, calls the registered
//! callback (whose contract is async-signal safety) and the previous handler, and
//! saves/restores `errno`. Registry slots are never freed while a handler is inside
//! them (see `registry.rs`). The other unsafe code is `sigaction`, `fcntl`,
//! `pthread_sigmask` and `sigtimedwait` calls with valid arguments, argued in place.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use super::budget::Budget;
use super::queue::NotifyQueue as Queue;
use super::registry::Registry;
use super::siginfo::{interrupted_ip, interrupted_sp_fp, ErrnoGuard, SigInfo};
use super::signo::Signal;
use super::{Accounting, Notification, NotifyKind, Token};
use crate::counter::Counter;
use crate::ring::RingStats;
use crate::{sys, Error, ErrorKind, Result};

pub use super::queue::NotifyQueue;

/// A callback run **in signal context** for each notification, with the user data
/// given at registration.
///
/// It must be async-signal-safe: no allocation, no locks (including `println!`), no
/// panics; atomics, `write(2)` and pushing to a [`NotifyQueue`] are fine.
pub type Callback = fn(&Notification, usize);

/// What the handler does with a notification, besides counting it.
#[derive(Debug, Clone)]
pub enum Handler {
    /// Only count it ([`SignalCounter::notifications`]).
    Count,
    /// Call `fn(&Notification, data)` in signal context.
    Callback(Callback, usize),
    /// Push it to a queue a normal thread pops (heavy work goes there).
    Queue(Arc<NotifyQueue>),
}

static REGISTRY: Registry = Registry::new();

const NSIG: usize = 65;

struct SigState {
    installed: AtomicBool,
    chain: AtomicBool,
    /// The `sa_flags` choices it was installed with ([`HandlerFlags::bits`]).
    flags: AtomicI32,
    /// The previous `sa_sigaction` and `sa_flags`, for chaining.
    prev_action: AtomicUsize,
    prev_flags: AtomicI32,
}

static SIGS: [SigState; NSIG] = [const {
    SigState {
        installed: AtomicBool::new(false),
        chain: AtomicBool::new(false),
        flags: AtomicI32::new(HandlerFlags::DEFAULT.bits()),
        prev_action: AtomicUsize::new(0),
        prev_flags: AtomicI32::new(0),
    }
}; NSIG];

static INSTALL: Mutex<()> = Mutex::new(());

/// Signal numbers taken by a [`SignalFd`](super::signalfd::SignalFd) (bit per signal).
static SIGNALFD_CLAIMED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn claimed_by_signalfd(signo: i32) -> bool {
    SIGNALFD_CLAIMED.load(SeqCst) & (1u64 << (signo as u32 % 64)) != 0
}

/// Takes `signo` (or the highest free real-time signal) for a signalfd: it must have
/// no handler at all and not be another signalfd's.
pub(crate) fn claim_for_signalfd(signo: Option<i32>) -> Result<i32> {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let free = |s: i32| -> Result<bool> {
        Ok(current_action(s)?.sa_sigaction == libc::SIG_DFL && !claimed_by_signalfd(s))
    };
    let signo = match signo {
        Some(s) if !(min..=max).contains(&s) => {
            return Err(Error::new(
                ErrorKind::Signal,
                format!("SignalFd::new({s})"),
                format!("{s} is not a real-time signal ({min}..={max})"),
            ))
        }
        Some(s) if !free(s)? => {
            return Err(Error::new(
                ErrorKind::Signal,
                format!("SignalFd::new({s})"),
                format!("signal {s} has a handler or another SignalFd"),
            )
            .with_fix("pick another signal, or None for a free one"))
        }
        Some(s) => s,
        None => {
            let mut found = None;
            for s in (min..=max).rev() {
                if free(s)? {
                    found = Some(s);
                    break;
                }
            }
            found.ok_or_else(|| {
                Error::new(
                    ErrorKind::Signal,
                    "SignalFd::new(None)",
                    "every real-time signal is taken",
                )
            })?
        }
    };
    SIGNALFD_CLAIMED.fetch_or(1u64 << (signo as u32 % 64), SeqCst);
    Ok(signo)
}

pub(crate) fn unclaim_for_signalfd(signo: i32) {
    SIGNALFD_CLAIMED.fetch_and(!(1u64 << (signo as u32 % 64)), SeqCst);
}

fn queue_push(n: &Notification, data: usize) {
    // SAFETY: `data` was set from `Arc::as_ptr` of the queue the SignalCounter keeps
    // alive until its slot is retired, and handlers only run inside a live slot.
    let q = unsafe { &*(data as *const Queue) };
    q.push(*n);
}

/// Calls the previous handler as it was installed (`SA_SIGINFO` or not). Ignores
/// `SIG_DFL`/`SIG_IGN`.
///
/// # Safety
/// Signal context; `info`/`ctx` as the kernel passed them.
pub(crate) unsafe fn call_previous(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    action: usize,
    flags: i32,
) {
    if action == libc::SIG_DFL || action == libc::SIG_IGN {
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: `action` was read by sigaction(2) from a handler installed with
        // SA_SIGINFO, so it has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(action) };
        f(sig, info, ctx);
    } else {
        // SAFETY: installed without SA_SIGINFO: a plain `void (*)(int)` handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(action) };
        f(sig);
    }
}

/// The process-wide handler for every signal number taken by [`ThreadSignal`].
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SIGNAL CONTEXT. May call: atomic loads/stores/RMWs, the registered `Callback`
    // (async-signal-safe by contract), `NotifyQueue::push` (lock-free, no allocation),
    // the previous handler. Never allocates, locks, panics or decodes records.
    let _errno = ErrnoGuard::save();
    let st = &SIGS[(sig as usize).min(NSIG - 1)];
    if info.is_null() {
        return;
    }
    // SAFETY: SA_SIGINFO handlers receive a valid siginfo for the call's duration.
    let si = unsafe { SigInfo::from_ptr(info) };
    // SAFETY: `ctx` is the handler's third argument.
    if unsafe { route(&si, ctx) } {
        return;
    }
    if st.chain.load(SeqCst) {
        // SAFETY: as the kernel passed them; prev_* were read by sigaction(2).
        unsafe {
            call_previous(
                sig,
                info,
                ctx,
                st.prev_action.load(SeqCst),
                st.prev_flags.load(SeqCst),
            )
        };
    }
}

/// Routes a kernel-sent siginfo (`si_code > 0`) to the registration of its `si_fd`:
/// `false` (counted as stray) if it is not from the kernel or the fd is unknown.
/// Async-signal-safe (see `on_signal`).
///
/// # Safety
/// `ctx` is null or the `ucontext` a `SA_SIGINFO` handler received with `si`.
unsafe fn route(si: &SigInfo<'_>, ctx: *mut libc::c_void) -> bool {
    let entered = if si.from_kernel() {
        REGISTRY.enter(si.fd() as u32 as u64)
    } else {
        None
    };
    let Some(e) = entered else {
        REGISTRY.stray.fetch_add(1, SeqCst);
        return false;
    };
    let kind = if si.code() == sys::POLL_HUP as i32 {
        NotifyKind::Hup
    } else {
        NotifyKind::Overflow
    };
    e.slot.hits.fetch_add(1, SeqCst);
    if kind == NotifyKind::Hup {
        e.slot.hups.fetch_add(1, SeqCst);
    }
    let cb = e.slot.callback.load(SeqCst);
    if cb != 0 {
        // SAFETY: `ctx` is null or the handler's third argument (caller's contract).
        let (sp, fp) = unsafe { interrupted_sp_fp(ctx) };
        let n = Notification {
            token: Token(e.slot.token.load(SeqCst)),
            kind,
            fd: si.fd(),
            // SAFETY: `ctx` is null or the handler's third argument (caller's contract).
            ip: unsafe { interrupted_ip(ctx) },
            sp,
            fp,
        };
        // SAFETY: `callback` only ever holds a `Callback` stored by `attach`.
        let f: Callback = unsafe { std::mem::transmute::<usize, Callback>(cb) };
        f(&n, e.slot.data.load(SeqCst));
    }
    true
}

fn current_action(signo: i32) -> Result<libc::sigaction> {
    // SAFETY: sigaction with a null new action only writes the current one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is a valid, writable sigaction; a null `act` changes nothing.
    let r = unsafe { libc::sigaction(signo, std::ptr::null(), &mut old) };
    if r < 0 {
        return Err(Error::from_errno(
            format!("sigaction({signo})"),
            std::io::Error::last_os_error(),
        )
        .with_kind(ErrorKind::Signal));
    }
    Ok(old)
}

fn handler_addr() -> usize {
    on_signal as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize
}

/// The `sa_flags` a handler of perfring's is installed with, besides `SA_SIGINFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandlerFlags {
    /// `SA_RESTART`: a blocking call the signal interrupts is restarted.
    pub(crate) restart: bool,
    /// `SA_NODEFER`: the signal is not blocked while its handler runs, so one raised
    /// inside the handler (an overflow in code it calls) is delivered there, nested.
    pub(crate) nodefer: bool,
    /// `SA_ONSTACK`: the handler runs on the thread's alternate stack, if it has one.
    pub(crate) onstack: bool,
}

impl HandlerFlags {
    pub(crate) const DEFAULT: HandlerFlags = HandlerFlags {
        restart: true,
        nodefer: false,
        onstack: true,
    };

    /// The `sa_flags` bits (with `SA_SIGINFO`).
    pub(crate) const fn bits(self) -> i32 {
        let mut f = libc::SA_SIGINFO;
        if self.restart {
            f |= libc::SA_RESTART;
        }
        if self.nodefer {
            f |= libc::SA_NODEFER;
        }
        if self.onstack {
            f |= libc::SA_ONSTACK;
        }
        f
    }

    pub(crate) const fn from_bits(f: i32) -> HandlerFlags {
        HandlerFlags {
            restart: f & libc::SA_RESTART != 0,
            nodefer: f & libc::SA_NODEFER != 0,
            onstack: f & libc::SA_ONSTACK != 0,
        }
    }
}

/// `sigaction(signo)` with `handler` and `flags`; unless `SA_NODEFER`, the signal is
/// blocked while the handler runs. Returns the previous action.
pub(crate) fn install_handler(
    signo: i32,
    handler: usize,
    flags: HandlerFlags,
) -> Result<libc::sigaction> {
    // SAFETY: an all-zero sigaction is a valid starting point (empty mask, no flags).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags.bits();
    // SAFETY: `act.sa_mask` is a valid sigset_t owned by us.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    if !flags.nodefer {
        // SAFETY: as above; `signo` is validated by the kernel (EINVAL otherwise).
        unsafe { libc::sigaddset(&mut act.sa_mask, signo) };
    }
    // SAFETY: zeroed sigaction is valid for the kernel to overwrite.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid sigactions; `handler` is an extern "C" fn with
    // the SA_SIGINFO signature that lives for the whole program.
    let r = unsafe { libc::sigaction(signo, &act, &mut old) };
    if r < 0 {
        return Err(Error::from_errno(
            format!("sigaction({signo}, SA_SIGINFO)"),
            std::io::Error::last_os_error(),
        )
        .with_kind(ErrorKind::Signal));
    }
    Ok(old)
}

/// The installed handler of one real-time signal: attach counters to it.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, Event, notify::{ThreadSignal, Token, signal::Handler}};
/// # fn hot() {}
/// let sig = ThreadSignal::builder().install()?; // first free SIGRTMIN+k
/// let counter = Counter::builder_for(Event::breakpoint(perfring::event::Access::Execute, hot as usize as u64, 8))
///     .period(100)
///     .wakeup_events(1)
///     .open()?;
/// let counter = sig.attach(counter, Token(1), Handler::Count)?; // to this thread
/// counter.counter().enable()?;
/// for _ in 0..10_000 { hot() }
/// counter.counter().disable()?;
/// println!("{} signals", counter.notifications());
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSignal {
    signo: i32,
}

impl ThreadSignal {
    /// Options for [`SignalOptions::install`], the one way to install the handler:
    /// the signal (standard ones included), chaining, `SA_RESTART`, `SA_NODEFER`,
    /// `SA_ONSTACK`. `ThreadSignal::builder().install()` takes the first real-time
    /// signal that is free (or already perfring's, with the same flags).
    ///
    /// # Examples
    /// ```no_run
    /// use perfring::notify::ThreadSignal;
    /// // SIGPROF, and let notifications interrupt blocking calls with EINTR.
    /// let sig = ThreadSignal::builder().signal(perfring::Signal::SIGPROF).restart(false).install()?;
    /// # Ok::<(), perfring::Error>(())
    /// ```
    pub fn builder() -> SignalOptions {
        SignalOptions::default()
    }

    /// Installs the handler (once per process and signal; later calls return the same
    /// handle) as `options` say (see [`SignalOptions`]). Without an explicit signal it
    /// picks the first real-time signal that is free or already perfring's with the
    /// same flags.
    ///
    /// # Errors
    /// [`ErrorKind::Signal`] when the signal already has a handler that is not
    /// perfring's and chaining is off, when every real-time signal is taken, or for a
    /// signal the kernel or perfring reserves (`SIGKILL`, `SIGSTOP`, `SIGTRAP`) or a
    /// fault signal (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`); any other standard
    /// signal is accepted (it coalesces: see the module docs).
    pub fn install_with(options: SignalOptions) -> Result<ThreadSignal> {
        let (signo, chain, flags) = (options.signo, options.chain, options.flags);
        let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
        let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        let reserved = [
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGTRAP,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
        ];
        let signo = match signo {
            Some(s) if (min..=max).contains(&s) => s,
            Some(s) if (1..min).contains(&s) && !reserved.contains(&s) => s,
            Some(s) => {
                return Err(Error::new(
                    ErrorKind::Signal,
                    format!("ThreadSignal::install_with({s})"),
                    format!("signal {s} cannot carry overflow notifications (it is SIGKILL, SIGSTOP, SIGTRAP, a fault signal, or out of range 1..={max})"),
                )
                .with_fix("pick SIGIO, SIGPROF, SIGUSR1/2, SIGALRM ... or a real-time signal (SIGRTMIN..=SIGRTMAX)"))
            }
            None => {
                let mut found = None;
                for s in min..=max {
                    let a = current_action(s)?;
                    // Share a signal of ours only if its flags are the same: flipping
                    // them would change other users' blocking calls or nesting.
                    let ours = a.sa_sigaction == handler_addr()
                        && SIGS[s as usize].flags.load(SeqCst) == flags.bits();
                    let free = a.sa_sigaction == libc::SIG_DFL && !claimed_by_signalfd(s);
                    if ours || free {
                        found = Some(s);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Signal,
                        "ThreadSignal::install_with(no signal given)",
                        "every real-time signal already has a handler",
                    )
                    .with_fix("name a signal and chain to its handler: ThreadSignal::builder().signal(..).chain(true)")
                })?
            }
        };
        if claimed_by_signalfd(signo) {
            return Err(Error::new(
                ErrorKind::Signal,
                format!("ThreadSignal::install_with({signo})"),
                format!("signal {signo} is used by a SignalFd"),
            )
            .with_fix("pick another signal (None picks a free one)"));
        }
        let st = &SIGS[signo as usize];
        if st.installed.load(SeqCst) {
            if st.flags.load(SeqCst) != flags.bits() {
                install_handler(signo, handler_addr(), flags)?;
                st.flags.store(flags.bits(), SeqCst);
            }
            return Ok(ThreadSignal { signo });
        }
        let cur = current_action(signo)?;
        let foreign = cur.sa_sigaction != libc::SIG_DFL
            && cur.sa_sigaction != libc::SIG_IGN
            && cur.sa_sigaction != handler_addr();
        if foreign && !chain {
            return Err(Error::new(
                ErrorKind::Signal,
                format!("ThreadSignal::install_with({signo})"),
                format!("signal {signo} already has a handler installed by someone else"),
            )
            .with_fix("pick another signal (or none: a free one is picked) or chain(true) to forward its other signals to that handler"));
        }
        st.prev_action.store(cur.sa_sigaction, SeqCst);
        st.prev_flags.store(cur.sa_flags, SeqCst);
        st.chain.store(chain && foreign, SeqCst);
        install_handler(signo, handler_addr(), flags)?;
        st.flags.store(flags.bits(), SeqCst);
        st.installed.store(true, SeqCst);
        Ok(ThreadSignal { signo })
    }

    /// The signal.
    pub fn signal(&self) -> Signal {
        Signal::known(self.signo)
    }

    /// The handler that this signal's non-perfring deliveries (`kill`, unknown fds) are
    /// passed to, `(sa_sigaction, sa_flags)`, if chaining is on.
    pub fn chained(&self) -> Option<(usize, i32)> {
        let st = &SIGS[self.signo as usize];
        st.chain
            .load(SeqCst)
            .then(|| (st.prev_action.load(SeqCst), st.prev_flags.load(SeqCst)))
    }

    /// Replaces (and turns on) the handler that this signal's non-perfring deliveries
    /// are passed to, keeping perfring's installed: for an interposed `sigaction`, so
    /// a program installing its own handler for the signal later still gets its own.
    ///
    /// # Safety
    /// As [`Sigtrap::chain_to`](super::Sigtrap::chain_to).
    pub unsafe fn chain_to(&self, action: usize, flags: i32) {
        let st = &SIGS[self.signo as usize];
        // Ordered as in `Sigtrap::chain_to`: never a handler called with fewer
        // arguments than it takes.
        if flags & libc::SA_SIGINFO != 0 {
            st.prev_flags.store(flags, SeqCst);
            st.prev_action.store(action, SeqCst);
        } else {
            st.prev_action.store(action, SeqCst);
            st.prev_flags.store(flags, SeqCst);
        }
        st.chain.store(true, SeqCst);
    }

    /// Signals the handler ignored since start-up, for every signal number: not from
    /// the kernel (`si_code <= 0`, e.g. `kill`) or for an fd it does not know.
    pub fn stray() -> u64 {
        REGISTRY.stray.load(SeqCst)
    }

    /// Routes a siginfo obtained outside the handler — e.g. with `sigtimedwait` or
    /// `sigwaitinfo` by a thread that blocks the signal and consumes it synchronously —
    /// exactly as the handler does: counts it and runs the registration's callback or
    /// queue, in the calling context (the interrupted `ip` is unknown: 0). Returns
    /// `false` (counted as stray, not chained) if it was not sent by the kernel
    /// (`si_code <= 0`) or its `si_fd` is attached to no counter.
    pub fn dispatch(&self, info: &libc::siginfo_t) -> bool {
        // SAFETY: `info` is a live, initialised siginfo for the call (a reference).
        let si = unsafe { SigInfo::from_ptr(info) };
        // SAFETY: a null `ctx` is allowed (no interrupted context).
        unsafe { route(&si, std::ptr::null_mut()) }
    }

    /// Counters attached right now, for every signal number (one registry serves all).
    pub fn registered() -> usize {
        REGISTRY.live()
    }

    /// Whether this signal's handler is installed with `SA_RESTART`.
    pub fn restarts(&self) -> bool {
        self.flags().restart
    }

    /// Whether this signal's handler is installed with `SA_NODEFER` (a notification
    /// raised while the handler runs is delivered inside it, nested).
    pub fn nodefer(&self) -> bool {
        self.flags().nodefer
    }

    /// Whether this signal's handler is installed with `SA_ONSTACK` (it runs on the
    /// thread's alternate signal stack, when the thread has one).
    pub fn onstack(&self) -> bool {
        self.flags().onstack
    }

    fn flags(&self) -> HandlerFlags {
        HandlerFlags::from_bits(SIGS[self.signo as usize].flags.load(SeqCst))
    }

    /// Sends `counter`'s overflow signals to the calling thread.
    pub fn attach(
        &self,
        counter: Counter,
        token: Token,
        handler: Handler,
    ) -> Result<SignalCounter> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.attach_to(counter, token, tid, handler)
    }

    /// Sends `counter`'s overflow signals to thread `tid` of this process.
    ///
    /// # Errors
    /// [`ErrorKind::Busy`] when the registry is full or the fd is already
    /// registered; an `fcntl` errno ([`ErrorKind::Signal`]) otherwise.
    pub fn attach_to(
        &self,
        counter: Counter,
        token: Token,
        tid: libc::pid_t,
        handler: Handler,
    ) -> Result<SignalCounter> {
        self.attach_with(counter, token, Owner::Thread(tid), handler)
    }

    /// Sends `counter`'s overflow signals to `owner`: one thread (`F_OWNER_TID`) or any
    /// thread of a process (`F_OWNER_PID`, the kernel picks one that does not block the
    /// signal). The counter may watch anything (another process, a group member); the
    /// signal still comes here, and its notification carries `token`.
    ///
    /// # Errors
    /// As [`attach_to`](Self::attach_to).
    pub fn attach_with(
        &self,
        counter: Counter,
        token: Token,
        owner: Owner,
        handler: Handler,
    ) -> Result<SignalCounter> {
        let (cb, data, queue) = match handler {
            Handler::Count => (0, 0, None),
            Handler::Callback(f, d) => (f as usize, d, None),
            Handler::Queue(q) => (
                queue_push as Callback as usize,
                Arc::as_ptr(&q) as usize,
                Some(q),
            ),
        };
        let fd = counter.as_raw_fd();
        let slot = REGISTRY
            .claim(fd as u32 as u64, token.0, cb, data)
            .map_err(|()| {
                Error::new(
                    ErrorKind::Busy,
                    format!("ThreadSignal::attach({})", counter.event().name()),
                    format!("fd {fd} is already registered"),
                )
            })?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Busy,
                    format!("ThreadSignal::attach({})", counter.event().name()),
                    format!(
                        "all {} signal registry slots are in use",
                        super::registry::CAPACITY
                    ),
                )
                .with_fix("drop counters you no longer need")
            })?;
        // `armed` from here on: if arming fails, dropping `sc` retires the slot.
        let sc = SignalCounter {
            counter,
            slot,
            signo: self.signo,
            owner,
            token,
            _queue: queue,
            armed: true,
            retired: (0, 0),
            pid: std::process::id(),
        };
        arm_fd(
            sc.counter.as_raw_fd(),
            self.signo,
            owner,
            sc.counter.event().name(),
        )?;
        Ok(sc)
    }
}

fn fcntl_err(event: &str, what: &str) -> Error {
    Error::from_errno(
        format!("fcntl({event}, {what})"),
        std::io::Error::last_os_error(),
    )
    .with_kind(ErrorKind::Signal)
}

/// Who receives a counter's overflow signals (`F_SETOWN_EX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// This thread only (`F_OWNER_TID`): the default, what per-thread profilers need.
    Thread(libc::pid_t),
    /// Any thread of this process that does not block the signal (`F_OWNER_PID`).
    ///
    /// The thread the kernel picks runs the handler when it is next scheduled, so a
    /// notification may still be on its way when the counter is disabled: wait for
    /// [`SignalCounter::notifications`] to reach the ring's sample count before
    /// dropping. A signal another thread has taken but not yet handled when the counter
    /// is dropped is counted as [`ThreadSignal::stray`].
    Process(libc::pid_t),
}

impl Owner {
    /// The calling thread.
    pub fn this_thread() -> Owner {
        // SAFETY: gettid has no preconditions.
        Owner::Thread(unsafe { libc::gettid() })
    }

    /// The calling process.
    pub fn this_process() -> Owner {
        Owner::Process(std::process::id() as libc::pid_t)
    }

    /// Whether signals to this owner may be pending for the calling thread (so that
    /// teardown must drain them here).
    fn reaches_caller(self) -> bool {
        match self {
            // SAFETY: gettid has no preconditions.
            Owner::Thread(tid) => tid == unsafe { libc::gettid() },
            Owner::Process(pid) => pid == std::process::id() as libc::pid_t,
        }
    }
}

/// How [`ThreadSignal::install_with`] takes its signal. Start from
/// [`ThreadSignal::builder`] (or `default()`): the first free real-time signal, no
/// chaining, `SA_RESTART` and `SA_ONSTACK`, the signal blocked while its handler runs.
///
/// The flags belong to the signal number: installing the same signal again with other
/// flags changes them for every user of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalOptions {
    signo: Option<i32>,
    chain: bool,
    flags: HandlerFlags,
}

impl Default for SignalOptions {
    fn default() -> SignalOptions {
        SignalOptions {
            signo: None,
            chain: false,
            flags: HandlerFlags::DEFAULT,
        }
    }
}

impl SignalOptions {
    /// Use `signal`: a real-time signal, or a standard one such as `SIGIO` or
    /// `SIGPROF` (those coalesce: see the module docs).
    pub fn signal(mut self, signal: Signal) -> Self {
        self.signo = Some(signal.number());
        self
    }

    /// Forward signals that are not ours (`kill`, unknown fds) to a handler that was
    /// installed before (and accept a signal that has one).
    pub fn chain(mut self, yes: bool) -> Self {
        self.chain = yes;
        self
    }

    /// `SA_RESTART` (default `true`). `false`: a notification interrupts a blocking
    /// system call of the thread it lands on, which returns `EINTR`.
    pub fn restart(mut self, yes: bool) -> Self {
        self.flags.restart = yes;
        self
    }

    /// `SA_NODEFER` (default `false`): the signal is not blocked while its handler
    /// runs, so a notification raised inside the handler (an overflow in code the
    /// callback calls) is delivered there, nested, instead of after it returns. The
    /// handler is re-entrant (atomics only); a callback must be too.
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

    /// `SA_ONSTACK` (default `true`): the handler runs on the thread's alternate signal
    /// stack (`sigaltstack`) when it has one, e.g. to survive a stack overflow.
    pub fn onstack(mut self, yes: bool) -> Self {
        self.flags.onstack = yes;
        self
    }

    /// [`ThreadSignal::install_with`] these options.
    ///
    /// # Errors
    /// As [`ThreadSignal::install_with`].
    pub fn install(self) -> Result<ThreadSignal> {
        ThreadSignal::install_with(self)
    }
}

/// `F_SETSIG`, `F_SETOWN_EX(owner)`, then `O_ASYNC`.
pub(crate) fn arm_fd(fd: RawFd, signo: i32, owner: Owner, event: &str) -> Result<()> {
    // SAFETY: F_SETSIG takes an int; the fd is open (the counter is alive).
    if unsafe { libc::fcntl(fd, sys::F_SETSIG as i32, signo) } < 0 {
        return Err(fcntl_err(event, "F_SETSIG"));
    }
    let (type_, pid, what) = match owner {
        Owner::Thread(tid) => (sys::F_OWNER_TID, tid, "thread"),
        Owner::Process(pid) => (sys::F_OWNER_PID, pid, "process"),
    };
    let owner = sys::f_owner_ex {
        type_: type_ as i32,
        pid,
    };
    // SAFETY: F_SETOWN_EX reads one f_owner_ex through the pointer; `owner` outlives it.
    if unsafe { libc::fcntl(fd, sys::F_SETOWN_EX as i32, &owner) } < 0 {
        return Err(fcntl_err(event, "F_SETOWN_EX").with_fix(format!(
            "{what} {pid} must exist (and a thread must belong to this process)"
        )));
    }
    // SAFETY: F_GETFL/F_SETFL take and return ints.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_ASYNC) } < 0 {
        return Err(fcntl_err(event, "F_SETFL O_ASYNC"));
    }
    Ok(())
}

/// Clears `O_ASYNC`: the kernel queues no more signals for `fd`.
pub(crate) fn disarm_fd(fd: RawFd) {
    // SAFETY: F_GETFL/F_SETFL take and return ints; the fd is open.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl >= 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_ASYNC) };
    }
}

/// Consumes `signo` signals pending for the calling thread, dispatching each through
/// the handler (for other registrations sharing the signal).
fn drain_pending(signo: i32) {
    // SAFETY: zeroed sigset_t values are valid to initialise with sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is ours.
    unsafe { libc::sigemptyset(&mut set) };
    // SAFETY: `set` is ours; signo is a valid signal (installed earlier).
    unsafe { libc::sigaddset(&mut set, signo) };
    // SAFETY: valid sigsets; blocks only `signo` for this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: zeroed siginfo is valid for the kernel to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set, info and timeout pointers.
        let r = unsafe { libc::sigtimedwait(&set, &mut info, &zero) };
        if r != signo {
            break;
        }
        on_signal(signo, &mut info, std::ptr::null_mut());
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

/// A counter whose overflows signal a thread; dropping it stops the signals cleanly.
///
/// Teardown order (PITFALLS 12): clear `O_ASYNC` (no new signals), retire the registry
/// slot and wait for handlers inside it, drain signals still pending on the calling
/// thread if it is the owner, and only then close the fd. Signals still pending on
/// *another* owner thread are later ignored as an unknown fd — unless the fd number
/// was meanwhile reused by a new registration, which then sees one extra notification
/// (its ring count is unaffected).
///
/// # After `fork`
/// A child shares the counter's open file description (its `O_ASYNC`, owner and
/// signal) with the parent. Dropped in any process but the one that attached it, a
/// `SignalCounter` only closes its fd: the parent keeps receiving its signals.
pub struct SignalCounter {
    counter: Counter,
    slot: u32,
    signo: i32,
    owner: Owner,
    token: Token,
    _queue: Option<Arc<NotifyQueue>>,
    armed: bool,
    /// `(hits, hups)` of slots this registration used before (fd changed by `rearm`).
    retired: (u64, u64),
    /// The process that attached it: teardown acts only there (see the type docs).
    pid: u32,
}

impl std::fmt::Debug for SignalCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalCounter")
            .field("counter", &self.counter)
            .field("signo", &self.signo)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("notifications", &self.notifications())
            .finish()
    }
}

impl SignalCounter {
    /// The counter (enable, disable, refresh, map a ring from it).
    pub fn counter(&self) -> &Counter {
        &self.counter
    }

    /// The token it was attached with.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The signal.
    pub fn signal(&self) -> Signal {
        Signal::known(self.signo)
    }

    /// Who receives its signals.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Signals the handler received for this counter (`Hup`s included).
    pub fn notifications(&self) -> u64 {
        self.retired.0 + REGISTRY.slot(self.slot).hits.load(SeqCst)
    }

    /// `POLL_HUP` signals: the `REFRESH` budget ran out.
    pub fn hups(&self) -> u64 {
        self.retired.1 + REGISTRY.slot(self.slot).hups.load(SeqCst)
    }

    /// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` while attached (breakpoints: new address,
    /// length, type, `disabled`; Linux 4.17). The kernel sets the breakpoint's state
    /// from `attr.disabled`: clear it to keep the counter running.
    ///
    /// No overflow is lost or misdirected: the registration is keyed by the fd, which
    /// does not change, and `O_ASYNC` stays set throughout, so an overflow before the
    /// ioctl, during it or after it signals the same fd and finds the same slot. (The
    /// kernel disables the breakpoint for the instant of the ioctl: an access racing
    /// with it is neither counted nor signalled.)
    ///
    /// # Errors
    /// As [`Counter::modify_attributes`]; the registration is unchanged on error.
    #[doc(alias = "PERF_EVENT_IOC_MODIFY_ATTRIBUTES")]
    pub fn modify_attributes(&mut self, attr: &sys::perf_event_attr) -> Result<()> {
        self.counter.modify_attributes(attr)
    }

    /// Signal counts plus a ring's totals (count overflows from the ring).
    pub fn accounting(&self, ring: Option<&RingStats>) -> Accounting {
        Accounting::new(self.notifications(), self.hups(), ring)
    }

    /// Gives the counter a new budget; when the budget reopens it (breakpoints), the
    /// new fd takes over the registration. Returns `true` if the fd changed (map a new
    /// ring).
    pub fn rearm(&mut self, budget: &Budget) -> Result<bool> {
        if !budget.reopens() {
            budget.arm(&self.counter)?;
            return Ok(false);
        }
        let fresh = budget.builder().open()?;
        // The new fd is registered (same token and handler) before it can signal, and
        // the old one is disarmed before its slot is retired.
        let old_slot = REGISTRY.slot(self.slot);
        let new_slot = REGISTRY
            .claim(
                fresh.as_raw_fd() as u32 as u64,
                self.token.0,
                old_slot.callback.load(SeqCst),
                old_slot.data.load(SeqCst),
            )
            .ok()
            .flatten()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Busy,
                    format!("SignalCounter::rearm({})", fresh.event().name()),
                    "no registry slot for the reopened counter's fd",
                )
            })?;
        if let Err(e) = arm_fd(
            fresh.as_raw_fd(),
            self.signo,
            self.owner,
            fresh.event().name(),
        ) {
            REGISTRY.retire(new_slot);
            return Err(e);
        }
        disarm_fd(self.counter.as_raw_fd());
        let (hits, hups) = REGISTRY.retire(self.slot);
        self.retired.0 += hits;
        self.retired.1 += hups;
        self.slot = new_slot;
        let old = std::mem::replace(&mut self.counter, fresh);
        drop(old);
        budget.arm(&self.counter)?;
        Ok(true)
    }

    fn teardown(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if std::process::id() != self.pid {
            // A forked child's copy: O_ASYNC is the parent's too. Just close.
            return;
        }
        disarm_fd(self.counter.as_raw_fd());
        REGISTRY.retire(self.slot);
        if self.owner.reaches_caller() {
            drain_pending(self.signo);
        }
    }

    /// Stops the signals and returns the counter.
    pub fn detach(mut self) -> Counter {
        self.teardown();
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; each field is read once.
        let counter = unsafe { std::ptr::read(&this.counter) };
        // SAFETY: as above, to drop the queue handle.
        drop(unsafe { std::ptr::read(&this._queue) });
        counter
    }
}

impl Drop for SignalCounter {
    fn drop(&mut self) {
        self.teardown();
        // Fields drop after this: the queue (no handler can reach it now), then the
        // counter, closing the fd.
    }
}
