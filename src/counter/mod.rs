//! The open counter: one perf_event fd, its controls (`ioctl`s) and its reads.
//!
//! A [`Counter`] owns its fd and never touches a mapping; [`crate::ring`] maps it.
//!
//! # Safety
//! The unsafe code is `read(2)` into a buffer we own (also by fd number, in
//! [`GroupReader`]), ioctls whose pointer argument is a local living across the call,
//! and `getrlimit`/`setrlimit` with a local (in `diagnose` and `builder`).
#![allow(unsafe_code)]

mod builder;
pub mod diagnose;
pub mod explain;
mod flags;
mod group;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

pub use builder::{Builder, Scope};
pub use flags::{ReadFormat, SampleType};
pub use group::{Group, GroupCounts, GroupReader, GroupValue, GroupView};

use crate::event::Event;
use crate::sys;
use crate::Result;
use diagnose::ioctl_error;

/// `clock_gettime(clockid)` in nanoseconds: "now" on the clock that samples of a
/// counter built with [`Builder::clockid`] are stamped with. `0` if the clock is invalid.
///
/// # Examples
/// ```
/// let a = perfring::counter::clock_ns(libc::CLOCK_MONOTONIC);
/// let b = perfring::counter::clock_ns(libc::CLOCK_MONOTONIC);
/// assert!(a > 0 && b >= a);
/// ```
#[doc(alias = "clock_gettime")]
pub fn clock_ns(clockid: i32) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    if unsafe { libc::clock_gettime(clockid, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The online CPUs, from `/sys/devices/system/cpu/online`: what a per-CPU counter
/// needs, e.g. one [`Scope::ThreadOnCpu`] per CPU for an inherited counter with a
/// ring (the kernel refuses to map an inherited counter opened on every CPU, `cpu = -1`).
///
/// # Errors
/// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) when the file cannot be read or
/// parsed (no sysfs).
pub fn online_cpus() -> Result<Vec<i32>> {
    const PATH: &str = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(PATH).map_err(|e| {
        crate::Error::new(
            crate::ErrorKind::NotFound,
            format!("read {PATH}"),
            e.to_string(),
        )
        .with_fix("mount sysfs on /sys")
    })?;
    parse_cpu_list(&text).ok_or_else(|| {
        crate::Error::new(
            crate::ErrorKind::NotFound,
            format!("read {PATH}"),
            format!("not a CPU list: {:?}", text.trim()),
        )
    })
}

/// Parses a kernel CPU list such as `0-3,6,8-9` (`None` if malformed).
pub fn parse_cpu_list(text: &str) -> Option<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// An open perf_event: counts, overflows per its period, and is controlled by ioctls.
///
/// Dropping it closes the fd, which stops the event and frees its kernel state once
/// no other fd refers to it: a copy in a forked child only closes that copy (dropping
/// a `Counter` makes no ioctl), so a child that exits never changes what its parent's
/// counter does.
///
/// # Examples
/// ```no_run
/// let mut counter = perfring::Counter::builder("task-clock")?.open()?;
/// counter.enable()?;
/// let n: u64 = (0..1_000_000u64).sum();
/// counter.disable()?;
/// let c = counter.read()?;
/// println!("{} ns of task-clock (scaled: {:.0}) for {n}", c.value, c.scaled());
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct Counter {
    fd: OwnedFd,
    event: Event,
    attr: sys::perf_event_attr,
    target: Scope,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter")
            .field("fd", &self.fd)
            .field("event", &self.event)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Counter {
    /// A [`Builder`] for the event written in perf's syntax (`"cpu-clock"`, `"mem:0x1000:x"`).
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`](crate::ErrorKind::BadEvent) when the string does not parse.
    pub fn builder(event: &str) -> Result<Builder> {
        Ok(Builder::new(Event::parse(event)?))
    }

    /// A [`Builder`] for an already described event.
    pub fn builder_for(event: Event) -> Builder {
        Builder::new(event)
    }

    pub(crate) fn from_parts(
        fd: OwnedFd,
        event: Event,
        attr: sys::perf_event_attr,
        target: Scope,
    ) -> Self {
        Counter {
            fd,
            event,
            attr,
            target,
        }
    }

    /// The event this counter counts.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The attr the counter was opened with.
    pub fn attr(&self) -> &sys::perf_event_attr {
        &self.attr
    }

    /// Whom the counter watches.
    pub fn target(&self) -> Scope {
        self.target
    }

    fn ioctl(&self, name: &str, request: u64, arg: libc::c_ulong) -> Result<()> {
        sys::ioctl_int(self.fd.as_fd(), request, arg)
            .map(drop)
            .map_err(|e| ioctl_error(name, self.event.name(), self.attr.inherit() != 0, e))
    }

    /// Start counting (and overflowing).
    #[doc(alias = "PERF_EVENT_IOC_ENABLE")]
    pub fn enable(&self) -> Result<()> {
        self.ioctl("ENABLE", sys::ioctl::ENABLE, 0)
    }

    /// Stop counting; the value is kept.
    #[doc(alias = "PERF_EVENT_IOC_DISABLE")]
    pub fn disable(&self) -> Result<()> {
        self.ioctl("DISABLE", sys::ioctl::DISABLE, 0)
    }

    /// Zero the count (not `time_enabled`/`time_running`).
    #[doc(alias = "PERF_EVENT_IOC_RESET")]
    pub fn reset(&self) -> Result<()> {
        self.ioctl("RESET", sys::ioctl::RESET, 0)
    }

    /// `ioctl(fd, PERF_EVENT_IOC_REFRESH, n)`: allow `n` more overflows, then disable.
    ///
    /// Each overflow decrements the budget; all but the last report `POLL_IN`, the last
    /// `POLL_HUP`, and the counter is then disabled. Enables the counter.
    ///
    /// # Errors
    /// - [`ErrorKind::Inherited`](crate::ErrorKind::Inherited) (`EINVAL`) on an inherited
    ///   counter; use [`enable`](Self::enable).
    /// - Any other errno, with the operation and the fix.
    #[doc(alias = "PERF_EVENT_IOC_REFRESH")]
    pub fn refresh(&self, n: u32) -> Result<()> {
        self.ioctl("REFRESH", sys::ioctl::REFRESH, n.into())
    }

    /// Change the sample period (or frequency, for a `-F` counter) while running.
    ///
    /// `PERF_EVENT_IOC_PERIOD` takes a *pointer* to the new value; passing the value
    /// itself is a classic bug (it reads as an address and fails with `EFAULT`).
    #[doc(alias = "PERF_EVENT_IOC_PERIOD")]
    pub fn set_period(&self, period: u64) -> Result<()> {
        let mut value = period;
        // SAFETY: PERIOD reads one u64 through the pointer; `value` lives across the call.
        unsafe { sys::ioctl_ptr(self.fd.as_fd(), sys::ioctl::PERIOD, &mut value) }
            .map(drop)
            .map_err(|e| ioctl_error("PERIOD", self.event.name(), false, e))
    }

    /// The kernel's id of this event, as found in samples' `ID`/`IDENTIFIER` fields.
    #[doc(alias = "PERF_EVENT_IOC_ID")]
    pub fn id(&self) -> Result<u64> {
        let mut id = 0u64;
        // SAFETY: ID writes one u64 through the pointer; `id` lives across the call.
        unsafe { sys::ioctl_ptr(self.fd.as_fd(), sys::ioctl::ID, &mut id) }
            .map_err(|e| ioctl_error("ID", self.event.name(), false, e))?;
        Ok(id)
    }

    /// Send this counter's records to `target`'s ring instead of a ring of its own
    /// (same task/CPU). Records are then told apart by their sample id.
    #[doc(alias = "PERF_EVENT_IOC_SET_OUTPUT")]
    pub fn set_output(&self, target: BorrowedFd<'_>) -> Result<()> {
        self.ioctl(
            "SET_OUTPUT",
            sys::ioctl::SET_OUTPUT,
            target.as_raw_fd() as libc::c_ulong,
        )
    }

    /// Stop (`true`) or resume (`false`) writing records to the ring; counting goes on.
    #[doc(alias = "PERF_EVENT_IOC_PAUSE_OUTPUT")]
    pub fn pause_output(&self, pause: bool) -> Result<()> {
        self.ioctl("PAUSE_OUTPUT", sys::ioctl::PAUSE_OUTPUT, pause.into())
    }

    /// Change a breakpoint's address, length or type in place (Linux 4.17; breakpoints only).
    #[doc(alias = "PERF_EVENT_IOC_MODIFY_ATTRIBUTES")]
    pub fn modify_attributes(&mut self, attr: &sys::perf_event_attr) -> Result<()> {
        let mut copy = *attr;
        // SAFETY: MODIFY_ATTRIBUTES reads a perf_event_attr of `copy.size` bytes through
        // the pointer; `copy` is a full, initialised attr living across the call.
        unsafe { sys::ioctl_ptr(self.fd.as_fd(), sys::ioctl::MODIFY_ATTRIBUTES, &mut copy) }
            .map_err(|e| ioctl_error("MODIFY_ATTRIBUTES", self.event.name(), false, e))?;
        self.attr = *attr;
        Ok(())
    }

    /// Reads the count with `time_enabled`/`time_running` as the read format asks.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) on a counter
    /// opened with [`ReadFormat::GROUP`] (the kernel then writes the whole group, which a
    /// [`Count`] cannot hold): use [`Group::read`], or [`Counter::group_reader`] for a
    /// read without allocation.
    pub fn read(&self) -> Result<Count> {
        if ReadFormat::from_bits(self.attr.read_format).contains(ReadFormat::GROUP) {
            return Err(crate::Error::new(
                crate::ErrorKind::InvalidArgument,
                format!("read({})", self.event.name()),
                "the counter was opened with ReadFormat::GROUP, so read(2) returns the whole group",
            )
            .with_fix(
                "use Group::read, or Counter::group_reader().read(&mut buf) (no allocation)",
            ));
        }
        let mut buf = [0u64; 5];
        let n = self.read_into(&mut buf)?;
        Count::parse(&buf[..n], ReadFormat::from_bits(self.attr.read_format)).ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::Decode,
                format!("read({})", self.event.name()),
                format!(
                    "short read of {} u64s for read_format {:#x}",
                    n, self.attr.read_format
                ),
            )
        })
    }

    /// A copyable, allocation-free reader of this counter's group (its leader's
    /// `read(2)` with [`ReadFormat::GROUP`]); `None` if it was not opened with `GROUP`.
    /// Usable in a signal callback (see [`GroupReader`]).
    pub fn group_reader(&self) -> Option<GroupReader> {
        let format = ReadFormat::from_bits(self.attr.read_format);
        format
            .contains(ReadFormat::GROUP)
            .then(|| GroupReader::new(self.fd.as_raw_fd(), format))
    }

    /// `read(2)` into `buf`, returning how many u64s the kernel wrote.
    pub(crate) fn read_into(&self, buf: &mut [u64]) -> Result<usize> {
        let bytes = std::mem::size_of_val(buf);
        // SAFETY: `buf` is valid for writes of `bytes` bytes; the fd is open.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            let e = if err.raw_os_error() == Some(libc::ENOSPC) {
                crate::Error::new(
                    crate::ErrorKind::InvalidArgument,
                    format!("read({})", self.event.name()),
                    "the read buffer is too small for this read_format",
                )
            } else {
                crate::Error::from_errno(format!("read({})", self.event.name()), err)
            };
            return Err(e);
        }
        Ok(n as usize / 8)
    }
}

impl AsFd for Counter {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Counter {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One counter's value from `read(2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    /// The raw count.
    pub value: u64,
    /// Nanoseconds the event was enabled (with [`ReadFormat::TOTAL_TIME_ENABLED`]).
    pub time_enabled: Option<u64>,
    /// Nanoseconds it was actually on the PMU (with [`ReadFormat::TOTAL_TIME_RUNNING`]).
    pub time_running: Option<u64>,
    /// The event id (with [`ReadFormat::ID`]).
    pub id: Option<u64>,
    /// Samples lost (with [`ReadFormat::LOST`], Linux 6.0).
    pub lost: Option<u64>,
}

impl Count {
    /// Parses a non-group read per `format` (`value, [enabled], [running], [id], [lost]`).
    pub fn parse(words: &[u64], format: ReadFormat) -> Option<Count> {
        let mut it = words.iter().copied();
        let value = it.next()?;
        // Each optional word is present iff its flag is set, in this order.
        let mut take = |flag: ReadFormat| -> Option<Option<u64>> {
            if format.contains(flag) {
                it.next().map(Some)
            } else {
                Some(None)
            }
        };
        Some(Count {
            value,
            time_enabled: take(ReadFormat::TOTAL_TIME_ENABLED)?,
            time_running: take(ReadFormat::TOTAL_TIME_RUNNING)?,
            id: take(ReadFormat::ID)?,
            lost: take(ReadFormat::LOST)?,
        })
    }

    /// The value scaled for multiplexing: `value × enabled / running`, as `perf stat` does.
    /// Equals `value` when the event ran the whole time or times were not requested.
    pub fn scaled(&self) -> f64 {
        scale(self.value, self.time_enabled, self.time_running)
    }
}

pub(crate) fn scale(value: u64, enabled: Option<u64>, running: Option<u64>) -> f64 {
    match (enabled, running) {
        (Some(e), Some(r)) if r > 0 && r < e => value as f64 * (e as f64 / r as f64),
        (Some(_), Some(0)) => 0.0,
        _ => value as f64,
    }
}

/// An attr's `sample_period` (or `sample_freq`, under `freq`: the two share a union),
/// read without `unsafe` through the union's bytes.
///
/// # Examples
/// ```
/// let b = perfring::Counter::builder("cpu-clock")?.period(12345);
/// assert_eq!(perfring::counter::sample_period(b.attr()), 12345);
/// # Ok::<(), perfring::Error>(())
/// ```
pub fn sample_period(attr: &crate::sys::perf_event_attr) -> u64 {
    zerocopy::transmute!(attr.__bindgen_anon_1)
}

#[cfg(test)]
mod cpu_list_tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(super::online_cpus().unwrap().contains(&0));
    }
}

#[cfg(test)]
mod read_tests {
    use super::{Count, GroupCounts, ReadFormat};

    /// Multiplexing cannot be provoked without a hardware PMU (software events are never
    /// multiplexed), so the reads are checked on words laid out as the kernel writes them.
    #[test]
    fn multiplexed_counts_scale_like_perf_stat() {
        let f = ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING | ReadFormat::ID;
        let c = Count::parse(&[1000, 400, 100, 7], f).unwrap();
        assert_eq!(
            (c.value, c.time_enabled, c.time_running, c.id),
            (1000, Some(400), Some(100), Some(7))
        );
        assert_eq!(c.scaled(), 4000.0, "ran a quarter of the time");
        assert_eq!(
            Count::parse(&[5, 10, 0, 7], f).unwrap().scaled(),
            0.0,
            "never ran"
        );
        assert_eq!(Count::parse(&[5, 10, 10, 7], f).unwrap().scaled(), 5.0);
        assert!(Count::parse(&[5, 10], f).is_none(), "short read");

        let g = f | ReadFormat::GROUP | ReadFormat::LOST;
        // nr, enabled, running, then {value, id, lost} per member.
        let words = [2, 300, 100, 11, 1, 0, 22, 2, 5];
        let counts = GroupCounts::parse(&words, g).unwrap();
        assert_eq!(counts.values.len(), 2);
        assert_eq!(
            (
                counts.values[1].value,
                counts.values[1].id,
                counts.values[1].lost
            ),
            (22, Some(2), Some(5))
        );
        assert_eq!(counts.scaled(0), Some(33.0));
        assert!(
            GroupCounts::parse(&words[..8], g).is_none(),
            "short group read"
        );
    }
}
