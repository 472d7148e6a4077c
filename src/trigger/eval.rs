//! [`Evaluator`]: windows of group counts in, crossings out. Pure: no fds, no clock;
//! everything it knows comes from the samples it is fed.

use std::collections::HashMap;

use super::expr::Cmp;
use crate::records::Sample;

/// Which direction the value crossed the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// From below the threshold to above it.
    Up,
    /// From above the threshold back below it (past the hysteresis band).
    Down,
}

impl Edge {
    /// `"up"` or `"down"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Edge::Up => "up",
            Edge::Down => "down",
        }
    }
}

/// Whose windows are judged together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Each thread on its own: crossings name the thread (default).
    #[default]
    Thread,
    /// All threads of a process together: at each sample, the process's window is the
    /// sum of every thread's latest window (unless it is stale, see
    /// [`Plan::stale_after`]), so a busy thread and an idle one give their combined
    /// rate rather than taking turns. Crossings name the thread whose sample completed
    /// them.
    Process,
}

/// How a window's value is computed from the group's per-window deltas.
///
/// Built by [`Trigger::plan`](super::Trigger::plan); public so that values can be
/// computed for synthetic counts in tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Index (in group order, leader first) of the event on top.
    pub numerator: usize,
    /// Index of the event divided by.
    pub denominator: usize,
    /// Multiplies `Δnumerator / Δdenominator`: the expression's factor, times the
    /// unit's nanoseconds when the denominator is a clock (nanoseconds → per unit).
    pub scale: f64,
    /// How many events the group has.
    pub events: usize,
    /// With [`Scope::Process`], how much the leader's count (CPU time, or events of
    /// the denominator) may grow in the rest of the process after a thread's latest
    /// window before that window stops counting: a thread that has since blocked or
    /// exited stops weighing on the process. Measured in the leader's units, not wall
    /// time, so a busy machine that delays samples does not expire windows.
    pub stale_after: u64,
}

impl Plan {
    /// The value of a window with these deltas; `None` when the denominator did not move.
    pub fn value(&self, deltas: &[u64]) -> Option<f64> {
        let num = *deltas.get(self.numerator)?;
        let den = *deltas.get(self.denominator)?;
        (den > 0).then(|| num as f64 / den as f64 * self.scale)
    }
}

/// What the evaluator compares and how eagerly it fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// `>` or `<`.
    pub cmp: Cmp,
    /// The threshold, in the expression's unit.
    pub threshold: f64,
    /// The band, as a fraction of the threshold, the value must move back past before
    /// the condition counts as ended: with `>` and 0.1, up above `T` and down below
    /// `0.9 T`; with `<`, down below `T` and up above `1.1 T`.
    pub hysteresis: f64,
    /// How long (nanoseconds on the samples' clock) the condition must hold, or have
    /// ended, before the crossing is reported: from the start of the first window
    /// that qualifies to the end of the one that completes the span.
    pub min_duration_ns: u64,
    /// Windows of each thread (or process) used as a baseline before any is judged.
    /// The first window starts when counting does — for a command, at its `exec`,
    /// where the loader's page faults and cold caches make it unlike what follows.
    pub warm_up: u32,
}

/// One window: the deltas of every event of the group, and the value they give.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Process id from the sample that closed the window.
    pub pid: u32,
    /// Thread id from the sample that closed the window.
    pub tid: u32,
    /// The window's number for its thread (or process), from 1.
    pub seq: u64,
    /// When the window started (the previous sample's time); `None` for the first.
    pub start_ns: Option<u64>,
    /// When the window ended: the time of the sample that closed it.
    pub end_ns: u64,
    /// Each event's count during the window, in group order (leader first).
    pub deltas: Vec<u64>,
    /// The expression's value over the window; `None` if its denominator did not move.
    pub value: Option<f64>,
}

/// A threshold crossing: the edge, and the window that completed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    /// Up or down.
    pub edge: Edge,
    /// Whether the condition (`>`/`<` the threshold) now holds.
    pub active: bool,
    /// The window's value.
    pub value: f64,
    /// The threshold it crossed.
    pub threshold: f64,
    /// The window that completed the crossing.
    pub window: Window,
}

#[derive(Debug, Default)]
struct Key {
    /// Last cumulative counts seen (per thread, for deltas).
    last: Vec<u64>,
    last_time: Option<u64>,
}

/// A thread's latest window, as its process's window sums it.
#[derive(Debug)]
struct Latest {
    tid: u32,
    start_ns: Option<u64>,
    /// The process's leader count when it ended (for staleness).
    clock: u64,
    deltas: Vec<u64>,
}

#[derive(Debug, Default)]
struct Judge {
    seq: u64,
    active: bool,
    /// Since when (window start) the opposite state has been qualifying.
    pending_since: Option<u64>,
    /// Process scope: each thread's latest window.
    latest: Vec<Latest>,
    /// Process scope: the leader's count over all threads.
    clock: u64,
    /// Process scope: the sum of the live ones.
    sum: Vec<u64>,
}

/// Turns successive group reads (cumulative counts, per thread) into windows, and
/// windows into [`Crossing`]s: up when the condition starts to hold, down when it ends.
///
/// Pure and deterministic: feed it `(pid, tid, time, counts)` in sample order (or
/// whole samples with [`feed_sample`](Self::feed_sample)).
///
/// # Examples
/// ```
/// use perfring::trigger::{Cmp, Edge, Evaluator, Plan, Rule, Scope};
/// // Group: [task-clock (ns), page-faults]; rate per second.
/// let plan = Plan { numerator: 1, denominator: 0, scale: 1e9, events: 2, stale_after: 0 };
/// let rule = Rule { cmp: Cmp::Above, threshold: 1000.0, hysteresis: 0.1, min_duration_ns: 0, warm_up: 0 };
/// let mut ev = Evaluator::new(plan, rule, Scope::Thread);
/// let ms = 1_000_000;
/// assert!(ev.feed(1, 1, 10 * ms, &[10 * ms, 0]).is_none()); // 0/s
/// let up = ev.feed(1, 1, 20 * ms, &[20 * ms, 50]).unwrap(); // 50 in 10 ms: 5000/s
/// assert_eq!((up.edge, up.value, up.window.deltas.clone()), (Edge::Up, 5000.0, vec![10 * ms, 50]));
/// assert!(ev.feed(1, 1, 30 * ms, &[30 * ms, 59]).is_none()); // 900/s: inside the band
/// assert_eq!(ev.feed(1, 1, 40 * ms, &[40 * ms, 59]).unwrap().edge, Edge::Down);
/// ```
#[derive(Debug)]
pub struct Evaluator {
    plan: Plan,
    rule: Rule,
    scope: Scope,
    keys: HashMap<u32, Key>,
    judges: HashMap<u32, Judge>,
    scratch: Vec<u64>,
    windows: u64,
    last_window: Option<Window>,
    keep_last: bool,
}

impl Evaluator {
    /// An evaluator computing values with `plan` and judging them with `rule`.
    pub fn new(plan: Plan, rule: Rule, scope: Scope) -> Evaluator {
        Evaluator {
            scratch: vec![0; plan.events],
            plan,
            rule,
            scope,
            keys: HashMap::new(),
            judges: HashMap::new(),
            windows: 0,
            last_window: None,
            keep_last: false,
        }
    }

    /// The plan values are computed with.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The rule windows are judged by.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// Windows closed so far (all threads).
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Keep a copy of every closed window for [`last_window`](Self::last_window)
    /// (off by default: it allocates per window).
    pub fn keep_last_window(&mut self, yes: bool) {
        self.keep_last = yes;
    }

    /// The last closed window, with [`keep_last_window`](Self::keep_last_window).
    pub fn last_window(&self) -> Option<&Window> {
        self.last_window.as_ref()
    }

    /// The threads (or processes, with [`Scope::Process`]) for which the condition
    /// holds now — crossed up (`>`) or down (`<`) and not back — in increasing order:
    /// at the end of a run, those that ended while it held.
    pub fn active(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .judges
            .iter()
            .filter(|(_, j)| j.active)
            .map(|(k, _)| *k)
            .collect();
        v.sort_unstable();
        v
    }

    /// Forgets a thread that has exited (its `EXIT` record): its counts are dropped,
    /// and so is its state unless the condition held when it ended (then
    /// [`active`](Self::active) still names it). With [`Scope::Process`], its latest
    /// window stops counting for its process.
    pub fn forget(&mut self, tid: u32) {
        self.keys.remove(&tid);
        match self.scope {
            Scope::Thread => {
                if self.judges.get(&tid).is_some_and(|j| !j.active) {
                    self.judges.remove(&tid);
                }
            }
            Scope::Process => {
                for j in self.judges.values_mut() {
                    j.latest.retain(|l| l.tid != tid);
                }
            }
        }
    }

    /// Feeds one sample of the group leader (with `PERF_SAMPLE_READ` of a
    /// `PERF_FORMAT_GROUP`, `TID` and `TIME`); `None` if it has no group read, or
    /// crossed nothing.
    pub fn feed_sample(&mut self, sample: &Sample<'_>) -> Option<Crossing> {
        let read = sample.read()?;
        let n = self.plan.events;
        if read.len() < n {
            return None;
        }
        let mut counts = std::mem::take(&mut self.scratch);
        counts.clear();
        counts.extend(read.iter().take(n).map(|v| v.value));
        let pid = sample.pid().unwrap_or(0);
        let tid = sample.tid().unwrap_or(0);
        let out = self.feed(pid, tid, sample.time().unwrap_or(0), &counts);
        self.scratch = counts;
        out
    }

    /// Feeds one read of the group: the cumulative `counts` (group order) of thread
    /// `tid` of process `pid` at `time_ns`. Returns the crossing it completes, if any.
    ///
    /// Counts that go backwards (a counter reset) start the thread afresh.
    pub fn feed(&mut self, pid: u32, tid: u32, time_ns: u64, counts: &[u64]) -> Option<Crossing> {
        let n = self.plan.events;
        if counts.len() < n {
            return None;
        }
        let key = self.keys.entry(tid).or_default();
        if key.last.len() != n || key.last.iter().zip(counts).any(|(a, b)| b < a) {
            key.last = vec![0; n];
            key.last_time = None;
        }
        let mut deltas = [0u64; 8];
        let mut big = Vec::new();
        let deltas: &mut [u64] = if n <= deltas.len() {
            &mut deltas[..n]
        } else {
            big.resize(n, 0);
            &mut big
        };
        for ((d, c), l) in deltas.iter_mut().zip(counts).zip(&mut key.last) {
            *d = c - *l;
            *l = *c;
        }
        let start = key.last_time.replace(time_ns);
        let judge_key = match self.scope {
            Scope::Thread => tid,
            Scope::Process => pid,
        };
        let judge = self.judges.entry(judge_key).or_default();
        let w = Closed {
            pid,
            tid,
            start_ns: start,
            end_ns: time_ns,
        };
        let keep = self.keep_last.then_some(&mut self.last_window);
        if self.scope == Scope::Thread {
            return decide(
                &self.plan,
                &self.rule,
                judge,
                w,
                deltas,
                &mut self.windows,
                keep,
            );
        }
        // The process's window: every thread's latest one, this one included.
        judge.clock = judge.clock.saturating_add(deltas[0]);
        let clock = judge.clock;
        match judge.latest.iter_mut().find(|l| l.tid == tid) {
            Some(l) => {
                (l.start_ns, l.clock) = (start, clock);
                l.deltas.copy_from_slice(deltas);
            }
            None => judge.latest.push(Latest {
                tid,
                start_ns: start,
                clock,
                deltas: deltas.to_vec(),
            }),
        }
        let stale = self.plan.stale_after;
        judge.latest.retain(|l| clock - l.clock <= stale);
        let mut sum = std::mem::take(&mut judge.sum);
        sum.clear();
        sum.resize(n, 0);
        let mut first = start;
        for l in &judge.latest {
            for (a, b) in sum.iter_mut().zip(&l.deltas) {
                *a += b;
            }
            first = match (first, l.start_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let out = decide(
            &self.plan,
            &self.rule,
            judge,
            Closed {
                start_ns: first,
                ..w
            },
            &sum,
            &mut self.windows,
            keep,
        );
        judge.sum = sum;
        out
    }
}

/// Where and when a window closed.
#[derive(Debug, Clone, Copy)]
struct Closed {
    pid: u32,
    tid: u32,
    start_ns: Option<u64>,
    end_ns: u64,
}

/// Judges one closed window: its value against the rule, given the judge's state.
fn decide(
    plan: &Plan,
    rule: &Rule,
    judge: &mut Judge,
    at: Closed,
    deltas: &[u64],
    windows: &mut u64,
    keep: Option<&mut Option<Window>>,
) -> Option<Crossing> {
    judge.seq += 1;
    *windows += 1;
    let value = plan.value(deltas);
    let window = |seq| Window {
        pid: at.pid,
        tid: at.tid,
        seq,
        start_ns: at.start_ns,
        end_ns: at.end_ns,
        deltas: deltas.to_vec(),
        value,
    };
    if let Some(keep) = keep {
        *keep = Some(window(judge.seq));
    }
    if judge.seq <= u64::from(rule.warm_up) {
        return None;
    }
    let v = value?;
    let holds = match rule.cmp {
        Cmp::Above => v > rule.threshold,
        Cmp::Below => v < rule.threshold,
    };
    let released = match rule.cmp {
        Cmp::Above => v < rule.threshold * (1.0 - rule.hysteresis),
        Cmp::Below => v > rule.threshold * (1.0 + rule.hysteresis),
    };
    let flips = if judge.active { released } else { holds };
    if !flips {
        judge.pending_since = None;
        return None;
    }
    let since = *judge
        .pending_since
        .get_or_insert(at.start_ns.unwrap_or(at.end_ns));
    if at.end_ns.saturating_sub(since) < rule.min_duration_ns {
        return None;
    }
    judge.pending_since = None;
    judge.active = !judge.active;
    let edge = match (rule.cmp, judge.active) {
        (Cmp::Above, true) | (Cmp::Below, false) => Edge::Up,
        (Cmp::Above, false) | (Cmp::Below, true) => Edge::Down,
    };
    Some(Crossing {
        edge,
        active: judge.active,
        value: v,
        threshold: rule.threshold,
        window: window(judge.seq),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn rate_plan() -> Plan {
        // [task-clock ns, page-faults], per second.
        Plan {
            numerator: 1,
            denominator: 0,
            scale: 1e9,
            events: 2,
            stale_after: 0,
        }
    }

    fn rule(cmp: Cmp, threshold: f64) -> Rule {
        Rule {
            cmp,
            threshold,
            hysteresis: 0.0,
            min_duration_ns: 0,
            warm_up: 0,
        }
    }

    /// Feeds one thread windows of 10 ms with the given fault counts; returns
    /// `(window seq, edge)` of every crossing.
    fn run(ev: &mut Evaluator, tid: u32, faults_per_window: &[u64]) -> Vec<(u64, Edge)> {
        let mut total = 0;
        let mut out = Vec::new();
        for (i, f) in faults_per_window.iter().enumerate() {
            total += f;
            let t = (i as u64 + 1) * 10 * MS;
            if let Some(c) = ev.feed(1, tid, t, &[t, total]) {
                out.push((c.window.seq, c.edge));
            }
        }
        out
    }

    #[test]
    fn one_up_one_down_per_excursion() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        // 10 faults in 10 ms = 1000/s is not above 1000/s.
        let got = run(&mut ev, 7, &[0, 0, 10, 11, 50, 50, 3, 0, 20, 0]);
        assert_eq!(
            got,
            [
                (4, Edge::Up),
                (7, Edge::Down),
                (9, Edge::Up),
                (10, Edge::Down)
            ]
        );
    }

    #[test]
    fn crossing_carries_the_window() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        ev.feed(3, 4, 10 * MS, &[10 * MS, 0]);
        let c = ev.feed(3, 4, 30 * MS, &[30 * MS, 100]).unwrap();
        assert_eq!(
            c,
            Crossing {
                edge: Edge::Up,
                active: true,
                value: 5000.0,
                threshold: 1000.0,
                window: Window {
                    pid: 3,
                    tid: 4,
                    seq: 2,
                    start_ns: Some(10 * MS),
                    end_ns: 30 * MS,
                    deltas: vec![20 * MS, 100],
                    value: Some(5000.0),
                },
            }
        );
    }

    #[test]
    fn hysteresis_band_holds_the_state() {
        let mut r = rule(Cmp::Above, 1000.0);
        r.hysteresis = 0.5;
        let mut ev = Evaluator::new(rate_plan(), r, Scope::Thread);
        // Up at 20 faults (2000/s); 6 and 9 (600/s, 900/s) are inside the band [500, 1000].
        let got = run(&mut ev, 1, &[20, 6, 9, 6, 4, 20]);
        assert_eq!(got, [(1, Edge::Up), (5, Edge::Down), (6, Edge::Up)]);
        assert_eq!(ev.active(), [1]);
        // Without hysteresis every dip is a crossing.
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        assert_eq!(
            run(&mut ev, 1, &[20, 6, 9, 6, 4, 20]),
            [(1, Edge::Up), (2, Edge::Down), (6, Edge::Up)]
        );
    }

    #[test]
    fn min_duration_filters_short_bursts() {
        let mut r = rule(Cmp::Above, 1000.0);
        r.min_duration_ns = 25 * MS;
        let mut ev = Evaluator::new(rate_plan(), r, Scope::Thread);
        // A 20 ms burst (windows 2-3) is too short; a 30 ms one (5-7) fires at its
        // third window (25 ms after the start of the first: 40 ms .. 70 ms); its end
        // fires once 30 ms below have passed.
        let got = run(&mut ev, 1, &[0, 50, 50, 0, 50, 50, 50, 0, 0, 0, 0]);
        assert_eq!(got, [(7, Edge::Up), (10, Edge::Down)]);
    }

    #[test]
    fn below_fires_down_then_up() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Below, 1000.0), Scope::Thread);
        let got = run(&mut ev, 1, &[50, 5, 5, 50]);
        assert_eq!(got, [(2, Edge::Down), (4, Edge::Up)]);
    }

    #[test]
    fn warm_up_windows_are_not_judged() {
        let mut r = rule(Cmp::Above, 1000.0);
        r.warm_up = 1;
        let mut ev = Evaluator::new(rate_plan(), r, Scope::Thread);
        // The first window (exec, loader faults) is a baseline only.
        assert_eq!(
            run(&mut ev, 1, &[500, 0, 0, 40, 0]),
            [(4, Edge::Up), (5, Edge::Down)]
        );
    }

    #[test]
    fn threads_are_judged_apart() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        // Thread 1 faults, thread 2 does not: only 1 crosses, and 2's quiet windows
        // do not bring 1 down.
        let mut got = Vec::new();
        for (t, (a, b)) in [(0, 0), (50, 0), (100, 0), (100, 0)].iter().enumerate() {
            let t = (t as u64 + 1) * 10 * MS;
            for (tid, faults) in [(1, *a), (2, *b)] {
                if let Some(c) = ev.feed(1, tid, t, &[t, faults]) {
                    got.push((c.window.tid, c.window.seq, c.edge));
                }
            }
        }
        assert_eq!(got, [(1, 2, Edge::Up), (1, 4, Edge::Down)]);
    }

    #[test]
    fn process_scope_sums_the_threads_latest_windows() {
        let mut plan = rate_plan();
        plan.stale_after = 30 * MS;
        let mut ev = Evaluator::new(plan, rule(Cmp::Above, 1000.0), Scope::Process);
        // Two threads, 10 ms windows: 8 faults each is 16 in 20 ms = 800/s; once thread
        // 1 has 30 the process is at 38 in 20 ms = 1900/s. Thread 2 alone (800/s) would
        // never cross.
        let mut got = Vec::new();
        let (mut f1, mut f2) = (0, 0);
        for (i, (a, b)) in [(8, 8), (8, 8), (30, 8), (30, 8)].iter().enumerate() {
            let t = (i as u64 + 1) * 10 * MS;
            f1 += a;
            f2 += b;
            for c in [ev.feed(9, 1, t, &[t, f1]), ev.feed(9, 2, t + 1, &[t, f2])]
                .into_iter()
                .flatten()
            {
                let w = c.window;
                got.push((
                    w.tid, w.seq, w.start_ns, w.end_ns, c.edge, c.value, w.deltas,
                ));
            }
        }
        assert_eq!(
            got,
            [(
                1,
                5,
                Some(10 * MS + 1),
                30 * MS,
                Edge::Up,
                1900.0,
                vec![20 * MS, 38]
            )]
        );
        // Thread 1 blocks and thread 2 stops faulting: thread 1's last window (1500/s
        // with thread 2's) holds the process up until it is stale: once thread 2 has
        // run more than 30 ms of CPU since it (its fourth window after).
        let mut edges = Vec::new();
        for i in 5..10u64 {
            let t = i * 10 * MS;
            if let Some(c) = ev.feed(9, 2, t, &[t, f2]) {
                edges.push((c.edge, c.window.end_ns / MS, c.window.deltas));
            }
        }
        assert_eq!(edges, [(Edge::Down, 70, vec![10 * MS, 0])]);
    }

    #[test]
    fn a_still_denominator_gives_no_value() {
        let plan = Plan {
            numerator: 1,
            denominator: 0,
            scale: 1.0,
            events: 2,
            stale_after: 0,
        };
        assert_eq!(plan.value(&[0, 5]), None);
        assert_eq!(plan.value(&[4, 2]), Some(0.5));
        let mut ev = Evaluator::new(plan, rule(Cmp::Above, 0.1), Scope::Thread);
        assert!(ev.feed(1, 1, 1, &[0, 5]).is_none());
        assert_eq!(ev.feed(1, 1, 2, &[4, 6]).unwrap().value, 0.25);
    }

    #[test]
    fn a_reset_restarts_the_thread() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        ev.feed(1, 1, 10 * MS, &[10 * MS, 1000]);
        // Counts went back (reset): deltas from zero, not a huge wrap.
        let c = ev.feed(1, 1, 20 * MS, &[5 * MS, 0]).unwrap();
        assert_eq!(
            (c.edge, c.value, c.window.deltas),
            (Edge::Down, 0.0, vec![5 * MS, 0])
        );
        ev.keep_last_window(true);
        ev.feed(1, 1, 30 * MS, &[15 * MS, 100]);
        assert_eq!(ev.last_window().unwrap().deltas, [10 * MS, 100]);
    }

    #[test]
    fn exited_threads_are_forgotten_unless_they_ended_above() {
        let mut ev = Evaluator::new(rate_plan(), rule(Cmp::Above, 1000.0), Scope::Thread);
        run(&mut ev, 1, &[0, 50]); // thread 1 ends above
        run(&mut ev, 2, &[50, 0]); // thread 2 went up and came back down
        assert_eq!(ev.active(), [1]);
        ev.forget(1);
        ev.forget(2);
        assert_eq!(ev.active(), [1], "still named: it ended while above");
        assert_eq!((ev.keys.len(), ev.judges.len()), (0, 1));
        // A new thread reusing id 2 starts afresh (counts from zero).
        assert_eq!(run(&mut ev, 2, &[50]), [(1, Edge::Up)]);
    }
}
