//! `perfring stat` through the binary: perf stat's table, CSV and JSON on stderr,
//! exact counts, `<not supported>` rows with the run going on, intervals, repeats,
//! threads, CPUs, exit-status passthrough, and failures that name their cause and leave
//! nothing behind.

#[path = "../../tests/util/mod.rs"]
mod util;

use util::{perfring, stderr};

use std::process::{Command, Output};

use serde_json::Value;

const N: u64 = 11;

/// perf's `--json` lines: one object per event (and per interval, thread or CPU).
fn json_lines(out: &Output) -> Vec<Value> {
    stderr(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn stat_json(args: &[&str]) -> (Vec<Value>, Output) {
    let mut all = vec!["stat", "--json"];
    all.extend_from_slice(args);
    let out = perfring(&all);
    (json_lines(&out), out)
}

fn line_of<'a>(lines: &'a [Value], event: &str) -> &'a Value {
    lines
        .iter()
        .find(|e| e["event"] == util::as_counted(event))
        .unwrap_or_else(|| panic!("no {event} in {lines:?}"))
}

/// A counted event's value in a `--json` line.
fn value_of(lines: &[Value], event: &str) -> f64 {
    let v = &line_of(lines, event)["counter-value"];
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{event}: {v}"))
}

/// The table's event rows: (count text, unit, event, what follows `#`).
fn table_rows(text: &str) -> Vec<(String, String, String, String)> {
    text.lines()
        .filter(|l| l.starts_with("   ") && !l.contains("seconds"))
        .map(|l| {
            let (left, metric) = l.split_once(" # ").unwrap_or((l, ""));
            let left = left.trim();
            let (count, rest) = ["<not supported>", "<not counted>"]
                .iter()
                .find_map(|s| left.strip_prefix(s).map(|r| (s.to_string(), r)))
                .unwrap_or_else(|| {
                    let (c, r) = left.split_once(' ').unwrap_or((left, ""));
                    (c.to_string(), r)
                });
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (unit, event) = match words[..] {
                [u, e] => (u.to_string(), e.to_string()),
                [e] => (String::new(), e.to_string()),
                _ => panic!("not a row: {l:?}"),
            };
            (count, unit, event, metric.trim().to_string())
        })
        .collect()
}

#[test]
fn breakpoint_on_symbol_counts_each_call_pie_and_no_pie() {
    for pie in [true, false] {
        let prog = util::c_program(pie);
        let prog = prog.to_str().unwrap();
        let (lines, out) = stat_json(&["-e", "mem:target:x", "--", prog, &N.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(value_of(&lines, "mem:target:x"), N as f64, "pie={pie}");
    }
}

#[test]
fn uprobe_and_watchpoint_counts_in_the_table() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let uprobe = format!("uprobe:{prog}:target");
    let out = perfring(&[
        "stat",
        "-e",
        &uprobe,
        "-e",
        "mem:counter:w:u,cpu-clock",
        prog,
        "3",
    ]);
    if !util::perfmon() {
        return util::assert_uprobe_refused(&out);
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    let rows = table_rows(&text);
    let count = |event: &str| {
        rows.iter()
            .find(|r| r.2 == event)
            .unwrap_or_else(|| panic!("no {event} in {text}"))
            .0
            .clone()
    };
    assert_eq!(count(&uprobe), "3", "{text}");
    // `:u`: the kernel zeroing .bss at exec writes `counter` too.
    assert_eq!(count("mem:counter:w:u"), "3", "{text}");
    let clock = rows
        .iter()
        .find(|r| r.2 == util::as_counted("cpu-clock"))
        .unwrap();
    assert_eq!(clock.1, "msec", "{text}");
    assert!(clock.3.ends_with("CPUs utilized"), "{text}");
    // The uprobe's rate is per second of the clock, as perf's /sec column.
    let up = rows.iter().find(|r| r.2 == uprobe).unwrap();
    assert!(up.3.ends_with("/sec"), "{text}");
    assert!(
        text.starts_with(&format!("\n Performance counter stats for '{prog} 3':\n\n")),
        "{text}"
    );
    for tail in ["seconds time elapsed", "seconds user", "seconds sys"] {
        assert!(text.contains(tail), "{text}");
    }
}

#[test]
fn json_has_perfs_field_names_and_the_exit_code_passes_through() {
    let (lines, out) = stat_json(&["-e", "cpu-clock,page-faults", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    // The command's stdout is not ours: the report went to stderr.
    assert!(out.stdout.is_empty());
    let keys: Vec<&str> = lines[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "counter-value",
            "unit",
            "event",
            "event-runtime",
            "pcnt-running",
            "metric-value",
            "metric-unit"
        ]
    );
    let clock = line_of(&lines, "cpu-clock");
    assert_eq!(clock["unit"], "msec");
    assert_eq!(clock["metric-unit"], "CPUs utilized");
    assert!(clock["event-runtime"].as_u64().unwrap() > 0);
    assert_eq!(clock["pcnt-running"].as_f64(), Some(100.0));
    let faults = line_of(&lines, "page-faults");
    assert!(value_of(&lines, "page-faults") > 0.0);
    assert!(faults["metric-unit"].as_str().unwrap().ends_with("/sec"));
    // A signal is reported the shell's way.
    let out = perfring(&["stat", "-e", "cpu-clock", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
}

fn has_hardware_pmu() -> bool {
    perfring::Counter::builder("cycles").unwrap().open().is_ok()
}

/// perf stat's default list counts the hardware events too; without a PMU they are
/// `<not supported>` rows and the run goes on.
#[test]
fn default_events_are_perfs_and_a_missing_pmu_does_not_stop_the_run() {
    let out = perfring(&["stat", "--", "sh", "-c", "exit 0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    let rows = table_rows(&text);
    let names: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    // What is counted is named for this user (`:u` where the kernel may not be
    // counted); what is not supported, as it was asked.
    let pmu = has_hardware_pmu();
    let software = [
        "task-clock",
        "context-switches",
        "cpu-migrations",
        "page-faults",
    ];
    let hardware = ["cycles", "instructions", "branches", "branch-misses"];
    let expected: Vec<String> = software
        .iter()
        .map(|e| util::as_counted(e))
        .chain(hardware.iter().map(|e| match pmu {
            true => util::as_counted(e),
            false => e.to_string(),
        }))
        .collect();
    assert_eq!(names, expected, "{text}");
    let faults = rows
        .iter()
        .find(|r| r.2 == util::as_counted("page-faults"))
        .unwrap();
    assert!(faults.0.parse::<u64>().unwrap() > 0, "{text}");
    let cycles = rows.iter().find(|r| r.2 == expected[4]).unwrap();
    if has_hardware_pmu() {
        assert!(cycles.0.parse::<u64>().is_ok(), "{text}");
    } else {
        assert_eq!(cycles.0, "<not supported>", "{text}");
        assert_eq!(cycles.3, "", "{text}");
    }
}

#[test]
fn attach_to_pid_for_a_duration() {
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = sleeper.id().to_string();
    // Attach once it sleeps (before, it may still be loading, and run).
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .unwrap_or_default()
        .contains("nanosleep")
    {
        assert!(started.elapsed().as_secs() < 30, "sleep never slept");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = perfring(&["stat", "-e", "task-clock", "-p", &pid, "--duration", "0.2"]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains(&format!(
            "Performance counter stats for process id '{pid}':"
        )),
        "{text}"
    );
    // A sleeping process never ran: perf's <not counted>.
    assert_eq!(table_rows(&text)[0].0, "<not counted>", "{text}");
    let elapsed: f64 = text
        .lines()
        .find(|l| l.ends_with("seconds time elapsed"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!((0.15..3.0).contains(&elapsed), "{elapsed}");
    // No command of ours ran: no user/sys times.
    assert!(!text.contains("seconds user"), "{text}");
}

#[test]
fn attach_ends_when_the_process_exits() {
    let mut short = Command::new("sleep").arg("0.2").spawn().unwrap();
    let pid = short.id().to_string();
    let reaper = std::thread::spawn(move || short.wait());
    let started = std::time::Instant::now();
    let (lines, out) = stat_json(&["-e", "cpu-clock", "-p", &pid]);
    reaper.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lines.len(), 1, "{}", stderr(&out));
    assert!(started.elapsed().as_secs_f64() < 4.0);
}

fn no_child_left(marker: &str) {
    // Every process started by a failed stat is killed and reaped before it exits.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.lines().any(|l| l.contains(marker)), "{ps}");
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

    // An event that fails for another reason than "not supported" stops the run,
    // with the command killed and reaped.
    // (x86 has four debug registers: a fifth breakpoint is refused with ENOSPC.)
    let five = "mem:0x1000:x,mem:0x1008:x,mem:0x1010:x,mem:0x1018:x,mem:0x1020:x";
    let out = perfring(&["stat", "-e", five, "--", "sleep", "31.4159"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    no_child_left("sleep 31.4159");
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
    assert_eq!(json_lines(&out)[0]["event"], util::as_counted("cpu-clock"));
}

/// `-I`: a line per event per interval, stamped with the time since the start; while
/// the command sleeps its task clock does not run: perf's `<not counted>`.
#[test]
fn intervals_print_as_they_pass_and_sleep_is_not_counted() {
    let out = perfring(&[
        "stat",
        "-I",
        "100",
        "-e",
        "task-clock",
        "--",
        "sleep",
        "0.45",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("#           time             counts unit events"),
        "{text}"
    );
    let stamps: Vec<(f64, String)> = lines
        .map(|l| {
            let mut w = l.split_whitespace();
            (
                w.next().unwrap().parse().unwrap(),
                w.next().unwrap().to_string(),
            )
        })
        .collect();
    assert!(stamps.len() >= 4, "{text}");
    assert!(stamps.windows(2).all(|w| w[0].0 < w[1].0), "{text}");
    assert!(stamps.iter().any(|(_, v)| v == "<not"), "{text}");
    // CSV and JSON intervals carry the stamp first.
    let (lines, _) = stat_json(&["-I", "100", "-e", "task-clock", "--", "sleep", "0.25"]);
    assert!(lines.len() >= 2 && lines.iter().all(|l| l["interval"].is_f64()));
}

/// `-r N`: the mean of N runs, each count's spread, and the elapsed time's.
#[test]
fn repeats_print_the_mean_and_spread() {
    let out = perfring(&[
        "stat",
        "-r",
        "3",
        "-e",
        "page-faults,task-clock",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("Performance counter stats for 'true' (3 runs):"),
        "{text}"
    );
    let elapsed = text
        .lines()
        .find(|l| l.contains("seconds time elapsed"))
        .unwrap();
    assert!(elapsed.contains(" +- "), "{text}");
    assert!(!text.contains("seconds user"), "{text}");
    let out = perfring(&[
        "stat",
        "-r",
        "3",
        "-x",
        ";",
        "-e",
        "page-faults",
        "--",
        "true",
    ]);
    let csv = stderr(&out);
    let fields: Vec<&str> = csv.trim_end().split(';').collect();
    assert_eq!(fields.len(), 8, "{csv}");
    assert_eq!(fields[2], util::as_counted("page-faults"));
    assert!(fields[3].ends_with('%'), "{csv}");
}

#[test]
fn csv_fields_are_perfs() {
    let out = perfring(&["stat", "-x", ",", "-e", "task-clock,cycles", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = stderr(&out);
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert_eq!(lines[0][1], "msec", "{csv}");
    assert_eq!(lines[0][2], util::as_counted("task-clock"), "{csv}");
    assert_eq!(lines[0][6], "CPUs utilized", "{csv}");
    if !has_hardware_pmu() {
        assert_eq!(
            lines[1],
            ["<not supported>", "", "cycles", "0", "100.00", "", ""]
        );
    }
}

/// `--per-thread -p`: a line per thread per event, named `comm-tid`, each thread's
/// own count (two threads of this test, calling a breakpointed function).
#[test]
fn per_thread_counts_each_thread_of_a_process() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STOP: AtomicBool = AtomicBool::new(false);
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let tid = util::gettid();
                while !STOP.load(Ordering::Relaxed) {
                    util::call_target(1000);
                }
                tid
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let event = format!("mem:{:#x}:x", util::target_addr());
    let pid = std::process::id().to_string();
    let (lines, out) = stat_json(&[
        "--per-thread",
        "-p",
        &pid,
        "-e",
        &event,
        "--duration",
        "0.3",
    ]);
    STOP.store(true, Ordering::Relaxed);
    let tids: Vec<u32> = spinners.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(out.status.success(), "{}", stderr(&out));
    for tid in tids {
        let line = lines
            .iter()
            .find(|l| l["thread"].as_str().unwrap().ends_with(&format!("-{tid}")))
            .unwrap_or_else(|| panic!("no thread {tid}: {}", stderr(&out)));
        let calls: f64 = line["counter-value"].as_str().unwrap().parse().unwrap();
        assert!(calls >= 1000.0, "{line}");
    }
}

/// `-a`/`-C`: every CPU's time is counted, so task-clock is about one CPU per CPU.
#[test]
fn cpus_are_counted_whole() {
    let cpus = perfring::counter::online_cpus().unwrap().len() as f64;
    let (lines, out) = stat_json(&["-a", "-e", "task-clock", "--", "sleep", "0.2"]);
    if !util::may_watch_cpus() {
        // An ordinary user at perf_event_paranoid 1 or more: refused before the
        // command runs, naming the sysctl, as perf refuses it.
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("kernel.perf_event_paranoid=0"),
            "{}",
            stderr(&out)
        );
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let used = line_of(&lines, "task-clock")["metric-value"]
        .as_f64()
        .unwrap();
    assert!((used - cpus).abs() < 0.2 * cpus, "{used} CPUs of {cpus}");
    let (lines, out) = stat_json(&["-C", "0", "-A", "-e", "task-clock", "--duration", "0.2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lines.len(), 1, "{}", stderr(&out));
    assert_eq!(lines[0]["cpu"], "0");
    let used = lines[0]["metric-value"].as_f64().unwrap();
    assert!((0.8..1.2).contains(&used), "{used}");
    let out = perfring(&["stat", "-C", "0", "-e", "task-clock", "--duration", "0.1"]);
    assert!(stderr(&out).contains("Performance counter stats for 'CPU(s) 0':"));
}

/// `-o FILE` takes the report; nothing of ours goes to stderr or stdout.
#[test]
fn output_file_takes_the_report() {
    let file = util::temp_path("stat.txt");
    let out = perfring(&[
        "stat",
        "-o",
        file.to_str().unwrap(),
        "-e",
        "task-clock",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty() && out.stdout.is_empty(), "{out:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        table_rows(&text)[0].2,
        util::as_counted("task-clock"),
        "{text}"
    );
}

/// As a user at perf_event_paranoid 2 the kernel cannot be counted: the events are
/// counted in user space and named `:u`, as perf stat falls back.
#[test]
fn unprivileged_user_counts_user_space() {
    let bin = env!("CARGO_BIN_EXE_perfring");
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    let out = cmd
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            "task-clock,page-faults",
            "--",
            "true",
        ])
        .output()
        .expect("run setpriv (util-linux: bash scripts/setup.sh)");
    let csv = stderr(&out);
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if paranoid >= 3 {
        // Debian's level 3: nothing without CAP_PERFMON, which the error says.
        assert_eq!(out.status.code(), Some(1), "{csv}");
        assert!(
            csv.contains("perf_event_paranoid") && csv.contains("Fix:"),
            "{csv}"
        );
        return;
    }
    assert!(out.status.success(), "{csv}");
    let names: Vec<&str> = csv.lines().map(|l| l.split(',').nth(2).unwrap()).collect();
    if paranoid == 2 {
        assert_eq!(names, ["task-clock:u", "page-faults:u"], "{csv}");
    } else {
        assert_eq!(names, ["task-clock", "page-faults"], "{csv}");
    }
    assert!(csv.lines().all(|l| !l.starts_with('<')), "{csv}");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
}
