//! Symbolized samples per second in the library: a sample's stack unwound
//! (`Unwinder::sample_frames`: fp callchain, or framehop over a `dwarf` stack copy) and
//! every frame named (`Symbolizer::frames`, blazesym with its cache warm), against the
//! baseline of only decoding the same records (`Record::parse`).
//!
//! The records are real: a C workload (`top → mid → leaf`, built at bench time with
//! `cc -O1 -g -fno-omit-frame-pointer`) sampled on `cpu-clock:u` every 20 µs, once with
//! `fp` and once with `dwarf,4096`, its ring copied out after it exited. Before timing,
//! every sample's innermost frame must be named. End to end against `perf record` +
//! `perf script`, see `benches/stacks_vs_perf.sh`.
//!
//! Run: `cargo bench --bench symbolize -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use perfring::launch::Command;
use perfring::records::{Layout, Record, RecordKind};
use perfring::ring::{Ring, RingSize};
use perfring::space::AddressSpaces;
use perfring::symbolize::Symbolizer;
use perfring::unwind::{CallGraph, Unwinder};
use perfring::{Counter, SampleType, Scope};

const BUSY_C: &str = r#"
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE long leaf(long x) { volatile long l = x; for (int i = 0; i < 200; i++) sink += l * i; return sink; }
NOINLINE long mid(long x) { long r = leaf(x + 1); sink += r; return r + 1; }
NOINLINE long top(long x) { long r = mid(x + 2); sink += r; return r + 2; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000, acc = 0;
    for (long i = 0; i < n; i++) acc += top(i);
    return acc == 42;
}
"#;

fn busy() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfring-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("busy.c");
    std::fs::write(&src, BUSY_C).unwrap();
    let out = dir.join("busy");
    let st = std::process::Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success());
    out
}

/// The ring's records (each record's bytes) of one run of the workload, and the layout.
fn record(prog: &PathBuf, graph: CallGraph) -> (Layout, Vec<Vec<u8>>) {
    let stopped = Command::new(prog).arg("30000").spawn_stopped().unwrap();
    let builder = graph
        .configure(
            Counter::builder("cpu-clock:u")
                .unwrap()
                .target(Scope::Thread(stopped.pid()))
                .period(20_000)
                .sample(SampleType::IP | SampleType::TID)
                .enable_on_exec(true),
        )
        .track_tasks(true);
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    // Large enough for every record of the run: nothing is lost, nothing drained early.
    let mut ring = Ring::map(&counter, RingSize::Pages(4096)).unwrap();
    let mut child = stopped.start().unwrap();
    assert!(child.wait().unwrap().success());
    let mut records = Vec::new();
    let mut batch = ring.batch();
    while let Some(r) = batch.next() {
        records.push(r.unwrap().bytes().to_vec());
    }
    drop(batch);
    assert_eq!(ring.stats().lost, 0);
    (layout, records)
}

/// Unwinds and names every sample; returns (samples, samples whose first frame is named).
fn symbolize_all(
    layout: &Layout,
    records: &[Vec<u8>],
    spaces: &mut AddressSpaces,
    unwinder: &mut Unwinder,
    names: &mut Symbolizer,
) -> (u64, u64) {
    let (mut n, mut named) = (0, 0);
    let mut raw = Vec::new();
    for bytes in records {
        let rec = Record::parse(bytes, layout).unwrap();
        spaces.observe(&rec);
        if let RecordKind::Sample(s) = rec.kind() {
            raw.clear();
            unwinder.sample_frames(spaces, s, &mut raw);
            let frames = names.frames(spaces, s.pid().unwrap(), &raw);
            n += 1;
            named += u64::from(frames.first().is_some_and(|f| f.sym.is_some()));
            black_box(frames);
        }
    }
    (n, named)
}

fn bench(c: &mut Criterion) {
    let prog = busy();
    for (label, graph) in [
        ("fp", CallGraph::Fp),
        ("dwarf", CallGraph::Dwarf { stack_bytes: 4096 }),
    ] {
        let (layout, records) = record(&prog, graph);
        let (mut spaces, mut unwinder, mut names) =
            (AddressSpaces::new(), Unwinder::new(), Symbolizer::new());
        let (samples, named) =
            symbolize_all(&layout, &records, &mut spaces, &mut unwinder, &mut names);
        assert!(samples > 100, "{samples} samples");
        assert_eq!(named, samples, "every sample's innermost frame is named");

        let mut g = c.benchmark_group(format!("symbolize/{label}"));
        g.throughput(Throughput::Elements(samples));
        g.bench_function("decode only (baseline)", |b| {
            b.iter(|| {
                let mut n = 0u64;
                for bytes in &records {
                    let rec = Record::parse(bytes, &layout).unwrap();
                    n += u64::from(matches!(rec.kind(), RecordKind::Sample(_)));
                }
                black_box(n)
            })
        });
        g.bench_function("unwind + symbolize (cache warm)", |b| {
            b.iter(|| symbolize_all(&layout, &records, &mut spaces, &mut unwinder, &mut names))
        });
        g.bench_function("unwind + symbolize (cold: new symbolizer)", |b| {
            b.iter(|| {
                let (mut s, mut u, mut n) =
                    (AddressSpaces::new(), Unwinder::new(), Symbolizer::new());
                symbolize_all(&layout, &records, &mut s, &mut u, &mut n)
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
