//! Faults, each with its exact outcome: a ring too small for the rate (every overflow is
//! read or counted lost, nothing hangs), the target killed while its ring is drained,
//! signals interrupting every blocking call (`EINTR`), and stdout closed mid-watch.
//!
//! Exact counts come from breakpoints with period 1: the kernel counts every hit in the
//! counter's value, and never throttles a software-driven overflow that comes alone, so
//! `samples read + samples lost (PERF_FORMAT_LOST) == hits` whatever the machine's load.
// Some tests need the profile layer (symbols, the CLI); their imports go unused without it.
#![cfg_attr(not(feature = "profile"), allow(unused_imports))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod util;

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfring::launch::{Command, ExitStatus};
use perfring::notify::{NotifyKind, Poller, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{sys, Counter, Event, ReadFormat, SampleType, Scope};
use util::*;

/// Sample records a page holds with IP | TID (8 header + 8 + 8 bytes).
fn per_page() -> u64 {
    perfring::ring::page_size() as u64 / 24
}

fn kernel_max_rate() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A one-page ring under a breakpoint that overflows on every call, far faster than the
/// reader: every one of the calls is either a SAMPLE read or counted lost, the LOST
/// records the ring carries never exceed the kernel's own lost count (the last run's
/// is owed until a next record fits), and the poll driver,
/// blocking in between, is woken (by the kernel's half-ring watermark) rather than hung.
#[test]
fn one_page_ring_under_a_breakpoint_storm_accounts_every_overflow() {
    const N: u64 = 200_000;
    let (burst_tx, burst_rx) = std::sync::mpsc::channel();
    let (tid, go, worker) = gated_thread(move || {
        // First a burst no reader can keep up with (the ring holds a page of samples),
        // then the rest while the main thread drains.
        call_target(10_000);
        burst_tx.send(()).unwrap();
        call_target(N - 10_000);
    });
    let counter = Counter::builder_for(target_breakpoint())
        .target(Scope::Thread(tid as i32))
        .period(1)
        .sample(SampleType::IP | SampleType::TID)
        .read_format(ReadFormat::LOST)
        // More than a page holds: only the watermark can wake the reader.
        .wakeup_events(1000)
        .enabled(true)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    assert_eq!(ring.data_size(), perfring::ring::page_size());
    let mut poller = Poller::new().unwrap();
    poller.register(Token(0), counter, ring).unwrap();
    go.send(()).unwrap();
    burst_rx.recv().unwrap();
    let mut events = Vec::new();
    let mut samples = 0u64;
    let mut hup = false;
    while !hup {
        poller
            .poll_and_drain(&mut events, Some(Duration::from_millis(100)), |_, r| {
                samples += u64::from(r.kind() == sys::PERF_RECORD_SAMPLE)
            })
            .unwrap();
        // The thread's exit hangs the fd up: everything it wrote is in the ring.
        hup = events.iter().any(|e| e.kind == NotifyKind::Hup);
    }
    worker.join().unwrap();
    poller.drain_all(|_, r| samples += u64::from(r.kind() == sys::PERF_RECORD_SAMPLE));
    let c = poller.counter(Token(0)).unwrap().read().unwrap();
    let a = poller.accounting(Token(0)).unwrap();
    let lost = c.lost.expect("PERF_FORMAT_LOST (Linux 6.0)");
    eprintln!("{N} calls: {samples} samples, {lost} lost ({a:?})");
    assert_eq!(c.value, N, "a breakpoint counts every hit");
    assert_eq!(a.samples, samples);
    assert_eq!(samples + lost, N, "every overflow is read or counted lost");
    assert!(
        lost >= 10_000 - per_page(),
        "the first burst overflowed the ring"
    );
    // The kernel writes the LOST record for a run of losses with the next record that
    // fits; the thread has exited, so that is still owed for the last run, if any.
    assert!(a.lost <= lost && a.lost > 0, "{a:?}");
    assert_eq!(a.lost_samples, 0);
}

/// cpu-clock at the kernel's maximum rate into a one-page ring, drained by the sampled
/// thread itself between bursts that overflow it: the LOST records sum exactly to the
/// kernel's lost count once a record after the last loss has been written.
#[test]
fn one_page_ring_at_the_max_sample_rate_counts_its_loss_exactly() {
    let counter = Counter::builder("cpu-clock")
        .unwrap()
        .period(1_000_000_000 / kernel_max_rate())
        .sample(SampleType::IP | SampleType::TID)
        .read_format(ReadFormat::LOST)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(0), counter, ring).unwrap();
    poller.counter(Token(0)).unwrap().enable().unwrap();
    let mut events = Vec::new();
    for _ in 0..10 {
        // 20 ms of this thread's CPU time is 2000 periods (however busy the machine):
        // even if the hrtimer skips half, the page (a page of samples) overflows.
        spin_cpu(Duration::from_millis(20));
        poller
            .poll_and_drain(&mut events, Some(Duration::ZERO), |_, _| {})
            .unwrap();
    }
    // Flush: the kernel emits the owed LOST record in front of the next sample. Run in
    // slices far shorter than a page's worth of samples until one is there.
    let mut flushed = false;
    for _ in 0..100_000 {
        spin_us(50);
        if !poller.ring_mut(Token(0)).unwrap().is_empty() {
            flushed = true;
            break;
        }
    }
    poller.counter(Token(0)).unwrap().disable().unwrap();
    poller.drain_all(|_, _| {});
    assert!(flushed, "no sample in 5 s of CPU time");
    let lost = poller
        .counter(Token(0))
        .unwrap()
        .read()
        .unwrap()
        .lost
        .unwrap();
    let a = poller.accounting(Token(0)).unwrap();
    eprintln!("max rate into 1 page: kernel lost {lost}, ring {a:?}");
    assert!(lost > 0, "a page cannot hold 20 ms at the max rate");
    assert_eq!(a.lost, lost, "every loss reported in a LOST record");
    assert!(a.samples > 0);
}

/// This thread's CPU time.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy-waits until this thread has used `d` more CPU time.
fn spin_cpu(d: Duration) {
    let end = thread_cpu_time() + d;
    while thread_cpu_time() < end {
        for i in 0..1000u64 {
            std::hint::black_box(i);
        }
    }
}

/// Busy-waits about `us` microseconds of wall time.
fn spin_us(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

#[cfg(feature = "profile")]
/// The watched command is SIGKILLed from inside the drain callback: the drain goes on,
/// epoll reports the hang-up, the child is reaped as killed, and every breakpoint hit it
/// made before dying is a sample read or counted lost.
#[test]
fn target_sigkilled_while_its_ring_is_drained() {
    let prog = c_program(false);
    let target = perfring::elf::ElfFile::load(&prog)
        .unwrap()
        .require("target")
        .unwrap()
        .addr;
    // `target()` 2e9 times: it runs until killed.
    let stopped = Command::new(&prog)
        .arg("2000000000")
        .spawn_stopped()
        .unwrap();
    let pid = stopped.pid();
    let counter = Counter::builder_for(Event::breakpoint(
        perfring::event::Access::Execute,
        target,
        8,
    ))
    .target(Scope::Thread(pid))
    .period(1)
    .sample(SampleType::IP | SampleType::TID)
    .read_format(ReadFormat::LOST)
    .wakeup_events(64)
    .enable_on_exec(true)
    .open()
    .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(8)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(0), counter, ring).unwrap();
    let mut child = stopped.start().unwrap();
    let mut events = Vec::new();
    let (mut samples, mut killed_at) = (0u64, None);
    let mut hup = false;
    while !hup {
        poller
            .poll_and_drain(&mut events, Some(Duration::from_millis(50)), |_, r| {
                if r.kind() == sys::PERF_RECORD_SAMPLE {
                    samples += 1;
                    if samples == 20_000 {
                        killed_at = Some(samples);
                        perfring::process::signal_process(pid, perfring::Signal::SIGKILL).unwrap();
                    }
                }
            })
            .unwrap();
        hup = events.iter().any(|e| e.kind == NotifyKind::Hup);
    }
    poller.drain_all(|_, r| samples += u64::from(r.kind() == sys::PERF_RECORD_SAMPLE));
    assert_eq!(killed_at, Some(20_000), "killed inside the drain");
    assert_eq!(
        child.wait().unwrap(),
        ExitStatus::Signaled(perfring::Signal::SIGKILL)
    );
    assert!(poller.ring_mut(Token(0)).unwrap().is_empty());
    // Polling a dead target's counter goes on reporting the hang-up, without error.
    poller.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert_eq!(
        events.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [NotifyKind::Hup]
    );
    let c = poller.counter(Token(0)).unwrap().read().unwrap();
    let lost = c.lost.unwrap();
    eprintln!(
        "killed after {} hits: {samples} samples, {lost} lost",
        c.value
    );
    assert!(c.value >= 20_000);
    assert_eq!(
        samples + lost,
        c.value,
        "every hit before death accounted for"
    );
    assert_eq!(poller.accounting(Token(0)).unwrap().samples, samples);
}

// ---- EINTR: a handler installed without SA_RESTART, and a thread that keeps signalling.

static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_interrupt(_: libc::c_int) {
    // Async-signal-safe: one atomic add.
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the SIGUSR2 handler *without* `SA_RESTART`, so that every blocking system
/// call it interrupts fails with `EINTR` (epoll_wait and poll do whatever the flags).
fn install_interrupt_handler() {
    // SAFETY: an all-zero sigaction is valid (empty mask, no flags).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = count_interrupt as extern "C" fn(libc::c_int) as usize;
    act.sa_flags = 0;
    // SAFETY: `act` is a valid sigaction whose handler is async-signal-safe and lives
    // for the whole program; a null old action is allowed.
    let r = unsafe { libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Runs `f` on this thread while another thread sends it SIGUSR2 every `every` (a tight
/// loop for zero) until `f` returns; returns `f`'s result and how many signals were
/// handled meanwhile on any thread.
fn under_signal_storm<T>(every: Duration, f: impl FnOnce() -> T) -> (T, u64) {
    install_interrupt_handler();
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let before = INTERRUPTS.load(Ordering::Relaxed);
    // The pthread_t is sent as an integer: the storm ends (joined below) before `f`'s
    // thread can exit, so it always names a live thread.
    let me_bits = me as usize;
    let storm = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            // SAFETY: the target thread is alive until this loop stops (see above).
            unsafe { libc::pthread_kill(me_bits as libc::pthread_t, libc::SIGUSR2) };
            if every.is_zero() {
                std::thread::yield_now();
            } else {
                std::thread::sleep(every);
            }
        }
    });
    // Start `f` only once the storm is under way (a busy machine may not schedule the
    // storm thread before a short `f` is over).
    let deadline = Instant::now() + Duration::from_secs(30);
    while INTERRUPTS.load(Ordering::Relaxed) == before && Instant::now() < deadline {
        std::thread::yield_now();
    }
    let out = f();
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    (out, INTERRUPTS.load(Ordering::Relaxed) - before)
}

/// `Poller::poll` interrupted by a signal returns `Ok(0)` with no events, as its docs
/// say (it does not retry, so a flag set by the handler is seen at once): with a
/// 60 s timeout and a counter that never fires, only the signal can end the wait.
#[test]
fn eintr_ends_poller_poll_with_ok_zero() {
    let counter = Counter::builder_for(target_breakpoint())
        .period(1)
        .open()
        .unwrap();
    let ring = Ring::map(&counter, RingSize::Pages(1)).unwrap();
    let mut poller = Poller::new().unwrap();
    poller.register(Token(3), counter, ring).unwrap();
    let mut events = vec![];
    let start = Instant::now();
    let (n, signals) = under_signal_storm(Duration::from_millis(5), || {
        poller.poll(&mut events, Some(Duration::from_secs(60)))
    });
    assert_eq!(n.unwrap(), 0);
    assert!(events.is_empty());
    assert!(signals > 0);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the signal did not end the wait"
    );
    let start = Instant::now();
    let (n, _) = under_signal_storm(Duration::from_millis(5), || {
        poller.poll_and_drain(&mut events, Some(Duration::from_secs(60)), |_, _| {})
    });
    assert_eq!(n.unwrap(), 0);
    assert!(events.is_empty());
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the signal did not end the wait"
    );
}

/// `wait_for_exit` and `Child::wait` retry on `EINTR`: a storm of signals does not end
/// them early or turn into an error; they return when the child has exited.
#[test]
fn eintr_is_retried_by_the_waits() {
    let mut child = Command::new("sleep")
        .arg("0.3")
        .spawn_stopped()
        .unwrap()
        .start()
        .unwrap();
    let (waited, signals) = under_signal_storm(Duration::from_millis(1), || {
        perfring::launch::wait_for_exit(child.pid(), Some(Duration::from_secs(60)))
    });
    assert_eq!(waited.unwrap(), perfring::launch::Waited::Exited);
    assert!(signals > 0);
    let child2 = Command::new("sleep").arg("0.3").spawn_stopped().unwrap();
    let mut child2 = child2.start().unwrap();
    let (status, signals) = under_signal_storm(Duration::from_millis(1), || child2.wait());
    assert_eq!(status.unwrap(), ExitStatus::Exited(0));
    assert!(signals > 0);
    assert_eq!(child.wait().unwrap(), ExitStatus::Exited(0));
}

/// `Stopped::start` waits for the exec's outcome on a pipe: interrupted, it must still
/// report an exec that fails (and not a running child), every time.
#[test]
fn eintr_does_not_hide_a_failed_exec() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("faults-noexec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("not-a-program");
    // No `#!` and no ELF header: execv fails with ENOEXEC.
    std::fs::write(&file, "this is text\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (results, signals) = under_signal_storm(Duration::ZERO, || {
        (0..50)
            .map(|_| {
                Command::new(&file)
                    .spawn_stopped()
                    .unwrap()
                    .start()
                    .is_err()
            })
            .collect::<Vec<bool>>()
    });
    eprintln!("{signals} signals during 50 failing execs");
    assert!(results.iter().all(|&failed| failed), "{results:?}");
}

/// A child waiting for `start` has the parent's handlers until it execs: a signal then
/// must not make it give up (its read of the go pipe is retried on `EINTR`).
#[test]
fn eintr_in_the_stopped_child_does_not_abort_the_launch() {
    install_interrupt_handler();
    for _ in 0..5 {
        let stopped = Command::new("true").spawn_stopped().unwrap();
        for _ in 0..20 {
            perfring::process::signal_process(stopped.pid(), perfring::Signal::SIGUSR2).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut child = stopped.start().expect("the child survived the signals");
        assert_eq!(child.wait().unwrap(), ExitStatus::Exited(0));
    }
}

/// `SignalFd::read` under a storm of other signals: every overflow signal queued for it
/// is read, once.
#[test]
fn signalfd_reads_every_notification_under_a_signal_storm() {
    let mut sfd = perfring::notify::signalfd::SignalFd::new(None).unwrap();
    let counter = Counter::builder_for(target_breakpoint())
        .period(1)
        .wakeup_events(1)
        .open()
        .unwrap();
    sfd.attach(counter, Token(9)).unwrap();
    let (out, signals) = under_signal_storm(Duration::from_micros(100), || {
        let c = sfd.counter(Token(9)).unwrap();
        c.enable().unwrap();
        call_target(200);
        c.disable().unwrap();
        let mut out = Vec::new();
        // Signals are queued when the overflow happens; read until all 200 are in.
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < 200 && Instant::now() < deadline {
            sfd.read(&mut out).unwrap();
        }
        out
    });
    assert!(signals > 0);
    assert_eq!(out.len(), 200);
    assert!(out
        .iter()
        .all(|n| n.token == Token(9) && n.kind == NotifyKind::Overflow));
    let mut more = Vec::new();
    assert_eq!(sfd.read(&mut more).unwrap(), 0);
}

// ---- stdout closed mid-watch (`perfring watch ... | head -1`).

#[cfg(feature = "profile")]
/// Starts `perfring watch --json -e mem:target:x -c 1 -- prog ARGS` with stdout on a
/// pipe, reads its first line (the first overflow), closes the pipe as `head -1` does,
/// and returns perfring's exit status, how long it took to exit after the close, and
/// the watched command's pid.
fn watch_then_close_stdout(prog_args: &[&str]) -> (std::process::ExitStatus, Duration, i32) {
    let prog = c_program(false);
    let mut cmd = std::process::Command::new(util::perfring_bin());
    cmd.args(["watch", "--json", "-e", "mem:target:x", "-c", "1", "--"])
        .arg(&prog)
        .args(prog_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut perfring = cmd.spawn().unwrap();
    let mut stdout = std::io::BufReader::new(perfring.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let v: serde_json::Value = serde_json::from_str(&first).expect(&first);
    assert_eq!(v["type"], "overflow", "{first}");
    let pid = v["pid"].as_i64().unwrap() as i32;
    drop(stdout); // `head -1` exits
    let closed = Instant::now();
    // Far longer than perfring needs, far shorter than the command would run.
    let deadline = closed + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = perfring.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = perfring.kill();
            let _ = perfring.wait();
            panic!("perfring still running 30 s after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut perfring.stderr.take().unwrap(), &mut err).unwrap();
    eprintln!("perfring stderr: {err}");
    (status, closed.elapsed(), pid)
}

#[cfg(feature = "profile")]
/// A target that keeps overflowing: perfring's next write fails, it ends the command and
/// exits 0 (a closed pipe is not a failure).
#[test]
fn closed_stdout_ends_a_busy_watch_with_status_0_and_ends_the_target() {
    let (status, took, pid) = watch_then_close_stdout(&["2000000000"]);
    eprintln!("exited {status:?} {took:?} after the close");
    assert_eq!(status.code(), Some(0));
    assert!(
        !perfring::proc::is_alive(pid),
        "the command was left running"
    );
}

#[cfg(feature = "profile")]
/// A target that overflows once and then sleeps a minute: perfring has nothing more to
/// write, yet notices the closed pipe on its next tick, ends the command and exits 0.
#[test]
fn closed_stdout_ends_a_quiet_watch_at_once() {
    let (status, took, pid) = watch_then_close_stdout(&["1", "60"]);
    eprintln!("exited {status:?} {took:?} after the close");
    assert_eq!(status.code(), Some(0));
    assert!(
        !perfring::proc::is_alive(pid),
        "the command was left running"
    );
}

/// `console::output_closed`: a pipe is closed once its reader is gone, a file never.
#[test]
fn output_closed_sees_a_pipe_whose_reader_is_gone() {
    use std::os::fd::AsFd;
    let (reader, writer) = std::io::pipe().unwrap();
    assert!(!perfring::console::output_closed(writer.as_fd()));
    drop(reader);
    assert!(perfring::console::output_closed(writer.as_fd()));
    let file = std::fs::File::create(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("faults-out-{}", std::process::id())),
    )
    .unwrap();
    assert!(!perfring::console::output_closed(file.as_fd()));
}

/// `Sampler::poll` interrupted by a signal returns (after draining), as documented,
/// rather than waiting out its timeout or failing.
#[test]
fn eintr_ends_sampler_poll() {
    let mut sampler =
        perfring::sampler::Sampler::builder(perfring::sampler::Target::Tid(gettid() as i32))
            .event(Counter::builder_for(target_breakpoint()).period(1))
            .ring_size(RingSize::Pages(1))
            .tracking(false)
            .start()
            .unwrap();
    let start = Instant::now();
    let (n, signals) = under_signal_storm(Duration::from_millis(5), || {
        sampler.poll(Some(Duration::from_secs(60)), |_| {})
    });
    assert_eq!(n.unwrap(), 0);
    assert!(signals > 0);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the signal did not end the wait"
    );
}

#[cfg(feature = "profile")]
/// The same through the sampler (inherited counters, a ring per CPU): the command is
/// SIGKILLed from the drain callback, the sampler reports it ended by that signal, and
/// every hit is a sample delivered or counted lost by the kernel (`PERF_FORMAT_LOST`,
/// summed by `Sampler::read`).
#[test]
fn sampled_command_sigkilled_while_the_sampler_drains() {
    use perfring::sampler::{Sampler, Target as SamplerTarget, TargetEnd};
    let prog = c_program(false);
    let target = perfring::elf::ElfFile::load(&prog)
        .unwrap()
        .require("target")
        .unwrap()
        .addr;
    let event = Counter::builder_for(Event::breakpoint(
        perfring::event::Access::Execute,
        target,
        8,
    ))
    .period(1)
    .sample(SampleType::IP)
    .read_format(ReadFormat::LOST);
    let mut sampler = Sampler::builder(SamplerTarget::Command(
        Command::new(&prog).arg("2000000000"),
    ))
    .event(event)
    // One page: the kernel drops records too, and says how many.
    .ring_size(RingSize::Pages(1))
    .start()
    .unwrap();
    let (mut samples, mut killed) = (0u64, false);
    let pid = sampler.pid().unwrap();
    let end = loop {
        if let Some(end) = sampler.target_ended().unwrap() {
            break end;
        }
        sampler
            .poll(Some(Duration::from_millis(50)), |d| {
                if let (Some(0), perfring::records::RecordKind::Sample(_)) =
                    (d.event, d.record.kind())
                {
                    samples += 1;
                    if samples == 20_000 {
                        killed = true;
                        perfring::process::signal_process(pid, perfring::Signal::SIGKILL).unwrap();
                    }
                }
            })
            .unwrap();
    };
    sampler
        .drain(|d| {
            if let (Some(0), perfring::records::RecordKind::Sample(_)) = (d.event, d.record.kind())
            {
                samples += 1;
            }
        })
        .unwrap();
    assert!(killed, "killed inside the drain");
    assert!(
        matches!(
            end,
            TargetEnd::Exited(ExitStatus::Signaled(perfring::Signal::SIGKILL))
        ),
        "{end:?}"
    );
    let count = sampler.read(0).unwrap();
    let lost = count.lost.expect("PERF_FORMAT_LOST");
    let st = sampler.stats();
    eprintln!(
        "killed after {} hits: {samples} samples, {lost} lost; {st:?}",
        count.value
    );
    assert_eq!(st.samples, samples);
    assert_eq!(
        samples + lost,
        count.value,
        "every hit before death accounted for"
    );
}
