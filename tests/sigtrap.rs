//! Synchronous SIGTRAP: exact counts, per-thread delivery with one inherited counter,
//! `si_perf_*` contents, chaining to a previous handler, and exec safety.
//!
//! The SIGTRAP disposition is process-wide: `setup()` installs a foreign handler and
//! then perfring's once, and the tests take `SERIAL`.

mod util;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};

use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Sigtrap, SigtrapInfo};
use perfring::{sys, Counter, Event};
use util::*;

static SERIAL: Mutex<()> = Mutex::new(());
static FOREIGN_TRAPS: AtomicU64 = AtomicU64::new(0);

extern "C" fn foreign_trap(_: libc::c_int) {
    FOREIGN_TRAPS.fetch_add(1, SeqCst);
}

fn setup() -> (Sigtrap, std::sync::MutexGuard<'static, ()>) {
    static TRAP: OnceLock<Sigtrap> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let trap = *TRAP.get_or_init(|| {
        // A "debugger-like" handler that was there first.
        // SAFETY: a trivial async-signal-safe handler.
        unsafe {
            libc::signal(
                libc::SIGTRAP,
                foreign_trap as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
        Sigtrap::install().unwrap()
    });
    (trap, guard)
}

const THREADS: usize = 8;
static TIDS: [AtomicU32; THREADS] = [const { AtomicU32::new(0) }; THREADS];
static PER_TID: [AtomicU64; THREADS] = [const { AtomicU64::new(0) }; THREADS];
static OTHER_TID: AtomicU64 = AtomicU64::new(0);
static BAD: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);

fn reset() {
    for i in 0..THREADS {
        TIDS[i].store(0, SeqCst);
        PER_TID[i].store(0, SeqCst);
    }
    OTHER_TID.store(0, SeqCst);
    BAD.store(0, SeqCst);
    TOTAL.store(0, SeqCst);
}

/// Signal context: counts the hit against the current thread id (claiming a slot
/// lock-free), and checks `si_perf_*` against `data` (the expected sig_data).
fn per_thread(t: &SigtrapInfo, data: usize) {
    TOTAL.fetch_add(1, SeqCst);
    if t.token.0 != data as u64 || t.perf_type != sys::PERF_TYPE_BREAKPOINT {
        BAD.fetch_add(1, SeqCst);
    }
    let tid = gettid();
    for i in 0..THREADS {
        let cur = TIDS[i].load(SeqCst);
        if cur == tid
            || (cur == 0 && TIDS[i].compare_exchange(0, tid, SeqCst, SeqCst).is_ok())
            || TIDS[i].load(SeqCst) == tid
        {
            PER_TID[i].fetch_add(1, SeqCst);
            return;
        }
    }
    OTHER_TID.fetch_add(1, SeqCst);
}

fn count_for(tid: u32) -> u64 {
    (0..THREADS)
        .find(|&i| TIDS[i].load(SeqCst) == tid)
        .map_or(0, |i| PER_TID[i].load(SeqCst))
}

#[test]
fn breakpoint_period_100_gives_exactly_100_sigtraps() {
    let (trap, _g) = setup();
    reset();
    let counter = Counter::builder_for(target_breakpoint())
        .period(100)
        .sigtrap(0x5157)
        .open()
        .unwrap();
    let tc = trap
        .attach(counter, TrapHandler::Callback(per_thread, 0x5157))
        .unwrap();
    tc.counter().enable().unwrap();
    call_target(10_000);
    tc.counter().disable().unwrap();
    assert_eq!(tc.notifications(), 100);
    assert_eq!(TOTAL.load(SeqCst), 100);
    assert_eq!(BAD.load(SeqCst), 0);
    assert_eq!(count_for(gettid()), 100);
    assert_eq!(
        FOREIGN_TRAPS.load(SeqCst),
        0,
        "TRAP_PERF never reaches the old handler"
    );
}

#[test]
fn one_inherited_counter_traps_each_thread_on_its_own_writes() {
    let (trap, _g) = setup();
    reset();
    let addr = &WATCHED as *const _ as u64;
    let counter = Counter::builder_for(Event::breakpoint(perfring::event::Access::Write, addr, 8))
        .period(1)
        .sigtrap(0xbeef)
        .inherit(true)
        .inherit_thread(true)
        .enabled(true)
        .open()
        .unwrap();
    let tc = trap
        .attach(counter, TrapHandler::Callback(per_thread, 0xbeef))
        .unwrap();
    let handles: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(|| {
                write_watched(3000);
                gettid()
            })
        })
        .collect();
    let tids: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    tc.counter().disable().unwrap();
    let per: Vec<u64> = tids.iter().map(|&t| count_for(t)).collect();
    eprintln!("sigtrap per thread: {per:?}, total {}", tc.notifications());
    assert_eq!(tc.notifications(), 15_000);
    assert_eq!(per, vec![3000; 5], "each thread trapped on its own writes");
    assert_eq!(count_for(gettid()), 0, "the main thread wrote nothing");
    assert_eq!(OTHER_TID.load(SeqCst), 0);
    assert_eq!(
        BAD.load(SeqCst),
        0,
        "si_perf_data and si_perf_type as opened"
    );
}

static ADDR_SEEN: AtomicU64 = AtomicU64::new(0);
fn addr_of_hit(t: &SigtrapInfo, _: usize) {
    ADDR_SEEN.store(t.addr, SeqCst);
}

#[test]
fn si_addr_is_the_watched_address_and_sig_data_tells_counters_apart() {
    let (trap, _g) = setup();
    let addr = &WATCHED as *const _ as u64;
    let w = Counter::builder_for(Event::breakpoint(perfring::event::Access::Write, addr, 8))
        .period(1)
        .sigtrap(1)
        .open()
        .unwrap();
    let x = Counter::builder_for(target_breakpoint())
        .period(1)
        .sigtrap(2)
        .open()
        .unwrap();
    let w = trap
        .attach(w, TrapHandler::Callback(addr_of_hit, 0))
        .unwrap();
    let x = trap.attach(x, TrapHandler::Count).unwrap();
    w.counter().enable().unwrap();
    x.counter().enable().unwrap();
    write_watched(7);
    call_target(11);
    w.counter().disable().unwrap();
    x.counter().disable().unwrap();
    assert_eq!(w.notifications(), 7);
    assert_eq!(x.notifications(), 11);
    assert_eq!(ADDR_SEEN.load(SeqCst), addr);
    // The same sig_data twice is refused.
    let dup = Counter::builder_for(target_breakpoint())
        .sigtrap(2)
        .open()
        .unwrap();
    assert_eq!(
        trap.attach(dup, TrapHandler::Count).unwrap_err().kind(),
        perfring::ErrorKind::Busy
    );
    // A counter without .sigtrap is refused.
    let plain = Counter::builder("page-faults").unwrap().open().unwrap();
    assert_eq!(
        trap.attach(plain, TrapHandler::Count).unwrap_err().kind(),
        perfring::ErrorKind::InvalidArgument
    );
}

#[test]
fn other_sigtraps_go_to_the_previous_handler() {
    let (_trap, _g) = setup();
    let before = FOREIGN_TRAPS.load(SeqCst);
    // SAFETY: raising a signal whose handler is installed.
    unsafe { libc::raise(libc::SIGTRAP) };
    assert_eq!(FOREIGN_TRAPS.load(SeqCst), before + 1);
}

#[test]
fn a_child_that_execs_is_not_killed_by_an_inherited_sigtrap_counter() {
    let (trap, _g) = setup();
    // page-faults fire in any program (/bin/true takes ~46); without remove_on_exec the
    // exec'd program would take SIGTRAP with the default action and die. The period is
    // above the few faults of std's posix_spawn child before exec: glibc resets handlers
    // to SIG_DFL there (the child shares the parent's memory), so an overflow in that
    // window would kill it whatever perfring does (see the Sigtrap docs).
    let counter = Counter::builder("page-faults")
        .unwrap()
        .period(20)
        .sigtrap(0xe8ec)
        .inherit(true)
        .enabled(true)
        .open()
        .unwrap();
    assert_eq!(counter.attr().remove_on_exec(), 1);
    let tc = trap.attach(counter, TrapHandler::Count).unwrap();
    for _ in 0..20 {
        let status = std::process::Command::new("/bin/true").status().unwrap();
        assert!(status.success(), "{status:?}");
    }
    drop(tc);
}

/// perfring's launcher forks (handlers stay installed in the child), so even an
/// overflow on every page fault before exec leaves the child alive.
#[test]
fn a_child_started_by_launch_survives_overflows_before_and_after_exec() {
    let (trap, _g) = setup();
    let counter = Counter::builder("page-faults")
        .unwrap()
        .period(1)
        .sigtrap(0x1a0c)
        .inherit(true)
        .enabled(true)
        .open()
        .unwrap();
    let tc = trap.attach(counter, TrapHandler::Count).unwrap();
    for _ in 0..10 {
        let mut child = perfring::launch::Command::new("/bin/true")
            .spawn_stopped()
            .unwrap()
            .start()
            .unwrap();
        assert!(child.wait().unwrap().success());
    }
    drop(tc);
}
