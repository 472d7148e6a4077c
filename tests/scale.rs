//! Thousands of counters in one process: 10,000 registered thread-signal counters with
//! one firing, and 1000 threads each with its own watchpoint under sigtrap and under
//! thread signals. Every count is exact and no notification reaches another thread's
//! or counter's registration.
//!
//! Its own binary: it holds over 10,000 fds (opening may raise `RLIMIT_NOFILE`'s soft
//! limit, process-wide) and runs 1000 threads. The tests take `SERIAL`.

mod util;

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};

use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Notification, Owner, Sigtrap, SigtrapInfo, ThreadSignal, Token};
use perfring::{Counter, Event};
use util::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const THREADS: usize = 1000;
const WRITES: u64 = 7;

/// One watched variable per thread, each in its own 8 bytes.
static VARS: [AtomicU64; THREADS] = [const { AtomicU64::new(0) }; THREADS];
static TIDS: [AtomicU32; THREADS] = [const { AtomicU32::new(0) }; THREADS];
static FDS: [AtomicI32; THREADS] = [const { AtomicI32::new(-1) }; THREADS];
static HITS: [AtomicU64; THREADS] = [const { AtomicU64::new(0) }; THREADS];
/// Notifications that landed on a thread other than the counter's, or carried a key or
/// fd that is not the counter's.
static MISDIRECTED: AtomicU64 = AtomicU64::new(0);
static UNKNOWN: AtomicU64 = AtomicU64::new(0);

const KEY_BASE: u64 = 0x5ca1_0000;

fn reset() {
    for i in 0..THREADS {
        VARS[i].store(0, SeqCst);
        TIDS[i].store(0, SeqCst);
        FDS[i].store(-1, SeqCst);
        HITS[i].store(0, SeqCst);
    }
    MISDIRECTED.store(0, SeqCst);
    UNKNOWN.store(0, SeqCst);
}

/// Signal context: the notification for thread `i` must land on thread `i`.
fn account(i: u64, fd: Option<i32>) {
    let Some(i) = usize::try_from(i).ok().filter(|&i| i < THREADS) else {
        UNKNOWN.fetch_add(1, SeqCst);
        return;
    };
    HITS[i].fetch_add(1, SeqCst);
    if TIDS[i].load(SeqCst) != gettid() || fd.is_some_and(|fd| fd != FDS[i].load(SeqCst)) {
        MISDIRECTED.fetch_add(1, SeqCst);
    }
}

fn on_trap(t: &SigtrapInfo, _: usize) {
    account(t.token.0.wrapping_sub(KEY_BASE), None);
}

fn on_signal(n: &Notification, _: usize) {
    account(n.token.0, Some(n.fd));
}

fn watch(i: usize) -> Event {
    Event::breakpoint(
        perfring::event::Access::Write,
        &VARS[i] as *const _ as u64,
        8,
    )
}

fn check_threads(all_registered: &[usize]) {
    for (i, hits) in HITS.iter().enumerate() {
        assert_eq!(hits.load(SeqCst), WRITES, "thread {i}");
    }
    assert_eq!(MISDIRECTED.load(SeqCst), 0);
    assert_eq!(UNKNOWN.load(SeqCst), 0);
    // Every thread saw all THREADS registrations live at once.
    assert!(
        all_registered.iter().all(|&n| n >= THREADS),
        "{all_registered:?}"
    );
}

/// Runs `THREADS` threads; each calls `attach(i)` for a registration, waits until all
/// are registered, writes its variable `WRITES` times, checks its own count, waits again
/// (so every registration stays live throughout) and drops it.
fn run_threads<R, A, N>(attach: A, notifications: N, registered: fn() -> usize) -> Vec<usize>
where
    A: Fn(usize) -> R + Send + Sync + 'static,
    N: Fn(&R) -> u64 + Send + Sync + 'static,
    R: 'static,
{
    let attach = Arc::new(attach);
    let notifications = Arc::new(notifications);
    let start = Arc::new(Barrier::new(THREADS));
    let done = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (attach, notifications) = (attach.clone(), notifications.clone());
            let (start, done) = (start.clone(), done.clone());
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    TIDS[i].store(gettid(), SeqCst);
                    let reg = attach(i);
                    start.wait();
                    let live = registered();
                    for k in 0..WRITES {
                        VARS[i].store(k, SeqCst);
                    }
                    let own = notifications(&reg);
                    done.wait();
                    drop(reg);
                    assert_eq!(own, WRITES, "thread {i}'s own count");
                    live
                })
                .unwrap()
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn a_thousand_threads_each_get_exactly_their_own_sigtraps() {
    let _s = serial();
    reset();
    let trap = Sigtrap::install().unwrap();
    let before = Sigtrap::registered();
    let stray = Sigtrap::stray();
    let live = run_threads(
        move |i| {
            let c = Counter::builder_for(watch(i))
                .period(1)
                .sigtrap(KEY_BASE + i as u64)
                .open()
                .unwrap();
            let c = trap.attach(c, TrapHandler::Callback(on_trap, 0)).unwrap();
            c.counter().enable().unwrap();
            c
        },
        |c| c.notifications(),
        Sigtrap::registered,
    );
    check_threads(&live);
    assert_eq!(Sigtrap::stray(), stray);
    assert_eq!(Sigtrap::registered(), before);
}

#[test]
fn a_thousand_threads_each_get_exactly_their_own_thread_signals() {
    let _s = serial();
    reset();
    let sig = ThreadSignal::builder().install().unwrap();
    let before = ThreadSignal::registered();
    let stray = ThreadSignal::stray();
    let live = run_threads(
        move |i| {
            let c = Counter::builder_for(watch(i)).period(1).open().unwrap();
            FDS[i].store(std::os::fd::AsRawFd::as_raw_fd(&c), SeqCst);
            let c = sig
                .attach_with(
                    c,
                    Token(i as u64),
                    Owner::this_thread(),
                    Handler::Callback(on_signal, 0),
                )
                .unwrap();
            c.counter().enable().unwrap();
            c
        },
        |c| c.notifications(),
        ThreadSignal::registered,
    );
    check_threads(&live);
    assert_eq!(ThreadSignal::stray(), stray);
    assert_eq!(ThreadSignal::registered(), before);
}

static FIRING_HITS: AtomicU64 = AtomicU64::new(0);
static QUIET_HITS: AtomicU64 = AtomicU64::new(0);
const FIRING: u64 = u64::MAX;

fn on_one_of_many(n: &Notification, _: usize) {
    if n.token.0 == FIRING {
        FIRING_HITS.fetch_add(1, SeqCst);
    } else {
        QUIET_HITS.fetch_add(1, SeqCst);
    }
}

#[test]
fn ten_thousand_registered_thread_signal_counters_one_firing_exact_then_empty() {
    const N: usize = 10_000;
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    let before = ThreadSignal::registered();
    let stray = ThreadSignal::stray();
    // 10,000 software counters that never overflow (`dummy`, left disabled).
    let quiet: Vec<_> = (0..N)
        .map(|i| {
            let c = Counter::builder("dummy").unwrap().period(1).open().unwrap();
            sig.attach(c, Token(i as u64), Handler::Callback(on_one_of_many, 0))
                .unwrap()
        })
        .collect();
    // And one execute breakpoint with period 10, registered last (highest fd).
    let firing = Counter::builder_for(target_breakpoint())
        .period(10)
        .open()
        .unwrap();
    let firing = sig
        .attach(firing, Token(FIRING), Handler::Callback(on_one_of_many, 0))
        .unwrap();
    assert_eq!(ThreadSignal::registered(), before + N + 1);
    firing.counter().enable().unwrap();
    call_target(1000);
    firing.counter().disable().unwrap();
    assert_eq!(firing.notifications(), 100);
    assert_eq!(FIRING_HITS.load(SeqCst), 100);
    assert_eq!(QUIET_HITS.load(SeqCst), 0);
    assert!(quiet.iter().all(|c| c.notifications() == 0));
    assert_eq!(ThreadSignal::stray(), stray);
    drop(firing);
    drop(quiet);
    assert_eq!(
        ThreadSignal::registered(),
        before,
        "the registry is empty again"
    );
    // And it takes them again (freed slots are reused).
    let again = Counter::builder_for(target_breakpoint())
        .period(10)
        .open()
        .unwrap();
    let again = sig.attach(again, Token(FIRING), Handler::Count).unwrap();
    again.counter().enable().unwrap();
    call_target(50);
    again.counter().disable().unwrap();
    assert_eq!(again.notifications(), 5);
}

#[test]
fn ten_thousand_registered_sigtrap_counters_one_firing_exact_then_empty() {
    const N: usize = 10_000;
    let _s = serial();
    let trap = Sigtrap::install().unwrap();
    let before = Sigtrap::registered();
    let stray = Sigtrap::stray();
    let quiet: Vec<_> = (0..N)
        .map(|i| {
            let c = Counter::builder("dummy")
                .unwrap()
                .period(1)
                .sigtrap(KEY_BASE + 0x10_0000 + i as u64)
                .open()
                .unwrap();
            trap.attach(c, TrapHandler::Count).unwrap()
        })
        .collect();
    let firing = Counter::builder_for(target_breakpoint())
        .period(10)
        .sigtrap(0xf1f1)
        .open()
        .unwrap();
    let firing = trap.attach(firing, TrapHandler::Count).unwrap();
    assert_eq!(Sigtrap::registered(), before + N + 1);
    firing.counter().enable().unwrap();
    call_target(1000);
    firing.counter().disable().unwrap();
    assert_eq!(firing.notifications(), 100);
    assert!(quiet.iter().all(|c| c.notifications() == 0));
    assert_eq!(Sigtrap::stray(), stray);
    drop(firing);
    drop(quiet);
    assert_eq!(Sigtrap::registered(), before, "the registry is empty again");
}
