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
//! - [`Trigger::open`] starts a [`Sampler`] with that group
//!   ([`SamplerBuilder::group`]) on a command, a process or a thread; the [`Armed`]
//!   trigger it returns feeds each of the leader's samples to the evaluator, and gives
//!   the sampler's target handling (exit status, terminate, signal) through
//!   [`Armed::sampler_mut`].
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
//! The inherited records reach the ring through an anchor
//! ([`SamplerBuilder::exact_periods`], [`Ring::map_inherited`]):
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
//! use perfring::launch::Command;
//! use perfring::sampler::Target;
//! use perfring::trigger::{Expr, OpenOptions, Trigger, Update};
//!
//! let trigger = Trigger::new(Expr::parse("page-faults > 1000/s")?)
//!     .min_duration(Duration::from_millis(20));
//! let target = Target::Command(Command::new("make").arg("-j2"));
//! let mut armed = trigger.open(target, OpenOptions::default())?;
//! let mut show = |u: Update<'_>| {
//!     if let Update::Crossing(c) = u {
//!         println!("{} at {:.0}/s (tid {})", c.edge.as_str(), c.value, c.window.tid);
//!     }
//! };
//! while !armed.poll(Some(Duration::from_millis(50)), &mut show)?.hup {}
//! armed.drain(&mut show)?; // what the last moments left in the rings
//! let status = armed.sampler_mut().terminate(Duration::from_secs(2)); // reaped already
//! println!("{} windows, exit {:?}", armed.evaluator().windows(), status.map(|s| s.code()));
//! # Ok::<(), perfring::Error>(())
//! ```

mod eval;
mod expr;

use std::time::Duration;

pub use eval::{Crossing, Edge, Evaluator, Plan, Rule, Scope, Window};
pub use expr::{Cmp, Expr, Measure, Operand, TimeUnit};

use crate::counter::{Builder, Counter, ReadFormat, SampleType};
use crate::event::{Event, Software};
use crate::records::RecordKind;
use crate::ring::RingSize;
use crate::sampler::{Delivery, Sampler, Stats, Target};
use crate::{Error, ErrorKind, Result};

#[cfg(doc)]
use crate::{counter::Group, ring::Ring, sampler::SamplerBuilder};

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

/// How [`Trigger::open`] sizes the sampler it starts.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// The size of each group member's ring (only the leader's receives samples).
    pub ring: RingSize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
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
    /// (`task`); members do not sample. All read `GROUP | ID` and the times (so each
    /// sample carries every member's count and id) and are on `CLOCK_MONOTONIC`
    /// (samples are stamped with it). Each is adapted to what this user may count
    /// (the kernel excluded where it may not be profiled, as perf does). Open them with
    /// [`SamplerBuilder::group`] (what [`open`](Self::open) does) or [`Group::new`].
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`ErrorKind::PermissionDenied`] for an event the user
    /// asked to count in the kernel and may not.
    pub fn builders(&self) -> Result<Vec<Builder>> {
        Ok(self.fitted()?.into_iter().map(|f| f.builder).collect())
    }

    /// The names of the group's events that count user space only because this user
    /// may not profile the kernel and did not ask to
    /// ([`Privileges::fit`](crate::privilege::Privileges::fit)).
    ///
    /// # Errors
    /// As [`builders`](Self::builders).
    pub fn user_only(&self) -> Result<Vec<String>> {
        Ok(self
            .fitted()?
            .into_iter()
            .filter(|f| f.user_only)
            .map(|f| f.builder.event().name().to_string())
            .collect())
    }

    /// The group's builders, adapted to what this user may count.
    fn fitted(&self) -> Result<Vec<crate::privilege::Fitted>> {
        let privileges = crate::privilege::Privileges::current();
        self.unfitted()?
            .into_iter()
            .map(|b| privileges.fit(b, false))
            .collect()
    }

    fn unfitted(&self) -> Result<Vec<Builder>> {
        let spec = self.plan()?;
        let format = ReadFormat::GROUP
            | ReadFormat::ID
            | ReadFormat::TOTAL_TIME_ENABLED
            | ReadFormat::TOTAL_TIME_RUNNING;
        Ok(spec
            .events
            .iter()
            .enumerate()
            .map(|(i, ev)| {
                // The kernel refuses a group whose members are on different clocks.
                let b = Counter::builder_for(ev.clone())
                    .clockid(libc::CLOCK_MONOTONIC)
                    .read_format(format);
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

    /// Starts a [`Sampler`] on `target` with this trigger's group
    /// ([`SamplerBuilder::group`] of [`builders`](Self::builders)) and evaluates every
    /// sample of its leader.
    ///
    /// A command ([`Target::Command`]) is started with the group attached before its
    /// `exec`; a process ([`Target::Pid`]) gets the group on every thread it has, and
    /// its threads and children created later inherit it (Linux 6.12+, see the
    /// [module docs](self#per-thread)); a thread ([`Target::Tid`]) gets one group
    /// without inheritance. Inherited groups keep one window per thread however it
    /// migrates ([`SamplerBuilder::exact_periods`]). The sampler's target handling
    /// ([`Sampler::target_ended`], [`Sampler::terminate`], [`Sampler::signal_target`])
    /// is reached through [`Armed::sampler_mut`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for [`Target::Cpus`] (a CPU-wide group mixes
    /// every task's counts, and windows are per thread); whatever
    /// [`SamplerBuilder::start`] says, with cause and fix (e.g. [`ErrorKind::NoPmu`]
    /// for `cache-misses` without a hardware PMU; [`ErrorKind::Unsupported`] for
    /// inheritance on a kernel older than 6.12, found by opening the leader again
    /// without it).
    pub fn open(&self, target: Target, options: OpenOptions) -> Result<Armed> {
        let spec = self.plan()?;
        if matches!(target, Target::Cpus(_)) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("trigger `{}`", self.expr),
                "a trigger judges threads, and a CPU-wide group mixes every task's counts",
            )
            .with_fix("watch a command, a process (-p) or a thread (-t)"));
        }
        let inherit = matches!(target, Target::Command(_) | Target::Pid(_));
        let sampler = Sampler::builder(target)
            .group(self.builders()?)
            .ring_size(options.ring)
            // One anchor ring per root: a thread's windows are one period each however
            // it migrates (per-CPU groups would give it a group per CPU).
            .exact_periods(true)
            .start()
            .map_err(|e| self.diagnose(e, inherit))?;
        let ids = (0..spec.events.len())
            .map(|i| sampler.events()[i].ids().to_vec())
            .collect();
        Ok(Armed {
            names: spec.events.iter().map(|e| e.name().to_string()).collect(),
            sampler,
            input: Input {
                ids,
                rejected: 0,
                report_windows: false,
            },
            eval: Evaluator::new(spec.plan, self.rule(), self.scope),
        })
    }

    /// An `EINVAL` starting an inherited group: if the leader opens without `inherit`,
    /// the kernel is one that refuses `inherit` with `PERF_SAMPLE_READ` (before Linux
    /// 6.12), and the error says so.
    fn diagnose(&self, e: Error, inherit: bool) -> Error {
        if e.kind() != ErrorKind::InvalidArgument || !inherit {
            return e;
        }
        let Ok(builders) = self.builders() else {
            return e;
        };
        let plain = builders[0].clone().inherit(false).open();
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
    /// Records read from the rings.
    pub records: u64,
    /// The target has ended ([`Sampler::target_ended`]): drain once more, and nothing
    /// more will come.
    pub hup: bool,
}

/// An opened trigger: the [`Sampler`] carrying its group, and the evaluator.
#[derive(Debug)]
pub struct Armed {
    names: Vec<String>,
    sampler: Sampler,
    input: Input,
    eval: Evaluator,
}

/// How deliveries become evaluator input.
#[derive(Debug)]
struct Input {
    /// Per group member, leader first, the kernel ids of its counters (one per root):
    /// what a sample's group read must carry.
    ids: Vec<Vec<u64>>,
    rejected: u64,
    report_windows: bool,
}

impl Armed {
    /// The sampler: its target ([`Sampler::target_ended`], [`Sampler::terminate`],
    /// [`Sampler::signal_target`], [`Sampler::pid`]), events and per-thread accounting.
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The sampler, to act on its target.
    pub fn sampler_mut(&mut self) -> &mut Sampler {
        &mut self.sampler
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

    /// Records, samples lost, throttles and undecoded records so far, over every
    /// ring ([`Sampler::stats`]).
    pub fn accounting(&self) -> Stats {
        self.sampler.stats()
    }

    /// Records the decoder rejected (never expected: a kernel/decoder disagreement).
    pub fn undecoded(&self) -> u64 {
        self.sampler.stats().undecoded
    }

    /// Samples set aside because their group read did not carry this trigger's group
    /// (its member count and kernel ids): a record damaged in the ring. The kernel
    /// writes a ring assuming one writer per CPU, and inherited threads overflowing at
    /// the same moment on two CPUs share one; a sample set aside only lengthens that
    /// thread's next window, since counts are cumulative.
    pub fn rejected(&self) -> u64 {
        self.input.rejected
    }

    /// Waits up to `timeout` (`None`: forever) for samples, drains the rings and
    /// evaluates every sample in them, calling `f` for each crossing (and each window,
    /// with [`report_windows`](Self::report_windows)).
    ///
    /// # Errors
    /// As [`Sampler::poll`] and [`Sampler::target_ended`].
    pub fn poll(&mut self, timeout: Option<Duration>, f: impl FnMut(Update<'_>)) -> Result<Polled> {
        let Armed {
            sampler,
            input,
            eval,
            ..
        } = self;
        let mut f = f;
        let records = sampler.poll(timeout, |d| input.feed(&d, eval, &mut f))?;
        Ok(Polled {
            records,
            hup: sampler.target_ended()?.is_some(),
        })
    }

    /// Drains the rings without waiting (e.g. after the target ended).
    ///
    /// # Errors
    /// As [`Sampler::drain`].
    pub fn drain(&mut self, f: impl FnMut(Update<'_>)) -> Result<u64> {
        let Armed {
            sampler,
            input,
            eval,
            ..
        } = self;
        let mut f = f;
        sampler.drain(|d| input.feed(&d, eval, &mut f))
    }
}

impl Input {
    /// Evaluates one delivery if it is a sample of the group's leader; forgets a
    /// thread at its `EXIT` (reported in the leader's own ring, after its samples).
    fn feed(&mut self, d: &Delivery<'_>, eval: &mut Evaluator, f: &mut impl FnMut(Update<'_>)) {
        if d.event != Some(0) {
            return;
        }
        let s = match d.record.kind() {
            RecordKind::Sample(s) => s,
            RecordKind::Exit(t) => return eval.forget(t.tid),
            _ => return,
        };
        // Every sample of the group carries, for each member, one of that member's
        // ids, in order: its thread's own counters' (threads the sampler held at their
        // birth get counters, and ids, after this trigger was opened).
        let ours = s
            .read()
            .is_some_and(|r| r.len() == self.ids.len() && r.iter().all(|v| v.id.is_some()));
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
