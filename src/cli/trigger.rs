//! `perfring watch --when EXPR`: a line per threshold crossing of a rate or ratio
//! (from `perfring::trigger`), the `watch` actions on each, and a summary. The
//! group, ring, windows and crossings are the library's; this file prints and acts.

use std::io::Write;
use std::time::{Duration, Instant};

use perfring::launch::{self, Interrupts};
use perfring::sampler::{ExecQueue, Sampler, Target, TargetEnd};
use perfring::symbols::{is_symbolic, resolve_event, TargetImage};
use perfring::trigger::{Crossing, Expr, Measure, OpenOptions, Scope, Trigger, Update};

use super::args::{WatchArgs, WhenArgs};
use super::json::{self, Json};
use super::Failure;

/// How often the loop wakes without crossings, to notice the target's exit and Ctrl-C.
const TICK: Duration = Duration::from_millis(50);
/// Crossings waiting for `--exec` beyond which new ones are dropped (and counted).
const EXEC_QUEUE: usize = 1024;
/// How long `--stop-at` waits to see the target stopped.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long a spawned command gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How the watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The target exited.
    TargetExited,
    /// `--stop-after N` reached: a command is terminated.
    StopAfter,
    /// `--stop-at N` reached: the process was stopped and left so.
    StoppedAt,
    /// `-p`/`-t`: Ctrl-C or SIGTERM.
    Interrupted,
    /// Our stdout was closed (`| head`).
    OutputClosed,
}

/// Leaves the target as `end` requires; returns a command's exit code.
fn exit_code(sampler: &mut Sampler, end: End) -> Option<i32> {
    match (sampler.target_ended(), end) {
        (Ok(Some(TargetEnd::Exited(s))), _) => Some(s.code()),
        // Stopped on purpose: left so (it is reparented to init when we exit).
        (_, End::StoppedAt) => None,
        // Exited already (reaped), or ended early by us: terminated, as perf does.
        _ => sampler.terminate(TERM_GRACE).map(|s| s.code()),
    }
}

/// What the summary reports.
#[derive(Debug, Default)]
struct Summary {
    crossings: u64,
    windows: u64,
    lost: u64,
    throttled: u64,
    undecoded: u64,
    rejected: u64,
    /// Threads (or processes) for which the condition still held at the end.
    active: Vec<u32>,
    duration_s: f64,
    exit_code: Option<i32>,
    exec_runs: Option<u64>,
    exec_dropped: u64,
    signal_failures: u64,
}

/// Prints crossings and runs the actions.
struct Reporter<'a> {
    args: &'a WatchArgs,
    expr: &'a Expr,
    events: Vec<String>,
    start_ns: u64,
    seq: u64,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    exec: Option<ExecQueue>,
    signal_failures: u64,
    end: Option<End>,
}

impl Reporter<'_> {
    fn crossing(&mut self, c: &Crossing) {
        if self.end.is_some() {
            return;
        }
        self.seq += 1;
        let w = &c.window;
        let line = if self.args.json {
            let deltas = self
                .events
                .iter()
                .zip(&w.deltas)
                .map(|(name, d)| (name.clone(), Json::from(*d)));
            json::object([
                ("type", json::str("trigger")),
                ("edge", json::str(c.edge.as_str())),
                ("value", json::float(c.value)),
                ("threshold", json::float(c.threshold)),
                ("tid", Json::from(w.tid)),
                ("time_ns", Json::from(w.end_ns)),
                ("pid", Json::from(w.pid)),
                ("seq", Json::from(self.seq)),
                ("window_seq", Json::from(w.seq)),
                ("window_start_ns", json::opt(w.start_ns, Json::from)),
                ("deltas", json::object(deltas)),
            ])
            .to_string()
        } else {
            let unit = match self.expr.measure() {
                Measure::Rate(u) => format!("/{}", u.as_str()),
                Measure::Ratio => String::new(),
            };
            format!(
                "{:>12.6} {:<4} {}{unit} (threshold {}{unit}) tid {} [{}]",
                w.end_ns.saturating_sub(self.start_ns) as f64 / 1e9,
                c.edge.as_str(),
                significant(c.value),
                c.threshold,
                w.tid,
                self.expr
            )
        };
        if writeln!(self.out, "{line}").is_err() {
            self.end = Some(End::OutputClosed);
            return;
        }
        let (pid, tid) = (w.pid as i32, w.tid as i32);
        if let Some(sig) = self.args.signal {
            if launch::signal_thread(pid, tid, sig).is_err() {
                self.signal_failures += 1;
            }
        }
        if let Some(exec) = &mut self.exec {
            exec.submit(vec![
                ("PERFRING_EDGE", c.edge.as_str().to_string()),
                ("PERFRING_VALUE", c.value.to_string()),
                ("PERFRING_THRESHOLD", c.threshold.to_string()),
                ("PERFRING_EXPR", self.expr.to_string()),
                ("PERFRING_PID", w.pid.to_string()),
                ("PERFRING_TID", w.tid.to_string()),
                ("PERFRING_SEQ", self.seq.to_string()),
            ]);
        }
        if self.args.stop_at == Some(self.seq) {
            let _ = self.out.flush();
            match launch::stop_process(pid, STOP_WAIT) {
                Ok(()) => {
                    eprintln!(
                        "perfring: stopped process {pid} at crossing {}; resume it with: kill -CONT {pid}",
                        self.seq
                    );
                    self.end = Some(End::StoppedAt);
                }
                Err(e) => {
                    eprintln!("perfring: --stop-at: {e}");
                    self.end = Some(End::TargetExited);
                }
            }
            return;
        }
        if self.args.stop_after == Some(self.seq) {
            self.end = Some(End::StopAfter);
        }
    }
}

/// A value for the text line: one decimal for large rates, four for small ratios.
fn significant(v: f64) -> String {
    format!("{:.*}", if v.abs() >= 100.0 { 1 } else { 4 }, v)
}

/// The library trigger for `--when` and its companions.
fn trigger(when: &WhenArgs, image: &TargetImage) -> Result<Trigger, Failure> {
    let expr =
        Expr::parse_with(&when.expr, &mut |s| resolve_event(s, image)).map_err(Failure::Input)?;
    let mut t = Trigger::new(expr);
    if let Some(span) = when.window {
        t = t.span(span);
    }
    if let Some(h) = when.hysteresis {
        t = t.hysteresis(h);
    }
    if let Some(d) = when.min_duration {
        t = t.min_duration(d);
    }
    if when.per_process {
        t = t.scope(Scope::Process);
    }
    // Usage errors (a rate with a window in events) before anything starts.
    t.plan()
        .map_err(|e| Failure::Usage(format!("watch --when: {e}")))?;
    Ok(t)
}

/// Runs `watch --when` to the end; returns the command's exit code, if it is to be ours.
pub fn run(args: &WatchArgs) -> Result<Option<i32>, Failure> {
    let when = args.when.as_ref().expect("run only with --when");
    let (image, program) = match (args.command.first(), args.pid.or(args.tid)) {
        (Some(name), _) => {
            let Some(path) = launch::find_program(name) else {
                return Err(Failure::Runtime(
                    launch::Command::new(name)
                        .spawn_stopped()
                        .expect_err("find_program found nothing"),
                ));
            };
            (TargetImage::Spawned(path.clone()), Some(path))
        }
        (None, Some(pid)) => (TargetImage::Process(pid), None),
        (None, None) => (TargetImage::None, None),
    };
    let trigger = trigger(when, &image)?;
    let expr = trigger.expr().clone();

    let no_aslr = [Some(expr.numerator()), expr.denominator()]
        .into_iter()
        .flatten()
        .any(|op| is_symbolic(&expr.text()[op.span.clone()]));
    // A command: its threads and children inherit the group from its exec on. -p:
    // every thread it has, each inheriting to the threads it creates. -t: one.
    let target = match (&program, args.pid, args.tid) {
        (Some(_), _, _) => Target::Command(
            launch::Command::new(&args.command[0])
                .args(&args.command[1..])
                .no_aslr(no_aslr),
        ),
        (None, Some(pid), _) => Target::Pid(pid),
        (None, None, Some(tid)) => Target::Tid(tid),
        (None, None, None) => unreachable!("parse_watch requires a target"),
    };
    let options = OpenOptions {
        ring: perfring::ring::RingSize::Pages(args.pages.unwrap_or(64)),
    };
    let spawned = program.is_some();
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let start_ns = perfring::counter::clock_ns(libc::CLOCK_MONOTONIC);
    let started = Instant::now();
    // Opening fails before the command runs (an event this machine lacks: the
    // doctor's message); the sampler then kills and reaps it.
    let mut armed = trigger.open(target, options).map_err(Failure::Runtime)?;
    let mut rep = Reporter {
        args,
        expr: &expr,
        events: armed.events().to_vec(),
        start_ns,
        seq: 0,
        out: std::io::BufWriter::new(std::io::stdout().lock()),
        exec: args.exec.clone().map(|c| ExecQueue::start(c, EXEC_QUEUE)),
        signal_failures: 0,
        end: None,
    };
    let result: Result<End, Failure> = loop {
        let polled = armed.poll(Some(TICK), |u| {
            if let Update::Crossing(c) = u {
                rep.crossing(c)
            }
        });
        let polled = match polled {
            Ok(p) => p,
            Err(e) => break Err(Failure::Runtime(e)),
        };
        let _ = rep.out.flush();
        if let Some(end) = rep.end {
            break Ok(end);
        }
        if let Some(sig) = interrupts.take() {
            if !spawned {
                break Ok(End::Interrupted);
            }
            // A terminal's Ctrl-C reaches the command too; pass ours on.
            let _ = perfring::Signal::new(sig).and_then(|s| armed.sampler().signal_target(s));
        }
        if polled.hup {
            break Ok(End::TargetExited);
        }
    };
    // What is left in the rings once the target has gone.
    let drained = armed.drain(|u| {
        if let Update::Crossing(c) = u {
            rep.crossing(c)
        }
    });
    let sampler = armed.sampler_mut();
    let end = match result.and_then(|end| drained.map(|_| end).map_err(Failure::Runtime)) {
        Ok(end) => rep.end.unwrap_or(end),
        Err(e) => {
            sampler.terminate(TERM_GRACE);
            return Err(e);
        }
    };
    let exit_code = exit_code(sampler, end);
    let a = armed.accounting();
    let mut s = Summary {
        crossings: rep.seq,
        windows: armed.evaluator().windows(),
        lost: a.lost + a.lost_samples,
        throttled: a.throttled,
        undecoded: a.undecoded,
        rejected: armed.rejected(),
        active: armed.evaluator().active(),
        duration_s: started.elapsed().as_secs_f64(),
        exit_code,
        signal_failures: rep.signal_failures,
        ..Summary::default()
    };
    if let Some(exec) = &mut rep.exec {
        s.exec_runs = Some(exec.finish());
        s.exec_dropped = exec.dropped();
    }
    drop(armed);
    drop(interrupts);
    let text = if args.json {
        summary_json(&s).to_string()
    } else {
        summary_text(&s)
    };
    let _ = writeln!(rep.out, "{text}");
    let _ = rep.out.flush();
    Ok(match end {
        End::TargetExited | End::Interrupted => exit_code,
        _ => None,
    })
}

fn summary_text(s: &Summary) -> String {
    let plural = |n: u64, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut out = format!(
        "\n{} in {}, {} lost, {} throttled in {:.6} s",
        plural(s.crossings, "crossing"),
        plural(s.windows, "window"),
        s.lost,
        s.throttled,
        s.duration_s
    );
    if let Some(code) = s.exit_code {
        out += &format!("; exit status {code}");
    }
    if !s.active.is_empty() {
        let ids: Vec<String> = s.active.iter().map(u32::to_string).collect();
        out += &format!(
            "\nthe condition still held at the end for: {}",
            ids.join(", ")
        );
    }
    super::watch::action_lines(
        &mut out,
        s.exec_runs.map(|runs| (runs, s.exec_dropped)),
        s.signal_failures,
        s.undecoded,
    );
    if s.rejected > 0 {
        out += &format!(
            "\n{} samples were damaged in the ring (threads overflowing at once on two CPUs) and were skipped",
            s.rejected
        );
    }
    if s.lost > 0 {
        out += "\nsamples were lost, so some windows were longer: raise -m PAGES or --window";
    }
    out
}

fn summary_json(s: &Summary) -> Json {
    let mut fields = vec![
        ("type", json::str("summary")),
        ("crossings", Json::from(s.crossings)),
        ("windows", Json::from(s.windows)),
        ("lost", Json::from(s.lost)),
        ("throttled", Json::from(s.throttled)),
        ("duration_s", json::float(s.duration_s)),
        ("exit_code", json::opt(s.exit_code, Json::from)),
        (
            "active_at_end",
            Json::Array(s.active.iter().map(|&t| Json::from(t)).collect()),
        ),
    ];
    if let Some(runs) = s.exec_runs {
        fields.push(("exec_runs", Json::from(runs)));
        fields.push(("exec_dropped", Json::from(s.exec_dropped)));
    }
    if s.signal_failures > 0 {
        fields.push(("signal_failures", Json::from(s.signal_failures)));
    }
    if s.undecoded > 0 {
        fields.push(("undecoded", Json::from(s.undecoded)));
    }
    if s.rejected > 0 {
        fields.push(("rejected", Json::from(s.rejected)));
    }
    json::object(fields)
}
