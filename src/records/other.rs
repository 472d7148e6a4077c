//! The records other than samples: MMAP, COMM, FORK, LOST, THROTTLE, ...
//!
//! Each view holds the record's body fields (the `sample_id` trailer is on
//! [`Record`](super::Record)); numbers are copied out, names and byte arrays borrowed.
//! Layouts are those of the comments in `<linux/perf_event.h>`.

use zerocopy::{FromBytes, Immutable, KnownLayout};

use super::error::DecodeError;
use super::view::{until_nul, Array, ReadValues};
use crate::sys;

/// `PERF_RECORD_MMAP`: an executable mapping (`PROT_EXEC`, or data with `mmap_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset.
    pub pgoff: u64,
    /// The file name, up to its NUL.
    pub filename: &'a [u8],
}

/// What identifies an MMAP2 record's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mmap2File<'a> {
    /// Device and inode numbers.
    Inode {
        /// Major device number.
        maj: u32,
        /// Minor device number.
        min: u32,
        /// Inode number.
        ino: u64,
        /// Inode generation.
        ino_generation: u64,
    },
    /// `PERF_RECORD_MISC_MMAP_BUILD_ID`: the file's build id (at most 20 bytes).
    BuildId(&'a [u8]),
}

/// `PERF_RECORD_MMAP2`: a mapping, with file identity and protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mmap2<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset.
    pub pgoff: u64,
    /// Device/inode or build id.
    pub file: Mmap2File<'a>,
    /// `PROT_*`.
    pub prot: u32,
    /// `MAP_*`.
    pub flags: u32,
    /// The file name, up to its NUL.
    pub filename: &'a [u8],
}

/// `PERF_RECORD_COMM`: a thread's name changed (with `comm_exec` in misc: by exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The new name, up to its NUL.
    pub comm: &'a [u8],
}

/// `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Timestamp.
    pub time: u64,
}

/// `PERF_RECORD_LOST`: the ring was full and records were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// Id of the counter whose records were lost.
    pub id: u64,
    /// How many records were lost.
    pub lost: u64,
}

/// `PERF_RECORD_THROTTLE` and `PERF_RECORD_UNTHROTTLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Timestamp.
    pub time: u64,
    /// Counter id.
    pub id: u64,
    /// Stream id.
    pub stream_id: u64,
}

/// `PERF_RECORD_READ`: counter values at a task's exit (`inherit_stat`).
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The values, in `read_format`'s layout.
    pub values: ReadValues<'a>,
}

/// `PERF_RECORD_AUX`: new data in the AUX area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aux {
    /// Offset in the AUX area.
    pub aux_offset: u64,
    /// Size of the new data.
    pub aux_size: u64,
    /// `PERF_AUX_FLAG_*`.
    pub flags: u64,
}

/// `PERF_RECORD_ITRACE_START`: instruction tracing started in this task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItraceStart {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
}

/// `PERF_RECORD_LOST_SAMPLES`: samples the PMU dropped (not the ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostSamples {
    /// How many samples were lost.
    pub lost: u64,
}

/// `PERF_RECORD_SWITCH_CPU_WIDE`: a context switch, with the other task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchCpuWide {
    /// The next (switch out) or previous (switch in) process id.
    pub next_prev_pid: u32,
    /// The next or previous thread id.
    pub next_prev_tid: u32,
}

/// `PERF_RECORD_NAMESPACES`: a task's namespaces.
#[derive(Debug, Clone, Copy)]
pub struct Namespaces<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `{dev, ino}` per namespace, indexed by `*_NS_INDEX`.
    pub links: Array<'a, sys::perf_ns_link_info>,
}

/// `PERF_RECORD_KSYMBOL`: a kernel symbol was registered or unregistered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// `PERF_RECORD_KSYMBOL_TYPE_*`.
    pub ksym_type: u16,
    /// `PERF_RECORD_KSYMBOL_FLAGS_*`.
    pub flags: u16,
    /// The symbol name, up to its NUL.
    pub name: &'a [u8],
}

/// `PERF_RECORD_BPF_EVENT`: a BPF program was loaded or unloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfEvent {
    /// `PERF_BPF_EVENT_*`.
    pub event_type: u16,
    /// Flags.
    pub flags: u16,
    /// Program id.
    pub id: u32,
    /// Program tag.
    pub tag: [u8; 8],
}

/// `PERF_RECORD_CGROUP`: a cgroup was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cgroup<'a> {
    /// Cgroup id (as in `PERF_SAMPLE_CGROUP`).
    pub id: u64,
    /// The path, up to its NUL.
    pub path: &'a [u8],
}

/// `PERF_RECORD_TEXT_POKE`: kernel text was modified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextPoke<'a> {
    /// Address of the change.
    pub addr: u64,
    /// The bytes before.
    pub old_bytes: &'a [u8],
    /// The bytes after.
    pub new_bytes: &'a [u8],
}

/// `PERF_RECORD_AUX_OUTPUT_HW_ID`: the hardware id of the AUX output that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuxOutputHwId {
    /// The hardware id.
    pub hw_id: u64,
}

/// Reads fields from a body at offsets, reporting errors relative to the record.
pub(crate) struct Body<'a> {
    pub b: &'a [u8],
}

/// Where the body starts in the record.
const BASE: usize = 8;

impl<'a> Body<'a> {
    fn short(&self, field: &'static str, off: usize, needed: usize) -> DecodeError {
        DecodeError::truncated(field, BASE + off, needed, self.b.len().saturating_sub(off))
    }

    pub fn get<T: FromBytes + KnownLayout + Immutable>(
        &self,
        off: usize,
        field: &'static str,
    ) -> Result<T, DecodeError> {
        self.b
            .get(off..)
            .and_then(|r| T::read_from_prefix(r).ok())
            .map(|(v, _)| v)
            .ok_or_else(|| self.short(field, off, std::mem::size_of::<T>()))
    }

    pub fn bytes(
        &self,
        off: usize,
        n: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        self.b
            .get(off..)
            .and_then(|r| r.get(..n))
            .ok_or_else(|| self.short(field, off, n))
    }

    pub fn name(&self, off: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        self.b
            .get(off..)
            .map(until_nul)
            .ok_or_else(|| self.short(field, off, 1))
    }
}

pub(crate) fn mmap<'a>(b: &Body<'a>) -> Result<Mmap<'a>, DecodeError> {
    Ok(Mmap {
        pid: b.get(0, "mmap.pid")?,
        tid: b.get(4, "mmap.tid")?,
        addr: b.get(8, "mmap.addr")?,
        len: b.get(16, "mmap.len")?,
        pgoff: b.get(24, "mmap.pgoff")?,
        filename: b.name(32, "mmap.filename")?,
    })
}

pub(crate) fn mmap2<'a>(b: &Body<'a>, build_id: bool) -> Result<Mmap2<'a>, DecodeError> {
    let file = if build_id {
        let size: u8 = b.get(32, "mmap2.build_id_size")?;
        let id = b.bytes(36, 20, "mmap2.build_id")?;
        Mmap2File::BuildId(id.get(..usize::from(size)).unwrap_or(id))
    } else {
        Mmap2File::Inode {
            maj: b.get(32, "mmap2.maj")?,
            min: b.get(36, "mmap2.min")?,
            ino: b.get(40, "mmap2.ino")?,
            ino_generation: b.get(48, "mmap2.ino_generation")?,
        }
    };
    Ok(Mmap2 {
        pid: b.get(0, "mmap2.pid")?,
        tid: b.get(4, "mmap2.tid")?,
        addr: b.get(8, "mmap2.addr")?,
        len: b.get(16, "mmap2.len")?,
        pgoff: b.get(24, "mmap2.pgoff")?,
        file,
        prot: b.get(56, "mmap2.prot")?,
        flags: b.get(60, "mmap2.flags")?,
        filename: b.name(64, "mmap2.filename")?,
    })
}

pub(crate) fn comm<'a>(b: &Body<'a>) -> Result<Comm<'a>, DecodeError> {
    Ok(Comm {
        pid: b.get(0, "comm.pid")?,
        tid: b.get(4, "comm.tid")?,
        comm: b.name(8, "comm.comm")?,
    })
}

pub(crate) fn task(b: &Body<'_>) -> Result<Task, DecodeError> {
    Ok(Task {
        pid: b.get(0, "task.pid")?,
        ppid: b.get(4, "task.ppid")?,
        tid: b.get(8, "task.tid")?,
        ptid: b.get(12, "task.ptid")?,
        time: b.get(16, "task.time")?,
    })
}

pub(crate) fn lost(b: &Body<'_>) -> Result<Lost, DecodeError> {
    Ok(Lost {
        id: b.get(0, "lost.id")?,
        lost: b.get(8, "lost.lost")?,
    })
}

pub(crate) fn throttle(b: &Body<'_>) -> Result<Throttle, DecodeError> {
    Ok(Throttle {
        time: b.get(0, "throttle.time")?,
        id: b.get(8, "throttle.id")?,
        stream_id: b.get(16, "throttle.stream_id")?,
    })
}

pub(crate) fn read<'a>(b: &Body<'a>, read_format: u64) -> Result<Read<'a>, DecodeError> {
    let pid = b.get(0, "read.pid")?;
    let tid = b.get(4, "read.tid")?;
    let rest = b.b.get(8..).unwrap_or_default();
    let (values, _) = ReadValues::parse(rest, read_format).map_err(|e| {
        DecodeError::truncated(e.field(), BASE + 8 + e.offset(), e.needed(), e.available())
    })?;
    Ok(Read { pid, tid, values })
}

pub(crate) fn aux(b: &Body<'_>) -> Result<Aux, DecodeError> {
    Ok(Aux {
        aux_offset: b.get(0, "aux.aux_offset")?,
        aux_size: b.get(8, "aux.aux_size")?,
        flags: b.get(16, "aux.flags")?,
    })
}

pub(crate) fn itrace_start(b: &Body<'_>) -> Result<ItraceStart, DecodeError> {
    Ok(ItraceStart {
        pid: b.get(0, "itrace_start.pid")?,
        tid: b.get(4, "itrace_start.tid")?,
    })
}

pub(crate) fn lost_samples(b: &Body<'_>) -> Result<LostSamples, DecodeError> {
    Ok(LostSamples {
        lost: b.get(0, "lost_samples.lost")?,
    })
}

pub(crate) fn switch_cpu_wide(b: &Body<'_>) -> Result<SwitchCpuWide, DecodeError> {
    Ok(SwitchCpuWide {
        next_prev_pid: b.get(0, "switch_cpu_wide.next_prev_pid")?,
        next_prev_tid: b.get(4, "switch_cpu_wide.next_prev_tid")?,
    })
}

pub(crate) fn namespaces<'a>(b: &Body<'a>) -> Result<Namespaces<'a>, DecodeError> {
    let nr: u64 = b.get(8, "namespaces.nr_namespaces")?;
    let size = std::mem::size_of::<sys::perf_ns_link_info>();
    let n = usize::try_from(nr)
        .ok()
        .and_then(|nr| nr.checked_mul(size))
        .unwrap_or(usize::MAX);
    let links = b.bytes(16, n, "namespaces.link_info")?;
    Ok(Namespaces {
        pid: b.get(0, "namespaces.pid")?,
        tid: b.get(4, "namespaces.tid")?,
        links: Array::new_unchecked_len(links),
    })
}

pub(crate) fn ksymbol<'a>(b: &Body<'a>) -> Result<Ksymbol<'a>, DecodeError> {
    Ok(Ksymbol {
        addr: b.get(0, "ksymbol.addr")?,
        len: b.get(8, "ksymbol.len")?,
        ksym_type: b.get(12, "ksymbol.ksym_type")?,
        flags: b.get(14, "ksymbol.flags")?,
        name: b.name(16, "ksymbol.name")?,
    })
}

pub(crate) fn bpf_event(b: &Body<'_>) -> Result<BpfEvent, DecodeError> {
    Ok(BpfEvent {
        event_type: b.get(0, "bpf_event.type")?,
        flags: b.get(2, "bpf_event.flags")?,
        id: b.get(4, "bpf_event.id")?,
        tag: b.get(8, "bpf_event.tag")?,
    })
}

pub(crate) fn cgroup<'a>(b: &Body<'a>) -> Result<Cgroup<'a>, DecodeError> {
    Ok(Cgroup {
        id: b.get(0, "cgroup.id")?,
        path: b.name(8, "cgroup.path")?,
    })
}

pub(crate) fn text_poke<'a>(b: &Body<'a>) -> Result<TextPoke<'a>, DecodeError> {
    let old_len: u16 = b.get(8, "text_poke.old_len")?;
    let new_len: u16 = b.get(10, "text_poke.new_len")?;
    let old_bytes = b.bytes(12, usize::from(old_len), "text_poke.old_bytes")?;
    let new_bytes = b.bytes(
        12 + usize::from(old_len),
        usize::from(new_len),
        "text_poke.new_bytes",
    )?;
    Ok(TextPoke {
        addr: b.get(0, "text_poke.addr")?,
        old_bytes,
        new_bytes,
    })
}

pub(crate) fn aux_output_hw_id(b: &Body<'_>) -> Result<AuxOutputHwId, DecodeError> {
    Ok(AuxOutputHwId {
        hw_id: b.get(0, "aux_output_hw_id.hw_id")?,
    })
}
