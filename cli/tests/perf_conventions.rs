//! perf's conventions where perf users expect them, each checked against what perf
//! itself does on this machine where perf can be asked: `--version`, `-F max` and a
//! rate above the kernel's maximum, `-m` rounding, perf.data kept as perf.data.old,
//! perf.data to a pipe (`-o -`, read by `perf report -i -`), the command's stdout kept
//! out of machine-read output (`watch --json`, `watch -o`), `watch --help` on `-p`,
//! the injector's sample periods under `-F`, and the default event's notice.

#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use util::stderr;

fn perfring_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfring"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run perfring")
}

fn perf_in(dir: &Path, args: &[&str]) -> Output {
    Command::new("perf")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run perf (linux-perf: bash scripts/setup.sh)")
}

fn max_rate() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A shell loop busy for a few tens of milliseconds, printing a line first and last.
const BUSY: &str = "echo first; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo last";

#[test]
fn version_is_printed_as_perf_prints_its() {
    let want = format!("perfring version {}\n", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["-v"], &["version"]] {
        let out = util::perfring(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args:?}");
    }
    // perf's own line has the same shape.
    let perf = Command::new("perf").arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&perf.stdout).starts_with("perf version "));
}

/// The sample_freq an `explain -F` would open with, and what was said on stderr.
fn explained_freq(f: &str) -> (u64, String) {
    let out = util::perfring(&["explain", "-e", "cpu-clock", "-F", f, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["freq"], 1, "{v}");
    let freq = v["sample_freq"].as_u64().unwrap_or_else(|| panic!("{v}"));
    (freq, stderr(&out))
}

/// The line perf prints for these `record` flags (its notices come before it records).
fn perf_notice(dir: &Path, flags: &[&str]) -> String {
    let mut args = vec!["record", "-o", "perf-notice.data"];
    args.extend_from_slice(flags);
    args.extend(["--", "true"]);
    let out = perf_in(dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

#[test]
fn frequency_max_and_above_it_are_the_kernels_maximum_as_in_perf() {
    let max = max_rate();
    let dir = util::capture::scratch("conv-freq");
    let (freq, said) = explained_freq("max");
    assert_eq!(freq, max);
    let perf_said = perf_notice(&dir, &["-F", "max"]);
    let info = format!("info: Using a maximum frequency rate of {max} Hz");
    assert!(
        said.contains(&info) && perf_said.contains(&info),
        "{said}\n{perf_said}"
    );

    let above = (2 * max).to_string();
    let (freq, said) = explained_freq(&above);
    assert_eq!(freq, max);
    let perf_said = perf_notice(&dir, &["-F", &above]);
    let warning = format!(
        "warning: Maximum frequency rate ({max} Hz) exceeded, throttling from {above} Hz to {max} Hz."
    );
    assert!(
        said.contains(&warning) && perf_said.contains(&warning),
        "{said}\n{perf_said}"
    );
    assert!(
        said.contains("/proc/sys/kernel/perf_event_max_sample_rate"),
        "{said}"
    );

    // A recording at the maximum opens: the attr in perf.data says so.
    let out = perfring_in(
        &dir,
        &[
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "max",
            "-o",
            "max.data",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ev = perf_in(&dir, &["evlist", "-v", "-i", "max.data"]);
    let text = String::from_utf8_lossy(&ev.stdout);
    assert!(text.contains(&format!("sample_freq }}: {max},")), "{text}");
    assert!(text.contains("freq: 1"), "{text}");
}

#[test]
fn mmap_pages_are_rounded_with_perfs_notice() {
    let dir = util::capture::scratch("conv-mmap");
    let perf_said = perf_notice(&dir, &["-m", "3"]);
    let line = perf_said
        .lines()
        .find(|l| l.starts_with("rounding mmap pages"))
        .unwrap_or_else(|| panic!("perf said: {perf_said}"));
    let out = perfring_in(
        &dir,
        &[
            "record",
            "-e",
            "cpu-clock",
            "-m",
            "3",
            "-o",
            "m.data",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).lines().any(|l| l == line),
        "perf: {line}\nperfring: {}",
        stderr(&out)
    );
    // A power of two is taken as it is, silently, as perf does.
    let out = perfring_in(
        &dir,
        &[
            "record",
            "-e",
            "cpu-clock",
            "-m",
            "4",
            "-o",
            "m.data",
            "--",
            "true",
        ],
    );
    assert!(!stderr(&out).contains("rounding"), "{}", stderr(&out));
}

#[test]
fn an_existing_perf_data_becomes_perf_data_old() {
    let dir = util::capture::scratch("conv-old");
    let record = || {
        let out = perfring_in(&dir, &["record", "-e", "cpu-clock", "--", "true"]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // An empty perf.data is not kept (perf moves only a file with something in it).
    std::fs::write(dir.join("perf.data"), b"").unwrap();
    record();
    assert!(!dir.join("perf.data.old").exists());
    let first = std::fs::read(dir.join("perf.data")).unwrap();
    record();
    assert_eq!(std::fs::read(dir.join("perf.data.old")).unwrap(), first);
    let second = std::fs::read(dir.join("perf.data")).unwrap();
    assert_ne!(second, first);
    // Both read with perf.
    for f in ["perf.data", "perf.data.old"] {
        let out = perf_in(&dir, &["report", "-i", f, "--stdio"]);
        assert!(out.status.success(), "{f}: {}", stderr(&out));
    }
}

/// `record -o -`: perf's pipe format on stdout, which `perf report -i -` and `perf
/// script -i -` read; the command's own stdout goes to stderr, as with `perf record -o -`.
#[test]
fn perf_data_to_a_pipe_is_read_by_perf_report() {
    let dir = util::capture::scratch("conv-pipe");
    let stream = util::temp_path("pipe.data");
    let out = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .current_dir(&dir)
        .args([
            "record",
            "-e",
            "cpu-clock",
            "-c",
            "1000000",
            "-o",
            "-",
            "--",
            "sh",
            "-c",
            BUSY,
        ])
        .stdout(std::fs::File::create(&stream).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("first") && said.contains("last"), "{said}");
    let bytes = std::fs::read(&stream).unwrap();
    // perf's pipe header: the magic and a size of 16.
    assert_eq!(&bytes[..8], b"PERFILE2");
    assert_eq!(u64::from_ne_bytes(bytes[8..16].try_into().unwrap()), 16);
    // (The command line, in a feature record, holds "echo first;", not its output.)
    assert!(
        !bytes.windows(6).any(|w| w == b"first\n"),
        "the command's output is in the stream"
    );
    let read = |args: &[&str]| {
        let out = Command::new("perf")
            .args(args)
            .stdin(std::fs::File::open(&stream).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "perf {args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report = read(&["report", "-i", "-", "--stdio", "--sort", "comm"]);
    assert!(report.contains("of event 'cpu-clock'"), "{report}");
    assert!(
        report.lines().any(|l| l.trim_end().ends_with(" sh")),
        "{report}"
    );
    let script = read(&["script", "-i", "-", "-F", "comm,period"]);
    let samples: Vec<&str> = script.lines().collect();
    assert!(samples.len() > 5, "{script}");
    assert!(
        samples
            .iter()
            .all(|l| l.split_whitespace().last() == Some("1000000")),
        "{script}"
    );
    let summary = said.lines().find(|l| l.contains(" samples, ")).unwrap();
    let n: usize = summary["perfring: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(samples.len(), n, "{summary}");
}

/// `watch --json`: stdout holds only JSON lines (the command's output goes to stderr);
/// with `-o FILE` the lines go to the file and stdout is the command's alone.
#[test]
fn watch_json_lines_are_never_mixed_with_the_commands_output() {
    let out = util::perfring(&[
        "watch",
        "--json",
        "-e",
        "cpu-clock",
        "-c",
        "1000000",
        "--",
        "sh",
        "-c",
        BUSY,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{text}")))
        .collect();
    assert!(lines.len() > 2, "{text}");
    assert_eq!(lines.last().unwrap()["type"], "summary");
    assert!(stderr(&out).contains("first") && stderr(&out).contains("last"));

    let file = util::temp_path("watch.jsonl");
    let out = util::perfring(&[
        "watch",
        "--json",
        "-o",
        file.to_str().unwrap(),
        "-e",
        "cpu-clock",
        "-c",
        "1000000",
        "--",
        "sh",
        "-c",
        BUSY,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nlast\n");
    let text = std::fs::read_to_string(&file).unwrap();
    let summary: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(
        summary["overflows"].as_u64().unwrap() as usize,
        text.lines().count() - 1
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// `watch --help` says one thing about `-p` and threads created later: that they are
/// followed (`pid_follows_threads_created_after_it_attached` in cli_watch checks it).
#[test]
fn watch_help_says_p_follows_later_threads_everywhere() {
    let out = util::perfring(&["watch", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap().replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!help.contains("not threads it creates later"), "{help}");
    assert!(help.contains("-p watches every thread of the process, also those it creates later"));
    assert!(help.contains(
        "-p, --pid PID Watch every thread of a running process and the threads it creates later"
    ));
}

/// `inject -F`: every sample carries the period the kernel used. For a clock that is
/// 1e9/HZ, which perf record's samples of the same event and rate carry too; for
/// other events the injector cannot know it and refuses, naming the fix.
#[test]
fn inject_frequency_samples_carry_the_real_period() {
    let dir = util::capture::scratch("conv-inject");
    let out = perfring_in(
        &dir,
        &[
            "inject",
            "-e",
            "cpu-clock:u",
            "-F",
            "999",
            "--action",
            "record",
            "-o",
            "inj.data",
            "--",
            "sh",
            "-c",
            BUSY,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let periods = |file: &str| -> Vec<String> {
        let out = perf_in(&dir, &["script", "-i", file, "-F", "period"]);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    };
    let ours = periods("inj.data");
    assert!(ours.len() > 5, "{ours:?}");
    let perf = perf_in(
        &dir,
        &[
            "record",
            "-e",
            "cpu-clock:u",
            "-F",
            "999",
            "-o",
            "perf.data",
            "--",
            "sh",
            "-c",
            BUSY,
        ],
    );
    assert!(perf.status.success(), "{}", stderr(&perf));
    let theirs = periods("perf.data");
    assert!(!theirs.is_empty());
    assert!(theirs.iter().all(|p| *p == theirs[0]), "{theirs:?}");
    assert!(
        ours.iter().all(|p| *p == theirs[0]),
        "perfring {ours:?} perf {}",
        theirs[0]
    );
    assert_eq!(theirs[0], (1_000_000_000u64 / 999).to_string());

    let out = perfring_in(
        &dir,
        &[
            "inject",
            "-e",
            "page-faults",
            "-F",
            "100",
            "--action",
            "record",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("Fix: give a period (-c N)"),
        "{}",
        stderr(&out)
    );
}

fn has_hardware_pmu() -> bool {
    perfring::Counter::builder("cycles").unwrap().open().is_ok()
}

#[test]
fn the_default_event_is_named_for_what_the_command_does() {
    let dir = util::capture::scratch("conv-default");
    let out = perfring_in(&dir, &["record", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    if has_hardware_pmu() {
        // cycles is recorded and nothing needs saying.
        assert!(!stderr(&out).contains("no -e given"), "{}", stderr(&out));
        return;
    }
    assert!(
        stderr(&out).contains(": recording cpu-clock"),
        "{}",
        stderr(&out)
    );
    let out = perfring_in(&dir, &["watch", "--", "true"]);
    assert!(
        stderr(&out).contains(": watching cpu-clock"),
        "{}",
        stderr(&out)
    );
}
