//! Helpers shared by the live tests: a function to breakpoint and a watched variable.
#![allow(dead_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// A function the tests put an execute breakpoint on; `call_target(n)` calls it n times.
#[inline(never)]
#[no_mangle]
pub extern "C" fn perfring_test_target(x: u64) -> u64 {
    black_box(x).wrapping_mul(2654435761)
}

/// Its address, for `mem:ADDR:x`.
pub fn target_addr() -> u64 {
    perfring_test_target as *const () as u64
}

/// Calls the breakpointed function `n` times.
pub fn call_target(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = acc.wrapping_add(black_box(perfring_test_target)(black_box(i)));
    }
    acc
}

/// A variable the tests put a write watchpoint on.
pub static WATCHED: AtomicU64 = AtomicU64::new(0);

/// Writes the watched variable `n` times.
pub fn write_watched(n: u64) {
    for i in 0..n {
        WATCHED.store(black_box(i), Ordering::SeqCst);
    }
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Burns CPU for about `ms` milliseconds of wall time.
pub fn spin_ms(ms: u64) -> u64 {
    let end = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        for i in 0..1000u64 {
            x = black_box(x.wrapping_add(i * i));
        }
    }
    x
}

/// An execute breakpoint on [`perfring_test_target`].
pub fn target_breakpoint() -> perfring::Event {
    perfring::Event::breakpoint(perfring::event::Access::Execute, target_addr(), 8)
}

/// A write watchpoint on [`WATCHED`].
pub fn watched_watchpoint() -> perfring::Event {
    perfring::Event::breakpoint(
        perfring::event::Access::Write,
        &WATCHED as *const _ as u64,
        8,
    )
}

/// The C test program: `target()` is called `argv[1]` times (default 5), then, if
/// given, it sleeps `argv[2]` seconds; `counter` is written once per call.
const PROG_C: &str = r#"
#include <stdlib.h>
#include <unistd.h>
volatile long counter;
void __attribute__((noinline)) target(void) { counter++; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    for (int i = 0; i < n; i++) target();
    if (argc > 2) sleep(atoi(argv[2]));
    return 0;
}
"#;

/// Compiles the C test program (`-O0 -fno-inline`) once per test binary into the
/// target directory, as a PIE (`pie = true`) or a fixed-address `ET_EXEC`.
pub fn c_program(pie: bool) -> std::path::PathBuf {
    use std::sync::OnceLock;
    static BUILT: [OnceLock<std::path::PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(pie)]
        .get_or_init(|| {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "cprog-{}-{}",
                std::process::id(),
                if pie { "pie" } else { "nopie" }
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("prog.c");
            std::fs::write(&src, PROG_C).unwrap();
            let out = dir.join("prog");
            let flags: &[&str] = if pie {
                &["-fPIE", "-pie"]
            } else {
                &["-fno-pie", "-no-pie"]
            };
            let st = std::process::Command::new("cc")
                .args(["-O0", "-fno-inline", "-g0"])
                .args(flags)
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .expect("run cc");
            assert!(st.success(), "cc failed");
            out
        })
        .clone()
}

/// The `perfring` binary: cargo's own path in the CLI crate's tests, else the workspace
/// member `perfring-cli` built with the test's profile.
pub fn perfring_bin() -> std::path::PathBuf {
    match option_env!("CARGO_BIN_EXE_perfring") {
        Some(path) => path.into(),
        None => build_member("perfring-cli").join("perfring"),
    }
}

/// Runs the built `perfring` binary with `args`, capturing its output.
pub fn perfring(args: &[&str]) -> std::process::Output {
    std::process::Command::new(perfring_bin())
        .args(args)
        .output()
        .expect("run perfring")
}

/// Whether this test process may open what only `CAP_PERFMON` may (uprobes): root, or
/// the capability. CI runs the CLI's tests again as an ordinary user, where a uprobe
/// must be refused naming the capability instead.
pub fn perfmon() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    // CAP_SYS_ADMIN (21) or CAP_PERFMON (38).
    eff >> 21 & 1 == 1 || eff >> 38 & 1 == 1
}

/// Whether this user may count the kernel: [`perfmon`], or `perf_event_paranoid` 1 or
/// less.
pub fn may_profile_kernel() -> bool {
    let level: i64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    perfmon() || level <= 1
}

/// Whether this user may watch whole CPUs: [`perfmon`], or `perf_event_paranoid` 0 or
/// less.
pub fn may_watch_cpus() -> bool {
    let level: i64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    perfmon() || level <= 0
}

/// The name perf and perfring give `event` when they count it for this user: as
/// written, or with the kernel left out (`cpu-clock:u`; `u` added to modifiers
/// already there, as perf does) where the kernel may not be counted.
pub fn as_counted(event: &str) -> String {
    if may_profile_kernel() {
        event.to_string()
    } else if event.contains(':') {
        format!("{event}u")
    } else {
        format!("{event}:u")
    }
}

/// Checks that `perfring` refused a uprobe for want of `CAP_PERFMON`, naming the fix.
pub fn assert_uprobe_refused(out: &std::process::Output) {
    let err = stderr(out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("only for CAP_PERFMON") && err.contains("setcap cap_perfmon+ep"),
        "{err}"
    );
}

/// A command's stderr as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts a thread that reports its tid, then waits for a go before running `work`,
/// so a counter can be opened on it first. Returns the tid, the go signal and the handle.
pub fn gated_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> (u32, std::sync::mpsc::Sender<()>, std::thread::JoinHandle<T>) {
    let (tx_tid, rx_tid) = std::sync::mpsc::channel();
    let (tx_go, rx_go) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        tx_tid.send(gettid()).unwrap();
        rx_go.recv().unwrap();
        work()
    });
    (rx_tid.recv().unwrap(), tx_go, h)
}

/// Compiles the C program `source` (with `-O0 -g0`, then `flags` after the source so
/// that `-l`/library arguments link) once per test binary into the target directory as
/// `name`, and returns its path.
pub fn compile_c(name: &str, source: &str, flags: &[&str]) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cprog-{}-{name}", std::process::id()));
    let out = dir.join(name);
    if out.exists() {
        return out;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    // Build under another name and rename, so that concurrent tests never run a
    // half-written file.
    let tmp = dir.join(format!("{name}.{:?}", std::thread::current().id()));
    let st = std::process::Command::new("cc")
        .args(["-O0", "-g0", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(flags)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed on {name}.c");
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// A threaded C program: `threads N CALLS TIDFILE [MODE]` starts N threads, each
/// calling `hit()` CALLS times, joins them and writes their tids to TIDFILE, one a line.
/// It prints `ready` first; MODE `wait` then waits for a byte on stdin before starting
/// the threads (so a tool can attach first); MODE `until:PATH` makes each thread call
/// `hit()` in rounds of CALLS until PATH exists. Threads take turns (a mutex) to call
/// `hit()`, so overflows never coincide on two CPUs (see `SamplerBuilder::exact_periods`).
const THREADS_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
volatile long counter;
void __attribute__((noinline)) hit(void) { counter++; }
static int calls;
static const char *stop;
/* One thread calls hit() at a time: a sampler with one period per thread
   (exact_periods) has its threads write one ring, and the kernel's ring code
   assumes one writer per CPU (see perfring::sampler). */
static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;
static void *run(void *arg) {
    do {
        pthread_mutex_lock(&one_at_a_time);
        for (int i = 0; i < calls; i++) hit();
        pthread_mutex_unlock(&one_at_a_time);
    } while (stop && access(stop, F_OK) != 0);
    return (void *)(long)syscall(SYS_gettid);
}
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    calls = atoi(argv[2]);
    printf("ready\n");
    fflush(stdout);
    if (argc > 4 && strcmp(argv[4], "wait") == 0) {
        char c;
        if (read(0, &c, 1) != 1) return 3;
    }
    if (argc > 4 && strncmp(argv[4], "until:", 6) == 0) stop = argv[4] + 6;
    pthread_t *t = calloc(n, sizeof *t);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], 0, run, 0)) return 4;
    FILE *f = fopen(argv[3], "w");
    if (!f) return 5;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        fprintf(f, "%ld\n", (long)r);
    }
    fclose(f);
    return 0;
}
"#;

/// Compiles [`THREADS_C`] (fixed-address, `-O0`) once per test binary.
pub fn threads_program() -> std::path::PathBuf {
    use std::sync::OnceLock;
    static BUILT: OnceLock<std::path::PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("threads-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("threads.c");
            std::fs::write(&src, THREADS_C).unwrap();
            let out = dir.join("threads");
            let st = std::process::Command::new("cc")
                .args([
                    "-O0",
                    "-fno-inline",
                    "-g0",
                    "-fno-pie",
                    "-no-pie",
                    "-pthread",
                ])
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .expect("run cc");
            assert!(st.success(), "cc failed");
            out
        })
        .clone()
}

/// The tids a [`threads_program`] run wrote to `file`.
pub fn tids_in(file: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// A fresh path under the test target dir (not created).
pub fn temp_path(name: &str) -> std::path::PathBuf {
    use std::sync::atomic::AtomicUsize;
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The directory of this build profile's outputs (`target/debug`), where the workspace
/// members' `libperfring.so`, `.a` and `libperfring_inject.so` land.
pub fn profile_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// Builds workspace member `package` (a cdylib/staticlib the test binary cannot depend
/// on) with the test's profile, once per test binary; returns [`profile_dir`].
pub fn build_member(package: &str) -> std::path::PathBuf {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static BUILT: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let dir = profile_dir();
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if built
        .get_or_insert_with(HashSet::new)
        .insert(package.to_string())
    {
        let mut cmd = std::process::Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", package]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(st.success(), "cargo build -p {package} failed");
    }
    dir
}
#[cfg(feature = "profile")]
pub mod capture;
