//! What every [`Output`] is given: the recording's description at the start, then each
//! sample unwound and named by the [`Pipeline`](crate::pipeline::Pipeline), and the
//! other records.

use std::path::Path;

use crate::error::Result;
use crate::records::{Record, Sample};
use crate::sampler::EventInfo;
use crate::space::ProcessSpace;
use crate::symbolize::Frame;
use crate::unwind::RawFrame;

/// What every output is told before the first record.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Recording<'a> {
    /// The events recorded, in the order of their indices.
    pub events: &'a [EventInfo],
    /// The command line that made the recording (perf.data's `CMDLINE`).
    pub cmdline: &'a [String],
    /// The target's program, when known (pprof's main mapping).
    pub program: Option<&'a Path>,
}

impl<'a> Recording<'a> {
    /// A recording of `events` made by `cmdline`, of `program` if known.
    pub fn new(
        events: &'a [EventInfo],
        cmdline: &'a [String],
        program: Option<&'a Path>,
    ) -> Recording<'a> {
        Recording {
            events,
            cmdline,
            program,
        }
    }
}

/// One sample, as every output receives it.
#[derive(Debug)]
#[non_exhaustive]
pub struct SampleRef<'a> {
    /// The event's index in [`Recording::events`].
    pub event: usize,
    /// The event's description.
    pub info: &'a EventInfo,
    /// The sample, decoded in place.
    pub sample: &'a Sample<'a>,
    /// The record's bytes, as the ring held them.
    pub bytes: &'a [u8],
    /// The process (0 when the sample does not say).
    pub pid: u32,
    /// The thread (0 when the sample does not say).
    pub tid: u32,
    /// The stack, innermost first: kernel frames, then user frames (for frame-pointer
    /// stacks, with the first frame decided by CFI), or the sample's ip alone.
    pub stack: &'a [RawFrame],
    /// The stack named, innermost first (inlined frames before the function that holds
    /// them); empty unless an output [wants names](Output::wants_names).
    pub frames: &'a [Frame],
    /// The thread's name, from the recording's `COMM` records.
    pub thread_name: Option<&'a str>,
    /// The process's address space as of this sample.
    pub process: Option<&'a ProcessSpace>,
    /// What the sample stands for, in the event's unit: its period (the event's fixed
    /// one, or the one the sample carries under a frequency), or for an off-CPU
    /// sample the nanoseconds its thread was off the CPU.
    pub weight: u64,
    /// An off-CPU sample ([`offcpu`](crate::offcpu)): the stack where the thread
    /// blocked, weighted by the time it waited. Outputs mark it
    /// ([`offcpu::MARKER`](crate::offcpu::MARKER)).
    pub off_cpu: bool,
}

/// A consumer of a recording: a file format, a printer, an embedder's own.
///
/// Calls come from one thread, in order: [`start`](Self::start), then
/// [`record`](Self::record) and [`sample`](Self::sample) in time order within each
/// round, [`lost`](Self::lost) where records were dropped, and [`finish`](Self::finish)
/// once at the end (also after an error, so a file is left readable). An error stops
/// the recording's writer.
pub trait Output: Send {
    /// Before the first record: the events and the target. By default nothing is
    /// done.
    ///
    /// # Errors
    /// Whatever stops this output from being written (an attr its format cannot hold).
    fn start(&mut self, recording: &Recording<'_>) -> Result<()> {
        let _ = recording;
        Ok(())
    }

    /// Whether [`SampleRef::frames`] must be filled (symbolization costs time on the
    /// first use of each file).
    fn wants_names(&self) -> bool {
        false
    }

    /// Whether a sample that carries a copy of the user stack and registers
    /// (`--call-graph dwarf`) must have it unwound into [`SampleRef::stack`]. An output
    /// that keeps the copy for a later unwinder (perf.data, which `perf report` unwinds)
    /// says no; when no output wants it the pipeline skips the unwinding, the costliest
    /// step of a DWARF recording, and such a sample's stack is its kernel frames and
    /// ip. By default yes.
    fn wants_user_stacks(&self) -> bool {
        true
    }

    /// One sample, unwound (and named, if asked).
    ///
    /// # Errors
    /// A write that failed.
    fn sample(&mut self, sample: &SampleRef<'_>) -> Result<()>;

    /// One record that is not a sample (`MMAP2`, `COMM`, `LOST`, ...), decoded;
    /// `event` is `None` for the tracking counter's and synthesized records. An
    /// off-CPU sample ([`SampleRef::off_cpu`]) also comes here first, at its time and
    /// as the ring held it, for outputs that copy records; its weighted
    /// [`sample`](Self::sample) follows when its thread runs again.
    ///
    /// # Errors
    /// A write that failed.
    fn record(&mut self, event: Option<usize>, record: &Record<'_>, bytes: &[u8]) -> Result<()> {
        let _ = (event, record, bytes);
        Ok(())
    }

    /// `records` records were dropped before reaching the pipeline (the writer's queue
    /// was full).
    ///
    /// # Errors
    /// A write that failed.
    fn lost(&mut self, records: u64) -> Result<()> {
        let _ = records;
        Ok(())
    }

    /// The end of a round: every record of one pass over the rings has been given.
    ///
    /// # Errors
    /// A write that failed.
    fn end_round(&mut self) -> Result<()> {
        Ok(())
    }

    /// Every sample and record stamped before `time` (on the events' clock) has been
    /// given: the draining side had begun a pass over the rings at `time` (sent when a
    /// session is asked for [`progress`](crate::profiler::ProfilerBuilder::progress_every)).
    /// An output that cuts by time can cut up to it. By default nothing is done.
    ///
    /// # Errors
    /// A write that failed.
    fn progress(&mut self, time: u64) -> Result<()> {
        let _ = time;
        Ok(())
    }

    /// Completes the output (headers, feature sections, the pprof message).
    ///
    /// # Errors
    /// A write that failed.
    fn finish(&mut self) -> Result<()>;
}

impl<O: Output + ?Sized> Output for Box<O> {
    fn start(&mut self, recording: &Recording<'_>) -> Result<()> {
        (**self).start(recording)
    }
    fn wants_names(&self) -> bool {
        (**self).wants_names()
    }
    fn wants_user_stacks(&self) -> bool {
        (**self).wants_user_stacks()
    }
    fn sample(&mut self, sample: &SampleRef<'_>) -> Result<()> {
        (**self).sample(sample)
    }
    fn record(&mut self, event: Option<usize>, record: &Record<'_>, bytes: &[u8]) -> Result<()> {
        (**self).record(event, record, bytes)
    }
    fn lost(&mut self, records: u64) -> Result<()> {
        (**self).lost(records)
    }
    fn end_round(&mut self) -> Result<()> {
        (**self).end_round()
    }
    fn progress(&mut self, time: u64) -> Result<()> {
        (**self).progress(time)
    }
    fn finish(&mut self) -> Result<()> {
        (**self).finish()
    }
}

/// An error unless there is at least one event to describe (`what`: the operation).
pub(crate) fn require_events(events: &[EventInfo], what: &str) -> Result<()> {
    if events.is_empty() {
        return Err(crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            what,
            "no events to describe",
        )
        .with_fix("pass the EventInfo of each event recorded"));
    }
    Ok(())
}
