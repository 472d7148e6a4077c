//! A profiling session: a target sampled with events, its stacks unwound and named, the
//! samples written to outputs — what `perfring watch`, `record` and the injector each
//! did their own way, assembled once.
//!
//! A [`Profiler`] owns:
//! - **the target and how it starts**: a command (started stopped, its counters
//!   attached before its `exec`, without address-space randomization when a breakpoint
//!   names a symbol of a PIE), a running process with its threads, one thread, CPUs
//!   ([`resolve`] finds the program and resolves `mem:SYMBOL`/`uprobe:` events against
//!   it);
//! - **the events and the one default sampling policy** ([`Policy`]): every hit of a
//!   breakpoint, tracepoint or probe, else 4000 samples a second (perf's default);
//!   `IP`, `TID`, `TIME`, `CPU`, the period under a frequency, `IDENTIFIER` when there
//!   are several events, `CLOCK_MONOTONIC` time;
//! - **the call graph** ([`CallGraph`]) with its registers and stack;
//! - **the tracking records** (`MMAP2`, `COMM`, `FORK`, `EXIT`) and the records of what
//!   predates the counters (a running process's threads and mappings, the kernel's
//!   text), synthesized at the start;
//! - **the writer thread** with the [`Pipeline`] (address spaces, unwinding, names) and
//!   the [`Output`]s: perf.data, pprof, overflow lines, an embedder's own.
//!
//! The caller's thread drains the rings ([`Profiler::poll`]) and only copies bytes;
//! everything that reads a file happens on the writer thread.
//!
//! # Examples
//! ```no_run
//! use std::time::Duration;
//! use perfring::output::Pprof;
//! use perfring::profiler::{Flow, Profiler};
//! use perfring::sampler::Target;
//! use perfring::unwind::CallGraph;
//!
//! let mut profiler = Profiler::builder(Target::Command(perfring::launch::Command::new("ls")))
//!     .event("cpu-clock")
//!     .call_graph(CallGraph::Fp)
//!     .output(Pprof::create("ls.pb.gz")?)
//!     .start()?;
//! while profiler.target_ended()?.is_none() {
//!     profiler.poll(Some(Duration::from_millis(100)), |_| Flow::Continue)?;
//! }
//! let report = profiler.finish(perfring::profiler::End::TargetExited)?;
//! println!("{} samples, {} lost", report.samples, report.lost());
//! # Ok::<(), perfring::Error>(())
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::counter::{Builder, Counter};
use crate::event::{Event, Kind};
use crate::launch::ExitStatus;
use crate::output::Output;
use crate::pipeline::{tracking_index, Existing, Pipeline, PipelineStats};
use crate::privilege::{RingDemand, RingPages};
use crate::records::{encode, RecordKind};
use crate::resolve::{resolve_event, TargetImage};
use crate::ring::RingSize;
use crate::sampler::{Delivery, EventInfo, Sampler, Stats, Target, TargetEnd};
use crate::stream::{QueueSize, StreamStats, Streamer};
use crate::unwind::CallGraph;
use crate::{sys, Error, ErrorKind, Result, SampleType};

/// How often samples are taken when neither a period nor a frequency is given, for
/// events that count (perf's default).
pub const DEFAULT_FREQUENCY: u64 = 4000;

/// How long a ring holds what its counters write at the rate asked while the drain is
/// late (a loaded host, a slow disk): rings are sized for it by default.
pub const RING_SECONDS: f64 = 0.25;

/// The most data pages the rate may ask for all of a session's rings together
/// (256 MiB of 4 KiB pages), however many CPUs.
const MAX_RATE_PAGES_TOTAL: usize = 1 << 16;

/// With exact periods (a ring per thread), how many threads' rings the budget is
/// shared among when the rings are sized.
const EXACT_THREADS: usize = 256;

/// The sampler's tracking rings' data pages.
const TRACKING_PAGES: usize = 16;

/// What the session's rings need ([`Privileges::ring_pages`]): one per event and
/// CPU (per event and thread with exact periods), the tracking rings beside them,
/// `-m`, and the pages the data rate wants.
///
/// [`Privileges::ring_pages`]: crate::privilege::Privileges::ring_pages
fn ring_demand(
    target: &Target,
    builders: &[Builder],
    exact_periods: bool,
    asked: Option<usize>,
    wakeup: Wakeup,
) -> Result<RingDemand> {
    let cpus = crate::counter::online_cpus()?.len();
    let rings_per_event = match target {
        Target::Cpus(list) => list.len(),
        // A ring per thread, made as threads appear: sized so that those of
        // EXACT_THREADS threads (or of those there are, if more) fit the budget;
        // beyond that, new rings get what is left (`Ring::map_within_budget`).
        Target::Pid(pid) if exact_periods => crate::proc::threads(*pid)
            .map_or(1, |t| t.len())
            .max(EXACT_THREADS),
        Target::Command(_) | Target::Tid(_) if exact_periods => EXACT_THREADS,
        _ => cpus,
    };
    let tracking_rings = match target {
        Target::Cpus(list) => list.len(),
        _ => cpus,
    };
    let default = match wakeup {
        Wakeup::HalfRing => 256,
        Wakeup::EverySample => 64,
    };
    let rings = rings_per_event * builders.len();
    let for_rate = builders
        .iter()
        .map(pages_for_rate)
        .max()
        .unwrap_or(0)
        .min(MAX_RATE_PAGES_TOTAL / rings.max(1));
    Ok(RingDemand {
        rings,
        fixed_pages: tracking_rings as u64 * (TRACKING_PAGES as u64 + 1),
        asked,
        wanted: for_rate.max(default),
        cpus,
    })
}
/// Data pages (a power of two) for [`RING_SECONDS`] of `b`'s samples at the rate it
/// asks: a frequency, or a clock's period; 0 when the rate cannot be told (a count of
/// events).
fn pages_for_rate(b: &Builder) -> usize {
    let attr = b.attr();
    let value = crate::counter::sample_period(attr);
    let hz = if attr.freq() != 0 {
        value as f64
    } else if b.event().counts_cpu_time() && value > 0 {
        1e9 / value as f64
    } else {
        return 0;
    };
    let bytes = hz * sample_bytes(attr) as f64 * RING_SECONDS;
    let pages = (bytes / crate::ring::page_size() as f64).ceil() as usize;
    pages.max(1).next_power_of_two()
}

/// About how many bytes one sample of `attr` takes in a ring: a word per fixed field,
/// a callchain of 32 entries, the registers and the stack copy.
fn sample_bytes(attr: &sys::perf_event_attr) -> u64 {
    let st = attr.sample_type;
    let sized = u64::from(
        sys::PERF_SAMPLE_CALLCHAIN
            | sys::PERF_SAMPLE_REGS_USER
            | sys::PERF_SAMPLE_STACK_USER
            | sys::PERF_SAMPLE_RAW
            | sys::PERF_SAMPLE_BRANCH_STACK
            | sys::PERF_SAMPLE_READ
            | sys::PERF_SAMPLE_REGS_INTR,
    );
    let mut bytes = 8 + 8 * u64::from((st & !sized).count_ones());
    if st & u64::from(sys::PERF_SAMPLE_CALLCHAIN) != 0 {
        bytes += 8 + 32 * 8;
    }
    if st & u64::from(sys::PERF_SAMPLE_REGS_USER) != 0 {
        bytes += 8 + 8 * u64::from(attr.sample_regs_user.count_ones());
    }
    if st & u64::from(sys::PERF_SAMPLE_STACK_USER) != 0 {
        bytes += 16 + u64::from(attr.sample_stack_user);
    }
    bytes
}
/// How long a spawned command gets to exit after `SIGTERM` before `SIGKILL`.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// A target and its events, resolved: what [`resolve`] makes of a command line.
#[derive(Debug)]
pub struct Resolved {
    /// The sampler's target (a command without ASLR when a symbol's address was
    /// predicted for its no-ASLR base).
    pub target: Target,
    /// The events, parsed and resolved.
    pub events: Vec<Event>,
    /// The command's program, found along `$PATH`, or a process's executable.
    pub program: Option<PathBuf>,
}

/// Finds the target's program and resolves `specs` against it: perf's syntax, and
/// `mem:SYMBOL`, `mem:OBJECT:SYMBOL`, `uprobe:PATH:SYMBOL` ([`resolve_event`]). A
/// command whose breakpoint names a symbol of a PIE is started without address-space
/// randomization, at the base the address was predicted for.
///
/// # Errors
/// [`ErrorKind::NotFound`] for a command that is not along `$PATH`; any error of
/// [`resolve_event`] (naming the event and the fix).
pub fn resolve(target: Target, specs: &[String]) -> Result<Resolved> {
    let mut r = Resolver::new(&target)?;
    let events = specs
        .iter()
        .map(|s| r.event(s))
        .collect::<Result<Vec<_>>>()?;
    Ok(Resolved {
        target: r.target(target),
        events,
        program: r.program,
    })
}

/// Resolves event strings one by one against a target's program (for callers that
/// parse their own syntax around them, as `trigger` does), then says how the target
/// must start.
#[derive(Debug)]
pub struct Resolver {
    image: TargetImage,
    program: Option<PathBuf>,
    fixed_base: bool,
}

impl Resolver {
    /// Finds `target`'s program: a command's along `$PATH`, a process's executable.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] for a command that is not along `$PATH`, as its launch
    /// would say.
    pub fn new(target: &Target) -> Result<Resolver> {
        let (image, program) = match target {
            Target::Command(cmd) => {
                let Some(path) = crate::launch::find_program(cmd.program()) else {
                    // The launcher says what is wrong: it knows how it searched.
                    return Err(match cmd.spawn_stopped() {
                        Err(e) => e,
                        Ok(_) => Error::new(
                            ErrorKind::NotFound,
                            format!("find {}", cmd.program().to_string_lossy()),
                            "it is not an executable along $PATH",
                        ),
                    });
                };
                (TargetImage::Spawned(path.clone()), Some(path))
            }
            Target::Pid(pid) | Target::Tid(pid) => (
                TargetImage::Process(*pid),
                crate::proc::exe(crate::proc::tgid(*pid).unwrap_or(*pid)),
            ),
            Target::Cpus(cpus) => {
                check_cpus(cpus)?;
                (TargetImage::None, None)
            }
        };
        Ok(Resolver {
            image,
            program,
            fixed_base: false,
        })
    }

    /// One event string.
    ///
    /// # Errors
    /// As [`resolve_event`].
    pub fn event(&mut self, spec: &str) -> Result<Event> {
        let e = resolve_event(spec, &self.image)?;
        self.fixed_base |= crate::resolve::needs_fixed_base(spec);
        Ok(e)
    }

    /// The target's program, when known.
    pub fn program(&self) -> Option<&std::path::Path> {
        self.program.as_deref()
    }

    /// `target` as it must start for the events resolved: a command without ASLR if a
    /// symbol's address was predicted for it.
    pub fn target(&self, target: Target) -> Target {
        match target {
            Target::Command(cmd) => Target::Command(cmd.no_aslr(self.fixed_base)),
            other => other,
        }
    }
}

/// Every CPU in `cpus` is online; else an error naming the ones that are not and the
/// ones there are.
fn check_cpus(cpus: &[i32]) -> Result<()> {
    let online = crate::counter::online_cpus()?;
    let missing: Vec<String> = cpus
        .iter()
        .filter(|c| !online.contains(c))
        .map(i32::to_string)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let there: Vec<String> = online.iter().map(i32::to_string).collect();
    Err(Error::new(
        ErrorKind::NotFound,
        format!("watch CPU {}", missing.join(", ")),
        format!(
            "no such CPU online: this machine has CPU {}",
            there.join(", ")
        ),
    )
    .with_fix("give CPUs that exist (-C 0-1), or every one (-a)"))
}

/// The event used when none is given: `cycles` where a hardware PMU counts it, else
/// `cpu-clock`, with why (for the caller to say).
pub fn default_event() -> (String, Option<String>) {
    match Counter::builder("cycles").and_then(|b| b.exclude_kernel(true).open()) {
        Ok(_) => ("cycles".to_string(), None),
        Err(e) => {
            let why = if e.kind() == ErrorKind::NoPmu {
                "this machine has no hardware PMU".to_string()
            } else {
                format!("cycles cannot be counted here ({e})")
            };
            ("cpu-clock".to_string(), Some(why))
        }
    }
}

/// How often an event samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// An overflow every `n` events (`-c`).
    Period(u64),
    /// About `hz` overflows a second (`-F`).
    Frequency(u64),
}

/// When the kernel wakes the profiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wakeup {
    /// When a ring is half full, and at each [`poll`](Profiler::poll)'s timeout: the
    /// fewest wake-ups (`perf record`'s choice).
    #[default]
    HalfRing,
    /// At every sample: the least delay between an overflow and the drain, for tools
    /// that act on each one (`watch`).
    EverySample,
}

/// The one default sampling policy: what every event gets unless told otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// The rate; `None`: every hit of a breakpoint, tracepoint or probe, else
    /// [`DEFAULT_FREQUENCY`] a second.
    pub rate: Option<Rate>,
    /// Stacks, and how.
    pub call_graph: Option<CallGraph>,
    /// When to wake.
    pub wakeup: Wakeup,
}

impl Policy {
    /// The builder for `event` under this policy, one of `events_in_recording`.
    pub fn builder(&self, event: Event, events_in_recording: usize) -> Builder {
        let mut b = Counter::builder_for(event);
        b = match self.rate {
            Some(Rate::Period(n)) => b.period(n),
            Some(Rate::Frequency(hz)) => b.frequency(hz),
            None => match b.event().kind() {
                Kind::Breakpoint(_) | Kind::Tracepoint(_) | Kind::Uprobe(_) => b.period(1),
                _ => b.frequency(DEFAULT_FREQUENCY),
            },
        };
        let mut sample = SampleType::IP | SampleType::TID | SampleType::TIME | SampleType::CPU;
        // Only a frequency varies the period; sampling it with a fixed one would make
        // the kernel take a sample per event on software and breakpoint counters.
        if b.attr().freq() != 0 {
            sample |= SampleType::PERIOD;
        }
        // perf needs every event of a file to place its id alike, at the front.
        if events_in_recording > 1 {
            sample |= SampleType::IDENTIFIER;
        }
        b = b.sample(sample).clockid(libc::CLOCK_MONOTONIC);
        if let Some(graph) = self.call_graph {
            b = graph.configure(b);
        }
        b
    }
}

/// How a session ended, which decides what is done to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The target exited (or, for CPUs, the caller stopped).
    TargetExited,
    /// The caller stopped early (enough overflows, its output closed): a command is
    /// terminated, as perf does.
    Stopped,
    /// The target was stopped on purpose (`SIGSTOP`) and is left so.
    LeftStopped,
    /// Ctrl-C or `SIGTERM` for a running process: left running.
    Interrupted,
}

/// What the drain callback tells [`Profiler::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Keep no more records: the recording is ending.
    Stop,
}

/// Configures a [`Profiler`]; from [`Profiler::builder`].
#[derive(Debug)]
pub struct ProfilerBuilder {
    target: Target,
    specs: Vec<String>,
    /// Set by [`find_program`](Self::find_program) and
    /// [`resolve_events`](Self::resolve_events), else at the start.
    resolver: Option<Resolver>,
    events: Option<Vec<Event>>,
    policy: Policy,
    pages: Option<usize>,
    exact_periods: bool,
    budget: Option<u32>,
    outputs: Vec<Box<dyn Output>>,
    queue: QueueSize,
    cmdline: Vec<String>,
    off_cpu: bool,
    /// How often the drain tells the outputs how far it has come (`progress_every`).
    progress: Option<Duration>,
    forget_exited: bool,
}

impl std::fmt::Debug for dyn Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output")
    }
}

impl ProfilerBuilder {
    /// Adds an event by name (`cpu-clock`, `mem:leaf:x`, `uprobe:/lib/libc.so.6:malloc`,
    /// ...), resolved against the target at [`start`](Self::start). Without any,
    /// [`default_event`].
    pub fn event(mut self, spec: impl Into<String>) -> Self {
        self.specs.push(spec.into());
        self
    }

    /// The sampling rate of every event (default: the [`Policy`]'s).
    pub fn rate(mut self, rate: Rate) -> Self {
        self.policy.rate = Some(rate);
        self
    }

    /// Samples carry their stacks.
    pub fn call_graph(mut self, graph: CallGraph) -> Self {
        self.policy.call_graph = Some(graph);
        self
    }

    /// When the kernel wakes the session (default [`Wakeup::HalfRing`]).
    pub fn wakeup(mut self, wakeup: Wakeup) -> Self {
        self.policy.wakeup = wakeup;
        self
    }

    /// Data pages per ring (rounded up to a power of two), refused at
    /// [`start`](Self::start) when the session's rings would not fit the user's
    /// locked-memory budget ([`Privileges::ring_pages`]). Default: what the data rate
    /// needs to ride out a late drain for [`RING_SECONDS`], at least 256 for half-ring
    /// wake-ups (64 for a wake-up per sample), made smaller when the budget allows
    /// less ([`Profiler::ring_pages`] says).
    ///
    /// [`Privileges::ring_pages`]: crate::privilege::Privileges::ring_pages
    pub fn ring_pages(mut self, pages: usize) -> Self {
        self.pages = Some(pages);
        self
    }

    /// One period per thread ([`SamplerBuilder::exact_periods`](crate::sampler::SamplerBuilder::exact_periods)).
    pub fn exact_periods(mut self, yes: bool) -> Self {
        self.exact_periods = yes;
        self
    }

    /// At most `n` overflows per thread ([`SamplerBuilder::budget`](crate::sampler::SamplerBuilder::budget)).
    pub fn budget(mut self, n: u32) -> Self {
        self.budget = Some(n);
        self
    }

    /// Adds an output; outputs are created before the start, so a path that cannot be
    /// written fails before the target runs.
    pub fn output(mut self, output: impl Output + 'static) -> Self {
        self.outputs.push(Box::new(output));
        self
    }

    /// Adds a boxed output.
    pub fn boxed_output(mut self, output: Box<dyn Output>) -> Self {
        self.outputs.push(output);
        self
    }

    /// Also samples where each thread of the target blocks, weighted by how long it
    /// is off the CPU ([`offcpu`](crate::offcpu)): a `context-switches` counter beside
    /// the events, and stacks for all (frame pointers unless a call graph is given). With a
    /// `cpu-clock` or `task-clock` event the profile then shows running and waiting
    /// time in one unit, nanoseconds. [`start`](Self::start) fails with the cause and
    /// the fix where this user may not sample the kernel, where the switch happens.
    pub fn off_cpu(mut self, yes: bool) -> Self {
        self.off_cpu = yes;
        self
    }

    /// The bound of the writer's queue (default 64 MiB).
    pub fn queue(mut self, size: QueueSize) -> Self {
        self.queue = size;
        self
    }

    /// At most this often, the draining thread hands what it drained to the writer at
    /// once, with the time its pass began, and the outputs are told every sample
    /// stamped before it has come ([`Output::progress`]): an output that cuts by time
    /// ([`Intervals`](crate::output::Intervals)) then cuts on time even while the
    /// target is idle. Off by default (records go over in chunks, as they fill).
    pub fn progress_every(mut self, every: Duration) -> Self {
        self.progress = Some(every);
        self
    }

    /// Drops the address space of a process, and a thread's name, a round after it
    /// exits ([`Pipeline::forget_exited`]): memory stays flat in a session of hours
    /// over processes that come and go. Off by default.
    pub fn forget_exited(mut self, yes: bool) -> Self {
        self.forget_exited = yes;
        self
    }

    /// The command line recorded in perf.data (default: this process's).
    pub fn cmdline(mut self, cmdline: Vec<String>) -> Self {
        self.cmdline = cmdline;
        self
    }

    /// Finds the target's program now (else at [`start`](Self::start)): a command
    /// along `$PATH`, a process's executable. Its errors are the target's, where
    /// [`resolve_events`](Self::resolve_events)' are the events'.
    ///
    /// # Errors
    /// As [`Resolver::new`].
    pub fn find_program(&mut self) -> Result<()> {
        if self.resolver.is_none() {
            self.resolver = Some(Resolver::new(&self.target)?);
        }
        Ok(())
    }

    /// Resolves the events now (else at [`start`](Self::start)), against the target's
    /// program ([`find_program`](Self::find_program) first, if not done).
    ///
    /// # Errors
    /// As [`find_program`](Self::find_program), then as [`resolve_event`] for the first
    /// event that does not resolve.
    pub fn resolve_events(&mut self) -> Result<()> {
        self.find_program()?;
        if self.events.is_some() {
            return Ok(());
        }
        if self.specs.is_empty() {
            self.specs.push(default_event().0);
        }
        let r = self.resolver.as_mut().expect("found above");
        let events = self
            .specs
            .iter()
            .map(|s| r.event(s))
            .collect::<Result<Vec<_>>>()?;
        self.events = Some(events);
        Ok(())
    }

    /// Resolves the events, opens the counters, starts the writer thread and the
    /// target.
    ///
    /// # Errors
    /// Any error of [`resolve`], [`Sampler::builder`]'s start, or an output's start;
    /// a command spawned before the error is killed.
    pub fn start(mut self) -> Result<Profiler> {
        self.resolve_events()?;
        if self.off_cpu {
            crate::offcpu::check_allowed()?;
            // Waiting and running side by side need the same frames on both sides.
            self.policy.call_graph.get_or_insert(CallGraph::Fp);
        }
        let resolver = self.resolver.take().expect("resolved above");
        let resolved = Resolved {
            target: resolver.target(self.target),
            events: self.events.take().unwrap_or_default(),
            program: resolver.program,
        };
        // What predates the counters: a running process's threads and mappings, or
        // every process's on CPUs; a command's are reported as it maps them.
        let existing = match &resolved.target {
            Target::Command(_) => Existing::Kernel,
            Target::Pid(pid) | Target::Tid(pid) => {
                Existing::Process(crate::proc::tgid(*pid).unwrap_or(*pid))
            }
            _ => Existing::Everything,
        };
        let n = resolved.events.len() + usize::from(self.off_cpu);
        let cpu_wide = matches!(resolved.target, Target::Cpus(_));
        // What the user may count, decided once, as perf decides it.
        let privileges = crate::privilege::Privileges::current();
        let mut user_only = Vec::new();
        let mut builders = Vec::with_capacity(n);
        for event in resolved.events {
            let fitted = privileges.fit(self.policy.builder(event, n), cpu_wide)?;
            if fitted.user_only {
                user_only.push(fitted.builder.event().name().to_string());
            }
            builders.push(fitted.builder);
        }
        if self.off_cpu {
            let event = Event::parse(crate::offcpu::EVENT)?;
            builders.push(crate::offcpu::configure(self.policy.builder(event, n)));
        }
        // Rings as large as the data rate wants, within what the user may lock.
        let rings = ring_demand(
            &resolved.target,
            &builders,
            self.exact_periods,
            self.pages,
            self.policy.wakeup,
        )?;
        let pages = privileges.ring_pages(&rings)?;
        let mut setup = Sampler::builder(resolved.target)
            .ring_size(RingSize::Pages(pages.pages))
            .exact_periods(self.exact_periods);
        for b in builders {
            setup = setup.event(match self.policy.wakeup {
                Wakeup::HalfRing => {
                    b.wakeup_watermark((pages.pages * crate::ring::page_size() / 2) as u32)
                }
                Wakeup::EverySample => b.wakeup_events(1),
            });
        }
        if let Some(n) = self.budget {
            setup = setup.budget(n);
        }
        let sampler = setup.start()?;
        let events: Vec<EventInfo> = sampler.events().to_vec();
        let mut pipeline = Pipeline::new(&events, sampler.tracking())?
            .cmdline(self.cmdline)
            .program(resolved.program.clone())
            .existing(existing)
            .read_proc(true)
            .forget_exited(self.forget_exited);
        for o in self.outputs {
            pipeline = pipeline.boxed_output(o);
        }
        // The pipeline starts on the writer thread as soon as it runs (the counters are
        // open, so what maps later is recorded): a running process's /proc is read
        // before it can exit, and reading /proc/kallsyms keeps nobody waiting.
        let stream = Streamer::spawn(pipeline, self.queue)?;
        Ok(Profiler {
            sampler,
            stream: Some(stream),
            tracking: tracking_index(&events),
            events,
            program: resolved.program,
            pushed: vec![0; n],
            scratch: Vec::new(),
            error: None,
            stopped: false,
            exact_periods: self.exact_periods,
            wakeup: self.policy.wakeup,
            user_only,
            progress: self.progress.map(|every| (every, None)),
            ring_pages: pages,
        })
    }
}

/// What a session did, once [`finish`](Profiler::finish)ed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// Samples the rings gave (all events).
    pub samples: u64,
    /// The sampler's accounting: lost, throttled, undecoded records.
    pub stats: Stats,
    /// Samples the kernel counted (one period per thread) that never reached a ring
    /// and no `LOST` record reported; written to the outputs as `LOST` records.
    pub unreported: u64,
    /// What went through the writer's queue, and what it dropped.
    pub queue: StreamStats,
    /// What the pipeline saw.
    pub pipeline: PipelineStats,
    /// The command's exit status, if it ran its course (or was ended by the session).
    pub exit: Option<ExitStatus>,
    /// How many times the kernel woke the session.
    pub wakeups: u64,
}

impl Report {
    /// Everything lost, wherever: in the rings, unreported, in the writer's queue.
    pub fn lost(&self) -> u64 {
        self.stats.lost + self.stats.lost_samples + self.unreported + self.queue.lost_records
    }
}

/// A profiling session; see the [module docs](self).
#[derive(Debug)]
pub struct Profiler {
    sampler: Sampler,
    stream: Option<Streamer<Pipeline>>,
    events: Vec<EventInfo>,
    program: Option<PathBuf>,
    tracking: usize,
    /// Samples pushed per event.
    pushed: Vec<u64>,
    scratch: Vec<u8>,
    /// The writer's first error: the session stops keeping records.
    error: Option<Error>,
    stopped: bool,
    exact_periods: bool,
    wakeup: Wakeup,
    user_only: Vec<String>,
    ring_pages: RingPages,
    /// `progress_every`'s period, and when the last progress went to the writer.
    progress: Option<(Duration, Option<std::time::Instant>)>,
}

impl Profiler {
    /// A session on `target`, with the default [`Policy`].
    pub fn builder(target: Target) -> ProfilerBuilder {
        ProfilerBuilder {
            target,
            specs: Vec::new(),
            resolver: None,
            events: None,
            policy: Policy {
                rate: None,
                call_graph: None,
                wakeup: Wakeup::default(),
            },
            pages: None,
            exact_periods: false,
            budget: None,
            outputs: Vec::new(),
            queue: QueueSize::default(),
            cmdline: std::env::args().collect(),
            off_cpu: false,
            progress: None,
            forget_exited: false,
        }
    }

    fn push(&mut self, index: usize, record: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Some(stream) = &mut self.stream {
            if let Err(e) = stream.push(index, record) {
                self.error = Some(e);
            }
        }
    }

    /// Waits up to `timeout` for the kernel, then drains every ring: each record goes to
    /// the writer thread (a copy), and to `each` first, on this thread, for what must
    /// happen at once (signal the thread that overflowed, stop the target). Returns the
    /// records drained.
    ///
    /// # Errors
    /// The sampler's; the writer's first error (disk full, closed pipe), once, after
    /// which no more records are kept.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        mut each: impl FnMut(&Delivery<'_>) -> Flow,
    ) -> Result<u64> {
        // Taken before the wait, so before the drain: every sample stamped earlier
        // is in the rings this pass reads (or a later one, within the grace an output
        // allows for the kernel's publication).
        let began = self
            .progress
            .map(|_| crate::counter::clock_ns(libc::CLOCK_MONOTONIC));
        let n = {
            let (stream, error, stopped, pushed, tracking) = (
                &mut self.stream,
                &mut self.error,
                &mut self.stopped,
                &mut self.pushed,
                self.tracking,
            );
            self.sampler.poll(timeout, |d| {
                keep(&d, stream, error, stopped, pushed, tracking, &mut each)
            })?
        };
        if let (Some(began), Some((every, last))) = (began, &mut self.progress) {
            let due = last.is_none_or(|t| t.elapsed() >= *every);
            if due && began > 0 && self.error.is_none() {
                *last = Some(std::time::Instant::now());
                if let Some(stream) = &mut self.stream {
                    if let Err(e) = stream.end_round_at(began) {
                        self.error = Some(e);
                    }
                }
                return Ok(n);
            }
        }
        self.end_round()?;
        Ok(n)
    }

    fn end_round(&mut self) -> Result<()> {
        if self.error.is_none() {
            if let Some(stream) = &mut self.stream {
                // A wake-up per sample asks for the records at once: every round goes
                // to the writer as it ends, not when a chunk fills.
                let r = match self.wakeup {
                    Wakeup::EverySample => stream.end_round_now(),
                    Wakeup::HalfRing => stream.end_round(),
                };
                if let Err(e) = r {
                    self.error = Some(e);
                }
            }
        }
        Ok(())
    }

    /// The writer's error, if it stopped (the recording goes on; nothing more is
    /// kept).
    pub fn failed(&self) -> bool {
        self.error.is_some() || self.stream.as_ref().is_some_and(|s| s.is_failed())
    }

    /// Samples kept so far (all events).
    pub fn samples(&self) -> u64 {
        self.pushed.iter().sum()
    }

    /// The events, as opened.
    pub fn events(&self) -> &[EventInfo] {
        &self.events
    }

    /// The events that count user space only because this user may not profile the
    /// kernel and did not ask to ([`Privileges::fit`](crate::privilege::Privileges::fit)):
    /// worth saying once.
    pub fn user_only(&self) -> &[String] {
        &self.user_only
    }

    /// The rings' size: the data pages chosen and those wanted, below which the
    /// user's locked-memory budget kept them (worth saying); rings made later for new
    /// threads may have been given less still ([`Sampler::smallest_ring`]).
    pub fn ring_pages(&self) -> RingPages {
        self.ring_pages
    }

    /// The sampler underneath (accounting, threads, budgets).
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The target's program, when known.
    pub fn program(&self) -> Option<&std::path::Path> {
        self.program.as_deref()
    }

    /// The target's end, if it has ended ([`Sampler::target_ended`]).
    ///
    /// # Errors
    /// As [`Sampler::target_ended`].
    pub fn target_ended(&mut self) -> Result<Option<TargetEnd>> {
        self.sampler.target_ended()
    }

    /// Sends `signal` to the target ([`Sampler::signal_target`]).
    ///
    /// # Errors
    /// As [`Sampler::signal_target`].
    pub fn signal_target(&self, signal: crate::Signal) -> Result<()> {
        self.sampler.signal_target(signal)
    }

    /// Drains what is left, tells the outputs of samples the kernel counted that never
    /// arrived (one period per thread: as `LOST` records), leaves the target as `end`
    /// requires, and finishes the outputs on the writer thread.
    ///
    /// # Errors
    /// The writer's first error (the outputs are finished anyway, so files stay
    /// readable), else the last drain's.
    pub fn finish(mut self, end: End) -> Result<Report> {
        let drained = if end == End::Stopped {
            Ok(0)
        } else {
            self.poll(Some(Duration::ZERO), |_| Flow::Continue)
        };
        // Only one period per thread makes the counts say how many samples there must be.
        let unreported = if end == End::TargetExited && self.exact_periods {
            self.unreported()
        } else {
            0
        };
        let _ = self.end_round();
        let exit = match end {
            End::LeftStopped | End::Interrupted => match self.sampler.target_ended() {
                Ok(Some(TargetEnd::Exited(s))) => Some(s),
                _ => None,
            },
            _ => self.sampler.terminate(TERM_GRACE),
        };
        let stats = self.sampler.stats();
        let wakeups = self.sampler.wakeups();
        let (pipeline, queue) = match self.stream.take().map(Streamer::finish) {
            Some(Ok((p, q))) => (p.stats(), q),
            Some(Err(e)) => return Err(e),
            None => (PipelineStats::default(), StreamStats::default()),
        };
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        drained?;
        Ok(Report {
            samples: self.pushed.iter().sum(),
            stats,
            unreported,
            queue,
            pipeline,
            exit,
            wakeups,
        })
    }

    /// Samples the counts say were taken (one period per thread) beyond those that
    /// arrived or were reported lost, written as a `LOST` record per event.
    fn unreported(&mut self) -> u64 {
        let mut total = 0;
        for i in 0..self.events.len() {
            let Ok(missing) = self.sampler.unreported_loss(i) else {
                continue;
            };
            if missing == 0 {
                continue;
            }
            total += missing;
            let layout = *self.events[i].layout();
            let id = self.events[i].ids().first().copied().unwrap_or(0);
            let ids = encode::Ids {
                id,
                identifier: id,
                ..Default::default()
            };
            let mut rec = std::mem::take(&mut self.scratch);
            rec.clear();
            encode::lost(
                &mut rec,
                &layout,
                sys::PERF_RECORD_MISC_USER as u16,
                id,
                missing,
                &ids,
            );
            self.push(i, &rec);
            self.scratch = rec;
        }
        total
    }
}

/// One delivery: `each` first, then a copy to the writer, unless stopped.
fn keep(
    d: &Delivery<'_>,
    stream: &mut Option<Streamer<Pipeline>>,
    error: &mut Option<Error>,
    stopped: &mut bool,
    pushed: &mut [u64],
    tracking: usize,
    each: &mut impl FnMut(&Delivery<'_>) -> Flow,
) {
    if *stopped {
        return;
    }
    if each(d) == Flow::Stop {
        *stopped = true;
    }
    let index = match d.event {
        Some(i) => {
            if matches!(d.record.kind(), RecordKind::Sample(_)) {
                pushed[i] += 1;
            }
            i
        }
        None => tracking,
    };
    if error.is_some() {
        return;
    }
    if let Some(s) = stream {
        if let Err(e) = s.push(index, d.raw) {
            *error = Some(e);
        }
    }
}

/// The command line's program and arguments as a [`Target::Command`].
pub fn command(argv: &[OsString]) -> Option<Target> {
    let (program, args) = argv.split_first()?;
    Some(Target::Command(
        crate::launch::Command::new(program).args(args),
    ))
}
