//! `perfring stat`: count events over a command's run or a process's life, like
//! `perf stat`, using the library's launcher, counters and symbol resolver.

use std::time::{Duration, Instant};

use perfring::launch::{self, Waited};
use perfring::ring::RingSize;
use perfring::sampler::{Sampler, Target, TargetEnd};
use perfring::{Count, Counter, Event};

use crate::args::StatArgs;
use crate::json::{self, Json};
use crate::Failure;

/// One event's result.
#[derive(Debug)]
pub struct Line {
    pub event: String,
    pub count: Count,
}

/// What was counted, for how long, and how the command ended.
#[derive(Debug)]
pub struct Report {
    pub what: String,
    pub lines: Vec<Line>,
    pub duration: Duration,
    /// The command's exit code (128 + signal if killed); `None` for `-p`.
    pub exit_code: Option<i32>,
}

/// Runs `stat`: resolve every event, start or attach, wait, read.
pub fn run(args: &StatArgs) -> Result<Report, Failure> {
    match args.pid {
        Some(pid) => attach(args, pid),
        None => spawn(args),
    }
}

/// Counts `events` over `target` with a sampler: it opens what the target needs
/// (inherited counters on a command before its exec, or on every thread of a process)
/// and follows threads created later; its rings stay empty (counting events).
fn start(target: Target, events: Vec<Event>) -> Result<Sampler, Failure> {
    // One counter per task (no samples, so no ring is written): times that scale.
    let mut setup = Sampler::builder(target)
        .exact_periods(true)
        .ring_size(RingSize::Pages(1))
        .tracking_ring_size(RingSize::Pages(1));
    // What the user may count, as perf decides it: user space only where the kernel
    // may not be profiled (said once).
    let privileges = perfring::privilege::Privileges::current();
    let mut user_only = Vec::new();
    for event in events {
        let fitted = privileges
            .fit(Counter::builder_for(event), false)
            .map_err(Failure::Runtime)?;
        if fitted.user_only {
            user_only.push(fitted.builder.event().name().to_string());
        }
        setup = setup.event(fitted.builder);
    }
    crate::args::say_user_only(&user_only);
    setup.start().map_err(Failure::Runtime)
}

fn read_all(sampler: &Sampler) -> Result<Vec<Line>, Failure> {
    (0..sampler.events().len())
        .map(|i| {
            Ok(Line {
                event: sampler.events()[i].name().to_string(),
                count: sampler.read(i).map_err(Failure::Runtime)?,
            })
        })
        .collect()
}

fn spawn(args: &StatArgs) -> Result<Report, Failure> {
    let target = perfring::profiler::command(&args.command).expect("a command was given");
    // Symbol addresses in a PIE are predicted for its no-ASLR base: the session's
    // resolver says so.
    let resolved = perfring::profiler::resolve(target, &args.events).map_err(input)?;
    let started = Instant::now();
    // On error the sampler kills and reaps the command.
    let mut sampler = start(resolved.target, resolved.events)?;
    let status = wait_child(&mut sampler)?;
    let duration = started.elapsed();
    Ok(Report {
        what: args
            .command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        lines: read_all(&sampler)?,
        duration,
        exit_code: Some(status.code()),
    })
}

/// A bad event string is the user's input; a missing program is a run-time failure.
fn input(e: perfring::Error) -> Failure {
    if e.kind() == perfring::ErrorKind::NotFound && e.to_string().contains("start") {
        Failure::Runtime(e)
    } else {
        Failure::Input(e)
    }
}

/// Waits for the command; Ctrl-C goes to it (as to any program in the foreground),
/// and we report once it has ended.
fn wait_child(sampler: &mut Sampler) -> Result<launch::ExitStatus, Failure> {
    let pid = sampler.pid().unwrap_or_default();
    loop {
        match launch::wait_for_exit(pid, None).map_err(Failure::Runtime)? {
            Waited::Exited => {
                if let Some(TargetEnd::Exited(status)) =
                    sampler.target_ended().map_err(Failure::Runtime)?
                {
                    return Ok(status);
                }
            }
            // A terminal's Ctrl-C reaches the child too; a `kill -INT` of ours alone
            // is passed on.
            Waited::Interrupted => {
                let _ = sampler.signal_target(perfring::Signal::SIGINT);
            }
            Waited::TimedOut => {}
        }
    }
}

fn attach(args: &StatArgs, pid: i32) -> Result<Report, Failure> {
    let resolved = perfring::profiler::resolve(Target::Pid(pid), &args.events).map_err(input)?;
    let sampler = start(resolved.target, resolved.events)?;
    let started = Instant::now();
    launch::wait_for_exit(pid, args.duration).map_err(Failure::Runtime)?;
    let duration = started.elapsed();
    Ok(Report {
        what: format!("process id {pid}"),
        lines: read_all(&sampler)?,
        duration,
        exit_code: None,
    })
}

fn percent_running(c: &Count) -> Option<f64> {
    match (c.time_enabled, c.time_running) {
        (Some(e), Some(r)) if e > 0 => Some(100.0 * r as f64 / e as f64),
        _ => None,
    }
}

/// `perf stat`'s table: the scaled count, the event, and the share of time it was
/// actually counting when that was less than all of it.
pub fn text(r: &Report) -> String {
    let mut out = format!("\n Performance counter stats for '{}':\n\n", r.what);
    for l in &r.lines {
        let pct = percent_running(&l.count);
        match pct {
            // Enabled but never scheduled on the PMU: there is no count to scale.
            Some(_) if l.count.time_running == Some(0) => {
                out += &format!("{:>20}      {}\n", "<not counted>", l.event);
            }
            Some(p) if p < 100.0 => {
                out += &format!(
                    "{:>20.0}      {:<40} ({p:.2}%, raw {})\n",
                    l.count.scaled(),
                    l.event,
                    l.count.value
                );
            }
            _ => out += &format!("{:>20}      {}\n", l.count.value, l.event),
        }
    }
    out += &format!(
        "\n{:>20.9} seconds time elapsed\n",
        r.duration.as_secs_f64()
    );
    if let Some(code) = r.exit_code.filter(|c| *c != 0) {
        out += &format!("{:>20} exit status\n", code);
    }
    out
}

/// One JSON object: `events` (value, scaled, times), `duration_s`, `exit_code`.
pub fn json(r: &Report) -> Json {
    let events = r
        .lines
        .iter()
        .map(|l| {
            json::object([
                ("event", json::str(&l.event)),
                ("value", Json::from(l.count.value)),
                ("scaled", json::float(l.count.scaled())),
                ("time_enabled", json::opt(l.count.time_enabled, Json::from)),
                ("time_running", json::opt(l.count.time_running, Json::from)),
            ])
        })
        .collect();
    json::object([
        ("events", Json::Array(events)),
        ("duration_s", json::float(r.duration.as_secs_f64())),
        ("exit_code", json::opt(r.exit_code, Json::from)),
    ])
}
