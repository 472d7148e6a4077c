//! `perfring watch --when` through the binary: a page-fault rate over a program's
//! phases, an exact breakpoint ratio through symbols, actions on crossings, and the
//! errors for bad expressions and missing events.

#[path = "../../tests/util/mod.rs"]
mod util;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const PHASES_C: &str = include_str!("../../tests/util/phases.c");
const SPIN: &str = "200000000";
const PAGES: u64 = 20000;

/// Runs `perfring watch ARGS` with `x` on its stdin (the phases program waits for it).
fn watch(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .arg("watch")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"x").unwrap();
    child.wait_with_output().unwrap()
}

/// The JSON objects perfring printed, the summary last, and the program's own lines
/// (with `--json` the program's stdout goes to stderr, as perf record -o - sends it).
fn parse(out: &Output) -> (Vec<Value>, Value, Vec<String>) {
    let text = String::from_utf8_lossy(&out.stdout);
    let json: Vec<&str> = text.lines().collect();
    let err = util::stderr(out);
    let other: Vec<&str> = err.lines().filter(|l| !l.starts_with("perfring")).collect();
    let mut objects: Vec<Value> = json
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = objects
        .pop()
        .unwrap_or_else(|| panic!("no output; stderr: {}", util::stderr(out)));
    assert_eq!(summary["type"], "summary", "{text}");
    for o in &objects {
        assert_eq!(o["type"], "trigger", "{o}");
    }
    let other = other
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    (objects, summary, other)
}

/// `(fault phase start, end, CPU ns)` as the phases program printed them.
fn phase_times(lines: &[String]) -> (u64, u64, u64) {
    let w: Vec<u64> = lines[0]
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (w[0], w[1], w[2])
}

#[test]
fn page_fault_rate_crosses_up_in_the_fault_phase_and_down_after_it() {
    let prog = util::compile_c("phases", PHASES_C, &["-pthread"]);
    let prog = prog.to_str().unwrap();
    let pages = PAGES.to_string();
    let when = ["--when", "page-faults > 1000/s"];
    let mut args = vec!["--json"];
    args.extend(when);
    args.extend(["--", prog, SPIN, &pages]);
    let out = watch(&args);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let (crossings, summary, lines) = parse(&out);
    let (start, end, cpu_ns) = phase_times(&lines);
    let edges: Vec<&str> = crossings
        .iter()
        .map(|c| c["edge"].as_str().unwrap())
        .collect();
    // The loader's faults at exec fall in the first window, which is a baseline only.
    assert_eq!(edges, ["up", "down"], "{crossings:?}");
    let up = crossings[0]["time_ns"].as_u64().unwrap();
    let up_from = crossings[0]["window_start_ns"].as_u64().unwrap();
    let down = crossings[1]["time_ns"].as_u64().unwrap();
    if util::perfmon() {
        assert!(
            (start..=end).contains(&up),
            "up at {up}, fault phase {start}..{end}"
        );
    } else {
        // An ordinary user's task-clock excludes the kernel, and the kernel drops its
        // window ticks that land in kernel mode, where a fault phase spends its time:
        // the window that crosses up closes at the first tick in user space (usually
        // after the phase), so it is the one that overlaps the phase.
        assert!(
            up_from < end && up > start,
            "up window {up_from}..{up}, fault phase {start}..{end}"
        );
    }
    assert!(down > end);
    assert_eq!(crossings[0]["threshold"], 1000.0);
    assert!(crossings[0]["value"].as_f64().unwrap() > 1000.0);
    assert!(crossings[1]["value"].as_f64().unwrap() < 900.0);
    assert_eq!(crossings[0]["tid"], crossings[1]["tid"]);
    assert_eq!(summary["crossings"], 2);
    assert_eq!(summary["exit_code"], 0);
    assert_eq!(summary["active_at_end"], serde_json::json!([]));

    // The phase's own rate (pages per second of its CPU time, measured by the
    // program): a threshold well above it is never crossed.
    let rate = PAGES as f64 / (cpu_ns as f64 / 1e9);
    let high = format!("page-faults > {:.0}/s", rate * 10.0);
    let out = watch(&["--json", "--when", &high, "--", prog, SPIN, &pages]);
    let (crossings, summary, _) = parse(&out);
    assert!(crossings.is_empty(), "{high}: {crossings:?}");
    assert!(summary["windows"].as_u64().unwrap() > 10, "{summary}");
}

/// `g` is called 100 times per phase window; `f` `k` times per call of `g`, with k =
/// 1, 3, 1 over 20 windows each.
const RATIO_C: &str = r#"
volatile long n;
void __attribute__((noinline)) f(void) { n++; }
void __attribute__((noinline)) g(void) { n++; }
int main(void) {
    int k[3] = {1, 3, 1};
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < 20 * 100; i++) {
            for (int j = 0; j < k[p]; j++) f();
            g();
        }
    return 0;
}
"#;

#[test]
fn breakpoint_ratio_through_symbols_crosses_where_the_ratio_changes() {
    let prog = util::compile_c("ratio", RATIO_C, &["-fno-inline"]);
    let out = watch(&[
        "--json",
        "--when",
        "mem:f:x / mem:g:x > 2",
        "--window",
        "100",
        "--",
        prog.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let (crossings, summary, _) = parse(&out);
    let got: Vec<(&str, u64, f64)> = crossings
        .iter()
        .map(|c| {
            (
                c["edge"].as_str().unwrap(),
                c["window_seq"].as_u64().unwrap(),
                c["value"].as_f64().unwrap(),
            )
        })
        .collect();
    // Windows of 100 calls of g: 20 at ratio 1, 20 at 3, 20 at 1.
    assert_eq!(got, [("up", 21, 3.0), ("down", 41, 1.0)]);
    let deltas = &crossings[0]["deltas"];
    assert_eq!(deltas["mem:g:x"], 100, "{deltas}");
    assert_eq!(deltas["mem:f:x"], 300, "{deltas}");
    assert_eq!(summary["windows"], 60);
}

#[test]
fn actions_run_on_each_crossing() {
    let prog = util::compile_c("phases", PHASES_C, &["-pthread"]);
    let pages = PAGES.to_string();
    let out = watch(&[
        "--when",
        "page-faults > 1000/s",
        "--exec",
        "echo action edge=$PERFRING_EDGE tid=$PERFRING_TID seq=$PERFRING_SEQ",
        "--",
        prog.to_str().unwrap(),
        SPIN,
        &pages,
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let err = util::stderr(&out);
    let actions: Vec<&str> = err.lines().filter(|l| l.starts_with("action")).collect();
    assert_eq!(actions.len(), 2, "{err}");
    assert!(actions[0].contains("edge=up") && actions[0].contains("seq=1"));
    assert!(actions[1].contains("edge=down") && actions[1].contains("seq=2"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--exec ran 2 times"), "{text}");
    // The text lines: time, edge, value, threshold, tid, expression.
    let ups: Vec<&str> = text.lines().filter(|l| l.contains(" up ")).collect();
    assert_eq!(ups.len(), 1, "{text}");
    assert!(ups[0].contains("(threshold 1000/s)") && ups[0].contains("[page-faults > 1000/s]"));

    // --stop-after 1 ends the watch at the up crossing and terminates the command.
    let out = watch(&[
        "--json",
        "--when",
        "page-faults > 1000/s",
        "--stop-after",
        "1",
        "--",
        prog.to_str().unwrap(),
        SPIN,
        &pages,
    ]);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let (crossings, summary, lines) = parse(&out);
    assert_eq!(crossings.len(), 1);
    assert_eq!(crossings[0]["edge"], "up");
    assert!(
        lines.is_empty(),
        "the program was ended before it printed: {lines:?}"
    );
    assert_eq!(summary["crossings"], 1);
    assert_eq!(
        summary["active_at_end"],
        serde_json::json!([crossings[0]["tid"]])
    );
}

#[test]
fn bad_expressions_name_the_wrong_part() {
    let cases = [
        ("page-falts > 1000/s", "did you mean 'page-faults'"),
        ("page-faults / > 1", "nothing to divide by"),
        (
            "page-faults/context-switches > 0.5/ms",
            "`/ms` does not fit",
        ),
        ("page-faults > 1000", "needs a unit of time"),
    ];
    for (expr, want) in cases {
        let out = util::perfring(&["watch", "--when", expr, "--", "true"]);
        let err = util::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{expr}: {err}");
        assert!(err.contains(want), "{expr}: {err}");
        assert!(err.contains(&format!("    {expr}\n")), "{expr}: {err}");
    }
    let out = util::perfring(&["watch", "--for", "1s", "-e", "cs", "--", "true"]);
    assert!(util::stderr(&out).contains("--for goes with --when"));
    let out = util::perfring(&["watch", "--when", "cs > 1/s", "--window", "5", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(util::stderr(&out).contains("windows of time"));
}

#[test]
fn a_missing_event_fails_with_the_doctors_message() {
    let has_pmu = perfring::Counter::builder("cache-misses")
        .unwrap()
        .open()
        .is_ok();
    let out = util::perfring(&[
        "watch",
        "--when",
        "cache-misses/instructions > 0.01",
        "--",
        "true",
    ]);
    if has_pmu {
        assert!(out.status.success(), "{}", util::stderr(&out));
    } else {
        let err = util::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("no hardware PMU for 'cache-misses'"), "{err}");
        assert!(err.contains("Fix:"), "{err}");
    }
}
