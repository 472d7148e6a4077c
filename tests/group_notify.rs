//! Group members notified one by one, and the group read from the signal callback.
//!
//! A group of two breakpoints: the leader on a function's entry (period 10), the member
//! a write watchpoint on the call counter stored just before each call (period 25). Over
//! 1000 calls the leader overflows 100 times and the member 40 times; each notification
//! names its member (token or sig_data), and the group read inside the callback shows
//! both members at exactly the calls made so far.
//!
//! The two never overflow on the same instruction on purpose: SIGTRAP is a standard
//! signal, so two `TRAP_PERF`s raised by one instruction coalesce into one (the kernel
//! drops the second while the first is pending).

mod util;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

use perfring::counter::GroupReader;
use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Notification, Owner, Sigtrap, SigtrapInfo, ThreadSignal, Token};
use perfring::records::{Layout, RecordKind};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, ErrorKind, Group, SampleType};
use util::*;

static SERIAL: Mutex<()> = Mutex::new(());
/// Calls made so far, stored *before* each call (the breakpoint fires on entry).
static CALLS: AtomicU64 = AtomicU64::new(0);
static LEADER_HITS: AtomicU64 = AtomicU64::new(0);
static MEMBER_HITS: AtomicU64 = AtomicU64::new(0);
/// Callbacks whose overflow came on a call that is not a multiple of the member's
/// period, or whose group read did not match the calls made.
static MISMATCH: AtomicU64 = AtomicU64::new(0);
static READ_ERRORS: AtomicU64 = AtomicU64::new(0);

const CALLS_N: u64 = 1000;
const LEADER_PERIOD: u64 = 10;
const MEMBER_PERIOD: u64 = 25;
const LEADER_KEY: u64 = 0x6001;
const MEMBER_KEY: u64 = 0x6002;

fn reset() {
    for a in [&CALLS, &LEADER_HITS, &MEMBER_HITS, &MISMATCH, &READ_ERRORS] {
        a.store(0, SeqCst);
    }
}

fn calls_watchpoint() -> perfring::Event {
    perfring::Event::breakpoint(perfring::event::Access::Write, &CALLS as *const _ as u64, 8)
}

fn run_calls() {
    for i in 1..=CALLS_N {
        CALLS.store(i, SeqCst);
        perfring_test_target(std::hint::black_box(i));
    }
}

/// Signal context: which member overflowed (by key), then the group read into a stack
/// buffer (read(2) only, no allocation) checked against the calls made.
fn on_member(key: u64, reader: &GroupReader) {
    let calls = CALLS.load(SeqCst);
    let period = match key {
        LEADER_KEY => {
            LEADER_HITS.fetch_add(1, SeqCst);
            LEADER_PERIOD
        }
        MEMBER_KEY => {
            MEMBER_HITS.fetch_add(1, SeqCst);
            MEMBER_PERIOD
        }
        _ => {
            MISMATCH.fetch_add(1, SeqCst);
            return;
        }
    };
    if !calls.is_multiple_of(period) {
        MISMATCH.fetch_add(1, SeqCst);
    }
    // At the member's overflow (the store of `calls`) the function has not been called
    // for `calls` yet; at the leader's (its entry), both have counted it.
    let leader_expected = if key == MEMBER_KEY { calls - 1 } else { calls };
    let mut buf = [0u64; GroupReader::words_for(2)];
    match reader.read(&mut buf) {
        Ok(view) => {
            let values = (view.get(0).map(|v| v.value), view.get(1).map(|v| v.value));
            if view.len() != 2 || values != (Some(leader_expected), Some(calls)) {
                MISMATCH.fetch_add(1, SeqCst);
            }
        }
        Err(_) => {
            READ_ERRORS.fetch_add(1, SeqCst);
        }
    }
}

fn on_signal(n: &Notification, data: usize) {
    // SAFETY: `data` points to the test's GroupReader, alive until the counters drop.
    let reader = unsafe { &*(data as *const GroupReader) };
    on_member(n.token.0, reader);
}

fn on_trap(t: &SigtrapInfo, data: usize) {
    // SAFETY: as in `on_signal`.
    let reader = unsafe { &*(data as *const GroupReader) };
    on_member(t.token.0, reader);
}

fn check_counts() {
    assert_eq!(LEADER_HITS.load(SeqCst), CALLS_N / LEADER_PERIOD);
    assert_eq!(MEMBER_HITS.load(SeqCst), CALLS_N / MEMBER_PERIOD);
    assert_eq!(MISMATCH.load(SeqCst), 0);
    assert_eq!(READ_ERRORS.load(SeqCst), 0);
}

#[test]
fn thread_signals_name_the_member_and_the_group_reads_in_the_callback() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    reset();
    let mut group =
        Group::new(Counter::builder_for(target_breakpoint()).period(LEADER_PERIOD)).unwrap();
    group
        .add(Counter::builder_for(calls_watchpoint()).period(MEMBER_PERIOD))
        .unwrap();
    let reader = group.reader();
    let data = &reader as *const GroupReader as usize;
    let mut counters = group.into_counters().into_iter();
    let (leader, member) = (counters.next().unwrap(), counters.next().unwrap());
    let sig = ThreadSignal::builder().install().unwrap();
    let leader = sig
        .attach_with(
            leader,
            Token(LEADER_KEY),
            Owner::this_thread(),
            Handler::Callback(on_signal, data),
        )
        .unwrap();
    let member = sig
        .attach_with(
            member,
            Token(MEMBER_KEY),
            Owner::this_thread(),
            Handler::Callback(on_signal, data),
        )
        .unwrap();
    leader.counter().enable().unwrap();
    run_calls();
    leader.counter().disable().unwrap();
    check_counts();
    assert_eq!(leader.notifications(), CALLS_N / LEADER_PERIOD);
    assert_eq!(member.notifications(), CALLS_N / MEMBER_PERIOD);
    // A normal-context read agrees.
    let mut buf = [0u64; GroupReader::words_for(2)];
    let view = reader.read(&mut buf).unwrap();
    assert_eq!(view.get(0).unwrap().value, CALLS_N);
    assert_eq!(view.get(1).unwrap().value, CALLS_N);
    assert_eq!(
        view.by_id(member.counter().id().unwrap()).unwrap().value,
        CALLS_N
    );
    drop(member);
    drop(leader);
}

#[test]
fn sigtraps_name_the_member_by_sig_data_and_the_group_reads_in_the_callback() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    reset();
    let mut group = Group::new(
        Counter::builder_for(target_breakpoint())
            .period(LEADER_PERIOD)
            .sigtrap(LEADER_KEY),
    )
    .unwrap();
    group
        .add(
            Counter::builder_for(calls_watchpoint())
                .period(MEMBER_PERIOD)
                .sigtrap(MEMBER_KEY),
        )
        .unwrap();
    let reader = group.reader();
    let data = &reader as *const GroupReader as usize;
    let mut counters = group.into_counters().into_iter();
    let trap = Sigtrap::install().unwrap();
    let leader = trap
        .attach(
            counters.next().unwrap(),
            TrapHandler::Callback(on_trap, data),
        )
        .unwrap();
    let member = trap
        .attach(
            counters.next().unwrap(),
            TrapHandler::Callback(on_trap, data),
        )
        .unwrap();
    leader.counter().enable().unwrap();
    run_calls();
    leader.counter().disable().unwrap();
    check_counts();
    assert_eq!(leader.notifications(), CALLS_N / LEADER_PERIOD);
    assert_eq!(member.notifications(), CALLS_N / MEMBER_PERIOD);
}

#[test]
fn counter_read_on_a_group_counter_is_an_error_naming_group_read() {
    let mut group = Group::new(Counter::builder_for(target_breakpoint())).unwrap();
    group
        .add(Counter::builder_for(target_breakpoint()))
        .unwrap();
    let err = group.leader().read().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("Group::read"), "{err}");
    assert!(group.leader().group_reader().is_some());
    // A plain counter has no group reader and reads as before.
    let plain = Counter::builder_for(target_breakpoint()).open().unwrap();
    assert!(plain.group_reader().is_none());
    assert_eq!(plain.read().unwrap().value, 0);
    // A buffer too small for the group is an errno, not a panic or a short view.
    let mut small = [0u64; 3];
    let e = group.reader().read(&mut small).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
}

#[test]
fn sample_read_with_format_group_carries_both_members_per_sample() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    reset();
    let mut group = Group::new(
        Counter::builder_for(target_breakpoint())
            .period(LEADER_PERIOD)
            .sample(SampleType::IP | SampleType::READ),
    )
    .unwrap();
    group.add(Counter::builder_for(calls_watchpoint())).unwrap();
    let ids = [
        group.counters()[0].id().unwrap(),
        group.counters()[1].id().unwrap(),
    ];
    let layout = Layout::new(group.leader().attr()).unwrap();
    let mut ring = Ring::map(group.leader(), RingSize::Pages(16)).unwrap();
    group.enable().unwrap();
    run_calls();
    group.disable().unwrap();
    let mut n = 0u64;
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        let rec = rec.unwrap();
        let RecordKind::Sample(s) = rec.kind() else {
            panic!("unexpected record {rec:?}");
        };
        n += 1;
        let read = s.read().expect("PERF_SAMPLE_READ");
        assert!(read.is_group());
        assert_eq!(read.len(), 2);
        for (i, id) in ids.iter().enumerate() {
            let v = read.get(i).unwrap();
            assert_eq!(v.id, Some(*id));
            assert_eq!(v.value, n * LEADER_PERIOD, "sample {n}, member {i}");
        }
    }
    assert_eq!(n, CALLS_N / LEADER_PERIOD);
}
