//! JIT-compiled code named from the runtime's `/tmp/perf-PID.map`: a JavaScript hot
//! loop under `node --perf-basic-prof` is named in `watch -g`, in the pprof, and in
//! `perf report` of perfring's perf.data.
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

/// The share of samples whose innermost frame's name contains `NAME`.
fn share(names: impl IntoIterator<Item = String>) -> f64 {
    let (mut hot, mut all) = (0, 0);
    for n in names {
        all += 1;
        if n.contains(NAME) {
            hot += 1;
        }
    }
    assert!(all > 50, "{all} samples");
    hot as f64 / all as f64
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
    let leaves = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|o| o["type"] == "overflow")
        .map(|o| o["stack"][0]["sym"].as_str().unwrap_or("?").to_string())
        .collect::<Vec<_>>();
    let watch = share(leaves);
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
    let pprof = share(
        top.iter()
            .flat_map(|(name, n)| std::iter::repeat_n(name.clone(), *n as usize)),
    );
    assert!(pprof > 0.5, "pprof: {top:?}");

    perfring(
        &dir,
        &[&["record", "-g", "-o", "r.data"], &ev[..], &node[..]].concat(),
    );
    let report = util::capture::perf_report_sym(&dir, "r.data");
    let perf = share(
        report
            .iter()
            .flat_map(|(name, n)| std::iter::repeat_n(name.clone(), *n as usize)),
    );
    assert!(perf > 0.5, "perf report: {report:?}");
}
