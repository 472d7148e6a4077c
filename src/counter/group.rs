//! [`Group`]: a leader and members, scheduled onto the PMU together and read at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

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

    /// Hands the counters out, leader first, so that each can be attached to a notifier
    /// ([`ThreadSignal`](crate::notify::ThreadSignal) with its own token,
    /// [`Sigtrap`](crate::notify::Sigtrap) with its own `sig_data`): the notification
    /// then says which member overflowed. The kernel group stays as it is as long as
    /// the leader stays open; take a [`reader`](Self::reader) first to read the group
    /// afterwards (also from a signal callback), and enable or disable it through the
    /// leader with [`Counter::enable`] (members were opened enabled, so the leader's
    /// state decides).
    pub fn into_counters(self) -> Vec<Counter> {
        self.counters
    }

    /// An allocation-free reader of the whole group, safe in a signal callback.
    pub fn reader(&self) -> GroupReader {
        GroupReader::new(self.leader().as_raw_fd(), self.format)
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

/// Reads a group through its leader's fd into a caller's buffer: no allocation, no
/// lock, only `read(2)` (async-signal-safe, POSIX), so it may run in a signal
/// callback — e.g. to read every member when one of them overflows.
///
/// It is a plain copy of the leader's fd *number* and read format, so it can live in a
/// `static` or a callback's `data`. Keep the leader open while using it: after the
/// leader is closed a read fails with `EBADF` (or reads whatever file reuses the
/// number, which fails to parse) — never memory-unsafe.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, Group};
/// let mut group = Group::new(Counter::builder("task-clock")?)?;
/// group.add(Counter::builder("page-faults")?)?;
/// let reader = group.reader();
/// let mut buf = [0u64; perfring::counter::GroupReader::words_for(2)];
/// let view = reader.read(&mut buf)?;
/// assert_eq!(view.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupReader {
    fd: RawFd,
    format: ReadFormat,
}

impl GroupReader {
    pub(crate) fn new(fd: RawFd, format: ReadFormat) -> GroupReader {
        GroupReader { fd, format }
    }

    /// Buffer words that always suffice for `members` counters, whatever the format:
    /// `nr, enabled, running` then `value, id, lost` per member.
    pub const fn words_for(members: usize) -> usize {
        3 + 3 * members
    }

    /// The leader's fd number.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The group's read format.
    pub fn format(&self) -> ReadFormat {
        self.format
    }

    /// `read(2)` of the leader into `buf`, viewed in place.
    ///
    /// # Errors
    /// The `read(2)` errno as an [`io::Error`] (no allocation): `ENOSPC` if `buf` is too
    /// small (see [`words_for`](Self::words_for)), `EBADF` if the leader is closed;
    /// `UnexpectedEof` if the words do not parse as a group read.
    pub fn read<'b>(&self, buf: &'b mut [u64]) -> io::Result<GroupView<'b>> {
        let bytes = std::mem::size_of_val(buf);
        // SAFETY: `buf` is valid for writes of `bytes` bytes for the call's duration;
        // read(2) writes at most that many. A closed or reused fd number only makes the
        // call fail or return other bytes, both handled below.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), bytes) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let words = &buf[..n as usize / 8];
        GroupView::parse(words, self.format).ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
    }
}

/// A `PERF_FORMAT_GROUP` read, viewed in place over the words the kernel wrote:
/// `nr, [time_enabled], [time_running], {value, [id], [lost]} × nr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupView<'a> {
    words: &'a [u64],
    format: ReadFormat,
    nr: usize,
    header: usize,
    per: usize,
}

impl<'a> GroupView<'a> {
    /// Views `words` laid out per `format` (`None` if too short).
    pub fn parse(words: &'a [u64], format: ReadFormat) -> Option<GroupView<'a>> {
        let nr = usize::try_from(*words.first()?).ok()?;
        let header = 1
            + usize::from(format.contains(ReadFormat::TOTAL_TIME_ENABLED))
            + usize::from(format.contains(ReadFormat::TOTAL_TIME_RUNNING));
        let per = 1
            + usize::from(format.contains(ReadFormat::ID))
            + usize::from(format.contains(ReadFormat::LOST));
        let need = header.checked_add(nr.checked_mul(per)?)?;
        (words.len() >= need).then_some(GroupView {
            words: &words[..need],
            format,
            nr,
            header,
            per,
        })
    }

    /// Members read (the kernel's `nr`), leader first.
    pub fn len(&self) -> usize {
        self.nr
    }

    /// Whether no member was read.
    pub fn is_empty(&self) -> bool {
        self.nr == 0
    }

    /// Nanoseconds the group was enabled.
    pub fn time_enabled(&self) -> Option<u64> {
        self.format
            .contains(ReadFormat::TOTAL_TIME_ENABLED)
            .then(|| self.words[1])
    }

    /// Nanoseconds the group was on the PMU.
    pub fn time_running(&self) -> Option<u64> {
        let i = 1 + usize::from(self.format.contains(ReadFormat::TOTAL_TIME_ENABLED));
        self.format
            .contains(ReadFormat::TOTAL_TIME_RUNNING)
            .then(|| self.words[i])
    }

    /// Member `i` (in the order members were added, leader first).
    pub fn get(&self, i: usize) -> Option<GroupValue> {
        if i >= self.nr {
            return None;
        }
        let c = &self.words[self.header + i * self.per..][..self.per];
        let has_id = self.format.contains(ReadFormat::ID);
        Some(GroupValue {
            value: c[0],
            id: has_id.then(|| c[1]),
            lost: self
                .format
                .contains(ReadFormat::LOST)
                .then(|| c[1 + usize::from(has_id)]),
        })
    }

    /// The value of the member whose id is `id` (ids from [`Counter::id`]).
    pub fn by_id(&self, id: u64) -> Option<GroupValue> {
        self.iter().find(|v| v.id == Some(id))
    }

    /// Every member, leader first.
    pub fn iter(&self) -> impl Iterator<Item = GroupValue> + '_ {
        (0..self.nr).filter_map(|i| self.get(i))
    }
}
