//! Profiles other tools read: `perf.data` for `perf`, gzipped pprof for the fleet.
//!
//! Three roles:
//! - a **sink** takes runs of whole records, as the ring holds them, and turns them
//!   into a file: [`PerfData`] writes them out byte for byte (no re-encoding), and
//!   [`Pprof`] aggregates samples by stack and thread and writes a gzipped
//!   `profile.proto` at the end;
//! - a [`Streamer`] moves records from the thread that drains the rings to a writer
//!   thread that owns the sink, through a queue bounded in bytes: the draining thread
//!   only copies bytes and never waits on the disk; when the queue is full, records
//!   are dropped and counted ([`StreamStats::lost_records`]), and the sink is told
//!   (a `PERF_RECORD_LOST` in `perf.data`);
//! - [`EventInfo`] describes each event of the recording (its attr and kernel ids).
//!
//! # Examples
//! ```no_run
//! use perfring::output::{EventInfo, PerfData, Streamer, QueueSize};
//! # fn attr_and_ids() -> (perfring::sys::perf_event_attr, Vec<u64>) { unimplemented!() }
//! let (attr, ids) = attr_and_ids(); // from the counters you opened
//! let events = vec![EventInfo::new("cpu-clock", attr, ids)?];
//! let sink = PerfData::create("perf.data", &events, &["my-tool".to_string()])?;
//! let mut stream = Streamer::spawn(sink, QueueSize::default())?;
//! # let raw_record_bytes: &[u8] = &[];
//! // In the drain callback, for each record:
//! stream.push(0, raw_record_bytes)?;
//! // After each full pass over the rings:
//! stream.end_round()?;
//! let (_sink, stats) = stream.finish()?;
//! assert_eq!(stats.lost_records, 0);
//! # Ok::<(), perfring::Error>(())
//! ```

mod perfdata;
mod pprof;
pub mod proto;
mod push;
mod stream;
mod synth;

pub use perfdata::PerfData;
pub use pprof::{Pprof, PprofSummary};
pub use push::push_pyroscope;
pub use stream::{Chunk, QueueSize, Sink, StreamStats, Streamer};
pub use synth::{relayout, synthesize_kernel, synthesize_process, synthesize_process_at};

/// One event of a recording (its name, attr and kernel ids): the sampler's.
pub use crate::sampler::EventInfo;
