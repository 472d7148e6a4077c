//! ELF files: type, program headers, build id and symbol tables — from names in a file
//! to its virtual addresses and file offsets, and the load bias that places them in a
//! process.
//!
//! Program headers and the build id are read with `object` (blazesym does not expose
//! them), symbol tables with [`blazesym`]. [`ElfFile::bias_of_mapping`] is the one rule
//! by which the crate turns a mapping of a file into its load bias: the unwinder, the
//! event resolver and the address spaces all use it.
//!
//! # Breakpoints on a command not yet started
//! Counters for a spawned command are opened on the stopped child before it `exec`s
//! ([`launch`](crate::launch)), so a breakpoint's address must be known before the
//! program is even mapped. For a non-PIE (`ET_EXEC`) program the symbol's address is
//! final. For a PIE, the child is started with
//! [`Command::no_aslr`](crate::launch::Command::no_aslr): with `ADDR_NO_RANDOMIZE` the
//! kernel's ELF loader places a PIE that has an interpreter at `ELF_ET_DYN_BASE` minus
//! its first segment's page-aligned address. `ELF_ET_DYN_BASE` is `2/3 * TASK_SIZE`
//! rounded to a page on x86_64, i.e. [`NO_ASLR_PIE_BASE`]; the constant is checked
//! against a real PIE spawned with `no_aslr` in `tests/symbols.rs`. On other
//! architectures perfring has not measured it and [`ElfFile::no_aslr_bias`] refuses
//! PIEs with [`ErrorKind::Unsupported`].
//!
//! # Safety
//! Files are mapped read-only with memmap2 to parse their headers (`map_readonly`); the
//! one `unsafe` call says why it holds.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile as ObjElfFile, FileHeader, ProgramHeader};
use object::Endianness;

use crate::event::names::did_you_mean;
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

/// One ELF file: its type, program interpreter, `PT_LOAD` segments and GNU build id,
/// read when it is opened, and its function and object symbols, read on first use.
#[derive(Debug, Clone)]
pub struct ElfFile {
    /// The name the file is known by (a process's mapping of it).
    path: PathBuf,
    /// Where its bytes are read from: `path`, or an alias of it.
    source: PathBuf,
    elf_type: ElfType,
    has_interpreter: bool,
    segments: Vec<Segment>,
    build_id: Option<Vec<u8>>,
    // INVARIANT: sorted by (addr, name).
    symbols: std::sync::OnceLock<Vec<Symbol>>,
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

fn headers<Elf: FileHeader<Endian = Endianness>>(f: &ObjElfFile<'_, Elf>) -> Headers {
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

/// The ELF type, program headers and build id (via `object`: blazesym does not expose
/// program headers).
fn elf_headers(path: &Path, data: &[u8]) -> Result<(ElfType, Headers, Option<Vec<u8>>)> {
    use object::Object;
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
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok((elf_type, h, build_id))
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
                    name: crate::symbolize::demangle(raw).into_owned(),
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

impl ElfFile {
    /// Opens `path` and reads its headers: ELF type, `PT_INTERP`, `PT_LOAD` segments
    /// and GNU build id. Symbols are read on first use ([`symbols`](Self::symbols)).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] if the file cannot be read, [`ErrorKind::BadEvent`] if it
    /// is not an ELF executable or shared object.
    pub fn open(path: impl AsRef<Path>) -> Result<ElfFile> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| read_error(path, e))?;
        let data = map_readonly(&file).map_err(|e| read_error(path, e))?;
        let (elf_type, h, build_id) = elf_headers(path, &data)?;
        Ok(ElfFile {
            path: path.to_owned(),
            source: path.to_owned(),
            elf_type,
            has_interpreter: h.has_interpreter,
            segments: h.segments,
            build_id,
            symbols: std::sync::OnceLock::new(),
        })
    }

    /// As [`open`](Self::open), with the symbol tables read now: a file whose symbols
    /// cannot be read is an error here rather than an empty table later.
    ///
    /// # Errors
    /// As [`open`](Self::open); [`ErrorKind::BadEvent`] if the symbol tables cannot be
    /// read.
    pub fn load(path: impl AsRef<Path>) -> Result<ElfFile> {
        let f = ElfFile::open(path)?;
        let symbols = elf_symbols(&f.source)?;
        let _ = f.symbols.set(symbols);
        Ok(f)
    }

    /// The GNU build id (`NT_GNU_BUILD_ID`), if the file has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// The same file under `path`: for a file read through an alias (`/proc/PID/exe`,
    /// `/proc/PID/map_files/…`) that a process knows by another name.
    pub fn renamed(mut self, path: impl Into<PathBuf>) -> ElfFile {
        self.path = path.into();
        self
    }

    /// The file's path.
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

    /// The defined function and object symbols of `.symtab` and `.dynsym` (read by
    /// blazesym on first use), sorted by address. A stripped file still has its
    /// dynamic (exported) symbols; a file whose tables cannot be read has none.
    pub fn symbols(&self) -> &[Symbol] {
        self.symbols
            .get_or_init(|| elf_symbols(&self.source).unwrap_or_default())
    }

    /// The symbol covering `addr` (an ELF virtual address) and `addr`'s offset in it.
    ///
    /// A symbol with a size covers `[addr, addr + size)`; one without (size 0) covers
    /// only its own address. Where symbols overlap (aliases), a function is preferred,
    /// then the one starting last.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        // Symbols starting at or before addr: those in [0, end).
        let end = self.symbols().partition_point(|s| s.addr <= addr);
        let covering = |s: &&Symbol| addr < s.addr.saturating_add(s.size.max(1));
        let mut best: Option<&Symbol> = None;
        // Look back over symbols starting at the same or nearby addresses; a long
        // scan is bounded, since sizes are small compared with the table.
        for s in self.symbols()[..end].iter().rev().take(64).filter(covering) {
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
            .symbols()
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
            let names: Vec<String> = self.symbols().iter().map(|s| s.name.clone()).collect();
            let mut e = Error::new(
                ErrorKind::NotFound,
                format!("find symbol '{name}'"),
                format!(
                    "{} has no function or object symbol '{name}'{}",
                    self.path.display(),
                    if self.symbols().is_empty() {
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

fn read_error(path: &Path, e: std::io::Error) -> Error {
    let kind = if e.kind() == std::io::ErrorKind::NotFound {
        ErrorKind::NotFound
    } else {
        ErrorKind::Io
    };
    Error::new(kind, format!("read {}", path.display()), e.to_string())
        .with_fix("check the path of the program or library")
        .with_source(e)
}

/// Maps `file` read-only, to parse its headers without reading it whole.
fn map_readonly(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: memmap2 requires that the file not be changed while mapped, or reads see
    // the change (or SIGBUS if it shrinks). The mapping lives only while `open` parses
    // the headers; a program or library is not rewritten in place while it runs
    // (installers replace files by renaming), and a file that is truncated meanwhile
    // is the same hazard `perf` and every symbolizer that maps files accepts.
    unsafe { memmap2::Mmap::map(file) }
}
