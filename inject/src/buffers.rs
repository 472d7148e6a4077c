//! Per-thread lock-free record buffers: each overflowing thread (the producer, in its
//! SIGTRAP handler) appends to its own single-producer ring; the writer thread (the
//! consumer) empties them all.
//!
//! A fixed pool of [`SLOTS`] buffers is allocated zeroed at start-up (untouched pages
//! cost nothing), so the handler never allocates: a thread claims a free slot with
//! one compare-and-swap of its tid. The writer frees a slot once its thread has exited
//! and it is empty.
//!
//! # Safety
//! Entry `i` of a slot is written only by the producer while `i` is in
//! `[tail, tail + CAP)` and not yet published by `head`, and read only by the consumer
//! while in `[tail, head)`: the Release store of `head` after writing pairs with the
//! consumer's Acquire load, the Release store of `tail` after reading pairs with the
//! producer's Acquire load. SIGTRAP is blocked while its handler runs, so a thread is
//! never its own second producer.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Buffers in the pool: threads with a buffer at the same time.
pub const SLOTS: usize = 128;
/// Records per thread buffer before drops.
pub const CAP: u64 = 2048;
/// Frame-pointer return addresses kept per sample (after the ip).
pub const FRAMES: usize = 30;
/// Bytes of the stack copied from `sp` per sample, for the unwinder's first frame
/// (its CFI reads the return address of a function that has not pushed its frame):
/// what the library's frame-pointer mode asks the kernel for.
pub const STACK_BYTES: usize = perfring::unwind::FP_STACK_BYTES as usize;

/// One recorded overflow, plain data.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Entry {
    /// Index of the event in the configuration.
    pub event: u32,
    /// The overflowing thread.
    pub tid: u32,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// Valid entries of `frames`.
    pub nframes: u64,
    /// Return addresses, innermost first.
    pub frames: [u64; FRAMES],
    /// The interrupted stack pointer.
    pub sp: u64,
    /// The interrupted frame pointer.
    pub bp: u64,
    /// Valid bytes of `stack`.
    pub stack_len: u64,
    /// The top of the stack, from `sp` up.
    pub stack: [u8; STACK_BYTES],
}

impl Entry {
    /// The valid return addresses, innermost first.
    pub fn frames(&self) -> &[u64] {
        let n = (self.nframes as usize).min(FRAMES);
        &self.frames[..n]
    }

    /// The valid part of the stack copy.
    pub fn stack_copy(&self) -> &[u8] {
        &self.stack[..(self.stack_len as usize).min(STACK_BYTES)]
    }
}

/// One thread's buffer.
pub struct Slot {
    /// The owning thread, 0 when free.
    pub tid: AtomicU32,
    head: AtomicU64,
    tail: AtomicU64,
    /// Records dropped because the buffer was full.
    pub dropped: AtomicU64,
    entries: Box<[UnsafeCell<Entry>]>,
}

// SAFETY: entries are shared between one producer and one consumer under the
// head/tail protocol of the module Safety section.
unsafe impl Sync for Slot {}

/// The pool.
pub struct Pool {
    slots: Box<[Slot]>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new()
    }
}

impl Pool {
    /// Allocates the pool, zeroed (all slots free).
    pub fn new() -> Pool {
        let slots = (0..SLOTS)
            .map(|_| Slot {
                tid: AtomicU32::new(0),
                head: AtomicU64::new(0),
                tail: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                entries: zeroed_entries(CAP as usize),
            })
            .collect();
        Pool { slots }
    }

    /// The slots.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The slot of thread `tid`, claiming a free one if it has none. Lock-free and
    /// allocation-free (signal context). `None` when every slot is taken.
    pub fn slot_of(&self, tid: u32, hint: usize) -> Option<usize> {
        if let Some(s) = self.slots.get(hint) {
            if s.tid.load(Ordering::Acquire) == tid {
                return Some(hint);
            }
        }
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.tid.load(Ordering::Acquire) == tid)
        {
            return Some(i);
        }
        self.slots.iter().position(|s| {
            s.tid
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }
}

/// A boxed slice of zeroed entries, without writing them (the allocator's zeroed
/// pages stay untouched until a thread records into them).
fn zeroed_entries(n: usize) -> Box<[UnsafeCell<Entry>]> {
    let layout = std::alloc::Layout::array::<UnsafeCell<Entry>>(n).expect("small layout");
    // SAFETY: `layout` has a non-zero size (n > 0, Entry is not zero-sized).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut UnsafeCell<Entry>;
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a fresh allocation of `n` entries with the global allocator's
    // layout for `[UnsafeCell<Entry>; n]`; all-zero bytes are a valid Entry (plain
    // integers), so the slice is initialised.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)) }
}

impl Slot {
    /// Appends `e`, or counts a drop when full. Producer side, signal context.
    pub fn push(&self, fill: impl FnOnce(&mut Entry)) -> bool {
        // ATOMICS: only this thread stores `head`; Relaxed reads our own value.
        let head = self.head.load(Ordering::Relaxed);
        // ATOMICS: Acquire pairs with the consumer's Release store of `tail`, so the
        // entry we overwrite was read before.
        let tail = self.tail.load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= CAP {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let Some(cell) = self.entries.get((head % CAP) as usize) else {
            return false; // never: the slice holds CAP entries
        };
        // SAFETY: index `head` is outside `[tail, head)`, so the consumer does not read
        // it, and we are its only producer (module Safety).
        fill(unsafe { &mut *cell.get() });
        // ATOMICS: Release publishes the entry to the consumer's Acquire load.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Hands every published entry to `f`, then frees their space. Consumer side.
    pub fn drain(&self, mut f: impl FnMut(&Entry)) -> u64 {
        // ATOMICS: Acquire pairs with the producer's Release store of `head`.
        let head = self.head.load(Ordering::Acquire);
        // ATOMICS: only the consumer stores `tail`.
        let mut tail = self.tail.load(Ordering::Relaxed);
        let n = head.wrapping_sub(tail);
        while tail != head {
            let Some(cell) = self.entries.get((tail % CAP) as usize) else {
                break; // never: the slice holds CAP entries
            };
            // SAFETY: `tail` is in `[tail, head)`: published and not written again
            // until we move `tail` past it (module Safety).
            f(unsafe { &*cell.get() });
            tail = tail.wrapping_add(1);
        }
        // ATOMICS: Release keeps our reads before the producer's reuse of the space.
        self.tail.store(tail, Ordering::Release);
        n
    }

    /// Whether nothing is waiting to be drained.
    pub fn is_empty(&self) -> bool {
        // ATOMICS: both Acquire, to compare published positions.
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }
}
