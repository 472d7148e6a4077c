//! Gzipped pprof (`profile.proto`) of the samples the [`Pipeline`] unwound and named.
//!
//! Samples are aggregated as they come, keyed by event, thread and stack, so memory
//! grows with the number of distinct stacks, not with time. Frames are named by the
//! pipeline's symbolizer — the same names `watch` prints and `perf report` shows —
//! with inlined functions as extra lines of one location, and each location in the
//! mapping of the process that held it.
//!
//! [`Pipeline`]: crate::pipeline::Pipeline

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use prost::Message;

use super::perfdata::write_error;
use super::proto;
use crate::error::{Error, ErrorKind, Result};
use crate::output::{Output, Recording, SampleRef};
use crate::records::{Record, RecordKind};
use crate::sampler::EventInfo;
use crate::space::Mapping;
use crate::symbolize::Frame;

/// A pprof profile being built: an [`Output`] of a
/// [`Pipeline`](crate::pipeline::Pipeline), written at [`finish`](Output::finish).
///
/// Sample types: `samples`/`count` first, then one per event: `cpu`/`nanoseconds`
/// for `cpu-clock` and `task-clock`, else the event's name with unit `count`. Each
/// sample carries the labels `thread_id`, `thread_name` and `pid`.
///
/// # Examples
/// ```no_run
/// use perfring::output::Pprof;
/// let out = Pprof::create("profile.pb.gz")?; // fails now for a bad path
/// // Pipeline::new(&events, Some(&tracking))?.output(out)
/// # let _ = out;
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct Pprof {
    out: Option<Box<dyn Write + Send>>,
    path: PathBuf,
    events: Vec<EventInfo>,
    program: Option<PathBuf>,
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    mappings: Vec<proto::Mapping>,
    mapping_ids: HashMap<(u32, u64, Arc<Path>), u64>,
    /// The mappings that are the program (pprof's main binary), in order of creation.
    main_mappings: Vec<u64>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<(u32, u64), u64>,
    functions: Vec<proto::Function>,
    function_ids: HashMap<(i64, i64), u64>,
    samples: HashMap<SampleKey, Vec<i64>>,
    /// Per event: the sum of periods and the samples, for the profile's `period`.
    periods: Vec<(u64, u64)>,
    stack: Vec<u64>,
    started: (SystemTime, Instant),
    /// The span the profile covers, when the caller knows it better than the clock
    /// (a cut interval); else from `started` to the write.
    span: Option<(SystemTime, std::time::Duration)>,
    lost: u64,
    finished: bool,
}

impl std::fmt::Debug for Pprof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pprof")
            .field("path", &self.path)
            .field("events", &self.events)
            .field("stacks", &self.samples.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    event: usize,
    pid: u32,
    tid: u32,
    comm: i64,
    stack: Vec<u64>,
}

/// Per-function sample counts of a profile, for summaries and checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PprofSummary {
    /// Samples aggregated (all events).
    pub samples: u64,
    /// Records reported lost before reaching the profile (`LOST` records, queue full).
    pub lost: u64,
    /// Samples whose leaf frame is in each function ("self" counts), most first.
    pub by_function: Vec<(String, u64)>,
}

impl Pprof {
    /// Creates `path` now, mode 0600 (so a bad path fails before recording), and
    /// writes the profile there at [`finish`](Output::finish).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (or [`ErrorKind::PermissionDenied`]) if the file cannot be
    /// created.
    pub fn create(path: impl AsRef<Path>) -> Result<Pprof> {
        let path = path.as_ref();
        let file = super::create_private(path)?;
        Ok(Pprof::new(file, path))
    }

    /// Writes the profile to `out` at [`finish`](Output::finish) (`name` is for
    /// messages).
    pub fn new(out: impl Write + Send + 'static, name: impl AsRef<Path>) -> Pprof {
        let mut p = Pprof {
            out: Some(Box::new(out)),
            path: name.as_ref().to_path_buf(),
            events: Vec::new(),
            program: None,
            strings: Vec::new(),
            string_ids: HashMap::new(),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            main_mappings: Vec::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            samples: HashMap::new(),
            periods: Vec::new(),
            stack: Vec::new(),
            started: (SystemTime::now(), Instant::now()),
            span: None,
            lost: 0,
            finished: false,
        };
        p.string(""); // string_table[0] must be "".
        p
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    /// The profile message as it stands.
    pub(crate) fn profile(&mut self) -> proto::Profile {
        let mut sample_type = vec![proto::ValueType {
            r#type: self.string("samples"),
            unit: self.string("count"),
        }];
        for i in 0..self.events.len() {
            let (ty, unit) = value_type(&self.events[i]);
            sample_type.push(proto::ValueType {
                r#type: self.string(&ty),
                unit: self.string(unit),
            });
        }
        let (k_tid, k_name, k_pid) = (
            self.string("thread_id"),
            self.string("thread_name"),
            self.string("pid"),
        );
        let mut sample: Vec<proto::Sample> = self
            .samples
            .iter()
            .map(|(k, v)| {
                let mut label = vec![
                    proto::Label {
                        key: k_tid,
                        num: i64::from(k.tid),
                        ..Default::default()
                    },
                    proto::Label {
                        key: k_pid,
                        num: i64::from(k.pid),
                        ..Default::default()
                    },
                ];
                if k.comm != 0 {
                    label.push(proto::Label {
                        key: k_name,
                        str: k.comm,
                        ..Default::default()
                    });
                }
                proto::Sample {
                    location_id: k.stack.clone(),
                    value: v.clone(),
                    label,
                }
            })
            .collect();
        // A stable order makes equal recordings give equal files.
        sample.sort_by(|a, b| (&a.location_id, &a.value).cmp(&(&b.location_id, &b.value)));
        // The period of the first event: its fixed one, else the mean the samples had.
        let period = match (self.events.first(), self.periods.first()) {
            (Some(e), _) if e.attr().freq() == 0 => crate::counter::sample_period(e.attr()),
            (_, Some(&(sum, n))) if n > 0 => sum / n,
            _ => 0,
        };
        // "mapping[0] will be the main binary": the program's first mapping first.
        let mut mapping = self.mappings.clone();
        if let Some(&main) = self.main_mappings.first() {
            let i = (main - 1) as usize;
            mapping[..=i].rotate_right(1);
        }
        let period_type = sample_type.get(1).copied();
        let samples_idx = sample_type[0].r#type;
        let (start, duration) = self
            .span
            .unwrap_or_else(|| (self.started.0, self.started.1.elapsed()));
        proto::Profile {
            sample_type,
            sample,
            mapping,
            location: self.locations.clone(),
            function: self.functions.clone(),
            string_table: self.strings.clone(),
            drop_frames: 0,
            keep_frames: 0,
            time_nanos: start
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64),
            duration_nanos: duration.as_nanos() as i64,
            period_type,
            period: period as i64,
            comment: Vec::new(),
            // `go tool pprof -top` then shows sample counts, as `perf report` does.
            default_sample_type: samples_idx,
        }
    }

    /// The profile's `time_nanos` and `duration_nanos`: the span it covers (by default,
    /// from its creation to its write).
    pub fn set_span(&mut self, start: SystemTime, duration: std::time::Duration) {
        self.span = Some((start, duration));
    }

    /// Per-function self counts and totals so far.
    pub fn summary(&self) -> PprofSummary {
        let mut by: HashMap<String, u64> = HashMap::new();
        let mut total = 0;
        for (k, v) in &self.samples {
            let n = v[0] as u64;
            total += n;
            let name = k
                .stack
                .first()
                .and_then(|&l| self.locations[l as usize - 1].line.first())
                .map(|line| {
                    let f = &self.functions[line.function_id as usize - 1];
                    self.strings[f.name as usize].clone()
                })
                .unwrap_or_else(|| "[unknown]".to_string());
            *by.entry(name).or_default() += n;
        }
        let mut by_function: Vec<(String, u64)> = by.into_iter().collect();
        by_function.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        PprofSummary {
            samples: total,
            lost: self.lost,
            by_function,
        }
    }

    /// The location of one raw frame (`frames`: its names, innermost inlined first),
    /// creating it, its mapping and functions on first use.
    fn location(&mut self, pid: u32, frames: &[Frame]) -> u64 {
        let f = &frames[frames.len() - 1];
        let key = (if f.kernel { 0 } else { pid }, f.ip);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let mapping_id = match &f.mapping {
            Some(m) => self.mapping(pid, m),
            None => 0,
        };
        // pprof lists a location's lines innermost first, the last being the function
        // the others were inlined into: the order the symbolizer gives.
        let mut line = Vec::with_capacity(frames.len());
        for fr in frames {
            let Some(sym) = &fr.sym else { continue };
            let name = self.string(sym);
            let file = match (&fr.file, &fr.dso) {
                (Some(file), _) => self.string(file),
                (None, Some(dso)) => self.string(dso),
                (None, None) => 0,
            };
            let fid = match self.function_ids.get(&(name, file)) {
                Some(&id) => id,
                None => {
                    let id = self.functions.len() as u64 + 1;
                    self.functions.push(proto::Function {
                        id,
                        name,
                        system_name: name,
                        filename: file,
                        start_line: 0,
                    });
                    self.function_ids.insert((name, file), id);
                    id
                }
            };
            line.push(proto::Line {
                function_id: fid,
                line: fr.line.map_or(0, i64::from),
            });
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            address: f.ip,
            line,
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    fn mapping(&mut self, pid: u32, m: &Mapping) -> u64 {
        let key = (pid, m.start, m.path.clone());
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        let build_id = match &m.build_id {
            Some(id) => hex(id),
            None if m.is_file() => crate::elf::ElfFile::open(&*m.path)
                .ok()
                .and_then(|f| f.build_id().map(hex))
                .unwrap_or_default(),
            None => String::new(),
        };
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(&m.path.to_string_lossy());
        let build_id = self.string(&build_id);
        self.mappings.push(proto::Mapping {
            id,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.pgoff,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
        if self
            .program
            .as_deref()
            .is_some_and(|p| same_file(p, &m.path))
        {
            self.main_mappings.push(id);
        }
        self.mapping_ids.insert(key, id);
        id
    }

    /// Encodes, gzips and writes the profile. Idempotent.
    fn write(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let bytes = self.profile().encode_to_vec();
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        gz.write_all(&bytes)
            .and_then(|()| gz.finish().map(|_| ()))
            .and_then(|()| out.flush())
            .map_err(|e| write_error(&self.path, "write the pprof profile", e))
    }
}

impl Output for Pprof {
    fn start(&mut self, rec: &Recording<'_>) -> Result<()> {
        self.events = rec.events.to_vec();
        self.periods = vec![(0, 0); self.events.len()];
        self.program = rec.program.map(Path::to_path_buf);
        Ok(())
    }

    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> Result<()> {
        if self.program.is_none() {
            // The first process's program, if the recording did not name one.
            self.program = s.process.and_then(|p| p.exe()).map(|e| e.to_path_buf());
        }
        // The period (or an off-CPU sample's time away), as the pipeline weighs it.
        let period = s.weight;
        if let Some(p) = self.periods.get_mut(s.event) {
            p.0 = p.0.saturating_add(period);
            p.1 += 1;
        }
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        if s.off_cpu {
            // Waiting time ends in a frame of its own, under the stack that blocked.
            let marker = Frame {
                ip: u64::MAX,
                sym: Some(crate::offcpu::MARKER.to_string()),
                off: None,
                file: None,
                line: None,
                inlined: false,
                dso: None,
                mapping: None,
                kernel: true,
            };
            stack.push(self.location(s.pid, std::slice::from_ref(&marker)));
        }
        // One location per raw frame: its inlined frames, then the function.
        let mut first = 0;
        for (i, f) in s.frames.iter().enumerate() {
            if !f.inlined {
                stack.push(self.location(s.pid, &s.frames[first..=i]));
                first = i + 1;
            }
        }
        let comm = match s.thread_name {
            Some(name) => self.string(name),
            None => 0,
        };
        let n = self.events.len();
        let key = SampleKey {
            event: s.event,
            pid: s.pid,
            tid: s.tid,
            comm,
            stack,
        };
        let v = match self.samples.get_mut(&key) {
            Some(v) => {
                self.stack = key.stack;
                v
            }
            None => self.samples.entry(key).or_insert_with(|| vec![0; n + 1]),
        };
        v[0] += 1;
        v[s.event + 1] += period as i64;
        Ok(())
    }

    fn record(&mut self, _: Option<usize>, record: &Record<'_>, _: &[u8]) -> Result<()> {
        if let RecordKind::Lost(l) = record.kind() {
            self.lost += l.lost;
        }
        Ok(())
    }

    fn lost(&mut self, records: u64) -> Result<()> {
        self.lost += records;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if self.events.is_empty() && !self.finished {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("write the pprof profile {}", self.path.display()),
                "the recording never started: no events to describe",
            ));
        }
        self.write()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// The pprof (type, unit) of an event's period: CPU time for the clock events.
fn value_type(event: &EventInfo) -> (String, &'static str) {
    if crate::offcpu::is_off_cpu(event.attr()) {
        // Weighted by the time away (`SampleRef::weight`).
        ("off_cpu".to_string(), "nanoseconds")
    } else if event.counts_cpu_time() {
        ("cpu".to_string(), "nanoseconds")
    } else {
        (event.name().to_string(), "count")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(spec: &str) -> EventInfo {
        let b = crate::Counter::builder(spec).unwrap();
        EventInfo::new(spec, *b.attr(), vec![1]).unwrap()
    }

    #[test]
    fn clock_events_are_cpu_nanoseconds_others_counts() {
        assert_eq!(
            value_type(&info("cpu-clock:u")),
            ("cpu".into(), "nanoseconds")
        );
        assert_eq!(
            value_type(&info("task-clock")),
            ("cpu".into(), "nanoseconds")
        );
        assert_eq!(
            value_type(&info("page-faults")),
            ("page-faults".into(), "count")
        );
    }
}
