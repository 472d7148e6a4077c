//! A growable, lock-free (for readers) table that signal handlers look registrations up in.
//!
//! # Layout
//! Slots live in fixed-size chunks of [`CHUNK`] slots. A chunk is allocated (in normal
//! context, by a writer) the first time a slot in it is needed, published through an
//! `AtomicPtr` in `chunks`, and **never freed** while the registry exists (the
//! registries are `static`s, so never). A slot index `i` names slot `i % CHUNK` of
//! chunk `i / CHUNK`.
//!
//! Keys (an fd for thread signals, a `sig_data` for sigtrap) hash to one of [`BUCKETS`]
//! buckets. A bucket is the head of a singly linked chain of slot indices (`next`).
//! Chains only ever grow at the head, and a slot stays in the chain it was first put in
//! for the registry's lifetime: a retired slot is marked `FREE` in place and reused by
//! the next key that hashes to the same bucket. So a handler walking a chain never
//! follows a link into another chain, whatever writers do meanwhile.
//!
//! Handler lookup cost: one hash, one bucket load, and a chain walk whose expected
//! length is `1 + live/BUCKETS` — flat from 1 to tens of thousands of registrations
//! (fds are consecutive small integers, which Fibonacci hashing spreads one per
//! bucket). Measured in `benches/registry.rs`.
//!
//! # Safety
//! Handlers (signal context) only load atomics, bump counters and call the stored
//! callback: no allocation, no lock, and a loop bounded by the number of slots ever
//! allocated. Writers (normal context) serialise among themselves with a `Mutex` that
//! handlers never touch; only writers allocate.
//!
//! INVARIANTS (all accesses `SeqCst`, so one total order):
//! 1. A chunk pointer is stored before any index into that chunk is stored anywhere a
//!    handler can read it (a bucket head or a `next` link); so `slot(i)` for an index
//!    read from a bucket or link always finds a non-null chunk, and chunks are never
//!    freed, so the reference stays valid.
//! 2. A slot's `next` is written once, before the slot is published as a bucket head,
//!    and never again.
//! 3. `key`, `token`, `callback` and `data` are written only while the slot is `BUSY`
//!    (not `LIVE`), under the writers' lock.
//! 4. A handler uses a slot only between `active += 1` and `active -= 1`, and only if
//!    it saw `state == LIVE && key == k` *after* its increment. `quiesce` stores `BUSY`
//!    and then waits for `active == 0`. By the total order, either the handler's
//!    re-check comes after `BUSY` (it backs out) or `quiesce` sees its increment (and
//!    waits for it). So once `retire` returns, no handler is inside the slot or can
//!    enter it for the old registration; the callback's `data` may then be freed.
//! 5. A slot reused for the same key `k` (an fd number reused by a new registration)
//!    may be entered by a signal sent for the old one; it is never entered for a
//!    different key (the re-check compares the key). No misdirection across keys.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

const FREE: u32 = 0;
const BUSY: u32 = 1;
const LIVE: u32 = 2;

/// Slots per chunk.
pub(crate) const CHUNK: usize = 256;
/// Most chunks a registry can have: `CHUNK * MAX_CHUNKS` (1,048,576) registrations,
/// the kernel's default `fs.nr_open`.
pub(crate) const MAX_CHUNKS: usize = 4096;
/// Most registrations a registry holds.
pub(crate) const CAPACITY: usize = CHUNK * MAX_CHUNKS;
const BUCKET_BITS: u32 = 14;
/// Hash buckets (16384): lookups stay one probe deep well past 10,000 registrations.
pub(crate) const BUCKETS: usize = 1 << BUCKET_BITS;

pub(crate) struct Slot {
    state: AtomicU32,
    key: AtomicU64,
    /// Index + 1 of the next slot in this bucket's chain (0: end). Written once.
    next: AtomicU32,
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
            next: AtomicU32::new(0),
            token: AtomicU64::new(0),
            callback: AtomicUsize::new(0),
            data: AtomicUsize::new(0),
            active: AtomicU32::new(0),
            hits: AtomicU64::new(0),
            hups: AtomicU64::new(0),
        }
    }
}

struct Chunk {
    slots: [Slot; CHUNK],
}

/// The bucket of `key`: Fibonacci hashing (top bits of `key × 2^64/φ`), which spreads
/// consecutive keys (fds, counters' indices used as `sig_data`) over distinct buckets.
fn bucket(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BUCKET_BITS)) as usize
}

pub(crate) struct Registry {
    /// Index + 1 of each chain's first slot (0: empty).
    buckets: [AtomicU32; BUCKETS],
    chunks: [AtomicPtr<Chunk>; MAX_CHUNKS],
    /// Writers' lock; holds the number of slots allocated so far.
    writers: Mutex<usize>,
    live: AtomicUsize,
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
            buckets: [const { AtomicU32::new(0) }; BUCKETS],
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS],
            writers: Mutex::new(0),
            live: AtomicUsize::new(0),
            stray: AtomicU64::new(0),
        }
    }

    /// Slot `idx` (normal context), for an index returned by `claim`.
    pub(crate) fn slot(&self, idx: u32) -> &Slot {
        self.get(idx).expect("claim allocated the slot's chunk")
    }

    /// Slot `idx` if its chunk exists. Any context (no panic): by invariant 1 it always
    /// does for an index read from a bucket or a link.
    fn get(&self, idx: u32) -> Option<&Slot> {
        let c = self.chunks.get(idx as usize / CHUNK)?.load(SeqCst);
        if c.is_null() {
            return None;
        }
        // SAFETY:
        // - `c` is non-null (checked), so
        //   it came from `Box::into_raw` in `grow` and points to a valid `Chunk`;
        // - chunks are never freed while `self` lives (only `Drop` frees them), so the
        //   reference is valid for `&self`'s lifetime;
        // - `Chunk` is only ever accessed through shared references (atomics inside).
        let chunk = unsafe { &*c };
        Some(&chunk.slots[idx as usize % CHUNK])
    }

    /// Registrations currently live.
    pub(crate) fn live(&self) -> usize {
        self.live.load(SeqCst)
    }

    /// Normal context, writers' lock held: makes sure the chunk of slot `idx` exists.
    fn grow(&self, idx: usize) {
        let cell = &self.chunks[idx / CHUNK];
        if cell.load(SeqCst).is_null() {
            let chunk = Box::new(Chunk {
                slots: [const { Slot::new() }; CHUNK],
            });
            // Published before any index into it (invariant 1).
            cell.store(Box::into_raw(chunk), SeqCst);
        }
    }

    /// Normal context: takes a slot for `key`. `Ok(None)` when the registry is full;
    /// `Err(())` when `key` is already live.
    pub(crate) fn claim(
        &self,
        key: u64,
        token: u64,
        callback: usize,
        data: usize,
    ) -> Result<Option<u32>, ()> {
        let mut allocated = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        let b = &self.buckets[bucket(key)];
        let mut free = None;
        let mut i = b.load(SeqCst);
        while i != 0 {
            let s = self.slot(i - 1);
            match s.state.load(SeqCst) {
                LIVE if s.key.load(SeqCst) == key => return Err(()),
                FREE if free.is_none() => free = Some(i - 1),
                _ => {}
            }
            i = s.next.load(SeqCst);
        }
        let (idx, fresh) = match free {
            Some(idx) => (idx, false),
            None => {
                if *allocated >= CAPACITY {
                    return Ok(None);
                }
                let idx = *allocated;
                self.grow(idx);
                *allocated += 1;
                (idx as u32, true)
            }
        };
        let s = self.slot(idx);
        s.state.store(BUSY, SeqCst);
        s.key.store(key, SeqCst);
        s.token.store(token, SeqCst);
        s.callback.store(callback, SeqCst);
        s.data.store(data, SeqCst);
        s.hits.store(0, SeqCst);
        s.hups.store(0, SeqCst);
        s.state.store(LIVE, SeqCst);
        if fresh {
            // Invariant 2: link first, then publish as the head.
            s.next.store(b.load(SeqCst), SeqCst);
            b.store(idx + 1, SeqCst);
        }
        self.live.fetch_add(1, SeqCst);
        Ok(Some(idx))
    }

    /// Signal context: the live slot for `key`, held until the guard drops.
    /// Async-signal-safe: atomics only; the walk is bounded by the slots allocated.
    pub(crate) fn enter(&self, key: u64) -> Option<Entered<'_>> {
        let mut i = self.buckets[bucket(key)].load(SeqCst);
        while i != 0 {
            let s = self.get(i - 1)?;
            if s.state.load(SeqCst) == LIVE && s.key.load(SeqCst) == key {
                s.active.fetch_add(1, SeqCst);
                // Re-check after announcing ourselves (invariant 4).
                if s.state.load(SeqCst) == LIVE && s.key.load(SeqCst) == key {
                    return Some(Entered { slot: s });
                }
                s.active.fetch_sub(1, SeqCst);
            }
            i = s.next.load(SeqCst);
        }
        None
    }

    /// Normal context: stops handlers from entering slot `idx` and waits for those inside.
    fn quiesce(&self, idx: u32) {
        let s = self.slot(idx);
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

    /// Normal context: frees slot `idx` once no handler is inside it. Returns the
    /// slot's final `(hits, hups)`.
    pub(crate) fn retire(&self, idx: u32) -> (u64, u64) {
        let _w = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        self.quiesce(idx);
        let s = self.slot(idx);
        s.callback.store(0, SeqCst);
        s.data.store(0, SeqCst);
        s.state.store(FREE, SeqCst);
        self.live.fetch_sub(1, SeqCst);
        (s.hits.load(SeqCst), s.hups.load(SeqCst))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Only non-static registries (unit tests) are ever dropped; `&mut self` means
        // no handler can hold a reference into them.
        for c in &self.chunks {
            let p = c.swap(std::ptr::null_mut(), SeqCst);
            if !p.is_null() {
                // SAFETY: `p` came from `Box::into_raw` in `grow` and was swapped out,
                // so it is freed exactly once, with no other reference alive (`&mut`).
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed() -> Box<Registry> {
        Box::new(Registry::new())
    }

    #[test]
    fn grows_past_ten_thousand_and_finds_every_key() {
        let r = boxed();
        let n = 10_000u64;
        let idx: Vec<u32> = (0..n)
            .map(|k| r.claim(k + 3, k, 0, 0).unwrap().unwrap())
            .collect();
        assert_eq!(r.live(), n as usize);
        assert_eq!(r.claim(5, 0, 0, 0), Err(()), "duplicate key refused");
        for k in 0..n {
            let e = r.enter(k + 3).expect("live key found");
            assert_eq!(e.slot.token.load(SeqCst), k);
        }
        assert!(r.enter(n + 3).is_none());
        // Sequential keys land in distinct buckets: every chain is one slot long.
        let longest = (0..BUCKETS)
            .map(|b| {
                let (mut len, mut i) = (0, r.buckets[b].load(SeqCst));
                while i != 0 {
                    len += 1;
                    i = r.slot(i - 1).next.load(SeqCst);
                }
                len
            })
            .max()
            .unwrap();
        assert_eq!(longest, 1);
        for &i in &idx {
            r.retire(i);
        }
        assert_eq!(r.live(), 0);
        assert!(r.enter(3).is_none());
        // Re-registering reuses the freed slots instead of growing.
        let again: Vec<u32> = (0..n)
            .map(|k| r.claim(k + 3, k, 0, 0).unwrap().unwrap())
            .collect();
        assert_eq!(*r.writers.lock().unwrap(), n as usize);
        assert_eq!(again.iter().max(), idx.iter().max());
    }

    #[test]
    fn colliding_keys_share_a_chain_without_mixing_up() {
        let r = boxed();
        // Keys that collide: same top bits after the multiply are found by search.
        let base = 77u64;
        let mut keys = vec![base];
        let mut k = base;
        while keys.len() < 4 {
            k += 1;
            if bucket(k) == bucket(base) {
                keys.push(k);
            }
        }
        let slots: Vec<u32> = keys
            .iter()
            .map(|&k| r.claim(k, k * 10, 0, 0).unwrap().unwrap())
            .collect();
        for &k in &keys {
            assert_eq!(r.enter(k).unwrap().slot.token.load(SeqCst), k * 10);
        }
        r.retire(slots[1]);
        assert!(r.enter(keys[1]).is_none());
        assert_eq!(
            r.enter(keys[2]).unwrap().slot.token.load(SeqCst),
            keys[2] * 10
        );
    }
}
