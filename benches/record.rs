//! `perfring record` against `perf record` on the same workload, in the same run:
//! samples written per second, file size per sample, and loss, each read back by the
//! same tool (`perf report --stats`) from both files. Also the writer's own capacity:
//! records per second through `Streamer<PerfData>` with nothing else running.
//!
//! Run: `cargo bench --bench record` (`RECORD_BENCH_SCALE=N` multiplies the work).
//! Not a criterion bench: the figures are per recording, not per call.
//!
//! Two workloads on a 4-thread program: an execute breakpoint on `leaf()` every 10
//! calls (exact: both tools must find 4 x calls / 10 samples), and `cpu-clock:u` with
//! frame-pointer stacks. (On this VM `perf record`'s per-CPU inherited `cpu-clock`
//! finds about 4x the samples that the threads' CPU time allows at that period,
//! `perf stat -e task-clock` being the reference; perfring's per-thread counters match
//! it. Compare bytes per sample there, not sample counts.)

#[path = "../tests/util/mod.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const PROG: &str = r#"
#include <pthread.h>
#include <stdlib.h>
volatile unsigned long sink;
static unsigned long n;
void __attribute__((noinline)) leaf(unsigned long i) { sink += i * i; }
void __attribute__((noinline)) mid(unsigned long k) { for (unsigned long i = 0; i < k; i++) leaf(i); }
static void *run(void *arg) { for (unsigned long j = 0; j < n / 1000; j++) mid(1000); return arg; }
int main(int argc, char **argv) {
    n = strtoul(argv[1], 0, 10);
    pthread_t t[4];
    for (int k = 0; k < 4; k++) pthread_create(&t[k], 0, run, 0);
    for (int k = 0; k < 4; k++) pthread_join(t[k], 0);
    return 0;
}
"#;

fn build(dir: &Path) -> PathBuf {
    let src = dir.join("work.c");
    std::fs::write(&src, PROG).unwrap();
    let out = dir.join("work");
    let st = Command::new("cc")
        .args([
            "-O1",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-pthread",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success());
    out
}

struct Run {
    tool: &'static str,
    secs: f64,
    samples: u64,
    lost: u64,
    bytes: u64,
}

/// `perf report --stats` counts: (SAMPLE events, LOST events + lost samples).
fn stats(dir: &Path, file: &str) -> (u64, u64) {
    let out = Command::new("perf")
        .args(["report", "--stats", "-i", file])
        .env("HOME", dir)
        .current_dir(dir)
        .output()
        .expect("perf report");
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |what: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(what))
            .and_then(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (
        get("SAMPLE events:"),
        get("LOST events:") + get("LOST_SAMPLES events:"),
    )
}

fn record(dir: &Path, tool: &'static str, args: &[&str], work: &Path, n: &str) -> Run {
    let file = format!("{tool}.data");
    let (program, first): (std::path::PathBuf, &[&str]) = match tool {
        "perf" => ("perf".into(), &["record", "-q"]),
        _ => (util::perfring_bin(), &["record"]),
    };
    let t = Instant::now();
    let out = Command::new(program)
        .args(first)
        .args(args)
        .args(["-o", &file, "--"])
        .arg(work)
        .arg(n)
        .env("HOME", dir)
        .current_dir(dir)
        .output()
        .expect("record");
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (samples, lost) = stats(dir, &file);
    let bytes = std::fs::metadata(dir.join(&file)).unwrap().len();
    Run {
        tool,
        secs,
        samples,
        lost,
        bytes,
    }
}

fn writer_capacity(dir: &Path) -> f64 {
    use perfring::output::{EventInfo, PerfData};
    use perfring::records::{encode, Layout};
    use perfring::stream::{QueueSize, Streamer};
    let b = perfring::Counter::builder("cpu-clock")
        .unwrap()
        .period(1000)
        .sample(perfring::SampleType::IP | perfring::SampleType::TID | perfring::SampleType::TIME)
        .sample_id_all(true);
    let layout = Layout::new(b.attr()).unwrap();
    let ev = [EventInfo::new("cpu-clock", *b.attr(), vec![1]).unwrap()];
    let sink = PerfData::create(dir.join("cap.data"), &ev, &[]).unwrap();
    let mut rec = Vec::new();
    let f = encode::SampleFields {
        ip: 0x1000,
        pid: 1,
        tid: 1,
        ..Default::default()
    };
    encode::sample(&mut rec, &layout, 2, &f);
    let n = 2_000_000u64;
    let mut stream = Streamer::spawn(sink, QueueSize::default()).unwrap();
    let t = Instant::now();
    for i in 0..n {
        stream.push(0, &rec).unwrap();
        if i % 4096 == 0 {
            stream.end_round().unwrap();
        }
    }
    let (_, stats) = stream.finish().unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(stats.lost_records, 0, "the writer kept up");
    n as f64 / secs
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benches; nothing to list here.
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-record");
    std::fs::create_dir_all(&dir).unwrap();
    let work = build(&dir);
    // leaf()'s fixed address (-no-pie), for a breakpoint both tools take.
    let nm = Command::new("nm").arg(&work).output().expect("nm");
    let leaf = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(" leaf"))
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .expect("leaf in nm");
    let bp = format!("mem:0x{leaf}:x");
    let scale: u64 = std::env::var("RECORD_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let bp_n = (250_000 * scale).to_string();
    let clock_n = (20_000_000 * scale).to_string();
    for (label, args, n) in [
        // Exact: 4 threads x bp_n calls / 10 samples, whoever records.
        (
            format!("{bp} -c 10"),
            vec!["-e", bp.as_str(), "-c", "10"],
            &bp_n,
        ),
        (
            "cpu-clock:u -c 20000 -g".to_string(),
            vec!["-e", "cpu-clock:u", "-c", "20000", "-g"],
            &clock_n,
        ),
    ] {
        let n = n.as_str();
        println!("{label}, 4 threads, {n} iterations each:");
        for tool in ["perf", "perfring"] {
            let r = record(&dir, tool, &args, &work, n);
            println!(
                "  {:9} {:>8} samples in {:6.2} s = {:>9.0} samples/s; file {:>9} bytes = {:5.1} B/sample; lost {}",
                r.tool,
                r.samples,
                r.secs,
                r.samples as f64 / r.secs,
                r.bytes,
                r.bytes as f64 / r.samples.max(1) as f64,
                r.lost
            );
        }
    }
    println!(
        "writer capacity (Streamer<PerfData>, 32-byte samples): {:.0} records/s",
        writer_capacity(&dir)
    );
}
