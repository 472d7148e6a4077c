//! Soak: cpu-clock at the kernel's maximum sample rate on T busy threads, drained by the
//! sampler, for N seconds. Every second it prints what the rings delivered (`seen`
//! samples), what the kernel said it dropped (`lost`: `PERF_RECORD_LOST` +
//! `LOST_SAMPLES`), `throttled` (`PERF_RECORD_THROTTLE`s), the kernel's own count of
//! overflows (`kernel`: the counters' value / period, `Sampler::read`) and the
//! periods the hrtimer `skipped`, and exits with status 1 as soon as those disagree by
//! more than the periods still in flight.
//!
//! ```sh
//! cargo run --release --example soak -- --seconds 600 --threads 4
//! ```
//!
//! The target is this program re-run with `--spin T`: T threads burning CPU. By default
//! the sampler gives each thread its own counter and ring (`per_thread`), so each
//! thread has one period; `--inherit` uses its default inherited counters instead, one
//! copy per thread per CPU, each with its own period (and its own ring per CPU).
//!
//! # Skipped periods
//! cpu-clock is an hrtimer: when it fires more than a period late (a busy or
//! virtualised host), the kernel forwards it past the missed periods and writes one
//! sample, with no LOST or THROTTLE record. Those periods are in the counter's value
//! but were never sampled, so `seen + lost` alone falls short of `value / period` on a
//! loaded machine. The soak reads them off the samples (`PERF_SAMPLE_READ`: each
//! sample carries its thread's count): up to a thread's last sample, its count passed
//! `round(count / period)` periods, of which it had `n` samples; the rest were
//! skipped or lost. (A record perfring dropped would be counted as skipped too: the
//! samples cannot tell; `tests/faults.rs` and `tests/cpu_clock_rate.rs` check that
//! separately, against exact counts and a raw reader.)
//!
//! # The checks, and what is "in flight"
//! Each second the kernel's count is read (`k1`), every ring is drained, the count is
//! read again (`k2`), and with `N = T + 1` threads in the target (the spinners and its
//! main thread; with `--inherit`, `N = (T + 1) × CPUs` counter copies):
//! - `seen + lost + skipped <= k2 + 2N`: nothing delivered that the kernel did not
//!   count (per thread: one period under way and the rounding of its skips);
//! - `seen + lost + skipped + 2N >= k1'`, `k1'` being the *previous* second's `k1`:
//!   everything the kernel counted a second ago has been delivered, reported lost or
//!   skipped by now (a second of lag, because the kernel reports a run of losses only
//!   with the next record it manages to write); the shortfall is printed as `missing`;
//! - no record failed to decode.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use perfring::launch::Command;
use perfring::records::RecordKind;
use perfring::ring::RingSize;
use perfring::sampler::{Sampler, Target};
use perfring::{Counter, SampleType};

struct Args {
    seconds: u64,
    threads: u64,
    pages: usize,
    /// Inherited counters into one ring per event instead of a counter and ring per thread.
    inherit: bool,
    /// Internal: be the spinning target with this many threads.
    spin: Option<u64>,
}

fn usage() -> ! {
    eprintln!("usage: soak --seconds N [--threads T] [--pages P] [--inherit]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        seconds: 0,
        threads: 1,
        pages: 1024,
        inherit: false,
        spin: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match flag.as_str() {
            "--seconds" => a.seconds = value(),
            "--threads" => a.threads = value(),
            "--pages" => a.pages = value() as usize,
            "--spin" => a.spin = Some(value()),
            "--inherit" => a.inherit = true,
            _ => usage(),
        }
    }
    if a.spin.is_none() && (a.seconds == 0 || a.threads == 0) {
        usage();
    }
    a
}

/// The target: `threads` threads burning CPU until the soak kills the process.
fn spin(threads: u64) -> ! {
    for _ in 0..threads {
        std::thread::spawn(|| {
            let mut x = 0u64;
            loop {
                for i in 0..1_000_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i * i));
                }
            }
        });
    }
    loop {
        std::thread::park();
    }
}

fn main() -> ExitCode {
    let args = parse_args();
    if let Some(t) = args.spin {
        spin(t);
    }
    match soak(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

/// Per counter (a thread, or with inherited per-CPU counters a thread on one CPU): the
/// count its last sample carried and how many samples it had, to see the periods the
/// hrtimer skipped.
#[derive(Default)]
struct Skips {
    counters: HashMap<(u32, u32), (u64, u64)>,
}

impl Skips {
    fn sample(&mut self, key: (u32, u32), value: u64) {
        let e = self.counters.entry(key).or_default();
        *e = (value, e.1 + 1);
    }

    /// Periods each counter passed up to its last sample, minus its samples: periods
    /// with no sample (hrtimer skips, and samples the kernel lost). Rounded to the
    /// nearest period per counter, since a sample lands a little after its period.
    fn unsampled(&self, period: u64) -> u64 {
        self.counters
            .values()
            .map(|&(value, n)| ((value + period / 2) / period).saturating_sub(n))
            .sum()
    }
}

fn soak(args: &Args) -> perfring::Result<bool> {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100_000);
    // The shortest period the rate cap allows (cpu-clock counts nanoseconds).
    let period = 1_000_000_000 / max;
    let event = Counter::builder("cpu-clock")?
        .period(period)
        .sample(SampleType::IP | SampleType::TID | SampleType::CPU | SampleType::READ);
    let exe = std::env::current_exe().expect("the soak's own path");
    let target = Command::new(exe)
        .arg("--spin")
        .arg(args.threads.to_string());
    let mut sampler = Sampler::builder(Target::Command(target))
        .event(event)
        .ring_size(RingSize::Pages(args.pages))
        .per_thread(!args.inherit)
        .start()?;
    let t = args.threads;
    println!(
        "soak: cpu-clock every {period} ns (perf_event_max_sample_rate {max}) on {t} threads, \
         {} counters, {} pages per ring, {} s",
        if args.inherit {
            "inherited"
        } else {
            "per-thread"
        },
        args.pages,
        args.seconds
    );
    println!(
        "{:>5} {:>12} {:>10} {:>9} {:>12} {:>10} {:>10} {:>8}",
        "s", "seen", "lost", "throttled", "kernel", "skipped", "missing", "in-flight"
    );
    let (mut seen, mut skips) = (0u64, Skips::default());
    let inherit = args.inherit;
    let on_record = |d: perfring::sampler::Delivery<'_>, seen: &mut u64, skips: &mut Skips| {
        if let (Some(0), RecordKind::Sample(s)) = (d.event, d.record.kind()) {
            *seen += 1;
            if let (Some(tid), Some(v)) = (s.tid(), s.read().and_then(|r| r.get(0))) {
                // An inherited counter is copied per thread *and CPU*: each copy counts
                // (and carries in its samples) only its own share.
                let cpu = if inherit { s.cpu().unwrap_or(0) } else { 0 };
                skips.sample((tid, cpu), v.value);
            }
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let start = Instant::now();
    let mut prev_k1: Option<u64> = None;
    let mut ok = true;
    for second in 1..=args.seconds {
        let tick = start + Duration::from_secs(second);
        while Instant::now() < tick {
            let left = tick.saturating_duration_since(Instant::now());
            sampler.poll(Some(left.min(Duration::from_millis(100))), |d| {
                on_record(d, &mut seen, &mut skips)
            })?;
        }
        let k1 = sampler.read(0)?.value / period;
        sampler.drain(|d| on_record(d, &mut seen, &mut skips))?;
        let k2 = sampler.read(0)?.value / period;
        let st = sampler.stats();
        let lost = st.lost + st.lost_samples;
        let delivered = seen + lost;
        // Lost samples are among the unsampled periods; the rest the hrtimer skipped.
        let skipped = skips.unsampled(period).saturating_sub(lost);
        // Periods counted by the kernel a second ago and not delivered, lost or
        // skipped now.
        let missing = prev_k1.map_or(0, |k| k.saturating_sub(delivered + skipped));
        // Per thread: a period under way, and the rounding of its skips.
        // (T spinning threads and the target's main thread, which waits; inherited
        // counters have a copy per thread per CPU, each with its own period.)
        let in_flight = 2 * (t + 1) * if inherit { cpus } else { 1 };
        println!(
            "{second:>5} {seen:>12} {lost:>10} {:>9} {k1:>12} {:>10} {missing:>10} {in_flight:>8}",
            st.throttled, skipped
        );
        if delivered + skipped > k2 + in_flight {
            println!(
                "FAIL: {delivered} delivered + {skipped} skipped > kernel count {k2} + {in_flight}"
            );
            ok = false;
        }
        if missing > in_flight {
            println!("FAIL: {missing} periods counted a second ago are missing");
            ok = false;
        }
        if st.undecoded > 0 {
            println!("FAIL: {} records could not be decoded", st.undecoded);
            ok = false;
        }
        if !ok {
            break;
        }
        prev_k1 = Some(k1);
    }
    sampler.terminate(Duration::from_secs(1));
    let st = sampler.stats();
    println!(
        "{} after {:.1} s: {seen} seen, {} lost, {} throttled, {} skipped by the hrtimer, {} wake-ups",
        if ok { "OK" } else { "FAILED" },
        start.elapsed().as_secs_f64(),
        st.lost + st.lost_samples,
        st.throttled,
        skips.unsampled(period).saturating_sub(st.lost + st.lost_samples),
        sampler.wakeups()
    );
    Ok(ok)
}
