//! Whole machines: `record -a` and `record -C LIST` name the processes that were running
//! before they started (their `COMM`s and `MMAP2`s synthesized, as perf writes them),
//! CPU lists merge, and a CPU that does not exist is named as such.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::process::{Child, Command};

/// A shell busy loop started before the recording (a `dash` process on Debian).
struct Busy(Child);

impl Busy {
    fn start() -> Busy {
        let child = Command::new("sh")
            .args(["-c", "i=0; while :; do i=$((i+1)); done"])
            .spawn()
            .expect("run sh");
        // Let it exec and run a while before the recording begins.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Busy(child)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn perfring(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run perfring")
}

/// `perf report --sort pid,comm,dso`: (pid, comm, dso) → samples.
fn by_pid_comm_dso(dir: &std::path::Path, file: &str) -> Vec<(String, String, String, u64)> {
    let out = util::capture::perf(
        dir,
        &[
            "report",
            "-f",
            "-i",
            file,
            "--stdio",
            "-n",
            "--sort",
            "pid,comm,dso",
            "-q",
            "-g",
            "none",
        ],
    );
    assert!(out.status.success(), "perf report: {}", util::stderr(&out));
    // "    19.06%           812  29446:sh        sh     dash"
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 5 && f[0].ends_with('%')).then(|| {
                (
                    f[2].to_string(),
                    f[3].to_string(),
                    f[4..].join(" "),
                    f[1].parse().unwrap_or(0),
                )
            })
        })
        .collect()
}

/// The busy loop's samples, by (comm, dso).
fn loop_rows(dir: &std::path::Path, file: &str, pid: u32) -> Vec<(String, String, u64)> {
    let prefix = format!("{pid}:");
    by_pid_comm_dso(dir, file)
        .into_iter()
        .filter(|r| r.0.starts_with(&prefix))
        .map(|r| (r.1, r.2, r.3))
        .collect()
}

#[test]
fn record_a_and_c_name_a_process_that_was_running_before() {
    let dir = util::capture::scratch("machine");
    let busy = Busy::start();
    let pid = busy.0.id();
    for (args, file) in [
        (&["-a"][..], "all.data"),
        (&["-C", "0", "-C", "1"][..], "cpus.data"),
    ] {
        let out = perfring(
            &dir,
            &[
                &[
                    "record",
                    "-e",
                    "cpu-clock",
                    "-F",
                    "499",
                    "--duration",
                    "1",
                    "-o",
                    file,
                ][..],
                args,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{args:?}: {}", util::stderr(&out));
        let rows = loop_rows(&dir, file, pid);
        let total: u64 = rows.iter().map(|r| r.2).sum();
        // A busy loop on one of two CPUs for a second at 499 Hz: up to ~500 samples,
        // fewer when other work shares the CPUs; what matters is that each is named.
        assert!(total >= 20, "{args:?}: {rows:?}");
        for (comm, dso, n) in &rows {
            assert_eq!(comm, "sh", "{args:?}: {rows:?}");
            assert!(
                !dso.contains("unknown"),
                "{args:?}: {n} samples without a DSO: {rows:?}"
            );
        }
        assert!(
            rows.iter()
                .any(|r| r.1 == "dash" || r.1.starts_with("libc")),
            "{args:?}: the shell's own code: {rows:?}"
        );
    }
    drop(busy);
}

#[test]
fn a_cpu_that_does_not_exist_is_named_as_such() {
    let dir = util::capture::scratch("machine-nocpu");
    let out = perfring(
        &dir,
        &["record", "-e", "cpu-clock", "-C", "0,4096", "-o", "x.data"],
    );
    let err = util::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("CPU 4096") && err.contains("no such CPU online"),
        "{err}"
    );
    assert!(!err.contains("sample_type"), "{err}");
    let out = perfring(&dir, &["record", "-C", "0-x", "-o", "x.data"]);
    assert_eq!(out.status.code(), Some(2), "{}", util::stderr(&out));
}
