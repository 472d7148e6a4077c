//! What one trigger window costs: decoding its ring sample (a group read of
//! `task-clock` and `page-faults` carried by `PERF_SAMPLE_READ`) and evaluating it,
//! against the `read(2)` of the same group a trigger would otherwise make per window.
//!
//! Group `trigger/window`: `ring_sample` (decode + evaluate one record, as
//! `perfring::trigger::Armed` does for each sample) and `group_read` (one
//! `Group::read`, the syscall alone, no evaluation).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use perfring::counter::Group;
use perfring::records::{encode, Layout, ReadValue, Record, RecordKind};
use perfring::trigger::{Expr, Trigger};

fn bench(c: &mut Criterion) {
    let trigger = Trigger::new(Expr::parse("page-faults > 1000/s").unwrap());
    // The trigger's group on this thread, for the read(2) it would otherwise make.
    let mut builders = trigger.builders().unwrap().into_iter();
    let mut group = Group::new(builders.next().unwrap()).unwrap();
    for member in builders {
        group.add(member).unwrap();
    }
    group.enable().unwrap();
    let layout = Layout::new(group.leader().attr()).unwrap();

    // 1024 samples of one thread, 10 ms of task-clock and 20 faults apart, as the
    // kernel lays them out for this group.
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    for i in 1..=1024u64 {
        offsets.push(records.len());
        let fields = encode::SampleFields {
            pid: 7,
            tid: 7,
            time: i * 10_000_000,
            read: encode::ReadData {
                time_enabled: i * 10_000_000,
                time_running: i * 10_000_000,
                values: vec![
                    ReadValue {
                        value: i * 10_000_000,
                        id: Some(1),
                        lost: None,
                    },
                    ReadValue {
                        value: i * 20,
                        id: Some(2),
                        lost: None,
                    },
                ],
            },
            ..Default::default()
        };
        encode::sample(&mut records, &layout, 0, &fields);
    }
    offsets.push(records.len());

    let mut g = c.benchmark_group("trigger/window");
    let mut eval = trigger.evaluator().unwrap();
    let mut i = 0;
    g.bench_function("ring_sample", |b| {
        b.iter(|| {
            let bytes = &records[offsets[i]..offsets[i + 1]];
            i = (i + 1) % 1024;
            let record = Record::parse(black_box(bytes), &layout).unwrap();
            let RecordKind::Sample(s) = record.kind() else {
                unreachable!()
            };
            black_box(eval.feed_sample(s))
        })
    });
    g.bench_function("group_read", |b| {
        b.iter(|| black_box(group.read().unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
