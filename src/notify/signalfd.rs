//! Overflow signals read from a `signalfd` instead of run in a handler.
//!
//! The same `F_SETSIG` + `F_SETOWN_EX(F_OWNER_TID)` + `O_ASYNC` set-up as
//! [`super::signal`], but the signal is *blocked* in the owning thread and read from a
//! `signalfd(2)` as plain data: no signal context, no handler, and the fd can sit in
//! an epoll set (e.g. next to a [`Poller`](super::Poller)'s). Signals are still
//! thread-directed, so a [`SignalFd`] belongs to the thread that created it (it is
//! not `Send`): only that thread can read them.
//!
//! # Safety
//! The unsafe code is `pthread_sigmask`, `signalfd`, `fcntl`, `read` and `sigaction`
//! (query only) with valid arguments, argued in place.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::signal::{arm_fd, claim_for_signalfd, disarm_fd, unclaim_for_signalfd};
use super::signo::Signal;
use super::{Accounting, Notification, NotifyKind, Token};
use crate::counter::Counter;
use crate::ring::RingStats;
use crate::{sys, Error, ErrorKind, Result};

struct Entry {
    token: Token,
    counter: Counter,
    notifications: u64,
    hups: u64,
}

/// A `signalfd` receiving the overflow signals of counters attached to it, for the
/// calling thread.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, notify::{signalfd::SignalFd, Token}};
/// let mut sfd = SignalFd::new(None)?;
/// let c = Counter::builder("page-faults")?.period(10).wakeup_events(1).open()?;
/// sfd.attach(c, Token(1))?;
/// sfd.counter(Token(1)).unwrap().enable()?;
/// let v = vec![0u8; 1 << 20];
/// let mut out = Vec::new();
/// sfd.read(&mut out)?;
/// println!("{} notifications", out.len());
/// # drop(v);
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct SignalFd {
    sfd: OwnedFd,
    signo: i32,
    tid: libc::pid_t,
    old_mask: libc::sigset_t,
    entries: HashMap<RawFd, Entry>,
    stray: u64,
    /// The process that created it: drop disarms the counters only there (a forked
    /// child shares their `O_ASYNC` with the parent).
    pid: u32,
    /// Bound to the creating thread: the signal is blocked there and aimed at it.
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for SignalFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalFd")
            .field("sfd", &self.sfd)
            .field("signo", &self.signo)
            .field("tid", &self.tid)
            .field("counters", &self.entries.len())
            .finish()
    }
}

fn sig_err(op: String) -> Error {
    Error::from_errno(op, std::io::Error::last_os_error()).with_kind(ErrorKind::Signal)
}

impl SignalFd {
    /// Blocks `signal` (or the first free `SIGRTMIN+k` when `None`) in the calling
    /// thread and opens a non-blocking `signalfd` for it.
    ///
    /// # Errors
    /// [`ErrorKind::Signal`] when the signal is not real-time, has a handler (a
    /// handler and a signalfd would race for it), or is used by another `SignalFd`.
    #[doc(alias = "signalfd")]
    pub fn new(signal: Option<Signal>) -> Result<SignalFd> {
        let signo = claim_for_signalfd(signal.map(Signal::number))?;
        // SAFETY: zeroed sigsets are valid to initialise.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is ours.
        unsafe { libc::sigemptyset(&mut set) };
        // SAFETY: `set` is ours; signo is a real-time signal (checked by the claim).
        unsafe { libc::sigaddset(&mut set, signo) };
        // SAFETY: valid sigsets; blocks `signo` for this thread only.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask) };
        // SAFETY: `set` is a valid sigset; -1 asks for a new fd.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            let e = sig_err(format!("signalfd({signo})"));
            // SAFETY: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
            unclaim_for_signalfd(signo);
            return Err(e);
        }
        // SAFETY: a fresh fd nothing else owns.
        let sfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(SignalFd {
            sfd,
            signo,
            // SAFETY: gettid has no preconditions.
            tid: unsafe { libc::gettid() },
            old_mask,
            entries: HashMap::new(),
            stray: 0,
            pid: std::process::id(),
            _not_send: PhantomData,
        })
    }

    /// The signal.
    pub fn signal(&self) -> Signal {
        Signal::known(self.signo)
    }

    /// Aims `counter`'s overflow signals at this signalfd (this thread).
    ///
    /// # Errors
    /// An `fcntl` errno ([`ErrorKind::Signal`]).
    pub fn attach(&mut self, counter: Counter, token: Token) -> Result<()> {
        let fd = counter.as_raw_fd();
        arm_fd(
            fd,
            self.signo,
            super::signal::Owner::Thread(self.tid),
            counter.event().name(),
        )?;
        self.entries.insert(
            fd,
            Entry {
                token,
                counter,
                notifications: 0,
                hups: 0,
            },
        );
        Ok(())
    }

    fn find(&self, token: Token) -> Option<(&RawFd, &Entry)> {
        self.entries.iter().find(|(_, e)| e.token == token)
    }

    /// The counter attached under `token`.
    pub fn counter(&self, token: Token) -> Option<&Counter> {
        self.find(token).map(|(_, e)| &e.counter)
    }

    /// Notification counts for `token` plus a ring's totals.
    pub fn accounting(&self, token: Token, ring: Option<&RingStats>) -> Option<Accounting> {
        self.find(token)
            .map(|(_, e)| Accounting::new(e.notifications, e.hups, ring))
    }

    /// Signals read that were not from the kernel (`ssi_code <= 0`) or for an unknown fd.
    pub fn stray(&self) -> u64 {
        self.stray
    }

    /// Stops `token`'s signals, reads what is pending, and returns its counter.
    pub fn detach(&mut self, token: Token) -> Option<Counter> {
        let fd = *self.find(token)?.0;
        disarm_fd(fd);
        let mut sink = Vec::new();
        let _ = self.read(&mut sink);
        self.entries.remove(&fd).map(|e| e.counter)
    }

    /// Reads every pending signal without blocking, appending one [`Notification`]
    /// per attached counter's signal to `out`; returns how many were appended.
    ///
    /// # Errors
    /// A `read` errno other than `EAGAIN`/`EINTR`.
    pub fn read(&mut self, out: &mut Vec<Notification>) -> Result<usize> {
        const BATCH: usize = 32;
        let before = out.len();
        loop {
            // SAFETY: signalfd_siginfo is plain integers; all-zero is valid.
            let mut buf: [libc::signalfd_siginfo; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: `buf` is valid for writes of its full size; the fd is open.
            let n = unsafe {
                libc::read(
                    self.sfd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(&buf),
                )
            };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(out.len() - before),
                    _ => Err(Error::from_errno("read(signalfd)", err).with_kind(ErrorKind::Signal)),
                };
            }
            let count = n as usize / std::mem::size_of::<libc::signalfd_siginfo>();
            for si in &buf[..count] {
                let entry = (si.ssi_code > 0)
                    .then(|| self.entries.get_mut(&si.ssi_fd))
                    .flatten();
                let Some(e) = entry else {
                    self.stray += 1;
                    continue;
                };
                let hup = si.ssi_code == sys::POLL_HUP as i32;
                e.notifications += 1;
                e.hups += u64::from(hup);
                out.push(Notification {
                    token: e.token,
                    kind: if hup {
                        NotifyKind::Hup
                    } else {
                        NotifyKind::Overflow
                    },
                    fd: si.ssi_fd,
                    ip: 0,
                    sp: 0,
                    fp: 0,
                });
            }
            if count < BATCH {
                return Ok(out.len() - before);
            }
        }
    }
}

impl AsFd for SignalFd {
    /// The signalfd, readable when signals are pending: put it in an epoll set.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sfd.as_fd()
    }
}

impl Drop for SignalFd {
    fn drop(&mut self) {
        // Stop new signals, consume pending ones, and only then unblock: a real-time
        // signal left pending with SIG_DFL would kill the process once unblocked.
        // In a forked child the counters' O_ASYNC is the parent's too: leave it (the
        // child's signal mask and signalfd are its own, restored below).
        if std::process::id() == self.pid {
            for fd in self.entries.keys() {
                disarm_fd(*fd);
            }
        }
        let mut sink = Vec::new();
        let _ = self.read(&mut sink);
        // SAFETY: restores the mask saved in `new`, on the same thread (`!Send`).
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
        unclaim_for_signalfd(self.signo);
    }
}
