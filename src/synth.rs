//! Records for what existed before the counters did: a running process's threads
//! and mappings, and the kernel's text, which the kernel only reports as they are
//! created; and records re-laid for a file whose events place their ids alike.

use crate::error::Result;
use crate::records::{encode, Comm, Layout, Mmap, Mmap2, Mmap2File, Record, RecordKind};
use crate::space::KernelSymbols;
use crate::sys;

/// How synthesized records are stamped: the `sample_id` trailer they carry.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// The recording's layout, whose `sample_id_all` trailer the records carry.
    pub layout: &'a Layout,
    /// The id in the trailer: the recording's first counter id.
    pub id: u64,
    /// The time stamp, in the recording's clock (0: before everything).
    pub time: u64,
}

/// Appends to `out` a `PERF_RECORD_COMM` for each thread of process `pid` and a
/// `PERF_RECORD_MMAP2` for each of its executable file mappings, as `perf record -p`
/// synthesizes them, so readers can name the threads and symbolize addresses in code
/// mapped before recording began. The records' `sample_id` trailers follow
/// `stamp.layout` and carry `stamp.id` and the pid/tid.
///
/// # Errors
/// As [`proc::maps`](crate::proc::maps): no such process, or its maps may not be read.
pub fn synthesize_process(pid: u32, stamp: &Stamp<'_>, out: &mut Vec<u8>) -> Result<()> {
    synthesize(pid, stamp, false, out)
}

/// As [`synthesize_process`] for a process that has just `exec`ed: its `COMM` carries
/// `PERF_RECORD_MISC_COMM_EXEC`, as the kernel's does, so readers drop the mappings of
/// the image before it from `stamp.time` on.
///
/// # Errors
/// As [`synthesize_process`].
pub fn synthesize_exec(pid: u32, stamp: &Stamp<'_>, out: &mut Vec<u8>) -> Result<()> {
    synthesize(pid, stamp, true, out)
}

fn synthesize(pid: u32, stamp: &Stamp<'_>, exec: bool, out: &mut Vec<u8>) -> Result<()> {
    let maps = crate::proc::maps(pid as libc::pid_t)?;
    let (layout, id, time) = (stamp.layout, stamp.id, stamp.time);
    let ids = |tid: u32| encode::Ids {
        pid,
        tid,
        time,
        id,
        identifier: id,
        ..Default::default()
    };
    let user = sys::PERF_RECORD_MISC_USER as u16;
    let tids = crate::proc::threads(pid as libc::pid_t).unwrap_or_else(|_| vec![pid as i32]);
    for tid in tids {
        let name = crate::proc::comm(pid as libc::pid_t, tid).unwrap_or_default();
        let tid = tid as u32;
        let comm = Comm {
            pid,
            tid,
            comm: &name,
        };
        let misc = if exec && tid == pid {
            user | sys::PERF_RECORD_MISC_COMM_EXEC as u16
        } else {
            user
        };
        encode::record_kind(out, layout, misc, &RecordKind::Comm(comm), &ids(tid));
    }
    for m in maps.iter().filter(|m| m.exec) {
        let Some(path) = m.path() else { continue };
        let filename = path.as_os_str().as_encoded_bytes();
        let mmap = Mmap2 {
            pid,
            tid: pid,
            addr: m.start,
            len: m.end - m.start,
            pgoff: m.offset,
            file: Mmap2File::Inode {
                maj: m.dev.0,
                min: m.dev.1,
                ino: m.inode,
                ino_generation: 0,
            },
            prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
            flags: libc::MAP_PRIVATE as u32,
            filename,
        };
        encode::record_kind(out, layout, user, &RecordKind::Mmap2(mmap), &ids(pid));
    }
    Ok(())
}

/// Appends `record` (any non-sample record, e.g. a `MMAP2` or `COMM` from a tracking
/// counter opened with another `sample_type`) re-laid with `layout`'s `sample_id`
/// trailer and the id `id`, so that one file can describe it with the events' attr:
/// perf.data readers require every event of a file to place its id alike. Only the
/// trailer changes (pid, tid, time and cpu are kept). Returns false, appending nothing,
/// for samples and for record types the decoder does not know.
///
/// This re-encodes, so it is for the rare task records, not for samples.
pub fn relayout(record: &Record<'_>, layout: &Layout, id: u64, out: &mut Vec<u8>) -> bool {
    let kind = record.kind();
    if matches!(kind, RecordKind::Sample(_) | RecordKind::Unknown { .. }) {
        return false;
    }
    let sid = record.sample_id();
    let ids = encode::Ids {
        pid: sid.pid().unwrap_or(0),
        tid: sid.tid().unwrap_or(0),
        time: sid.time().unwrap_or(0),
        id,
        stream_id: id,
        cpu: sid.cpu().unwrap_or(0),
        res: 0,
        identifier: id,
    };
    encode::record_kind(out, layout, record.misc().0, kind, &ids);
    true
}

/// Appends the `PERF_RECORD_MMAP` that places the kernel's text (`[kernel.kallsyms]_text`,
/// from `_text` to `_etext` in `/proc/kallsyms`), as `perf record` synthesizes it, so
/// `perf report` resolves kernel samples from `/proc/kallsyms` and does not warn that
/// kernel maps are missing. Returns false (appending nothing) when the addresses are
/// hidden (`kptr_restrict`: they read as zero).
pub fn synthesize_kernel(layout: &Layout, id: u64, out: &mut Vec<u8>) -> bool {
    let Some((start, end)) = KernelSymbols::text() else {
        return false;
    };
    let ids = encode::Ids {
        pid: u32::MAX,
        id,
        identifier: id,
        ..Default::default()
    };
    let mmap = Mmap {
        pid: u32::MAX,
        tid: 0,
        addr: start,
        len: end - start,
        pgoff: start,
        filename: b"[kernel.kallsyms]_text",
    };
    encode::record_kind(
        out,
        layout,
        sys::PERF_RECORD_MISC_KERNEL as u16,
        &RecordKind::Mmap(mmap),
        &ids,
    );
    true
}
