//! perf.data written by `perfring::output::PerfData`, read back by the real `perf`.
#![cfg(feature = "profile")]

mod util;

use perfring::output::{PerfData, Pprof};
use perfring::stream::Sink;
use util::capture::{self, perf, Spec};

/// Lines of `perf script -F FIELDS`.
fn script(dir: &std::path::Path, file: &str, fields: &str) -> Vec<String> {
    let out = perf(dir, &["script", "-i", file, "-F", fields]);
    let err = util::stderr(&out);
    assert!(out.status.success(), "perf script failed: {err}");
    assert!(!err.contains("WARNING"), "perf script warned: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn breakpoint_samples_read_back_exactly_by_perf_script() {
    let dir = capture::scratch("pd-exact");
    let prog = capture::threads_program();
    let file = dir.join("perf.data");
    let spec = Spec {
        events: &["mem:hot:x"],
        period: 100,
        callchain: false,
    };
    let (sink, cap) = capture::record(&prog, &["10000", "0"], &spec, |ev| {
        PerfData::create(&file, ev, &["perfring-test".into()]).unwrap()
    });
    assert_eq!(cap.samples, vec![100], "the capture itself");
    assert_eq!(cap.stats.lost_records, 0);
    assert_eq!(cap.ring_lost, 0);
    assert!(sink.records() > 100, "samples plus MMAP2/COMM records");
    let lines = script(&dir, "perf.data", "tid,ip,sym");
    let hot = lines
        .iter()
        .filter(|l| l.trim_end().ends_with(" hot"))
        .count();
    assert_eq!(hot, 100, "perf script output:\n{}", lines.join("\n"));
    assert_eq!(lines.len(), 100, "only the breakpoint's samples");
    // Every sample is from the program's one thread.
    let tids: std::collections::BTreeSet<_> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(tids.len(), 1, "{tids:?}");
}

#[test]
fn header_names_the_machine_and_the_event() {
    let dir = capture::scratch("pd-header");
    let prog = capture::threads_program();
    let file = dir.join("perf.data");
    let spec = Spec {
        events: &["mem:hot:x"],
        period: 1000,
        callchain: false,
    };
    capture::record(&prog, &["10000", "0"], &spec, |ev| {
        PerfData::create(&file, ev, &["perfring".into(), "record".into()]).unwrap()
    });
    let out = perf(&dir, &["report", "-i", "perf.data", "--header-only"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", util::stderr(&out));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    for want in [
        format!("# hostname : {}", host.trim()),
        format!("# os release : {}", rel.trim()),
        "# cmdline : perfring record".to_string(),
        "# event : name = mem:hot:x".to_string(),
        format!("# arch : {}", std::env::consts::ARCH),
    ] {
        assert!(text.contains(&want), "missing {want:?} in:\n{text}");
    }
    let ids = perf(&dir, &["buildid-list", "-i", "perf.data"]);
    let ids = String::from_utf8_lossy(&ids.stdout);
    assert!(
        ids.lines().any(|l| l.ends_with(prog.to_str().unwrap())),
        "the program's build id is listed: {ids}"
    );
}

#[test]
fn a_file_cut_short_without_finish_still_reads() {
    let dir = capture::scratch("pd-cut");
    let prog = capture::threads_program();
    let file = dir.join("perf.data");
    let spec = Spec {
        events: &["mem:hot:x"],
        period: 100,
        callchain: false,
    };
    // A sink that never finishes: what a killed recorder leaves behind.
    struct Unfinished(PerfData);
    impl Sink for Unfinished {
        fn write_chunk(&mut self, c: &perfring::stream::Chunk) -> perfring::Result<()> {
            self.0.write_chunk(c)
        }
        fn finish(&mut self) -> perfring::Result<()> {
            Ok(())
        }
    }
    capture::record(&prog, &["10000", "0"], &spec, |ev| {
        Unfinished(PerfData::create(&file, ev, &[]).unwrap())
    });
    let lines = script(&dir, "perf.data", "ip,sym");
    assert_eq!(lines.iter().filter(|l| l.ends_with(" hot")).count(), 100);
    // Garbage after the last whole record (a write cut mid-record) is ignored too.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    std::io::Write::write_all(&mut f, &[0xab; 13]).unwrap();
    let lines = script(&dir, "perf.data", "ip,sym");
    assert_eq!(lines.iter().filter(|l| l.ends_with(" hot")).count(), 100);
}

#[test]
fn a_pipe_is_refused_with_a_fix() {
    let (r, _w) = std::io::pipe().unwrap();
    let file: std::fs::File = std::os::fd::OwnedFd::from(r).into();
    let attr = *perfring::Counter::builder("cpu-clock").unwrap().attr();
    let ev = [perfring::output::EventInfo::new("cpu-clock", attr, vec![1]).unwrap()];
    let e = PerfData::new(file, "<pipe>", &ev, &[]).unwrap_err();
    assert!(e.to_string().contains("PerfData::pipe"), "{e}");
    // pprof, which is written at the end, takes any writer.
    let _ = Pprof::new(Vec::new(), "<mem>");
}

/// Passes chunks to a `PerfData` once `gate` opens: a writer stuck on a slow disk.
struct Gated(PerfData, std::sync::mpsc::Receiver<()>, bool);
impl Sink for Gated {
    fn write_chunk(&mut self, c: &perfring::stream::Chunk) -> perfring::Result<()> {
        if !self.2 {
            self.1.recv().unwrap();
            self.2 = true;
        }
        self.0.write_chunk(c)
    }
    fn finish(&mut self) -> perfring::Result<()> {
        Sink::finish(&mut self.0)
    }
}

#[test]
fn a_full_queue_drops_and_counts_records_and_perf_sees_the_loss() {
    use perfring::output::EventInfo;
    use perfring::records::{encode, Layout};
    use perfring::stream::{QueueSize, Streamer};
    let dir = capture::scratch("pd-full");
    let b = perfring::Counter::builder("cpu-clock")
        .unwrap()
        .period(1000)
        .sample(perfring::SampleType::IP | perfring::SampleType::TID | perfring::SampleType::TIME)
        .sample_id_all(true);
    let layout = Layout::new(b.attr()).unwrap();
    let ev = [EventInfo::new("cpu-clock", *b.attr(), vec![7]).unwrap()];
    let (open, gate) = std::sync::mpsc::channel();
    let sink = Gated(
        PerfData::create(dir.join("perf.data"), &ev, &[]).unwrap(),
        gate,
        false,
    );
    let size = QueueSize {
        bytes: 16 << 10,
        chunk_bytes: 4 << 10,
    };
    let mut stream = Streamer::spawn(sink, size).unwrap();
    let mut rec = Vec::new();
    let pushed = 5000u64;
    for i in 0..pushed {
        rec.clear();
        let f = encode::SampleFields {
            ip: 0x1000 + i,
            pid: 1,
            tid: 1,
            time: i,
            ..Default::default()
        };
        encode::sample(
            &mut rec,
            &layout,
            perfring::sys::PERF_RECORD_MISC_USER as u16,
            &f,
        );
        stream.push(0, &rec).unwrap(); // never blocks, however stuck the writer
    }
    let stats = stream.stats();
    assert!(stats.lost_records > 0, "the queue filled: {stats:?}");
    assert!(
        stats.bytes <= 16 << 10,
        "at most the bound in flight: {stats:?}"
    );
    open.send(()).unwrap();
    let (sink, stats) = stream.finish().unwrap();
    assert_eq!(stats.records + stats.lost_records, pushed, "{stats:?}");
    assert_eq!(
        sink.0.lost(),
        stats.lost_records,
        "the file says how many were lost"
    );
    // perf counts the samples it got and reports the loss.
    let out = perf(&dir, &["report", "-i", "perf.data", "--stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |what: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(what))
            .and_then(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
    };
    assert_eq!(count("SAMPLE events:"), Some(stats.records), "{text}");
    assert_eq!(
        count("LOST events:"),
        Some(1),
        "one LOST record per dropped run: {text}"
    );
}
