//! The background writer: every 10 ms, before an `exec`, and once more at exit, it
//! drains every thread's record buffer into the output file, as JSON lines (the shape
//! of `perfring watch --json` overflow lines, plus `stack`, and a summary line at
//! exit) or as `perf.data` (`PERF_RECORD_SAMPLE`s with the process's `COMM` and
//! `MMAP2` records, for `perf script` and `perf report`). Normal context: it may
//! allocate, lock and symbolize.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use perfring::inject::RecordFormat;
use perfring::output::{EventInfo, PerfData};
use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::Layout;
use perfring::symbols::AddressSpace;
use perfring::sys;
use serde_json::{json, Value};

use crate::buffers::{Entry, CAP};
use crate::{State, STATE};

static STOP: AtomicBool = AtomicBool::new(false);
static WRITER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);
/// The open output, shared by the writer thread and [`flush_now`].
static OUT: Mutex<Option<Out>> = Mutex::new(None);
static TOTAL_AT_EXIT: AtomicU64 = AtomicU64::new(0);

/// Set in the environment by the first image of the program to its pid, so that the
/// images after it know whether they are that process (after an `exec`) or another.
const ROOT: &str = "PERFRING_OUTPUT_ROOT";

/// Opens `output` in `format` and starts the writer thread.
///
/// JSON lines are appended (an exec'd or forked program shares the file). A perf.data
/// has one writer at a time, as `perf record -o FILE -- COMMAND` makes one file of
/// the command's process whatever it execs: the first image creates `FILE` and the
/// images it `exec`s go on writing it ([`PerfData::resume`]). Other processes
/// (children that exec) each write `FILE.PID`, at their first sample.
pub(crate) fn start(st: &State, output: &Path, format: RecordFormat) -> Result<(), String> {
    let sink = match format {
        RecordFormat::Json => Sink::Json(Box::new(JsonOut::open(st, output)?)),
        RecordFormat::Perf => {
            let root = std::env::var(ROOT).ok().and_then(|r| r.parse::<i32>().ok());
            let out = match root {
                None => {
                    // Single-threaded still (the constructor, before the counters).
                    std::env::set_var(ROOT, st.pid.to_string());
                    let file = std::fs::File::create(output).map_err(|e| cannot_open(output, e))?;
                    Some(Box::new(PerfOut::open(st, file, output, false)?))
                }
                Some(pid) if pid == st.pid => Some(Box::new(PerfOut::resume(st, output)?)),
                Some(_) => None,
            };
            Sink::Perf {
                out,
                path: output.to_path_buf(),
            }
        }
    };
    *lock_out() = Some(Out {
        sink,
        written: 0,
        dropped: 0,
    });
    let h = std::thread::Builder::new()
        .name("perfring-inject".into())
        .spawn(run)
        .map_err(|e| format!("record: cannot start the writer thread: {e}"))?;
    *WRITER.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    Ok(())
}

fn lock_out() -> MutexGuard<'static, Option<Out>> {
    OUT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes out every record buffered so far, from the calling thread (before an
/// `exec`, which would discard them with the process image).
pub(crate) fn flush_now() {
    let Some(st) = STATE.get() else { return };
    if let Some(out) = lock_out().as_mut() {
        out.drain_all(st);
        out.sink.flush();
    }
}

/// Stops the writer after a last drain and waits for it.
pub(crate) fn finish(total: u64) {
    TOTAL_AT_EXIT.store(total, SeqCst);
    STOP.store(true, SeqCst);
    let h = WRITER.lock().ok().and_then(|mut w| w.take());
    if let Some(h) = h {
        h.thread().unpark();
        let _ = h.join();
    }
}

/// The output and what went into it.
struct Out {
    sink: Sink,
    /// Records written.
    written: u64,
    /// Records dropped by buffers that were full, counted as their slots are freed
    /// and at the end.
    dropped: u64,
}

enum Sink {
    Json(Box<JsonOut>),
    /// perf.data, created at the first sample (`path` is the `-o` file).
    Perf {
        out: Option<Box<PerfOut>>,
        path: PathBuf,
    },
}

impl Sink {
    fn entry(&mut self, st: &State, e: &Entry) {
        match self {
            Sink::Json(j) => {
                let _ = j.line(st, e);
            }
            Sink::Perf { out, path } => {
                if out.is_none() && !path.as_os_str().is_empty() {
                    match PerfOut::claim(st, path) {
                        Ok(p) => *out = Some(Box::new(p)),
                        Err(msg) => {
                            eprintln!("perfring-inject: {msg}");
                            // Tell once: the samples of this process go nowhere.
                            *path = PathBuf::new();
                        }
                    }
                }
                if let Some(p) = out {
                    p.sample(st, e);
                }
            }
        }
    }

    fn flush(&mut self) {
        match self {
            Sink::Json(j) => {
                let _ = j.w.flush();
            }
            Sink::Perf { out, .. } => {
                if let Some(p) = out {
                    p.flush();
                }
            }
        }
    }
}

impl Out {
    /// Drains every slot; frees the slots of threads that have exited.
    fn drain_all(&mut self, st: &State) {
        let Some(pool) = &st.pool else { return };
        for slot in pool.slots() {
            let tid = slot.tid.load(SeqCst);
            if tid == 0 {
                continue;
            }
            self.written += slot.drain(|e| self.sink.entry(st, e));
            // SAFETY: tgkill with signal 0 only checks that the thread exists.
            let gone = unsafe { libc::syscall(libc::SYS_tgkill, st.pid, tid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                // The thread is gone, so nothing pushes any more: take the rest, free it.
                self.written += slot.drain(|e| self.sink.entry(st, e));
                self.dropped += slot.dropped.swap(0, SeqCst);
                slot.tid.store(0, SeqCst);
            }
        }
    }

    /// The last words: the summary line, or perf.data's lost count and features.
    fn finish(&mut self, st: &State) {
        if let Some(pool) = &st.pool {
            for slot in pool.slots() {
                self.dropped += slot.dropped.swap(0, SeqCst);
            }
        }
        match &mut self.sink {
            Sink::Json(j) => {
                let summary = json!({
                    "type": "summary",
                    "pid": st.pid,
                    "overflows": TOTAL_AT_EXIT.load(SeqCst),
                    "records": self.written,
                    "dropped": self.dropped,
                });
                let _ = writeln!(j.w, "{summary}");
                let _ = j.w.flush();
            }
            Sink::Perf { out, .. } => {
                if let Some(p) = out {
                    p.finish(st, self.dropped);
                }
            }
        }
        if self.dropped > 0 {
            eprintln!(
                "perfring-inject: {} records dropped: a thread's buffer ({CAP} records) \
                 filled faster than the writer emptied it. Fix: raise the period (-c) or \
                 lower the frequency (-F)",
                self.dropped
            );
        }
    }
}

fn run() {
    let Some(st) = STATE.get() else { return };
    loop {
        let stopping = STOP.load(SeqCst);
        if let Some(out) = lock_out().as_mut() {
            out.drain_all(st);
            out.sink.flush();
            if stopping {
                out.finish(st);
            }
        }
        if stopping {
            break;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// JSON lines.
struct JsonOut {
    w: BufWriter<File>,
    space: Option<AddressSpace>,
    seq: u64,
    /// Events counted so far per event (sum of periods), as `watch`'s `total`.
    totals: Vec<u64>,
    /// Rendered `"sym":…,"sym_off":…` per address.
    syms: HashMap<u64, String>,
    /// Each event's name as a JSON string.
    events: Vec<String>,
}

impl JsonOut {
    fn open(st: &State, output: &Path) -> Result<JsonOut, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(output)
            .map_err(|e| cannot_open(output, e))?;
        Ok(JsonOut {
            w: BufWriter::new(file),
            space: AddressSpace::new(st.pid).ok(),
            seq: 0,
            totals: vec![0; st.names.len()],
            syms: HashMap::new(),
            events: st
                .names
                .iter()
                .map(|n| Value::String(n.clone()).to_string())
                .collect(),
        })
    }

    /// `"sym":…,"sym_off":…` of `ip`, rendered once per address: a sampled program
    /// hits the same few thousand addresses again and again.
    fn symbol(&mut self, ip: u64) -> &str {
        let space = &mut self.space;
        self.syms.entry(ip).or_insert_with(|| {
            match space
                .as_mut()
                .and_then(|s| s.locate(ip))
                .and_then(|l| l.symbol)
            {
                Some((name, off)) => format!("\"sym\":{},\"sym_off\":{off}", Value::String(name)),
                None => "\"sym\":null,\"sym_off\":null".to_string(),
            }
        })
    }

    /// One overflow line, in `perfring watch --json`'s field order, plus `stack`.
    /// Written field by field: this runs once per overflow and is most of `record`'s
    /// cost beyond the handler.
    fn line(&mut self, st: &State, e: &Entry) -> std::io::Result<()> {
        self.seq += 1;
        let i = e.event as usize;
        let period = st.period;
        if let (Some(t), Some(p)) = (self.totals.get_mut(i), period) {
            *t = t.saturating_add(p);
        }
        let total = period.and(self.totals.get(i).copied());
        let (seq, pid) = (self.seq, st.pid);
        let sym = self.symbol(e.ip).to_string();
        let event = self.events.get(i).map(String::as_str).unwrap_or("\"?\"");
        let w = &mut self.w;
        write!(
            w,
            "{{\"type\":\"overflow\",\"seq\":{seq},\"event\":{event},\"pid\":{pid},\
             \"tid\":{},\"cpu\":null,\"time_ns\":{},\"ip\":\"{:#x}\",{sym},",
            e.tid, e.time_ns, e.ip
        )?;
        match (period, total) {
            (Some(p), Some(t)) => write!(w, "\"period\":{p},\"total\":{t},")?,
            _ => w.write_all(b"\"period\":null,\"total\":null,")?,
        }
        w.write_all(b"\"stack\":[")?;
        for (k, a) in e.stack().iter().enumerate() {
            if k > 0 {
                w.write_all(b",")?;
            }
            write!(w, "\"{a:#x}\"")?;
        }
        w.write_all(b"]}\n")
    }
}

fn cannot_open(output: &Path, e: impl std::fmt::Display) -> String {
    format!(
        "record: cannot open '{}': {e}. Fix: give a writable file with -o (PERFRING_OUTPUT)",
        output.display()
    )
}

/// The `sample_type` of the samples written to perf.data: what the handler knows.
const PERF_SAMPLE_TYPE: u32 = sys::PERF_SAMPLE_IDENTIFIER
    | sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_CALLCHAIN;

/// perf.data. Event `i` has the id `i + 1` (the file's own: the inherited counters
/// have an id per thread, which no sample of ours carries).
struct PerfOut {
    data: PerfData,
    layouts: Vec<Layout>,
    /// Records encoded since the last flush.
    buf: Vec<u8>,
    /// One sample's fields, reused (its callchain keeps its capacity).
    fields: SampleFields,
    /// Threads already named by a `COMM` record.
    named: HashSet<u32>,
    /// The time stamp of the synthesized records: 0, or the exec's.
    start_time: u64,
}

impl PerfOut {
    /// `output.PID`, for a process other than the one `inject` started, at its first
    /// sample.
    fn claim(st: &State, output: &Path) -> Result<PerfOut, String> {
        let mut p = output.as_os_str().to_owned();
        p.push(format!(".{}", st.pid));
        let path = PathBuf::from(p);
        let file = std::fs::File::create(&path).map_err(|e| cannot_open(&path, e))?;
        PerfOut::open(st, file, &path, false)
    }

    /// `output` again, in the image an `exec` made of the process that created it.
    fn resume(st: &State, output: &Path) -> Result<PerfOut, String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(output)
            .map_err(|e| cannot_open(output, e))?;
        PerfOut::open(st, file, output, true)
    }

    /// Starts `file` (`resume`: goes on after the records of the image before an exec).
    fn open(st: &State, file: File, path: &Path, resume: bool) -> Result<PerfOut, String> {
        let events = st
            .builders
            .iter()
            .zip(&st.names)
            .enumerate()
            .map(|(i, (b, name))| {
                let mut attr = *b.attr();
                attr.sample_type = PERF_SAMPLE_TYPE.into();
                attr.read_format = 0;
                attr.set_sample_id_all(1);
                attr.set_disabled(0);
                // The handler stamps CLOCK_MONOTONIC, which perf then shows as is.
                attr.set_use_clockid(1);
                attr.clockid = libc::CLOCK_MONOTONIC;
                EventInfo::new(name.clone(), attr, vec![i as u64 + 1])
            })
            .collect::<perfring::Result<Vec<_>>>()
            .map_err(|e| format!("record: {e}"))?;
        let layouts = events.iter().map(|e| *e.layout()).collect();
        let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let data = if resume {
            PerfData::resume(file, path, &events, &cmdline)
        } else {
            PerfData::new(file, path, &events, &cmdline)
        }
        .map_err(|e| cannot_open(path, e))?;
        let mut out = PerfOut {
            data,
            layouts,
            buf: Vec::with_capacity(64 << 10),
            fields: SampleFields::default(),
            named: HashSet::new(),
            start_time: 0,
        };
        // After an exec, the new image's mappings apply from now on (a COMM_EXEC
        // drops the old ones); else from the beginning.
        out.start_time = if resume { crate::now_ns() } else { 0 };
        out.synthesize(st, resume);
        out.flush();
        Ok(out)
    }

    /// The process's threads (`COMM`) and executable mappings (`MMAP2`) as they are
    /// now, stamped `start_time` (`exec`: the `COMM` says so).
    fn synthesize(&mut self, st: &State, exec: bool) {
        if let Some(layout) = self.layouts.first() {
            let _ = perfring::output::synthesize_process_at(
                st.pid as u32,
                layout,
                1,
                self.start_time,
                exec,
                &mut self.buf,
            );
        }
    }

    fn sample(&mut self, st: &State, e: &Entry) {
        let i = e.event as usize;
        let Some(layout) = self.layouts.get(i) else {
            return;
        };
        let pid = st.pid as u32;
        if self.named.insert(e.tid) && e.tid != pid {
            // A thread started after the synthesized COMMs: name it.
            let comm = std::fs::read(format!("/proc/self/task/{}/comm", e.tid)).unwrap_or_default();
            let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
            let ids = Ids {
                pid,
                tid: e.tid,
                time: e.time_ns,
                id: i as u64 + 1,
                identifier: i as u64 + 1,
                ..Ids::default()
            };
            let misc = sys::PERF_RECORD_MISC_USER as u16;
            encode::comm(&mut self.buf, layout, misc, pid, e.tid, comm, &ids);
        }
        let f = &mut self.fields;
        f.identifier = i as u64 + 1;
        f.id = f.identifier;
        f.ip = e.ip;
        f.pid = pid;
        f.tid = e.tid;
        f.time = e.time_ns;
        // Under a frequency the handler does not learn the period: each sample is 1.
        f.period = st.period.unwrap_or(1);
        f.callchain.clear();
        f.callchain.extend([sys::PERF_CONTEXT_USER, e.ip]);
        f.callchain.extend_from_slice(e.stack());
        encode::sample(&mut self.buf, layout, sys::PERF_RECORD_MISC_USER as u16, f);
    }

    fn flush(&mut self) {
        if !self.buf.is_empty() {
            if let Err(e) = self.data.write_records(&self.buf) {
                eprintln!("perfring-inject: {e}");
            }
            self.buf.clear();
        }
    }

    fn finish(&mut self, st: &State, dropped: u64) {
        // Libraries loaded since the start (dlopen) get their MMAP2s too.
        self.synthesize(st, false);
        self.flush();
        let done = if dropped > 0 {
            self.data.write_lost(dropped)
        } else {
            Ok(())
        };
        if let Err(e) = done.and_then(|()| self.data.finish()) {
            eprintln!("perfring-inject: {e}");
        }
    }
}
