//! The mmap ring, live: exact sample counts from breakpoints, loss, and geometry.

mod util;

use perfring::ring::{Ring, RingSize};
use perfring::{sys, Counter, SampleType};
use util::*;

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn breakpoint_with_period_gives_exactly_n_over_p_samples() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(100)
        .sample(SampleType::IP | SampleType::TID)
        .open()
        .unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    counter.enable().unwrap();
    call_target(10_000);
    counter.disable().unwrap();
    let mut samples = 0;
    let mut batch = ring.batch();
    while let Some(rec) = batch.next() {
        let rec = rec.unwrap();
        if rec.kind() == sys::PERF_RECORD_SAMPLE {
            samples += 1;
            let b = rec.bytes();
            assert_eq!(b.len(), 8 + 8 + 8);
            assert_eq!(
                u64_at(b, 8),
                target_addr(),
                "ip is the breakpointed function"
            );
            let tid = u32::from_ne_bytes(b[20..24].try_into().unwrap());
            assert_eq!(tid, gettid());
        }
    }
    drop(batch);
    assert_eq!(samples, 100);
    assert_eq!(ring.stats().samples, 100);
    assert!(
        ring.is_empty(),
        "dropping the batch moved data_tail to data_head"
    );
}

#[test]
fn records_wrap_around_the_data_area_and_are_all_read() {
    // One data page: 24-byte samples cannot tile 4096 bytes, so records wrap.
    let counter = Counter::builder_for(target_breakpoint())
        .period(1)
        .sample(SampleType::IP | SampleType::TID)
        .open()
        .unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    assert_eq!(ring.data_size(), 4096);
    counter.enable().unwrap();
    let mut seen = 0u64;
    for _ in 0..50 {
        call_target(100); // 2400 bytes: fits, so nothing is lost
        let mut batch = ring.batch();
        while let Some(rec) = batch.next() {
            let rec = rec.unwrap();
            assert_eq!(u64_at(rec.bytes(), 8), target_addr());
            seen += 1;
        }
    }
    assert_eq!(seen, 5000);
    assert!(
        ring.stats().wrapped > 0,
        "some records wrapped: {:?}",
        ring.stats()
    );
    assert_eq!(ring.stats().lost, 0);
}

#[test]
fn a_full_ring_reports_lost_records() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(1)
        .sample(SampleType::IP)
        .open()
        .unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    counter.enable().unwrap();
    call_target(1000); // 16 KB of samples into 4 KB
    let mut samples = 0;
    // The kernel writes PERF_RECORD_LOST once space is free again: read, overflow once
    // more, read again.
    for _ in 0..2 {
        let mut batch = ring.batch();
        while let Some(rec) = batch.next() {
            samples += u64::from(rec.unwrap().kind() == sys::PERF_RECORD_SAMPLE);
        }
        drop(batch);
        call_target(1);
    }
    counter.disable().unwrap();
    let mut batch = ring.batch();
    while let Some(rec) = batch.next() {
        samples += u64::from(rec.unwrap().kind() == sys::PERF_RECORD_SAMPLE);
    }
    drop(batch);
    let st = ring.stats();
    assert!(st.lost_events >= 1, "{st:?}");
    assert_eq!(
        samples + st.lost,
        1002,
        "every overflow is either read or counted lost: {st:?}"
    );
}

#[test]
fn sizes_round_like_perf() {
    assert_eq!(RingSize::Pages(3).data_pages(), 4);
    assert_eq!(RingSize::Pages(0).data_pages(), 1);
    assert_eq!(RingSize::Pages(64).data_pages(), 64);
    assert_eq!(RingSize::Bytes(512 * 1024).data_pages(), 128);
    assert_eq!(RingSize::Bytes(5000).data_pages(), 2);
}

#[test]
fn unread_records_stay_for_the_next_batch() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(1)
        .sample(SampleType::IP)
        .open()
        .unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(4)).unwrap();
    counter.enable().unwrap();
    call_target(10);
    counter.disable().unwrap();
    {
        let mut batch = ring.batch();
        for _ in 0..4 {
            batch.next().unwrap().unwrap();
        }
    }
    let mut rest = 0;
    let mut batch = ring.batch();
    while let Some(r) = batch.next() {
        r.unwrap();
        rest += 1;
    }
    assert_eq!(rest, 6);
}

#[test]
fn shared_ring_via_set_output() {
    let a = Counter::builder_for(target_breakpoint())
        .period(1)
        .sample(SampleType::IP | SampleType::ID)
        .open()
        .unwrap();
    let b = Counter::builder_for(watched_watchpoint())
        .period(1)
        .sample(SampleType::IP | SampleType::ID)
        .open()
        .unwrap();
    let mut ring = Ring::map(&a, RingSize::Pages(8)).unwrap();
    use std::os::fd::AsFd;
    b.set_output(a.as_fd()).unwrap();
    a.enable().unwrap();
    b.enable().unwrap();
    call_target(5);
    write_watched(7);
    a.disable().unwrap();
    b.disable().unwrap();
    let (ida, idb) = (a.id().unwrap(), b.id().unwrap());
    let (mut na, mut nb) = (0, 0);
    let mut batch = ring.batch();
    while let Some(r) = batch.next() {
        let id = u64_at(r.unwrap().bytes(), 16);
        if id == ida {
            na += 1;
        } else if id == idb {
            nb += 1;
        } else {
            panic!("unknown id {id}");
        }
    }
    assert_eq!((na, nb), (5, 7));
}

#[test]
fn rdpmc_read_of_a_software_event_is_refused_with_the_reason() {
    let counter = Counter::builder("cpu-clock")
        .unwrap()
        .exclude_kernel(true)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    counter.enable().unwrap();
    let err = ring.read_self().unwrap_err();
    assert_eq!(err.kind(), perfring::ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("cap_user_rdpmc is 0"), "{err}");
}

#[test]
#[ignore = "needs a hardware PMU"]
fn rdpmc_reads_a_hardware_counter_without_a_syscall() {
    let counter = Counter::builder("instructions:u").unwrap().open().unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    counter.enable().unwrap();
    let a = ring.read_self().unwrap();
    call_target(10_000);
    let b = ring.read_self().unwrap();
    assert!(b.value > a.value + 10_000, "{a:?} {b:?}");
    counter.disable().unwrap();
    let r = ring.read_self();
    assert!(r.is_err(), "disabled: index 0");
}

#[test]
fn an_inherited_task_counter_is_read_through_an_anchor_ring() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(100)
        .sample(SampleType::IP | SampleType::TID)
        .inherit(true)
        .open()
        .unwrap();
    let refused = Ring::map(&counter, RingSize::Pages(4)).unwrap_err();
    assert_eq!(
        refused.kind(),
        perfring::ErrorKind::InvalidArgument,
        "{refused}"
    );
    let (_anchor, mut ring) = Ring::map_inherited(&counter, RingSize::Pages(16)).unwrap();
    counter.enable().unwrap();
    call_target(10_000);
    // A thread created after the counter inherits it; its records arrive here too.
    let child = std::thread::spawn(|| {
        call_target(5_000);
        gettid()
    })
    .join()
    .unwrap();
    counter.disable().unwrap();
    let mut per_tid = std::collections::HashMap::new();
    let mut batch = ring.batch();
    while let Some(rec) = batch.next() {
        let rec = rec.unwrap();
        assert_eq!(rec.kind(), sys::PERF_RECORD_SAMPLE);
        assert_eq!(u64_at(rec.bytes(), 8), target_addr());
        let tid = u32::from_ne_bytes(rec.bytes()[20..24].try_into().unwrap());
        *per_tid.entry(tid).or_insert(0) += 1;
    }
    assert_eq!(per_tid.get(&gettid()), Some(&100));
    assert_eq!(per_tid.get(&child), Some(&50));
}
