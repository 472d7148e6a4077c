//! Turns a failed `perf_event_open`, ioctl or `mmap` into an [`Error`] that names the
//! cause and the fix, from facts read off this machine (paranoid level, limits).

use std::io;

use crate::privilege::has_capability;
use crate::sys;
use crate::{Error, ErrorKind};

/// Reads a small integer from a `/proc/sys` file.
pub(crate) fn read_proc_int(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The current `perf_event_paranoid` level, if readable.
pub fn paranoid_level() -> Option<i64> {
    read_proc_int("/proc/sys/kernel/perf_event_paranoid")
}

/// What a paranoid level allows an unprivileged user (one without `CAP_PERFMON`), in
/// one phrase; what the calling user may do is
/// [`Privileges::describe`](crate::privilege::Privileges::describe).
pub fn paranoid_meaning(level: i64) -> &'static str {
    match level {
        i64::MIN..=-1 => "everything is allowed",
        0 => "no raw tracepoint access; CPU-wide and kernel profiling allowed",
        1 => "kernel and user profiling of your own processes; no CPU-wide events",
        2 => "user-space profiling of your own processes only (the kernel excluded)",
        _ => "no perf events at all without CAP_PERFMON (Debian's level 3/4)",
    }
}

/// `(soft, hard)` of a resource limit.
pub(crate) fn rlimit(resource: libc::__rlimit_resource_t) -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    let ret = unsafe { libc::getrlimit(resource, &mut lim) };
    (ret == 0).then_some((lim.rlim_cur, lim.rlim_max))
}

fn limit_text(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// What perfring was opening, for the error text.
pub(crate) struct OpenContext<'a> {
    pub event: &'a str,
    pub is_hardware: bool,
    pub is_breakpoint: bool,
    pub is_tracepoint: bool,
    /// See [`crate::Event::needs_perfmon`].
    pub needs_perfmon: bool,
    pub pid: i32,
    pub cpu: i32,
    pub attr: &'a sys::perf_event_attr,
}

impl OpenContext<'_> {
    fn op(&self) -> String {
        format!(
            "perf_event_open({}, pid={}, cpu={})",
            self.event, self.pid, self.cpu
        )
    }
    fn samples(&self) -> bool {
        // sample_period and sample_freq share one u64; zerocopy reads it without unsafe.
        let value: u64 = zerocopy::transmute!(self.attr.__bindgen_anon_1);
        value != 0
    }
}

/// Diagnoses a failed `perf_event_open`.
pub(crate) fn open_error(ctx: &OpenContext<'_>, err: io::Error) -> Error {
    let op = ctx.op();
    let errno = err.raw_os_error().unwrap_or(0);
    let e = |kind, why: String| Error::new(kind, op.clone(), why);
    let out = match errno {
        libc::EACCES | libc::EPERM => {
            let level = paranoid_level();
            let perfmon = has_capability(38) || has_capability(21);
            let mut why = match level {
                Some(l) => format!(
                    "permission denied: perf_event_paranoid is {l} ({})",
                    paranoid_meaning(l)
                ),
                None => "permission denied (perf_event_paranoid unreadable)".into(),
            };
            if perfmon {
                why.push_str("; the process has CAP_PERFMON/CAP_SYS_ADMIN, so a seccomp filter or LSM (container runtime) may be blocking perf_event_open");
            }
            let kernel = ctx.attr.exclude_kernel() == 0;
            let fix = if ctx.needs_perfmon && !perfmon {
                why = format!(
                    "permission denied: the kernel opens '{}' only for CAP_PERFMON or CAP_SYS_ADMIN, whatever perf_event_paranoid says",
                    ctx.event
                );
                "run as root, or give the binary CAP_PERFMON (setcap cap_perfmon+ep BINARY)".to_string()
            } else if ctx.cpu >= 0 && ctx.pid == -1 {
                "CPU-wide events need perf_event_paranoid <= 0 or CAP_PERFMON: `sudo sysctl kernel.perf_event_paranoid=0`, or target a process instead".to_string()
            } else if kernel && level.is_some_and(|l| l >= 2) {
                "count user space only (add the :u modifier), or lower the level with `sudo sysctl kernel.perf_event_paranoid=1`, or grant CAP_PERFMON".to_string()
            } else {
                "lower the level with `sudo sysctl kernel.perf_event_paranoid=1`, or run with CAP_PERFMON (setcap cap_perfmon+ep BINARY); in a container allow perf_event_open in its seccomp profile".to_string()
            };
            e(ErrorKind::PermissionDenied, why).with_fix(fix)
        }
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV if ctx.is_hardware => e(
            ErrorKind::NoPmu,
            format!(
                "this machine has no hardware PMU for '{}' (a VM without a virtual PMU, or an unsupported CPU): {err}",
                ctx.event
            ),
        )
        .with_fix("count a software event such as cpu-clock or task-clock instead (`-e cpu-clock`), or enable the PMU in the hypervisor"),
        libc::ENOENT if ctx.is_tracepoint => e(
            ErrorKind::NotFound,
            format!("the kernel does not know tracepoint '{}'", ctx.event),
        )
        .with_fix("list tracepoints with `perf list tracepoint`; tracefs must be mounted at /sys/kernel/tracing"),
        libc::ENOENT => e(
            ErrorKind::NotFound,
            format!("the kernel does not know event '{}' (type {}, config {:#x})", ctx.event, ctx.attr.type_, ctx.attr.config),
        )
        .with_fix("check the event with `perf list`; PMUs are listed in /sys/bus/event_source/devices"),
        libc::EOPNOTSUPP if ctx.samples() => e(
            ErrorKind::Unsupported,
            format!("'{}' cannot sample (its PMU has no overflow interrupt)", ctx.event),
        )
        .with_fix("count it without a period (perfring stat), or sample a software event such as cpu-clock"),
        libc::EOPNOTSUPP | libc::ENODEV => e(
            ErrorKind::Unsupported,
            format!("the PMU does not support this configuration of '{}': {err}", ctx.event),
        )
        .with_fix("drop exclude_*/precise_ip modifiers or branch sampling, which this PMU may lack"),
        libc::EMFILE => {
            let (soft, hard) = rlimit(libc::RLIMIT_NOFILE).unwrap_or((0, 0));
            e(
                ErrorKind::TooManyFiles,
                format!(
                    "too many open files: the process has hit RLIMIT_NOFILE (soft {}, hard {}); each event on each thread or CPU takes one fd",
                    limit_text(soft),
                    limit_text(hard)
                ),
            )
            .with_fix(if soft >= hard {
                format!(
                    "perfring already raised the soft limit to the hard limit ({}); raise the hard limit (as root: `ulimit -Hn N` then `ulimit -n N`, LimitNOFILE= in a systemd unit, or /etc/security/limits.conf), or open fewer events",
                    limit_text(hard)
                )
            } else {
                format!(
                    "raise the limit (`ulimit -n {}` in the shell, or setrlimit(RLIMIT_NOFILE)), or open fewer events",
                    limit_text(hard)
                )
            })
        }
        libc::ENFILE => e(ErrorKind::TooManyFiles, "the system-wide file table is full (ENFILE)".into())
            .with_fix("raise fs.file-max (`sudo sysctl fs.file-max=...`) or close other programs' files"),
        libc::ESRCH => e(ErrorKind::NotFound, format!("no process or thread with id {}", ctx.pid))
            .with_fix("check the pid/tid is alive (`ps -L -p PID`)"),
        libc::EBUSY | libc::ENOSPC if ctx.is_breakpoint => e(
            ErrorKind::Busy,
            "all hardware breakpoint slots are in use (x86 has 4 debug registers per thread)".into(),
        )
        .with_fix("close other breakpoint events or debuggers attached to the target"),
        libc::EBUSY => e(ErrorKind::Busy, format!("the PMU is in exclusive use by another event: {err}"))
            .with_fix("stop other profilers (perf, pinned/exclusive events) using this PMU"),
        libc::E2BIG => e(
            ErrorKind::Unsupported,
            format!(
                "the kernel does not know this perf_event_attr layout; it expects size {}",
                ctx.attr.size
            ),
        )
        .with_fix("upgrade the kernel or leave newer attr fields at zero"),
        libc::EOVERFLOW => e(
            ErrorKind::InvalidArgument,
            format!("sample_max_stack or callchain depth {} exceeds kernel.perf_event_max_stack", ctx.attr.sample_max_stack),
        )
        .with_fix("lower the callchain depth or raise kernel.perf_event_max_stack"),
        libc::EINVAL => e(ErrorKind::InvalidArgument, format!("the kernel rejected the attributes (EINVAL); {}", einval_suspects(ctx)))
            .with_fix("fix the fields named above; `perfring explain` prints the whole perf_event_attr"),
        _ => e(ErrorKind::Io, err.to_string()).with_fix("see `man 2 perf_event_open`, ERRORS"),
    };
    out.with_source(err)
}

/// The attr fields most likely at fault for an EINVAL, in order of likelihood.
fn einval_suspects(ctx: &OpenContext<'_>) -> String {
    let a = ctx.attr;
    let mut s: Vec<String> = Vec::new();
    let value: u64 = zerocopy::transmute!(a.__bindgen_anon_1);
    if a.freq() != 0 {
        if let Some(max) = read_proc_int("/proc/sys/kernel/perf_event_max_sample_rate") {
            if value > max as u64 {
                s.push(format!(
                    "sample_freq {value} is above kernel.perf_event_max_sample_rate ({max})"
                ));
            }
        }
    } else if value >> 63 != 0 {
        s.push(format!("sample_period {value} has bit 63 set"));
    }
    if a.sigtrap() != 0 && a.remove_on_exec() == 0 {
        s.push("sigtrap requires remove_on_exec".into());
    }
    if a.inherit() != 0 && a.read_format & u64::from(sys::PERF_FORMAT_GROUP) != 0 {
        s.push("inherit cannot be combined with read_format GROUP on older kernels".into());
    }
    if a.inherit_thread() != 0 && a.inherit() == 0 {
        s.push("inherit_thread requires inherit".into());
    }
    if a.precise_ip() != 0 {
        s.push(format!(
            "precise_ip {} (the PMU may support less)",
            a.precise_ip()
        ));
    }
    if ctx.is_breakpoint {
        let len: u64 = zerocopy::transmute!(a.__bindgen_anon_4);
        s.push(format!(
            "breakpoint bp_type {} / bp_len {len}: execute breakpoints need bp_len = sizeof(long), data ones 1, 2, 4 or 8 bytes aligned to their length",
            a.bp_type
        ));
    }
    if a.sample_type >= u64::from(sys::PERF_SAMPLE_MAX) {
        s.push(format!(
            "sample_type {:#x} has bits unknown to this kernel",
            a.sample_type
        ));
    }
    if ctx.cpu >= 0 && ctx.pid == -1 && a.inherit() != 0 {
        s.push("inherit is not allowed on a CPU-wide event".into());
    }
    if s.is_empty() {
        "likely fields: sample_type, read_format, exclude_* or config".into()
    } else {
        format!("likely: {}", s.join("; "))
    }
}

/// Diagnoses a failed perf ioctl.
pub(crate) fn ioctl_error(name: &str, event: &str, inherited: bool, err: io::Error) -> Error {
    let op = format!("ioctl({event}, PERF_EVENT_IOC_{name})");
    let errno = err.raw_os_error().unwrap_or(0);
    let e = match (name, errno) {
        ("REFRESH", libc::EINVAL) if inherited => Error::new(
            ErrorKind::Inherited,
            op,
            "REFRESH is not allowed on an inherited counter (EINVAL)",
        )
        .with_fix("use enable()/disable() with inherited counters, or open one counter per thread"),
        ("PERIOD", libc::EINVAL) => Error::new(
            ErrorKind::InvalidArgument,
            op,
            "the kernel rejected the new period or frequency (zero, bit 63 set, or above perf_event_max_sample_rate)",
        )
        .with_fix("pass a non-zero period, or a frequency within kernel.perf_event_max_sample_rate"),
        ("SET_OUTPUT", libc::EINVAL) => Error::new(
            ErrorKind::InvalidArgument,
            op,
            "the two events cannot share a ring (different CPU, different task, different clock, or this one is already mapped)",
        )
        .with_fix("redirect only events on the same task/CPU, before mapping the redirected event"),
        (_, libc::ENOTTY) => Error::new(
            ErrorKind::Unsupported,
            op,
            "this kernel does not know the ioctl (ENOTTY)",
        )
        .with_fix("upgrade the kernel"),
        _ => Error::new(ErrorKind::Io, op, err.to_string()),
    };
    e.with_source(err)
}

/// Diagnoses a failed `mmap` of a ring of `bytes` bytes.
pub(crate) fn mmap_error(event: &str, bytes: usize, err: io::Error) -> Error {
    let op = format!("mmap({event} ring, {} KiB)", bytes / 1024);
    let errno = err.raw_os_error().unwrap_or(0);
    let e = match errno {
        libc::EPERM | libc::ENOMEM => {
            let mlock_kb = read_proc_int("/proc/sys/kernel/perf_event_mlock_kb");
            let (soft, _) = rlimit(libc::RLIMIT_MEMLOCK).unwrap_or((0, 0));
            Error::new(
                ErrorKind::MlockLimit,
                op,
                format!(
                    "the ring is larger than the locked-memory budget: kernel.perf_event_mlock_kb is {} KiB per user (plus RLIMIT_MEMLOCK {} bytes)",
                    mlock_kb.map_or("unknown".into(), |v| v.to_string()),
                    limit_text(soft)
                ),
            )
            .with_fix("use a smaller ring (fewer pages), or raise `sudo sysctl kernel.perf_event_mlock_kb=...` or `ulimit -l`, or run with CAP_IPC_LOCK")
        }
        libc::EINVAL => Error::new(
            ErrorKind::InvalidArgument,
            op,
            "the ring size is not 1 + a power of two pages, or the event was redirected with SET_OUTPUT",
        )
        .with_fix("map 1 + 2^n pages of an event that is not redirected"),
        _ => Error::new(ErrorKind::Io, op, err.to_string()),
    };
    e.with_source(err)
}
