//! `perfring watch`: one line per overflow (per `PERF_RECORD_SAMPLE`, never per wake-up),
//! optional actions on each, and a summary. The session (`perfring::profiler`) opens,
//! drains, unwinds and names; this file decides what to print, what to do on each
//! overflow, and when to stop.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfring::console::{output_closed, Interrupts};
use perfring::output::{Output, SampleRef};
use perfring::output::{OverflowLine, Tally};
use perfring::profiler::{End, Flow, Profiler, Wakeup};
use perfring::records::RecordKind;
use perfring::sampler::Delivery;
use perfring::symbolize::Frame;

use crate::args::WatchArgs;
use crate::exec::ExecQueue;
use crate::Failure;

/// How often the loop wakes without overflows, to notice the target's exit and Ctrl-C.
const TICK: Duration = Duration::from_millis(50);
/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Overflows waiting for `--exec` beyond which new ones are dropped (and counted).
const EXEC_QUEUE: usize = 1024;
/// How long `--stop-at` waits to see the target stopped.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What the drain side and the printer share.
#[derive(Debug, Default)]
struct Shared {
    lost: AtomicU64,
    throttled: AtomicU64,
    exec_runs: AtomicU64,
    exec_dropped: AtomicU64,
}

/// Prints each overflow (on the writer thread, in order) and runs `--exec`.
struct Printer {
    json: bool,
    stacks: bool,
    tally: Tally,
    start_ns: u64,
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    exec: Option<ExecQueue>,
    status: Option<StatusLine>,
    shared: Arc<Shared>,
}

impl Output for Printer {
    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> perfring::Result<()> {
        let line = self.tally.line(s, self.stacks);
        if let Some(status) = &mut self.status {
            status.clear();
        }
        let written = if self.json {
            serde_json::to_writer(&mut self.out, &line)
                .map_err(std::io::Error::from)
                .and_then(|()| self.out.write_all(b"\n"))
        } else {
            writeln!(self.out, "{}", text_line(&line, s.frames, self.start_ns))
        };
        written.map_err(|e| perfring::Error::from_errno("write the overflow lines", e))?;
        if let Some(exec) = &mut self.exec {
            exec.submit(vec![
                ("PERFRING_EVENT", line.event.to_string()),
                ("PERFRING_PID", line.pid.to_string()),
                ("PERFRING_TID", line.tid.to_string()),
                ("PERFRING_IP", line.ip.clone()),
                ("PERFRING_SYM", line.sym.unwrap_or_default().to_string()),
                ("PERFRING_SEQ", line.seq.to_string()),
            ]);
        }
        if let Some(status) = &mut self.status {
            // Out of the way of the lines: redrawn after them.
            self.out.flush().ok();
            status.tick(
                self.tally.overflows(),
                self.shared.lost.load(Ordering::Relaxed),
                self.shared.throttled.load(Ordering::Relaxed),
            );
        }
        Ok(())
    }

    fn end_round(&mut self) -> perfring::Result<()> {
        self.out
            .flush()
            .map_err(|e| perfring::Error::from_errno("write the overflow lines", e))
    }

    fn finish(&mut self) -> perfring::Result<()> {
        if let Some(status) = &mut self.status {
            status.clear();
        }
        if let Some(exec) = &mut self.exec {
            self.shared
                .exec_runs
                .store(exec.finish(), Ordering::Relaxed);
            self.shared
                .exec_dropped
                .store(exec.dropped(), Ordering::Relaxed);
        }
        self.out
            .flush()
            .map_err(|e| perfring::Error::from_errno("write the overflow lines", e))
    }
}

/// `   0.001234 cpu-clock tid 42 ip 0x401136 leaf+0x6 period 1 total 1`, then the
/// stack, innermost first, indented under it.
fn text_line(o: &OverflowLine<'_>, frames: &[Frame], start_ns: u64) -> String {
    let sym = match (o.sym, o.sym_off) {
        (Some(name), Some(0) | None) => format!(" {name}"),
        (Some(name), Some(off)) => format!(" {name}+{off:#x}"),
        (None, _) => String::new(),
    };
    let since_start = o.time_ns.saturating_sub(start_ns) as f64 / 1e9;
    let mut line = format!(
        "{since_start:>12.6} {} tid {} ip {}{sym} period {} total {}",
        o.event,
        o.tid,
        o.ip,
        o.period.unwrap_or(0),
        o.total.unwrap_or(0)
    );
    if o.stack.is_some() {
        for f in frames {
            line += &format!("\n    {:>18} {f}", format!("{:#x}", f.ip));
        }
    }
    line
}

/// What the drain side does with each record, at once: count, signal, stop.
struct Actions<'a> {
    args: &'a WatchArgs,
    seq: u64,
    signal_failures: u64,
    end: Option<End>,
}

impl Actions<'_> {
    fn each(&mut self, d: &Delivery<'_>) -> Flow {
        let (Some(_), RecordKind::Sample(s)) = (d.event, d.record.kind()) else {
            return Flow::Continue;
        };
        self.seq += 1;
        let (pid, tid) = (s.pid().unwrap_or(0) as i32, s.tid().unwrap_or(0) as i32);
        if let Some(sig) = self.args.signal {
            if perfring::process::signal_thread(pid, tid, sig).is_err() {
                self.signal_failures += 1;
            }
        }
        if self.args.stop_at == Some(self.seq) {
            match perfring::process::stop_process(pid, STOP_WAIT) {
                Ok(()) => {
                    eprintln!(
                        "perfring: stopped process {pid} at overflow {}; resume it with: kill -CONT {pid}",
                        self.seq
                    );
                    self.end = Some(End::LeftStopped);
                }
                Err(e) => {
                    eprintln!("perfring: --stop-at: {e}");
                    self.end = Some(End::TargetExited);
                }
            }
            return Flow::Stop;
        }
        if self.args.stop_after == Some(self.seq) {
            self.end = Some(End::Stopped);
            return Flow::Stop;
        }
        Flow::Continue
    }
}

/// Why the loop ended, as the summary and the exit status see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The target exited (or, for `-C`, Ctrl-C).
    TargetExited,
    /// `-p`/`-t`/`-C`: Ctrl-C or SIGTERM.
    Interrupted,
    /// Every `--budget` was spent and there is no command to wait for.
    BudgetSpent,
    /// `--stop-at`, `--stop-after`, or our stdout was closed: we ended it.
    Ours,
    /// `--duration` passed: a command is ended, a process or CPUs left as they are.
    Duration,
}

/// Runs `watch` to the end and returns the command's exit code, if it is to be ours.
pub fn run(args: &WatchArgs) -> Result<Option<i32>, Failure> {
    if args.when.is_some() {
        // Threshold crossings of a group's rate or ratio, not overflows.
        return crate::trigger::run(args);
    }
    let spawned = !args.command.is_empty();
    let shared = Arc::new(Shared::default());
    // `-o FILE`: the lines and the summary go there (created 0600, as every file of
    // samples), apart from anything the command prints.
    let file = match &args.output {
        Some(path) => Some(perfring::output::create_private(path).map_err(Failure::Runtime)?),
        None => None,
    };
    let sink = |f: &Option<std::fs::File>| -> std::io::Result<Box<dyn Write + Send>> {
        Ok(match f {
            Some(f) => Box::new(f.try_clone()?),
            None => Box::new(std::io::stdout()),
        })
    };
    let write_error = |e| Failure::Runtime(perfring::Error::from_errno("open the output", e));
    let printer = Printer {
        json: args.json,
        stacks: args.call_graph.is_some(),
        tally: Tally::new(),
        start_ns: perfring::counter::clock_ns(libc::CLOCK_MONOTONIC),
        out: std::io::BufWriter::new(sink(&file).map_err(write_error)?),
        exec: args
            .exec
            .clone()
            .map(|cmd| ExecQueue::start(cmd, EXEC_QUEUE)),
        status: std::io::stderr().is_terminal().then(|| StatusLine {
            last: Instant::now(),
            last_overflows: 0,
            shown: false,
        }),
        shared: shared.clone(),
    };
    let mut setup = args
        .session(args.call_graph, "watching")?
        .wakeup(Wakeup::EverySample)
        // One period per thread however it migrates (exact N/P), as watch always counted.
        .exact_periods(true)
        .output(printer);
    if let Some(n) = args.budget {
        setup = setup.budget(n);
    }
    // Ctrl-C and SIGTERM are taken between polls (a worker thread inherits the mask; a
    // spawned command does not).
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let started = Instant::now();
    let mut profiler = setup.start().map_err(Failure::Runtime)?;
    crate::args::say_user_only(profiler.user_only());
    crate::args::say_ring_pages(&profiler);
    if let Some(pid) = args.pid {
        let n = profiler.sampler().threads().count();
        let s = if n == 1 { "" } else { "s" };
        eprintln!("perfring: attached to process {pid} ({n} thread{s}); following new ones");
    }
    let mut actions = Actions {
        args,
        seq: 0,
        signal_failures: 0,
        end: None,
    };
    let why = watch_loop(
        args,
        file.is_none(),
        &mut profiler,
        &mut actions,
        &shared,
        spawned,
        &interrupts,
    );
    let why = match why {
        Ok(w) => w,
        Err(e) => {
            let _ = profiler.finish(End::Stopped);
            return Err(e);
        }
    };
    let end = match (actions.end, why) {
        (Some(end), _) => end,
        (None, Why::TargetExited) => End::TargetExited,
        (None, Why::Interrupted | Why::BudgetSpent) => End::Interrupted,
        (None, Why::Ours) => End::Stopped,
        (None, Why::Duration) if spawned => End::Stopped,
        (None, Why::Duration) => End::Interrupted,
    };
    let report = profiler.finish(end);
    drop(interrupts);
    let report = match report {
        Ok(r) => r,
        // `| head -1`: the reader is gone, which is not a failure.
        Err(e) if e.kind() == perfring::ErrorKind::Io && why == Why::Ours => return Ok(None),
        Err(e) => return Err(Failure::Runtime(e)),
    };
    let exit_code = report.exit.map(|s| s.code());
    let summary = Summary {
        // Every sample kept, those of the final drain in `finish` too (which the
        // drain-side actions never see): the lines written.
        overflows: report.samples,
        wakeups: report.wakeups,
        lost: report.lost(),
        throttled: report.stats.throttled,
        unreported: report.unreported,
        duration: started.elapsed(),
        exit_code: if end == End::LeftStopped {
            None
        } else {
            exit_code
        },
        exec_runs: args
            .exec
            .as_ref()
            .map(|_| shared.exec_runs.load(Ordering::Relaxed)),
        exec_dropped: shared.exec_dropped.load(Ordering::Relaxed),
        signal_failures: actions.signal_failures,
        undecoded: report.stats.undecoded + report.pipeline.undecoded,
    };
    let text = if args.json {
        summary_json(&summary).to_string()
    } else {
        summary_text(&summary)
    };
    let mut out = sink(&file).map_err(write_error)?;
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
    Ok(match (end, why) {
        // The command ran its course: its status is ours, as with `stat`.
        (End::TargetExited | End::Interrupted, _) => exit_code,
        // We ended it (or left it stopped) on purpose: that is success.
        _ => None,
    })
}

/// The loop: wait for wake-ups, drain every ring, until an end condition.
fn watch_loop(
    args: &WatchArgs,
    to_stdout: bool,
    profiler: &mut Profiler,
    actions: &mut Actions<'_>,
    shared: &Shared,
    spawned: bool,
    interrupts: &Interrupts,
) -> Result<Why, Failure> {
    let stdout = std::io::stdout();
    let started = Instant::now();
    loop {
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            return Ok(Why::Duration);
        }
        // Readiness is consumed by the poll: the session drains every ring.
        profiler
            .poll(Some(TICK), |d| actions.each(d))
            .map_err(Failure::Runtime)?;
        if actions.end.is_some() {
            return Ok(Why::Ours);
        }
        // `| head -1`: end at once, even when there is nothing more to write.
        if profiler.failed() || (to_stdout && output_closed(stdout.as_fd())) {
            return Ok(Why::Ours);
        }
        let st = profiler.sampler().stats();
        shared
            .lost
            .store(st.lost + st.lost_samples, Ordering::Relaxed);
        shared.throttled.store(st.throttled, Ordering::Relaxed);
        if let Some(sig) = interrupts.take() {
            if !spawned {
                return Ok(Why::Interrupted);
            }
            // A terminal's Ctrl-C reaches the command too; a signal for us alone is
            // passed on, and we report once it has ended.
            let _ = profiler.signal_target(sig);
        }
        if profiler.target_ended().map_err(Failure::Runtime)?.is_some() {
            return Ok(Why::TargetExited);
        }
        if args.budget.is_some() && profiler.sampler().budgets_spent() && !spawned {
            return Ok(Why::BudgetSpent);
        }
    }
}

/// The live status line on a terminal's stderr.
struct StatusLine {
    last: Instant,
    last_overflows: u64,
    shown: bool,
}

impl StatusLine {
    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }

    fn tick(&mut self, overflows: u64, lost: u64, throttled: u64) {
        let dt = self.last.elapsed();
        if dt < STATUS_EVERY {
            return;
        }
        let rate = (overflows - self.last_overflows) as f64 / dt.as_secs_f64();
        eprint!("\r\x1b[K[{overflows} overflows, {rate:.0}/s, {lost} lost, {throttled} throttled]");
        self.shown = true;
        self.last = Instant::now();
        self.last_overflows = overflows;
    }
}

/// What the summary line reports.
#[derive(Debug, Default)]
struct Summary {
    overflows: u64,
    wakeups: u64,
    lost: u64,
    throttled: u64,
    duration: Duration,
    exit_code: Option<i32>,
    exec_runs: Option<u64>,
    exec_dropped: u64,
    signal_failures: u64,
    /// Records the decoder rejected (a kernel/decoder disagreement; never expected).
    undecoded: u64,
    /// Samples the kernel counted that never reached a ring and were not reported lost
    /// ([`perfring::sampler::Sampler::unreported_loss`]); part of `lost`.
    unreported: u64,
}

fn summary_text(s: &Summary) -> String {
    let mut out = format!(
        "\n{} overflows, {} wake-ups, {} lost, {} throttled in {:.6} s",
        s.overflows,
        s.wakeups,
        s.lost,
        s.throttled,
        s.duration.as_secs_f64()
    );
    if let Some(code) = s.exit_code {
        out += &format!("; exit status {code}");
    }
    action_lines(
        &mut out,
        s.exec_runs.map(|runs| (runs, s.exec_dropped)),
        s.signal_failures,
        s.undecoded,
    );
    if s.unreported > 0 {
        out += &format!(
            "\n{} samples were lost without a LOST record: threads overflowing at once on two \
             CPUs overwrote each other's records in the shared ring (the kernel's count says \
             they were taken); raise the period (-c) or watch one thread (-t TID)",
            s.unreported
        );
    }
    if s.lost > s.unreported {
        out += "\nrecords were lost: raise -m PAGES or the period (-c)";
    }
    out
}

/// The summary lines `watch` and `watch --when` share: what `--exec` did (its runs
/// and drops, if it was given), `--signal`'s failures and the undecodable records,
/// each on its own line after `out`, when there is something to say.
pub(crate) fn action_lines(
    out: &mut String,
    exec: Option<(u64, u64)>,
    signal_failures: u64,
    undecoded: u64,
) {
    if let Some((runs, dropped)) = exec {
        *out += &format!("\n--exec ran {runs} times, {dropped} dropped (queue full)");
    }
    if signal_failures > 0 {
        *out += &format!("\n--signal failed {signal_failures} times (the thread had exited)");
    }
    if undecoded > 0 {
        *out += &format!("\n{undecoded} records could not be decoded and were skipped");
    }
}

fn summary_json(s: &Summary) -> serde_json::Value {
    let mut v = serde_json::json!({
        "type": "summary",
        "overflows": s.overflows,
        "wakeups": s.wakeups,
        "lost": s.lost,
        "throttled": s.throttled,
        "duration_s": crate::json::float(s.duration.as_secs_f64()),
        "exit_code": s.exit_code,
    });
    let fields = v.as_object_mut().expect("an object");
    if let Some(runs) = s.exec_runs {
        fields.insert("exec_runs".into(), runs.into());
        fields.insert("exec_dropped".into(), s.exec_dropped.into());
    }
    if s.signal_failures > 0 {
        fields.insert("signal_failures".into(), s.signal_failures.into());
    }
    if s.unreported > 0 {
        fields.insert("unreported_lost".into(), s.unreported.into());
    }
    if s.undecoded > 0 {
        fields.insert("undecoded".into(), s.undecoded.into());
    }
    v
}
