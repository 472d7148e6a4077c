//! `libperfring_inject.so`: preloaded into an unmodified program (`LD_PRELOAD`, or
//! `perfring inject`), it arms a sigtrap counter for every thread and acts on each
//! overflow in the thread that overflowed. The configuration comes from the
//! `PERFRING_*` variables ([`perfring::inject`]); without `PERFRING_EVENT` the library
//! does nothing.
//!
//! How:
//! - **Arming.** The constructor resolves each event inside the process (`mem:hot:x`
//!   against its own executable, through `perfring::resolve`), opens one counter per
//!   event in the main thread with `sigtrap` + `inherit` + `inherit_thread` +
//!   `remove_on_exec`, and attaches it to perfring's SIGTRAP handler
//!   (`perfring::notify::Sigtrap`). Every thread created later — by `pthread_create`
//!   or a raw `clone` — inherits its own counter, whose overflows interrupt that
//!   thread. An exec'd program loses the counters (`remove_on_exec`) and is armed
//!   again by its own copy of the preloaded library.
//! - **Acting**, in the overflowing thread, in signal context ([`on_overflow`]):
//!   `record` copies ip, tid, time, a frame-pointer stack, `sp`, `fp` and the top of
//!   the stack into the thread's lock-free buffer ([`buffers`]); a writer thread turns
//!   them into samples for the library's pipeline — the unwinder that decides the
//!   first frame by CFI, the symbolizer — whose outputs are `perfring watch --json`'s
//!   overflow lines or a perf.data, written every 10 ms and at exit.
//!   `hook:LIB:SYM` calls the user's function with a `perfring_overflow`;
//!   `abort-at:N` / `stop-at:N` abort or stop the process at the Nth overflow.
//! - **Living with the program** ([`interpose`]): `pthread_create`, `sigaction` and
//!   `signal` are interposed so that threads note their stacks and the program's own
//!   SIGTRAP handler is chained behind perfring's.
//!
//! # Safety
//! Unsafe code is libc calls with valid arguments and reads of the interrupted
//! thread's stack, bounded by that thread's stack (`[sp, top)` from
//! `pthread_getattr_np`) so every read is of mapped memory. The handler path uses
//! only atomics, `Cell`s in the static TLS block of this preloaded library (no
//! allocation on access), and async-signal-safe calls (`gettid`, `clock_gettime`,
//! `kill`, `abort`).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![allow(non_camel_case_types)]

pub mod buffers;
pub mod interpose;
#[allow(dead_code)] // PERFRING_HUP: only the C API sends budgets
#[path = "../../capi/src/overflow.rs"]
mod overflow;
mod writer;

use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};

use perfring::inject::{Action, InjectConfig, Rate};
use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::{SigtrapInfo, TrapHandler};
use perfring::notify::{
    Notification, NotifyKind, SignalCounter, Sigtrap, SigtrapCounter, ThreadSignal, Token,
};
use perfring::resolve::{resolve_event, TargetImage};
use perfring::{Builder, Counter, SampleType};

use buffers::{Entry, Pool, FRAMES, STACK_BYTES};
pub use overflow::perfring_overflow;

/// A `hook:` function: `void f(const perfring_overflow *, void *user)`.
type HookFn = unsafe extern "C" fn(*const perfring_overflow, *mut c_void);

/// `sig_data` of event `i` is `SIG_DATA_BASE + i`: apart from any counter the program
/// itself attaches to perfring's handler.
const SIG_DATA_BASE: u64 = 0x7065_7266_696e_0000;

/// What the handler reads: set once by the constructor, then read-only.
pub(crate) struct State {
    pid: i32,
    names: Vec<String>,
    /// The period of every sample: `-c N`, or a clock's fixed `1e9 / HZ` under `-F`.
    period: u64,
    pool: Option<Pool>,
    hooks: Vec<HookFn>,
    abort_at: u64,
    stop_at: u64,
    /// Thread-signal mode: the signal, and the builder of each event's per-thread
    /// counter.
    pub(crate) signal: Option<ThreadSignal>,
    builders: Vec<Builder>,
}

pub(crate) static STATE: OnceLock<State> = OnceLock::new();
/// Whether the counters are armed (the interposers then step in).
pub(crate) static ARMED: AtomicBool = AtomicBool::new(false);
/// Overflows in this process, every thread and event.
static TOTAL: AtomicU64 = AtomicU64::new(0);
static COUNTERS: Mutex<Vec<SigtrapCounter>> = Mutex::new(Vec::new());
/// Thread-signal mode: each thread's own counters, by tid.
static THREAD_COUNTERS: Mutex<Vec<(u32, SignalCounter)>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's stack top and the tid it belongs to (a raw `clone` without
    /// `CLONE_SETTLS` shares its parent's TLS, so the tid is checked).
    static STACK: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
    /// Index of this thread's record buffer, a hint checked against the slot's tid.
    static SLOT_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn gettid() -> u32 {
    // SAFETY: no preconditions; async-signal-safe.
    unsafe { libc::gettid() as u32 }
}

pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Notes the calling thread's stack top, for the frame-pointer walk, and claims its
/// record buffer. Normal context (the thread's start, or the constructor).
///
/// It also opens (and at once closes) a `dummy` event on the thread. Opening any event
/// on a task "unclones" its perf context: otherwise the kernel, switching between two
/// threads whose inherited contexts are clones of the same parent, may swap the two
/// contexts instead of scheduling them, and with them the counters' periods in
/// progress, so counts per thread would be off by one now and then (measured: 99 and
/// 101 where 100 were due). On Linux 6.12+ `PERF_SAMPLE_READ` already prevents the
/// swap (see `start`); this covers older kernels for `pthread_create`'d threads.
pub(crate) fn note_thread() {
    let tid = gettid();
    if ARMED.load(SeqCst) {
        if let Ok(b) = Counter::builder("dummy") {
            drop(b.open());
        }
    }
    // SAFETY: a zeroed pthread_attr_t is what pthread_getattr_np initialises.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_self is always valid; `attr` is writable.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) } == 0 {
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        // SAFETY: `attr` was initialised above; out-pointers are writable.
        if unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) } == 0 {
            STACK.set(((addr as u64).wrapping_add(size as u64), tid));
        }
        // SAFETY: initialised by pthread_getattr_np.
        unsafe { libc::pthread_attr_destroy(&mut attr) };
    }
    if let Some(pool) = STATE.get().and_then(|s| s.pool.as_ref()) {
        if let Some(i) = pool.slot_of(tid, usize::MAX) {
            SLOT_HINT.set(i);
        }
    }
    if let Some(st) = STATE.get().filter(|_| ARMED.load(SeqCst)) {
        arm_thread(st);
    }
}

/// Walks the frame-pointer chain from the interrupted frame into `frames`, reading
/// only inside `[sp, stack top)` of this thread. SIGNAL CONTEXT.
///
/// Like the kernel's walk, it starts from `fp`: at a function's first instructions
/// (an execute breakpoint on it) or in a leaf without a frame, that is still the
/// caller's frame and the direct caller is missing here. The writer puts it back
/// with the file's CFI from the stack copy ([`copy_stack`]), as the library's
/// unwinder does for every frame-pointer stack.
fn walk(h: &Hit, tid: u32, frames: &mut [u64; FRAMES]) -> usize {
    let (top, owner) = STACK.get();
    if owner != tid || top == 0 || h.sp == 0 {
        return 0; // unknown stack (a raw clone): the ip alone
    }
    let (lo, hi) = (h.sp, top);
    let mut n = 0;
    let mut fp = h.fp;
    while n < FRAMES && fp >= lo && fp.wrapping_add(16) <= hi && fp % 8 == 0 {
        // SAFETY: `fp..fp+16` lies in `[sp, top)`, the live part of this thread's
        // stack, which is mapped; it is 8-aligned.
        let (next, ret) = unsafe {
            let p = fp as *const u64;
            (
                std::ptr::read_volatile(p),
                std::ptr::read_volatile(p.add(1)),
            )
        };
        if ret == 0 {
            break;
        }
        if let Some(slot) = frames.get_mut(n) {
            *slot = ret;
        }
        n += 1;
        if next <= fp {
            break; // frames go up the stack; anything else is not a frame chain
        }
        fp = next;
    }
    n
}

/// Copies the top of this thread's stack, `[sp, min(sp + STACK_BYTES, top))`, into
/// `out`; returns the bytes copied. SIGNAL CONTEXT.
fn copy_stack(h: &Hit, tid: u32, out: &mut [u8; STACK_BYTES]) -> usize {
    let (top, owner) = STACK.get();
    if owner != tid || top == 0 || h.sp == 0 || h.sp >= top {
        return 0;
    }
    let n = ((top - h.sp) as usize).min(STACK_BYTES);
    // SAFETY: `[sp, sp + n)` lies in `[sp, top)`, the live part of this thread's stack,
    // which is mapped; `out` holds at least `n` bytes and does not overlap it (it is in
    // the record buffer, not on this stack).
    unsafe { std::ptr::copy_nonoverlapping(h.sp as *const u8, out.as_mut_ptr(), n) };
    n
}

/// What a notifier says about one overflow: the SIGTRAP's siginfo and context, or a
/// thread signal's (which knows no address or perf type: those are 0).
struct Hit {
    token: u64,
    ip: u64,
    sp: u64,
    fp: u64,
    addr: u64,
    perf_type: u32,
    flags: u32,
    fd: i32,
}

/// The SIGTRAP callback for every injected counter; `event` is its index.
/// SIGNAL CONTEXT, as [`act`].
fn on_sigtrap(info: &SigtrapInfo, event: usize) {
    act(
        &Hit {
            token: info.token.0,
            ip: info.ip,
            sp: info.sp,
            fp: info.fp,
            addr: info.addr,
            perf_type: info.perf_type,
            flags: info.flags,
            fd: -1,
        },
        event,
    );
}

/// The thread-signal callback (`PERFRING_SIGNAL`); `event` is the counter's index.
/// SIGNAL CONTEXT, as [`act`].
fn on_signal(n: &Notification, event: usize) {
    if n.kind != NotifyKind::Overflow {
        return;
    }
    act(
        &Hit {
            token: n.token.0,
            ip: n.ip,
            sp: n.sp,
            fp: n.fp,
            addr: 0,
            perf_type: 0,
            flags: 0,
            fd: n.fd,
        },
        event,
    );
}

/// Runs the actions for one overflow of event `event`, in the overflowing thread.
///
/// SIGNAL CONTEXT. May call: atomics, TLS `Cell`s, `gettid`, `clock_gettime`,
/// `kill`, `abort`, the user's hooks (async-signal-safe by contract). Never
/// allocates, locks, panics or unwinds.
fn act(h: &Hit, event: usize) {
    let Some(st) = STATE.get() else {
        return;
    };
    let n = TOTAL.fetch_add(1, Relaxed).wrapping_add(1);
    let tid = gettid();
    let time_ns = now_ns();
    if let Some(pool) = &st.pool {
        if let Some(i) = pool.slot_of(tid, SLOT_HINT.get()) {
            SLOT_HINT.set(i);
            if let Some(slot) = pool.slots().get(i) {
                slot.push(|e: &mut Entry| {
                    e.event = event as u32;
                    e.tid = tid;
                    e.ip = h.ip;
                    e.time_ns = time_ns;
                    e.nframes = walk(h, tid, &mut e.frames) as u64;
                    e.sp = h.sp;
                    e.bp = h.fp;
                    e.stack_len = copy_stack(h, tid, &mut e.stack) as u64;
                });
            }
        }
    }
    if !st.hooks.is_empty() {
        let o = perfring_overflow {
            token: h.token,
            ip: h.ip,
            addr: h.addr,
            sp: h.sp,
            fp: h.fp,
            time_ns,
            tid,
            fd: h.fd,
            kind: overflow::PERFRING_OVERFLOW,
            perf_type: h.perf_type,
            flags: h.flags,
        };
        for hook in &st.hooks {
            // SAFETY: a function the user named, with the documented signature.
            unsafe { hook(&o, std::ptr::null_mut()) };
        }
    }
    if n == st.stop_at {
        // SAFETY: kill is async-signal-safe; SIGSTOP stops every thread.
        unsafe { libc::kill(st.pid, libc::SIGSTOP) };
    }
    if n == st.abort_at {
        // SAFETY: abort is async-signal-safe; it raises SIGABRT (a core dump).
        unsafe { libc::abort() };
    }
}

/// Thread-signal mode: opens, attaches and enables the calling thread's own counters
/// (one per event). Normal context: the constructor, or a new thread's start.
fn arm_thread(st: &State) {
    let Some(sig) = st.signal else { return };
    let tid = gettid();
    let mut mine = Vec::new();
    for (i, b) in st.builders.iter().enumerate() {
        let armed = b.open().and_then(|c| {
            let sc = sig.attach(
                c,
                Token(SIG_DATA_BASE + i as u64),
                Handler::Callback(on_signal, i),
            )?;
            sc.counter().enable()?;
            Ok(sc)
        });
        match armed {
            Ok(sc) => mine.push(sc),
            Err(e) => {
                eprintln!("perfring-inject: thread {tid} is not observed: {e}");
                return;
            }
        }
    }
    let mut all = THREAD_COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    all.extend(mine.into_iter().map(|c| (tid, c)));
}

/// Thread-signal mode: closes the calling thread's counters as its start routine
/// returns (a thread ending in `pthread_exit` keeps them until the process exits).
pub(crate) fn disarm_thread() {
    if STATE.get().is_some_and(|s| s.signal.is_some()) {
        let tid = gettid();
        let mut all = THREAD_COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(t, _)| *t != tid);
    }
}

fn dlsym_hook(library: &str, symbol: &str) -> Result<HookFn, String> {
    let lib =
        CString::new(library).map_err(|_| format!("hook library '{library}' contains NUL"))?;
    let sym = CString::new(symbol).map_err(|_| format!("hook symbol '{symbol}' contains NUL"))?;
    // SAFETY: NUL-terminated path; dlopen runs the library's constructors.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local message or NULL.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: a NUL-terminated string owned by libc until the next dl call.
            unsafe { std::ffi::CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!(
            "hook: cannot load '{library}': {why}. Fix: give the path of a shared library \
             (./libhook.so, not libhook.so, for one in the current directory)"
        ));
    }
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    if f.is_null() {
        return Err(format!(
            "hook: '{library}' has no function '{symbol}'. Fix: export it \
             (extern \"C\", not static) or name the right symbol"
        ));
    }
    // SAFETY: the user's function, documented to have the HookFn signature.
    Ok(unsafe { std::mem::transmute::<*mut c_void, HookFn>(f) })
}

/// The constructor's work; `Err` is printed and ends the program (status 125).
fn start() -> Result<(), String> {
    let Some(config) = InjectConfig::from_env().map_err(|e| e.to_string())? else {
        return Ok(());
    };
    interpose::resolve();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let image = TargetImage::Process(pid);
    let events = config
        .events
        .iter()
        .map(|e| resolve_event(e, &image).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, String>>()?;
    let mut hooks = Vec::new();
    let (mut abort_at, mut stop_at, mut record) = (0, 0, false);
    for a in &config.actions {
        match a {
            Action::Record => record = true,
            Action::Hook { library, symbol } => hooks.push(dlsym_hook(library, symbol)?),
            Action::AbortAt(n) => abort_at = *n,
            Action::StopAt(n) => stop_at = *n,
        }
    }
    let builders: Vec<Builder> = events
        .into_iter()
        .enumerate()
        .map(|(i, event)| {
            let b = Counter::builder_for(event);
            let b = match config.rate {
                Rate::Period(p) => b.period(p),
                Rate::Frequency(hz) => b.frequency(hz),
            };
            match config.signal {
                // One counter per thread, signalling that thread.
                Some(_) => b.wakeup_events(1),
                None => b
                    .sigtrap(SIG_DATA_BASE + i as u64)
                    .inherit(true)
                    .inherit_thread(true)
                    .remove_on_exec(true),
            }
        })
        .collect();
    let signal = match config.signal {
        // chain: a handler the program had (inherited SIG_IGN aside) keeps its signals.
        Some(sig) => Some(
            ThreadSignal::builder()
                .signal(sig)
                .chain(true)
                .install()
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let state = State {
        pid,
        names: config.events.clone(),
        period: config.sample_period(),
        pool: record.then(Pool::new),
        hooks,
        abort_at,
        stop_at,
        signal,
        builders,
    };
    if STATE.set(state).is_err() {
        return Ok(()); // already armed (constructor run twice)
    }
    let Some(st) = STATE.get() else {
        return Ok(());
    };
    if record {
        // Before the counters: the writer thread is not one of the program's and must
        // not inherit them.
        writer::start(st, &config.output, config.format)?;
    }
    note_thread();
    if st.signal.is_some() {
        ARMED.store(true, SeqCst);
        arm_thread(st);
        if THREAD_COUNTERS.lock().map(|c| c.is_empty()).unwrap_or(true) {
            return Err("the main thread's counters could not be armed (see above)".into());
        }
    } else {
        arm_sigtrap(st)?;
    }
    // SAFETY: a plain extern "C" fn with no arguments, run at exit().
    unsafe { libc::atexit(at_exit) };
    Ok(())
}

/// Sigtrap mode: one inherited counter per event, opened in the main thread.
fn arm_sigtrap(st: &State) -> Result<(), String> {
    let trap = Sigtrap::install().map_err(|e| e.to_string())?;
    if Sigtrap::chained().0 == libc::SIG_DFL {
        // SAFETY: our own function with the SA_SIGINFO signature, always loaded.
        unsafe { Sigtrap::chain_to(interpose::default_trap_addr(), libc::SA_SIGINFO) };
    }
    let mut counters = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    for (i, b) in st.builders.iter().enumerate() {
        // PERF_SAMPLE_READ on an inherited counter (Linux 6.12+) keeps the kernel from
        // swapping the perf contexts of two threads at a context switch (it counts
        // such events in `nr_no_switch_fast`): a swap would hand one thread's period
        // in progress to another and make per-thread counts inexact. Older kernels
        // refuse the combination (EINVAL); there `note_thread` unclones instead.
        // (The kernel wants PERF_SAMPLE_TID with it.)
        let counter = match b.clone().sample(SampleType::READ | SampleType::TID).open() {
            Ok(c) => c,
            Err(_) => b.open().map_err(|e| e.to_string())?,
        };
        let counter = trap
            .attach(counter, TrapHandler::Callback(on_sigtrap, i))
            .map_err(|e| e.to_string())?;
        counters.push(counter);
    }
    ARMED.store(true, SeqCst);
    for c in counters.iter() {
        c.counter().enable().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Enables or disables every counter of the process (in sigtrap mode the parent's
/// switch covers every inherited child counter too).
fn set_counters(on: bool) {
    let set = |c: &Counter| {
        let _ = if on { c.enable() } else { c.disable() };
    };
    if let Ok(counters) = COUNTERS.lock() {
        counters.iter().for_each(|c| set(c.counter()));
    }
    if let Ok(counters) = THREAD_COUNTERS.lock() {
        counters.iter().for_each(|(_, c)| set(c.counter()));
    }
}

/// Whether this is the armed process itself (not a forked or vforked child, which
/// shares its memory or a copy of it but has no writer thread).
fn is_armed_process() -> Option<&'static State> {
    let st = STATE.get()?;
    // SAFETY: getpid has no preconditions.
    (ARMED.load(SeqCst) && unsafe { libc::getpid() } == st.pid).then_some(st)
}

/// Before this process image `exec`s: stop the counters and write out every record
/// still buffered, which the exec would discard. Returns whether it stopped them, so
/// that [`after_failed_exec`] restarts them. Normal context.
pub(crate) fn before_exec() -> bool {
    let r = catch_unwind(|| {
        if is_armed_process().is_none() || EXITED.load(SeqCst) {
            return false;
        }
        set_counters(false);
        writer::flush_now();
        true
    });
    r.unwrap_or(false)
}

/// The exec failed and the program goes on: count again.
pub(crate) fn after_failed_exec() {
    let _ = catch_unwind(|| set_counters(true));
}

/// Whether [`at_exit`] ran.
static EXITED: AtomicBool = AtomicBool::new(false);

/// At `exit()` (and at `_exit`, interposed): stop the counters, let the writer drain
/// every buffer, write the summary. A forked child (which has no writer thread) does
/// nothing; so does a second call.
pub(crate) extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        if is_armed_process().is_none() || EXITED.swap(true, SeqCst) {
            return;
        }
        set_counters(false);
        writer::finish(TOTAL.load(SeqCst));
    });
}

extern "C" fn init() {
    let r = catch_unwind(start);
    let msg = match r {
        Ok(Ok(())) => return,
        Ok(Err(msg)) => msg,
        Err(_) => "internal error (a panic); please report it".to_string(),
    };
    eprintln!("perfring-inject: {msg}");
    // SAFETY: _exit has no preconditions; the program must not run unobserved
    // when it was asked to be.
    unsafe { libc::_exit(125) };
}

/// Runs [`init`] when the library is loaded, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
