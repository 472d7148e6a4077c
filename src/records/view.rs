//! Borrowed views shared by samples and other records: arrays of kernel words and
//! structs, `read_format` blocks, `sample_id` fields, header `misc` bits.

use std::fmt;
use std::marker::PhantomData;

use zerocopy::{FromBytes, Immutable, KnownLayout};

use super::error::DecodeError;
use super::layout::{IdOffsets, Word, FORMAT_LOST};
use crate::sys;

/// The `u64` at `off`, if the slice holds it. Alignment-free.
#[inline(always)]
pub(crate) fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..)?
        .first_chunk::<8>()
        .map(|w| u64::from_ne_bytes(*w))
}

/// The `u32` at `off`, if the slice holds it. Alignment-free.
#[inline(always)]
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..)?
        .first_chunk::<4>()
        .map(|w| u32::from_ne_bytes(*w))
}

/// The `u16` at `off`, if the slice holds it. Alignment-free.
#[inline(always)]
pub(crate) fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..)?
        .first_chunk::<2>()
        .map(|w| u16::from_ne_bytes(*w))
}

/// Word `index` of `b` (bytes `8 * index ..`) as a `u64`, if the slice holds it; an
/// [`ABSENT`](super::layout::ABSENT) index is past any record and gives `None`.
///
/// Indexing `b` as whole words makes this one comparison of `index` with the word
/// count and one load that scales `index` in its address: no byte offset to compute
/// and compare. The `None` path is marked cold, so a loop reading the fields its
/// layout records runs through without a taken branch (measured in the decode
/// bench: the fields' blocks had been laid out out of order, each present field a
/// jump).
#[inline(always)]
pub(crate) fn u64_word(b: &[u8], index: Word) -> Option<u64> {
    let (words, _) = b.as_chunks::<8>();
    match words.get(usize::from(index)) {
        Some(w) => Some(u64::from_ne_bytes(*w)),
        None => {
            absent();
            None
        }
    }
}

/// Marks the path of an absent field as unlikely, so that the accessors of the
/// fields a layout records run straight through.
#[cold]
#[inline(never)]
fn absent() {}

/// The first `u32` of word `index` (`pid`, `cpu`), as [`u64_word`].
#[inline(always)]
pub(crate) fn u32_lo(b: &[u8], index: Word) -> Option<u32> {
    u64_word(b, index).map(|w| {
        let w = w.to_ne_bytes();
        u32::from_ne_bytes([w[0], w[1], w[2], w[3]])
    })
}

/// The second `u32` of word `index` (`tid`, `res`), as [`u64_word`].
#[inline(always)]
pub(crate) fn u32_hi(b: &[u8], index: Word) -> Option<u32> {
    u64_word(b, index).map(|w| {
        let w = w.to_ne_bytes();
        u32::from_ne_bytes([w[4], w[5], w[6], w[7]])
    })
}

/// The bytes before the first NUL (all of them if there is none).
pub(crate) fn until_nul(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// An array of kernel values of type `T` (`u64`, [`sys::perf_branch_entry`], ...) inside a
/// record, read in place.
///
/// Records copied out of a wrapped ring may not be 8-aligned, so the elements are read
/// with unaligned loads by [`get`](Self::get) and [`iter`](Self::iter);
/// [`as_slice`](Self::as_slice) borrows them as `&[T]` when the bytes are aligned.
pub struct Array<'a, T> {
    bytes: &'a [u8],
    _t: PhantomData<T>,
}

/// The `u64` words of a callchain, register block or counter list.
pub type U64s<'a> = Array<'a, u64>;

impl<T> Clone for Array<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Array<'_, T> {}

impl<'a, T: FromBytes + Immutable + KnownLayout + Copy> Array<'a, T> {
    /// A view of `bytes` as `[T]`, if its length is a whole number of `T`s.
    pub fn from_bytes(bytes: &'a [u8]) -> Option<Self> {
        bytes
            .len()
            .is_multiple_of(std::mem::size_of::<T>())
            .then_some(Array {
                bytes,
                _t: PhantomData,
            })
    }

    /// Like `from_bytes`, for lengths the caller has already checked.
    pub(crate) fn new_unchecked_len(bytes: &'a [u8]) -> Self {
        Array {
            bytes,
            _t: PhantomData,
        }
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len() / std::mem::size_of::<T>()
    }

    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bytes.len() < std::mem::size_of::<T>()
    }

    /// Element `i`, copied out (an unaligned read).
    #[inline]
    pub fn get(&self, i: usize) -> Option<T> {
        let size = std::mem::size_of::<T>();
        let start = i.checked_mul(size)?;
        let chunk = self.bytes.get(start..start.checked_add(size)?)?;
        T::read_from_bytes(chunk).ok()
    }

    /// The elements in order, copied out one by one (unaligned reads).
    #[inline]
    pub fn iter(&self) -> ArrayIter<'a, T> {
        ArrayIter {
            bytes: self.bytes,
            _t: PhantomData,
        }
    }

    /// The elements as a slice, if the bytes are aligned for `T` (always the case for a
    /// record read in place from the ring).
    pub fn as_slice(&self) -> Option<&'a [T]> {
        <[T]>::ref_from_bytes(self.bytes).ok()
    }

    /// The raw bytes, in the kernel's (native-endian) layout.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<'a, T: FromBytes + Immutable + KnownLayout + Copy> IntoIterator for Array<'a, T> {
    type Item = T;
    type IntoIter = ArrayIter<'a, T>;
    fn into_iter(self) -> ArrayIter<'a, T> {
        self.iter()
    }
}

impl<T: FromBytes + Immutable + KnownLayout + Copy + fmt::Debug> fmt::Debug for Array<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iterator over an [`Array`], copying each element out.
pub struct ArrayIter<'a, T> {
    /// The elements not yet handed out: a whole number of `T`s.
    bytes: &'a [u8],
    _t: PhantomData<T>,
}

impl<T> fmt::Debug for ArrayIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArrayIter")
            .field(
                "remaining",
                &(self.bytes.len() / std::mem::size_of::<T>().max(1)),
            )
            .finish()
    }
}

impl<T: FromBytes + Immutable + KnownLayout + Copy> Iterator for ArrayIter<'_, T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        if std::mem::size_of::<T>() == 0 {
            return None;
        }
        let (head, rest) = self.bytes.split_at_checked(std::mem::size_of::<T>())?;
        self.bytes = rest;
        T::read_from_bytes(head).ok()
    }

    /// The loop of `for_each`, `sum`, `fold`, ...: for 8-byte elements (callchains,
    /// registers, counters) over the bytes as whole words, so that the loop counts
    /// words as a `&[u64]` loop does, with no byte length to convert per call.
    #[inline]
    fn fold<B, F: FnMut(B, T) -> B>(self, init: B, mut f: F) -> B {
        let mut acc = init;
        if std::mem::size_of::<T>() == 8 {
            let (words, _) = self.bytes.as_chunks::<8>();
            for w in words {
                if let Ok(x) = T::read_from_bytes(w) {
                    acc = f(acc, x);
                }
            }
        } else {
            for c in self.bytes.chunks_exact(std::mem::size_of::<T>()) {
                if let Ok(x) = T::read_from_bytes(c) {
                    acc = f(acc, x);
                }
            }
        }
        acc
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.bytes.len() / std::mem::size_of::<T>().max(1);
        (n, Some(n))
    }
}

impl<T: FromBytes + Immutable + KnownLayout + Copy> ExactSizeIterator for ArrayIter<'_, T> {}

/// A `read_format` block: what `read(2)` on the counter returns, and what
/// `PERF_SAMPLE_READ` and `PERF_RECORD_READ` carry.
///
/// Single: `value, [time_enabled], [time_running], [id], [lost]`. Group
/// (`PERF_FORMAT_GROUP`): `nr, [time_enabled], [time_running]`, then `nr` times
/// `value, [id], [lost]`.
#[derive(Clone, Copy)]
pub struct ReadValues<'a> {
    bytes: &'a [u8],
    format: u64,
}

/// One counter's value in a [`ReadValues`] block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadValue {
    /// The count.
    pub value: u64,
    /// `PERF_FORMAT_ID`: the counter's id.
    pub id: Option<u64>,
    /// `PERF_FORMAT_LOST`: samples lost by this counter.
    pub lost: Option<u64>,
}

impl<'a> ReadValues<'a> {
    /// Views `bytes`, which start with a `read_format` block in the given format, and
    /// returns the view and the block's length.
    ///
    /// # Errors
    /// [`DecodeErrorKind::Truncated`](super::DecodeErrorKind::Truncated) if `bytes` is too short for the block (offsets in
    /// the error are from the start of `bytes`).
    pub fn parse(bytes: &'a [u8], read_format: u64) -> Result<(Self, usize), DecodeError> {
        let len = read_len(bytes, 0, read_format)?;
        let bytes = bytes.get(..len).unwrap_or_default();
        Ok((
            ReadValues {
                bytes,
                format: read_format,
            },
            len,
        ))
    }

    fn has(&self, bit: u32) -> bool {
        self.format & u64::from(bit) != 0
    }

    /// Whether this is a group read (`PERF_FORMAT_GROUP`).
    pub fn is_group(&self) -> bool {
        self.has(sys::PERF_FORMAT_GROUP)
    }

    /// The `read_format` this block was decoded with.
    pub fn read_format(&self) -> u64 {
        self.format
    }

    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`: nanoseconds the counter was enabled.
    pub fn time_enabled(&self) -> Option<u64> {
        if !self.has(sys::PERF_FORMAT_TOTAL_TIME_ENABLED) {
            return None;
        }
        // `value` (single) or `nr` (group) comes first.
        u64_at(self.bytes, 8)
    }

    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`: nanoseconds the counter was on the PMU.
    pub fn time_running(&self) -> Option<u64> {
        if !self.has(sys::PERF_FORMAT_TOTAL_TIME_RUNNING) {
            return None;
        }
        let at = 8 + 8 * usize::from(self.has(sys::PERF_FORMAT_TOTAL_TIME_ENABLED));
        u64_at(self.bytes, at)
    }

    fn entry_words(&self) -> usize {
        1 + usize::from(self.has(sys::PERF_FORMAT_ID)) + usize::from(self.format & FORMAT_LOST != 0)
    }

    fn entries_start(&self) -> usize {
        let times = usize::from(self.has(sys::PERF_FORMAT_TOTAL_TIME_ENABLED))
            + usize::from(self.has(sys::PERF_FORMAT_TOTAL_TIME_RUNNING));
        if self.is_group() {
            8 * (1 + times)
        } else {
            0
        }
    }

    /// Number of counters in the block (1 unless it is a group read).
    pub fn len(&self) -> usize {
        if self.is_group() {
            let words = self.bytes.len() / 8;
            let times = self.entries_start() / 8;
            words.saturating_sub(times) / self.entry_words()
        } else {
            1
        }
    }

    /// Whether a group read holds no counters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counter `i`: its value, id and lost count.
    pub fn get(&self, i: usize) -> Option<ReadValue> {
        if i >= self.len() {
            return None;
        }
        let has_id = self.has(sys::PERF_FORMAT_ID);
        let has_lost = self.format & FORMAT_LOST != 0;
        if self.is_group() {
            let at = self.entries_start() + 8 * self.entry_words() * i;
            let mut w = at + 8;
            let id = has_id.then(|| {
                w += 8;
                u64_at(self.bytes, w - 8)
            });
            let lost = has_lost.then(|| u64_at(self.bytes, w));
            Some(ReadValue {
                value: u64_at(self.bytes, at)?,
                id: id.flatten(),
                lost: lost.flatten(),
            })
        } else {
            let mut w = 8 + 8
                * (usize::from(self.has(sys::PERF_FORMAT_TOTAL_TIME_ENABLED))
                    + usize::from(self.has(sys::PERF_FORMAT_TOTAL_TIME_RUNNING)));
            let id = has_id.then(|| {
                w += 8;
                u64_at(self.bytes, w - 8)
            });
            let lost = has_lost.then(|| u64_at(self.bytes, w));
            Some(ReadValue {
                value: u64_at(self.bytes, 0)?,
                id: id.flatten(),
                lost: lost.flatten(),
            })
        }
    }

    /// The counters in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ReadValue> + 'a {
        let this = *self;
        (0..self.len()).map(move |i| this.get(i).unwrap_or_default())
    }

    /// The block's raw bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl fmt::Debug for ReadValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadValues")
            .field("time_enabled", &self.time_enabled())
            .field("time_running", &self.time_running())
            .field("values", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

/// Length of the `read_format` block starting at `at` in `b`, checked against `b`.
pub(crate) fn read_len(b: &[u8], at: usize, format: u64) -> Result<usize, DecodeError> {
    let avail = b.len().saturating_sub(at);
    let bit = |x: u32| usize::from(format & u64::from(x) != 0);
    let times = bit(sys::PERF_FORMAT_TOTAL_TIME_ENABLED) + bit(sys::PERF_FORMAT_TOTAL_TIME_RUNNING);
    let per = 1 + bit(sys::PERF_FORMAT_ID) + usize::from(format & FORMAT_LOST != 0);
    let len = if format & u64::from(sys::PERF_FORMAT_GROUP) != 0 {
        let nr = u64_at(b, at).ok_or(DecodeError::truncated("read.nr", at, 8, avail))?;
        usize::try_from(nr)
            .ok()
            .and_then(|nr| nr.checked_mul(8 * per))
            .and_then(|n| n.checked_add(8 * (1 + times)))
            .unwrap_or(usize::MAX)
    } else {
        8 * (times + per)
    };
    if len > avail {
        return Err(DecodeError::truncated("read", at, len, avail));
    }
    Ok(len)
}

/// The id fields of a record: a sample's own, or the `sample_id` trailer that
/// `sample_id_all` appends to other records. Each is `None` when `sample_type` does not
/// record it (or, for other records, without `sample_id_all`).
#[derive(Clone, Copy)]
pub struct SampleId<'a> {
    bytes: &'a [u8],
    offs: &'a IdOffsets,
}

static NO_IDS: IdOffsets = IdOffsets::NONE;

impl<'a> SampleId<'a> {
    #[inline(always)]
    pub(crate) fn new(bytes: &'a [u8], offs: &'a IdOffsets) -> Self {
        SampleId { bytes, offs }
    }

    #[inline(always)]
    pub(crate) fn none() -> Self {
        SampleId {
            bytes: &[],
            offs: &NO_IDS,
        }
    }

    /// `PERF_SAMPLE_TID`: process id.
    #[inline]
    pub fn pid(&self) -> Option<u32> {
        u32_lo(self.bytes, self.offs.tid)
    }
    /// `PERF_SAMPLE_TID`: thread id.
    #[inline]
    pub fn tid(&self) -> Option<u32> {
        u32_hi(self.bytes, self.offs.tid)
    }
    /// `PERF_SAMPLE_TIME`: timestamp (the counter's `clockid`, `perf_clock` by default).
    #[inline]
    pub fn time(&self) -> Option<u64> {
        u64_word(self.bytes, self.offs.time)
    }
    /// `PERF_SAMPLE_ID`: id of the counter (the group leader's for a group).
    #[inline]
    pub fn id(&self) -> Option<u64> {
        u64_word(self.bytes, self.offs.id)
    }
    /// `PERF_SAMPLE_STREAM_ID`: id of the counter that was inherited from.
    #[inline]
    pub fn stream_id(&self) -> Option<u64> {
        u64_word(self.bytes, self.offs.stream_id)
    }
    /// `PERF_SAMPLE_CPU`: the CPU.
    #[inline]
    pub fn cpu(&self) -> Option<u32> {
        u32_lo(self.bytes, self.offs.cpu)
    }
    /// `PERF_SAMPLE_CPU`: the reserved word after the CPU.
    #[inline]
    pub fn cpu_res(&self) -> Option<u32> {
        u32_hi(self.bytes, self.offs.cpu)
    }
    /// `PERF_SAMPLE_IDENTIFIER`: the counter's id, at a fixed place.
    #[inline]
    pub fn identifier(&self) -> Option<u64> {
        u64_word(self.bytes, self.offs.identifier)
    }
}

impl fmt::Debug for SampleId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SampleId")
            .field("pid", &self.pid())
            .field("tid", &self.tid())
            .field("time", &self.time())
            .field("id", &self.id())
            .field("stream_id", &self.stream_id())
            .field("cpu", &self.cpu())
            .field("identifier", &self.identifier())
            .finish()
    }
}

/// Where the CPU was when the record was written: `misc & PERF_RECORD_MISC_CPUMODE_MASK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuMode {
    /// `PERF_RECORD_MISC_CPUMODE_UNKNOWN`
    Unknown,
    /// `PERF_RECORD_MISC_KERNEL`
    Kernel,
    /// `PERF_RECORD_MISC_USER`
    User,
    /// `PERF_RECORD_MISC_HYPERVISOR`
    Hypervisor,
    /// `PERF_RECORD_MISC_GUEST_KERNEL`
    GuestKernel,
    /// `PERF_RECORD_MISC_GUEST_USER`
    GuestUser,
    /// A value the header does not name (6 or 7).
    Other(u8),
}

/// The header's `misc` bits. Several bits mean different things in different record
/// types; each accessor names the types it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Misc(pub u16);

impl Misc {
    fn bit(self, b: u32) -> bool {
        u32::from(self.0) & b != 0
    }

    /// The CPU mode.
    pub fn cpumode(self) -> CpuMode {
        match u32::from(self.0) & sys::PERF_RECORD_MISC_CPUMODE_MASK {
            sys::PERF_RECORD_MISC_CPUMODE_UNKNOWN => CpuMode::Unknown,
            sys::PERF_RECORD_MISC_KERNEL => CpuMode::Kernel,
            sys::PERF_RECORD_MISC_USER => CpuMode::User,
            sys::PERF_RECORD_MISC_HYPERVISOR => CpuMode::Hypervisor,
            sys::PERF_RECORD_MISC_GUEST_KERNEL => CpuMode::GuestKernel,
            sys::PERF_RECORD_MISC_GUEST_USER => CpuMode::GuestUser,
            other => CpuMode::Other(other as u8),
        }
    }

    /// SAMPLE: `PERF_RECORD_MISC_EXACT_IP`, the IP is exactly where the event happened.
    pub fn exact_ip(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_EXACT_IP)
    }

    /// SWITCH, SWITCH_CPU_WIDE: `PERF_RECORD_MISC_SWITCH_OUT`, switching out (else in).
    pub fn switch_out(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_SWITCH_OUT)
    }

    /// SWITCH, SWITCH_CPU_WIDE: `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`, the task was
    /// preempted (still runnable).
    pub fn switch_out_preempt(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)
    }

    /// COMM: `PERF_RECORD_MISC_COMM_EXEC`, the name changed because of an exec.
    pub fn comm_exec(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_COMM_EXEC)
    }

    /// MMAP, MMAP2: `PERF_RECORD_MISC_MMAP_DATA`, a non-executable mapping.
    pub fn mmap_data(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_MMAP_DATA)
    }

    /// MMAP2: `PERF_RECORD_MISC_MMAP_BUILD_ID`, the record has a build id instead of
    /// device and inode numbers.
    pub fn mmap_build_id(self) -> bool {
        self.bit(sys::PERF_RECORD_MISC_MMAP_BUILD_ID)
    }
}
