//! The flags the handlers are installed with (`SA_NODEFER`, `SA_ONSTACK`), as
//! `sigaction(2)` reports them and as they behave: with `SA_NODEFER` an overflow
//! raised inside the handler is delivered there, nested. And what `si_perf_type` says
//! in the thread that opened an inherited `task-clock` counter and in one that
//! inherited it.
//!
//! Dispositions are process-wide: the tests take `SERIAL`.

mod util;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Notification, Sigtrap, SigtrapInfo, ThreadSignal, Token};
use perfring::{Counter, SampleType};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Handler nesting: the current depth, the deepest seen, calls of the breakpointed
/// function the handler may still make, and handler runs.
static DEPTH: AtomicU32 = AtomicU32::new(0);
static DEEPEST: AtomicU32 = AtomicU32::new(0);
static CALLS_LEFT: AtomicU32 = AtomicU32::new(0);
static RUNS: AtomicU32 = AtomicU32::new(0);

/// Signal context: once, calls the breakpointed function (an overflow at period 1),
/// then waits up to 200 ms for that overflow's notification to run inside it, which
/// only `SA_NODEFER` allows. Atomics and `clock_gettime` only.
fn nest() {
    RUNS.fetch_add(1, SeqCst);
    let depth = DEPTH.fetch_add(1, SeqCst) + 1;
    DEEPEST.fetch_max(depth, SeqCst);
    if CALLS_LEFT
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        std::hint::black_box(util::perfring_test_target(1));
        let end = Instant::now() + Duration::from_millis(200);
        while DEEPEST.load(SeqCst) < 2 && Instant::now() < end {
            std::hint::spin_loop();
        }
    }
    DEPTH.fetch_sub(1, SeqCst);
}

fn on_trap(_: &SigtrapInfo, _: usize) {
    nest();
}

fn on_signal(_: &Notification, _: usize) {
    nest();
}

fn reset() {
    DEPTH.store(0, SeqCst);
    DEEPEST.store(0, SeqCst);
    CALLS_LEFT.store(1, SeqCst);
    RUNS.store(0, SeqCst);
}

/// `sa_flags` and whether the signal is in `sa_mask`, as installed now.
fn installed(signo: i32) -> (i32, bool) {
    // SAFETY: a zeroed sigaction is valid for the kernel to fill.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: null new action: only reads the current one into `old`.
    assert_eq!(
        unsafe { libc::sigaction(signo, std::ptr::null(), &mut old) },
        0
    );
    // SAFETY: `old.sa_mask` is an initialised sigset_t.
    let masked = unsafe { libc::sigismember(&old.sa_mask, signo) } == 1;
    (old.sa_flags, masked)
}

fn breakpoint() -> perfring::Builder {
    Counter::builder_for(util::target_breakpoint())
        .period(1)
        .sample(SampleType::IP)
        .wakeup_events(1)
}

/// One trap from the test, one from inside its handler: how deep they went.
fn sigtrap_depth(nodefer: bool) -> (u32, u32, u64) {
    reset();
    // Not on the alternate stack: Rust gives each thread a small one (for its stack
    // overflow handler), which two nested frames would overflow.
    let trap = Sigtrap::builder()
        .nodefer(nodefer)
        .onstack(!nodefer)
        .install()
        .unwrap();
    assert_eq!((trap.nodefer(), trap.onstack()), (nodefer, !nodefer));
    let (flags, masked) = installed(libc::SIGTRAP);
    assert_eq!(flags & libc::SA_NODEFER != 0, nodefer);
    assert_eq!(flags & libc::SA_ONSTACK != 0, !nodefer);
    assert_eq!(masked, !nodefer);
    let counter = breakpoint().sigtrap(0x5a_f1a9).open().unwrap();
    let counter = trap
        .attach(counter, TrapHandler::Callback(on_trap, 0))
        .unwrap();
    counter.counter().enable().unwrap();
    util::call_target(1);
    counter.counter().disable().unwrap();
    (
        DEEPEST.load(SeqCst),
        RUNS.load(SeqCst),
        counter.notifications(),
    )
}

#[test]
fn sigtrap_nodefer_delivers_a_trap_raised_in_the_handler_inside_it() {
    let _g = serial();
    // Both traps are delivered either way; only SA_NODEFER nests the second.
    assert_eq!(sigtrap_depth(true), (2, 2, 2));
    assert_eq!(sigtrap_depth(false), (1, 2, 2));
}

#[test]
fn thread_signal_nodefer_delivers_a_notification_raised_in_the_handler_inside_it() {
    let _g = serial();
    for nodefer in [true, false] {
        reset();
        // Its own signal per choice: flags belong to the signal number.
        let sig = ThreadSignal::builder()
            .signal(perfring::Signal::rtmin(3 + u32::from(nodefer)).unwrap())
            .nodefer(nodefer)
            .onstack(false)
            .install()
            .unwrap();
        assert_eq!((sig.nodefer(), sig.onstack()), (nodefer, false));
        let (flags, masked) = installed(sig.signal().number());
        assert_eq!(flags & libc::SA_NODEFER != 0, nodefer);
        assert_eq!(flags & libc::SA_ONSTACK, 0);
        assert_eq!(masked, !nodefer);
        let counter = sig
            .attach(
                breakpoint().open().unwrap(),
                Token(9),
                Handler::Callback(on_signal, 0),
            )
            .unwrap();
        counter.counter().enable().unwrap();
        util::call_target(1);
        // The second notification may still be on its way (the kernel signals from
        // irq_work): wait for it, bounded.
        let end = Instant::now() + Duration::from_secs(5);
        while counter.notifications() < 2 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        counter.counter().disable().unwrap();
        assert_eq!(counter.notifications(), 2, "nodefer {nodefer}");
        assert_eq!(RUNS.load(SeqCst), 2);
        assert_eq!(DEEPEST.load(SeqCst), if nodefer { 2 } else { 1 });
    }
}

static MAIN_TID: AtomicU32 = AtomicU32::new(0);
/// Bit `t` set: `si_perf_type == t` was seen in the opening (0) or inheriting (1) thread.
static TYPES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

fn note_type(t: &SigtrapInfo, _: usize) {
    let inheriting = usize::from(util::gettid() != MAIN_TID.load(SeqCst));
    TYPES[inheriting].fetch_or(1u64 << t.perf_type.min(63), SeqCst);
}

/// `si_perf_type` is the overflowing kernel event's type: the opened counter keeps
/// `PERF_TYPE_SOFTWARE`; an inherited `task-clock` copy reports the task-clock PMU's
/// own (dynamic) type. `PERF_SAMPLE_READ` keeps the kernel from swapping the two
/// threads' copies, so each thread traps with its own.
#[test]
fn si_perf_type_of_an_inherited_task_clock_is_its_pmu_type() {
    let _g = serial();
    let trap = Sigtrap::install().unwrap();
    MAIN_TID.store(util::gettid(), SeqCst);
    let counter = Counter::builder("task-clock:u")
        .unwrap()
        .period(2_000_000)
        .sample(SampleType::READ | SampleType::TID)
        .sigtrap(0x5a_f1aa)
        .inherit(true)
        .inherit_thread(true)
        .open()
        .unwrap();
    let counter = trap
        .attach(counter, TrapHandler::Callback(note_type, 0))
        .unwrap();
    counter.counter().enable().unwrap();
    let worker = std::thread::spawn(|| util::spin_ms(60));
    util::spin_ms(60);
    worker.join().unwrap();
    counter.counter().disable().unwrap();
    let software = 1u64 << perfring::sys::PERF_TYPE_SOFTWARE;
    let (opening, inheriting) = (TYPES[0].load(SeqCst), TYPES[1].load(SeqCst));
    assert_eq!(opening, software, "{opening:#b}");
    assert_eq!(inheriting.count_ones(), 1, "{inheriting:#b}");
    assert_ne!(inheriting, software, "{inheriting:#b}");
}
