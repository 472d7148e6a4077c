//! `--format F -o FILE`: the library's output for each format, shared by `record` and
//! `report`.

use std::path::Path;

use perfring::output::{FirefoxProfile, FlameGraph, Folded, Output, PerfData, Pprof};

use crate::args::OutputFormat;
use crate::Failure;

/// The output writing `format` to `path` (`-`: stdout, for the formats written at the
/// end), created now so that a bad path fails before anything is recorded or read.
pub fn open(format: OutputFormat, path: &Path) -> Result<Box<dyn Output>, Failure> {
    let stdout = path == Path::new("-");
    let out: Box<dyn Output> = match format {
        // perf's pipe format: `perf report -i -` reads it as it streams.
        OutputFormat::Perf if stdout => Box::new(
            PerfData::pipe(stdout_file().map_err(Failure::Runtime)?, "<stdout>")
                .map_err(Failure::Runtime)?,
        ),
        OutputFormat::Perf => {
            // An earlier recording becomes perf.data.old, as perf keeps it.
            PerfData::keep_old(path).map_err(Failure::Runtime)?;
            Box::new(PerfData::open(path).map_err(Failure::Runtime)?)
        }
        OutputFormat::Pprof if stdout => Box::new(Pprof::new(std::io::stdout(), "<stdout>")),
        OutputFormat::Pprof => Box::new(Pprof::create(path).map_err(Failure::Runtime)?),
        OutputFormat::Svg if stdout => Box::new(FlameGraph::new(std::io::stdout(), "<stdout>")),
        OutputFormat::Svg => Box::new(FlameGraph::create(path).map_err(Failure::Runtime)?),
        OutputFormat::Folded if stdout => Box::new(Folded::new(std::io::stdout(), "<stdout>")),
        OutputFormat::Folded => Box::new(Folded::create(path).map_err(Failure::Runtime)?),
        OutputFormat::Firefox if stdout => {
            Box::new(FirefoxProfile::new(std::io::stdout(), "<stdout>"))
        }
        OutputFormat::Firefox => Box::new(FirefoxProfile::create(path).map_err(Failure::Runtime)?),
    };
    Ok(out)
}

/// Our stdout as a `File` (a duplicate of fd 1), for writers that take one.
fn stdout_file() -> perfring::Result<std::fs::File> {
    use std::os::fd::AsFd;
    std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .map_err(|e| perfring::Error::from_errno("duplicate stdout", e))
}
