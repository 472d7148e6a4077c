//! `perfring record`: a profiling session (`perfring::profiler`) whose output is
//! perf.data or pprof. This file picks the flags' meaning, runs the loop, and reports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use perfring::console::Interrupts;
use perfring::profiler::{End, Flow, Report};

use crate::args::RecordArgs;
use crate::Failure;

/// How often the loop wakes without records, to notice the target's end and Ctrl-C.
const TICK: Duration = Duration::from_millis(100);

/// Runs `record` to the end; returns the command's exit code, if it is to be ours.
pub fn run(args: &RecordArgs) -> Result<Option<i32>, Failure> {
    let w = &args.sampling;
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(args.format.default_path()));
    let mut setup = w.session(args.call_graph, "recording")?;
    // By default inherited counters write one ring per CPU, as perf record does: a
    // thread's period restarts on each CPU. --exact-periods keeps one period per
    // thread (exact N/P, as watch does); what it cannot deliver is written as LOST.
    setup = setup
        .exact_periods(args.exact_periods)
        .off_cpu(args.off_cpu);
    if args.off_cpu {
        // Before any file is made: a recording that cannot sample waits is refused.
        perfring::offcpu::check_allowed().map_err(Failure::Runtime)?;
    }
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let started = Instant::now();
    // The store is checked now (URL, certificate, credentials): like a bad path, a
    // bad store fails before the target runs.
    let mut agent = match &args.push.url {
        Some(_) => {
            let cpu = crate::push::counts_cpu_time(&w.events);
            let service = crate::push::service_name(w);
            let agent = crate::push::Agent::connect(&args.push, cpu, &service)?;
            setup = agent.session(setup);
            Some(agent)
        }
        None => None,
    };
    if let Some(agent) = &mut agent {
        setup = setup.output(agent.output());
    }
    let write_file = agent.is_none() || args.output.is_some();
    // The file is created now: a bad path fails before the target runs.
    if write_file {
        setup = setup.boxed_output(crate::outputs::open(args.format, &path)?);
    }
    let mut profiler = setup.start().map_err(Failure::Runtime)?;
    crate::args::say_user_only(profiler.user_only());
    crate::args::say_ring_pages(&profiler);
    let spawned = !w.command.is_empty();

    let mut interrupted = 0;
    let mut status = Status::on_terminal(&path, started);
    let end: Result<End, Failure> = loop {
        if w.duration.is_some_and(|d| started.elapsed() >= d) {
            // A command is ended, as `perf record -- cmd` with a timeout would; a
            // process or CPUs are left as they are.
            break Ok(if spawned {
                End::Stopped
            } else {
                End::Interrupted
            });
        }
        if let Err(e) = profiler.poll(Some(TICK), |_| Flow::Continue) {
            break Err(Failure::Runtime(e));
        }
        if let Some(s) = &mut status {
            let stats = profiler.sampler().stats();
            s.show(profiler.samples(), stats.lost + stats.lost_samples);
        }
        if profiler.failed() {
            break Ok(End::Stopped);
        }
        if let Some(agent) = &mut agent {
            agent.poll();
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
    if let Some(s) = &mut status {
        s.clear();
    }
    let report = profiler.finish(*end.as_ref().unwrap_or(&End::Stopped));
    drop(interrupts);
    if let (Ok(_), Ok(report)) = (&end, &report) {
        let written = match (&args.push.url, write_file) {
            (Some(url), false) => format!("profiles for {url}"),
            _ => path.display().to_string(),
        };
        print_report(&written, report, started.elapsed());
    }
    // The profiles cut are pushed (and accounted for) even if the recording failed.
    let pushed = agent.map(crate::push::Agent::finish).transpose();
    let end = end?;
    let report = report.map_err(Failure::Runtime)?;
    pushed?;
    Ok(match end {
        End::TargetExited | End::Interrupted => report.exit.map(|s| s.code()),
        _ => None,
    })
}

/// The summary on stderr (stdout may be the profile).
fn print_report(path: &str, r: &Report, took: Duration) {
    let lost_ring = r.stats.lost + r.stats.lost_samples;
    eprintln!(
        "perfring: {} samples, {} records ({:.1} KiB) written to {} in {:.2}s; lost: {} in the rings, {} in the queue; throttled {} times",
        r.samples,
        r.queue.records,
        r.queue.bytes as f64 / 1024.0,
        path,
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

/// How often the status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);

/// The live status line on a terminal's stderr: time, samples, records lost, and the
/// output's size so far.
struct Status {
    path: PathBuf,
    started: Instant,
    last: Option<Instant>,
    shown: bool,
}

impl Status {
    /// A status line if stderr is a terminal (a log or a pipe gets none).
    fn on_terminal(path: &Path, started: Instant) -> Option<Status> {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal().then(|| Status {
            path: path.to_path_buf(),
            started,
            last: None,
            shown: false,
        })
    }

    fn show(&mut self, samples: u64, lost: u64) {
        if self.last.is_some_and(|t| t.elapsed() < STATUS_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        // The file as written so far (formats written at the end are 0 until then).
        let size = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        eprint!(
            "\r\x1b[K[{:.1}s, {samples} samples, {lost} lost, {:.1} KiB written]",
            self.started.elapsed().as_secs_f64(),
            size as f64 / 1024.0
        );
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}
