//! The `perfring` binary: usage, exit codes, and `explain`'s view of the attr.

#[path = "../../tests/util/mod.rs"]
mod util;

use util::{perfring, stderr};

use std::process::{Command, Output};

use serde_json::Value;

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn explain_json(args: &[&str]) -> Value {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = perfring(&all);
    assert!(out.status.success(), "{all:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("explain --json prints valid JSON")
}

#[test]
fn explain_software_event_with_period() {
    let v = explain_json(&["-e", "cpu-clock", "-c", "1000"]);
    assert_eq!(v["type"], 1);
    assert_eq!(v["type_name"], "PERF_TYPE_SOFTWARE");
    assert_eq!(v["config"], 0);
    assert_eq!(v["sample_period"], 1000);
    assert!(v.get("sample_freq").is_none());
    assert_eq!(v["disabled"], 1);
    assert!(v.get("inherit").is_none(), "unset flags are left out");
    assert_eq!((v["pid"].as_i64(), v["cpu"].as_i64()), (Some(0), Some(-1)));
    assert_eq!(v["group_fd"], -1);
    assert_eq!(v["flags_names"][0], "PERF_FLAG_FD_CLOEXEC");
    assert_eq!(
        v["size"],
        std::mem::size_of::<perfring::sys::perf_event_attr>()
    );
}

#[test]
fn explain_flags_map_to_fields() {
    let v = explain_json(&[
        "-e",
        "cpu-clock",
        "-F",
        "999",
        "--inherit",
        "--sample",
        "ip,tid,time",
        "--read-format",
        "id,lost",
        "--wakeup-events",
        "3",
        "--sigtrap",
        "0x2a",
        "-t",
        "1234",
        "-C",
        "0",
    ]);
    assert_eq!(v["sample_freq"], 999);
    assert_eq!(v["freq"], 1);
    assert_eq!(v["inherit"], 1);
    assert_eq!(v["sample_type"], 0b111);
    assert_eq!(
        v["sample_type_names"],
        serde_json::json!(["PERF_SAMPLE_IP", "PERF_SAMPLE_TID", "PERF_SAMPLE_TIME"])
    );
    assert_eq!(
        v["read_format_names"],
        serde_json::json!(["PERF_FORMAT_ID", "PERF_FORMAT_LOST"])
    );
    assert_eq!(v["wakeup_events"], 3);
    assert_eq!(
        (v["sigtrap"].as_u64(), v["remove_on_exec"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["sig_data"], 42);
    assert_eq!(
        (v["pid"].as_i64(), v["cpu"].as_i64()),
        (Some(1234), Some(0))
    );
}

#[test]
fn explain_breakpoints() {
    let v = explain_json(&["-e", "mem:0x1000:x", "-c", "1"]);
    assert_eq!(v["type"], 5);
    assert_eq!(v["bp_type"], 4);
    assert_eq!(v["bp_type_name"], "HW_BREAKPOINT_X");
    assert_eq!(v["bp_addr"], 0x1000);
    assert_eq!(v["bp_len"], 8);
    assert!(v.get("config1").is_none());
    let v = explain_json(&["-e", "mem:0x2000/4:w"]);
    assert_eq!(
        (
            v["bp_type"].as_u64(),
            v["bp_addr"].as_u64(),
            v["bp_len"].as_u64()
        ),
        (Some(2), Some(0x2000), Some(4))
    );
}

#[test]
fn explain_opens_nothing_so_hardware_events_explain_fine() {
    let v = explain_json(&["-e", "cycles", "-c", "100000"]);
    assert_eq!(v["type"], 0);
    assert_eq!(v["config_name"], "PERF_COUNT_HW_CPU_CYCLES");
    let out = perfring(&["explain", "-e", "cycles"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "perf_event_open(&attr, pid=0, cpu=-1, group_fd=-1, flags=PERF_FLAG_FD_CLOEXEC)"
        ),
        "{text}"
    );
    assert!(
        text.contains("  type                     0 (PERF_TYPE_HARDWARE)"),
        "{text}"
    );
}

#[test]
fn usage_errors_exit_2_with_a_pointed_message() {
    for (args, needle) in [
        (
            &["explain", "-e", "cpu-clock", "--bogus"][..],
            "unknown option '--bogus' for 'perfring explain'",
        ),
        (
            &["explain", "-e", "cpu-clock", "-c", "1", "-F", "1"][..],
            "exclusive",
        ),
        (&["explain", "-c", "1"][..], "-e EVENT"),
        (
            &["explain", "-e", "cpu-clock", "-c"][..],
            "-c needs a value",
        ),
        (&["explain", "-e", "no-such-event"][..], "no-such-event"),
        (
            &["doctor", "--verbose"][..],
            "unknown option '--verbose' for 'perfring doctor'",
        ),
        (&["frobnicate"][..], "unknown command 'frobnicate'"),
        (&[][..], "no command"),
    ] {
        let out = perfring(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.starts_with("perfring: "), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn help_is_printed_and_exits_0() {
    for args in [&["--help"][..], &["-h"], &["help"]] {
        let out = perfring(args);
        assert!(out.status.success());
        assert!(stdout(&out).contains("Usage: perfring <COMMAND>"));
    }
    for args in [&["help", "explain"][..], &["explain", "--help"]] {
        let out = perfring(args);
        assert!(out.status.success());
        assert!(stdout(&out).contains("Usage: perfring explain -e EVENT"));
    }
    assert!(stdout(&perfring(&["doctor", "-h"])).contains("Usage: perfring doctor [--json]"));
}

/// `perf record -e cpu-clock -c 1000` asks the kernel (as `strace` shows) for the same
/// type, config, period and sample layout that `explain` shows.
#[test]
fn explain_agrees_with_what_perf_passes_under_strace() {
    for tool in ["strace", "perf"] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{tool} is needed for this test: bash scripts/setup.sh installs it"
        );
    }
    let dir = std::env::temp_dir().join(format!("perfring-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("strace")
        .args([
            "-f",
            "-v",
            "-e",
            "trace=perf_event_open",
            "perf",
            "record",
            "-q",
            "-o",
        ])
        .arg(dir.join("perf.data"))
        .args(["-e", "cpu-clock", "-c", "1000", "--", "true"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let trace = String::from_utf8_lossy(&out.stderr);
    let Some(line) = trace
        .lines()
        .find(|l| l.contains("sample_period=1000") && l.contains(") = "))
    else {
        panic!("perf record did not open the event (no perf_event_open with sample_period=1000 under strace):\n{trace}");
    };
    let field = |name: &str| -> String {
        let start = line
            .find(&format!("{{{name}="))
            .or_else(|| line.find(&format!(" {name}=")))
            .unwrap()
            + name.len()
            + 2;
        line[start..].split([',', '}']).next().unwrap().to_string()
    };
    let v = explain_json(&["-e", "cpu-clock", "-c", "1000", "--sample", "ip,tid,time"]);
    assert_eq!(field("type"), v["type_name"].as_str().unwrap());
    assert_eq!(field("config"), v["config_name"].as_str().unwrap());
    assert_eq!(field("sample_period"), v["sample_period"].to_string());
    let names: Vec<&str> = v["sample_type_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(field("sample_type"), names.join("|"));
}
