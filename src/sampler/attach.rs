//! Opening what a target needs: inherited roots with anchor rings, per-thread counters,
//! per-CPU counters, and the tracking counter beside them (see the module docs of
//! [`super`] for why this order and what it guarantees).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::drain::{Slot, TaskQueue};
use super::hold;
use super::stats::{Stats, Threads};
use super::target::{parent_of, process_alive, thread_alive, Watchee};
use super::{EventInfo, Mode, Sampler, SamplerBuilder, Target};
use crate::counter::{Builder, Counter, SampleType};
use crate::event::{Event, Software};
use crate::notify::{Budget, Poller, Token};
use crate::records::{Layout, Record, RecordKind};
use crate::ring::Ring;
use crate::{Error, ErrorKind, Result};

/// How long to wait for a thread found while attaching to be scheduled once (after
/// which its `FORK` record, if any, has been written).
const STARTED_WAIT: Duration = Duration::from_secs(2);

/// Rounds of re-reading `/proc/PID/task` before giving up on a process that keeps
/// creating threads faster than they can be attached.
const MAX_ROUNDS: usize = 64;

/// Where a counter opened for one target is kept (for its group's members).
#[derive(Debug, Clone, Copy)]
enum Opened {
    Slot(usize),
    Inherited(usize),
}

/// When a registered counter starts counting.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// Enable it now (or arm its budget).
    Now,
    /// Leave it: it is enabled already, at exec, or by someone else.
    Later,
    /// An anchor (a dummy owning the ring of inherited counters): leave it.
    Anchor,
}

fn layout_of(b: &Builder) -> Result<Layout> {
    Layout::new(b.attr()).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("Sampler: decode {}", b.event().name()),
            format!("its records cannot be decoded: {e}"),
        )
    })
}

/// The counter opened first on each root of inherited counters, so that every
/// inherited copy stays in the thread it was made for.
///
/// When two threads whose contexts are clones of one parent's (every event in it
/// inherited) switch on one CPU, the kernel swaps their contexts instead of scheduling
/// the events out and in (`perf_event_context_sched_out`): each thread then runs on with
/// the other's copies, periods and counts included. A thread's samples are still
/// written with its own tid, but its period is another thread's: with a breakpoint at
/// period 100 on a function called 1,000 times, threads got 8, 11 or 12 samples.
///
/// A context holding an inherited event with `PERF_SAMPLE_READ` is never swapped
/// (Linux 6.12+, `nr_no_switch_fast`), so the keeper is an inherited `dummy` with it:
/// copied into every thread the root creates (and theirs), it writes nothing, and the
/// events' own records keep the layout the caller chose. Older kernels refuse the
/// combination: there the keeper is a non-inherited `dummy` (what `perf record -p`
/// has in its tracking event), which keeps the root's children from being clones of
/// it (not the children of those children).
fn keeper(tid: libc::pid_t) -> Builder {
    static READ_OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let reading = || {
        Builder::new(Event::software(Software::Dummy))
            .sample(SampleType::READ | SampleType::TID)
            .inherit(true)
            .exclude_kernel(true)
            .enabled(false)
    };
    let inherited = *READ_OK.get_or_init(|| reading().open().is_ok());
    let b = if inherited {
        reading()
    } else {
        Builder::new(Event::software(Software::Dummy))
            .exclude_kernel(true)
            .enabled(false)
    };
    b.target(crate::Scope::Thread(tid))
}

/// Whether an event samples (a period or a frequency), i.e. writes records.
fn samples(attr: &crate::sys::perf_event_attr) -> bool {
    // sample_period and sample_freq share one u64; zerocopy reads it without unsafe.
    let period: u64 = zerocopy::transmute!(attr.__bindgen_anon_1);
    period != 0
}

/// Exact periods hold new threads with ptrace, which no process can do to itself.
fn refuse_holding_self(cfg: &SamplerBuilder) -> Result<()> {
    let me = std::process::id() as libc::pid_t;
    let own = matches!(cfg.target, Target::Pid(p) if p == me)
        || matches!(cfg.notify, super::Notify::Sigtrap { .. });
    if !own {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidArgument,
        "Sampler::start with exact_periods",
        "exact periods hold each new thread of the target with ptrace until its counters \
         are open, and a process cannot trace itself",
    )
    .with_fix(
        "sample this process with exact_periods(false) (per-CPU rings: a thread's period \
         restarts on each CPU it runs on), or run the work as a Target::Command",
    ))
}

fn info(b: &Builder) -> Result<EventInfo> {
    Ok(EventInfo {
        name: b.event().name().to_string(),
        attr: *b.attr(),
        layout: layout_of(b)?,
        ids: Vec::new(),
    })
}

pub(super) fn start(cfg: SamplerBuilder) -> Result<Sampler> {
    if cfg.events.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "Sampler::start",
            "no events were given",
        )
        .with_fix("add one with SamplerBuilder::event"));
    }
    if matches!(&cfg.target, Target::Cpus(c) if c.is_empty()) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "Sampler::start",
            "the CPU list is empty",
        )
        .with_fix("name at least one CPU"));
    }
    // Exact periods for events that sample: a counter per task, each new task held
    // until it has them (`hold`). Counting-only events write no records, so inherited
    // per-task counters (one period and one count per thread) are exact and share
    // nothing that races.
    let held = cfg.exact_periods
        && cfg.events.iter().any(|b| samples(b.attr()))
        && matches!(cfg.target, Target::Command(_) | Target::Pid(_))
        && !cfg.per_thread
        && cfg.budget.is_none();
    if held {
        refuse_holding_self(&cfg)?;
    }
    let mode = match &cfg.target {
        Target::Cpus(_) => Mode::Cpu,
        Target::Tid(_) => Mode::PerThread,
        _ if cfg.per_thread || cfg.budget.is_some() || held => Mode::PerThread,
        _ => Mode::Inherit,
    };
    let spawned = matches!(cfg.target, Target::Command(_));
    let follow = matches!(cfg.target, Target::Command(_) | Target::Pid(_));
    // A command's counters start at its exec, unless a budget arms them (REFRESH
    // enables); everything else is enabled once its ring is registered.
    let on_exec = spawned && cfg.budget.is_none();
    let builders: Vec<Builder> = cfg
        .events
        .iter()
        .map(|b| {
            let st = SampleType::from_bits(b.attr().sample_type) | SampleType::TID;
            b.clone()
                .sample(st)
                .sample_id_all(true)
                .inherit(mode == Mode::Inherit)
                .enable_on_exec(on_exec)
                .enabled(false)
        })
        .collect();
    let tracking_builder = cfg.tracking.then(|| {
        let first = builders[0].attr();
        let mut t = Builder::new(Event::software(Software::Dummy))
            .track_tasks(true)
            .sample(SampleType::TID | SampleType::TIME)
            .sample_id_all(true)
            .exclude_kernel(true)
            .inherit(mode != Mode::Cpu && !matches!(cfg.target, Target::Tid(_)))
            // It must report FORKs while the sampler attaches: enabled from the start.
            .enabled(true);
        if mode == Mode::PerThread && follow && !held {
            // New threads get counters as soon as their FORK is read.
            t = t.wakeup_events(1);
        }
        // Same clock as the events, so their timestamps compare.
        t.attr_mut().set_use_clockid(first.use_clockid());
        t.attr_mut().clockid = first.clockid;
        // DWARF stacks (a user stack copy without the user callchain): the data
        // mappings too, as perf records them, since perf's unwinders read a file's
        // .eh_frame_hdr through the mapping that holds it.
        let dwarf = builders.iter().any(|b| {
            let a = b.attr();
            SampleType::from_bits(a.sample_type).contains(SampleType::STACK_USER)
                && a.exclude_callchain_user() != 0
        });
        t.attr_mut().set_mmap_data(dwarf.into());
        t
    });
    let events = builders.iter().map(info).collect::<Result<Vec<_>>>()?;
    let tracking = tracking_builder.as_ref().map(info).transpose()?;
    let stopped = match &cfg.target {
        Target::Command(c) => Some(c.spawn_stopped()?),
        _ => None,
    };
    let watchee_pid = match (&cfg.target, &stopped) {
        (_, Some(s)) => Some(s.pid()),
        (Target::Pid(p) | Target::Tid(p), None) => Some(*p),
        _ => None,
    };
    let sigtrap = matches!(cfg.notify, super::Notify::Sigtrap { .. });
    let builders = if sigtrap {
        // Only threads inherit a sigtrap counter (a child process has no handler for it).
        builders
            .into_iter()
            .map(|b| {
                let inherited = b.attr().inherit() != 0;
                b.inherit_thread(inherited)
            })
            .collect()
    } else {
        builders
    };
    let mut s = Sampler {
        armed: super::notify::Armed::default(),
        notify: cfg.notify.clone(),
        sig_events: HashMap::new(),
        poller: Poller::new()?,
        slots: Vec::new(),
        events,
        tracking,
        builders,
        tracking_builder,
        mode,
        follow,
        size: cfg.size,
        tracking_size: cfg.tracking_size,
        budget: cfg.budget,
        inherited: Vec::new(),
        closed_counts: Vec::new(),
        cpus: if mode == Mode::Inherit || cfg.tracking {
            crate::counter::online_cpus()?
        } else {
            Vec::new()
        },
        exact_periods: cfg.exact_periods,
        holder: None,
        reports: Vec::new(),
        keepers: Vec::new(),
        leader_of: cfg.leader_of.clone(),
        cpu_rings: HashMap::new(),
        muted: Vec::new(),
        attached: HashSet::new(),
        threads: Threads::with_capacity(64),
        totals: Stats::default(),
        tasks: TaskQueue {
            forks: Vec::with_capacity(64),
            exits: Vec::with_capacity(64),
        },
        early: Vec::new(),
        early_slots: Vec::new(),
        ready: Vec::with_capacity(64),
        wakeups: 0,
        missed_threads: 0,
        smallest_ring: None,
        watchee: Watchee::Cpus,
    };
    s.closed_counts = vec![Default::default(); s.builders.len()];
    if held {
        let opener = hold::Opener {
            builders: s.builders.clone(),
            leader_of: s.leader_of.clone(),
            size: s.size,
        };
        let wake = s.poller.waker()?;
        s.holder = Some(hold::Holder::start(opener, wake)?);
    }
    match &cfg.target {
        Target::Command(_) => {
            let pid = watchee_pid.unwrap_or_default();
            s.open_tracking(pid, None)?;
            match mode {
                Mode::Inherit => s.open_root(pid)?,
                _ => s.open_thread(pid, true)?,
            }
            // Blocked before its exec: traced before it can create anything.
            if let Some(h) = &s.holder {
                h.seize(pid, true)?;
            }
        }
        Target::Pid(pid) => s.attach_process(*pid)?,
        Target::Tid(tid) => {
            s.open_tracking(*tid, None)?;
            s.open_thread(*tid, false)?;
        }
        Target::Cpus(cpus) => {
            for &cpu in cpus {
                s.open_tracking(-1, Some(cpu))?;
                let mut opened = vec![None; s.builders.len()];
                for i in 0..s.builders.len() {
                    let b = s.event_builder(i, crate::Scope::Cpu(cpu));
                    let b = s.join_group(i, b, &opened);
                    let c = s.open_budgeted(&b)?;
                    s.note_id(Some(i), &c)?;
                    let ring = Ring::map(&c, s.size)?;
                    s.register(Some(i), None, c, ring, Start::Now, true)?;
                    opened[i] = Some(s.last_counter(false));
                }
            }
        }
    }
    s.watchee = match (stopped, &cfg.target) {
        (Some(stopped), _) => Watchee::Command {
            child: stopped.start()?,
            status: None,
            // Held: not to be waited for before the tracer reports its exit.
            exit_seen: !held,
        },
        (None, Target::Pid(p)) => Watchee::Pid(*p),
        (None, Target::Tid(t)) => Watchee::Tid(*t),
        (None, _) => Watchee::Cpus,
    };
    Ok(s)
}

impl Sampler {
    /// Registers `counter`'s `ring` under the next token and starts it as `start` says.
    fn register(
        &mut self,
        event: Option<usize>,
        owner: Option<u32>,
        counter: Counter,
        ring: Ring,
        start: Start,
        arm: bool,
    ) -> Result<()> {
        let token = Token(self.slots.len() as u64);
        if event.is_some() {
            let size = ring.data_size();
            self.smallest_ring = Some(self.smallest_ring.map_or(size, |s| s.min(size)));
        }
        if arm {
            self.armed.arm(&self.notify, &counter, token)?;
        }
        self.poller.register(token, counter, ring)?;
        self.slots.push(Slot {
            event,
            owner,
            samples: 0,
            closed: false,
            counts: !matches!(start, Start::Anchor),
        });
        match (start, event, self.budget) {
            (Start::Now, Some(i), Some(n)) => {
                // REFRESH(n) enables the counter for n overflows.
                let b = Budget::new(self.builders[i].clone(), n);
                self.poller.arm(token, &b)
            }
            (Start::Now, _, _) => match self.poller.counter(token) {
                Some(c) => c.enable(),
                None => Ok(()),
            },
            (Start::Later | Start::Anchor, _, _) => Ok(()),
        }
    }

    /// The builder for one more counter of event `i`: in sigtrap mode, with a
    /// `sig_data` of its own.
    fn event_builder(&mut self, i: usize, target: crate::Scope) -> Builder {
        let b = self.builders[i].clone().target(target);
        if !matches!(self.notify, super::Notify::Sigtrap { .. }) {
            return b;
        }
        let key = super::notify::next_sig_data();
        self.sig_events.insert(key, i);
        b.sigtrap(key)
    }

    /// Where the counter just opened for event `i` on the current target lives, for
    /// its group's members to join.
    fn last_counter(&self, in_inherited: bool) -> Opened {
        if in_inherited {
            Opened::Inherited(self.inherited.len() - 1)
        } else {
            Opened::Slot(self.slots.len() - 1)
        }
    }

    /// `b` joined to its group leader's counter on the same target, if event `i` is a
    /// member ([`SamplerBuilder::group`]).
    ///
    /// [`SamplerBuilder::group`]: super::SamplerBuilder::group
    fn join_group(&self, i: usize, b: Builder, opened: &[Option<Opened>]) -> Builder {
        let Some(leader) = self.leader_of.get(i).copied().flatten() else {
            return b;
        };
        let counter = match opened.get(leader).copied().flatten() {
            Some(Opened::Slot(slot)) => self.poller.counter(Token(slot as u64)),
            Some(Opened::Inherited(k)) => self.inherited.get(k).map(|(_, c)| c),
            None => None,
        };
        match counter {
            Some(c) => b.group(c),
            None => b,
        }
    }

    fn open_budgeted(&self, b: &Builder) -> Result<Counter> {
        match self.budget {
            Some(n) => Budget::new(b.clone(), n).open(),
            None => b.open(),
        }
    }

    fn note_id(&mut self, event: Option<usize>, counter: &Counter) -> Result<()> {
        let id = counter.id()?;
        match event {
            Some(i) => self.events[i].ids.push(id),
            None => {
                if let Some(t) = &mut self.tracking {
                    t.ids.push(id)
                }
            }
        }
        Ok(())
    }

    /// The tracking counter on `pid` (inherited unless per CPU or `-t`). An inherited
    /// one is opened once per CPU (`pid`, `cpu`), each with its own ring: the kernel's
    /// ring code assumes one writer per CPU, and inheriting threads on different CPUs
    /// would otherwise write one ring at once.
    fn open_tracking(&mut self, pid: libc::pid_t, cpu: Option<i32>) -> Result<()> {
        let Some(b) = &self.tracking_builder else {
            return Ok(());
        };
        let inherited = b.attr().inherit() != 0 && cpu.is_none();
        let targets: Vec<crate::Scope> = match cpu {
            Some(c) => vec![crate::Scope::Cpu(c)],
            None if inherited => self
                .cpus
                .iter()
                .map(|&c| crate::Scope::ThreadOnCpu(pid, c))
                .collect(),
            None => vec![crate::Scope::Thread(pid)],
        };
        let b = b.clone();
        // Signals for tracking records matter only to follow threads (per-thread mode);
        // a dummy never overflows, so there is no SIGTRAP to route.
        let arm = matches!(self.notify, super::Notify::Signal { .. })
            && self.mode == Mode::PerThread
            && self.follow
            && self.holder.is_none();
        let owner = cpu.is_none().then_some(pid as u32);
        for t in targets {
            let counter = b.clone().target(t).open()?;
            self.note_id(None, &counter)?;
            if let crate::Scope::ThreadOnCpu(_, c) = t {
                if !self.cpu_rings.contains_key(&(None, c)) {
                    self.open_cpu_ring(None, c, &counter)?;
                }
                if self.share_cpu_ring(None, c, &counter, arm)? {
                    self.inherited.push((None, counter));
                    continue;
                }
            }
            let ring = Ring::map(&counter, self.tracking_size)?;
            self.register(None, owner, counter, ring, Start::Later, arm)?;
        }
        Ok(())
    }

    /// The ring CPU `cpu` has for `event` (`None`: tracking), which every root's
    /// inherited counters on that CPU share: owned by a `dummy` anchor opened on this
    /// process's main thread on that CPU (it never overflows and writes nothing), not
    /// by the first root's counter. A ring is polled through its owner's fd, and an
    /// owner that is a root would hang up when that root exits, while the other roots
    /// still write to the ring; the anchor lives as long as the sampler's process.
    fn open_cpu_ring(&mut self, event: Option<usize>, cpu: i32, like: &Counter) -> Result<()> {
        let attr = like.attr();
        let mut b = Builder::new(Event::software(Software::Dummy))
            .target(crate::Scope::ThreadOnCpu(std::process::id() as i32, cpu))
            .sample(SampleType::from_bits(attr.sample_type))
            .sample_id_all(attr.sample_id_all() != 0)
            .exclude_kernel(true);
        // SET_OUTPUT refuses events on different clocks.
        b.attr_mut().set_use_clockid(attr.use_clockid());
        b.attr_mut().clockid = attr.clockid;
        // The kernel checks REGS_USER/REGS_INTR/STACK_USER's companions.
        b.attr_mut().sample_regs_user = attr.sample_regs_user;
        b.attr_mut().sample_regs_intr = attr.sample_regs_intr;
        b.attr_mut().sample_stack_user = attr.sample_stack_user;
        b.attr_mut().branch_sample_type = attr.branch_sample_type;
        let anchor = b.open()?;
        let size = match event {
            Some(_) => self.size,
            None => self.tracking_size,
        };
        let ring = Ring::map(&anchor, size)?;
        self.register(event, None, anchor, ring, Start::Anchor, false)?;
        self.cpu_rings.insert((event, cpu), self.slots.len() - 1);
        Ok(())
    }

    /// Points a per-CPU inherited `counter` of `event` (`None`: tracking) on CPU `cpu`
    /// at the ring that CPU already has for it, if any (`true`): every root's counters
    /// on one CPU share it, as `perf record` does, so there is still one writer per CPU
    /// and rings grow with CPUs, not with roots. Keep the counter in `inherited`.
    /// `arm`: route its notifications to the ring's token.
    fn share_cpu_ring(
        &mut self,
        event: Option<usize>,
        cpu: i32,
        counter: &Counter,
        arm: bool,
    ) -> Result<bool> {
        let Some(&slot) = self.cpu_rings.get(&(event, cpu)) else {
            return Ok(false);
        };
        let owner = self
            .poller
            .counter(Token(slot as u64))
            .or_else(|| self.muted.iter().find(|m| m.0 == slot).map(|m| &m.1));
        let Some(owner) = owner else {
            return Ok(false);
        };
        counter.set_output(owner.as_fd())?;
        if arm {
            self.armed.arm(&self.notify, counter, Token(slot as u64))?;
        }
        Ok(true)
    }

    /// Inherited counters for every event on root thread `tid`: one per CPU with a ring
    /// each ([`SamplerBuilder::exact_periods`] off, race-free), or one per task writing
    /// into an anchor ring (on: one period per thread however it migrates).
    ///
    /// [`SamplerBuilder::exact_periods`]: super::SamplerBuilder::exact_periods
    pub(super) fn open_root(&mut self, tid: libc::pid_t) -> Result<()> {
        self.threads.entry(None, tid as u32);
        // Before the events: every copy of them then stays with its thread.
        self.keepers.push(keeper(tid).open()?);
        let cpus = self.cpus.clone();
        // Per CPU (or once, for exact periods): which counter each event got there.
        let mut opened = vec![vec![None; self.builders.len()]; cpus.len().max(1)];
        for i in 0..self.builders.len() {
            if !self.exact_periods {
                for (k, &c) in cpus.iter().enumerate() {
                    let b = self.event_builder(i, crate::Scope::ThreadOnCpu(tid, c));
                    let b = self.join_group(i, b, &opened[k]);
                    let counter = b.open()?;
                    self.note_id(Some(i), &counter)?;
                    if !self.cpu_rings.contains_key(&(Some(i), c)) {
                        self.open_cpu_ring(Some(i), c, &counter)?;
                    }
                    if !self.share_cpu_ring(Some(i), c, &counter, true)? {
                        return Err(Error::new(
                            ErrorKind::Io,
                            format!("Sampler: {} on CPU {c}", self.events[i].name),
                            "the CPU's ring was closed",
                        ));
                    }
                    if b.attr().enable_on_exec() == 0 {
                        counter.enable()?;
                    }
                    self.inherited.push((Some(i), counter));
                    opened[k][i] = Some(self.last_counter(true));
                }
                continue;
            }
            let b = self.event_builder(i, crate::Scope::Thread(tid));
            let b = self.join_group(i, b, &opened[0]);
            let counter = b.open()?;
            self.note_id(Some(i), &counter)?;
            let (anchor, ring) = Ring::map_inherited(&counter, self.size)?;
            // Signals come from the counter (its inherited copies too), not the anchor.
            let token = Token(self.slots.len() as u64);
            self.armed.arm(&self.notify, &counter, token)?;
            // The anchor is a dummy that only owns the ring: the inherited counter is
            // the one to enable (now, or at the command's exec).
            if b.attr().enable_on_exec() == 0 {
                counter.enable()?;
            }
            self.inherited.push((Some(i), counter));
            opened[0][i] = Some(self.last_counter(true));
            self.register(Some(i), None, anchor, ring, Start::Anchor, false)?;
        }
        self.attached.insert(tid as u32);
        Ok(())
    }

    /// Non-inherited counters for every event on thread `tid`, a ring each. `main`: the
    /// command's thread before its exec. A thread that has exited already is counted
    /// in [`Sampler::missed_threads`], not an error.
    pub(super) fn open_thread(&mut self, tid: libc::pid_t, main: bool) -> Result<()> {
        self.attached.insert(tid as u32);
        self.threads.entry(None, tid as u32);
        let mut opened = vec![None; self.builders.len()];
        for i in 0..self.builders.len() {
            let b = self
                .event_builder(i, crate::Scope::Thread(tid))
                .enable_on_exec(main && self.budget.is_none());
            let b = self.join_group(i, b, &opened);
            let counter = match self.open_budgeted(&b) {
                Ok(c) => c,
                Err(e)
                    if !main && !crate::proc::is_alive(tid)
                        || e.raw_os_error() == Some(libc::ESRCH) =>
                {
                    self.missed_threads += 1;
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            self.note_id(Some(i), &counter)?;
            let ring = Ring::map_within_budget(&counter, self.size)?;
            let start = if b.attr().enable_on_exec() != 0 {
                Start::Later
            } else {
                Start::Now
            };
            self.register(Some(i), Some(tid as u32), counter, ring, start, true)?;
            opened[i] = Some(self.last_counter(false));
        }
        Ok(())
    }

    /// Takes the tracer's reports ([`SamplerBuilder::exact_periods`]): registers the
    /// counters it opened on tasks it held at their birth (a task that died before
    /// they could be opened is counted in [`Sampler::missed_threads`]), and notes a
    /// command's exit (it may be reaped from now on).
    ///
    /// # Errors
    /// The failure to open a held task's counters for any other reason (the task then
    /// ran without them), or to register them.
    ///
    /// [`SamplerBuilder::exact_periods`]: super::SamplerBuilder::exact_periods
    pub(super) fn adopt_births(&mut self) -> Result<()> {
        let kept = std::mem::take(&mut self.reports);
        let fresh = std::iter::from_fn(|| self.holder.as_ref().and_then(|h| h.next_report()));
        let mut reports = kept
            .into_iter()
            .chain(fresh)
            .collect::<Vec<_>>()
            .into_iter();
        while let Some(report) = reports.next() {
            if let Err(e) = self.adopt(report) {
                // Keep the rest for the next call: each holds a task's counters.
                self.reports.extend(reports);
                return Err(e);
            }
        }
        Ok(())
    }

    fn adopt(&mut self, report: hold::Report) -> Result<()> {
        let (tid, opened) = match report {
            hold::Report::Exited(pid) => {
                self.watchee.exit_reported(pid);
                return Ok(());
            }
            hold::Report::Birth { tid, opened } => (tid, opened),
        };
        let opened = match opened {
            Ok(o) => o,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                self.missed_threads += 1;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.attached.insert(tid);
        self.threads.entry(None, tid);
        for (i, counter, ring) in opened {
            self.note_id(Some(i), &counter)?;
            self.register(Some(i), Some(tid), counter, ring, Start::Later, true)?;
        }
        Ok(())
    }

    /// `-p`: every thread the process has, read again after each round of attaching
    /// until no new one appears (see the module docs).
    fn attach_process(&mut self, pid: libc::pid_t) -> Result<()> {
        // A process that has exited (a zombie's /proc entries remain until it is reaped)
        // has nothing to sample: say so now rather than attach to nothing.
        if crate::proc::state(pid).is_none() {
            return Err(exited(pid, "no process has this id"));
        }
        if !process_alive(pid) {
            return Err(exited(
                pid,
                "it has exited (a zombie its parent has not reaped yet)",
            ));
        }
        let me = std::process::id() as libc::pid_t;
        let mut forked: HashSet<u32> = HashSet::new();
        // Threads that exited before their counters could be opened (a zombie leader
        // stays listed in /proc/PID/task while other threads run).
        let mut gone: HashSet<u32> = HashSet::new();
        for round in 0..MAX_ROUNDS {
            // Tasks held at their birth are attached already.
            self.adopt_births()?;
            let tids: Vec<libc::pid_t> = crate::proc::threads(pid)
                .map_err(|_| exited(pid, "it exited while perfring attached to it"))?
                .into_iter()
                .filter(|t| !self.attached.contains(&(*t as u32)) && !gone.contains(&(*t as u32)))
                .collect();
            if tids.is_empty() {
                // Every thread exited before one could be attached: nothing will come.
                if self.attached.is_empty() || !process_alive(pid) {
                    return Err(exited(pid, "it exited while perfring attached to it"));
                }
                return Ok(());
            }
            for tid in tids {
                if !thread_alive(pid, tid) {
                    gone.insert(tid as u32);
                    continue;
                }
                // A thread that appeared while earlier ones were being attached may have
                // inherited their counters: its FORK says so, once it has been scheduled.
                let inherited = round > 0 && {
                    wait_scheduled(pid, tid);
                    self.read_tracking_early(&mut forked);
                    forked.contains(&(tid as u32))
                };
                match (self.mode, inherited) {
                    (_, true) if self.mode == Mode::Inherit => {
                        self.attached.insert(tid as u32);
                    }
                    (Mode::Inherit, false) => {
                        if self.opened_on_live(pid, tid, |s| s.open_tracking(tid, None))? {
                            self.opened_on_live(pid, tid, |s| s.open_root(tid))?;
                        }
                    }
                    (_, inherited) => {
                        if !inherited {
                            self.opened_on_live(pid, tid, |s| s.open_tracking(tid, None))?;
                        }
                        // Traced before its counters open: what it creates from now
                        // on is held until it has its own.
                        let ours = tid == pid && parent_of(pid) == Some(me);
                        let held = match &self.holder {
                            Some(h) => Some(h.seize(tid, ours)?),
                            None => None,
                        };
                        match held {
                            Some(hold::Seized::Gone) => {
                                gone.insert(tid as u32);
                            }
                            Some(hold::Seized::Ours) => {
                                self.attached.insert(tid as u32);
                            }
                            Some(hold::Seized::Held) | None => self.open_thread(tid, false)?,
                        }
                    }
                }
            }
        }
        Err(Error::new(
            ErrorKind::Busy,
            format!("attach to process {pid}"),
            format!("it kept creating threads through {MAX_ROUNDS} rounds of attaching"),
        )
        .with_fix("start it under perfring (a command) instead of attaching with -p"))
    }

    /// Runs `open` for thread `tid`; a thread that exited meanwhile is skipped (`false`).
    fn opened_on_live(
        &mut self,
        pid: libc::pid_t,
        tid: libc::pid_t,
        open: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<bool> {
        match open(self) {
            Ok(()) => Ok(true),
            Err(_) if !thread_alive(pid, tid) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads the tracking rings now (while attaching), noting the tids of `FORK`s in
    /// `forked`; the records are kept, copied, for the first drain.
    fn read_tracking_early(&mut self, forked: &mut HashSet<u32>) {
        let Some(layout) = self.tracking.as_ref().map(|t| t.layout) else {
            return;
        };
        for slot in 0..self.slots.len() {
            if self.slots[slot].event.is_some() {
                continue;
            }
            let Some(ring) = self.poller.ring_mut(Token(slot as u64)) else {
                continue;
            };
            let mut batch = ring.batch();
            while let Some(r) = batch.next() {
                let Ok(raw) = r else { continue };
                if let Ok(rec) = Record::parse(raw.bytes(), &layout) {
                    if let RecordKind::Fork(t) = rec.kind() {
                        forked.insert(t.tid);
                    }
                }
                self.early.extend_from_slice(raw.bytes());
                self.early_slots.push((slot, raw.bytes().len()));
            }
        }
    }
}

/// The error of `-p` on a process that has exited (`why`).
fn exited(pid: libc::pid_t, why: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!("attach to process {pid}"),
        format!("no such process ({why})"),
    )
    .with_fix(
        "check the pid is of a running process (ps -p PID), or start the program under perfring",
    )
}

/// Waits until thread `tid` has been scheduled at least once (`/proc/.../schedstat`'s
/// third field, the number of times it ran), or has gone, or [`STARTED_WAIT`] passed.
fn wait_scheduled(pid: libc::pid_t, tid: libc::pid_t) {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let deadline = Instant::now() + STARTED_WAIT;
    loop {
        let Ok(text) = std::fs::read_to_string(&path) else {
            return;
        };
        let ran = text
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse::<u64>().ok())
            .is_none_or(|n| n > 0);
        if ran || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
