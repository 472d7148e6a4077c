//! The writer thread and its byte-bounded queue: records move from the thread that
//! drains the rings to a [`Sink`] on a thread of its own (a
//! [`Pipeline`](crate::pipeline::Pipeline), or any file writer), and the draining
//! thread only copies bytes. When the queue is full, records are dropped and counted
//! ([`StreamStats::lost_records`]), and the sink is told ([`Chunk::lost_before`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Error, ErrorKind, Result};

/// `PERF_RECORD_FINISHED_ROUND` (perf's user record 68): no reordering across it.
pub(crate) const FINISHED_ROUND: u32 = 68;

/// The event index given to records that belong to no event (synthesized markers).
pub(crate) const NO_EVENT: u32 = u32::MAX;

/// A run of whole records, as the ring held them, with the event each came from.
///
/// Sinks receive chunks on the writer thread. `lost_before` records were dropped
/// (queue full) just before this chunk's first record.
#[derive(Debug, Default)]
pub struct Chunk {
    bytes: Vec<u8>,
    events: Vec<u32>,
    lost_before: u64,
}

impl Chunk {
    /// The records' bytes, back to back (each starts with its `perf_event_header`).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many records the chunk holds.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True if it holds no record.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Records dropped just before this chunk because the queue was full.
    pub fn lost_before(&self) -> u64 {
        self.lost_before
    }

    /// Each record with its event index (`u32::MAX` for markers that belong to no
    /// event, such as `PERF_RECORD_FINISHED_ROUND`).
    pub fn records(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        let mut off = 0usize;
        self.events.iter().map(move |&ev| {
            let size = record_size(&self.bytes[off..]);
            let rec = &self.bytes[off..off + size];
            off += size;
            (ev, rec)
        })
    }

    fn push(&mut self, event: u32, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.events.push(event);
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.events.clear();
        self.lost_before = 0;
    }
}

/// The whole records at the start of `bytes`, back to back as a ring or a perf.data
/// data section holds them, each with its header; ends at the first record that is cut
/// (or whose `header.size` is below 8).
///
/// # Examples
/// ```
/// let rec = |size: u16| { let mut r = vec![0u8; size.into()]; r[6..8].copy_from_slice(&size.to_ne_bytes()); r };
/// let bytes = [rec(16), rec(8), rec(24)].concat();
/// let sizes: Vec<usize> = perfring::stream::split_records(&bytes[..40]).map(<[u8]>::len).collect();
/// assert_eq!(sizes, [16, 8]);
/// assert_eq!(perfring::stream::whole_records(&bytes[..40]), 24);
/// ```
pub fn split_records(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let size = usize::from(u16::from_ne_bytes([*bytes.get(6)?, *bytes.get(7)?]));
        if size < 8 || size > bytes.len() {
            return None;
        }
        let (rec, rest) = bytes.split_at(size);
        bytes = rest;
        Some(rec)
    })
}

/// The length of the longest prefix of `bytes` made of whole records
/// ([`split_records`]).
pub fn whole_records(bytes: &[u8]) -> usize {
    split_records(bytes).map(<[u8]>::len).sum()
}

/// `header.size` of the record at the start of `bytes` (checked by `push`).
fn record_size(bytes: &[u8]) -> usize {
    usize::from(u16::from_ne_bytes([bytes[6], bytes[7]]))
}

/// What consumes records on the writer thread: a file format.
pub trait Sink: Send + 'static {
    /// Called once on the writer thread as it starts, before any chunk: work that must
    /// not wait for the first records (reading a running process's `/proc` before it
    /// can exit). An error stops the stream as [`write_chunk`](Self::write_chunk)'s does.
    fn start(&mut self) -> Result<()> {
        Ok(())
    }

    /// Takes a run of whole records. An error stops the stream: no more chunks come,
    /// and [`finish`](Self::finish) is still called so the file is left readable.
    fn write_chunk(&mut self, chunk: &Chunk) -> Result<()>;

    /// Completes the file (headers, feature sections, the pprof message).
    fn finish(&mut self) -> Result<()>;
}

/// The bound of a [`Streamer`]'s queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSize {
    /// Bytes of records waiting for the writer thread, at most.
    pub bytes: usize,
    /// Bytes gathered before a chunk is handed over (also handed over at each
    /// [`Streamer::end_round`] once it holds a quarter of this).
    pub chunk_bytes: usize,
}

impl Default for QueueSize {
    /// 64 MiB queued, in 256 KiB chunks.
    fn default() -> Self {
        QueueSize {
            bytes: 64 << 20,
            chunk_bytes: 256 << 10,
        }
    }
}

/// Counts of a stream, kept by the draining side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Records handed to the writer thread.
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Records dropped because the queue was full (the writer fell behind).
    pub lost_records: u64,
    /// Their bytes.
    pub lost_bytes: u64,
}

/// Moves records from the draining thread to a writer thread owning a [`Sink`].
///
/// [`push`](Self::push) copies a record into the current chunk and never blocks;
/// a full chunk goes to the writer if the queue has room for it, else its records are
/// dropped and counted. The queue holds at most [`QueueSize::bytes`], so memory stays
/// bounded however long the recording.
pub struct Streamer<S: Sink> {
    chunk: Chunk,
    size: QueueSize,
    tx: Option<mpsc::Sender<Chunk>>,
    free: mpsc::Receiver<Chunk>,
    queued: Arc<AtomicUsize>,
    failed: Arc<AtomicBool>,
    thread: Option<JoinHandle<(S, Result<()>)>>,
    stats: StreamStats,
    pending_lost: u64,
    /// When a chunk last went to the writer.
    handed: std::time::Instant,
}

/// The longest a round waits on the draining side for its chunk to fill: the writer
/// sees every record within this (and names a process's samples while it lives).
const ROUND_LATENCY: std::time::Duration = std::time::Duration::from_millis(100);

impl<S: Sink> std::fmt::Debug for Streamer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer")
            .field("size", &self.size)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<S: Sink> Streamer<S> {
    /// Starts the writer thread (named `perfring-writer`) with `sink`.
    ///
    /// # Errors
    /// If the thread cannot be created.
    pub fn spawn(mut sink: S, size: QueueSize) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Chunk>();
        let (free_tx, free) = mpsc::channel::<Chunk>();
        let queued = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let (q, fl) = (queued.clone(), failed.clone());
        let thread = std::thread::Builder::new()
            .name("perfring-writer".into())
            .spawn(move || {
                let mut result = sink.start();
                if result.is_err() {
                    fl.store(true, Ordering::Release);
                }
                for mut chunk in rx {
                    let len = chunk.bytes.len();
                    if result.is_ok() {
                        result = sink.write_chunk(&chunk);
                        if result.is_err() {
                            fl.store(true, Ordering::Release);
                        }
                    }
                    q.fetch_sub(len, Ordering::AcqRel);
                    chunk.clear();
                    let _ = free_tx.send(chunk); // The pusher may be gone: fine.
                }
                let done = sink.finish();
                (sink, result.and(done))
            })
            .map_err(|e| Error::from_errno("spawn the writer thread", e))?;
        Ok(Streamer {
            chunk: Chunk::default(),
            size,
            tx: Some(tx),
            free,
            queued,
            failed,
            thread: Some(thread),
            stats: StreamStats::default(),
            pending_lost: 0,
            handed: std::time::Instant::now(),
        })
    }

    /// Queues one record (its bytes as the ring holds them, header first) of event
    /// number `event` (its index in the [`EventInfo`](super::EventInfo) list).
    ///
    /// # Errors
    /// - [`ErrorKind::Decode`] if `record` is not one whole record (its header's size
    ///   must equal its length, a multiple of 8).
    /// - [`ErrorKind::Io`] once the writer has failed (disk full, closed pipe): stop
    ///   recording and call [`finish`](Self::finish) for the writer's own error.
    pub fn push(&mut self, event: usize, record: &[u8]) -> Result<()> {
        if record.len() < 8
            || record_size(record) != record.len()
            || !record.len().is_multiple_of(8)
        {
            return Err(Error::new(
                ErrorKind::Decode,
                "queue a record for writing",
                format!(
                    "{} bytes are not one whole record (header.size {})",
                    record.len(),
                    if record.len() >= 8 {
                        record_size(record)
                    } else {
                        0
                    }
                ),
            )
            .with_fix("pass each record's bytes exactly as the ring held them"));
        }
        self.check_failed()?;
        let event = u32::try_from(event).unwrap_or(NO_EVENT - 1);
        self.chunk.push(event, record);
        if self.chunk.bytes.len() >= self.size.chunk_bytes {
            self.hand_over(false)?;
        }
        Ok(())
    }

    /// Marks the end of a pass over all rings (`PERF_RECORD_FINISHED_ROUND` in
    /// `perf.data`, so readers sort only within a round) and hands the chunk over
    /// when it holds a quarter of a chunk.
    ///
    /// # Errors
    /// As [`push`](Self::push) once the writer has failed.
    pub fn end_round(&mut self) -> Result<()> {
        self.check_failed()?;
        let mut marker = [0u8; 8];
        marker[..4].copy_from_slice(&FINISHED_ROUND.to_ne_bytes());
        marker[6..].copy_from_slice(&8u16.to_ne_bytes());
        // Two rounds in a row say nothing more than one.
        if !self.chunk.is_empty() && self.chunk.events.last() != Some(&NO_EVENT) {
            self.chunk.push(NO_EVENT, &marker);
        }
        if self.chunk.bytes.len() >= self.size.chunk_bytes / 4
            || self.handed.elapsed() >= ROUND_LATENCY
        {
            self.hand_over(false)?;
        }
        Ok(())
    }

    /// Marks the end of a round whose pass over the rings began at `time` (on the
    /// events' clock), and hands the chunk over whatever its size: a sink that is a
    /// [`Pipeline`](crate::pipeline::Pipeline) then tells its outputs that every record
    /// stamped before `time` has come ([`Output::progress`]), even when no record
    /// came. The marker is `PERF_RECORD_FINISHED_ROUND` with the time after its header
    /// (perf reads the size from the header and skips the rest).
    ///
    /// [`Output::progress`]: crate::output::Output::progress
    ///
    /// # Errors
    /// As [`push`](Self::push) once the writer has failed.
    pub fn end_round_at(&mut self, time: u64) -> Result<()> {
        self.check_failed()?;
        let mut marker = [0u8; 16];
        marker[..4].copy_from_slice(&FINISHED_ROUND.to_ne_bytes());
        marker[6..8].copy_from_slice(&16u16.to_ne_bytes());
        marker[8..].copy_from_slice(&time.to_ne_bytes());
        self.chunk.push(NO_EVENT, &marker);
        self.hand_over(false)
    }

    /// Marks the end of a round, as [`end_round`](Self::end_round), and hands the
    /// chunk over whatever its size (within the queue's bound): for a consumer that
    /// must see every round at once, such as a printer of each overflow.
    ///
    /// # Errors
    /// As [`push`](Self::push) once the writer has failed.
    pub fn end_round_now(&mut self) -> Result<()> {
        self.end_round()?;
        self.hand_over(false)
    }

    /// True once the writer thread has failed; [`finish`](Self::finish) says why.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The counts so far.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    fn check_failed(&self) -> Result<()> {
        if self.is_failed() || self.tx.is_none() {
            return Err(Error::new(
                ErrorKind::Io,
                "queue a record for writing",
                "the writer thread has stopped on an error",
            )
            .with_fix("stop recording and call Streamer::finish for the writer's error"));
        }
        Ok(())
    }

    /// Hands the current chunk to the writer; `force` ignores the byte bound (at the end).
    fn hand_over(&mut self, force: bool) -> Result<()> {
        let len = self.chunk.bytes.len();
        if len == 0 && (self.pending_lost == 0 || !force) {
            return Ok(());
        }
        self.handed = std::time::Instant::now();
        let records = self.chunk.events.len() as u64;
        // ATOMICS: `queued` is only a byte count shared with the writer (which
        // subtracts what it has written); AcqRel keeps it exact, nothing else pairs.
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if !force && before + len > self.size.bytes {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            self.pending_lost += records;
            self.stats.lost_records += records;
            self.stats.lost_bytes += len as u64;
            self.chunk.clear();
            return Ok(());
        }
        let next = self.free.try_recv().unwrap_or_default();
        let mut chunk = std::mem::replace(&mut self.chunk, next);
        chunk.lost_before = std::mem::take(&mut self.pending_lost);
        let tx = self.tx.as_ref().expect("checked by check_failed");
        if tx.send(chunk).is_err() {
            self.tx = None;
            return self.check_failed();
        }
        self.stats.records += records;
        self.stats.bytes += len as u64;
        Ok(())
    }

    /// Hands over what is left, stops the writer thread and completes the file.
    ///
    /// # Errors
    /// The writer's first error (e.g. "No space left on device" naming the file); the
    /// file is still completed as far as possible so readers accept what was written.
    pub fn finish(mut self) -> Result<(S, StreamStats)> {
        if self.tx.is_some() && !self.is_failed() {
            // Nothing is dropped at the end: the drain has stopped, waiting is fine.
            let _ = self.hand_over(true);
        }
        self.tx = None;
        let (sink, result) = self
            .thread
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| {
                Error::new(
                    ErrorKind::Io,
                    "write the profile",
                    "the writer thread panicked",
                )
            })?;
        result.map(|()| (sink, self.stats))
    }
}

impl<S: Sink> Drop for Streamer<S> {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
