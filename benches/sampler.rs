//! The sampler against `perf record`, side by side in one run: a 4-thread program spinning
//! on every thread, sampled with `cpu-clock:u` at the kernel's maximum rate
//! (`/proc/sys/kernel/perf_event_max_sample_rate`), attached with `-p` by each in turn.
//!
//! Reported per tool: samples/s of the target's run, records lost, and the CPU time the
//! tool itself used (`getrusage`: the sampler's thread; `perf`'s process from `wait4`),
//! per second and per thousand samples. Both write every record to a file in the same
//! directory (perf its perf.data, the sampler the raw ring bytes). Rounds alternate
//! (sampler, perf, sampler, perf) so a change in load hits both.
//!
//! `cargo bench --bench sampler` (`-- SECONDS ROUNDS`, default 1.5 s and 2 rounds). Skips,
//! saying why, without `perf` or when the event cannot be opened.
//!
//! `cargo bench --bench sampler -- churn [THREADS CALLS ROUNDS]`: the price of exact
//! periods instead (see `churn_bench`).
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perfring::records::RecordKind;
use perfring::ring::RingSize;
use perfring::sampler::{Sampler, Target};
use perfring::{Counter, SampleType};

const SPIN_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double secs;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *spin(void *arg) {
    double end = now() + secs; volatile unsigned long x = 0;
    while (now() < end) for (int i = 0; i < 10000; i++) x += i;
    return arg;
}
int main(int argc, char **argv) {
    secs = atof(argv[1]);
    pthread_t t[4];
    printf("ready\n"); fflush(stdout);
    char c; if (fread(&c, 1, 1, stdin) != 1) return 3;
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, spin, 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    return 0;
}
"#;

/// What one tool did in one round.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    samples: u64,
    lost: u64,
    throttled: u64,
    secs: f64,
    cpu: f64,
    /// CPU time the target's threads ran (what cpu-clock samples).
    target_cpu: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.samples as f64 / self.secs
    }

    /// Samples per second of the target's CPU time: the frequency actually achieved.
    fn per_target_cpu(&self) -> f64 {
        self.samples as f64 / self.target_cpu
    }
}

fn build(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::write(dir.join("spin4.c"), SPIN_C).unwrap();
    let out = dir.join("spin4");
    let st = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(dir.join("spin4.c"))
        .status()
        .expect("run cc");
    assert!(st.success());
    out
}

/// The program, started and waiting for a byte on stdin (its 4 threads not yet there:
/// both tools must follow threads created after they attach).
fn start(prog: &std::path::Path, secs: f64) -> Child {
    let mut child = Command::new(prog)
        .arg(secs.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

fn go(child: &mut Child) {
    child.stdin.take().unwrap().write_all(b"g").unwrap();
}

fn thread_cpu() -> f64 {
    let mut ru = zeroed_rusage();
    // SAFETY: getrusage writes one rusage into the valid `ru`.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn zeroed_rusage() -> libc::rusage {
    // SAFETY: rusage is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

fn max_rate() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100_000)
}

fn sampler_run(prog: &std::path::Path, secs: f64, out: &std::path::Path) -> Run {
    let mut child = start(prog, secs);
    let event = Counter::builder("cpu-clock:u")
        .unwrap()
        .frequency(max_rate())
        .sample(
            SampleType::IP
                | SampleType::TID
                | SampleType::TIME
                | SampleType::CPU
                | SampleType::PERIOD,
        );
    let cpu0 = thread_cpu();
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out).unwrap());
    let mut sampler = Sampler::builder(Target::Pid(child.id() as i32))
        .event(event)
        .ring_size(RingSize::Pages(128))
        .start()
        .expect("start the sampler");
    let t0 = Instant::now();
    go(&mut child);
    let mut samples = 0u64;
    let mut take = |d: perfring::sampler::Delivery<'_>| {
        if let RecordKind::Sample(s) = d.record.kind() {
            std::hint::black_box((s.ip(), s.tid()));
            samples += 1;
        }
        let _ = file.write_all(d.raw);
    };
    while sampler.target_ended().unwrap().is_none() {
        sampler
            .poll(Some(Duration::from_millis(20)), &mut take)
            .unwrap();
    }
    sampler.drain(&mut take).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    file.flush().unwrap();
    let cpu = thread_cpu() - cpu0;
    let target_cpu = reap(&mut child);
    let st = sampler.stats();
    Run {
        samples,
        lost: st.lost + st.lost_samples,
        throttled: st.throttled,
        secs,
        cpu,
        target_cpu,
    }
}

/// Waits for `child` and returns the CPU time it used (`wait4`).
fn reap(child: &mut Child) -> f64 {
    let mut ru = zeroed_rusage();
    let mut status = 0;
    // SAFETY: wait4 on our child with valid out-pointers.
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn perf_run(prog: &std::path::Path, secs: f64, out: &std::path::Path) -> Option<Run> {
    let mut child = start(prog, secs);
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            "max",
            "-e",
            "cpu-clock:u",
            "-m",
            "128",
            "-o",
        ])
        .arg(out)
        .args(["-p", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(perf) = perf else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    // perf attaches asynchronously: wait until it has opened its counters (its
    // perf_event fds show up), so the threads start under it as under the sampler.
    // perf enables its counters after opening and mapping them all: wait until the
    // count of its perf_event fds has been stable for 200 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut last, mut since) = (0, Instant::now());
    while Instant::now() < deadline {
        let n = perf_fds(perf.id());
        if n != last {
            (last, since) = (n, Instant::now());
        } else if n > 0 && since.elapsed() > Duration::from_millis(200) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    go(&mut child);
    let target_cpu = reap(&mut child);
    // perf record -p ends when its target exits; nudge it if it does not.
    let pid = perf.id() as i32;
    let mut status = 0;
    let mut ru = zeroed_rusage();
    let grace = Instant::now() + Duration::from_secs(3);
    loop {
        // SAFETY: wait4 on our child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if Instant::now() > grace {
            let _ = Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = t0.elapsed().as_secs_f64();
    let stats = Command::new("perf")
        .args(["report", "--stats", "-i"])
        .arg(out)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&stats.stdout);
    let count = |what: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(what))
            .and_then(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
            .unwrap_or(0u64)
    };
    Some(Run {
        samples: count("SAMPLE events"),
        lost: count("LOST events") + count("LOST_SAMPLES events"),
        throttled: count("THROTTLE events"),
        secs,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        target_cpu,
    })
}

fn perf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
        .unwrap_or(0)
}

fn line(name: &str, r: &Run) {
    println!(
        "{name:8} {:>8.0} samples/s ({:>6.0} per target CPU-s) {:>6} lost {:>6} throttled {:>7.3} s CPU ({:>5.1}% of the run, {:.3} ms per 1000 samples)",
        r.rate(),
        r.per_target_cpu(),
        r.lost,
        r.throttled,
        r.cpu,
        100.0 * r.cpu / r.secs,
        1000.0 * r.cpu / (r.samples.max(1) as f64 / 1000.0),
    );
}

/// `churn THREADS WAVE CALLS`: waits for a byte on stdin, then creates THREADS threads
/// WAVE at a time, each calling `hit()` CALLS times, joining each wave.
const CHURN_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
volatile long counter;
void __attribute__((noinline)) hit(void) { counter++; }
static int calls;
static void *run(void *arg) { for (int i = 0; i < calls; i++) hit(); return arg; }
int main(int argc, char **argv) {
    int n = atoi(argv[1]), wave = atoi(argv[2]);
    calls = atoi(argv[3]);
    printf("ready %lx\n", (unsigned long)&hit);
    fflush(stdout);
    char c;
    if (read(0, &c, 1) != 1) return 3;
    pthread_t t[64];
    for (int done = 0; done < n; done += wave) {
        for (int i = 0; i < wave; i++) if (pthread_create(&t[i], 0, run, 0)) return 4;
        for (int i = 0; i < wave; i++) pthread_join(t[i], 0);
    }
    return 0;
}
"#;

/// How the churn program is watched in one round.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    Alone,
    PerCpu,
    Exact,
}

/// One churn round: wall time from the go to the end, samples, and the most perf fds
/// and ring pages the sampler had at once.
struct ChurnRun {
    secs: f64,
    samples: u64,
    fds: usize,
    ring_kib: usize,
}

fn churn_run(prog: &std::path::Path, layout: Layout, threads: u32, calls: u32) -> ChurnRun {
    let mut child = Command::new(prog)
        .args([threads, 20, calls].map(|n| n.to_string()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let hit = u64::from_str_radix(line.trim().strip_prefix("ready ").unwrap(), 16).unwrap();
    let pid = child.id() as i32;
    let mut sampler = (layout != Layout::Alone).then(|| {
        let event = Counter::builder_for(perfring::Event::breakpoint(
            perfring::event::Access::Execute,
            hit,
            8,
        ))
        .period(100)
        .sample(SampleType::IP | SampleType::TID)
        .wakeup_events(1);
        Sampler::builder(Target::Pid(pid))
            .event(event)
            .ring_size(RingSize::Pages(8))
            .exact_periods(layout == Layout::Exact)
            .start()
            .expect("start the sampler")
    });
    let t0 = Instant::now();
    go(&mut child);
    let (mut samples, mut fds, mut pages) = (0u64, 0usize, 0usize);
    if let Some(s) = sampler.as_mut() {
        let mut take = |d: perfring::sampler::Delivery<'_>| {
            samples += u64::from(matches!(d.record.kind(), RecordKind::Sample(_)));
        };
        let mut last = Instant::now();
        while s.target_ended().unwrap().is_none() {
            s.poll(Some(Duration::from_millis(20)), &mut take).unwrap();
            if last.elapsed() > Duration::from_millis(50) {
                last = Instant::now();
                fds = fds.max(perf_fds(std::process::id()));
                pages = pages.max(mapped_perf_kib());
            }
        }
        s.drain(&mut take).unwrap();
    }
    let status = child.wait().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert!(status.success());
    drop(sampler);
    ChurnRun {
        secs,
        samples,
        fds,
        ring_kib: pages,
    }
}

/// KiB of this process's mappings of perf_event fds (`/proc/self/maps`): its rings.
fn mapped_perf_kib() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("perf_event"))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((usize::from_str_radix(b, 16).ok()? - usize::from_str_radix(a, 16).ok()?) / 1024)
        })
        .sum()
}

/// The price of exact periods: a process creating THREADS threads (20 at a time),
/// each calling a breakpointed function CALLS times (period 100), alone, under per-CPU
/// rings and under exact periods (each new thread held until its counter is open),
/// rounds alternating. `cargo bench --bench sampler -- churn [THREADS CALLS ROUNDS]`.
fn churn_bench(args: &[String]) {
    let threads: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let calls: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let dir = std::env::temp_dir().join(format!("perfring-bench-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("churn.c"), CHURN_C).unwrap();
    let prog = dir.join("churn");
    let st = Command::new("cc")
        .args(["-O0", "-fno-inline", "-pthread", "-o"])
        .arg(&prog)
        .arg(dir.join("churn.c"))
        .status()
        .expect("run cc");
    assert!(st.success());
    println!(
        "{threads} threads, 20 at a time, {calls} breakpointed calls each (period 100, 8-page rings), {rounds} rounds"
    );
    let layouts = [Layout::Alone, Layout::PerCpu, Layout::Exact];
    let mut secs = [0.0f64; 3];
    for _ in 0..rounds {
        for (i, &l) in layouts.iter().enumerate() {
            let r = churn_run(&prog, l, threads, calls);
            secs[i] += r.secs;
            println!(
                "{:8} {:>7.3} s ({:>6.1} us per thread) {:>7} samples, at most {:>4} perf fds and {:>6} KiB of rings",
                format!("{l:?}"),
                r.secs,
                1e6 * r.secs / f64::from(threads),
                r.samples,
                r.fds,
                r.ring_kib
            );
        }
    }
    println!(
        "over {rounds} rounds: exact/alone {:.3}x, exact/per-cpu {:.3}x, per-cpu/alone {:.3}x",
        secs[2] / secs[0],
        secs[2] / secs[1],
        secs[1] / secs[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if args.first().is_some_and(|a| a == "churn") {
        return churn_bench(&args);
    }
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1.5);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    if Command::new("perf").arg("--version").output().is_err() {
        println!("sampler bench skipped: no `perf` on PATH");
        return;
    }
    if let Err(e) = Counter::builder("cpu-clock:u").and_then(|b| b.open()) {
        println!("sampler bench skipped: {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("perfring-bench-sampler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = build(&dir);
    println!(
        "4 spinning threads for {secs} s, cpu-clock:u at -F {} (max), 128-page rings, {rounds} rounds",
        max_rate()
    );
    let (mut ours, mut theirs) = (Run::default(), Run::default());
    for round in 0..rounds {
        let a = sampler_run(&prog, secs, &dir.join("sampler.raw"));
        line("sampler", &a);
        let Some(b) = perf_run(&prog, secs, &dir.join("perf.data")) else {
            println!("perf record could not run");
            return;
        };
        line("perf", &b);
        for (sum, r) in [(&mut ours, a), (&mut theirs, b)] {
            sum.samples += r.samples;
            sum.lost += r.lost;
            sum.throttled += r.throttled;
            sum.secs += r.secs;
            sum.cpu += r.cpu;
            sum.target_cpu += r.target_cpu;
        }
        let _ = round;
    }
    println!(
        "sampler/perf over {rounds} rounds: samples/s {:.3}x, per target CPU-s {:.3}x, CPU {:.3}x, CPU per sample {:.3}x; lost {} vs {}",
        ours.rate() / theirs.rate(),
        ours.per_target_cpu() / theirs.per_target_cpu(),
        ours.cpu / theirs.cpu,
        (ours.cpu / ours.samples.max(1) as f64) / (theirs.cpu / theirs.samples.max(1) as f64),
        ours.lost,
        theirs.lost
    );
    // perf's CPU includes starting up and writing its header: what it costs around a
    // target that does nothing, measured the same way.
    if let Some(idle) = perf_run(&prog, 0.0, &dir.join("idle.data")) {
        println!(
            "perf around a 0 s target (its fixed cost): {:.3} s CPU",
            idle.cpu
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
