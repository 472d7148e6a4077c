//! The generated ABI: checked against a C compiler, the committed snapshot, and the
//! libclang-less fallback.

use std::path::Path;
use std::process::Command;

use perfring::sys;

/// Compiles and runs a C program printing the ioctl numbers from the real header.
#[test]
fn ioctl_numbers_match_the_c_header() {
    let dir = std::env::temp_dir().join(format!("perfring-ioctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("ioc.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <linux/perf_event.h>
int main(void) {
  printf("%lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %llu\n",
    (unsigned long)PERF_EVENT_IOC_ENABLE, (unsigned long)PERF_EVENT_IOC_DISABLE,
    (unsigned long)PERF_EVENT_IOC_REFRESH, (unsigned long)PERF_EVENT_IOC_RESET,
    (unsigned long)PERF_EVENT_IOC_PERIOD, (unsigned long)PERF_EVENT_IOC_SET_OUTPUT,
    (unsigned long)PERF_EVENT_IOC_SET_FILTER, (unsigned long)PERF_EVENT_IOC_ID,
    (unsigned long)PERF_EVENT_IOC_SET_BPF, (unsigned long)PERF_EVENT_IOC_PAUSE_OUTPUT,
    (unsigned long)PERF_EVENT_IOC_QUERY_BPF, (unsigned long)PERF_EVENT_IOC_MODIFY_ATTRIBUTES,
    (unsigned long long)PERF_SAMPLE_WEIGHT_TYPE);
  return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("ioc");
    let status = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    let out = Command::new(&exe).output().unwrap();
    let got: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    use sys::ioctl::*;
    let ours = [
        ENABLE,
        DISABLE,
        REFRESH,
        RESET,
        PERIOD,
        SET_OUTPUT,
        SET_FILTER,
        ID,
        SET_BPF,
        PAUSE_OUTPUT,
        QUERY_BPF,
        MODIFY_ATTRIBUTES,
        sys::PERF_SAMPLE_WEIGHT_TYPE,
    ];
    assert_eq!(got, ours);
    std::fs::remove_dir_all(&dir).ok();
}

/// `PTRACE_EVENT_STOP`, which the `libc` crate lacks for glibc, as the C header says.
#[test]
fn ptrace_event_stop_matches_the_c_header() {
    let dir = std::env::temp_dir().join(format!("perfring-ptrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("stop.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <sys/ptrace.h>\n\
         int main(void) { printf(\"%d\", (int)PTRACE_EVENT_STOP); return 0; }\n",
    )
    .unwrap();
    let exe = dir.join("stop");
    let status = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    let out = Command::new(&exe).output().unwrap();
    let got: i32 = String::from_utf8(out.stdout).unwrap().parse().unwrap();
    assert_eq!(got, sys::ptrace::PTRACE_EVENT_STOP);
    std::fs::remove_dir_all(&dir).ok();
}

/// The snapshot used without libclang is exactly what bindgen generates here.
#[test]
fn snapshot_matches_freshly_generated_bindings() {
    assert!(
        !sys::bindings_from_snapshot(),
        "built from the committed snapshot (libclang was not found), so there is nothing \
         fresh to compare it with: install libclang-dev (bash scripts/setup.sh), then \
         `cargo clean -p perfring` so that build.rs runs bindgen"
    );
    let fresh = include_str!(concat!(env!("OUT_DIR"), "/bindings.rs"));
    let snapshot = include_str!("../src/sys/bindings_snapshot.rs");
    assert!(
        fresh == snapshot,
        "src/sys/bindings_snapshot.rs is stale: regenerate it with \
         `cp \"$(ls -t target/debug/build/perfring-*/out/bindings.rs | head -1)\" src/sys/bindings_snapshot.rs`"
    );
}

/// Hiding libclang makes build.rs fall back to the snapshot, with a warning, and the
/// crate still builds.
#[test]
fn build_without_libclang_uses_the_snapshot() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let empty = std::env::temp_dir().join(format!("perfring-no-libclang-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let target = root.join("target/fallback-test");
    // Cargo replays no build-script warning for a cached build: start from clean.
    let clean = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["clean", "--offline", "-p", "perfring", "--target-dir"])
        .arg(&target)
        .output()
        .expect("run cargo clean");
    assert!(clean.status.success());
    let out = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["build", "--lib", "--offline", "--target-dir"])
        .arg(&target)
        .env("LIBCLANG_PATH", &empty)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fallback build failed:\n{stderr}");
    assert!(
        stderr.contains("using the committed snapshot")
            && stderr.contains("apt-get install libclang-dev"),
        "no fallback warning in:\n{stderr}"
    );
    std::fs::remove_dir_all(&empty).ok();
}
