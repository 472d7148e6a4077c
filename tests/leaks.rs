//! 10,000 cycles of open → map → register → one overflow → drop, through every notifier
//! (poll driver, thread signal, signalfd, sigtrap, budget) and the sampler (of this
//! thread, and every 50th cycle of a command run to its end): afterwards the process's
//! fds, mappings, signal registries, signal mask and signal dispositions are exactly
//! what they were before.
//!
//! One test alone in its binary, so that nothing else opens, maps or allocates
//! meanwhile; a first round of cycles installs the once-per-process handlers and warms
//! the allocator before the "before" snapshot.
#![deny(clippy::undocumented_unsafe_blocks)]

mod util;

use std::time::Duration;

use perfring::notify::signal::Handler;
use perfring::notify::signalfd::SignalFd;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Budget, NotifyKind, Poller, Sigtrap, ThreadSignal, Token};
use perfring::ring::{Ring, RingSize};
use perfring::sampler::{Sampler, Target};
use perfring::{Counter, SampleType};
use util::*;

const CYCLES: usize = 10_000;

/// What a leak would change.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    /// `/proc/self/fd`: each fd and what it points at.
    fds: Vec<(String, String)>,
    /// `/proc/self/maps` lines of perf rings (`anon_inode:[perf_event]`).
    perf_maps: Vec<String>,
    /// Number of `/proc/self/maps` lines.
    maps: usize,
    thread_signal_registered: usize,
    sigtrap_registered: usize,
    /// Blocked signals of this thread.
    blocked: Vec<i32>,
    /// Every signal's handler address and flags.
    actions: Vec<(usize, i32)>,
}

fn snapshot() -> Snapshot {
    let mut fds: Vec<(String, String)> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                target.to_string_lossy().into_owned(),
            ))
        })
        .collect();
    fds.sort();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    // SAFETY: a zeroed sigset_t is valid for the kernel to overwrite.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null new set only reads the current mask into `mask`.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) };
    let blocked = (1..=libc::SIGRTMAX())
        // SAFETY: `mask` was filled in by the kernel; `s` is a valid signal number.
        .filter(|&s| unsafe { libc::sigismember(&mask, s) } == 1)
        .collect();
    let actions = (1..=libc::SIGRTMAX())
        .map(|s| {
            // SAFETY: a zeroed sigaction is valid for the kernel to overwrite.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current one (EINVAL for the
            // signals glibc reserves, which then read as zero).
            unsafe { libc::sigaction(s, std::ptr::null(), &mut old) };
            (old.sa_sigaction, old.sa_flags)
        })
        .collect();
    Snapshot {
        fds,
        perf_maps: maps
            .lines()
            .filter(|l| l.contains("perf_event"))
            .map(str::to_owned)
            .collect(),
        maps: maps.lines().count(),
        thread_signal_registered: ThreadSignal::registered(),
        sigtrap_registered: Sigtrap::registered(),
        blocked,
        actions,
    }
}

/// An execute breakpoint on `perfring_test_target` overflowing at every call.
fn breakpoint() -> perfring::Builder {
    Counter::builder_for(target_breakpoint())
        .period(1)
        .sample(SampleType::IP)
        .wakeup_events(1)
}

/// Notifications and samples seen over all cycles, to show each mechanism really ran.
#[derive(Debug, Default)]
struct Seen {
    polled: u64,
    signalled: u64,
    signalfd: u64,
    trapped: u64,
    budget_hups: u64,
    sampled: u64,
    commands: u64,
}

fn cycle(i: usize, sig: ThreadSignal, trap: Sigtrap, seen: &mut Seen) {
    let ring_size = RingSize::Pages(1);
    let token = Token(i as u64);

    // Poll driver.
    let counter = breakpoint().open().unwrap();
    let ring = Ring::map(&counter, ring_size).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(token, counter, ring).unwrap();
    poller.counter(token).unwrap().enable().unwrap();
    call_target(1);
    let mut events = Vec::new();
    seen.polled += poller
        .poll_and_drain(&mut events, Some(Duration::from_secs(10)), |_, _| {})
        .unwrap();
    drop(poller);

    // A real-time signal to this thread.
    let counter = breakpoint().open().unwrap();
    let ring = Ring::map(&counter, ring_size).unwrap();
    let sc = sig.attach(counter, token, Handler::Count).unwrap();
    sc.counter().enable().unwrap();
    call_target(1);
    sc.counter().disable().unwrap();
    seen.signalled += sc.notifications();
    drop((sc, ring));

    // The same, read from a signalfd.
    let mut sfd = SignalFd::new(None).unwrap();
    let counter = breakpoint().open().unwrap();
    let ring = Ring::map(&counter, ring_size).unwrap();
    sfd.attach(counter, token).unwrap();
    sfd.counter(token).unwrap().enable().unwrap();
    call_target(1);
    let mut out = Vec::new();
    sfd.read(&mut out).unwrap();
    seen.signalfd += out.len() as u64;
    drop((sfd, ring));

    // Synchronous SIGTRAP.
    let counter = breakpoint().sigtrap(0x1eac + i as u64).open().unwrap();
    let ring = Ring::map(&counter, ring_size).unwrap();
    let tc = trap.attach(counter, TrapHandler::Count).unwrap();
    tc.counter().enable().unwrap();
    call_target(1);
    seen.trapped += tc.notifications();
    drop((tc, ring));

    // A budget of one overflow, spent and re-armed (a breakpoint's re-arm reopens it).
    let budget = Budget::new(breakpoint(), 1);
    let counter = budget.open().unwrap();
    let ring = Ring::map(&counter, ring_size).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(token, counter, ring).unwrap();
    poller.arm(token, &budget).unwrap();
    call_target(1);
    poller
        .poll_and_drain(&mut events, Some(Duration::from_secs(10)), |_, _| {})
        .unwrap();
    seen.budget_hups += events.iter().filter(|e| e.kind == NotifyKind::Hup).count() as u64;
    poller.rearm(token, &budget, ring_size, |_, _| {}).unwrap();
    drop(poller);

    // The sampler on this thread (its event and its tracking counter, a ring each).
    let mut sampler = Sampler::builder(Target::Tid(gettid() as i32))
        .event(breakpoint())
        .ring_size(ring_size)
        .tracking_ring_size(ring_size)
        .start()
        .unwrap();
    call_target(1);
    sampler.drain(|_| {}).unwrap();
    seen.sampled += sampler.stats().samples;
    drop(sampler);

    // Every 50th cycle, the sampler of a command (a child, its pipes, inherited
    // counters and their anchor rings), run to its end.
    if i.is_multiple_of(50) {
        let mut sampler = Sampler::builder(Target::Command(perfring::launch::Command::new("true")))
            .event(breakpoint())
            .ring_size(ring_size)
            .tracking_ring_size(ring_size)
            .start()
            .unwrap();
        while sampler.target_ended().unwrap().is_none() {
            sampler
                .poll(Some(Duration::from_millis(10)), |_| {})
                .unwrap();
        }
        sampler.drain(|_| {}).unwrap();
        seen.commands += 1;
    }
}

#[test]
fn ten_thousand_cycles_through_every_notifier_leave_nothing_behind() {
    let sig = ThreadSignal::builder().install().unwrap();
    let trap = Sigtrap::install().unwrap();
    let mut warm = Seen::default();
    for i in 0..100 {
        cycle(i, sig, trap, &mut warm);
    }
    let before = snapshot();
    assert!(before.perf_maps.is_empty(), "{:?}", before.perf_maps);
    let mut seen = Seen::default();
    for i in 0..CYCLES {
        cycle(i, sig, trap, &mut seen);
    }
    let after = snapshot();
    eprintln!(
        "{CYCLES} cycles: {seen:?}; {} fds, {} mappings",
        after.fds.len(),
        after.maps
    );
    let n = CYCLES as u64;
    assert_eq!(
        (
            seen.polled,
            seen.signalled,
            seen.signalfd,
            seen.trapped,
            seen.budget_hups
        ),
        (n, n, n, n, n),
        "one overflow per mechanism per cycle"
    );
    assert_eq!(after, before);
    assert_eq!(ThreadSignal::stray(), 0);
    assert_eq!(Sigtrap::stray(), 0);
}
