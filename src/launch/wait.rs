//! Waiting for any process's end (pidfd), or Ctrl-C, whichever comes first.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{Error, ErrorKind, Result};

/// Why [`wait_for_exit`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The process exited (for a child of ours: it can now be reaped with [`Child::wait`]).
    Exited,
    /// `SIGINT` (Ctrl-C) arrived first.
    Interrupted,
    /// The timeout passed first.
    TimedOut,
}

/// Waits until process `pid` exits, `SIGINT` arrives, or `timeout` passes, whichever
/// comes first: what `perf stat -p PID` does between opening and reading its counters.
///
/// The process need not be a child of ours: it is watched through a pidfd
/// (`pidfd_open(2)`, Linux 5.3), which becomes readable when it exits. `SIGINT` is
/// blocked for the calling thread while waiting and received through a `signalfd`, so
/// Ctrl-C ends the wait instead of the program; an interrupt that arrived is consumed,
/// and the previous signal mask is restored on return.
///
/// A process-directed `SIGINT` goes to a thread that does not block it, so in a
/// multithreaded program the others should block `SIGINT` too (a single-threaded
/// command line tool needs nothing).
///
/// # Errors
/// [`ErrorKind::NotFound`] if there is no process `pid`; the errno of `pidfd_open`,
/// `signalfd` or `poll` otherwise.
#[doc(alias = "pidfd_open")]
pub fn wait_for_exit(pid: libc::pid_t, timeout: Option<std::time::Duration>) -> Result<Waited> {
    let op = format!("wait for process {pid}");
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Err(
                Error::new(ErrorKind::NotFound, op, format!("no process with id {pid}"))
                    .with_fix("check the pid (ps -e), or start the command with perfring")
                    .with_source(err),
            );
        }
        return Err(Error::from_errno(op, err));
    }
    // SAFETY: pidfd_open succeeded, so `raw` is a new fd owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };

    let mut set: libc::sigset_t = crate::sys::empty_sigset();
    // SAFETY: `set` is an initialised sigset_t (empty_sigset); SIGINT is a valid signal.
    unsafe {
        libc::sigaddset(&mut set, libc::SIGINT);
    }
    let mut old: libc::sigset_t = crate::sys::empty_sigset();
    // SAFETY: both pointers are valid sigset_t; this changes the calling thread's mask.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    if r != 0 {
        return Err(Error::from_errno(op, std::io::Error::from_raw_os_error(r)));
    }
    let result = poll_exit_or_sigint(&pidfd, &set, timeout).map_err(|e| Error::from_errno(op, e));
    // SAFETY: restores the mask saved above from a valid sigset_t.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    result
}

fn poll_exit_or_sigint(
    pidfd: &OwnedFd,
    set: &libc::sigset_t,
    timeout: Option<std::time::Duration>,
) -> std::io::Result<Waited> {
    // SAFETY: `set` is a valid, initialised sigset_t; -1 asks for a new fd.
    let raw = unsafe { libc::signalfd(-1, set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: signalfd succeeded, so `raw` is a new fd owned by nobody else.
    let sigfd = unsafe { OwnedFd::from_raw_fd(raw) };
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(Waited::TimedOut);
                }
                // Round up so that we never wake just before the deadline.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: `fds` is a valid array of two pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
            // SAFETY: reads at most `info.len()` bytes into a valid buffer; consumes the
            // pending SIGINT so it does not fire when the mask is restored.
            unsafe { libc::read(sigfd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) };
            return Ok(Waited::Interrupted);
        }
        if fds[0].revents != 0 {
            return Ok(Waited::Exited);
        }
    }
}
