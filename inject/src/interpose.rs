//! The libc functions the injector interposes (it is first in the symbol search order,
//! as an `LD_PRELOAD` library), each forwarding to the next definition found with
//! `dlsym(RTLD_NEXT, ...)`:
//!
//! - `pthread_create`: the new thread first notes its stack bounds (for the
//!   frame-pointer walk) and claims its record buffer, then runs the program's start
//!   routine. Its counter is already there: the main thread's counters are inherited
//!   (`inherit` + `inherit_thread`), which also covers threads from a raw `clone`.
//! - `sigaction`, `signal` for `SIGTRAP`: perfring's handler stays installed; the
//!   program's handler becomes the one that every `SIGTRAP` which is not an overflow
//!   (`si_code != TRAP_PERF`) is passed to, and the program is told the handler it
//!   installed before, as if nothing stood between.
//!
//! - `execve`, `execv`, `execvp`, `execvpe`, `fexecve`: the counters stop and every
//!   buffered record is written out before the process image is replaced (they
//!   restart if the exec fails). The variadic `execl*` cannot be interposed from
//!   Rust; glibc builds them on its internal `execve`, so records buffered at such an
//!   exec (under 10 ms worth) are lost.
//! - `_exit`, `_Exit`: the same end as `exit()` (counters stopped, buffers written,
//!   the summary), which `_exit` would skip.
//!
//! # Safety
//! The forwarding calls pass the caller's arguments unchanged to the real function of
//! the same signature. `sigaction` may be called in signal context: its SIGTRAP path
//! only uses atomics and `write(2)`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use perfring::notify::Sigtrap;

use crate::{disarm_thread, note_thread, ARMED, STATE};

type StartRoutine = extern "C-unwind" fn(*mut c_void) -> *mut c_void;
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> c_int;
type Sigaction = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type Signal = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

static REAL_PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECV: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVP: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVPE: AtomicUsize = AtomicUsize::new(0);
static REAL_FEXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);
static REAL_UEXIT: AtomicUsize = AtomicUsize::new(0);
static TOLD: AtomicBool = AtomicBool::new(false);

/// The next definition of `name` after this library (0 if none).
fn next(cache: &AtomicUsize, name: &CStr) -> usize {
    let mut f = cache.load(SeqCst);
    if f == 0 {
        // SAFETY: RTLD_NEXT with a NUL-terminated name; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, SeqCst);
    }
    f
}

/// Resolves the real functions while single-threaded (in the constructor), so that
/// `sigaction` never calls `dlsym` in signal context.
pub(crate) fn resolve() {
    next(&REAL_PTHREAD_CREATE, c"pthread_create");
    next(&REAL_SIGACTION, c"sigaction");
    next(&REAL_SIGNAL, c"signal");
    next(&REAL_EXECVE, c"execve");
    next(&REAL_EXECV, c"execv");
    next(&REAL_EXECVP, c"execvp");
    next(&REAL_EXECVPE, c"execvpe");
    next(&REAL_FEXECVE, c"fexecve");
    next(&REAL_EXIT, c"_exit");
    next(&REAL_UEXIT, c"_Exit");
}

/// The real `sigaction`, bypassing the interposer.
///
/// # Safety
/// As `sigaction(2)`.
pub(crate) unsafe fn real_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let f = next(&REAL_SIGACTION, c"sigaction");
    if f == 0 {
        return -1;
    }
    // SAFETY: dlsym found libc's `sigaction`, which has this signature.
    let f: Sigaction = unsafe { std::mem::transmute::<usize, Sigaction>(f) };
    // SAFETY: the caller's arguments, as sigaction(2) takes them.
    unsafe { f(sig, act, old) }
}

struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
}

/// The new thread's first function: note its stack and buffer, then run the program's.
/// `C-unwind`: `pthread_exit`'s forced unwind passes through this frame (which holds
/// nothing to drop by then).
extern "C-unwind" fn start_thread(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the Box<Start> leaked by `pthread_create` below, taken once.
    let start = unsafe { Box::from_raw(p.cast::<Start>()) };
    let Start { routine, arg } = *start;
    note_thread();
    let r = routine(arg);
    disarm_thread();
    r
}

/// `pthread_create`, interposed: see the module docs.
///
/// # Safety
/// As `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let f = next(&REAL_PTHREAD_CREATE, c"pthread_create");
    if f == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: dlsym found libc's `pthread_create`, which has this signature.
    let real: PthreadCreate = unsafe { std::mem::transmute::<usize, PthreadCreate>(f) };
    if !ARMED.load(SeqCst) {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real(thread, attr, routine, arg) };
    }
    let p = Box::into_raw(Box::new(Start { routine, arg }));
    // SAFETY: the caller's thread and attr; our start routine takes the box.
    let r = unsafe { real(thread, attr, start_thread, p.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created, so the box is still ours.
        drop(unsafe { Box::from_raw(p) });
    }
    r
}

/// Emulates `SIG_DFL` for a `SIGTRAP` that is not an overflow: restore the default
/// action (with the real `sigaction`) and re-raise, so the program dies of it as it
/// would have. SIGNAL CONTEXT: `sigaction` and `raise` only.
pub(crate) extern "C" fn default_trap(_sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid arguments; sigaction and raise are async-signal-safe. SIGTRAP is
    // blocked in this handler, so the raised one is delivered once it returns.
    unsafe {
        real_sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut());
        libc::raise(libc::SIGTRAP);
    }
}

pub(crate) fn default_trap_addr() -> usize {
    default_trap as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize
}

fn tell_once() {
    if !TOLD.swap(true, SeqCst) {
        let msg = b"perfring-inject: the program installs its own SIGTRAP handler; perfring keeps \
its handler for counter overflows and passes every other SIGTRAP on to the program's\n";
        // SAFETY: write(2) of a static buffer to stderr; async-signal-safe.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// The program's view of the chained handler (`SIG_DFL` for our emulation of it).
fn chained_for_program() -> (usize, c_int) {
    let (h, flags) = Sigtrap::chained();
    if h == default_trap_addr() {
        (libc::SIG_DFL, 0)
    } else {
        (h, flags)
    }
}

fn chain(handler: usize, flags: c_int) {
    let (h, f) = if handler == libc::SIG_DFL {
        (default_trap_addr(), libc::SA_SIGINFO)
    } else {
        (handler, flags)
    };
    // SAFETY: `h` is SIG_IGN, our default_trap, or the program's handler installed
    // with `f` (so of the signature `f` implies), which stays loaded as the program's.
    unsafe { Sigtrap::chain_to(h, f) };
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        tell_once();
    }
}

/// The thread signal perfring delivers overflows with (`PERFRING_SIGNAL`), if `sig`.
fn our_thread_signal(sig: c_int) -> Option<perfring::notify::ThreadSignal> {
    if !ARMED.load(SeqCst) {
        return None;
    }
    STATE
        .get()
        .and_then(|s| s.signal)
        .filter(|t| t.signal().number() == sig)
}

fn tell_conflict(sig: c_int) {
    if !TOLD_SIGNAL.swap(true, SeqCst) {
        let mut buf = [0u8; 320];
        let head = b"perfring-inject: the program installs its own handler for signal ";
        let tail = b", which perfring uses for counter overflows (PERFRING_SIGNAL / --signal); \
perfring keeps its handler and passes the signal's other uses (kill, sigqueue) on to the \
program's. Fix: if the program misbehaves, pick a signal it does not use with --signal\n";
        let mut n = 0;
        for &b in head {
            buf[n] = b;
            n += 1;
        }
        let mut digits = [0u8; 4];
        let (mut v, mut k) = (sig.unsigned_abs(), 0);
        loop {
            digits[k] = b'0' + (v % 10) as u8;
            k += 1;
            v /= 10;
            if v == 0 || k == digits.len() {
                break;
            }
        }
        while k > 0 {
            k -= 1;
            buf[n] = digits[k];
            n += 1;
        }
        for &b in tail.iter().take(buf.len() - n) {
            buf[n] = b;
            n += 1;
        }
        // SAFETY: write(2) of a stack buffer to stderr; async-signal-safe.
        unsafe { libc::write(2, buf.as_ptr().cast(), n) };
    }
}

static TOLD_SIGNAL: AtomicBool = AtomicBool::new(false);

/// Whether perfring's SIGTRAP handler is installed (sigtrap mode, armed).
fn sigtrap_armed() -> bool {
    ARMED.load(SeqCst) && STATE.get().is_some_and(|s| s.signal.is_none())
}

/// `sigaction`, interposed: see the module docs.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if let Some(ts) = our_thread_signal(sig) {
        let (h, flags) = ts.chained().unwrap_or((libc::SIG_DFL, 0));
        // SAFETY: `old` is null or writable, as sigaction(2) requires of the caller.
        if let Some(old) = unsafe { old.as_mut() } {
            // SAFETY: an all-zero sigaction is valid (empty mask).
            *old = unsafe { std::mem::zeroed() };
            old.sa_sigaction = h;
            old.sa_flags = flags;
        }
        // SAFETY: `act` is null or readable, as sigaction(2) requires of the caller.
        if let Some(act) = unsafe { act.as_ref() } {
            // SAFETY: the program's handler with the flags it was given, as loaded as
            // the program itself; SIG_DFL/SIG_IGN are not called.
            unsafe { ts.chain_to(act.sa_sigaction, act.sa_flags) };
            if act.sa_sigaction != libc::SIG_DFL && act.sa_sigaction != libc::SIG_IGN {
                tell_conflict(sig);
            }
        }
        return 0;
    }
    if sig != libc::SIGTRAP || !sigtrap_armed() {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real_sigaction(sig, act, old) };
    }
    let (h, flags) = chained_for_program();
    // SAFETY: `old` is null or writable, as sigaction(2) requires of the caller.
    if let Some(old) = unsafe { old.as_mut() } {
        // SAFETY: an all-zero sigaction is valid (empty mask).
        *old = unsafe { std::mem::zeroed() };
        old.sa_sigaction = h;
        old.sa_flags = flags;
    }
    // SAFETY: `act` is null or readable, as sigaction(2) requires of the caller.
    if let Some(act) = unsafe { act.as_ref() } {
        chain(act.sa_sigaction, act.sa_flags);
    }
    0
}

/// `signal`, interposed: as `sigaction` for `SIGTRAP`.
///
/// # Safety
/// As `signal(2)`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if let Some(ts) = our_thread_signal(sig) {
        let (old, _) = ts.chained().unwrap_or((libc::SIG_DFL, 0));
        // SAFETY: as in `sigaction`.
        unsafe { ts.chain_to(handler, libc::SA_RESTART) };
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            tell_conflict(sig);
        }
        return old;
    }
    if sig != libc::SIGTRAP || !sigtrap_armed() {
        let f = next(&REAL_SIGNAL, c"signal");
        if f == 0 {
            return libc::SIG_ERR;
        }
        // SAFETY: dlsym found libc's `signal`, which has this signature.
        let real: Signal = unsafe { std::mem::transmute::<usize, Signal>(f) };
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { real(sig, handler) };
    }
    let (old, _) = chained_for_program();
    chain(handler, libc::SA_RESTART);
    old
}

type Argv = *const *const c_char;

/// Runs `exec` (the real function, called with the caller's arguments) between
/// [`crate::before_exec`] and, if it returns (the exec failed),
/// [`crate::after_failed_exec`], keeping the exec's `errno`.
fn around_exec(cache: &AtomicUsize, name: &CStr, exec: impl FnOnce(usize) -> c_int) -> c_int {
    let f = next(cache, name);
    if f == 0 {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    let stopped = crate::before_exec();
    let r = exec(f);
    if stopped {
        // SAFETY: errno is this thread's.
        let errno = unsafe { *libc::__errno_location() };
        crate::after_failed_exec();
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
    r
}

/// `execve`, interposed: see the module docs.
///
/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    around_exec(&REAL_EXECVE, c"execve", |f| {
        type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
        // SAFETY: dlsym found libc's `execve`, of this signature; the caller's
        // arguments, unchanged.
        unsafe { std::mem::transmute::<usize, F>(f)(path, argv, envp) }
    })
}

/// `execv`, interposed: see the module docs.
///
/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    around_exec(&REAL_EXECV, c"execv", |f| {
        type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
        // SAFETY: dlsym found libc's `execv`, of this signature; the caller's
        // arguments, unchanged.
        unsafe { std::mem::transmute::<usize, F>(f)(path, argv) }
    })
}

/// `execvp`, interposed: see the module docs.
///
/// # Safety
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    around_exec(&REAL_EXECVP, c"execvp", |f| {
        type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
        // SAFETY: dlsym found libc's `execvp`, of this signature; the caller's
        // arguments, unchanged.
        unsafe { std::mem::transmute::<usize, F>(f)(file, argv) }
    })
}

/// `execvpe`, interposed: see the module docs.
///
/// # Safety
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    around_exec(&REAL_EXECVPE, c"execvpe", |f| {
        type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
        // SAFETY: dlsym found libc's `execvpe`, of this signature; the caller's
        // arguments, unchanged.
        unsafe { std::mem::transmute::<usize, F>(f)(file, argv, envp) }
    })
}

/// `fexecve`, interposed: see the module docs.
///
/// # Safety
/// As `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    around_exec(&REAL_FEXECVE, c"fexecve", |f| {
        type F = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
        // SAFETY: dlsym found libc's `fexecve`, of this signature; the caller's
        // arguments, unchanged.
        unsafe { std::mem::transmute::<usize, F>(f)(fd, argv, envp) }
    })
}

/// Ends the process as `exit()` would have for the injector, then as `_exit`.
fn end(cache: &AtomicUsize, name: &CStr, status: c_int) -> ! {
    crate::at_exit();
    let f = next(cache, name);
    if f != 0 {
        type F = unsafe extern "C" fn(c_int) -> !;
        // SAFETY: dlsym found libc's `_exit`/`_Exit`, of this signature.
        unsafe { std::mem::transmute::<usize, F>(f)(status) }
    }
    // SAFETY: exit_group ends the process; it does not return.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

/// `_exit`, interposed: see the module docs.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    end(&REAL_EXIT, c"_exit", status)
}

/// `_Exit`, interposed: see the module docs.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    end(&REAL_UEXIT, c"_Exit", status)
}
