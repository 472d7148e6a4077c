//! Cutting records out of a data area: one [`Cursor`] shared by the live ring
//! ([`Batch`]) and by byte snapshots ([`Replay`]), so that the code the fuzzer checks is
//! the code that reads the kernel's pages.

use super::{Ring, RingStats};
use crate::records::{Layout, Record};
use crate::sys;
use crate::{Error, ErrorKind, Result};

/// Where a data area's bytes come from: the mmap pages, or a byte slice.
pub(crate) trait DataArea<'a>: Copy {
    /// The `len` bytes at `at`. Callers guarantee `at + len <= size` and that the bytes
    /// lie in `[tail, head)`, i.e. published and not yet returned to the kernel.
    fn bytes(self, at: usize, len: usize) -> &'a [u8];
}

impl<'a> DataArea<'a> for &'a [u8] {
    fn bytes(self, at: usize, len: usize) -> &'a [u8] {
        &self[at..at + len]
    }
}

/// The reading state of one batch: a head snapshot and the position reached.
pub(crate) struct Cursor {
    /// Size of the data area: a power of two, a multiple of 8 (Window/Replay invariants).
    size: usize,
    head: u64,
    pos: u64,
}

/// What reading writes to besides the cursor: the wrap-around scratch and the totals.
pub(crate) struct Sink<'s> {
    pub(crate) scratch: &'s mut [u64],
    pub(crate) stats: &'s mut RingStats,
    pub(crate) event: &'s str,
}

impl Cursor {
    fn remaining(&self) -> u64 {
        self.head.wrapping_sub(self.pos)
    }

    /// Gives up on the rest of the batch after malformed data: everything up to the
    /// head snapshot is skipped, so reading resumes with the kernel's next record.
    fn resync(&mut self, stats: &mut RingStats, event: &str, what: String) -> Error {
        let skipped = self.remaining();
        stats.skipped_bytes += skipped;
        self.pos = self.head;
        Error::new(
            ErrorKind::Decode,
            format!("reading the {event} ring"),
            format!("{what}; skipped {skipped} bytes to the head"),
        )
        .with_fix("this is a kernel/reader disagreement or memory corruption; records after the head decode normally")
    }

    fn next<'a, A: DataArea<'a>>(
        &mut self,
        area: A,
        sink: Sink<'a>,
    ) -> Option<Result<RawRecord<'a>>> {
        let Sink {
            scratch,
            stats,
            event,
        } = sink;
        let avail = self.head.wrapping_sub(self.pos);
        if avail == 0 {
            return None;
        }
        let size = self.size as u64;
        if avail > size || !avail.is_multiple_of(8) || !self.pos.is_multiple_of(8) {
            let (h, t) = (self.head, self.pos);
            return Some(Err(self.resync(stats, event, format!(
                "data_head {h} is not within one data area ({size} bytes) ahead of data_tail {t}, in 8-byte steps"
            ))));
        }
        // `size` is a power of two, so masking is the modulo: `at < size`, 8-aligned.
        let at = (self.pos & (size - 1)) as usize;
        let until_end = self.size - at;
        // The header never wraps: records are 8-aligned and the area is a multiple of 8.
        let header = area.bytes(at, 8);
        let rec_size = u64::from(u16::from_ne_bytes([header[6], header[7]]));
        if rec_size < 8 || rec_size % 8 != 0 || rec_size > avail {
            return Some(Err(self.resync(stats, event, format!(
                "record at {} has size {rec_size} (must be a multiple of 8, at least 8, at most the {avail} published bytes)",
                self.pos
            ))));
        }
        let len = rec_size as usize;
        let wrapped = len > until_end;
        // Positions count bytes mod 2^64, as the kernel's head does.
        self.pos = self.pos.wrapping_add(rec_size);
        let bytes: &[u8] = if !wrapped {
            area.bytes(at, len)
        } else {
            // The record's two pieces, `[at, size)` and `[0, len - until_end)`: both in
            // the area (len <= avail <= size) and in [tail, head).
            let scratch: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(scratch);
            scratch[..until_end].copy_from_slice(area.bytes(at, until_end));
            scratch[until_end..len].copy_from_slice(area.bytes(0, len - until_end));
            stats.wrapped += 1;
            &scratch[..len]
        };
        count(stats, bytes);
        Some(Ok(RawRecord { bytes, wrapped }))
    }
}

/// Keeps the ring's totals: records, samples, and what the kernel lost or throttled.
fn count(stats: &mut RingStats, bytes: &[u8]) {
    stats.records += 1;
    match read_u32(bytes, 0) {
        sys::PERF_RECORD_SAMPLE => stats.samples += 1,
        sys::PERF_RECORD_LOST => {
            // { header; u64 id; u64 lost; }
            stats.lost_events += 1;
            stats.lost += read_u64(bytes, 16).unwrap_or(0);
        }
        // { header; u64 lost; }
        sys::PERF_RECORD_LOST_SAMPLES => stats.lost_samples += read_u64(bytes, 8).unwrap_or(0),
        sys::PERF_RECORD_THROTTLE => stats.throttled += 1,
        sys::PERF_RECORD_UNTHROTTLE => stats.unthrottled += 1,
        _ => {}
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    let w: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(w))
}

/// One record's bytes, header included, exactly `header.size` long and 8-byte aligned.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    bytes: &'a [u8],
    wrapped: bool,
}

impl<'a> RawRecord<'a> {
    /// The whole record, header first.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// `perf_event_header.type` (`PERF_RECORD_*`).
    pub fn kind(&self) -> u32 {
        read_u32(self.bytes, 0)
    }
    /// `perf_event_header.misc`.
    pub fn misc(&self) -> u16 {
        u16::from_ne_bytes([self.bytes[4], self.bytes[5]])
    }
    /// Whether the record wrapped around the data area and was copied.
    pub fn was_wrapped(&self) -> bool {
        self.wrapped
    }
}

macro_rules! lending_reader {
    ($ty:ident) => {
        impl $ty<'_> {
            /// Bytes left before the head snapshot.
            pub fn remaining(&self) -> u64 {
                self.cursor.remaining()
            }

            /// The next record decoded per `layout` (see [`crate::records`]).
            ///
            /// A record that does not decode yields an `Err` naming the field and offset;
            /// its space is consumed and reading continues with the next record.
            pub fn next_record<'b>(&'b mut self, layout: &'b Layout) -> Option<Result<Record<'b>>> {
                Some(match self.next()? {
                    Ok(raw) => Record::parse(raw.bytes(), layout).map_err(Error::from),
                    Err(e) => Err(e),
                })
            }
        }
    };
}

/// The records published when the batch began; see [`Ring::batch`].
///
/// Records borrow the batch, so none can outlive the tail update that returns their
/// space to the kernel: when the batch is dropped, `data_tail` is stored (Release) at
/// the end of the last record yielded. `std::mem::forget` on a batch leaves the tail
/// where it was, so the same records are read again.
///
/// Keeping a record past its batch does not compile:
/// ```compile_fail
/// fn keep(ring: &mut perfring::ring::Ring) -> usize {
///     let kept = {
///         let mut batch = ring.batch();
///         batch.next().unwrap().unwrap() // borrows `batch`...
///     }; // ...which is dropped here, returning the record's space to the kernel
///     kept.bytes().len()
/// }
/// ```
pub struct Batch<'r> {
    ring: &'r mut Ring,
    cursor: Cursor,
    start: u64,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("head", &self.cursor.head)
            .field("pos", &self.cursor.pos)
            .finish_non_exhaustive()
    }
}

impl<'r> Batch<'r> {
    pub(super) fn new(ring: &'r mut Ring) -> Batch<'r> {
        let head = ring.head();
        let tail = ring.tail();
        Batch {
            cursor: Cursor {
                size: ring.window.size(),
                head,
                pos: tail,
            },
            ring,
            start: tail,
        }
    }

    /// The next record, or `None` at the head snapshot.
    ///
    /// A malformed ring (a header size under 8, not a multiple of 8, larger than the
    /// data area or past the head; a head behind the tail or more than the data area
    /// ahead of it) yields one `Err` and reading resumes at the head.
    #[allow(clippy::should_implement_trait)] // a lending iterator: items borrow the batch
    pub fn next(&mut self) -> Option<Result<RawRecord<'_>>> {
        let ring = &mut *self.ring;
        let area = super::MappedArea::of(&ring.map, ring.window);
        let sink = Sink {
            scratch: &mut ring.scratch,
            stats: &mut ring.stats,
            event: &ring.event,
        };
        self.cursor.next(area, sink)
    }
}

lending_reader!(Batch);

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.cursor.pos != self.start {
            self.ring.set_tail(self.cursor.pos);
        }
    }
}

/// Reads records out of a copy of a data area — a ring saved to disk, a test stream,
/// fuzz input — with exactly the code that reads live rings.
///
/// # Examples
/// ```
/// use perfring::ring::Replay;
/// // One 8-byte record of type 14 (PERF_RECORD_UNTHROTTLE is 6; any type will do).
/// let mut area = vec![0u8; 64];
/// area[..8].copy_from_slice(&[14, 0, 0, 0, 0, 0, 8, 0]);
/// let mut replay = Replay::new(&area, 0, 8)?;
/// assert_eq!(replay.next().unwrap()?.kind(), 14);
/// assert!(replay.next().is_none());
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct Replay<'a> {
    area: &'a [u8],
    cursor: Cursor,
    scratch: Box<[u64]>,
    stats: RingStats,
}

impl std::fmt::Debug for Replay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("size", &self.area.len())
            .field("head", &self.cursor.head)
            .field("pos", &self.cursor.pos)
            .finish()
    }
}

impl<'a> Replay<'a> {
    /// Reads `area` (a data area: a power of two of at least 8 bytes) from `tail` to
    /// `head` (free-running positions, as in the control page). Allocates its 64 KiB
    /// wrap-around scratch once, here.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] when `area.len()` is not a power of two ≥ 8.
    pub fn new(area: &'a [u8], tail: u64, head: u64) -> Result<Replay<'a>> {
        if !area.len().is_power_of_two() || area.len() < 8 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Replay::new",
                format!(
                    "a data area of {} bytes: it must be a power of two of at least 8",
                    area.len()
                ),
            )
            .with_fix("pass the whole data area, as mapped (data_size bytes)"));
        }
        Ok(Replay {
            area,
            cursor: Cursor {
                size: area.len(),
                head,
                pos: tail,
            },
            scratch: vec![0u64; super::MAX_RECORD.div_ceil(8)].into_boxed_slice(),
            stats: RingStats::default(),
        })
    }

    /// The next record, as [`Batch::next`].
    #[allow(clippy::should_implement_trait)] // a lending iterator: items borrow the replay
    pub fn next(&mut self) -> Option<Result<RawRecord<'_>>> {
        let sink = Sink {
            scratch: &mut self.scratch,
            stats: &mut self.stats,
            event: "replayed",
        };
        self.cursor.next(self.area, sink)
    }

    /// Totals of what was read so far.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Where reading has got to (the `data_tail` a live ring would store).
    pub fn position(&self) -> u64 {
        self.cursor.pos
    }
}

lending_reader!(Replay);
