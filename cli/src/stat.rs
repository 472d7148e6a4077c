//! `perfring stat`: perf stat's flags over `perfring::stat` — a command (`-r N`
//! times), a process, a thread or CPUs counted to the end or every `-I` interval, and
//! printed as perf prints it (`stat_table`), to stderr as perf does (or `-o FILE`), so
//! that the command's own output on stdout stays apart.

use perfring::launch::Waited;
use perfring::sampler::Target;
use perfring::stat::{Reading, Runs, Spread, Stat, StatBuilder};
use std::io::Write;

use crate::args::{CpuChoice, StatArgs};
use crate::stat_table::{self, By, Footer, Format, Style};
use crate::Failure;

/// Runs `stat` to the end; returns the command's exit code (of its last run).
pub fn run(args: &StatArgs) -> Result<Option<i32>, Failure> {
    let mut out = Report::open(args)?;
    let builder = builder(args)?;
    let format = if args.json {
        Format::Json
    } else if let Some(sep) = &args.csv {
        Format::Csv(sep.clone())
    } else {
        Format::Table
    };
    let by = if args.per_thread {
        By::Thread
    } else if args.no_aggr {
        By::Cpu
    } else {
        By::Total
    };
    let what = title(args);
    let mut runs = Runs::new();
    let mut last = None;
    for _ in 0..args.repeat {
        let (reading, exit) = one_run(args, builder.clone(), &format, by, &mut out)?;
        if let Some((status, _)) = exit {
            last = Some(status.code());
        }
        if args.interval.is_some() {
            continue;
        }
        if args.repeat > 1 {
            runs.add(&reading);
            continue;
        }
        let style = Style {
            format: format.clone(),
            runs: 1,
            interval: None,
        };
        let mut wall = Spread::default();
        wall.add(reading.elapsed.as_nanos() as f64);
        let mut text = stat_table::header(&style, &what);
        text += &body(&style, by, &reading, reading.elapsed.as_nanos() as f64);
        // perf shows the command's CPU times when it counted the command's tasks.
        let usage = exit.filter(|_| args.cpus.is_none()).map(|(_, u)| u);
        text += &stat_table::footer(
            &style,
            &Footer {
                wall_ns: wall,
                usage,
            },
        );
        out.write(&text)?;
    }
    if args.repeat > 1 {
        let style = Style {
            format,
            runs: args.repeat,
            interval: None,
        };
        let mut text = stat_table::header(&style, &what);
        text += &stat_table::rows(&style, &runs.rows(), runs.wall_ns().mean());
        text += &stat_table::footer(
            &style,
            &Footer {
                wall_ns: runs.wall_ns(),
                usage: None,
            },
        );
        out.write(&text)?;
    }
    Ok(last)
}

/// The library's counters for these flags, with the events resolved against the
/// target's program (`mem:SYMBOL` in a command starts it without ASLR).
fn builder(args: &StatArgs) -> Result<StatBuilder, Failure> {
    let target = match (&args.command[..], args.pid, args.tid, &args.cpus) {
        ([_, ..], ..) => perfring::profiler::command(&args.command).expect("a command"),
        ([], Some(pid), ..) => Target::Pid(pid),
        ([], None, Some(tid), _) => Target::Tid(tid),
        ([], None, None, Some(cpus)) => Target::Cpus(cpu_list(cpus)?),
        ([], None, None, None) => unreachable!("the parser requires a target"),
    };
    let resolved = perfring::profiler::resolve(target, &args.events).map_err(input)?;
    let mut b = Stat::builder(resolved.target);
    for e in resolved.events {
        b = b.event(e);
    }
    if let Some(cpus) = &args.cpus {
        b = b.cpus(cpu_list(cpus)?);
    }
    Ok(b)
}

fn cpu_list(c: &CpuChoice) -> Result<Vec<i32>, Failure> {
    match c {
        CpuChoice::All => perfring::counter::online_cpus().map_err(Failure::Runtime),
        CpuChoice::List(list, _) => Ok(list.clone()),
    }
}

/// A bad event string is the user's input; a missing program is a run-time failure.
fn input(e: perfring::Error) -> Failure {
    if e.kind() == perfring::ErrorKind::NotFound && e.to_string().contains("start") {
        Failure::Runtime(e)
    } else {
        Failure::Input(e)
    }
}

/// What perf's title says was counted.
fn title(args: &StatArgs) -> String {
    match (&args.cpus, args.pid, args.tid) {
        (Some(CpuChoice::All), ..) => "'system wide'".into(),
        (Some(CpuChoice::List(_, text)), ..) => format!("'CPU(s) {text}'"),
        (None, Some(pid), _) => format!("process id '{pid}'"),
        (None, None, Some(tid)) => format!("thread id '{tid}'"),
        (None, None, None) => format!(
            "'{}'",
            args.command
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// The rows of a reading, split as asked.
fn body(style: &Style, by: By, reading: &Reading, wall_ns: f64) -> String {
    match by {
        By::Total => stat_table::rows(style, &reading.rows(), wall_ns),
        By::Thread | By::Cpu => stat_table::parts(style, &reading.rows_by_part(), wall_ns),
    }
}

/// One run: open, start, wait (printing intervals), read. Returns the final reading
/// and the command's status and CPU times.
fn one_run(
    args: &StatArgs,
    builder: StatBuilder,
    format: &Format,
    by: By,
    out: &mut Report,
) -> Result<
    (
        Reading,
        Option<(perfring::launch::ExitStatus, perfring::launch::Usage)>,
    ),
    Failure,
> {
    let mut stat = builder.open().map_err(Failure::Runtime)?;
    stat.start().map_err(Failure::Runtime)?;
    let spawned = !args.command.is_empty();
    let mut previous: Option<Reading> = None;
    let mut printed_header = false;
    let mut next_tick = args.interval;
    loop {
        let now = stat.read().map_err(Failure::Runtime)?.elapsed;
        let timeout = match (next_tick, args.duration) {
            (Some(t), Some(d)) => Some(t.min(d).saturating_sub(now)),
            (Some(t), None) => Some(t.saturating_sub(now)),
            (None, Some(d)) => Some(d.saturating_sub(now)),
            (None, None) => None,
        };
        let waited = stat.wait(timeout).map_err(Failure::Runtime)?;
        let ending = match waited {
            Waited::Exited => true,
            // A terminal's Ctrl-C reaches the command too; one sent to us alone is
            // passed on, and we report once it has ended. Without a command, it ends.
            Waited::Interrupted if spawned => {
                let _ = stat.signal_target(perfring::Signal::SIGINT);
                false
            }
            Waited::Interrupted => true,
            Waited::TimedOut => {
                let now = stat.read().map_err(Failure::Runtime)?.elapsed;
                args.duration.is_some_and(|d| now >= d)
            }
        };
        if ending {
            stat.stop();
        }
        if let Some(every) = args.interval {
            let reading = stat.read().map_err(Failure::Runtime)?;
            let due = next_tick.is_some_and(|t| reading.elapsed >= t);
            if due || ending {
                let style = Style {
                    format: format.clone(),
                    runs: 1,
                    interval: Some(reading.elapsed),
                };
                let delta = match &previous {
                    Some(p) => reading.since(p),
                    None => reading.clone(),
                };
                let mut text = String::new();
                if !printed_header {
                    text += &stat_table::interval_header(&style, by);
                    printed_header = true;
                }
                // perf divides by the interval asked for, also for the last, shorter one.
                text += &body(&style, by, &delta, every.as_nanos() as f64);
                out.write(&text)?;
                let now = reading.elapsed;
                previous = Some(reading);
                while let Some(t) = next_tick.filter(|t| *t <= now) {
                    next_tick = Some(t + every);
                }
            }
        }
        if ending {
            break;
        }
    }
    let reading = stat.read().map_err(Failure::Runtime)?;
    Ok((reading, stat.exit()))
}

/// Where the report goes: stderr, as perf stat writes it, or `-o FILE`.
struct Report {
    file: Option<(std::fs::File, std::path::PathBuf)>,
}

impl Report {
    fn open(args: &StatArgs) -> Result<Report, Failure> {
        let file = match &args.output {
            Some(path) => Some((
                std::fs::File::create(path).map_err(|e| {
                    Failure::Runtime(perfring::Error::from_errno(
                        format!("create {}", path.display()),
                        e,
                    ))
                })?,
                path.clone(),
            )),
            None => None,
        };
        Ok(Report { file })
    }

    fn write(&mut self, text: &str) -> Result<(), Failure> {
        let (result, what) = match &mut self.file {
            Some((f, path)) => (
                f.write_all(text.as_bytes()).and_then(|()| f.flush()),
                path.display().to_string(),
            ),
            None => {
                let mut e = std::io::stderr().lock();
                (
                    e.write_all(text.as_bytes()).and_then(|()| e.flush()),
                    "stderr".to_string(),
                )
            }
        };
        result
            .map_err(|e| Failure::Runtime(perfring::Error::from_errno(format!("write {what}"), e)))
    }
}
