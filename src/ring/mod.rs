//! The mmap ring: one control page and `2^n` data pages the kernel writes records into.
//!
//! This module owns the only accesses to `data_head` and `data_tail`. It hands out
//! each record's bytes in place — a borrowed slice of the mapping — and copies only a
//! record that wraps past the end of the data area, into a scratch buffer allocated
//! once. It never interprets a record beyond its header (and the loss counters of
//! `LOST`/`LOST_SAMPLES`); [`crate::records`] decodes.
//!
//! # Safety
//! The mapping is `MAP_SHARED` with the kernel, which writes records between `tail`
//! and the next `data_head` and reads `data_tail`. We only ever form references to
//! bytes in `[tail, head)`, which the kernel has published (Acquire on `data_head`)
//! and will not overwrite until we store a `data_tail` past them (Release). Fields of
//! the control page that the kernel updates concurrently are read with atomics or
//! volatile copies, never through `&perf_event_mmap_page`.
#![allow(unsafe_code)]

mod reader;
mod selfmon;
mod window;

pub use reader::{Batch, RawRecord, Replay};
pub use selfmon::SelfCount;

use std::mem::offset_of;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::counter::diagnose::mmap_error;
use crate::counter::Counter;
use crate::sys;
use crate::{Error, ErrorKind, Result};
use window::Window;

/// Largest record the kernel can write: `perf_event_header.size` is a `u16`.
const MAX_RECORD: usize = u16::MAX as usize;

/// How big a ring to map: data pages (rounded up to a power of two, as perf's `-m`
/// does) or bytes (rounded up to whole pages, then to a power of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSize {
    /// Number of data pages (`perf -m N`).
    Pages(usize),
    /// Bytes of data area (`perf -m 512K`).
    Bytes(usize),
}

impl Default for RingSize {
    /// 64 data pages (256 KiB with 4 KiB pages).
    fn default() -> Self {
        RingSize::Pages(64)
    }
}

impl RingSize {
    /// The number of data pages: at least 1 and a power of two.
    pub fn data_pages(self) -> usize {
        let pages = match self {
            RingSize::Pages(n) => n,
            RingSize::Bytes(b) => b.div_ceil(page_size()),
        };
        pages
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << (usize::BITS - 1))
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).unwrap_or(4096)
}

/// What the ring has seen: records, and what the kernel says it dropped or throttled.
///
/// Loss is data, not an error: [`lost`](Self::lost) is the total the kernel reported in
/// `PERF_RECORD_LOST` records (the ring was full), `lost_samples` in
/// `PERF_RECORD_LOST_SAMPLES`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Records handed out (every type).
    pub records: u64,
    /// `PERF_RECORD_SAMPLE` records among them: one per overflow.
    pub samples: u64,
    /// Records dropped because the ring was full (sum of `PERF_RECORD_LOST.lost`).
    pub lost: u64,
    /// `PERF_RECORD_LOST` records seen.
    pub lost_events: u64,
    /// Samples dropped (sum of `PERF_RECORD_LOST_SAMPLES.lost`).
    pub lost_samples: u64,
    /// `PERF_RECORD_THROTTLE`: the kernel stopped the event for exceeding the sample rate.
    pub throttled: u64,
    /// `PERF_RECORD_UNTHROTTLE`.
    pub unthrottled: u64,
    /// Records copied because they wrapped past the end of the data area.
    pub wrapped: u64,
    /// Bytes skipped to recover from malformed ring contents.
    pub skipped_bytes: u64,
}

/// An mmap ring buffer of one counter (and of any counters redirected into it with
/// [`Counter::set_output`]).
///
/// The mapping is shared with the kernel, and with a forked child: dropping the
/// child's copy only unmaps it (a ring writes `data_tail` only when a [`Batch`] it
/// handed out is dropped), so a child that exits never changes what the parent reads.
/// A child must not read it: that would consume the parent's records.
///
/// # Examples
/// ```no_run
/// use perfring::{Counter, ring::{Ring, RingSize}};
/// let counter = Counter::builder("cpu-clock")?.period(100_000).open()?;
/// let mut ring = Ring::map(&counter, RingSize::Pages(64))?;
/// counter.enable()?;
/// # let mut x = 0u64; for i in 0..10_000_000u64 { x = x.wrapping_add(i * i); }
/// let mut batch = ring.batch();
/// while let Some(record) = batch.next() {
///     let record = record?;
///     println!("type {} size {}", record.kind(), record.bytes().len());
/// }
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct Ring {
    map: MmapRaw,
    window: Window,
    event: String,
    /// Holds a record that wrapped; u64s so the copy is 8-byte aligned like the ring.
    scratch: Box<[u64]>,
    stats: RingStats,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("event", &self.event)
            .field("window", &self.window)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

// SAFETY: a Ring owns its mapping (MmapRaw is Send) and the scratch buffer; all access
// to the shared pages goes through &mut self or atomics, so moving it to another thread
// is sound. It is not Sync: two threads reading one ring would race on data_tail.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `1 + size.data_pages()` pages of `counter`'s fd, read-write (so that
    /// `data_tail` can be written and the kernel never overwrites unread records).
    ///
    /// # Errors
    /// [`ErrorKind::MlockLimit`] when the kernel refuses the size (`EPERM`), naming
    /// `perf_event_mlock_kb` and `RLIMIT_MEMLOCK`; [`ErrorKind::InvalidArgument`] for an
    /// event redirected with `SET_OUTPUT`.
    pub fn map(counter: &Counter, size: RingSize) -> Result<Ring> {
        Ring::map_fd(counter.as_fd(), counter.event().name(), size)
    }

    /// As [`map`](Self::map), but when the kernel refuses `size` for the user's
    /// locked-memory budget ([`ErrorKind::MlockLimit`]: `perf_event_mlock_kb` per CPU,
    /// then `RLIMIT_MEMLOCK`), the largest smaller power of two it allows, down to one
    /// data page: for rings made one per thread as threads appear, whose number is not
    /// known when the size is chosen. [`data_size`](Self::data_size) says what was
    /// given.
    ///
    /// # Errors
    /// As [`map`](Self::map); [`ErrorKind::MlockLimit`] when not even one data page
    /// fits.
    pub fn map_within_budget(counter: &Counter, size: RingSize) -> Result<Ring> {
        let mut pages = size.data_pages();
        loop {
            match Ring::map(counter, RingSize::Pages(pages)) {
                Err(e) if e.kind() == ErrorKind::MlockLimit && pages > 1 => pages /= 2,
                other => return other,
            }
        }
    }

    /// A ring for an inherited per-task counter (`inherit` with no CPU), which the
    /// kernel refuses to map directly (`EINVAL`: every inheriting thread would write to
    /// one buffer). perfring opens a `dummy` counter on the same task as the ring's
    /// owner, maps it, and redirects `counter` into it with `SET_OUTPUT`; the records
    /// of `counter` and of every thread and child that inherits it then arrive in the
    /// returned ring. Keep the returned anchor (and `counter`) alive as long as the ring.
    ///
    /// Unlike one inherited counter per CPU (what `perf record` does), each task keeps
    /// one period: a single-threaded program overflows exactly every `period` events
    /// however often it migrates between CPUs.
    ///
    /// # Warning: one writer per CPU
    /// The kernel writes a ring with CPU-local operations (`local_t` for the head, a
    /// plain increment of its nesting count), assuming one writer per CPU: that is why
    /// it refuses to map an inherited per-task counter. Threads that inherited
    /// `counter` and overflow at the same moment on different CPUs write this one ring
    /// at once: records are overwritten with no `PERF_RECORD_LOST`, and once the
    /// nesting count is left wrong the kernel **never publishes `data_head` again**
    /// (measured on 6.18: two threads on two CPUs hitting a breakpoint at period 1,
    /// 1024-page ring drained every millisecond: in 8 runs of 10 the ring stopped for
    /// good, 39 to 99.8 % of the samples unreported).
    /// Use it for counters that write nothing (counting, no period) or for one
    /// thread at a time; to sample threads, open one counter per CPU
    /// (`Scope::ThreadOnCpu`) with a ring each, or one counter per thread (the
    /// sampler's `exact_periods`).
    ///
    /// # Errors
    /// As [`map`](Self::map) and [`Counter::set_output`]; [`ErrorKind::InvalidArgument`]
    /// for a counter that watches a CPU.
    pub fn map_inherited(counter: &Counter, size: RingSize) -> Result<(Counter, Ring)> {
        use crate::counter::{Builder, SampleType, Scope};
        use crate::event::{Event, Software};
        let target = counter.target();
        if matches!(target, Scope::Cpu(_) | Scope::ThreadOnCpu(..)) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("Ring::map_inherited({})", counter.event().name()),
                "the counter watches a CPU; per-CPU counters can be mapped directly",
            )
            .with_fix("use Ring::map"));
        }
        let attr = counter.attr();
        // The anchor never overflows (dummy); it only owns the buffer. Same sample_type
        // and sample_id_all, so the ring's records are all laid out alike.
        let mut anchor = Builder::new(Event::software(Software::Dummy))
            .target(target)
            .sample(SampleType::from_bits(attr.sample_type))
            .sample_id_all(attr.sample_id_all() != 0)
            .exclude_kernel(true);
        // SET_OUTPUT refuses events on different clocks.
        anchor.attr_mut().set_use_clockid(attr.use_clockid());
        anchor.attr_mut().clockid = attr.clockid;
        // The kernel refuses REGS_USER/REGS_INTR with an empty mask (and checks the
        // stack size and branch filter): the sample_type's companions come along.
        anchor.attr_mut().sample_regs_user = attr.sample_regs_user;
        anchor.attr_mut().sample_regs_intr = attr.sample_regs_intr;
        anchor.attr_mut().sample_stack_user = attr.sample_stack_user;
        anchor.attr_mut().branch_sample_type = attr.branch_sample_type;
        let anchor = anchor.open()?;
        let ring = Ring::map(&anchor, size)?;
        counter.set_output(anchor.as_fd())?;
        Ok((anchor, ring))
    }

    /// [`map`](Self::map) for any perf_event fd.
    pub fn map_fd(fd: std::os::fd::BorrowedFd<'_>, event: &str, size: RingSize) -> Result<Ring> {
        let page = page_size();
        let data_pages = size.data_pages();
        let overflow = || {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("mmap({event} ring)"),
                format!("{data_pages} data pages do not fit in the address space"),
            )
        };
        let data_len = data_pages.checked_mul(page).ok_or_else(overflow)?;
        let len = data_len.checked_add(page).ok_or_else(overflow)?;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(fd.as_raw_fd())
            .map_err(|e| mmap_error(event, data_len, e))?;
        // data_offset/data_size are set by the kernel at mmap time (Linux 4.1+); older
        // kernels leave them 0 and the data area is simply the pages after the first.
        let ctl = map.as_ptr() as *const sys::perf_event_mmap_page;
        // SAFETY: the mapping is at least one page (>= size_of::<perf_event_mmap_page>())
        // and page-aligned; these two fields are written once before mmap returns.
        let (offset, size) = unsafe {
            (
                std::ptr::addr_of!((*ctl).data_offset).read_volatile(),
                std::ptr::addr_of!((*ctl).data_size).read_volatile(),
            )
        };
        let (offset, size) = if size == 0 {
            (page as u64, data_len as u64)
        } else {
            (offset, size)
        };
        let window = Window::new(offset, size, len).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("mmap({event} ring)"),
                format!("the kernel reported an unusable data area (offset {offset}, size {size}, mapping {len})"),
            )
        })?;
        Ok(Ring {
            map,
            window,
            event: event.to_string(),
            scratch: vec![0u64; MAX_RECORD.div_ceil(8)].into_boxed_slice(),
            stats: RingStats::default(),
        })
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.window.size()
    }

    /// Totals since the ring was mapped.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    fn control_field(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(
            offset.is_multiple_of(8)
                && offset + 8 <= std::mem::size_of::<sys::perf_event_mmap_page>()
        );
        // SAFETY:
        // - the mapping starts with a perf_event_mmap_page and is page-aligned, and every
        //   caller passes the 8-aligned offset of a u64 field, so the pointer is valid
        //   and aligned for an AtomicU64 for as long as `self` (the mapping) lives;
        // - the kernel accesses these fields only atomically or with barriers
        //   (READ_ONCE/smp_store_release), so treating them as atomics is sound.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    /// `data_head`: how far the kernel has written (a free-running byte count).
    pub fn head(&self) -> u64 {
        // ATOMICS: Acquire pairs with the kernel's smp_wmb()/smp_store_release() before
        // it publishes data_head (perf_event.h: "user-space should issue an smp_rmb()
        // after reading data_head"): every record byte before head is visible after this.
        self.control_field(offset_of!(sys::perf_event_mmap_page, data_head))
            .load(Ordering::Acquire)
    }

    /// `data_tail`: how far we have consumed.
    pub fn tail(&self) -> u64 {
        // ATOMICS: only this process writes data_tail, so Relaxed reads our own store.
        self.control_field(offset_of!(sys::perf_event_mmap_page, data_tail))
            .load(Ordering::Relaxed)
    }

    fn set_tail(&self, tail: u64) {
        // ATOMICS: Release orders every read of the records before `tail` ahead of this
        // store; it pairs with the kernel's smp_mb() before it reads data_tail to decide
        // whether space is free (perf_event.h: "smp_mb() ... before writing data_tail").
        self.control_field(offset_of!(sys::perf_event_mmap_page, data_tail))
            .store(tail, Ordering::Release);
    }

    /// Whether everything the kernel published has been consumed (`head == tail`).
    pub fn is_empty(&self) -> bool {
        self.head() == self.tail()
    }

    /// Bytes published and not yet consumed.
    pub fn pending_bytes(&self) -> u64 {
        self.head().wrapping_sub(self.tail())
    }

    /// A copy of the control page, for its capability bits, `time_*` and `index` fields.
    ///
    /// The copy is not consistent with the kernel's `lock` seqcount; it is meant for
    /// the fields that do not change (capabilities, time conversion) and for diagnostics.
    pub fn control(&self) -> sys::perf_event_mmap_page {
        let ctl = self.map.as_ptr() as *const sys::perf_event_mmap_page;
        // SAFETY: the mapping starts with a full perf_event_mmap_page (one page >= 1088
        // bytes), page-aligned; a volatile read copies it without forming a reference to
        // memory the kernel writes concurrently, and the struct is FromBytes (any bits valid).
        unsafe { ctl.read_volatile() }
    }

    /// Starts reading: snapshots `data_head` and yields the records up to it.
    /// When the batch is dropped, `data_tail` moves past the records it yielded.
    pub fn batch(&mut self) -> Batch<'_> {
        Batch::new(self)
    }

    /// Reads and discards everything pending (counting it in the stats).
    pub fn skip_all(&mut self) -> u64 {
        let mut batch = self.batch();
        let mut n = 0;
        while let Some(r) = batch.next() {
            n += u64::from(r.is_ok());
        }
        n
    }
}

/// The data area of a live mapping, as a [`reader::DataArea`] borrowing the mapping.
#[derive(Clone, Copy)]
struct MappedArea<'m> {
    base: *const u8,
    size: usize,
    _map: std::marker::PhantomData<&'m MmapRaw>,
}

impl<'m> MappedArea<'m> {
    fn of(map: &'m MmapRaw, window: Window) -> MappedArea<'m> {
        // SAFETY: `window.offset() + window.size() <= map.len()` (Window invariant), so
        // the data area's start is inside the mapping.
        let base = unsafe { map.as_ptr().add(window.offset()) };
        MappedArea {
            base,
            size: window.size(),
            _map: std::marker::PhantomData,
        }
    }
}

impl<'m> reader::DataArea<'m> for MappedArea<'m> {
    fn bytes(self, at: usize, len: usize) -> &'m [u8] {
        debug_assert!(at + len <= self.size);
        // SAFETY:
        // - `[at, at + len)` lies in the data area (the caller's contract, checked in
        //   debug builds), which lies in the mapping (Window invariant), alive for 'm;
        // - those bytes are in [tail, head): published before the Acquire load of
        //   data_head and not rewritten by the kernel until data_tail passes them, which
        //   only happens when the Batch (and so every record it lent) is gone.
        unsafe { std::slice::from_raw_parts(self.base.add(at), len) }
    }
}
