//! Thread churn: a process that creates and joins 2,000 short threads, 20 at a time,
//! each calling `hit()` 1,000 times, with a breakpoint on `hit` at period 100. With
//! exact periods (the library's `exact_periods`, what `watch` uses) every thread gets
//! exactly 10 samples, 20,000 in all, nothing lost; with per-CPU rings (the library's
//! default, `perf record`'s layout) no thread gets more than 10.
//!
//! Each run makes 2,000,000 breakpoint hits: about 17 s of CPU in this VM (a debug
//! exception costs ~8.5 µs here), so these are the slowest tests of their kind.

mod util;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use perfring::records::RecordKind;
use perfring::sampler::{Sampler, Target, TargetEnd};
use perfring::{Counter, SampleType};

const CHURN_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
volatile long counter;
void __attribute__((noinline)) hit(void) { counter++; }
static int calls;
static void *run(void *arg) {
    for (int i = 0; i < calls; i++) hit();
    return (void *)(long)syscall(SYS_gettid);
}
/* churn THREADS WAVE CALLS TIDFILE: prints "ready ADDR" (hit's address), waits for a
   byte on stdin, then
   creates THREADS threads WAVE at a time, joining each wave, and writes their tids. */
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int n = atoi(argv[1]), wave = atoi(argv[2]);
    calls = atoi(argv[3]);
    if (wave < 1 || wave > 64) return 2;
    printf("ready %lx\n", (unsigned long)&hit);
    fflush(stdout);
    char c;
    if (read(0, &c, 1) != 1) return 3;
    FILE *f = fopen(argv[4], "w");
    if (!f) return 5;
    pthread_t t[64];
    for (int done = 0; done < n; done += wave) {
        for (int i = 0; i < wave; i++)
            if (pthread_create(&t[i], 0, run, 0)) return 4;
        for (int i = 0; i < wave; i++) {
            void *r;
            pthread_join(t[i], &r);
            fprintf(f, "%ld\n", (long)r);
        }
    }
    fclose(f);
    return 0;
}
"#;

const THREADS: u64 = 2000;
const WAVE: u64 = 20;
const CALLS: u64 = 1000;
const PERIOD: u64 = 100;

fn program() -> std::path::PathBuf {
    util::compile_c("churn", CHURN_C, &["-pthread", "-fno-inline"])
}

/// The churn program, started and waiting for its go (a byte on stdin), with the file
/// its tids will be written to and the address of `hit`.
fn start(threads: u64) -> (Child, std::path::PathBuf, u64) {
    let tids = util::temp_path("churn-tids");
    let mut child = Command::new(program())
        .args([threads, WAVE, CALLS].map(|n| n.to_string()))
        .arg(&tids)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("ready ")
        .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
        .unwrap_or_else(|| panic!("{line}"));
    (child, tids, addr)
}

fn go(child: &mut Child) {
    child.stdin.take().unwrap().write_all(b"g").unwrap();
}

/// Samples per thread through the library, with `exact_periods` as given.
fn sample(exact: bool, threads: u64) -> (BTreeMap<u32, u64>, Vec<u32>, Sampler) {
    let (mut child, tid_file, hit) = start(threads);
    let pid = child.id() as i32;
    let event = Counter::builder_for(perfring::Event::breakpoint(
        perfring::event::Access::Execute,
        hit,
        8,
    ))
    .period(PERIOD)
    .sample(SampleType::IP | SampleType::TID)
    .wakeup_events(1);
    let mut sampler = Sampler::builder(Target::Pid(pid))
        .event(event)
        .exact_periods(exact)
        .start()
        .unwrap();
    go(&mut child);
    let mut per_tid = BTreeMap::new();
    let mut take = |d: perfring::sampler::Delivery<'_>| {
        if let (Some(0), RecordKind::Sample(s)) = (d.event, d.record.kind()) {
            assert_eq!(s.ip(), Some(hit));
            *per_tid.entry(d.tid.unwrap()).or_insert(0u64) += 1;
        }
    };
    while sampler.target_ended().unwrap().is_none() {
        sampler
            .poll(Some(Duration::from_millis(50)), &mut take)
            .unwrap();
    }
    sampler.drain(&mut take).unwrap();
    assert_eq!(sampler.target_ended().unwrap(), Some(TargetEnd::Gone));
    // Only now: while held, a wait of ours would take the sampler's tracer's stops.
    assert!(child.wait().unwrap().success());
    (per_tid, util::tids_in(&tid_file), sampler)
}

#[test]
fn exact_periods_every_thread_gets_n_over_p_through_the_library() {
    let (per_tid, tids, sampler) = sample(true, THREADS);
    assert_eq!(tids.len() as u64, THREADS);
    let expected: BTreeMap<u32, u64> = tids.iter().map(|&t| (t, CALLS / PERIOD)).collect();
    // The main thread never calls hit(): it has no samples and is not listed.
    assert_eq!(per_tid, expected);
    let total = sampler.stats();
    assert_eq!(total.samples, THREADS * CALLS / PERIOD);
    assert_eq!((total.lost, total.lost_samples), (0, 0), "{total:?}");
    assert_eq!(sampler.unreported_loss(0).unwrap(), 0);
    assert_eq!(sampler.read(0).unwrap().value, THREADS * CALLS);
    assert_eq!(sampler.missed_threads(), 0);
}

/// Per-CPU rings restart a thread's period on each CPU it moves to: fewer samples,
/// never more. (Before the events got `PERF_SAMPLE_READ` the kernel swapped sibling
/// threads' inherited copies at context switches, and 4-7 % of threads got 11 or 12.)
#[test]
fn per_cpu_rings_never_give_a_thread_more_than_n_over_p() {
    const FEWER: u64 = 500;
    let (per_tid, tids, sampler) = sample(false, FEWER);
    assert_eq!(tids.len() as u64, FEWER);
    let over: Vec<(&u32, &u64)> = per_tid
        .iter()
        .filter(|(_, &n)| n > CALLS / PERIOD)
        .collect();
    assert!(over.is_empty(), "threads above N/P: {over:?}");
    assert!(per_tid.keys().all(|t| tids.contains(t)));
    // Every overflow the kernel counted reached a ring (less a partial period per copy).
    assert_eq!(sampler.unreported_loss(0).unwrap(), 0);
    assert_eq!(sampler.read(0).unwrap().value, FEWER * CALLS);
}

#[test]
fn watch_p_gives_every_thread_exactly_n_over_p() {
    let (mut child, tid_file, _) = start(THREADS);
    let pid = child.id().to_string();
    let mut watch = Command::new(util::perfring_bin())
        .args([
            "watch",
            "--json",
            "-p",
            &pid,
            "-e",
            "mem:hit:x",
            "-c",
            "100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "perfring: attached to process PID (...)" once its counters are open.
    let mut err = BufReader::new(watch.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("attached to process"), "{line}");
    go(&mut child);
    let out = watch.wait_with_output().unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    assert!(out.status.success(), "{line}{rest}");
    assert!(child.wait().unwrap().success());
    let mut per_tid: BTreeMap<u32, u64> = BTreeMap::new();
    let mut summary = None;
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        match v["type"].as_str() {
            Some("overflow") => {
                assert_eq!(v["sym"], "hit", "{v}");
                *per_tid
                    .entry(v["tid"].as_u64().unwrap() as u32)
                    .or_insert(0) += 1;
            }
            Some("summary") => summary = Some(v),
            _ => panic!("{v}"),
        }
    }
    let summary = summary.expect("a summary line");
    let expected: BTreeMap<u32, u64> = util::tids_in(&tid_file)
        .into_iter()
        .map(|t| (t, CALLS / PERIOD))
        .collect();
    assert_eq!(expected.len() as u64, THREADS);
    assert_eq!(per_tid, expected);
    assert_eq!(summary["overflows"], THREADS * CALLS / PERIOD, "{summary}");
    assert_eq!(summary["lost"], 0, "{summary}");
    assert!(
        summary.get("unreported_lost").is_none_or(|v| v == 0),
        "{summary}"
    );
}
