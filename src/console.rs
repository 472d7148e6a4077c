//! What a command-line tool built on perfring needs of its own process: Ctrl-C and
//! `SIGTERM` taken between two polls instead of ending it before it has reported
//! ([`Interrupts`]), and whether the reader of its output went away ([`output_closed`]).
//!
//! # Safety
//! `pthread_sigmask`, `sigtimedwait` and `poll` on valid, initialised arguments; each
//! call has a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;

use crate::{Error, Result};

/// Whether `fd` is a pipe or socket whose reading side has gone (`poll(2)` reports
/// `POLLERR` or `POLLHUP` on it, without waiting): what `| head -1` does to a writer,
/// seen before it has anything more to write. `false` for a terminal or a file.
#[doc(alias = "poll")]
pub fn output_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call; timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Blocks `SIGINT` and `SIGTERM` for the calling thread (and threads it creates later)
/// so that Ctrl-C can be noticed with [`Interrupts::take`] between two polls, instead of
/// ending the program before it has reported. The previous mask is restored on drop.
///
/// Children started with [`Command`] unblock every signal before they `exec`, so a
/// terminal's Ctrl-C still reaches them.
#[derive(Debug)]
pub struct Interrupts {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl Interrupts {
    /// `pthread_sigmask(SIG_BLOCK, {SIGINT, SIGTERM})`.
    ///
    /// # Errors
    /// The `pthread_sigmask` error (it has none for these arguments in practice).
    #[doc(alias = "pthread_sigmask")]
    pub fn block() -> Result<Interrupts> {
        let mut set = crate::sys::empty_sigset();
        // SAFETY: `set` is an initialised sigset_t (empty_sigset); SIGINT is a valid signal.
        unsafe { libc::sigaddset(&mut set, libc::SIGINT) };
        // SAFETY: as above, for SIGTERM.
        unsafe { libc::sigaddset(&mut set, libc::SIGTERM) };
        let mut old = crate::sys::empty_sigset();
        // SAFETY: both pointers are valid sigset_t; this changes the calling thread's mask.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        if r != 0 {
            return Err(Error::from_errno(
                "pthread_sigmask(SIG_BLOCK, SIGINT|SIGTERM)",
                std::io::Error::from_raw_os_error(r),
            ));
        }
        Ok(Interrupts { set, old })
    }

    /// Consumes a pending `SIGINT` or `SIGTERM` and returns it, without waiting
    /// (`sigtimedwait` with a zero timeout).
    #[doc(alias = "sigtimedwait")]
    pub fn take(&self) -> Option<crate::Signal> {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `set` is an initialised sigset_t and `zero` a valid timespec; a null
        // siginfo pointer is allowed.
        let r = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) };
        (r > 0).then(|| crate::Signal::known(r))
    }
}

impl Interrupts {
    /// Waits up to `timeout` for `SIGINT` or `SIGTERM` and consumes it
    /// (`sigtimedwait`); `None` when the time passed first.
    #[doc(alias = "sigtimedwait")]
    pub fn wait(&self, timeout: std::time::Duration) -> Option<i32> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` is an initialised sigset_t and `ts` a valid timespec; a null
        // siginfo pointer is allowed. EINTR (another signal's handler ran) is "none".
        let r = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (r > 0).then_some(r)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `block` from a valid sigset_t.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_taken_not_delivered() {
        let guard = Interrupts::block().unwrap();
        assert_eq!(guard.take(), None);
        // SAFETY: raise has no memory-safety preconditions; SIGINT is blocked here.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGINT) };
        assert_eq!(guard.take(), Some(crate::Signal::SIGINT));
        assert_eq!(guard.take(), None);
    }
}
