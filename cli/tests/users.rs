//! For every user and every process: recordings are private, an ordinary user at
//! `perf_event_paranoid=2` records without typing `:u` (and is told), an explicit
//! request they may not have fails before the command runs, `doctor` says who is
//! asking, and a static program is refused by `inject` before it runs.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The unprivileged user the tests run the CLI as.
const NOBODY: &str = "65534";

/// A scratch directory every user may write (the CLI may run as `nobody`).
fn scratch(name: &str) -> PathBuf {
    let dir = util::capture::scratch(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// `perfring ARGS` under `umask 022`, as root or (`as_nobody`) as uid 65534 without
/// any capability.
fn perfring(dir: &Path, as_nobody: bool, args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_perfring");
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            NOBODY,
            "--regid",
            NOBODY,
            "--clear-groups",
            "--inh-caps=-all",
            "sh",
            "-c",
            "umask 022; exec \"$@\"",
            "sh",
            bin,
        ]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", "umask 022; exec \"$@\"", "sh", bin]);
        c
    };
    cmd.args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("run perfring (setpriv: util-linux)")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A C program that creates the file named by its first argument, then spins.
fn marker_program(dir: &Path, flags: &[&str]) -> PathBuf {
    let src = dir.join("marker.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
int main(int argc, char **argv) {
    if (argc > 1) { FILE *f = fopen(argv[1], "w"); if (f) fclose(f); }
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 1500000000UL; i++) x += i;
    return 0;
}
"#,
    )
    .unwrap();
    let name = if flags.contains(&"-static") {
        "static"
    } else {
        "marker"
    };
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .args(flags)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {flags:?}");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    out
}

fn paranoid() -> i64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn every_file_that_holds_samples_is_created_0600_under_umask_022() {
    let dir = scratch("private");
    let prog = marker_program(&dir, &[]);
    let p = prog.to_str().unwrap();
    let ev = ["-e", "cpu-clock:u", "-F", "99"];
    let runs: [(&[&str], &str); 4] = [
        (&["record", "-o", "r.data"], "r.data"),
        (&["record", "--format", "pprof", "-o", "r.pb.gz"], "r.pb.gz"),
        (
            &["inject", "--action", "record", "-o", "i.jsonl"],
            "i.jsonl",
        ),
        (&["inject", "--action", "record", "-o", "i.data"], "i.data"),
    ];
    for (args, file) in runs {
        let out = perfring(&dir, false, &[args, &ev[..], &["--", p]].concat());
        assert!(out.status.success(), "{args:?}: {}", util::stderr(&out));
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    // A file that was there keeps its owner and becomes private too.
    let old = dir.join("old.data");
    std::fs::write(&old, b"x").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = perfring(
        &dir,
        false,
        &[&["record", "-o", "old.data"], &ev[..], &["--", p]].concat(),
    );
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert_eq!(mode(&old), 0o600);
    // A symbolic link planted where the file goes is refused, not followed.
    let target = dir.join("elsewhere");
    std::os::unix::fs::symlink(&target, dir.join("link.data")).unwrap();
    let out = perfring(
        &dir,
        false,
        &[&["record", "-o", "link.data"], &ev[..], &["--", p]].concat(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
    assert!(
        util::stderr(&out).contains("symbolic link"),
        "{}",
        util::stderr(&out)
    );
    assert!(!target.exists(), "the link was followed");
}

#[test]
fn an_ordinary_user_records_without_typing_u_and_is_told() {
    let dir = scratch("nobody-record");
    let prog = marker_program(&dir, &[]);
    let p = prog.to_str().unwrap();
    // No -e: the default event, as perf picks it for this user.
    let out = perfring(
        &dir,
        true,
        &["record", "-F", "199", "-o", "n.data", "--", p],
    );
    let err = util::stderr(&out);
    assert!(out.status.success(), "{err}");
    let user_only = paranoid() >= 2;
    assert_eq!(err.contains("user space only"), user_only, "{err}");
    let samples: u64 = err
        .split("perfring: ")
        .find_map(|l| l.split(" samples,").next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary: {err}"));
    assert!(samples > 20, "{err}");
    // perf reads it back, every sample in user space.
    let report = util::capture::perf_report_sym(&dir, "n.data");
    assert!(!report.is_empty());
    // watch and stat the same way.
    let out = perfring(
        &dir,
        true,
        &["watch", "-e", "cpu-clock", "-c", "50000000", "--", p],
    );
    assert!(out.status.success(), "{}", util::stderr(&out));
    let out = perfring(&dir, true, &["stat", "-e", "task-clock", "--", p]);
    assert!(out.status.success(), "{}", util::stderr(&out));
}

#[test]
fn an_explicit_kernel_request_fails_before_the_command_runs_naming_the_sysctl() {
    if paranoid() < 2 {
        // The kernel may be profiled by anyone here: nothing to refuse.
        assert!(paranoid() <= 1);
        return;
    }
    let dir = scratch("nobody-kernel");
    let prog = marker_program(&dir, &[]);
    let marker = dir.join("ran");
    let args = ["record", "-e", "cpu-clock:k", "-o", "k.data", "--"];
    let out = perfring(
        &dir,
        true,
        &[
            &args[..],
            &[prog.to_str().unwrap(), marker.to_str().unwrap()],
        ]
        .concat(),
    );
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("kernel.perf_event_paranoid=1") && err.contains("CAP_PERFMON"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
    // Whole CPUs: level 0.
    let out = perfring(
        &dir,
        true,
        &["record", "-e", "cpu-clock:u", "-C", "0", "-o", "c.data"],
    );
    let err = util::stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("kernel.perf_event_paranoid=0"), "{err}");
}

#[test]
fn doctor_says_who_is_asking_and_what_that_allows() {
    let dir = scratch("doctor-who");
    let json = |as_nobody| {
        let out = perfring(&dir, as_nobody, &["doctor", "--json"]);
        assert!(out.status.success(), "{}", util::stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let root = json(false);
    assert_eq!(root["privileges"]["euid"], 0);
    assert_eq!(root["privileges"]["perfmon"], true);
    assert_eq!(root["privileges"]["may_profile_kernel"], true);
    let nobody = json(true);
    assert_eq!(nobody["privileges"]["euid"], 65534);
    assert_eq!(nobody["privileges"]["perfmon"], false);
    assert_eq!(nobody["privileges"]["may_profile_kernel"], paranoid() <= 1);
    let text = perfring(&dir, true, &["doctor"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("uid 65534, no perf capability"), "{text}");
}

#[test]
fn inject_refuses_a_static_program_before_it_runs() {
    let dir = scratch("static");
    let prog = marker_program(&dir, &["-static"]);
    let marker = dir.join("ran");
    let out = perfring(
        &dir,
        false,
        &[
            "inject",
            "-e",
            "cpu-clock:u",
            "-F",
            "99",
            "--action",
            "record",
            "-o",
            "s.jsonl",
            "--",
            prog.to_str().unwrap(),
            marker.to_str().unwrap(),
        ],
    );
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("statically linked") && err.contains("perfring record"),
        "{err}"
    );
    assert!(!marker.exists(), "the program ran");
}
