//! The epoll driver on a tokio runtime (cargo feature `tokio`): [`AsyncPoller`] watches a
//! [`Poller`]'s epoll fd with [`AsyncFd`], drains the rings when it is readable, and
//! hands out [`Notification`]s as a [`Stream`] or batches of records through
//! [`AsyncPoller::next_batch`].
//!
//! # Examples
//! ```no_run
//! use futures_util::StreamExt;
//! use perfring::notify::{tokio::AsyncPoller, Poller, Token};
//! use perfring::ring::{Ring, RingSize};
//! use perfring::Counter;
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> perfring::Result<()> {
//!     let counter = Counter::builder("cpu-clock")?.period(1_000_000).wakeup_events(1).open()?;
//!     let ring = Ring::map(&counter, RingSize::Pages(8))?;
//!     let mut poller = Poller::new()?;
//!     poller.register(Token(0), counter, ring)?;
//!     poller.counter(Token(0)).unwrap().enable()?;
//!     let mut notifications = AsyncPoller::new(poller)?;
//!     while let Some(n) = notifications.next().await {
//!         let n = n?; // the records are already drained and counted
//!         let a = notifications.poller().accounting(n.token).unwrap();
//!         println!("{:?}: {} samples so far", n.kind, a.samples);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # How readiness is handled
//! Three layers of readiness are involved, and only tokio's cached one (the last) stays
//! set until it is told otherwise:
//! - a perf fd's readiness is **consumed by polling it** (`perf_poll` swaps the pending
//!   mask for zero), except `EPOLLHUP`, which stays once the watched task has exited;
//! - the poller's epoll fd is readable while its ready list holds something, but tokio's
//!   own `epoll_wait` finds that out by polling the perf fds through it, which consumes
//!   their readiness: our `epoll_wait` that follows usually returns nothing although
//!   the rings hold new records (measured on Linux 6.18 with `tests/tokio.rs`: 400 of
//!   404 passes got no epoll event, the 4 others an `EPOLLHUP`);
//! - tokio keeps the `AsyncFd` readable until we call
//!   [`clear_ready`](::tokio::io::unix::AsyncFdReadyMutGuard::clear_ready), and a
//!   wake-up that arrives after the readiness was observed is not lost by clearing it
//!   (tokio compares readiness ticks).
//!
//! So each pass runs [`Poller::poll_and_drain_all`]: a non-blocking `epoll_wait`, then
//! every ring drained until `data_head == data_tail` whether epoll reported it or not.
//! The readiness is cleared only when a pass found nothing at all (no epoll event, no
//! record, no budget spent); a pass that found something returns it and leaves the
//! readiness set, so the next pass runs at once and confirms the rings are empty before
//! sleeping. Records written without a wake-up (below `wakeup_events`) wait for the next
//! one, as with [`Poller::poll`]. An exited task's `EPOLLHUP` is reported once per
//! token, not on every pass, so it does not keep the loop spinning.
//!
//! # Budgets
//! A budget armed through [`AsyncPoller::arm`] (or
//! [`AsyncPoller::rearm`]) ends with a [`NotifyKind::Hup`](super::NotifyKind::Hup)
//! once its last sample has been drained, as with [`Poller::poll_and_drain`].
//!
//! # Safety
//! The only unsafe code is registering the poller's epoll fd with tokio, which requires
//! that fd to stay open and the same until the `AsyncFd` lets go of it. [`AsyncPoller`]
//! therefore never hands out `&mut Poller` (which `mem::replace` could swap for another
//! poller and fd); it forwards the mutating methods instead.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use futures_core::Stream;

use super::{Budget, Notification, Poller, Token};
use crate::counter::Counter;
use crate::ring::{RawRecord, Ring, RingSize};
use crate::{Error, Result};

/// A [`Poller`] driven by tokio: a [`Stream`] of [`Notification`]s, or
/// [`next_batch`](Self::next_batch) for the records themselves.
///
/// The stream drains the rings itself and keeps only the counts
/// ([`Poller::accounting`], through [`poller`](Self::poller)); use
/// [`next_batch`](Self::next_batch) to see each record. The stream never ends.
#[derive(Debug)]
pub struct AsyncPoller {
    fd: AsyncFd<Poller>,
    /// The stream's notifications not yet handed out.
    queued: VecDeque<Notification>,
    /// The stream's scratch space for one pass.
    events: Vec<Notification>,
}

impl AsyncPoller {
    /// Registers `poller`'s epoll fd with the current tokio runtime's reactor.
    ///
    /// # Errors
    /// Outside a tokio runtime with I/O enabled (`enable_io`/`enable_all`), or if the
    /// reactor cannot register the fd (the `epoll_ctl` errno).
    ///
    /// # Panics
    /// Never itself; tokio's docs say `AsyncFd::with_interest` may panic when the
    /// runtime is shutting down.
    pub fn new(poller: Poller) -> Result<AsyncPoller> {
        // SAFETY: `AsyncFd::register_with_interest` requires the fd from `as_raw_fd` to
        // be a valid open fd that stays open, the same file, and is the same number on
        // every call, until the `AsyncFd` is dropped or `into_inner`ed [1]:
        // - `Poller::as_raw_fd` returns its `ep: OwnedFd`, open from `Poller::new` until
        //   the poller drops, and `ep` is never reassigned;
        // - the poller lives inside the `AsyncFd` until then, and this type gives out
        //   only `&Poller`, never `&mut Poller`, so it cannot be replaced meanwhile.
        // [1] tokio `AsyncFd::register_with_interest`, "# Safety".
        let fd = unsafe { AsyncFd::register_with_interest(poller, Interest::READABLE) }
            .map_err(|e| Error::from_errno("AsyncFd::register(Poller)", e.into()))?;
        Ok(AsyncPoller {
            fd,
            queued: VecDeque::new(),
            events: Vec::new(),
        })
    }

    /// The poller: counters, rings and [`accounting`](Poller::accounting).
    pub fn poller(&self) -> &Poller {
        self.fd.get_ref()
    }

    /// [`Poller::register`] on the wrapped poller.
    ///
    /// # Errors
    /// As [`Poller::register`].
    pub fn register(&mut self, token: Token, counter: Counter, ring: Ring) -> Result<()> {
        self.fd.get_mut().register(token, counter, ring)
    }

    /// [`Poller::deregister`] on the wrapped poller.
    pub fn deregister(&mut self, token: Token) -> Option<(Counter, Ring)> {
        self.fd.get_mut().deregister(token)
    }

    /// [`Poller::arm`] on the wrapped poller: the stream reports a
    /// [`NotifyKind::Hup`](super::NotifyKind::Hup) once the budget is spent.
    ///
    /// # Errors
    /// As [`Poller::arm`].
    pub fn arm(&mut self, token: Token, budget: &Budget) -> Result<()> {
        self.fd.get_mut().arm(token, budget)
    }

    /// [`Poller::rearm`] on the wrapped poller.
    ///
    /// # Errors
    /// As [`Poller::rearm`].
    pub fn rearm(
        &mut self,
        token: Token,
        budget: &Budget,
        size: RingSize,
        f: impl FnMut(Token, RawRecord<'_>),
    ) -> Result<bool> {
        self.fd.get_mut().rearm(token, budget, size, f)
    }

    /// Deregisters from the reactor and hands the poller back (notifications the stream
    /// had not handed out yet are dropped; the counts stay in the poller).
    pub fn into_inner(self) -> Poller {
        self.fd.into_inner()
    }

    /// Waits until some ring has records or some token hung up, then drains every ring
    /// to `f` and fills `events` as [`Poller::poll_and_drain_all`] does. Returns the
    /// number of records read (`0` when only `Hup`s happened). `events` is never empty
    /// on success.
    ///
    /// Cancel-safe: records are handed to `f` only in the poll that returns them, so a
    /// future dropped before completion has drained nothing.
    ///
    /// # Errors
    /// As [`Poller::poll`], or the reactor's error for the epoll fd.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn f(mut p: perfring::notify::tokio::AsyncPoller) -> perfring::Result<()> {
    /// let mut events = Vec::new();
    /// let mut samples = 0u64;
    /// p.next_batch(&mut events, |_token, rec| {
    ///     samples += u64::from(rec.kind() == perfring::sys::PERF_RECORD_SAMPLE);
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn next_batch(
        &mut self,
        events: &mut Vec<Notification>,
        mut f: impl FnMut(Token, RawRecord<'_>),
    ) -> Result<u64> {
        std::future::poll_fn(|cx| poll_batch(&mut self.fd, cx, events, &mut f)).await
    }

    /// [`next_batch`](Self::next_batch) as a poll function, for hand-written futures.
    ///
    /// # Errors
    /// As [`next_batch`](Self::next_batch).
    pub fn poll_batch(
        &mut self,
        cx: &mut Context<'_>,
        events: &mut Vec<Notification>,
        mut f: impl FnMut(Token, RawRecord<'_>),
    ) -> Poll<Result<u64>> {
        poll_batch(&mut self.fd, cx, events, &mut f)
    }
}

/// One pass per readiness; see "How readiness is handled" in the module docs.
fn poll_batch(
    fd: &mut AsyncFd<Poller>,
    cx: &mut Context<'_>,
    events: &mut Vec<Notification>,
    f: &mut impl FnMut(Token, RawRecord<'_>),
) -> Poll<Result<u64>> {
    loop {
        let mut guard = ready!(fd.poll_read_ready_mut(cx))
            .map_err(|e| Error::from_errno("AsyncFd::poll_read_ready(Poller)", e))?;
        let n = guard.get_inner_mut().poll_and_drain_all(events, &mut *f)?;
        if !events.is_empty() {
            return Poll::Ready(Ok(n));
        }
        // Nothing anywhere: sleep until the reactor sees the epoll fd readable again.
        // The next `poll_read_ready_mut` registers the waker (or, if a wake-up came in
        // since this guard was taken, returns ready again).
        guard.clear_ready();
    }
}

impl Stream for AsyncPoller {
    type Item = Result<Notification>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(n) = this.queued.pop_front() {
            return Poll::Ready(Some(Ok(n)));
        }
        match ready!(poll_batch(
            &mut this.fd,
            cx,
            &mut this.events,
            &mut |_, _| {}
        )) {
            Ok(_) => {
                this.queued.extend(this.events.drain(..));
                // `poll_batch` returns only with at least one notification.
                Poll::Ready(this.queued.pop_front().map(Ok))
            }
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }
}
