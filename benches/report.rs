//! `perfring report` against `perf report --stdio` on the same 64 MiB perf.data, in the
//! same run: the whole command a user runs (read the file, decode, unwind, name every
//! frame, print the top table), each as a process writing to `/dev/null`.
//!
//! The file is `perf record -g`'s own (so perf reads its native input): a 2-thread C
//! program spending its time in eight functions of known shares under a `mid()`,
//! sampled on `cpu-clock` every 5 µs of CPU time with frame-pointer stacks until the
//! file holds 64 MiB (`--max-size=64M`); it is kept in the target directory between
//! runs. Before timing, both tools must print the same top eight symbols.
//!
//! Two pairs: the flat table (`--no-children`, perf with `-g none`), and the children
//! table (perf report's default for a recording with stacks; perf with `-g none` so
//! that neither prints call graphs).
//!
//! Run: `cargo bench --bench report` (builds `perfring` in release first).
//!
//! Measured on the 2-core VM (shared with other builds), a 64.1 MiB file of 653k
//! samples: `--no-children` perfring 1.20 s, perf 0.66 s (perfring takes 1.8x perf's
//! time); `--children` perfring 1.86 s, perf 3.42 s (0.55x). Where perfring's time
//! goes (`perf record` of it): about a third naming frames (the symbolizer's per-frame
//! cache key hashing the file's path, and each frame's strings built anew), a tenth
//! reading the file, and the pipeline's copy of each round.

#[path = "../tests/util/mod.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const PROG: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static volatile long sink;
static double secs;
#define W(n) __attribute__((noinline)) void work_##n(long k) { for (long i = 0; i < k; i++) sink += i; }
W(01) W(02) W(03) W(04) W(05) W(06) W(07) W(08)
__attribute__((noinline)) void mid(void) {
    work_01(9000); work_02(8000); work_03(7000); work_04(6000);
    work_05(5000); work_06(4000); work_07(3000); work_08(2000);
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *run(void *a) { double end = now() + secs; while (now() < end) mid(); return a; }
int main(int argc, char **argv) {
    secs = atof(argv[1]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, run, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    return 0;
}
"#;

const SIZE: u64 = 64 << 20;

/// The perf.data, recorded once: `perf record --max-size=64M` stops the session (and
/// the program) when the file reaches 64 MiB.
fn perf_data() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-report");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("perf-64MiB.data");
    if std::fs::metadata(&file).is_ok_and(|m| m.len() >= SIZE) {
        return file;
    }
    let prog = util::compile_c("eight", PROG, &["-fno-omit-frame-pointer", "-lpthread"]);
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-g",
            "-e",
            "cpu-clock",
            "-c",
            "5000",
            "--max-size=64M",
            "-o",
        ])
        .arg(&file)
        .arg(&prog)
        .arg("600")
        .env("HOME", &dir)
        .status()
        .expect("run perf record (install linux-perf)");
    let len = std::fs::metadata(&file).map_or(0, |m| m.len());
    // perf ends the program with SIGTERM at the limit, and exits with its status.
    assert!(
        len >= SIZE,
        "perf record ({st}) wrote {len} bytes, not 64 MiB"
    );
    file
}

fn perfring_report(file: &Path, children: bool) -> Command {
    let mut c = Command::new(util::perfring_bin());
    c.args(["report", "--stdio", "--sort", "sym", "-i"])
        .arg(file);
    c.arg(if children {
        "--children"
    } else {
        "--no-children"
    });
    c
}

fn perf_report(file: &Path, children: bool) -> Command {
    let mut c = Command::new("perf");
    c.args(["report", "--stdio", "--sort", "sym", "-g", "none", "-i"])
        .arg(file)
        .arg(if children {
            "--children"
        } else {
            "--no-children"
        })
        .env("PERF_CONFIG", "/dev/null");
    c
}

/// Runs `cmd` to the end, its output discarded (as a user's `> /dev/null`).
fn run(cmd: &mut Command) {
    let st = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the report");
    assert!(st.success(), "{cmd:?} failed");
}

/// The first `n` symbol rows of a `--no-children` table.
fn top(cmd: &mut Command, n: usize) -> Vec<String> {
    let out = cmd.stderr(Stdio::null()).output().expect("run the report");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('%'))
        .take(n)
        .map(|l| l.split('%').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

fn bench(c: &mut Criterion) {
    let file = perf_data();
    let len = std::fs::metadata(&file).unwrap().len();
    let ours = top(&mut perfring_report(&file, false), 8);
    let theirs = top(&mut perf_report(&file, false), 8);
    assert_eq!(ours, theirs, "the two tools disagree on the top eight");
    assert!(ours.iter().all(|s| s.starts_with("[.] work_0")), "{ours:?}");

    let mut g = c.benchmark_group(format!(
        "report {:.0} MiB perf.data",
        len as f64 / 1048576.0
    ));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(15))
        .throughput(Throughput::Bytes(len));
    for children in [false, true] {
        let what = if children { "children" } else { "no-children" };
        g.bench_function(format!("perfring report --{what}"), |b| {
            b.iter(|| run(&mut perfring_report(&file, children)))
        });
        g.bench_function(format!("perf report --stdio --{what}"), |b| {
            b.iter(|| run(&mut perf_report(&file, children)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
