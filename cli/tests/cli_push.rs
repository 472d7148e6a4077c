//! `perfring record --push URL [--every D]` against local stores on 127.0.0.1
//! (tests/util/store.rs): every sample in exactly one pushed profile, over HTTPS with
//! a private CA, basic auth and a tenant, or to Parca and `/ingest`; a bad store fails
//! before the target starts and never shows a credential; a store that fails and
//! stalls loses nothing unreported while the agent's memory stays flat.

#[path = "../../tests/util/store.rs"]
mod store;
#[path = "../../tests/util/mod.rs"]
mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use store::{Config, Fault, Store};

/// `bursts N CALLS GAP_MS`: N bursts of CALLS calls to `target()`, GAP_MS apart.
const BURSTS_C: &str = r#"
#include <stdlib.h>
#include <unistd.h>
volatile long counter;
void __attribute__((noinline)) target(void) { counter++; }
int main(int argc, char **argv) {
    int n = atoi(argv[1]), calls = atoi(argv[2]), gap = atoi(argv[3]);
    for (int b = 0; b < n; b++) {
        for (int i = 0; i < calls; i++) target();
        usleep(gap * 1000);
    }
    return 0;
}
"#;

/// A busy program: `work()` calls two leaves forever; prints `ready` first.
const BUSY_C: &str = r#"
#include <stdio.h>
volatile unsigned long sink;
void __attribute__((noinline)) leaf_a(void) { for (int i = 0; i < 1000; i++) sink += i; }
void __attribute__((noinline)) leaf_b(void) { for (int i = 0; i < 3000; i++) sink ^= i; }
void __attribute__((noinline)) work(void) { leaf_a(); leaf_b(); }
int main(void) {
    printf("ready\n");
    fflush(stdout);
    for (;;) work();
}
"#;

fn scratch(name: &str) -> PathBuf {
    let d = util::temp_path(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `perfring record ARGS` with `env`, its output.
fn record(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    record_as(false, args, env)
}

/// As [`record`], as the unprivileged user 65534 if `nobody` (and this runs as root),
/// as a user at perf_event_paranoid=2 would.
fn record_as(nobody: bool, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if nobody && root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_perfring"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_perfring"))
    };
    cmd.arg("record").args(args);
    cmd.env_remove("PERFRING_PUSH_PASSWORD")
        .env_remove("PERFRING_PUSH_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run perfring")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The numbers of the push summary line: `K profiles cut (S samples, L late, E empty
/// intervals); P pushed (PS samples) …; D dropped (DS samples: …)`.
#[derive(Debug)]
struct Summary {
    cut: u64,
    cut_samples: u64,
    late: u64,
    pushed: u64,
    pushed_samples: u64,
    dropped: u64,
    dropped_samples: u64,
}

fn summary(stderr: &str) -> Summary {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("perfring: push: "))
        .unwrap_or_else(|| panic!("no push summary in:\n{stderr}"));
    let num = |after: &str| -> u64 {
        let i = line
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} in {line}"));
        let head = &line[..i];
        let digits: String = head
            .chars()
            .rev()
            .skip_while(|c| *c == ' ' || *c == '(')
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    let inner = |key: &str| -> u64 {
        // "(800 samples, 0 late" and "(800 samples) to", "(0 samples: ..."
        let i = line.find(key).unwrap();
        line[i + key.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    Summary {
        cut: num(" profiles cut"),
        cut_samples: inner("cut ("),
        late: num(" late"),
        pushed: num(" pushed"),
        pushed_samples: inner("pushed ("),
        dropped: num(" dropped"),
        dropped_samples: inner("dropped ("),
    }
}

/// The drained sample count of `record`'s own summary (`N samples, …`).
fn drained(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(" samples, ") && l.contains(" records ("))
        .unwrap_or_else(|| panic!("no record summary in:\n{stderr}"));
    line.trim_start_matches("perfring: ")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Profiles received, in order, are of distinct, ordered, non-overlapping spans.
fn check_spans(received: &[store::Received]) {
    for w in received.windows(2) {
        let (a, b) = (&w[0].profile, &w[1].profile);
        assert!(
            a.time_nanos + a.duration_nanos <= b.time_nanos,
            "profiles overlap: {}+{} then {}",
            a.time_nanos,
            a.duration_nanos,
            b.time_nanos
        );
    }
}

#[test]
fn every_breakpoint_sample_is_in_exactly_one_profile_pushed_over_https() {
    let dir = scratch("cli-push-https");
    let mut config = Config::new(store::Protocol::Pyroscope);
    config.tls = true;
    config.basic = Some(("12345".into(), "glc_s3cret".into()));
    config.tenant = Some("team-a".into());
    let store = Store::start(config, &dir);
    let ca = store.ca_pem.clone().unwrap();
    let prog = util::compile_c("bursts", BURSTS_C, &[]);
    // 8 bursts of 1000 calls, 400 ms apart, every 10th sampled: exactly 800 samples
    // over more than 2.8 s, so in at least three 1 s intervals.
    let out = record(
        &[
            "-e",
            "mem:target:x",
            "-c",
            "10",
            "--exact-periods",
            "--push",
            &store.url,
            "--push-ca",
            ca.to_str().unwrap(),
            "--push-user",
            "12345",
            "--push-tenant",
            "team-a",
            "--push-label",
            "env=test",
            "--every",
            "1s",
            "--",
            prog.to_str().unwrap(),
            "8",
            "1000",
            "400",
        ],
        &[("PERFRING_PUSH_PASSWORD", "glc_s3cret")],
    );
    let err = util::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!text(&out).contains("glc_s3cret"), "{err}");
    assert_eq!(drained(&err), 800, "{err}");
    let s = summary(&err);
    assert_eq!(
        (
            s.cut_samples,
            s.pushed_samples,
            s.dropped,
            s.dropped_samples
        ),
        (800, 800, 0, 0),
        "{err}"
    );
    assert_eq!(s.cut, s.pushed, "{err}");
    let received = store.received();
    assert_eq!(received.len() as u64, s.pushed, "{err}");
    assert!(received.len() >= 3, "{} profiles: {err}", received.len());
    assert_eq!(
        received.iter().map(|r| r.profile.samples()).sum::<u64>(),
        800
    );
    for r in &received {
        let want: BTreeMap<String, String> = [
            ("__name__", "perfring_samples"),
            ("service_name", "bursts"),
            ("env", "test"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(r.labels, want);
        assert_eq!(
            r.profile.by_leaf().keys().collect::<Vec<_>>(),
            ["target"],
            "{:?}",
            r.profile.by_leaf()
        );
    }
    check_spans(&received);
    // The store checked the tenant and the credentials on every request, and the
    // check before the target started was one of them.
    let seen = store.seen.lock().unwrap();
    assert_eq!((seen.refused_auth, seen.empty), (0, 1));
    assert!(seen
        .headers
        .iter()
        .all(|h| h.get("x-scope-orgid").map(String::as_str) == Some("team-a")));
    eprintln!("{} profiles, late: {}", received.len(), s.late);
}

#[test]
fn parca_with_a_token_file_and_ingest_each_get_every_sample_once() {
    let dir = scratch("cli-push-parca");
    let prog = util::compile_c("bursts", BURSTS_C, &[]);
    let args = |url: &str| -> Vec<String> {
        [
            "-e",
            "mem:target:x:u",
            "-c",
            "10",
            "--exact-periods",
            "--push",
            url,
            "--every",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let cmd = [prog.to_str().unwrap(), "4", "1000", "400"];

    let mut config = Config::new(store::Protocol::Parca);
    config.bearer = Some("tok-5ecret".into());
    let parca = Store::start(config, &dir);
    let token = dir.join("token");
    std::fs::write(&token, "tok-5ecret\n").unwrap();
    let mut a = args(&parca.url);
    a.extend(["--push-protocol", "parca", "--push-token-file"].map(String::from));
    a.push(token.to_str().unwrap().to_string());
    a.push("--".into());
    a.extend(cmd.map(String::from));
    // As root, then as an unprivileged user (perf_event_paranoid 2 lets a user
    // sample its own programs' user space; the token file is readable to it).
    for nobody in [false, true] {
        let before = parca.received().len();
        let out = record_as(
            nobody,
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
            &[],
        );
        let err = util::stderr(&out);
        assert!(out.status.success(), "nobody={nobody}: {err}");
        assert!(!text(&out).contains("tok-5ecret"));
        let s = summary(&err);
        assert_eq!((s.pushed_samples, s.dropped), (400, 0), "{err}");
        let received = parca.received().split_off(before);
        assert_eq!(received.len() as u64, s.pushed);
        assert_eq!(
            received.iter().map(|r| r.profile.samples()).sum::<u64>(),
            400
        );
        // Breakpoint hits are not CPU time: not filed as Parca's CPU profiles.
        assert_eq!(received[0].labels["__name__"], "perfring_samples");
        check_spans(&received);
    }

    // Without --every: one profile of the whole run, pushed at the end, and with -o
    // written too.
    let ingest = Store::start(Config::new(store::Protocol::Ingest), &dir);
    let file = dir.join("copy.pb.gz");
    let mut a = args(&ingest.url);
    a.truncate(a.len() - 2);
    a.extend(
        [
            "--push-protocol",
            "pyroscope-ingest",
            "--push-service",
            "svc",
            "-o",
            file.to_str().unwrap(),
            "--",
        ]
        .map(String::from),
    );
    a.extend(cmd.map(String::from));
    let out = record(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let err = util::stderr(&out);
    assert!(out.status.success(), "{err}");
    let s = summary(&err);
    assert_eq!(
        (s.cut, s.pushed, s.pushed_samples, s.dropped),
        (1, 1, 400, 0),
        "{err}"
    );
    let received = ingest.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].profile.samples(), 400);
    assert_eq!(received[0].query["name"], "svc.samples");
    let (from, until): (u64, u64) = (
        received[0].query["from"].parse().unwrap(),
        received[0].query["until"].parse().unwrap(),
    );
    assert!(from < until, "{:?}", received[0].query);
    let copy = store::pprof::Profile::decode_gz(&std::fs::read(&file).unwrap());
    assert_eq!(copy.samples(), 400);
}

/// Runs `record` with `args` on a command that would create a file; asserts it failed
/// with `code` before the command ran, saying `says`, and never showing `secret`.
fn fails_before_the_target(
    args: &[&str],
    env: &[(&str, &str)],
    code: i32,
    says: &[&str],
    secret: &str,
) {
    let marker = util::temp_path("never-ran");
    let mut all: Vec<&str> = vec!["-e", "cpu-clock"];
    all.extend_from_slice(args);
    let m = marker.to_str().unwrap().to_string();
    all.extend_from_slice(&["--", "touch", &m]);
    let out = record(&all, env);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {t}");
    assert!(!marker.exists(), "{args:?}: the target ran: {t}");
    for s in says {
        assert!(t.contains(s), "{args:?}: {s:?} not in: {t}");
    }
    if !secret.is_empty() {
        assert!(!t.contains(secret), "{args:?}: the credential shows: {t}");
        assert!(!t.contains(&store::base64(secret.as_bytes())), "{t}");
    }
}

#[test]
fn a_bad_store_fails_before_the_target_starts_and_never_prints_a_credential() {
    let dir = scratch("cli-push-bad");
    let mut config = Config::new(store::Protocol::Pyroscope);
    config.tls = true;
    config.basic = Some(("12345".into(), "right-pw".into()));
    let tls = Store::start(config, &dir);
    let ca = tls.ca_pem.clone().unwrap();
    let ca = ca.to_str().unwrap();
    let mut config = Config::new(store::Protocol::Parca);
    config.bearer = Some("good-token".into());
    let parca = Store::start(config, &dir);

    // A URL that is not one, or that carries a password: a usage error (2).
    fails_before_the_target(&["--push", "ftp://x"], &[], 2, &["http://"], "");
    fails_before_the_target(
        &["--push", "http://me:pw-in-url-77@127.0.0.1:1"],
        &[],
        2,
        &["credentials", "PERFRING_PUSH_PASSWORD"],
        "pw-in-url-77",
    );
    // Nothing listens there.
    fails_before_the_target(
        &["--push", "http://127.0.0.1:1"],
        &[],
        1,
        &["refused", "port"],
        "",
    );
    // --push with --format perf: a conflict, not a silent override.
    fails_before_the_target(
        &["--push", &parca.url, "--format", "perf"],
        &[],
        2,
        &["--format perf"],
        "",
    );
    // A credential on the command line is refused without being repeated.
    fails_before_the_target(
        &["--push", &tls.url, "--push-password", "argv-secret-99"],
        &[],
        2,
        &["process list", "PERFRING_PUSH_PASSWORD"],
        "argv-secret-99",
    );
    // A certificate that does not verify: the CA option is named.
    fails_before_the_target(
        &["--push", &tls.url, "--push-user", "12345"],
        &[("PERFRING_PUSH_PASSWORD", "right-pw")],
        1,
        &["did not verify", "--push-ca"],
        "right-pw",
    );
    // Wrong credentials: the store's answer, not the password.
    fails_before_the_target(
        &["--push", &tls.url, "--push-ca", ca, "--push-user", "12345"],
        &[("PERFRING_PUSH_PASSWORD", "wrong-pw-4242")],
        1,
        &["401", "invalid credentials"],
        "wrong-pw-4242",
    );
    fails_before_the_target(
        &["--push", &parca.url, "--push-protocol", "parca"],
        &[("PERFRING_PUSH_TOKEN", "bad-token-4343")],
        1,
        &["(16): invalid token"],
        "bad-token-4343",
    );
    // The wrong protocol for the store.
    fails_before_the_target(
        &["--push", &parca.url],
        &[],
        1,
        &["not the push API", "--push-protocol"],
        "",
    );
}

/// RSS of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// The soak's length: 60 s in CI; `PERFRING_PUSH_SOAK_SECONDS=600` for the long run.
fn soak_seconds() -> u64 {
    std::env::var("PERFRING_PUSH_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

#[test]
fn a_failing_store_loses_nothing_unreported_and_the_agent_memory_stays_flat() {
    let secs = soak_seconds();
    let dir = scratch("cli-push-soak");
    let mut config = Config::new(store::Protocol::Pyroscope);
    // Of every 10 requests (after the check): 3 answered 503, 1 stalled past the
    // client's timeout (not recorded), so 30 % and 10 %.
    config.fault = |n| match n % 10 {
        _ if n == 0 => Fault::None,
        3 | 6 | 9 => Fault::Unavailable,
        7 => Fault::Stall(Duration::from_secs(3)),
        _ => Fault::None,
    };
    let store = Store::start(config, &dir);
    let busy = util::compile_c("busy", BUSY_C, &[]);
    let mut target = Command::new(&busy).stdout(Stdio::piped()).spawn().unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(target.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    let log = dir.join("agent.log");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .args(["record", "-e", "cpu-clock", "-F", "999", "-g", "-p"])
        .arg(target.id().to_string())
        .args([
            "--push",
            &store.url,
            "--every",
            "5s",
            "--push-timeout",
            "1s",
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let sleep_until = |t: Duration| {
        if let Some(d) = t.checked_sub(start.elapsed()) {
            std::thread::sleep(d);
        }
    };
    // RSS every twentieth of the run (and at 60 s for a long one); the first quarter's
    // is the baseline.
    let mut samples = Vec::new();
    let mut rss_quarter = 0;
    let mut points: Vec<u64> = (1..=20).map(|k| secs * 1000 * k / 20).collect();
    points.push(60_000);
    points.sort_unstable();
    points.dedup();
    for at in points.into_iter().filter(|&ms| ms <= secs * 1000) {
        let at =
            Duration::from_millis(at).min(Duration::from_secs(secs) - Duration::from_millis(200));
        sleep_until(at);
        let rss = rss_kib(agent.id());
        samples.push((at.as_secs(), rss));
        if at <= Duration::from_secs(secs / 4) {
            rss_quarter = rss;
        }
    }
    let rss_end = samples.last().unwrap().1;
    // SAFETY: a plain kill(2) of the child this test started.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let status = agent.wait().unwrap();
    let _ = target.kill();
    let _ = target.wait();
    let err = std::fs::read_to_string(&log).unwrap();
    eprintln!("RSS (s, KiB): {samples:?}\n{err}");
    assert!(status.success(), "{status}: {err}");
    // Records the writer's queue dropped would be samples drained but never cut; the
    // rings' losses (reported by the kernel, in the summary) are samples never drained.
    assert!(err.contains(" in the rings, 0 in the queue"), "{err}");
    let s = summary(&err);
    let drained = drained(&err);
    // Every sample drained is in a profile cut, and every profile cut was pushed or
    // is counted dropped, with its samples.
    assert_eq!(s.cut_samples, drained, "{s:?}\n{err}");
    assert_eq!(s.pushed_samples + s.dropped_samples, drained, "{s:?}");
    let received = store.received();
    assert_eq!(received.len() as u64, s.pushed);
    assert_eq!(
        received.iter().map(|r| r.profile.samples()).sum::<u64>(),
        s.pushed_samples
    );
    assert!(s.cut >= secs / 5 - 1, "{s:?}");
    check_spans(&received);
    // The faults happened, and were reported as they did.
    let seen = store.seen.lock().unwrap();
    assert!(seen.unavailable > 0 && seen.stalled > 0, "{seen:?}");
    assert!(err.contains("perfring: push failed"), "{err}");
    drop(seen);
    // Memory: flat from the first quarter to the end.
    assert!(
        rss_end * 100 <= rss_quarter * 110,
        "RSS grew from {rss_quarter} KiB to {rss_end} KiB: {samples:?}"
    );
}
