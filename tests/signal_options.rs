//! Signals as users ask for them: `SA_RESTART` or `EINTR`, process-owner delivery,
//! standard signals with `si_fd`, and counters modified in place while attached.
//!
//! Signal dispositions are process-wide, so the tests here take `SERIAL`, and each
//! `SA_RESTART` choice uses its own signal number.

mod util;

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Notification, Owner, Sigtrap, SigtrapInfo, ThreadSignal, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, ErrorKind, Event, SampleType, Scope, Signal};
use util::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

static HITS: AtomicU64 = AtomicU64::new(0);
static BAD_FD: AtomicU64 = AtomicU64::new(0);
static EXPECT_FD: AtomicI32 = AtomicI32::new(-1);

fn count(n: &Notification, _: usize) {
    HITS.fetch_add(1, SeqCst);
    if n.fd != EXPECT_FD.load(SeqCst) {
        BAD_FD.fetch_add(1, SeqCst);
    }
}

/// Forks a child that waits on a pipe, then until thread `waiter` of this process is
/// asleep (in `waitpid`), then calls the breakpointed function `calls` times and exits.
/// Returns its pid and the pipe's write end.
fn forked_worker(waiter: u32, calls: u64) -> (libc::pid_t, i32) {
    let stat = CString::new(format!("/proc/{}/task/{waiter}/stat", std::process::id())).unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two fds pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only calls async-signal-safe functions (read, open, close,
    // sched_yield, _exit) and the pure breakpointed function before `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into `b`.
        unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
        // Bounded (10 s), so a kernel without the file cannot hang the test: the parent
        // then sees no EINTR and fails with a message instead.
        let deadline = monotonic_s() + 10;
        while !asleep(&stat) && monotonic_s() < deadline {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
        call_target(calls);
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the read end belongs to the child now.
    unsafe { libc::close(fds[0]) };
    (pid, fds[1])
}

/// Child side (async-signal-safe): seconds on CLOCK_MONOTONIC.
fn monotonic_s() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec
}

/// Child side (async-signal-safe): whether the thread's `stat` state is `S` (sleeping).
fn asleep(stat: &CString) -> bool {
    let mut buf = [0u8; 512];
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(stat.as_ptr(), libc::O_RDONLY) };
    if fd < 0 {
        return false;
    }
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closes the fd opened above.
    unsafe { libc::close(fd) };
    let buf = &buf[..n.max(0) as usize];
    // "pid (comm) S ...": the state follows the last ')'.
    buf.iter()
        .rposition(|&c| c == b')')
        .and_then(|i| buf.get(i + 2))
        == Some(&b'S')
}

/// Opens a watermark counter on the child (samples every 100 calls), routes its
/// signals to this thread and waits for the child. Returns what the first `waitpid`
/// returned (pid or -1), its errno, and how many signals were handled.
fn wait_for_watched_child(sig: ThreadSignal) -> (libc::pid_t, i32, u64) {
    HITS.store(0, SeqCst);
    let (pid, go) = forked_worker(gettid(), 20_000);
    let counter = Counter::builder_for(target_breakpoint())
        .target(Scope::Thread(pid))
        .period(100)
        .sample(SampleType::IP)
        .wakeup_watermark(1024)
        .open()
        .unwrap();
    let _ring = Ring::map(&counter, RingSize::Pages(64)).unwrap();
    EXPECT_FD.store(counter.as_raw_fd(), SeqCst);
    let sc = sig
        .attach_with(
            counter,
            Token(1),
            Owner::this_thread(),
            Handler::Callback(count, 0),
        )
        .unwrap();
    sc.counter().enable().unwrap();
    // SAFETY: writes one byte from a local; `go` is our pipe end.
    assert_eq!(unsafe { libc::write(go, [1u8].as_ptr().cast(), 1) }, 1);
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; `pid` is our child.
    let first = unsafe { libc::waitpid(pid, &mut status, 0) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut reaped = first == pid;
    while !reaped {
        // SAFETY: as above.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        reaped = r == pid;
        assert!(reaped || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    // SAFETY: closes our pipe end.
    unsafe { libc::close(go) };
    let hits = HITS.load(SeqCst);
    drop(sc);
    (first, errno, hits)
}

#[test]
fn without_sa_restart_a_notification_interrupts_waitpid_with_eintr() {
    let _s = serial();
    let sig = ThreadSignal::builder()
        .signal(Signal::rtmin(2).unwrap())
        .restart(false)
        .install()
        .unwrap();
    assert!(!sig.restarts());
    let (first, errno, hits) = wait_for_watched_child(sig);
    assert_eq!((first, errno), (-1, libc::EINTR), "waitpid was interrupted");
    assert!(hits >= 1);
    assert_eq!(BAD_FD.load(SeqCst), 0);
}

#[test]
fn with_sa_restart_waitpid_goes_on_through_notifications() {
    let _s = serial();
    let sig = ThreadSignal::builder()
        .signal(Signal::rtmin(3).unwrap())
        .install()
        .unwrap();
    assert!(sig.restarts());
    let (first, _, hits) = wait_for_watched_child(sig);
    assert!(first > 0, "waitpid returned the child, not EINTR");
    // Every overflow (every 100th of 20,000 calls) signalled us while we waited.
    assert_eq!(hits, 200);
    assert_eq!(BAD_FD.load(SeqCst), 0);
}

#[test]
fn process_owner_delivery_counts_every_overflow() {
    let _s = serial();
    HITS.store(0, SeqCst);
    let sig = ThreadSignal::builder().install().unwrap();
    let counter = Counter::builder_for(target_breakpoint())
        .period(100)
        .open()
        .unwrap();
    EXPECT_FD.store(counter.as_raw_fd(), SeqCst);
    let sc = sig
        .attach_with(
            counter,
            Token(2),
            Owner::this_process(),
            Handler::Callback(count, 0),
        )
        .unwrap();
    assert_eq!(sc.owner(), Owner::this_process());
    sc.counter().enable().unwrap();
    call_target(10_000);
    sc.counter().disable().unwrap();
    // Any thread of the process may take a signal (the harness's idle threads too), and
    // it runs the handler when it is next scheduled: wait for them (bounded), then check.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sc.notifications() < 100 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(sc.notifications(), 100);
    drop(sc);
    assert_eq!(HITS.load(SeqCst), 100);
    assert_eq!(BAD_FD.load(SeqCst), 0);
}

#[test]
fn a_standard_signal_carries_si_fd_and_reserved_ones_are_refused() {
    let _s = serial();
    HITS.store(0, SeqCst);
    let sig = ThreadSignal::builder()
        .signal(Signal::SIGUSR2)
        .install()
        .unwrap();
    assert_eq!(sig.signal().number(), libc::SIGUSR2);
    let counter = Counter::builder_for(target_breakpoint())
        .period(100)
        .open()
        .unwrap();
    EXPECT_FD.store(counter.as_raw_fd(), SeqCst);
    let sc = sig
        .attach(counter, Token(3), Handler::Callback(count, 0))
        .unwrap();
    sc.counter().enable().unwrap();
    // Each overflow's signal is delivered before the next call, so none coalesce here.
    call_target(10_000);
    sc.counter().disable().unwrap();
    assert_eq!(sc.notifications(), 100);
    assert_eq!(HITS.load(SeqCst), 100);
    assert_eq!(
        BAD_FD.load(SeqCst),
        0,
        "si_fd is filled for a standard signal"
    );
    for s in [libc::SIGKILL, libc::SIGSEGV, libc::SIGTRAP] {
        let s = Signal::new(s).unwrap();
        let err = ThreadSignal::builder().signal(s).install().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Signal, "{s}: {err}");
    }
    // Not signals at all: refused before anything is installed.
    for s in [0, 200] {
        let err = Signal::new(s).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{s}: {err}");
    }
}

static OTHER: AtomicU64 = AtomicU64::new(0);

#[test]
fn an_attached_signal_counter_moves_its_breakpoint_in_place() {
    let _s = serial();
    HITS.store(0, SeqCst);
    let sig = ThreadSignal::builder().install().unwrap();
    let counter = Counter::builder_for(watched_watchpoint())
        .period(1)
        .open()
        .unwrap();
    EXPECT_FD.store(counter.as_raw_fd(), SeqCst);
    let mut sc = sig
        .attach(counter, Token(4), Handler::Callback(count, 0))
        .unwrap();
    sc.counter().enable().unwrap();
    write_watched(30);
    let mut attr = *sc.counter().attr();
    attr.__bindgen_anon_3.bp_addr = &OTHER as *const _ as u64;
    attr.set_disabled(0); // keep it running
    sc.modify_attributes(&attr).unwrap();
    write_watched(30); // no longer watched
    for i in 0..20 {
        OTHER.store(i, SeqCst);
    }
    sc.counter().disable().unwrap();
    assert_eq!(sc.notifications(), 50);
    assert_eq!(HITS.load(SeqCst), 50);
    assert_eq!(BAD_FD.load(SeqCst), 0);
}

const KEY_A: u64 = 0xa11a;
const KEY_B: u64 = 0xb22b;
static UNDER_A: AtomicU64 = AtomicU64::new(0);
static UNDER_B: AtomicU64 = AtomicU64::new(0);
static UNDER_OTHER: AtomicU64 = AtomicU64::new(0);

fn by_key(t: &SigtrapInfo, _: usize) {
    match t.token.0 {
        KEY_A => UNDER_A.fetch_add(1, SeqCst),
        KEY_B => UNDER_B.fetch_add(1, SeqCst),
        _ => UNDER_OTHER.fetch_add(1, SeqCst),
    };
}

#[test]
fn an_attached_sigtrap_counter_takes_a_new_sig_data_without_losing_a_trap() {
    let _s = serial();
    let trap = Sigtrap::install().unwrap();
    let before = Sigtrap::registered();
    let stray = Sigtrap::stray();
    let counter = Counter::builder_for(Event::breakpoint(
        perfring::event::Access::Execute,
        target_addr(),
        8,
    ))
    .period(1)
    .sigtrap(KEY_A)
    .open()
    .unwrap();
    let mut tc = trap
        .attach(counter, TrapHandler::Callback(by_key, 0))
        .unwrap();
    tc.counter().enable().unwrap();
    call_target(40);
    tc.set_sig_data(KEY_B, true).unwrap();
    assert_eq!(tc.sig_data(), KEY_B);
    assert_eq!(tc.old_sig_data().collect::<Vec<_>>(), [KEY_A]);
    call_target(60);
    tc.counter().disable().unwrap();
    assert_eq!(UNDER_A.load(SeqCst), 40);
    assert_eq!(UNDER_B.load(SeqCst), 60);
    assert_eq!(UNDER_OTHER.load(SeqCst), 0);
    assert_eq!(tc.notifications(), 100);
    assert_eq!(Sigtrap::stray(), stray, "no trap was lost or unrouted");
    // A key another counter holds is refused before the kernel is told.
    let other = Counter::builder_for(target_breakpoint())
        .sigtrap(0xc33c)
        .open()
        .unwrap();
    let other = trap.attach(other, TrapHandler::Count).unwrap();
    let err = tc.set_sig_data(0xc33c, false).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    assert_eq!(tc.counter().attr().sig_data, KEY_B, "unchanged on error");
    tc.release_old_sig_data();
    assert_eq!(tc.notifications(), 100, "released keys keep their counts");
    drop(other);
    drop(tc);
    assert_eq!(Sigtrap::registered(), before);
}

static STRESS_VARS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static STRESS_TRAPS: AtomicU64 = AtomicU64::new(0);
static STRESS_BAD: AtomicU64 = AtomicU64::new(0);

fn stress_trap(t: &SigtrapInfo, _: usize) {
    if t.token.0 == KEY_A || t.token.0 == KEY_B {
        STRESS_TRAPS.fetch_add(1, SeqCst);
    } else {
        STRESS_BAD.fetch_add(1, SeqCst);
    }
}

#[test]
fn sig_data_flips_while_threads_overflow_lose_no_trap() {
    let _s = serial();
    let trap = Sigtrap::install().unwrap();
    let stray = Sigtrap::stray();
    // One inherited counter: every thread created after it traps on its own writes.
    let counter = Counter::builder_for(Event::breakpoint(
        perfring::event::Access::Write,
        &STRESS_VARS[0] as *const _ as u64,
        8,
    ))
    .period(1)
    .sigtrap(KEY_A)
    .inherit(true)
    .inherit_thread(true)
    .open()
    .unwrap();
    let mut tc = trap
        .attach(counter, TrapHandler::Callback(stress_trap, 0))
        .unwrap();
    tc.counter().enable().unwrap();
    const WRITERS: usize = 3;
    const PER_THREAD: u64 = 3000;
    let go = std::sync::Arc::new(std::sync::Barrier::new(WRITERS + 1));
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                for i in 0..PER_THREAD {
                    STRESS_VARS[0].store(i, SeqCst);
                }
            })
        })
        .collect();
    go.wait();
    // Flip the key back and forth while the writers overflow on other CPUs/threads.
    let mut flips = 0u32;
    while writers.iter().any(|h| !h.is_finished()) {
        let next = if tc.sig_data() == KEY_A { KEY_B } else { KEY_A };
        tc.set_sig_data(next, true).unwrap();
        flips += 1;
        std::thread::yield_now();
    }
    for h in writers {
        h.join().unwrap();
    }
    tc.counter().disable().unwrap();
    assert!(flips > 0);
    // The kernel disables a breakpoint for the instant of each MODIFY_ATTRIBUTES
    // (perf_event_modify_breakpoint), so writes racing with a flip are not counted at
    // all; every write it did count (period 1: every overflow) must have trapped here.
    let counted = tc.counter().read().unwrap().value;
    assert!(
        counted > 0 && counted <= WRITERS as u64 * PER_THREAD,
        "{counted}"
    );
    assert_eq!(STRESS_TRAPS.load(SeqCst), counted);
    assert_eq!(tc.notifications(), counted);
    assert_eq!(STRESS_BAD.load(SeqCst), 0);
    assert_eq!(Sigtrap::stray(), stray, "no trap went unrouted");
}

#[test]
fn a_free_signal_is_picked_per_sa_restart_choice() {
    let _s = serial();
    let restarting = ThreadSignal::builder().install().unwrap();
    let interrupting = ThreadSignal::builder().restart(false).install().unwrap();
    assert_ne!(restarting.signal().number(), interrupting.signal().number());
    assert!(restarting.restarts());
    assert!(!interrupting.restarts());
    // Asking again finds the same ones, without flipping either.
    assert_eq!(ThreadSignal::builder().install().unwrap(), restarting);
    assert_eq!(
        ThreadSignal::builder().restart(false).install().unwrap(),
        interrupting
    );
    assert!(restarting.restarts() && !interrupting.restarts());
}

#[test]
fn signals_consumed_with_sigtimedwait_dispatch_through_the_registry() {
    let _s = serial();
    HITS.store(0, SeqCst);
    let sig = ThreadSignal::builder().install().unwrap();
    let counter = Counter::builder_for(target_breakpoint())
        .period(10)
        .open()
        .unwrap();
    EXPECT_FD.store(counter.as_raw_fd(), SeqCst);
    let sc = sig
        .attach(counter, Token(5), Handler::Callback(count, 0))
        .unwrap();
    // Block the signal: the kernel queues one per overflow for this thread.
    // SAFETY: zeroed sigsets are valid to initialise with sigemptyset.
    let (mut set, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: `set` and `old` are ours; the signal number is valid.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig.signal().number());
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    }
    sc.counter().enable().unwrap();
    call_target(100);
    sc.counter().disable().unwrap();
    assert_eq!(HITS.load(SeqCst), 0, "blocked: nothing handled yet");
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut routed = 0;
    loop {
        // SAFETY: zeroed siginfo is valid for the kernel to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set, info and timeout pointers.
        if unsafe { libc::sigtimedwait(&set, &mut info, &zero) } != sig.signal().number() {
            break;
        }
        routed += u64::from(sig.dispatch(&info));
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    assert_eq!(routed, 10);
    assert_eq!(HITS.load(SeqCst), 10);
    assert_eq!(sc.notifications(), 10);
    assert_eq!(BAD_FD.load(SeqCst), 0);
    // A siginfo not from the kernel is not routed.
    // SAFETY: zeroed siginfo: si_code 0 (SI_USER).
    let user: libc::siginfo_t = unsafe { std::mem::zeroed() };
    assert!(!sig.dispatch(&user));
}
