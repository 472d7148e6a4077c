//! Records in; unwound, named samples out to every output — the one path from the
//! ring's bytes to perf.data, pprof and overflow lines.
//!
//! A [`Pipeline`] owns the [`AddressSpaces`] fed by the recording's records and the
//! [`Unwinder`], names frames with the [`Symbolizer`](crate::symbolize::Symbolizer) of
//! the thread it runs on, and hands each sample, once unwound (and named,
//! when an output wants names), to each [`Output`]. It runs where the records are
//! written, never where the rings are drained: as the [`Sink`] of a
//! [`Streamer`](crate::stream::Streamer) it sits on the writer thread, so opening a
//! cold file (100 ms and more for a large library's DWARF) never stalls the drain.
//!
//! Records are taken a round at a time (a round is one pass over every ring,
//! `PERF_RECORD_FINISHED_ROUND`) and handled in time order, as `perf report` does: a
//! sample drained from an event's ring is named with the `MMAP2` that the tracking
//! ring, drained after it, holds.
//!
//! # Examples
//! ```no_run
//! use perfring::pipeline::Pipeline;
//! use perfring::output::Pprof;
//! use perfring::stream::{Streamer, QueueSize};
//! # fn events() -> (Vec<perfring::sampler::EventInfo>, perfring::sampler::EventInfo) { unimplemented!() }
//! let (events, tracking) = events(); // the sampler's events and its tracking counter
//! let pipeline = Pipeline::new(&events, Some(&tracking))?
//!     .output(Pprof::create("profile.pb.gz")?);
//! let mut stream = Streamer::spawn(pipeline, QueueSize::default())?;
//! // In the drain callback: stream.push(event_index_or_tracking, raw)?; after each pass:
//! stream.end_round()?;
//! let (_pipeline, stats) = stream.finish()?;
//! # let _ = stats;
//! # Ok::<(), perfring::Error>(())
//! ```

use std::collections::HashSet;

use crate::error::{Error, ErrorKind, Result};
use crate::output::{Output, Recording, SampleRef};
use crate::records::{Layout, Record, RecordKind, Sample};
use crate::sampler::EventInfo;
use crate::space::AddressSpaces;
use crate::stream::{split_records, whole_records, Chunk, Sink, FINISHED_ROUND, NO_EVENT};
use crate::symbolize::{with_thread_symbolizer, Frame};
use crate::unwind::{RawFrame, Unwinder};

/// What a pipeline has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Samples handed to the outputs.
    pub samples: u64,
    /// Other records handed to the outputs.
    pub records: u64,
    /// Records that could not be decoded (skipped, counted).
    pub undecoded: u64,
    /// Records dropped before reaching the pipeline (the queue was full).
    pub lost: u64,
}

/// The index a tracking record carries in a [`Streamer`](crate::stream::Streamer) that
/// feeds a pipeline: one past the last event.
pub fn tracking_index(events: &[EventInfo]) -> usize {
    events.len()
}

/// What existed before the counters, which a pipeline describes with synthesized
/// records (`COMM`, `MMAP2`, the kernel's text) when it starts, as `perf record` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Existing {
    /// Nothing: every record comes from the rings.
    #[default]
    Nothing,
    /// The kernel's text: a command started by the recording reports its own
    /// mappings as it makes them.
    Kernel,
    /// The kernel's text and one running process's threads and mappings.
    Process(libc::pid_t),
    /// The kernel's text and every process's (a recording of CPUs).
    Everything,
}

/// Address spaces, unwinding and naming between the rings' records and the outputs.
pub struct Pipeline {
    events: Vec<EventInfo>,
    /// One per event, then the tracking counter's (records with index `events.len()`).
    layouts: Vec<Layout>,
    spaces: AddressSpaces,
    unwinder: Unwinder,
    outputs: Vec<Box<dyn Output>>,
    names: bool,
    cmdline: Vec<String>,
    program: Option<std::path::PathBuf>,
    /// Read `/proc` for a process first seen in a sample (a live recording).
    read_proc: bool,
    existing: Existing,
    /// An existing process's records, read when it was given (see `existing`).
    existing_records: Vec<u8>,
    /// The id synthesized records carry: the tracking counter's.
    tracking_id: u64,
    tried_proc: HashSet<u32>,
    /// This round's records, back to back, and for each (time, offset, event).
    round: Vec<u8>,
    order: Vec<(u64, usize, u32)>,
    raw: Vec<RawFrame>,
    frames: Vec<Frame>,
    stats: PipelineStats,
    started: bool,
    finished: bool,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("events", &self.events)
            .field("outputs", &self.outputs.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline for a recording of `events`, whose tracking records (`MMAP2`, `COMM`,
    /// `FORK`, `EXIT`, from the sampler's [`tracking`](crate::sampler::Sampler::tracking)
    /// counter) come with index [`tracking_index`]; without one, non-sample records
    /// come in the events' own rings.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] without events.
    pub fn new(events: &[EventInfo], tracking: Option<&EventInfo>) -> Result<Pipeline> {
        crate::output::require_events(events, "build a recording pipeline")?;
        let mut layouts: Vec<Layout> = events.iter().map(|e| *e.layout()).collect();
        layouts.push(*tracking.unwrap_or(&events[0]).layout());
        Ok(Pipeline {
            events: events.to_vec(),
            layouts,
            spaces: AddressSpaces::new(),
            unwinder: Unwinder::new(),
            outputs: Vec::new(),
            names: false,
            cmdline: Vec::new(),
            program: None,
            read_proc: false,
            existing: Existing::Nothing,
            existing_records: Vec::new(),
            tracking_id: tracking
                .unwrap_or(&events[0])
                .ids()
                .first()
                .copied()
                .unwrap_or(0),
            tried_proc: HashSet::new(),
            round: Vec::new(),
            order: Vec::new(),
            raw: Vec::new(),
            frames: Vec::new(),
            stats: PipelineStats::default(),
            started: false,
            finished: false,
        })
    }

    /// Adds an output.
    pub fn output(mut self, output: impl Output + 'static) -> Pipeline {
        self.names |= output.wants_names();
        self.outputs.push(Box::new(output));
        self
    }

    /// Adds a boxed output.
    pub fn boxed_output(mut self, output: Box<dyn Output>) -> Pipeline {
        self.names |= output.wants_names();
        self.outputs.push(output);
        self
    }

    /// The command line that made the recording (perf.data's `CMDLINE`).
    pub fn cmdline(mut self, cmdline: Vec<String>) -> Pipeline {
        self.cmdline = cmdline;
        self
    }

    /// The target's program (pprof's main mapping).
    pub fn program(mut self, program: Option<std::path::PathBuf>) -> Pipeline {
        self.program = program;
        self
    }

    /// Whether a process first seen in a sample, with no record about it, is read from
    /// `/proc` (once): right for a live recording of running processes, wrong for a
    /// file read later.
    pub fn read_proc(mut self, yes: bool) -> Pipeline {
        self.read_proc = yes;
        self
    }

    /// What existed before the counters, described when the pipeline starts (on the
    /// thread it runs on: reading `/proc/kallsyms` takes a while). A process's threads
    /// and mappings are read here, at once: the pipeline starts with the first records,
    /// by when a short-lived process may have exited (and with it its `/proc` entry).
    pub fn existing(mut self, existing: Existing) -> Pipeline {
        self.existing = existing;
        if let Existing::Process(pid) = existing {
            let layout = self.layouts[self.events.len()];
            let stamp = crate::synth::Stamp {
                layout: &layout,
                id: self.tracking_id,
                time: 0,
            };
            let mut buf = Vec::new();
            // A process that may not be read is named from its records or not at all.
            if crate::synth::synthesize_process(pid as u32, &stamp, &mut buf).is_ok() {
                self.existing_records = buf;
            }
        }
        self
    }

    /// The address spaces as the records so far made them.
    pub fn spaces(&self) -> &AddressSpaces {
        &self.spaces
    }

    /// Counts so far.
    pub fn stats(&self) -> PipelineStats {
        self.stats
    }

    /// Tells every output the recording begins (done by the first record if not
    /// called).
    ///
    /// # Errors
    /// The first output's error.
    pub fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let rec = Recording {
            events: &self.events,
            cmdline: &self.cmdline,
            program: self.program.as_deref(),
        };
        for o in &mut self.outputs {
            o.start(&rec)?;
        }
        self.synthesize();
        Ok(())
    }

    /// The records of what existed before the counters, first in the first round.
    fn synthesize(&mut self) {
        let pids: Vec<u32> = match self.existing {
            Existing::Nothing => return,
            Existing::Kernel => Vec::new(),
            Existing::Process(pid) => vec![pid as u32],
            Existing::Everything => std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect(),
        };
        let layout = self.layouts[self.events.len()];
        let mut buf = Vec::new();
        crate::synth::synthesize_kernel(&layout, self.tracking_id, &mut buf);
        let stamp = crate::synth::Stamp {
            layout: &layout,
            id: self.tracking_id,
            time: 0,
        };
        for pid in pids {
            if let (Existing::Process(_), false) = (self.existing, self.existing_records.is_empty())
            {
                // Read when it was given.
                buf.extend_from_slice(&self.existing_records);
                continue;
            }
            // A process that exits meanwhile, or that may not be read, is named from its
            // records or not at all.
            let _ = crate::synth::synthesize_process(pid, &stamp, &mut buf);
        }
        // Whole records, made here.
        let _ = self.push_records(self.events.len(), &buf);
    }

    /// Takes whole records (back to back) of event `event` (an index into the events,
    /// or [`tracking_index`] for tracking and synthesized records); they are handled at
    /// the round's end.
    ///
    /// # Errors
    /// [`ErrorKind::Decode`] for bytes that are not whole records (nothing is taken).
    pub fn push_records(&mut self, event: usize, bytes: &[u8]) -> Result<()> {
        let off = whole_records(bytes);
        if off != bytes.len() {
            return Err(Error::new(
                ErrorKind::Decode,
                "feed records to the pipeline",
                format!(
                    "{} bytes do not end on a whole record (at {off})",
                    bytes.len()
                ),
            )
            .with_fix("pass whole records, each with its header, as the ring holds them"));
        }
        let event = u32::try_from(event).unwrap_or(NO_EVENT - 1);
        for rec in split_records(bytes) {
            self.take(event, rec);
        }
        Ok(())
    }

    fn take(&mut self, event: u32, rec: &[u8]) {
        let time = self
            .layouts
            .get(event as usize)
            .and_then(|l| Record::parse(rec, l).ok())
            .and_then(|r| match r.kind() {
                RecordKind::Sample(s) => s.time(),
                _ => r.sample_id().time(),
            })
            // No time (a marker, or no TIME): right after what came before.
            .unwrap_or_else(|| self.order.last().map_or(0, |o| o.0));
        self.order.push((time, self.round.len(), event));
        self.round.extend_from_slice(rec);
    }

    /// Handles the round's records in time order.
    ///
    /// # Errors
    /// The first output's error.
    pub fn end_round(&mut self) -> Result<()> {
        self.start()?;
        // Stable: records with equal times keep their order.
        let mut order = std::mem::take(&mut self.order);
        order.sort_by_key(|o| o.0);
        let round = std::mem::take(&mut self.round);
        let mut result = Ok(());
        for &(_, off, event) in &order {
            let size = usize::from(u16::from_ne_bytes([round[off + 6], round[off + 7]]));
            if let Err(e) = self.handle(event, &round[off..off + size]) {
                result = Err(e);
                break;
            }
        }
        if result.is_ok() {
            for o in &mut self.outputs {
                o.end_round()?;
            }
        }
        order.clear();
        self.order = order;
        self.round = round;
        self.round.clear();
        result
    }

    fn handle(&mut self, event: u32, bytes: &[u8]) -> Result<()> {
        let Some(layout) = self.layouts.get(event as usize).copied() else {
            return Ok(()); // markers belong to no event
        };
        let record = match Record::parse(bytes, &layout) {
            Ok(r) => r,
            Err(_) => {
                self.stats.undecoded += 1;
                return Ok(());
            }
        };
        let index = (event as usize) < self.events.len();
        if let (true, RecordKind::Sample(s)) = (index, record.kind()) {
            return self.sample(event as usize, s, bytes);
        }
        self.spaces.observe(&record);
        self.stats.records += 1;
        let event = index.then_some(event as usize);
        for o in &mut self.outputs {
            o.record(event, &record, bytes)?;
        }
        Ok(())
    }

    fn sample(&mut self, event: usize, s: &Sample<'_>, bytes: &[u8]) -> Result<()> {
        let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
        if self.read_proc && !self.spaces.knows(pid) && self.tried_proc.insert(pid) {
            // Best effort: a process that exited is named from records or not at all.
            let _ = self.spaces.attach(pid);
        }
        self.raw.clear();
        self.unwinder.sample_frames(&self.spaces, s, &mut self.raw);
        self.frames.clear();
        if self.names {
            let (spaces, raw, frames) = (&self.spaces, &self.raw, &mut self.frames);
            with_thread_symbolizer(|names| {
                for r in raw {
                    names.push_frames(spaces, pid, *r, frames);
                }
            });
        }
        let r = SampleRef {
            event,
            info: &self.events[event],
            sample: s,
            bytes,
            pid,
            tid,
            stack: &self.raw,
            frames: &self.frames,
            thread_name: self.spaces.thread_name(tid),
            process: self.spaces.process(pid),
        };
        self.stats.samples += 1;
        for o in &mut self.outputs {
            o.sample(&r)?;
        }
        Ok(())
    }

    /// Records the queue dropped before they reached the pipeline.
    ///
    /// # Errors
    /// The first output's error.
    pub fn lost(&mut self, records: u64) -> Result<()> {
        if records == 0 {
            return Ok(());
        }
        self.start()?;
        self.stats.lost += records;
        for o in &mut self.outputs {
            o.lost(records)?;
        }
        Ok(())
    }

    /// Handles what is left and finishes every output (each one, even after an error;
    /// the first error is returned). Idempotent.
    ///
    /// # Errors
    /// The first error of the last round or of an output's `finish`.
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        let mut first = self.end_round().err();
        self.finished = true;
        for o in &mut self.outputs {
            if let Err(e) = o.finish() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Sink for Pipeline {
    fn write_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        self.start()?;
        if chunk.lost_before() > 0 {
            // What came before the loss is handled first.
            self.end_round()?;
            self.lost(chunk.lost_before())?;
        }
        for (event, rec) in chunk.records() {
            if event == NO_EVENT {
                if rec.len() >= 8 && rec[..4] == FINISHED_ROUND.to_ne_bytes() {
                    self.end_round()?;
                }
                continue;
            }
            self.take(event, rec);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        Pipeline::finish(self)
    }
}

// The pipeline moves to the writer thread with its outputs.
const _: () = {
    const fn send<T: Send>() {}
    send::<Pipeline>();
};
