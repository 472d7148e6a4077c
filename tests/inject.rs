//! `perfring inject` and `libperfring_inject.so` on unmodified C programs (and Python):
//! exact record counts per thread from a breakpoint, the program's own signal handlers
//! and exit status untouched, hooks called exactly once per overflow.
#![cfg(feature = "profile")]

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// 8 threads created after start, each calling `hot` 10,000 times and printing its
/// tid; with `handlers`, its own SIGTRAP and SIGUSR1 handlers, which it then tests;
/// with `clone`, one more thread made by a raw clone(2), without glibc; with `exec`,
/// then execs itself (plain) with `execv`; with `_exit`, ends with `_exit(7)`.
const PROG: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long sink;
__attribute__((noinline)) void hot(long i) { sink += i; }

static volatile sig_atomic_t traps, usr1s;
static void on_trap(int s) { (void)s; traps++; }
static void on_usr1(int s, siginfo_t *i, void *c) { (void)s; (void)c; if (i->si_signo == SIGUSR1) usr1s++; }

static void *work(void *arg) {
    (void)arg;
    printf("tid %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    for (long i = 0; i < 10000; i++) hot(i);
    return NULL;
}

static volatile int raw_tid;
static int raw_work(void *arg) {
    (void)arg;
    raw_tid = (int)syscall(SYS_gettid);
    for (long i = 0; i < 10000; i++) hot(i);
    return 0;
}

int main(int argc, char **argv) {
    int handlers = argc > 1 && !strcmp(argv[1], "handlers");
    int raw = argc > 1 && !strcmp(argv[1], "clone");
    if (handlers) {
        signal(SIGTRAP, on_trap);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_usr1;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGUSR1, &sa, NULL);
    }
    if (raw) {
        /* A thread glibc knows nothing about: its counter can only be inherited. */
        size_t size = 1 << 20;
        char *stack = malloc(size);
        int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD
                  | CLONE_SYSVSEM;
        if (clone(raw_work, stack + size, flags, NULL) < 0) { perror("clone"); return 3; }
        while (!raw_tid) usleep(1000);
        while (syscall(SYS_tgkill, getpid(), raw_tid, 0) == 0) usleep(1000);
        printf("tid %d\n", raw_tid);
        return 7;
    }
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    if (handlers) {
        raise(SIGTRAP);
        raise(SIGUSR1);
        raise(SIGTRAP);
        struct sigaction old;
        sigaction(SIGTRAP, NULL, &old);
        printf("traps=%d usr1=%d own=%d\n", (int)traps, (int)usr1s, old.sa_handler == on_trap);
    }
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "exec")) {
        char *again[] = { argv[0], "plain", NULL };
        execv("/proc/self/exe", again);
        perror("execv");
        return 3;
    }
    if (argc > 1 && !strcmp(argv[1], "_exit")) _exit(7);
    return 7;
}
"#;

/// A hook library that counts its calls (atomically: it runs in signal context) and
/// writes the count to `$HOOK_OUT` at unload.
const HOOK: &str = r#"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include "perfring.h"
static atomic_long calls, wrong;
void on_overflow(const perfring_overflow *o, void *user) {
    atomic_fetch_add(&calls, 1);
    if (o->tid == 0 || o->ip == 0 || user != NULL || o->fd != -1) atomic_fetch_add(&wrong, 1);
}
__attribute__((destructor)) static void report(void) {
    const char *p = getenv("HOOK_OUT");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) { fprintf(f, "calls=%ld wrong=%ld\n", (long)calls, (long)wrong); fclose(f); }
}
"#;

fn program() -> PathBuf {
    use std::sync::OnceLock;
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| util::compile_c("inject_prog", PROG, &["-lpthread"]))
        .clone()
}

fn hook_library() -> PathBuf {
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    util::compile_c(
        "libhook.so",
        HOOK,
        &["-shared", "-fPIC", &format!("-I{include}")],
    )
}

/// The preload library, built for this test run; `perfring` finds it beside itself.
fn injector() -> PathBuf {
    util::build_member("perfring-inject").join("libperfring_inject.so")
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("inject-{}-{name}", std::process::id()))
}

fn inject(args: &[&str], command: &[&str]) -> Output {
    injector();
    Command::new(util::perfring_bin())
        .arg("inject")
        .args(args)
        .arg("--")
        .args(command)
        .output()
        .expect("run perfring inject")
}

/// The JSON lines of a record file: overflow lines, and the summary line of each
/// process that wrote to it (a program's children are injected too) summed up. With
/// `exact`, each summary counts its process's lines (not so when a program execs:
/// the image before the exec writes lines with the same pid but no summary).
fn lines(path: &Path, exact: bool) -> (Vec<Value>, Value) {
    let text = std::fs::read_to_string(path).expect("the record file");
    let (mut records, mut summaries) = (Vec::new(), Vec::new());
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if v["type"] == "summary" {
            summaries.push(v);
        } else {
            records.push(v);
        }
    }
    assert!(!summaries.is_empty(), "no summary line");
    for s in summaries.iter().filter(|_| exact) {
        let of_pid = records.iter().filter(|r| r["pid"] == s["pid"]).count() as u64;
        assert_eq!(s["records"].as_u64(), Some(of_pid), "{s}");
        assert_eq!(s["overflows"].as_u64(), Some(of_pid), "{s}");
    }
    let sum = |k: &str| {
        summaries
            .iter()
            .map(|s| s[k].as_u64().unwrap())
            .sum::<u64>()
    };
    let summary = serde_json::json!({
        "overflows": sum("overflows"),
        "records": sum("records"),
        "dropped": sum("dropped"),
    });
    (records, summary)
}

/// Records per tid.
fn per_tid(records: &[Value]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for r in records {
        assert_eq!(r["type"], "overflow", "{r}");
        *m.entry(r["tid"].as_u64().unwrap()).or_insert(0) += 1;
    }
    m
}

/// The tids the program printed, each with the 100 records it must have.
fn printed_tids(out: &Output) -> BTreeMap<u64, u64> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("tid "))
        .map(|t| (t.parse().unwrap(), 100))
        .collect()
}

/// `inject -e mem:hot:x -c 100 --action record -o FILE [extra…] -- PROGRAM MODE`.
fn record_into(file: &Path, extra: &[&str], mode: &str) -> Output {
    let mut args = vec![
        "-e",
        "mem:hot:x",
        "-c",
        "100",
        "--action",
        "record",
        "-o",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    inject(&args, &[program().to_str().unwrap(), mode])
}

fn record_run(mode: &str) -> (Output, Vec<Value>, Value) {
    let file = tmp(&format!("{mode}.jsonl"));
    let out = record_into(&file, &[], mode);
    let (records, summary) = lines(&file, true);
    (out, records, summary)
}

#[test]
fn record_gives_exactly_100_per_thread_with_the_right_tids() {
    let (out, records, summary) = record_run("plain");
    // The program's exit status passes through.
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let want = printed_tids(&out);
    assert_eq!(want.len(), 8, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(per_tid(&records), want);
    assert_eq!(records.len(), 800);
    assert_eq!(summary["dropped"], 0);
    assert_eq!(summary["overflows"], 800);
    // Each record is a watch --json overflow line: at `hot`, with its pid.
    for r in &records {
        assert_eq!(r["sym"], "hot", "{r}");
        assert_eq!(r["event"], "mem:hot:x", "{r}");
        assert_eq!(r["period"], 100, "{r}");
        assert!(r["ip"].as_str().unwrap().starts_with("0x"), "{r}");
    }
    assert_callers_are_work(&records);
}

/// `(address, size)` of each function symbol of the test program, from `nm -S`.
fn program_symbols() -> BTreeMap<String, (u64, u64)> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(program())
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm: {}", util::stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, _, name] = f[..] else {
                return None;
            };
            let hex = |x: &str| u64::from_str_radix(x, 16).ok();
            Some((name.to_string(), (hex(addr)?, hex(size)?)))
        })
        .collect()
}

fn hex(v: &Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("not a hex string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Each record stopped at `hot`'s first instruction (the breakpoint), so its stack's
/// second frame (after `hot`'s own) is the return address into `work`, `hot`'s only
/// caller: `hot` has not pushed a frame yet, and the unwinder's first frame (CFI, from
/// the stack copy at `sp`) finds it where the call left it.
fn assert_callers_are_work(records: &[Value]) {
    let syms = program_symbols();
    let (hot, _) = syms["hot"];
    let (work, work_len) = syms["work"];
    for r in records {
        let base = hex(&r["ip"]) - hot; // the PIE's load address
        let stack = r["stack"]
            .as_array()
            .unwrap_or_else(|| panic!("no stack: {r}"));
        let frames: Vec<&Value> = stack.iter().filter(|f| f["inlined"] == false).collect();
        assert_eq!(frames[0]["ip"], r["ip"], "the first frame is the ip's: {r}");
        assert_eq!(frames[0]["sym"], "hot", "{r}");
        let first = &frames.get(1).unwrap_or_else(|| panic!("no caller: {r}"))["ip"];
        assert_eq!(frames[1]["sym"], "work", "{r}");
        let caller = hex(first) - base;
        assert!(
            (work..work + work_len).contains(&caller),
            "first frame {first} is not in work ({work:#x}+{work_len:#x}): {r}"
        );
    }
}

#[test]
fn the_programs_own_sigtrap_and_sigusr1_handlers_still_run() {
    let (out, records, _) = record_run("handlers");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Two raised SIGTRAPs reached its handler, the SIGUSR1 too, and sigaction reports
    // its own handler back.
    assert!(stdout.contains("traps=2 usr1=1 own=1"), "{stdout}");
    assert!(
        util::stderr(&out).contains("installs its own SIGTRAP handler"),
        "{}",
        util::stderr(&out)
    );
    assert_eq!(per_tid(&records), printed_tids(&out));
}

#[test]
fn a_thread_signal_instead_of_sigtrap_reaches_each_thread() {
    let file = tmp("signal.jsonl");
    let out = record_into(&file, &["--signal", "RTMIN+3"], "handlers");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    // SIGTRAP is not perfring's in this mode: the program's handler is simply its own.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("traps=2 usr1=1 own=1"), "{stdout}");
    let (records, summary) = lines(&file, true);
    // A real-time signal queues one per overflow (a standard one would merge, see
    // notify::signal), and each thread's counter signals that thread: exactly 100 each.
    assert_eq!(per_tid(&records), printed_tids(&out));
    assert_eq!(records.len(), 800);
    assert_eq!(summary["dropped"], 0);
    // The signal's context gives the walk its stack, as SIGTRAP's does.
    assert_callers_are_work(&records);
}

#[test]
fn a_raw_clone_thread_inherits_its_counter() {
    let (out, records, _) = record_run("clone");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let want = printed_tids(&out);
    assert_eq!(want.len(), 1);
    assert_eq!(per_tid(&records), want);
}

#[test]
fn hook_is_called_exactly_once_per_overflow_without_the_cli() {
    let hook = hook_library();
    let report = tmp("hook.txt");
    // LD_PRELOAD and PERFRING_* alone, as the README documents.
    let out = Command::new(program())
        .env("LD_PRELOAD", injector())
        .env("PERFRING_EVENT", "mem:hot:x")
        .env("PERFRING_PERIOD", "250")
        .env(
            "PERFRING_ACTION",
            format!("hook:{}:on_overflow", hook.display()),
        )
        .env("HOOK_OUT", &report)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let got = std::fs::read_to_string(&report).expect("the hook's report");
    // 8 threads × 10,000 calls / 250.
    assert_eq!(got.trim(), "calls=320 wrong=0");
}

#[test]
fn abort_at_n_aborts_the_program() {
    let out = inject(
        &["-e", "mem:hot:x", "-c", "100", "--action", "abort-at:150"],
        &[program().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(128 + libc::SIGABRT));
}

#[test]
fn usage_errors_name_the_fix() {
    let out = inject(&["-e", "mem:hot:x", "--action", "record"], &["true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("-c N"),
        "{}",
        util::stderr(&out)
    );
    let out = inject(
        &["-e", "mem:hot:x", "-c", "1", "--action", "recrd"],
        &["true"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        util::stderr(&out).contains("Fix:"),
        "{}",
        util::stderr(&out)
    );
}

#[test]
fn a_bad_event_stops_the_program_with_the_fix() {
    let out = inject(
        &[
            "-e",
            "mem:no_such_fn:x",
            "-c",
            "100",
            "--action",
            "abort-at:1",
        ],
        &[program().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = util::stderr(&out);
    assert!(err.contains("no_such_fn") && err.contains("Fix:"), "{err}");
}

#[test]
fn python_runs_unharmed_and_is_recorded() {
    if Command::new("python3").arg("-V").output().is_err() {
        panic!("python3 is needed for this test (apt-get install python3)");
    }
    let file = tmp("python.jsonl");
    let out = inject(
        &[
            "-e",
            "cpu-clock:u",
            "-c",
            "500000",
            "--action",
            "record",
            "-o",
            file.to_str().unwrap(),
        ],
        &[
            "python3",
            "-c",
            "import threading\n\
             r = []\n\
             def f(): r.append(sum(i * i for i in range(1000000)))\n\
             t = threading.Thread(target=f); t.start(); f(); t.join(); print(r)",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "[333332833333500000, 333332833333500000]\n"
    );
    // python3 may be a launcher that execs the interpreter: not exact.
    let (records, summary) = lines(&file, false);
    assert!(
        summary["records"].as_u64().unwrap() > 0,
        "no records: {summary}"
    );
    assert_eq!(summary["dropped"], 0);
    assert!(records.iter().all(|r| r["event"] == "cpu-clock:u"));
}

/// `perf script` of an injector's perf.data: (tid, the first three frames' symbols)
/// per sample.
fn perf_script_samples(dir: &Path, file: &str) -> Vec<(u64, Vec<String>)> {
    let out = util::capture::perf(dir, &["script", "-i", file, "-F", "tid,ip,sym"]);
    let err = util::stderr(&out);
    assert!(out.status.success(), "perf script failed: {err}");
    assert!(!err.contains("WARNING"), "perf script warned: {err}");
    let text = String::from_utf8_lossy(&out.stdout);
    // A sample is a line with its tid, then one line per frame (address, symbol).
    let mut samples: Vec<(u64, Vec<String>)> = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = l.split_whitespace().collect();
        match (l.starts_with('\t'), &f[..]) {
            (false, [tid]) => samples.push((tid.parse().expect("a tid"), Vec::new())),
            (true, [_addr, sym, ..]) => samples
                .last_mut()
                .expect("a frame after a sample line")
                .1
                .push(sym.to_string()),
            _ => panic!("unexpected perf script line {l:?} in:\n{text}"),
        }
    }
    samples
}

#[test]
fn record_writes_perf_data_that_perf_script_reads_exactly() {
    let dir = util::capture::scratch("inject-perf");
    let file = dir.join("inject.data");
    let out = record_into(&file, &[], "plain");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let samples = perf_script_samples(&dir, "inject.data");
    let mut per_tid = BTreeMap::new();
    for (tid, frames) in &samples {
        *per_tid.entry(*tid).or_insert(0) += 1;
        // perf symbolizes the ip and the frame-pointer stack: hot, called by work.
        assert_eq!(
            frames.get(..2),
            Some(&["hot".to_string(), "work".to_string()][..]),
            "{frames:?}"
        );
    }
    assert_eq!(
        per_tid,
        printed_tids(&out),
        "exactly 100 samples per thread"
    );
    // perf report attributes every sample to hot.
    let rep = util::capture::perf(
        &dir,
        &[
            "report",
            "-i",
            "inject.data",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-g",
            "none",
        ],
    );
    assert!(rep.status.success(), "{}", util::stderr(&rep));
    let text = String::from_utf8_lossy(&rep.stdout);
    assert!(text.contains("100.00%") && text.contains("hot"), "{text}");
    assert!(
        text.contains("of event 'mem:hot:x'") && text.contains("Samples: 800"),
        "{text}"
    );
}

#[test]
fn an_exec_writes_out_what_was_buffered_before_it() {
    // The program execs itself once its threads are done: the records of the first
    // image must reach the file although its process image is replaced (no exit()).
    let file = tmp("exec.jsonl");
    let out = record_into(&file, &[], "exec");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let (records, summary) = lines(&file, false);
    // 8 threads before the exec, 8 after: 100 records each, by tid.
    let want = printed_tids(&out);
    assert_eq!(want.len(), 16, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(per_tid(&records), want);
    // Only the image after the exec ends with a summary; it counts its own 800.
    assert_eq!(summary["overflows"], 800, "{summary}");
}

#[test]
fn underscore_exit_still_writes_the_records_and_the_summary() {
    let (out, records, summary) = record_run("_exit");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    assert_eq!(per_tid(&records), printed_tids(&out));
    assert_eq!(summary["overflows"], 800, "{summary}");
}

#[test]
fn an_exec_goes_on_in_the_same_perf_data() {
    // Both images of one process (before and after its execv) write one perf.data,
    // as `perf record` would: 16 threads, 100 samples each, all at `hot` in `work`
    // (symbolized against each image's own mappings: the exec's COMM says so).
    let dir = util::capture::scratch("inject-perf-exec");
    let file = dir.join("exec.data");
    let out = record_into(&file, &[], "exec");
    assert_eq!(out.status.code(), Some(7), "{}", util::stderr(&out));
    let samples = perf_script_samples(&dir, "exec.data");
    let mut per_tid = BTreeMap::new();
    for (tid, frames) in &samples {
        *per_tid.entry(*tid).or_insert(0) += 1;
        assert_eq!(
            frames.get(..2),
            Some(&["hot".to_string(), "work".to_string()][..]),
            "{frames:?}"
        );
    }
    let want = printed_tids(&out);
    assert_eq!(want.len(), 16);
    assert_eq!(per_tid, want);
    // No other file: it was one process all along.
    let others: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("exec.data."))
        .collect();
    assert!(others.is_empty(), "{others:?}");
}

#[test]
fn python_to_perf_data_is_symbolized_in_the_interpreter() {
    let dir = util::capture::scratch("inject-perf-python");
    let file = dir.join("python.data");
    let out = inject(
        &[
            "-e",
            "cpu-clock:u",
            "-F",
            "499",
            "--action",
            "record",
            "-o",
            file.to_str().unwrap(),
        ],
        &["python3", "-c", "print(sum(i * i for i in range(3000000)))"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", util::stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "8999995500000500000\n"
    );
    // Whatever launcher python3 is (a pyenv shim execs the interpreter), the file
    // holds the interpreter's samples, each in a python object.
    let rep = util::capture::perf(
        &dir,
        &["script", "-i", "python.data", "-F", "comm,ip,dso", "-G"],
    );
    assert!(rep.status.success(), "{}", util::stderr(&rep));
    let text = String::from_utf8_lossy(&rep.stdout);
    let in_python = text
        .lines()
        .filter(|l| l.trim_start().starts_with("python") && l.contains("python"))
        .filter(|l| {
            l.split_once('(')
                .is_some_and(|(_, dso)| dso.contains("python"))
        })
        .count();
    assert!(in_python > 10, "few samples in python's code:\n{text}");
}
