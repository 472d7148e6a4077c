//! Counting events over a target, as `perf stat` does: a command from its `exec` with
//! its threads and children, a running process, a thread, or everything on some CPUs;
//! read at the end, at intervals, per thread or per CPU, and over repeated runs.
//!
//! # Brief overview
//! - [`Stat::builder`] takes a [`Target`] (the sampler's: `-- CMD`, `-p`, `-t`, `-C`)
//!   and events; [`StatBuilder::cpus`] counts on CPUs instead, for as long as the
//!   target runs (`perf stat -a -- CMD`). [`StatBuilder::open`] opens every counter (a
//!   command is forked stopped first); [`Stat::start`] starts counting (and the
//!   command).
//! - An event the machine cannot count (`cycles` without a hardware PMU: the kernel's
//!   `ENOENT`, `EOPNOTSUPP`, `EINVAL`, `ENOSYS` or `ENXIO`, as perf decides) is kept
//!   and reported [`Status::NotSupported`]; the others are counted. Where the kernel
//!   refuses to count the kernel (`perf_event_paranoid` 2 without privilege), the
//!   event is counted in user space only and named with `:u`, as perf does.
//! - [`Stat::read`] gives a [`Reading`]: each event's total and its parts (per thread
//!   or per CPU), with times enabled and running; [`Reading::since`] the difference
//!   of two (`-I`); [`Reading::rows`] what perf prints, scaled for multiplexing;
//!   [`metric::derive`] perf's derived metrics; [`Runs`] the mean and spread of
//!   repeated runs (`-r`).
//! - [`Stat::wait`] waits for the target's end, Ctrl-C or a timeout; [`Stat::exit`]
//!   is then the command's status and CPU times (`wait4`).
//!
//! # What is opened
//! A command, a process (each of its threads) or a thread: one counter per event and
//! task, `inherit`ed, so threads and children created later are counted into their
//! creator's counter (a command's from its `exec`: `enable_on_exec`). CPUs: one
//! counter per event and CPU. No ring is mapped: counting needs none.
//!
//! # Examples
//! ```no_run
//! use perfring::launch::Command;
//! use perfring::sampler::Target;
//! use perfring::stat::{metric, Stat};
//! use perfring::Event;
//!
//! let mut stat = Stat::builder(Target::Command(Command::new("ls")))
//!     .event(Event::parse("task-clock")?)
//!     .event(Event::parse("page-faults")?)
//!     .open()?;
//! stat.start()?;
//! while stat.wait(None)? != perfring::launch::Waited::Exited {}
//! let reading = stat.read()?;
//! let rows = reading.rows();
//! for (i, row) in rows.iter().enumerate() {
//!     let m = metric::derive(&rows, i, reading.elapsed.as_nanos() as f64);
//!     println!("{} {} {:?}", row.value, row.name, m.map(|m| m.unit));
//! }
//! # Ok::<(), perfring::Error>(())
//! ```

pub mod metric;
mod runs;

pub use runs::{Runs, Spread};

use std::time::{Duration, Instant};

use crate::console::Interrupts;
use crate::counter::{Count, Counter, Scope};
use crate::launch::{self, Child, ExitStatus, Stopped, Usage, Waited};
use crate::sampler::Target;
use crate::{Error, ErrorKind, Event, Result};

/// How often a thread or CPU target without a process to watch checks for Ctrl-C.
const TICK: Duration = Duration::from_millis(20);

/// Configures a [`Stat`]; from [`Stat::builder`].
#[derive(Debug, Clone)]
pub struct StatBuilder {
    target: Target,
    events: Vec<Event>,
    cpus: Option<Vec<i32>>,
}

/// Whose count a part of an event's total is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// A thread of the target (per-thread counts: `-p`, `-t`).
    Thread {
        /// Its process.
        pid: libc::pid_t,
        /// The thread.
        tid: libc::pid_t,
        /// Its name (`comm`) when it was attached.
        comm: String,
    },
    /// A CPU (`-a`, `-C`).
    Cpu(i32),
    /// A command's whole tree (one inherited counter).
    Command,
}

/// One event's counters.
#[derive(Debug)]
struct Opened {
    /// The name perf would print (with `:u` when the kernel had to be excluded).
    name: String,
    event: Event,
    /// `None` when the machine cannot count it.
    counters: Option<Vec<(Part, Counter)>>,
}

/// Counters counting a target; see the [module docs](self).
#[derive(Debug)]
pub struct Stat {
    events: Vec<Opened>,
    watch: Watch,
    stopped: Option<Stopped>,
    child: Option<Child>,
    exit: Option<(ExitStatus, Usage)>,
    started: Option<Instant>,
    ended: Option<Instant>,
}

/// What tells the end of counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    Command,
    Pid(libc::pid_t),
    Tid(libc::pid_t),
    Nothing,
}

/// Each event's counts at one moment.
#[derive(Debug, Clone)]
pub struct Reading {
    /// Time since counting started (frozen at the target's end).
    pub elapsed: Duration,
    /// One per event, in the order they were added.
    pub events: Vec<EventCount>,
}

/// One event's counts in a [`Reading`].
#[derive(Debug, Clone)]
pub struct EventCount {
    /// The name to print (the event's, with `:u` if the kernel was excluded).
    pub name: String,
    /// The event.
    pub event: Event,
    /// Whether the machine could count it (else `total` is zero and `parts` empty).
    pub supported: bool,
    /// The sum of its parts: value, times enabled and running.
    pub total: Count,
    /// Per thread (`-p`, `-t`), per CPU (`-a`, `-C`), or the command's one counter.
    pub parts: Vec<(Part, Count)>,
}

/// Whether a row has a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Counted for some time: the value is meaningful.
    Counted,
    /// Opened but never running (perf's `<not counted>`): e.g. a thread that did not
    /// run during an interval.
    NotCounted,
    /// The machine cannot count it (perf's `<not supported>`).
    NotSupported,
}

/// One line of perf stat's table: an event's value in one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The event's name as printed.
    pub name: String,
    /// The event.
    pub event: Event,
    /// Whether there is a value.
    pub status: Status,
    /// The count scaled for multiplexing (`value × enabled / running`), in the
    /// kernel's unit (nanoseconds for clocks; see [`metric::unit_of`]).
    pub value: f64,
    /// Nanoseconds the event was enabled.
    pub enabled: u64,
    /// Nanoseconds it was counting (less than `enabled` when multiplexed).
    pub running: u64,
    /// Over repeated runs: the spread of `value` in percent of it (`( +- x% )`).
    pub noise_pct: Option<f64>,
}

impl Row {
    fn of(e: &EventCount, c: &Count) -> Row {
        let (enabled, running) = (c.time_enabled.unwrap_or(0), c.time_running.unwrap_or(0));
        Row {
            name: e.name.clone(),
            event: e.event.clone(),
            status: if !e.supported {
                Status::NotSupported
            } else if enabled == 0 || running == 0 {
                Status::NotCounted
            } else {
                Status::Counted
            },
            value: c.scaled(),
            enabled,
            running,
            noise_pct: None,
        }
    }

    /// The percentage of the enabled time the event was counting, when it is less
    /// than all of it (multiplexed): perf's `(xx.xx%)`.
    pub fn multiplexed_pct(&self) -> Option<f64> {
        (self.running != self.enabled && self.enabled > 0)
            .then(|| 100.0 * self.running as f64 / self.enabled as f64)
    }
}

impl Reading {
    /// One row per event: its total.
    pub fn rows(&self) -> Vec<Row> {
        self.events.iter().map(|e| Row::of(e, &e.total)).collect()
    }

    /// One list of rows per part (thread or CPU), in the order the parts were opened;
    /// events without that part (not supported) get a row too.
    pub fn rows_by_part(&self) -> Vec<(Part, Vec<Row>)> {
        let mut parts: Vec<Part> = Vec::new();
        for e in &self.events {
            for (p, _) in &e.parts {
                if !parts.contains(p) {
                    parts.push(p.clone());
                }
            }
        }
        parts
            .into_iter()
            .map(|p| {
                let rows = self
                    .events
                    .iter()
                    .map(|e| match e.parts.iter().find(|(q, _)| *q == p) {
                        Some((_, c)) => Row::of(e, c),
                        None => Row::of(e, &Count::default()),
                    })
                    .collect();
                (p, rows)
            })
            .collect()
    }

    /// What was counted between `earlier` and this reading (perf's `-I` intervals):
    /// values and times subtracted, `elapsed` the interval's length.
    pub fn since(&self, earlier: &Reading) -> Reading {
        let minus = |a: &Count, b: Option<&Count>| {
            let Some(b) = b else { return *a };
            let sub = |x: Option<u64>, y: Option<u64>| x.map(|x| x.saturating_sub(y.unwrap_or(0)));
            Count {
                value: a.value.saturating_sub(b.value),
                time_enabled: sub(a.time_enabled, b.time_enabled),
                time_running: sub(a.time_running, b.time_running),
                id: a.id,
                lost: a.lost,
            }
        };
        let events = self
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let before = earlier.events.get(i);
                EventCount {
                    total: minus(&e.total, before.map(|b| &b.total)),
                    parts: e
                        .parts
                        .iter()
                        .map(|(p, c)| {
                            let b = before.and_then(|b| b.parts.iter().find(|(q, _)| q == p));
                            (p.clone(), minus(c, b.map(|(_, c)| c)))
                        })
                        .collect(),
                    ..e.clone()
                }
            })
            .collect();
        Reading {
            elapsed: self.elapsed.saturating_sub(earlier.elapsed),
            events,
        }
    }
}

impl Stat {
    /// Starts configuring counters for `target`.
    pub fn builder(target: Target) -> StatBuilder {
        StatBuilder {
            target,
            events: Vec::new(),
            cpus: None,
        }
    }
}

impl StatBuilder {
    /// Adds an event (its index in [`Reading::events`] is the number added before).
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Counts everything that runs on `cpus` (`perf stat -a`/`-C`), for as long as the
    /// target runs (a command) or until interrupted ([`Target::Cpus`] needs no call).
    pub fn cpus(mut self, cpus: Vec<i32>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Opens every counter; a command is forked, stopped before its `exec`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] without events or CPUs; a command that cannot be
    /// started; a process or thread that does not exist; any error of opening a
    /// counter other than "not supported" (which is reported per event, not as an
    /// error), e.g. [`ErrorKind::PermissionDenied`] for CPUs without privilege. A
    /// command forked before the error is killed and reaped.
    pub fn open(self) -> Result<Stat> {
        if self.events.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "open the stat counters",
                "no events were given",
            )
            .with_fix("add an event (e.g. task-clock)"));
        }
        let cpus = match (&self.target, &self.cpus) {
            (_, Some(list)) | (Target::Cpus(list), None) => Some(list.clone()),
            _ => None,
        };
        if cpus.as_ref().is_some_and(Vec::is_empty) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "open the stat counters",
                "the CPU list is empty",
            )
            .with_fix("give CPUs such as 0 or 0-3 (see /sys/devices/system/cpu/online)"));
        }
        let (mut stopped, watch) = match &self.target {
            Target::Command(cmd) => (Some(cmd.spawn_stopped()?), Watch::Command),
            Target::Pid(pid) => (None, Watch::Pid(*pid)),
            Target::Tid(tid) => (None, Watch::Tid(*tid)),
            Target::Cpus(_) => (None, Watch::Nothing),
        };
        // Who each event's counters watch.
        let whos: Vec<(Part, Scope)> = match (&cpus, &self.target) {
            (Some(list), _) => list
                .iter()
                .map(|&c| (Part::Cpu(c), Scope::Cpu(c)))
                .collect(),
            (None, Target::Command(_)) => {
                let pid = stopped.as_ref().map_or(0, Stopped::pid);
                vec![(Part::Command, Scope::Thread(pid))]
            }
            (None, Target::Pid(pid)) => threads_of(*pid)?,
            (None, Target::Tid(tid)) => {
                let pid = crate::proc::tgid(*tid).unwrap_or(*tid);
                vec![(thread_part(pid, *tid), Scope::Thread(*tid))]
            }
            (None, _) => unreachable!("Target::Cpus has a CPU list"),
        };
        let task = cpus.is_none();
        let on_exec = task && watch == Watch::Command;
        let mut events = Vec::with_capacity(self.events.len());
        let privileges = crate::privilege::Privileges::current();
        for event in self.events {
            let opened = open_event(&privileges, event, &whos, task, on_exec);
            match opened {
                Ok(o) => events.push(o),
                Err(e) => {
                    // Dropping the stopped command kills and reaps it.
                    drop(stopped.take());
                    return Err(e);
                }
            }
        }
        Ok(Stat {
            events,
            watch,
            stopped,
            child: None,
            exit: None,
            started: None,
            ended: None,
        })
    }
}

/// Every thread of `pid`, listed again until no new one appears (a thread created
/// while the list was read is found in the next round).
fn threads_of(pid: libc::pid_t) -> Result<Vec<(Part, Scope)>> {
    let mut seen: Vec<libc::pid_t> = Vec::new();
    loop {
        let now = crate::proc::threads(pid)?;
        let new: Vec<_> = now.into_iter().filter(|t| !seen.contains(t)).collect();
        if new.is_empty() {
            break;
        }
        seen.extend(new);
    }
    Ok(seen
        .into_iter()
        .map(|t| (thread_part(pid, t), Scope::Thread(t)))
        .collect())
}

fn thread_part(pid: libc::pid_t, tid: libc::pid_t) -> Part {
    Part::Thread {
        pid,
        tid,
        comm: crate::proc::comm(pid, tid)
            .map(|c| String::from_utf8_lossy(&c).into_owned())
            .unwrap_or_default(),
    }
}

/// `errno`s for which perf stat reports an event `<not supported>` and goes on.
fn not_supported(e: &Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::ENOENT | libc::EOPNOTSUPP | libc::ENXIO)
    )
}

/// Opens `event` on every one of `whos`; the first decides whether it is supported.
/// What the user may count is decided first, as for every session
/// ([`Privileges::fit`](crate::privilege::Privileges::fit)): at
/// `perf_event_paranoid` 2 without privilege the kernel is excluded and the event is
/// named with `:u`, as perf stat names it. A thread that exited meanwhile is left out.
fn open_event(
    privileges: &crate::privilege::Privileges,
    event: Event,
    whos: &[(Part, Scope)],
    task: bool,
    on_exec: bool,
) -> Result<Opened> {
    let cpu_wide = whos.iter().any(|(_, on)| matches!(on, Scope::Cpu(_)));
    let fitted = privileges.fit(
        Counter::builder_for(event.clone())
            .inherit(task)
            .enable_on_exec(on_exec),
        cpu_wide,
    )?;
    let mut name = event.name().to_string();
    if fitted.user_only {
        name = if name.contains(':') {
            format!("{name}u")
        } else {
            format!("{name}:u")
        };
    }
    let builder = fitted.builder;
    let mut counters = Vec::with_capacity(whos.len());
    for (i, (part, on)) in whos.iter().enumerate() {
        let counter = match builder.clone().target(*on).open() {
            Ok(c) => c,
            // Named as asked: perf adds `:u` only to what it then counted.
            Err(e) if i == 0 && not_supported(&e) => {
                return Ok(Opened {
                    name: event.name().to_string(),
                    event,
                    counters: None,
                })
            }
            Err(e)
                if matches!(part, Part::Thread { .. })
                    && e.raw_os_error() == Some(libc::ESRCH)
                    && i > 0 =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        counters.push((part.clone(), counter));
    }
    Ok(Opened {
        name,
        event,
        counters: Some(counters),
    })
}

impl Stat {
    /// Starts counting: lets the command `exec` (its counters enable there), or
    /// enables the counters of a process, thread or CPUs (then starts the command of
    /// `perf stat -a -- CMD`).
    ///
    /// # Errors
    /// The command's `exec` failing (then nothing is left running); an `ioctl` error.
    pub fn start(&mut self) -> Result<()> {
        let per_task_command = self.watch == Watch::Command
            && self
                .events
                .iter()
                .flat_map(|e| e.counters.iter().flatten())
                .all(|(p, _)| *p == Part::Command);
        if !per_task_command {
            for (_, c) in self.events.iter().flat_map(|e| e.counters.iter().flatten()) {
                c.enable()?;
            }
        }
        self.started = Some(Instant::now());
        if let Some(stopped) = self.stopped.take() {
            self.child = Some(stopped.start()?);
        }
        Ok(())
    }

    /// Each event's counts now.
    ///
    /// # Errors
    /// A counter's `read(2)` failing.
    pub fn read(&self) -> Result<Reading> {
        let elapsed = match (self.started, self.ended) {
            (Some(s), Some(e)) => e.duration_since(s),
            (Some(s), None) => s.elapsed(),
            (None, _) => Duration::ZERO,
        };
        let mut events = Vec::with_capacity(self.events.len());
        for o in &self.events {
            let mut total = Count {
                time_enabled: Some(0),
                time_running: Some(0),
                ..Count::default()
            };
            let mut parts = Vec::new();
            for (part, c) in o.counters.iter().flatten() {
                let mut count = c.read()?;
                count.id = None;
                total.value += count.value;
                let add = |t: &mut Option<u64>, x: Option<u64>| {
                    *t = Some(t.unwrap_or(0) + x.unwrap_or(0));
                };
                add(&mut total.time_enabled, count.time_enabled);
                add(&mut total.time_running, count.time_running);
                parts.push((part.clone(), count));
            }
            events.push(EventCount {
                name: o.name.clone(),
                event: o.event.clone(),
                supported: o.counters.is_some(),
                total,
                parts,
            });
        }
        Ok(Reading { elapsed, events })
    }

    /// Waits until the target ends (a command is then reaped: see [`exit`](Self::exit)),
    /// `SIGINT` arrives (Ctrl-C; it is consumed) or `timeout` passes. CPUs without a
    /// command never end by themselves.
    ///
    /// # Errors
    /// The `pidfd`, `signalfd` or `wait4` errors.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Waited> {
        if self.ended.is_some() {
            return Ok(Waited::Exited);
        }
        let waited = match (self.watch, &self.child) {
            (Watch::Command, Some(child)) => launch::wait_for_exit(child.pid(), timeout)?,
            (Watch::Pid(pid), _) => match launch::wait_for_exit(pid, timeout) {
                Err(e) if e.kind() == ErrorKind::NotFound => Waited::Exited,
                other => other?,
            },
            (Watch::Tid(tid), _) => wait_ticking(timeout, || !crate::proc::is_alive(tid))?,
            (Watch::Nothing, _) => wait_ticking(timeout, || false)?,
            (Watch::Command, None) => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "wait for the command",
                    "the command was not started",
                )
                .with_fix("call Stat::start first"))
            }
        };
        if waited == Waited::Exited {
            if let Some(child) = &mut self.child {
                // The pidfd said it exited: reap it (it is a zombie by now).
                let mut reaped = child.try_wait_usage()?;
                while reaped.is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                    reaped = child.try_wait_usage()?;
                }
                self.exit = reaped;
            }
            self.ended = Some(Instant::now());
        }
        Ok(waited)
    }

    /// A spawned command's exit status and CPU times, once [`wait`](Self::wait) saw
    /// it end.
    pub fn exit(&self) -> Option<(ExitStatus, Usage)> {
        self.exit
    }

    /// Ends counting now (Ctrl-C, a duration): later readings keep this moment's
    /// elapsed time.
    pub fn stop(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(Instant::now());
        }
    }

    /// Sends `signal` to the spawned command (to pass on a Ctrl-C sent to us alone).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] without a running command; the `kill` errno.
    pub fn signal_target(&self, signal: crate::Signal) -> Result<()> {
        match (&self.child, self.exit) {
            (Some(child), None) => child.signal(signal),
            _ => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("signal {signal} to the command"),
                "no command is running",
            )),
        }
    }
}

/// Waits for `ended()`, Ctrl-C or `timeout`, checking every [`TICK`].
fn wait_ticking(timeout: Option<Duration>, ended: impl Fn() -> bool) -> Result<Waited> {
    let interrupts = Interrupts::block()?;
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if ended() {
            return Ok(Waited::Exited);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(Waited::TimedOut);
        }
        if interrupts
            .wait(left.map_or(TICK, |l| l.min(TICK)))
            .is_some()
        {
            return Ok(Waited::Interrupted);
        }
    }
}

impl Drop for Stat {
    /// A command still running when its counters go (an error while counting) is
    /// killed and reaped, so nothing is left behind.
    fn drop(&mut self) {
        if let (Some(child), None) = (&mut self.child, self.exit) {
            let _ = child.signal(crate::Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}
