//! The background writer: every 10 ms, and once more at exit, it drains every
//! thread's record buffer and appends one JSON line per overflow to the output file,
//! in the shape of `perfring watch --json` overflow lines (plus `stack`), then a
//! summary line at exit. Normal context: it may allocate, lock and symbolize.

use std::collections::HashMap;
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
    /// Rendered `"sym":…,"sym_off":…` per address.
    syms: HashMap<u64, String>,
    /// Each event's name as a JSON string.
    events: Vec<String>,
}

impl Out {
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
        let n = (e.nframes as usize).min(e.frames.len());
        for (k, a) in e.frames[..n].iter().enumerate() {
            if k > 0 {
                w.write_all(b",")?;
            }
            write!(w, "\"{a:#x}\"")?;
        }
        w.write_all(b"]}\n")?;
        self.written += 1;
        Ok(())
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
        slot.drain(|e| {
            let _ = out.line(st, e);
        });
        // SAFETY: tgkill with signal 0 only checks that the thread exists.
        let gone = unsafe { libc::syscall(libc::SYS_tgkill, st.pid, tid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            // The thread is gone, so nothing pushes any more: take the rest, free it.
            slot.drain(|e| {
                let _ = out.line(st, e);
            });
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
        syms: HashMap::new(),
        events: st
            .names
            .iter()
            .map(|n| Value::String(n.clone()).to_string())
            .collect(),
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
