//! A whole target sampled at once: a command, a process with every thread it has and
//! creates, one thread, or CPUs, with one or more events, each record handed to the
//! caller in place.
//!
//! # Brief overview
//! - [`Target`] says what to watch; [`SamplerBuilder::event`] adds an event (a counter
//!   [`Builder`]: the caller chooses `sample_type`, period, wake-ups).
//! - [`SamplerBuilder::start`] opens what the target needs and starts it (a command is
//!   spawned stopped, so its counters are attached before its `exec`).
//! - [`Sampler::poll`] waits for the poll driver and drains every ring; each record goes
//!   to the callback as a [`Delivery`]: the event's index, the decoded
//!   [`Record`](crate::records::Record), the raw bytes, the thread. Nothing is copied or
//!   allocated per record.
//! - [`Sampler::stats`] and [`Sampler::thread`] give the accounting (samples, lost,
//!   throttled, undecoded) in total and per thread; [`Sampler::events`] each event's
//!   `perf_event_attr` and kernel ids (for a perf.data writer);
//!   [`Sampler::target_ended`] the command's exit status.
//!
//! # What is opened, and why it is exact
//! Every event's counters record `TID` and `sample_id_all`, so each record names its
//! thread. Beside the events, a *tracking* counter (`dummy` with `task`, `comm`, `mmap2`)
//! reports `FORK`/`EXIT`/`COMM`/`MMAP2`; its records are delivered with `event: None`.
//!
//! - **Inherited** (the default for [`Target::Command`] and [`Target::Pid`]): counters
//!   with `inherit` on each *root* thread. The kernel copies an inherited counter into
//!   every thread and child the root creates, inside `clone()` itself, before the new
//!   thread runs its first instruction: nothing a new thread does is missed, whatever
//!   the sampler is doing. A command has one root, attached before its `exec`. A
//!   running process has a root per thread that exists when the sampler attaches;
//!   `/proc/PID/task` is read again after each round of attaching, until no new thread
//!   appears, so a thread created *during* the attach is found too. Such a thread is
//!   given counters of its own unless the tracking counter reported its `FORK` (its
//!   creator's counters were already there, so it inherited them); the sampler first
//!   waits until the new thread has been scheduled once, which the kernel does only
//!   after writing that `FORK`. The tracking counter is opened before the events on
//!   each root, so a thread whose `FORK` was not reported did not inherit the events:
//!   no thread is counted twice. (The remaining window: a thread whose `clone()` was in
//!   flight, between the kernel's copying of counters and its `FORK` record, at the
//!   very moment its creator was being attached. Threads created after the attach are
//!   always exact.)
//!
//!   Rings: the kernel writes a ring with CPU-local atomics, assuming one writer per
//!   CPU, so inherited counters are opened once per CPU (`pid`, `cpu`), and every
//!   root's counters on one CPU write to that CPU's ring (`SET_OUTPUT`), as `perf
//!   record` does — the tracking counter always, the events by default. Rings grow
//!   with CPUs, not threads. Each such ring is owned (mapped and polled) by a `dummy`
//!   on this process's main thread, not by a root, so it keeps waking the poll
//!   after any root exits. A thread's period then restarts on each CPU it runs on, so a
//!   thread that migrates gets up to one sample fewer per move, never more. For that,
//!   each root also gets a *keeper*, an inherited `dummy` with `PERF_SAMPLE_READ`
//!   that writes nothing but keeps the kernel from swapping two threads' inherited
//!   copies at a context switch (Linux 6.12+; older kernels get a non-inherited
//!   `dummy`, which does the same for the root's own children only). Without it,
//!   threads created by one thread ran on with each other's periods: 87 to 132 of
//!   2,000 threads got 11 or 12 samples for 10 periods.
//! - **Held, one counter per task** ([`SamplerBuilder::exact_periods`], for events that
//!   sample): one non-inherited counter and ring per event per thread (and child
//!   process), opened *before the task's first instruction*. The sampler's tracer
//!   thread traces the target (`PTRACE_SEIZE` with `PTRACE_O_TRACECLONE`, `FORK`,
//!   `VFORK`), so the kernel stops each new task before it runs; the tracer opens its
//!   counters, enabled, and lets it go; every other stop (a signal, a group stop) is
//!   passed on as if untraced. A counter per task keeps one period however the task
//!   migrates (exactly `N/P` samples per thread), and each ring has one writer: nothing
//!   is overwritten unreported, and a full ring says `LOST` with the count. See
//!   [`SamplerBuilder::exact_periods`] for the price and when to choose which.
//!   Counting-only events (no period) with `exact_periods` are one inherited per-task
//!   counter per root instead, writing nothing: exact counts, nothing to hold.
//! - **Per thread** ([`SamplerBuilder::per_thread`], implied by
//!   [`SamplerBuilder::budget`] because `REFRESH` is `EINVAL` on inherited counters, and
//!   always for [`Target::Tid`]): one non-inherited counter and ring per event per
//!   thread. The tracking counter is inherited as above, and each `FORK` it reports
//!   opens counters on the new thread; events the new thread causes before they are
//!   open (it runs while the sampler reacts) are not seen. Use inheritance for exact
//!   counts from a thread's first instruction, per-thread counters for what needs them
//!   (budgets, a ring per thread).
//! - **CPUs**: one counter per event per CPU, mapped directly.
//!
//! # Examples
//! ```no_run
//! use perfring::sampler::{Sampler, Target};
//! use perfring::records::RecordKind;
//! use perfring::{launch, Counter, SampleType};
//!
//! let event = Counter::builder("cpu-clock:u")?
//!     .period(1_000_000)
//!     .sample(SampleType::IP | SampleType::TID | SampleType::TIME)
//!     .wakeup_events(16);
//! let mut sampler = Sampler::builder(Target::Command(launch::Command::new("ls").arg("/")))
//!     .event(event)
//!     .start()?;
//! while sampler.target_ended()?.is_none() {
//!     sampler.poll(Some(std::time::Duration::from_millis(50)), |d| {
//!         if let RecordKind::Sample(s) = d.record.kind() {
//!             println!("event {:?} tid {:?} ip {:#x}", d.event, d.tid, s.ip().unwrap_or(0));
//!         }
//!     })?;
//! }
//! sampler.drain(|_| {})?; // what the last moments left in the rings
//! let total = sampler.stats();
//! println!("{} samples, {} lost, {} throttled", total.samples, total.lost, total.throttled);
//! # Ok::<(), perfring::Error>(())
//! ```
//!
//! [`Builder`]: crate::Builder
//! [`Ring::map_inherited`]: crate::ring::Ring::map_inherited

mod attach;
mod drain;
mod hold;
mod notify;
mod stats;
mod target;

pub use drain::Delivery;
pub use notify::Notify;
pub use stats::{Stats, ThreadInfo};
pub use target::{Target, TargetEnd};

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use crate::counter::{Builder, Count, Counter};
use crate::launch::ExitStatus;
use crate::notify::{Notification, NotifyKind, Poller, Token};
use crate::records::Layout;
use crate::ring::{Ring, RingSize};
use crate::{sys, Error, ErrorKind, Result};

use drain::{Deliverer, Slot, TaskQueue};
use stats::Threads;
use target::Watchee;

/// One event of a sampler (or its tracking counter): what the kernel was given and the
/// ids of the counters opened for it.
#[derive(Clone)]
pub struct EventInfo {
    name: String,
    attr: sys::perf_event_attr,
    layout: Layout,
    ids: Vec<u64>,
}

impl std::fmt::Debug for EventInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventInfo")
            .field("name", &self.name)
            .field("type", &self.attr.type_)
            .field("config", &self.attr.config)
            .field("sample_type", &self.attr.sample_type)
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

impl EventInfo {
    /// An event description: its name (as the user wrote it), the `perf_event_attr` its
    /// counters were opened with, and their kernel ids (`PERF_EVENT_IOC_ID`), which
    /// `PERF_SAMPLE_ID`/`IDENTIFIER` carry in each record.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] if the attr's records cannot be decoded
    /// ([`Layout::new`] fails).
    pub fn new(name: impl Into<String>, attr: sys::perf_event_attr, ids: Vec<u64>) -> Result<Self> {
        let name = name.into();
        let layout = Layout::new(&attr).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("EventInfo: describe {name}"),
                format!("its records cannot be decoded: {e}"),
            )
        })?;
        Ok(EventInfo {
            name,
            attr,
            layout,
            ids,
        })
    }

    /// The event's name, as parsed.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `perf_event_attr` every counter of this event was opened with (what a
    /// perf.data header records): the caller's, plus `TID` in `sample_type`,
    /// `sample_id_all`, and `inherit`/`enable_on_exec` as the target needs.
    pub fn attr(&self) -> &sys::perf_event_attr {
        &self.attr
    }

    /// Where each field of this event's records sits.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether the event counts CPU time (`cpu-clock`, `task-clock`): its periods are
    /// nanoseconds.
    pub fn counts_cpu_time(&self) -> bool {
        let a = &self.attr;
        a.type_ == sys::PERF_TYPE_SOFTWARE
            && (a.config == u64::from(sys::PERF_COUNT_SW_CPU_CLOCK)
                || a.config == u64::from(sys::PERF_COUNT_SW_TASK_CLOCK))
    }

    /// The kernel ids ([`Counter::id`]) of every counter opened for this event, in the
    /// order they were opened (threads found later append theirs). Samples of inherited
    /// counters carry their root's id in `PERF_SAMPLE_ID`.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }
}

/// How the counters are laid out over the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Inherit,
    PerThread,
    Cpu,
}

/// Configures a [`Sampler`]; from [`Sampler::builder`].
#[derive(Debug, Clone)]
pub struct SamplerBuilder {
    target: Target,
    events: Vec<Builder>,
    size: RingSize,
    tracking_size: RingSize,
    per_thread: bool,
    budget: Option<u32>,
    tracking: bool,
    notify: Notify,
    exact_periods: bool,
    /// For each event, the index of its group leader if it is a group member.
    leader_of: Vec<Option<usize>>,
}

impl SamplerBuilder {
    /// Adds an event; its index in [`Delivery::event`] and [`Sampler::events`] is the
    /// number of events added before it. The builder's target, `inherit`,
    /// `enable_on_exec` and `disabled` are set by the sampler; `TID` is added to its
    /// `sample_type` and `sample_id_all` is set, so every record names its thread.
    pub fn event(mut self, event: Builder) -> Self {
        self.events.push(event);
        self.leader_of.push(None);
        self
    }

    /// Adds events that are scheduled together as one group on every target: the
    /// first leads, the others join it (`group_fd`) wherever the sampler opens
    /// counters. Each keeps its own index (in order, after the events added before)
    /// and its own ring, so [`Delivery::event`] says which member overflowed.
    pub fn group(mut self, events: impl IntoIterator<Item = Builder>) -> Self {
        let leader = self.events.len();
        for (k, event) in events.into_iter().enumerate() {
            self.events.push(event);
            self.leader_of.push((k > 0).then_some(leader));
        }
        self
    }

    /// The size of each event ring (default 64 pages).
    pub fn ring_size(mut self, size: RingSize) -> Self {
        self.size = size;
        self
    }

    /// The size of each tracking ring (default 16 pages; one per CPU per root).
    pub fn tracking_ring_size(mut self, size: RingSize) -> Self {
        self.tracking_size = size;
        self
    }

    /// One non-inherited counter per thread, opened for new threads as their `FORK` is
    /// reported (see the module docs for what that misses), instead of inherited ones.
    pub fn per_thread(mut self, yes: bool) -> Self {
        self.per_thread = yes;
        self
    }

    /// At most `n` overflows per counter (`PERF_EVENT_IOC_REFRESH`): per thread, since
    /// it implies [`per_thread`](Self::per_thread); per CPU for [`Target::Cpus`].
    pub fn budget(mut self, n: u32) -> Self {
        self.budget = Some(n);
        self
    }

    /// Whether to open the tracking counter (`MMAP2`, `COMM`, `FORK`, `EXIT`; default
    /// yes). Without it, per-thread mode cannot follow new threads.
    pub fn tracking(mut self, yes: bool) -> Self {
        self.tracking = yes;
        self
    }

    /// **One period per thread** however it migrates between CPUs: `N` events with
    /// period `P` give exactly `N/P` samples in every thread of a command or process,
    /// threads created later included, on a busy machine too. Default off: one
    /// inherited counter per CPU with a ring each, as `perf record` does.
    ///
    /// How: each task gets a counter per event with a ring of its own, opened while the
    /// kernel holds the new task before its first instruction (`ptrace`; see the
    /// [module docs](self)). Not with [`budget`](Self::budget) or
    /// [`per_thread`](Self::per_thread), which open counters on threads that already
    /// run, nor for [`Target::Tid`] and [`Target::Cpus`]. Counting-only events need no
    /// holding (see the module docs).
    ///
    /// # Which to choose
    /// | | per-CPU (off) | exact periods (on) |
    /// |---|---|---|
    /// | samples per thread | `N/P` for a thread that stays on one CPU; up to one fewer per CPU move, never more | exactly `N/P` |
    /// | counters, rings | events × CPUs per root; rings: events × CPUs | events per **live** task; as many rings |
    /// | ring memory | events × CPUs × `ring_size` | events × live tasks × `ring_size` (size the rings small with many threads: `perf_event_mlock_kb` and `RLIMIT_MEMLOCK` bound it; a refused `mmap` is an error naming them) |
    /// | the target | untouched | traced by this process while sampled: a debugger or `strace` cannot attach (nor can this take a target that one traces); each new thread waits until its counters are open, each signal until the tracer passes it on (within 2 ms) |
    /// | notifications | signals as inherited counters send them | a held task's counters are signalled once the sampler has registered them ([`Notify::Signal`]); their records are in the ring either way |
    /// | this process | allowed | refused: a process cannot trace itself ([`Notify::Sigtrap`] samples this process, so it is refused too) |
    ///
    /// Measured on this 2-core VM (`cargo bench --bench sampler -- churn 2000 0` and
    /// `-- churn 2000 1000`): creating and joining 2,000 idle threads 20 at a time took
    /// 0.42-0.55 s held against 0.15-0.23 s under per-CPU rings (2.5×: each new thread
    /// waits ~0.2 ms for the tracer); with 1,000 breakpointed calls per thread (period
    /// 100), 19-21 s held against 28-33 s per-CPU, 20,000 samples against 19,515-19,682,
    /// at most 25 perf fds and 892 KiB of 8-page rings held against 9 fds and 208 KiB.
    ///
    /// Choose exact periods when per-thread counts must be exact (a breakpoint on a
    /// function called `N` times, a trigger per thread) and the target's threads are
    /// fewer than a few thousand at a time; per-CPU rings for long profiles of many
    /// threads, where a period restarting on a CPU move does not matter, or when the
    /// target must not be traced.
    ///
    /// A command's exit status comes from [`Sampler::target_ended`] as before. A
    /// `-p` target that is a child of this process must not be waited for (`waitpid`)
    /// while the sampler holds it: the parent's wait would take the tracer's stops.
    /// Wait after [`Sampler::target_ended`] reports it, or after dropping the sampler.
    ///
    /// # Errors at start
    /// [`ErrorKind::InvalidArgument`] for this process as the target;
    /// [`ErrorKind::PermissionDenied`] when the kernel refuses to trace it (another
    /// tracer, Yama's `ptrace_scope`), naming the fixes.
    pub fn exact_periods(mut self, yes: bool) -> Self {
        self.exact_periods = yes;
        self
    }

    /// How the sampler is told that records wait (default: the poll driver); see
    /// [`Notify`].
    pub fn notify(mut self, notify: Notify) -> Self {
        self.notify = notify;
        self
    }

    /// Opens every counter and ring, registers them with the poll driver, enables them,
    /// and starts the command if the target is one.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] without events or with an empty CPU list; any
    /// error of spawning the command, opening a counter ([`Builder::open`]), mapping a
    /// ring ([`Ring::map`]) or registering it. A command spawned before the error is
    /// killed and reaped.
    pub fn start(self) -> Result<Sampler> {
        attach::start(self)
    }
}

/// A target sampled with one or more events; see the [module docs](self).
///
/// Dropping it closes its counters and rings, stops its tracer (which lets the target
/// go on untraced) and lets a spawned command run on. A copy dropped in a forked child
/// only closes the child's fds: it disables nothing, disarms no signal and leaves the
/// parent's tracer thread alone, so the parent's sampling goes on unchanged.
#[derive(Debug)]
pub struct Sampler {
    /// Signal registrations: dropped first, so no handler runs for a closed counter.
    armed: notify::Armed,
    notify: Notify,
    /// `sig_data` of each sigtrap counter → its event.
    sig_events: HashMap<u64, usize>,
    poller: Poller,
    slots: Vec<Slot>,
    events: Vec<EventInfo>,
    tracking: Option<EventInfo>,
    /// Per-event builders with everything but the target set, for threads found later.
    builders: Vec<Builder>,
    tracking_builder: Option<Builder>,
    mode: Mode,
    follow: bool,
    size: RingSize,
    tracking_size: RingSize,
    budget: Option<u32>,
    /// Inherited counters writing into an anchor's ring (with their event; `None`
    /// for tracking): alive as long as the sampler.
    inherited: Vec<(Option<usize>, Counter)>,
    /// Per event, the counts of per-thread counters closed when their thread exited.
    closed_counts: Vec<Count>,
    /// Online CPUs, for per-CPU inherited counters.
    cpus: Vec<i32>,
    exact_periods: bool,
    /// The tracer holding each new task until its counters are open (exact periods
    /// for events that sample).
    holder: Option<hold::Holder>,
    /// Its reports taken while waiting for something else, for `adopt_births`.
    reports: Vec<hold::Report>,
    /// One `dummy` per root of inherited counters that keeps the kernel from swapping
    /// threads' inherited copies (see `attach::keeper`).
    keepers: Vec<Counter>,
    leader_of: Vec<Option<usize>>,
    /// `(event or tracking, CPU)` → the slot whose ring that CPU's inherited counters
    /// of every root write to.
    cpu_rings: HashMap<(Option<usize>, i32), usize>,
    /// Rings no longer polled (their task exited and epoll would report `EPOLLHUP` on
    /// every wait) but still drained: inherited copies may still write to them.
    muted: Vec<(usize, Counter, Ring)>,
    /// Threads with counters of their own (per-thread mode) or roots (inherited).
    attached: HashSet<u32>,
    threads: Threads,
    totals: Stats,
    tasks: TaskQueue,
    /// Tracking records read while attaching (to find inherited threads), with the slot
    /// they came from; delivered at the first drain.
    early: Vec<u8>,
    early_slots: Vec<(usize, usize)>,
    ready: Vec<Notification>,
    wakeups: u64,
    /// Threads whose counters could not be opened because they had already exited.
    missed_threads: u64,
    /// Data bytes of the smallest event ring mapped so far.
    smallest_ring: Option<usize>,
    watchee: Watchee,
}

impl Sampler {
    /// Starts configuring a sampler of `target`.
    pub fn builder(target: Target) -> SamplerBuilder {
        SamplerBuilder {
            target,
            events: Vec::new(),
            size: RingSize::Pages(64),
            tracking_size: RingSize::Pages(16),
            per_thread: false,
            budget: None,
            tracking: true,
            notify: Notify::Poll,
            exact_periods: false,
            leader_of: Vec::new(),
        }
    }

    /// Waits up to `timeout` (`None`: forever) for the poll driver to report a ready
    /// ring, then drains **every** ring to `data_head` (one wake-up is never one
    /// overflow), handing each record to `f` in place; then opens counters for threads
    /// created since (per-thread mode) and closes those of threads that exited. Returns
    /// the number of records handed out.
    ///
    /// # Errors
    /// An `epoll_wait` errno other than `EINTR` (which returns after draining), or the
    /// failure to open counters on a new thread for a reason other than its exit.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(Delivery<'_>),
    ) -> Result<u64> {
        let mut ready = std::mem::take(&mut self.ready);
        let polled = self.poller.poll(&mut ready, timeout);
        self.ready = ready;
        polled?;
        self.adopt_births()?;
        let mut hups = 0;
        for n in &self.ready {
            match n.kind {
                NotifyKind::Hup => hups += 1,
                _ => self.wakeups += 1,
            }
        }
        let n = self.drain_rings(&mut f);
        if hups > 0 {
            self.on_hups(&mut f);
        }
        self.follow_tasks(&mut f)?;
        Ok(n)
    }

    /// Drains every ring without waiting (for signal-driven callers, and after the
    /// target ended), then follows thread creation and exit as [`poll`](Self::poll).
    ///
    /// # Errors
    /// As [`poll`](Self::poll), for new threads.
    pub fn drain(&mut self, mut f: impl FnMut(Delivery<'_>)) -> Result<u64> {
        self.adopt_births()?;
        let n = self.drain_rings(&mut f);
        self.follow_tasks(&mut f)?;
        Ok(n)
    }

    fn deliverer(&mut self) -> (Deliverer<'_>, &mut Poller, &mut Vec<(usize, Counter, Ring)>) {
        (
            Deliverer {
                slots: &mut self.slots,
                events: &self.events,
                tracking: self.tracking.as_ref(),
                threads: &mut self.threads,
                totals: &mut self.totals,
                tasks: &mut self.tasks,
            },
            &mut self.poller,
            &mut self.muted,
        )
    }

    fn drain_rings(&mut self, f: &mut dyn FnMut(Delivery<'_>)) -> u64 {
        let mut n = 0;
        if !self.early_slots.is_empty() {
            let early = std::mem::take(&mut self.early);
            let slots = std::mem::take(&mut self.early_slots);
            let (mut deliverer, _, _) = self.deliverer();
            let mut at = 0;
            for &(slot, len) in &slots {
                deliverer.record(slot, &early[at..at + len], f);
                at += len;
                n += 1;
            }
        }
        // The tracking rings first: a sample's MMAP2/COMM/FORK come before it in time,
        // and a reader naming samples needs them first (rings are kept unordered).
        // (By index, allocating nothing.)
        for slot in 0..self.slots.len() {
            if self.slots[slot].event.is_some() || self.slots[slot].closed {
                continue;
            }
            let (mut deliverer, poller, _) = self.deliverer();
            n += poller.drain(Token(slot as u64), |t, raw| {
                deliverer.record(t.0 as usize, raw.bytes(), f)
            });
        }
        let (mut deliverer, poller, muted) = self.deliverer();
        n += poller.drain_all(|t, raw| deliverer.record(t.0 as usize, raw.bytes(), f));
        for (slot, _, ring) in muted.iter_mut() {
            let mut batch = ring.batch();
            while let Some(r) = batch.next() {
                if let Ok(raw) = r {
                    deliverer.record(*slot, raw.bytes(), f);
                    n += 1;
                }
            }
        }
        n
    }

    /// Rings whose task exited: a per-thread counter is closed (after a last drain);
    /// an inherited root's ring is taken off epoll but kept and drained, since the
    /// threads that inherited it may still write to it.
    fn on_hups(&mut self, f: &mut dyn FnMut(Delivery<'_>)) {
        for i in 0..self.ready.len() {
            if self.ready[i].kind != NotifyKind::Hup {
                continue;
            }
            let slot = self.ready[i].token.0 as usize;
            if self.slots.get(slot).is_none_or(|s| s.closed) {
                continue;
            }
            self.close_slot(slot, f);
        }
    }

    fn close_slot(&mut self, slot: usize, f: &mut dyn FnMut(Delivery<'_>)) {
        let token = Token(slot as u64);
        let inherit = self.mode == Mode::Inherit;
        let (mut deliverer, poller, muted) = self.deliverer();
        poller.drain(token, |t, raw| {
            deliverer.record(t.0 as usize, raw.bytes(), f)
        });
        let Some((counter, ring)) = poller.deregister(token) else {
            return;
        };
        let count = counter.read();
        if inherit {
            muted.push((slot, counter, ring));
        }
        self.slots[slot].closed = true;
        // A closed counter's count would go with it: keep it for `read`.
        // (A muted inherited counter is still read live: its copies may still count.)
        if let (false, true, Some(i), Ok(c)) = (
            inherit,
            self.slots[slot].counts,
            self.slots[slot].event,
            count,
        ) {
            if let Some(sum) = self.closed_counts.get_mut(i) {
                add_count(sum, &c);
            }
        }
    }

    /// Per-thread mode: counters for threads created since the last drain, and closing
    /// those of threads that exited.
    fn follow_tasks(&mut self, f: &mut dyn FnMut(Delivery<'_>)) -> Result<()> {
        if self.tasks.forks.is_empty() && self.tasks.exits.is_empty() {
            return Ok(());
        }
        let forks = std::mem::take(&mut self.tasks.forks);
        let exits = std::mem::take(&mut self.tasks.exits);
        if self.mode == Mode::PerThread && self.follow {
            // Held tasks got their counters before they ran (`adopt_births`).
            let forks = if self.holder.is_some() {
                &[][..]
            } else {
                &forks[..]
            };
            for &(_, tid) in forks {
                if !self.attached.contains(&tid) && !exits.contains(&tid) {
                    self.open_thread(tid as libc::pid_t, false)?;
                }
            }
            for &tid in &exits {
                let owned: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.slots[i].owner == Some(tid) && !self.slots[i].closed)
                    .collect();
                for slot in owned {
                    self.close_slot(slot, f);
                }
            }
        }
        // Reuse the vectors' capacity.
        self.tasks.forks = forks;
        self.tasks.forks.clear();
        self.tasks.exits = exits;
        self.tasks.exits.clear();
        Ok(())
    }

    /// Event `event`'s count over the whole target: the sum of its counters (an
    /// inherited counter's read includes the threads and children that inherited it
    /// and have exited; per-thread counters of exited threads were read when closed).
    /// Times enabled and running are summed too, so [`Count::scaled`] scales the total
    /// (`None` with per-CPU inherited counters, whose times do not add up; see
    /// [`SamplerBuilder::exact_periods`]).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] for an unknown event; a `read(2)` error of a counter.
    pub fn read(&self, event: usize) -> Result<Count> {
        let Some(&closed) = self.closed_counts.get(event) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("Sampler::read({event})"),
                format!("there are {} events", self.events.len()),
            ));
        };
        let mut total = closed;
        for (e, c) in &self.inherited {
            if *e == Some(event) {
                add_count(&mut total, &c.read()?);
            }
        }
        for (slot, c, _) in &self.muted {
            let s = &self.slots[*slot];
            if s.event == Some(event) && s.counts {
                add_count(&mut total, &c.read()?);
            }
        }
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.event != Some(event) || slot.closed || !slot.counts {
                continue;
            }
            if let Some(c) = self.poller.counter(Token(i as u64)) {
                add_count(&mut total, &c.read()?);
            }
        }
        total.id = None;
        if self.mode == Mode::Inherit && !self.exact_periods {
            // Per-CPU copies of one task count only on their CPU but are "enabled" on
            // all: summed times would scale the exact sum wrongly.
            total.time_enabled = None;
            total.time_running = None;
        }
        Ok(total)
    }

    /// Samples of `event` that the kernel's own count says were taken but that neither
    /// reached a ring nor were reported lost (`LOST`/`LOST_SAMPLES`): 0 when every
    /// overflow is accounted for.
    ///
    /// Every ring the sampler maps has one writer at a time (a CPU's, or one task's),
    /// so none is expected; this is the check. (A ring that threads on several CPUs
    /// write at once, such as [`Ring::map_inherited`]'s, loses records unreported and
    /// can stop publishing altogether.) Call it after the last
    /// [`drain`](Self::drain): it compares
    /// [`read`](Self::read)`(event) / period` with the samples delivered, allowing one
    /// partial period per counter copy (per thread, and per CPU for per-CPU rings).
    /// Frequency-mode events (`-F`) have no fixed period and give 0.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn unreported_loss(&self, event: usize) -> Result<u64> {
        let count = self.read(event)?;
        let attr = self.events[event].attr();
        // sample_period and sample_freq share one u64; zerocopy reads it without unsafe.
        let period: u64 = zerocopy::transmute!(attr.__bindgen_anon_1);
        if attr.freq() != 0 || period == 0 {
            return Ok(0);
        }
        let delivered: u64 = self
            .slots
            .iter()
            .filter(|s| s.event == Some(event))
            .map(|s| s.samples)
            .sum();
        let copies = self.threads.iter().count().max(1) as u64;
        let copies = if self.mode == Mode::Inherit && !self.exact_periods {
            copies * self.cpus.len().max(1) as u64
        } else {
            copies
        };
        // Each copy's last partial period is no sample: up to one per copy.
        let expected = (count.value / period).saturating_sub(copies - 1);
        let reported = self.totals.lost + self.totals.lost_samples;
        Ok(expected.saturating_sub(delivered + reported))
    }

    /// Each event: name, `perf_event_attr`, layout, kernel ids.
    pub fn events(&self) -> &[EventInfo] {
        &self.events
    }

    /// The tracking counter (`dummy` with `task`, `comm`, `mmap2`), if opened.
    pub fn tracking(&self) -> Option<&EventInfo> {
        self.tracking.as_ref()
    }

    /// Totals over every thread.
    pub fn stats(&self) -> Stats {
        self.totals
    }

    /// What thread `tid` delivered, if the sampler has seen it.
    pub fn thread(&self, tid: u32) -> Option<&ThreadInfo> {
        self.threads.get(tid)
    }

    /// Every thread seen, in no particular order.
    pub fn threads(&self) -> impl Iterator<Item = &ThreadInfo> + '_ {
        self.threads.iter()
    }

    /// Wake-ups from the poll driver (overflow notifications, not hang-ups).
    pub fn wakeups(&self) -> u64 {
        self.wakeups
    }

    /// Number of counters opened (every event on every root, thread or CPU, the
    /// tracking counters, the anchors owning the per-CPU rings of inherited
    /// counters, and one keeper per root of inherited counters), closed ones included.
    pub fn counters(&self) -> usize {
        self.slots.len() + self.inherited.len() + self.keepers.len()
    }

    /// Number of rings mapped (closed ones included): per event and CPU for inherited
    /// counters, per event and thread in per-thread mode, plus the tracking rings.
    pub fn rings(&self) -> usize {
        self.slots.len()
    }

    /// Threads reported by `FORK` that exited before their counters could be opened
    /// (per-thread mode).
    pub fn missed_threads(&self) -> u64 {
        self.missed_threads
    }

    /// Data bytes of the smallest event ring mapped so far (`None` before any): below
    /// [`SamplerBuilder::ring_size`] when the user's locked-memory budget allowed no
    /// more for a ring made per thread ([`Ring::map_within_budget`]), which a
    /// recording should say.
    pub fn smallest_ring(&self) -> Option<usize> {
        self.smallest_ring
    }

    /// Notifications the signal or `SIGTRAP` handler took for this sampler's counters
    /// ([`Notify::Signal`], [`Notify::Sigtrap`]; 0 with the poll driver, see
    /// [`wakeups`](Self::wakeups)).
    pub fn notifications(&self) -> u64 {
        self.armed.notifications()
    }

    /// The event a notification is about: its [`Token`] (a signal's
    /// [`Notification::token`], a `SIGTRAP`'s [`SigtrapInfo::token`]); `None` for the
    /// tracking counter or an unknown token.
    ///
    /// [`SigtrapInfo::token`]: crate::notify::SigtrapInfo::token
    pub fn event_of(&self, token: Token) -> Option<usize> {
        if let Some(&e) = self.sig_events.get(&token.0) {
            return Some(e);
        }
        self.slots.get(usize::try_from(token.0).ok()?)?.event
    }

    /// Whether every per-thread counter has delivered its [`budget`] (false without
    /// one).
    ///
    /// [`budget`]: SamplerBuilder::budget
    pub fn budgets_spent(&self) -> bool {
        let Some(n) = self.budget else {
            return false;
        };
        self.slots
            .iter()
            .filter(|s| s.event.is_some())
            .all(|s| s.samples >= u64::from(n))
    }

    /// The process id of the target (the command's, `-p`'s or `-t`'s), `None` for CPUs.
    pub fn pid(&self) -> Option<libc::pid_t> {
        self.watchee.pid()
    }

    /// Whether the target has ended: the command exited (reaped, with its status), or
    /// the process or thread given by id is gone (a process: no thread of it left
    /// running; a main thread that called `pthread_exit` alone does not end it). Always `None` for CPUs. Drain once
    /// more after it returns `Some` to collect the last records.
    ///
    /// # Errors
    /// A `waitpid` failure other than "no such child".
    pub fn target_ended(&mut self) -> Result<Option<TargetEnd>> {
        // A held command's exit comes from the tracer (with any births before it).
        self.adopt_births()?;
        self.watchee.ended()
    }

    /// Sends `signal` to the target process (a command or `-p`/`-t`'s process).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a CPU target; the `kill` errno otherwise.
    pub fn signal_target(&self, signal: crate::Signal) -> Result<()> {
        match self.watchee.pid() {
            Some(pid) => crate::process::signal_process(pid, signal),
            None => Err(Error::new(
                ErrorKind::InvalidArgument,
                "Sampler::signal_target",
                "the target is CPUs, not a process",
            )),
        }
    }

    /// Ends a spawned command that is still running: `SIGTERM`, then `SIGKILL` after
    /// `grace`, and returns its status (also when it had exited already). Targets given
    /// by id are left running (`None`).
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        let (holder, kept) = (&self.holder, &mut self.reports);
        self.watchee.terminate(grace, |w| {
            // Exits are what it waits for; births are kept for the next drain.
            while let Some(r) = holder.as_ref().and_then(|h| h.next_report()) {
                match r {
                    hold::Report::Exited(pid) => w.exit_reported(pid),
                    birth => kept.push(birth),
                }
            }
            w.exit_seen()
        })
    }
}

fn add_count(to: &mut Count, c: &Count) {
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    to.value += c.value;
    to.time_enabled = sum(to.time_enabled, c.time_enabled);
    to.time_running = sum(to.time_running, c.time_running);
    to.lost = sum(to.lost, c.lost);
    to.id = c.id;
}

/// The poll driver's epoll fd, readable while a ring is ready: an event loop can watch
/// the whole sampler with one registration and call [`Sampler::drain`].
impl AsFd for Sampler {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.poller.as_fd()
    }
}
