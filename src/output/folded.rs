//! Folded ("collapsed") stacks, and the flame graph drawn from them by `inferno`.
//!
//! A folded line is a stack, outermost frame first, frames joined by `;`, then a space
//! and its weight: `hot;main;work;spin 1200`. It is what `inferno-flamegraph` and
//! `flamegraph.pl` draw, and what Pyroscope's `/ingest?format=folded` takes. Each stack
//! starts with the thread's name (as `stackcollapse-perf` does); frames are the
//! pipeline's names, inlined functions as frames of their own; an off-CPU sample ends
//! with [`offcpu::MARKER`](crate::offcpu::MARKER). Weights are the samples'
//! ([`SampleRef::weight`]): periods — nanoseconds for `cpu-clock` — so that a
//! function's width is its share of the event, as `perf report` computes it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::perfdata::write_error;
use crate::error::Result;
use crate::output::{Output, Recording, SampleRef};
use crate::records::{Record, RecordKind};
use crate::symbolize::Frame;

/// Stacks folded into lines, and what the title of a picture of them says.
#[derive(Debug, Default)]
struct Stacks {
    weights: HashMap<String, u64>,
    line: String,
    samples: u64,
    off_cpu: u64,
    lost: u64,
    events: Vec<String>,
    clock: bool,
    target: Option<String>,
}

impl Stacks {
    fn start(&mut self, rec: &Recording<'_>) {
        self.events = rec.events.iter().map(|e| e.name().to_string()).collect();
        self.clock = rec.events.iter().all(|e| e.counts_cpu_time());
        self.target = rec
            .program
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned());
    }

    fn add(&mut self, s: &SampleRef<'_>) {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match s.thread_name {
            Some(name) => push_frame(&mut line, name),
            None => {
                let _ = write!(line, "[tid {}]", s.tid);
            }
        }
        for f in s.frames.iter().rev() {
            line.push(';');
            push_frame(&mut line, &frame_name(f));
        }
        if s.off_cpu {
            line.push(';');
            line.push_str(crate::offcpu::MARKER);
            self.off_cpu += 1;
        }
        self.samples += 1;
        match self.weights.get_mut(&line) {
            Some(w) => *w += s.weight,
            None => {
                self.weights.insert(line.clone(), s.weight);
            }
        }
        self.line = line;
    }

    fn record(&mut self, record: &Record<'_>) {
        match record.kind() {
            RecordKind::Lost(l) => self.lost += l.lost,
            RecordKind::LostSamples(l) => self.lost += l.lost,
            _ => {}
        }
    }

    /// The lines, heaviest first (ties by stack, so equal recordings give equal files).
    fn lines(&self) -> Vec<String> {
        let mut v: Vec<(&String, &u64)> = self.weights.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        v.into_iter().map(|(s, w)| format!("{s} {w}")).collect()
    }
}

/// A frame's name in a folded line: the function, else `[dso]`, else the address.
pub(crate) fn frame_name(f: &Frame) -> String {
    match (&f.sym, &f.dso) {
        (Some(s), _) => s.clone(),
        (None, Some(dso)) => {
            let base = dso.rsplit('/').next().unwrap_or(dso);
            if base.starts_with('[') {
                base.to_string()
            } else {
                format!("[{base}]")
            }
        }
        (None, None) => format!("{:#x}", f.ip),
    }
}

/// Appends `name` with the folded format's separators replaced (`;` separates frames,
/// a line ends at a newline).
fn push_frame(line: &mut String, name: &str) {
    line.extend(name.chars().map(|c| match c {
        ';' => ':',
        '\n' | '\r' => ' ',
        c => c,
    }));
}

/// Where a stack output writes, and what it has folded so far: the part [`Folded`]
/// and [`FlameGraph`] share (they differ only in how the stacks are written).
struct Collector {
    out: Option<Box<dyn Write + Send>>,
    path: PathBuf,
    stacks: Stacks,
}

impl Collector {
    fn create(path: &Path) -> Result<Collector> {
        let file = super::create_private(path)?;
        Ok(Collector::new(std::io::BufWriter::new(file), path))
    }

    fn new(out: impl Write + Send + 'static, name: &Path) -> Collector {
        Collector {
            out: Some(Box::new(out)),
            path: name.to_path_buf(),
            stacks: Stacks::default(),
        }
    }

    /// Writes the stacks with `write`, once; `what` names the step in an error.
    fn finish(
        &mut self,
        what: &str,
        write: impl FnOnce(&Stacks, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        write(&self.stacks, &mut out)
            .and_then(|()| out.flush())
            .map_err(|e| write_error(&self.path, what, e))
    }
}

/// `Debug` and [`Output`] for a stack output over a [`Collector`] named `inner`; the
/// type writes its stacks in its own `fn draw(&mut self) -> Result<()>`.
macro_rules! stack_output {
    ($ty:ident) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("path", &self.inner.path)
                    .field("stacks", &self.inner.stacks.weights.len())
                    .finish_non_exhaustive()
            }
        }

        impl Output for $ty {
            fn start(&mut self, rec: &Recording<'_>) -> Result<()> {
                self.inner.stacks.start(rec);
                Ok(())
            }

            fn wants_names(&self) -> bool {
                true
            }

            fn sample(&mut self, s: &SampleRef<'_>) -> Result<()> {
                self.inner.stacks.add(s);
                Ok(())
            }

            fn record(&mut self, _: Option<usize>, record: &Record<'_>, _: &[u8]) -> Result<()> {
                self.inner.stacks.record(record);
                Ok(())
            }

            fn lost(&mut self, records: u64) -> Result<()> {
                self.inner.stacks.lost += records;
                Ok(())
            }

            fn finish(&mut self) -> Result<()> {
                self.draw()
            }
        }
    };
}

/// Folded stacks written at [`finish`](Output::finish): an [`Output`] of a
/// [`Pipeline`](crate::pipeline::Pipeline); see the [module docs](self) for the
/// format.
///
/// # Examples
/// ```no_run
/// use perfring::output::Folded;
/// let out = Folded::create("stacks.folded")?; // fails now for a bad path
/// // Pipeline::new(&events, Some(&tracking))?.output(out), or ProfilerBuilder::output(out)
/// # let _ = out;
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct Folded {
    inner: Collector,
}

impl Folded {
    /// Creates `path` now, mode 0600 ([`create_private`](super::create_private)), and
    /// writes the stacks there at the end.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) (or
    /// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)) naming the
    /// file.
    pub fn create(path: impl AsRef<Path>) -> Result<Folded> {
        Ok(Folded {
            inner: Collector::create(path.as_ref())?,
        })
    }

    /// Writes the stacks to `out` at the end (`name` is for messages).
    pub fn new(out: impl Write + Send + 'static, name: impl AsRef<Path>) -> Folded {
        Folded {
            inner: Collector::new(out, name.as_ref()),
        }
    }

    fn draw(&mut self) -> Result<()> {
        self.inner.finish("write the folded stacks", |stacks, out| {
            let mut text = String::new();
            for line in stacks.lines() {
                text.push_str(&line);
                text.push('\n');
            }
            out.write_all(text.as_bytes())
        })
    }
}

stack_output!(Folded);

/// An interactive flame graph (SVG, drawn by `inferno`: click to zoom, Ctrl-F to
/// search, a tooltip per frame) written at [`finish`](Output::finish): an [`Output`]
/// of a [`Pipeline`](crate::pipeline::Pipeline).
///
/// Frames are those of [`Folded`], widths their weight's share; the title names the
/// event, the target, the samples and the records lost, so a picture saved alone
/// still says what it shows.
///
/// # Examples
/// ```no_run
/// use perfring::output::FlameGraph;
/// let out = FlameGraph::create("flame.svg")?;
/// # let _ = out;
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct FlameGraph {
    inner: Collector,
}

impl FlameGraph {
    /// Creates `path` now, mode 0600, and draws the graph there at the end.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) (or
    /// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)) naming the
    /// file.
    pub fn create(path: impl AsRef<Path>) -> Result<FlameGraph> {
        Ok(FlameGraph {
            inner: Collector::create(path.as_ref())?,
        })
    }

    /// Draws the graph to `out` at the end (`name` is for messages).
    pub fn new(out: impl Write + Send + 'static, name: impl AsRef<Path>) -> FlameGraph {
        FlameGraph {
            inner: Collector::new(out, name.as_ref()),
        }
    }

    /// `cpu-clock of hot: 1,234 samples (12 off-CPU), 0 lost`.
    fn title(&self) -> String {
        let s = &self.inner.stacks;
        let mut t = s.events.join(", ");
        if let Some(target) = &s.target {
            let _ = write!(t, " of {target}");
        }
        let _ = write!(t, ": {} samples", s.samples);
        if s.off_cpu > 0 {
            let _ = write!(t, " ({} off-CPU)", s.off_cpu);
        }
        let _ = write!(t, ", {} lost", s.lost);
        t
    }

    fn draw(&mut self) -> Result<()> {
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = self.title();
        opts.count_name = if self.inner.stacks.clock {
            "ns"
        } else {
            "events"
        }
        .to_string();
        // Equal recordings draw equal pictures.
        opts.deterministic = true;
        self.inner.finish("draw the flame graph", |stacks, out| {
            let lines = stacks.lines();
            if lines.is_empty() {
                // inferno refuses an empty graph; a picture that says so is more useful.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "no samples to draw",
                ));
            }
            inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        })
    }
}

stack_output!(FlameGraph);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_format_s_separators_out() {
        let mut l = String::new();
        push_frame(&mut l, "std::map<a;b>\nx");
        assert_eq!(l, "std::map<a:b> x");
        let f = Frame {
            ip: 0x10,
            sym: None,
            off: None,
            file: None,
            line: None,
            inlined: false,
            dso: Some("/usr/lib/libc.so.6".into()),
            mapping: None,
            kernel: false,
        };
        assert_eq!(frame_name(&f), "[libc.so.6]");
        let f = Frame { dso: None, ..f };
        assert_eq!(frame_name(&f), "0x10");
    }
}
