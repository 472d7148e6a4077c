//! [`DecodeError`]: where in a record decoding stopped, and why.

use std::fmt;

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// A field (or the header itself) runs past the end of the record.
    Truncated,
    /// `header.size` is not a multiple of 8. The kernel pads every record it writes,
    /// samples included, to a multiple of 8 bytes, so this is never a real record.
    Unaligned,
    /// The slice is shorter than `header.size` says the record is.
    ShortSlice,
    /// The layout plan has `sample_type` or `read_format` bits this decoder does not
    /// know, so the offsets of the fields after them are unknown.
    UnknownFormat,
}

/// A record that is not what the kernel would write: the field, its offset within the
/// record, and how many bytes it needed against how many were left.
///
/// Decoding never panics and never reads outside the record; every malformed input
/// becomes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    field: &'static str,
    offset: usize,
    needed: usize,
    available: usize,
}

impl DecodeError {
    /// A field of `needed` bytes at `offset` with only `available` bytes left.
    pub(crate) fn truncated(
        field: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    ) -> Self {
        DecodeError {
            kind: DecodeErrorKind::Truncated,
            field,
            offset,
            needed,
            available,
        }
    }

    pub(crate) fn new(
        kind: DecodeErrorKind,
        field: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    ) -> Self {
        DecodeError {
            kind,
            field,
            offset,
            needed,
            available,
        }
    }

    /// Why decoding failed.
    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }

    /// The field being read, e.g. `"callchain.ips"` or `"header"`.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The field's byte offset from the start of the record (its `perf_event_header`).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// How many bytes the field needed from `offset`.
    pub fn needed(&self) -> usize {
        self.needed
    }

    /// How many bytes were left from `offset`.
    pub fn available(&self) -> usize {
        self.available
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DecodeErrorKind::Truncated => write!(
                f,
                "field `{}` at offset {} needs {} bytes but only {} are left in the record",
                self.field, self.offset, self.needed, self.available
            ),
            DecodeErrorKind::Unaligned => write!(
                f,
                "record size {} is not a multiple of 8 (the kernel pads every record, \
                 samples included, to 8 bytes)",
                self.needed
            ),
            DecodeErrorKind::ShortSlice => write!(
                f,
                "header at offset {} says the record is {} bytes but only {} were given",
                self.offset, self.needed, self.available
            ),
            DecodeErrorKind::UnknownFormat => write!(
                f,
                "{} has bits {:#x} this decoder does not know, so field offsets past \
                 them are unknown",
                self.field, self.needed
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for crate::Error {
    fn from(e: DecodeError) -> Self {
        let fix = match e.kind {
            DecodeErrorKind::UnknownFormat => "drop the unknown bits or upgrade perfring",
            _ => {
                "check that the layout plan was built from the same perf_event_attr \
                 (sample_type, read_format, register masks, branch_sample_type, \
                 sample_id_all) as the counter that wrote the ring"
            }
        };
        crate::Error::new(
            crate::ErrorKind::Decode,
            format!("decode perf record (field `{}`)", e.field),
            e.to_string(),
        )
        .with_fix(fix)
    }
}
