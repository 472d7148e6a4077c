//! The pushing thread: profiles wait in a bounded queue, are pushed one at a time, and
//! are retried with backoff while the store is down; every profile ends counted as
//! pushed or dropped, with why.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Pusher;
use crate::error::{Error, Result};
use crate::output::CutProfile;

/// How much a [`Queue`] keeps and how hard it tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Profiles waiting, at most; beyond it the oldest waiting is dropped.
    pub profiles: usize,
    /// Bytes of profiles waiting, at most (a single profile larger than this still
    /// waits, alone).
    pub bytes: usize,
    /// Attempts per profile while failures are transient, the first included.
    pub attempts: u32,
    /// The wait before the first retry; doubled for each next one (±20 %).
    pub backoff: Duration,
    /// The longest wait between attempts (a store's `Retry-After` is held to it too).
    pub max_backoff: Duration,
}

impl Default for QueueLimits {
    /// 8 profiles, 64 MiB, 6 attempts, backoff from 0.5 s to 30 s.
    fn default() -> Self {
        QueueLimits {
            profiles: 8,
            bytes: 64 << 20,
            attempts: 6,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What became of the profiles handed to a [`Queue`]. Every profile handed in is, once
/// the queue is finished, in exactly one of `pushed` and the `dropped_*` counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushStats {
    /// Profiles handed in.
    pub profiles: u64,
    /// Their samples.
    pub samples: u64,
    /// Profiles the store accepted.
    pub pushed: u64,
    /// Their samples.
    pub pushed_samples: u64,
    /// Profiles dropped waiting because the queue was full (the store was slower than
    /// the profiles came).
    pub dropped_full: u64,
    /// Profiles given up after [`QueueLimits::attempts`] transient failures.
    pub dropped_failed: u64,
    /// Profiles the store refused (bad request, credentials, TLS): not retried.
    pub dropped_rejected: u64,
    /// Profiles still unsent when [`Queue::finish`]'s deadline passed.
    pub dropped_unsent: u64,
    /// The samples of every dropped profile.
    pub dropped_samples: u64,
    /// Requests made.
    pub attempts: u64,
    /// Requests that failed.
    pub failures: u64,
    /// Profiles waiting now (not counting one being pushed).
    pub waiting: u64,
}

impl PushStats {
    /// Profiles dropped, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_full + self.dropped_failed + self.dropped_rejected + self.dropped_unsent
    }
}

struct State {
    waiting: VecDeque<CutProfile>,
    bytes: usize,
    stats: PushStats,
    /// When `finish` was called: the time by which to give up.
    deadline: Option<Instant>,
    /// The last failure's message, and how many failures there were.
    last_error: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    limits: QueueLimits,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic on the pushing thread leaves counts, not broken invariants.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A thread that pushes the profiles sent through its [`QueueSender`]s; see the
/// [module docs](super).
pub struct Queue {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("limits", &self.shared.limits)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Hands profiles to a [`Queue`] without waiting for the store: `send` takes a lock
/// held only by other sends and by the pushing thread between requests, never during
/// one.
#[derive(Clone)]
pub struct QueueSender {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for QueueSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSender").finish_non_exhaustive()
    }
}

impl QueueSender {
    /// Queues `profile`; if the queue is then over its limits, the oldest waiting
    /// profiles are dropped (and counted in [`PushStats::dropped_full`]).
    pub fn send(&self, profile: CutProfile) {
        let mut s = self.shared.lock();
        s.stats.profiles += 1;
        s.stats.samples += profile.samples;
        if s.deadline.is_some() {
            // Finishing: nothing new is taken.
            s.stats.dropped_unsent += 1;
            s.stats.dropped_samples += profile.samples;
            return;
        }
        s.bytes += profile.pprof.len();
        s.waiting.push_back(profile);
        let limits = self.shared.limits;
        while s.waiting.len() > 1
            && (s.waiting.len() > limits.profiles.max(1) || s.bytes > limits.bytes)
        {
            let old = s.waiting.pop_front().expect("more than one waiting");
            s.bytes -= old.pprof.len();
            s.stats.dropped_full += 1;
            s.stats.dropped_samples += old.samples;
        }
        s.stats.waiting = s.waiting.len() as u64;
        drop(s);
        self.shared.wake.notify_all();
    }
}

impl Queue {
    /// Starts the pushing thread (named `perfring-push`) with `pusher`.
    ///
    /// # Errors
    /// If the thread cannot be created.
    pub fn spawn(pusher: Pusher, limits: QueueLimits) -> Result<Queue> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                bytes: 0,
                stats: PushStats::default(),
                deadline: None,
                last_error: None,
            }),
            wake: Condvar::new(),
            limits,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("perfring-push".into())
            .spawn(move || run(&s, &pusher))
            .map_err(|e| Error::from_errno("spawn the pushing thread", e))?;
        Ok(Queue {
            shared,
            thread: Some(thread),
        })
    }

    /// A sender, for the [`Intervals`](crate::output::Intervals) output or any
    /// producer of profiles.
    pub fn sender(&self) -> QueueSender {
        QueueSender {
            shared: self.shared.clone(),
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> PushStats {
        self.shared.lock().stats
    }

    /// The last failure's message (credentials scrubbed) and how many attempts have
    /// failed so far, for a caller that reports failures as they happen.
    pub fn last_error(&self) -> Option<(u64, String)> {
        let s = self.shared.lock();
        s.last_error.clone().map(|e| (s.stats.failures, e))
    }

    /// Stops taking profiles, pushes those waiting (retrying as usual) until
    /// `deadline` from now, drops what is left, and returns the final counts. A
    /// request under way when the deadline passes is let finish (it is bounded by the
    /// endpoint's timeout). Once finished, the queue takes no more profiles; its
    /// counts and last error stay readable.
    pub fn finish(&mut self, deadline: Duration) -> PushStats {
        self.close(deadline);
        self.shared.lock().stats
    }

    fn close(&mut self, deadline: Duration) {
        {
            let mut s = self.shared.lock();
            if s.deadline.is_none() {
                s.deadline = Some(Instant::now() + deadline);
            }
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.close(Duration::ZERO);
    }
}

/// The pushing thread: one profile at a time, oldest first.
fn run(shared: &Shared, pusher: &Pusher) {
    let limits = shared.limits;
    let jitter = RandomState::new();
    let mut n = 0u64;
    loop {
        let profile = {
            let mut s = shared.lock();
            loop {
                if let Some(d) = s.deadline {
                    if Instant::now() >= d || s.waiting.is_empty() {
                        drop_waiting(&mut s);
                        return;
                    }
                }
                if let Some(p) = s.waiting.pop_front() {
                    s.bytes -= p.pprof.len();
                    s.stats.waiting = s.waiting.len() as u64;
                    break p;
                }
                s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        let mut backoff = limits.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = pusher.push(&profile.pprof, profile.from, profile.until);
            let mut s = shared.lock();
            s.stats.attempts += 1;
            let e = match result {
                Ok(()) => {
                    s.stats.pushed += 1;
                    s.stats.pushed_samples += profile.samples;
                    break;
                }
                Err(e) => e,
            };
            s.stats.failures += 1;
            s.last_error = Some(e.to_string());
            if !e.retryable() {
                s.stats.dropped_rejected += 1;
                s.stats.dropped_samples += profile.samples;
                break;
            }
            if attempt >= limits.attempts.max(1) {
                s.stats.dropped_failed += 1;
                s.stats.dropped_samples += profile.samples;
                break;
            }
            // Backoff: doubled each time, ±20 % so that many agents do not retry in
            // step, held to max_backoff (as is a store's Retry-After).
            n += 1;
            let spread = (jitter.hash_one(n) % 401) as f64 / 1000.0 + 0.8;
            let wait = e
                .retry_after()
                .unwrap_or_else(|| backoff.mul_f64(spread))
                .min(limits.max_backoff);
            backoff = (backoff * 2).min(limits.max_backoff);
            let until = Instant::now() + wait;
            let mut gave_up = false;
            loop {
                let now = Instant::now();
                let end = s.deadline.map_or(until, |d| d.min(until));
                if s.deadline.is_some_and(|d| now >= d) {
                    gave_up = true;
                    break;
                }
                if now >= end {
                    break;
                }
                s = shared
                    .wake
                    .wait_timeout(s, end - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if gave_up {
                s.stats.dropped_unsent += 1;
                s.stats.dropped_samples += profile.samples;
                break;
            }
        }
    }
}

fn drop_waiting(s: &mut State) {
    while let Some(p) = s.waiting.pop_front() {
        s.stats.dropped_unsent += 1;
        s.stats.dropped_samples += p.samples;
    }
    s.bytes = 0;
    s.stats.waiting = 0;
}
