//! `Target::Pid` of this very process, with the default per-CPU inherited counters:
//! every thread that exists when the sampler attaches is a root, and all roots'
//! counters on one CPU share that CPU's ring. Alone in its binary (it samples every
//! thread of the process).

mod util;

use std::collections::BTreeMap;

use perfring::records::RecordKind;
use perfring::sampler::{Sampler, Target};
use perfring::{Counter, SampleType};

#[test]
fn every_existing_thread_of_a_process_shares_the_per_cpu_rings() {
    const CALLS: u64 = 1000;
    let (a, go_a, wa) = util::gated_thread(|| util::call_target(CALLS));
    let (b, go_b, wb) = util::gated_thread(|| util::call_target(CALLS));
    // Period 1: a thread's period restarting on each CPU changes nothing.
    let event = Counter::builder_for(util::target_breakpoint())
        .period(1)
        .sample(SampleType::IP | SampleType::TID);
    let mut sampler = Sampler::builder(Target::Pid(std::process::id() as i32))
        .event(event)
        .start()
        .unwrap();
    // Both threads (and this one) were there: each is a root.
    assert!(sampler.thread(a).is_some() && sampler.thread(b).is_some());
    // Both overflow at once on the two CPUs: per-CPU rings have one writer each.
    go_a.send(()).unwrap();
    go_b.send(()).unwrap();
    wa.join().unwrap();
    wb.join().unwrap();
    let mut per_tid = BTreeMap::new();
    sampler
        .drain(|d| {
            if let (Some(0), RecordKind::Sample(s)) = (d.event, d.record.kind()) {
                assert_eq!(s.ip(), Some(util::target_addr()));
                *per_tid.entry(d.tid.unwrap()).or_insert(0u64) += 1;
            }
        })
        .unwrap();
    assert_eq!(per_tid.get(&a), Some(&CALLS), "{per_tid:?}");
    assert_eq!(per_tid.get(&b), Some(&CALLS), "{per_tid:?}");
    let total = sampler.stats();
    assert_eq!((total.lost, total.undecoded), (0, 0), "{total:?}");
    // Rings grow with CPUs, not with threads: one per CPU for the event, one per CPU
    // for tracking, however many roots.
    let cpus = perfring::counter::online_cpus().unwrap().len();
    let roots = sampler.threads().count();
    assert!(roots >= 3, "{roots}");
    assert_eq!(sampler.rings(), 2 * cpus);
    // Each ring is owned by a dummy anchor on this process, so that it outlives any
    // root; every root has its own counters for the event and for tracking on each CPU,
    // and a keeper (which keeps the kernel from swapping threads' inherited copies).
    assert_eq!(sampler.counters(), 2 * cpus * (roots + 1) + roots);
}
