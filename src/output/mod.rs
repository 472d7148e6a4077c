//! Profiles other tools read: `perf.data` for `perf`, gzipped pprof for the fleet, and
//! the overflow lines `watch --json` and the injector write.
//!
//! Three roles:
//! - **outputs** take the samples a [`Pipeline`](crate::pipeline::Pipeline) unwound
//!   and named, and the other records, and turn them into a file: [`PerfData`] writes
//!   the records as the ring held them (frame-pointer samples with their unwound
//!   chain), [`Pprof`] aggregates samples by stack and thread and writes a gzipped
//!   `profile.proto` at the end, [`Intervals`] cuts a [`Pprof`] per interval of the
//!   samples' time for a profiler that runs for hours (handed on as [`CutProfile`]s,
//!   e.g. to [`push::Queue`](crate::push::Queue)), [`OverflowLine`] is one sample as a
//!   JSON line;
//! - pictures and viewers: [`FlameGraph`] (an interactive SVG drawn by `inferno`),
//!   [`Folded`] (its input, one stack a line), [`FirefoxProfile`] (the Firefox
//!   Profiler's processed format: threads, samples in time, markers);
//! - the [`Output`] trait they implement, and what they are given ([`Recording`],
//!   [`SampleRef`]), by a [`Pipeline`](crate::pipeline::Pipeline) that a
//!   [`Streamer`](crate::stream::Streamer) runs on the writer thread;
//! - [`EventInfo`], each event's attr and kernel ids.
//!
//! Every file that holds samples is created with [`create_private`]: mode 0600, as
//! `perf record` creates perf.data, never through a symbolic link.
//!
//! # Examples
//! ```no_run
//! use perfring::output::PerfData;
//! use perfring::pipeline::Pipeline;
//! use perfring::stream::{Streamer, QueueSize};
//! # fn events() -> (Vec<perfring::sampler::EventInfo>, perfring::sampler::EventInfo) { unimplemented!() }
//! let (events, tracking) = events(); // from the sampler you started
//! let pipeline = Pipeline::new(&events, Some(&tracking))?.output(PerfData::open("perf.data")?);
//! let mut stream = Streamer::spawn(pipeline, QueueSize::default())?;
//! # let raw_record_bytes: &[u8] = &[];
//! // In the drain callback, for each record (tracking records: events.len()):
//! stream.push(0, raw_record_bytes)?;
//! // After each full pass over the rings:
//! stream.end_round()?;
//! let (_pipeline, stats) = stream.finish()?;
//! assert_eq!(stats.lost_records, 0);
//! # Ok::<(), perfring::Error>(())
//! ```

mod feed;
mod firefox;
mod folded;
mod intervals;
mod line;
mod perfdata;
mod pprof;
pub(crate) mod proto;

pub(crate) use feed::require_events;
pub use feed::{Output, Recording, SampleRef};
pub use firefox::FirefoxProfile;
pub use folded::{FlameGraph, Folded};
pub use line::{FrameLine, OverflowLine, Tally};
pub use perfdata::PerfData;
pub use pprof::{Pprof, PprofSummary};
// A pprof profile per interval of the samples' time, for a long-running profiler
// (`perfring record --push URL --every 15s`; the store's side is `crate::push`).
pub use intervals::{CutProfile, IntervalStats, Intervals, IntervalsHandle, DEFAULT_GRACE};

/// One event of a recording (its name, attr and kernel ids): the sampler's.
pub use crate::sampler::EventInfo;

/// Creates (or truncates) `path` for a recording: mode 0600 for a new file, as `perf
/// record` creates perf.data (a recording holds the target's addresses, names and, with
/// DWARF stacks, copies of its stack), and never through a symbolic link (`O_NOFOLLOW`):
/// a link planted where the file goes fails instead of redirecting the write. An
/// existing file keeps its owner and is made 0600 too.
///
/// # Errors
/// [`ErrorKind::Io`](crate::ErrorKind::Io) or
/// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied), naming the file
/// and the fix.
pub fn create_private(path: &std::path::Path) -> crate::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            let fix = if e.raw_os_error() == Some(libc::ELOOP) {
                "the path is a symbolic link: remove it, or give the file's own path with -o"
            } else {
                "choose a writable path with -o"
            };
            crate::Error::from_errno(format!("create {}", path.display()), e).with_fix(fix)
        })?;
    // A file that existed keeps the mode it had: take it back to 0600.
    let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
    Ok(file)
}
