//! `perfring watch`: one line per overflow (per `PERF_RECORD_SAMPLE`, never per wake-up),
//! optional actions on each, and a summary. Counters, rings, polling, signals and
//! symbols all come from the library; this file decides what to print and when to stop.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use perfring::launch::{self, Interrupts};
use perfring::records::CpuMode;
use perfring::records::RecordKind;
use perfring::ring::RingSize;
use perfring::sampler::{Delivery, ExecQueue, Sampler, Target};
use perfring::symbolize::{AddressSpaces, Frame, Symbolizer};
use perfring::symbols::{is_symbolic, TargetImage};
use perfring::unwind::{RawFrame, Unwinder};
use perfring::{sys, Builder, Counter, ErrorKind, SampleType};

use super::args::{EventArgs, WatchArgs};
use super::json::{self, Json};
use super::Failure;

/// How often the loop wakes without overflows, to notice the target's exit and Ctrl-C.
const TICK: Duration = Duration::from_millis(50);
/// How soon a process's `/proc/PID/maps` may be read again when a sample's address is
/// in none of its known mappings (its MMAP2 record may sit in a ring not drained yet).
const REREAD: Duration = Duration::from_millis(50);
/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Overflows waiting for `--exec` beyond which new ones are dropped (and counted).
const EXEC_QUEUE: usize = 1024;
/// The frequency used when neither `-c` nor `-F` is given, for counting events.
const DEFAULT_FREQ: u64 = 1000;
/// How long `--stop-at` waits to see the target stopped.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long a spawned command gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How the watch ended, as the summary reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The target exited (or, for `-C`, Ctrl-C).
    TargetExited,
    /// `--stop-after N` reached.
    StopAfter,
    /// `--stop-at N` reached: the process was stopped and left so.
    StoppedAt,
    /// `-p`/`-t`/`-C`: Ctrl-C or SIGTERM.
    Interrupted,
    /// Every `--budget` was spent and there is no command to wait for.
    BudgetSpent,
    /// Our stdout was closed (`| head`).
    OutputClosed,
}

/// One watched event.
struct Watched {
    name: String,
    /// The configured `-c` period; `None` in frequency mode (the sample carries it).
    period: Option<u64>,
    /// Sum of periods so far: the running count.
    total: u64,
    overflows: u64,
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
    /// (threads overwriting each other's records in a shared ring); part of `lost`.
    unreported: u64,
}

/// One overflow, decoded.
struct Overflow<'a> {
    seq: u64,
    event: &'a str,
    pid: u32,
    tid: u32,
    cpu: Option<u32>,
    time_ns: u64,
    since_start: f64,
    ip: u64,
    sym: Option<(String, u64)>,
    /// With `-g`/`--call-graph`: the stack, innermost first.
    stack: Option<Vec<Frame>>,
    period: u64,
    total: u64,
}

/// Names for sample addresses: address spaces from the tracking records (and
/// `/proc/PID/maps` when attaching to a running process), unwinding for `-g`, and a
/// caching symbolizer; lookups are lazy, so only addresses that are printed are named.
struct Naming {
    graph: Option<perfring::unwind::CallGraph>,
    spaces: AddressSpaces,
    unwinder: Unwinder,
    symbolizer: Symbolizer,
    raw: Vec<RawFrame>,
    /// When each process's maps were last read from `/proc` (at most every REREAD).
    read_at: HashMap<u32, Instant>,
}

impl Naming {
    /// A process seen without records (attached to, or its records still in another
    /// ring): its maps are read from `/proc` — once, or again when an address is in
    /// none of them and REREAD has passed.
    fn know(&mut self, pid: u32, user_ip: Option<u64>) {
        let unmapped = || user_ip.is_some_and(|ip| self.spaces.mapping(pid, ip).is_none());
        let due = self.read_at.get(&pid).is_none_or(|t| t.elapsed() > REREAD);
        if (!self.spaces.knows(pid) || unmapped()) && due {
            let _ = self.spaces.attach(pid);
            self.read_at.insert(pid, Instant::now());
        }
    }

    /// The sample's frames (just its ip without a call graph), named.
    fn frames(&mut self, s: &perfring::records::Sample<'_>, pid: u32, ip: u64) -> Vec<Frame> {
        let kernel = s.misc().cpumode() == CpuMode::Kernel;
        self.know(pid, (!kernel).then_some(ip));
        self.raw.clear();
        if self.graph.is_some() {
            self.unwinder.sample_frames(&self.spaces, s, &mut self.raw);
        } else {
            self.raw.push(RawFrame {
                ip,
                kernel,
                return_address: false,
            });
        }
        self.symbolizer.frames(&self.spaces, pid, &self.raw)
    }
}

/// Everything the per-record callback needs.
struct State<'a> {
    args: &'a WatchArgs,
    events: Vec<Watched>,
    seq: u64,
    start_ns: u64,
    naming: Naming,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    exec: Option<ExecQueue>,
    signal_failures: u64,
    /// Set by a record that ends the watch (`--stop-at`, `--stop-after`, closed stdout).
    end: Option<End>,
    status: Option<StatusLine>,
}

impl State<'_> {
    fn record(&mut self, d: Delivery<'_>) {
        if self.end.is_some() {
            return;
        }
        // MMAP2/COMM/FORK/EXIT (from the tracking counter) keep the address spaces.
        if self.naming.spaces.observe(&d.record) {
            return;
        }
        let (Some(i), RecordKind::Sample(s)) = (d.event, d.record.kind()) else {
            return;
        };
        let Some(ev) = self.events.get_mut(i) else {
            return;
        };
        self.seq += 1;
        ev.overflows += 1;
        let period = ev.period.or(s.period()).unwrap_or(0);
        ev.total = ev.total.saturating_add(period);
        let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
        let ip = s.ip().unwrap_or(0);
        let time_ns = s.time().unwrap_or(0);
        let frames = self.naming.frames(s, pid, ip);
        // The line's symbol: the function (not an inlined callee) at the sample's ip.
        let sym = frames
            .iter()
            .take_while(|f| f.ip == ip)
            .find(|f| !f.inlined)
            .and_then(|f| Some((f.sym.clone()?, f.off.unwrap_or(0))));
        let o = Overflow {
            seq: self.seq,
            event: &ev.name,
            pid,
            tid,
            cpu: s.cpu(),
            time_ns,
            since_start: time_ns.saturating_sub(self.start_ns) as f64 / 1e9,
            ip,
            sym,
            stack: self.naming.graph.is_some().then_some(frames),
            period,
            total: ev.total,
        };
        if let Some(status) = &mut self.status {
            status.clear();
        }
        let line = if self.args.json {
            overflow_json(&o).to_string()
        } else {
            overflow_text(&o)
        };
        if writeln!(self.out, "{line}").is_err() {
            self.end = Some(End::OutputClosed);
            return;
        }
        if let Some(sig) = self.args.signal {
            if launch::signal_thread(pid as i32, tid as i32, sig).is_err() {
                self.signal_failures += 1;
            }
        }
        if let Some(exec) = &mut self.exec {
            exec.submit(vec![
                ("PERFRING_EVENT", o.event.to_string()),
                ("PERFRING_PID", pid.to_string()),
                ("PERFRING_TID", tid.to_string()),
                ("PERFRING_IP", format!("{ip:#x}")),
                (
                    "PERFRING_SYM",
                    o.sym.as_ref().map(|s| s.0.clone()).unwrap_or_default(),
                ),
                ("PERFRING_SEQ", o.seq.to_string()),
            ]);
        }
        if self.args.stop_at == Some(self.seq) {
            let _ = self.out.flush();
            match launch::stop_process(pid as i32, STOP_WAIT) {
                Ok(()) => {
                    eprintln!(
                        "perfring: stopped process {pid} at overflow {}; resume it with: kill -CONT {pid}",
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

/// Runs `watch` to the end and returns the command's exit code, if it is to be ours.
pub fn run(args: &WatchArgs) -> Result<Option<i32>, Failure> {
    if args.when.is_some() {
        // Threshold crossings of a group's rate or ratio, not overflows.
        return super::trigger::run(args);
    }
    let specs = if args.events.is_empty() {
        vec![default_event()]
    } else {
        args.events.clone()
    };

    // Resolve every event before starting anything.
    let Resolved {
        image,
        program,
        target,
    } = resolve(args, &specs)?;
    let builders = specs
        .iter()
        .map(|spec| builder(args, spec, &image))
        .collect::<Result<Vec<_>, _>>()?;
    let mut events = Vec::new();
    // The sampler opens, per thread or inherited with an anchor ring, and follows
    // threads created later; a budget makes it per thread (REFRESH is EINVAL on
    // inherited counters).
    // One period per thread however it migrates (exact N/P), as watch always counted.
    let mut setup = Sampler::builder(target)
        .ring_size(RingSize::Pages(args.pages.unwrap_or(64)))
        .exact_periods(true);
    for (b, spec) in builders.into_iter().zip(&specs) {
        events.push(Watched {
            name: spec.clone(),
            period: if b.attr().freq() != 0 {
                None
            } else {
                Some(args.period.unwrap_or(1))
            },
            total: 0,
            overflows: 0,
        });
        setup = setup.event(b);
    }
    if let Some(n) = args.budget {
        setup = setup.budget(n);
    }
    // Ctrl-C and SIGTERM are taken between polls (a worker thread inherits the mask; a
    // spawned command does not).
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let start_ns = perfring::counter::clock_ns(libc::CLOCK_MONOTONIC);
    let started = Instant::now();
    let mut sampler = setup.start().map_err(Failure::Runtime)?;
    let mut naming = Naming {
        graph: args.call_graph,
        spaces: AddressSpaces::new(),
        unwinder: Unwinder::new(),
        symbolizer: Symbolizer::new(),
        raw: Vec::new(),
        read_at: HashMap::new(),
    };
    // A process already running: its mappings so far (later ones come as records).
    if let Some(pid) = args.pid.or(args.tid) {
        let _ = naming.spaces.attach(pid as u32);
        naming.read_at.insert(pid as u32, Instant::now());
    }
    if let Some(pid) = args.pid {
        let n = sampler.threads().count();
        let s = if n == 1 { "" } else { "s" };
        eprintln!("perfring: attached to process {pid} ({n} thread{s}); following new ones");
    }
    let mut state = State {
        args,
        events,
        seq: 0,
        start_ns,
        naming,
        out: std::io::BufWriter::new(std::io::stdout().lock()),
        exec: args
            .exec
            .clone()
            .map(|cmd| ExecQueue::start(cmd, EXEC_QUEUE)),
        signal_failures: 0,
        end: None,
        status: std::io::stderr().is_terminal().then(|| StatusLine {
            last: Instant::now(),
            last_overflows: 0,
            shown: false,
        }),
    };

    let spawned = program.is_some();
    let result = watch_loop(args, &mut sampler, &mut state, spawned, &interrupts);
    // Collect what is left (the target has exited or the watch ended), then report.
    let drained = sampler.drain(|d| state.record(d));
    if let Some(status) = &mut state.status {
        status.clear();
    }
    let end = match result.and_then(|end| drained.map(|_| end).map_err(Failure::Runtime)) {
        Ok(end) => state.end.unwrap_or(end),
        Err(e) => {
            sampler.terminate(TERM_GRACE);
            return Err(e);
        }
    };
    let exit_code = match end {
        // Stopped on purpose: leave it so (it is reparented to init when we exit).
        End::StoppedAt => None,
        // Exited already (reaped), or ended early by us as perf does.
        _ => sampler.terminate(TERM_GRACE).map(|s| s.code()),
    };
    // Once the target ran its course and its rings were drained, its counts say how
    // many samples there must have been: a shortfall no LOST record explains is loss too.
    let unreported = if end == End::TargetExited {
        (0..sampler.events().len())
            .filter_map(|i| sampler.unreported_loss(i).ok())
            .sum()
    } else {
        0
    };
    let stats = sampler.stats();
    let mut summary = Summary {
        overflows: state.seq,
        wakeups: sampler.wakeups(),
        lost: stats.lost + stats.lost_samples + unreported,
        throttled: stats.throttled,
        unreported,
        duration: started.elapsed(),
        exit_code,
        signal_failures: state.signal_failures,
        undecoded: stats.undecoded,
        ..Summary::default()
    };
    if let Some(exec) = &mut state.exec {
        summary.exec_runs = Some(exec.finish());
        summary.exec_dropped = exec.dropped();
    }
    drop(sampler);
    drop(interrupts);
    let text = if args.json {
        summary_json(&summary).to_string()
    } else {
        summary_text(&summary)
    };
    let _ = writeln!(state.out, "{text}");
    let _ = state.out.flush();
    Ok(match end {
        // The command ran its course: its status is ours, as with `stat`.
        End::TargetExited | End::BudgetSpent | End::Interrupted => exit_code,
        // We ended it (or left it stopped) on purpose: that is success.
        _ => None,
    })
}

/// What a command line's target and events resolve to (shared with `record`).
pub(super) struct Resolved {
    /// Where symbolic events (`mem:SYMBOL`) are looked up.
    pub image: TargetImage,
    /// The command's program, found along `$PATH`.
    pub program: Option<std::path::PathBuf>,
    /// The sampler's target.
    pub target: Target,
}

/// Finds the command's program (or the process for `-p`/`-t`) and builds the target.
pub(super) fn resolve(args: &WatchArgs, specs: &[String]) -> Result<Resolved, Failure> {
    let (image, program) = if args.command.is_empty() {
        let image = match args.pid.or(args.tid) {
            Some(pid) => TargetImage::Process(pid),
            None => TargetImage::None,
        };
        (image, None)
    } else {
        let name = &args.command[0];
        let Some(path) = launch::find_program(name) else {
            // Let the launcher say what is wrong: it knows how it searched.
            return Err(Failure::Runtime(
                launch::Command::new(name)
                    .spawn_stopped()
                    .expect_err("find_program found nothing"),
            ));
        };
        (TargetImage::Spawned(path.clone()), Some(path))
    };
    let no_aslr = specs
        .iter()
        .any(|e| e.starts_with("mem:") && is_symbolic(e));
    let target = match (&program, args.pid, args.tid, args.cpu) {
        (Some(_), ..) => Target::Command(
            launch::Command::new(&args.command[0])
                .args(&args.command[1..])
                .no_aslr(no_aslr),
        ),
        (None, Some(pid), _, _) => Target::Pid(pid),
        (None, None, Some(tid), _) => Target::Tid(tid),
        (None, None, None, Some(cpu)) => Target::Cpus(vec![cpu]),
        (None, None, None, None) => unreachable!("check_sampling requires a target"),
    };
    Ok(Resolved {
        image,
        program,
        target,
    })
}

/// The loop: wait for wake-ups, drain every ring, until an end condition.
fn watch_loop(
    args: &WatchArgs,
    sampler: &mut Sampler,
    state: &mut State<'_>,
    spawned: bool,
    interrupts: &Interrupts,
) -> Result<End, Failure> {
    loop {
        // Readiness is consumed by the poll: the sampler drains every ring.
        sampler
            .poll(Some(TICK), |d| state.record(d))
            .map_err(Failure::Runtime)?;
        // `| head -1`: end at once, even when there is nothing more to write.
        if state.out.flush().is_err() || launch::output_closed(state.out.get_ref().as_fd()) {
            state.end.get_or_insert(End::OutputClosed);
        }
        if let Some(end) = state.end {
            return Ok(end);
        }
        if let Some(status) = &mut state.status {
            let st = sampler.stats();
            status.tick(state.seq, st.lost + st.lost_samples, st.throttled);
        }
        if let Some(sig) = interrupts.take() {
            if !spawned {
                return Ok(End::Interrupted);
            }
            // A terminal's Ctrl-C reaches the command too; a signal for us alone is
            // passed on, and we report once it has ended.
            let _ = perfring::Signal::new(sig).and_then(|s| sampler.signal_target(s));
        }
        if sampler.target_ended().map_err(Failure::Runtime)?.is_some() {
            return Ok(End::TargetExited);
        }
        if args.budget.is_some() && sampler.budgets_spent() && !spawned {
            return Ok(End::BudgetSpent);
        }
    }
}

/// The builder for one event: the shared event flags, then what `watch` needs.
fn builder(args: &WatchArgs, spec: &str, image: &TargetImage) -> Result<Builder, Failure> {
    let event_args = EventArgs {
        event: Some(spec.to_string()),
        period: args.period,
        frequency: args.frequency,
        ..EventArgs::default()
    };
    let mut b = event_args.builder_in(image)?;
    let mut sample = SampleType::IP | SampleType::TID | SampleType::TIME | SampleType::CPU;
    if args.period.is_none() && args.frequency.is_none() {
        // Breakpoints, tracepoints and probes overflow on every hit by default; counting
        // events at a modest frequency.
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
    // Only frequency mode varies the period; sampling it with a fixed period would make
    // the kernel take a sample per event on software and breakpoint counters.
    if b.attr().freq() != 0 {
        sample |= SampleType::PERIOD;
    }
    let b = b
        .sample(sample)
        .wakeup_events(1)
        .clockid(libc::CLOCK_MONOTONIC);
    // The sampler's tracking counter brings the MMAP2/COMM/FORK/EXIT records.
    match args.call_graph {
        Some(graph) => graph.configure_checked(b).map_err(Failure::Runtime),
        None => Ok(b),
    }
}

/// `cycles` where a hardware PMU exists, else `cpu-clock`, with a notice.
pub(super) fn default_event() -> String {
    let probe = Counter::builder("cycles").and_then(|b| b.open());
    match probe {
        Ok(_) => "cycles".to_string(),
        Err(e) => {
            let why = if e.kind() == ErrorKind::NoPmu {
                "this machine has no hardware PMU".to_string()
            } else {
                format!("cycles cannot be counted here ({e})")
            };
            eprintln!("perfring: no -e given and {why}: watching cpu-clock");
            "cpu-clock".to_string()
        }
    }
}

fn overflow_text(o: &Overflow<'_>) -> String {
    let sym = match &o.sym {
        Some((name, 0)) => format!(" {name}"),
        Some((name, off)) => format!(" {name}+{off:#x}"),
        None => String::new(),
    };
    let mut line = format!(
        "{:>12.6} {} tid {} ip {:#x}{sym} period {} total {}",
        o.since_start, o.event, o.tid, o.ip, o.period, o.total
    );
    // The stack, innermost first, indented under the line.
    for f in o.stack.iter().flatten() {
        line += &format!("\n    {:>18} {f}", format!("{:#x}", f.ip));
    }
    line
}

fn frame_json(f: &Frame) -> Json {
    json::object([
        ("ip", json::str(format!("{:#x}", f.ip))),
        ("sym", json::opt(f.sym.as_ref(), json::str)),
        ("off", json::opt(f.off, Json::from)),
        ("file", json::opt(f.file.as_ref(), json::str)),
        ("line", json::opt(f.line, Json::from)),
        ("inlined", Json::Bool(f.inlined)),
        ("dso", json::opt(f.dso.as_ref(), json::str)),
    ])
}

fn overflow_json(o: &Overflow<'_>) -> Json {
    let mut line = json::object([
        ("type", json::str("overflow")),
        ("seq", Json::from(o.seq)),
        ("event", json::str(o.event)),
        ("pid", Json::from(o.pid)),
        ("tid", Json::from(o.tid)),
        ("cpu", json::opt(o.cpu, Json::from)),
        ("time_ns", Json::from(o.time_ns)),
        ("ip", json::str(format!("{:#x}", o.ip))),
        ("sym", json::opt(o.sym.as_ref(), |s| json::str(&s.0))),
        ("sym_off", json::opt(o.sym.as_ref(), |s| Json::from(s.1))),
        ("period", Json::from(o.period)),
        ("total", Json::from(o.total)),
    ]);
    if let (Json::Object(fields), Some(stack)) = (&mut line, &o.stack) {
        fields.insert(
            "stack".into(),
            Json::Array(stack.iter().map(frame_json).collect()),
        );
    }
    line
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
pub(super) fn action_lines(
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

fn summary_json(s: &Summary) -> Json {
    let mut fields = vec![
        ("type", json::str("summary")),
        ("overflows", Json::from(s.overflows)),
        ("wakeups", Json::from(s.wakeups)),
        ("lost", Json::from(s.lost)),
        ("throttled", Json::from(s.throttled)),
        ("duration_s", json::float(s.duration.as_secs_f64())),
        ("exit_code", json::opt(s.exit_code, Json::from)),
    ];
    if let Some(runs) = s.exec_runs {
        fields.push(("exec_runs", Json::from(runs)));
        fields.push(("exec_dropped", Json::from(s.exec_dropped)));
    }
    if s.signal_failures > 0 {
        fields.push(("signal_failures", Json::from(s.signal_failures)));
    }
    if s.unreported > 0 {
        fields.push(("unreported_lost", Json::from(s.unreported)));
    }
    if s.undecoded > 0 {
        fields.push(("undecoded", Json::from(s.undecoded)));
    }
    json::object(fields)
}
