//! The epoll driver: exact sample counts, wake-up thresholds, HUP on exit.

mod util;

use std::time::Duration;

use perfring::notify::{NotifyKind, Poller, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{sys, Counter, SampleType, Scope};
use util::*;

fn bp_counter(period: u64) -> perfring::Builder {
    Counter::builder_for(target_breakpoint())
        .period(period)
        .sample(SampleType::IP | SampleType::TID)
}

/// Runs `work` on another thread while polling here, so wake-ups are really waited for.
fn poll_while<F: FnOnce() + Send + 'static>(
    poller: &mut Poller,
    work: F,
) -> (u64, u64, Vec<NotifyKind>) {
    let h = std::thread::spawn(work);
    let mut events = Vec::new();
    let (mut wakeups, mut samples) = (0u64, 0u64);
    let mut kinds = Vec::new();
    loop {
        let finished = h.is_finished();
        poller
            .poll_and_drain(&mut events, Some(Duration::from_millis(20)), |_, rec| {
                samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE)
            })
            .unwrap();
        wakeups += events
            .iter()
            .filter(|e| e.kind == NotifyKind::Overflow)
            .count() as u64;
        kinds.extend(events.iter().map(|e| e.kind));
        // A hung-up fd (the thread exited) is reported on every poll: stop then.
        if finished && events.iter().all(|e| e.kind == NotifyKind::Hup) {
            break;
        }
    }
    h.join().unwrap();
    poller.drain_all(|_, rec| samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE));
    (wakeups, samples, kinds)
}

/// A breakpoint on a thread, watched by poll from the main thread.
fn thread_breakpoint(
    period: u64,
    f: impl FnOnce(perfring::Builder) -> perfring::Builder,
) -> (
    Poller,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (tid, tx_go, h) = gated_thread(|| {
        call_target(10_000);
    });
    let counter = f(bp_counter(period).target(Scope::Thread(tid as i32)))
        .enabled(true)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(64)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(1), counter, ring).unwrap();
    (poller, tx_go, h)
}

#[test]
fn wakeup_events_1_gives_exactly_100_samples_from_10000_calls_at_period_100() {
    let (mut poller, go, h) = thread_breakpoint(100, |b| b.wakeup_events(1));
    go.send(()).unwrap();
    let (wakeups, samples, kinds) = poll_while(&mut poller, move || h.join().unwrap());
    eprintln!("poll wakeup_events(1): {wakeups} wake-ups, {samples} samples");
    assert_eq!(samples, 100);
    assert!((1..=100).contains(&wakeups), "{wakeups}");
    let acct = poller.accounting(Token(1)).unwrap();
    assert_eq!(acct.samples, 100);
    assert_eq!(acct.lost, 0);
    assert_eq!(acct.throttled, 0);
    // The thread exited: its counter reports EPOLLHUP.
    assert!(
        kinds.contains(&NotifyKind::Hup) || acct.hups > 0 || {
            let mut ev = Vec::new();
            poller
                .poll(&mut ev, Some(Duration::from_millis(50)))
                .unwrap();
            ev.iter().any(|e| e.kind == NotifyKind::Hup)
        }
    );
}

#[test]
fn wakeup_events_10_wakes_at_most_every_10_samples() {
    let (mut poller, go, h) = thread_breakpoint(100, |b| b.wakeup_events(10));
    go.send(()).unwrap();
    let (wakeups, samples, _) = poll_while(&mut poller, move || h.join().unwrap());
    eprintln!("poll wakeup_events(10): {wakeups} wake-ups, {samples} samples");
    assert_eq!(samples, 100);
    // 10 wake-ups from the threshold, plus one HUP when the thread exits.
    assert!(wakeups <= 11, "{wakeups}");
}

#[test]
fn wakeup_watermark_wakes_per_bytes() {
    // Samples are 24 bytes (header + IP + TID); a 240-byte watermark is 10 samples.
    let (mut poller, go, h) = thread_breakpoint(100, |b| b.wakeup_watermark(240));
    go.send(()).unwrap();
    let (wakeups, samples, _) = poll_while(&mut poller, move || h.join().unwrap());
    eprintln!("poll wakeup_watermark(240): {wakeups} wake-ups, {samples} samples");
    assert_eq!(samples, 100);
    assert!(wakeups <= 11, "{wakeups}");
}

#[test]
fn same_thread_poll_counts_every_sample_even_when_coalesced() {
    // The breakpointed work runs on this thread, so all wake-ups pile up before the
    // first poll: one readiness, 100 samples.
    let counter = bp_counter(100).wakeup_events(1).open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(9), counter, ring).unwrap();
    poller.counter(Token(9)).unwrap().enable().unwrap();
    call_target(10_000);
    poller.counter(Token(9)).unwrap().disable().unwrap();
    let mut events = Vec::new();
    let mut samples = 0;
    let n = poller
        .poll_and_drain(&mut events, Some(Duration::ZERO), |t, rec| {
            assert_eq!(t, Token(9));
            samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE);
        })
        .unwrap();
    assert_eq!(events.len(), 1, "readiness is reported once");
    assert_eq!(events[0].kind, NotifyKind::Overflow);
    assert_eq!(n, 100);
    assert_eq!(samples, 100);
    // Readiness was consumed by that poll.
    poller.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(events.is_empty());
}

#[test]
fn many_counters_are_told_apart_by_token() {
    let mut poller = Poller::new().unwrap();
    for (t, period) in [(1u64, 100u64), (2, 250), (3, 1000)] {
        let c = bp_counter(period).wakeup_events(1).open().unwrap();
        let r = Ring::map(&c, RingSize::Pages(8)).unwrap();
        poller.register(Token(t), c, r).unwrap();
    }
    let tokens: Vec<_> = poller.tokens().collect();
    for t in &tokens {
        poller.counter(*t).unwrap().enable().unwrap();
    }
    call_target(10_000);
    let mut events = Vec::new();
    let mut per = std::collections::HashMap::new();
    poller
        .poll_and_drain(&mut events, Some(Duration::ZERO), |t, rec| {
            if rec.kind() == sys::PERF_RECORD_SAMPLE {
                *per.entry(t).or_insert(0u64) += 1;
            }
        })
        .unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(per[&Token(1)], 100);
    assert_eq!(per[&Token(2)], 40);
    assert_eq!(per[&Token(3)], 10);
    let pf = Counter::builder("page-faults")
        .unwrap()
        .period(1)
        .open()
        .unwrap();
    let pf_ring = Ring::map(&pf, RingSize::Pages(1)).unwrap();
    let err = poller.register(Token(1), pf, pf_ring).unwrap_err();
    assert_eq!(
        err.kind(),
        perfring::ErrorKind::InvalidArgument,
        "duplicate token refused"
    );
    let (c, _r) = poller.deregister(Token(2)).unwrap();
    drop(c);
    assert!(poller.counter(Token(2)).is_none());
}

#[test]
fn poll_and_drain_all_finds_records_whose_readiness_was_consumed() {
    // As when an event loop's epoll has polled the perf fd through ours first.
    let counter = bp_counter(100).wakeup_events(1).open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(4), counter, ring).unwrap();
    poller.counter(Token(4)).unwrap().enable().unwrap();
    call_target(10_000);
    let mut events = Vec::new();
    poller.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert_eq!(events.len(), 1, "readiness consumed here, ring left full");
    let mut samples = 0;
    let n = poller
        .poll_and_drain_all(&mut events, |_, rec| {
            samples += u64::from(rec.kind() == sys::PERF_RECORD_SAMPLE)
        })
        .unwrap();
    assert_eq!((n, samples), (100, 100));
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].token, events[0].kind),
        (Token(4), NotifyKind::Overflow)
    );
    assert_eq!(poller.accounting(Token(4)).unwrap().notifications, 2);
    // Nothing left: nothing reported.
    assert_eq!(
        poller.poll_and_drain_all(&mut events, |_, _| {}).unwrap(),
        0
    );
    assert!(events.is_empty());
}
