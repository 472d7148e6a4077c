//! What the kernel really writes, decoded in place: values checked against what the
//! test did (tid, ip inside the breakpointed function, exact counts).

mod util;

use perfring::records::{Layout, RecordKind};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, SampleType};
use util::*;

const PERF_CONTEXT_USER: u64 = -512i64 as u64;

#[test]
fn breakpoint_samples_decode_to_this_thread_and_the_function() {
    let builder = Counter::builder_for(target_breakpoint())
        .period(10)
        .sample(
            SampleType::IP
                | SampleType::TID
                | SampleType::TIME
                | SampleType::CPU
                | SampleType::CALLCHAIN,
        )
        .exclude_kernel(true);
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    counter.enable().unwrap();
    call_target(1000);
    counter.disable().unwrap();

    let (mut n, mut last_time) = (0, 0);
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        let rec = rec.unwrap();
        let RecordKind::Sample(s) = rec.kind() else {
            panic!("unexpected record {rec:?}");
        };
        n += 1;
        assert_eq!(s.ip(), Some(target_addr()));
        assert_eq!(s.pid(), Some(std::process::id()));
        assert_eq!(s.tid(), Some(gettid()));
        assert!(s.cpu().unwrap() < 1024);
        let t = s.time().unwrap();
        assert!(t >= last_time, "time goes forward");
        last_time = t;
        let chain: Vec<u64> = s.callchain().unwrap().iter().collect();
        assert_eq!(chain.first(), Some(&PERF_CONTEXT_USER), "{chain:x?}");
        assert_eq!(chain.get(1), Some(&target_addr()), "{chain:x?}");
        assert!(chain.len() >= 3, "the caller is in the chain: {chain:x?}");
    }
    assert_eq!(n, 100);
}

/// A kernel quirk worth knowing (kernel/events/core.c, perf_swevent_event): on software
/// and breakpoint events, sampling PERF_SAMPLE_PERIOD with a fixed period makes *every*
/// event a sample, with period = 1. perfring documents it on `SampleType::PERIOD`.
#[test]
fn software_events_sampling_period_overflow_on_every_event() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(10)
        .sample(SampleType::IP | SampleType::PERIOD)
        .open()
        .unwrap();
    let layout = Layout::new(counter.attr()).unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    counter.enable().unwrap();
    call_target(100);
    counter.disable().unwrap();
    let mut periods = Vec::new();
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        if let RecordKind::Sample(s) = rec.unwrap().kind() {
            periods.push(s.period().unwrap());
        }
    }
    assert_eq!(periods, vec![1; 100], "not 10 samples of period 10");
}

#[test]
fn page_fault_samples_give_each_touched_page_exactly_once() {
    const PAGES: usize = 64;
    let page = perfring::ring::page_size();
    let builder = Counter::builder("page-faults:u")
        .unwrap()
        .period(1)
        .sample(SampleType::IP | SampleType::TID | SampleType::ADDR);
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(16)).unwrap();
    // A fresh anonymous mapping, no huge pages: the first touch of each page faults once.
    let mut region = memmap2::MmapMut::map_anon(PAGES * page).unwrap();
    let _ = region.advise(memmap2::Advice::NoHugePage);
    let base = region.as_ptr() as u64;
    counter.enable().unwrap();
    for p in 0..PAGES {
        region[p * page] = 1;
    }
    counter.disable().unwrap();
    let mut hits = vec![0u32; PAGES];
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        if let RecordKind::Sample(s) = rec.unwrap().kind() {
            assert_eq!(s.tid(), Some(gettid()));
            let addr = s.addr().unwrap();
            if (base..base + (PAGES * page) as u64).contains(&addr) {
                hits[((addr - base) / page as u64) as usize] += 1;
            }
        }
    }
    assert_eq!(hits, vec![1; PAGES]);
}

#[test]
fn comm_records_carry_the_new_name_and_the_sample_id_trailer() {
    let builder = Counter::builder("dummy")
        .unwrap()
        .sample(SampleType::TID | SampleType::TIME)
        .sample_id_all(true)
        .track_tasks(true);
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(4)).unwrap();
    counter.enable().unwrap();
    let name = std::ffi::CString::new("perfring-comm").unwrap();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }, 0);
    counter.disable().unwrap();
    let mut found = false;
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        let rec = rec.unwrap();
        if let RecordKind::Comm(c) = rec.kind() {
            assert_eq!(c.comm, b"perfring-comm");
            assert_eq!(c.tid, gettid());
            assert_eq!(rec.sample_id().tid(), Some(gettid()));
            assert!(rec.sample_id().time().unwrap() > 0);
            found = true;
        }
    }
    assert!(found, "no COMM record");
}
