//! `perfring report`: a perf.data read back (`perfring::report`), printed as `perf
//! report --stdio`'s top table or converted to another format.

use std::fmt::Write as _;
use std::path::PathBuf;

use perfring::report::{self, PerfFile, Replayed, Top, TopTable};

use crate::args::ReportArgs;
use crate::Failure;

/// Runs `report`; returns the table for stdout (empty when converting).
pub fn run(args: &ReportArgs) -> Result<String, Failure> {
    let name = args.input.display().to_string();
    let bytes = report::read(&args.input).map_err(Failure::Runtime)?;
    let file = PerfFile::parse(&bytes, &name).map_err(Failure::Runtime)?;
    for note in file.notes() {
        eprintln!("perfring: {name}: {note}");
    }
    warn_rebuilt(&file);
    let pipeline = file.pipeline().map_err(Failure::Runtime)?;
    if let Some(format) = args.format {
        let path = args
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format.default_path()));
        let out = crate::outputs::open(format, &path)?;
        let mut pipeline = pipeline.boxed_output(out);
        let replayed = file.replay(&mut pipeline).map_err(Failure::Runtime)?;
        tell_how_far(&name, &replayed);
        let s = pipeline.stats();
        eprintln!(
            "perfring: {} samples of {name} written to {}",
            s.samples,
            path.display()
        );
        return Ok(String::new());
    }
    let top = Top::new(args.sort, args.children.unwrap_or(true));
    let tables = top.tables();
    let mut pipeline = pipeline.output(top);
    let replayed = file.replay(&mut pipeline).map_err(Failure::Runtime)?;
    tell_how_far(&name, &replayed);
    let tables = tables.take();
    if tables.is_empty() {
        eprintln!("perfring: {name} has no samples");
    }
    let mut text = String::new();
    for t in &tables {
        table(&mut text, t, args);
    }
    Ok(text)
}

/// On stderr: where a data section that could not be read whole stopped.
fn tell_how_far(name: &str, r: &Replayed) {
    if let Some(stop) = &r.stopped {
        eprintln!(
            "perfring: {name}: read {} records, up to offset {:#x} ({} bytes); stopped there: {}",
            r.records, stop.offset, stop.offset, stop.why
        );
    }
}

/// On stderr: files whose build id is not the one recorded (rebuilt since, so names
/// may be wrong).
fn warn_rebuilt(file: &PerfFile<'_>) {
    use std::os::unix::ffi::OsStrExt;
    for b in file.build_ids() {
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(b.path));
        if !path.is_absolute() {
            continue;
        }
        let Ok(elf) = perfring::elf::ElfFile::open(path) else {
            continue;
        };
        if let Some(now) = elf.build_id() {
            if now != b.id {
                eprintln!(
                    "perfring: {} changed since the recording (another build id): its names may be wrong",
                    path.display()
                );
            }
        }
    }
}

/// One event's table, as `perf report --stdio` prints it.
fn table(out: &mut String, t: &TopTable, args: &ReportArgs) {
    let children = args.children.unwrap_or(true) && t.has_stacks;
    let key = match args.sort {
        perfring::report::SortKey::Symbol => "Symbol",
        perfring::report::SortKey::Dso => "Shared Object",
        perfring::report::SortKey::Comm => "Command",
        perfring::report::SortKey::Tid => "    Pid:Command",
    };
    let _ = writeln!(out, "# Samples: {} of event '{}'", t.samples, t.event);
    let _ = writeln!(out, "# Event count (approx.): {}", t.total);
    let _ = writeln!(out, "#");
    if children {
        let _ = writeln!(out, "# Children      Self  {key}");
        let _ = writeln!(out, "# ........  ........  {}", ".".repeat(key.len()));
    } else {
        let _ = writeln!(out, "# Overhead  {key}");
        let _ = writeln!(out, "# ........  {}", ".".repeat(key.len()));
    }
    let _ = writeln!(out, "#");
    let pct = |w: u64| 100.0 * w as f64 / t.total.max(1) as f64;
    for r in &t.rows {
        if children {
            let _ = writeln!(
                out,
                "  {:>7.2}%  {:>7.2}%  {}",
                pct(r.children_weight),
                pct(r.self_weight),
                r.key
            );
        } else {
            let _ = writeln!(out, "  {:>7.2}%  {}", pct(r.self_weight), r.key);
        }
    }
    let _ = writeln!(out);
}
