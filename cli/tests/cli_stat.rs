//! `perfring stat` through the binary: exact counts, exit-status passthrough, and
//! failures that name their cause and leave nothing behind.

#[path = "../../tests/util/mod.rs"]
mod util;

use util::{perfring, stderr};

use std::process::{Command, Output};

use serde_json::Value;

const N: u64 = 11;

fn stat_json(args: &[&str]) -> (Value, Output) {
    let mut all = vec!["stat", "--json"];
    all.extend_from_slice(args);
    let out = perfring(&all);
    // The command's own output comes first; ours is the last line.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = text.lines().last().unwrap_or_default().to_string();
    let v = serde_json::from_str(&last)
        .unwrap_or_else(|e| panic!("{all:?}: {e}: {text:?} {}", stderr(&out)));
    (v, out)
}

fn value_of(v: &Value, event: &str) -> u64 {
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == event)
        .unwrap_or_else(|| panic!("no {event} in {v}"))["value"]
        .as_u64()
        .unwrap()
}

#[test]
fn breakpoint_on_symbol_counts_each_call_pie_and_no_pie() {
    for pie in [true, false] {
        let prog = util::c_program(pie);
        let prog = prog.to_str().unwrap();
        let (v, out) = stat_json(&["-e", "mem:target:x", "--", prog, &N.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(value_of(&v, "mem:target:x"), N, "pie={pie}: {v}");
        assert_eq!(v["exit_code"], 0);
    }
}

#[test]
fn uprobe_and_watchpoint_counts_with_text_output() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let uprobe = format!("uprobe:{prog}:target");
    let out = perfring(&[
        "stat",
        "-e",
        &uprobe,
        "-e",
        "mem:counter:w:u",
        "-e",
        "cpu-clock",
        prog,
        "3",
    ]);
    if !util::perfmon() {
        return util::assert_uprobe_refused(&out);
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |event: &str| {
        text.lines()
            .find(|l| l.trim_end().ends_with(event))
            .unwrap_or_else(|| panic!("no {event} in {text}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(line(&uprobe), "3", "{text}");
    // `:u`: the kernel zeroing .bss at exec writes `counter` too.
    assert_eq!(line("mem:counter:w:u"), "3", "{text}");
    assert!(text.contains("seconds time elapsed"), "{text}");
}

#[test]
fn json_fields_and_exit_code_passthrough() {
    let (v, out) = stat_json(&["-e", "cpu-clock", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(v["exit_code"], 7);
    let e = &v["events"][0];
    assert_eq!(e["event"], "cpu-clock");
    assert!(e["value"].as_u64().is_some());
    assert!(e["scaled"].as_f64().is_some());
    assert!(e["time_enabled"].as_u64().unwrap() >= e["time_running"].as_u64().unwrap());
    assert!(v["duration_s"].as_f64().unwrap() > 0.0);
    // A signal is reported the shell's way.
    let out = perfring(&["stat", "-e", "cpu-clock", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
}

#[test]
fn attach_to_pid_for_a_duration() {
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (v, out) = stat_json(&["-e", "task-clock", "-p", &pid, "--duration", "0.2"]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["exit_code"], Value::Null);
    let d = v["duration_s"].as_f64().unwrap();
    assert!((0.15..3.0).contains(&d), "{d}");
}

#[test]
fn attach_ends_when_the_process_exits() {
    let mut short = Command::new("sleep").arg("0.2").spawn().unwrap();
    let pid = short.id().to_string();
    let reaper = std::thread::spawn(move || short.wait());
    let (v, out) = stat_json(&["-e", "cpu-clock", "-p", &pid]);
    reaper.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(v["duration_s"].as_f64().unwrap() < 4.0);
}

fn no_child_left(marker: &str) {
    // Every process started by a failed stat is killed and reaped before it exits.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.lines().any(|l| l.contains(marker)), "{ps}");
}

#[test]
fn hardware_event_fails_with_the_no_pmu_message() {
    let out = perfring(&["stat", "-e", "cycles", "--", "sleep", "31.4159"]);
    if out.status.success() {
        eprintln!("this machine has a hardware PMU; nothing to check");
        return;
    }
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no hardware PMU"), "{err}");
    assert!(err.contains("Fix: "), "{err}");
    no_child_left("sleep 31.4159");
}

#[test]
fn bad_input_is_named_with_a_fix() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let out = perfring(&["stat", "-e", "mem:targt:x", "--", prog]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean 'target'?"),
        "{}",
        stderr(&out)
    );

    let out = perfring(&["stat", "-e", "no-such-event", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown event"), "{}", stderr(&out));

    let out = perfring(&["stat", "-e", "cpu-clock", "--", "/no/such/program"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("/no/such/program") && err.contains("Fix: "),
        "{err}"
    );

    let out = perfring(&["stat", "-e", "cpu-clock", "--", "no-such-program-xyz"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("$PATH"), "{}", stderr(&out));

    let out = perfring(&["stat", "-e", "cpu-clock"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn attach_ends_on_ctrl_c_and_still_reports() {
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let stat = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["stat", "--json", "-e", "cpu-clock", "-p", &pid])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Give it time to open its counters and start waiting; an early SIGINT would
    // kill it by default, which the assertion below would show.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-INT", &stat.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = stat.wait_with_output().unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(out.status.success(), "{:?} {}", out.status, stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["events"][0]["event"], "cpu-clock");
}
