//! Per-notification cost with 1 and with 10,000 registered counters, in one group per
//! notifier, two ways:
//! - `overflow/N`: a real overflow (execute breakpoint, period 1) → the kernel's signal
//!   → perfring's handler (registry lookup by `si_fd` or `si_perf_data`, count) → return;
//! - `handler/N`: the same handler driven by a signal the thread queues to itself with
//!   `rt_tgsigqueueinfo` and a kernel-style `si_code` (`POLL_IN` with `si_fd`, or
//!   `TRAP_PERF` with `si_perf_data`; the kernel allows a positive `si_code` to oneself),
//!   which leaves out the breakpoint trap so the lookup's share is larger;
//! - `dispatch/N`: the handler's routing (registry lookup, count) called directly with
//!   such a siginfo (`ThreadSignal::dispatch`, `Sigtrap::dispatch`): no syscall, so the
//!   lookup is all there is.
//!
//! The 9,999 other registrations are `dummy` counters on a parked helper thread, so
//! the benchmarked thread's own perf context is the same in both runs and only the
//! registry's size differs. Goal (issue 8): `10000` within 1.1× of `1`.
//!
//! `cargo bench --bench registry -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs, unsafe_code)]

use std::hint::black_box;
use std::sync::mpsc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Owner, SignalCounter, Sigtrap, SigtrapCounter, ThreadSignal, Token};
use perfring::{sys, Counter, Event, Scope};

const MANY: usize = 10_000;

#[inline(never)]
#[no_mangle]
pub extern "C" fn perfring_registry_bench_target(x: u64) -> u64 {
    black_box(x).wrapping_mul(2654435761)
}

fn hit() {
    black_box(perfring_registry_bench_target(black_box(1)));
}

fn breakpoint() -> perfring::Builder {
    Counter::builder_for(Event::breakpoint(
        perfring::event::Access::Execute,
        perfring_registry_bench_target as *const () as u64,
        8,
    ))
    .period(1)
}

/// A thread that does nothing until told to end; the filler counters watch it.
struct Parked {
    tid: libc::pid_t,
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

fn parked() -> Parked {
    let (tx_tid, rx_tid) = mpsc::channel();
    let (stop, rx_stop) = mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx_tid.send(unsafe { libc::gettid() }).unwrap();
        let _ = rx_stop.recv();
    });
    Parked {
        tid: rx_tid.recv().unwrap(),
        stop,
        handle,
    }
}

fn filler(tid: libc::pid_t) -> perfring::Builder {
    Counter::builder("dummy")
        .unwrap()
        .target(Scope::Thread(tid))
        .period(1)
}

/// A kernel-style siginfo: `signo`, `code`, and what `fill` writes.
fn siginfo(
    signo: i32,
    code: i32,
    fill: impl FnOnce(&mut sys::siginfo__bindgen_ty_1__bindgen_ty_1),
) -> sys::siginfo {
    // SAFETY: siginfo is integers and unions of integers/pointers: all-zero is valid.
    let mut si: sys::siginfo = unsafe { std::mem::zeroed() };
    // SAFETY: writing the struct member of the union (plain integer fields).
    let head = unsafe { &mut si.__bindgen_anon_1.__bindgen_anon_1 };
    head.si_signo = signo;
    head.si_code = code;
    fill(head);
    si
}

/// The same bytes as libc's type, for `dispatch`.
fn as_libc(si: sys::siginfo) -> libc::siginfo_t {
    // SAFETY: both are the kernel's 128-byte siginfo; every bit pattern is valid for
    // libc's (integers and padding).
    unsafe { std::mem::transmute::<sys::siginfo, libc::siginfo_t>(si) }
}

/// Queues `signo` to the calling thread with a kernel-style siginfo filled by `fill`;
/// the handler runs before the syscall returns.
fn queue_to_self(
    signo: i32,
    code: i32,
    fill: impl FnOnce(&mut sys::siginfo__bindgen_ty_1__bindgen_ty_1),
) {
    let si = siginfo(signo, code, fill);
    // SAFETY: `si` is a full 128-byte siginfo living across the call; the target is
    // this thread of this process, for which a positive si_code is allowed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            libc::gettid(),
            signo,
            &si as *const sys::siginfo,
        )
    };
    assert_eq!(
        r,
        0,
        "rt_tgsigqueueinfo: {}",
        std::io::Error::last_os_error()
    );
}

fn thread_signal(c: &mut Criterion) {
    let mut g = c.benchmark_group("registry_thread_signal");
    let sig = ThreadSignal::builder().install().unwrap();
    let helper = parked();
    let mut fill: Vec<SignalCounter> = Vec::new();
    // 1, then 10,000, then 1 again (fillers dropped): `1-again` shows how much of any
    // 1-vs-10,000 difference is the machine drifting between runs.
    for (label, registered) in [("1", 1), ("10000", MANY), ("1-again", 1)] {
        if registered == 1 {
            fill.clear();
        }
        while fill.len() + 1 < registered {
            let k = fill.len() as u64;
            let f = filler(helper.tid).open().unwrap();
            fill.push(
                sig.attach_with(f, Token(k), Owner::Thread(helper.tid), Handler::Count)
                    .unwrap(),
            );
        }
        let sc = sig
            .attach(
                breakpoint().open().unwrap(),
                Token(u64::MAX),
                Handler::Count,
            )
            .unwrap();
        assert_eq!(ThreadSignal::registered(), registered);
        sc.counter().enable().unwrap();
        g.bench_function(BenchmarkId::new("overflow", label), |b| b.iter(hit));
        sc.counter().disable().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(sc.counter());
        g.bench_function(BenchmarkId::new("handler", label), |b| {
            b.iter(|| {
                queue_to_self(sig.signal().number(), sys::POLL_IN as i32, |h| {
                    h._sifields._sigpoll._fd = fd;
                    h._sifields._sigpoll._band = libc::POLLIN.into();
                })
            })
        });
        let info = as_libc(siginfo(sig.signal().number(), sys::POLL_IN as i32, |h| {
            h._sifields._sigpoll._fd = fd;
        }));
        g.bench_function(BenchmarkId::new("dispatch", label), |b| {
            b.iter(|| assert!(sig.dispatch(black_box(&info))))
        });
        // Every queued signal found its fd (an unknown one would count as stray).
        assert_eq!(ThreadSignal::stray(), 0);
    }
    drop(fill);
    helper.stop.send(()).unwrap();
    helper.handle.join().unwrap();
    g.finish();
}

fn sigtrap(c: &mut Criterion) {
    let mut g = c.benchmark_group("registry_sigtrap");
    let trap = Sigtrap::install().unwrap();
    let helper = parked();
    let mut fill: Vec<SigtrapCounter> = Vec::new();
    // 1, then 10,000, then 1 again (fillers dropped): `1-again` shows how much of any
    // 1-vs-10,000 difference is the machine drifting between runs.
    for (label, registered) in [("1", 1), ("10000", MANY), ("1-again", 1)] {
        if registered == 1 {
            fill.clear();
        }
        while fill.len() + 1 < registered {
            let k = fill.len() as u64 + 1;
            let f = filler(helper.tid).sigtrap(k).open().unwrap();
            fill.push(trap.attach(f, TrapHandler::Count).unwrap());
        }
        let tc = trap
            .attach(
                breakpoint().sigtrap(0x5eed_0000).open().unwrap(),
                TrapHandler::Count,
            )
            .unwrap();
        assert_eq!(Sigtrap::registered(), registered);
        tc.counter().enable().unwrap();
        g.bench_function(BenchmarkId::new("overflow", label), |b| b.iter(hit));
        tc.counter().disable().unwrap();
        g.bench_function(BenchmarkId::new("handler", label), |b| {
            b.iter(|| {
                queue_to_self(libc::SIGTRAP, sys::TRAP_PERF as i32, |h| {
                    h._sifields._sigfault.__bindgen_anon_1._perf._data = 0x5eed_0000;
                    h._sifields._sigfault.__bindgen_anon_1._perf._type = sys::PERF_TYPE_BREAKPOINT;
                })
            })
        });
        let info = as_libc(siginfo(libc::SIGTRAP, sys::TRAP_PERF as i32, |h| {
            h._sifields._sigfault.__bindgen_anon_1._perf._data = 0x5eed_0000;
        }));
        g.bench_function(BenchmarkId::new("dispatch", label), |b| {
            b.iter(|| assert!(trap.dispatch(black_box(&info))))
        });
        // Every queued trap found its sig_data.
        assert_eq!(Sigtrap::stray(), 0);
    }
    drop(fill);
    helper.stop.send(()).unwrap();
    helper.handle.join().unwrap();
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = thread_signal, sigtrap
}
criterion_main!(benches);
