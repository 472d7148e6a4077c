//! [`Builder`]: a `perf_event_attr` assembled like `perf`'s command-line options.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use zerocopy::FromZeros;

use super::diagnose::{open_error, OpenContext};
use super::{Counter, ReadFormat, SampleType};
use crate::event::Event;
use crate::sys;
use crate::Result;

/// Who or what a counter watches: perf's `-p`/`-t`, `-C`, or the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The calling thread (`pid = 0, cpu = -1`): perfring's default.
    CallingThread,
    /// One thread or process by id, on any CPU (`pid = tid, cpu = -1`). With
    /// [`Builder::inherit`], threads and children it creates later are counted too.
    Thread(libc::pid_t),
    /// Everything on one CPU (`pid = -1, cpu = N`); needs `perf_event_paranoid <= 0`.
    Cpu(i32),
    /// One thread, only while it runs on one CPU.
    ThreadOnCpu(libc::pid_t, i32),
}

impl Scope {
    fn pid_cpu(self) -> (libc::pid_t, i32) {
        match self {
            Scope::CallingThread => (0, -1),
            Scope::Thread(tid) => (tid, -1),
            Scope::Cpu(cpu) => (-1, cpu),
            Scope::ThreadOnCpu(tid, cpu) => (tid, cpu),
        }
    }
}

/// Builds a [`Counter`]. Methods echo `perf record` options: [`period`](Self::period)
/// is `-c`, [`frequency`](Self::frequency) is `-F`, [`target`](Self::target) is `-p`/`-C`.
///
/// The counter opens **disabled** unless [`enabled`](Self::enabled) is set, so that
/// notifiers and rings can be attached before the first overflow.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, SampleType};
/// let counter = Counter::builder("cpu-clock")?
///     .period(100_000) // one overflow per 100 µs of CPU time
///     .sample(SampleType::IP | SampleType::TID | SampleType::TIME)
///     .wakeup_events(1)
///     .open()?;
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    event: Event,
    attr: sys::perf_event_attr,
    target: Scope,
    group_fd: i32,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("event", &self.event)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Starts from `event` with a zeroed attr (so newer kernel fields stay zero).
    pub fn new(event: Event) -> Builder {
        let mut attr = sys::perf_event_attr::new_zeroed();
        attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
        event.apply(&mut attr);
        attr.set_disabled(1);
        attr.read_format =
            (ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING | ReadFormat::ID)
                .bits();
        Builder {
            event,
            attr,
            target: Scope::CallingThread,
            group_fd: -1,
        }
    }

    /// The event being configured.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The `perf_event_attr` that [`open`](Self::open) will pass to the kernel.
    pub fn attr(&self) -> &sys::perf_event_attr {
        &self.attr
    }

    /// Mutable access to the attr, for fields perfring has no method for.
    pub fn attr_mut(&mut self) -> &mut sys::perf_event_attr {
        &mut self.attr
    }

    /// The target and `(pid, cpu)` the counter will be opened with.
    pub fn target_of(&self) -> Scope {
        self.target
    }

    /// Whom to watch (default: the calling thread).
    pub fn target(mut self, target: Scope) -> Self {
        self.target = target;
        self
    }

    /// Overflow every `n` events (`perf -c n`): `sample_period`.
    #[doc(alias = "sample_period")]
    pub fn period(mut self, n: u64) -> Self {
        self.attr.__bindgen_anon_1.sample_period = n;
        self.attr.set_freq(0);
        self
    }

    /// Overflow about `hz` times a second (`perf -F hz`): `freq = 1, sample_freq`.
    #[doc(alias = "sample_freq")]
    pub fn frequency(mut self, hz: u64) -> Self {
        self.attr.__bindgen_anon_1.sample_freq = hz;
        self.attr.set_freq(1);
        self
    }

    /// What each `PERF_RECORD_SAMPLE` carries.
    pub fn sample(mut self, sample: SampleType) -> Self {
        self.attr.sample_type = sample.bits();
        self
    }

    /// What [`Counter::read`] and samples with [`SampleType::READ`] carry.
    pub fn read_format(mut self, format: ReadFormat) -> Self {
        self.attr.read_format = format.bits();
        self
    }

    /// Wake a poller every `n` samples: `wakeup_events`.
    ///
    /// Signals (`O_ASYNC`, see [`crate::notify::ThreadSignal`]) are not thinned by this:
    /// the kernel queues one on every overflow (measured in `tests/signal.rs`).
    pub fn wakeup_events(mut self, n: u32) -> Self {
        self.attr.set_watermark(0);
        self.attr.__bindgen_anon_2.wakeup_events = n;
        self
    }

    /// Wake a poller once `bytes` of records are in the ring: `watermark, wakeup_watermark`.
    pub fn wakeup_watermark(mut self, bytes: u32) -> Self {
        self.attr.set_watermark(1);
        self.attr.__bindgen_anon_2.wakeup_watermark = bytes;
        self
    }

    /// Stamp samples' `time` with the POSIX clock `clockid` (e.g. `libc::CLOCK_MONOTONIC`)
    /// instead of the kernel's `local_clock`: `use_clockid = 1, clockid`. Compare with
    /// [`clock_ns`](super::clock_ns) of the same clock.
    #[doc(alias = "use_clockid")]
    pub fn clockid(mut self, clockid: i32) -> Self {
        self.attr.set_use_clockid(1);
        self.attr.clockid = clockid;
        self
    }

    /// Count child threads and processes created after opening (`perf` default; `-i` off).
    pub fn inherit(mut self, yes: bool) -> Self {
        self.attr.set_inherit(yes.into());
        self
    }

    /// With [`inherit`](Self::inherit): threads only, not child processes (Linux 5.13).
    pub fn inherit_thread(mut self, yes: bool) -> Self {
        self.attr.set_inherit_thread(yes.into());
        self
    }

    /// Start counting when the target calls `exec` (for a command started stopped).
    pub fn enable_on_exec(mut self, yes: bool) -> Self {
        self.attr.set_enable_on_exec(yes.into());
        self
    }

    /// Remove the counter from a task when it calls `exec` (Linux 5.13).
    pub fn remove_on_exec(mut self, yes: bool) -> Self {
        self.attr.set_remove_on_exec(yes.into());
        self
    }

    /// Open enabled (counting at once) rather than disabled.
    pub fn enabled(mut self, yes: bool) -> Self {
        self.attr.set_disabled((!yes).into());
        self
    }

    /// Don't count user space (`:k`).
    pub fn exclude_user(mut self, yes: bool) -> Self {
        self.attr.set_exclude_user(yes.into());
        self
    }

    /// Don't count the kernel (`:u`); required at `perf_event_paranoid` 2 for most events.
    pub fn exclude_kernel(mut self, yes: bool) -> Self {
        self.attr.set_exclude_kernel(yes.into());
        self
    }

    /// Don't count the hypervisor.
    pub fn exclude_hv(mut self, yes: bool) -> Self {
        self.attr.set_exclude_hv(yes.into());
        self
    }

    /// Don't count when the CPU is idle.
    pub fn exclude_idle(mut self, yes: bool) -> Self {
        self.attr.set_exclude_idle(yes.into());
        self
    }

    /// Append the sample id (per [`sample`](Self::sample)) to non-sample records too.
    pub fn sample_id_all(mut self, yes: bool) -> Self {
        self.attr.set_sample_id_all(yes.into());
        self
    }

    /// Emit `PERF_RECORD_MMAP2` for executable mappings (and `COMM`/`FORK`/`EXIT`).
    pub fn track_tasks(mut self, yes: bool) -> Self {
        let v = yes.into();
        self.attr.set_mmap(v);
        self.attr.set_comm(v);
        self.attr.set_task(v);
        self.attr.set_mmap2(v);
        self
    }

    /// Emit `PERF_RECORD_SWITCH` records on context switches.
    pub fn context_switch(mut self, yes: bool) -> Self {
        self.attr.set_context_switch(yes.into());
        self
    }

    /// Skid constraint (`:p` = 1 … `:ppp` = 3); hardware PMUs only.
    pub fn precise_ip(mut self, level: u8) -> Self {
        self.attr.set_precise_ip(level.min(3).into());
        self
    }

    /// Synchronous `SIGTRAP` to the overflowing thread, with `si_perf_data = sig_data`.
    /// Also sets `remove_on_exec`, without which an exec'd program would die of a
    /// signal it never asked for.
    pub fn sigtrap(mut self, sig_data: u64) -> Self {
        self.attr.set_sigtrap(1);
        self.attr.set_remove_on_exec(1);
        self.attr.sig_data = sig_data;
        self
    }

    /// User registers to sample with [`SampleType::REGS_USER`] (a mask of `PERF_REG_*`).
    pub fn sample_regs_user(mut self, mask: u64) -> Self {
        self.attr.sample_regs_user = mask;
        self
    }

    /// Interrupt registers to sample with [`SampleType::REGS_INTR`].
    pub fn sample_regs_intr(mut self, mask: u64) -> Self {
        self.attr.sample_regs_intr = mask;
        self
    }

    /// Bytes of user stack to copy with [`SampleType::STACK_USER`] (multiple of 8).
    pub fn sample_stack_user(mut self, bytes: u32) -> Self {
        self.attr.sample_stack_user = bytes;
        self
    }

    /// Branch filter for [`SampleType::BRANCH_STACK`] (`PERF_SAMPLE_BRANCH_*`).
    pub fn branch_sample_type(mut self, mask: u64) -> Self {
        self.attr.branch_sample_type = mask;
        self
    }

    /// Join the group led by `leader`: read together, scheduled together.
    pub fn group(mut self, leader: &Counter) -> Self {
        self.group_fd = leader.as_fd().as_raw_fd();
        self
    }

    pub(crate) fn group_fd_raw(mut self, fd: BorrowedFd<'_>) -> Self {
        self.group_fd = fd.as_raw_fd();
        self
    }

    /// `perf_event_open(attr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC)`.
    ///
    /// # Errors
    /// Every failure names its cause and a fix: [`ErrorKind::PermissionDenied`]
    /// (with the paranoid level), [`ErrorKind::NoPmu`] (hardware events in a VM),
    /// [`ErrorKind::TooManyFiles`] (with `RLIMIT_NOFILE` and `ulimit -n`; on `EMFILE`
    /// the soft limit is first raised to the hard limit, process-wide, and the open
    /// retried once), [`ErrorKind::InvalidArgument`]
    /// (with the attr fields most likely at fault), [`ErrorKind::NotFound`], [`ErrorKind::Busy`].
    ///
    /// [`ErrorKind::PermissionDenied`]: crate::ErrorKind::PermissionDenied
    /// [`ErrorKind::NoPmu`]: crate::ErrorKind::NoPmu
    /// [`ErrorKind::TooManyFiles`]: crate::ErrorKind::TooManyFiles
    /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
    /// [`ErrorKind::NotFound`]: crate::ErrorKind::NotFound
    /// [`ErrorKind::Busy`]: crate::ErrorKind::Busy
    #[doc(alias = "perf_event_open")]
    pub fn open(&self) -> Result<Counter> {
        let (pid, cpu) = self.target.pid_cpu();
        let mut attr = self.attr;
        let open = |attr: &mut sys::perf_event_attr| {
            sys::perf_event_open(
                attr,
                pid,
                cpu,
                self.group_fd,
                sys::PERF_FLAG_FD_CLOEXEC.into(),
            )
        };
        let mut result = open(&mut attr);
        // Out of fds: raise RLIMIT_NOFILE's soft limit to the hard one and retry once
        // (PITFALLS 12: one fd per event per thread adds up). The error, if it still
        // fails, names both limits and `ulimit -n`.
        if matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EMFILE))
            && raise_nofile_limit()
        {
            attr = self.attr;
            result = open(&mut attr);
        }
        let fd = result.map_err(|err| {
            // On E2BIG the kernel has written the size it wanted into attr.size.
            open_error(
                &OpenContext {
                    event: self.event.name(),
                    is_hardware: self.event.is_hardware(),
                    is_breakpoint: attr.type_ == sys::PERF_TYPE_BREAKPOINT,
                    is_tracepoint: attr.type_ == sys::PERF_TYPE_TRACEPOINT,
                    needs_perfmon: self.event.needs_perfmon(),
                    pid,
                    cpu,
                    attr: &attr,
                },
                err,
            )
        })?;
        Ok(Counter::from_parts(
            fd,
            self.event.clone(),
            self.attr,
            self.target,
        ))
    }
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit. `true` if it was raised.
fn raise_nofile_limit() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur >= lim.rlim_max
    {
        return false;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit read just above; raising soft up to hard needs no
    // privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 }
}
