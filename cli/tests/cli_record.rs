//! `perfring record`: files read back by the real `perf` and `go tool pprof`.

#[path = "../../tests/util/mod.rs"]
mod util;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::capture::{self, perf};

/// `perfring ARGS` run in `dir`.
fn record(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_perfring"))
        .arg("record")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run perfring")
}

fn ok(out: &std::process::Output) -> String {
    let err = util::stderr(out);
    assert!(out.status.success(), "perfring record failed: {err}");
    err
}

/// `perf script -F FIELDS` lines, failing on any warning.
fn script(dir: &Path, file: &str, fields: &str) -> Vec<String> {
    let out = perf(dir, &["script", "-i", file, "-F", fields]);
    let err = util::stderr(&out);
    assert!(out.status.success(), "perf script failed: {err}");
    assert!(
        !err.to_lowercase().contains("warning"),
        "perf script warned: {err}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `go tool pprof -top`: flat sample count per function.
fn pprof_top(dir: &Path, file: &str) -> Vec<(String, u64)> {
    capture::pprof_top(dir, file)
}

/// `perf report -n --sort sym`: (symbol, samples), most first.
fn perf_top(dir: &Path, file: &str) -> Vec<(String, u64)> {
    capture::perf_report_sym(dir, file)
}

#[test]
fn breakpoint_recording_has_exactly_n_over_p_samples_in_both_formats() {
    let dir = capture::scratch("cli-exact");
    let prog = capture::threads_program();
    let prog = prog.to_str().unwrap();
    let out = record(
        &dir,
        &[
            "--exact-periods",
            "-e",
            "mem:hot:x",
            "-c",
            "100",
            "--",
            prog,
            "10000",
            "0",
        ],
    );
    let err = ok(&out);
    assert!(err.contains("100 samples"), "{err}");
    assert!(
        err.contains("lost: 0 in the rings, 0 in the queue"),
        "{err}"
    );
    let lines = script(&dir, "perf.data", "tid,ip,sym");
    assert_eq!(lines.len(), 100, "{}", lines.join("\n"));
    assert!(
        lines.iter().all(|l| l.trim_end().ends_with(" hot")),
        "{}",
        lines.join("\n")
    );
    // The same samples as watch reports for a run of the same program: the one
    // thread, at hot's address (ASLR is off for symbolic breakpoints).
    let w = util::perfring(&[
        "watch",
        "-e",
        "mem:hot:x",
        "-c",
        "100",
        "--json",
        "--",
        prog,
        "10000",
        "0",
    ]);
    let overflows: Vec<serde_json::Value> = String::from_utf8_lossy(&w.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "overflow")
        .collect();
    assert_eq!(overflows.len(), 100);
    let ip = lines[0].split_whitespace().nth(1).unwrap().to_string();
    for o in &overflows {
        assert_eq!(o["sym"], "hot");
        assert_eq!(o["ip"].as_str(), Some(format!("0x{ip}").as_str()), "{o}");
    }
    let out = record(
        &dir,
        &[
            "--exact-periods",
            "-e",
            "mem:hot:x",
            "-c",
            "100",
            "--format",
            "pprof",
            "--",
            prog,
            "10000",
            "0",
        ],
    );
    ok(&out);
    assert_eq!(
        pprof_top(&dir, "profile.pb.gz"),
        vec![("hot".to_string(), 100)]
    );
}

#[test]
fn cpu_clock_with_stacks_names_the_threads_functions_in_perf_report_and_pprof() {
    let dir = capture::scratch("cli-rank");
    let prog = capture::threads_program();
    let prog = prog.to_str().unwrap();
    let args = ["-e", "cpu-clock:u", "-c", "100000", "-g"];
    let cmd = ["--", prog, "0", "4000000"];
    ok(&record(
        &dir,
        &[&args[..], &["-o", "p.data"], &cmd[..]].concat(),
    ));
    ok(&record(
        &dir,
        &[&args[..], &["--format", "pprof", "-o", "p.pb.gz"], &cmd[..]].concat(),
    ));
    // The five threads' functions lead both profiles. Not in the order of their work
    // (16:8:4:2:1): on this VM the cpu-clock hrtimer skips periods unevenly between
    // threads sharing a core (`perf record`'s own shares of w4/w5 ranged from 1.3 to
    // 8.5 here), so the order would test the host's timer, not perfring.
    let want: BTreeSet<String> = ["w1", "w2", "w3", "w4", "w5"].map(String::from).into();
    let names = |v: &[(String, u64)]| -> BTreeSet<String> {
        v.iter().take(5).map(|(n, _)| n.clone()).collect()
    };
    assert_eq!(names(&perf_top(&dir, "p.data")), want);
    assert_eq!(names(&pprof_top(&dir, "p.pb.gz")), want);
    // Stacks were recorded: perf script shows callers under each sample.
    let lines = script(&dir, "p.data", "ip,sym");
    assert!(
        lines.iter().any(|l| l.trim_end().ends_with(" run")),
        "callers of w*: run"
    );
}

/// Waits until `file` has more than `bytes` bytes.
fn wait_for_size(file: &Path, bytes: u64) {
    let t = Instant::now();
    while std::fs::metadata(file).map_or(0, |m| m.len()) <= bytes {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{} never grew",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A recording in the background of the C test program calling `target()` 50000
/// times (a sample every 5 calls), then sleeping 100 s: light on the CPU, and it
/// outlives the test's signals.
fn long_recording(dir: &Path, extra: &[&str]) -> std::process::Child {
    let prog = util::c_program(true);
    Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["record", "--exact-periods", "-e", "mem:target:x", "-c", "5"])
        .args(extra)
        .args(["--", prog.to_str().unwrap(), "50000", "100"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

/// The first child of `pid` (the recorded command).
fn child_of(pid: u32) -> u32 {
    let t = Instant::now();
    loop {
        let c =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = c.split_whitespace().next() {
            return c.parse().unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no child");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the sampled program sleeps (its calls are done).
fn wait_asleep(pid: u32) {
    let t = Instant::now();
    loop {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if wchan.contains("nanosleep") || (stat.contains(") S ") && wchan.contains("sleep")) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "never slept: {wchan} {stat}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn recordings_cut_short_still_open_in_both_readers() {
    let dir = capture::scratch("cli-cut");
    for (name, format) in [("k.data", "perf"), ("k.pb.gz", "pprof")] {
        // The target killed: perfring notices, finishes the file and reports.
        let rec = long_recording(&dir, &["--format", format, "-o", name]);
        let child = child_of(rec.id());
        wait_asleep(child);
        signal(child, libc::SIGKILL);
        let out = rec.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGKILL),
            "{}",
            util::stderr(&out)
        );
        // perfring SIGINT'd: passed to the command, which dies of it; the file is finished.
        let sname = format!("i-{name}");
        let rec = long_recording(&dir, &["--format", format, "-o", &sname]);
        let child = child_of(rec.id());
        wait_asleep(child);
        signal(rec.id(), libc::SIGINT);
        let out = rec.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGINT),
            "{}",
            util::stderr(&out)
        );
        assert!(
            !Path::new(&format!("/proc/{child}")).exists(),
            "the command is gone"
        );
        // Every call was made before the cut: 50000 / 5 samples, all in target().
        for f in [name, sname.as_str()] {
            let top = if format == "perf" {
                perf_top(&dir, f)
            } else {
                pprof_top(&dir, f)
            };
            assert_eq!(top, vec![("target".to_string(), 10000)], "{f}");
        }
    }
    // perfring itself killed: perf.data holds what was written (no feature sections).
    let rec = long_recording(&dir, &["-o", "killed.data"]);
    let child = child_of(rec.id());
    wait_for_size(&dir.join("killed.data"), 64 << 10);
    signal(rec.id(), libc::SIGKILL);
    // The command holds perfring's stderr pipe: end it before reading that to its end
    // (else the read waits out the command's 100 s sleep).
    signal(child, libc::SIGKILL);
    let _ = rec.wait_with_output();
    let lines = script(&dir, "killed.data", "ip,sym");
    assert!(lines.len() > 1000, "{} samples", lines.len());
    assert!(lines.iter().all(|l| l.ends_with(" target")), "{lines:?}");
}

#[test]
fn a_file_size_limit_fails_clearly_and_leaves_a_readable_file() {
    let dir = capture::scratch("cli-fsize");
    let prog = util::c_program(true);
    // SIGXFSZ ignored (inherited across exec), so writes past the limit get EFBIG.
    let script_text = format!(
        "trap '' XFSZ; ulimit -f 256; exec {} record -e mem:target:x -c 1 -o big.data -- {} 100000",
        env!("CARGO_BIN_EXE_perfring"),
        prog.display()
    );
    let out = Command::new("sh")
        .args(["-c", &script_text])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("big.data"), "names the file: {err}");
    assert!(
        err.contains("File too large") && err.contains("ulimit -f"),
        "cause and fix: {err}"
    );
    let lines = script(&dir, "big.data", "ip,sym");
    assert!(
        lines.len() > 1000,
        "the records before the limit: {}",
        lines.len()
    );
    assert!(lines.len() < 100000, "not all: {}", lines.len());
}

#[test]
fn a_closed_pipe_fails_clearly() {
    let dir = capture::scratch("cli-pipe");
    let prog = capture::threads_program();
    let mut rec = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args([
            "record",
            "-e",
            "mem:hot:x",
            "--format",
            "pprof",
            "-o",
            "-",
            "--",
        ])
        .args([prog.to_str().unwrap(), "1000", "0"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(rec.stdout.take()); // the reader goes away
    let out = rec.wait_with_output().unwrap();
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Broken pipe") && err.contains("<stdout>"),
        "{err}"
    );
}

#[test]
fn usage_errors_name_the_fix() {
    let dir = capture::scratch("cli-usage");
    // (`-o -` writes perf's pipe format: perf_conventions.rs checks it with perf.)
    let out = record(&dir, &["--format", "gif", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(util::stderr(&out).contains("perf, pprof, svg, folded or firefox"));
    let out = record(&dir, &["-e", "cpu-clock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(util::stderr(&out).contains("nothing to record"));
    // perf's `record -a -- sleep N`: refused before anything runs, naming --duration.
    let out = record(&dir, &["-a", "--", "sleep", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(util::stderr(&out).contains("--duration SECONDS"));
}
