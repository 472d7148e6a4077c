//! `perfring doctor`: what this machine lets perfring do, found by trying each thing.
//!
//! [`run`] reads the kernel's perf limits and PMU list, then runs one quick probe per
//! mechanism (hardware and software counters, breakpoints, tracepoints, uprobes, the
//! ring, overflow signals, `sigtrap`, `REFRESH`, `rdpmc`). Each probe opens real
//! events through perfring's public API on the calling thread, checks an exact count
//! where the mechanism allows one, and closes everything again. A probe never panics
//! (a panic inside one is caught and reported as a failed check) and takes well under
//! half a second.
//!
//! # Examples
//! ```no_run
//! let report = perfring::doctor::run();
//! println!("kernel {}", report.kernel);
//! for (name, check) in &report.checks {
//!     println!("{name:<14} {} {}", if check.ok { "ok  " } else { "FAIL" }, check.detail);
//! }
//! assert!(report.check("software").is_some_and(|c| c.ok));
//! ```
//!
//! # Side effects
//! The `signal` and `sigtrap` probes use [`crate::notify`]: they install perfring's
//! overflow-signal handler (on the first free `SIGRTMIN+k`, or the one perfring already
//! uses) and its `SIGTRAP` handler. Both are installed once per process and stay
//! installed; a program that installed them itself gets the same handlers back, and
//! the probes only add and then remove registrations of their own (fresh fds, and
//! `sig_data` values no program would pick), so its registrations keep working.
//! `ThreadSignal` never takes a real-time signal that has a foreign handler; `Sigtrap`
//! keeps a foreign `SIGTRAP` handler and passes it every `SIGTRAP` that is not
//! `TRAP_PERF`. A `SIGTRAP` handler installed *after* perfring's replaces it, and
//! the `sigtrap` probe then fails (or the foreign handler sees its `TRAP_PERF`s): run
//! the doctor from a separate process (as `perfring doctor` does) in such a program.
#![deny(unsafe_code)]

use std::ffi::CString;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::counter::diagnose::paranoid_level;
use crate::event::Access;
use crate::notify::signal::Handler;
use crate::notify::sigtrap::TrapHandler;
use crate::notify::{Sigtrap, SigtrapInfo, ThreadSignal, Token};
use crate::ring::{Ring, RingSize};
use crate::{sys, Builder, Counter, Error, ErrorKind, Event, SampleType};

/// Everything the doctor found out.
#[derive(Debug, Clone)]
pub struct Report {
    /// `uname -r` (from `/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// `kernel.perf_event_paranoid`, if readable.
    pub paranoid: Option<i64>,
    /// Who is asking (uid, the capabilities that matter) and what that allows.
    pub privileges: crate::privilege::Privileges,
    /// `kernel.perf_event_max_sample_rate`: the cap on overflows per second.
    pub max_sample_rate: Option<i64>,
    /// `kernel.perf_cpu_time_max_percent`: CPU share perf interrupts may use.
    pub cpu_time_max_percent: Option<i64>,
    /// `kernel.perf_event_mlock_kb`: KiB of rings each user may map beyond `RLIMIT_MEMLOCK`.
    pub mlock_kb: Option<i64>,
    /// This process's `RLIMIT_MEMLOCK`, if readable.
    pub memlock: Option<MemlockLimit>,
    /// The PMUs in `/sys/bus/event_source/devices`, sorted by type.
    pub pmus: Vec<Pmu>,
    /// One result per probe, in the order of [`CHECKS`].
    pub checks: Vec<(&'static str, Check)>,
}

impl Report {
    /// The result of the probe named `name` (one of [`CHECKS`]).
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|(n, _)| *n == name).map(|(_, c)| c)
    }
}

/// `RLIMIT_MEMLOCK` in bytes; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockLimit {
    /// The soft limit, which applies.
    pub soft: Option<u64>,
    /// The hard limit, up to which the soft one may be raised.
    pub hard: Option<u64>,
}

pub use crate::event::Pmu;

/// One probe's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Whether the mechanism works as perfring needs it to.
    pub ok: bool,
    /// What was measured, or the error (with its fix) when it failed.
    pub detail: String,
}

impl Check {
    fn pass(detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            detail: detail.into(),
        }
    }
    fn fail(detail: impl Into<String>) -> Check {
        Check {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// The probes [`run`] performs, in order.
pub const CHECKS: [&str; 12] = [
    "hardware",
    "software",
    "breakpoint_x",
    "breakpoint_w",
    "breakpoint_r",
    "tracepoint",
    "uprobe",
    "mmap",
    "signal",
    "sigtrap",
    "refresh",
    "rdpmc",
];

/// Reads the machine's perf settings and runs every probe in [`CHECKS`].
pub fn run() -> Report {
    Report {
        kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        paranoid: paranoid_level(),
        privileges: crate::privilege::Privileges::current(),
        max_sample_rate: read_int("/proc/sys/kernel/perf_event_max_sample_rate"),
        cpu_time_max_percent: read_int("/proc/sys/kernel/perf_cpu_time_max_percent"),
        mlock_kb: read_int("/proc/sys/kernel/perf_event_mlock_kb"),
        memlock: memlock_limit(),
        pmus: pmus(),
        checks: CHECKS
            .iter()
            .map(|&name| {
                (
                    name,
                    run_check(name).expect("every name in CHECKS has a probe"),
                )
            })
            .collect(),
    }
}

/// Runs the one probe named `name`; `None` if there is no such probe.
pub fn run_check(name: &str) -> Option<Check> {
    let probe: fn() -> Check = match name {
        "hardware" => probe_hardware,
        "software" => probe_software,
        "breakpoint_x" => probe_breakpoint_x,
        "breakpoint_w" => probe_breakpoint_w,
        "breakpoint_r" => probe_breakpoint_r,
        "tracepoint" => probe_tracepoint,
        "uprobe" => probe_uprobe,
        "mmap" => probe_mmap,
        "signal" => probe_signal,
        "sigtrap" => probe_sigtrap,
        "refresh" => probe_refresh,
        "rdpmc" => probe_rdpmc,
        _ => return None,
    };
    Some(
        std::panic::catch_unwind(probe)
            .unwrap_or_else(|_| Check::fail(format!("the {name} probe panicked (a perfring bug)"))),
    )
}

// ---------------------------------------------------------------------------------
// Facts

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

fn read_int(path: &str) -> Option<i64> {
    read_trimmed(path)?.parse().ok()
}

/// `RLIMIT_MEMLOCK` from `/proc/self/limits` ("Max locked memory  SOFT  HARD  bytes").
fn memlock_limit() -> Option<MemlockLimit> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let mut fields = line["Max locked memory".len()..].split_whitespace();
    let parse = |v: &str| -> Option<Option<u64>> {
        if v == "unlimited" {
            Some(None)
        } else {
            v.parse().ok().map(Some)
        }
    };
    Some(MemlockLimit {
        soft: parse(fields.next()?)?,
        hard: parse(fields.next()?)?,
    })
}

/// The PMUs under `/sys/bus/event_source/devices`, each with its `type` file.
pub fn pmus() -> Vec<Pmu> {
    crate::event::Sysfs::default().pmus()
}

// ---------------------------------------------------------------------------------
// Targets: functions and variables the probes watch. Each probe has its own, so that
// no two probes' breakpoints or uprobes share an address.

macro_rules! target_fn {
    ($name:ident, $k:expr) => {
        #[inline(never)]
        fn $name(x: u64) -> u64 {
            black_box(x).wrapping_mul($k) ^ $k
        }
    };
}
target_fn!(target_bp_x, 0x9e37_79b9);
target_fn!(target_uprobe, 0x85eb_ca6b);
target_fn!(target_mmap, 0xc2b2_ae35);
target_fn!(target_signal, 0x27d4_eb2f);
target_fn!(target_sigtrap, 0x1656_67b1);
target_fn!(target_refresh, 0xd3a2_646c);

fn addr_of_fn(f: fn(u64) -> u64) -> u64 {
    f as usize as u64
}

/// Calls `f` `n` times through an opaque pointer, so none of the calls is inlined.
fn call_n(f: fn(u64) -> u64, n: u64) -> u64 {
    (0..n).fold(0, |acc, i| acc ^ black_box(f)(black_box(i)))
}

static WATCHED_W: AtomicU64 = AtomicU64::new(0);
static WATCHED_R: AtomicU64 = AtomicU64::new(0);

fn var_addr(v: &'static AtomicU64) -> u64 {
    v.as_ptr() as usize as u64
}

/// How many times each exact-count probe triggers its event.
const N: u64 = 100;

/// A builder for a user-space-only event (so the probe also works at paranoid 2).
fn user_only(event: Event) -> Builder {
    Counter::builder_for(event)
        .exclude_kernel(true)
        .exclude_hv(true)
}

fn exact(what: &str, got: u64, want: u64) -> Check {
    if got == want {
        Check::pass(format!("{what}: counted {got} of {want}, exact"))
    } else {
        Check::fail(format!("{what}: counted {got}, expected exactly {want}"))
    }
}

fn run_probe(f: impl FnOnce() -> Result<Check, Error>) -> Check {
    f().unwrap_or_else(|e| Check::fail(e.to_string()))
}

/// Counts `counter` around `work`, returning the raw value.
fn count_around(counter: &Counter, work: impl FnOnce()) -> Result<u64, Error> {
    counter.reset()?;
    counter.enable()?;
    work();
    counter.disable()?;
    Ok(counter.read()?.value)
}

/// Drains `ring`, returning how many `PERF_RECORD_SAMPLE`s it held.
fn ring_samples(ring: &mut Ring) -> Result<u64, Error> {
    let mut batch = ring.batch();
    let mut samples = 0;
    while let Some(record) = batch.next() {
        if record?.kind() == sys::PERF_RECORD_SAMPLE {
            samples += 1;
        }
    }
    Ok(samples)
}

// ---------------------------------------------------------------------------------
// Probes

/// `cycles`: opens on a machine with a hardware PMU; not in a VM without one.
fn probe_hardware() -> Check {
    run_probe(|| {
        let counter = user_only(Event::parse("cycles")?).open()?;
        let n = count_around(&counter, || {
            call_n(target_bp_x, 10_000);
        })?;
        Ok(if n > 0 {
            Check::pass(format!("cycles counted {n} for a short loop"))
        } else {
            Check::fail("cycles opened but counted 0: the (virtual) PMU does not count")
        })
    })
}

/// `cpu-clock` opens and counts some nanoseconds of a short busy loop.
fn probe_software() -> Check {
    run_probe(|| {
        let counter = user_only(Event::parse("cpu-clock")?).open()?;
        let n = count_around(&counter, || spin(Duration::from_millis(5)))?;
        Ok(if n > 0 {
            Check::pass(format!("cpu-clock counted {n} ns in a 5 ms busy loop"))
        } else {
            Check::fail("cpu-clock opened but counted 0 ns of a 5 ms busy loop")
        })
    })
}

fn spin(d: Duration) {
    let end = std::time::Instant::now() + d;
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        x = black_box(x.wrapping_add(1));
    }
}

/// An execute breakpoint on a local function counts each call exactly.
fn probe_breakpoint_x() -> Check {
    run_probe(|| {
        let counter = user_only(Event::breakpoint(
            Access::Execute,
            addr_of_fn(target_bp_x),
            8,
        ))
        .open()?;
        let n = count_around(&counter, || {
            call_n(target_bp_x, N);
        })?;
        Ok(exact(&format!("{N} calls"), n, N))
    })
}

/// A write watchpoint on a static counts each store exactly.
fn probe_breakpoint_w() -> Check {
    run_probe(|| {
        let counter =
            user_only(Event::breakpoint(Access::Write, var_addr(&WATCHED_W), 8)).open()?;
        let n = count_around(&counter, || {
            for i in 0..N {
                WATCHED_W.store(black_box(i), Ordering::SeqCst);
            }
        })?;
        Ok(exact(&format!("{N} stores"), n, N))
    })
}

/// Read watchpoints: `HW_BREAKPOINT_R` alone (x86 has none: `EINVAL`), then `RW`.
fn probe_breakpoint_r() -> Check {
    let watch = |bp_type: u32| -> Result<u64, Error> {
        let mut builder = user_only(Event::breakpoint(Access::Write, var_addr(&WATCHED_R), 8));
        builder.attr_mut().bp_type = bp_type;
        let counter = builder.open()?;
        count_around(&counter, || {
            for _ in 0..N {
                black_box(WATCHED_R.load(Ordering::SeqCst));
            }
        })
    };
    let rw = match watch(sys::HW_BREAKPOINT_RW) {
        Ok(n) if n == N => format!("an RW watchpoint counted all {N} loads exactly"),
        Ok(n) => format!("an RW watchpoint counted {n} of {N} loads"),
        Err(e) => format!("an RW watchpoint failed too: {e}"),
    };
    match watch(sys::HW_BREAKPOINT_R) {
        Ok(n) if n == N => Check::pass(format!(
            "read-only watchpoint counted {N} loads exactly; {rw}"
        )),
        Ok(n) => Check::fail(format!(
            "read-only watchpoint counted {n} of {N} loads; {rw}"
        )),
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::EINVAL) => "the kernel rejects HW_BREAKPOINT_R alone (EINVAL): this CPU has no read-only watchpoints (x86 has none)".to_string(),
                _ => format!("HW_BREAKPOINT_R failed: {e}"),
            };
            Check::fail(format!("{why}; {rw}"))
        }
    }
}

/// `sched:sched_switch` by id counts the context switches of a few short sleeps.
fn probe_tracepoint() -> Check {
    const SLEEPS: u64 = 5;
    run_probe(|| {
        // The parser reads the id from tracefs and says how to mount it when missing.
        let builder = match Event::parse("sched:sched_switch") {
            Ok(event) => Counter::builder_for(event),
            Err(e) => return Ok(Check::fail(e.to_string())),
        };
        // Tracepoints fire in the kernel: exclude_kernel would hide every one.
        let counter = builder.open()?;
        let n = count_around(&counter, || {
            for _ in 0..SLEEPS {
                std::thread::sleep(Duration::from_millis(1));
            }
        })?;
        Ok(if n >= SLEEPS {
            Check::pass(format!(
                "sched:sched_switch counted {n} switches for {SLEEPS} sleeps"
            ))
        } else {
            Check::fail(format!("sched:sched_switch counted {n} switches for {SLEEPS} sleeps (expected at least {SLEEPS})"))
        })
    })
}

/// The mapped file and file offset of `addr`, from `/proc/self/maps`.
fn file_offset_of(addr: u64) -> Option<(String, u64)> {
    let maps = crate::proc::maps(0).ok()?;
    maps.iter().find_map(|m| {
        let path = m.path()?;
        (m.start <= addr && addr < m.end && m.exec).then(|| {
            (
                path.to_string_lossy().into_owned(),
                addr - m.start + m.offset,
            )
        })
    })
}

/// A uprobe (uprobe PMU, `config1` = path, `config2` = offset) counts each call exactly.
fn probe_uprobe() -> Check {
    run_probe(|| {
        let Some(type_) = read_trimmed("/sys/bus/event_source/devices/uprobe/type")
            .and_then(|s| s.parse::<u32>().ok())
        else {
            return Ok(Check::fail("no uprobe PMU (/sys/bus/event_source/devices/uprobe): the kernel lacks CONFIG_UPROBE_EVENTS"));
        };
        let addr = addr_of_fn(target_uprobe);
        let Some((path, offset)) = file_offset_of(addr) else {
            return Ok(Check::fail(format!(
                "no executable file mapping holds {addr:#x} in /proc/self/maps"
            )));
        };
        let Ok(c_path) = CString::new(path.clone()) else {
            return Ok(Check::fail(format!(
                "mapped path {path:?} contains a NUL byte"
            )));
        };
        let event = Event::pmu(type_, 0).with_name(format!("uprobe:{path}+{offset:#x}"));
        let mut builder = user_only(event);
        let attr = builder.attr_mut();
        // config bit 0 (retprobe) stays clear. The kernel reads the path string during
        // perf_event_open only; `c_path` outlives it.
        attr.__bindgen_anon_3.uprobe_path = c_path.as_ptr() as usize as u64;
        attr.__bindgen_anon_4.probe_offset = offset;
        // The stand-in event is named "dummy"; say what was really opened.
        let counter = match builder.open() {
            Ok(c) => c,
            Err(e) => {
                return Ok(Check::fail(format!(
                    "uprobe PMU (type {type_}) on {path}+{offset:#x}: {e}"
                )))
            }
        };
        let n = count_around(&counter, || {
            call_n(target_uprobe, N);
        })?;
        drop(counter);
        drop(c_path);
        let what = format!("{N} calls of {path}+{offset:#x}");
        Ok(exact(&what, n, N))
    })
}

/// A ring on an execute breakpoint with period 1 holds exactly one sample per call.
fn probe_mmap() -> Check {
    run_probe(|| {
        let counter = user_only(Event::breakpoint(
            Access::Execute,
            addr_of_fn(target_mmap),
            8,
        ))
        .period(1)
        .sample(SampleType::IP | SampleType::TID)
        .open()?;
        let mut ring = Ring::map(&counter, RingSize::Pages(8))?;
        counter.enable()?;
        call_n(target_mmap, N);
        counter.disable()?;
        let samples = ring_samples(&mut ring)?;
        let lost = ring.stats().lost;
        let mut check = exact(&format!("{N} overflows, samples in the ring"), samples, N);
        if lost > 0 {
            check.detail.push_str(&format!(" ({lost} lost)"));
        }
        Ok(check)
    })
}

/// `REFRESH(3)` on a period-1 breakpoint: exactly 3 overflows, then the counter stops.
fn probe_refresh() -> Check {
    run_probe(|| {
        let counter = user_only(Event::breakpoint(
            Access::Execute,
            addr_of_fn(target_refresh),
            8,
        ))
        .period(1)
        .sample(SampleType::IP)
        .open()?;
        let mut ring = Ring::map(&counter, RingSize::Pages(4))?;
        counter.refresh(3)?;
        call_n(target_refresh, 10);
        counter.disable()?;
        let samples = ring_samples(&mut ring)?;
        let value = counter.read()?.value;
        Ok(if samples == 3 {
            Check::pass(format!(
                "REFRESH(3) then 10 calls: 3 samples, then disabled (count {value})"
            ))
        } else {
            Check::fail(format!(
                "REFRESH(3) then 10 calls: {samples} samples (count {value}), expected exactly 3"
            ))
        })
    })
}

/// `rdpmc` needs a hardware counter mapped with its `cap_user_rdpmc` bit set.
fn probe_rdpmc() -> Check {
    run_probe(|| {
        let counter = match user_only(Event::parse("cycles")?).open() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::NoPmu => {
                return Ok(Check::fail(
                    "no hardware PMU: rdpmc needs a hardware counter",
                ))
            }
            Err(e) => return Ok(Check::fail(format!("rdpmc needs a hardware counter: {e}"))),
        };
        let ring = Ring::map(&counter, RingSize::Pages(1))?;
        counter.enable()?;
        let first = ring.read_self();
        spin(Duration::from_millis(1));
        let second = ring.read_self();
        counter.disable()?;
        Ok(match (first, second) {
            (Ok(a), Ok(b)) if b.value > a.value => Check::pass(format!(
                "rdpmc read {} then {} cycles without a system call",
                a.value, b.value
            )),
            (Ok(a), Ok(b)) => Check::fail(format!(
                "rdpmc works but the count did not advance ({} then {})",
                a.value, b.value
            )),
            (Err(e), _) | (_, Err(e)) => Check::fail(e.to_string()),
        })
    })
}

// ---------------------------------------------------------------------------------
// Signals, through perfring's notify module: the handlers are perfring's own,
// installed once per process and shared with any registrations the host program has.

/// Tokens and `sig_data` values the signal probes register with: a fixed tag plus a
/// per-run sequence number, so that neither a host program's registrations nor a
/// concurrent doctor run on another thread can collide with them.
const PROBE_TAG: u64 = 0x7066_7264_0000_0000; // "pfrd" in the top half
static PROBE_SEQ: AtomicU64 = AtomicU64::new(1);

fn probe_key() -> u64 {
    PROBE_TAG | (PROBE_SEQ.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

/// Overflow signals: a period-1 breakpoint attached to [`ThreadSignal`] (the first
/// free or already-perfring `SIGRTMIN+k`, sent to this thread with `F_SETOWN_EX`);
/// counts the signals the handler matched to the counter's fd.
pub fn probe_signal() -> Check {
    run_probe(|| {
        // Never chain (`false`): with `None` the handler only takes a free signal or
        // one perfring already owns, so a host program's handlers are left alone.
        let sig = match ThreadSignal::builder().install() {
            Ok(s) => s,
            Err(e) => {
                return Ok(Check::fail(format!(
                    "could not install perfring's overflow-signal handler: {e}"
                )))
            }
        };
        let counter = user_only(Event::breakpoint(
            Access::Execute,
            addr_of_fn(target_signal),
            8,
        ))
        .period(1)
        .wakeup_events(1)
        .open()?;
        let counter = sig.attach(counter, Token(probe_key()), Handler::Count)?;
        counter.counter().enable()?;
        call_n(target_signal, N);
        counter.counter().disable()?;
        // Signals to this thread are delivered before the disabling system call returns.
        let hits = counter.notifications();
        let k = counter.signal().number() - libc::SIGRTMIN();
        // Detaching clears O_ASYNC and frees the registry slot before the fd closes.
        drop(counter.detach());
        let detail = format!("{N} overflows, {hits} signals (SIGRTMIN+{k}) on this thread");
        Ok(if hits > 0 && hits <= N {
            Check::pass(detail)
        } else {
            Check::fail(detail)
        })
    })
}

/// Hits of [`probe_sigtrap`]'s callback whose `si_perf_data` was the expected one, and
/// those whose was not. One sigtrap probe runs at a time ([`SIGTRAP_PROBE`]).
static SIGTRAP_MATCHED: AtomicU64 = AtomicU64::new(0);
static SIGTRAP_MISMATCHED: AtomicU64 = AtomicU64::new(0);
static SIGTRAP_PROBE: Mutex<()> = Mutex::new(());

/// Signal context: atomics only. `want` is the counter's `sig_data`.
fn on_probe_sigtrap(info: &SigtrapInfo, want: usize) {
    if info.token.0 == want as u64 && info.perf_type == sys::PERF_TYPE_BREAKPOINT {
        SIGTRAP_MATCHED.fetch_add(1, Ordering::Relaxed);
    } else {
        SIGTRAP_MISMATCHED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Synchronous `SIGTRAP` (`sigtrap`, `TRAP_PERF`, `si_perf_data`) on a period-1
/// breakpoint: one signal per overflow, exactly, each carrying the counter's `sig_data`.
///
/// [`Sigtrap::install`] keeps any previous SIGTRAP handler and passes it every SIGTRAP
/// that is not `TRAP_PERF`, so a debugger's or the host program's handler keeps working.
pub fn probe_sigtrap() -> Check {
    run_probe(|| {
        let _one_at_a_time = SIGTRAP_PROBE.lock().unwrap_or_else(|p| p.into_inner());
        let trap = match Sigtrap::install() {
            Ok(t) => t,
            Err(e) => {
                return Ok(Check::fail(format!(
                    "could not install perfring's SIGTRAP handler: {e}"
                )))
            }
        };
        // The callback receives sig_data as a usize: keep it within one.
        let data = probe_key() & usize::MAX as u64;
        SIGTRAP_MATCHED.store(0, Ordering::Relaxed);
        SIGTRAP_MISMATCHED.store(0, Ordering::Relaxed);
        let counter = user_only(Event::breakpoint(
            Access::Execute,
            addr_of_fn(target_sigtrap),
            8,
        ))
        .period(1)
        .sigtrap(data)
        .open()?;
        let counter = trap.attach(
            counter,
            TrapHandler::Callback(on_probe_sigtrap, data as usize),
        )?;
        counter.counter().enable()?;
        call_n(target_sigtrap, N);
        counter.counter().disable()?;
        let delivered = counter.notifications();
        // Detaching frees the sig_data's registry slot (waiting for any handler in it).
        drop(counter.detach());
        let (matched, mismatched) = (
            SIGTRAP_MATCHED.load(Ordering::Relaxed),
            SIGTRAP_MISMATCHED.load(Ordering::Relaxed),
        );
        let mut check = exact(
            &format!("{N} overflows, SIGTRAPs with TRAP_PERF and si_perf_data"),
            matched,
            N,
        );
        if mismatched > 0 {
            check.ok = false;
            check.detail.push_str(&format!(
                ", {mismatched} with the wrong si_perf_data or si_perf_type"
            ));
        }
        if delivered != matched + mismatched {
            check.ok = false;
            check.detail.push_str(&format!(
                ", but the handler counted {delivered} (a perfring bug)"
            ));
        }
        Ok(check)
    })
}
