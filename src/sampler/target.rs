//! What a [`Sampler`](super::Sampler) watches, and how it learns that it has ended.

use std::time::{Duration, Instant};

use crate::launch::{self, Child, ExitStatus};
use crate::Result;

/// What to sample: perf's `-- CMD`, `-p`, `-t` and `-C`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Target {
    /// A command, started stopped so that every counter is attached before its `exec`;
    /// its threads and children are followed from their first instruction.
    Command(launch::Command),
    /// A running process: every thread it has now and every thread (and child process)
    /// it creates later.
    Pid(libc::pid_t),
    /// One running thread, alone.
    Tid(libc::pid_t),
    /// Everything that runs on these CPUs (needs `perf_event_paranoid <= 0`).
    Cpus(Vec<i32>),
}

/// How the target ended, from [`Sampler::target_ended`](super::Sampler::target_ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetEnd {
    /// The spawned command exited (and was reaped) with this status.
    Exited(ExitStatus),
    /// The process or thread given by id no longer exists (its status belongs to its
    /// parent, not to us).
    Gone,
}

/// The live side of a [`Target`].
#[derive(Debug)]
pub(crate) enum Watchee {
    Command {
        child: Child,
        status: Option<ExitStatus>,
        /// Whether it may be waited for: not while the sampler's tracer holds it (a
        /// `waitpid` of its parent would take the tracer's stops), only once the
        /// tracer has reported its exit.
        exit_seen: bool,
    },
    Pid(libc::pid_t),
    Tid(libc::pid_t),
    Cpus,
}

impl Watchee {
    /// Whether the target has ended; a command is reaped (once) when it has.
    pub(crate) fn ended(&mut self) -> Result<Option<TargetEnd>> {
        Ok(match self {
            Watchee::Command {
                child,
                status,
                exit_seen,
            } => {
                if status.is_none() && *exit_seen {
                    *status = child.try_wait()?;
                }
                status.map(TargetEnd::Exited)
            }
            Watchee::Pid(pid) => (!process_alive(*pid)).then_some(TargetEnd::Gone),
            Watchee::Tid(tid) => (!crate::proc::is_alive(*tid)).then_some(TargetEnd::Gone),
            Watchee::Cpus => None,
        })
    }

    /// Ends a spawned command: `SIGTERM`, then `SIGKILL` after `grace`; returns its
    /// status. Targets given by id are left alone (`None`).
    ///
    /// `exit_seen` is asked, while the command is held, whether the tracer has
    /// reported its exit (see [`Watchee::exit_reported`]).
    pub(crate) fn terminate(
        &mut self,
        grace: Duration,
        mut exit_seen: impl FnMut(&mut Watchee) -> bool,
    ) -> Option<ExitStatus> {
        let Watchee::Command { child, status, .. } = self else {
            return None;
        };
        if status.is_some() {
            return *status;
        }
        let _ = child.signal(crate::Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        let mut killed = false;
        loop {
            if exit_seen(self) {
                break;
            }
            if Instant::now() >= deadline && !killed {
                if let Watchee::Command { child, .. } = self {
                    let _ = child.signal(crate::Signal::SIGKILL);
                }
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let Watchee::Command { child, status, .. } = self else {
            return None;
        };
        *status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = child.signal(crate::Signal::SIGKILL);
                    break child.wait().ok();
                }
                Err(_) => break None,
            }
        };
        *status
    }

    /// The tracer reports that process `pid` has exited: a command may be reaped now.
    pub(crate) fn exit_reported(&mut self, pid: libc::pid_t) {
        if let Watchee::Command {
            child, exit_seen, ..
        } = self
        {
            if child.pid() == pid {
                *exit_seen = true;
            }
        }
    }

    /// Whether the command may be waited for (see [`Watchee::exit_reported`]).
    pub(crate) fn exit_seen(&self) -> bool {
        match self {
            Watchee::Command { exit_seen, .. } => *exit_seen,
            _ => true,
        }
    }

    pub(crate) fn pid(&self) -> Option<libc::pid_t> {
        match self {
            Watchee::Command { child, .. } => Some(child.pid()),
            Watchee::Pid(p) | Watchee::Tid(p) => Some(*p),
            Watchee::Cpus => None,
        }
    }
}

/// Whether process `pid` has a thread that has not exited: its main thread or, once
/// that called `pthread_exit` (a zombie leader while the others run), any other.
pub(crate) fn process_alive(pid: libc::pid_t) -> bool {
    match crate::proc::state(pid) {
        None | Some('X') => false,
        Some('Z') => crate::proc::threads(pid)
            .is_ok_and(|tids| tids.iter().any(|&t| t != pid && thread_alive(pid, t))),
        Some(_) => true,
    }
}

/// Whether thread `tid` of `pid` is listed and neither a zombie nor dead.
pub(crate) fn thread_alive(pid: libc::pid_t, tid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).is_ok_and(|stat| {
        // The state follows the name, which is in parentheses and may contain ") ".
        let state = stat
            .rfind(')')
            .and_then(|at| stat[at + 1..].split_whitespace().next());
        !matches!(state, Some("Z" | "X") | None)
    })
}

/// The parent process of `pid` (`/proc/PID/stat`'s `ppid`).
pub(crate) fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the name (in parentheses, possibly containing ") "): state, then ppid.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
