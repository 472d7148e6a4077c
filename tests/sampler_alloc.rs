//! The sampler's drain path allocates nothing per record: a counting global allocator
//! around draining 1000 samples of a thread of this process. Its own test binary with
//! one test, so nothing else allocates concurrently.

mod util;

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use perfring::records::RecordKind;
use perfring::sampler::{Sampler, Target};
use perfring::{Counter, SampleType};

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
fn draining_1000_samples_allocates_nothing() {
    use std::sync::atomic::AtomicBool;
    static RUN: AtomicBool = AtomicBool::new(false);
    static DONE: AtomicBool = AtomicBool::new(false);
    static EXIT: AtomicBool = AtomicBool::new(false);
    let (tid, go, worker) = util::gated_thread(|| {
        util::call_target(10); // warm-up: the thread's first samples
        while !RUN.load(Ordering::SeqCst) {
            std::thread::park();
        }
        let r = util::call_target(1000);
        DONE.store(true, Ordering::SeqCst);
        // Stay alive while the records are drained (a thread's exit is not per record).
        while !EXIT.load(Ordering::SeqCst) {
            std::thread::park();
        }
        r
    });
    let event = Counter::builder_for(util::target_breakpoint())
        .period(1)
        .sample(SampleType::IP | SampleType::TID | SampleType::TIME);
    let mut sampler = Sampler::builder(Target::Tid(tid as i32))
        .event(event)
        .start()
        .unwrap();
    go.send(()).unwrap();
    // Warm: the first records of the thread enter the thread table (which allocates).
    let mut samples = 0u64;
    while samples < 10 {
        sampler
            .poll(Some(Duration::from_millis(20)), |d| {
                samples += u64::from(matches!(d.record.kind(), RecordKind::Sample(_)));
            })
            .unwrap();
    }
    RUN.store(true, Ordering::SeqCst);
    worker.thread().unpark();
    while !DONE.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut ips = 0u64;
    sampler
        .poll(Some(Duration::ZERO), |d| {
            if let RecordKind::Sample(s) = d.record.kind() {
                ips ^= s.ip().unwrap_or(0);
                samples += 1;
            }
        })
        .unwrap();
    sampler.drain(|_| {}).unwrap();
    let after = ALLOCS.load(Ordering::Relaxed);
    EXIT.store(true, Ordering::SeqCst);
    worker.thread().unpark();
    worker.join().unwrap();
    assert_eq!(samples, 1010, "{:?}", sampler.stats());
    assert_eq!(after - before, 0, "allocations while draining 1000 samples");
    std::hint::black_box(ips);
}
