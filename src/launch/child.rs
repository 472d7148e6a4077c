//! A started command: its status, reaped with `waitpid`.

use crate::{Error, ErrorKind, Result, Signal};

/// A running child started by [`Stopped::start`].
#[derive(Debug)]
pub struct Child {
    pub(super) pid: libc::pid_t,
    pub(super) reaped: bool,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Exited(i32),
    /// Killed by a signal.
    Signaled(Signal),
}

impl ExitStatus {
    /// The shell's convention: the code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled(s) => 128 + s.number(),
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }
}

/// Calls `f` (a `read`/`write`) again while it fails with `EINTR`.
pub(super) fn retry_eintr(mut f: impl FnMut() -> isize) -> isize {
    loop {
        let n = f();
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n;
        }
    }
}

pub(super) fn reap(pid: libc::pid_t) -> Option<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
    Some(if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled(Signal::known(libc::WTERMSIG(status)))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    })
}

impl Child {
    /// The child's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child to end (retrying on `EINTR`).
    pub fn wait(&mut self) -> Result<ExitStatus> {
        let st = reap(self.pid).ok_or_else(|| {
            Error::from_errno(
                format!("waitpid({})", self.pid),
                std::io::Error::last_os_error(),
            )
        })?;
        self.reaped = true;
        Ok(st)
    }

    /// Sends `signal` to the child ([`signal_process`](crate::process::signal_process)).
    ///
    /// # Errors
    /// As [`signal_process`](crate::process::signal_process).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        crate::process::signal_process(self.pid, signal)
    }
}

impl Drop for Child {
    /// A child that was not waited for is left running (like `std::process::Child`),
    /// but it is reaped if it has already exited so no zombie is left.
    fn drop(&mut self) {
        if !self.reaped {
            let mut status = 0;
            // SAFETY: non-blocking waitpid into a valid int.
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        }
    }
}

impl Child {
    /// Reaps the child if it has ended, without waiting (`waitpid(WNOHANG)`).
    ///
    /// Returns `Ok(None)` while it runs (or is stopped). Once it returned a status the
    /// child is reaped: do not call it again.
    ///
    /// # Errors
    /// The `waitpid` errno (`ECHILD` if it was already reaped).
    #[doc(alias = "waitpid")]
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.try_wait_usage()?.map(|(status, _)| status))
    }

    /// [`try_wait`](Self::try_wait), with the CPU time the child used (and its own
    /// children that it waited for), as `wait4(2)` reports it: what `perf stat` prints
    /// as "seconds user" and "seconds sys".
    ///
    /// # Errors
    /// As [`try_wait`](Self::try_wait).
    #[doc(alias = "wait4")]
    pub fn try_wait_usage(&mut self) -> Result<Option<(ExitStatus, Usage)>> {
        if self.reaped {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("waitpid({})", self.pid),
                "the child was already reaped",
            ));
        }
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: non-blocking wait4 writing into a valid int and a valid rusage.
            let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut usage) };
            if r == 0 {
                return Ok(None);
            }
            if r == self.pid {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::from_errno(format!("waitpid({})", self.pid), err));
        }
        self.reaped = true;
        let status = if libc::WIFSIGNALED(status) {
            ExitStatus::Signaled(Signal::known(libc::WTERMSIG(status)))
        } else {
            ExitStatus::Exited(libc::WEXITSTATUS(status))
        };
        Ok(Some((status, Usage::from_rusage(&usage))))
    }
}

/// CPU time a reaped child used, from `wait4(2)`'s `struct rusage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Time spent in user mode (`ru_utime`).
    pub user: std::time::Duration,
    /// Time spent in the kernel (`ru_stime`).
    pub system: std::time::Duration,
}

impl Usage {
    fn from_rusage(r: &libc::rusage) -> Usage {
        let time = |t: libc::timeval| {
            std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
                + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Usage {
            user: time(r.ru_utime),
            system: time(r.ru_stime),
        }
    }
}
