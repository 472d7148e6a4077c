//! `perfring watch` through the binary: exact overflow counts from breakpoints and
//! uprobes, actions, exit-status passthrough, and failures that leave nothing behind.

#[path = "../../tests/util/mod.rs"]
mod util;

use util::{perfring, stderr};

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `perfring watch --json ARGS`: the overflow objects and the summary.
fn watch_json(args: &[&str]) -> (Vec<Value>, Value, Output) {
    let mut all = vec!["watch", "--json"];
    all.extend_from_slice(args);
    let out = perfring(&all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let objects: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (summary, overflows) = objects
        .split_last()
        .unwrap_or_else(|| panic!("{all:?}: no output; stderr: {}", stderr(&out)));
    assert_eq!(summary["type"], "summary", "{text}");
    for o in overflows {
        assert_eq!(o["type"], "overflow", "{o}");
    }
    (overflows.to_vec(), summary.clone(), out)
}

fn seqs(overflows: &[Value]) -> Vec<u64> {
    overflows
        .iter()
        .map(|o| o["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn breakpoint_every_100_calls_gives_exactly_100_overflows_in_target() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let (overflows, summary, out) =
        watch_json(&["-e", "mem:target:x", "-c", "100", "--", prog, "10000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(overflows.len(), 100, "{summary}");
    assert_eq!(seqs(&overflows), (1..=100).collect::<Vec<_>>());
    let pid = overflows[0]["pid"].as_u64().unwrap();
    for o in &overflows {
        assert_eq!(o["sym"], "target", "{o}");
        assert_eq!(o["event"], "mem:target:x");
        assert_eq!(o["period"], 100);
        // Single-threaded: the overflowing thread is the process.
        assert_eq!(o["pid"], pid, "{o}");
        assert_eq!(o["tid"], pid, "{o}");
    }
    assert_eq!(overflows[99]["total"], 10_000);
    assert_eq!(summary["overflows"], 100);
    assert_eq!(summary["lost"], 0);
    assert_eq!(summary["throttled"], 0);
    assert_eq!(summary["exit_code"], 0);
}

#[test]
fn text_output_names_the_symbol_and_sums_up() {
    let prog = util::c_program(false);
    let prog = prog.to_str().unwrap();
    let out = perfring(&["watch", "-e", "mem:target:x", "-c", "10", "--", prog, "30"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" tid ")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| l.contains(" target ")), "{text}");
    assert!(lines[2].ends_with("period 10 total 30"), "{text}");
    assert!(
        text.contains("3 overflows, ") && text.contains("0 lost, 0 throttled"),
        "{text}"
    );
}

#[test]
fn stop_after_ends_the_watch_after_exactly_n() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let (overflows, summary, out) = watch_json(&[
        "-e",
        "mem:target:x",
        "-c",
        "100",
        "--stop-after",
        "5",
        "--",
        prog,
        "10000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(seqs(&overflows), [1, 2, 3, 4, 5]);
    assert_eq!(summary["overflows"], 5);
}

#[test]
fn exec_runs_once_per_overflow_with_its_environment() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch-exec-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let cmd = format!(
        "echo $PERFRING_SEQ $PERFRING_SYM $PERFRING_EVENT $PERFRING_PID $PERFRING_TID $PERFRING_IP >> {}",
        file.display()
    );
    let (overflows, summary, out) = watch_json(&[
        "-e",
        "mem:target:x",
        "-c",
        "1000",
        "--exec",
        &cmd,
        "--",
        prog,
        "10000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(overflows.len(), 10);
    assert_eq!(summary["exec_runs"], 10, "{summary}");
    assert_eq!(summary["exec_dropped"], 0);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    for (i, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], (i + 1).to_string(), "{text}");
        assert_eq!(f[1..3], ["target", "mem:target:x"], "{text}");
        assert_eq!(f[3], f[4], "{text}");
        assert_eq!(f[5], overflows[i]["ip"], "{text}");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn exit_status_passes_through() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let out = perfring(&[
        "watch",
        "--json",
        "-e",
        "cpu-clock",
        "--",
        "sh",
        "-c",
        &format!("{prog} 10; exit 3"),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["exit_code"], 3);
}

#[test]
fn budget_lets_the_kernel_stop_after_n() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let (overflows, summary, out) = watch_json(&[
        "-e",
        "mem:target:x",
        "-c",
        "100",
        "--budget",
        "5",
        "--",
        prog,
        "10000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(seqs(&overflows), [1, 2, 3, 4, 5]);
    assert_eq!(summary["overflows"], 5);
    assert_eq!(summary["exit_code"], 0);
}

#[test]
fn uprobe_every_100_calls_gives_exactly_100_overflows() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let uprobe = format!("uprobe:{prog}:target");
    if !util::perfmon() {
        let out = perfring(&["watch", "-e", &uprobe, "-c", "100", prog, "10000"]);
        return util::assert_uprobe_refused(&out);
    }
    let (overflows, summary, out) = watch_json(&["-e", &uprobe, "-c", "100", prog, "10000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(overflows.len(), 100);
    assert_eq!(seqs(&overflows), (1..=100).collect::<Vec<_>>());
    assert_eq!(summary["overflows"], 100);
    assert_eq!(summary["lost"], 0);
}

/// Children of this test process named `prog` (any left behind would be ours).
fn our_children(name: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let comm = &stat[stat.find('(').unwrap() + 1..stat.rfind(')').unwrap()];
        let ppid = stat[stat.rfind(')').unwrap() + 2..]
            .split(' ')
            .nth(1)
            .unwrap();
        if comm == name && ppid == me {
            found.push(pid);
        }
    }
    found
}

#[test]
fn hardware_event_without_a_pmu_fails_cleanly() {
    if perfring::Counter::builder("cycles")
        .and_then(|b| b.open())
        .is_ok()
    {
        eprintln!("skipped: this machine has a hardware PMU");
        return;
    }
    let prog = util::c_program(true);
    let out = perfring(&["watch", "-e", "cycles", "--", prog.to_str().unwrap(), "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no hardware PMU") && err.contains("Fix:"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // perfring reaped the stopped child before exiting: nothing is left, not even a
    // zombie re-parented to us.
    assert!(our_children("prog").is_empty());
}

#[test]
fn bad_input_is_a_usage_error_naming_the_cause() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    let out = perfring(&["watch", "-e", "mem:no_such_symbol:x", "--", prog]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no_such_symbol"), "{}", stderr(&out));
    let out = perfring(&["watch", "-e", "cpu-clock", "--", "/nonexistent/prog"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/prog"),
        "{}",
        stderr(&out)
    );
    let out = perfring(&["watch", "-e", "cpu-clock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nothing to watch"),
        "{}",
        stderr(&out)
    );
    let out = perfring(&["watch", "-C", "0", "--signal", "USR1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = perfring(&["watch", "--signal", "NOPE", "--", prog]);
    assert_eq!(out.status.code(), Some(2));
    assert!(our_children("prog").is_empty());
}

fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

#[test]
fn stop_at_leaves_the_target_stopped() {
    let prog = util::c_program(true);
    // The stopped program keeps perfring's stdout and stderr open, so collect them in
    // files: a pipe would not see EOF until the program ends.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (o, e) = (
        dir.join(format!("stop-at-{}.out", std::process::id())),
        dir.join(format!("stop-at-{}.err", std::process::id())),
    );
    let status = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["watch", "--json", "-e", "mem:target:x", "-c", "100"])
        .args(["--stop-at", "3", "--"])
        .arg(&prog)
        .arg("10000")
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .status()
        .unwrap();
    let out = std::fs::read_to_string(&o).unwrap();
    let err = std::fs::read_to_string(&e).unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pid = lines[0]["pid"].as_u64().unwrap() as u32;
    let state = state_of(pid);
    // SAFETY: kill has no memory-safety preconditions; the pid is the stopped program.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(status.success(), "{err}");
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(seqs(&lines[..3]), [1, 2, 3]);
    assert_eq!(lines[3]["type"], "summary");
    assert_eq!(lines[3]["exit_code"], Value::Null);
    assert!(err.contains(&format!("kill -CONT {pid}")), "{err}");
    assert_eq!(state, Some('T'));
    let _ = (std::fs::remove_file(o), std::fs::remove_file(e));
}

/// A program whose two threads each call `target()` every millisecond until killed.
const LOOP_C: &str = r#"
#include <pthread.h>
#include <unistd.h>
volatile long counter;
void __attribute__((noinline)) target(void) { counter++; }
static void *run(void *arg) { for (;;) { target(); usleep(1000); } return arg; }
int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); run(0); }
"#;

fn loop_program() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("loop.c"), LOOP_C).unwrap();
    let out = dir.join("loop");
    let st = Command::new("cc")
        .args(["-O0", "-fno-inline", "-pthread", "-o"])
        .arg(&out)
        .arg(dir.join("loop.c"))
        .status()
        .expect("run cc");
    assert!(st.success());
    out
}

#[test]
fn attach_to_every_thread_of_a_running_process_and_stop_after_n() {
    let mut child = Command::new(loop_program()).spawn().unwrap();
    let pid = child.id().to_string();
    // Let it exec and start its second thread.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) < 2
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (overflows, summary, out) = watch_json(&[
        "-e",
        "mem:target:x",
        "-c",
        "1",
        "--stop-after",
        "20",
        "-p",
        &pid,
    ]);
    let alive = state_of(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(seqs(&overflows), (1..=20).collect::<Vec<_>>());
    for o in &overflows {
        assert_eq!(o["sym"], "target", "{o}");
        assert_eq!(o["pid"].to_string(), pid);
    }
    // -p watches every thread of the process.
    let mut tids: Vec<u64> = overflows
        .iter()
        .map(|o| o["tid"].as_u64().unwrap())
        .collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 2, "{tids:?}");
    assert_eq!(summary["exit_code"], Value::Null);
    // With -p the process is left running.
    assert!(matches!(alive, Some('S' | 'R')), "{alive:?}");
}

#[test]
fn signal_goes_to_the_overflowing_thread() {
    let prog = util::c_program(true);
    let prog = prog.to_str().unwrap();
    // The program has no SIGUSR1 handler: the first overflow's signal kills it.
    let (overflows, summary, out) = watch_json(&[
        "-e",
        "mem:target:x",
        "-c",
        "100",
        "--signal",
        "USR1",
        "--",
        prog,
        "10000",
    ]);
    let code = 128 + libc::SIGUSR1;
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    assert_eq!(summary["exit_code"], code);
    assert!(!overflows.is_empty() && overflows.len() < 100, "{summary}");
}

#[test]
fn sigterm_to_perfring_is_passed_to_the_command_then_reported() {
    let prog = util::c_program(true);
    let child = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["watch", "--json", "-e", "cpu-clock", "--"])
        .arg(&prog)
        .args(["0", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill has no memory-safety preconditions; the pid is our perfring child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let code = 128 + libc::SIGTERM;
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["exit_code"], code);
}

/// Overflow lines of a `--json` watch's stdout, and the summary.
fn json_lines(text: &str) -> (Vec<Value>, Value) {
    let mut objects: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = objects.pop().unwrap_or_else(|| panic!("no output: {text}"));
    assert_eq!(summary["type"], "summary", "{text}");
    (objects, summary)
}

fn per_tid(overflows: &[Value]) -> std::collections::BTreeMap<u64, u64> {
    let mut m = std::collections::BTreeMap::new();
    for o in overflows {
        *m.entry(o["tid"].as_u64().unwrap()).or_default() += 1;
    }
    m
}

#[test]
fn pid_follows_threads_created_after_it_attached() {
    use std::io::{BufRead, BufReader, Write};
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let out_file = util::temp_path("watch-out");
    let mut child = Command::new(&prog)
        .args(["50", "1000"])
        .arg(&tid_file)
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let pid = child.id().to_string();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["watch", "--json", "-e", "mem:hit:x", "-c", "10", "-p", &pid])
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // perfring says when it is attached; only then may the program start its threads.
    let mut err = BufReader::new(watch.stderr.take().unwrap());
    // (An ordinary user is told first that the kernel is left out.)
    let mut notices = String::new();
    while !notices.contains("attached to process") {
        assert!(err.read_line(&mut notices).unwrap() > 0, "{notices}");
    }
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    assert!(child.wait().unwrap().success());
    let status = watch.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{rest}");
    let (overflows, summary) = json_lines(&std::fs::read_to_string(&out_file).unwrap());
    // Exactly 1000/10 per thread, each attributed to the thread the program named.
    let expected: std::collections::BTreeMap<u64, u64> = util::tids_in(&tid_file)
        .into_iter()
        .map(|t| (u64::from(t), 100))
        .collect();
    assert_eq!(expected.len(), 50);
    assert_eq!(per_tid(&overflows), expected);
    assert_eq!(summary["overflows"], 5000);
    assert_eq!(summary["lost"], 0);
    for o in &overflows {
        assert_eq!(o["sym"], "hit", "{o}");
        assert_eq!(o["pid"].to_string(), pid);
    }
}

#[test]
fn budget_applies_to_each_thread_of_a_command() {
    use std::io::{BufRead, BufReader};
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let stop = util::temp_path("stop");
    let until = format!("until:{}", stop.display());
    let (threads, budget) = (4u64, 3u64);
    let mut watch = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args([
            "watch",
            "--json",
            "-e",
            "mem:hit:x",
            "-c",
            "10",
            "--budget",
            "3",
            "--",
        ])
        .arg(&prog)
        .args(["4", "100"])
        .arg(&tid_file)
        .arg(&until)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Each thread calls hit() until `stop` exists: once every thread has spent its
    // budget, stop them. A thread whose counter was never opened would hang here, so a
    // (generous) deadline turns that into a failure.
    let deadline = Instant::now() + Duration::from_secs(120);
    let killer = {
        let pid = watch.id();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.exists() {
                if Instant::now() > deadline {
                    let _ = std::fs::write(&stop, "");
                    let _ = Command::new("kill").arg(pid.to_string()).status();
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
    };
    let mut text = String::new();
    let mut seen = 0;
    for line in BufReader::new(watch.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("\"overflow\"") {
            seen += 1;
            if seen == threads * budget {
                std::fs::write(&stop, "").unwrap();
            }
        }
        text += &line;
        text.push('\n');
    }
    let out = watch.wait_with_output().unwrap();
    assert!(!killer.join().unwrap(), "timed out; {text}");
    assert!(out.status.success(), "{}", stderr(&out));
    let (overflows, summary) = json_lines(&text);
    let expected: std::collections::BTreeMap<u64, u64> = util::tids_in(&tid_file)
        .into_iter()
        .map(|t| (u64::from(t), budget))
        .collect();
    assert_eq!(expected.len(), threads as usize);
    assert_eq!(per_tid(&overflows), expected);
    assert_eq!(summary["overflows"], threads * budget);
    assert_eq!(summary["exit_code"], 0);
}

/// Four threads hitting one breakpoint at once share the command's anchor ring, where
/// the kernel can overwrite records written from two CPUs at once without a LOST
/// record. Whether or not that happens in a run, every overflow the kernel counted is
/// accounted for: seen, or reported lost (up to one partial period per thread).
#[test]
fn concurrent_threads_every_overflow_seen_or_reported_lost() {
    const SRC: &str = r#"
#include <pthread.h>
#include <stdlib.h>
volatile long counter;
void __attribute__((noinline)) hit(void) { counter++; }
static void *run(void *arg) { for (int i = 0; i < 20000; i++) hit(); return arg; }
int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) if (pthread_create(&t[i], 0, run, 0)) return 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    return 0;
}
"#;
    let prog = util::compile_c("concurrent_hits", SRC, &["-pthread"]);
    let prog = prog.to_str().unwrap();
    let (overflows, summary, out) = watch_json(&["-e", "mem:hit:x", "-c", "10", prog]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary["overflows"], overflows.len() as u64);
    let seen = summary["overflows"].as_u64().unwrap();
    let lost = summary["lost"].as_u64().unwrap();
    // 4 × 20000 calls, period 10: 8000 overflows. When records were overwritten, the
    // loss is derived from the count, less one partial period per counter copy (the
    // main thread and the 4 workers): then seen + lost is 8000 - 4.
    assert!(
        (8000 - 4..=8000).contains(&(seen + lost)),
        "seen {seen} + lost {lost} != 8000: {summary}"
    );
    eprintln!("{summary}");
}

/// `-p` on a process that does its work and exits at once, before the first records
/// reach the writer thread: its mappings were read from `/proc` when the watch started,
/// so every overflow is still named.
#[test]
fn pid_names_the_overflows_of_a_process_that_exits_at_once() {
    use std::io::{BufRead, BufReader, Write};
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let mut child = Command::new(&prog)
        .args(["3", "100"])
        .arg(&tid_file)
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = child.id().to_string();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["watch", "--json", "-e", "mem:hit:x", "-c", "10", "-p", &pid])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(watch.stderr.take().unwrap());
    // (An ordinary user is told first that the kernel is left out.)
    let mut notices = String::new();
    while !notices.contains("attached to process") {
        assert!(err.read_line(&mut notices).unwrap() > 0, "{notices}");
    }
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    assert!(child.wait().unwrap().success());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut watch.stdout.take().unwrap(), &mut text).unwrap();
    assert!(watch.wait().unwrap().success());
    let (overflows, summary) = json_lines(&text);
    assert_eq!(summary["overflows"], 30, "{text}");
    for o in &overflows {
        assert_eq!(o["sym"], "hit", "{o}");
    }
}
