//! A fixed-size, lock-free table that signal handlers look registrations up in.
//!
//! # Safety
//! Handlers only load atomics, bump counters and call the stored callback. Writers
//! (normal context) serialise among themselves with a `Mutex` that handlers never
//! touch. A slot is read by a handler only between `active += 1` and `active -= 1`
//! while it is `LIVE`; [`Registry::retire`] makes it `BUSY` and then waits for
//! `active == 0`, all `SeqCst`, so a handler either sees `BUSY` or is waited for.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

const FREE: u32 = 0;
const BUSY: u32 = 1;
const LIVE: u32 = 2;

/// How many registrations a registry holds.
pub(crate) const SLOTS: usize = 256;

pub(crate) struct Slot {
    state: AtomicU32,
    key: AtomicU64,
    pub(crate) token: AtomicU64,
    pub(crate) callback: AtomicUsize,
    pub(crate) data: AtomicUsize,
    active: AtomicU32,
    pub(crate) hits: AtomicU64,
    pub(crate) hups: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(FREE),
            key: AtomicU64::new(0),
            token: AtomicU64::new(0),
            callback: AtomicUsize::new(0),
            data: AtomicUsize::new(0),
            active: AtomicU32::new(0),
            hits: AtomicU64::new(0),
            hups: AtomicU64::new(0),
        }
    }
}

/// Slot indices to try for `key`: its home slot (`key % SLOTS`, so an fd or a small
/// sig_data maps straight to its own slot) and then every other slot, wrapping.
fn probe(key: u64) -> impl Iterator<Item = usize> {
    let home = (key % SLOTS as u64) as usize;
    (0..SLOTS).map(move |k| (home + k) % SLOTS)
}

pub(crate) struct Registry {
    slots: [Slot; SLOTS],
    writers: Mutex<()>,
    /// Signals that matched no slot (unknown fd / sig_data) or were not from the kernel.
    pub(crate) stray: AtomicU64,
}

/// A handler's hold on a live slot; dropping it lets `retire` proceed.
pub(crate) struct Entered<'a> {
    pub(crate) slot: &'a Slot,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.slot.active.fetch_sub(1, SeqCst);
    }
}

impl Registry {
    pub(crate) const fn new() -> Registry {
        Registry {
            slots: [const { Slot::new() }; SLOTS],
            writers: Mutex::new(()),
            stray: AtomicU64::new(0),
        }
    }

    pub(crate) fn slot(&self, idx: usize) -> &Slot {
        &self.slots[idx]
    }

    /// Registrations currently live.
    pub(crate) fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(SeqCst) == LIVE)
            .count()
    }

    /// Normal context: takes a free slot for `key`. `None` when full; `Err(())` when
    /// `key` is already live.
    pub(crate) fn claim(
        &self,
        key: u64,
        token: u64,
        callback: usize,
        data: usize,
    ) -> Result<Option<usize>, ()> {
        let _w = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        if self
            .slots
            .iter()
            .any(|s| s.state.load(SeqCst) == LIVE && s.key.load(SeqCst) == key)
        {
            return Err(());
        }
        // Start at the key's home slot so that `enter` usually finds it first probe.
        for i in probe(key) {
            let s = &self.slots[i];
            if s.state.compare_exchange(FREE, BUSY, SeqCst, SeqCst).is_ok() {
                s.key.store(key, SeqCst);
                s.token.store(token, SeqCst);
                s.callback.store(callback, SeqCst);
                s.data.store(data, SeqCst);
                s.hits.store(0, SeqCst);
                s.hups.store(0, SeqCst);
                s.state.store(LIVE, SeqCst);
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Signal context: the live slot for `key`, held until the guard drops.
    /// Async-signal-safe: atomics only, bounded loop.
    pub(crate) fn enter(&self, key: u64) -> Option<Entered<'_>> {
        for i in probe(key) {
            let s = &self.slots[i];
            if s.state.load(SeqCst) != LIVE || s.key.load(SeqCst) != key {
                continue;
            }
            s.active.fetch_add(1, SeqCst);
            // Re-check after announcing ourselves: `retire` may have started between.
            if s.state.load(SeqCst) == LIVE && s.key.load(SeqCst) == key {
                return Some(Entered { slot: s });
            }
            s.active.fetch_sub(1, SeqCst);
        }
        None
    }

    /// Normal context: stops handlers from entering slot `idx` and waits for those inside.
    fn quiesce(&self, idx: usize) {
        let s = &self.slots[idx];
        s.state.store(BUSY, SeqCst);
        let mut spins = 0u32;
        while s.active.load(SeqCst) != 0 {
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Normal context: frees slot `idx` once no handler is inside it.
    pub(crate) fn retire(&self, idx: usize) {
        let _w = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        self.quiesce(idx);
        let s = &self.slots[idx];
        s.callback.store(0, SeqCst);
        s.data.store(0, SeqCst);
        s.state.store(FREE, SeqCst);
    }

    /// Normal context: gives slot `idx` a new key (a reopened counter's fd).
    pub(crate) fn rekey(&self, idx: usize, key: u64) {
        let _w = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        self.quiesce(idx);
        let s = &self.slots[idx];
        s.key.store(key, SeqCst);
        s.state.store(LIVE, SeqCst);
    }
}
