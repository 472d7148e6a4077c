//! Naming the frames of a sample: address spaces kept from the ring, and symbolization
//! with [`blazesym`] (ELF and DWARF symbols, file:line, inlined frames, Rust and C++
//! demangling).
//!
//! - [`AddressSpaces`]: each process's executable file mappings, fed by the ring's
//!   `MMAP`/`MMAP2`, `COMM` (exec), `FORK` and `EXIT` records
//!   ([`observe`](AddressSpaces::observe)), and by `/proc/PID/maps` only once, when
//!   attaching to a process that already runs ([`attach`](AddressSpaces::attach)). A
//!   process's map is kept after it exits, so its samples are named however late they
//!   are drained, and a library it `dlopen`s is known from its `MMAP2` record.
//! - [`Symbolizer`]: turns an address of a process into [`Frame`]s — one per inlined
//!   function at that address, then the function itself — through the mapped file and the
//!   file offset (`ip - start + pgoff`), never through `/proc`, so it works after the
//!   process is gone. Results are cached per (file, offset): a hot loop is looked up once.
//!
//! Symbolization is lazy: nothing is read until an address is asked for, so a caller
//! that drains the ring first and names the samples afterwards (or on another thread,
//! with the records' ips copied out) never slows the draining.
//!
//! # Examples
//! ```no_run
//! use perfring::symbolize::{AddressSpaces, Symbolizer};
//! use perfring::unwind::RawFrame;
//!
//! let mut spaces = AddressSpaces::new();
//! spaces.attach(1234)?; // a process already running: its maps, read once
//! // ... then feed every record drained from the ring: spaces.observe(&record);
//! let mut symbolizer = Symbolizer::new();
//! let frames = symbolizer.frames(&spaces, 1234, &[RawFrame::user(0x5555_5555_5139)]);
//! for f in &frames {
//!     println!("{f}"); // e.g. "leaf+0x4 (prog.c:5) in /tmp/prog"
//! }
//! # Ok::<(), perfring::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Sym, Symbolized};

use crate::records::{Mmap2File, Record, RecordKind};
use crate::symbols::ProcessMaps;
use crate::unwind::RawFrame;
use crate::Result;

/// `PROT_EXEC` as MMAP2 records report it.
const PROT_EXEC: u32 = 0x4;
/// Cached lookups beyond which the cache is emptied (a bound on memory, not a tuning).
const CACHE_LIMIT: usize = 1 << 20;

/// One executable file mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub pgoff: u64,
    /// The file, as the kernel named it (`[vdso]`, `//anon` and the like for
    /// mappings without a file).
    pub path: Arc<Path>,
    /// The file's GNU build id, when the kernel reported it (`attr.build_id`).
    pub build_id: Option<Vec<u8>>,
}

impl MappedFile {
    /// The file offset of address `addr` in this mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }

    /// Whether the mapping names a file (rather than `[vdso]`, `//anon`, ...).
    pub fn is_file(&self) -> bool {
        self.path.is_absolute()
    }
}

/// One process's executable mappings and name.
#[derive(Debug, Clone, Default)]
pub struct ProcessSpace {
    comm: Option<String>,
    // Keyed by start; INVARIANT: the mappings do not overlap.
    maps: BTreeMap<u64, MappedFile>,
    exited: bool,
    generation: u64,
}

impl ProcessSpace {
    /// The process's name (its `comm`), if a record or `/proc` gave it.
    pub fn comm(&self) -> Option<&str> {
        self.comm.as_deref()
    }

    /// Whether an `EXIT` record for the process was seen.
    pub fn exited(&self) -> bool {
        self.exited
    }

    /// The mappings, by address.
    pub fn mappings(&self) -> impl Iterator<Item = &MappedFile> {
        self.maps.values()
    }

    /// The mapping holding `addr`.
    pub fn mapping_of(&self, addr: u64) -> Option<&MappedFile> {
        self.maps
            .range(..=addr)
            .next_back()
            .map(|(_, m)| m)
            .filter(|m| addr < m.end)
    }

    /// A number that changes whenever the mappings do (for caches built over them).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn insert(&mut self, m: MappedFile) {
        // A new mapping replaces whatever it overlaps (the kernel reports no munmap).
        let overlapping: Vec<u64> = self
            .maps
            .range(..m.end)
            .filter(|(_, o)| o.end > m.start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            if let Some(old) = self.maps.remove(&s) {
                if old.start < m.start {
                    self.maps.insert(
                        old.start,
                        MappedFile {
                            end: m.start,
                            ..old.clone()
                        },
                    );
                }
                if old.end > m.end {
                    let cut = m.end - old.start;
                    self.maps.insert(
                        m.end,
                        MappedFile {
                            start: m.end,
                            pgoff: old.pgoff + cut,
                            ..old
                        },
                    );
                }
            }
        }
        self.maps.insert(m.start, m);
        self.generation += 1;
    }
}

/// Every watched process's address space, kept from the ring's records.
///
/// Feed it each record drained (in ring order) with [`observe`](Self::observe);
/// counters must have been opened with `mmap2`, `comm` and `task` set
/// ([`Builder::track_tasks`](crate::Builder::track_tasks)). For a process that was
/// running before its counters were opened, call [`attach`](Self::attach) first: the
/// kernel reports only mappings made after the counter was enabled.
#[derive(Debug, Clone, Default)]
pub struct AddressSpaces {
    procs: HashMap<u32, ProcessSpace>,
}

impl AddressSpaces {
    /// No processes yet.
    pub fn new() -> AddressSpaces {
        AddressSpaces::default()
    }

    /// Reads a running process's executable mappings and name from `/proc/PID/maps`
    /// and `/proc/PID/comm`, once; records observed later add to them.
    ///
    /// # Errors
    /// As [`ProcessMaps::read`]: the process does not exist or may not be read.
    pub fn attach(&mut self, pid: u32) -> Result<()> {
        let maps = ProcessMaps::read(pid as libc::pid_t)?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .map(|s| s.trim_end().to_owned());
        let space = self.procs.entry(pid).or_default();
        if comm.is_some() {
            space.comm = comm;
        }
        for m in maps.mappings().iter().filter(|m| m.executable) {
            space.insert(MappedFile {
                start: m.start,
                end: m.end,
                pgoff: m.offset,
                path: Arc::from(m.path.as_path()),
                build_id: None,
            });
        }
        Ok(())
    }

    /// Whether process `pid` is known (from records or [`attach`](Self::attach)).
    pub fn knows(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Adds an executable mapping to process `pid` by hand.
    pub fn insert(&mut self, pid: u32, mapping: MappedFile) {
        self.procs.entry(pid).or_default().insert(mapping);
    }

    /// Takes in one record: `MMAP`/`MMAP2` of executable code add a mapping, `COMM`
    /// names the process (and, for an exec, forgets the old image), `FORK` of a new
    /// process copies its parent's map, `EXIT` of a process marks it exited (its map
    /// is kept). Returns whether the record was one of these.
    pub fn observe(&mut self, record: &Record<'_>) -> bool {
        match record.kind() {
            RecordKind::Mmap2(m) => {
                if m.prot & PROT_EXEC != 0 {
                    let build_id = match m.file {
                        Mmap2File::BuildId(id) => Some(id.to_vec()),
                        Mmap2File::Inode { .. } => None,
                    };
                    self.add(m.pid, m.addr, m.len, m.pgoff, m.filename, build_id);
                }
            }
            RecordKind::Mmap(m) => {
                // Without mmap_data, MMAP records are executable mappings only.
                if !record.misc().mmap_data() {
                    self.add(m.pid, m.addr, m.len, m.pgoff, m.filename, None);
                }
            }
            RecordKind::Comm(c) => {
                let space = self.procs.entry(c.pid).or_default();
                if c.pid == c.tid {
                    space.comm = Some(String::from_utf8_lossy(c.comm).into_owned());
                }
                if record.misc().comm_exec() {
                    // A new program: the old image's mappings are gone.
                    space.maps.clear();
                    space.generation += 1;
                    space.exited = false;
                }
            }
            RecordKind::Fork(t) => {
                if t.pid != t.ppid && !self.procs.contains_key(&t.pid) {
                    let child = self.procs.get(&t.ppid).cloned().map(|mut p| {
                        p.exited = false;
                        p.generation += 1;
                        p
                    });
                    self.procs.insert(t.pid, child.unwrap_or_default());
                }
            }
            RecordKind::Exit(t) => {
                if t.pid == t.tid {
                    if let Some(p) = self.procs.get_mut(&t.pid) {
                        p.exited = true;
                    }
                }
            }
            _ => return false,
        }
        true
    }

    fn add(&mut self, pid: u32, addr: u64, len: u64, pgoff: u64, name: &[u8], id: Option<Vec<u8>>) {
        let name = String::from_utf8_lossy(name);
        self.insert(
            pid,
            MappedFile {
                start: addr,
                end: addr.saturating_add(len),
                pgoff,
                path: Arc::from(Path::new(name.as_ref())),
                build_id: id.filter(|id| !id.is_empty()),
            },
        );
    }

    /// Process `pid`'s space, if any record or [`attach`](Self::attach) named it.
    pub fn process(&self, pid: u32) -> Option<&ProcessSpace> {
        self.procs.get(&pid)
    }

    /// The pids known.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }

    /// The mapping holding `addr` in process `pid`.
    pub fn mapping(&self, pid: u32, addr: u64) -> Option<&MappedFile> {
        self.procs.get(&pid)?.mapping_of(addr)
    }
}

/// One named frame: a function at an address, or a function inlined there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The address (for a caller's frame, the return address).
    pub ip: u64,
    /// The function's (demangled) name, if known.
    pub sym: Option<String>,
    /// `ip`'s offset from the function's start (not given for inlined frames).
    pub off: Option<u64>,
    /// The source file, from DWARF line information.
    pub file: Option<String>,
    /// The source line.
    pub line: Option<u32>,
    /// Whether this function was inlined into the next frame (same `ip`).
    pub inlined: bool,
    /// The mapped file (shared object, executable, `[vdso]`, `[kernel]`).
    pub dso: Option<String>,
    /// Whether `ip` is a kernel address.
    pub kernel: bool,
}

impl fmt::Display for Frame {
    /// `sym+0xoff (file:line) in dso`, with `0xip` for an unknown symbol.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.sym, self.off) {
            (Some(s), Some(0) | None) => f.write_str(s)?,
            (Some(s), Some(off)) => write!(f, "{s}+{off:#x}")?,
            (None, _) => write!(f, "{:#x}", self.ip)?,
        }
        if self.inlined {
            f.write_str(" (inlined)")?;
        }
        if let (Some(file), Some(line)) = (&self.file, self.line) {
            write!(f, " ({file}:{line})")?;
        }
        if let Some(dso) = &self.dso {
            write!(f, " in {dso}")?;
        }
        Ok(())
    }
}

/// What one address resolves to, without the address (shared by every ip with the same
/// file offset).
#[derive(Debug, Clone)]
struct Named {
    sym: String,
    off: Option<u64>,
    file: Option<String>,
    line: Option<u32>,
    inlined: bool,
}

/// Names addresses with blazesym, caching each (file, offset)'s answer.
///
/// Files are read on first use (blazesym keeps them open and parsed); a file that
/// cannot be read, or whose build id differs from the one the kernel reported,
/// gives frames with a `dso` and no `sym`.
///
/// Not `Send` (blazesym's state is reference-counted): to name samples off the
/// draining thread, create the symbolizer on the naming thread and send it the raw
/// frames and the address-space records.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    cache: HashMap<(Arc<Path>, u64), Arc<[Named]>>,
    kernel: HashMap<u64, Arc<[Named]>>,
    /// Per path: whether the file on disk has the build id the kernel reported.
    build_ids: HashMap<(Arc<Path>, Vec<u8>), bool>,
}

impl fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbolizer")
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new()
    }
}

impl Symbolizer {
    /// A symbolizer with DWARF line information, inlined functions and demangling on.
    pub fn new() -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            cache: HashMap::new(),
            kernel: HashMap::new(),
            build_ids: HashMap::new(),
        }
    }

    /// How many (file, offset) answers are cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// The frames of a stack: for each raw frame, innermost first, the functions
    /// inlined at its address (innermost first, `inlined = true`), then the function
    /// itself. A return address is looked up one byte back, inside the call
    /// instruction, so its line is the call's.
    pub fn frames(&mut self, spaces: &AddressSpaces, pid: u32, stack: &[RawFrame]) -> Vec<Frame> {
        let mut out = Vec::with_capacity(stack.len());
        for raw in stack {
            self.push_frames(spaces, pid, *raw, &mut out);
        }
        out
    }

    /// As [`frames`](Self::frames) for one raw frame, appending to `out`.
    pub fn push_frames(
        &mut self,
        spaces: &AddressSpaces,
        pid: u32,
        raw: RawFrame,
        out: &mut Vec<Frame>,
    ) {
        let lookup = if raw.return_address {
            raw.ip.saturating_sub(1)
        } else {
            raw.ip
        };
        let adjust = raw.ip - lookup;
        if raw.kernel {
            let named = self.kernel_names(lookup);
            push(out, raw, adjust, &named, Some("[kernel]"));
            return;
        }
        let Some(m) = spaces.mapping(pid, lookup) else {
            push(out, raw, adjust, &[], None);
            return;
        };
        let dso = m.path.to_string_lossy().into_owned();
        let named = if m.is_file() && self.build_id_matches(m) {
            self.file_names(&m.path, m.file_offset(lookup))
        } else {
            Arc::from(Vec::new())
        };
        push(out, raw, adjust, &named, Some(&dso));
    }

    /// Names file offset `offset` of ELF file `path` (what a mapping's address
    /// corresponds to): inlined functions first, then the containing function.
    pub fn symbolize_file_offset(&mut self, path: &Path, offset: u64) -> Vec<Frame> {
        let named = self.file_names(&Arc::from(path), offset);
        let mut out = Vec::new();
        let raw = RawFrame {
            ip: offset,
            kernel: false,
            return_address: false,
        };
        push(&mut out, raw, 0, &named, Some(&path.to_string_lossy()));
        out
    }

    fn build_id_matches(&mut self, m: &MappedFile) -> bool {
        let Some(id) = &m.build_id else {
            return true;
        };
        let key = (m.path.clone(), id.clone());
        *self.build_ids.entry(key).or_insert_with(|| {
            match blazesym::helper::read_elf_build_id(&*m.path) {
                Ok(Some(found)) => found.as_ref() == id.as_slice(),
                // No build id in the file, or unreadable: nothing contradicts the name.
                _ => true,
            }
        })
    }

    fn file_names(&mut self, path: &Arc<Path>, offset: u64) -> Arc<[Named]> {
        if let Some(hit) = self.cache.get(&(path.clone(), offset)) {
            return hit.clone();
        }
        let src = Source::Elf(Elf::new(path.to_path_buf()));
        let named: Arc<[Named]> = match self.inner.symbolize_single(&src, Input::FileOffset(offset))
        {
            Ok(Symbolized::Sym(sym)) => named(&sym).into(),
            _ => Arc::from(Vec::new()),
        };
        if self.cache.len() >= CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.insert((path.clone(), offset), named.clone());
        named
    }

    fn kernel_names(&mut self, addr: u64) -> Arc<[Named]> {
        if let Some(hit) = self.kernel.get(&addr) {
            return hit.clone();
        }
        let src = Source::Kernel(Kernel {
            // kallsyms only: a vmlinux image is rarely installed and slow to parse.
            vmlinux: blazesym::MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        let named: Arc<[Named]> = match self.inner.symbolize_single(&src, Input::AbsAddr(addr)) {
            Ok(Symbolized::Sym(sym)) => named(&sym).into(),
            _ => Arc::from(Vec::new()),
        };
        if self.kernel.len() >= CACHE_LIMIT {
            self.kernel.clear();
        }
        self.kernel.insert(addr, named.clone());
        named
    }
}

/// blazesym's answer as frames, innermost first: blazesym lists inlined functions
/// outermost first, each with the location inside it.
fn named(sym: &Sym<'_>) -> Vec<Named> {
    let code = |ci: Option<&blazesym::symbolize::CodeInfo<'_>>| match ci {
        Some(ci) => (Some(ci.to_path().to_string_lossy().into_owned()), ci.line),
        None => (None, None),
    };
    let mut out: Vec<Named> = sym
        .inlined
        .iter()
        .rev()
        .map(|f| {
            let (file, line) = code(f.code_info.as_ref());
            Named {
                sym: f.name.to_string(),
                off: None,
                file,
                line,
                inlined: true,
            }
        })
        .collect();
    let (file, line) = code(sym.code_info.as_deref());
    out.push(Named {
        sym: sym.name.to_string(),
        off: Some(sym.offset as u64),
        file,
        line,
        inlined: false,
    });
    out
}

fn push(out: &mut Vec<Frame>, raw: RawFrame, adjust: u64, named: &[Named], dso: Option<&str>) {
    if named.is_empty() {
        out.push(Frame {
            ip: raw.ip,
            sym: None,
            off: None,
            file: None,
            line: None,
            inlined: false,
            dso: dso.map(str::to_owned),
            kernel: raw.kernel,
        });
        return;
    }
    for n in named {
        out.push(Frame {
            ip: raw.ip,
            sym: Some(n.sym.clone()),
            off: n.off.map(|o| o + adjust),
            file: n.file.clone(),
            line: n.line,
            inlined: n.inlined,
            dso: dso.map(str::to_owned),
            kernel: raw.kernel,
        });
    }
}

// Address spaces and unwinders move between threads; a `Symbolizer` does not (blazesym
// keeps `Rc`s), so a thread that names samples creates its own.
const _: () = {
    const fn send<T: Send>() {}
    send::<AddressSpaces>();
    send::<crate::unwind::Unwinder>();
};

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, pgoff: u64, path: &str) -> MappedFile {
        MappedFile {
            start,
            end,
            pgoff,
            path: Arc::from(Path::new(path)),
            build_id: None,
        }
    }

    #[test]
    fn a_new_mapping_splits_what_it_overlaps() {
        let mut p = ProcessSpace::default();
        p.insert(m(0x1000, 0x5000, 0, "/a"));
        p.insert(m(0x2000, 0x3000, 0, "/b"));
        let got: Vec<_> = p
            .mappings()
            .map(|m| (m.start, m.end, m.pgoff, m.path.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0x1000, 0x2000, 0, "/a".to_owned()),
                (0x2000, 0x3000, 0, "/b".to_owned()),
                (0x3000, 0x5000, 0x2000, "/a".to_owned()),
            ]
        );
        assert_eq!(&*p.mapping_of(0x3100).unwrap().path, Path::new("/a"));
        assert_eq!(p.mapping_of(0x3100).unwrap().file_offset(0x3100), 0x2100);
        assert!(p.mapping_of(0x5000).is_none());
        assert!(p.mapping_of(0xfff).is_none());
    }

    /// Exec forgets the old image, fork copies the parent's map, a later mmap (dlopen)
    /// adds to it, exit keeps it: all from records.
    #[test]
    fn address_spaces_follow_the_records() {
        use crate::records::encode::{self, Ids};
        use crate::records::{Layout, Mmap2, SampleIdAll, Task};
        let layout = Layout::from_raw(0, 0, 0, 0, 0, SampleIdAll::No).unwrap();
        let ids = Ids::default();
        let mut out = Vec::new();
        let mmap2 = |out: &mut Vec<u8>, pid: u32, addr: u64, prot: u32, name: &[u8]| {
            let m = Mmap2 {
                pid,
                tid: pid,
                addr,
                len: 0x1000,
                pgoff: 0x2000,
                file: Mmap2File::BuildId(&[0xab; 20]),
                prot,
                flags: 0,
                filename: name,
            };
            let misc = crate::sys::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
            encode::record_kind(out, &layout, misc, &RecordKind::Mmap2(m), &ids);
        };
        let task = |pid, ppid| Task {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time: 0,
        };
        mmap2(&mut out, 10, 0x1000, PROT_EXEC, b"/old/image");
        let exec = crate::sys::PERF_RECORD_MISC_COMM_EXEC as u16;
        encode::comm(&mut out, &layout, exec, 10, 10, b"prog", &ids);
        mmap2(&mut out, 10, 0x4000, PROT_EXEC, b"/bin/prog");
        mmap2(&mut out, 10, 0x8000, 0x1, b"/data/not-code");
        encode::record_kind(&mut out, &layout, 0, &RecordKind::Fork(task(11, 10)), &ids);
        mmap2(&mut out, 11, 0x9000, PROT_EXEC, b"/lib/dlopened.so");
        encode::record_kind(&mut out, &layout, 0, &RecordKind::Exit(task(11, 11)), &ids);
        let mut spaces = AddressSpaces::new();
        for rec in Record::iter(&out, &layout) {
            assert!(spaces.observe(&rec.unwrap()));
        }
        let parent = spaces.process(10).unwrap();
        assert_eq!(parent.comm(), Some("prog"));
        let paths: Vec<_> = parent
            .mappings()
            .map(|m| m.path.to_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["/bin/prog"],
            "exec forgot the old image; data is not code"
        );
        let child = spaces.process(11).unwrap();
        assert!(child.exited());
        let m = spaces.mapping(11, 0x9010).unwrap();
        assert_eq!(&*m.path, Path::new("/lib/dlopened.so"));
        assert_eq!(m.file_offset(0x9010), 0x2010);
        assert_eq!(m.build_id.as_deref(), Some(&[0xab; 20][..]));
        assert!(
            spaces.mapping(11, 0x4000).is_some(),
            "the fork copied the parent's map"
        );
        assert!(spaces.mapping(10, 0x9010).is_none(), "not the parent's");
    }

    #[test]
    fn frames_display_as_perf_script_does() {
        let f = Frame {
            ip: 0x10,
            sym: Some("f".into()),
            off: Some(4),
            file: Some("a.c".into()),
            line: Some(3),
            inlined: false,
            dso: Some("/x".into()),
            kernel: false,
        };
        assert_eq!(f.to_string(), "f+0x4 (a.c:3) in /x");
        let unknown = Frame {
            sym: None,
            file: None,
            ..f
        };
        assert_eq!(unknown.to_string(), "0x10 in /x");
    }
}
