//! Overflow signals read from a signalfd: exact counts, budgets, strays, epoll.

mod util;

use perfring::notify::signalfd::SignalFd;
use perfring::notify::{Budget, NotifyKind, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, SampleType};
use util::*;

fn bp(period: u64) -> perfring::Builder {
    Counter::builder_for(target_breakpoint())
        .period(period)
        .sample(SampleType::IP)
        .wakeup_events(1)
}

#[test]
fn breakpoint_period_100_gives_exactly_100_signals_read() {
    let mut sfd = SignalFd::new(None).unwrap();
    let counter = bp(100).open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    sfd.attach(counter, Token(8)).unwrap();
    sfd.counter(Token(8)).unwrap().enable().unwrap();
    call_target(10_000);
    sfd.counter(Token(8)).unwrap().disable().unwrap();
    let mut out = Vec::new();
    let n = sfd.read(&mut out).unwrap();
    ring.skip_all();
    eprintln!("signalfd: {n} signals, {} samples", ring.stats().samples);
    assert_eq!(n, 100);
    assert!(out
        .iter()
        .all(|x| x.token == Token(8) && x.kind == NotifyKind::Overflow));
    assert_eq!(ring.stats().samples, 100);
    assert_eq!(sfd.accounting(Token(8), None).unwrap().notifications, 100);
    assert!(sfd.detach(Token(8)).is_some());
}

#[test]
fn budget_ends_with_hup_and_kill_is_stray() {
    let mut sfd = SignalFd::new(None).unwrap();
    let budget = Budget::new(bp(100), 5);
    let counter = budget.open().unwrap();
    sfd.attach(counter, Token(2)).unwrap();
    budget.arm(sfd.counter(Token(2)).unwrap()).unwrap();
    call_target(10_000);
    let mut out = Vec::new();
    sfd.read(&mut out).unwrap();
    let kinds: Vec<_> = out.iter().map(|n| n.kind).collect();
    assert_eq!(kinds.len(), 5);
    assert_eq!(kinds[4], NotifyKind::Hup);
    assert!(kinds[..4].iter().all(|k| *k == NotifyKind::Overflow));
    // SAFETY: a blocked signal sent to ourselves lands in the signalfd.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            gettid(),
            sfd.signal().number(),
        )
    };
    out.clear();
    assert_eq!(sfd.read(&mut out).unwrap(), 0);
    assert_eq!(sfd.stray(), 1);
}

#[test]
fn two_signalfds_get_different_signals() {
    let a = SignalFd::new(None).unwrap();
    let b = SignalFd::new(None).unwrap();
    assert_ne!(a.signal().number(), b.signal().number());
    assert!(SignalFd::new(Some(a.signal())).is_err());
}
