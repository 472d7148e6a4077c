//! The background writer: every 10 ms, and once more at exit, it drains every
//! thread's record buffer and appends one JSON line per overflow to the output file,
//! in the shape of `perfring watch --json` overflow lines (plus `stack`), then a
//! summary line at exit. Normal context: it may allocate, lock and symbolize.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use perfring::symbols::AddressSpace;
use serde_json::{json, Value};

use crate::buffers::{Entry, CAP};
use crate::{State, STATE};

static STOP: AtomicBool = AtomicBool::new(false);
static WRITER: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Opens `output` (appending: an exec'd or forked program shares the file) and starts
/// the writer thread.
pub(crate) fn start(output: &Path) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(output)
        .map_err(|e| {
            format!(
                "record: cannot open '{}': {e}. Fix: give a writable file with -o \
                 (PERFRING_OUTPUT)",
                output.display()
            )
        })?;
    let h = std::thread::Builder::new()
        .name("perfring-inject".into())
        .spawn(move || run(file))
        .map_err(|e| format!("record: cannot start the writer thread: {e}"))?;
    *WRITER.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    Ok(())
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

static TOTAL_AT_EXIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Out {
    w: BufWriter<File>,
    space: Option<AddressSpace>,
    seq: u64,
    /// Events counted so far per event (sum of periods), as `watch`'s `total`.
    totals: Vec<u64>,
    written: u64,
}

impl Out {
    fn line(&mut self, st: &State, e: &Entry) {
        self.seq += 1;
        let i = e.event as usize;
        let period = st.period;
        if let (Some(t), Some(p)) = (self.totals.get_mut(i), period) {
            *t = t.saturating_add(p);
        }
        let sym = self
            .space
            .as_mut()
            .and_then(|s| s.locate(e.ip))
            .and_then(|l| l.symbol);
        let n = (e.nframes as usize).min(e.frames.len());
        let stack: Vec<Value> = e.frames[..n]
            .iter()
            .map(|a| Value::String(format!("{a:#x}")))
            .collect();
        let v = json!({
            "type": "overflow",
            "seq": self.seq,
            "event": st.names.get(i).map(String::as_str).unwrap_or("?"),
            "pid": st.pid,
            "tid": e.tid,
            "cpu": null,
            "time_ns": e.time_ns,
            "ip": format!("{:#x}", e.ip),
            "sym": sym.as_ref().map(|s| s.0.clone()),
            "sym_off": sym.as_ref().map(|s| s.1),
            "period": period,
            "total": period.and(self.totals.get(i).copied()),
            "stack": stack,
        });
        let _ = writeln!(self.w, "{v}");
        self.written += 1;
    }
}

/// Drains every slot; frees the slots of threads that have exited. Returns the
/// records dropped by freed slots.
fn drain_all(st: &State, out: &mut Out, dropped: &mut u64) {
    let Some(pool) = &st.pool else { return };
    for slot in pool.slots() {
        let tid = slot.tid.load(SeqCst);
        if tid == 0 {
            continue;
        }
        slot.drain(|e| out.line(st, e));
        // SAFETY: tgkill with signal 0 only checks that the thread exists.
        let gone = unsafe { libc::syscall(libc::SYS_tgkill, st.pid, tid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            // The thread is gone, so nothing pushes any more: take the rest, free it.
            slot.drain(|e| out.line(st, e));
            *dropped += slot.dropped.swap(0, SeqCst);
            slot.tid.store(0, SeqCst);
        }
    }
}

fn run(file: File) {
    let Some(st) = STATE.get() else { return };
    let mut out = Out {
        w: BufWriter::new(file),
        space: AddressSpace::new(st.pid).ok(),
        seq: 0,
        totals: vec![0; st.names.len()],
        written: 0,
    };
    let mut dropped = 0u64;
    loop {
        let stopping = STOP.load(SeqCst);
        drain_all(st, &mut out, &mut dropped);
        let _ = out.w.flush();
        if stopping {
            break;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
    if let Some(pool) = &st.pool {
        for slot in pool.slots() {
            dropped += slot.dropped.swap(0, SeqCst);
        }
    }
    let summary = json!({
        "type": "summary",
        "pid": st.pid,
        "overflows": TOTAL_AT_EXIT.load(SeqCst),
        "records": out.written,
        "dropped": dropped,
    });
    let _ = writeln!(out.w, "{summary}");
    let _ = out.w.flush();
    if dropped > 0 {
        eprintln!(
            "perfring-inject: {dropped} records dropped: a thread's buffer ({CAP} records) \
             filled faster than the writer emptied it. Fix: raise the period (-c) or lower \
             the frequency (-F)"
        );
    }
}
