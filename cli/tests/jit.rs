//! JIT-compiled code named from the runtime's `/tmp/perf-PID.map`: a JavaScript hot
//! loop under `node --perf-basic-prof` is named in `watch -g`, in the pprof, and in
//! `perf report` of perfring's perf.data; and from its jitdump `jit-PID.dump`
//! (`node --perf-prof`) by `perfring report`, in folded stacks and pprof.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::process::Command;

const HOT_JS: &str = r#"
function hotLoopPerfring(n) {
    let s = 0;
    for (let i = 0; i < n; i++) { s = (s + i * i) % 1000003; }
    return s;
}
let t = 0;
const end = Date.now() + 1200;
while (Date.now() < end) t += hotLoopPerfring(100000);
console.error(t > 0 ? "ok" : "no");
"#;

const NAME: &str = "hotLoopPerfring";

fn perfring(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run perfring");
    assert!(out.status.success(), "{args:?}: {}", util::stderr(&out));
    out
}

/// The share of samples whose innermost frame's name contains `NAME`, from (leaf
/// name, weight) pairs: at least 50 samples, and weights summed rather than repeated
/// (a folded file weighs a cpu-clock sample by its nanoseconds).
fn share(leaves: impl IntoIterator<Item = (String, u64)>, samples: u64) -> f64 {
    assert!(samples > 50, "{samples} samples");
    let (mut hot, mut all) = (0u64, 0u64);
    for (name, weight) in leaves {
        all += weight;
        if name.contains(NAME) {
            hot += weight;
        }
    }
    hot as f64 / all.max(1) as f64
}

/// [`share`] of names with one sample each.
fn share_of_samples(names: Vec<String>) -> f64 {
    let n = names.len() as u64;
    share(names.into_iter().map(|name| (name, 1)), n)
}

/// [`share`] of (name, sample count) rows.
fn share_of_counts(rows: Vec<(String, u64)>) -> f64 {
    let n = rows.iter().map(|r| r.1).sum();
    share(rows, n)
}

#[test]
fn a_javascript_function_is_named_in_watch_pprof_and_perf_report() {
    let dir = util::capture::scratch("jit");
    std::fs::write(dir.join("hot.js"), HOT_JS).unwrap();
    let node = ["--", "node", "--perf-basic-prof", "hot.js"];
    let ev = ["-e", "cpu-clock:u", "-F", "199"];

    let out = perfring(
        &dir,
        &[&["watch", "-g", "--json"], &ev[..], &node[..]].concat(),
    );
    let watch = share_of_samples(watch_leaves(&out));
    assert!(watch > 0.5, "watch: {watch}");

    perfring(
        &dir,
        &[
            &["record", "-g", "--format", "pprof", "-o", "p.pb.gz"],
            &ev[..],
            &node[..],
        ]
        .concat(),
    );
    let top = util::capture::pprof_top(&dir, "p.pb.gz");
    let pprof = share_of_counts(top.clone());
    assert!(pprof > 0.5, "pprof: {top:?}");

    perfring(
        &dir,
        &[&["record", "-g", "-o", "r.data"], &ev[..], &node[..]].concat(),
    );
    let report = util::capture::perf_report_sym(&dir, "r.data");
    let perf = share_of_counts(report.clone());
    assert!(perf > 0.5, "perf report: {report:?}");
}

/// The leaf names of `perfring watch -g --json`'s overflow lines.
fn watch_leaves(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|o| o["type"] == "overflow")
        .map(|o| o["stack"][0]["sym"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Under `--perf-prof` V8 writes no perf map but `jit-PID.dump` in its working
/// directory, which it maps executable so that the kernel reports it: perfring finds
/// the file by that mapping and names the code from its `CODE_LOAD` records.
///
/// V8 writes the dump through a 2 MiB stdio buffer, flushed when full and at exit, so
/// while node runs the records of its newest code are often not in the file yet:
/// names given as samples arrive (`watch`, `record --format pprof`) may miss them, by
/// timing. What is checked is what does not depend on timing: `perfring report` of
/// the recording, after node exited, names the hot loop in every format. (`perf
/// report` of the perf.data does not: perf reads jitdumps only through `perf inject
/// --jit`.)
#[test]
fn a_javascript_function_is_named_from_its_jitdump() {
    let dir = util::capture::scratch("jitdump");
    std::fs::write(dir.join("hot.js"), HOT_JS).unwrap();
    let node = [
        "--",
        "node",
        "--perf-prof",
        "--interpreted-frames-native-stack",
        "hot.js",
    ];
    let ev = ["-e", "cpu-clock:u", "-F", "199"];
    perfring(
        &dir,
        &[&["record", "-g", "-o", "r.data"], &ev[..], &node[..]].concat(),
    );
    // The names can only come from the dump: node wrote no perf map.
    let dumps: Vec<u32> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_prefix("jit-")?
                .strip_suffix(".dump")?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(dumps.len(), 1, "node --perf-prof wrote no jit-PID.dump");
    let map = format!("/tmp/perf-{}.map", dumps[0]);
    assert!(!std::path::Path::new(&map).exists(), "{map} exists");

    // perf.data read back by perfring report: the dump is where the recording
    // mapped it.
    let out = perfring(
        &dir,
        &[
            "report", "-i", "r.data", "--format", "folded", "-o", "r.folded",
        ],
    );
    // "perfring: 260 samples of r.data written to r.folded"
    let err = util::stderr(&out);
    let samples: u64 = err
        .split_whitespace()
        .skip_while(|w| *w != "perfring:")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count: {err}"));
    let folded = std::fs::read_to_string(dir.join("r.folded")).unwrap();
    // Each line's weight is its samples' nanoseconds of cpu-clock.
    let leaves = folded.lines().map(|l| {
        let (stack, n) = l.rsplit_once(' ').expect("stack weight");
        let leaf = stack.rsplit(';').next().unwrap_or("").to_string();
        (leaf, n.parse().expect("weight"))
    });
    let report = share(leaves, samples);
    assert!(report > 0.5, "report --format folded:\n{folded}");

    perfring(
        &dir,
        &[
            "report", "-i", "r.data", "--format", "pprof", "-o", "r.pb.gz",
        ],
    );
    let top = util::capture::pprof_top(&dir, "r.pb.gz");
    let pprof = share_of_counts(top.clone());
    assert!(pprof > 0.5, "report --format pprof: {top:?}");
}
