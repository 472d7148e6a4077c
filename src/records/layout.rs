//! [`Layout`]: where each field of a record sits, worked out once from the attr.

use super::error::{DecodeError, DecodeErrorKind};
use crate::sys;

/// `PERF_FORMAT_LOST` (Linux 6.0): a lost-sample count after each value.
pub const FORMAT_LOST: u64 = sys::PERF_FORMAT_LOST as u64;

/// `PERF_SAMPLE_BRANCH_COUNTERS` (Linux 6.8, newer than the 6.1 header): the branch
/// stack is followed by `u64 cntr[bnr]`.
pub const BRANCH_COUNTERS: u64 = 1 << 19;

/// Every `sample_type` bit this decoder knows (`PERF_SAMPLE_MAX - 1`).
const KNOWN_SAMPLE_TYPE: u64 = sys::PERF_SAMPLE_MAX as u64 - 1;
/// Every `read_format` bit this decoder knows (`PERF_FORMAT_MAX - 1`).
const KNOWN_READ_FORMAT: u64 = sys::PERF_FORMAT_MAX as u64 - 1;

/// The `sample_type` bits whose fields come after `read`, in the variable-length part.
pub(crate) const VARIABLE_PART: u64 = (sys::PERF_SAMPLE_CALLCHAIN
    | sys::PERF_SAMPLE_RAW
    | sys::PERF_SAMPLE_BRANCH_STACK
    | sys::PERF_SAMPLE_REGS_USER
    | sys::PERF_SAMPLE_STACK_USER
    | sys::PERF_SAMPLE_WEIGHT
    | sys::PERF_SAMPLE_WEIGHT_STRUCT
    | sys::PERF_SAMPLE_DATA_SRC
    | sys::PERF_SAMPLE_TRANSACTION
    | sys::PERF_SAMPLE_REGS_INTR
    | sys::PERF_SAMPLE_PHYS_ADDR
    | sys::PERF_SAMPLE_CGROUP
    | sys::PERF_SAMPLE_DATA_PAGE_SIZE
    | sys::PERF_SAMPLE_CODE_PAGE_SIZE
    | sys::PERF_SAMPLE_AUX) as u64;

/// A field's place in the compact offset table: its index in `u64` words from the
/// start of the record (or of the trailer), or [`ABSENT`] when it is not recorded.
///
/// Why words and a sentinel rather than `Option<u16>` byte offsets: every fixed field
/// is one 8-byte word (a `u32` pair shares one), so `8 * index .. 8 * index + 8` cannot
/// overflow and is one bounds check, and `ABSENT` puts that range past any record
/// (at most 65535 bytes), so the same check also answers "is it recorded".
pub(crate) type Word = u16;

/// The index of a field that is not recorded: `8 * ABSENT` is past any record.
pub(crate) const ABSENT: Word = Word::MAX;

/// Word indices of the id fields, from the start of whatever they are relative to (the
/// record for a sample, the trailer for other records); [`ABSENT`] if not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdOffsets {
    pub tid: Word,
    pub time: Word,
    pub id: Word,
    pub stream_id: Word,
    pub cpu: Word,
    pub identifier: Word,
}

impl IdOffsets {
    pub(crate) const NONE: IdOffsets = IdOffsets {
        tid: ABSENT,
        time: ABSENT,
        id: ABSENT,
        stream_id: ABSENT,
        cpu: ABSENT,
        identifier: ABSENT,
    };
}

/// A byte offset as a word index, or [`ABSENT`].
fn word(off: Option<u16>) -> Word {
    off.map_or(ABSENT, |o| o / 8)
}

/// `attr.sample_id_all`: whether records other than samples end with a `sample_id`
/// trailer. An enum rather than a `bool` so that [`Layout::from_raw`]'s call sites say
/// which they mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleIdAll {
    /// `sample_id_all = 1`: every record other than a sample ends with the trailer.
    Yes,
    /// `sample_id_all = 0`: no trailer.
    No,
}

impl From<bool> for SampleIdAll {
    /// `true` is [`SampleIdAll::Yes`], as the attr's bit.
    fn from(set: bool) -> Self {
        if set {
            SampleIdAll::Yes
        } else {
            SampleIdAll::No
        }
    }
}

/// The layout plan of one counter's records: built once from its `perf_event_attr`,
/// then handed to every [`Record::parse`](super::Record::parse).
///
/// It fixes the offsets of a sample's fields up to the first variable-length one
/// (IP, TID, TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, and READ unless it is a group
/// read), the size of each variable field's fixed parts (register counts from the
/// masks' popcounts, `hw_idx` from `PERF_SAMPLE_BRANCH_HW_INDEX`), and the size and
/// offsets of the `sample_id` trailer that `sample_id_all` appends to other records.
///
/// # Examples
/// ```
/// use perfring::records::{Layout, SampleIdAll};
/// use perfring::sys;
/// let st = (sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME) as u64;
/// let layout = Layout::from_raw(st, 0, 0, 0, 0, SampleIdAll::Yes)?;
/// // The trailer of a non-sample record: pid/tid and time.
/// assert_eq!(layout.sample_id_size(), 16);
/// # Ok::<(), perfring::records::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub(crate) sample_type: u64,
    pub(crate) read_format: u64,
    pub(crate) regs_user_mask: u64,
    pub(crate) regs_intr_mask: u64,
    pub(crate) branch_sample_type: u64,
    pub(crate) sample_id_all: bool,
    /// Number of registers in each `regs_user` / `regs_intr` block.
    pub(crate) n_regs_user: u16,
    pub(crate) n_regs_intr: u16,
    /// Word indices of the fixed fields of a sample, from the start of the record
    /// ([`ABSENT`] if not recorded): the compact offset table the accessors read.
    pub(crate) ip: Word,
    pub(crate) addr: Word,
    pub(crate) period: Word,
    /// Byte offset of a `PERF_SAMPLE_READ` block.
    pub(crate) read: Option<u16>,
    pub(crate) sample_ids: IdOffsets,
    /// End of the fixed part of a sample: where the first variable field starts (for a
    /// group read, the read itself).
    pub(crate) fixed_end: u16,
    /// `sample_type & VARIABLE_PART`, plus READ for a group read.
    pub(crate) variable: u64,
    /// Word index of the callchain's `nr` when the callchain is a sample's only
    /// variable field (the common layout), else [`ABSENT`]: `Sample::parse` then
    /// finds the callchain, and proves every fixed field in bounds, with one test.
    pub(crate) chain_nr: Word,
    /// Word indices of the trailer's fields from the start of the trailer.
    pub(crate) trailer: IdOffsets,
    pub(crate) trailer_size: u16,
}

impl Layout {
    /// The plan for records of a counter opened with `attr`.
    ///
    /// # Errors
    /// [`DecodeErrorKind::UnknownFormat`] if `sample_type` or `read_format` has bits
    /// newer than this decoder.
    pub fn new(attr: &sys::perf_event_attr) -> Result<Self, DecodeError> {
        Self::from_raw(
            attr.sample_type,
            attr.read_format,
            attr.sample_regs_user,
            attr.sample_regs_intr,
            attr.branch_sample_type,
            SampleIdAll::from(attr.sample_id_all() != 0),
        )
    }

    /// The plan from the raw attr values: `sample_type`, `read_format`,
    /// `sample_regs_user`, `sample_regs_intr`, `branch_sample_type`, and whether
    /// `sample_id_all` is set ([`SampleIdAll::from`] takes the attr's bit as a `bool`).
    ///
    /// # Errors
    /// [`DecodeErrorKind::UnknownFormat`] if `sample_type` or `read_format` has bits
    /// newer than this decoder.
    pub fn from_raw(
        sample_type: u64,
        read_format: u64,
        sample_regs_user: u64,
        sample_regs_intr: u64,
        branch_sample_type: u64,
        sample_id_all: SampleIdAll,
    ) -> Result<Self, DecodeError> {
        let sample_id_all = sample_id_all == SampleIdAll::Yes;
        let unknown = sample_type & !KNOWN_SAMPLE_TYPE;
        if unknown != 0 {
            return Err(DecodeError::new(
                DecodeErrorKind::UnknownFormat,
                "sample_type",
                0,
                unknown as usize,
                0,
            ));
        }
        let unknown = read_format & !KNOWN_READ_FORMAT;
        if unknown != 0 {
            return Err(DecodeError::new(
                DecodeErrorKind::UnknownFormat,
                "read_format",
                0,
                unknown as usize,
                0,
            ));
        }
        let has = |bit: u32| sample_type & u64::from(bit) != 0;

        // The sample: header, then the fixed fields in the man page's order.
        let mut at: u16 = 8;
        let mut next = |bit: u32, size: u16| {
            if has(bit) {
                let here = at;
                at += size;
                Some(here)
            } else {
                None
            }
        };
        let identifier = next(sys::PERF_SAMPLE_IDENTIFIER, 8);
        let ip = next(sys::PERF_SAMPLE_IP, 8);
        let tid = next(sys::PERF_SAMPLE_TID, 8);
        let time = next(sys::PERF_SAMPLE_TIME, 8);
        let addr = next(sys::PERF_SAMPLE_ADDR, 8);
        let id = next(sys::PERF_SAMPLE_ID, 8);
        let stream_id = next(sys::PERF_SAMPLE_STREAM_ID, 8);
        let cpu = next(sys::PERF_SAMPLE_CPU, 8);
        let period = next(sys::PERF_SAMPLE_PERIOD, 8);
        let group = read_format & u64::from(sys::PERF_FORMAT_GROUP) != 0;
        let read = if has(sys::PERF_SAMPLE_READ) {
            Some(at)
        } else {
            None
        };
        let mut variable = sample_type & VARIABLE_PART;
        if read.is_some() {
            if group {
                variable |= u64::from(sys::PERF_SAMPLE_READ);
            } else {
                at += 8 * read_single_words(read_format);
            }
        }
        let fixed_end = at;

        // The trailer of other records, in its own order.
        let mut at: u16 = 0;
        let mut next = |bit: u32| {
            if has(bit) {
                let here = at;
                at += 8;
                Some(here)
            } else {
                None
            }
        };
        let trailer = IdOffsets {
            tid: word(next(sys::PERF_SAMPLE_TID)),
            time: word(next(sys::PERF_SAMPLE_TIME)),
            id: word(next(sys::PERF_SAMPLE_ID)),
            stream_id: word(next(sys::PERF_SAMPLE_STREAM_ID)),
            cpu: word(next(sys::PERF_SAMPLE_CPU)),
            identifier: word(next(sys::PERF_SAMPLE_IDENTIFIER)),
        };
        let trailer_size = if sample_id_all { at } else { 0 };

        Ok(Layout {
            sample_type,
            read_format,
            regs_user_mask: sample_regs_user,
            regs_intr_mask: sample_regs_intr,
            branch_sample_type,
            sample_id_all,
            n_regs_user: sample_regs_user.count_ones() as u16,
            n_regs_intr: sample_regs_intr.count_ones() as u16,
            ip: word(ip),
            addr: word(addr),
            period: word(period),
            read,
            sample_ids: IdOffsets {
                tid: word(tid),
                time: word(time),
                id: word(id),
                stream_id: word(stream_id),
                cpu: word(cpu),
                identifier: word(identifier),
            },
            fixed_end,
            variable,
            chain_nr: if variable == u64::from(sys::PERF_SAMPLE_CALLCHAIN) {
                fixed_end / 8
            } else {
                ABSENT
            },
            trailer,
            trailer_size,
        })
    }

    /// `attr.sample_type`.
    pub fn sample_type(&self) -> u64 {
        self.sample_type
    }

    /// `attr.read_format`.
    pub fn read_format(&self) -> u64 {
        self.read_format
    }

    /// `attr.sample_regs_user`: which registers a `regs_user` block holds.
    pub fn sample_regs_user(&self) -> u64 {
        self.regs_user_mask
    }

    /// `attr.sample_regs_intr`: which registers a `regs_intr` block holds.
    pub fn sample_regs_intr(&self) -> u64 {
        self.regs_intr_mask
    }

    /// `attr.branch_sample_type`.
    pub fn branch_sample_type(&self) -> u64 {
        self.branch_sample_type
    }

    /// `attr.sample_id_all`: whether non-sample records end with a `sample_id` trailer.
    pub fn sample_id_all(&self) -> bool {
        self.sample_id_all
    }

    /// Size in bytes of the `sample_id` trailer of non-sample records (0 without
    /// `sample_id_all`).
    pub fn sample_id_size(&self) -> usize {
        usize::from(self.trailer_size)
    }

    /// Size in bytes of a sample's fixed part: header plus every field before the
    /// first variable-length one. A sample with no variable fields is exactly this big.
    pub fn fixed_sample_size(&self) -> usize {
        usize::from(self.fixed_end)
    }

    pub(crate) fn has(&self, bit: u32) -> bool {
        self.sample_type & u64::from(bit) != 0
    }

    pub(crate) fn branch_hw_index(&self) -> bool {
        self.branch_sample_type & u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) != 0
    }

    pub(crate) fn branch_counters(&self) -> bool {
        self.branch_sample_type & BRANCH_COUNTERS != 0
    }
}

/// Words in a non-group `read_format` block: value, then the optional ones.
pub(crate) fn read_single_words(read_format: u64) -> u16 {
    1 + (read_format
        & u64::from(
            sys::PERF_FORMAT_TOTAL_TIME_ENABLED
                | sys::PERF_FORMAT_TOTAL_TIME_RUNNING
                | sys::PERF_FORMAT_ID
                | sys::PERF_FORMAT_LOST,
        ))
    .count_ones() as u16
}
