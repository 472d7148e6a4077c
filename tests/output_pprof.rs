//! pprof written by `perfring::output::Pprof`, read back by the real `go tool pprof`,
//! and checked against `perf report` on the same recording.
#![cfg(feature = "profile")]

mod util;

use std::collections::BTreeMap;
use std::path::Path;

use perfring::output::Output;
use perfring::output::{PerfData, Pprof};
use util::capture::{self, pprof, Spec};

/// `go tool pprof -top`: flat (self) sample count per function; the profile's main
/// mapping is the program and its default sample type `samples`.
fn pprof_top(dir: &Path, file: &str) -> BTreeMap<String, u64> {
    let out = pprof(dir, &["-top", file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("File: ld-"),
        "mapping[0] is the program:\n{text}"
    );
    assert!(
        text.contains("Type: samples"),
        "the default sample type is samples:\n{text}"
    );
    capture::pprof_top(dir, file).into_iter().collect()
}

/// `perf report -n --sort sym`: self sample count per symbol.
fn perf_report(dir: &Path, file: &str) -> BTreeMap<String, u64> {
    capture::perf_report_sym(dir, file).into_iter().collect()
}

#[test]
fn breakpoint_samples_read_back_exactly_by_go_pprof() {
    let dir = capture::scratch("pp-exact");
    let prog = capture::threads_program();
    let file = dir.join("prof.pb.gz");
    let spec = Spec {
        events: &["mem:hot:x"],
        period: 100,
        callchain: false,
    };
    let (out, profile) = capture::Shared::new(Pprof::create(&file).unwrap());
    let cap = capture::record_to(&prog, &["10000", "0"], &spec, |_| out);
    assert_eq!(cap.samples, vec![100]);
    let summary = profile.lock().unwrap().summary();
    assert_eq!(summary.samples, 100);
    assert_eq!(summary.by_function, vec![("hot".to_string(), 100)]);
    let top = pprof_top(&dir, "prof.pb.gz");
    assert_eq!(top.get("hot"), Some(&100), "{top:?}");
    assert_eq!(top.values().sum::<u64>(), 100, "{top:?}");
    // The event's period is the second sample type: 100 breakpoint hits per sample.
    let raw = pprof(&dir, &["-raw", "prof.pb.gz"]);
    let raw = String::from_utf8_lossy(&raw.stdout);
    assert!(raw.contains("samples/count[dflt] mem:hot:x/count"), "{raw}");
    let values = raw.lines().find(|l| l.trim_end().ends_with(": 1"));
    let values: Vec<&str> = values.unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        values,
        ["100", "10000:", "1"],
        "one stack: 100 samples of 100 hits\n{raw}"
    );
    assert!(raw.contains("thread_name:[threads]"), "{raw}");
}

#[test]
fn cpu_clock_on_threads_perf_report_and_pprof_agree_on_the_top_symbols() {
    let dir = capture::scratch("pp-agree");
    let prog = capture::threads_program();
    let spec = Spec {
        events: &["cpu-clock:u"],
        period: 100_000,
        callchain: true,
    };
    let (pd, pp) = (dir.join("perf.data"), dir.join("prof.pb.gz"));
    // One recording, two outputs of one pipeline, read by two tools.
    let (out, profile) = capture::Shared::new(Pprof::create(&pp).unwrap());
    let (_, cap) = capture::record(&prog, &["0", "4000000"], &spec, |ev| {
        perfring::pipeline::Pipeline::new(ev, None)
            .unwrap()
            .output(PerfData::open(&pd).unwrap())
            .output(out)
    });
    assert_eq!(cap.stats.lost_records, 0);
    let ours = profile.lock().unwrap().summary();
    assert_eq!(
        ours.samples, cap.samples[0],
        "every sample aggregated: {ours:?}"
    );
    assert!(ours.samples > 200, "enough samples to rank: {ours:?}");
    let top5: Vec<(String, u64)> = ours.by_function.iter().take(5).cloned().collect();
    // The five threads' functions lead; not necessarily in the order of their work:
    // the VM's cpu-clock hrtimer skips periods unevenly between threads sharing a
    // core (`perf record`'s own shares are as far from the work's here).
    let mut names: Vec<&str> = top5.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["w1", "w2", "w3", "w4", "w5"],
        "the threads' functions lead: {top5:?}"
    );
    let report = perf_report(&dir, "perf.data");
    let top = pprof_top(&dir, "prof.pb.gz");
    for (name, n) in &top5 {
        assert_eq!(
            report.get(name),
            Some(n),
            "perf report on {name}: {report:?}"
        );
        assert_eq!(top.get(name), Some(n), "go tool pprof on {name}: {top:?}");
    }
    assert_eq!(report.values().sum::<u64>(), ours.samples);
    assert_eq!(top.values().sum::<u64>(), ours.samples);
    // Stacks: w1 is called from run, in the program's own thread function.
    let peek = pprof(&dir, &["-peek", "^w1$", "prof.pb.gz"]);
    let peek = String::from_utf8_lossy(&peek.stdout);
    assert!(peek.contains("run"), "w1's caller: {peek}");
}

#[test]
fn a_write_error_names_the_output_and_the_fix() {
    let attr = *perfring::Counter::builder("cpu-clock").unwrap().attr();
    let ev = [perfring::output::EventInfo::new("cpu-clock", attr, vec![1]).unwrap()];
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut p = Pprof::new(full, "/dev/full");
    let rec = perfring::output::Recording::new(&ev, &[], None);
    p.start(&rec).unwrap();
    let e = p.finish().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert!(e.to_string().contains("/dev/full"), "{e}");
    assert!(e.fix().unwrap().contains("free space"), "{e}");
}

/// Reads one HTTP request (head and `Content-Length` body), answers `status`, and
/// returns the request.
#[cfg(feature = "push")]
fn serve_one(
    listener: std::net::TcpListener,
    status: &'static str,
) -> std::thread::JoinHandle<Vec<u8>> {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = conn.read(&mut buf).unwrap();
            req.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&req).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        // Header names are case-insensitive (ureq sends them in lower case).
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length").then_some(value)
                    })
                    .map_or(0, |v| v.trim().parse().unwrap());
                if req.len() >= end + 4 + len {
                    break;
                }
            }
            assert!(n > 0, "connection closed mid-request");
        }
        write!(
            conn,
            "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        )
        .unwrap();
        req
    })
}

#[cfg(feature = "push")]
#[test]
fn push_sends_the_profile_to_a_pyroscope_ingest_endpoint() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = serve_one(listener, "200 OK");
    let attr = *perfring::Counter::builder("cpu-clock").unwrap().attr();
    let ev = [perfring::output::EventInfo::new("cpu-clock", attr, vec![1]).unwrap()];
    let dir = capture::scratch("pp-push");
    let file = dir.join("p.pb.gz");
    let mut empty = Pprof::create(&file).unwrap();
    empty
        .start(&perfring::output::Recording::new(&ev, &[], None))
        .unwrap();
    empty.finish().unwrap();
    let gz = std::fs::read(&file).unwrap();
    let t0 = std::time::SystemTime::now();
    let ingest = |url: &str| {
        use perfring::push::{Endpoint, Protocol, Pusher};
        let e = Endpoint::new(url, Protocol::PyroscopeIngest).unwrap();
        Pusher::new(e.service_name("demo").unwrap().label("host", "a").unwrap()).unwrap()
    };
    ingest(&url).push(&gz, t0, t0).unwrap();
    let req = server.join().unwrap();
    let text = String::from_utf8_lossy(&req);
    let line = text.lines().next().unwrap();
    assert!(
        line.starts_with("POST /ingest?name=demo.cpu%7Bhost%3Da%7D&from="),
        "{line}"
    );
    assert!(line.contains("&format=pprof"), "{line}");
    assert!(text.contains("name=\"profile\""), "{text}");
    // The profile's bytes travel unchanged.
    assert!(
        req.windows(gz.len()).any(|w| w == gz.as_slice()),
        "the gzip body is sent as is"
    );

    // A server error is an error quoting the status.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = serve_one(listener, "400 Bad Request");
    let e = ingest(&url).push(&gz, t0, t0).unwrap_err();
    server.join().unwrap();
    assert!(e.to_string().contains("answered 400: ok"), "{e}");
}
