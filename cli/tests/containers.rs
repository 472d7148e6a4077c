//! Programs in a container — another mount namespace (`unshare -m`) or another root
//! (`chroot`) — are named from their own files, not from the host's file at the same
//! path: through `/proc/PID/root` while they live, and, for perf.data, by build id from
//! perf's build-id cache afterwards.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A static program that spins in `NAME_spin` for about a second.
fn program(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "volatile unsigned long sink;\n\
             __attribute__((noinline)) void {name}_spin(void) {{\n\
                 for (unsigned long i = 0; i < 4000000000UL; i++) sink += i;\n\
             }}\n\
             int main(void) {{ {name}_spin(); return 0; }}\n"
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-g", "-static", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success());
    out
}

fn perfring(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(args)
        .current_dir(dir)
        // perf's build-id cache is ~/.debug: the test's own, for perfring and perf.
        .env("HOME", dir)
        .output()
        .expect("run perfring");
    assert!(out.status.success(), "{args:?}: {}", util::stderr(&out));
    out
}

/// The innermost frames' names of `watch --json` lines, by count.
fn leaves(out: &std::process::Output) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(o) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        if o["type"] == "overflow" {
            *m.entry(o["sym"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
    }
    m
}

/// The container's name leads, the host's is nowhere.
fn assert_container_named(what: &str, names: &std::collections::BTreeMap<String, u64>) {
    let total: u64 = names.values().sum();
    let inside = names.get("container_spin").copied().unwrap_or(0);
    assert!(inside * 2 > total, "{what}: {names:?}");
    assert!(!names.contains_key("host_spin"), "{what}: {names:?}");
}

#[test]
fn a_program_in_another_mount_namespace_is_named_from_its_own_file() {
    let dir = util::capture::scratch("containers-ns");
    let host = program(&dir, "host");
    let container = program(&dir, "container");
    // The container's file over the host's path, in a mount namespace of its own.
    let path = host.to_str().unwrap();
    let script = format!(
        "mount --bind {} {path} && exec {path}",
        container.to_str().unwrap()
    );
    let cmd = [
        "--",
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ];
    let ev = ["-e", "cpu-clock:u", "-F", "199"];

    let out = perfring(&dir, &[&["watch", "--json"], &ev[..], &cmd[..]].concat());
    assert_container_named("watch", &leaves(&out));

    perfring(
        &dir,
        &[
            &["record", "--format", "pprof", "-o", "c.pb.gz"],
            &ev[..],
            &cmd[..],
        ]
        .concat(),
    );
    let top = util::capture::pprof_top(&dir, "c.pb.gz");
    assert_container_named("pprof", &top.into_iter().collect());

    perfring(
        &dir,
        &[&["record", "-o", "c.data"], &ev[..], &cmd[..]].concat(),
    );
    // The file at that path on the host is the host's: perf finds the container's by
    // the build id the recording gave it, in the cache perfring filled.
    let out = util::capture::perf(
        &dir,
        &[
            "report", "-i", "c.data", "--stdio", "-q", "--sort", "sym", "-g", "none",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert!(text.contains("container_spin"), "perf report: {text}");
    assert!(!text.contains("host_spin"), "perf report: {text}");
}

#[test]
fn a_chrooted_program_is_named_from_its_own_file() {
    let dir = util::capture::scratch("containers-chroot");
    let host = program(&dir, "host");
    let container = program(&dir, "container");
    // Inside the new root, the program sits where the host's is outside it.
    let root = dir.join("root");
    let inside = root.join(host.strip_prefix("/").unwrap());
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::copy(&container, &inside).unwrap();
    let out = perfring(
        &dir,
        &[
            "watch",
            "--json",
            "-e",
            "cpu-clock:u",
            "-F",
            "199",
            "--",
            "chroot",
            root.to_str().unwrap(),
            host.to_str().unwrap(),
        ],
    );
    assert_container_named("watch", &leaves(&out));
}
