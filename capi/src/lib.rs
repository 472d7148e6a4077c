//! perfring's C API: `libperfring.so`, `libperfring.a` and `include/perfring.h`.
//!
//! A thin layer over the Rust crate: every function converts its arguments, calls
//! [`perfring_core`] (`Counter`, `ring::Ring`, `notify::{Poller, ThreadSignal, Sigtrap,
//! Budget}`, `records`) and turns the result into a status code. Nothing here talks to
//! the kernel itself.
//!
//! - **Handles** (`perfring_counter`, `perfring_poller`) are opaque and owned by the
//!   caller, who frees them with their `_close`/`_free` function.
//! - **Errors**: functions return `PERFRING_OK` (0) or a negative `PERFRING_E_*` code,
//!   and `perfring_last_error()` then gives this thread's message, which names the
//!   cause and the fix (perfring's `Error` display).
//! - **No panic crosses the boundary**: every entry point runs inside `catch_unwind`
//!   (a panic becomes `PERFRING_E_PANIC`), and the signal-context trampolines contain
//!   no code that can panic.
//! - **Signal context**: `perfring_overflow_fn` callbacks run inside a signal handler
//!   on the interrupted thread and must be async-signal-safe (no `malloc`, `printf`,
//!   locks); `perfring_record_fn` callbacks run in normal context, from the drain.
//!
//! # Safety
//! Every `extern "C"` function trusts its pointer arguments as the header documents
//! them (a handle from this library, not yet freed; a NUL-terminated string; a
//! writable out-pointer). Null pointers are checked and rejected. The trampolines
//! read a `Thunk` that the counter handle keeps alive until its registration is
//! retired (the notifier waits for running handlers before that).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![allow(non_camel_case_types)]

mod overflow;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use perfring_core::notify::signal::Handler;
use perfring_core::notify::sigtrap::{SigtrapInfo, TrapHandler};
use perfring_core::notify::{
    Budget, Notification, NotifyKind, Poller, SignalCounter, Sigtrap, SigtrapCounter, ThreadSignal,
    Token,
};
use perfring_core::records::{Layout, Record, RecordKind};
use perfring_core::resolve::{resolve_event, TargetImage};
use perfring_core::ring::{Ring, RingSize};
use perfring_core::{Builder, Counter, Error, ErrorKind, SampleType, Scope};

pub use overflow::{perfring_overflow, PERFRING_HUP, PERFRING_OVERFLOW};

/// Success.
pub const PERFRING_OK: c_int = 0;
/// A bad argument: a null pointer, a string that is not UTF-8, a handle in the wrong
/// state (e.g. no ring mapped), an option the kernel rejects (`EINVAL`).
pub const PERFRING_E_INVALID: c_int = -1;
/// Access denied: `perf_event_paranoid`, a missing capability, seccomp.
pub const PERFRING_E_PERMISSION: c_int = -2;
/// A hardware event on a machine without a usable PMU.
pub const PERFRING_E_NO_PMU: c_int = -3;
/// The kernel does not support what was asked.
pub const PERFRING_E_UNSUPPORTED: c_int = -4;
/// No such thread, CPU, PMU, symbol or file.
pub const PERFRING_E_NOT_FOUND: c_int = -5;
/// A resource is in use: breakpoint slots, a signal, a registry slot.
pub const PERFRING_E_BUSY: c_int = -6;
/// The event string could not be parsed or resolved.
pub const PERFRING_E_BAD_EVENT: c_int = -7;
/// A limit was hit: `RLIMIT_NOFILE`, `perf_event_mlock_kb`/`RLIMIT_MEMLOCK`.
pub const PERFRING_E_LIMIT: c_int = -8;
/// Not allowed on an inherited counter (e.g. a `REFRESH` budget).
pub const PERFRING_E_INHERITED: c_int = -9;
/// A signal could not be set up.
pub const PERFRING_E_SIGNAL: c_int = -10;
/// A record could not be decoded.
pub const PERFRING_E_DECODE: c_int = -11;
/// Any other operating-system error.
pub const PERFRING_E_IO: c_int = -12;
/// The sample field asked for is not in the counter's `sample_type`, or the record is
/// not a sample.
pub const PERFRING_E_ABSENT: c_int = -13;
/// A bug inside perfring (a Rust panic, caught at the boundary).
pub const PERFRING_E_PANIC: c_int = -14;

/// `perfring_options.flags`: count child threads and processes created later.
pub const PERFRING_OPEN_INHERIT: u32 = 1;
/// With `PERFRING_OPEN_INHERIT`: only threads (`CLONE_THREAD`), not child processes.
pub const PERFRING_OPEN_INHERIT_THREAD: u32 = 2;
/// Overflows raise a synchronous `SIGTRAP` in the overflowing thread (Linux 5.13), with
/// `sig_data` as its `si_perf_data`; implies `remove_on_exec`.
pub const PERFRING_OPEN_SIGTRAP: u32 = 4;
/// Open enabled (default: disabled, so that a ring and a notifier are attached first).
pub const PERFRING_OPEN_ENABLED: u32 = 8;
/// Do not count in the kernel (`exclude_kernel`), e.g. under `perf_event_paranoid` 2.
pub const PERFRING_OPEN_EXCLUDE_KERNEL: u32 = 16;

/// How to open a counter; start from `perfring_options_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct perfring_options {
    /// Overflow every `period` events (perf's `-c`); 0 to use `frequency`.
    pub period: u64,
    /// Or about `frequency` overflows per second (perf's `-F`); 0 for neither.
    pub frequency: u64,
    /// `PERF_SAMPLE_*` bits from `<linux/perf_event.h>` for the ring's sample records.
    pub sample_type: u64,
    /// `PERFRING_OPEN_*` bits.
    pub flags: u32,
    /// Wake the poller (and, for thread signals, signal) every this many samples (0: 1).
    pub wakeup_events: u32,
    /// Thread or process to watch: 0 for the calling thread.
    pub pid: i32,
    /// CPU to watch: -1 for any.
    pub cpu: i32,
    /// `si_perf_data` for `PERFRING_OPEN_SIGTRAP`: tells counters apart in the handler.
    pub sig_data: u64,
}

/// Traffic through a counter or a poller token (`perfring_counter_accounting`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct perfring_accounting {
    /// Notifications received: wake-ups, signals, SIGTRAPs.
    pub notifications: u64,
    /// Of which `POLL_HUP` (a budget ran out).
    pub hups: u64,
    /// `PERF_RECORD_SAMPLE`s drained from the ring: overflows recorded.
    pub samples: u64,
    /// Records drained, every type.
    pub records: u64,
    /// Records the kernel dropped because the ring was full.
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE`s: the kernel silenced the counter for a while.
    pub throttled: u64,
}

/// A counter, with its ring and notifier once attached. Opaque.
pub struct perfring_counter {
    builder: Builder,
    layout: Layout,
    // Dropped before `thunk`: the notifier retires its registration (waiting for
    // handlers inside it) before the thunk they read is freed.
    state: State,
    ring: Option<Ring>,
    ring_pages: usize,
    thunk: Option<Box<Thunk>>,
}

enum State {
    Plain(Counter),
    Signal(SignalCounter),
    Sigtrap(SigtrapCounter),
    /// Attaching a notifier failed, and the counter was closed with it.
    Gone,
}

impl perfring_counter {
    fn counter(&self) -> Result<&Counter, Fail> {
        match &self.state {
            State::Plain(c) => Ok(c),
            State::Signal(s) => Ok(s.counter()),
            State::Sigtrap(s) => Ok(s.counter()),
            State::Gone => Err(gone()),
        }
    }
}

fn gone() -> Fail {
    invalid(
        "perfring counter",
        "the counter was closed when attaching its notifier failed",
        "close this handle and open a new counter",
    )
}

/// The poll driver (epoll over many counters' rings). Opaque.
pub struct perfring_poller {
    poller: Poller,
    layouts: HashMap<u64, Layout>,
    events: Vec<Notification>,
}

/// One record, borrowed from the ring for the duration of a `perfring_record_fn` call.
/// Opaque; read it with `perfring_record_*` and `perfring_sample_*`.
pub struct perfring_record {
    bytes: *const u8,
    len: usize,
    layout: *const Layout,
}

/// A callback **in signal context**, on the notified thread: async-signal-safe code
/// only (no `malloc`, `printf`, locks). `user` is the pointer given at attach.
pub type perfring_overflow_fn =
    Option<unsafe extern "C" fn(overflow: *const perfring_overflow, user: *mut c_void)>;

/// A callback in normal context for each drained record; `rec` is valid only during
/// the call. `token` is the poller token (0 for `perfring_counter_drain`).
pub type perfring_record_fn =
    Option<unsafe extern "C" fn(token: u64, rec: *const perfring_record, user: *mut c_void)>;

struct Thunk {
    cb: unsafe extern "C" fn(*const perfring_overflow, *mut c_void),
    user: *mut c_void,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn code_of(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::PermissionDenied => PERFRING_E_PERMISSION,
        ErrorKind::NoPmu => PERFRING_E_NO_PMU,
        ErrorKind::Unsupported => PERFRING_E_UNSUPPORTED,
        ErrorKind::NotFound => PERFRING_E_NOT_FOUND,
        ErrorKind::InvalidArgument => PERFRING_E_INVALID,
        ErrorKind::TooManyFiles | ErrorKind::MlockLimit => PERFRING_E_LIMIT,
        ErrorKind::Busy => PERFRING_E_BUSY,
        ErrorKind::Inherited => PERFRING_E_INHERITED,
        ErrorKind::BadEvent => PERFRING_E_BAD_EVENT,
        ErrorKind::Decode => PERFRING_E_DECODE,
        ErrorKind::Signal => PERFRING_E_SIGNAL,
        _ => PERFRING_E_IO,
    }
}

/// A failure on its way to C: a code and the message for `perfring_last_error`.
struct Fail(c_int, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail(code_of(e.kind()), e.to_string())
    }
}

fn invalid(op: &str, why: &str, fix: &str) -> Fail {
    Fail(PERFRING_E_INVALID, format!("{op}: {why}. Fix: {fix}"))
}

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs an entry point's body: catches panics, records the message of a failure.
fn guard(body: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(code, msg))) => {
            set_last_error(msg);
            code
        }
        Err(_) => {
            set_last_error(
                "perfring: internal error (a Rust panic, caught at the C boundary). \
                 Fix: report it with the call that failed"
                    .into(),
            );
            PERFRING_E_PANIC
        }
    }
}

fn nonnull<'a, T>(p: *const T, op: &str, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: the caller passes a pointer to a live T or null (module Safety).
    unsafe { p.as_ref() }
        .ok_or_else(|| invalid(op, &format!("{what} is NULL"), "pass a valid pointer"))
}

fn nonnull_mut<'a, T>(p: *mut T, op: &str, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller passes a pointer to a live, unaliased T or null (module Safety).
    unsafe { p.as_mut() }
        .ok_or_else(|| invalid(op, &format!("{what} is NULL"), "pass a valid pointer"))
}

fn str_arg<'a>(p: *const c_char, op: &str, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(invalid(
            op,
            &format!("{what} is NULL"),
            "pass a NUL-terminated string",
        ));
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract (module Safety).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        invalid(
            op,
            &format!("{what} is not UTF-8"),
            "pass an ASCII event string",
        )
    })
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    unsafe { libc::gettid() as u32 }
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable; clock_gettime is async-signal-safe (POSIX).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Thread-signal trampoline. SIGNAL CONTEXT: builds a plain struct, calls the C
/// callback; no allocation, locks or panicking operations.
fn signal_trampoline(n: &Notification, data: usize) {
    // SAFETY: `data` is the address of the Thunk the counter handle keeps alive while
    // registered (module Safety).
    let t = unsafe { &*(data as *const Thunk) };
    let o = perfring_overflow {
        token: n.token.0,
        ip: n.ip,
        sp: n.sp,
        fp: n.fp,
        time_ns: now_ns(),
        tid: gettid(),
        fd: n.fd,
        kind: if n.kind == NotifyKind::Hup {
            PERFRING_HUP
        } else {
            PERFRING_OVERFLOW
        },
        ..perfring_overflow::default()
    };
    // SAFETY: a C function pointer given at attach, called with a valid struct and
    // the caller's own `user` pointer.
    unsafe { (t.cb)(&o, t.user) };
}

/// Sigtrap trampoline. SIGNAL CONTEXT: as `signal_trampoline`.
fn sigtrap_trampoline(i: &SigtrapInfo, data: usize) {
    // SAFETY: as in `signal_trampoline`.
    let t = unsafe { &*(data as *const Thunk) };
    let o = perfring_overflow {
        token: i.token.0,
        ip: i.ip,
        addr: i.addr,
        sp: i.sp,
        fp: i.fp,
        time_ns: now_ns(),
        tid: gettid(),
        fd: -1,
        kind: PERFRING_OVERFLOW,
        perf_type: i.perf_type,
        flags: i.flags,
    };
    // SAFETY: as in `signal_trampoline`.
    unsafe { (t.cb)(&o, t.user) };
}

/// The library's version, `"MAJOR.MINOR.PATCH"` (the crates' version): a static,
/// NUL-terminated string, never NULL.
#[no_mangle]
pub extern "C" fn perfring_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"",
        };
    VERSION.as_ptr()
}

/// The message of this thread's last failed call: what failed, why, and the fix.
/// Never NULL (empty if nothing failed); valid until the thread's next failing call.
#[no_mangle]
pub extern "C" fn perfring_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

/// Fills `opts` with the defaults: no sampling period, `PERF_SAMPLE_IP|TID|TIME`,
/// calling thread, any CPU, disabled, one wake-up per sample.
///
/// # Safety
/// `opts` is NULL (`PERFRING_E_INVALID`) or writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_options_init(opts: *mut perfring_options) -> c_int {
    guard(|| {
        let o = nonnull_mut(opts, "perfring_options_init", "opts")?;
        *o = perfring_options {
            period: 0,
            frequency: 0,
            sample_type: (SampleType::IP | SampleType::TID | SampleType::TIME).bits(),
            flags: 0,
            wakeup_events: 1,
            pid: 0,
            cpu: -1,
            sig_data: 0,
        };
        Ok(PERFRING_OK)
    })
}

fn builder_from(event: &str, o: &perfring_options) -> Result<Builder, Fail> {
    // `mem:SYMBOL:x` and `uprobe:` resolve against this process's own executable;
    // perf's syntax parses as it is.
    let pid = std::process::id() as libc::pid_t;
    let ev = resolve_event(event, &TargetImage::Process(pid))?;
    let mut b = Counter::builder_for(ev)
        .sample(SampleType::from_bits(o.sample_type))
        .wakeup_events(o.wakeup_events.max(1))
        .enabled(o.flags & PERFRING_OPEN_ENABLED != 0)
        .inherit(o.flags & PERFRING_OPEN_INHERIT != 0)
        .inherit_thread(o.flags & PERFRING_OPEN_INHERIT_THREAD != 0)
        .exclude_kernel(o.flags & PERFRING_OPEN_EXCLUDE_KERNEL != 0);
    if o.period != 0 && o.frequency != 0 {
        return Err(invalid(
            "perfring_counter_open",
            "both period and frequency are set",
            "set one of them and leave the other 0",
        ));
    }
    if o.period != 0 {
        b = b.period(o.period);
    } else if o.frequency != 0 {
        b = b.frequency(o.frequency);
    }
    if o.flags & PERFRING_OPEN_SIGTRAP != 0 {
        b = b.sigtrap(o.sig_data);
    }
    b = b.target(match (o.pid, o.cpu) {
        (0, -1) => Scope::CallingThread,
        (p, -1) => Scope::Thread(p),
        (-1, c) => Scope::Cpu(c),
        (0, c) => Scope::ThreadOnCpu(0, c),
        (p, c) => Scope::ThreadOnCpu(p, c),
    });
    Ok(b)
}

/// Opens a counter on `event` — perf's syntax (`cpu-clock:u`, `mem:0x401000:x`,
/// `sched:sched_switch`) plus `mem:SYMBOL[+OFF][:ACCESS]` resolved in this process's
/// executable — configured by `opts` (NULL: `perfring_options_init`'s defaults).
///
/// # Safety
/// `event` is a NUL-terminated string; `opts` NULL or valid; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_open(
    event: *const c_char,
    opts: *const perfring_options,
    out: *mut *mut perfring_counter,
) -> c_int {
    guard(|| {
        const OP: &str = "perfring_counter_open";
        let out = nonnull_mut(out, OP, "out")?;
        *out = std::ptr::null_mut();
        let event = str_arg(event, OP, "event")?;
        let mut defaults = std::mem::MaybeUninit::<perfring_options>::uninit();
        let o = if opts.is_null() {
            // SAFETY: a valid, writable pointer to uninitialised options.
            unsafe { perfring_options_init(defaults.as_mut_ptr()) };
            // SAFETY: just initialised by perfring_options_init.
            unsafe { defaults.assume_init_ref() }
        } else {
            nonnull(opts, OP, "opts")?
        };
        let builder = builder_from(event, o)?;
        let layout = Layout::new(builder.attr()).map_err(|e| {
            invalid(
                OP,
                &format!("sample_type {:#x}: {e}", o.sample_type),
                "drop the sample bits perfring cannot decode",
            )
        })?;
        let counter = builder.open()?;
        *out = Box::into_raw(Box::new(perfring_counter {
            builder,
            layout,
            state: State::Plain(counter),
            ring: None,
            ring_pages: 0,
            thunk: None,
        }));
        Ok(PERFRING_OK)
    })
}

/// Closes a counter: detaches its notifier (waiting for a handler inside it), unmaps
/// its ring, closes its fd. NULL is ignored.
///
/// # Safety
/// `c` is NULL or a handle from `perfring_counter_open`, not used again.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_close(c: *mut perfring_counter) {
    if !c.is_null() {
        // SAFETY: a handle made by Box::into_raw, given back once (contract).
        let b = unsafe { Box::from_raw(c) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(b)));
    }
}

fn with_counter(
    c: *mut perfring_counter,
    op: &str,
    f: impl FnOnce(&mut perfring_counter) -> Result<c_int, Fail>,
) -> c_int {
    guard(|| f(nonnull_mut(c, op, "counter")?))
}

/// The counter's file descriptor (for your own `poll`/`epoll`), or a negative code.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_fd(c: *mut perfring_counter) -> c_int {
    with_counter(c, "perfring_counter_fd", |c| Ok(c.counter()?.as_raw_fd()))
}

/// `PERF_EVENT_IOC_ENABLE`.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_enable(c: *mut perfring_counter) -> c_int {
    with_counter(c, "perfring_counter_enable", |c| {
        c.counter()?.enable()?;
        Ok(PERFRING_OK)
    })
}

/// `PERF_EVENT_IOC_DISABLE`.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_disable(c: *mut perfring_counter) -> c_int {
    with_counter(c, "perfring_counter_disable", |c| {
        c.counter()?.disable()?;
        Ok(PERFRING_OK)
    })
}

/// Writes the counter's current value (scaled for multiplexing) to `value`.
///
/// # Safety
/// `c` is NULL or a live handle; `value` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_read(c: *mut perfring_counter, value: *mut u64) -> c_int {
    with_counter(c, "perfring_counter_read", |c| {
        let v = nonnull_mut(value, "perfring_counter_read", "value")?;
        *v = c.counter()?.read()?.scaled() as u64;
        Ok(PERFRING_OK)
    })
}

/// A budget: `PERF_EVENT_IOC_REFRESH(n)` enables the counter for `n` overflows, the
/// last notified as `PERFRING_HUP`, after which it disables itself.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_refresh(c: *mut perfring_counter, n: u32) -> c_int {
    with_counter(c, "perfring_counter_refresh", |c| {
        c.counter()?.refresh(n)?;
        Ok(PERFRING_OK)
    })
}

/// Gives a spent budget `n` more overflows: `REFRESH(n)`, or — for breakpoints, whose
/// refresh the kernel ignores once spent — reopens the counter with the same options
/// (the fd changes; the notifier and ring follow). Returns 1 if it reopened, 0 if not.
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_rearm(c: *mut perfring_counter, n: u32) -> c_int {
    with_counter(c, "perfring_counter_rearm", |c| {
        let budget = Budget::new(c.builder.clone(), n);
        let reopened = match &mut c.state {
            State::Plain(k) => budget.rearm(k)?,
            State::Signal(s) => s.rearm(&budget)?,
            State::Sigtrap(s) => s.rearm(&budget)?,
            State::Gone => return Err(gone()),
        };
        if reopened && c.ring.is_some() {
            c.ring = None;
            c.ring = Some(Ring::map(c.counter()?, RingSize::Pages(c.ring_pages))?);
        }
        Ok(c_int::from(reopened))
    })
}

/// Maps the counter's ring: `pages` data pages (a power of two; 0 for 64).
///
/// # Safety
/// `c` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_map_ring(c: *mut perfring_counter, pages: u32) -> c_int {
    with_counter(c, "perfring_counter_map_ring", |c| {
        let pages = if pages == 0 { 64 } else { pages as usize };
        c.ring = Some(Ring::map(c.counter()?, RingSize::Pages(pages))?);
        c.ring_pages = pages;
        Ok(PERFRING_OK)
    })
}

fn deliver(
    cb: unsafe extern "C" fn(u64, *const perfring_record, *mut c_void),
    user: *mut c_void,
    token: u64,
    bytes: &[u8],
    layout: &Layout,
) {
    let rec = perfring_record {
        bytes: bytes.as_ptr(),
        len: bytes.len(),
        layout,
    };
    // SAFETY: a C function pointer from the caller; `rec` lives for the call.
    unsafe { cb(token, &rec, user) };
}

/// Drains the counter's ring to `data_head`, calling `cb` for each record in ring
/// order; writes how many to `count` (may be NULL). One notification may stand for
/// many overflows: always drain, and count samples from the records.
///
/// # Safety
/// `c` is NULL or a live handle; `cb` NULL (records are skipped) or valid.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_drain(
    c: *mut perfring_counter,
    cb: perfring_record_fn,
    user: *mut c_void,
    count: *mut u64,
) -> c_int {
    with_counter(c, "perfring_counter_drain", |c| {
        let layout = &c.layout;
        let ring = c.ring.as_mut().ok_or_else(|| {
            invalid(
                "perfring_counter_drain",
                "the counter has no ring",
                "call perfring_counter_map_ring first",
            )
        })?;
        let mut n = 0u64;
        let mut batch = ring.batch();
        while let Some(r) = batch.next() {
            let r = r?;
            n += 1;
            if let Some(cb) = cb {
                deliver(cb, user, 0, r.bytes(), layout);
            }
        }
        drop(batch);
        if !count.is_null() {
            // SAFETY: non-null and writable by contract.
            unsafe { *count = n };
        }
        Ok(PERFRING_OK)
    })
}

/// Notifications and ring totals of a counter.
///
/// # Safety
/// `c` is NULL or a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_accounting(
    c: *mut perfring_counter,
    out: *mut perfring_accounting,
) -> c_int {
    with_counter(c, "perfring_counter_accounting", |c| {
        let out = nonnull_mut(out, "perfring_counter_accounting", "out")?;
        let stats = c.ring.as_ref().map(Ring::stats);
        let a = match &c.state {
            State::Plain(_) | State::Gone => perfring_core::Accounting::new(0, 0, stats.as_ref()),
            State::Signal(s) => s.accounting(stats.as_ref()),
            State::Sigtrap(s) => s.accounting(stats.as_ref()),
        };
        *out = perfring_accounting {
            notifications: a.notifications,
            hups: a.hups,
            samples: a.samples,
            records: a.records,
            lost: a.lost,
            throttled: a.throttled,
        };
        Ok(PERFRING_OK)
    })
}

fn take_plain(c: &mut perfring_counter, op: &str) -> Result<Counter, Fail> {
    match std::mem::replace(&mut c.state, State::Gone) {
        State::Plain(counter) => Ok(counter),
        other => {
            c.state = other;
            Err(invalid(
                op,
                "the counter already has a notifier",
                "attach one notifier per counter",
            ))
        }
    }
}

/// Sends the counter's overflow signals to thread `tid` (0: the calling thread) as the
/// real-time signal `signo` (0: the first free one), calling `cb(overflow, user)`
/// **in signal context** on that thread for each. With `chain` set, signals that are
/// not perfring's go to a handler already installed for `signo`. Writes the signal
/// used to `signo_out` (may be NULL).
///
/// # Safety
/// `c` is NULL or a live handle; `cb` NULL (signals are only counted, see
/// `perfring_counter_notifications`) or valid and async-signal-safe; `user` stays
/// valid until the counter is closed.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_attach_signal(
    c: *mut perfring_counter,
    signo: c_int,
    chain: c_int,
    tid: i32,
    token: u64,
    cb: perfring_overflow_fn,
    user: *mut c_void,
    signo_out: *mut c_int,
) -> c_int {
    with_counter(c, "perfring_counter_attach_signal", |c| {
        const OP: &str = "perfring_counter_attach_signal";
        let mut options = ThreadSignal::builder().chain(chain != 0);
        if signo != 0 {
            if !(libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo) {
                return Err(Error::new(
                    perfring_core::ErrorKind::Signal,
                    OP,
                    format!("{signo} is not a real-time signal"),
                )
                .with_fix("pass 0 (a free one) or one in SIGRTMIN..=SIGRTMAX")
                .into());
            }
            options = options.signal(perfring_core::Signal::new(signo)?);
        }
        let sig = options.install()?;
        let tid = if tid == 0 { gettid() as i32 } else { tid };
        let thunk = cb.map(|cb| Box::new(Thunk { cb, user }));
        let handler = match &thunk {
            Some(t) => Handler::Callback(signal_trampoline, &**t as *const Thunk as usize),
            None => Handler::Count,
        };
        let counter = take_plain(c, OP)?;
        let sc = sig.attach_to(counter, Token(token), tid, handler)?;
        c.state = State::Signal(sc);
        c.thunk = thunk;
        if !signo_out.is_null() {
            // SAFETY: non-null and writable by contract.
            unsafe { *signo_out = sig.signal().number() };
        }
        Ok(PERFRING_OK)
    })
}

/// Routes the counter's synchronous SIGTRAPs (it must be opened with
/// `PERFRING_OPEN_SIGTRAP`) to `cb(overflow, user)`, called **in signal context** on
/// the thread that overflowed. Installs perfring's SIGTRAP handler once per process;
/// other SIGTRAPs (a debugger's) go to the handler that was there before.
///
/// # Safety
/// As `perfring_counter_attach_signal`.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_attach_sigtrap(
    c: *mut perfring_counter,
    cb: perfring_overflow_fn,
    user: *mut c_void,
) -> c_int {
    with_counter(c, "perfring_counter_attach_sigtrap", |c| {
        const OP: &str = "perfring_counter_attach_sigtrap";
        if c.builder.attr().sigtrap() == 0 {
            return Err(invalid(
                OP,
                "the counter was not opened with PERFRING_OPEN_SIGTRAP",
                "set PERFRING_OPEN_SIGTRAP (and sig_data) in perfring_options.flags",
            ));
        }
        let trap = Sigtrap::install()?;
        let thunk = cb.map(|cb| Box::new(Thunk { cb, user }));
        let handler = match &thunk {
            Some(t) => TrapHandler::Callback(sigtrap_trampoline, &**t as *const Thunk as usize),
            None => TrapHandler::Count,
        };
        let counter = take_plain(c, OP)?;
        let st = trap.attach(counter, handler)?;
        c.state = State::Sigtrap(st);
        c.thunk = thunk;
        Ok(PERFRING_OK)
    })
}

/// Notifications (signals or SIGTRAPs) the counter's notifier received so far.
///
/// # Safety
/// `c` is NULL or a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_counter_notifications(
    c: *mut perfring_counter,
    out: *mut u64,
) -> c_int {
    with_counter(c, "perfring_counter_notifications", |c| {
        let out = nonnull_mut(out, "perfring_counter_notifications", "out")?;
        *out = match &c.state {
            State::Plain(_) | State::Gone => 0,
            State::Signal(s) => s.notifications(),
            State::Sigtrap(s) => s.notifications(),
        };
        Ok(PERFRING_OK)
    })
}

/// A new poll driver.
///
/// # Safety
/// `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_new(out: *mut *mut perfring_poller) -> c_int {
    guard(|| {
        let out = nonnull_mut(out, "perfring_poller_new", "out")?;
        *out = std::ptr::null_mut();
        *out = Box::into_raw(Box::new(perfring_poller {
            poller: Poller::new()?,
            layouts: HashMap::new(),
            events: Vec::new(),
        }));
        Ok(PERFRING_OK)
    })
}

/// Frees a poller and every counter registered with it. NULL is ignored.
///
/// # Safety
/// `p` is NULL or a live poller, not used again.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_free(p: *mut perfring_poller) {
    if !p.is_null() {
        // SAFETY: made by Box::into_raw, given back once (contract).
        let b = unsafe { Box::from_raw(p) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(b)));
    }
}

fn with_poller(
    p: *mut perfring_poller,
    op: &str,
    f: impl FnOnce(&mut perfring_poller) -> Result<c_int, Fail>,
) -> c_int {
    guard(|| f(nonnull_mut(p, op, "poller")?))
}

/// Registers a counter (with a ring, no notifier) under `token`. The poller takes the
/// counter: `c` is freed by this call whether it succeeds or not.
///
/// # Safety
/// `p` a live poller; `c` NULL or a live counter handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_add(
    p: *mut perfring_poller,
    token: u64,
    c: *mut perfring_counter,
) -> c_int {
    with_poller(p, "perfring_poller_add", |p| {
        const OP: &str = "perfring_poller_add";
        if c.is_null() {
            return Err(invalid(
                OP,
                "counter is NULL",
                "pass a handle from perfring_counter_open",
            ));
        }
        // SAFETY: a live handle from Box::into_raw, handed over (contract).
        let c = unsafe { Box::from_raw(c) };
        let perfring_counter {
            layout,
            state,
            ring,
            ..
        } = *c;
        let State::Plain(counter) = state else {
            return Err(invalid(
                OP,
                "the counter already has a signal notifier",
                "register a counter without a notifier",
            ));
        };
        let ring = ring.ok_or_else(|| {
            invalid(
                OP,
                "the counter has no ring",
                "call perfring_counter_map_ring first",
            )
        })?;
        p.poller.register(Token(token), counter, ring)?;
        p.layouts.insert(token, layout);
        Ok(PERFRING_OK)
    })
}

fn poller_counter<'a>(p: &'a perfring_poller, token: u64, op: &str) -> Result<&'a Counter, Fail> {
    p.poller.counter(Token(token)).ok_or_else(|| {
        invalid(
            op,
            &format!("no counter is registered under token {token}"),
            "use the token given to perfring_poller_add",
        )
    })
}

/// Enables the counter registered under `token`.
///
/// # Safety
/// `p` NULL or a live poller.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_enable(p: *mut perfring_poller, token: u64) -> c_int {
    with_poller(p, "perfring_poller_enable", |p| {
        poller_counter(p, token, "perfring_poller_enable")?.enable()?;
        Ok(PERFRING_OK)
    })
}

/// Disables the counter registered under `token`.
///
/// # Safety
/// `p` NULL or a live poller.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_disable(p: *mut perfring_poller, token: u64) -> c_int {
    with_poller(p, "perfring_poller_disable", |p| {
        poller_counter(p, token, "perfring_poller_disable")?.disable()?;
        Ok(PERFRING_OK)
    })
}

/// Gives the counter under `token` a budget of `n` overflows (`REFRESH(n)`).
///
/// # Safety
/// `p` NULL or a live poller.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_refresh(
    p: *mut perfring_poller,
    token: u64,
    n: u32,
) -> c_int {
    with_poller(p, "perfring_poller_refresh", |p| {
        poller_counter(p, token, "perfring_poller_refresh")?.refresh(n)?;
        Ok(PERFRING_OK)
    })
}

/// Waits up to `timeout_ms` (-1: forever, 0: not at all) for ready counters, drains
/// each ready ring to `data_head` and calls `cb(token, rec, user)` per record. Returns
/// the number of records (≥ 0) or a negative code. An interrupted wait returns 0.
///
/// # Safety
/// `p` NULL or a live poller; `cb` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_wait(
    p: *mut perfring_poller,
    timeout_ms: c_int,
    cb: perfring_record_fn,
    user: *mut c_void,
) -> c_int {
    with_poller(p, "perfring_poller_wait", |p| {
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        let layouts = &p.layouts;
        let n = p
            .poller
            .poll_and_drain(&mut p.events, timeout, |token, raw| {
                if let (Some(cb), Some(layout)) = (cb, layouts.get(&token.0)) {
                    deliver(cb, user, token.0, raw.bytes(), layout);
                }
            })?;
        Ok(c_int::try_from(n).unwrap_or(c_int::MAX))
    })
}

/// Wake-ups and ring totals of the counter under `token`.
///
/// # Safety
/// `p` NULL or a live poller; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_poller_accounting(
    p: *mut perfring_poller,
    token: u64,
    out: *mut perfring_accounting,
) -> c_int {
    with_poller(p, "perfring_poller_accounting", |p| {
        let out = nonnull_mut(out, "perfring_poller_accounting", "out")?;
        let a = p.poller.accounting(Token(token)).ok_or_else(|| {
            invalid(
                "perfring_poller_accounting",
                &format!("no counter under token {token}"),
                "use the token given to perfring_poller_add",
            )
        })?;
        *out = perfring_accounting {
            notifications: a.notifications,
            hups: a.hups,
            samples: a.samples,
            records: a.records,
            lost: a.lost,
            throttled: a.throttled,
        };
        Ok(PERFRING_OK)
    })
}

fn record_bytes<'a>(rec: *const perfring_record) -> Option<(&'a [u8], &'a Layout)> {
    // SAFETY: NULL or the record passed to the running callback (contract).
    let r = unsafe { rec.as_ref() }?;
    // SAFETY: `bytes..bytes+len` and `layout` are borrowed from the drain that is
    // running the callback, so valid for its duration.
    let bytes = unsafe { std::slice::from_raw_parts(r.bytes, r.len) };
    // SAFETY: as above.
    let layout = unsafe { &*r.layout };
    Some((bytes, layout))
}

/// The record's type, `PERF_RECORD_*` (0 for NULL).
///
/// # Safety
/// `rec` NULL or the record of the running callback.
#[no_mangle]
pub unsafe extern "C" fn perfring_record_type(rec: *const perfring_record) -> u32 {
    catch_unwind(|| {
        record_bytes(rec)
            .and_then(|(b, _)| b.first_chunk::<4>().map(|w| u32::from_ne_bytes(*w)))
            .unwrap_or(0)
    })
    .unwrap_or(0)
}

/// The record's bytes, header first, in place in the ring (zero-copy; a record that
/// wrapped around the ring's end is in a copy). Valid during the callback only; the
/// pointer may not be 8-byte aligned. Writes the length to `len`.
///
/// # Safety
/// `rec` NULL or the record of the running callback; `len` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_record_bytes(
    rec: *const perfring_record,
    len: *mut usize,
) -> *const u8 {
    catch_unwind(|| {
        let Some((b, _)) = record_bytes(rec) else {
            return std::ptr::null();
        };
        if !len.is_null() {
            // SAFETY: non-null and writable by contract.
            unsafe { *len = b.len() };
        }
        b.as_ptr()
    })
    .unwrap_or(std::ptr::null())
}

/// Decodes `rec` as a sample and applies `get`; the status for C.
fn sample_field<T>(
    rec: *const perfring_record,
    out: *mut T,
    op: &str,
    get: impl FnOnce(&perfring_core::records::Sample<'_>) -> Option<T>,
) -> c_int {
    guard(|| {
        let out = nonnull_mut(out, op, "out")?;
        let (bytes, layout) = record_bytes(rec)
            .ok_or_else(|| invalid(op, "rec is NULL", "pass the record given to the callback"))?;
        let record = Record::parse(bytes, layout).map_err(|e| {
            Fail(
                PERFRING_E_DECODE,
                format!("{op}: {e}. Fix: check the counter's sample_type"),
            )
        })?;
        let RecordKind::Sample(s) = record.kind() else {
            return Err(Fail(PERFRING_E_ABSENT, format!("{op}: the record is not a sample (type {}). Fix: check perfring_record_type first", record.record_type())));
        };
        match get(s) {
            Some(v) => {
                *out = v;
                Ok(PERFRING_OK)
            }
            None => Err(Fail(PERFRING_E_ABSENT, format!("{op}: the field is not in this counter's sample_type. Fix: add its PERF_SAMPLE_* bit to perfring_options.sample_type"))),
        }
    })
}

/// `PERF_SAMPLE_IP`: the sampled instruction pointer.
///
/// # Safety
/// `rec` NULL or the record of the running callback; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_ip(rec: *const perfring_record, out: *mut u64) -> c_int {
    sample_field(rec, out, "perfring_sample_ip", |s| s.ip())
}

/// `PERF_SAMPLE_TID`: the thread id.
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_tid(rec: *const perfring_record, out: *mut u32) -> c_int {
    sample_field(rec, out, "perfring_sample_tid", |s| s.tid())
}

/// `PERF_SAMPLE_TID`: the process id.
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_pid(rec: *const perfring_record, out: *mut u32) -> c_int {
    sample_field(rec, out, "perfring_sample_pid", |s| s.pid())
}

/// `PERF_SAMPLE_TIME`: the timestamp (perf clock, ns).
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_time(rec: *const perfring_record, out: *mut u64) -> c_int {
    sample_field(rec, out, "perfring_sample_time", |s| s.time())
}

/// `PERF_SAMPLE_ADDR`: the data address.
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_addr(rec: *const perfring_record, out: *mut u64) -> c_int {
    sample_field(rec, out, "perfring_sample_addr", |s| s.addr())
}

/// `PERF_SAMPLE_CPU`: the CPU.
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_cpu(rec: *const perfring_record, out: *mut u32) -> c_int {
    sample_field(rec, out, "perfring_sample_cpu", |s| s.cpu())
}

/// `PERF_SAMPLE_PERIOD`: the period of this sample.
///
/// # Safety
/// As `perfring_sample_ip`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_period(
    rec: *const perfring_record,
    out: *mut u64,
) -> c_int {
    sample_field(rec, out, "perfring_sample_period", |s| s.period())
}

/// `PERF_SAMPLE_CALLCHAIN`: writes a pointer to the `u64` addresses, in place in the
/// ring (may be unaligned: read with `memcpy`), and their number to `n`.
///
/// # Safety
/// As `perfring_sample_ip`; `n` writable.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_callchain(
    rec: *const perfring_record,
    ips: *mut *const u8,
    n: *mut usize,
) -> c_int {
    let mut len = 0usize;
    let r = sample_field(rec, ips, "perfring_sample_callchain", |s| {
        s.callchain().map(|c| {
            len = c.len();
            c.as_bytes().as_ptr()
        })
    });
    if r == PERFRING_OK && !n.is_null() {
        // SAFETY: non-null and writable by contract.
        unsafe { *n = len };
    }
    r
}

/// `PERF_SAMPLE_RAW`: writes a pointer to the raw bytes (in place) and their length.
///
/// # Safety
/// As `perfring_sample_callchain`.
#[no_mangle]
pub unsafe extern "C" fn perfring_sample_raw(
    rec: *const perfring_record,
    data: *mut *const u8,
    len: *mut usize,
) -> c_int {
    let mut l = 0usize;
    let r = sample_field(rec, data, "perfring_sample_raw", |s| {
        s.raw().map(|b| {
            l = b.len();
            b.as_ptr()
        })
    });
    if r == PERFRING_OK && !len.is_null() {
        // SAFETY: non-null and writable by contract.
        unsafe { *len = l };
    }
    r
}
