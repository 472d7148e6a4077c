//! A bounded lock-free queue of [`Notification`]s from signal handlers to a thread.
//!
//! # Safety
//! Dmitry Vyukov's bounded MPMC algorithm: each cell has a sequence number that says
//! whether it holds a value for position `p` (`seq == p + 1`) or is free for position
//! `p` (`seq == p`). A producer owns a cell from its successful CAS on `enqueue` until
//! it publishes `seq = p + 1` (Release); a consumer owns it from its CAS on `dequeue`
//! until it publishes `seq = p + capacity` (Release). Readers of `seq` use Acquire, so
//! the value written before a publish is visible to whoever next owns the cell. No
//! operation waits for another thread: a full queue drops (counted), an empty one
//! returns `None`, so a handler interrupting a pop on the same thread cannot deadlock.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::Notification;

struct Cell {
    seq: AtomicUsize,
    val: UnsafeCell<MaybeUninit<Notification>>,
}

/// A bounded, lock-free, multi-producer queue that signal handlers push plain-data
/// [`Notification`]s into and a normal thread pops: the way to do heavy work (decode,
/// allocate, lock) for a notification outside signal context.
///
/// When full, [`push`](Self::push) drops the notification and counts it in
/// [`dropped`](Self::dropped); overflows are not lost by that, since they are counted
/// from the ring.
pub struct NotifyQueue {
    cells: Box<[Cell]>,
    mask: usize,
    enqueue: AtomicUsize,
    dequeue: AtomicUsize,
    dropped: AtomicU64,
    pushed: AtomicU64,
}

// SAFETY: cells are handed between threads only through the sequence protocol (module
// Safety); Notification is Copy plain data.
unsafe impl Sync for NotifyQueue {}
// SAFETY: as above; the queue owns its cells.
unsafe impl Send for NotifyQueue {}

impl std::fmt::Debug for NotifyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyQueue")
            .field("capacity", &self.capacity())
            .field("pushed", &self.pushed())
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl NotifyQueue {
    /// A queue of at least `capacity` entries (rounded up to a power of two, min 2).
    pub fn new(capacity: usize) -> NotifyQueue {
        let cap = capacity.max(2).next_power_of_two();
        let cells = (0..cap)
            .map(|i| Cell {
                seq: AtomicUsize::new(i),
                val: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        NotifyQueue {
            cells,
            mask: cap - 1,
            enqueue: AtomicUsize::new(0),
            dequeue: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
        }
    }

    /// How many entries it holds.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Async-signal-safe: appends `n`, or drops it (counted) when full. Never blocks.
    pub fn push(&self, n: Notification) -> bool {
        let mut pos = self.enqueue.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let dif = seq as isize - pos as isize;
            if dif == 0 {
                match self.enqueue.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the CAS made this producer the cell's only owner until
                        // the Release store below (module Safety).
                        unsafe { (*cell.val.get()).write(n) };
                        cell.seq.store(pos + 1, Ordering::Release);
                        self.pushed.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                pos = self.enqueue.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest notification, if any.
    pub fn pop(&self) -> Option<Notification> {
        let mut pos = self.dequeue.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let dif = seq as isize - (pos + 1) as isize;
            if dif == 0 {
                match self.dequeue.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: seq == pos + 1 (Acquire) means a producer wrote the value
                        // and published it; the CAS made us its only consumer.
                        let v = unsafe { (*cell.val.get()).assume_init_read() };
                        cell.seq.store(pos + self.mask + 1, Ordering::Release);
                        return Some(v);
                    }
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = self.dequeue.load(Ordering::Relaxed);
            }
        }
    }

    /// Notifications accepted so far.
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::Relaxed)
    }

    /// Notifications dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
