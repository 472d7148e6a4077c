//! [`Group`]: a leader and members, scheduled onto the PMU together and read at once.

use std::os::fd::AsFd;

use super::{scale, Builder, Counter, ReadFormat};
use crate::sys;
use crate::{Error, ErrorKind, Result};

/// Counters scheduled together and read in one `read(2)` through the leader.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, Group};
/// let mut group = Group::new(Counter::builder("task-clock")?)?;
/// group.add(Counter::builder("page-faults")?)?;
/// group.enable()?;
/// let v: Vec<u8> = vec![1; 1 << 20];
/// group.disable()?;
/// let counts = group.read()?;
/// println!("{:?} ({} bytes touched)", counts.values, v.len());
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug)]
pub struct Group {
    counters: Vec<Counter>,
    format: ReadFormat,
}

/// One group read: shared times and each member's value, leader first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupCounts {
    /// Nanoseconds the group was enabled.
    pub time_enabled: Option<u64>,
    /// Nanoseconds the group was on the PMU.
    pub time_running: Option<u64>,
    /// `(id, value, lost)` per member, in the order they were added.
    pub values: Vec<GroupValue>,
}

/// One member's value in a [`GroupCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupValue {
    /// The raw count.
    pub value: u64,
    /// The member's id (always requested by [`Group`]).
    pub id: Option<u64>,
    /// Lost samples, with [`ReadFormat::LOST`].
    pub lost: Option<u64>,
}

impl GroupCounts {
    /// Parses a `PERF_FORMAT_GROUP` read: `nr, [enabled], [running], {value, [id], [lost]} × nr`.
    pub fn parse(words: &[u64], format: ReadFormat) -> Option<GroupCounts> {
        let mut it = words.iter().copied();
        let nr = it.next()?;
        let mut opt = |flag| {
            if format.contains(flag) {
                it.next().map(Some)
            } else {
                Some(None)
            }
        };
        let time_enabled = opt(ReadFormat::TOTAL_TIME_ENABLED)?;
        let time_running = opt(ReadFormat::TOTAL_TIME_RUNNING)?;
        let per = 1
            + usize::from(format.contains(ReadFormat::ID))
            + usize::from(format.contains(ReadFormat::LOST));
        let rest: Vec<u64> = it.collect();
        let nr = usize::try_from(nr).ok()?;
        if rest.len() < nr.checked_mul(per)? {
            return None;
        }
        let values = rest
            .chunks_exact(per)
            .take(nr)
            .map(|c| {
                let mut i = c.iter().copied();
                let value = i.next().unwrap_or(0);
                let id = format
                    .contains(ReadFormat::ID)
                    .then(|| i.next().unwrap_or(0));
                let lost = format
                    .contains(ReadFormat::LOST)
                    .then(|| i.next().unwrap_or(0));
                GroupValue { value, id, lost }
            })
            .collect();
        Some(GroupCounts {
            time_enabled,
            time_running,
            values,
        })
    }

    /// Member `i`'s value scaled for multiplexing.
    pub fn scaled(&self, i: usize) -> Option<f64> {
        let v = self.values.get(i)?;
        Some(scale(v.value, self.time_enabled, self.time_running))
    }
}

impl Group {
    /// Opens the leader with `read_format` GROUP|ID|times. Members are added with [`add`](Self::add).
    pub fn new(leader: Builder) -> Result<Group> {
        let format = ReadFormat::from_bits(leader.attr().read_format)
            | ReadFormat::GROUP
            | ReadFormat::ID
            | ReadFormat::TOTAL_TIME_ENABLED
            | ReadFormat::TOTAL_TIME_RUNNING;
        let leader = leader.read_format(format).open()?;
        Ok(Group {
            counters: vec![leader],
            format,
        })
    }

    /// Opens `member` in the group (same target as the leader). Members start enabled:
    /// the leader's state decides when the group counts.
    pub fn add(&mut self, member: Builder) -> Result<&Counter> {
        let leader = &self.counters[0];
        let member = member
            .target(leader.target())
            .read_format(self.format)
            .enabled(true)
            .group_fd_raw(leader.as_fd())
            .open()?;
        self.counters.push(member);
        Ok(self.counters.last().expect("just pushed"))
    }

    /// The leader.
    pub fn leader(&self) -> &Counter {
        &self.counters[0]
    }

    /// All counters, leader first.
    pub fn counters(&self) -> &[Counter] {
        &self.counters
    }

    fn group_ioctl(&self, name: &str, request: u64) -> Result<()> {
        let leader = self.leader();
        sys::ioctl_int(leader.as_fd(), request, sys::PERF_IOC_FLAG_GROUP.into())
            .map(drop)
            .map_err(|e| super::diagnose::ioctl_error(name, leader.event().name(), false, e))
    }

    /// Enables the whole group at once.
    pub fn enable(&self) -> Result<()> {
        self.group_ioctl("ENABLE", sys::ioctl::ENABLE)
    }

    /// Disables the whole group at once.
    pub fn disable(&self) -> Result<()> {
        self.group_ioctl("DISABLE", sys::ioctl::DISABLE)
    }

    /// Resets every member.
    pub fn reset(&self) -> Result<()> {
        self.group_ioctl("RESET", sys::ioctl::RESET)
    }

    /// Reads every member in one `read(2)`.
    pub fn read(&self) -> Result<GroupCounts> {
        let mut buf = vec![0u64; 3 + 3 * self.counters.len()];
        let n = self.leader().read_into(&mut buf)?;
        GroupCounts::parse(&buf[..n], self.format).ok_or_else(|| {
            Error::new(
                ErrorKind::Decode,
                format!("read(group of {})", self.leader().event().name()),
                format!("short group read: {n} u64s"),
            )
        })
    }
}
