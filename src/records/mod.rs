//! Zero-copy views of perf records over `&[u8]`.
//!
//! The ring hands over one record's bytes at a time (a `&[u8]` starting at its
//! `perf_event_header`); [`Record::parse`] reads them in place with the counter's
//! [`Layout`], built once from its `perf_event_attr`. Nothing here makes a system call,
//! touches an atomic or allocates, and nothing panics or reads outside the record on
//! malformed bytes: every problem is a [`DecodeError`] naming the field, its offset and
//! the bytes it needed. Fields are read with unaligned loads, so a record that wrapped
//! around the ring and was copied into a scratch buffer decodes the same way.
//!
//! [`encode`] writes records in the kernel's format, for tests, fuzzing and benchmarks.
//!
//! # Examples
//! ```
//! use perfring::records::{encode, Layout, Record, RecordKind, SampleIdAll};
//! use perfring::sys;
//!
//! let st = sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_CALLCHAIN;
//! let layout = Layout::from_raw(st.into(), 0, 0, 0, 0, SampleIdAll::Yes)?;
//!
//! // What the kernel would write (here, from the test encoder).
//! let mut ring = Vec::new();
//! let fields = encode::SampleFields {
//!     ip: 0x4010,
//!     pid: 7,
//!     tid: 8,
//!     callchain: vec![0x4010, 0x4400],
//!     ..Default::default()
//! };
//! encode::sample(&mut ring, &layout, sys::PERF_RECORD_MISC_USER as u16, &fields);
//!
//! for record in Record::iter(&ring, &layout) {
//!     let record = record?;
//!     if let RecordKind::Sample(s) = record.kind() {
//!         assert_eq!(s.ip(), Some(0x4010));
//!         assert_eq!(s.tid(), Some(8));
//!         let chain: Vec<u64> = s.callchain().unwrap().iter().collect();
//!         assert_eq!(chain, [0x4010, 0x4400]);
//!     }
//! }
//! # Ok::<(), perfring::records::DecodeError>(())
//! ```

pub mod encode;
mod error;
mod layout;
mod other;
mod sample;
mod view;

pub use error::{DecodeError, DecodeErrorKind};
pub use layout::{Layout, SampleIdAll, BRANCH_COUNTERS, FORMAT_LOST};
pub use other::{
    Aux, AuxOutputHwId, BpfEvent, Cgroup, Comm, ItraceStart, Ksymbol, Lost, LostSamples, Mmap,
    Mmap2, Mmap2File, Namespaces, Read, SwitchCpuWide, Task, TextPoke, Throttle,
};
pub use sample::{BranchStack, Regs, Sample, UserStack};
pub use view::{Array, ArrayIter, CpuMode, Misc, ReadValue, ReadValues, SampleId, U64s};

use zerocopy::FromBytes;

use crate::sys;
use other::Body;

/// What a record is, with its typed view.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum RecordKind<'a> {
    /// `PERF_RECORD_SAMPLE`
    Sample(Sample<'a>),
    /// `PERF_RECORD_MMAP`
    Mmap(Mmap<'a>),
    /// `PERF_RECORD_LOST`
    Lost(Lost),
    /// `PERF_RECORD_COMM`
    Comm(Comm<'a>),
    /// `PERF_RECORD_EXIT`
    Exit(Task),
    /// `PERF_RECORD_THROTTLE`
    Throttle(Throttle),
    /// `PERF_RECORD_UNTHROTTLE`
    Unthrottle(Throttle),
    /// `PERF_RECORD_FORK`
    Fork(Task),
    /// `PERF_RECORD_READ`
    Read(Read<'a>),
    /// `PERF_RECORD_MMAP2`
    Mmap2(Mmap2<'a>),
    /// `PERF_RECORD_AUX`
    Aux(Aux),
    /// `PERF_RECORD_ITRACE_START`
    ItraceStart(ItraceStart),
    /// `PERF_RECORD_LOST_SAMPLES`
    LostSamples(LostSamples),
    /// `PERF_RECORD_SWITCH` (direction in [`Misc::switch_out`]).
    Switch,
    /// `PERF_RECORD_SWITCH_CPU_WIDE`
    SwitchCpuWide(SwitchCpuWide),
    /// `PERF_RECORD_NAMESPACES`
    Namespaces(Namespaces<'a>),
    /// `PERF_RECORD_KSYMBOL`
    Ksymbol(Ksymbol<'a>),
    /// `PERF_RECORD_BPF_EVENT`
    BpfEvent(BpfEvent),
    /// `PERF_RECORD_CGROUP`
    Cgroup(Cgroup<'a>),
    /// `PERF_RECORD_TEXT_POKE`
    TextPoke(TextPoke<'a>),
    /// `PERF_RECORD_AUX_OUTPUT_HW_ID`
    AuxOutputHwId(AuxOutputHwId),
    /// A type this decoder does not know (newer than its header): the bytes after the
    /// header, `sample_id` trailer included.
    Unknown {
        /// `header.type`
        record_type: u32,
        /// `header.misc`
        misc: u16,
        /// The body: everything after the 8-byte header.
        bytes: &'a [u8],
    },
}

/// One perf record, read in place: header, typed view and `sample_id`.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    bytes: &'a [u8],
    layout: &'a Layout,
    kind: RecordKind<'a>,
}

impl<'a> Record<'a> {
    /// Decodes the record at the start of `bytes` (its `perf_event_header` first) with
    /// the counter's layout. Only the first `header.size` bytes are read; a longer slice
    /// is fine ([`size`](Self::size) says where the next record starts).
    ///
    /// # Errors
    /// A [`DecodeError`] if `bytes` is shorter than a header or than `header.size`, if
    /// `header.size` is below 8 or not a multiple of 8, or if any field (or length
    /// read from the record, such as a callchain's `nr`) runs past the record's end.
    ///
    /// # Examples
    /// ```
    /// use perfring::records::{encode, Layout, Record, RecordKind, SampleIdAll};
    /// use perfring::sys;
    /// let layout = Layout::from_raw(sys::PERF_SAMPLE_TIME.into(), 0, 0, 0, 0, SampleIdAll::Yes)?;
    /// let mut bytes = Vec::new();
    /// let ids = encode::Ids { time: 99, ..Default::default() };
    /// encode::lost(&mut bytes, &layout, 0, 3, 12, &ids); // id 3, 12 lost
    /// let rec = Record::parse(&bytes, &layout)?;
    /// assert!(matches!(rec.kind(), RecordKind::Lost(l) if l.lost == 12));
    /// assert_eq!(rec.sample_id().time(), Some(99));
    /// // One byte short: an error, not a panic.
    /// assert!(Record::parse(&bytes[..bytes.len() - 1], &layout).is_err());
    /// # Ok::<(), perfring::records::DecodeError>(())
    /// ```
    // Always inlined: the user's loop must see through it, or the record goes through
    // memory (measured: 2x slower when LLVM declined the hint).
    #[inline(always)]
    pub fn parse(bytes: &'a [u8], layout: &'a Layout) -> Result<Self, DecodeError> {
        Self::parse_front(bytes, layout).map(|(record, _)| record)
    }

    /// `parse`, also returning the bytes after the record (for `Records`, which walks
    /// a stream: split here, the next record's start is one add, not a second check).
    #[inline(always)]
    fn parse_front(bytes: &'a [u8], layout: &'a Layout) -> Result<(Self, &'a [u8]), DecodeError> {
        // One 8-byte load for the whole header (the `size` read is on the critical
        // path of a stream walk: the next record's address depends on it).
        let Ok((h, _)) = sys::perf_event_header::read_from_prefix(bytes) else {
            return Err(Self::bad_header(bytes, 0));
        };
        Self::parse_header(bytes, h, layout)
    }

    /// `parse_front` with the header already read from the start of `bytes`.
    #[inline(always)]
    fn parse_header(
        bytes: &'a [u8],
        h: sys::perf_event_header,
        layout: &'a Layout,
    ) -> Result<(Self, &'a [u8]), DecodeError> {
        let size = usize::from(h.size);
        // `size >= 8 && size % 8 == 0` as one test: `size - 8` wraps to a huge value
        // below 8, and keeps the low bits otherwise (the mask is an imm32 on x86-64).
        if size.wrapping_sub(8) & !0xfff8 != 0 {
            return Err(Self::bad_header(bytes, size));
        }
        let Some((bytes, rest)) = bytes.split_at_checked(size) else {
            return Err(Self::bad_header(bytes, size));
        };
        if h.type_ == sys::PERF_RECORD_SAMPLE {
            let record = Record {
                bytes,
                layout,
                kind: RecordKind::Sample(Sample::parse(bytes, layout)?),
            };
            return Ok((record, rest));
        }
        Ok((Self::parse_other(bytes, layout, h.type_, h.misc)?, rest))
    }

    /// Why the header at the start of `bytes`, which says `size`, is not a record's.
    #[cold]
    #[inline(never)]
    fn bad_header(bytes: &[u8], size: usize) -> DecodeError {
        if bytes.len() < 8 {
            DecodeError::truncated("header", 0, 8, bytes.len())
        } else if size < 8 {
            DecodeError::truncated("header.size", 6, 8, size)
        } else if !size.is_multiple_of(8) {
            DecodeError::new(DecodeErrorKind::Unaligned, "header.size", 6, size, size)
        } else {
            DecodeError::new(
                DecodeErrorKind::ShortSlice,
                "header.size",
                0,
                size,
                bytes.len(),
            )
        }
    }

    #[cold]
    fn parse_other(
        bytes: &'a [u8],
        layout: &'a Layout,
        record_type: u32,
        misc: u16,
    ) -> Result<Self, DecodeError> {
        if record_type >= sys::PERF_RECORD_MAX || record_type == 0 {
            return Ok(Record {
                bytes,
                layout,
                kind: RecordKind::Unknown {
                    record_type,
                    misc,
                    bytes: bytes.get(8..).unwrap_or_default(),
                },
            });
        }
        // The trailer's size is fixed by sample_type, so it ends the record whatever
        // the body's variable parts (file names, ...) hold.
        let trailer = usize::from(layout.trailer_size);
        let body_end =
            bytes
                .len()
                .checked_sub(trailer)
                .filter(|&e| e >= 8)
                .ok_or(DecodeError::truncated(
                    "sample_id",
                    8,
                    trailer,
                    bytes.len().saturating_sub(8),
                ))?;
        let b = Body {
            b: bytes.get(8..body_end).unwrap_or_default(),
        };
        let m = Misc(misc);
        let kind = match record_type {
            sys::PERF_RECORD_MMAP => RecordKind::Mmap(other::mmap(&b)?),
            sys::PERF_RECORD_LOST => RecordKind::Lost(other::lost(&b)?),
            sys::PERF_RECORD_COMM => RecordKind::Comm(other::comm(&b)?),
            sys::PERF_RECORD_EXIT => RecordKind::Exit(other::task(&b)?),
            sys::PERF_RECORD_THROTTLE => RecordKind::Throttle(other::throttle(&b)?),
            sys::PERF_RECORD_UNTHROTTLE => RecordKind::Unthrottle(other::throttle(&b)?),
            sys::PERF_RECORD_FORK => RecordKind::Fork(other::task(&b)?),
            sys::PERF_RECORD_READ => RecordKind::Read(other::read(&b, layout.read_format)?),
            sys::PERF_RECORD_MMAP2 => RecordKind::Mmap2(other::mmap2(&b, m.mmap_build_id())?),
            sys::PERF_RECORD_AUX => RecordKind::Aux(other::aux(&b)?),
            sys::PERF_RECORD_ITRACE_START => RecordKind::ItraceStart(other::itrace_start(&b)?),
            sys::PERF_RECORD_LOST_SAMPLES => RecordKind::LostSamples(other::lost_samples(&b)?),
            sys::PERF_RECORD_SWITCH => RecordKind::Switch,
            sys::PERF_RECORD_SWITCH_CPU_WIDE => {
                RecordKind::SwitchCpuWide(other::switch_cpu_wide(&b)?)
            }
            sys::PERF_RECORD_NAMESPACES => RecordKind::Namespaces(other::namespaces(&b)?),
            sys::PERF_RECORD_KSYMBOL => RecordKind::Ksymbol(other::ksymbol(&b)?),
            sys::PERF_RECORD_BPF_EVENT => RecordKind::BpfEvent(other::bpf_event(&b)?),
            sys::PERF_RECORD_CGROUP => RecordKind::Cgroup(other::cgroup(&b)?),
            sys::PERF_RECORD_TEXT_POKE => RecordKind::TextPoke(other::text_poke(&b)?),
            sys::PERF_RECORD_AUX_OUTPUT_HW_ID => {
                RecordKind::AuxOutputHwId(other::aux_output_hw_id(&b)?)
            }
            _ => RecordKind::Unknown {
                record_type,
                misc,
                bytes: bytes.get(8..).unwrap_or_default(),
            },
        };
        Ok(Record {
            bytes,
            layout,
            kind,
        })
    }

    /// Iterates over the records of a contiguous stream (e.g. a test buffer or a
    /// `perf.data`-style dump), stopping after the first error.
    ///
    /// For a stream in cache (a ring's window, which the kernel has just written).
    /// For one much larger than the cache, read from memory, [`iter_large`](Self::iter_large)
    /// is faster.
    pub fn iter(stream: &'a [u8], layout: &'a Layout) -> Records<'a> {
        Records {
            rest: stream,
            layout,
        }
    }

    /// [`iter`](Self::iter) for a stream much larger than the CPU's caches (a
    /// `perf.data` file's data section, a dump of many MiB): the same records, and
    /// as it goes it hints the bytes 8 KiB ahead into the cache, so that each new page
    /// is on its way from memory before the walk reaches it.
    ///
    /// Measured with the decode bench (thin-LTO build, `DECODE_BENCH_MIN=1000`, `iter`
    /// and `iter_large` in turn): on its 64 MiB stream the hints take perfring from
    /// 5.96-5.99 ms to 5.64-5.65 ms; on its 512 KiB window, which is in the cache,
    /// they cost about 5%, which is why [`iter`](Self::iter) gives none.
    ///
    /// # Examples
    /// ```
    /// use perfring::records::{encode, Layout, Record, SampleIdAll};
    /// use perfring::sys;
    ///
    /// let layout = Layout::from_raw(sys::PERF_SAMPLE_IP.into(), 0, 0, 0, 0, SampleIdAll::No)?;
    /// // A long stream, as a perf.data file's data section would hold.
    /// let mut data = Vec::new();
    /// for ip in 0..100_000u64 {
    ///     let fields = encode::SampleFields { ip, ..Default::default() };
    ///     encode::sample(&mut data, &layout, sys::PERF_RECORD_MISC_USER as u16, &fields);
    /// }
    /// let mut sum = 0u64;
    /// for record in Record::iter_large(&data, &layout) {
    ///     sum += record?.as_sample().and_then(|s| s.ip()).unwrap_or(0);
    /// }
    /// assert_eq!(sum, (0..100_000u64).sum::<u64>());
    /// # Ok::<(), perfring::records::DecodeError>(())
    /// ```
    pub fn iter_large(stream: &'a [u8], layout: &'a Layout) -> Records<'a, true> {
        Records {
            rest: stream,
            layout,
        }
    }

    /// The typed view.
    #[inline]
    pub fn kind(&self) -> &RecordKind<'a> {
        &self.kind
    }

    /// The typed view, by value.
    #[inline]
    pub fn into_kind(self) -> RecordKind<'a> {
        self.kind
    }

    /// The sample, if this is one.
    #[inline]
    pub fn as_sample(&self) -> Option<&Sample<'a>> {
        match &self.kind {
            RecordKind::Sample(s) => Some(s),
            _ => None,
        }
    }

    /// `header.type` (`PERF_RECORD_*`).
    #[inline]
    pub fn record_type(&self) -> u32 {
        view::u32_at(self.bytes, 0).unwrap_or(0)
    }

    /// `header.misc`.
    #[inline]
    pub fn misc(&self) -> Misc {
        Misc(view::u16_at(self.bytes, 4).unwrap_or(0))
    }

    /// `header.size`: the record's length in bytes, header included.
    #[inline]
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The whole record, header included.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The id fields: a sample's own, the `sample_id` trailer of other records (all
    /// `None` without `sample_id_all`, and for unknown record types).
    #[inline]
    pub fn sample_id(&self) -> SampleId<'a> {
        match &self.kind {
            RecordKind::Sample(s) => s.sample_id(),
            RecordKind::Unknown { .. } => SampleId::none(),
            _ if self.layout.sample_id_all => {
                let at = self
                    .bytes
                    .len()
                    .saturating_sub(usize::from(self.layout.trailer_size));
                SampleId::new(
                    self.bytes.get(at..).unwrap_or_default(),
                    &self.layout.trailer,
                )
            }
            _ => SampleId::none(),
        }
    }

    /// The layout plan this record was decoded with.
    #[inline]
    pub fn layout(&self) -> &'a Layout {
        self.layout
    }
}

impl std::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("type", &self.record_type())
            .field("misc", &self.misc())
            .field("size", &self.size())
            .field("kind", &self.kind)
            .field("sample_id", &self.sample_id())
            .finish()
    }
}

/// How far ahead of the record being decoded [`Record::iter_large`] hints the stream's
/// bytes into the cache (see [`sys::prefetch_read`]): three lines at this distance per
/// record, about what a sample with a callchain (~200 bytes) consumes, so the hints
/// keep pace with the walk and each new 4 KiB page (where the hardware prefetchers
/// stop) is on its way before the walk reaches it.
const PREFETCH_AHEAD: usize = 8192;

/// Iterator over a contiguous stream of records; see [`Record::iter`] and
/// [`Record::iter_large`].
///
/// `HINTS` (false for `iter`, true for `iter_large`) is a type parameter rather than
/// a field so that the loop of a stream without hints holds no test for them: a
/// run-time switch, even one never taken, changed how LLVM allocated the caller's
/// registers and cost 7-10% on the decode bench's 512 KiB window.
#[derive(Debug, Clone)]
pub struct Records<'a, const HINTS: bool = false> {
    rest: &'a [u8],
    layout: &'a Layout,
}

impl<'a, const HINTS: bool> Iterator for Records<'a, HINTS> {
    type Item = Result<Record<'a>, DecodeError>;

    // Always inlined, like `Record::parse`.
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        // One length test per record: a whole header, or the end of the stream (or a
        // truncated header, the error of the cold path).
        let Ok((h, _)) = sys::perf_event_header::read_from_prefix(self.rest) else {
            return self.end();
        };
        // One length test for the three hints (each `prefetch_read`'s own check then
        // folds away); none within their reach of the end.
        if HINTS && self.rest.len() > PREFETCH_AHEAD + 128 {
            sys::prefetch_read(self.rest, PREFETCH_AHEAD);
            sys::prefetch_read(self.rest, PREFETCH_AHEAD + 64);
            sys::prefetch_read(self.rest, PREFETCH_AHEAD + 128);
        }
        match Record::parse_header(self.rest, h, self.layout) {
            Ok((r, rest)) => {
                self.rest = rest;
                Some(Ok(r))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

impl<'a, const HINTS: bool> Records<'a, HINTS> {
    /// Fewer bytes than a header are left: the end of the stream, or (if any) a
    /// truncated header, which is an error.
    #[cold]
    fn end(&mut self) -> Option<Result<Record<'a>, DecodeError>> {
        if self.rest.is_empty() {
            return None;
        }
        let e = Record::bad_header(self.rest, 0);
        self.rest = &[];
        Some(Err(e))
    }
}

impl<const HINTS: bool> std::iter::FusedIterator for Records<'_, HINTS> {}
