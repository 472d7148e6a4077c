//! Symbols: from names in an ELF file to addresses in a process, and back.
//!
//! Symbol tables are read by [`blazesym`] (`.symtab` and `.dynsym`); program headers,
//! which blazesym does not expose, by `object`; `/proc/PID/maps` is parsed here (blazesym
//! parses it only inside its own process symbolizer). Naming the frames of samples,
//! with DWARF lines and inlined functions, is [`symbolize`](crate::symbolize)'s job.
//!
//! - [`Symbols`]: the function and object symbols of one ELF file (`.symtab` and
//!   `.dynsym`), its type (fixed-address `ET_EXEC` or relocatable `ET_DYN`, i.e. PIE or
//!   shared object) and its `PT_LOAD` segments, which map virtual addresses to file
//!   offsets (what a uprobe wants).
//! - [`ProcessMaps`]: a process's file mappings from `/proc/PID/maps`, which give each
//!   file's load bias: runtime address = ELF virtual address + bias.
//! - [`AddressSpace`]: both together for one process, caching each file's symbols, to
//!   turn a sample's `ip` into `symbol+0xoff`.
//! - [`resolve_event`]: event strings beyond perf's syntax, `mem:SYMBOL…` and
//!   `uprobe:PATH:SYMBOL…`, resolved against a [`TargetImage`].
//!
//! # Breakpoints on a command not yet started
//! Counters for a spawned command are opened on the stopped child before it `exec`s
//! ([`launch`](crate::launch)), so a breakpoint's address must be known before the
//! program is even mapped. For a non-PIE (`ET_EXEC`) program the symbol's address is
//! final. For a PIE, the child is started with [`Command::no_aslr`](crate::launch::Command::no_aslr):
//! with `ADDR_NO_RANDOMIZE` the kernel's ELF loader places a PIE that has an
//! interpreter at `ELF_ET_DYN_BASE` minus its first segment's page-aligned address.
//! `ELF_ET_DYN_BASE` is `2/3 * TASK_SIZE` rounded to a page on x86_64, i.e.
//! [`NO_ASLR_PIE_BASE`]; the constant is checked against a real PIE spawned with
//! `no_aslr` in `tests/symbols.rs`. On other architectures perfring has not measured
//! it and [`TargetImage::Spawned`] refuses PIEs with [`ErrorKind::Unsupported`].
//!
//! This module reads files and `/proc`; it opens no perf fd.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::Endianness;

use crate::event::names::did_you_mean;
use crate::event::{Access, Event, Sysfs};
use crate::{Error, ErrorKind, Result};

/// Where the kernel loads a PIE (with an interpreter) when address-space randomization
/// is off, on x86_64: `ELF_ET_DYN_BASE = (DEFAULT_MAP_WINDOW / 3 * 2) & ~(PAGE_SIZE - 1)`
/// with a 47-bit user address space. Measured on a spawned PIE by `tests/symbols.rs`.
#[cfg(target_arch = "x86_64")]
pub const NO_ASLR_PIE_BASE: Option<u64> = Some(0x5555_5555_4000);
/// Where the kernel loads a PIE when address-space randomization is off: not measured
/// on this architecture, so perfring does not guess.
#[cfg(not(target_arch = "x86_64"))]
pub const NO_ASLR_PIE_BASE: Option<u64> = None;

const PAGE: u64 = 4096;

/// What an ELF symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolType {
    /// Code (`STT_FUNC`).
    Function,
    /// Data (`STT_OBJECT`, `STT_TLS` excluded).
    Object,
}

/// One symbol of an ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The (demangled, for Rust) name.
    pub name: String,
    /// The name as stored in the file.
    pub raw_name: String,
    /// The ELF virtual address (`st_value`): final for `ET_EXEC`, relative to the load
    /// bias for `ET_DYN`.
    pub addr: u64,
    /// `st_size` in bytes (0 when unknown).
    pub size: u64,
    /// Code or data.
    pub kind: SymbolType,
}

/// The ELF file type, which decides whether addresses need a load bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElfType {
    /// `ET_EXEC`: loaded at its link-time addresses.
    Executable,
    /// `ET_DYN`: a PIE or shared object, loaded at some base.
    Dynamic,
}

/// A `PT_LOAD` segment: `filesz` bytes at file offset `offset` appear at `vaddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags & PF_X`.
    pub executable: bool,
}

/// The function and object symbols of an ELF file, sorted by address.
#[derive(Debug, Clone)]
pub struct Symbols {
    path: PathBuf,
    elf_type: ElfType,
    has_interpreter: bool,
    segments: Vec<Segment>,
    // INVARIANT: sorted by (addr, name).
    symbols: Vec<Symbol>,
}

fn elf_error(path: &Path, why: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::BadEvent,
        format!("read symbols of {}", path.display()),
        why,
    )
}

struct Headers {
    elf_type: u16,
    has_interpreter: bool,
    segments: Vec<Segment>,
}

fn headers<Elf: FileHeader<Endian = Endianness>>(f: &ElfFile<'_, Elf>) -> Headers {
    let e = f.endian();
    let mut segments = Vec::new();
    let mut has_interpreter = false;
    for ph in f.elf_program_headers() {
        match ph.p_type(e) {
            object::elf::PT_INTERP => has_interpreter = true,
            object::elf::PT_LOAD => segments.push(Segment {
                vaddr: ph.p_vaddr(e).into(),
                offset: ph.p_offset(e).into(),
                filesz: ph.p_filesz(e).into(),
                memsz: ph.p_memsz(e).into(),
                executable: ph.p_flags(e) & object::elf::PF_X != 0,
            }),
            _ => {}
        }
    }
    Headers {
        elf_type: f.elf_header().e_type(e),
        has_interpreter,
        segments,
    }
}

/// The ELF type and program headers (via `object`: blazesym does not expose them).
fn elf_headers(path: &Path, data: &[u8]) -> Result<(ElfType, Headers)> {
    let file = object::File::parse(data).map_err(|e| {
        elf_error(path, format!("not an ELF file ({e})"))
            .with_fix("give an ELF executable or shared library")
    })?;
    let h = match &file {
        object::File::Elf32(f) => headers(f),
        object::File::Elf64(f) => headers(f),
        _ => {
            return Err(elf_error(path, "not an ELF file")
                .with_fix("give an ELF executable or shared library"))
        }
    };
    let elf_type = match h.elf_type {
        object::elf::ET_EXEC => ElfType::Executable,
        object::elf::ET_DYN => ElfType::Dynamic,
        other => {
            return Err(elf_error(
                path,
                format!("ELF type {other} is neither an executable nor a shared object"),
            ))
        }
    };
    Ok((elf_type, h))
}

/// The defined function and data symbols of `.symtab` and `.dynsym`, read by blazesym,
/// sorted by (address, name) without duplicates.
fn elf_symbols(path: &Path) -> Result<Vec<Symbol>> {
    use blazesym::inspect::{source, Inspector};
    let mut elf = source::Elf::new(path);
    // The ELF symbol tables: DWARF has no data symbols.
    elf.debug_syms = false;
    let mut symbols = Vec::new();
    Inspector::new()
        .for_each(&source::Source::Elf(elf), |s| {
            let kind = match s.sym_type {
                blazesym::SymType::Function => Some(SymbolType::Function),
                blazesym::SymType::Variable => Some(SymbolType::Object),
                _ => None,
            };
            if let Some(kind) = kind.filter(|_| !s.name.is_empty()) {
                let raw = &*s.name;
                symbols.push(Symbol {
                    name: rustc_demangle::try_demangle(raw)
                        .map(|d| format!("{d:#}"))
                        .unwrap_or_else(|_| raw.to_string()),
                    raw_name: raw.to_string(),
                    addr: s.addr,
                    size: s.size.unwrap_or(0) as u64,
                    kind,
                });
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| elf_error(path, format!("its symbol tables cannot be read ({e})")))?;
    symbols.sort_by(|a, b| (a.addr, &a.raw_name).cmp(&(b.addr, &b.raw_name)));
    // .dynsym repeats .symtab entries.
    symbols.dedup_by(|a, b| a.addr == b.addr && a.raw_name == b.raw_name);
    Ok(symbols)
}

impl Symbols {
    /// Reads `path`'s symbol tables (`.symtab` and `.dynsym`, through blazesym) and
    /// program headers.
    ///
    /// Only defined function and object symbols with a name are kept; a stripped file
    /// still has its dynamic (exported) symbols.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] if the file cannot be read, [`ErrorKind::BadEvent`] if it
    /// is not an ELF file.
    pub fn load(path: impl AsRef<Path>) -> Result<Symbols> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorKind::NotFound
            } else {
                ErrorKind::Io
            };
            Error::new(
                kind,
                format!("read symbols of {}", path.display()),
                e.to_string(),
            )
            .with_fix("check the path of the program or library")
            .with_source(e)
        })?;
        let h = elf_headers(path, &data)?;
        drop(data);
        let symbols = elf_symbols(path)?;
        Ok(Symbols {
            path: path.to_owned(),
            elf_type: h.0,
            has_interpreter: h.1.has_interpreter,
            segments: h.1.segments,
            symbols,
        })
    }

    /// The file these symbols came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ET_EXEC` or `ET_DYN`.
    pub fn elf_type(&self) -> ElfType {
        self.elf_type
    }

    /// Whether the file names a program interpreter (`PT_INTERP`): true of ordinary
    /// dynamically linked programs, false of static PIEs and most libraries.
    pub fn has_interpreter(&self) -> bool {
        self.has_interpreter
    }

    /// The `PT_LOAD` segments, in file order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// All kept symbols, sorted by address.
    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// The symbol covering `addr` (an ELF virtual address) and `addr`'s offset in it.
    ///
    /// A symbol with a size covers `[addr, addr + size)`; one without (size 0) covers
    /// only its own address. Where symbols overlap (aliases), a function is preferred,
    /// then the one starting last.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        // Symbols starting at or before addr: those in [0, end).
        let end = self.symbols.partition_point(|s| s.addr <= addr);
        let covering = |s: &&Symbol| addr < s.addr.saturating_add(s.size.max(1));
        let mut best: Option<&Symbol> = None;
        // Look back over symbols starting at the same or nearby addresses; a long
        // scan is bounded, since sizes are small compared with the table.
        for s in self.symbols[..end].iter().rev().take(64).filter(covering) {
            match best {
                None => best = Some(s),
                Some(b) if b.kind == SymbolType::Object && s.kind == SymbolType::Function => {
                    best = Some(s)
                }
                _ => {}
            }
        }
        best.map(|s| (s.name.as_str(), addr - s.addr))
    }

    /// The symbol named `name` (demangled or as stored), if any. Functions are
    /// preferred over data of the same name.
    pub fn find(&self, name: &str) -> Option<&Symbol> {
        let mut found = self
            .symbols
            .iter()
            .filter(|s| s.name == name || s.raw_name == name);
        let first = found.next()?;
        Some(if first.kind == SymbolType::Function {
            first
        } else {
            found
                .find(|s| s.kind == SymbolType::Function)
                .unwrap_or(first)
        })
    }

    /// As [`find`](Self::find), but a missing symbol is an error naming the file and the
    /// closest names.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`], with "did you mean" suggestions by edit distance.
    pub fn require(&self, name: &str) -> Result<&Symbol> {
        self.find(name).ok_or_else(|| {
            let names: Vec<String> = self.symbols.iter().map(|s| s.name.clone()).collect();
            let mut e = Error::new(
                ErrorKind::NotFound,
                format!("find symbol '{name}'"),
                format!(
                    "{} has no function or object symbol '{name}'{}",
                    self.path.display(),
                    if self.symbols.is_empty() {
                        " (it has no symbols at all: stripped?)"
                    } else {
                        ""
                    }
                ),
            );
            e = match did_you_mean(name, &names) {
                Some(hint) => e.with_fix(hint),
                None => e.with_fix(format!(
                    "list the symbols with 'nm {}'",
                    self.path.display()
                )),
            };
            e
        })
    }

    /// The file offset holding virtual address `vaddr`, via the `PT_LOAD` segment that
    /// maps it from the file (not `.bss`): what a uprobe's `probe_offset` is.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.vaddr <= vaddr && vaddr - s.vaddr < s.filesz)
            .map(|s| s.offset + (vaddr - s.vaddr))
    }

    /// The virtual address of file offset `offset`, the inverse of
    /// [`file_offset`](Self::file_offset).
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.offset <= offset && offset - s.offset < s.filesz)
            .map(|s| s.vaddr + (offset - s.offset))
    }

    /// The load bias of a mapping of this file that starts at `start` with file offset
    /// `offset` (as in `/proc/PID/maps`), or `None` if no segment covers that offset.
    ///
    /// The kernel maps each segment from the page holding `p_offset` to the page holding
    /// `bias + p_vaddr`, so `bias = start + (p_offset - offset) - p_vaddr` for the
    /// segment whose page-aligned file range begins at `offset`.
    ///
    /// Segments can share a page (one ends and the next begins in it): the segment
    /// whose aligned start is exactly `offset` wins over one that merely covers it.
    pub fn bias_of_mapping(&self, start: u64, offset: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.offset & !(PAGE - 1) == offset)
            .or_else(|| {
                self.segments.iter().find(|s| {
                    let first = s.offset & !(PAGE - 1);
                    first <= offset && offset < s.offset + s.filesz.max(1)
                })
            })?;
        Some(
            start
                .wrapping_add(seg.offset)
                .wrapping_sub(offset)
                .wrapping_sub(seg.vaddr),
        )
    }

    /// Where the kernel will load this program when it is run with address-space
    /// randomization off ([`Command::no_aslr`](crate::launch::Command::no_aslr)): the
    /// load bias to add to symbol addresses. 0 for `ET_EXEC`.
    ///
    /// # Errors
    /// [`ErrorKind::Unsupported`] for a PIE without an interpreter (static PIE), whose
    /// base the kernel picks with `mmap`, and on architectures where perfring has not
    /// measured `ELF_ET_DYN_BASE` ([`NO_ASLR_PIE_BASE`]).
    pub fn no_aslr_bias(&self) -> Result<u64> {
        if self.elf_type == ElfType::Executable {
            return Ok(0);
        }
        let op = format!("predict the load address of {}", self.path.display());
        let fix = "start the program yourself and attach with -p PID, or build it with -no-pie";
        if !self.has_interpreter {
            return Err(Error::new(
                ErrorKind::Unsupported,
                op,
                "it is position-independent without an interpreter (a static PIE or a library), so the kernel picks its base at run time",
            )
            .with_fix(fix));
        }
        let base = NO_ASLR_PIE_BASE.ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                op,
                format!(
                    "perfring does not know ELF_ET_DYN_BASE on {}",
                    std::env::consts::ARCH
                ),
            )
            .with_fix(fix)
        })?;
        let first = self.segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
        Ok(base.wrapping_sub(first & !(PAGE - 1)))
    }
}

/// One file-backed mapping from `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// Mapped executable (`x` in the permissions).
    pub executable: bool,
    /// The mapped file as the kernel names it.
    pub path: PathBuf,
}

/// A process's file-backed mappings, from `/proc/PID/maps`.
#[derive(Debug, Clone)]
pub struct ProcessMaps {
    pid: libc::pid_t,
    // Sorted by start, as the kernel lists them.
    mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Reads `/proc/PID/maps`, keeping mappings of files (paths starting with `/`).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] if there is no such process, [`ErrorKind::PermissionDenied`]
    /// if its maps may not be read (ptrace access mode).
    pub fn read(pid: libc::pid_t) -> Result<ProcessMaps> {
        let file = format!("/proc/{pid}/maps");
        let text = std::fs::read_to_string(&file).map_err(|e| {
            let (kind, fix) = match e.kind() {
                std::io::ErrorKind::NotFound => (ErrorKind::NotFound, "check the pid (ps -e)"),
                std::io::ErrorKind::PermissionDenied => (
                    ErrorKind::PermissionDenied,
                    "run as the process's owner or with CAP_SYS_PTRACE",
                ),
                _ => (ErrorKind::Io, "check /proc is mounted"),
            };
            Error::new(kind, format!("read {file}"), e.to_string())
                .with_fix(fix)
                .with_source(e)
        })?;
        Ok(ProcessMaps::parse(pid, &text))
    }

    /// Parses the text of a `/proc/PID/maps` file.
    pub fn parse(pid: libc::pid_t, text: &str) -> ProcessMaps {
        let mappings = text
            .lines()
            .filter_map(|line| {
                // "start-end perms offset dev inode   path": the path, which may
                // contain spaces, is the rest of the line after the padding.
                let mut f = line.splitn(6, ' ');
                let (start, end) = f.next()?.split_once('-')?;
                let perms = f.next()?;
                let offset = u64::from_str_radix(f.next()?, 16).ok()?;
                let _dev = f.next()?;
                let _inode = f.next()?;
                let path = f.next()?.trim_start();
                if !path.starts_with('/') {
                    return None;
                }
                Some(Mapping {
                    start: u64::from_str_radix(start, 16).ok()?,
                    end: u64::from_str_radix(end, 16).ok()?,
                    offset,
                    executable: perms.contains('x'),
                    path: PathBuf::from(path),
                })
            })
            .collect();
        ProcessMaps { pid, mappings }
    }

    /// The process these maps are of.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The file mappings, by address.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// The mapping holding runtime address `addr`.
    pub fn mapping_of(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        self.mappings[..i].last().filter(|m| addr < m.end)
    }

    /// The load bias of `symbols`' file in this process, from its first mapping whose
    /// offset lies in a segment. Mappings are matched by path.
    pub fn bias_of(&self, symbols: &Symbols) -> Option<u64> {
        let path = symbols.path();
        self.mappings
            .iter()
            .filter(|m| same_file(&m.path, path))
            .find_map(|m| symbols.bias_of_mapping(m.start, m.offset))
    }

    /// The runtime address in this process of ELF virtual address `vaddr` of
    /// `symbols`' file (`vaddr + bias`).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] if the file is not mapped in the process.
    pub fn runtime_addr(&self, symbols: &Symbols, vaddr: u64) -> Result<u64> {
        let bias = self.bias_of(symbols).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "locate {} in process {}",
                    symbols.path().display(),
                    self.pid
                ),
                "the file is not mapped in the process",
            )
            .with_fix(format!("check /proc/{}/maps for the file's path", self.pid))
        })?;
        Ok(vaddr.wrapping_add(bias))
    }

    /// The file mapped at runtime address `addr` and the file offset it corresponds to.
    pub fn file_offset_of(&self, addr: u64) -> Option<(&Path, u64)> {
        let m = self.mapping_of(addr)?;
        Some((&m.path, addr - m.start + m.offset))
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Where a runtime address is: its file, ELF virtual address, and symbol if known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The mapped file.
    pub path: PathBuf,
    /// The address as an ELF virtual address of that file.
    pub vaddr: u64,
    /// The symbol and the offset into it.
    pub symbol: Option<(String, u64)>,
}

impl std::fmt::Display for Location {
    /// `symbol+0xoff`, or `file+0xvaddr` when no symbol covers it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.symbol {
            Some((name, 0)) => f.write_str(name),
            Some((name, off)) => write!(f, "{name}+{off:#x}"),
            None => {
                let file = self.path.file_name().unwrap_or(self.path.as_os_str());
                write!(f, "{}+{:#x}", file.to_string_lossy(), self.vaddr)
            }
        }
    }
}

/// A process's address space for symbolization: its maps and, loaded on first use,
/// each mapped file's symbols.
///
/// # Examples
/// ```no_run
/// let mut space = perfring::symbols::AddressSpace::new(1234)?;
/// let ip = 0x5555_5555_5139;
/// println!("{}", space.describe(ip)); // e.g. "target+0x4"
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug)]
pub struct AddressSpace {
    maps: ProcessMaps,
    // Keyed by path; None when the file could not be read or parsed.
    files: HashMap<PathBuf, Option<(Symbols, Option<u64>)>>,
}

impl AddressSpace {
    /// Reads `pid`'s maps. Call [`refresh`](Self::refresh) after it maps new files.
    ///
    /// # Errors
    /// As [`ProcessMaps::read`].
    pub fn new(pid: libc::pid_t) -> Result<AddressSpace> {
        Ok(AddressSpace::from_maps(ProcessMaps::read(pid)?))
    }

    /// Uses already read maps.
    pub fn from_maps(maps: ProcessMaps) -> AddressSpace {
        AddressSpace {
            maps,
            files: HashMap::new(),
        }
    }

    /// Re-reads the maps, e.g. after the process loaded a library; file symbols are
    /// loaded again on next use, since load biases may have changed.
    ///
    /// # Errors
    /// As [`ProcessMaps::read`].
    pub fn refresh(&mut self) -> Result<()> {
        self.maps = ProcessMaps::read(self.maps.pid())?;
        self.files.clear();
        Ok(())
    }

    /// The maps.
    pub fn maps(&self) -> &ProcessMaps {
        &self.maps
    }

    fn file(&mut self, path: &Path) -> Option<&(Symbols, Option<u64>)> {
        if !self.files.contains_key(path) {
            let pid = self.maps.pid();
            let entry = Symbols::load(path)
                .ok()
                .or_else(|| {
                    // A deleted or namespaced file is still reachable through /proc.
                    let m = self.maps.mappings().iter().find(|m| m.path == path)?;
                    let alias = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
                    let mut s = Symbols::load(alias).ok()?;
                    s.path = path.to_owned();
                    Some(s)
                })
                .map(|s| {
                    let bias = self.maps.bias_of(&s);
                    (s, bias)
                });
            self.files.insert(path.to_owned(), entry);
        }
        self.files.get(path)?.as_ref()
    }

    /// Where runtime address `addr` is, or `None` outside file mappings.
    pub fn locate(&mut self, addr: u64) -> Option<Location> {
        let m = self.maps.mapping_of(addr)?.clone();
        let Some((symbols, Some(bias))) = self.file(&m.path) else {
            return Some(Location {
                path: m.path,
                vaddr: addr - m.start + m.offset,
                symbol: None,
            });
        };
        let vaddr = addr.wrapping_sub(*bias);
        let symbol = symbols.lookup(vaddr).map(|(n, off)| (n.to_string(), off));
        Some(Location {
            path: m.path,
            vaddr,
            symbol,
        })
    }

    /// `symbol+0xoff` for `addr`, `file+0xvaddr` without a symbol, else `0xaddr`.
    pub fn describe(&mut self, addr: u64) -> String {
        match self.locate(addr) {
            Some(loc) => loc.to_string(),
            None => format!("{addr:#x}"),
        }
    }
}

/// The program an event's symbols are looked up in, and how its addresses are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetImage {
    /// No program: only events with numeric addresses resolve.
    None,
    /// A program about to be started by [`launch::Command`](crate::launch::Command) with
    /// [`no_aslr(true)`](crate::launch::Command::no_aslr); see the module docs.
    Spawned(PathBuf),
    /// A running process: its main executable, located through `/proc/PID/maps`.
    Process(libc::pid_t),
}

/// Whether `spec` is one of the forms [`resolve_event`] adds to perf's syntax
/// (`mem:SYMBOL…`, `uprobe:…`), i.e. whether it needs a symbol table.
pub fn is_symbolic(spec: &str) -> bool {
    if spec.starts_with("uprobe:") {
        return true;
    }
    spec.strip_prefix("mem:")
        .and_then(|rest| rest.chars().next())
        .is_some_and(|c| !c.is_ascii_digit())
}

fn bad(spec: &str, why: impl Into<String>, fix: impl Into<String>) -> Error {
    Error::new(ErrorKind::BadEvent, format!("parse event '{spec}'"), why).with_fix(fix)
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn access(letters: &str) -> Option<Access> {
    let (mut r, mut w, mut x) = (false, false, false);
    for c in letters.chars() {
        match c {
            'r' => r = true,
            'w' => w = true,
            'x' => x = true,
            _ => return None,
        }
    }
    Some(match (r, w, x) {
        (false, false, true) => Access::Execute,
        (true, false, false) => Access::Read,
        (false, true, false) => Access::Write,
        (true, true, false) => Access::ReadWrite,
        _ => return None,
    })
}

/// Splits `SYMBOL[+OFF]`.
fn symbol_and_offset<'a>(spec: &str, s: &'a str) -> Result<(&'a str, u64)> {
    match s.rsplit_once('+') {
        Some((name, off)) => {
            let off = number(off).ok_or_else(|| {
                bad(
                    spec,
                    format!("'{off}' is not an offset"),
                    "write the offset in decimal or 0x hex, e.g. main+0x10",
                )
            })?;
            Ok((name, off))
        }
        None => Ok((s, 0)),
    }
}

/// Parses an event string, accepting beyond perf's syntax ([`Event::parse`]):
///
/// | form | meaning |
/// | --- | --- |
/// | `mem:SYMBOL[+OFF][/LEN][:ACCESS][:MODS]` | a breakpoint on a symbol of the target's program (for a running process: else of the first loaded object defining it) |
/// | `mem:OBJECT:SYMBOL[+OFF][/LEN][:ACCESS][:MODS]` | the same in a loaded object of a running process: `mem:libc.so.6:malloc:x`, `mem:libc:malloc:x` (file-name stem) or its full path |
/// | `uprobe:PATH:SYMBOL[+OFF]` | a uprobe on a function of any ELF file |
/// | `uprobe:PATH+0xOFFSET` | a uprobe at a file offset (how uprobe events print) |
///
/// `ACCESS` is `r`, `w`, `rw` or `x`, as in perf (default `rw`); `MODS` are perf's
/// modifiers (`u`, `k`, ...), e.g. `mem:counter:w:u` ignores the kernel's own writes. The length defaults
/// to `sizeof(long)` for `x`, else to the symbol's size if it is 1, 2, 4 or 8 bytes,
/// else to 4 (perf's default). A `mem:` address comes from `image`: a spawned program's
/// link-time address plus its no-ASLR base, or a process's mapping of the object.
/// `OBJECT` is told from a symbol by a `.` or `/` in it and by what follows it: a field
/// that is neither an access (`r`, `w`, `rw`, `x`) nor perf modifiers, so
/// `mem:OBJECT:SYMBOL` needs a symbol whose name is not made only of those letters. A spawned program's libraries are not
/// loaded yet, so only the program itself may be named there (a uprobe works in them).
/// Everything else, numeric `mem:0x…` included, goes to [`Event::parse`].
///
/// # Errors
/// - [`ErrorKind::BadEvent`] for a malformed string, or `mem:SYMBOL` without a program.
/// - [`ErrorKind::NotFound`] for a missing file or symbol, with the closest names.
/// - [`ErrorKind::Unsupported`] for a PIE whose base cannot be predicted, or without
///   a `uprobe` PMU.
///
/// # Examples
/// ```no_run
/// use perfring::symbols::{resolve_event, TargetImage};
/// let image = TargetImage::Spawned("./prog".into());
/// let bp = resolve_event("mem:counter/4:w", &image)?;
/// let up = resolve_event("uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc", &image)?;
/// # Ok::<(), perfring::Error>(())
/// ```
pub fn resolve_event(spec: &str, image: &TargetImage) -> Result<Event> {
    resolve_event_in(spec, image, &Sysfs::default())
}

/// As [`resolve_event`], with PMUs (the `uprobe` PMU's type) read under `sysfs`.
///
/// # Errors
/// As [`resolve_event`].
pub fn resolve_event_in(spec: &str, image: &TargetImage, sysfs: &Sysfs) -> Result<Event> {
    if let Some(rest) = spec.strip_prefix("uprobe:") {
        return uprobe(spec, rest, sysfs);
    }
    if !is_symbolic(spec) {
        return Event::parse_in(spec, sysfs);
    }
    let rest = &spec["mem:".len()..];
    // mem:OBJECT:SYMBOL…: an object name has a '.' or '/' and is followed by a field
    // that is neither a breakpoint access nor perf modifiers.
    let (object, rest) = match rest.split_once(':') {
        Some((object, after))
            if object.contains(['.', '/']) && {
                let next = after.split(':').next().unwrap_or("");
                !next.is_empty() && access(next).is_none() && !is_modifiers(next)
            } =>
        {
            (Some(object), after)
        }
        _ => (None, rest),
    };
    // mem:SYMBOL[+OFF][/LEN][:ACCESS][:MODIFIERS]
    let (rest, tail) = rest.split_once(':').unwrap_or((rest, ""));
    let (acc, mods) = match tail.split_once(':') {
        Some((letters, mods)) => (Some(letters), mods),
        None if access(tail).is_some() => (Some(tail), ""),
        None => (None, tail),
    };
    let acc = match acc {
        None => Access::ReadWrite,
        Some(letters) => access(letters).ok_or_else(|| {
            bad(
                spec,
                format!("'{letters}' is not a breakpoint access"),
                "use r, w, rw or x, e.g. mem:counter:w",
            )
        })?,
    };
    let (rest, len) = match rest.split_once('/') {
        Some((head, len)) => {
            let n = number(len)
                .filter(|n| matches!(n, 1 | 2 | 4 | 8))
                .ok_or_else(|| {
                    bad(
                        spec,
                        format!("'{len}' is not a breakpoint length"),
                        "give 1, 2, 4 or 8 bytes, e.g. mem:counter/8:w",
                    )
                })?;
            (head, Some(n))
        }
        None => (rest, None),
    };
    let (name, off) = symbol_and_offset(spec, rest)?;
    let (symbols, bias) = match (image, object) {
        (TargetImage::None, _) => {
            return Err(bad(
                spec,
                format!("'{name}' is a symbol, but there is no program to look it up in"),
                "give a command (-- PROG ARGS) or a pid (-p PID), or a numeric address mem:0x…",
            ))
        }
        (TargetImage::Spawned(program), object) => {
            if let Some(object) = object.filter(|o| !object_matches(program, o)) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("resolve '{spec}'"),
                    format!(
                        "'{object}' is not {} and is loaded only once the program runs, at an address not known before",
                        program.display()
                    ),
                )
                .with_fix(format!(
                    "attach to the running program with -p PID, or probe the library with uprobe:PATH:{name}, which works before it is loaded"
                )));
            }
            let s = Symbols::load(program)?;
            let bias = s.no_aslr_bias()?;
            (s, bias)
        }
        (TargetImage::Process(pid), None) => {
            let (exe, bias) = process_exe(*pid)?;
            if exe.find(name).is_some() {
                (exe, bias)
            } else {
                // Not in the program: the first loaded object that defines it.
                let maps = ProcessMaps::read(*pid)?;
                match loaded_objects(&maps)
                    .into_iter()
                    .filter_map(|p| load_mapped(&maps, &p).ok())
                    .find(|s| s.find(name).is_some())
                {
                    Some(s) => {
                        let bias = maps.runtime_addr(&s, 0)?;
                        (s, bias)
                    }
                    // The program's closest names make the best suggestion.
                    None => (exe, bias),
                }
            }
        }
        (TargetImage::Process(pid), Some(object)) => {
            let maps = ProcessMaps::read(*pid)?;
            let objects = loaded_objects(&maps);
            let found: Vec<&PathBuf> = objects
                .iter()
                .filter(|p| object_matches(p, object))
                .collect();
            let path = match found[..] {
                [one] => one,
                [] => {
                    let names: Vec<String> = objects
                        .iter()
                        .filter_map(|p| Some(p.file_name()?.to_string_lossy().into_owned()))
                        .collect();
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!("resolve '{spec}'"),
                        format!("process {pid} has no object '{object}' loaded"),
                    )
                    .with_fix(match did_you_mean(object, &names) {
                        Some(hint) => hint,
                        None => format!("loaded: {}", names.join(", ")),
                    }));
                }
                _ => {
                    return Err(bad(
                        spec,
                        format!(
                            "'{object}' names several loaded objects: {}",
                            found
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        "give the object's full path, e.g. mem:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc",
                    ))
                }
            };
            let s = load_mapped(&maps, path)?;
            let bias = maps.runtime_addr(&s, 0)?;
            (s, bias)
        }
    };
    let sym = symbols.require(name)?;
    let len = len.unwrap_or(match acc {
        Access::Execute => acc.default_len(),
        _ if matches!(sym.size, 1 | 2 | 4 | 8) && off == 0 => sym.size,
        _ => acc.default_len(),
    });
    let addr = sym.addr.wrapping_add(off).wrapping_add(bias);
    // The numeric form goes through perf's parser, which checks it and the modifiers.
    let mut numeric = format!("mem:{addr:#x}/{len}:{}", acc.letters());
    if !mods.is_empty() {
        numeric = format!("{numeric}:{mods}");
    }
    Ok(Event::parse_in(&numeric, sysfs)?.with_name(spec))
}

/// Whether `s` is a string of perf's event modifiers (`u`, `k`, `pp`, ...).
fn is_modifiers(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| "ukhHGIpPSDWeb".contains(c))
}

/// Whether `path` is the object `object` names: its full path, its file name, or a
/// prefix of its file name ending before a `.` or `-` (`libc.so` for `libc.so.6`).
fn object_matches(path: &Path, object: &str) -> bool {
    if path == Path::new(object) {
        return true;
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name == object
        || name
            .strip_prefix(object)
            .is_some_and(|r| r.starts_with('.') || r.starts_with('-'))
}

/// The distinct files mapped executable in `maps`, in address order.
fn loaded_objects(maps: &ProcessMaps) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in maps.mappings().iter().filter(|m| m.executable) {
        if !out.contains(&m.path) {
            out.push(m.path.clone());
        }
    }
    out
}

/// The symbols of a file mapped in a process, read through `/proc/PID/map_files` when
/// the path no longer opens (deleted, or in another mount namespace).
fn load_mapped(maps: &ProcessMaps, path: &Path) -> Result<Symbols> {
    Symbols::load(path).or_else(|e| {
        let m = maps.mappings().iter().find(|m| m.path == path).ok_or(e)?;
        let alias = format!("/proc/{}/map_files/{:x}-{:x}", maps.pid(), m.start, m.end);
        let mut s = Symbols::load(alias)?;
        s.path = path.to_owned();
        Ok(s)
    })
}

/// A running process's executable's symbols and load bias.
fn process_exe(pid: libc::pid_t) -> Result<(Symbols, u64)> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("find the executable of process {pid}"),
            e.to_string(),
        )
        .with_fix("check the pid (ps -e) and that you may trace it")
        .with_source(e)
    })?;
    let maps = ProcessMaps::read(pid)?;
    // The link may name a file since replaced; /proc/PID/exe still opens it.
    let mut s = Symbols::load(format!("/proc/{pid}/exe"))?;
    s.path = exe;
    let bias = maps.runtime_addr(&s, 0)?;
    Ok((s, bias))
}

fn uprobe(spec: &str, rest: &str, sysfs: &Sysfs) -> Result<Event> {
    // uprobe:PATH:SYMBOL[+OFF] or uprobe:PATH+0xOFFSET
    let (path, offset) = match rest.rsplit_once(':') {
        Some((path, sym)) if !path.is_empty() => {
            let (name, off) = symbol_and_offset(spec, sym)?;
            let symbols = Symbols::load(path)?;
            let s = symbols.require(name)?;
            let vaddr = s.addr.wrapping_add(off);
            let offset = symbols.file_offset(vaddr).ok_or_else(|| {
                bad(
                    spec,
                    format!("{name}+{off:#x} ({vaddr:#x}) is not in a loaded segment of {path}"),
                    "probe an address inside the function's code",
                )
            })?;
            (path, offset)
        }
        _ => {
            let (path, off) = rest.rsplit_once('+').ok_or_else(|| {
                bad(
                    spec,
                    "a uprobe needs a file and a place in it",
                    "write uprobe:PATH:SYMBOL[+OFF] or uprobe:PATH+0xFILEOFFSET",
                )
            })?;
            let off = number(off).ok_or_else(|| {
                bad(
                    spec,
                    format!("'{off}' is not a file offset"),
                    "write uprobe:PATH+0xFILEOFFSET",
                )
            })?;
            (path, off)
        }
    };
    let type_file = sysfs
        .root()
        .join("sys/bus/event_source/devices/uprobe/type");
    let type_ = std::fs::read_to_string(&type_file)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("open uprobe '{spec}'"),
                format!(
                    "there is no uprobe PMU ({} is missing)",
                    type_file.display()
                ),
            )
            .with_fix("use a kernel built with CONFIG_UPROBE_EVENTS")
        })?;
    Ok(Event::uprobe(type_, Path::new(path), offset)?.with_name(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parse_paths_with_spaces_and_skip_anonymous() {
        let text = "\
555555554000-555555555000 r--p 00000000 fe:00 1234                       /tmp/my prog
555555555000-555555556000 r-xp 00001000 fe:00 1234                       /tmp/my prog
7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0                          [vvar]
7ffff7fc5000-7ffff7fc7000 rw-p 00000000 00:00 0 
";
        let m = ProcessMaps::parse(1, text);
        assert_eq!(m.mappings().len(), 2);
        assert_eq!(m.mappings()[1].path, Path::new("/tmp/my prog"));
        assert!(m.mappings()[1].executable);
        assert_eq!(m.mappings()[1].offset, 0x1000);
        assert_eq!(m.mapping_of(0x555555555010).unwrap().start, 0x555555555000);
        assert!(m.mapping_of(0x7ffff7fc1000).is_none());
        assert_eq!(
            m.file_offset_of(0x555555555010),
            Some((Path::new("/tmp/my prog"), 0x1010))
        );
    }

    #[test]
    fn symbolic_forms() {
        assert!(is_symbolic("mem:main:x"));
        assert!(is_symbolic("uprobe:/bin/true:main"));
        assert!(!is_symbolic("mem:0x1000:x"));
        assert!(!is_symbolic("cpu-clock"));
        assert_eq!(access("rw"), Some(Access::ReadWrite));
        assert_eq!(access("wr"), Some(Access::ReadWrite));
        assert_eq!(access("rx"), None);
    }

    #[test]
    fn mem_symbol_needs_a_program() {
        let e = resolve_event("mem:main:x", &TargetImage::None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadEvent);
        let e = resolve_event("mem:0x1000:x", &TargetImage::None).unwrap();
        assert_eq!(e.to_string(), "mem:0x1000/8:x");
    }

    #[test]
    fn mem_symbol_access_and_modifiers() {
        let image = TargetImage::Spawned(std::env::current_exe().unwrap());
        // Every program, this test binary included, has a `main`.
        let sym = "main";
        let check = |spec: &str, letters: &str, user_only: bool| {
            let e = resolve_event(spec, &image).unwrap();
            assert_eq!(e.name(), spec);
            assert!(e.to_string().contains(letters), "{e}");
            assert_eq!(e.modifiers().exclude_kernel, user_only, "{spec}");
        };
        check(&format!("mem:{sym}:x"), ":x", false);
        check(&format!("mem:{sym}:x:u"), ":x", true);
        check(&format!("mem:{sym}/4:w:u"), "/4:w", true);
        check(&format!("mem:{sym}:u"), ":rw", true);
        check(&format!("mem:{sym}"), ":rw", false);
        let e = resolve_event(&format!("mem:{sym}:q"), &image).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadEvent);
    }
}
