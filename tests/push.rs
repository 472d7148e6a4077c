//! `perfring::push` against local stores on 127.0.0.1 (tests/util/store.rs): HTTPS
//! with a throwaway CA, basic auth, bearer tokens and tenants; Pyroscope's push API,
//! `/ingest` and Parca's WriteRaw; the queue's retries and drops; and
//! `output::Intervals` cutting a live recording into profiles that add up.
#![cfg(feature = "push")]

#[path = "util/store.rs"]
mod store;
mod util;

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use perfring::output::{CutProfile, Intervals};
use perfring::profiler::{End, Flow, Profiler};
use perfring::push::{Class, Endpoint, Protocol, Pusher, Queue, QueueLimits, Secret};
use store::{Config, Fault, Store};

/// A small gzipped pprof with `n` samples of one location, made by hand.
fn pprof_bytes(n: i64) -> Vec<u8> {
    use prost::Message;
    let p = store::pprof::Profile {
        sample_type: vec![store::pprof::ValueType { r#type: 1, unit: 2 }],
        sample: vec![store::pprof::Sample {
            location_id: vec![],
            value: vec![n],
        }],
        string_table: vec!["".into(), "samples".into(), "count".into()],
        ..Default::default()
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec()).unwrap();
    gz.finish().unwrap()
}

fn cut(index: u64, samples: u64) -> CutProfile {
    let from = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + index * 10);
    CutProfile {
        pprof: pprof_bytes(samples as i64),
        from,
        until: from + Duration::from_secs(10),
        index,
        samples,
        lost: 0,
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = util::temp_path(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn https_with_a_private_ca_checks_basic_auth_and_tenant_and_carries_the_pprof_unchanged() {
    let dir = scratch("push-https");
    let mut config = Config::new(store::Protocol::Pyroscope);
    config.tls = true;
    config.basic = Some(("12345".into(), "glc_s3cret".into()));
    config.tenant = Some("team-a".into());
    let store = Store::start(config, &dir);
    let ca = store.ca_pem.clone().unwrap();
    let endpoint = |password: &str| {
        Endpoint::new(&store.url, Protocol::Pyroscope)
            .unwrap()
            .basic_auth("12345", Secret::new(password).unwrap())
            .tenant("team-a")
            .unwrap()
            .service_name("checkout")
            .unwrap()
            .label("env", "test")
            .unwrap()
            .header("X-Route", "blue")
            .unwrap()
    };
    let pusher = Pusher::new(endpoint("glc_s3cret").ca_file(&ca)).unwrap();
    // The check's empty push reaches the store, which refuses it as Pyroscope does
    // ("no profiles received"): that is a pass.
    pusher.check().unwrap();
    assert_eq!(store.seen.lock().unwrap().empty, 1);
    let bytes = pprof_bytes(42);
    let t = SystemTime::now();
    pusher.push(&bytes, t, t + Duration::from_secs(15)).unwrap();
    let got = store.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].profile.samples(), 42);
    assert_eq!(
        got[0].labels.get("__name__").map(String::as_str),
        Some("process_cpu")
    );
    assert_eq!(
        got[0].labels.get("service_name").map(String::as_str),
        Some("checkout")
    );
    assert_eq!(got[0].labels.get("env").map(String::as_str), Some("test"));
    let headers = store.seen.lock().unwrap().headers.last().cloned().unwrap();
    assert_eq!(headers.get("x-route").map(String::as_str), Some("blue"));
    assert_eq!(
        headers.get("x-scope-orgid").map(String::as_str),
        Some("team-a")
    );

    // Wrong credentials: refused as such, the store's message quoted, the password
    // (and its basic-auth form) nowhere.
    let wrong = Pusher::new(endpoint("hunter2-wrong").ca_file(&ca)).unwrap();
    let e = wrong.check().unwrap_err();
    assert_eq!((e.class(), e.status()), (Class::Auth, Some(401)));
    let text = format!("{e} {e:?} {wrong:?}");
    assert!(text.contains("invalid credentials"), "{text}");
    assert!(text.contains("PERFRING_PUSH_PASSWORD"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        !text.contains(&store::base64(b"12345:hunter2-wrong")),
        "{text}"
    );

    // Without the CA, the certificate does not verify, and the error says what to give.
    let untrusted = Pusher::new(endpoint("glc_s3cret")).unwrap();
    let e = untrusted.check().unwrap_err();
    assert_eq!(e.class(), Class::Tls, "{e}");
    assert!(e.to_string().contains("did not verify"), "{e}");
    assert!(e.to_string().contains("--push-ca"), "{e}");
    assert!(!e.retryable());
}

#[test]
fn parca_write_raw_over_grpc_web_with_a_bearer_token() {
    let dir = scratch("push-parca");
    let mut config = Config::new(store::Protocol::Parca);
    config.bearer = Some("tok-123".into());
    let store = Store::start(config, &dir);
    let endpoint = Endpoint::new(&store.url, Protocol::Parca)
        .unwrap()
        .service_name("svc")
        .unwrap()
        .cpu(false);
    let pusher = Pusher::new(endpoint.clone().bearer(Secret::new("tok-123").unwrap())).unwrap();
    pusher.check().unwrap();
    let t = SystemTime::now();
    pusher.push(&pprof_bytes(7), t, t).unwrap();
    let got = store.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].profile.samples(), 7);
    assert_eq!(
        got[0].labels.get("__name__").map(String::as_str),
        Some("perfring_samples")
    );
    assert_eq!(
        got[0].labels.get("service_name").map(String::as_str),
        Some("svc")
    );
    // A wrong token: gRPC's UNAUTHENTICATED in the trailers.
    let bad = Pusher::new(endpoint.bearer(Secret::new("tok-999").unwrap())).unwrap();
    let e = bad.push(&pprof_bytes(1), t, t).unwrap_err();
    assert_eq!(e.class(), Class::Auth, "{e}");
    assert!(e.to_string().contains("(16): invalid token"), "{e}");
    assert!(!format!("{e:?}").contains("tok-999"));
    // Nothing answers the protocol at another path.
    let wrong = Pusher::new(
        Endpoint::new(&format!("{}/prefix", store.url), Protocol::Parca)
            .unwrap()
            .bearer(Secret::new("tok-123").unwrap()),
    )
    .unwrap();
    assert_eq!(wrong.check().unwrap_err().class(), Class::Route);
}

#[test]
fn ingest_names_the_application_with_its_labels_and_the_span() {
    let dir = scratch("push-ingest");
    let store = Store::start(Config::new(store::Protocol::Ingest), &dir);
    let pusher = Pusher::new(
        Endpoint::new(&store.url, Protocol::PyroscopeIngest)
            .unwrap()
            .service_name("app")
            .unwrap()
            .label("host", "a")
            .unwrap(),
    )
    .unwrap();
    pusher.check().unwrap();
    let from = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    pusher
        .push(&pprof_bytes(3), from, from + Duration::from_secs(15))
        .unwrap();
    let got = store.received();
    assert_eq!(got.len(), 1);
    let q = &got[0].query;
    assert_eq!(q["name"], "app.cpu{host=a}");
    assert_eq!(
        (q["from"].as_str(), q["until"].as_str()),
        ("1700000000", "1700000015")
    );
    assert_eq!(q["format"], "pprof");
    assert_eq!(got[0].profile.samples(), 3);
    // Nothing listens: refused, and worth retrying.
    let closed =
        Pusher::new(Endpoint::new("http://127.0.0.1:1", Protocol::PyroscopeIngest).unwrap())
            .unwrap();
    let e = closed.check().unwrap_err();
    assert!(e.retryable() && e.to_string().contains("refused"), "{e}");
}

fn queue_limits() -> QueueLimits {
    QueueLimits {
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..QueueLimits::default()
    }
}

#[test]
fn the_queue_retries_what_may_pass_and_accounts_for_every_profile() {
    let dir = scratch("push-retry");
    let mut config = Config::new(store::Protocol::Pyroscope);
    // Request n: 503 for n % 3 == 1, a stall (past the client's timeout) for n % 7 == 5.
    config.fault = |n| match (n % 3, n % 7) {
        (_, 5) => Fault::Stall(Duration::from_millis(1500)),
        (1, _) => Fault::Unavailable,
        _ => Fault::None,
    };
    let store = Store::start(config, &dir);
    let pusher = Pusher::new(
        Endpoint::new(&store.url, Protocol::Pyroscope)
            .unwrap()
            .timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let limits = QueueLimits {
        profiles: 10,
        ..queue_limits()
    };
    let mut queue = Queue::spawn(pusher, limits).unwrap();
    let sender = queue.sender();
    for i in 0..10 {
        sender.send(cut(i, i + 1));
    }
    let stats = queue.finish(Duration::from_secs(60));
    assert_eq!(stats.profiles, 10);
    assert_eq!(stats.pushed, 10, "{stats:?}");
    assert_eq!(stats.pushed_samples, (1..=10).sum::<u64>());
    assert_eq!(stats.dropped(), 0);
    assert!(
        stats.failures > 0 && stats.attempts == 10 + stats.failures,
        "{stats:?}"
    );
    let seen = store.seen.lock().unwrap();
    assert!(seen.unavailable > 0 && seen.stalled > 0, "{seen:?}");
    // Each profile arrived once, in order, with its own id.
    let samples: Vec<u64> = seen.received.iter().map(|r| r.profile.samples()).collect();
    assert_eq!(samples, (1..=10).collect::<Vec<_>>());
    let mut ids: Vec<_> = seen
        .received
        .iter()
        .map(|r| r.id.clone().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 10);
    assert!(queue.last_error().unwrap().1.contains("503"));
}

#[test]
fn a_stalled_store_makes_the_queue_drop_the_oldest_and_say_so() {
    let dir = scratch("push-stall");
    let mut config = Config::new(store::Protocol::Pyroscope);
    config.fault = |_| Fault::Stall(Duration::from_secs(3));
    let store = Store::start(config, &dir);
    let pusher = Pusher::new(
        Endpoint::new(&store.url, Protocol::Pyroscope)
            .unwrap()
            .timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let limits = QueueLimits {
        profiles: 2,
        attempts: 2,
        ..queue_limits()
    };
    let mut queue = Queue::spawn(pusher, limits).unwrap();
    let sender = queue.sender();
    for i in 0..6 {
        sender.send(cut(i, 10));
    }
    // Never more than two wait, whatever the pushing thread is doing.
    assert!(queue.stats().waiting <= 2);
    let stats = queue.finish(Duration::from_millis(300));
    assert_eq!(stats.pushed, 0);
    assert_eq!(stats.profiles, 6);
    assert_eq!(stats.dropped(), 6, "{stats:?}");
    assert_eq!(stats.dropped_samples, 60);
    assert!(stats.dropped_full >= 3, "{stats:?}");
    assert!(store.received().is_empty());
}

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

#[test]
fn intervals_cut_a_live_recording_into_profiles_whose_samples_add_up() {
    let prog = util::compile_c("bursts", BURSTS_C, &[]);
    // 6 bursts of 1000 calls, 400 ms apart; every 10th call sampled: 600 samples
    // over more than 2 s, cut every 300 ms of the samples' time.
    let (tx, rx) = mpsc::channel::<(CutProfile, Instant)>();
    let out = Intervals::every(Duration::from_millis(300), move |p| {
        let _ = tx.send((p, Instant::now()));
    });
    let handle = out.handle();
    let target = perfring::profiler::command(&[
        prog.clone().into(),
        "6".into(),
        "1000".into(),
        "400".into(),
    ])
    .unwrap();
    let mut profiler = Profiler::builder(target)
        .event("mem:target:x")
        .rate(perfring::profiler::Rate::Period(10))
        .exact_periods(true)
        .progress_every(Duration::from_millis(50))
        .forget_exited(true)
        .output(out)
        .start()
        .unwrap();
    let mut profiles: Vec<CutProfile> = Vec::new();
    while profiler.target_ended().unwrap().is_none() {
        profiler
            .poll(Some(Duration::from_millis(50)), |_| Flow::Continue)
            .unwrap();
        profiles.extend(rx.try_iter().map(|(p, _)| p));
    }
    // Profiles are cut while the target runs (the drain's progress marks), not only
    // at the end.
    let during = profiles.len();
    let report = profiler.finish(End::TargetExited).unwrap();
    assert_eq!(report.samples, 600);
    assert_eq!(report.lost(), 0);
    profiles.extend(rx.try_iter().map(|(p, _)| p));
    assert!(during >= 1, "no profile was cut while the target ran");
    let stats = handle.stats();
    assert_eq!(stats.samples, 600, "{stats:?}");
    assert_eq!(stats.cut as usize, profiles.len());
    assert!(stats.cut >= 3, "{stats:?}");
    assert_eq!(profiles.iter().map(|p| p.samples).sum::<u64>(), 600);
    // The profiles are pprof as go tool pprof reads it: all of the first one's
    // samples are in target.
    let dir = scratch("push-intervals");
    std::fs::write(dir.join("first.pb.gz"), &profiles[0].pprof).unwrap();
    assert_eq!(
        util::capture::pprof_top(&dir, "first.pb.gz"),
        [("target".to_string(), profiles[0].samples)]
    );
    // Each profile holds the samples it says, in order of their intervals,
    // contiguous in wall time.
    let mut prev: Option<CutProfile> = None;
    for p in profiles {
        let decoded = store::pprof::Profile::decode_gz(&p.pprof);
        assert_eq!(decoded.samples(), p.samples);
        assert_eq!(decoded.by_leaf().keys().collect::<Vec<_>>(), ["target"]);
        let span = p.until.duration_since(p.from).unwrap();
        assert!(span <= Duration::from_millis(300), "{p:?}");
        assert_eq!(
            decoded.time_nanos as u128,
            p.from
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        assert_eq!(decoded.duration_nanos as u128, span.as_nanos());
        if let Some(q) = &prev {
            assert!(p.index > q.index && p.from >= q.until, "{q:?} then {p:?}");
        }
        prev = Some(p);
    }
}
