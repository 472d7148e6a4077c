//! Writes records in the kernel's format, for tests, fuzzing and benchmarks.
//!
//! Every writer appends one whole record (header, body padded to 8 bytes, and the
//! `sample_id` trailer when the layout has `sample_id_all`) to a `Vec<u8>`. Fields
//! the layout does not record are skipped, as the kernel would. This module allocates
//! freely; it is not for the decode path.

use zerocopy::{Immutable, IntoBytes};

use super::layout::{Layout, FORMAT_LOST};
use super::other::{Mmap2File, Namespaces, Read};
use super::{ReadValue, RecordKind, Sample};
use crate::sys;

/// The id fields written into a sample or a `sample_id` trailer (each only if the
/// layout's `sample_type` records it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ids {
    /// `PERF_SAMPLE_TID`
    pub pid: u32,
    /// `PERF_SAMPLE_TID`
    pub tid: u32,
    /// `PERF_SAMPLE_TIME`
    pub time: u64,
    /// `PERF_SAMPLE_ID`
    pub id: u64,
    /// `PERF_SAMPLE_STREAM_ID`
    pub stream_id: u64,
    /// `PERF_SAMPLE_CPU`
    pub cpu: u32,
    /// `PERF_SAMPLE_CPU` (reserved word)
    pub res: u32,
    /// `PERF_SAMPLE_IDENTIFIER`
    pub identifier: u64,
}

/// A `read_format` block's contents.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadData {
    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`
    pub time_enabled: u64,
    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`
    pub time_running: u64,
    /// One per counter; a non-group block writes only the first (or zeros).
    pub values: Vec<ReadValue>,
}

/// Every field of a sample; [`sample`] writes those the layout records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SampleFields {
    /// `PERF_SAMPLE_IDENTIFIER`
    pub identifier: u64,
    /// `PERF_SAMPLE_IP`
    pub ip: u64,
    /// `PERF_SAMPLE_TID`
    pub pid: u32,
    /// `PERF_SAMPLE_TID`
    pub tid: u32,
    /// `PERF_SAMPLE_TIME`
    pub time: u64,
    /// `PERF_SAMPLE_ADDR`
    pub addr: u64,
    /// `PERF_SAMPLE_ID`
    pub id: u64,
    /// `PERF_SAMPLE_STREAM_ID`
    pub stream_id: u64,
    /// `PERF_SAMPLE_CPU`
    pub cpu: u32,
    /// `PERF_SAMPLE_CPU` (reserved word)
    pub res: u32,
    /// `PERF_SAMPLE_PERIOD`
    pub period: u64,
    /// `PERF_SAMPLE_READ`
    pub read: ReadData,
    /// `PERF_SAMPLE_CALLCHAIN`
    pub callchain: Vec<u64>,
    /// `PERF_SAMPLE_RAW`: zero-padded so that `4 + len` is a multiple of 8.
    pub raw: Vec<u8>,
    /// `PERF_SAMPLE_BRANCH_STACK` with `PERF_SAMPLE_BRANCH_HW_INDEX`
    pub branch_hw_idx: u64,
    /// `PERF_SAMPLE_BRANCH_STACK`: `{from, to, flags word}` per entry.
    pub branches: Vec<[u64; 3]>,
    /// `PERF_SAMPLE_BRANCH_COUNTERS`: one per branch (missing ones are written as 0).
    pub branch_counters: Vec<u64>,
    /// `PERF_SAMPLE_REGS_USER`: the ABI; with `NONE` (0) no registers are written.
    pub regs_user_abi: u64,
    /// `PERF_SAMPLE_REGS_USER`: the values, one per mask bit.
    pub regs_user: Vec<u64>,
    /// `PERF_SAMPLE_STACK_USER`: zero-padded to 8 bytes.
    pub stack_user: Vec<u8>,
    /// `PERF_SAMPLE_STACK_USER`: written only if `stack_user` is not empty.
    pub stack_user_dyn_size: u64,
    /// `PERF_SAMPLE_WEIGHT` / `PERF_SAMPLE_WEIGHT_STRUCT`
    pub weight: u64,
    /// `PERF_SAMPLE_DATA_SRC`
    pub data_src: u64,
    /// `PERF_SAMPLE_TRANSACTION`
    pub transaction: u64,
    /// `PERF_SAMPLE_REGS_INTR`: the ABI.
    pub regs_intr_abi: u64,
    /// `PERF_SAMPLE_REGS_INTR`: the values.
    pub regs_intr: Vec<u64>,
    /// `PERF_SAMPLE_PHYS_ADDR`
    pub phys_addr: u64,
    /// `PERF_SAMPLE_CGROUP`
    pub cgroup: u64,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`
    pub data_page_size: u64,
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`
    pub code_page_size: u64,
    /// `PERF_SAMPLE_AUX`: zero-padded to 8 bytes.
    pub aux: Vec<u8>,
}

impl SampleFields {
    /// The fields of a decoded sample (absent ones are 0 or empty), so that
    /// [`sample`] can write it again.
    pub fn from_sample(s: &Sample<'_>) -> Self {
        let (regs_user_abi, regs_user) = s
            .regs_user()
            .map(|r| (r.abi, r.regs.iter().collect()))
            .unwrap_or_default();
        let (regs_intr_abi, regs_intr) = s
            .regs_intr()
            .map(|r| (r.abi, r.regs.iter().collect()))
            .unwrap_or_default();
        let branch = s.branch_stack();
        let stack = s.stack_user();
        SampleFields {
            identifier: s.identifier().unwrap_or(0),
            ip: s.ip().unwrap_or(0),
            pid: s.pid().unwrap_or(0),
            tid: s.tid().unwrap_or(0),
            time: s.time().unwrap_or(0),
            addr: s.addr().unwrap_or(0),
            id: s.id().unwrap_or(0),
            stream_id: s.stream_id().unwrap_or(0),
            cpu: s.cpu().unwrap_or(0),
            res: s.cpu_res().unwrap_or(0),
            period: s.period().unwrap_or(0),
            read: s
                .read()
                .map(|r| ReadData {
                    time_enabled: r.time_enabled().unwrap_or(0),
                    time_running: r.time_running().unwrap_or(0),
                    values: r.iter().collect(),
                })
                .unwrap_or_default(),
            callchain: s
                .callchain()
                .map(|c| c.iter().collect())
                .unwrap_or_default(),
            raw: s.raw().map(<[u8]>::to_vec).unwrap_or_default(),
            branch_hw_idx: branch.and_then(|b| b.hw_idx).unwrap_or(0),
            branches: branch
                .map(|b| {
                    b.entries
                        .iter()
                        .map(|e| {
                            zerocopy::FromBytes::read_from_bytes(e.as_bytes()).unwrap_or([0; 3])
                        })
                        .collect()
                })
                .unwrap_or_default(),
            branch_counters: branch
                .and_then(|b| b.counters)
                .map(|c| c.iter().collect())
                .unwrap_or_default(),
            regs_user_abi,
            regs_user,
            stack_user: stack.map(|s| s.data.to_vec()).unwrap_or_default(),
            stack_user_dyn_size: stack.and_then(|s| s.dyn_size).unwrap_or(0),
            weight: s.weight().unwrap_or(0),
            data_src: s.data_src().unwrap_or(0),
            transaction: s.transaction().unwrap_or(0),
            regs_intr_abi,
            regs_intr,
            phys_addr: s.phys_addr().unwrap_or(0),
            cgroup: s.cgroup().unwrap_or(0),
            data_page_size: s.data_page_size().unwrap_or(0),
            code_page_size: s.code_page_size().unwrap_or(0),
            aux: s.aux().map(<[u8]>::to_vec).unwrap_or_default(),
        }
    }
}

fn put<T: IntoBytes + Immutable>(out: &mut Vec<u8>, v: T) {
    out.extend_from_slice(v.as_bytes());
}

/// Appends `data`, then zeros up to a multiple of 8 (records start 8-aligned in `out`).
fn put_padded(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
}

/// Rounds `n` up to a multiple of 8.
fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Starts a record: its header with size 0, returning where it starts.
fn begin(out: &mut Vec<u8>, record_type: u32, misc: u16) -> usize {
    let start = out.len();
    put(
        out,
        sys::perf_event_header {
            type_: record_type,
            misc,
            size: 0,
        },
    );
    start
}

/// Ends a record: pads it to 8 bytes and writes its size.
///
/// # Panics
/// If the record is longer than 65535 bytes (the kernel's `u16` size).
fn finish(out: &mut Vec<u8>, start: usize) {
    // Records are built from an 8-aligned start; keep them 8-multiples.
    while !(out.len() - start).is_multiple_of(8) {
        out.push(0);
    }
    let size = u16::try_from(out.len() - start).expect("a perf record is at most 65535 bytes");
    out[start + 6..start + 8].copy_from_slice(&size.to_ne_bytes());
}

/// Appends the `read_format` block for `data`.
pub fn read_values(out: &mut Vec<u8>, read_format: u64, data: &ReadData) {
    let has = |bit: u32| read_format & u64::from(bit) != 0;
    let entry = |out: &mut Vec<u8>, v: &ReadValue| {
        put(out, v.value);
        if has(sys::PERF_FORMAT_ID) {
            put(out, v.id.unwrap_or(0));
        }
        if read_format & FORMAT_LOST != 0 {
            put(out, v.lost.unwrap_or(0));
        }
    };
    let times = |out: &mut Vec<u8>| {
        if has(sys::PERF_FORMAT_TOTAL_TIME_ENABLED) {
            put(out, data.time_enabled);
        }
        if has(sys::PERF_FORMAT_TOTAL_TIME_RUNNING) {
            put(out, data.time_running);
        }
    };
    if has(sys::PERF_FORMAT_GROUP) {
        put(out, data.values.len() as u64);
        times(out);
        for v in &data.values {
            entry(out, v);
        }
    } else {
        let v = data.values.first().copied().unwrap_or_default();
        put(out, v.value);
        times(out);
        if has(sys::PERF_FORMAT_ID) {
            put(out, v.id.unwrap_or(0));
        }
        if read_format & FORMAT_LOST != 0 {
            put(out, v.lost.unwrap_or(0));
        }
    }
}

/// Appends a `PERF_RECORD_SAMPLE` with the fields `layout` records.
///
/// # Panics
/// If the sample is longer than 65535 bytes.
pub fn sample(out: &mut Vec<u8>, layout: &Layout, misc: u16, f: &SampleFields) {
    let has = |bit: u32| layout.has(bit);
    let start = begin(out, sys::PERF_RECORD_SAMPLE, misc);
    if has(sys::PERF_SAMPLE_IDENTIFIER) {
        put(out, f.identifier);
    }
    if has(sys::PERF_SAMPLE_IP) {
        put(out, f.ip);
    }
    if has(sys::PERF_SAMPLE_TID) {
        put(out, [f.pid, f.tid]);
    }
    if has(sys::PERF_SAMPLE_TIME) {
        put(out, f.time);
    }
    if has(sys::PERF_SAMPLE_ADDR) {
        put(out, f.addr);
    }
    if has(sys::PERF_SAMPLE_ID) {
        put(out, f.id);
    }
    if has(sys::PERF_SAMPLE_STREAM_ID) {
        put(out, f.stream_id);
    }
    if has(sys::PERF_SAMPLE_CPU) {
        put(out, [f.cpu, f.res]);
    }
    if has(sys::PERF_SAMPLE_PERIOD) {
        put(out, f.period);
    }
    if has(sys::PERF_SAMPLE_READ) {
        read_values(out, layout.read_format, &f.read);
    }
    if has(sys::PERF_SAMPLE_CALLCHAIN) {
        put(out, f.callchain.len() as u64);
        out.extend_from_slice(f.callchain.as_bytes());
    }
    if has(sys::PERF_SAMPLE_RAW) {
        let size = pad8(f.raw.len() + 4) - 4;
        put(out, size as u32);
        put_padded(out, &f.raw);
    }
    if has(sys::PERF_SAMPLE_BRANCH_STACK) {
        put(out, f.branches.len() as u64);
        if layout.branch_hw_index() {
            put(out, f.branch_hw_idx);
        }
        for b in &f.branches {
            put(out, *b);
        }
        if layout.branch_counters() {
            for i in 0..f.branches.len() {
                put(out, f.branch_counters.get(i).copied().unwrap_or(0));
            }
        }
    }
    let regs = |out: &mut Vec<u8>, abi: u64, regs: &[u64]| {
        put(out, abi);
        if abi != u64::from(sys::PERF_SAMPLE_REGS_ABI_NONE) {
            out.extend_from_slice(regs.as_bytes());
        }
    };
    if has(sys::PERF_SAMPLE_REGS_USER) {
        regs(out, f.regs_user_abi, &f.regs_user);
    }
    if has(sys::PERF_SAMPLE_STACK_USER) {
        put(out, pad8(f.stack_user.len()) as u64);
        put_padded(out, &f.stack_user);
        if !f.stack_user.is_empty() {
            put(out, f.stack_user_dyn_size);
        }
    }
    if layout.sample_type & sys::PERF_SAMPLE_WEIGHT_TYPE != 0 {
        put(out, f.weight);
    }
    if has(sys::PERF_SAMPLE_DATA_SRC) {
        put(out, f.data_src);
    }
    if has(sys::PERF_SAMPLE_TRANSACTION) {
        put(out, f.transaction);
    }
    if has(sys::PERF_SAMPLE_REGS_INTR) {
        regs(out, f.regs_intr_abi, &f.regs_intr);
    }
    if has(sys::PERF_SAMPLE_PHYS_ADDR) {
        put(out, f.phys_addr);
    }
    if has(sys::PERF_SAMPLE_CGROUP) {
        put(out, f.cgroup);
    }
    if has(sys::PERF_SAMPLE_DATA_PAGE_SIZE) {
        put(out, f.data_page_size);
    }
    if has(sys::PERF_SAMPLE_CODE_PAGE_SIZE) {
        put(out, f.code_page_size);
    }
    if has(sys::PERF_SAMPLE_AUX) {
        put(out, pad8(f.aux.len()) as u64);
        put_padded(out, &f.aux);
    }
    finish(out, start);
}

/// Appends the `sample_id` trailer (nothing without `sample_id_all`).
fn trailer(out: &mut Vec<u8>, layout: &Layout, ids: &Ids) {
    if !layout.sample_id_all {
        return;
    }
    let has = |bit: u32| layout.has(bit);
    if has(sys::PERF_SAMPLE_TID) {
        put(out, [ids.pid, ids.tid]);
    }
    if has(sys::PERF_SAMPLE_TIME) {
        put(out, ids.time);
    }
    if has(sys::PERF_SAMPLE_ID) {
        put(out, ids.id);
    }
    if has(sys::PERF_SAMPLE_STREAM_ID) {
        put(out, ids.stream_id);
    }
    if has(sys::PERF_SAMPLE_CPU) {
        put(out, [ids.cpu, ids.res]);
    }
    if has(sys::PERF_SAMPLE_IDENTIFIER) {
        put(out, ids.identifier);
    }
}

/// Appends a record of any type from its body bytes: header, `body` zero-padded to 8
/// bytes, then the `sample_id` trailer.
///
/// # Panics
/// If the record is longer than 65535 bytes.
pub fn record(
    out: &mut Vec<u8>,
    layout: &Layout,
    record_type: u32,
    misc: u16,
    body: &[u8],
    ids: &Ids,
) {
    let start = begin(out, record_type, misc);
    out.extend_from_slice(body);
    while !(out.len() - start).is_multiple_of(8) {
        out.push(0);
    }
    trailer(out, layout, ids);
    finish(out, start);
}

/// A NUL-terminated name (zero-padded by [`record`]).
fn name(body: &mut Vec<u8>, s: &[u8]) {
    body.extend_from_slice(s);
    body.push(0);
}

/// Appends any non-sample record from its view (e.g. `RecordKind::Comm(Comm { .. })`)
/// and the ids for its trailer. For `RecordKind::Sample` use [`sample`]; this writes
/// nothing for it. `RecordKind::Unknown`'s bytes are written as they are (they
/// include the trailer).
///
/// # Panics
/// If the record is longer than 65535 bytes.
pub fn record_kind(
    out: &mut Vec<u8>,
    layout: &Layout,
    misc: u16,
    kind: &RecordKind<'_>,
    ids: &Ids,
) {
    let mut b = Vec::new();
    let ty = match kind {
        RecordKind::Sample(_) => return,
        RecordKind::Unknown {
            record_type, bytes, ..
        } => {
            let start = begin(out, *record_type, misc);
            out.extend_from_slice(bytes);
            finish(out, start);
            return;
        }
        RecordKind::Mmap(m) => {
            put(&mut b, [m.pid, m.tid]);
            put(&mut b, [m.addr, m.len, m.pgoff]);
            name(&mut b, m.filename);
            sys::PERF_RECORD_MMAP
        }
        RecordKind::Lost(l) => {
            put(&mut b, [l.id, l.lost]);
            sys::PERF_RECORD_LOST
        }
        RecordKind::Comm(c) => {
            put(&mut b, [c.pid, c.tid]);
            name(&mut b, c.comm);
            sys::PERF_RECORD_COMM
        }
        RecordKind::Exit(t) | RecordKind::Fork(t) => {
            put(&mut b, [t.pid, t.ppid, t.tid, t.ptid]);
            put(&mut b, t.time);
            if matches!(kind, RecordKind::Exit(_)) {
                sys::PERF_RECORD_EXIT
            } else {
                sys::PERF_RECORD_FORK
            }
        }
        RecordKind::Throttle(t) | RecordKind::Unthrottle(t) => {
            put(&mut b, [t.time, t.id, t.stream_id]);
            if matches!(kind, RecordKind::Throttle(_)) {
                sys::PERF_RECORD_THROTTLE
            } else {
                sys::PERF_RECORD_UNTHROTTLE
            }
        }
        RecordKind::Read(Read { pid, tid, values }) => {
            put(&mut b, [*pid, *tid]);
            b.extend_from_slice(values.as_bytes());
            sys::PERF_RECORD_READ
        }
        RecordKind::Mmap2(m) => {
            put(&mut b, [m.pid, m.tid]);
            put(&mut b, [m.addr, m.len, m.pgoff]);
            match m.file {
                Mmap2File::Inode {
                    maj,
                    min,
                    ino,
                    ino_generation,
                } => {
                    put(&mut b, [maj, min]);
                    put(&mut b, [ino, ino_generation]);
                }
                Mmap2File::BuildId(id) => {
                    let mut u = [0u8; 24];
                    let n = id.len().min(20);
                    u[0] = n as u8;
                    u[4..4 + n].copy_from_slice(&id[..n]);
                    b.extend_from_slice(&u);
                }
            }
            put(&mut b, [m.prot, m.flags]);
            name(&mut b, m.filename);
            sys::PERF_RECORD_MMAP2
        }
        RecordKind::Aux(a) => {
            put(&mut b, [a.aux_offset, a.aux_size, a.flags]);
            sys::PERF_RECORD_AUX
        }
        RecordKind::ItraceStart(i) => {
            put(&mut b, [i.pid, i.tid]);
            sys::PERF_RECORD_ITRACE_START
        }
        RecordKind::LostSamples(l) => {
            put(&mut b, l.lost);
            sys::PERF_RECORD_LOST_SAMPLES
        }
        RecordKind::Switch => sys::PERF_RECORD_SWITCH,
        RecordKind::SwitchCpuWide(s) => {
            put(&mut b, [s.next_prev_pid, s.next_prev_tid]);
            sys::PERF_RECORD_SWITCH_CPU_WIDE
        }
        RecordKind::Namespaces(Namespaces { pid, tid, links }) => {
            put(&mut b, [*pid, *tid]);
            put(&mut b, links.len() as u64);
            b.extend_from_slice(links.as_bytes());
            sys::PERF_RECORD_NAMESPACES
        }
        RecordKind::Ksymbol(k) => {
            put(&mut b, k.addr);
            put(&mut b, k.len);
            put(&mut b, [k.ksym_type, k.flags]);
            name(&mut b, k.name);
            sys::PERF_RECORD_KSYMBOL
        }
        RecordKind::BpfEvent(e) => {
            put(&mut b, [e.event_type, e.flags]);
            put(&mut b, e.id);
            put(&mut b, e.tag);
            sys::PERF_RECORD_BPF_EVENT
        }
        RecordKind::Cgroup(c) => {
            put(&mut b, c.id);
            name(&mut b, c.path);
            sys::PERF_RECORD_CGROUP
        }
        RecordKind::TextPoke(t) => {
            put(&mut b, t.addr);
            put(&mut b, [t.old_bytes.len() as u16, t.new_bytes.len() as u16]);
            b.extend_from_slice(t.old_bytes);
            b.extend_from_slice(t.new_bytes);
            sys::PERF_RECORD_TEXT_POKE
        }
        RecordKind::AuxOutputHwId(h) => {
            put(&mut b, h.hw_id);
            sys::PERF_RECORD_AUX_OUTPUT_HW_ID
        }
    };
    record(out, layout, ty, misc, &b, ids);
}

/// Appends a `PERF_RECORD_LOST`.
pub fn lost(out: &mut Vec<u8>, layout: &Layout, misc: u16, id: u64, lost: u64, ids: &Ids) {
    record_kind(
        out,
        layout,
        misc,
        &RecordKind::Lost(super::Lost { id, lost }),
        ids,
    );
}

/// Appends a `PERF_RECORD_COMM`.
pub fn comm(
    out: &mut Vec<u8>,
    layout: &Layout,
    misc: u16,
    pid: u32,
    tid: u32,
    comm: &[u8],
    ids: &Ids,
) {
    record_kind(
        out,
        layout,
        misc,
        &RecordKind::Comm(super::Comm { pid, tid, comm }),
        ids,
    );
}
