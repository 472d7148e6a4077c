//! An epoll driver over many (counter, ring) pairs: who is readable, who hung up.
//!
//! # Notes on readiness
//! A perf fd's readiness is **consumed by the poll itself** (the kernel's `perf_poll`
//! swaps the pending mask for zero), so epoll reports it once even level-triggered.
//! After a wake-up, drain the ring until `data_head == data_tail`
//! ([`Poller::drain`], [`Poller::poll_and_drain`]) before waiting again, or records
//! published after the wake-up wait for the next one.
//!
//! `EPOLLHUP` is reported when the watched task has exited, and then on every poll
//! (it is a state, not an edge) until the token is deregistered. A `REFRESH` budget running
//! out is *not* visible to epoll (the kernel only puts `POLL_HUP` in the signal), so a
//! budget armed through [`Poller::arm`] or [`Poller::rearm`] is counted against the
//! ring's samples, and [`Poller::poll_and_drain`] reports [`NotifyKind::Hup`] itself
//! when the last budgeted sample has been drained.
//!
//! # Inside an event loop
//! The poller's own epoll fd ([`AsFd`] / [`AsRawFd`]) is readable while some registered
//! fd is ready, so an event loop can watch the whole poller with one registration. But
//! the outer `epoll_wait` learns that by polling the perf fds through the inner epoll,
//! and that poll consumes their readiness as above: the inner `epoll_wait` that
//! follows usually finds nothing. [`Poller::poll_and_drain_all`] is made for that case:
//! it drains every ring, reported or not, and reports the tokens that had records.
//!
//! # Safety
//! The only unsafe code is the `epoll_*` system calls, each on an fd this module owns.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use super::{Accounting, Notification, NotifyKind, Token};
use crate::counter::Counter;
use crate::ring::{RawRecord, Ring};
use crate::{Error, ErrorKind, Result};

struct Entry {
    counter: Counter,
    ring: Ring,
    notifications: u64,
    hups: u64,
    /// The ring's sample count at which an armed budget is spent; `None` when no budget
    /// is pending.
    budget_end: Option<u64>,
    /// Whether [`Poller::poll_and_drain_all`] has reported the task's exit (`EPOLLHUP`).
    exit_reported: bool,
}

impl Entry {
    /// A `Hup` notification if the armed budget's last sample has been drained (once).
    fn budget_hup(&mut self, token: Token) -> Option<Notification> {
        let end = self.budget_end?;
        if self.ring.stats().samples < end {
            return None;
        }
        self.budget_end = None;
        self.hups += 1;
        Some(Notification {
            token,
            kind: NotifyKind::Hup,
            fd: self.counter.as_raw_fd(),
            ip: 0,
            sp: 0,
            fp: 0,
        })
    }
}

/// Waits on many counters at once with `epoll`, mio-style: register with a [`Token`],
/// [`poll`](Self::poll), get back which tokens are readable or hung up.
///
/// The poller owns each registered counter and its ring, so it can drain the ring for
/// you and keep [`Accounting`] per token.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, notify::{Poller, Token}, ring::{Ring, RingSize}};
/// let counter = Counter::builder("cpu-clock")?.period(1_000_000).wakeup_events(1).open()?;
/// let ring = Ring::map(&counter, RingSize::Pages(8))?;
/// let mut poller = Poller::new()?;
/// poller.register(Token(7), counter, ring)?;
/// poller.counter(Token(7)).unwrap().enable()?;
/// let mut events = Vec::new();
/// poller.poll_and_drain(&mut events, Some(std::time::Duration::from_millis(100)), |_token, rec| {
///     println!("record type {}", rec.kind());
/// })?;
/// println!("{:?}", poller.accounting(Token(7)));
/// # Ok::<(), perfring::Error>(())
/// ```
///
/// # Notes
/// `EINTR` is not retried: [`poll`](Self::poll) returns `Ok(0)` with no events, so a
/// loop that checks a flag set by a signal handler sees it promptly. Poll again.
///
/// After `fork`, the child's copy shares the epoll instance, the counters and the
/// rings with the parent. Dropping it only closes and unmaps the child's copies (no
/// `epoll_ctl`, no ioctl, no `data_tail` store), so a child that exits never changes
/// what the parent receives; a child that *drains* would consume the parent's records.
pub struct Poller {
    ep: OwnedFd,
    entries: HashMap<Token, Entry>,
    buf: Vec<libc::epoll_event>,
    /// The eventfd of [`Poller::waker`], registered under [`Waker::TOKEN`].
    waker: Option<Arc<OwnedFd>>,
}

/// Wakes a [`Poller`] from another thread: [`Poller::poll`] returns (with no
/// notification for it) when [`wake`](Self::wake) is called, as `mio::Waker` does.
/// From [`Poller::waker`].
#[derive(Debug, Clone)]
pub struct Waker {
    fd: Arc<OwnedFd>,
}

impl Waker {
    /// The token the waker's eventfd is registered under (refused by
    /// [`Poller::register`] once the poller has a waker).
    pub const TOKEN: Token = Token(u64::MAX);

    /// Makes the poller's current or next `poll` return.
    ///
    /// # Errors
    /// The `write(2)` errno (none expected: the counter saturates long after 2^63 wakes).
    pub fn wake(&self) -> Result<()> {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, alive across the call, to our eventfd.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n < 0 {
            return Err(Error::from_errno(
                "Waker::wake(write eventfd)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

/// Reads an eventfd to zero (non-blocking), so that epoll stops reporting it.
fn reset_eventfd(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into `v`, alive across the call; the fd is
    // non-blocking, so an empty eventfd returns EAGAIN at once.
    unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut v as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("ep", &self.ep)
            .field("tokens", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn epoll_error(op: &str, err: std::io::Error) -> Error {
    let e = Error::from_errno(op, err);
    match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => e
            .with_kind(ErrorKind::TooManyFiles)
            .with_fix("raise the open file limit (ulimit -n) or close unused counters"),
        Some(libc::ENOSPC) => e
            .with_kind(ErrorKind::TooManyFiles)
            .with_fix("raise /proc/sys/fs/epoll/max_user_watches"),
        _ => e,
    }
}

impl Poller {
    /// `epoll_create1(EPOLL_CLOEXEC)`.
    #[doc(alias = "epoll_create1")]
    pub fn new() -> Result<Poller> {
        // SAFETY: epoll_create1 takes only flags and returns a new fd or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(epoll_error(
                "epoll_create1",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` is a fresh epoll fd that nothing else owns.
        let ep = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Poller {
            ep,
            entries: HashMap::new(),
            buf: Vec::with_capacity(64),
            waker: None,
        })
    }

    /// A [`Waker`] for this poller (the same one on every call): an eventfd registered
    /// under [`Waker::TOKEN`], which [`poll`](Self::poll) resets and never reports.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] if [`Waker::TOKEN`] is registered;
    /// `eventfd`/`epoll_ctl` errnos.
    pub fn waker(&mut self) -> Result<Waker> {
        if let Some(fd) = &self.waker {
            return Ok(Waker { fd: fd.clone() });
        }
        if self.entries.contains_key(&Waker::TOKEN) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Poller::waker",
                format!("{:?} is registered to a counter", Waker::TOKEN),
            )
            .with_fix("register counters under other tokens"));
        }
        // SAFETY: eventfd takes an initial value and flags and returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(epoll_error("eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh eventfd that nothing else owns.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), Waker::TOKEN)
            .map_err(|e| epoll_error("epoll_ctl(ADD, waker)", e))?;
        self.waker = Some(fd.clone());
        Ok(Waker { fd })
    }

    fn ctl(&self, op: libc::c_int, fd: i32, token: Token) -> std::io::Result<()> {
        ctl(self.ep.as_raw_fd(), op, fd, token)
    }

    /// Watches `counter` (whose records go to `ring`) under `token`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] if `token` is taken; an `epoll_ctl` errno otherwise.
    #[doc(alias = "epoll_ctl")]
    pub fn register(&mut self, token: Token, counter: Counter, ring: Ring) -> Result<()> {
        if self.entries.contains_key(&token) || (token == Waker::TOKEN && self.waker.is_some()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("Poller::register({token:?})"),
                "the token is already registered",
            )
            .with_fix("deregister it first or pick another token"));
        }
        self.ctl(libc::EPOLL_CTL_ADD, counter.as_raw_fd(), token)
            .map_err(|e| epoll_error(&format!("epoll_ctl(ADD, {})", counter.event().name()), e))?;
        self.entries.insert(
            token,
            Entry {
                counter,
                ring,
                notifications: 0,
                hups: 0,
                budget_end: None,
                exit_reported: false,
            },
        );
        Ok(())
    }

    /// Stops watching `token` and hands its counter and ring back (unread records stay
    /// in the ring).
    pub fn deregister(&mut self, token: Token) -> Option<(Counter, Ring)> {
        let e = self.entries.remove(&token)?;
        // A failure can only mean the fd is no longer in the set; nothing to undo.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, e.counter.as_raw_fd(), token);
        Some((e.counter, e.ring))
    }

    /// Gives `token`'s counter a new [`Budget`](super::Budget). When the budget reopens
    /// the counter (breakpoints, whose spent budget the kernel will not refresh), the
    /// new counter gets a new ring of `size` and takes the old one's place under
    /// `token`; records left in the old ring are drained to `f` first. Returns `true`
    /// if the counter was reopened.
    ///
    /// # Errors
    /// As [`Budget::rearm`](super::Budget::rearm), [`Ring::map`] and [`register`](Self::register);
    /// [`ErrorKind::NotFound`] for an unknown token.
    pub fn rearm(
        &mut self,
        token: Token,
        budget: &super::Budget,
        size: crate::ring::RingSize,
        mut f: impl FnMut(Token, RawRecord<'_>),
    ) -> Result<bool> {
        let ep = self.ep.as_raw_fd();
        let Some(entry) = self.entries.get_mut(&token) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("Poller::rearm({token:?})"),
                "no such token",
            ));
        };
        if !budget.reopens() {
            budget.arm(&entry.counter)?;
            entry.budget_end = Some(entry.ring.stats().samples + u64::from(budget.n()));
            return Ok(false);
        }
        let fresh = budget.builder().open()?;
        let ring = Ring::map(&fresh, size)?;
        drain_ring(&mut entry.ring, token, &mut f);
        let _ = ctl(ep, libc::EPOLL_CTL_DEL, entry.counter.as_raw_fd(), token);
        ctl(ep, libc::EPOLL_CTL_ADD, fresh.as_raw_fd(), token)
            .map_err(|e| epoll_error(&format!("epoll_ctl(ADD, {})", fresh.event().name()), e))?;
        budget.arm(&fresh)?;
        entry.counter = fresh;
        entry.ring = ring;
        entry.budget_end = Some(u64::from(budget.n()));
        entry.exit_reported = false;
        Ok(true)
    }

    /// Arms `token`'s counter with `budget` (`REFRESH(n)`); once `n` samples have been
    /// drained, [`poll_and_drain`](Self::poll_and_drain) reports a [`NotifyKind::Hup`]
    /// for it, which epoll alone never would.
    ///
    /// # Errors
    /// As [`Budget::arm`](super::Budget::arm); [`ErrorKind::NotFound`] for an unknown token.
    pub fn arm(&mut self, token: Token, budget: &super::Budget) -> Result<()> {
        let Some(entry) = self.entries.get_mut(&token) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("Poller::arm({token:?})"),
                "no such token",
            ));
        };
        budget.arm(&entry.counter)?;
        entry.budget_end = Some(entry.ring.stats().samples + u64::from(budget.n()));
        Ok(())
    }

    /// The counter registered under `token`.
    pub fn counter(&self, token: Token) -> Option<&Counter> {
        self.entries.get(&token).map(|e| &e.counter)
    }

    /// The ring registered under `token`.
    pub fn ring_mut(&mut self, token: Token) -> Option<&mut Ring> {
        self.entries.get_mut(&token).map(|e| &mut e.ring)
    }

    /// Registered tokens, in no particular order.
    pub fn tokens(&self) -> impl Iterator<Item = Token> + '_ {
        self.entries.keys().copied()
    }

    /// Notifications seen and the ring's totals for `token`.
    pub fn accounting(&self, token: Token) -> Option<Accounting> {
        self.entries
            .get(&token)
            .map(|e| Accounting::new(e.notifications, e.hups, Some(&e.ring.stats())))
    }

    /// `epoll_wait`: clears `events`, fills it with one [`Notification`] per ready
    /// token (`Hup` if the kernel said `EPOLLHUP`, else `Overflow`) and returns how many.
    ///
    /// `timeout` `None` waits forever; `Some(Duration::ZERO)` does not wait.
    ///
    /// # Errors
    /// An `epoll_wait` errno other than `EINTR` (which gives `Ok(0)`, see the type docs).
    #[doc(alias = "epoll_wait")]
    pub fn poll(
        &mut self,
        events: &mut Vec<Notification>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        events.clear();
        self.wait(timeout)?;
        for i in 0..self.buf.len() {
            let ev = self.buf[i];
            if let Some(n) = self.notification(Token(ev.u64), ev.events) {
                events.push(n);
            }
        }
        Ok(events.len())
    }

    /// `epoll_wait` into `self.buf`; `EINTR` leaves it empty.
    fn wait(&mut self, timeout: Option<Duration>) -> Result<()> {
        let ms = match timeout {
            None => -1,
            // Round up so that a 100 µs timeout waits rather than spins.
            Some(d) => d
                .as_nanos()
                .div_ceil(1_000_000)
                .min(libc::c_int::MAX as u128) as libc::c_int,
        };
        let cap = self.entries.len().clamp(1, 1024);
        self.buf.clear();
        self.buf.reserve(cap);
        // SAFETY: `buf` has capacity for `cap` epoll_events; the kernel writes at most
        // `cap` of them and returns how many, which we then set as the length.
        let n = unsafe {
            libc::epoll_wait(
                self.ep.as_raw_fd(),
                self.buf.as_mut_ptr(),
                cap as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                return Ok(());
            }
            return Err(epoll_error("epoll_wait", err));
        }
        // SAFETY: the kernel initialised the first `n <= cap` entries.
        unsafe { self.buf.set_len(n as usize) };
        if let Some(fd) = &self.waker {
            if self.buf.iter().any(|ev| ev.u64 == Waker::TOKEN.0) {
                reset_eventfd(fd);
                self.buf.retain(|ev| ev.u64 != Waker::TOKEN.0);
            }
        }
        Ok(())
    }

    /// Counts one epoll event for `token` and turns it into a [`Notification`]
    /// (`None` for a token no longer registered).
    fn notification(&mut self, token: Token, epoll_events: u32) -> Option<Notification> {
        let entry = self.entries.get_mut(&token)?;
        let hup = epoll_events & (libc::EPOLLHUP as u32) != 0;
        entry.notifications += 1;
        entry.hups += u64::from(hup);
        Some(Notification {
            token,
            kind: if hup {
                NotifyKind::Hup
            } else {
                NotifyKind::Overflow
            },
            fd: entry.counter.as_raw_fd(),
            ip: 0,
            sp: 0,
            fp: 0,
        })
    }

    /// Reads `token`'s ring until `data_head == data_tail`, handing each record to `f`,
    /// and returns how many records it read. Malformed ring contents are skipped
    /// (counted in the ring's `skipped_bytes`), never fatal.
    pub fn drain(&mut self, token: Token, mut f: impl FnMut(Token, RawRecord<'_>)) -> u64 {
        let Some(entry) = self.entries.get_mut(&token) else {
            return 0;
        };
        drain_ring(&mut entry.ring, token, &mut f)
    }

    /// [`poll`](Self::poll), then [`drain`](Self::drain) every ready token's ring.
    ///
    /// Returns the number of records read; `events` says who was ready and how.
    pub fn poll_and_drain(
        &mut self,
        events: &mut Vec<Notification>,
        timeout: Option<Duration>,
        mut f: impl FnMut(Token, RawRecord<'_>),
    ) -> Result<u64> {
        self.poll(events, timeout)?;
        let mut n = 0;
        // Index loop: budget `Hup`s are appended while walking the ready tokens.
        for i in 0..events.len() {
            let token = events[i].token;
            if let Some(entry) = self.entries.get_mut(&token) {
                n += drain_ring(&mut entry.ring, token, &mut f);
                if let Some(hup) = entry.budget_hup(token) {
                    events.push(hup);
                }
            }
        }
        Ok(n)
    }

    /// [`poll`](Self::poll) without waiting, then drains **every** ring, whether
    /// epoll reported it or not: for a poller whose own fd is watched by another epoll
    /// (an event loop such as tokio's), where the outer `epoll_wait` has usually already
    /// consumed the perf readiness (see the [module docs](self)).
    ///
    /// Clears `events` and fills it with, per token:
    /// - the `Overflow` epoll reported, or else one `Overflow` if its ring had records
    ///   (counted in [`Accounting::notifications`] like a wake-up);
    /// - `Hup` when the watched task has exited, **once** per token (where
    ///   [`poll`](Self::poll) repeats it on every call);
    /// - `Hup` when an armed budget's last sample has been drained, as
    ///   [`poll_and_drain`](Self::poll_and_drain) does.
    ///
    /// Returns the number of records read. Nothing in `events` and `Ok(0)` means that
    /// there was nothing to do.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub fn poll_and_drain_all(
        &mut self,
        events: &mut Vec<Notification>,
        mut f: impl FnMut(Token, RawRecord<'_>),
    ) -> Result<u64> {
        events.clear();
        self.wait(Some(Duration::ZERO))?;
        for i in 0..self.buf.len() {
            let ev = self.buf[i];
            let token = Token(ev.u64);
            let hup = ev.events & (libc::EPOLLHUP as u32) != 0;
            match self.entries.get_mut(&token) {
                Some(e) if hup && e.exit_reported => continue,
                Some(e) if hup => e.exit_reported = true,
                _ => {}
            }
            if let Some(n) = self.notification(token, ev.events) {
                events.push(n);
            }
        }
        let mut n = 0;
        for (&token, entry) in self.entries.iter_mut() {
            let read = drain_ring(&mut entry.ring, token, &mut f);
            n += read;
            if read > 0 && !events.iter().any(|e| e.token == token) {
                entry.notifications += 1;
                events.push(Notification {
                    token,
                    kind: NotifyKind::Overflow,
                    fd: entry.counter.as_raw_fd(),
                    ip: 0,
                    sp: 0,
                    fp: 0,
                });
            }
            if let Some(hup) = entry.budget_hup(token) {
                events.push(hup);
            }
        }
        Ok(n)
    }

    /// Drains every registered ring (e.g. after disabling, to collect the tail end).
    pub fn drain_all(&mut self, mut f: impl FnMut(Token, RawRecord<'_>)) -> u64 {
        let mut n = 0;
        for (token, entry) in self.entries.iter_mut() {
            n += drain_ring(&mut entry.ring, *token, &mut f);
        }
        n
    }
}

/// The epoll fd: readable when some registered counter is ready, so an event loop can
/// watch the whole poller (see "Inside an event loop" in the module docs).
impl AsFd for Poller {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ep.as_fd()
    }
}

/// As [`AsFd`].
impl AsRawFd for Poller {
    fn as_raw_fd(&self) -> RawFd {
        self.ep.as_raw_fd()
    }
}

/// `epoll_ctl(ep, op, fd)` for EPOLLIN | EPOLLHUP with `token` as the user data.
fn ctl(ep: i32, op: libc::c_int, fd: i32, token: Token) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLHUP) as u32,
        u64: token.0,
    };
    // SAFETY: `ep` is the poller's open epoll fd and `fd` a counter it holds; `ev` is a
    // valid epoll_event living across the call (ignored for EPOLL_CTL_DEL).
    let r = unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads until head == tail: a batch stops at the head it snapshotted, and the kernel
/// may have published more meanwhile, so loop until a fresh snapshot finds nothing.
pub(crate) fn drain_ring(
    ring: &mut Ring,
    token: Token,
    f: &mut impl FnMut(Token, RawRecord<'_>),
) -> u64 {
    let mut n = 0;
    while !ring.is_empty() {
        let mut batch = ring.batch();
        while let Some(rec) = batch.next() {
            if let Ok(rec) = rec {
                n += 1;
                f(token, rec);
            }
        }
    }
    n
}
