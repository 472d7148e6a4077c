//! Naming the frames of a sample with [`blazesym`]: ELF and DWARF symbols, file:line,
//! inlined frames, Rust and C++ demangling, debug files found by build id and
//! `.gnu_debuglink` under `/usr/lib/debug` — the one symbolizer of the crate; and
//! JIT-compiled code from the runtime's `/tmp/perf-PID.map` or `jit-PID.dump` (`jit.rs`).
//!
//! [`Symbolizer`] turns an address of a process into [`Frame`]s — one per inlined
//! function at that address, then the function itself — through the mapping that holds
//! it in the process's [`AddressSpaces`] and the file offset (`ip - start + pgoff`),
//! never through `/proc`, so it works after the process is gone. Kernel addresses are
//! named from [`KernelSymbols`]. Results are cached per (file, offset): a hot loop is
//! looked up once.
//!
//! Symbolization is lazy: nothing is read until an address is asked for. Opening a
//! file the first time can take 100 ms and more (DWARF of a large library), so a
//! profiler names samples off the thread that drains the rings: the
//! [`Pipeline`](crate::pipeline::Pipeline) does, on the writer thread.
//!
//! # Examples
//! ```no_run
//! use perfring::space::AddressSpaces;
//! use perfring::symbolize::Symbolizer;
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

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Sym, Symbolized};

use crate::space::{AddressSpaces, KernelSymbols, Mapping};

mod demangle;
mod jit;

use crate::unwind::RawFrame;
pub use demangle::demangle;

/// Cached lookups beyond which the cache is emptied (a bound on memory, not a tuning).
const CACHE_LIMIT: usize = 1 << 20;

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
    /// The mapped file (shared object, executable, `[vdso]`, `[kernel.kallsyms]`).
    pub dso: Option<String>,
    /// The mapping of the process that holds `ip` (none for kernel frames and
    /// addresses outside every known mapping).
    pub mapping: Option<Mapping>,
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
    kernel: Option<KernelSymbols>,
    /// JIT-compiled code's names, per process.
    jit: jit::JitNames,
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
    /// A symbolizer with DWARF line information, inlined functions and demangling on
    /// ([`demangle`]: only names with a mangling prefix).
    pub fn new() -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                // Names are demangled by `demangle`, which leaves C names alone.
                .enable_demangling(false)
                .build(),
            cache: HashMap::new(),
            kernel: None,
            jit: jit::JitNames::default(),
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
            push(out, raw, adjust, &named, Some("[kernel.kallsyms]"), None);
            return;
        }
        let mapping = spaces.mapping(pid, lookup);
        if mapping.is_none_or(|m| !m.is_file()) {
            // Anonymous code: JIT-compiled, named from the runtime's perf map or jitdump.
            let named = self.jit_names(spaces, pid, lookup);
            let dso = mapping.map(|m| m.path.to_string_lossy().into_owned());
            push(out, raw, adjust, &named, dso.as_deref(), mapping);
            return;
        }
        let Some(m) = mapping else { return };
        let dso = m.path.to_string_lossy().into_owned();
        // The file as the process sees it (a container's, through its root).
        let file = crate::space::file_of(pid, &m.path);
        let named = if self.build_id_matches(m, &file) {
            self.file_names(&file, m.file_offset(lookup))
        } else {
            Arc::from(Vec::new())
        };
        push(out, raw, adjust, &named, Some(&dso), Some(m));
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
        push(
            &mut out,
            raw,
            0,
            &named,
            Some(&path.to_string_lossy()),
            None,
        );
        out
    }

    fn build_id_matches(&mut self, m: &Mapping, file: &Arc<Path>) -> bool {
        let Some(id) = &m.build_id else {
            return true;
        };
        let key = (file.clone(), id.to_vec());
        *self.build_ids.entry(key).or_insert_with(|| {
            match blazesym::helper::read_elf_build_id(&**file) {
                Ok(Some(found)) => found.as_ref() == &id[..],
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

    fn jit_names(&mut self, spaces: &AddressSpaces, pid: u32, addr: u64) -> Arc<[Named]> {
        symbol_only(self.jit.lookup(pid, addr, spaces.process(pid)))
    }

    fn kernel_names(&mut self, addr: u64) -> Arc<[Named]> {
        let table = self.kernel.get_or_insert_with(KernelSymbols::shared);
        symbol_only(table.lookup(addr))
    }

    /// Why jitdump files of the processes named so far are read no further, one line
    /// per file naming it and the cause (a file of the other byte order, not a
    /// jitdump, a malformed record, or closed by its runtime); code loaded before
    /// that point is still named.
    pub fn jit_problems(&self) -> impl Iterator<Item = &str> {
        self.jit.problems()
    }

    /// Names kernel addresses from `table` instead of reading `/proc/kallsyms` at the
    /// first kernel frame.
    pub fn with_kernel_symbols(mut self, table: KernelSymbols) -> Symbolizer {
        self.kernel = Some(table);
        self
    }
}

thread_local! {
    static THREAD_SYMBOLIZER: std::cell::RefCell<Option<Symbolizer>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the calling thread's symbolizer, created at its first use and kept
/// (with its cache) until the thread ends.
///
/// A [`Symbolizer`] cannot move between threads (blazesym keeps reference counts that
/// are not atomic), so a type that must be `Send` and still names frames — the
/// [`Pipeline`](crate::pipeline::Pipeline), moved to its writer thread — uses the
/// symbolizer of the thread it runs on.
pub fn with_thread_symbolizer<R>(f: impl FnOnce(&mut Symbolizer) -> R) -> R {
    THREAD_SYMBOLIZER.with(|cell| {
        let mut slot = cell.borrow_mut();
        f(slot.get_or_insert_with(Symbolizer::new))
    })
}

/// A name from a table of symbols alone (the kernel's, a JIT's): no file, no line,
/// no inlined frames; none when the address is in no symbol.
fn symbol_only(hit: Option<(impl AsRef<str>, u64)>) -> Arc<[Named]> {
    match hit {
        Some((name, off)) => Arc::from(vec![Named {
            sym: name.as_ref().to_string(),
            off: Some(off),
            file: None,
            line: None,
            inlined: false,
        }]),
        None => Arc::from(Vec::new()),
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
                sym: demangle(&f.name).into_owned(),
                off: None,
                file,
                line,
                inlined: true,
            }
        })
        .collect();
    let (file, line) = code(sym.code_info.as_deref());
    out.push(Named {
        sym: demangle(&sym.name).into_owned(),
        off: Some(sym.offset as u64),
        file,
        line,
        inlined: false,
    });
    out
}

fn push(
    out: &mut Vec<Frame>,
    raw: RawFrame,
    adjust: u64,
    named: &[Named],
    dso: Option<&str>,
    mapping: Option<&Mapping>,
) {
    if named.is_empty() {
        out.push(Frame {
            ip: raw.ip,
            sym: None,
            off: None,
            file: None,
            line: None,
            inlined: false,
            dso: dso.map(str::to_owned),
            mapping: mapping.cloned(),
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
            mapping: mapping.cloned(),
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
            mapping: None,
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
