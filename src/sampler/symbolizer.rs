//! Symbols for sample IPs of the processes a sampler watches.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::launch;
use crate::symbols::{AddressSpace, ElfType, Symbols};

/// How soon a process's maps may be read again when an address is in none of them.
const REFRESH_EVERY: Duration = Duration::from_millis(5);

/// Symbol lookup for sample IPs: each process's maps, read as early as possible and
/// again when an address is not found (maps read before an `exec` or a `dlopen`); for a
/// spawned program, its ELF file at the address it is known to load at, in case it
/// exited before its maps could be read.
///
/// # Examples
/// ```no_run
/// use perfring::sampler::Symbolizer;
/// let mut symbols = Symbolizer::new();
/// let pid = std::process::id();
/// symbols.read(pid);
/// if let Some((name, offset)) = symbols.lookup(pid, main as usize as u64) {
///     println!("{name}+{offset:#x}");
/// }
/// # fn main() {}
/// ```
#[derive(Debug, Default)]
pub struct Symbolizer {
    spaces: HashMap<u32, Option<AddressSpace>>,
    refreshed: HashMap<u32, Instant>,
    /// (pid, symbols, bias) of the spawned program when its load address is predictable.
    program: Option<(u32, Symbols, u64)>,
}

impl Symbolizer {
    /// An empty symbolizer: processes' maps are read on first lookup.
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Knows `pid`'s program without its maps: `path`, loaded where it is known to load
    /// (its link address, or for a PIE started without ASLR, the kernel's fixed base).
    /// Does nothing for a PIE under ASLR or an unreadable file.
    pub fn with_program(&mut self, pid: u32, path: &Path, no_aslr: bool) {
        if let Ok(symbols) = Symbols::load(path) {
            let bias = match symbols.elf_type() {
                ElfType::Executable => Some(0),
                ElfType::Dynamic if no_aslr => symbols.no_aslr_bias().ok(),
                ElfType::Dynamic => None,
            };
            if let Some(bias) = bias {
                self.program = Some((pid, symbols, bias));
            }
        }
    }

    /// Reads (again) `pid`'s maps and the symbols of its files.
    pub fn read(&mut self, pid: u32) {
        let space = AddressSpace::new(pid as i32).ok();
        self.spaces.insert(pid, space);
        self.refreshed.insert(pid, Instant::now());
    }

    /// The symbol containing `ip` in process `pid`, and the offset into it.
    pub fn lookup(&mut self, pid: u32, ip: u64) -> Option<(String, u64)> {
        if !self.spaces.contains_key(&pid) {
            self.read(pid);
        }
        match self.in_maps(pid, ip) {
            // In a mapped file: its symbol, or none (a stripped file) without re-reading.
            Some(found) => found.or_else(|| self.in_program(pid, ip)),
            // Outside every mapping we know: read the maps again, at most every few
            // milliseconds (a refresh reloads the files' symbols).
            None => {
                let stale = self
                    .refreshed
                    .get(&pid)
                    .map_or(true, |t| t.elapsed() > REFRESH_EVERY);
                if stale && launch::is_alive(pid as i32) {
                    if let Some(Some(space)) = self.spaces.get_mut(&pid) {
                        let _ = space.refresh();
                    } else {
                        self.read(pid);
                    }
                    self.refreshed.insert(pid, Instant::now());
                    if let Some(Some(sym)) = self.in_maps(pid, ip) {
                        return Some(sym);
                    }
                }
                self.in_program(pid, ip)
            }
        }
    }

    /// The spawned program's symbol at `ip`, from its file and predicted load address.
    fn in_program(&self, pid: u32, ip: u64) -> Option<(String, u64)> {
        match &self.program {
            Some((p, symbols, bias)) if *p == pid => symbols
                .lookup(ip.wrapping_sub(*bias))
                .map(|(n, off)| (n.to_string(), off)),
            _ => None,
        }
    }

    /// `None` if `ip` is in no known mapping; `Some(symbol or None)` if it is.
    fn in_maps(&mut self, pid: u32, ip: u64) -> Option<Option<(String, u64)>> {
        let space = self.spaces.get_mut(&pid)?.as_mut()?;
        Some(space.locate(ip)?.symbol)
    }
}
