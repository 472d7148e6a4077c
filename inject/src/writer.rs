//! The background writer: every 10 ms, before an `exec`, and once more at exit, it
//! drains every thread's record buffer into the library's recording pipeline
//! (`perfring::pipeline`): each overflow becomes a `PERF_RECORD_SAMPLE` with its
//! frame-pointer chain, registers and stack copy, beside the process's `COMM` and
//! `MMAP2` records, so it is unwound (the first frame by CFI) and named exactly as
//! `perfring watch` and `record` do it. The outputs: JSON lines (`perfring watch
//! --json`'s overflow lines, with the stack, and a summary line at exit) or a
//! `perf.data` for `perf script` and `perf report`. Normal context: it may allocate,
//! lock and symbolize.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use perfring::inject::RecordFormat;
use perfring::output::{Output, PerfData, SampleRef, Tally};
use perfring::pipeline::{tracking_index, Pipeline};
use perfring::records::encode::{self, Ids, SampleFields};
use perfring::sampler::EventInfo;
use perfring::synth::Stamp;
use perfring::sys;

use crate::buffers::{Entry, CAP, STACK_BYTES};
use crate::{State, STATE};

static STOP: AtomicBool = AtomicBool::new(false);
static WRITER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);
/// The open output, shared by the writer thread and [`flush_now`].
static OUT: Mutex<Option<Out>> = Mutex::new(None);
static TOTAL_AT_EXIT: AtomicU64 = AtomicU64::new(0);
/// Records dropped by full buffers, as the summary line reports them.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Records written, as the summary line reports them.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// Set in the environment by the first image of the program to its pid, so that the
/// images after it know whether they are that process (after an `exec`) or another.
const ROOT: &str = "PERFRING_OUTPUT_ROOT";

/// The `sample_type` of the samples the writer makes: what the handler knows, and the
/// registers and stack the unwinder's first frame needs.
const SAMPLE_TYPE: u32 = sys::PERF_SAMPLE_IDENTIFIER
    | sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_CALLCHAIN
    | sys::PERF_SAMPLE_REGS_USER
    | sys::PERF_SAMPLE_STACK_USER;

/// `PERF_SAMPLE_REGS_ABI_64`.
const REGS_ABI_64: u64 = 2;

/// Opens `output` in `format` and starts the writer thread.
///
/// JSON lines are appended (an exec'd or forked program shares the file). A perf.data
/// has one writer at a time, as `perf record -o FILE -- COMMAND` makes one file of
/// the command's process whatever it execs: the first image creates `FILE` and the
/// images it `exec`s go on writing it ([`PerfData::resume_output`]). Other processes
/// (children that exec) each write `FILE.PID`, at their first sample.
pub(crate) fn start(st: &State, output: &Path, format: RecordFormat) -> Result<(), String> {
    let events = events(st)?;
    let mut out = Out {
        pid: st.pid,
        events,
        pipeline: None,
        claim: None,
        named: HashSet::new(),
        buf: Vec::with_capacity(64 << 10),
        fields: SampleFields::default(),
        start_time: 0,
    };
    match format {
        RecordFormat::Json => {
            // Appended to (an exec'd or forked image shares it); created 0600 and never
            // through a symbolic link, as every file that holds samples.
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(output)
                .map_err(|e| cannot_open(output, e))?;
            out.begin(Box::new(JsonLines::new(file)), false)?;
        }
        RecordFormat::Perf => {
            let root = std::env::var(ROOT).ok().and_then(|r| r.parse::<i32>().ok());
            match root {
                None => {
                    // Single-threaded still (the constructor, before the counters).
                    std::env::set_var(ROOT, st.pid.to_string());
                    let data = PerfData::open(output).map_err(|e| cannot_open(output, e))?;
                    out.begin(Box::new(data), false)?;
                }
                Some(pid) if pid == st.pid => {
                    use std::os::unix::fs::OpenOptionsExt;
                    let file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(output)
                        .map_err(|e| cannot_open(output, e))?;
                    let data = PerfData::resume_output(file, output)
                        .map_err(|e| cannot_open(output, e))?;
                    out.begin(Box::new(data), true)?;
                }
                // Another process: its own FILE.PID, at its first sample.
                Some(_) => out.claim = Some(output.to_path_buf()),
            }
        }
    }
    *lock_out() = Some(out);
    let h = std::thread::Builder::new()
        .name("perfring-inject".into())
        .spawn(run)
        .map_err(|e| format!("record: cannot start the writer thread: {e}"))?;
    *WRITER.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    Ok(())
}

/// The events as the samples describe them: event `i` has the id `i + 1` (the file's
/// own: the inherited counters have an id per thread, which no sample of ours carries).
fn events(st: &State) -> Result<Vec<EventInfo>, String> {
    st.builders
        .iter()
        .zip(&st.names)
        .enumerate()
        .map(|(i, (b, name))| {
            let mut attr = *b.attr();
            attr.sample_type = SAMPLE_TYPE.into();
            attr.read_format = 0;
            attr.sample_regs_user = perfring::unwind::UNWIND_REGS;
            attr.sample_stack_user = STACK_BYTES as u32;
            attr.set_sample_id_all(1);
            attr.set_disabled(0);
            // The handler stamps CLOCK_MONOTONIC, which perf then shows as is.
            attr.set_use_clockid(1);
            attr.clockid = libc::CLOCK_MONOTONIC;
            EventInfo::new(name.clone(), attr, vec![i as u64 + 1])
        })
        .collect::<perfring::Result<Vec<_>>>()
        .map_err(|e| format!("record: {e}"))
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

/// The pipeline and what feeds it.
struct Out {
    pid: i32,
    events: Vec<EventInfo>,
    /// None until the output is opened (a `FILE.PID` at the first sample).
    pipeline: Option<Pipeline>,
    /// The `-o` file, for a process that writes its own `FILE.PID` when it has samples.
    claim: Option<PathBuf>,
    /// Threads already named by a `COMM` record.
    named: HashSet<u32>,
    /// Records encoded since the last round.
    buf: Vec<u8>,
    /// One sample's fields, reused (its vectors keep their capacity).
    fields: SampleFields,
    /// The time stamp of the synthesized records: 0, or the exec's.
    start_time: u64,
}

impl Out {
    /// Starts the pipeline with `output`; `exec`: this image follows an `exec` of the
    /// process that began the file, whose old mappings a `COMM_EXEC` drops from now on.
    fn begin(&mut self, output: Box<dyn Output>, exec: bool) -> Result<(), String> {
        let pid = self.pid;
        let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let mut pipeline = Pipeline::new(&self.events, None)
            .map_err(|e| format!("record: {e}"))?
            .cmdline(cmdline)
            .program(perfring::proc::exe(0))
            .read_proc(true)
            .boxed_output(output);
        pipeline.start().map_err(|e| format!("record: {e}"))?;
        self.start_time = if exec { crate::now_ns() } else { 0 };
        self.pipeline = Some(pipeline);
        self.synthesize(pid, exec);
        self.round();
        Ok(())
    }

    /// The process's threads (`COMM`) and executable mappings (`MMAP2`) as they are
    /// now, stamped `start_time` (`exec`: the `COMM` says so).
    fn synthesize(&mut self, pid: i32, exec: bool) {
        let Some(layout) = self.events.first().map(|e| *e.layout()) else {
            return;
        };
        let stamp = Stamp {
            layout: &layout,
            id: 1,
            time: self.start_time,
        };
        let mut buf = Vec::new();
        let _ = if exec {
            perfring::synth::synthesize_exec(pid as u32, &stamp, &mut buf)
        } else {
            perfring::synth::synthesize_process(pid as u32, &stamp, &mut buf)
        };
        self.tracking(&buf);
    }

    fn tracking(&mut self, bytes: &[u8]) {
        let index = tracking_index(&self.events);
        if let Some(p) = &mut self.pipeline {
            if let Err(e) = p.push_records(index, bytes) {
                eprintln!("perfring-inject: {e}");
            }
        }
    }

    /// The records encoded so far into the pipeline, and its round handled.
    fn round(&mut self) {
        if let Some(p) = &mut self.pipeline {
            if let Err(e) = p.end_round() {
                eprintln!("perfring-inject: {e}");
            }
        }
    }

    /// Drains every slot; frees the slots of threads that have exited.
    fn drain_all(&mut self, st: &State) {
        let Some(pool) = &st.pool else { return };
        let mut written = 0;
        for slot in pool.slots() {
            let tid = slot.tid.load(SeqCst);
            if tid == 0 {
                continue;
            }
            written += slot.drain(|e| self.entry(st, e));
            // SAFETY: tgkill with signal 0 only checks that the thread exists.
            let gone = unsafe { libc::syscall(libc::SYS_tgkill, st.pid, tid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                // The thread is gone, so nothing pushes any more: take the rest, free it.
                written += slot.drain(|e| self.entry(st, e));
                DROPPED.fetch_add(slot.dropped.swap(0, SeqCst), SeqCst);
                slot.tid.store(0, SeqCst);
            }
        }
        WRITTEN.fetch_add(written, SeqCst);
        self.round();
    }

    /// One overflow, as a sample (after a `COMM` for a thread not named yet).
    fn entry(&mut self, st: &State, e: &Entry) {
        if self.pipeline.is_none() {
            let Some(path) = self.claim.take() else {
                return; // this process's samples go nowhere (said once)
            };
            let mut p = path.into_os_string();
            p.push(format!(".{}", st.pid));
            let path = PathBuf::from(p);
            let opened = PerfData::open(&path)
                .map_err(|e| cannot_open(&path, e))
                .and_then(|d| self.begin(Box::new(d), false));
            if let Err(msg) = opened {
                eprintln!("perfring-inject: {msg}");
                return;
            }
        }
        let i = e.event as usize;
        let Some(layout) = self.events.get(i).map(|ev| *ev.layout()) else {
            return;
        };
        let pid = st.pid as u32;
        if self.named.insert(e.tid) && e.tid != pid {
            // A thread started after the synthesized COMMs: name it.
            let comm = perfring::proc::comm(st.pid, e.tid as i32).unwrap_or_default();
            let ids = Ids {
                pid,
                tid: e.tid,
                time: e.time_ns,
                id: i as u64 + 1,
                identifier: i as u64 + 1,
                ..Ids::default()
            };
            let mut rec = Vec::new();
            encode::comm(
                &mut rec,
                &layout,
                sys::PERF_RECORD_MISC_USER as u16,
                pid,
                e.tid,
                &comm,
                &ids,
            );
            self.tracking(&rec);
        }
        sample(&mut self.fields, st, e, i);
        self.buf.clear();
        encode::sample(
            &mut self.buf,
            &layout,
            sys::PERF_RECORD_MISC_USER as u16,
            &self.fields,
        );
        if let Some(p) = &mut self.pipeline {
            if let Err(err) = p.push_records(i, &self.buf) {
                eprintln!("perfring-inject: {err}");
            }
        }
    }

    /// The last words: libraries loaded since the start get their `MMAP2`s, the outputs
    /// their summary or feature sections.
    fn finish(&mut self, st: &State) {
        if let Some(pool) = &st.pool {
            for slot in pool.slots() {
                DROPPED.fetch_add(slot.dropped.swap(0, SeqCst), SeqCst);
            }
        }
        self.synthesize(st.pid, false);
        let dropped = DROPPED.load(SeqCst);
        if let Some(p) = &mut self.pipeline {
            let done = p.lost(dropped).and_then(|()| p.finish());
            if let Err(e) = done {
                eprintln!("perfring-inject: {e}");
            }
        }
        if dropped > 0 {
            eprintln!(
                "perfring-inject: {dropped} records dropped: a thread's buffer ({CAP} records) \
                 filled faster than the writer emptied it. Fix: raise the period (-c) or \
                 lower the frequency (-F)"
            );
        }
    }
}

/// `e` as the fields of a sample of event `i`.
fn sample(f: &mut SampleFields, st: &State, e: &Entry, i: usize) {
    f.identifier = i as u64 + 1;
    f.id = f.identifier;
    f.ip = e.ip;
    f.pid = st.pid as u32;
    f.tid = e.tid;
    f.time = e.time_ns;
    // `-c N`, or under `-F HZ` a clock's period, which the kernel fixes at 1e9/HZ
    // (only clocks are accepted with -F: see InjectConfig::validate).
    f.period = st.period;
    f.callchain.clear();
    f.callchain.extend([sys::PERF_CONTEXT_USER, e.ip]);
    f.callchain.extend_from_slice(e.frames());
    // The registers in mask order (bp, sp, ip) and the stack copy, as the kernel's
    // frame-pointer samples carry them for the unwinder.
    f.regs_user_abi = REGS_ABI_64;
    f.regs_user.clear();
    f.regs_user.extend([e.bp, e.sp, e.ip]);
    f.stack_user.clear();
    f.stack_user.extend_from_slice(&e.stack);
    f.stack_user_dyn_size = e.stack_len;
}

fn run() {
    let Some(st) = STATE.get() else { return };
    loop {
        let stopping = STOP.load(SeqCst);
        if let Some(out) = lock_out().as_mut() {
            out.drain_all(st);
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

/// JSON lines: each overflow as `perfring watch --json` writes it, with its stack,
/// and a summary line at the end.
struct JsonLines {
    w: BufWriter<File>,
    tally: Tally,
}

impl JsonLines {
    fn new(file: File) -> JsonLines {
        JsonLines {
            w: BufWriter::new(file),
            tally: Tally::new(),
        }
    }
}

impl Output for JsonLines {
    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> perfring::Result<()> {
        let mut line = self.tally.line(s, true);
        // The handler does not know the CPU.
        line.cpu = None;
        serde_json::to_writer(&mut self.w, &line)
            .map_err(std::io::Error::from)
            .and_then(|()| self.w.write_all(b"\n"))
            .map_err(|e| perfring::Error::from_errno("write the JSON lines", e))
    }

    fn end_round(&mut self) -> perfring::Result<()> {
        self.w
            .flush()
            .map_err(|e| perfring::Error::from_errno("write the JSON lines", e))
    }

    fn finish(&mut self) -> perfring::Result<()> {
        let pid = STATE.get().map_or(0, |s| s.pid);
        let summary = serde_json::json!({
            "type": "summary",
            "pid": pid,
            "overflows": TOTAL_AT_EXIT.load(SeqCst),
            "records": WRITTEN.load(SeqCst),
            "dropped": DROPPED.load(SeqCst),
        });
        writeln!(self.w, "{summary}")
            .and_then(|()| self.w.flush())
            .map_err(|e| perfring::Error::from_errno("write the JSON lines", e))
    }
}

fn cannot_open(output: &Path, e: impl std::fmt::Display) -> String {
    format!(
        "record: cannot open '{}': {e}. Fix: give a writable file with -o (PERFRING_OUTPUT)",
        output.display()
    )
}
