//! Reading and decoding perform no allocation: a counting global allocator around a
//! warm decode of 10k records, then around reading a live ring whose records wrap.
//! Its own test binary with one test, so nothing else allocates concurrently.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::{Layout, Record, RecordKind, SampleIdAll};
use perfring::sys;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged,
// so `System`'s guarantees are this allocator's; the counter has no effect on them.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        // SAFETY: `ptr` was allocated by `System` (via `alloc`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decoding_10k_records_allocates_nothing() {
    let st = sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU
        | sys::PERF_SAMPLE_PERIOD
        | sys::PERF_SAMPLE_CALLCHAIN
        | sys::PERF_SAMPLE_READ;
    let layout = Layout::from_raw(
        st.into(),
        u64::from(sys::PERF_FORMAT_GROUP | sys::PERF_FORMAT_ID),
        0,
        0,
        0,
        SampleIdAll::Yes,
    )
    .unwrap();
    let mut stream = Vec::new();
    for i in 0..10_000u64 {
        if i % 50 == 0 {
            encode::comm(&mut stream, &layout, 0, 1, 2, b"worker", &Ids::default());
        } else {
            let f = SampleFields {
                ip: i,
                callchain: (0..i % 32).collect(),
                ..Default::default()
            };
            encode::sample(&mut stream, &layout, 0, &f);
        }
    }

    let decode = || {
        let (mut n, mut sum) = (0u64, 0u64);
        for rec in Record::iter(&stream, &layout) {
            let rec = rec.unwrap();
            n += 1;
            match rec.kind() {
                RecordKind::Sample(s) => {
                    sum += s.ip().unwrap_or(0) + s.time().unwrap_or(0);
                    sum += s.callchain().map_or(0, |c| c.iter().sum::<u64>());
                    sum += s.read().map_or(0, |r| r.iter().map(|v| v.value).sum());
                }
                RecordKind::Comm(c) => sum += c.comm.len() as u64,
                _ => {}
            }
            sum += rec.sample_id().tid().unwrap_or(0) as u64;
        }
        (n, sum)
    };
    let warm = decode();
    let before = ALLOCS.load(Ordering::Relaxed);
    let again = decode();
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(warm, again);
    assert_eq!(warm.0, 10_000);
    assert_eq!(after - before, 0, "decoding allocated");

    // A live ring: a breakpoint with period 1 into one data page, so 24-byte samples
    // wrap; read through the ring and decode each record.
    use perfring::ring::{Ring, RingSize};
    use perfring::{Counter, Event, SampleType};
    #[inline(never)]
    extern "C" fn hit(x: u64) -> u64 {
        std::hint::black_box(x) + 1
    }
    let addr = hit as *const () as u64;
    let builder =
        Counter::builder_for(Event::breakpoint(perfring::event::Access::Execute, addr, 8))
            .period(1)
            .sample(SampleType::IP | SampleType::TID);
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    counter.enable().unwrap();
    let mut ips = 0u64;
    let mut allocs = 0;
    for round in 0..20 {
        for i in 0..100 {
            std::hint::black_box(hit(i));
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        let mut batch = ring.batch();
        while let Some(rec) = batch.next_record(&layout) {
            if let RecordKind::Sample(s) = rec.unwrap().kind() {
                ips += u64::from(s.ip() == Some(addr));
            }
        }
        drop(batch);
        if round > 0 {
            allocs += ALLOCS.load(Ordering::Relaxed) - before;
        }
    }
    assert_eq!(ips, 2000);
    assert!(ring.stats().wrapped > 0, "{:?}", ring.stats());
    assert_eq!(allocs, 0, "reading the ring allocated");
}
