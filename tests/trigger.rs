//! `perfring::trigger` live: exact ratio windows from breakpoints, a page-fault rate
//! over a program's phases (windows of CPU time, so host load does not matter), and
//! what the kernel says when an event is missing.

mod util;

use std::hint::black_box;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use perfring::sampler::Target;
use perfring::trigger::{Edge, Expr, OpenOptions, Scope, Span, Trigger, Update, Window};
use perfring::ErrorKind;

#[inline(never)]
#[no_mangle]
extern "C" fn perfring_trigger_f(x: u64) -> u64 {
    black_box(x).wrapping_mul(31)
}

#[inline(never)]
#[no_mangle]
extern "C" fn perfring_trigger_g(x: u64) -> u64 {
    black_box(x).wrapping_add(17)
}

/// Calls `g` `windows * 100` times, with `k` calls of `f` before each.
fn calls(windows: u64, k: u64) -> u64 {
    let mut acc = 0;
    for i in 0..windows * 100 {
        for j in 0..k {
            acc ^= black_box(perfring_trigger_f as extern "C" fn(u64) -> u64)(i + j);
        }
        acc ^= black_box(perfring_trigger_g as extern "C" fn(u64) -> u64)(i);
    }
    acc
}

/// A crossing as the ratio tests check it: edge, window seq, deltas [g, f], value.
type Seen = (Edge, u64, Vec<u64>, f64);

/// Runs `calls` phases of `(windows, f per g)` in a fresh thread under a trigger on
/// `f/g` with windows of 100 calls of `g`; returns every crossing's
/// `(edge, window seq, deltas [g, f], value)` and the number of windows.
fn ratio_run(threshold: f64, phases: &'static [(u64, u64)]) -> (Vec<Seen>, u64) {
    let expr = Expr::parse(&format!(
        "mem:{:#x}:x / mem:{:#x}:x > {threshold}",
        perfring_trigger_f as *const () as usize, perfring_trigger_g as *const () as usize
    ))
    .unwrap();
    let trigger = Trigger::new(expr).span(Span::Events(100)).warm_up(0);
    let (tid, go, h) = util::gated_thread(|| {
        phases
            .iter()
            .fold(0, |acc, &(windows, k)| acc ^ calls(windows, k))
    });
    let mut armed = trigger
        .open(Target::Tid(tid as i32), OpenOptions::default())
        .unwrap();
    go.send(()).unwrap();
    h.join().unwrap();
    let mut got = Vec::new();
    armed
        .drain(|u| {
            if let Update::Crossing(c) = u {
                assert_eq!(c.window.tid, tid);
                got.push((c.edge, c.window.seq, c.window.deltas.clone(), c.value));
            }
        })
        .unwrap();
    assert_eq!(armed.accounting().lost, 0);
    assert_eq!((armed.undecoded(), armed.rejected()), (0, 0));
    (got, armed.evaluator().windows())
}

#[test]
fn breakpoint_ratio_crosses_exactly_where_the_program_changes_it() {
    static PHASES: [(u64, u64); 3] = [(20, 1), (20, 3), (20, 1)];
    let (got, windows) = ratio_run(2.0, &PHASES);
    assert_eq!(windows, 60, "one window per 100 calls of g");
    // The leader is g (the denominator): deltas are [g, f].
    assert_eq!(
        got,
        [
            (Edge::Up, 21, vec![100, 300], 3.0),
            (Edge::Down, 41, vec![100, 100], 1.0)
        ]
    );
}

#[test]
fn breakpoint_ratio_above_every_window_never_crosses() {
    static PHASES: [(u64, u64); 2] = [(10, 1), (10, 3)];
    // The highest ratio the program reaches is exactly 3.
    let (got, windows) = ratio_run(3.0, &PHASES);
    assert_eq!(windows, 20);
    assert!(got.is_empty(), "{got:?}");
    let (got, _) = ratio_run(2.99, &PHASES);
    assert_eq!(got.len(), 1, "{got:?}");
}

/// Quiet, touching fresh pages, quiet: see the file's header.
const PHASES_C: &str = include_str!("util/phases.c");

/// Spins of this many iterations take about 100 ms of CPU: several 10 ms windows.
const SPIN: &str = "200000000";
const PAGES: &str = "20000";

struct PhaseRun {
    crossings: Vec<(Edge, f64, Window)>,
    windows: Vec<Window>,
    fault_start: u64,
    fault_end: u64,
    /// With threads: the faulting thread's and the spinning thread's ids.
    tids: Option<(u32, u32)>,
}

fn phase_run(trigger: &Trigger, threads: bool) -> PhaseRun {
    let prog = util::compile_c("phases", PHASES_C, &["-pthread"]);
    let mut args = vec![SPIN, PAGES];
    if threads {
        args.push("threads");
    }
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Opened after the program's start-up, so its windows are its phases only; its
    // threads (created later) inherit the group.
    let pid = child.id() as i32;
    let target = if threads {
        Target::Pid(pid)
    } else {
        Target::Tid(pid)
    };
    let mut armed = trigger.open(target, OpenOptions::default()).unwrap();
    armed.report_windows(true);
    child.stdin.take().unwrap().write_all(b"x").unwrap();
    let (mut crossings, mut windows) = (Vec::new(), Vec::new());
    let mut take = |u: Update<'_>| match u {
        Update::Window(w) => windows.push(w.clone()),
        Update::Crossing(c) => crossings.push((c.edge, c.value, c.window.clone())),
    };
    loop {
        let polled = armed
            .poll(Some(Duration::from_millis(50)), &mut take)
            .unwrap();
        if polled.hup {
            break;
        }
    }
    armed.drain(&mut take).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let words: Vec<u64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(armed.accounting().lost, 0);
    PhaseRun {
        crossings,
        windows,
        fault_start: words[0],
        fault_end: words[1],
        tids: threads.then(|| (words[3] as u32, words[4] as u32)),
    }
}

#[test]
fn page_fault_rate_crosses_up_in_the_fault_phase_and_back_down_after() {
    let expr = Expr::parse("page-faults > 1000/s").unwrap();
    let trigger = Trigger::new(expr.clone());
    let run = phase_run(&trigger, false);
    let edges: Vec<Edge> = run.crossings.iter().map(|c| c.0).collect();
    let shown: Vec<String> = run
        .windows
        .iter()
        .map(|w| {
            let at = w.end_ns as i64 - run.fault_start as i64;
            format!("{:.1}ms:{:?}:{:?}", at as f64 / 1e6, w.deltas, w.value)
        })
        .collect();
    assert_eq!(
        edges,
        [Edge::Up, Edge::Down],
        "{:?}\nfault phase {} ns; windows (end relative to its start): {shown:?}",
        run.crossings,
        run.fault_end - run.fault_start
    );
    let (_, up_value, up) = &run.crossings[0];
    let (_, down_value, down) = &run.crossings[1];
    assert!(
        (run.fault_start..=run.fault_end).contains(&up.end_ns),
        "up at {} outside the fault phase {}..{}",
        up.end_ns,
        run.fault_start,
        run.fault_end
    );
    assert!(down.end_ns > run.fault_end);
    assert!(*up_value > 1000.0 && *down_value < 900.0);
    // Windows are about 10 ms of the thread's CPU time (task-clock overflows on a timer
    // tick, so a window may be a little short of its period), measured by the leader.
    let quiet_before = run
        .windows
        .iter()
        .filter(|w| w.end_ns < run.fault_start)
        .count();
    assert!(
        quiet_before >= 2,
        "{quiet_before} windows before the faults"
    );
    for w in &run.windows {
        assert!(w.deltas[0] >= 5_000_000, "{w:?}");
    }

    // A threshold far above the fastest window of this very run gives nothing.
    let peak = run
        .windows
        .iter()
        .filter_map(|w| w.value)
        .fold(0.0, f64::max);
    assert!(peak > 1000.0);
    let high = Trigger::new(expr.with_threshold(peak * 100.0));
    let run = phase_run(&high, false);
    assert!(run.crossings.is_empty(), "{:?}", run.crossings);
    assert!(run.windows.len() > 5);
}

#[test]
fn a_missing_hardware_event_fails_with_the_doctors_message() {
    let trigger = Trigger::new(Expr::parse("cache-misses/instructions > 0.01").unwrap());
    let opened = trigger.open(Target::Tid(util::gettid() as i32), OpenOptions::default());
    let has_pmu = perfring::Counter::builder("instructions")
        .unwrap()
        .open()
        .is_ok();
    match opened {
        Ok(_) => assert!(has_pmu, "opened hardware events without a PMU"),
        Err(e) => {
            assert!(!has_pmu, "{e}");
            assert_eq!(e.kind(), ErrorKind::NoPmu, "{e}");
            assert!(e.to_string().contains("Fix:"), "{e}");
        }
    }
}

#[test]
fn a_rate_with_a_window_in_events_is_refused() {
    let t = Trigger::new(Expr::parse("page-faults > 10/s").unwrap()).span(Span::Events(100));
    let e = t.plan().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("windows of time"), "{e}");
}

#[test]
fn inherited_threads_each_have_their_own_windows() {
    let trigger = Trigger::new(Expr::parse("page-faults > 1000/s").unwrap());
    let run = phase_run(&trigger, true);
    let (faulter, spinner) = run.tids.unwrap();
    let got: Vec<(Edge, u32)> = run.crossings.iter().map(|c| (c.0, c.2.tid)).collect();
    // Only the faulting thread crosses, though the other runs beside it.
    assert_eq!(got, [(Edge::Up, faulter), (Edge::Down, faulter)]);
    let up = &run.crossings[0].2;
    assert!((run.fault_start..=run.fault_end).contains(&up.end_ns));
    let spinner_windows: Vec<&Window> = run.windows.iter().filter(|w| w.tid == spinner).collect();
    assert!(
        spinner_windows.len() > 5,
        "{} windows",
        spinner_windows.len()
    );
    // Each sample carries its own thread's counts (Linux 6.12+: inherit with
    // PERF_SAMPLE_READ and PERF_SAMPLE_TID), so the spinner's windows stay quiet.
    // (The first window holds the thread's start: its stack's first faults.)
    assert!(
        spinner_windows
            .iter()
            .filter(|w| w.seq > 1)
            .all(|w| w.deltas[1] <= 2),
        "{spinner_windows:?}"
    );
}

#[test]
fn per_process_scope_sums_the_threads() {
    let trigger = Trigger::new(Expr::parse("page-faults > 1000/s").unwrap()).scope(Scope::Process);
    let run = phase_run(&trigger, true);
    let (faulter, spinner) = run.tids.unwrap();
    let edges: Vec<Edge> = run.crossings.iter().map(|c| c.0).collect();
    assert_eq!(edges, [Edge::Up, Edge::Down], "{:?}", run.crossings);
    let up = &run.crossings[0].2;
    assert!((run.fault_start..=run.fault_end).contains(&up.end_ns));
    // Process windows hold both threads' CPU time: more than one window's worth.
    let both = run
        .windows
        .iter()
        .filter(|w| w.deltas[0] > 15_000_000)
        .count();
    assert!(both > 3, "{:?}", run.windows);
    assert!(run.windows.iter().all(|w| w.pid == up.pid));
    assert!([faulter, spinner].contains(&up.tid));
}

#[test]
fn a_command_is_started_watched_and_reaped_through_the_library() {
    // What `watch --when ... -- CMD` does, with library calls only: the sampler starts
    // the command with the group attached before its exec, its child process inherits
    // it, and the command's exit status comes back through the sampler.
    let prog = util::compile_c("phases", PHASES_C, &["-pthread"]);
    let times = util::temp_path("trigger-phases");
    let script = format!(
        "echo x | {} {SPIN} {PAGES} > {}; exit 7",
        prog.display(),
        times.display()
    );
    let command = perfring::launch::Command::new("sh").arg("-c").arg(script);
    let trigger = Trigger::new(Expr::parse("page-faults > 1000/s").unwrap());
    let mut armed = trigger
        .open(Target::Command(command), OpenOptions::default())
        .unwrap();
    let shell = armed.sampler().pid().unwrap() as u32;
    let mut crossings = Vec::new();
    let mut take = |u: Update<'_>| {
        if let Update::Crossing(c) = u {
            crossings.push((c.edge, c.window.clone()));
        }
    };
    while !armed
        .poll(Some(Duration::from_millis(50)), &mut take)
        .unwrap()
        .hup
    {}
    armed.drain(&mut take).unwrap();
    let ended = armed.sampler_mut().target_ended().unwrap();
    assert!(
        matches!(ended, Some(perfring::sampler::TargetEnd::Exited(s)) if s.code() == 7),
        "{ended:?}"
    );
    let words: Vec<u64> = std::fs::read_to_string(&times)
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let _ = std::fs::remove_file(&times);
    let edges: Vec<Edge> = crossings.iter().map(|c| c.0).collect();
    assert_eq!(edges, [Edge::Up, Edge::Down], "{crossings:?}");
    let up = &crossings[0].1;
    assert!(
        (words[0]..=words[1]).contains(&up.end_ns),
        "{up:?} {words:?}"
    );
    // The faulting thread is the shell's child, which inherited the group.
    assert_ne!(up.pid, shell);
    assert_eq!(armed.accounting().lost, 0);
}
