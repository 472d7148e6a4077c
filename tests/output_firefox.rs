//! The Firefox Profiler's format (`perfring::output::FirefoxProfile`): a program's named
//! threads, each with the samples perfring's perf.data of the same recording holds for
//! it (counted by `perf script`).
#![cfg(feature = "profile")]

mod util;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use perfring::output::{FirefoxProfile, PerfData};
use perfring::profiler::{End, Flow, Profiler};
use perfring::unwind::CallGraph;
use serde_json::Value;
use util::capture::{perf, scratch};

/// Four threads, each naming itself first, then computing for a while in its own
/// function; the main thread waits for them.
const FOUR_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
static volatile long sink;
static const char *names[4] = {"alpha", "beta", "gamma", "delta"};
__attribute__((noinline)) static void compute(long n) { for (long i = 0; i < n; i++) sink += i; }
static void *run(void *arg) {
    long i = (long)arg;
    pthread_setname_np(pthread_self(), names[i]);
    compute(40000000L * (i + 1));
    return 0;
}
int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, run, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    return 0;
}
"#;
const NAMES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// Per thread of a processed profile: (name, tid, samples).
fn threads(json: &Path) -> Vec<(String, u32, u64)> {
    let v: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).expect("JSON");
    assert!(v["meta"]["version"].as_u64().is_some(), "no meta.version");
    assert_eq!(v["meta"]["symbolicated"], Value::Bool(true));
    v["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| {
            let tid = match &t["tid"] {
                Value::String(s) => s.parse().unwrap(),
                n => n.as_u64().unwrap() as u32,
            };
            let name = t["name"].as_str().unwrap().to_string();
            let samples = t["samples"]["length"].as_u64().unwrap();
            // Every sample has a stack.
            let stacks = t["samples"]["stack"].as_array().unwrap();
            assert_eq!(stacks.len() as u64, samples);
            assert!(
                stacks.iter().all(|s| !s.is_null()),
                "{name}: a sample without a stack"
            );
            (name, tid, samples)
        })
        .collect()
}

#[test]
fn four_named_threads_with_the_samples_of_the_perf_data_of_the_same_run() {
    let dir = scratch("firefox");
    let prog = util::compile_c("four", FOUR_C, &["-lpthread"]);
    let target = perfring::profiler::command(&[prog.clone().into()]).unwrap();
    let mut profiler = Profiler::builder(target)
        .event("cpu-clock")
        .call_graph(CallGraph::Fp)
        .output(PerfData::open(dir.join("perf.data")).unwrap())
        .output(FirefoxProfile::create(dir.join("profile.json")).unwrap())
        .start()
        .unwrap();
    while profiler.target_ended().unwrap().is_none() {
        profiler
            .poll(Some(Duration::from_millis(100)), |_| Flow::Continue)
            .unwrap();
    }
    let report = profiler.finish(End::TargetExited).unwrap();
    assert_eq!(report.lost(), 0, "{report:?}");

    // Samples per thread in the perf.data, as perf reads them.
    let out = perf(&dir, &["script", "-i", "perf.data", "-F", "tid"]);
    assert!(out.status.success(), "perf script: {}", util::stderr(&out));
    let mut in_perf_data: BTreeMap<u32, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        *in_perf_data
            .entry(line.trim().parse().unwrap())
            .or_default() += 1;
    }
    let threads = threads(&dir.join("profile.json"));
    for name in NAMES {
        let named: Vec<_> = threads.iter().filter(|t| t.0 == name).collect();
        assert_eq!(named.len(), 1, "{name}: {threads:?}");
        let (_, tid, samples) = named[0];
        assert!(*samples > 0, "{name}: no samples");
        assert_eq!(
            Some(samples),
            in_perf_data.get(tid),
            "{name} (tid {tid}): the profile and perf.data disagree: {threads:?} / {in_perf_data:?}"
        );
    }
    // And nothing else differs: every thread of the profile counts as perf.data does.
    let total: u64 = threads.iter().map(|t| t.2).sum();
    assert_eq!(total, in_perf_data.values().sum::<u64>());

    // The CLI, as an unprivileged user (user space only at perf_event_paranoid 2).
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(util::perfring_bin())
            .args([
                "record",
                "-e",
                "cpu-clock:u",
                "-g",
                "--format",
                "firefox",
                "-o",
            ])
            .arg(dir.join("nobody.json"))
            .arg(&prog)
            .current_dir(&dir)
            .output()
            .expect("run setpriv");
        assert!(out.status.success(), "as nobody: {}", util::stderr(&out));
        let threads = self::threads(&dir.join("nobody.json"));
        for name in NAMES {
            assert!(
                threads.iter().any(|t| t.0 == name && t.2 > 0),
                "{name}: {threads:?}"
            );
        }
    }
}
