//! `perfring watch`: one line per overflow (per `PERF_RECORD_SAMPLE`, never per wake-up),
//! optional actions on each, and a summary. Counters, rings, polling, signals and
//! symbols all come from the library; this file decides what to print and when to stop.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use perfring::launch::{self, Child, ExitStatus, Interrupts};
use perfring::notify::{Budget, Notification, NotifyKind, Poller, Token};
use perfring::records::{Layout, Record, RecordKind};
use perfring::ring::{RawRecord, Ring, RingSize};
use perfring::symbols::{is_symbolic, AddressSpace, Symbols, TargetImage};
use perfring::{sys, Builder, Counter, ErrorKind, SampleType, Target};

use super::args::{EventArgs, WatchArgs};
use super::json::Json;
use super::Failure;

/// How often the loop wakes without overflows, to notice the target's exit and Ctrl-C.
const TICK: Duration = Duration::from_millis(50);
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
    layout: Layout,
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
    period: u64,
    total: u64,
}

/// The `--exec` worker: runs `sh -c CMD` for each queued overflow, one after the other,
/// so the sampling loop never waits on a child.
struct ExecWorker {
    tx: Option<SyncSender<Vec<(&'static str, String)>>>,
    handle: Option<JoinHandle<u64>>,
    dropped: u64,
}

impl ExecWorker {
    fn start(cmd: String) -> ExecWorker {
        let (tx, rx) = mpsc::sync_channel::<Vec<(&'static str, String)>>(EXEC_QUEUE);
        let handle = std::thread::spawn(move || {
            let mut runs = 0;
            for env in rx {
                let mut c = std::process::Command::new("sh");
                c.arg("-c").arg(&cmd).envs(env);
                // The action's output goes to stderr, so that --json stdout stays parseable.
                if let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned() {
                    c.stdout(err);
                }
                match c.status() {
                    Ok(_) => runs += 1,
                    Err(e) => eprintln!("perfring: --exec: could not run sh -c {cmd:?}: {e}"),
                }
            }
            runs
        });
        ExecWorker {
            tx: Some(tx),
            handle: Some(handle),
            dropped: 0,
        }
    }

    fn submit(&mut self, env: Vec<(&'static str, String)>) {
        if let Some(tx) = &self.tx {
            match tx.try_send(env) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.dropped += 1
                }
            }
        }
    }

    /// Waits for every queued action to have run; returns how many ran.
    fn finish(&mut self) -> u64 {
        self.tx.take();
        self.handle
            .take()
            .map_or(0, |h| h.join().unwrap_or_default())
    }
}

/// Symbol lookup for sample IPs: each process's maps, read as early as possible and
/// again when an address is not found; for the spawned program, its ELF file at the
/// address it is known to load at, in case it exited before its maps could be read.
struct Symbolizer {
    spaces: HashMap<u32, Option<AddressSpace>>,
    refreshed: HashMap<u32, Instant>,
    /// (pid, symbols, bias) of the spawned program when its load address is predictable.
    program: Option<(u32, Symbols, u64)>,
}

impl Symbolizer {
    fn new() -> Symbolizer {
        Symbolizer {
            spaces: HashMap::new(),
            refreshed: HashMap::new(),
            program: None,
        }
    }

    fn read(&mut self, pid: u32) {
        let space = AddressSpace::new(pid as i32).ok();
        self.spaces.insert(pid, space);
        self.refreshed.insert(pid, Instant::now());
    }

    fn lookup(&mut self, pid: u32, ip: u64) -> Option<(String, u64)> {
        if !self.spaces.contains_key(&pid) {
            self.read(pid);
        }
        match self.in_maps(pid, ip) {
            // In a mapped file: its symbol, or none (a stripped file) without re-reading.
            Some(found) => found.or_else(|| self.in_program(pid, ip)),
            // Outside every mapping we know: maps read before the exec or before a
            // library was loaded. Read them again, at most every few milliseconds
            // (a refresh reloads the files' symbols).
            None => {
                let stale = self
                    .refreshed
                    .get(&pid)
                    .is_none_or(|t| t.elapsed() > Duration::from_millis(5));
                if stale && launch::is_alive(pid as i32) {
                    if let Some(Some(space)) = self.spaces.get_mut(&pid) {
                        let _ = space.refresh();
                    } else {
                        self.read(pid);
                    }
                    self.refreshed.insert(pid, Instant::now());
                    if let Some(Some(sym)) = self.in_maps(pid, ip) {
                        return Some(sym);
                    }
                }
                self.in_program(pid, ip)
            }
        }
    }

    /// The spawned program's symbol at `ip`, from its file and predicted load address.
    fn in_program(&self, pid: u32, ip: u64) -> Option<(String, u64)> {
        match &self.program {
            Some((p, symbols, bias)) if *p == pid => symbols
                .lookup(ip.wrapping_sub(*bias))
                .map(|(n, off)| (n.to_string(), off)),
            _ => None,
        }
    }

    /// `None` if `ip` is in no known mapping; `Some(symbol or None)` if it is.
    fn in_maps(&mut self, pid: u32, ip: u64) -> Option<Option<(String, u64)>> {
        let space = self.spaces.get_mut(&pid)?.as_mut()?;
        Some(space.locate(ip)?.symbol)
    }
}

/// Everything the per-record callback needs.
struct State<'a> {
    args: &'a WatchArgs,
    events: Vec<Watched>,
    /// Which event each token's counter is (one counter per CPU for a command, per
    /// thread for -p).
    token_event: Vec<usize>,
    /// Overflows per token, for budgets.
    token_overflows: Vec<u64>,
    seq: u64,
    start_ns: u64,
    symbolizer: Symbolizer,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    exec: Option<ExecWorker>,
    signal_failures: u64,
    /// Records the decoder rejected (a kernel/decoder disagreement; never expected).
    undecoded: u64,
    /// Set by a record that ends the watch (`--stop-at`, `--stop-after`, closed stdout).
    end: Option<End>,
    /// The command's exit code once it was reaped.
    exit_code: Option<i32>,
    status: Option<StatusLine>,
}

impl State<'_> {
    fn record(&mut self, token: Token, raw: RawRecord<'_>) {
        if self.end.is_some() {
            return;
        }
        let Some(ev) = self
            .token_event
            .get(token.0 as usize)
            .and_then(|&i| self.events.get_mut(i))
        else {
            return;
        };
        let Ok(rec) = Record::parse(raw.bytes(), &ev.layout) else {
            self.undecoded += 1;
            return;
        };
        let RecordKind::Sample(s) = rec.kind() else {
            return;
        };
        self.seq += 1;
        ev.overflows += 1;
        if let Some(n) = self.token_overflows.get_mut(token.0 as usize) {
            *n += 1;
        }
        let period = ev.period.or(s.period()).unwrap_or(0);
        ev.total = ev.total.saturating_add(period);
        let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
        let ip = s.ip().unwrap_or(0);
        let time_ns = s.time().unwrap_or(0);
        let o = Overflow {
            seq: self.seq,
            event: &ev.name,
            pid,
            tid,
            cpu: s.cpu(),
            time_ns,
            since_start: time_ns.saturating_sub(self.start_ns) as f64 / 1e9,
            ip,
            sym: self.symbolizer.lookup(pid, ip),
            period,
            total: ev.total,
        };
        if let Some(status) = &mut self.status {
            status.clear();
        }
        let line = if self.args.json {
            overflow_json(&o).render()
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

/// What is being watched, and how to tell it has ended.
enum Watchee {
    Command(Child),
    Process(i32),
    Cpu,
}

/// Runs `watch` to the end and returns the command's exit code, if it is to be ours.
pub fn run(args: &WatchArgs) -> Result<Option<i32>, Failure> {
    let specs = if args.events.is_empty() {
        vec![default_event()]
    } else {
        args.events.clone()
    };

    // Resolve every event before starting anything.
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
    let mut builders = specs
        .iter()
        .map(|spec| builder(args, spec, &image))
        .collect::<Result<Vec<_>, _>>()?;

    // Start the command stopped; dropping `stopped` on an error kills and reaps it.
    let no_aslr = specs
        .iter()
        .any(|e| e.starts_with("mem:") && is_symbolic(e));
    let stopped = match &program {
        Some(_) => Some(
            launch::Command::new(&args.command[0])
                .args(&args.command[1..])
                .no_aslr(no_aslr)
                .spawn_stopped()
                .map_err(Failure::Runtime)?,
        ),
        None => None,
    };
    let target = match (&stopped, args.pid.or(args.tid), args.cpu) {
        (Some(s), _, _) => Target::Thread(s.pid()),
        (None, Some(id), _) => Target::Thread(id),
        (None, None, Some(cpu)) => Target::Cpu(cpu),
        (None, None, None) => unreachable!("parse_watch requires a target"),
    };
    let spawned = stopped.is_some();
    // A command's counters are inherited by its threads and children; the kernel will
    // not map an inherited per-task counter, so its records go to an anchor ring
    // (Ring::map_inherited), which keeps one period per task (exact N/P however the
    // task migrates, unlike per-CPU counters). A budget needs a non-inherited counter
    // (REFRESH is EINVAL on inherited ones), so it watches the one thread.
    let inherit = spawned && args.budget.is_none();
    // -p: every thread the process has now (an inherited counter on the main thread
    // would only see threads created later).
    let targets = match (target, args.pid) {
        (_, Some(pid)) => launch::threads(pid)
            .map_err(Failure::Runtime)?
            .into_iter()
            .map(Target::Thread)
            .collect(),
        (t, None) => vec![t],
    };
    let size = RingSize::Pages(args.pages.unwrap_or(64));
    let mut poller = Poller::new().map_err(Failure::Runtime)?;
    let mut budgets = Vec::new();
    let mut events = Vec::new();
    let mut token_event = Vec::new();
    // Inherited counters whose records go to an anchor's ring: alive until the end.
    let mut inherited = Vec::new();
    for (i, (b, spec)) in builders.drain(..).zip(&specs).enumerate() {
        // Opened disabled; a command's counters start at its exec, others once every
        // ring is mapped and registered (below), so no early overflow goes unrecorded.
        let b = b
            .inherit(inherit)
            .enable_on_exec(spawned && args.budget.is_none());
        let layout = Layout::new(b.attr())
            .map_err(|e| Failure::Usage(format!("watch: cannot decode samples of {spec}: {e}")))?;
        for t in &targets {
            let b = b.clone().target(*t);
            let counter = match args.budget {
                Some(n) => {
                    let budget = Budget::new(b.clone(), n);
                    let c = budget.open().map_err(Failure::Runtime)?;
                    budgets.push((Token(token_event.len() as u64), budget));
                    c
                }
                None => b.open().map_err(Failure::Runtime)?,
            };
            let (counter, ring) = if inherit {
                let (anchor, ring) =
                    Ring::map_inherited(&counter, size).map_err(Failure::Runtime)?;
                inherited.push(counter);
                (anchor, ring)
            } else {
                let ring = Ring::map(&counter, size).map_err(Failure::Runtime)?;
                (counter, ring)
            };
            poller
                .register(Token(token_event.len() as u64), counter, ring)
                .map_err(Failure::Runtime)?;
            token_event.push(i);
        }
        events.push(Watched {
            name: spec.clone(),
            layout,
            period: if b.attr().freq() != 0 {
                None
            } else {
                Some(args.period.unwrap_or(1))
            },
            total: 0,
            overflows: 0,
        });
    }

    let mut symbolizer = Symbolizer::new();
    if let (Some(path), Some(s)) = (&program, &stopped) {
        if let Ok(symbols) = Symbols::load(path) {
            let bias = match symbols.elf_type() {
                perfring::symbols::ElfType::Executable => Some(0),
                perfring::symbols::ElfType::Dynamic if no_aslr => symbols.no_aslr_bias().ok(),
                perfring::symbols::ElfType::Dynamic => None,
            };
            if let Some(bias) = bias {
                symbolizer.program = Some((s.pid() as u32, symbols, bias));
            }
        }
    }

    // Ctrl-C and SIGTERM are taken between polls (and a worker thread inherits the mask).
    let interrupts = Interrupts::block().map_err(Failure::Runtime)?;
    let exec = args.exec.clone().map(ExecWorker::start);
    for (token, budget) in &budgets {
        if let Some(c) = poller.counter(*token) {
            budget.arm(c).map_err(Failure::Runtime)?;
        }
    }
    if !spawned && args.budget.is_none() {
        for t in 0..token_event.len() {
            if let Some(c) = poller.counter(Token(t as u64)) {
                c.enable().map_err(Failure::Runtime)?;
            }
        }
    }
    let start_ns = perfring::counter::clock_ns(libc::CLOCK_MONOTONIC);
    let started = Instant::now();
    let mut watchee = match stopped {
        Some(s) => {
            let child = s.start().map_err(Failure::Runtime)?;
            symbolizer.read(child.pid() as u32);
            Watchee::Command(child)
        }
        None => match args.pid.or(args.tid) {
            Some(pid) => Watchee::Process(pid),
            None => Watchee::Cpu,
        },
    };
    let mut state = State {
        args,
        events,
        token_overflows: vec![0; token_event.len()],
        token_event,
        seq: 0,
        start_ns,
        symbolizer,
        out: std::io::BufWriter::new(std::io::stdout().lock()),
        exec,
        signal_failures: 0,
        undecoded: 0,
        end: None,
        exit_code: None,
        status: std::io::stderr().is_terminal().then(|| StatusLine {
            last: Instant::now(),
            last_overflows: 0,
            shown: false,
        }),
    };

    let result = watch_loop(args, &mut poller, &mut state, &mut watchee, &interrupts);
    // Collect what is left (the target has exited or the watch ended), then report.
    poller.drain_all(|t, r| state.record(t, r));
    if let Some(status) = &mut state.status {
        status.clear();
    }
    let end = match result {
        Ok(end) => state.end.unwrap_or(end),
        Err(e) => {
            finish_target(&mut watchee, End::Interrupted, state.exit_code);
            return Err(e);
        }
    };
    let exit_code = finish_target(&mut watchee, end, state.exit_code);
    let mut summary = Summary {
        overflows: state.seq,
        duration: started.elapsed(),
        exit_code,
        signal_failures: state.signal_failures,
        undecoded: state.undecoded,
        ..Summary::default()
    };
    for t in 0..state.token_event.len() {
        if let Some(a) = poller.accounting(Token(t as u64)) {
            summary.wakeups += a.notifications - a.hups;
            summary.lost += a.lost + a.lost_samples;
            summary.throttled += a.throttled;
        }
    }
    if let Some(exec) = &mut state.exec {
        summary.exec_runs = Some(exec.finish());
        summary.exec_dropped = exec.dropped;
    }
    drop(poller);
    drop(interrupts);
    let text = if args.json {
        summary_json(&summary).render()
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

/// The loop: wait for wake-ups, drain every ring, until an end condition.
fn watch_loop(
    args: &WatchArgs,
    poller: &mut Poller,
    state: &mut State<'_>,
    watchee: &mut Watchee,
    interrupts: &Interrupts,
) -> Result<End, Failure> {
    let mut ready: Vec<Notification> = Vec::new();
    loop {
        poller
            .poll(&mut ready, Some(TICK))
            .map_err(Failure::Runtime)?;
        // Readiness is consumed by the poll: drain every ring to head == tail.
        poller.drain_all(|t, r| state.record(t, r));
        let _ = state.out.flush();
        if let Some(end) = state.end {
            return Ok(end);
        }
        if let Some(status) = &mut state.status {
            let (mut lost, mut throttled) = (0, 0);
            for t in 0..state.token_event.len() {
                if let Some(a) = poller.accounting(Token(t as u64)) {
                    lost += a.lost + a.lost_samples;
                    throttled += a.throttled;
                }
            }
            status.tick(state.seq, lost, throttled);
        }
        if let Some(sig) = interrupts.take() {
            match watchee {
                // A terminal's Ctrl-C reaches the command too; a signal for us alone is
                // passed on, and we report once it has ended.
                Watchee::Command(child) => {
                    let _ = child.signal(sig);
                }
                _ => return Ok(End::Interrupted),
            }
        }
        let hup = ready.iter().any(|n| n.kind == NotifyKind::Hup);
        match watchee {
            Watchee::Command(child) => {
                if let Some(status) = child.try_wait().map_err(Failure::Runtime)? {
                    state.exit_code = Some(status.code());
                    return Ok(End::TargetExited);
                }
            }
            Watchee::Process(pid) => {
                if !launch::is_alive(*pid) {
                    return Ok(End::TargetExited);
                }
            }
            Watchee::Cpu => {}
        }
        if let Some(n) = args.budget {
            let spent = state.token_overflows.iter().all(|&o| o >= u64::from(n));
            if spent && !matches!(watchee, Watchee::Command(_)) {
                return Ok(End::BudgetSpent);
            }
        }
        if hup {
            // EPOLLHUP stays set once the task exited; do not spin while it is reaped.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Leaves the target as `end` requires and returns the command's exit code: `exited`
/// if it was reaped already, else its status once ended (unless left stopped).
fn finish_target(watchee: &mut Watchee, end: End, exited: Option<i32>) -> Option<i32> {
    let Watchee::Command(child) = watchee else {
        return None;
    };
    if exited.is_some() {
        return exited;
    }
    match end {
        // Stopped on purpose: leave it so (it is reparented to init when we exit).
        End::StoppedAt => None,
        // Ended early by us: the command is terminated, as perf does.
        _ => {
            let _ = child.signal(libc::SIGTERM);
            let deadline = Instant::now() + TERM_GRACE;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => return Some(status.code()),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Ok(None) => {
                        let _ = child.signal(libc::SIGKILL);
                        return child.wait().ok().map(ExitStatus::code);
                    }
                    Err(_) => return None,
                }
            }
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
    Ok(b.sample(sample)
        .wakeup_events(1)
        .clockid(libc::CLOCK_MONOTONIC))
}

/// `cycles` where a hardware PMU exists, else `cpu-clock`, with a notice.
fn default_event() -> String {
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
    format!(
        "{:>12.6} {} tid {} ip {:#x}{sym} period {} total {}",
        o.since_start, o.event, o.tid, o.ip, o.period, o.total
    )
}

fn overflow_json(o: &Overflow<'_>) -> Json {
    Json::object([
        ("type", Json::str("overflow")),
        ("seq", Json::Uint(o.seq)),
        ("event", Json::str(o.event)),
        ("pid", Json::Uint(o.pid.into())),
        ("tid", Json::Uint(o.tid.into())),
        ("cpu", Json::opt(o.cpu, |c| Json::Uint(c.into()))),
        ("time_ns", Json::Uint(o.time_ns)),
        ("ip", Json::str(format!("{:#x}", o.ip))),
        ("sym", Json::opt(o.sym.as_ref(), |s| Json::str(&s.0))),
        ("sym_off", Json::opt(o.sym.as_ref(), |s| Json::Uint(s.1))),
        ("period", Json::Uint(o.period)),
        ("total", Json::Uint(o.total)),
    ])
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
    if let Some(runs) = s.exec_runs {
        out += &format!(
            "\n--exec ran {runs} times, {} dropped (queue full)",
            s.exec_dropped
        );
    }
    if s.signal_failures > 0 {
        out += &format!(
            "\n--signal failed {} times (the thread had exited)",
            s.signal_failures
        );
    }
    if s.undecoded > 0 {
        out += &format!(
            "\n{} records could not be decoded and were skipped",
            s.undecoded
        );
    }
    if s.lost > 0 {
        out += "\nrecords were lost: raise -m PAGES or the period (-c)";
    }
    out
}

fn summary_json(s: &Summary) -> Json {
    let mut fields = vec![
        ("type", Json::str("summary")),
        ("overflows", Json::Uint(s.overflows)),
        ("wakeups", Json::Uint(s.wakeups)),
        ("lost", Json::Uint(s.lost)),
        ("throttled", Json::Uint(s.throttled)),
        ("duration_s", Json::Float(s.duration.as_secs_f64())),
        ("exit_code", Json::opt(s.exit_code, |c| Json::Int(c.into()))),
    ];
    if let Some(runs) = s.exec_runs {
        fields.push(("exec_runs", Json::Uint(runs)));
        fields.push(("exec_dropped", Json::Uint(s.exec_dropped)));
    }
    if s.signal_failures > 0 {
        fields.push(("signal_failures", Json::Uint(s.signal_failures)));
    }
    if s.undecoded > 0 {
        fields.push(("undecoded", Json::Uint(s.undecoded)));
    }
    Json::object(fields)
}
