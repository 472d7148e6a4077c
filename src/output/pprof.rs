//! Gzipped pprof (`profile.proto`) built from the ring's records.
//!
//! Samples are aggregated as they come, keyed by event, thread and stack, so memory
//! grows with the number of distinct stacks, not with time. Addresses are symbolized
//! from the `MMAP`/`MMAP2` records of the stream (which file, at which offset) and the
//! files' ELF symbols, so a process that has exited is still named; kernel addresses
//! from `/proc/kallsyms`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use prost::Message;

use super::perfdata::{read_build_id, write_error};
use super::proto;
use super::stream::{Chunk, Sink, FINISHED_ROUND, NO_EVENT};
use super::EventInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::records::{Layout, Record, RecordKind};
use crate::sys;

/// `PERF_CONTEXT_MAX` as a u64: callchain entries at or above it are context markers.
const CONTEXT_MARKERS: u64 = -4095i64 as u64;
/// Addresses from here up are the kernel's (x86-64 and arm64 canonical upper half).
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// A pprof profile being built: a [`Sink`] for a [`Streamer`](super::Streamer), or
/// fed directly with [`add_records`](Self::add_records).
///
/// Sample types: `samples`/`count` first, then one per event: `cpu`/`nanoseconds`
/// for `cpu-clock` and `task-clock`, else the event's name with unit `count`. Each
/// sample carries the labels `thread_id`, `thread_name` and `pid`.
pub struct Pprof {
    out: Option<Box<dyn Write + Send>>,
    path: PathBuf,
    events: Vec<EventInfo>,
    layouts: Vec<Layout>,
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    /// Each process's executable mappings, by start address.
    maps: HashMap<u32, Vec<MapEntry>>,
    comms: HashMap<u32, i64>,
    /// The first file mapped: the program.
    main_file: Option<Arc<Path>>,
    mappings: Vec<proto::Mapping>,
    mapping_ids: HashMap<(u32, u64, Arc<Path>), u64>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<(u32, u64), u64>,
    functions: Vec<proto::Function>,
    function_ids: HashMap<(i64, i64), u64>,
    samples: HashMap<SampleKey, Vec<i64>>,
    pending: Vec<Pending>,
    pending_addrs: Vec<u64>,
    symbolizer: Symbolizer,
    started: (SystemTime, Instant),
    decoded: u64,
    undecoded: u64,
    lost: u64,
    finished: bool,
}

impl std::fmt::Debug for Pprof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pprof")
            .field("path", &self.path)
            .field("events", &self.events)
            .field("samples", &self.decoded)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct MapEntry {
    start: u64,
    end: u64,
    pgoff: u64,
    file: Arc<Path>,
}

/// A sample waiting for its round's end.
#[derive(Debug, Clone)]
struct Pending {
    event: usize,
    pid: u32,
    tid: u32,
    period: u64,
    /// Its addresses, leaf first, in `pending_addrs`.
    addrs: std::ops::Range<usize>,
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
    /// Records that could not be decoded (counted, not used).
    pub undecoded: u64,
    /// Records reported lost before reaching the profile (queue full).
    pub lost: u64,
    /// Samples whose leaf frame is in each function ("self" counts), most first.
    pub by_function: Vec<(String, u64)>,
}

impl Pprof {
    /// Creates `path` now (so a bad path fails before recording) and writes the
    /// profile there at [`finish`](Self::finish).
    ///
    /// # Errors
    /// - [`ErrorKind::Io`] if the file cannot be created.
    /// - [`ErrorKind::InvalidArgument`] as [`new`](Self::new).
    pub fn create(path: impl AsRef<Path>, events: &[EventInfo]) -> Result<Pprof> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|e| {
            Error::from_errno(format!("create {}", path.display()), e)
                .with_fix("choose a writable path with -o")
        })?;
        Pprof::new(file, path, events)
    }

    /// Writes the profile to `out` at [`finish`](Self::finish) (`name` is for messages).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for no events, or an attr the decoder does not know.
    pub fn new(
        out: impl Write + Send + 'static,
        name: impl AsRef<Path>,
        events: &[EventInfo],
    ) -> Result<Pprof> {
        if events.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "write a pprof profile",
                "no events to describe",
            )
            .with_fix("pass the EventInfo of each event recorded"));
        }
        let layouts = events
            .iter()
            .map(|e| {
                Layout::new(e.attr()).map_err(|d| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        format!("decode event {} for pprof", e.name()),
                        d.to_string(),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut p = Pprof {
            out: Some(Box::new(out)),
            path: name.as_ref().to_path_buf(),
            events: events.to_vec(),
            layouts,
            strings: Vec::new(),
            string_ids: HashMap::new(),
            maps: HashMap::new(),
            comms: HashMap::new(),
            main_file: None,
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            samples: HashMap::new(),
            pending: Vec::new(),
            pending_addrs: Vec::new(),
            symbolizer: Symbolizer::default(),
            started: (SystemTime::now(), Instant::now()),
            decoded: 0,
            undecoded: 0,
            lost: 0,
            finished: false,
        };
        p.string(""); // string_table[0] must be "".
        Ok(p)
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

    /// Feeds whole records (back to back, as the ring holds them) of event number
    /// `event`. `MMAP`/`MMAP2`/`COMM`/`FORK` records update what names addresses and
    /// threads; samples are held until [`end_round`](Self::end_round) (or the end),
    /// then symbolized and aggregated; records that do not decode are counted.
    pub fn add_records(&mut self, event: usize, mut bytes: &[u8]) {
        while bytes.len() >= 8 {
            let size = usize::from(u16::from_ne_bytes([bytes[6], bytes[7]]));
            if size < 8 || size > bytes.len() {
                self.undecoded += 1;
                return;
            }
            self.add_record(event, &bytes[..size]);
            bytes = &bytes[size..];
        }
    }

    fn add_record(&mut self, event: usize, bytes: &[u8]) {
        let Some(layout) = self.layouts.get(event) else {
            return; // Markers (no event) and user records carry nothing for pprof.
        };
        let layout = *layout;
        let record = match Record::parse(bytes, &layout) {
            Ok(r) => r,
            Err(_) => {
                self.undecoded += 1;
                return;
            }
        };
        match record.kind() {
            RecordKind::Sample(s) => {
                let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
                let period = s.period().unwrap_or_else(|| {
                    let a = self.events[event].attr();
                    if a.freq() == 0 {
                        period_of(a)
                    } else {
                        1
                    }
                });
                let start = self.pending_addrs.len();
                if let Some(chain) = s.callchain() {
                    self.pending_addrs
                        .extend(chain.iter().filter(|&a| a < CONTEXT_MARKERS));
                }
                if self.pending_addrs.len() == start {
                    self.pending_addrs.extend(s.ip());
                }
                self.pending.push(Pending {
                    event,
                    pid,
                    tid,
                    period,
                    addrs: start..self.pending_addrs.len(),
                });
            }
            RecordKind::Mmap2(m) => {
                let file = m.filename;
                self.add_map(m.pid, m.addr, m.len, m.pgoff, file, record.misc().0);
            }
            RecordKind::Mmap(m) => {
                let file = m.filename;
                self.add_map(m.pid, m.addr, m.len, m.pgoff, file, record.misc().0);
            }
            RecordKind::Comm(c) => {
                if record.misc().comm_exec() {
                    self.maps.remove(&c.pid);
                }
                let name = String::from_utf8_lossy(c.comm).into_owned();
                let id = self.string(&name);
                self.comms.insert(c.tid, id);
            }
            RecordKind::Fork(t) => {
                if t.pid != t.ppid {
                    if let Some(parent) = self.maps.get(&t.ppid).cloned() {
                        self.maps.insert(t.pid, parent);
                    }
                }
                if let Some(&c) = self.comms.get(&t.ptid) {
                    self.comms.insert(t.tid, c);
                }
            }
            RecordKind::Lost(l) => self.lost += l.lost,
            _ => {}
        }
    }

    /// Symbolizes and aggregates the samples held since the last round: a round's
    /// `MMAP2`/`COMM` records may come after its samples (the tracking ring is drained
    /// after the events' rings), never after the round.
    pub fn end_round(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let addrs = std::mem::take(&mut self.pending_addrs);
        let n = self.events.len();
        for p in &pending {
            let stack: Vec<u64> = addrs[p.addrs.clone()]
                .iter()
                .enumerate()
                .map(|(i, &a)| self.location(p.pid, a, i > 0))
                .collect();
            let comm = self.comms.get(&p.tid).copied().unwrap_or(0);
            let key = SampleKey {
                event: p.event,
                pid: p.pid,
                tid: p.tid,
                comm,
                stack,
            };
            let v = self.samples.entry(key).or_insert_with(|| vec![0; n + 1]);
            v[0] += 1;
            v[p.event + 1] += p.period as i64;
            self.decoded += 1;
        }
        // Keep the buffers' capacity for the next round.
        self.pending = pending;
        self.pending.clear();
        self.pending_addrs = addrs;
        self.pending_addrs.clear();
    }

    fn add_map(&mut self, pid: u32, addr: u64, len: u64, pgoff: u64, file: &[u8], misc: u16) {
        let misc = u32::from(misc);
        if misc & sys::PERF_RECORD_MISC_MMAP_DATA != 0
            || misc & sys::PERF_RECORD_MISC_CPUMODE_MASK != sys::PERF_RECORD_MISC_USER
        {
            return;
        }
        let path: Arc<Path> = Arc::from(Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(file),
        ));
        if self.main_file.is_none() {
            // The kernel maps a program before its interpreter, and /proc lists the
            // program first: the first file mapped is the main binary.
            self.main_file = Some(path.clone());
        }
        let end = addr.saturating_add(len);
        let list = self.maps.entry(pid).or_default();
        list.retain(|m| m.end <= addr || m.start >= end);
        let at = list.partition_point(|m| m.start < addr);
        list.insert(
            at,
            MapEntry {
                start: addr,
                end,
                pgoff,
                file: path,
            },
        );
    }

    /// The location id of `addr` in process `pid`, creating it (and its mapping and
    /// function) on first use. `caller`: a return address, looked up at `addr - 1`
    /// so a call at a function's end is not attributed to the next function.
    fn location(&mut self, pid: u32, addr: u64, caller: bool) -> u64 {
        let kernel = addr >= KERNEL_START;
        let key = (if kernel { 0 } else { pid }, addr);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let lookup = if caller { addr.saturating_sub(1) } else { addr };
        let (mapping_id, name, file) = if kernel {
            let name = self.symbolizer.kernel(lookup);
            (0, name, "[kernel.kallsyms]".to_string())
        } else {
            let entry = self.maps.get(&pid).and_then(|list| {
                let i = list.partition_point(|m| m.start <= addr);
                list[..i].last().filter(|m| addr < m.end).cloned()
            });
            match entry {
                Some(m) => {
                    let mid = self.mapping(pid, &m);
                    let name = self.symbolizer.user(&m.file, lookup - m.start + m.pgoff);
                    (mid, name, m.file.display().to_string())
                }
                None => (0, None, String::new()),
            }
        };
        let line = name.map(|n| {
            let (name, file) = (self.string(&n), self.string(&file));
            let fid = match self.function_ids.get(&(name, file)) {
                Some(&f) => f,
                None => {
                    let f = self.functions.len() as u64 + 1;
                    self.functions.push(proto::Function {
                        id: f,
                        name,
                        system_name: name,
                        filename: file,
                        start_line: 0,
                    });
                    self.function_ids.insert((name, file), f);
                    f
                }
            };
            proto::Line {
                function_id: fid,
                line: 0,
            }
        });
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            address: addr,
            line: line.into_iter().collect(),
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    fn mapping(&mut self, pid: u32, m: &MapEntry) -> u64 {
        let key = (pid, m.start, m.file.clone());
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        let build_id = self
            .symbolizer
            .build_id(&m.file)
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
            .unwrap_or_default();
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(&m.file.display().to_string());
        let build_id = self.string(&build_id);
        self.mappings.push(proto::Mapping {
            id,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.pgoff,
            filename,
            build_id,
            has_functions: true,
            has_filenames: false,
            has_line_numbers: false,
            has_inline_frames: false,
        });
        self.mapping_ids.insert(key, id);
        id
    }

    /// The profile message as it stands (samples held for the round's end included).
    pub fn profile(&mut self) -> proto::Profile {
        self.end_round();
        let mut sample_type = vec![proto::ValueType {
            r#type: self.string("samples"),
            unit: self.string("count"),
        }];
        for i in 0..self.events.len() {
            let (ty, unit) = value_type(self.events[i].name());
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
        let first = self.events[0].attr();
        let period = if first.freq() == 0 {
            period_of(first) as i64
        } else {
            0
        };
        // "mapping[0] will be the main binary": the first program (an executable, or a
        // PIE with an interpreter) mapped, then the rest in the order they came.
        let mut mapping = self.mappings.clone();
        let main = self.main_file.as_ref().and_then(|main| {
            let name = self.string_ids.get(&*main.to_string_lossy())?;
            mapping.iter().position(|m| m.filename == *name)
        });
        if let Some(i) = main {
            mapping[..=i].rotate_right(1);
        }
        let period_type = Some(sample_type[1]);
        let samples_idx = sample_type[0].r#type;
        let started = self.started;
        proto::Profile {
            sample_type,
            sample,
            mapping,
            location: self.locations.clone(),
            function: self.functions.clone(),
            string_table: self.strings.clone(),
            drop_frames: 0,
            keep_frames: 0,
            time_nanos: started
                .0
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64),
            duration_nanos: started.1.elapsed().as_nanos() as i64,
            period_type,
            period,
            comment: Vec::new(),
            // `go tool pprof -top` then shows sample counts, as `perf report` does.
            default_sample_type: samples_idx,
        }
    }

    /// Per-function self counts and totals (samples held for the round's end included).
    pub fn summary(&mut self) -> PprofSummary {
        self.end_round();
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
            undecoded: self.undecoded,
            lost: self.lost,
            by_function,
        }
    }

    /// Encodes, gzips and writes the profile. Idempotent.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] naming the output and the cause (disk full, closed pipe).
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let bytes = self.profile().encode_to_vec();
        let mut out = self.out.take().expect("finish runs once");
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        gz.write_all(&bytes)
            .and_then(|()| gz.finish().map(|_| ()))
            .and_then(|()| out.flush())
            .map_err(|e| write_error(&self.path, "write the pprof profile", e))
    }
}

impl Sink for Pprof {
    fn write_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        self.lost += chunk.lost_before();
        for (event, rec) in chunk.records() {
            if event != NO_EVENT {
                self.add_record(event as usize, rec);
            } else if rec.len() >= 8
                && u32::from_ne_bytes(rec[..4].try_into().unwrap()) == FINISHED_ROUND
            {
                self.end_round();
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        Pprof::finish(self)
    }
}

/// `sample_period` (the union with `sample_freq`) of an attr without `freq`.
fn period_of(attr: &sys::perf_event_attr) -> u64 {
    // The union is plain data: read it through its bytes, no unsafe needed.
    let bytes = zerocopy::IntoBytes::as_bytes(attr);
    u64::from_ne_bytes(bytes[16..24].try_into().expect("8 bytes"))
}

/// The pprof (type, unit) of an event's period.
fn value_type(event: &str) -> (String, &'static str) {
    let base = event.split(':').next().unwrap_or(event);
    match base {
        "cpu-clock" | "task-clock" => ("cpu".to_string(), "nanoseconds"),
        _ => (event.to_string(), "count"),
    }
}

/// What names addresses: ELF symbols of mapped files (`perfring::symbols`) and
/// `/proc/kallsyms`. Kept behind these three methods so the backend can change.
#[derive(Default)]
struct Symbolizer {
    files: HashMap<Arc<Path>, Option<crate::symbols::Symbols>>,
    build_ids: HashMap<Arc<Path>, Option<Vec<u8>>>,
    kallsyms: Option<Vec<(u64, String)>>,
}

impl Symbolizer {
    /// The function holding `file_offset` in `file`.
    fn user(&mut self, file: &Arc<Path>, file_offset: u64) -> Option<String> {
        let syms = self
            .files
            .entry(file.clone())
            .or_insert_with(|| crate::symbols::Symbols::load(file).ok())
            .as_ref()?;
        let vaddr = syms.vaddr_of_offset(file_offset)?;
        syms.lookup(vaddr).map(|(name, _)| name.to_string())
    }

    fn build_id(&mut self, file: &Arc<Path>) -> Option<Vec<u8>> {
        self.build_ids
            .entry(file.clone())
            .or_insert_with(|| read_build_id(file))
            .clone()
    }

    /// The kernel function holding `addr`, from `/proc/kallsyms` (addresses are zero
    /// there without privilege: then `None`).
    fn kernel(&mut self, addr: u64) -> Option<String> {
        let table = self.kallsyms.get_or_insert_with(|| {
            let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
            let mut t: Vec<(u64, String)> = text
                .lines()
                .filter_map(|l| {
                    let mut f = l.split_whitespace();
                    let a = u64::from_str_radix(f.next()?, 16).ok()?;
                    let ty = f.next()?;
                    let name = f.next()?;
                    (a != 0 && matches!(ty, "t" | "T" | "w" | "W")).then(|| (a, name.to_string()))
                })
                .collect();
            t.sort_unstable();
            t
        });
        let i = table.partition_point(|(a, _)| *a <= addr);
        table[..i].last().map(|(_, n)| n.clone())
    }
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("files", &self.files.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_events_are_cpu_nanoseconds_others_counts() {
        assert_eq!(value_type("cpu-clock:u"), ("cpu".into(), "nanoseconds"));
        assert_eq!(value_type("task-clock"), ("cpu".into(), "nanoseconds"));
        assert_eq!(value_type("mem:hot:x"), ("mem:hot:x".into(), "count"));
    }

    #[test]
    fn period_is_read_from_the_union() {
        let b = crate::Counter::builder("cpu-clock").unwrap().period(12345);
        assert_eq!(period_of(b.attr()), 12345);
    }
}
