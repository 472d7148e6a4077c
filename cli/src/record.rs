//! `perfring record`: a profiling session (`perfring::profiler`) whose output is
//! perf.data or pprof. This file picks the flags' meaning, runs the loop, and reports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use perfring::console::Interrupts;
use perfring::output::{self, PerfData, Pprof};
use perfring::profiler::{End, Flow, Report};

use crate::args::{OutputFormat, RecordArgs};
use crate::Failure;

/// How often the loop wakes without records, to notice the target's end and Ctrl-C.
const TICK: Duration = Duration::from_millis(100);

/// Runs `record` to the end; returns the command's exit code, if it is to be ours.
pub fn run(args: &RecordArgs) -> Result<Option<i32>, Failure> {
    let w = &args.sampling;
    let path = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(match args.format {
            OutputFormat::Perf => "perf.data",
            OutputFormat::Pprof => "profile.pb.gz",
        })
    });
    let mut setup = w.session(args.call_graph, "recording")?;
    // By default inherited counters write one ring per CPU, as perf record does: a
    // thread's period restarts on each CPU. --exact-periods keeps one period per
    // thread (exact N/P, as watch does); what it cannot deliver is written as LOST.
    setup = setup.exact_periods(args.exact_periods);
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let started = (Instant::now(), SystemTime::now());
    // The file is created now: a bad path fails before the target runs.
    let stdout = path == Path::new("-");
    setup = match args.format {
        // perf's pipe format: `perf report -i -` reads it as it streams.
        OutputFormat::Perf if stdout => setup.output(
            PerfData::pipe(stdout_file().map_err(Failure::Runtime)?, "<stdout>")
                .map_err(Failure::Runtime)?,
        ),
        OutputFormat::Perf => {
            // An earlier recording becomes perf.data.old, as perf keeps it.
            PerfData::keep_old(&path).map_err(Failure::Runtime)?;
            setup.output(PerfData::open(&path).map_err(Failure::Runtime)?)
        }
        OutputFormat::Pprof if stdout => setup.output(Pprof::new(std::io::stdout(), "<stdout>")),
        OutputFormat::Pprof => setup.output(Pprof::create(&path).map_err(Failure::Runtime)?),
    };
    let mut profiler = setup.start().map_err(Failure::Runtime)?;
    let spawned = !w.command.is_empty();
    let events = profiler.events().to_vec();
    let target_name = profiler
        .program()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "perfring".to_string());

    let mut interrupted = 0;
    let end: Result<End, Failure> = loop {
        if let Err(e) = profiler.poll(Some(TICK), |_| Flow::Continue) {
            break Err(Failure::Runtime(e));
        }
        if profiler.failed() {
            break Ok(End::Stopped);
        }
        if let Some(sig) = interrupts.take() {
            interrupted += 1;
            if !spawned || interrupted > 1 {
                break Ok(End::Interrupted);
            }
            // A terminal's Ctrl-C reaches the command too; one sent to us alone is
            // passed on (a second one ends the recording whatever the command does).
            let _ = profiler.signal_target(sig);
        }
        match profiler.target_ended() {
            Ok(Some(_)) => break Ok(End::TargetExited),
            Ok(None) => {}
            Err(e) => break Err(Failure::Runtime(e)),
        }
    };
    let report = profiler.finish(*end.as_ref().unwrap_or(&End::Stopped));
    drop(interrupts);
    let end = end?;
    let report = report.map_err(Failure::Runtime)?;
    print_report(&path, &report, started.0.elapsed());
    if let Some(url) = &args.push {
        let bytes = std::fs::read(&path).map_err(|e| {
            Failure::Runtime(perfring::Error::from_errno(
                format!("read {} to push it", path.display()),
                e,
            ))
        })?;
        // Pyroscope names are `application.profile_type`.
        let clock = events.iter().all(|e| e.counts_cpu_time());
        let app = format!("{target_name}.{}", if clock { "cpu" } else { "samples" });
        output::push_pyroscope(url, &app, &bytes, started.1, SystemTime::now())
            .map_err(Failure::Runtime)?;
        eprintln!("perfring: pushed {} to {url} as {app}", path.display());
    }
    Ok(match end {
        End::TargetExited | End::Interrupted => report.exit.map(|s| s.code()),
        _ => None,
    })
}

/// Our stdout as a `File`, for the perf.data stream.
fn stdout_file() -> perfring::Result<std::fs::File> {
    use std::os::fd::AsFd;
    std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .map_err(|e| perfring::Error::from_errno("duplicate stdout", e))
}

/// The summary on stderr (stdout may be the profile).
fn print_report(path: &Path, r: &Report, took: Duration) {
    let lost_ring = r.stats.lost + r.stats.lost_samples;
    eprintln!(
        "perfring: {} samples, {} records ({:.1} KiB) written to {} in {:.2}s; lost: {} in the rings, {} in the queue; throttled {} times",
        r.samples,
        r.queue.records,
        r.queue.bytes as f64 / 1024.0,
        path.display(),
        took.as_secs_f64(),
        lost_ring,
        r.queue.lost_records,
        r.stats.throttled,
    );
    if r.unreported > 0 {
        eprintln!(
            "perfring: {} samples never reached the file: threads on different CPUs \
             overflowed at once and overwrote each other's records in the shared ring (the \
             kernel reports no loss for this; written as LOST); record fewer threads at a \
             time, or a longer period (-c)",
            r.unreported
        );
    }
    if lost_ring > 0 {
        eprintln!("perfring: records were lost in the rings: give more pages with -m (e.g. -m 1024) or sample less often (-c/-F)");
    }
    if r.queue.lost_records > 0 {
        eprintln!("perfring: the writer fell behind and records were dropped: write to a faster disk or sample less often");
    }
    let undecoded = r.stats.undecoded + r.pipeline.undecoded;
    if undecoded > 0 {
        eprintln!("perfring: {undecoded} records could not be decoded (written as they were)");
    }
}
