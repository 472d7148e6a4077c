//! Raw flags in, perfring types out. Every usage error is raised here, with the flag
//! it is about; nothing here opens anything.
//!
//! [`EventArgs`] holds the event-shaping flags shared by `explain` and (later) `watch`;
//! [`EventArgs::builder`] is the one place they become a [`Builder`].

use std::ffi::OsString;

use lexopt::{Arg, Parser};
use perfring::resolve::{resolve_event, TargetImage};
use perfring::{Builder, Counter, ReadFormat, SampleType, Scope};

use crate::Failure;

/// A parsed command line.
#[derive(Debug)]
pub enum Command {
    /// Usage text: the general one, or a subcommand's.
    Help(Topic),
    /// `perfring --version` (or `-v`, `version`): perf's `perf version`.
    Version,
    /// `perfring doctor [--json]`.
    Doctor { json: bool },
    /// `perfring explain EVENT-FLAGS [--json]`.
    Explain { event: EventArgs, json: bool },
    /// `perfring stat -e EVENT… (-p PID [--duration SECS] | -- COMMAND…) [--json]`.
    Stat(StatArgs),
    /// `perfring watch -e EVENT… [actions] (-p PID | -t TID | -C CPU | -- COMMAND…)`.
    Watch(WatchArgs),
    /// `perfring inject -e EVENT… (-c N | -F HZ) --action ACTION… [-o FILE] -- COMMAND…`.
    Inject(InjectArgs),
    /// `perfring record -e EVENT… [-g] [-o FILE] [--format F] (target as watch)`.
    Record(RecordArgs),
    /// `perfring report [-i FILE] [--sort KEY] [--no-children] [--format F -o FILE]`.
    Report(ReportArgs),
}

/// `perfring report`'s flags.
#[derive(Debug, Clone)]
pub struct ReportArgs {
    /// `-i FILE` (or the one argument): the perf.data to read (default `perf.data`).
    pub input: std::path::PathBuf,
    /// `--sort symbol|dso|comm|tid`.
    pub sort: perfring::report::SortKey,
    /// `--children` / `--no-children`; by default children when the samples have stacks.
    pub children: Option<bool>,
    /// `--format F`: convert instead of printing the table.
    pub format: Option<OutputFormat>,
    /// `-o FILE` for `--format` (default the format's usual name; `-` for stdout).
    pub output: Option<std::path::PathBuf>,
}

/// `perfring record`'s flags: `watch`'s target, event and sampling flags (in
/// `sampling`; its action flags stay unset), and where and how to write.
#[derive(Debug, Default, Clone)]
pub struct RecordArgs {
    /// `-e`, `-c`, `-F`, `-m`, `-p`, `-t`, `-C` and the command, parsed as `watch` does.
    pub sampling: WatchArgs,
    /// `-o FILE` (`-` for stdout, pprof only); default `perf.data` or `profile.pb.gz`.
    pub output: Option<std::path::PathBuf>,
    /// `--format perf|pprof`.
    pub format: OutputFormat,
    /// `-g` (frame pointers) or `--call-graph fp|dwarf[,BYTES]`.
    pub call_graph: Option<perfring::unwind::CallGraph>,
    /// `--push URL` and its companions (`--every`, `--push-*`): the profile store
    /// (boxed: most recordings push nowhere).
    pub push: Box<PushArgs>,
    /// `--exact-periods`: one period per thread (each new thread held until it has a
    /// counter and ring of its own) instead of per-CPU rings.
    pub exact_periods: bool,
    /// `--off-cpu`: also sample where threads block, weighted by the time they wait.
    pub off_cpu: bool,
    /// Whether `--format` was given (`--push` then requires pprof, not silently).
    pub format_given: bool,
}

/// What `record` writes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// perf.data, for `perf report`/`perf script`.
    #[default]
    Perf,
    /// Gzipped pprof, for `go tool pprof`, Pyroscope and Parca.
    Pprof,
    /// An interactive flame graph (SVG).
    Svg,
    /// Folded stacks, one a line (inferno's and flamegraph.pl's input).
    Folded,
    /// The Firefox Profiler's processed format (JSON).
    Firefox,
}

impl OutputFormat {
    /// The names `--format` takes.
    pub const NAMES: &'static str = "perf, pprof, svg, folded or firefox";

    /// The format named `s`.
    pub fn from_name(s: &str) -> Option<OutputFormat> {
        Some(match s {
            "perf" | "perf.data" => OutputFormat::Perf,
            "pprof" => OutputFormat::Pprof,
            "svg" | "flamegraph" => OutputFormat::Svg,
            "folded" | "collapsed" => OutputFormat::Folded,
            "firefox" | "gecko" => OutputFormat::Firefox,
            _ => return None,
        })
    }

    /// The format's name, as `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Perf => "perf",
            OutputFormat::Pprof => "pprof",
            OutputFormat::Svg => "svg",
            OutputFormat::Folded => "folded",
            OutputFormat::Firefox => "firefox",
        }
    }

    /// The file written when `-o` is not given.
    pub fn default_path(self) -> &'static str {
        match self {
            OutputFormat::Perf => "perf.data",
            OutputFormat::Pprof => "profile.pb.gz",
            OutputFormat::Svg => "flamegraph.svg",
            OutputFormat::Folded => "stacks.folded",
            OutputFormat::Firefox => "profile.json",
        }
    }
}

/// `perfring inject`'s flags: the injector's configuration and the command.
#[derive(Debug, Clone)]
pub struct InjectArgs {
    /// What the preloaded library is told (as `PERFRING_*` variables).
    pub config: perfring::inject::InjectConfig,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// `perfring watch`'s flags.
#[derive(Debug, Default, Clone)]
pub struct WatchArgs {
    /// `-e EVENT`, repeatable; empty means the default (`cycles`, else `cpu-clock`).
    pub events: Vec<String>,
    /// `-c N`: overflow every N events.
    pub period: Option<u64>,
    /// `-F HZ`: about HZ overflows a second.
    pub frequency: Option<u64>,
    /// `-m PAGES`: ring data pages per event.
    pub pages: Option<usize>,
    /// `--budget N`: the kernel stops each event after N overflows per thread (`REFRESH`).
    pub budget: Option<u32>,
    /// `--exec CMD`: run `sh -c CMD` per overflow.
    pub exec: Option<String>,
    /// `--signal SIG`: send SIG to the thread that overflowed.
    pub signal: Option<perfring::Signal>,
    /// `--stop-at N`: SIGSTOP the target at overflow N and end, leaving it stopped.
    pub stop_at: Option<u64>,
    /// `--stop-after N`: end after N overflows.
    pub stop_after: Option<u64>,
    /// `--json`.
    pub json: bool,
    /// `-p PID`.
    pub pid: Option<i32>,
    /// `-t TID`.
    pub tid: Option<i32>,
    /// `-C LIST` (repeatable: `-C 0-3,6 -C 8`) or `-a` (every online CPU).
    pub cpus: Option<Vec<i32>>,
    /// `--duration SECS`: end after this long.
    pub duration: Option<std::time::Duration>,
    /// `-g` (`fp`) or `--call-graph fp|dwarf[,BYTES]`: each overflow's call stack.
    pub call_graph: Option<perfring::unwind::CallGraph>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// `--when EXPR` and its companions: report threshold crossings instead of
    /// overflows (see [`WhenArgs`]).
    pub when: Option<WhenArgs>,
    /// `watch -o FILE`: the overflow lines and the summary go to FILE, not stdout.
    pub output: Option<std::path::PathBuf>,
    /// Our own output is stdout and machine-read (`watch --json`, `record -o -`): a
    /// command's stdout goes to our stderr instead, as `perf record -o -` does.
    pub stdout_to_stderr: bool,
}

impl WatchArgs {
    /// The session's target: the command, `-p`, `-t` or `-C` (checked: exactly one).
    pub fn target(&self) -> Result<perfring::sampler::Target, Failure> {
        use perfring::sampler::Target as T;
        Ok(
            match (&self.command[..], self.pid, self.tid, self.cpus.clone()) {
                ([_, ..], ..) => match perfring::profiler::command(&self.command)
                    .ok_or_else(|| usage("no command given"))?
                {
                    T::Command(c) => T::Command(c.stdout_to_stderr(self.stdout_to_stderr)),
                    other => other,
                },
                ([], Some(pid), _, _) => T::Pid(pid),
                ([], None, Some(tid), _) => T::Tid(tid),
                ([], None, None, Some(cpus)) => T::Cpus(cpus),
                ([], None, None, None) => {
                    return Err(usage("nothing to watch: give a command, -p, -t or -C"))
                }
            },
        )
    }

    /// The session these flags describe — target, events (without `-e`, the default
    /// one, said on stderr: `doing` is "watching" or "recording"), rate, ring pages,
    /// `call_graph` — with its program found and its events resolved: a missing program
    /// is a failure, an event that does not resolve the user's input.
    pub fn session(
        &self,
        call_graph: Option<perfring::unwind::CallGraph>,
        doing: &str,
    ) -> Result<perfring::profiler::ProfilerBuilder, Failure> {
        let mut setup = perfring::profiler::Profiler::builder(self.target()?);
        if self.events.is_empty() {
            let (event, why) = perfring::profiler::default_event();
            if let Some(why) = why {
                eprintln!("perfring: no -e given and {why}: {doing} {event}");
            }
            setup = setup.event(event);
        }
        for spec in &self.events {
            setup = setup.event(spec.clone());
        }
        if let Some(rate) = self.rate()? {
            setup = setup.rate(rate);
        }
        if let Some(graph) = call_graph {
            setup = setup.call_graph(graph);
        }
        if let Some(pages) = self.pages {
            setup = setup.ring_pages(pages);
        }
        setup.find_program().map_err(Failure::Runtime)?;
        setup.resolve_events().map_err(Failure::Input)?;
        Ok(setup)
    }

    /// `-c N` or `-F HZ`, if given.
    pub fn rate(&self) -> Result<Option<perfring::profiler::Rate>, Failure> {
        use perfring::profiler::Rate;
        Ok(match (self.period, self.frequency) {
            (Some(_), Some(_)) => {
                return Err(usage(
                    "-c (period) and -F (frequency) are exclusive: give one",
                ))
            }
            (Some(n), None) => Some(Rate::Period(n)),
            (None, Some(hz)) => Some(Rate::Frequency(hz)),
            (None, None) => None,
        })
    }
}

/// Says once, on stderr, which events count user space only because this user may not
/// profile the kernel (as `perf` does; `:u` says it explicitly and silences this).
pub fn say_user_only(events: &[String]) {
    if events.is_empty() {
        return;
    }
    let level = perfring::counter::diagnose::paranoid_level().unwrap_or(2);
    eprintln!(
        "perfring: {}: user space only (perf_event_paranoid is {level}; the kernel needs 1 \
         or CAP_PERFMON)",
        events.join(", ")
    );
}

/// Says once on stderr when the user's locked-memory budget made the rings smaller
/// than the rate wanted (records may then be lost where perf would lose them too).
pub fn say_ring_pages(profiler: &perfring::profiler::Profiler) {
    let r = profiler.ring_pages();
    if r.reduced() {
        eprintln!(
            "perfring: rings of {} data pages, not the {} this rate wants: this user's \
             locked-memory budget allows no more (raise kernel.perf_event_mlock_kb or \
             ulimit -l for more)",
            r.pages, r.wanted
        );
    }
}

/// `perfring watch --when`'s flags.
#[derive(Debug, Default, Clone)]
pub struct WhenArgs {
    /// `--when EXPR`: the condition, e.g. `page-faults > 1000/s`.
    pub expr: String,
    /// `--for DURATION`: how long it must hold (or have ended) before a crossing counts.
    pub min_duration: Option<std::time::Duration>,
    /// `--window DURATION|N`: the window, of CPU time or of a ratio's denominator.
    pub window: Option<perfring::trigger::Span>,
    /// `--hysteresis PCT`: the band, in percent of the threshold.
    pub hysteresis: Option<f64>,
    /// `--per-process`: judge all threads of a process together.
    pub per_process: bool,
}

/// `perfring stat`'s flags: perf stat's.
#[derive(Debug, Default, Clone)]
pub struct StatArgs {
    /// `-e EVENT[,EVENT...]`, repeatable.
    pub events: Vec<String>,
    /// `-p PID`: count a running process instead of a command.
    pub pid: Option<i32>,
    /// `-t TID`: count one running thread.
    pub tid: Option<i32>,
    /// `-a` (every online CPU) or `-C LIST`: count everything on these CPUs.
    pub cpus: Option<CpuChoice>,
    /// `-A` (`--no-aggr`): one line per CPU with `-a`/`-C`.
    pub no_aggr: bool,
    /// `--per-thread`: one line per thread with `-p`/`-t`.
    pub per_thread: bool,
    /// `-I MS`: print the counts of every MS milliseconds.
    pub interval: Option<std::time::Duration>,
    /// `-r N`: run the command N times; means and their spread.
    pub repeat: u32,
    /// `-x SEP`: CSV with this separator.
    pub csv: Option<String>,
    /// `-j`/`--json`: one JSON object per line, with perf's field names.
    pub json: bool,
    /// `-o FILE`: the report goes to FILE instead of stderr.
    pub output: Option<std::path::PathBuf>,
    /// `--duration SECS`: with `-p`, `-t` or CPUs and no command, stop after this long.
    pub duration: Option<std::time::Duration>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// `-a` or `-C LIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuChoice {
    /// `-a`: every online CPU ("system wide").
    All,
    /// `-C LIST`: these CPUs, and the list as written.
    List(Vec<i32>, String),
}

/// Splits perf's comma-separated event list (`-e task-clock,page-faults`), keeping
/// the commas of a PMU's term list (`cpu/event=0x3c,umask=0/`) inside their event.
pub fn split_events(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for piece in list.split(',') {
        if !current.is_empty() {
            current.push(',');
        }
        current.push_str(piece);
        // Inside `pmu/terms/`: a '/' before any ':' opened a term list that an
        // odd number of slashes has not closed yet.
        let in_terms = match (current.find('/'), current.find(':')) {
            (Some(slash), colon) if colon.is_none_or(|c| slash < c) => {
                current.matches('/').count() % 2 == 1
            }
            _ => false,
        };
        if !in_terms {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out.retain(|e| !e.is_empty());
    out
}

/// The events `perf stat` counts by default (perf 6.1's list: the hardware ones show
/// `<not supported>` on a machine without a hardware PMU, as perf's do).
pub const DEFAULT_STAT_EVENTS: &[&str] = &[
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "cycles",
    "instructions",
    "branches",
    "branch-misses",
];

/// Which usage text to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    Main,
    Doctor,
    Explain,
    Stat,
    Watch,
    Inject,
    Record,
    Report,
}

/// A command-line item, owned (lexopt's [`Arg`] borrows the parser).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flag {
    Short(char),
    Long(String),
    Value(OsString),
}

impl From<Arg<'_>> for Flag {
    fn from(arg: Arg<'_>) -> Flag {
        match arg {
            Arg::Short(c) => Flag::Short(c),
            Arg::Long(l) => Flag::Long(l.to_string()),
            Arg::Value(v) => Flag::Value(v),
        }
    }
}

fn next(p: &mut Parser) -> Result<Option<Flag>, Failure> {
    Ok(p.next().map_err(lexopt_error)?.map(Flag::from))
}

/// The flags that describe one event and how to open it, as `perfring watch` takes them.
#[derive(Debug, Default, Clone)]
pub struct EventArgs {
    /// `-e EVENT`.
    pub event: Option<String>,
    /// `-c N`: sample period.
    pub period: Option<u64>,
    /// `-F HZ`: sample frequency.
    pub frequency: Option<u64>,
    /// `--inherit`.
    pub inherit: bool,
    /// `--sample ip,tid,...`.
    pub sample: Option<SampleType>,
    /// `--read-format total_time_enabled,...`.
    pub read_format: Option<ReadFormat>,
    /// `--wakeup-events N`.
    pub wakeup_events: Option<u32>,
    /// `--sigtrap DATA`.
    pub sigtrap: Option<u64>,
    /// `-p PID`.
    pub pid: Option<i32>,
    /// `-t TID`.
    pub tid: Option<i32>,
    /// `-C CPU`.
    pub cpu: Option<i32>,
}

impl EventArgs {
    /// Takes `arg` if it is an event flag; `Ok(false)` if it is not one.
    pub fn take(&mut self, flag: &Flag, p: &mut Parser) -> Result<bool, Failure> {
        let (short, long) = match flag {
            Flag::Short(c) => (Some(*c), ""),
            Flag::Long(l) => (None, l.as_str()),
            Flag::Value(_) => return Ok(false),
        };
        match (short, long) {
            (Some('e'), _) | (_, "event") => self.event = Some(string(p, "-e")?),
            (Some('c'), _) | (_, "count") => self.period = Some(number(p, "-c")?),
            (Some('F'), _) | (_, "freq") => self.frequency = Some(frequency(p, "-F")?),
            (_, "inherit") => self.inherit = true,
            (_, "sample") => {
                self.sample = Some(mask(
                    p,
                    "--sample",
                    SampleType::from_name,
                    SampleType::NAMES,
                )?)
            }
            (_, "read-format") => {
                self.read_format = Some(mask(
                    p,
                    "--read-format",
                    ReadFormat::from_name,
                    ReadFormat::NAMES,
                )?)
            }
            (_, "wakeup-events") => self.wakeup_events = Some(number(p, "--wakeup-events")?),
            (_, "sigtrap") => self.sigtrap = Some(number(p, "--sigtrap")?),
            (Some('p'), _) | (_, "pid") => self.pid = Some(number(p, "-p")?),
            (Some('t'), _) | (_, "tid") => self.tid = Some(number(p, "-t")?),
            (Some('C'), _) | (_, "cpu") => self.cpu = Some(number(p, "-C")?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whom to watch: `-p`/`-t` (one thread or process), `-C` (a CPU), both, or neither.
    pub fn target(&self) -> Result<Scope, Failure> {
        let who = match (self.pid, self.tid) {
            (Some(_), Some(_)) => return Err(usage("-p and -t are exclusive: give one")),
            (Some(id), None) | (None, Some(id)) => Some(id),
            (None, None) => None,
        };
        Ok(match (who, self.cpu) {
            (None, None) => Scope::CallingThread,
            (Some(id), None) => Scope::Thread(id),
            (None, Some(cpu)) => Scope::Cpu(cpu),
            (Some(id), Some(cpu)) => Scope::ThreadOnCpu(id, cpu),
        })
    }

    /// The [`Builder`] these flags describe: exactly what `watch` would open.
    pub fn builder(&self) -> Result<Builder, Failure> {
        // Symbolic forms (mem:SYMBOL, uprobe:PATH:SYMBOL) look in -p's executable.
        let image = match self.pid.or(self.tid) {
            Some(pid) => TargetImage::Process(pid),
            None => TargetImage::None,
        };
        self.builder_in(&image)
    }

    /// [`builder`](Self::builder), with symbolic events resolved in `image` (e.g. a
    /// command about to be started).
    pub fn builder_in(&self, image: &TargetImage) -> Result<Builder, Failure> {
        let Some(name) = &self.event else {
            return Err(usage(
                "no event: give one with -e EVENT (e.g. -e cpu-clock)",
            ));
        };
        if self.period.is_some() && self.frequency.is_some() {
            return Err(usage(
                "-c (period) and -F (frequency) are exclusive: give one",
            ));
        }
        let event = resolve_event(name, image).map_err(Failure::Input)?;
        let mut b = Counter::builder_for(event).target(self.target()?);
        if let Some(n) = self.period {
            b = b.period(n);
        }
        if let Some(hz) = self.frequency {
            b = b.frequency(hz);
        }
        if self.inherit {
            b = b.inherit(true);
        }
        if let Some(s) = self.sample {
            b = b.sample(s);
        }
        if let Some(f) = self.read_format {
            b = b.read_format(f);
        }
        if let Some(n) = self.wakeup_events {
            b = b.wakeup_events(n);
        }
        if let Some(data) = self.sigtrap {
            b = b.sigtrap(data);
        }
        Ok(b)
    }
}

/// Parses the whole command line (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Failure> {
    let mut p = Parser::from_args(args);
    let sub = match next(&mut p)? {
        None => return Err(usage("no command given; try 'perfring --help'")),
        Some(Flag::Short('h')) => return Ok(Command::Help(Topic::Main)),
        Some(Flag::Long(l)) if l == "help" => return Ok(Command::Help(Topic::Main)),
        Some(Flag::Long(l)) if l == "version" => return Ok(Command::Version),
        Some(Flag::Short('v' | 'V')) => return Ok(Command::Version),
        Some(Flag::Value(v)) => v.into_string().map_err(|v| {
            usage(format!(
                "command {v:?} is not valid UTF-8; try 'perfring --help'"
            ))
        })?,
        Some(other) => {
            return Err(usage(format!(
                "unknown option '{}' before the command; try 'perfring --help'",
                show(&other)
            )))
        }
    };
    match sub.as_str() {
        "help" => {
            let topic = match next(&mut p)? {
                None => Topic::Main,
                Some(Flag::Value(v)) => topic(&v.to_string_lossy())?,
                Some(other) => return Err(unknown("help", &other)),
            };
            Ok(Command::Help(topic))
        }
        "doctor" => {
            let mut json = false;
            while let Some(flag) = next(&mut p)? {
                match flag {
                    Flag::Long(l) if l == "json" => json = true,
                    f if is_help(&f) => return Ok(Command::Help(Topic::Doctor)),
                    other => return Err(unknown("doctor", &other)),
                }
            }
            Ok(Command::Doctor { json })
        }
        "explain" => {
            let mut event = EventArgs::default();
            let mut json = false;
            while let Some(flag) = next(&mut p)? {
                if event.take(&flag, &mut p)? {
                    continue;
                }
                match flag {
                    Flag::Long(l) if l == "json" => json = true,
                    f if is_help(&f) => return Ok(Command::Help(Topic::Explain)),
                    other => return Err(unknown("explain", &other)),
                }
            }
            // Validate now, so that usage errors surface before any output.
            event.builder()?;
            Ok(Command::Explain { event, json })
        }
        "version" => Ok(Command::Version),
        "stat" => parse_stat(&mut p),
        "watch" => parse_watch(&mut p),
        "inject" => parse_inject(&mut p),
        "record" => parse_record(&mut p),
        "report" => parse_report(&mut p),
        other => Err(usage(format!(
            "unknown command '{other}'; the commands are doctor, explain, stat, watch, record, report, inject, help and version"
        ))),
    }
}

fn parse_stat(p: &mut Parser) -> Result<Command, Failure> {
    let mut stat = StatArgs {
        repeat: 1,
        ..StatArgs::default()
    };
    while let Some(flag) = next(p)? {
        let long = match &flag {
            Flag::Long(l) => l.as_str(),
            _ => "",
        };
        match (&flag, long) {
            (Flag::Short('e'), _) | (_, "event") => {
                stat.events.extend(split_events(&string(p, "-e")?))
            }
            (Flag::Short('p'), _) | (_, "pid") => stat.pid = Some(number(p, "-p")?),
            (Flag::Short('t'), _) | (_, "tid") => stat.tid = Some(number(p, "-t")?),
            (Flag::Short('a'), _) | (_, "all-cpus") => stat.cpus = Some(CpuChoice::All),
            (Flag::Short('C'), _) | (_, "cpu") => {
                let s = string(p, "-C")?;
                let list = perfring::counter::parse_cpu_list(&s)
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| {
                        usage(format!("-C {s:?}: expected a CPU list such as 0 or 0-3,5"))
                    })?;
                stat.cpus = Some(CpuChoice::List(list, s));
            }
            (Flag::Short('A'), _) | (_, "no-aggr") => stat.no_aggr = true,
            (_, "per-thread") => stat.per_thread = true,
            (Flag::Short('I'), _) | (_, "interval-print") => {
                let ms: u64 = positive(p, "-I")?;
                if ms < 10 {
                    return Err(usage(format!(
                        "-I {ms}: print interval must be >= 10ms (as perf's)"
                    )));
                }
                stat.interval = Some(std::time::Duration::from_millis(ms));
            }
            (Flag::Short('r'), _) | (_, "repeat") => stat.repeat = positive(p, "-r")?,
            (Flag::Short('x'), _) | (_, "field-separator") => stat.csv = Some(string(p, "-x")?),
            (Flag::Short('j'), _) | (_, "json") => stat.json = true,
            (Flag::Short('o'), _) | (_, "output") => {
                let v = p.value().map_err(|_| usage("-o needs a file name"))?;
                stat.output = Some(v.into());
            }
            (_, "duration") => {
                let s = string(p, "--duration")?;
                let secs = s
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0 && *x < 1e9)
                    .ok_or_else(|| {
                        usage(format!(
                            "--duration {s:?}: expected a positive number of seconds"
                        ))
                    })?;
                stat.duration = Some(std::time::Duration::from_secs_f64(secs));
            }
            (f, _) if is_help(f) => return Ok(Command::Help(Topic::Stat)),
            (Flag::Value(program), _) => {
                // The command's own flags are its business, not ours.
                stat.command.push(program.clone());
                stat.command.extend(p.raw_args().map_err(lexopt_error)?);
            }
            (other, _) => return Err(unknown("stat", other)),
        }
    }
    let has_command = !stat.command.is_empty();
    let tasks = usize::from(stat.pid.is_some()) + usize::from(stat.tid.is_some());
    if tasks + usize::from(has_command) > 1 {
        return Err(usage(
            "stat: give one of -p PID, -t TID or a command (-- COMMAND ARGS)",
        ));
    }
    if tasks > 0 && stat.cpus.is_some() {
        return Err(usage(
            "stat: -a/-C count whole CPUs; -p/-t count threads: give one or the other",
        ));
    }
    if tasks + usize::from(has_command) == 0 && stat.cpus.is_none() {
        return Err(usage(
            "stat: nothing to count: give a command (perfring stat -e EVENT -- COMMAND ARGS), -p PID, -t TID, or -a/-C CPUS",
        ));
    }
    if stat.duration.is_some() && has_command {
        return Err(usage(
            "stat: --duration goes with -p PID, -t TID or -a/-C; a command is counted until it exits",
        ));
    }
    if stat.per_thread && tasks == 0 {
        return Err(usage(
            "stat: the --per-thread option is only available when monitoring via -p or -t (as perf's)",
        ));
    }
    if stat.no_aggr && stat.cpus.is_none() {
        return Err(usage("stat: -A (one line per CPU) goes with -a or -C"));
    }
    if stat.repeat > 1 && !has_command {
        return Err(usage(
            "stat: -r N repeats a command: give one (-- COMMAND ARGS)",
        ));
    }
    if stat.repeat > 1 && stat.interval.is_some() {
        return Err(usage("stat: -r and -I do not go together (as in perf)"));
    }
    if stat.json && stat.csv.is_some() {
        return Err(usage("stat: -x (CSV) and --json are exclusive: give one"));
    }
    if stat.events.is_empty() {
        stat.events = DEFAULT_STAT_EVENTS.iter().map(|e| e.to_string()).collect();
    }
    Ok(Command::Stat(stat))
}

fn parse_watch(p: &mut Parser) -> Result<Command, Failure> {
    let mut w = WatchArgs::default();
    // The --when family, gathered apart and checked together below.
    let mut when: Option<String> = None;
    let mut when_flag: Option<&'static str> = None;
    let mut wa = WhenArgs::default();
    while let Some(flag) = next(p)? {
        if take_sampling(&flag, p, &mut w)? {
            continue;
        }
        let long = match &flag {
            Flag::Long(l) => l.as_str(),
            _ => "",
        };
        match (&flag, long) {
            (_, "budget") => w.budget = Some(positive(p, "--budget")?),
            (_, "exec") => w.exec = Some(string(p, "--exec")?),
            (_, "signal") => {
                let s = string(p, "--signal")?;
                let sig = s.parse::<perfring::Signal>().map_err(|_| {
                    usage(format!(
                        "--signal {s:?}: not a signal; give a name (USR1, SIGUSR2, RTMIN+1) or a number"
                    ))
                })?;
                w.signal = Some(sig);
            }
            (_, "stop-at") => w.stop_at = Some(positive(p, "--stop-at")?),
            (_, "stop-after") => w.stop_after = Some(positive(p, "--stop-after")?),
            (_, "json") => w.json = true,
            (Flag::Short('o'), _) | (_, "output") => {
                let v = p.value().map_err(|_| usage("-o needs a file name"))?;
                w.output = Some(v.into());
            }
            (_, "when") => when = Some(string(p, "--when")?),
            (_, "for") => {
                wa.min_duration = Some(duration(p, "--for")?);
                when_flag = Some("--for");
            }
            (_, "window") => {
                let s = string(p, "--window")?;
                wa.window = Some(match s.parse::<u64>() {
                    Ok(0) => return Err(usage("--window 0: expected at least 1")),
                    Ok(n) => perfring::trigger::Span::Events(n),
                    Err(_) => perfring::trigger::Span::Time(parse_duration(&s, "--window")?),
                });
                when_flag = Some("--window");
            }
            (_, "hysteresis") => {
                let s = string(p, "--hysteresis")?;
                let pct = s.trim_end_matches('%').parse::<f64>().ok();
                match pct {
                    Some(v) if (0.0..100.0).contains(&v) => wa.hysteresis = Some(v / 100.0),
                    _ => {
                        return Err(usage(format!(
                            "--hysteresis {s:?}: expected a percentage of the threshold in [0, 100), e.g. 10"
                        )))
                    }
                }
                when_flag = Some("--hysteresis");
            }
            (_, "per-process") => {
                wa.per_process = true;
                when_flag = Some("--per-process");
            }
            (Flag::Short('g'), _) => w.call_graph = Some(perfring::unwind::CallGraph::Fp),
            (_, "call-graph") => {
                let mode = string(p, "--call-graph")?;
                w.call_graph = Some(mode.parse().map_err(Failure::Input)?);
            }
            (f, _) if is_help(f) => return Ok(Command::Help(Topic::Watch)),
            (other, _) => return Err(unknown("watch", other)),
        }
    }
    check_sampling(&w, "watch")?;
    // JSON lines on stdout are read by a program: the command's own stdout goes to
    // stderr, as perf record's does when its data goes to stdout.
    w.stdout_to_stderr = w.json && w.output.is_none();
    if w.cpus.is_some() && (w.signal.is_some() || w.stop_at.is_some()) {
        return Err(usage(
            "watch: --signal and --stop-at act on the thread that overflowed, which with -C may be any process; watch -p PID, -t TID or a command instead",
        ));
    }
    if let (Some(at), Some(after)) = (w.stop_at, w.stop_after) {
        if after < at {
            return Err(usage(format!(
                "watch: --stop-after {after} ends the watch before --stop-at {at} is reached"
            )));
        }
    }
    match when {
        Some(expr) => {
            let conflict = [
                (!w.events.is_empty(), "-e"),
                (w.period.is_some(), "-c"),
                (w.frequency.is_some(), "-F"),
                (w.budget.is_some(), "--budget"),
                (w.cpus.is_some(), "-C"),
            ];
            if let Some((_, flag)) = conflict.iter().find(|(set, _)| *set) {
                return Err(usage(format!(
                    "watch: --when takes its events from the expression and its period from --window; {flag} does not go with it"
                )));
            }
            if wa.per_process && w.tid.is_some() {
                return Err(usage(
                    "watch: --per-process needs a process (a command or -p PID), not -t TID",
                ));
            }
            wa.expr = expr;
            w.when = Some(wa);
        }
        None => {
            if let Some(flag) = when_flag {
                return Err(usage(format!(
                    "watch: {flag} goes with --when EXPR (e.g. --when 'page-faults > 1000/s')"
                )));
            }
        }
    }
    Ok(Command::Watch(w))
}

/// A duration such as `500ms`, `2s`, `1.5s`, `100us`, `20ns`.
fn parse_duration(s: &str, flag: &str) -> Result<std::time::Duration, Failure> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        _ => f64::NAN,
    };
    match num.parse::<f64>() {
        Ok(v) if scale.is_finite() && v > 0.0 && (v * scale).is_finite() => {
            Ok(std::time::Duration::from_secs_f64(v * scale))
        }
        _ => Err(usage(format!(
            "{flag} {s:?}: expected a positive duration with a unit, e.g. 500ms, 2s, 100us"
        ))),
    }
}

fn duration(p: &mut Parser, flag: &str) -> Result<std::time::Duration, Failure> {
    let s = string(p, flag)?;
    parse_duration(&s, flag)
}

fn parse_inject(p: &mut Parser) -> Result<Command, Failure> {
    use perfring::inject::{Action, InjectConfig, Rate, RecordFormat, DEFAULT_OUTPUT};
    let (mut events, mut period, mut freq) = (Vec::new(), None, None);
    let (mut actions, mut output, mut command) = (Vec::new(), None, Vec::new());
    let (mut signal, mut format) = (None, None);
    while let Some(flag) = next(p)? {
        let long = match &flag {
            Flag::Long(l) => l.as_str(),
            _ => "",
        };
        match (&flag, long) {
            (Flag::Short('e'), _) | (_, "event") => events.push(string(p, "-e")?),
            (Flag::Short('c'), _) | (_, "count") => period = Some(positive(p, "-c")?),
            (Flag::Short('F'), _) | (_, "freq") => freq = Some(frequency(p, "-F")?),
            (_, "action") => {
                let a = string(p, "--action")?;
                actions.push(a.parse::<Action>().map_err(Failure::Input)?);
            }
            (Flag::Short('o'), _) | (_, "output") => output = Some(string(p, "-o")?),
            (_, "format") => {
                let f = string(p, "--format")?;
                format = Some(f.parse::<RecordFormat>().map_err(Failure::Input)?);
            }
            (_, "signal") => {
                let s = string(p, "--signal")?;
                let sig = s.parse::<perfring::Signal>().map_err(|_| {
                    usage(format!(
                        "--signal {s:?}: not a signal; give a real-time one (RTMIN+3) or a number"
                    ))
                })?;
                signal = Some(sig);
            }
            (f, _) if is_help(f) => return Ok(Command::Help(Topic::Inject)),
            (Flag::Value(program), _) => {
                command.push(program.clone());
                command.extend(p.raw_args().map_err(lexopt_error)?);
            }
            (other, _) => return Err(unknown("inject", other)),
        }
    }
    if command.is_empty() {
        return Err(usage(
            "inject: no command: give one after --, e.g. perfring inject -e mem:hot:x -c 100 --action record -- ./prog",
        ));
    }
    let rate = match (period, freq) {
        (Some(_), Some(_)) => {
            return Err(usage(
                "inject: -c (period) and -F (frequency) are exclusive: give one",
            ))
        }
        (Some(n), None) => Rate::Period(n),
        (None, Some(hz)) => Rate::Frequency(hz),
        (None, None) => return Err(usage("inject: give a period (-c N) or a frequency (-F HZ)")),
    };
    let output: std::path::PathBuf = output.unwrap_or_else(|| DEFAULT_OUTPUT.to_string()).into();
    let config = InjectConfig {
        events,
        rate,
        actions,
        format: format.unwrap_or_else(|| RecordFormat::for_path(&output)),
        output,
        signal,
    };
    config.validate().map_err(Failure::Input)?;
    Ok(Command::Inject(InjectArgs { config, command }))
}

/// Takes one of the target, event and sampling flags `watch` and `record` share (`-e`,
/// `-c`, `-F`, `-m`, `-p`, `-t`, `-C`, and the command with its arguments): true if
/// `flag` was one.
fn take_sampling(flag: &Flag, p: &mut Parser, w: &mut WatchArgs) -> Result<bool, Failure> {
    let long = match flag {
        Flag::Long(l) => l.as_str(),
        _ => "",
    };
    match (flag, long) {
        (Flag::Short('e'), _) | (_, "event") => w.events.push(string(p, "-e")?),
        (Flag::Short('c'), _) | (_, "count") => w.period = Some(positive(p, "-c")?),
        (Flag::Short('F'), _) | (_, "freq") => w.frequency = Some(frequency(p, "-F")?),
        (Flag::Short('m'), _) | (_, "mmap-pages") => w.pages = Some(mmap_pages(p)?),
        (Flag::Short('p'), _) | (_, "pid") => w.pid = Some(number(p, "-p")?),
        (Flag::Short('t'), _) | (_, "tid") => w.tid = Some(number(p, "-t")?),
        (Flag::Short('C'), _) | (_, "cpu") => {
            let list = string(p, "-C")?;
            let more = perfring::counter::parse_cpu_list(&list).ok_or_else(|| {
                usage(format!(
                    "-C {list:?}: expected CPU numbers and ranges, e.g. -C 0-3,6"
                ))
            })?;
            merge_cpus(w, more);
        }
        (Flag::Short('a'), _) | (_, "all-cpus") => {
            let all = perfring::counter::online_cpus().map_err(Failure::Runtime)?;
            merge_cpus(w, all);
        }
        (_, "duration") => {
            // Seconds, as perf and `stat --duration` take them, or with a unit.
            let v = string(p, "--duration")?;
            w.duration = Some(match v.parse::<f64>() {
                Ok(secs) if secs > 0.0 && secs.is_finite() => {
                    std::time::Duration::from_secs_f64(secs)
                }
                _ => parse_duration(&v, "--duration")?,
            });
        }
        (Flag::Value(program), _) => {
            // The command's own flags are its business, not ours.
            w.command.push(program.clone());
            w.command.extend(p.raw_args().map_err(lexopt_error)?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Adds `more` to the CPUs given so far (`-C` may be repeated, and `-a` is every one).
fn merge_cpus(w: &mut WatchArgs, more: Vec<i32>) {
    let cpus = w.cpus.get_or_insert_with(Vec::new);
    cpus.extend(more);
    cpus.sort_unstable();
    cpus.dedup();
}

/// One target, and not both `-c` and `-F`.
fn check_sampling(w: &WatchArgs, command: &str) -> Result<(), Failure> {
    let targets = usize::from(w.pid.is_some())
        + usize::from(w.tid.is_some())
        + usize::from(w.cpus.is_some())
        + usize::from(!w.command.is_empty());
    if targets == 0 {
        return Err(usage(format!(
            "{command}: nothing to {command}: give a command (perfring {command} -e EVENT -- COMMAND ARGS), -p PID, -t TID, -C CPUS or -a"
        )));
    }
    if w.cpus.is_some() && !w.command.is_empty() && targets == 2 {
        // perf's `-a -- sleep N` idiom: the command is only a timer there.
        return Err(usage(format!(
            "{command}: -a/-C watch whole CPUs and take no command: give --duration SECONDS for how long (perf's `-a -- sleep N`), or drop -a/-C to {command} the command alone"
        )));
    }
    if targets > 1 {
        return Err(usage(format!(
            "{command}: give one target: -p PID, -t TID, -C CPUS (or -a) or a command (-- COMMAND ARGS)"
        )));
    }
    if w.period.is_some() && w.frequency.is_some() {
        return Err(usage(format!(
            "{command}: -c (period) and -F (frequency) are exclusive: give one"
        )));
    }
    Ok(())
}

fn parse_record(p: &mut Parser) -> Result<Command, Failure> {
    let mut r = RecordArgs::default();
    while let Some(flag) = next(p)? {
        if take_sampling(&flag, p, &mut r.sampling)? {
            continue;
        }
        let long = match &flag {
            Flag::Long(l) => l.as_str(),
            _ => "",
        };
        match (&flag, long) {
            (Flag::Short('o'), _) | (_, "output") => {
                let v = p
                    .value()
                    .map_err(|_| usage("-o needs a file name (or - for stdout)"))?;
                r.output = Some(v.into());
            }
            (_, "format") => {
                r.format_given = true;
                r.format = format(p)?;
            }
            (_, "off-cpu") => r.off_cpu = true,
            (Flag::Short('g'), _) => r.call_graph = Some(perfring::unwind::CallGraph::Fp),
            (_, "call-graph") => {
                let mode = string(p, "--call-graph")?;
                r.call_graph = Some(mode.parse().map_err(Failure::Input)?);
            }
            (_, "exact-periods") => r.exact_periods = true,
            (f, _) if take_push(f, p, &mut r.push)? => {}
            (f, _) if is_help(f) => return Ok(Command::Help(Topic::Record)),
            (other, _) => return Err(unknown("record", other)),
        }
    }
    check_sampling(&r.sampling, "record")?;
    check_push(&mut r)?;
    let stdout = r.output.as_deref() == Some(std::path::Path::new("-"));
    // The profile is stdout (perf.data in perf's pipe format, or another format): the
    // command's own stdout goes to stderr, as perf record -o - does.
    r.sampling.stdout_to_stderr = stdout;
    Ok(Command::Record(r))
}

/// `perfring record --push URL`'s flags: where the profiles go, how often, and how to be
/// let in. Credentials are not flags: they come from the environment or a file.
#[derive(Debug, Default, Clone)]
pub struct PushArgs {
    /// `--push URL`.
    pub url: Option<String>,
    /// `--every DURATION`: a profile per interval (agent mode); else one at the end.
    pub every: Option<std::time::Duration>,
    /// `--push-protocol pyroscope|pyroscope-ingest|parca`.
    pub protocol: perfring::push::Protocol,
    /// `--push-ca FILE`, repeatable: CAs trusted beside the system's.
    pub ca: Vec<std::path::PathBuf>,
    /// `--push-user USER`: basic authentication (the password from
    /// `$PERFRING_PUSH_PASSWORD` or `--push-password-file`).
    pub user: Option<String>,
    /// `--push-password-file FILE`.
    pub password_file: Option<std::path::PathBuf>,
    /// `--push-token-file FILE`: a bearer token (else `$PERFRING_PUSH_TOKEN`).
    pub token_file: Option<std::path::PathBuf>,
    /// `--push-tenant ID`: `X-Scope-OrgID`.
    pub tenant: Option<String>,
    /// `--push-header 'NAME: VALUE'`, repeatable.
    pub headers: Vec<(String, String)>,
    /// `--push-label KEY=VALUE`, repeatable.
    pub labels: Vec<(String, String)>,
    /// `--push-service NAME`: `service_name` (default: the target's program).
    pub service: Option<String>,
    /// `--push-timeout DURATION`: one request's limit.
    pub timeout: Option<std::time::Duration>,
    /// `--push-queue N`: profiles kept while the store is slow or down.
    pub queue: Option<usize>,
}

/// Takes one of `record`'s push flags: true if `flag` was one.
fn take_push(flag: &Flag, p: &mut Parser, a: &mut PushArgs) -> Result<bool, Failure> {
    let Flag::Long(long) = flag else {
        return Ok(false);
    };
    match long.as_str() {
        "push" => a.url = Some(string(p, "--push")?),
        "every" => {
            let s = string(p, "--every")?;
            // Minutes too: an agent's interval is seconds to minutes.
            a.every = Some(
                match s.strip_suffix("min").or_else(|| s.strip_suffix('m')) {
                    Some(n) if !s.ends_with("ms") => match n.parse::<f64>() {
                        Ok(v) if v > 0.0 && v.is_finite() => {
                            std::time::Duration::from_secs_f64(v * 60.0)
                        }
                        _ => {
                            return Err(usage(format!(
                                "--every {s:?}: expected a positive duration, e.g. 15s, 1m"
                            )))
                        }
                    },
                    _ => parse_duration(&s, "--every")?,
                },
            );
        }
        "push-protocol" => {
            a.protocol = string(p, "--push-protocol")?
                .parse()
                .map_err(Failure::Input)?;
        }
        "push-ca" => a.ca.push(
            p.value()
                .map_err(|_| usage("--push-ca needs a PEM file"))?
                .into(),
        ),
        "push-user" => a.user = Some(string(p, "--push-user")?),
        "push-password-file" => {
            a.password_file = Some(
                p.value()
                    .map_err(|_| usage("--push-password-file needs a file"))?
                    .into(),
            )
        }
        "push-token-file" => {
            a.token_file = Some(
                p.value()
                    .map_err(|_| usage("--push-token-file needs a file"))?
                    .into(),
            )
        }
        "push-password" | "push-token" | "push-key" | "push-api-key" => {
            // The value is not read, let alone echoed: it would be in `ps` already.
            return Err(usage(format!(
                "--{long}: credentials are not taken on the command line, where any user can read them in the process list; \
                 put the password in $PERFRING_PUSH_PASSWORD or a file (--push-password-file FILE) with --push-user USER, \
                 or a token in $PERFRING_PUSH_TOKEN or a file (--push-token-file FILE)"
            )));
        }
        "push-tenant" => a.tenant = Some(string(p, "--push-tenant")?),
        "push-header" => {
            let h = string(p, "--push-header")?;
            let Some((name, value)) = h.split_once(':') else {
                return Err(usage("--push-header: expected 'NAME: VALUE'"));
            };
            a.headers
                .push((name.trim().to_string(), value.trim().to_string()));
        }
        "push-label" => {
            let l = string(p, "--push-label")?;
            let Some((k, v)) = l.split_once('=') else {
                return Err(usage(format!(
                    "--push-label {l:?}: expected KEY=VALUE, e.g. env=prod"
                )));
            };
            a.labels.push((k.trim().to_string(), v.trim().to_string()));
        }
        "push-service" => a.service = Some(string(p, "--push-service")?),
        "push-timeout" => a.timeout = Some(duration(p, "--push-timeout")?),
        "push-queue" => a.queue = Some(positive(p, "--push-queue")?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// `--push` sends pprof: an explicit `--format perf` is a conflict, `--every` writes
/// no file, and every `--push-*` flag needs `--push`. The endpoint (URL, headers,
/// labels, tenant, service) is checked now, so that a bad one fails before the target
/// starts.
fn check_push(r: &mut RecordArgs) -> Result<(), Failure> {
    let a = &r.push;
    let Some(url) = &a.url else {
        let given = a.every.is_some()
            || !a.ca.is_empty()
            || a.user.is_some()
            || a.password_file.is_some()
            || a.token_file.is_some()
            || a.tenant.is_some()
            || !a.headers.is_empty()
            || !a.labels.is_empty()
            || a.service.is_some()
            || a.timeout.is_some()
            || a.queue.is_some()
            || a.protocol != perfring::push::Protocol::default();
        if given {
            return Err(usage(
                "record: --every and the --push-* options go with --push URL",
            ));
        }
        return Ok(());
    };
    if r.format_given && r.format != OutputFormat::Pprof {
        let f = r.format.name();
        return Err(usage(format!(
            "record: --push sends a pprof profile, not {f}: drop --format {f} (or drop --push and keep the {f} file)"
        )));
    }
    r.format = OutputFormat::Pprof;
    if a.every.is_some() && r.output.is_some() {
        return Err(usage(
            "record: --every pushes a profile per interval and writes no file: drop -o (or drop --every for one profile, pushed and written)",
        ));
    }
    if r.output.as_deref() == Some(std::path::Path::new("-")) {
        return Err(usage(
            "record: --push sends the profile itself: -o - (stdout) does not go with it",
        ));
    }
    if a.user.is_none() && a.password_file.is_some() {
        return Err(usage(
            "record: --push-password-file goes with --push-user USER",
        ));
    }
    if a.user.is_some() && a.token_file.is_some() {
        return Err(usage(
            "record: give one of --push-user (basic authentication) and --push-token-file (bearer token)",
        ));
    }
    crate::push::endpoint(a, url).map_err(Failure::Input)?;
    Ok(())
}

/// `--format F`'s value.
fn format(p: &mut Parser) -> Result<OutputFormat, Failure> {
    let f = string(p, "--format")?;
    OutputFormat::from_name(&f)
        .ok_or_else(|| usage(format!("--format {f:?}: expected {}", OutputFormat::NAMES)))
}

fn parse_report(p: &mut Parser) -> Result<Command, Failure> {
    let mut r = ReportArgs {
        input: "perf.data".into(),
        sort: perfring::report::SortKey::Symbol,
        children: None,
        format: None,
        output: None,
    };
    let mut input = None;
    while let Some(flag) = next(p)? {
        let long = match &flag {
            Flag::Long(l) => l.as_str(),
            _ => "",
        };
        match (&flag, long) {
            (Flag::Short('i'), _) | (_, "input") => {
                let v = p.value().map_err(|_| usage("-i needs a file name"))?;
                input = Some(v.into());
            }
            (Flag::Value(v), _) if input.is_none() => input = Some(v.into()),
            (_, "sort") | (Flag::Short('s'), _) => {
                let s = string(p, "--sort")?;
                r.sort = s.parse().map_err(|_| {
                    usage(format!("--sort {s:?}: expected symbol, dso, comm or tid"))
                })?;
            }
            (_, "children") => r.children = Some(true),
            (_, "no-children") => r.children = Some(false),
            // perf report's spelling of the text table, the only one there is.
            (_, "stdio") => {}
            (_, "format") => r.format = Some(format(p)?),
            (Flag::Short('o'), _) | (_, "output") => {
                let v = p
                    .value()
                    .map_err(|_| usage("-o needs a file name (or - for stdout)"))?;
                r.output = Some(v.into());
            }
            (f, _) if is_help(f) => return Ok(Command::Help(Topic::Report)),
            (other, _) => return Err(unknown("report", other)),
        }
    }
    if let Some(i) = input {
        r.input = i;
    }
    if r.output.is_some() && r.format.is_none() {
        return Err(usage(
            "report: -o goes with --format (svg, folded, firefox, pprof or perf); the table goes to stdout",
        ));
    }
    let stdout = r.output.as_deref() == Some(std::path::Path::new("-"));
    if stdout && r.format == Some(OutputFormat::Perf) {
        return Err(usage(
            "report: perf.data cannot go to stdout (its header is rewritten at the end); give -o FILE",
        ));
    }
    Ok(Command::Report(r))
}

/// `-F HZ` as perf takes it: `max` is the kernel's maximum
/// (`/proc/sys/kernel/perf_event_max_sample_rate`), and a rate above it is lowered to
/// it, with perf's notices on stderr.
fn frequency(p: &mut Parser, flag: &str) -> Result<u64, Failure> {
    let s = string(p, flag)?;
    let max = perfring::proc::max_sample_rate();
    if s == "max" {
        let max = max.ok_or_else(|| {
            usage(format!(
                "{flag} max: /proc/sys/kernel/perf_event_max_sample_rate cannot be read; give a rate in Hz"
            ))
        })?;
        eprintln!("info: Using a maximum frequency rate of {max} Hz");
        return Ok(max);
    }
    let hz = parse_u64(&s).filter(|&n| n > 0).ok_or_else(|| {
        usage(format!(
            "{flag} {s:?}: expected a rate in Hz (at least 1) or max"
        ))
    })?;
    match max {
        Some(max) if hz > max => {
            eprintln!(
                "warning: Maximum frequency rate ({max} Hz) exceeded, throttling from {hz} Hz to {max} Hz.\n         \
                 The limit can be raised via /proc/sys/kernel/perf_event_max_sample_rate.\n         \
                 The kernel will lower it when perf's interrupts take too long."
            );
            Ok(max)
        }
        _ => Ok(hz),
    }
}

/// `-m PAGES` as perf takes it: a number of pages that is not a power of two is
/// rounded up to one, and perf's notice says so.
fn mmap_pages(p: &mut Parser) -> Result<usize, Failure> {
    let n: usize = positive(p, "-m")?;
    if n.is_power_of_two() {
        return Ok(n);
    }
    let pages = n
        .checked_next_power_of_two()
        .ok_or_else(|| usage(format!("-m {n}: too many pages")))?;
    eprintln!(
        "rounding mmap pages size to {} ({pages} pages)",
        size_text((pages * perfring::ring::page_size()) as u64)
    );
    Ok(pages)
}

/// A size as perf's `unit_number__scnprintf` writes it: divided by 1024 while the
/// quotient stays above 1, with the unit's letter (`16K`, `1024K`, `2M`).
fn size_text(mut n: u64) -> String {
    const UNITS: &[u8] = b"BKMGTPE";
    let mut i = 0;
    while n / 1024 > 1 && i < UNITS.len() - 1 {
        n /= 1024;
        i += 1;
    }
    format!("{n}{}", char::from(UNITS[i]))
}

/// A number that must be at least 1.
fn positive<T: TryFrom<u64>>(p: &mut Parser, flag: &str) -> Result<T, Failure> {
    let n: u64 = number(p, flag)?;
    if n == 0 {
        return Err(usage(format!("{flag} 0: expected at least 1")));
    }
    T::try_from(n).map_err(|_| usage(format!("{flag} {n}: out of range")))
}

fn topic(name: &str) -> Result<Topic, Failure> {
    match name {
        "doctor" => Ok(Topic::Doctor),
        "explain" => Ok(Topic::Explain),
        "stat" => Ok(Topic::Stat),
        "watch" => Ok(Topic::Watch),
        "inject" => Ok(Topic::Inject),
        "record" => Ok(Topic::Record),
        "report" => Ok(Topic::Report),
        other => Err(usage(format!(
            "no help for '{other}'; the commands are doctor, explain, stat, watch, record, report and inject"
        ))),
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::Usage(msg.into())
}

fn is_help(flag: &Flag) -> bool {
    matches!(flag, Flag::Short('h')) || matches!(flag, Flag::Long(l) if l == "help")
}

fn show(flag: &Flag) -> String {
    match flag {
        Flag::Short(c) => format!("-{c}"),
        Flag::Long(l) => format!("--{l}"),
        Flag::Value(v) => v.to_string_lossy().into_owned(),
    }
}

fn unknown(command: &str, arg: &Flag) -> Failure {
    let what = match arg {
        Flag::Value(_) => "unexpected argument",
        _ => "unknown option",
    };
    usage(format!(
        "{what} '{}' for 'perfring {command}'; see 'perfring {command} --help'",
        show(arg)
    ))
}

fn lexopt_error(e: lexopt::Error) -> Failure {
    usage(e.to_string())
}

fn string(p: &mut Parser, flag: &str) -> Result<String, Failure> {
    let v = p
        .value()
        .map_err(|_| usage(format!("{flag} needs a value")))?;
    v.into_string()
        .map_err(|v| usage(format!("{flag} {v:?}: not valid UTF-8")))
}

/// Decimal, or hex with `0x`.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn number<T: TryFrom<u64>>(p: &mut Parser, flag: &str) -> Result<T, Failure> {
    let s = string(p, flag)?;
    parse_u64(&s)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| {
            usage(format!(
                "{flag} {s:?}: expected a non-negative number (decimal or 0x hex) in range"
            ))
        })
}

fn mask<M: std::ops::BitOrAssign + Default>(
    p: &mut Parser,
    flag: &str,
    from_name: fn(&str) -> Option<M>,
    names: &[&str],
) -> Result<M, Failure> {
    let s = string(p, flag)?;
    let mut m = M::default();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        m |= from_name(name).ok_or_else(|| {
            usage(format!(
                "{flag}: unknown flag '{name}'; known: {}",
                names.join(",").to_ascii_lowercase()
            ))
        })?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Command, Failure> {
        parse(line.split_whitespace().map(OsString::from))
    }

    fn explain(line: &str) -> Builder {
        match parse_str(line) {
            Ok(Command::Explain { event, .. }) => event.builder().unwrap(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn event_flags_become_builder_calls() {
        let b = explain(
            "explain -e cpu-clock -c 1000 --inherit --sample ip,TID --wakeup-events 4 -t 42",
        );
        let a = b.attr();
        assert_eq!((a.type_, a.config), (1, 0));
        assert_eq!(a.sample_type, (SampleType::IP | SampleType::TID).bits());
        assert_eq!(a.inherit(), 1);
        assert_eq!(b.target_of(), Scope::Thread(42));
        let b = explain("explain -e cpu-clock -F 0x10 -C 1 --sigtrap 7");
        assert_eq!((b.attr().freq(), b.attr().sigtrap()), (1, 1));
        assert_eq!(b.target_of(), Scope::Cpu(1));
    }

    #[test]
    fn usage_errors_name_the_flag() {
        let err = |line: &str| match parse_str(line) {
            Err(Failure::Usage(msg)) => msg,
            other => panic!("{line}: {other:?}"),
        };
        assert!(err("explain -e cpu-clock --bogus").contains("'--bogus'"));
        assert!(err("explain -e cpu-clock -c 1 -F 2").contains("exclusive"));
        assert!(err("explain -e cpu-clock -c lots").contains(r#"-c "lots""#));
        assert!(err("explain -e cpu-clock --sample ip,nope").contains("'nope'"));
        assert!(err("explain -c 1").contains("-e EVENT"));
        assert!(err("explain -e cpu-clock -p 1 -t 2").contains("exclusive"));
        assert!(err("frobnicate").contains("unknown command"));
        assert!(err("doctor --jsn").contains("'--jsn'"));
        assert!(matches!(
            parse_str("explain -e no-such-event"),
            Err(Failure::Input(_))
        ));
        assert!(err("stat -e cpu-clock").contains("nothing to count"));
        assert!(err("stat -p 1 -- true").contains("give one of"));
        assert!(err("stat -p 1 -a").contains("one or the other"));
        assert!(err("stat --per-thread -- true").contains("-p or -t"));
        assert!(err("stat -r 3 -p 1").contains("repeats a command"));
        assert!(err("stat -I 5 -- true").contains(">= 10ms"));
        assert!(err("stat -C x -- true").contains("CPU list"));
        assert!(err("stat --duration 1 -- true").contains("-p PID"));
        assert!(err("stat -p 1 --duration -3").contains("--duration"));
        assert!(err("watch --when cs>1/s -e cs -- true").contains("-e does not go with it"));
        assert!(err("watch --when cs>1/s -C 0").contains("-C does not go with it"));
        assert!(err("watch --window 5ms -- true").contains("--window goes with --when"));
        assert!(err("watch --when cs>1/s --for 3 -- true").contains("--for \"3\""));
        assert!(err("watch --when cs>1/s --hysteresis 120 -- true").contains("[0, 100)"));
        assert!(err("watch --when cs>1/s --per-process -t 1").contains("--per-process"));
        let Ok(Command::Watch(w)) = parse_str(
            "watch --when cs>1/s --for 1.5s --window 500us --hysteresis 5% --per-process -p 9",
        ) else {
            panic!("--when flags")
        };
        let when = w.when.unwrap();
        assert_eq!(when.expr, "cs>1/s");
        assert_eq!(
            when.min_duration,
            Some(std::time::Duration::from_millis(1500))
        );
        assert_eq!(
            when.window,
            Some(perfring::trigger::Span::Time(
                std::time::Duration::from_micros(500)
            ))
        );
        assert_eq!(when.hysteresis, Some(0.05));
        assert!(when.per_process);
        let Ok(Command::Watch(w)) = parse_str("watch --when a/b>1 --window 1000 -- x") else {
            panic!("--window N")
        };
        assert_eq!(
            w.when.unwrap().window,
            Some(perfring::trigger::Span::Events(1000))
        );
    }

    #[test]
    fn stat_leaves_the_command_flags_alone() {
        let Ok(Command::Stat(s)) = parse_str("stat -e cpu-clock -e page-faults sh -c exit") else {
            panic!()
        };
        assert_eq!(s.events, ["cpu-clock", "page-faults"]);
        assert_eq!(s.command, ["sh", "-c", "exit"]);
        let Ok(Command::Stat(s)) = parse_str("stat -p 9 --duration 0.5 --json") else {
            panic!()
        };
        assert_eq!((s.pid, s.json), (Some(9), true));
        assert_eq!(s.events.len(), DEFAULT_STAT_EVENTS.len());
        let Ok(Command::Stat(s)) =
            parse_str("stat -e task-clock,cpu/event=0x3c,umask=0/,mem:0x10/4:w -x ; -r 3 ls")
        else {
            panic!()
        };
        assert_eq!(
            s.events,
            ["task-clock", "cpu/event=0x3c,umask=0/", "mem:0x10/4:w"]
        );
        assert_eq!((s.csv.as_deref(), s.repeat), (Some(";"), 3));
    }

    #[test]
    fn push_flags_and_their_conflicts() {
        let Ok(Command::Record(r)) = parse_str(
            "record --push https://h:4040/p --every 1m --push-protocol parca --push-ca a.pem \
             --push-tenant t --push-label env=prod --push-header X-A:b --push-timeout 2s \
             --push-queue 3 --push-service svc -p 9",
        ) else {
            panic!("push flags")
        };
        let a = &r.push;
        assert_eq!(a.every, Some(std::time::Duration::from_secs(60)));
        assert_eq!(a.protocol, perfring::push::Protocol::Parca);
        assert_eq!((a.queue, a.tenant.as_deref()), (Some(3), Some("t")));
        assert_eq!(a.headers, [("X-A".to_string(), "b".to_string())]);
        assert_eq!(r.format, OutputFormat::Pprof);
        let err = |line: &str| match parse_str(line) {
            Err(Failure::Usage(msg)) => msg,
            Err(Failure::Input(e)) => e.to_string(),
            other => panic!("{line}: {other:?}"),
        };
        assert!(err("record --every 5s -p 1").contains("go with --push"));
        assert!(err("record --push http://h --format perf -p 1").contains("--format perf"));
        assert!(err("record --push http://h --every 5s -o f -p 1").contains("drop -o"));
        assert!(err("record --push ftp://h -p 1").contains("http://"));
        assert!(err("record --push http://h --push-label 1x=y -p 1").contains("label"));
        let e = err("record --push http://h --push-header Authorization:s3cr3t -p 1");
        assert!(e.contains("process list") && !e.contains("s3cr3t"), "{e}");
        let e = err("record --push http://h --push-token s3cr3t -p 1");
        assert!(
            e.contains("PERFRING_PUSH_TOKEN") && !e.contains("s3cr3t"),
            "{e}"
        );
        assert!(err("record --push http://h --every 0s -p 1").contains("--every"));
    }

    #[test]
    fn watch_flags_and_their_conflicts() {
        let Ok(Command::Watch(w)) = parse_str(
            "watch -e mem:target:x -e cpu-clock -c 100 -m 8 --budget 5 --signal usr1 --stop-at 2 --stop-after 3 --json -- prog -c 1",
        ) else {
            panic!()
        };
        assert_eq!(w.events, ["mem:target:x", "cpu-clock"]);
        assert_eq!((w.period, w.pages, w.budget), (Some(100), Some(8), Some(5)));
        assert_eq!(
            (w.signal, w.stop_at, w.stop_after),
            (Some(perfring::Signal::SIGUSR1), Some(2), Some(3))
        );
        assert!(w.json);
        assert_eq!(w.command, ["prog", "-c", "1"]);
        let err = |line: &str| match parse_str(line) {
            Err(Failure::Usage(msg)) => msg,
            other => panic!("{line}: {other:?}"),
        };
        assert!(err("watch -e cpu-clock").contains("nothing to watch"));
        assert!(err("watch -p 1 -- true").contains("one target"));
        assert!(err("watch -p 1 -C 0").contains("one target"));
        assert!(err("watch -c 1 -F 2 -p 1").contains("exclusive"));
        assert!(err("watch -C 0 --stop-at 1").contains("-C"));
        assert!(err("watch --signal FOO -p 1").contains("not a signal"));
        assert!(err("watch --stop-at 5 --stop-after 2 -p 1").contains("before"));
        assert!(err("watch -c 0 -p 1").contains("at least 1"));
        assert!(err("watch --bogus -p 1").contains("'--bogus'"));
        assert!(matches!(
            parse_str("watch -h"),
            Ok(Command::Help(Topic::Watch))
        ));
    }
}
