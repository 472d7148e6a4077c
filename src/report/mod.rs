//! Reading a recording back: a `perf.data` — perfring's own or `perf record`'s — read in
//! place ([`PerfFile`]), its records replayed through a
//! [`Pipeline`](crate::pipeline::Pipeline) to any [`Output`](crate::output::Output):
//! `perf report`'s top table ([`Top`]), a flame graph, folded stacks, the Firefox
//! Profiler's format, pprof, perf.data.
//!
//! The replay is the recording's own path from the ring's bytes to the outputs — the
//! same address spaces, unwinder and symbolizer — fed from the file instead of the
//! rings, with `/proc` left alone (the processes are gone or are others by now): the
//! files are named from the recording's `MMAP2` records and read where they were.
//!
//! # Examples
//! ```no_run
//! use perfring::report::{self, PerfFile, SortKey, Top};
//!
//! let bytes = report::read("perf.data".as_ref())?;
//! let file = PerfFile::parse(&bytes, "perf.data")?;
//! let top = Top::new(SortKey::Symbol, false);
//! let tables = top.tables();
//! let mut pipeline = file.pipeline()?.output(top);
//! let replayed = file.replay(&mut pipeline)?;
//! for row in &tables.take()[0].rows {
//!     println!("{} {}", row.self_weight, row.key);
//! }
//! if let Some(stop) = &replayed.stopped {
//!     eprintln!("read up to {:#x}: {}", stop.offset, stop.why);
//! }
//! # Ok::<(), perfring::Error>(())
//! ```

mod file;
mod top;

pub use file::{read, BuildId, FileRecords, PerfFile, Stopped, FINISHED_ROUND, USER_TYPE_START};
pub use top::{Row, SortKey, Top, TopTable, TopTables};

use crate::error::Result;
use crate::pipeline::Pipeline;

/// What a replay read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replayed {
    /// Records read from the data section.
    pub records: u64,
    /// The file offset up to which records were read.
    pub offset: u64,
    /// Where reading stopped before the data section's end, and why.
    pub stopped: Option<Stopped>,
}

impl PerfFile<'_> {
    /// A pipeline for this file's events that reads nothing of `/proc`.
    ///
    /// # Errors
    /// As [`Pipeline::new`].
    pub fn pipeline(&self) -> Result<Pipeline> {
        Ok(Pipeline::new(self.events(), None)?
            .read_proc(false)
            .cmdline(self.cmdline().to_vec()))
    }

    /// Hands every record of the data section to `pipeline`, a round at a time as the
    /// recorder wrote them (`FINISHED_ROUND`), and finishes it.
    ///
    /// # Errors
    /// The pipeline's (an output that could not be written). A record that cannot be
    /// decoded is not an error: reading stops there, and [`Replayed::stopped`] says
    /// where and why.
    pub fn replay(&self, pipeline: &mut Pipeline) -> Result<Replayed> {
        let mut records = self.records();
        let mut result = Ok(());
        for (event, record) in records.by_ref() {
            let r = match event {
                Some(e) => pipeline.push_records(e, record.as_bytes()),
                None if record.record_type() == FINISHED_ROUND => pipeline.end_round(),
                None => Ok(()),
            };
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        let finished = pipeline.finish();
        result?;
        finished?;
        Ok(Replayed {
            records: records.records_read(),
            offset: records.offset(),
            stopped: records.stopped().cloned(),
        })
    }
}
