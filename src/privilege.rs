//! What this process may count, decided once from the paranoid level, its effective
//! capabilities and its locked-memory budget — as `perf` decides it.
//!
//! - [`Privileges::current`] reads `kernel.perf_event_paranoid`, the calling thread's
//!   effective capabilities (`CAP_PERFMON`, `CAP_SYS_ADMIN`, `CAP_IPC_LOCK`,
//!   `CAP_SYS_PTRACE`), `kernel.perf_event_mlock_kb` and `RLIMIT_MEMLOCK`.
//! - [`Privileges::fit`] adapts an event to them the way `perf` does: an event the user
//!   did not restrict (`cpu-clock`, not `cpu-clock:k`) is counted in user space only
//!   where the kernel may not be profiled, and [`Fitted::user_only`] says so (once, on
//!   stderr, is the CLI's choice); an explicit request the user may not have (`:k`,
//!   CPU-wide events) is an error naming the sysctl and the capability that allow it.
//! - [`Privileges::ring_budget`] is how many ring pages the user may lock.
//!
//! # Safety
//! `getuid`/`geteuid` only, which have no preconditions.
//!
//! # Examples
//! ```
//! use perfring::privilege::Privileges;
//! let p = Privileges::current();
//! let b = perfring::Counter::builder("cpu-clock")?;
//! let fitted = p.fit(b, false)?;
//! // At perf_event_paranoid 2 without CAP_PERFMON: user space only.
//! assert_eq!(fitted.user_only, !p.may_profile_kernel());
//! # Ok::<(), perfring::Error>(())
//! ```

#![allow(unsafe_code)]

use crate::counter::diagnose::{paranoid_level, read_proc_int, rlimit};
use crate::{Builder, Error, ErrorKind, Result};

/// `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_IPC_LOCK`.
const CAP_IPC_LOCK: u32 = 14;
/// `CAP_SYS_PTRACE`.
const CAP_SYS_PTRACE: u32 = 19;
/// `CAP_PERFMON` (Linux 5.8).
const CAP_PERFMON: u32 = 38;

/// Who is asking, and what the kernel lets them do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privileges {
    /// The real user id.
    pub uid: u32,
    /// The effective user id.
    pub euid: u32,
    /// `kernel.perf_event_paranoid` (`None`: not readable, taken as 2).
    pub paranoid: Option<i64>,
    /// `CAP_PERFMON` or `CAP_SYS_ADMIN` in the effective set: every perf restriction
    /// lifted.
    pub perfmon: bool,
    /// `CAP_IPC_LOCK`: rings may lock memory beyond the limits.
    pub ipc_lock: bool,
    /// `CAP_SYS_PTRACE`: other users' processes may be attached to.
    pub ptrace: bool,
    /// `kernel.perf_event_mlock_kb`: what each user may lock for rings, per CPU,
    /// besides `RLIMIT_MEMLOCK`.
    pub mlock_kb: Option<u64>,
    /// `RLIMIT_MEMLOCK`, soft, in bytes (`None`: unlimited).
    pub memlock: Option<u64>,
}

/// An event adapted to what the user may count.
#[derive(Debug)]
#[non_exhaustive]
pub struct Fitted {
    /// The builder to open.
    pub builder: Builder,
    /// Whether the kernel (and hypervisor) were excluded because the user may not
    /// profile them and did not ask to: the event now counts user space only (`:u`).
    pub user_only: bool,
}

impl Privileges {
    /// The calling thread's privileges.
    pub fn current() -> Privileges {
        let (uid, euid) = (uid(), euid());
        Privileges {
            uid,
            euid,
            paranoid: paranoid_level(),
            perfmon: has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN),
            ipc_lock: has_capability(CAP_IPC_LOCK),
            ptrace: has_capability(CAP_SYS_PTRACE),
            mlock_kb: read_proc_int("/proc/sys/kernel/perf_event_mlock_kb")
                .and_then(|v| u64::try_from(v).ok()),
            memlock: rlimit(libc::RLIMIT_MEMLOCK)
                .map(|(soft, _)| soft)
                .filter(|&v| v != libc::RLIM_INFINITY),
        }
    }

    fn level(&self) -> i64 {
        self.paranoid.unwrap_or(2)
    }

    /// Whether perf events may be opened at all (Debian's levels 3 and 4 forbid it
    /// without `CAP_PERFMON`).
    pub fn may_use_perf(&self) -> bool {
        self.perfmon || self.level() <= 2
    }

    /// Whether the kernel may be profiled (samples and counts in kernel mode):
    /// level ≤ 1, or `CAP_PERFMON`.
    pub fn may_profile_kernel(&self) -> bool {
        self.perfmon || self.level() <= 1
    }

    /// Whether CPU-wide events (every process on a CPU) may be opened: level ≤ 0, or
    /// `CAP_PERFMON`.
    pub fn may_watch_cpus(&self) -> bool {
        self.perfmon || self.level() <= 0
    }

    /// Adapts `builder` (for a CPU-wide event when `cpu_wide`) to these privileges.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] naming the sysctl and the capability that would
    /// allow it, for what the user asked and may not have: any perf event at levels 3+,
    /// CPU-wide events above level 0, kernel profiling (`:k`, `:uk`) above level 1,
    /// and events only `CAP_PERFMON` may open ([`crate::Event::needs_perfmon`]).
    pub fn fit(&self, builder: Builder, cpu_wide: bool) -> Result<Fitted> {
        let name = builder.event().name().to_string();
        if !self.may_use_perf() {
            return Err(self.denied(
                &name,
                format!(
                    "perf_event_paranoid is {}: no perf events without CAP_PERFMON",
                    self.level()
                ),
                2,
                None,
            ));
        }
        if cpu_wide && !self.may_watch_cpus() {
            return Err(self.denied(
                &name,
                format!(
                    "watching whole CPUs needs perf_event_paranoid 0 or less (it is {})",
                    self.level()
                ),
                0,
                // User-space-only counting does not lift this limit; a process target does.
                Some("or watch processes instead of CPUs (-p PID, or a command)"),
            ));
        }
        if builder.event().needs_perfmon() && !self.perfmon {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!("open {name}"),
                "the kernel opens uprobes only for CAP_PERFMON or CAP_SYS_ADMIN, whatever \
                 perf_event_paranoid says",
            )
            .with_fix(
                "run as root, or give the binary CAP_PERFMON (setcap cap_perfmon+ep BINARY); \
                 to count a function's calls without it, put a breakpoint on its entry \
                 (-e mem:SYMBOL:x)",
            ));
        }
        let a = builder.attr();
        let counts_kernel = a.exclude_kernel() == 0;
        // `:k`, `:uk`: one of the others excluded, the kernel not; no modifiers at all
        // leave every bit clear.
        let asked_kernel = counts_kernel && (a.exclude_user() != 0 || a.exclude_hv() != 0);
        if !counts_kernel || self.may_profile_kernel() {
            return Ok(Fitted {
                builder,
                user_only: false,
            });
        }
        if asked_kernel {
            return Err(self.denied(
                &name,
                format!(
                    "counting in the kernel needs perf_event_paranoid 1 or less (it is {})",
                    self.level()
                ),
                1,
                Some("or count user space only (:u)"),
            ));
        }
        Ok(Fitted {
            builder: builder.exclude_kernel(true).exclude_hv(true),
            user_only: true,
        })
    }

    /// `PermissionDenied` naming what would allow it, and `instead` (what the user
    /// can do without privileges) when there is such a way.
    fn denied(&self, event: &str, why: String, level: i64, instead: Option<&str>) -> Error {
        let instead = instead.map(|i| format!("; {i}")).unwrap_or_default();
        Error::new(ErrorKind::PermissionDenied, format!("open {event}"), why).with_fix(format!(
            "run as root, give the binary CAP_PERFMON (setcap cap_perfmon+ep), or lower the \
             level: sysctl kernel.perf_event_paranoid={level}{instead}"
        ))
    }

    /// How many ring pages (data and control pages alike) this user may lock for
    /// perf rings on a machine of `cpus` online CPUs, besides what its other rings
    /// hold already: `perf_event_mlock_kb` per CPU, then `RLIMIT_MEMLOCK`; `None` when
    /// nothing bounds it (`CAP_IPC_LOCK`, or both unlimited).
    pub fn ring_budget(&self, cpus: usize) -> Option<u64> {
        if self.ipc_lock {
            return None;
        }
        let page = crate::ring::page_size() as u64;
        let per_user = self.mlock_kb.map(|kb| kb * 1024 / page * cpus as u64);
        let memlock = self.memlock.map(|b| b / page);
        match (per_user, memlock) {
            (Some(u), Some(m)) => Some(u + m),
            // An unlimited RLIMIT_MEMLOCK covers whatever the sysctl does not.
            _ => None,
        }
    }

    /// The data pages of each ring of a session: `demand.asked` (`-m`) if every ring
    /// fits the user's budget ([`ring_budget`](Self::ring_budget)), else an error
    /// naming the budget and the largest size that fits; without `-m`,
    /// `demand.wanted`, halved until the session's rings fit.
    ///
    /// # Errors
    /// [`ErrorKind::MlockLimit`] when the asked size does not fit, or not even one data
    /// page per ring does.
    ///
    /// # Examples
    /// ```
    /// use perfring::privilege::{Privileges, RingDemand};
    /// let me = Privileges::current();
    /// let demand = RingDemand { rings: 2, fixed_pages: 34, asked: None, wanted: 256, cpus: 2 };
    /// let pages = me.ring_pages(&demand)?;
    /// assert!(pages.pages.is_power_of_two() && pages.pages <= 256);
    /// # Ok::<(), perfring::Error>(())
    /// ```
    pub fn ring_pages(&self, demand: &RingDemand) -> Result<RingPages> {
        let budget = self.ring_budget(demand.cpus);
        let need = |pages: usize| demand.rings as u64 * (pages as u64 + 1) + demand.fixed_pages;
        let fits = |pages: usize| budget.is_none_or(|b| need(pages) <= b);
        let largest = || {
            let mut p = 1usize << 20;
            while p > 1 && !fits(p) {
                p /= 2;
            }
            fits(p).then_some(p)
        };
        let kib = |pages: u64| pages * crate::ring::page_size() as u64 / 1024;
        let too_big = |why: String, fix: String| {
            Error::new(ErrorKind::MlockLimit, "size the rings", why).with_fix(fix)
        };
        let budget_text = |b: u64| {
            format!(
                "this user may lock {} KiB for perf rings (kernel.perf_event_mlock_kb {} KiB \
                 per CPU on {} CPUs, then RLIMIT_MEMLOCK {})",
                kib(b),
                self.mlock_kb.map_or("unknown".into(), |v| v.to_string()),
                demand.cpus,
                self.memlock
                    .map_or("unlimited".into(), |v| format!("{} KiB", v / 1024)),
            )
        };
        let raise = "raise the budget (sudo sysctl kernel.perf_event_mlock_kb=N, ulimit -l), or \
                     run with CAP_IPC_LOCK";
        if let Some(asked) = demand.asked {
            let pages = asked.max(1).next_power_of_two();
            if fits(pages) {
                return Ok(RingPages {
                    pages,
                    wanted: pages,
                });
            }
            let b = budget.unwrap_or(0);
            return Err(too_big(
                format!(
                    "{} rings of {pages} data pages need {} KiB of locked memory; {}",
                    demand.rings,
                    kib(need(pages)),
                    budget_text(b)
                ),
                match largest() {
                    Some(p) => format!("give -m {p} or less, or {raise}"),
                    None => format!("record fewer events or CPUs, or {raise}"),
                },
            ));
        }
        let mut pages = demand.wanted.max(1).next_power_of_two();
        while pages > 1 && !fits(pages) {
            pages /= 2;
        }
        if !fits(pages) {
            return Err(too_big(
                format!(
                    "{} rings of one data page need {} KiB of locked memory; {}",
                    demand.rings,
                    kib(need(1)),
                    budget_text(budget.unwrap_or(0))
                ),
                format!("record fewer events or CPUs, or {raise}"),
            ));
        }
        Ok(RingPages {
            pages,
            wanted: demand.wanted.max(1).next_power_of_two(),
        })
    }

    /// One line on who is asking and what that allows, for `doctor`.
    pub fn describe(&self) -> String {
        let who = if self.euid == 0 {
            "root".to_string()
        } else {
            format!("uid {}", self.euid)
        };
        let caps: Vec<&str> = [
            (self.perfmon, "CAP_PERFMON/CAP_SYS_ADMIN"),
            (self.ipc_lock, "CAP_IPC_LOCK"),
            (self.ptrace, "CAP_SYS_PTRACE"),
        ]
        .iter()
        .filter(|c| c.0)
        .map(|c| c.1)
        .collect();
        let caps = if caps.is_empty() {
            "no perf capability".to_string()
        } else {
            caps.join(", ")
        };
        let allows = if !self.may_use_perf() {
            "no perf events at all".to_string()
        } else if self.may_watch_cpus() {
            "user and kernel profiling of any process, and whole CPUs".to_string()
        } else if self.may_profile_kernel() {
            "user and kernel profiling of your own processes; no whole CPUs".to_string()
        } else {
            "user-space profiling of your own processes (the kernel excluded, as perf does)"
                .to_string()
        };
        format!("{who}, {caps}: {allows}")
    }
}

/// What a session's rings need, for [`Privileges::ring_pages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingDemand {
    /// Rings whose size is being chosen: one per event and CPU, or per event and
    /// thread.
    pub rings: usize,
    /// Pages of the session's rings of a fixed size (tracking rings), control pages
    /// included.
    pub fixed_pages: u64,
    /// Data pages asked for (`-m`): given, or refused.
    pub asked: Option<usize>,
    /// Data pages wanted when none are asked: a default, or what the data rate needs.
    pub wanted: usize,
    /// Online CPUs (the per-user part of the budget is per CPU).
    pub cpus: usize,
}

/// The size [`Privileges::ring_pages`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPages {
    /// Data pages per ring (a power of two).
    pub pages: usize,
    /// What was wanted: above `pages` when the budget allowed less, which is worth
    /// saying.
    pub wanted: usize,
}

impl RingPages {
    /// Whether the budget made the rings smaller than wanted.
    pub fn reduced(&self) -> bool {
        self.pages < self.wanted
    }
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the calling thread has an effective capability; capabilities are per
/// thread, so not `/proc/self`.
pub(crate) fn has_capability(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/thread-self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask >> cap & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(level: i64) -> Privileges {
        Privileges {
            uid: 1000,
            euid: 1000,
            paranoid: Some(level),
            perfmon: false,
            ipc_lock: false,
            ptrace: false,
            mlock_kb: Some(516),
            memlock: Some(8 << 20),
        }
    }

    #[test]
    fn an_unrestricted_event_counts_user_space_only_where_the_kernel_may_not_be_profiled() {
        let b = || crate::Counter::builder("cpu-clock").unwrap();
        let f = user(2).fit(b(), false).unwrap();
        assert!(f.user_only);
        assert_eq!(f.builder.attr().exclude_kernel(), 1);
        assert_eq!(f.builder.attr().exclude_hv(), 1);
        let f = user(1).fit(b(), false).unwrap();
        assert!(!f.user_only);
        assert_eq!(f.builder.attr().exclude_kernel(), 0);
        let mut root = user(2);
        root.perfmon = true;
        assert!(!root.fit(b(), false).unwrap().user_only);
        // Already user only: nothing to say.
        let u = crate::Counter::builder("cpu-clock:u").unwrap();
        assert!(!user(2).fit(u, false).unwrap().user_only);
    }

    #[test]
    fn an_explicit_request_the_user_may_not_have_names_the_sysctl_and_the_capability() {
        for spec in ["cpu-clock:k", "cpu-clock:uk"] {
            let e = user(2)
                .fit(crate::Counter::builder(spec).unwrap(), false)
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{spec}");
            let text = e.to_string();
            assert!(
                text.contains("perf_event_paranoid=1") && text.contains("CAP_PERFMON"),
                "{text}"
            );
        }
        let b = crate::Counter::builder("cpu-clock:u").unwrap();
        let e = user(1).fit(b, true).unwrap_err();
        assert!(e.to_string().contains("perf_event_paranoid=0"), "{e}");
        let b = crate::Counter::builder("cpu-clock:u").unwrap();
        let e = user(3).fit(b, false).unwrap_err();
        assert!(e.to_string().contains("no perf events"), "{e}");
    }

    #[test]
    fn a_uprobe_without_perfmon_is_refused_naming_the_capability_at_any_level() {
        let exe = std::env::current_exe().unwrap();
        let uprobe = || {
            let event = crate::Event::uprobe(1, &exe, 0x1000).unwrap();
            crate::Counter::builder_for(event)
        };
        for level in [-1, 2] {
            let e = user(level).fit(uprobe(), false).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied);
            assert!(e.to_string().contains("cap_perfmon+ep"), "{e}");
        }
        let mut root = user(2);
        root.perfmon = true;
        assert!(root.fit(uprobe(), false).is_ok());
    }

    #[test]
    fn the_ring_budget_is_the_sysctl_per_cpu_and_the_memlock_limit() {
        let p = user(2);
        let page = crate::ring::page_size() as u64;
        assert_eq!(
            p.ring_budget(2),
            Some(516 * 1024 / page * 2 + (8 << 20) / page)
        );
        let mut unlimited = user(2);
        unlimited.memlock = None;
        assert_eq!(unlimited.ring_budget(2), None);
        let mut lock = user(2);
        lock.ipc_lock = true;
        assert_eq!(lock.ring_budget(2), None);
    }
}
