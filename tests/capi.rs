//! The C API from C: a program compiled against `include/perfring.h` and linked to the
//! built `libperfring.so` (and `.a`) puts an execute breakpoint with period 100 on a
//! function it calls 10,000 times, and must see exactly 100 overflows through each
//! notifier, with every sample's ip and tid decoded through the C accessors.

mod util;

use std::process::Command;

const N_CALLS: u64 = 10_000;
const PERIOD: u64 = 100;

const PROG: &str = r#"
#include "perfring.h"
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

volatile long sink;
__attribute__((noinline)) void hot(long i) { sink += i; }

static atomic_long callbacks;
static atomic_long wrong_tid;
static pid_t me;

/* Signal context: atomics only. */
static void on_overflow(const perfring_overflow *o, void *user) {
    atomic_fetch_add(&callbacks, 1);
    if (o->tid != (uint32_t)me || o->ip != (uint64_t)(uintptr_t)hot || user != &me)
        atomic_fetch_add(&wrong_tid, 1);
}

struct check { long samples, bad; };

static void on_record(uint64_t token, const perfring_record *r, void *user) {
    struct check *c = user;
    (void)token;
    if (perfring_record_type(r) != PERF_RECORD_SAMPLE) return;
    uint64_t ip = 0; uint32_t tid = 0; size_t len = 0;
    if (perfring_sample_ip(r, &ip) != PERFRING_OK || perfring_sample_tid(r, &tid) != PERFRING_OK
        || perfring_record_bytes(r, &len) == NULL || len < 24) {
        c->bad++;
        return;
    }
    c->samples++;
    if (ip != (uint64_t)(uintptr_t)hot || tid != (uint32_t)me) c->bad++;
    /* TIME was not asked for: the accessor says so instead of returning garbage. */
    uint64_t t;
    if (perfring_sample_time(r, &t) != PERFRING_E_ABSENT) c->bad++;
}

#define CHECK(x) do { int rc_ = (x); if (rc_ < 0) { \
    fprintf(stderr, "%s = %d: %s\n", #x, rc_, perfring_last_error()); return 2; } } while (0)

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "poll";
    me = (pid_t)syscall(SYS_gettid);
    if (!strcmp(mode, "error")) {
        perfring_counter *k = NULL;
        int rc = perfring_counter_open("mem:no_such_function:x", NULL, &k);
        printf("code=%d null=%d msg=%s\n", rc, k == NULL, perfring_last_error());
        rc = perfring_counter_open(NULL, NULL, &k);
        printf("code=%d msg=%s\n", rc, perfring_last_error());
        return 0;
    }
    perfring_options o;
    CHECK(perfring_options_init(&o));
    o.period = 100;
    o.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
    if (!strcmp(mode, "sigtrap")) { o.flags |= PERFRING_OPEN_SIGTRAP; o.sig_data = 7; }
    perfring_counter *k;
    CHECK(perfring_counter_open("mem:hot:x", &o, &k));
    CHECK(perfring_counter_map_ring(k, 16));
    struct check c = {0, 0};
    perfring_accounting a;
    if (!strcmp(mode, "poll")) {
        perfring_poller *p;
        CHECK(perfring_poller_new(&p));
        CHECK(perfring_poller_add(p, 5, k));
        CHECK(perfring_poller_enable(p, 5));
        for (long i = 0; i < 10000; i++) {
            hot(i);
            if (i % 1000 == 999) CHECK(perfring_poller_wait(p, 0, on_record, &c));
        }
        CHECK(perfring_poller_disable(p, 5));
        while (perfring_poller_wait(p, 0, on_record, &c) > 0) {}
        CHECK(perfring_poller_accounting(p, 5, &a));
        atomic_store(&callbacks, c.samples);
        perfring_poller_free(p);
    } else {
        if (!strcmp(mode, "signal")) {
            int signo = 0;
            CHECK(perfring_counter_attach_signal(k, 0, 0, 0, 9, on_overflow, &me, &signo));
            if (signo < SIGRTMIN) return 3;
        } else {
            CHECK(perfring_counter_attach_sigtrap(k, on_overflow, &me));
        }
        CHECK(perfring_counter_enable(k));
        for (long i = 0; i < 10000; i++) hot(i);
        CHECK(perfring_counter_disable(k));
        uint64_t n = 0, notes = 0;
        CHECK(perfring_counter_drain(k, on_record, &c, &n));
        CHECK(perfring_counter_accounting(k, &a));
        CHECK(perfring_counter_notifications(k, &notes));
        if (notes != (uint64_t)atomic_load(&callbacks)) c.bad++;
        perfring_counter_close(k);
    }
    printf("callbacks=%ld samples=%ld ring_samples=%llu bad=%ld wrong=%ld lost=%llu\n",
           (long)atomic_load(&callbacks), c.samples, (unsigned long long)a.samples, c.bad,
           (long)atomic_load(&wrong_tid), (unsigned long long)a.lost);
    return 0;
}
"#;

/// Builds the C API and the test program against it (shared or static).
fn program(link_static: bool) -> std::path::PathBuf {
    use std::sync::OnceLock;
    static BUILT: [OnceLock<std::path::PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(link_static)]
        .get_or_init(|| build(link_static))
        .clone()
}

fn build(link_static: bool) -> std::path::PathBuf {
    let dir = util::build_member("perfring-capi");
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    let inc = format!("-I{include}");
    if link_static {
        let lib = dir.join("libperfring.a");
        util::compile_c(
            "capi_static",
            PROG,
            &[
                &inc,
                lib.to_str().unwrap(),
                "-lpthread",
                "-ldl",
                "-lm",
                "-lgcc_s",
            ],
        )
    } else {
        let l = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        util::compile_c("capi_shared", PROG, &[&inc, &l, "-lperfring", &rpath])
    }
}

fn run(link_static: bool, mode: &str) -> String {
    let out = Command::new(program(link_static))
        .arg(mode)
        .output()
        .expect("run the C program");
    assert!(
        out.status.success(),
        "{mode}: {:?}\n{}",
        out.status,
        util::stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Exactly N/P overflows, each seen once by the notifier (for poll: by the record
/// callback) and once as a decoded sample with the right ip and tid.
fn expect_exact(line: &str) {
    let n = N_CALLS / PERIOD;
    let want = format!("callbacks={n} samples={n} ring_samples={n} bad=0 wrong=0 lost=0");
    assert_eq!(line.trim(), want);
}

#[test]
fn poll_driver_gives_exactly_n_over_p_records_with_ip_and_tid() {
    expect_exact(&run(false, "poll"));
}

#[test]
fn thread_signal_calls_back_exactly_n_over_p_times_in_the_thread() {
    expect_exact(&run(false, "signal"));
}

#[test]
fn sigtrap_calls_back_exactly_n_over_p_times_in_the_thread() {
    expect_exact(&run(false, "sigtrap"));
}

#[test]
fn static_library_works_too() {
    expect_exact(&run(true, "sigtrap"));
}

#[test]
fn errors_are_codes_with_cause_and_fix() {
    let out = run(false, "error");
    let mut lines = out.lines();
    let bad_symbol = lines.next().unwrap();
    // PERFRING_E_NOT_FOUND, the handle left NULL, and the message names the fix.
    assert!(
        bad_symbol.starts_with("code=-5 null=1 msg="),
        "{bad_symbol}"
    );
    assert!(bad_symbol.contains("no_such_function"), "{bad_symbol}");
    assert!(bad_symbol.contains("Fix:"), "{bad_symbol}");
    let null_event = lines.next().unwrap();
    assert!(null_event.starts_with("code=-1 msg="), "{null_event}");
    assert!(null_event.contains("event is NULL"), "{null_event}");
}
