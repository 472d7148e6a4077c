//! Act when a rate or a ratio crosses a threshold: `page-faults > 1000/s`,
//! `context-switches/task-clock > 0.5/ms`, `cache-misses/instructions > 0.01`.
//!
//! # Brief overview
//! - [`Expr`] parses the condition, with errors that point at the part that is wrong.
//! - [`Trigger`] turns it into a counter group: a **leader** that sets the time base
//!   (overflowing every window) and samples with `PERF_SAMPLE_READ` of a
//!   `PERF_FORMAT_GROUP`, so every sample carries every member's count — in the ring,
//!   without a `read(2)` per window — and non-sampling **members**.
//! - [`Evaluator`] (pure) turns successive samples into per-window deltas, values and
//!   [`Crossing`]s: up when the condition starts to hold, down when it has ended, with
//!   a hysteresis band and a minimum duration, per thread or per process.
//! - [`Armed`] is an opened trigger: its group, its ring and a poll driver.
//!
//! # The time base
//! - A **rate** (`X > N/s`, `X/task-clock > N/ms`) is counted per the leader's clock:
//!   `task-clock` (the thread's CPU time) unless the expression divides by
//!   `cpu-clock`. The leader overflows every window of CPU time (10 ms by default) and
//!   the value is `ΔX / Δclock`. This is what `perf stat`'s "/sec" column means, and it
//!   does not depend on how busy the machine is: a thread that waits is not in a window.
//! - A **ratio of counts** (`a/b`) has two choices ([`Span`]): windows of CPU time (the
//!   leader is `task-clock`, `a` and `b` are members), or windows of `N` events of `b`
//!   ([`Span::Events`]: `b` itself leads and overflows every `N`), which makes windows
//!   exact for exact events — a breakpoint called `N` times is one window.
//!
//! Group members are scheduled with the leader, so both sides of a ratio are counted
//! over the same intervals; multiplexing scales them alike and cancels out.
//!
//! # Per thread
//! A command's threads inherit the group. Linux 6.12 and later accept `inherit` with
//! `PERF_SAMPLE_READ` when `PERF_SAMPLE_TID` is sampled too (older kernels refuse it
//! with `EINVAL`), and each sample then carries the counts **of the thread that
//! overflowed**; so every thread has its own windows, and [`Scope::Process`] sums them.
//! The inherited records reach the ring through an anchor ([`Ring::map_inherited`]):
//! one group per task, so a thread's windows are one period each however it migrates
//! (per-CPU groups would give each thread one event per CPU, with windows that overlap
//! in time and values that jump when it migrates). The kernel writes a ring assuming
//! one writer per CPU, so two threads overflowing at the same instant on two CPUs can
//! damage each other's record; every sample's group read must carry the group's kernel
//! ids, in order, or it is set aside ([`Armed::rejected`]) — since counts are
//! cumulative, that only makes the thread's next window longer.
//!
//! # Examples
//! ```no_run
//! use std::time::Duration;
//! use perfring::trigger::{Expr, OpenOptions, Trigger, Update};
//! use perfring::Target;
//!
//! let trigger = Trigger::new(Expr::parse("page-faults > 1000/s")?)
//!     .min_duration(Duration::from_millis(20));
//! let mut armed = trigger.open(Target::CallingThread, OpenOptions::default())?;
//! armed.enable()?;
//! let pages: Vec<Vec<u8>> = (0..1000).map(|_| vec![1u8; 4096]).collect(); // faults
//! armed.poll(Some(Duration::ZERO), |u| {
//!     if let Update::Crossing(c) = u {
//!         println!("{} at {:.0}/s (tid {})", c.edge.as_str(), c.value, c.window.tid);
//!     }
//! })?;
//! # drop(pages);
//! # Ok::<(), perfring::Error>(())
//! ```

mod eval;
mod expr;

use std::time::Duration;

pub use eval::{Crossing, Edge, Evaluator, Plan, Rule, Scope, Window};
pub use expr::{Cmp, Expr, Measure, Operand, TimeUnit};

use crate::counter::{Builder, Counter, Group, SampleType, Target};
use crate::event::{Event, Software};
use crate::notify::{Accounting, Notification, NotifyKind, Poller, Token};
use crate::records::{Layout, Record, RecordKind};
use crate::ring::{Ring, RingSize};
use crate::{Error, ErrorKind, Result};

/// How long a window is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// A window of the leader clock's time (CPU time for `task-clock`).
    Time(Duration),
    /// A window of `N` events of a ratio's denominator, which then leads the group.
    Events(u64),
}

/// The default window: 10 ms of CPU time.
pub const DEFAULT_SPAN: Span = Span::Time(Duration::from_millis(10));

/// A condition over a counter group, and how it is judged.
///
/// Defaults: [`DEFAULT_SPAN`], 10 % hysteresis, no minimum duration, per thread, one
/// warm-up window (see [`Rule::warm_up`]).
#[derive(Debug, Clone)]
pub struct Trigger {
    expr: Expr,
    span: Span,
    hysteresis: f64,
    min_duration: Duration,
    scope: Scope,
    warm_up: u32,
}

/// The group a [`Trigger`] opens: its events, the leader's period, and the plan.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// The events, leader first.
    pub events: Vec<Event>,
    /// The leader's `sample_period`: nanoseconds for a clock, else events.
    pub period: u64,
    /// How values are computed from the group's deltas.
    pub plan: Plan,
}

/// How [`Trigger::open`] opens the group.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Count the target's future threads and children too, each with its own windows
    /// (Linux 6.12+, see the [module docs](self#per-thread)).
    pub inherit: bool,
    /// Start counting at the target's next `exec` (for a command started stopped).
    pub enable_on_exec: bool,
    /// The ring's size.
    pub ring: RingSize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            inherit: false,
            enable_on_exec: false,
            ring: RingSize::Pages(64),
        }
    }
}

impl Trigger {
    /// A trigger on `expr` with the defaults.
    pub fn new(expr: Expr) -> Trigger {
        Trigger {
            expr,
            span: DEFAULT_SPAN,
            hysteresis: 0.1,
            min_duration: Duration::ZERO,
            scope: Scope::Thread,
            warm_up: 1,
        }
    }

    /// The condition.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The window length (see [`Span`]).
    pub fn span(mut self, span: Span) -> Self {
        self.span = span;
        self
    }

    /// The hysteresis band as a fraction of the threshold (see [`Rule::hysteresis`]).
    pub fn hysteresis(mut self, fraction: f64) -> Self {
        self.hysteresis = fraction;
        self
    }

    /// How long the condition must hold (or have ended) before a crossing is
    /// reported, on the samples' clock (`CLOCK_MONOTONIC`).
    pub fn min_duration(mut self, d: Duration) -> Self {
        self.min_duration = d;
        self
    }

    /// Per thread or per process.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Windows per thread used as a baseline before any is judged (default 1).
    pub fn warm_up(mut self, windows: u32) -> Self {
        self.warm_up = windows;
        self
    }

    /// The group this trigger needs, and how its values are computed.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a zero window, a hysteresis outside `0..1`,
    /// or [`Span::Events`] on a rate (a rate's window is time).
    pub fn plan(&self) -> Result<GroupSpec> {
        let bad = |why: String, fix: &str| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("trigger `{}`", self.expr),
                why,
            )
            .with_fix(fix)
        };
        if !(0.0..1.0).contains(&self.hysteresis) {
            return Err(bad(
                format!("hysteresis {} is not a fraction in [0, 1)", self.hysteresis),
                "give e.g. 0.1 for a 10 % band",
            ));
        }
        let e = &self.expr;
        let num = e.numerator().event.clone();
        let den = e.denominator().map(|d| d.event.clone());
        // (leader, leader period, denominator is the leader's time)
        let (leader, period) =
            match (e.measure(), self.span) {
                (_, Span::Time(d)) if d.as_nanos() == 0 => {
                    return Err(bad("a window of 0 ns".into(), "give a window such as 10ms"))
                }
                (_, Span::Events(0)) => {
                    return Err(bad(
                        "a window of 0 events".into(),
                        "give a window such as 1000",
                    ))
                }
                (Measure::Rate(_), Span::Time(d)) => (
                    den.clone()
                        .unwrap_or_else(|| Event::software(Software::TaskClock)),
                    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                ),
                (Measure::Rate(_), Span::Events(_)) => return Err(bad(
                    "a rate is measured over windows of time, not of events".into(),
                    "give the window as a duration (e.g. 10ms), or divide by an event for a ratio",
                )),
                (Measure::Ratio, Span::Time(d)) => (
                    Event::software(Software::TaskClock),
                    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                ),
                (Measure::Ratio, Span::Events(n)) => {
                    (den.clone().expect("a ratio has a denominator"), n)
                }
            };
        let mut events = vec![leader];
        let mut index = |ev: Event| match events.iter().position(|e| *e == ev) {
            Some(i) => i,
            None => {
                events.push(ev);
                events.len() - 1
            }
        };
        let numerator = index(num);
        let denominator = match den {
            Some(d) => index(d),
            None => 0,
        };
        let unit_ns = match e.measure() {
            Measure::Rate(u) => u.nanos(),
            Measure::Ratio => 1.0,
        };
        // A thread's window stops counting for its process once the rest of the
        // process has run ten windows since.
        let stale_after = period.saturating_mul(10);
        Ok(GroupSpec {
            plan: Plan {
                numerator,
                denominator,
                scale: e.factor() * unit_ns,
                events: events.len(),
                stale_after,
            },
            events,
            period,
        })
    }

    /// The rule windows are judged by.
    pub fn rule(&self) -> Rule {
        Rule {
            cmp: self.expr.cmp(),
            threshold: self.expr.threshold(),
            hysteresis: self.hysteresis,
            min_duration_ns: u64::try_from(self.min_duration.as_nanos()).unwrap_or(u64::MAX),
            warm_up: self.warm_up,
        }
    }

    /// The builders of the group, leader first: the leader overflows every window and
    /// samples `READ | TID | TIME`, a wake-up per sample, and reports `FORK`/`EXIT`
    /// (`task`); members do not sample.
    /// All are on `CLOCK_MONOTONIC` (samples are stamped with it). [`Group::new`] adds `PERF_FORMAT_GROUP | ID` and
    /// the times to the read format.
    ///
    /// # Errors
    /// As [`plan`](Self::plan).
    pub fn builders(&self) -> Result<Vec<Builder>> {
        let spec = self.plan()?;
        Ok(spec
            .events
            .iter()
            .enumerate()
            .map(|(i, ev)| {
                // The kernel refuses a group whose members are on different clocks.
                let b = Counter::builder_for(ev.clone()).clockid(libc::CLOCK_MONOTONIC);
                if i == 0 {
                    let mut b = b
                        .period(spec.period)
                        .sample(SampleType::READ | SampleType::TID | SampleType::TIME)
                        .wakeup_events(1);
                    // FORK/EXIT records, so that exited threads are forgotten.
                    b.attr_mut().set_task(1);
                    b
                } else {
                    b
                }
            })
            .collect())
    }

    /// An evaluator for this trigger's group.
    ///
    /// # Errors
    /// As [`plan`](Self::plan).
    pub fn evaluator(&self) -> Result<Evaluator> {
        Ok(Evaluator::new(self.plan()?.plan, self.rule(), self.scope))
    }

    /// Opens the group on `target` (disabled, unless `enable_on_exec`), maps its ring
    /// and registers it with a poll driver.
    ///
    /// # Errors
    /// Whatever opening a member says, with cause and fix (e.g.
    /// [`ErrorKind::NoPmu`] for `cache-misses` without a hardware PMU;
    /// [`ErrorKind::Unsupported`] for `inherit` on a kernel older than 6.12, found by
    /// opening the leader again without it);
    /// ring and poll errors as [`Ring::map_inherited`] and [`Poller::register`].
    pub fn open(&self, target: Target, options: OpenOptions) -> Result<Armed> {
        self.open_all(&[target], options)
    }

    /// [`open`](Self::open) on several targets (e.g. every thread of a running
    /// process, each with `inherit` for the threads it will create), one group and
    /// ring each, judged by one evaluator: per thread, or per process with
    /// [`Scope::Process`].
    ///
    /// # Errors
    /// As [`open`](Self::open); [`ErrorKind::InvalidArgument`] for no target.
    pub fn open_all(&self, targets: &[Target], options: OpenOptions) -> Result<Armed> {
        let spec = self.plan()?;
        if targets.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("trigger `{}`", self.expr),
                "no target to open the group on",
            ));
        }
        let mut poller = Poller::new()?;
        let mut groups = Vec::new();
        let mut layout = None;
        let mut ids = Vec::new();
        for (i, &target) in targets.iter().enumerate() {
            let mut builders = self.builders()?.into_iter();
            let leader = builders
                .next()
                .expect("a group has a leader")
                .target(target)
                .inherit(options.inherit)
                .enable_on_exec(options.enable_on_exec);
            let mut group = Group::new(leader).map_err(|e| self.diagnose(e, target, options))?;
            for member in builders {
                group.add(member.inherit(options.inherit))?;
            }
            if layout.is_none() {
                layout = Some(Layout::new(group.leader().attr()).map_err(|e| {
                    Error::new(ErrorKind::Decode, "trigger sample layout", e.to_string())
                })?);
            }
            // Always through an anchor: the ring is needed for inherited counters
            // anyway, and the poll driver then owns the anchor while the group stays.
            let (anchor, ring) = Ring::map_inherited(group.leader(), options.ring)?;
            poller.register(Token(i as u64), anchor, ring)?;
            ids.push(
                group
                    .counters()
                    .iter()
                    .map(Counter::id)
                    .collect::<Result<Vec<u64>>>()?,
            );
            groups.push(group);
        }
        Ok(Armed {
            names: spec.events.iter().map(|e| e.name().to_string()).collect(),
            groups,
            poller,
            input: Input {
                layout: layout.expect("at least one target"),
                ids,
                undecoded: 0,
                rejected: 0,
                report_windows: false,
            },
            eval: Evaluator::new(spec.plan, self.rule(), self.scope),
            notifications: Vec::new(),
        })
    }
}

impl Trigger {
    /// An `EINVAL` opening an inherited leader: if the same leader opens without
    /// `inherit`, the kernel is one that refuses `inherit` with `PERF_SAMPLE_READ`
    /// (before Linux 6.12), and the error says so.
    fn diagnose(&self, e: Error, target: Target, options: OpenOptions) -> Error {
        if e.kind() != ErrorKind::InvalidArgument || !options.inherit {
            return e;
        }
        let Ok(builders) = self.builders() else {
            return e;
        };
        let plain = builders[0].clone().target(target).inherit(false).open();
        if plain.is_err() {
            return e;
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Error::new(
            ErrorKind::Unsupported,
            e.operation().to_string(),
            format!(
                "this kernel ({}) refuses `inherit` with PERF_SAMPLE_READ, which per-thread \
                 windows over a command's or process's threads need (Linux 6.12 and later \
                 accept it with PERF_SAMPLE_TID)",
                release.trim()
            ),
        )
        .with_fix("watch one thread without inheritance (perfring watch --when ... -t TID), or upgrade the kernel")
    }
}

/// What [`Armed::poll`] hands the caller.
#[derive(Debug, Clone, Copy)]
pub enum Update<'a> {
    /// A window closed (only with [`Armed::report_windows`]).
    Window(&'a Window),
    /// The condition crossed the threshold, at the end of this window.
    Crossing(&'a Crossing),
}

/// What one [`Armed::poll`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    /// Records read from the ring.
    pub records: u64,
    /// Every watched task has exited (`POLLHUP` on every ring): nothing more will come.
    pub hup: bool,
}

/// An opened trigger: its groups (one per target), their rings and poll driver, and
/// the evaluator.
#[derive(Debug)]
pub struct Armed {
    names: Vec<String>,
    groups: Vec<Group>,
    poller: Poller,
    input: Input,
    eval: Evaluator,
    notifications: Vec<Notification>,
}

/// How ring records become evaluator input.
#[derive(Debug)]
struct Input {
    layout: Layout,
    /// Each group's kernel ids, leader first: what a sample's group read must carry.
    ids: Vec<Vec<u64>>,
    undecoded: u64,
    rejected: u64,
    report_windows: bool,
}

impl Armed {
    /// Enables the groups (not needed with `enable_on_exec`).
    pub fn enable(&self) -> Result<()> {
        self.groups.iter().try_for_each(Group::enable)
    }

    /// Disables the groups.
    pub fn disable(&self) -> Result<()> {
        self.groups.iter().try_for_each(Group::disable)
    }

    /// The groups, one per target.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The events' names in group order (the order of [`Window::deltas`]).
    pub fn events(&self) -> &[String] {
        &self.names
    }

    /// The evaluator (its plan, rule, and window count).
    pub fn evaluator(&self) -> &Evaluator {
        &self.eval
    }

    /// Also hand every closed window to [`poll`](Self::poll)'s callback (this copies
    /// each window's deltas).
    pub fn report_windows(&mut self, yes: bool) {
        self.input.report_windows = yes;
        self.eval.keep_last_window(yes);
    }

    /// Samples lost, throttles and wake-ups so far, over every target.
    pub fn accounting(&self) -> Accounting {
        let mut sum = Accounting::default();
        for t in 0..self.groups.len() {
            if let Some(a) = self.poller.accounting(Token(t as u64)) {
                sum.notifications += a.notifications;
                sum.hups += a.hups;
                sum.samples += a.samples;
                sum.records += a.records;
                sum.lost += a.lost;
                sum.lost_samples += a.lost_samples;
                sum.throttled += a.throttled;
                sum.unthrottled += a.unthrottled;
            }
        }
        sum
    }

    /// Records the decoder rejected (never expected: a kernel/decoder disagreement).
    pub fn undecoded(&self) -> u64 {
        self.input.undecoded
    }

    /// Samples set aside because their group read did not carry this trigger's group
    /// (its member count and kernel ids): a record damaged in the ring. The kernel
    /// writes a ring assuming one writer per CPU, and inherited threads overflowing at
    /// the same moment on two CPUs share one; a sample set aside only lengthens that
    /// thread's next window, since counts are cumulative.
    pub fn rejected(&self) -> u64 {
        self.input.rejected
    }

    /// Waits up to `timeout` (`None`: forever) for samples, drains the ring and
    /// evaluates every sample in it, calling `f` for each crossing (and each window,
    /// with [`report_windows`](Self::report_windows)).
    ///
    /// # Errors
    /// An `epoll_wait` error.
    pub fn poll(&mut self, timeout: Option<Duration>, f: impl FnMut(Update<'_>)) -> Result<Polled> {
        let Armed {
            poller,
            input,
            eval,
            notifications,
            ..
        } = self;
        let mut f = f;
        let records = poller.poll_and_drain(notifications, timeout, |_, raw| {
            input.feed(raw.bytes(), eval, &mut f)
        })?;
        Ok(Polled {
            records,
            hup: notifications
                .iter()
                .filter(|n| n.kind == NotifyKind::Hup)
                .count()
                >= self.groups.len(),
        })
    }

    /// Drains the ring without waiting (e.g. after the target exited).
    pub fn drain(&mut self, f: impl FnMut(Update<'_>)) -> u64 {
        let Armed {
            poller,
            input,
            eval,
            ..
        } = self;
        let mut f = f;
        poller.drain_all(|_, raw| input.feed(raw.bytes(), eval, &mut f))
    }
}

impl Input {
    /// Decodes one record and, if it is a sample of one of the groups, evaluates it.
    fn feed(&mut self, bytes: &[u8], eval: &mut Evaluator, f: &mut impl FnMut(Update<'_>)) {
        let Ok(record) = Record::parse(bytes, &self.layout) else {
            self.undecoded += 1;
            return;
        };
        let s = match record.kind() {
            RecordKind::Sample(s) => s,
            RecordKind::Exit(t) => return eval.forget(t.tid),
            _ => return,
        };
        // Inherited copies report their parent's ids, so every sample of a group
        // carries exactly that group's ids, in order.
        let ours = s.read().is_some_and(|r| {
            self.ids.iter().any(|ids| {
                r.len() == ids.len() && r.iter().zip(ids).all(|(v, id)| v.id == Some(*id))
            })
        });
        if !ours || s.tid().is_none() {
            self.rejected += 1;
            return;
        }
        let before = eval.windows();
        let crossing = eval.feed_sample(s);
        if self.report_windows && eval.windows() != before {
            if let Some(w) = eval.last_window() {
                f(Update::Window(w));
            }
        }
        if let Some(c) = &crossing {
            f(Update::Crossing(c));
        }
    }
}
