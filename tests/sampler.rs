//! `perfring::sampler`: whole programs with threads created after the attach, exact
//! counts per thread from an execute breakpoint.
#![cfg(feature = "profile")]

mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use perfring::records::RecordKind;
use perfring::resolve::{resolve_event, TargetImage};
use perfring::sampler::{Delivery, Sampler, Target, TargetEnd};
use perfring::{launch, Counter, SampleType};

const THREADS: usize = 50;
const CALLS: u64 = 1000;
const PERIOD: u64 = 10;

/// What the callback saw: samples per tid, FORKs and EXITs of the tracking counter.
#[derive(Default)]
struct Seen {
    per_tid: BTreeMap<u32, u64>,
    forks: BTreeSet<u32>,
    exits: BTreeSet<u32>,
    other_events: u64,
}

impl Seen {
    fn take(&mut self, d: Delivery<'_>) {
        match (d.event, d.record.kind()) {
            (Some(0), RecordKind::Sample(s)) => {
                // The delivery's thread is the sample's own TID.
                assert_eq!(d.tid, s.tid());
                *self.per_tid.entry(s.tid().unwrap()).or_default() += 1;
                assert_eq!(d.raw.len(), d.record.size());
            }
            (None, RecordKind::Fork(t)) => {
                self.forks.insert(t.tid);
            }
            (None, RecordKind::Exit(t)) => {
                self.exits.insert(t.tid);
            }
            (Some(_), RecordKind::Sample(_)) => self.other_events += 1,
            _ => {}
        }
    }
}

fn breakpoint(image: &TargetImage) -> perfring::Builder {
    let event = resolve_event("mem:hit:x", image).expect("resolve mem:hit:x");
    Counter::builder_for(event)
        .period(PERIOD)
        .sample(SampleType::IP | SampleType::TID)
        .wakeup_events(1)
}

/// Polls until the target ended, then drains what is left.
fn run(sampler: &mut Sampler, seen: &mut Seen) -> TargetEnd {
    loop {
        sampler
            .poll(Some(Duration::from_millis(20)), |d| seen.take(d))
            .unwrap();
        if let Some(end) = sampler.target_ended().unwrap() {
            sampler.drain(|d| seen.take(d)).unwrap();
            return end;
        }
    }
}

/// Exactly CALLS/PERIOD samples for each of the program's threads, none for anyone else.
fn check(sampler: &Sampler, seen: &Seen, tid_file: &Path) {
    let tids = util::tids_in(tid_file);
    assert_eq!(tids.len(), THREADS);
    let expected: BTreeMap<u32, u64> = tids.iter().map(|&t| (t, CALLS / PERIOD)).collect();
    let total = sampler.stats();
    assert_eq!(seen.per_tid, expected, "{total:?}");
    assert_eq!(seen.other_events, 0);
    assert_eq!(total.samples, THREADS as u64 * CALLS / PERIOD, "{total:?}");
    assert_eq!((total.lost, total.lost_samples, total.undecoded), (0, 0, 0));
    for &t in &tids {
        let info = sampler
            .thread(t)
            .unwrap_or_else(|| panic!("thread {t} unknown"));
        assert_eq!(info.stats.samples, CALLS / PERIOD, "{info:?}");
        assert!(info.exited, "{info:?}");
    }
    // The tracking counter reported every thread's creation and exit.
    let all: BTreeSet<u32> = tids.iter().copied().collect();
    assert!(seen.forks.is_superset(&all), "{:?}", seen.forks);
    assert!(seen.exits.is_superset(&all), "{:?}", seen.exits);
    // The ids a perf.data writer needs.
    assert!(!sampler.events()[0].ids().is_empty());
    assert!(sampler.events()[0].attr().sample_id_all() != 0);
}

#[test]
fn command_threads_created_later_exact_per_thread() {
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let cmd = launch::Command::new(&prog).args([
        THREADS.to_string(),
        CALLS.to_string(),
        tid_file.display().to_string(),
    ]);
    let mut sampler = Sampler::builder(Target::Command(cmd))
        .event(breakpoint(&TargetImage::Spawned(prog.clone())))
        .exact_periods(true)
        .start()
        .unwrap();
    let mut seen = Seen::default();
    let end = run(&mut sampler, &mut seen);
    assert_eq!(end, TargetEnd::Exited(launch::ExitStatus::Exited(0)));
    assert_eq!(sampler.read(0).unwrap().value, THREADS as u64 * CALLS);
    check(&sampler, &seen, &tid_file);
}

#[test]
fn pid_threads_created_after_attach_exact_per_thread() {
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let mut child = Command::new(&prog)
        .args([&THREADS.to_string(), &CALLS.to_string()])
        .arg(&tid_file)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // "ready": it has exec'd, so its maps name the program.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let pid = child.id() as i32;
    // Event 1 counts the same breakpoint without sampling (what `stat -p` reads).
    let counting =
        Counter::builder_for(resolve_event("mem:hit:x", &TargetImage::Process(pid)).unwrap());
    let mut sampler = Sampler::builder(Target::Pid(pid))
        .event(breakpoint(&TargetImage::Process(pid)))
        .event(counting)
        .exact_periods(true)
        .start()
        .unwrap();
    // Attached: let it start its threads.
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    let mut seen = Seen::default();
    let end = run(&mut sampler, &mut seen);
    assert_eq!(end, TargetEnd::Gone);
    assert!(child.wait().unwrap().success());
    check(&sampler, &seen, &tid_file);
    // Every call of every thread, counted by the inherited counters.
    assert_eq!(sampler.read(1).unwrap().value, THREADS as u64 * CALLS);
    assert_eq!(sampler.read(0).unwrap().value, THREADS as u64 * CALLS);
}

static SIGNALLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Signal context: count only.
fn on_signal(_: &perfring::Notification, _: usize) {
    SIGNALLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn thread_signal_notification_then_the_caller_drains() {
    use perfring::notify::signal::Handler;
    use perfring::sampler::Notify;
    let prog = util::threads_program();
    let tid_file = util::temp_path("tids");
    let cmd = launch::Command::new(&prog)
        .args(["4", "1000"])
        .arg(&tid_file);
    let signal = perfring::ThreadSignal::builder().install().unwrap();
    let mut sampler = Sampler::builder(Target::Command(cmd))
        .event(breakpoint(&TargetImage::Spawned(prog.clone())))
        .exact_periods(true)
        .notify(Notify::Signal {
            signal,
            tid: None,
            handler: Handler::Callback(on_signal, 0),
        })
        .start()
        .unwrap();
    let mut seen = Seen::default();
    let mut handled = 0;
    loop {
        // Told by the handler: drain on this thread.
        if SIGNALLED.load(std::sync::atomic::Ordering::SeqCst) > handled {
            handled = SIGNALLED.load(std::sync::atomic::Ordering::SeqCst);
            sampler.drain(|d| seen.take(d)).unwrap();
        }
        if sampler.target_ended().unwrap().is_some() {
            sampler.drain(|d| seen.take(d)).unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let tids = util::tids_in(&tid_file);
    let expected: BTreeMap<u32, u64> = tids.iter().map(|&t| (t, CALLS / PERIOD)).collect();
    assert_eq!(seen.per_tid, expected);
    // The inheriting threads' overflows were signalled to this thread, through this
    // sampler's registrations (a wake-up is not an overflow: counts come from records).
    let n = sampler.notifications();
    assert!(n > 0, "{n}");
    assert_eq!(n, SIGNALLED.load(std::sync::atomic::Ordering::SeqCst));
}

#[test]
fn sigtrap_in_the_sampled_thread_of_this_process() {
    use perfring::notify::sigtrap::TrapHandler;
    use perfring::sampler::Notify;
    let (tid, go, worker) = util::gated_thread(|| util::call_target(CALLS));
    let event = Counter::builder_for(util::target_breakpoint())
        .period(PERIOD)
        .sample(SampleType::IP);
    let mut sampler = Sampler::builder(Target::Tid(tid as i32))
        .event(event)
        .notify(Notify::Sigtrap {
            trap: perfring::Sigtrap::install().unwrap(),
            handler: TrapHandler::Count,
        })
        .start()
        .unwrap();
    go.send(()).unwrap();
    worker.join().unwrap();
    let mut samples = 0;
    sampler
        .drain(|d| {
            if let RecordKind::Sample(s) = d.record.kind() {
                assert_eq!((d.event, d.tid), (Some(0), Some(tid)));
                assert_eq!(s.ip(), Some(util::target_addr()));
                samples += 1;
            }
        })
        .unwrap();
    // One synchronous SIGTRAP per overflow, in the overflowing thread.
    assert_eq!(samples, CALLS / PERIOD);
    assert_eq!(sampler.notifications(), CALLS / PERIOD);
    assert_eq!(sampler.thread(tid).unwrap().stats.samples, CALLS / PERIOD);
}

#[test]
fn a_group_of_two_breakpoints_each_member_identified() {
    let (tid, go, worker) = util::gated_thread(|| util::call_target(CALLS));
    let member = |period| {
        Counter::builder_for(util::target_breakpoint())
            .period(period)
            .sample(SampleType::IP)
    };
    let mut sampler = Sampler::builder(Target::Tid(tid as i32))
        .group([member(PERIOD), member(10 * PERIOD)])
        .start()
        .unwrap();
    go.send(()).unwrap();
    worker.join().unwrap();
    let mut per_event = [0u64; 2];
    sampler
        .drain(|d| {
            if let (Some(i), RecordKind::Sample(_)) = (d.event, d.record.kind()) {
                assert_eq!(d.tid, Some(tid));
                per_event[i] += 1;
            }
        })
        .unwrap();
    // Each member's overflows arrive as its own event.
    assert_eq!(per_event, [CALLS / PERIOD, CALLS / (10 * PERIOD)]);
    assert_eq!(sampler.read(0).unwrap().value, CALLS);
    assert_eq!(sampler.read(1).unwrap().value, CALLS);
}

/// `-p` on a process that has exited fails at once with "no such process", whether it is
/// a zombie not yet reaped or gone, in inherited and per-thread mode alike.
#[test]
fn a_process_that_has_exited_is_refused_at_once() {
    let start = |pid: i32, per_thread: bool| {
        let event = Counter::builder("task-clock").unwrap();
        Sampler::builder(Target::Pid(pid))
            .event(event)
            .per_thread(per_thread)
            .start()
    };
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    // Exited but not reaped: its /proc entries (and task list) are still there.
    while perfring::proc::state(pid) != Some('Z') {
        std::thread::sleep(Duration::from_millis(1));
    }
    for per_thread in [false, true] {
        let err = start(pid, per_thread).unwrap_err();
        assert_eq!(err.kind(), perfring::ErrorKind::NotFound, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("no such process") && text.contains("zombie"),
            "{text}"
        );
    }
    child.wait().unwrap();
    // Reaped: no process has the id any more.
    for per_thread in [false, true] {
        let err = start(pid, per_thread).unwrap_err();
        assert_eq!(err.kind(), perfring::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("no such process"), "{err}");
    }
}

/// With inherited counters an overflow in an inheriting thread signals twice when its
/// record also wakes the ring (`wakeup_events(1)`): once for the overflow (the child
/// event's, sent to the parent's owner) and once for the ring wake-up (on the parent,
/// which owns the output of its children); the kernel may coalesce the second. Without
/// ring wake-ups (`wakeup_events(0)`, ring far from its watermark) it is at most one.
#[test]
fn inherited_signals_one_per_overflow_plus_one_per_ring_wakeup() {
    use perfring::notify::signal::Handler;
    use perfring::sampler::Notify;
    let prog = util::threads_program();
    for wake in [true, false] {
        let tid_file = util::temp_path("tids");
        let cmd = launch::Command::new(&prog)
            .args(["4", "1000"])
            .arg(&tid_file);
        let signal = perfring::ThreadSignal::builder().install().unwrap();
        let event = breakpoint(&TargetImage::Spawned(prog.clone()));
        let event = if wake { event } else { event.wakeup_events(0) };
        let mut sampler = Sampler::builder(Target::Command(cmd))
            .event(event)
            .exact_periods(false)
            .notify(Notify::Signal {
                signal,
                tid: None,
                handler: Handler::Count,
            })
            .start()
            .unwrap();
        let mut seen = Seen::default();
        let end = run(&mut sampler, &mut seen);
        assert!(
            matches!(end, TargetEnd::Exited(s) if s.success()),
            "{end:?}"
        );
        let samples: u64 = seen.per_tid.values().sum();
        // Per-CPU inherited copies: a thread's count is split between its copies on
        // each CPU, so a thread that migrated may get up to one sample fewer per
        // CPU it did not finish on (a loaded host moves threads), never more.
        let cpus = perfring::counter::online_cpus().unwrap().len() as u64;
        let most = 4 * CALLS / PERIOD;
        assert!(
            (most - 4 * (cpus - 1)..=most).contains(&samples),
            "{samples} of {most}"
        );
        let signals = sampler.notifications();
        if wake {
            assert!(signals > samples && signals <= 2 * samples, "{signals}");
        } else {
            assert!(signals > 0 && signals <= samples, "{signals}");
        }
    }
}

/// The main thread exits (`pthread_exit`) once the sampler attached; the worker, the
/// other root, waits for that, then calls `hit` on a second gate and stays alive.
const OWNER_EXITS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((noinline)) void hit(void) { __asm__ volatile(""); }
static int calls;
static char main_state(void) {
    char buf[512];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] ? p[2] : 0;
}
static void *worker(void *arg) {
    char c;
    while (main_state() != 'Z') usleep(1000);
    if (read(0, &c, 1) != 1) return 0;
    for (int i = 0; i < calls; i++) hit();
    printf("done\n");
    fflush(stdout);
    if (read(0, &c, 1) != 1) return 0;
    exit(0);
}
int main(int argc, char **argv) {
    calls = atoi(argv[1]);
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0)) return 4;
    printf("ready\n");
    fflush(stdout);
    char c;
    if (read(0, &c, 1) != 1) return 3;
    pthread_exit(0);
}
"#;

/// Every root's per-CPU counters share one ring per CPU. When the first root (the main
/// thread, lowest tid) exits, the rings must still wake the poll driver for the other
/// roots' records: a caller polling without a timeout would otherwise wait forever.
#[test]
fn shared_cpu_rings_still_wake_the_poll_after_their_first_root_exits() {
    let prog = util::compile_c(
        "owner_exits",
        OWNER_EXITS_C,
        &["-fno-pie", "-no-pie", "-pthread"],
    );
    let mut child = Command::new(&prog)
        .arg(CALLS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut sampler = Sampler::builder(Target::Pid(pid))
        .event(breakpoint(&TargetImage::Spawned(prog.clone())))
        .start()
        .unwrap();
    assert_eq!(sampler.threads().count(), 2);
    let mut seen = Seen::default();
    // The main thread (the first root, whose counters opened the per-CPU rings) exits;
    // a poll that reports its counters' hang-up (pending once it is a zombie) takes
    // their rings off epoll, if they own them.
    stdin.write_all(b"1").unwrap();
    while perfring::proc::state(pid) != Some('Z') {
        std::thread::sleep(Duration::from_millis(1));
    }
    sampler
        .poll(Some(Duration::ZERO), |d| seen.take(d))
        .unwrap();
    // A zombie main thread does not end the process while another thread runs.
    assert_eq!(sampler.target_ended().unwrap(), None);
    let before = sampler.wakeups();
    // The worker overflows; its records go to the rings the main thread opened.
    stdin.write_all(b"2").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    // The timeout only bounds a failure: the records must wake the poll driver.
    sampler
        .poll(Some(Duration::from_secs(30)), |d| seen.take(d))
        .unwrap();
    assert!(
        sampler.wakeups() > before,
        "no wake-up after the first root exited"
    );
    // Per-CPU inherited copies: the worker's period restarts on each CPU it moved to,
    // so a migration (a loaded host) may cost it one sample per CPU, never add one.
    let cpus = perfring::counter::online_cpus().unwrap().len() as u64;
    let samples = seen.per_tid.values().sum::<u64>();
    let most = CALLS / PERIOD;
    assert!(
        (most - (cpus - 1)..=most).contains(&samples),
        "{samples} of {most}"
    );
    stdin.write_all(b"3").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(sampler.target_ended().unwrap(), Some(TargetEnd::Gone));
}
