//! The tokio driver (`--features tokio`): exact sample counts through the stream and
//! through `next_batch`, a spent budget's `Hup`, and silence when nothing happens.
#![cfg(feature = "tokio")]

mod util;

use std::time::Duration;

use futures_util::StreamExt;
use perfring::notify::tokio::AsyncPoller;
use perfring::notify::{Budget, NotifyKind, Poller, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{sys, Counter, SampleType, Scope};
use util::*;

/// Every wait is bounded, so a lost wake-up fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

fn bp_counter(period: u64) -> perfring::Builder {
    Counter::builder_for(target_breakpoint())
        .period(period)
        .sample(SampleType::IP | SampleType::TID)
        .wakeup_events(1)
}

/// A std thread that calls the breakpointed function 10000 times once told to go, and
/// an [`AsyncPoller`] watching it under `Token(1)`.
fn thread_calling_target(
    period: u64,
) -> (
    AsyncPoller,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (tid, tx_go, h) = gated_thread(|| {
        call_target(10_000);
    });
    let counter = bp_counter(period)
        .target(Scope::Thread(tid as i32))
        .enabled(true)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(64)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(1), counter, ring).unwrap();
    (AsyncPoller::new(poller).unwrap(), tx_go, h)
}

#[tokio::test]
async fn next_batch_counts_exactly_100_samples_from_another_thread() {
    let (mut p, go, h) = thread_calling_target(100);
    go.send(()).unwrap();
    let (mut samples, mut batches, mut overflows) = (0u64, 0u64, 0u64);
    let mut events = Vec::new();
    // The thread's exit is reported once as `Hup`; its records are drained by then.
    loop {
        let n = tokio::time::timeout(
            PATIENCE,
            p.next_batch(&mut events, |t, rec| {
                assert_eq!(t, Token(1));
                samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE);
            }),
        )
        .await
        .expect("a batch within the patience")
        .unwrap();
        assert!(!events.is_empty(), "a batch always says who ({n} records)");
        batches += 1;
        overflows += events
            .iter()
            .filter(|e| e.kind == NotifyKind::Overflow)
            .count() as u64;
        if events.iter().any(|e| e.kind == NotifyKind::Hup) {
            break;
        }
    }
    h.join().unwrap();
    eprintln!("tokio next_batch: {batches} batches, {overflows} overflow notifications");
    assert_eq!(samples, 100);
    assert!((1..=100).contains(&overflows), "{overflows}");
    let a = p.poller().accounting(Token(1)).unwrap();
    assert_eq!((a.samples, a.lost, a.throttled, a.hups), (100, 0, 0, 1));
    // The exit was reported once: nothing more arrives.
    let more = tokio::time::timeout(Duration::from_millis(100), p.next()).await;
    assert!(more.is_err(), "{more:?}");
}

#[tokio::test]
async fn stream_counts_exactly_100_samples_from_another_thread() {
    let (mut p, go, h) = thread_calling_target(100);
    go.send(()).unwrap();
    let mut overflows = 0u64;
    loop {
        let n = tokio::time::timeout(PATIENCE, p.next())
            .await
            .expect("a notification within the patience")
            .expect("the stream never ends")
            .unwrap();
        assert_eq!(n.token, Token(1));
        match n.kind {
            NotifyKind::Overflow => overflows += 1,
            NotifyKind::Hup => break,
        }
    }
    h.join().unwrap();
    eprintln!("tokio stream: {overflows} overflow notifications");
    let a = p.poller().accounting(Token(1)).unwrap();
    assert_eq!((a.samples, a.lost, a.throttled, a.hups), (100, 0, 0, 1));
    assert_eq!(a.notifications, overflows + 1);
}

#[tokio::test]
async fn a_spent_budget_arrives_as_hup_through_the_stream() {
    let budget = Budget::new(bp_counter(100).sample(SampleType::IP), 5);
    let counter = budget.open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(3), counter, ring).unwrap();
    let mut p = AsyncPoller::new(poller).unwrap();
    p.arm(Token(3), &budget).unwrap();
    // The breakpoint watches this thread, which also runs the (current-thread) runtime.
    call_target(10_000);
    let mut kinds = Vec::new();
    loop {
        let n = tokio::time::timeout(PATIENCE, p.next())
            .await
            .expect("the Hup within the patience")
            .unwrap()
            .unwrap();
        assert_eq!(n.token, Token(3));
        kinds.push(n.kind);
        if n.kind == NotifyKind::Hup {
            break;
        }
    }
    assert_eq!(kinds.last(), Some(&NotifyKind::Hup));
    let a = p.poller().accounting(Token(3)).unwrap();
    assert_eq!((a.samples, a.hups), (5, 1), "{kinds:?}");
    // Spent: more calls overflow no more, and no second Hup comes.
    call_target(10_000);
    let more = tokio::time::timeout(Duration::from_millis(100), p.next()).await;
    assert!(more.is_err(), "{more:?}");
    assert_eq!(p.poller().accounting(Token(3)).unwrap().samples, 5);
}

#[tokio::test]
async fn nothing_happens_so_nothing_arrives() {
    let counter = bp_counter(1).enabled(true).open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(8)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(0), counter, ring).unwrap();
    let mut p = AsyncPoller::new(poller).unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(200), p.next()).await;
    assert!(waited.is_err(), "{waited:?}");
    let mut events = Vec::new();
    let batch = tokio::time::timeout(
        Duration::from_millis(50),
        p.next_batch(&mut events, |_, _| panic!("no records")),
    )
    .await;
    assert!(batch.is_err(), "{batch:?}");
    let a = p.poller().accounting(Token(0)).unwrap();
    assert_eq!((a.notifications, a.records), (0, 0));
    // ... and one call is then seen at once.
    call_target(1);
    let n = tokio::time::timeout(PATIENCE, p.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((n.token, n.kind), (Token(0), NotifyKind::Overflow));
    assert_eq!(p.poller().accounting(Token(0)).unwrap().samples, 1);
}

static INTERRUPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_interrupt(_: libc::c_int) {
    // Async-signal-safe: one atomic add.
    INTERRUPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The runtime's thread takes a storm of signals whose handler has no `SA_RESTART`,
/// so any blocking call of the reactor or of the driver would fail with `EINTR`:
/// still exactly 100 samples and the thread's exit, through `next_batch`. (The driver
/// only ever asks epoll with a zero timeout, which never fails with `EINTR`; tokio's
/// own `epoll_wait` retries.)
#[tokio::test(flavor = "current_thread")]
async fn a_signal_storm_on_the_runtime_thread_loses_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // SAFETY: an all-zero sigaction is valid (empty mask, no flags: no SA_RESTART).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = count_interrupt as extern "C" fn(libc::c_int) as usize;
    // SAFETY: `act` is valid and its handler async-signal-safe and 'static.
    let r = unsafe { libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let storm = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            // SAFETY: this (the runtime's) thread lives until the storm is joined below.
            unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR2) };
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let before = INTERRUPTS.load(Ordering::Relaxed);
    // Begin once the storm is under way (a busy machine may schedule it late).
    while INTERRUPTS.load(Ordering::Relaxed) == before {
        std::thread::yield_now();
    }
    let (mut p, go, h) = thread_calling_target(100);
    go.send(()).unwrap();
    let (mut samples, mut hups) = (0u64, 0u64);
    let mut events = Vec::new();
    while hups == 0 {
        tokio::time::timeout(
            PATIENCE,
            p.next_batch(&mut events, |_, rec| {
                samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE);
            }),
        )
        .await
        .expect("a batch within the patience: no wake-up lost to EINTR")
        .unwrap();
        hups += events.iter().filter(|e| e.kind == NotifyKind::Hup).count() as u64;
    }
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    h.join().unwrap();
    let signals = INTERRUPTS.load(Ordering::Relaxed) - before;
    assert!(signals > 0, "the storm reached the runtime's thread");
    assert_eq!((samples, hups), (100, 1));
    let a = p.poller().accounting(Token(1)).unwrap();
    assert_eq!((a.samples, a.lost, a.hups), (100, 0, 1));
}
