//! Address spaces: which file, at which file offset, holds an address of a process —
//! the one model of a process's mappings in the crate.
//!
//! - [`AddressSpaces`]: every watched process's executable mappings and name, fed by
//!   the ring's `MMAP`/`MMAP2`, `COMM` (exec), `FORK` and `EXIT` records
//!   ([`observe`](AddressSpaces::observe)), and by `/proc` when attaching to a process
//!   that already runs ([`attach`](AddressSpaces::attach)). A process's map is kept
//!   after it exits (until [`forget_exited`](AddressSpaces::forget_exited)), so its
//!   samples are named however late they are drained.
//! - [`ProcessSpace`]: one process: its [`Mapping`]s (one overlap rule: a new mapping
//!   replaces what it overlaps, as `mmap(MAP_FIXED)` does), its name, its program.
//! - [`KernelSymbols`]: the kernel's symbol table (`/proc/kallsyms`), read once.
//!
//! The symbolizer ([`symbolize`](crate::symbolize)) and the unwinder
//! ([`unwind`](crate::unwind)) look addresses up here; the load bias of a mapped file is
//! [`ProcessSpace::bias_of`] (through [`ElfFile::bias_of_mapping`]).
//!
//! # Examples
//! ```no_run
//! use perfring::space::AddressSpaces;
//!
//! let mut spaces = AddressSpaces::new();
//! spaces.attach(1234)?; // a process already running: its maps, read once
//! // ... then feed every record drained from the ring: spaces.observe(&record);
//! if let Some(m) = spaces.mapping(1234, 0x5555_5555_5139) {
//!     println!("{} at file offset {:#x}", m.path.display(), m.file_offset(0x5555_5555_5139));
//! }
//! # Ok::<(), perfring::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use crate::elf::ElfFile;
use crate::records::{Mmap2File, Record, RecordKind};
use crate::Result;

/// `PROT_EXEC` as MMAP2 records report it.
const PROT_EXEC: u32 = 0x4;

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
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
    pub build_id: Option<Arc<[u8]>>,
}

impl Mapping {
    /// The file offset of address `addr` in this mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }

    /// Whether the mapping names a file (rather than `[vdso]`, `//anon`, a `memfd:`,
    /// ...): one that can be opened by its name to read its symbols.
    pub fn is_file(&self) -> bool {
        let p = self.path.as_os_str().as_encoded_bytes();
        p.starts_with(b"/") && !p.starts_with(b"//") && !p.starts_with(b"/memfd:")
    }

    /// Whether `addr` is inside.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// One process's executable mappings, name and program.
#[derive(Debug, Clone, Default)]
pub struct ProcessSpace {
    comm: Option<String>,
    exe: Option<Arc<Path>>,
    // Keyed by start; INVARIANT: the mappings do not overlap.
    maps: BTreeMap<u64, Mapping>,
    exited: bool,
    generation: u64,
}

impl ProcessSpace {
    /// The process's name (its `comm`), if a record or `/proc` gave it.
    pub fn comm(&self) -> Option<&str> {
        self.comm.as_deref()
    }

    /// The program the process runs: `/proc/PID/exe` when attached, else the first
    /// file mapped executable after its last `exec` (the kernel maps the program before
    /// its interpreter).
    pub fn exe(&self) -> Option<&Arc<Path>> {
        self.exe.as_ref()
    }

    /// Whether an `EXIT` record for the process was seen.
    pub fn exited(&self) -> bool {
        self.exited
    }

    /// The mappings, by address.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.values()
    }

    /// The mapping holding `addr`.
    pub fn mapping_of(&self, addr: u64) -> Option<&Mapping> {
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

    /// The load bias of `elf` in this process (runtime address = ELF virtual address +
    /// bias), from its first mapping whose offset lies in one of its segments; mappings
    /// are matched by path (through symbolic links).
    pub fn bias_of(&self, elf: &ElfFile) -> Option<u64> {
        let path = elf.path();
        let same = |m: &&Mapping| {
            &*m.path == path
                || match (std::fs::canonicalize(&*m.path), std::fs::canonicalize(path)) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => false,
                }
        };
        self.maps
            .values()
            .filter(same)
            .find_map(|m| elf.bias_of_mapping(m.start, m.pgoff))
    }

    /// Adds `m`; it replaces whatever it overlaps (the kernel reports no `munmap`).
    pub fn insert(&mut self, m: Mapping) {
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
                        Mapping {
                            end: m.start,
                            ..old.clone()
                        },
                    );
                }
                if old.end > m.end {
                    let cut = m.end - old.start;
                    self.maps.insert(
                        m.end,
                        Mapping {
                            start: m.end,
                            pgoff: old.pgoff + cut,
                            ..old
                        },
                    );
                }
            }
        }
        if self.exe.is_none() && m.is_file() {
            self.exe = Some(m.path.clone());
        }
        self.maps.insert(m.start, m);
        self.generation += 1;
    }

    /// An `exec`: the old image's mappings and program are gone.
    fn exec(&mut self) {
        self.maps.clear();
        self.exe = None;
        self.generation += 1;
        self.exited = false;
    }
}

/// Every watched process's address space, kept from the ring's records.
///
/// Feed it each record drained (in time order) with [`observe`](Self::observe);
/// counters must have been opened with `mmap2`, `comm` and `task` set
/// ([`Builder::track_tasks`](crate::Builder::track_tasks)), as the sampler's tracking
/// counter is. For a process that was running before its counters were opened, call
/// [`attach`](Self::attach) first (or feed the records
/// [`synthesize_process`](crate::synth::synthesize_process) writes): the kernel
/// reports only mappings made after the counter was enabled.
#[derive(Debug, Clone, Default)]
pub struct AddressSpaces {
    procs: HashMap<u32, ProcessSpace>,
    /// Each thread's name, from `COMM` records (and inherited at `FORK`).
    threads: HashMap<u32, String>,
}

impl AddressSpaces {
    /// No processes yet.
    pub fn new() -> AddressSpaces {
        AddressSpaces::default()
    }

    /// Reads a running process's executable mappings, program and thread names from
    /// `/proc`; records observed later add to them.
    ///
    /// # Errors
    /// As [`proc::maps`](crate::proc::maps): the process does not exist or may not be
    /// read.
    pub fn attach(&mut self, pid: u32) -> Result<()> {
        let maps = crate::proc::maps(pid as libc::pid_t)?;
        let space = self.procs.entry(pid).or_default();
        for tid in crate::proc::threads(pid as libc::pid_t).unwrap_or_default() {
            if let Some(name) = crate::proc::comm(pid as libc::pid_t, tid) {
                let name = String::from_utf8_lossy(&name).into_owned();
                if tid as u32 == pid {
                    space.comm = Some(name.clone());
                }
                self.threads.insert(tid as u32, name);
            }
        }
        if let Some(exe) = crate::proc::exe(pid as libc::pid_t) {
            space.exe = Some(Arc::from(exe.as_path()));
        }
        for m in maps.iter().filter(|m| m.exec) {
            let name = match m.path() {
                Some(p) => Arc::from(p),
                None if m.name.is_empty() => Arc::from(Path::new("//anon")),
                None => Arc::from(Path::new(m.name.as_str())),
            };
            space.insert(Mapping {
                start: m.start,
                end: m.end,
                pgoff: m.offset,
                path: name,
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
    pub fn insert(&mut self, pid: u32, mapping: Mapping) {
        self.procs.entry(pid).or_default().insert(mapping);
    }

    /// Takes in one record: `MMAP`/`MMAP2` of executable code add a mapping, `COMM`
    /// names the thread (and, for an exec, forgets the old image), `FORK` of a new
    /// process copies its parent's map, `EXIT` of a process marks it exited (its map
    /// is kept). Returns whether the record was one of these.
    pub fn observe(&mut self, record: &Record<'_>) -> bool {
        match record.kind() {
            RecordKind::Mmap2(m) => {
                if m.prot & PROT_EXEC != 0 {
                    let build_id = match m.file {
                        Mmap2File::BuildId(id) => Some(id),
                        Mmap2File::Inode { .. } => None,
                    };
                    self.add(m.pid, m.addr, m.len, m.pgoff, m.filename, build_id);
                }
            }
            RecordKind::Mmap(m) => {
                // Without mmap_data, MMAP records are executable mappings only; the
                // kernel's own text (pid -1) is not a process's.
                if !record.misc().mmap_data() && m.pid != u32::MAX {
                    self.add(m.pid, m.addr, m.len, m.pgoff, m.filename, None);
                }
            }
            RecordKind::Comm(c) => {
                let name = String::from_utf8_lossy(c.comm).into_owned();
                let space = self.procs.entry(c.pid).or_default();
                if c.pid == c.tid {
                    space.comm = Some(name.clone());
                }
                if record.misc().comm_exec() {
                    space.exec();
                }
                self.threads.insert(c.tid, name);
            }
            RecordKind::Fork(t) => {
                if let Some(name) = self.threads.get(&t.ptid).cloned() {
                    self.threads.insert(t.tid, name);
                }
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

    fn add(&mut self, pid: u32, addr: u64, len: u64, pgoff: u64, name: &[u8], id: Option<&[u8]>) {
        let name = String::from_utf8_lossy(name);
        let m = Mapping {
            start: addr,
            end: addr.saturating_add(len),
            pgoff,
            path: Arc::from(Path::new(name.as_ref())),
            build_id: id.filter(|id| !id.is_empty()).map(Arc::from),
        };
        if m.is_file() {
            // A container's file is opened now, while its process lives: it is read
            // through its root later, however soon the process exits.
            file_of(pid, &m.path);
        }
        self.insert(pid, m);
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
    pub fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        self.procs.get(&pid)?.mapping_of(addr)
    }

    /// Thread `tid`'s name, from the last `COMM` record (or `/proc`) that named it, or
    /// its creator's.
    pub fn thread_name(&self, tid: u32) -> Option<&str> {
        self.threads.get(&tid).map(String::as_str)
    }

    /// Drops the processes that have exited (and their threads' names), keeping memory
    /// flat in a long recording; their later samples, if any, are no longer named.
    pub fn forget_exited(&mut self) {
        self.procs.retain(|_, p| !p.exited);
    }

    /// Drops process `pid`'s map and name (a long recording, once its `EXIT` is far
    /// enough behind that no sample of it can still come).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Drops thread `tid`'s name (once it has exited).
    pub fn forget_thread(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }
}

/// Where the bytes of `path`, as process `pid` names it in its mappings, can be read.
///
/// A process in another mount namespace (a container) or under another root
/// (`chroot`) names files that are not ours at the same path: they are read through
/// `/proc/PID/root`, and kept open, so that they can be read again after the process
/// is gone (the path returned is then `/proc/self/fd/N`). For a process that shares our
/// root, and once nothing better is known, `path` itself.
///
/// # Examples
/// ```
/// use std::path::Path;
/// let me = std::process::id();
/// let exe = std::env::current_exe().unwrap();
/// assert_eq!(&*perfring::space::file_of(me, &exe), exe.as_path());
/// ```
pub fn file_of(pid: u32, path: &Path) -> Arc<Path> {
    use std::sync::{Mutex, OnceLock};
    /// Files of other roots, opened: by (root identity, path); and where each process
    /// found them, by (pid, path), for when it is gone and its root cannot be told.
    type Opened = HashMap<(String, Arc<Path>), (std::fs::File, Arc<Path>)>;
    type Found = HashMap<(u32, Arc<Path>), Arc<Path>>;
    static OPENED: OnceLock<Mutex<(Opened, Found)>> = OnceLock::new();
    /// Beyond this many held files no more are opened: a bound on descriptors.
    const HELD: usize = 1024;
    let opened = OPENED.get_or_init(|| Mutex::new((HashMap::new(), HashMap::new())));
    let mut opened = opened.lock().unwrap_or_else(|p| p.into_inner());
    let (files, by_pid) = &mut *opened;
    let Some(root) = foreign_root(pid) else {
        return by_pid
            .get(&(pid, Arc::from(path)))
            .cloned()
            .unwrap_or_else(|| Arc::from(path));
    };
    let key = (root, Arc::<Path>::from(path));
    if let Some((_, at)) = files.get(&key) {
        by_pid.insert((pid, key.1.clone()), at.clone());
        return at.clone();
    }
    let inside =
        Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path));
    match std::fs::File::open(&inside) {
        Ok(file) if files.len() < HELD => {
            use std::os::fd::AsRawFd;
            let at: Arc<Path> =
                Arc::from(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())));
            by_pid.insert((pid, key.1.clone()), at.clone());
            files.insert(key, (file, at.clone()));
            at
        }
        Ok(_) => Arc::from(inside.as_path()),
        Err(_) => Arc::from(path),
    }
}

/// What tells process `pid`'s root apart from ours (its mount namespace and its root
/// directory), when it differs; `None` when it is ours or cannot be told.
fn foreign_root(pid: u32) -> Option<String> {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    let root = |p: &str| std::fs::read_link(format!("/proc/{p}/root")).ok();
    let (their_ns, our_ns) = (ns(&pid.to_string())?, ns("self")?);
    let (their_root, our_root) = (root(&pid.to_string())?, root("self")?);
    (their_ns != our_ns || their_root != our_root)
        .then(|| format!("{}{}", their_ns.display(), their_root.display()))
}

/// The kernel's function symbols, from `/proc/kallsyms`, sorted by address.
///
/// Without privilege (`kptr_restrict`, or `perf_event_paranoid` > 1 for
/// non-root) every address reads as zero: the table is then empty and kernel frames
/// stay unnamed.
#[derive(Debug, Clone, Default)]
pub struct KernelSymbols {
    // INVARIANT: sorted by address.
    table: Arc<[(u64, Arc<str>)]>,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms` (empty when it cannot be read).
    pub fn load() -> KernelSymbols {
        KernelSymbols::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
    }

    /// This process's copy of the table, read at the first call (a few hundred
    /// milliseconds on a large kernel: call it off any thread that drains rings).
    pub fn shared() -> KernelSymbols {
        static TABLE: std::sync::OnceLock<KernelSymbols> = std::sync::OnceLock::new();
        TABLE.get_or_init(KernelSymbols::load).clone()
    }

    /// Parses the text of a `/proc/kallsyms` file: text symbols (`t`, `T`, `w`, `W`)
    /// with a non-zero address.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut table: Vec<(u64, Arc<str>)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let a = u64::from_str_radix(f.next()?, 16).ok()?;
                let ty = f.next()?;
                let name = f.next()?;
                (a != 0 && matches!(ty, "t" | "T" | "w" | "W")).then(|| (a, Arc::from(name)))
            })
            .collect();
        table.sort_unstable();
        KernelSymbols {
            table: table.into(),
        }
    }

    /// Whether no symbol could be read.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The function holding kernel address `addr`, and `addr`'s offset in it.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.table.partition_point(|(a, _)| *a <= addr);
        self.table[..i].last().map(|(a, n)| (&**n, addr - a))
    }

    /// Where the kernel's text is (`_text` to `_etext`), read from `/proc/kallsyms`
    /// without building the table (what a recording's first records need at once).
    pub fn text() -> Option<(u64, u64)> {
        use std::io::BufRead;
        let f = std::fs::File::open("/proc/kallsyms").ok()?;
        let (mut start, mut end) = (None, None);
        for line in std::io::BufReader::new(f).lines() {
            let line = line.ok()?;
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(_), Some(name), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            match name {
                "_text" => start = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0),
                "_etext" => end = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0),
                _ => continue,
            }
            if let (Some(s), Some(e)) = (start, end) {
                return (s < e).then_some((s, e));
            }
        }
        None
    }

    /// The address of symbol `name` (e.g. `_text`, `_etext`).
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.table
            .iter()
            .find(|(_, n)| &**n == name)
            .map(|(a, _)| *a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, pgoff: u64, path: &str) -> Mapping {
        Mapping {
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
        assert_eq!(
            p.exe().map(|e| &**e),
            Some(Path::new("/a")),
            "first file mapped"
        );
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
        mmap2(&mut out, 10, 0x6000, PROT_EXEC, b"/lib/ld.so");
        encode::record_kind(&mut out, &layout, 0, &RecordKind::Fork(task(11, 10)), &ids);
        mmap2(&mut out, 11, 0x9000, PROT_EXEC, b"/lib/dlopened.so");
        encode::record_kind(&mut out, &layout, 0, &RecordKind::Exit(task(11, 11)), &ids);
        let mut spaces = AddressSpaces::new();
        for rec in Record::iter(&out, &layout) {
            assert!(spaces.observe(&rec.unwrap()));
        }
        let parent = spaces.process(10).unwrap();
        assert_eq!(parent.comm(), Some("prog"));
        assert_eq!(spaces.thread_name(10), Some("prog"));
        assert_eq!(
            spaces.thread_name(11),
            Some("prog"),
            "a fork inherits the name"
        );
        assert_eq!(
            parent.exe().map(|e| &**e),
            Some(Path::new("/bin/prog")),
            "the program, not the interpreter mapped after it"
        );
        let paths: Vec<_> = parent
            .mappings()
            .map(|m| m.path.to_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["/bin/prog", "/lib/ld.so"],
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
        spaces.forget_exited();
        assert!(spaces.knows(10) && !spaces.knows(11));
    }

    #[test]
    fn kallsyms_lookup_and_hidden_addresses() {
        let k = KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81000100 t do_thing\n\
             ffffffff81000200 D some_data\nffffffff81e00000 T _etext\n",
        );
        assert_eq!(k.lookup(0xffffffff81000150), Some(("do_thing", 0x50)));
        assert_eq!(
            k.lookup(0xffffffff81000250),
            Some(("do_thing", 0x150)),
            "data is skipped"
        );
        assert_eq!(k.address_of("_etext"), Some(0xffffffff81e00000));
        assert_eq!(k.lookup(0x1000), None);
        let hidden = KernelSymbols::parse("0000000000000000 T _text\n0000000000000000 t f\n");
        assert!(hidden.is_empty());
    }

    #[test]
    fn attach_reads_this_process() {
        let mut spaces = AddressSpaces::new();
        let me = std::process::id();
        spaces.attach(me).unwrap();
        let f = a_function as *const () as u64;
        let m = spaces.mapping(me, f).expect("our own code is mapped");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(&*m.path, exe.as_path());
        assert_eq!(
            spaces.process(me).unwrap().exe().map(|e| e.to_path_buf()),
            Some(exe.clone())
        );
        let elf = ElfFile::open(&exe).unwrap();
        let bias = spaces.process(me).unwrap().bias_of(&elf).unwrap();
        let sym = elf
            .symbols()
            .iter()
            .find(|s| s.raw_name.contains("a_function"))
            .expect("the test's own symbol");
        assert_eq!(sym.addr.wrapping_add(bias), f);
    }

    #[inline(never)]
    fn a_function() -> u64 {
        std::hint::black_box(7)
    }
}
