//! `perfring record`: the sampler's records into perf.data or pprof. The sampler
//! (`perfring::sampler`) opens and drains, `perfring::output` writes on its own thread;
//! this file picks the flags' meaning, wires the two, and reports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use perfring::launch::Interrupts;
use perfring::output::{self, EventInfo, PerfData, Pprof, QueueSize, Sink, StreamStats, Streamer};
use perfring::records::Layout;
use perfring::ring::RingSize;
use perfring::sampler::{Delivery, Sampler};
use perfring::symbols::TargetImage;
use perfring::unwind::CallGraph;
use perfring::{sys, Builder, SampleType};

use super::args::{EventArgs, OutputFormat, RecordArgs, WatchArgs};
use super::watch::{default_event, resolve, Resolved};
use super::Failure;

/// How often the loop wakes without records, to notice the target's end and Ctrl-C.
const TICK: Duration = Duration::from_millis(100);
/// `perf record`'s default frequency for counting events.
const DEFAULT_FREQ: u64 = 4000;
/// How long a spawned command gets after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Runs `record` to the end; returns the command's exit code, if it is to be ours.
pub fn run(args: &RecordArgs) -> Result<Option<i32>, Failure> {
    let w = &args.sampling;
    let specs = if w.events.is_empty() {
        vec![default_event()]
    } else {
        w.events.clone()
    };
    let Resolved {
        image,
        program,
        target,
        ..
    } = resolve(w, &specs)?;
    let several = specs.len() > 1;
    let builders = specs
        .iter()
        .map(|spec| builder(w, args.call_graph, several, spec, &image))
        .collect::<Result<Vec<_>, _>>()?;
    let path = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(match args.format {
            OutputFormat::Perf => "perf.data",
            OutputFormat::Pprof => "profile.pb.gz",
        })
    });
    if matches!(args.call_graph, Some(CallGraph::Dwarf { .. }))
        && args.format == OutputFormat::Pprof
    {
        eprintln!(
            "perfring: --call-graph dwarf: pprof gets each sample's own address only (the \
             stack copies are unwound by perf report, not by perfring yet); use -g for stacks"
        );
    }

    let pages = w.pages.unwrap_or(256);
    // By default inherited counters write one ring per CPU, as perf record does: a
    // thread's period restarts on each CPU (N/P is then approximate), nothing is lost
    // unreported. --exact-periods keeps one period per thread through an anchor ring
    // per event (exact N/P, as watch does), but threads overflowing at once on two
    // CPUs overwrite each other's records there without a LOST record (measured: most
    // samples of 4 threads hitting a breakpoint), so the counts are compared with the
    // samples at the end and any shortfall is reported (check_overwrites).
    let exact = args.exact_periods;
    let mut setup = Sampler::builder(target)
        .ring_size(RingSize::Pages(pages))
        .exact_periods(exact);
    for b in builders {
        // Wake at half a ring, as perf record does: the loop drains on every tick too.
        let half = (pages * perfring::ring::page_size() / 2) as u32;
        setup = setup.event(b.wakeup_watermark(half));
    }
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let started = (Instant::now(), SystemTime::now());
    let mut sampler = setup.start().map_err(Failure::Runtime)?;
    let events: Vec<EventInfo> = sampler.events().to_vec();
    let cmdline: Vec<String> = std::env::args().collect();
    let sink: Box<dyn Sink> = match args.format {
        OutputFormat::Perf => {
            Box::new(PerfData::create(&path, &events, &cmdline).map_err(Failure::Runtime)?)
        }
        OutputFormat::Pprof if path == Path::new("-") => {
            Box::new(Pprof::new(std::io::stdout(), "<stdout>", &events).map_err(Failure::Runtime)?)
        }
        OutputFormat::Pprof => Box::new(Pprof::create(&path, &events).map_err(Failure::Runtime)?),
    };
    let mut rec = Recorder {
        stream: Streamer::spawn(BoxSink(sink), QueueSize::default()).map_err(Failure::Runtime)?,
        layout: *sampler.events()[0].layout(),
        id: events[0].ids().first().copied().unwrap_or(0),
        scratch: Vec::new(),
        error: None,
        samples: vec![0; events.len()],
    };
    // What existed before the counters did: the kernel's text, threads' names and
    // code mappings.
    let mut kernel = Vec::new();
    if output::synthesize_kernel(&rec.layout, rec.id, &mut kernel) {
        rec.push_all(&kernel);
    }
    if let Some(pid) = existing_process(w) {
        let mut buf = Vec::new();
        match output::synthesize_process(pid, &rec.layout, rec.id, &mut buf) {
            Ok(()) => rec.push_all(&buf),
            Err(e) => eprintln!("perfring: {e} (symbols of code mapped before now may be missing)"),
        }
    }

    let spawned = program.is_some();
    let mut interrupted = 0;
    let result: Result<(), Failure> = loop {
        if let Err(e) = sampler.poll(Some(TICK), |d| rec.deliver(d)) {
            break Err(Failure::Runtime(e));
        }
        rec.end_round();
        if rec.error.is_some() {
            break Ok(());
        }
        if let Some(sig) = interrupts.take() {
            interrupted += 1;
            if !spawned || interrupted > 1 {
                break Ok(());
            }
            // A terminal's Ctrl-C reaches the command too; one sent to us alone is
            // passed on (a second one ends the recording whatever the command does).
            let _ = perfring::Signal::new(sig).and_then(|s| sampler.signal_target(s));
        }
        match sampler.target_ended() {
            Ok(Some(_)) => break Ok(()),
            Ok(None) => {}
            Err(e) => break Err(Failure::Runtime(e)),
        }
    };
    // What the last moments left in the rings.
    let drained = sampler.drain(|d| rec.deliver(d));
    if exact {
        rec.check_overwrites(&sampler, &specs);
    }
    rec.end_round();
    let exit = sampler.terminate(TERM_GRACE).map(|s| s.code());
    let totals = sampler.stats();
    drop(sampler);
    drop(interrupts);
    // The writer's own error says what failed (disk full, closed pipe); a push
    // refused because of it only says that the writer stopped.
    let queued = match (rec.stream.finish(), rec.error) {
        (Err(e), _) | (Ok(_), Some(e)) => return Err(Failure::Runtime(e)),
        (Ok((_, stats)), None) => stats,
    };
    result?;
    drained.map_err(Failure::Runtime)?;

    let target_name = program
        .as_deref()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "perfring".to_string());
    report(&path, &queued, &totals, started.0.elapsed());
    if let Some(url) = &args.push {
        let bytes = std::fs::read(&path).map_err(|e| {
            Failure::Runtime(perfring::Error::from_errno(
                format!("read {} to push it", path.display()),
                e,
            ))
        })?;
        // Pyroscope names are `application.profile_type`.
        let clock = specs
            .iter()
            .all(|e| e.starts_with("cpu-clock") || e.starts_with("task-clock"));
        let app = format!("{target_name}.{}", if clock { "cpu" } else { "samples" });
        output::push_pyroscope(url, &app, &bytes, started.1, SystemTime::now())
            .map_err(Failure::Runtime)?;
        eprintln!("perfring: pushed {} to {url} as {app}", path.display());
    }
    Ok(exit)
}

/// The running process whose threads and mappings predate the counters (`-p`, `-t`).
fn existing_process(w: &WatchArgs) -> Option<u32> {
    if let Some(pid) = w.pid {
        return Some(pid as u32);
    }
    let tid = w.tid?;
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The summary on stderr (stdout may be the profile).
fn report(path: &Path, q: &StreamStats, t: &perfring::sampler::Stats, took: Duration) {
    let lost_ring = t.lost + t.lost_samples;
    eprintln!(
        "perfring: {} samples, {} records ({:.1} KiB) written to {} in {:.2}s; lost: {} in the rings, {} in the queue; throttled {} times",
        t.samples,
        q.records,
        q.bytes as f64 / 1024.0,
        path.display(),
        took.as_secs_f64(),
        lost_ring,
        q.lost_records,
        t.throttled,
    );
    if lost_ring > 0 {
        eprintln!("perfring: records were lost in the rings: give more pages with -m (e.g. -m 1024) or sample less often (-c/-F)");
    }
    if q.lost_records > 0 {
        eprintln!("perfring: the writer fell behind and records were dropped: write to a faster disk or sample less often");
    }
    if t.undecoded > 0 {
        eprintln!(
            "perfring: {} records could not be decoded (written as they were)",
            t.undecoded
        );
    }
}

/// The drain side: records to the writer thread, the first error kept.
struct Recorder {
    stream: Streamer<BoxSink>,
    layout: Layout,
    id: u64,
    scratch: Vec<u8>,
    error: Option<perfring::Error>,
    /// Samples per event, as delivered.
    samples: Vec<u64>,
}

impl Recorder {
    fn deliver(&mut self, d: Delivery<'_>) {
        if self.error.is_some() {
            return;
        }
        let r = match d.event {
            Some(i) => {
                if matches!(d.record.kind(), perfring::records::RecordKind::Sample(_)) {
                    self.samples[i] += 1;
                }
                self.stream.push(i, d.raw)
            }
            // The tracking counter's records (MMAP2, COMM, FORK, EXIT) have their own
            // id layout; the file gives every record the events' one.
            None => {
                self.scratch.clear();
                if output::relayout(&d.record, &self.layout, self.id, &mut self.scratch) {
                    self.stream.push(0, &self.scratch)
                } else {
                    Ok(())
                }
            }
        };
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// With one period per thread, the counts say how many samples there must be (one
    /// per full period of each thread): fewer means records were overwritten in a
    /// ring written from two CPUs at once, which the kernel does not report. Say so,
    /// and write a `PERF_RECORD_LOST` for them so readers see it too.
    fn check_overwrites(&mut self, sampler: &Sampler, specs: &[String]) {
        for (i, spec) in specs.iter().enumerate() {
            let Ok(missing) = sampler.unreported_loss(i) else {
                continue;
            };
            if missing == 0 {
                continue;
            }
            eprintln!(
                "perfring: {missing} samples of {spec} never reached the file: threads on \
                 different CPUs overflowed at once and overwrote each other's records in \
                 the shared ring (the kernel reports no loss for this); record fewer \
                 threads at a time, or a longer period (-c)"
            );
            let ids = perfring::records::encode::Ids {
                id: self.id,
                identifier: self.id,
                ..Default::default()
            };
            self.scratch.clear();
            perfring::records::encode::lost(
                &mut self.scratch,
                &self.layout,
                sys::PERF_RECORD_MISC_USER as u16,
                self.id,
                missing,
                &ids,
            );
            let rec = std::mem::take(&mut self.scratch);
            if let Err(e) = self.stream.push(i, &rec) {
                self.error.get_or_insert(e);
            }
            self.scratch = rec;
        }
    }

    fn push_all(&mut self, mut bytes: &[u8]) {
        while bytes.len() >= 8 {
            let size = usize::from(u16::from_ne_bytes([bytes[6], bytes[7]]));
            if let Err(e) = self.stream.push(0, &bytes[..size]) {
                self.error.get_or_insert(e);
                return;
            }
            bytes = &bytes[size..];
        }
    }

    fn end_round(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.stream.end_round() {
                self.error = Some(e);
            }
        }
    }
}

/// A boxed sink, so one stream type serves both formats.
struct BoxSink(Box<dyn Sink>);

impl Sink for BoxSink {
    fn write_chunk(&mut self, chunk: &output::Chunk) -> perfring::Result<()> {
        self.0.write_chunk(chunk)
    }
    fn finish(&mut self) -> perfring::Result<()> {
        self.0.finish()
    }
}

/// One event's builder: the shared event flags, then what a recording needs.
fn builder(
    w: &WatchArgs,
    call_graph: Option<CallGraph>,
    several: bool,
    spec: &str,
    image: &TargetImage,
) -> Result<Builder, Failure> {
    let event_args = EventArgs {
        event: Some(spec.to_string()),
        period: w.period,
        frequency: w.frequency,
        ..EventArgs::default()
    };
    let mut b = event_args.builder_in(image)?;
    if w.period.is_none() && w.frequency.is_none() {
        // As perf record: every hit of a breakpoint, tracepoint or probe; counting
        // events at 4000 Hz.
        let t = b.attr().type_;
        if t == sys::PERF_TYPE_BREAKPOINT
            || t == sys::PERF_TYPE_TRACEPOINT
            || spec.starts_with("uprobe:")
        {
            b = b.period(1);
        } else {
            b = b.frequency(DEFAULT_FREQ);
        }
    }
    let mut sample = SampleType::IP | SampleType::TID | SampleType::TIME;
    // Only frequency mode varies the period; with a fixed one the kernel would take a
    // sample per event on software and breakpoint counters if PERIOD were sampled.
    if b.attr().freq() != 0 {
        sample |= SampleType::PERIOD;
    }
    // perf needs every event of a file to place its id alike, at the front.
    if several {
        sample |= SampleType::IDENTIFIER;
    }
    match call_graph {
        Some(CallGraph::Fp) => sample |= SampleType::CALLCHAIN,
        Some(CallGraph::Dwarf { stack_bytes }) => {
            sample |= SampleType::REGS_USER | SampleType::STACK_USER;
            b = b
                .sample_regs_user(user_regs_mask())
                .sample_stack_user(stack_bytes);
        }
        None => {}
    }
    Ok(b.sample(sample))
}

/// The user registers an unwinder needs, as perf asks for them.
fn user_regs_mask() -> u64 {
    if cfg!(target_arch = "x86_64") {
        // Every PERF_REG_X86_* up to R15 but the segment registers DS, ES, FS, GS.
        let all = (1u64 << 24) - 1;
        all & !(0xf << 12)
    } else if cfg!(target_arch = "aarch64") {
        (1u64 << 33) - 1
    } else {
        0
    }
}
