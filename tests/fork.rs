//! A process forks while it is notified of overflows; the child drops its copies of the
//! notifiers (as any Rust program does when it leaves their scope) and exits. The
//! parent's notifications and counts stay exact: the child shares the counters' open
//! file descriptions, `O_ASYNC` and rings, and must touch none of them.

mod util;

use std::time::Duration;

use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Budget, Poller, Sigtrap, ThreadSignal, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, SampleType};

const PERIOD: u64 = 10;
/// Calls before the fork and after it.
const CALLS: u64 = 200;

fn breakpoint() -> perfring::Builder {
    Counter::builder_for(util::target_breakpoint())
        .period(PERIOD)
        .sample(SampleType::IP | SampleType::TID)
        .wakeup_events(1)
}

/// Forks; the child drops its bitwise copy of `value` (what the child's own scope
/// would drop) and exits 0, or 1 if that panicked. Returns once the child is reaped.
fn child_drops<T>(value: &T) {
    // SAFETY: fork has no memory-safety preconditions; the child only drops one value
    // and calls _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the child's memory is a copy of the parent's: this is the
            // child's own instance of `value`, read once, dropped once, and the child
            // exits without dropping anything else.
            drop(unsafe { std::ptr::read(value) });
        }))
        .is_ok();
        // SAFETY: _exit ends the child without running the parent's destructors again.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // A child stuck in its teardown (e.g. joining a thread only the parent has) fails
    // the test rather than hanging it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, into a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        assert_eq!(r, 0, "waitpid: {}", std::io::Error::last_os_error());
        if std::time::Instant::now() > deadline {
            // SAFETY: kill and waitpid on our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the child did not finish dropping its copy in 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
}

fn samples(ring: &mut Ring) -> u64 {
    let mut n = 0;
    let mut batch = ring.batch();
    while let Some(r) = batch.next() {
        n += u64::from(r.unwrap().kind() == perfring::sys::PERF_RECORD_SAMPLE);
    }
    n
}

#[test]
fn sigtrap_parent_keeps_its_traps() {
    let trap = Sigtrap::install().unwrap();
    let counter = breakpoint().sigtrap(0xf0_4c01).open().unwrap();
    let counter = trap.attach(counter, TrapHandler::Count).unwrap();
    counter.counter().enable().unwrap();
    util::call_target(CALLS);
    assert_eq!(counter.notifications(), CALLS / PERIOD);
    // Before: the child's teardown disabled the event, for the parent too.
    child_drops(&counter);
    util::call_target(CALLS);
    assert_eq!(counter.notifications(), 2 * CALLS / PERIOD);
    assert_eq!(counter.counter().read().unwrap().value, 2 * CALLS);
}

#[test]
fn thread_signal_parent_keeps_its_signals() {
    let signal = ThreadSignal::builder().install().unwrap();
    let counter = signal
        .attach(breakpoint().open().unwrap(), Token(1), Handler::Count)
        .unwrap();
    let mut ring = Ring::map(counter.counter(), RingSize::Pages(8)).unwrap();
    counter.counter().enable().unwrap();
    util::call_target(CALLS);
    // Before: the child's teardown cleared O_ASYNC, for the parent too.
    child_drops(&counter);
    child_drops(&ring);
    util::call_target(CALLS);
    // One signal per overflow (a non-inherited counter, a real-time signal): the
    // handler has run for each before the call that overflowed returned.
    assert_eq!(counter.notifications(), 2 * CALLS / PERIOD);
    assert_eq!(samples(&mut ring), 2 * CALLS / PERIOD);
}

#[test]
fn poll_parent_keeps_its_wakeups_and_records() {
    let counter = breakpoint().open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(8)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(3), counter, ring).unwrap();
    poller.counter(Token(3)).unwrap().enable().unwrap();
    util::call_target(CALLS);
    child_drops(&poller);
    util::call_target(CALLS);
    let mut events = Vec::new();
    let mut n = 0;
    let read = poller
        .poll_and_drain(&mut events, Some(Duration::from_secs(5)), |_, r| {
            n += u64::from(r.kind() == perfring::sys::PERF_RECORD_SAMPLE)
        })
        .unwrap();
    assert!(read > 0 && !events.is_empty(), "{events:?}");
    assert_eq!(n, 2 * CALLS / PERIOD);
    let acc = poller.accounting(Token(3)).unwrap();
    assert_eq!((acc.samples, acc.lost), (2 * CALLS / PERIOD, 0));
}

#[test]
fn budget_parent_gets_its_n_overflows() {
    const N: u32 = 7;
    let budget = Budget::new(breakpoint(), N);
    let counter = budget.open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(8)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(4), counter, ring).unwrap();
    poller.arm(Token(4), &budget).unwrap();
    util::call_target(2 * PERIOD);
    child_drops(&budget);
    child_drops(&poller);
    util::call_target(CALLS);
    let mut events = Vec::new();
    let mut n = 0;
    poller
        .poll_and_drain(&mut events, Some(Duration::from_secs(5)), |_, r| {
            n += u64::from(r.kind() == perfring::sys::PERF_RECORD_SAMPLE)
        })
        .unwrap();
    // Exactly the budget: the child neither refreshed nor disabled the counter.
    assert_eq!(n, u64::from(N));
    assert!(events.iter().any(|e| e.kind == perfring::NotifyKind::Hup));
    // It counted up to its last overflow, then disabled itself (the budget's end).
    assert_eq!(
        poller.counter(Token(4)).unwrap().read().unwrap().value,
        u64::from(N) * PERIOD
    );
}

// Resolving `mem:hit:x` in a program's ELF is the profile layer's.
#[cfg(feature = "profile")]
#[test]
fn sampler_parent_keeps_every_thread_exact() {
    use perfring::launch;
    use perfring::records::RecordKind;
    use perfring::sampler::{Sampler, Target, TargetEnd};

    const THREADS: u64 = 4;
    const THREAD_CALLS: u64 = 1000;
    let prog = util::threads_program();
    let tid_file = util::temp_path("fork-tids");
    let cmd = launch::Command::new(&prog)
        .args([THREADS.to_string(), THREAD_CALLS.to_string()])
        .arg(&tid_file);
    let hit = perfring::resolve::resolve_event(
        "mem:hit:x",
        &perfring::resolve::TargetImage::Spawned(prog.clone()),
    )
    .unwrap();
    let event = Counter::builder_for(hit)
        .period(PERIOD)
        .sample(SampleType::IP | SampleType::TID)
        .wakeup_events(1);
    // Exact periods: its tracer thread holds the command's new threads; a child
    // dropping its copy must leave that thread (the parent's) alone.
    let mut sampler = Sampler::builder(Target::Command(cmd))
        .event(event)
        .exact_periods(true)
        .start()
        .unwrap();
    child_drops(&sampler);
    let mut per_tid = std::collections::BTreeMap::new();
    let mut take = |d: perfring::sampler::Delivery<'_>| {
        if let (Some(0), RecordKind::Sample(_)) = (d.event, d.record.kind()) {
            *per_tid.entry(d.tid.unwrap()).or_insert(0u64) += 1;
        }
    };
    let end = loop {
        if let Some(end) = sampler.target_ended().unwrap() {
            break end;
        }
        sampler
            .poll(Some(Duration::from_millis(20)), &mut take)
            .unwrap();
    };
    sampler.drain(&mut take).unwrap();
    assert!(
        matches!(end, TargetEnd::Exited(s) if s.success()),
        "{end:?}"
    );
    let expected: std::collections::BTreeMap<u32, u64> = util::tids_in(&tid_file)
        .into_iter()
        .map(|t| (t, THREAD_CALLS / PERIOD))
        .collect();
    assert_eq!(expected.len() as u64, THREADS);
    assert_eq!(per_tid, expected);
    assert_eq!(sampler.stats().lost, 0);
}
