//! Real-time signals to a chosen thread: exact counts, thread targeting, queueing,
//! refusal of foreign handlers, and `kill()` signals ignored.
//!
//! Signal dispositions are process-wide, so the tests here take `SERIAL`.

mod util;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use perfring::notify::signal::Handler;
use perfring::notify::{Notification, NotifyKind, NotifyQueue, ThreadSignal, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, ErrorKind, SampleType, Signal};
use util::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn bp(period: u64) -> perfring::Builder {
    Counter::builder_for(target_breakpoint())
        .period(period)
        .sample(SampleType::IP)
        .wakeup_events(1)
}

static HITS: AtomicU64 = AtomicU64::new(0);
static LAST_IP: AtomicU64 = AtomicU64::new(0);
static LAST_TID: AtomicU32 = AtomicU32::new(0);
static LAST_TOKEN: AtomicU64 = AtomicU64::new(0);
static BAD_DATA: AtomicU64 = AtomicU64::new(0);

fn record(n: &Notification, data: usize) {
    // Signal context: atomics and gettid only.
    // No panics here: a wrong `data` is counted and checked outside.
    if data != 0xfeed {
        BAD_DATA.fetch_add(1, SeqCst);
    }
    HITS.fetch_add(1, SeqCst);
    LAST_IP.store(n.ip, SeqCst);
    LAST_TOKEN.store(n.token.0, SeqCst);
    LAST_TID.store(gettid(), SeqCst);
}

#[test]
fn breakpoint_period_100_gives_exactly_100_signals_and_100_samples() {
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    assert!(sig.signal().number() >= libc::SIGRTMIN() && sig.signal().number() <= libc::SIGRTMAX());
    HITS.store(0, SeqCst);
    let counter = bp(100).open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    let sc = sig
        .attach(counter, Token(77), Handler::Callback(record, 0xfeed))
        .unwrap();
    sc.counter().enable().unwrap();
    call_target(10_000);
    sc.counter().disable().unwrap();
    ring.skip_all();
    let acct = sc.accounting(Some(&ring.stats()));
    eprintln!(
        "thread signal: {acct:?}, last ip {:#x} (breakpointed fn {:#x})",
        LAST_IP.load(SeqCst),
        target_addr()
    );
    assert_eq!(acct.samples, 100);
    assert_eq!(acct.notifications, 100, "one queued RT signal per overflow");
    assert_eq!(HITS.load(SeqCst), 100);
    assert_eq!(acct.hups, 0);
    assert_eq!(LAST_TOKEN.load(SeqCst), 77);
    assert_eq!(BAD_DATA.load(SeqCst), 0);
    assert_eq!(LAST_TID.load(SeqCst), gettid());
    // Measured: the signal is delivered on return from the debug exception, before
    // the breakpointed instruction runs, so the interrupted IP is the function itself.
    assert_eq!(
        LAST_IP.load(SeqCst),
        target_addr(),
        "interrupted IP from the ucontext"
    );
}

#[test]
fn signals_go_to_the_chosen_thread() {
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    HITS.store(0, SeqCst);
    LAST_TID.store(0, SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicU32::new(0));
    let stop2 = stop.clone();
    let waiter = std::thread::spawn(move || {
        tx.send(gettid()).unwrap();
        while stop2.load(SeqCst) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    let waiter_tid = rx.recv().unwrap();
    // The breakpoint watches this thread; its signals go to the waiter.
    let counter = bp(100).open().unwrap();
    let sc = sig
        .attach_to(
            counter,
            Token(5),
            waiter_tid as i32,
            Handler::Callback(record, 0xfeed),
        )
        .unwrap();
    sc.counter().enable().unwrap();
    call_target(10_000);
    sc.counter().disable().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while HITS.load(SeqCst) < 100 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.store(1, SeqCst);
    waiter.join().unwrap();
    assert_eq!(HITS.load(SeqCst), 100);
    assert_eq!(
        LAST_TID.load(SeqCst),
        waiter_tid,
        "F_OWNER_TID targets the thread"
    );
    drop(sc);
}

#[test]
fn queue_steers_notifications_to_a_normal_thread() {
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    let q = Arc::new(NotifyQueue::new(256));
    let counter = bp(100).open().unwrap();
    let sc = sig
        .attach(counter, Token(3), Handler::Queue(q.clone()))
        .unwrap();
    sc.counter().enable().unwrap();
    call_target(10_000);
    sc.counter().disable().unwrap();
    let popped: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
    assert_eq!(popped.len(), 100);
    assert!(popped
        .iter()
        .all(|n| n.token == Token(3) && n.kind == NotifyKind::Overflow));
    assert!(popped
        .iter()
        .all(|n| n.fd == std::os::fd::AsRawFd::as_raw_fd(sc.counter())));
    assert_eq!(q.dropped(), 0);

    // A small queue drops (and counts) what does not fit; the ring still has all.
    let small = Arc::new(NotifyQueue::new(8));
    drop(sc);
    let counter = bp(100).open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    let sc = sig
        .attach(counter, Token(4), Handler::Queue(small.clone()))
        .unwrap();
    sc.counter().enable().unwrap();
    call_target(10_000);
    sc.counter().disable().unwrap();
    ring.skip_all();
    assert_eq!(small.pushed(), 8);
    assert_eq!(small.dropped(), 92);
    assert_eq!(ring.stats().samples, 100);
    assert_eq!(sc.notifications(), 100);
}

extern "C" fn foreign(_: libc::c_int) {}

#[test]
fn a_foreign_handler_is_refused_unless_chaining() {
    let _s = serial();
    let signo = libc::SIGRTMAX() - 1;
    // SAFETY: installing a trivial handler for a real-time signal nobody else uses.
    unsafe {
        libc::signal(
            signo,
            foreign as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    let err = ThreadSignal::builder()
        .signal(Signal::new(signo).unwrap())
        .install()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Signal);
    assert!(err.to_string().contains("already has a handler"), "{err}");
    let err = ThreadSignal::builder()
        .signal(Signal::new(libc::SIGSEGV).unwrap())
        .install()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Signal, "a fault signal");
    let sig = ThreadSignal::builder()
        .signal(Signal::new(signo).unwrap())
        .chain(true)
        .install()
        .unwrap();
    assert_eq!(sig.signal().number(), signo);
    // Installing again returns the same handle.
    assert_eq!(
        ThreadSignal::builder()
            .signal(Signal::new(signo).unwrap())
            .install()
            .unwrap(),
        sig
    );
}

static CHAINED: AtomicU64 = AtomicU64::new(0);
extern "C" fn counting_foreign(_: libc::c_int) {
    CHAINED.fetch_add(1, SeqCst);
}

#[test]
fn kill_sent_signals_are_ignored_and_chained() {
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    let counter = bp(100).open().unwrap();
    let sc = sig.attach(counter, Token(1), Handler::Count).unwrap();
    let before = ThreadSignal::stray();
    // SAFETY: tgkill to our own thread with a signal we handle.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            gettid(),
            sig.signal().number(),
        )
    };
    // SAFETY: as above.
    unsafe { libc::kill(libc::getpid(), sig.signal().number()) };
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(sc.notifications(), 0, "si_code <= 0 is not an overflow");
    assert!(ThreadSignal::stray() >= before + 2);

    // With chaining, such signals reach the previous handler.
    let signo = libc::SIGRTMAX() - 2;
    // SAFETY: a trivial, async-signal-safe handler on an unused real-time signal.
    unsafe {
        libc::signal(
            signo,
            counting_foreign as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    ThreadSignal::builder()
        .signal(Signal::new(signo).unwrap())
        .chain(true)
        .install()
        .unwrap();
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), gettid(), signo) };
    assert_eq!(CHAINED.load(SeqCst), 1);
}

#[test]
fn dropping_a_registration_drains_and_a_reused_fd_starts_clean() {
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    for round in 0..20 {
        let counter = bp(1).open().unwrap();
        let sc = sig.attach(counter, Token(round), Handler::Count).unwrap();
        sc.counter().enable().unwrap();
        call_target(50);
        sc.counter().disable().unwrap();
        assert_eq!(sc.notifications(), 50, "round {round}");
        let c = sc.detach();
        drop(c);
    }
}

#[test]
fn signals_are_per_overflow_not_per_wakeup_and_need_no_ring() {
    // Measured on 6.18: the kernel sends the fasync signal on every overflow, whatever
    // wakeup_events says and whether or not a ring is mapped; breakpoint signals are
    // delivered before the next user instruction, so none coalesce even at period 1.
    let _s = serial();
    let sig = ThreadSignal::builder().install().unwrap();
    for (period, wakeup, map_ring, expect) in [
        (100u64, 10u32, true, 100u64),
        (100, 1, false, 100),
        (1, 1, true, 10_000),
    ] {
        let c = Counter::builder_for(target_breakpoint())
            .period(period)
            .sample(SampleType::IP)
            .wakeup_events(wakeup)
            .open()
            .unwrap();
        let mut ring = map_ring.then(|| Ring::map(&c, RingSize::Pages(64)).unwrap());
        let sc = sig.attach(c, Token(1), Handler::Count).unwrap();
        sc.counter().enable().unwrap();
        call_target(10_000);
        sc.counter().disable().unwrap();
        assert_eq!(
            sc.notifications(),
            expect,
            "period {period} wakeup {wakeup}"
        );
        if let Some(r) = ring.as_mut() {
            r.skip_all();
            assert_eq!(r.stats().samples, expect);
        }
    }
}
