//! Call stacks of samples, one path for both call-graph modes.
//!
//! - **Frame pointers** ([`CallGraph::Fp`]): the kernel walks the frame-pointer chain
//!   (`PERF_SAMPLE_CALLCHAIN`). That walk starts from `rbp`, which at a function's first
//!   instructions (before `push rbp; mov rbp, rsp` — an execute breakpoint on the
//!   function fires exactly there), in its epilogue, and in leaves that set up no frame
//!   at all (most of libc's string functions) is still the *caller's* frame: the chain
//!   then skips the direct caller. So each sample also carries the user registers and
//!   the top [`FP_STACK_BYTES`] of the user stack, and [`Unwinder`] decides the first
//!   frame with the file's CFI (`.eh_frame`) through [`framehop`]: if the return address
//!   it finds is not the chain's second entry, it is the missing caller and goes in.
//! - **DWARF** ([`CallGraph::Dwarf`]): the kernel copies `stack_bytes` of the user stack
//!   with the user registers (perf's mask), and the whole user stack is unwound here
//!   with framehop over each mapped file's `.eh_frame`/`.eh_frame_hdr`/`.debug_frame`;
//!   the kernel part still comes from the callchain (`exclude_callchain_user`), as with
//!   `perf record --call-graph dwarf`, whose `sample_type` this is.
//!
//! [`Unwinder::sample_frames`] tells the two apart by the sample itself (a callchain with
//! a user part is a frame-pointer one), so it unwinds `perf record`'s files too.
//! Load biases come from [`ElfFile::bias_of_mapping`], the crate's one rule.
//!
//! # Examples
//! ```no_run
//! use perfring::unwind::{CallGraph, Unwinder};
//! use perfring::space::AddressSpaces;
//! use perfring::symbolize::Symbolizer;
//!
//! let graph: CallGraph = "dwarf,16384".parse()?;
//! let builder = graph
//!     .configure(perfring::Counter::builder("cpu-clock:u")?.period(100_000))
//!     .track_tasks(true); // MMAP2, COMM, FORK, EXIT for the address spaces
//! let (mut spaces, mut unwinder, mut names) = (AddressSpaces::new(), Unwinder::new(), Symbolizer::new());
//! // For each record drained: spaces.observe(&record); then for a sample `s`:
//! // let mut raw = Vec::new();
//! // unwinder.sample_frames(&spaces, &s, &mut raw);
//! // let frames = names.frames(&spaces, s.pid().unwrap(), &raw);
//! # let _ = (builder, &mut spaces, &mut unwinder, &mut names);
//! # Ok::<(), perfring::Error>(())
//! ```

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module,
    UnwindRegsNative, Unwinder as _, UnwinderNative,
};
use object::{Object, ObjectSection};

use crate::elf::ElfFile;
use crate::records::{Regs, Sample, UserStack};
use crate::space::AddressSpaces;
use crate::{sys, Builder, Error, ErrorKind, Result, SampleType};

/// The deepest stack returned; deeper ones are cut (perf's default `kernel.perf_event_max_stack`).
pub const MAX_DEPTH: usize = 127;
/// User stack bytes copied per sample by `--call-graph dwarf` without a size (perf's default).
pub const DEFAULT_STACK_BYTES: u32 = 8192;

/// User stack bytes copied per sample in frame-pointer mode, for the first frame's
/// CFI: what a function's entry, its epilogue or a frameless leaf has pushed below its
/// return address. (A leaf with a bigger frame keeps the kernel's chain as it is.)
pub const FP_STACK_BYTES: u32 = 512;

/// The user registers the unwinder reads (ip, sp, bp), as a `sample_regs_user` mask:
/// what frame-pointer mode asks for.
#[cfg(target_arch = "x86_64")]
pub const UNWIND_REGS: u64 =
    (1 << sys::PERF_REG_X86_IP) | (1 << sys::PERF_REG_X86_SP) | (1 << sys::PERF_REG_X86_BP);
/// The user registers the unwinder reads: none known on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub const UNWIND_REGS: u64 = 0;

/// The user registers DWARF mode asks for: perf's `PERF_REGS_MASK` (every general
/// register but the segment ones), so that `perf report` unwinds perfring's perf.data
/// exactly as its own.
#[cfg(target_arch = "x86_64")]
pub const DWARF_REGS: u64 = ((1 << sys::PERF_REG_X86_64_MAX) - 1)
    & !((1 << sys::PERF_REG_X86_DS)
        | (1 << sys::PERF_REG_X86_ES)
        | (1 << sys::PERF_REG_X86_FS)
        | (1 << sys::PERF_REG_X86_GS));
/// The user registers DWARF mode asks for: none known on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub const DWARF_REGS: u64 = 0;

/// How samples get their call stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallGraph {
    /// `PERF_SAMPLE_CALLCHAIN`: the kernel walks frame pointers (user code must keep
    /// them: `-fno-omit-frame-pointer`, `-C force-frame-pointers=yes`), plus the user
    /// registers and [`FP_STACK_BYTES`] of stack, from which the file's CFI decides the
    /// first frame (see the module docs).
    Fp,
    /// `PERF_SAMPLE_REGS_USER` + `PERF_SAMPLE_STACK_USER`: the kernel copies
    /// `stack_bytes` of the user stack, unwound here with the files' CFI; the kernel
    /// part still comes from a callchain (`exclude_callchain_user`).
    Dwarf {
        /// Bytes of stack copied per sample (a multiple of 8, at most 65528).
        stack_bytes: u32,
    },
}

impl std::str::FromStr for CallGraph {
    type Err = Error;

    /// `fp`, `dwarf` or `dwarf,BYTES`, as perf's `--call-graph`.
    fn from_str(s: &str) -> Result<CallGraph> {
        let bad = |why: String| {
            Error::new(ErrorKind::BadEvent, format!("parse call graph '{s}'"), why)
                .with_fix("write fp, dwarf or dwarf,BYTES (BYTES a multiple of 8 up to 65528)")
        };
        let (mode, size) = match s.split_once(',') {
            Some((m, n)) => (m, Some(n)),
            None => (s, None),
        };
        match (mode, size) {
            ("fp", None) => Ok(CallGraph::Fp),
            ("dwarf", None) => Ok(CallGraph::Dwarf {
                stack_bytes: DEFAULT_STACK_BYTES,
            }),
            ("dwarf", Some(n)) => {
                let n: u32 = n
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("'{n}' is not a number of bytes")))?;
                if n == 0 || !n.is_multiple_of(8) || n > 65528 {
                    return Err(bad(format!(
                        "{n} bytes: the kernel copies a multiple of 8 bytes, 8 to 65528"
                    )));
                }
                Ok(CallGraph::Dwarf { stack_bytes: n })
            }
            ("fp", Some(_)) => Err(bad("fp takes no size".into())),
            _ => Err(bad(format!("'{mode}' is not a call graph mode"))),
        }
    }
}

impl CallGraph {
    /// Adds what this mode samples to `builder`'s `sample_type` (keeping the rest), and
    /// its registers and stack size: the one place either mode is configured.
    ///
    /// [`AddressSpaces`] also needs `MMAP2`/`COMM`/`FORK`/`EXIT` records: ask for them
    /// on this counter with [`Builder::track_tasks`], or get them from a tracking
    /// counter (the [`Sampler`](crate::sampler::Sampler) opens one).
    ///
    /// # Errors
    /// [`ErrorKind::Unsupported`] for `dwarf` on an architecture whose registers
    /// perfring does not know (only x86_64 is done).
    pub fn configure_checked(self, builder: Builder) -> Result<Builder> {
        if matches!(self, CallGraph::Dwarf { .. }) && DWARF_REGS == 0 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "set up DWARF unwinding",
                format!(
                    "perfring knows the unwinding registers of x86_64 only, not {}",
                    std::env::consts::ARCH
                ),
            )
            .with_fix("use --call-graph fp"));
        }
        Ok(self.configure(builder))
    }

    /// As [`configure_checked`](Self::configure_checked); on an architecture without
    /// known registers, `dwarf` samples no user stack and stacks have kernel frames only,
    /// and `fp` keeps the kernel's chain as it is.
    pub fn configure(self, builder: Builder) -> Builder {
        let current = SampleType::from_bits(builder.attr().sample_type);
        let mut b = builder;
        match self {
            CallGraph::Fp if UNWIND_REGS == 0 => {
                b.sample(current | SampleType::TID | SampleType::CALLCHAIN)
            }
            CallGraph::Fp => b
                .sample(
                    current
                        | SampleType::TID
                        | SampleType::CALLCHAIN
                        | SampleType::REGS_USER
                        | SampleType::STACK_USER,
                )
                .sample_regs_user(UNWIND_REGS)
                .sample_stack_user(FP_STACK_BYTES),
            CallGraph::Dwarf { stack_bytes } => {
                b.attr_mut().set_exclude_callchain_user(1);
                b.sample(
                    current
                        | SampleType::TID
                        | SampleType::CALLCHAIN
                        | SampleType::REGS_USER
                        | SampleType::STACK_USER,
                )
                .sample_regs_user(DWARF_REGS)
                .sample_stack_user(stack_bytes)
            }
        }
    }

    /// The mode an attr was configured for: `fp` for a callchain with the user part,
    /// `dwarf` for a user stack copy without it, `None` without a callchain.
    pub fn of_attr(attr: &sys::perf_event_attr) -> Option<CallGraph> {
        let t = SampleType::from_bits(attr.sample_type);
        if !t.contains(SampleType::CALLCHAIN) {
            return None;
        }
        if attr.exclude_callchain_user() != 0 && t.contains(SampleType::STACK_USER) {
            Some(CallGraph::Dwarf {
                stack_bytes: attr.sample_stack_user,
            })
        } else {
            Some(CallGraph::Fp)
        }
    }
}

/// One address of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawFrame {
    /// The instruction pointer (innermost frame) or a return address (callers).
    pub ip: u64,
    /// A kernel address.
    pub kernel: bool,
    /// A return address: the call is the instruction before it.
    pub return_address: bool,
}

impl RawFrame {
    /// The innermost user frame at `ip`.
    pub fn user(ip: u64) -> RawFrame {
        RawFrame {
            ip,
            kernel: false,
            return_address: false,
        }
    }
}

/// The frames of a callchain, innermost first, without the `PERF_CONTEXT_*` markers
/// (values at or above `PERF_CONTEXT_MAX`), each marked kernel or user by the context
/// it follows; the first address of each context is the interrupted ip, the others are
/// return addresses. Appends to `out`, at most [`MAX_DEPTH`] frames.
///
/// # Examples
/// ```
/// use perfring::unwind::{callchain_frames, RawFrame};
/// use perfring::sys::{PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER};
/// let chain = [PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0000, PERF_CONTEXT_USER, 0x401000, 0x401100];
/// let mut out = Vec::new();
/// callchain_frames(chain, &mut out);
/// assert_eq!(out.len(), 3);
/// assert!(out[0].kernel && !out[0].return_address);
/// assert_eq!(out[1], RawFrame::user(0x401000));
/// assert!(out[2].return_address && !out[2].kernel);
/// ```
pub fn callchain_frames(chain: impl IntoIterator<Item = u64>, out: &mut Vec<RawFrame>) {
    let mut kernel = false;
    let mut first = true;
    let start = out.len();
    for ip in chain {
        if ip >= sys::PERF_CONTEXT_MAX {
            kernel = matches!(
                ip,
                sys::PERF_CONTEXT_KERNEL | sys::PERF_CONTEXT_HV | sys::PERF_CONTEXT_GUEST_KERNEL
            );
            first = true;
            continue;
        }
        if out.len() - start >= MAX_DEPTH {
            break;
        }
        out.push(RawFrame {
            ip,
            kernel,
            return_address: !first,
        });
        first = false;
    }
}

/// What a sample copied of a user thread: its registers ([`UNWIND_REGS`] at least) and
/// the top of its stack, from the stack pointer up, in process `pid`.
#[derive(Debug, Clone, Copy)]
pub struct StackCopy<'a> {
    /// The process (whose mappings give the unwind tables).
    pub pid: u32,
    /// The user registers.
    pub regs: Regs<'a>,
    /// The stack bytes.
    pub stack: UserStack<'a>,
}

/// Section data handed to framehop: a range of a file read once and shared.
#[derive(Clone)]
struct Bytes {
    file: Arc<[u8]>,
    range: Range<usize>,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

/// What framehop needs of one ELF file: its headers (for the load bias) and its
/// unwind sections.
struct ElfUnwindInfo {
    elf: ElfFile,
    sections: ExplicitModuleSectionInfo<Bytes>,
}

impl ElfUnwindInfo {
    fn load(path: &Path) -> Option<ElfUnwindInfo> {
        let elf = ElfFile::open(path).ok()?;
        let file: Arc<[u8]> = std::fs::read(path).ok()?.into();
        let obj = object::File::parse(&*file).ok()?;
        let section = |name: &str| {
            let s = obj.section_by_name(name)?;
            let svma = s.address()..s.address() + s.size();
            let data = s.file_range().map(|(off, size)| Bytes {
                file: file.clone(),
                range: off as usize..(off + size) as usize,
            });
            Some((svma, data))
        };
        let (text_svma, text) = section(".text").unzip();
        let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
        let got_svma = section(".got").map(|s| s.0);
        let debug_frame = section(".debug_frame").and_then(|s| s.1);
        Some(ElfUnwindInfo {
            elf,
            sections: ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma,
                text: text.flatten(),
                got_svma,
                eh_frame_svma,
                eh_frame: eh_frame.flatten(),
                eh_frame_hdr_svma,
                eh_frame_hdr: eh_frame_hdr.flatten(),
                debug_frame,
                stubs_svma: None,
                stub_helper_svma: None,
                unwind_info: None,
                text_segment_svma: None,
                text_segment: None,
            },
        })
    }
}

type NativeUnwinder = UnwinderNative<Bytes, MayAllocateDuringUnwind>;

/// Per-process unwinding state, built over its mappings of a given generation.
struct ProcUnwinder {
    generation: u64,
    unwinder: NativeUnwinder,
}

/// Unwinds samples' stacks; keeps each file's unwind tables and each process's
/// modules between samples.
pub struct Unwinder {
    files: HashMap<Arc<Path>, Option<Arc<ElfUnwindInfo>>>,
    procs: HashMap<u32, ProcUnwinder>,
    cache: CacheNative<MayAllocateDuringUnwind>,
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder")
            .field("files", &self.files.len())
            .field("processes", &self.procs.len())
            .finish_non_exhaustive()
    }
}

impl Default for Unwinder {
    fn default() -> Self {
        Unwinder::new()
    }
}

impl Unwinder {
    /// No files read yet.
    pub fn new() -> Unwinder {
        Unwinder {
            files: HashMap::new(),
            procs: HashMap::new(),
            cache: CacheNative::new(),
        }
    }

    /// Drops process `pid`'s unwinding state (once it has exited); its files' tables
    /// stay for other processes.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// A sample's frames, innermost first, appended to `out`: kernel frames from its
    /// callchain; user frames from its callchain with the first frame decided by CFI
    /// ([`CallGraph::Fp`]: the chain has a user part and the sample carries registers and
    /// stack), or unwound from its registers and stack ([`CallGraph::Dwarf`]: no user part
    /// in the chain), or the chain alone; else just its ip. `spaces` must hold the
    /// sample's process (records observed up to it).
    pub fn sample_frames(
        &mut self,
        spaces: &AddressSpaces,
        sample: &Sample<'_>,
        out: &mut Vec<RawFrame>,
    ) {
        self.frames_of(spaces, sample, true, out);
    }

    /// As [`sample_frames`](Self::sample_frames), but a sample whose chain has no user
    /// part ([`CallGraph::Dwarf`]) is not unwound from its stack copy: its frames are
    /// the chain's kernel part and its ip. For a recording whose outputs keep the copy
    /// for a later unwinder (perf.data); a frame-pointer chain's first frame is still
    /// decided by CFI.
    pub fn sample_frames_without_copies(
        &mut self,
        spaces: &AddressSpaces,
        sample: &Sample<'_>,
        out: &mut Vec<RawFrame>,
    ) {
        self.frames_of(spaces, sample, false, out);
    }

    fn frames_of(
        &mut self,
        spaces: &AddressSpaces,
        sample: &Sample<'_>,
        unwind_copies: bool,
        out: &mut Vec<RawFrame>,
    ) {
        let pid = sample.pid().unwrap_or(0);
        let copy = match (sample.regs_user(), sample.stack_user()) {
            (Some(regs), Some(stack)) if !regs.regs.is_empty() => Some((regs, stack)),
            _ => None,
        };
        let start = out.len();
        if let Some(chain) = sample.callchain() {
            callchain_frames(chain.iter(), out);
        }
        let user = out[start..]
            .iter()
            .position(|f| !f.kernel)
            .map(|i| start + i);
        match (
            copy.map(|(regs, stack)| StackCopy { pid, regs, stack }),
            user,
        ) {
            (Some(copy), Some(first)) => self.fix_first_frame(spaces, &copy, out, first),
            (Some(copy), None) if unwind_copies => self.unwind(spaces, &copy, out),
            (Some(_), None) => {}
            (None, _) => {}
        }
        if out.len() == start {
            if let Some(ip) = sample.ip() {
                out.push(RawFrame {
                    ip,
                    kernel: sample.misc().cpumode() == crate::records::CpuMode::Kernel,
                    return_address: false,
                });
            }
        }
    }

    /// The first frame of a frame-pointer chain, decided by CFI: `out[first..]` are the
    /// user frames the kernel walked from `rbp`, `out[first]` the interrupted ip. The
    /// return address the file's CFI finds for that ip (from the registers and stack
    /// `copy`) is the direct caller; when the chain's next entry is not it, the chain
    /// started from the caller's frame (the function had not pushed its own, or has
    /// none), and it is inserted. Without CFI for the ip, or when the return address
    /// lies beyond the copy, the chain stays as the kernel wrote it.
    pub fn fix_first_frame(
        &mut self,
        spaces: &AddressSpaces,
        copy: &StackCopy<'_>,
        out: &mut Vec<RawFrame>,
        first: usize,
    ) {
        let Some(ret) = self.return_address(spaces, copy) else {
            return;
        };
        if out.get(first + 1).map(|f| f.ip) == Some(ret) || out.len() - first >= MAX_DEPTH {
            return;
        }
        out.insert(
            first + 1,
            RawFrame {
                ip: ret,
                kernel: false,
                return_address: true,
            },
        );
    }

    /// The return address of the frame at the copy's ip, by CFI, if the copy holds it.
    fn return_address(&mut self, spaces: &AddressSpaces, copy: &StackCopy<'_>) -> Option<u64> {
        let mut two = Vec::with_capacity(2);
        self.walk(spaces, copy, 2, &mut two);
        match two.get(1) {
            Some(f) if f.return_address && f.ip != 0 => Some(f.ip),
            _ => None,
        }
    }

    /// Unwinds a user stack copy with framehop. Appends the user
    /// frames, innermost first (at most [`MAX_DEPTH`]); stops where the copy or the
    /// unwind information ends.
    pub fn unwind(
        &mut self,
        spaces: &AddressSpaces,
        copy: &StackCopy<'_>,
        out: &mut Vec<RawFrame>,
    ) {
        self.walk(spaces, copy, MAX_DEPTH, out);
    }

    fn walk(
        &mut self,
        spaces: &AddressSpaces,
        copy: &StackCopy<'_>,
        depth: usize,
        out: &mut Vec<RawFrame>,
    ) {
        let (pid, stack) = (copy.pid, &copy.stack);
        let Some((ip, sp, bp)) = unwind_regs(&copy.regs) else {
            return;
        };
        let generation = spaces.process(pid).map_or(0, |p| p.generation());
        let stale = self
            .procs
            .get(&pid)
            .is_none_or(|p| p.generation != generation);
        if stale {
            let unwinder = self.build(spaces, pid);
            self.procs.insert(
                pid,
                ProcUnwinder {
                    generation,
                    unwinder,
                },
            );
        }
        let Some(proc_) = self.procs.get(&pid) else {
            return;
        };
        let data = stack.used();
        let mut read_stack = |addr: u64| -> std::result::Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = data.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsNative::new(ip, sp, bp);
        let mut frames = proc_
            .unwinder
            .iter_frames(ip, regs, &mut self.cache, &mut read_stack);
        let mut n = 0;
        // An error ends the stack (usually: the copy of it ends); frames so far stand.
        while let Ok(Some(f)) = frames.next() {
            if n >= depth {
                break;
            }
            out.push(RawFrame {
                ip: f.address(),
                kernel: false,
                return_address: matches!(f, FrameAddress::ReturnAddress(_)),
            });
            n += 1;
        }
    }

    fn build(&mut self, spaces: &AddressSpaces, pid: u32) -> NativeUnwinder {
        let mut unwinder = NativeUnwinder::new();
        let Some(space) = spaces.process(pid) else {
            return unwinder;
        };
        // One module per file: the span of its executable mappings.
        let mut spans: Vec<(Arc<Path>, u64, u64, u64)> = Vec::new();
        for m in space.mappings().filter(|m| m.is_file()) {
            match spans.iter_mut().find(|s| s.0 == m.path) {
                Some(s) => {
                    s.1 = s.1.min(m.start);
                    s.2 = s.2.max(m.end);
                }
                None => spans.push((m.path.clone(), m.start, m.end, m.pgoff)),
            }
        }
        for (path, start, end, pgoff) in spans {
            // The file as the process sees it (a container's, through its root).
            let file = crate::space::file_of(pid, &path);
            let info = self
                .files
                .entry(file.clone())
                .or_insert_with(|| ElfUnwindInfo::load(&file).map(Arc::new))
                .clone();
            let Some(info) = info else { continue };
            let first = space
                .mappings()
                .find(|m| m.path == path)
                .map_or((start, pgoff), |m| (m.start, m.pgoff));
            let Some(bias) = info.elf.bias_of_mapping(first.0, first.1) else {
                continue;
            };
            let module = Module::new(
                path.to_string_lossy().into_owned(),
                start..end,
                bias,
                info.sections.clone(),
            );
            unwinder.add_module(module);
        }
        unwinder
    }
}

#[cfg(target_arch = "x86_64")]
fn unwind_regs(regs: &Regs<'_>) -> Option<(u64, u64, u64)> {
    Some((
        regs.get(sys::PERF_REG_X86_IP)?,
        regs.get(sys::PERF_REG_X86_SP)?,
        regs.get(sys::PERF_REG_X86_BP)?,
    ))
}

#[cfg(not(target_arch = "x86_64"))]
fn unwind_regs(_regs: &Regs<'_>) -> Option<(u64, u64, u64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_graph_forms() {
        assert_eq!("fp".parse::<CallGraph>().unwrap(), CallGraph::Fp);
        assert_eq!(
            "dwarf".parse::<CallGraph>().unwrap(),
            CallGraph::Dwarf { stack_bytes: 8192 }
        );
        assert_eq!(
            "dwarf,4096".parse::<CallGraph>().unwrap(),
            CallGraph::Dwarf { stack_bytes: 4096 }
        );
        for bad in ["lbr", "dwarf,7", "dwarf,x", "fp,8", "dwarf,70000"] {
            let e = bad.parse::<CallGraph>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadEvent, "{bad}");
        }
    }

    #[test]
    fn configure_keeps_the_sample_type() {
        let b = crate::Counter::builder("cpu-clock")
            .unwrap()
            .sample(SampleType::IP | SampleType::TIME);
        let b = CallGraph::Dwarf { stack_bytes: 1024 }.configure(b);
        let t = SampleType::from_bits(b.attr().sample_type);
        assert!(t.contains(SampleType::IP | SampleType::TIME | SampleType::STACK_USER));
        assert_eq!(b.attr().sample_stack_user, 1024);
        assert_eq!(b.attr().exclude_callchain_user(), 1);
    }

    #[test]
    fn markers_switch_context_and_reset_the_first_frame() {
        let mut out = Vec::new();
        callchain_frames(
            [sys::PERF_CONTEXT_USER, 1, 2, sys::PERF_CONTEXT_KERNEL, 3, 4],
            &mut out,
        );
        let got: Vec<_> = out
            .iter()
            .map(|f| (f.ip, f.kernel, f.return_address))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, false, false),
                (2, false, true),
                (3, true, false),
                (4, true, true)
            ]
        );
    }
}
