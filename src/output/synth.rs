//! Records for what existed before the counters did: a running process's threads
//! and mappings, which the kernel only reports as they are created.

use crate::error::Result;
use crate::records::{encode, Comm, Layout, Mmap2, Mmap2File, RecordKind};
use crate::symbols::ProcessMaps;
use crate::sys;

/// Appends to `out` a `PERF_RECORD_COMM` for each thread of process `pid` and a
/// `PERF_RECORD_MMAP2` for each of its executable file mappings, as `perf record -p`
/// synthesizes them, so readers can name the threads and symbolize addresses in code
/// mapped before recording began. The records' `sample_id` trailers follow `layout`
/// and carry `id` (the recording's first counter id) and the pid/tid.
///
/// # Errors
/// As [`ProcessMaps::read`]: no such process, or its maps may not be read.
pub fn synthesize_process(pid: u32, layout: &Layout, id: u64, out: &mut Vec<u8>) -> Result<()> {
    let maps = ProcessMaps::read(pid as libc::pid_t)?;
    let ids = |tid: u32| encode::Ids {
        pid,
        tid,
        id,
        identifier: id,
        ..Default::default()
    };
    let user = sys::PERF_RECORD_MISC_USER as u16;
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_else(|_| vec![pid]);
    tids.sort_unstable();
    for tid in tids {
        let name = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        let name = name.strip_suffix(b"\n").unwrap_or(&name);
        let comm = Comm {
            pid,
            tid,
            comm: name,
        };
        encode::record_kind(out, layout, user, &RecordKind::Comm(comm), &ids(tid));
    }
    for m in maps.mappings().iter().filter(|m| m.executable) {
        let filename = m.path.as_os_str().as_encoded_bytes();
        let mmap = Mmap2 {
            pid,
            tid: pid,
            addr: m.start,
            len: m.end - m.start,
            pgoff: m.offset,
            file: Mmap2File::Inode {
                maj: 0,
                min: 0,
                ino: 0,
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
