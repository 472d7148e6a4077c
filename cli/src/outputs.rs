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
        OutputFormat::Perf => Box::new(PerfData::open(path).map_err(Failure::Runtime)?),
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
