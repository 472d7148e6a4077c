//! The target: a cpu-clock sampler at the kernel's maximum sample rate, read by
//! another thread, loses no records with a 64-page ring. Alone in its test binary, so
//! no other test competes for the two cores while it measures.

mod util;

use perfring::records::{Layout, RecordKind};
use perfring::ring::{Ring, RingSize};
use perfring::{Counter, SampleType};
use util::*;

#[test]
fn max_rate_cpu_clock_sampler_loses_nothing_with_64_pages() {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let worker = std::thread::spawn(move || {
        tx.send(gettid()).unwrap();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            std::hint::black_box(spin_ms(1));
        }
    });
    let tid = rx.recv().unwrap();
    let builder = Counter::builder("cpu-clock:u")
        .unwrap()
        .target(perfring::Scope::Thread(tid as i32))
        .frequency(max)
        .sample(
            SampleType::IP
                | SampleType::TID
                | SampleType::TIME
                | SampleType::CPU
                | SampleType::PERIOD,
        );
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(64)).unwrap();
    counter.enable().unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    let mut samples = 0u64;
    while std::time::Instant::now() < end {
        let mut batch = ring.batch();
        while let Some(rec) = batch.next_record(&layout) {
            if let RecordKind::Sample(s) = rec.unwrap().kind() {
                assert_eq!(s.tid(), Some(tid));
                samples += 1;
            }
        }
        drop(batch);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    worker.join().unwrap();
    counter.disable().unwrap();
    let st = ring.stats();
    eprintln!("{samples} samples in 1.5 s at -F {max}: {st:?}");
    assert!(samples > 1000, "{st:?}");
    assert_eq!((st.lost, st.lost_samples), (0, 0), "{st:?}");
}
