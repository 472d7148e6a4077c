//! Names of JIT-compiled code, from the files runtimes write: the perf map
//! `/tmp/perf-PID.map` (`START SIZE name` lines: node `--perf-basic-prof`, Python
//! 3.12's `-X perf`, the JVM's `-XX:+DumpPerfMapAtExit`) and the jitdump `jit-PID.dump`
//! (binary: node `--perf-prof`, the JVM's perf agent, Python 3.12's `-X perf_jit`;
//! `dump.rs`). Both are read again as they grow.
//!
//! blazesym reads perf maps only through its live-process source; perfring names
//! samples after a process may have exited, from its own address spaces, so both
//! formats are read here. A process in another mount or PID namespace writes its perf
//! map in its own `/tmp` under its own pid: it is looked for through `/proc/PID/root`
//! with the pid the process knows itself by. A jitdump is found by its mapping: the
//! runtime maps the file executable so that the kernel reports it (an `MMAP2` record,
//! or a line of `/proc/PID/maps`), and it is opened as the process sees it
//! ([`file_of`](crate::space::file_of)).

mod dump;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::space::ProcessSpace;
use dump::JitDump;

/// Address ranges and their names, where a range written later wins over the ones
/// it overlaps (code replaced in place).
#[derive(Debug, Default)]
struct Ranges {
    /// Every range, in the order written (a move updates its entry).
    all: Vec<Range>,
    /// Indices into `all`, sorted by start, then by when written.
    order: Vec<usize>,
    /// A jitdump's code index → the entry in `all` it loaded.
    by_code: HashMap<u64, usize>,
    /// Counts writes: the newer of two overlapping ranges wins.
    writes: u64,
}

#[derive(Debug)]
struct Range {
    start: u64,
    end: u64,
    written: u64,
    name: Arc<str>,
}

impl Ranges {
    /// Adds `[start, end)` named `name`, with the jitdump code index `code` if any;
    /// call [`sort`](Self::sort) before the next lookup.
    fn push(&mut self, start: u64, end: u64, code: Option<u64>, name: &str) {
        if let Some(code) = code {
            self.by_code.insert(code, self.all.len());
        }
        self.writes += 1;
        self.all.push(Range {
            start,
            end,
            written: self.writes,
            name: Arc::from(name),
        });
    }

    /// Moves the range loaded with code index `code` to `[start, end)`; an unknown
    /// index (a move before its load, which the format forbids) is ignored.
    fn relocate(&mut self, code: u64, start: u64, end: u64) {
        let Some(&i) = self.by_code.get(&code) else {
            return;
        };
        self.writes += 1;
        let r = &mut self.all[i];
        (r.start, r.end, r.written) = (start, end, self.writes);
    }

    /// Orders the ranges for [`find`](Self::find) after pushes and moves.
    fn sort(&mut self) {
        let all = &self.all;
        self.order = (0..all.len()).collect();
        self.order.sort_by_key(|&i| (all[i].start, all[i].written));
    }

    /// The range holding `addr` and `addr`'s offset in it; where several do, the one
    /// written last (of the 64 starting nearest below: a bound on the search).
    fn find(&self, addr: u64) -> Option<(Arc<str>, u64)> {
        let i = self.order.partition_point(|&e| self.all[e].start <= addr);
        self.order[..i]
            .iter()
            .rev()
            .take(64)
            .map(|&e| &self.all[e])
            .filter(|r| addr < r.end)
            .max_by_key(|r| r.written)
            .map(|r| (r.name.clone(), addr - r.start))
    }
}

/// One process's perf map, as far as it was read.
#[derive(Debug, Default)]
struct PerfMap {
    path: Option<PathBuf>,
    /// Bytes read so far: the file is only ever appended to.
    read: u64,
    names: Ranges,
}

/// What names one process's JIT code.
#[derive(Debug, Default)]
struct Jit {
    map: PerfMap,
    /// The jitdump files the process mapped.
    dumps: Vec<JitDump>,
    /// The [`ProcessSpace::generation`] whose mappings were last searched for dumps.
    searched: Option<u64>,
}

/// JIT names by process.
#[derive(Debug, Default)]
pub(crate) struct JitNames {
    by_pid: HashMap<u32, Jit>,
}

impl JitNames {
    /// The JIT function holding `addr` in process `pid` (whose mappings `space` has,
    /// if known), and `addr`'s offset in it: from the perf map, else a jitdump. The
    /// files are read again, from where they were left, when `addr` is not in them.
    pub(crate) fn lookup(
        &mut self,
        pid: u32,
        addr: u64,
        space: Option<&ProcessSpace>,
    ) -> Option<(Arc<str>, u64)> {
        let jit = self.by_pid.entry(pid).or_default();
        if let Some(hit) = jit.find(addr) {
            return Some(hit);
        }
        if jit.map.path.is_none() {
            jit.map.path = perf_map_path(pid);
        }
        jit.map.read_more();
        if let Some(space) = space {
            jit.search_dumps(pid, space);
        }
        for d in &mut jit.dumps {
            d.read_more();
        }
        jit.find(addr)
    }

    /// Why jitdump files are not (or no longer) read: one line per file.
    pub(crate) fn problems(&self) -> impl Iterator<Item = &str> {
        self.by_pid
            .values()
            .flat_map(|j| &j.dumps)
            .filter_map(JitDump::stopped)
    }
}

impl Jit {
    fn find(&self, addr: u64) -> Option<(Arc<str>, u64)> {
        self.map
            .names
            .find(addr)
            .or_else(|| self.dumps.iter().find_map(|d| d.find(addr)))
    }

    /// Adds the jitdump files among `space`'s mappings not seen before (once per
    /// change of the mappings).
    fn search_dumps(&mut self, pid: u32, space: &ProcessSpace) {
        if self.searched == Some(space.generation()) {
            return;
        }
        self.searched = Some(space.generation());
        for m in space.mappings() {
            if !is_jitdump(&m.path) {
                continue;
            }
            let file = crate::space::file_of(pid, &m.path);
            if !self.dumps.iter().any(|d| d.path() == &*file) {
                self.dumps.push(JitDump::new(file.to_path_buf()));
            }
        }
    }
}

/// Whether `path` names a jitdump: a file `jit-DIGITS.dump`.
fn is_jitdump(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.strip_prefix("jit-")
        .and_then(|n| n.strip_suffix(".dump"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

impl PerfMap {
    fn read_more(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        let Some(path) = &self.path else { return };
        let Ok(mut f) = std::fs::File::open(path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.read)).is_err() {
            return;
        }
        let mut text = String::new();
        if f.read_to_string(&mut text).is_err() {
            return;
        }
        // Only whole lines: the writer may be in the middle of one.
        let Some(end) = text.rfind('\n') else { return };
        for line in text[..=end].lines() {
            if let Some((start, size, name)) = parse_line(line) {
                self.names
                    .push(start, start.saturating_add(size), None, name);
            }
        }
        self.read += end as u64 + 1;
        self.names.sort();
    }
}

/// `START SIZE name`, both numbers hex without `0x`.
fn parse_line(line: &str) -> Option<(u64, u64, &str)> {
    let mut f = line.splitn(3, ' ');
    let start = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
    let size = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
    let name = f.next()?.trim();
    (!name.is_empty()).then_some((start, size, name))
}

/// Where process `pid` writes its perf map: `/tmp/perf-PID.map` in its own root,
/// under the pid it knows itself by (the last of `NSpid`).
fn perf_map_path(pid: u32) -> Option<PathBuf> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let own = status
        .as_deref()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("NSpid:")))
        .and_then(|v| v.split_whitespace().last()?.parse::<u32>().ok())
        .unwrap_or(pid);
    let in_root = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{own}.map"));
    if in_root.exists() {
        return Some(in_root);
    }
    // The process is gone (its root with it): the file it left in ours.
    Some(PathBuf::from(format!("/tmp/perf-{pid}.map")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_later_entries_and_growth() {
        assert_eq!(
            parse_line("7fe5d4006040 2c8 JS:*hot /tmp/hot.js:1:25"),
            Some((0x7fe5d4006040, 0x2c8, "JS:*hot /tmp/hot.js:1:25"))
        );
        assert_eq!(parse_line("zz 10 f"), None);
        let dir = std::env::temp_dir().join(format!("perfring-jit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf-1.map");
        std::fs::write(&path, "1000 100 first\n1080 10 inner\n").unwrap();
        let mut map = PerfMap {
            path: Some(path.clone()),
            ..PerfMap::default()
        };
        map.read_more();
        assert_eq!(
            map.names.find(0x1010).map(|h| (h.0.to_string(), h.1)),
            Some(("first".into(), 0x10))
        );
        assert_eq!(
            map.names.find(0x1085).map(|h| h.0.to_string()),
            Some("inner".into()),
            "written last"
        );
        assert_eq!(map.names.find(0x2000), None);
        // The runtime appends (a half-written line is left for later).
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"2000 20 later\n3000 1").unwrap();
        map.read_more();
        assert_eq!(
            map.names.find(0x2005).map(|h| h.0.to_string()),
            Some("later".into())
        );
        assert_eq!(map.names.find(0x3000), None);
        std::io::Write::write_all(&mut f, b"0 whole\n").unwrap();
        map.read_more();
        assert_eq!(
            map.names.find(0x3000).map(|h| h.0.to_string()),
            Some("whole".into())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_jitdump_is_found_by_its_mapping() {
        assert!(is_jitdump(Path::new("/srv/app/jit-123.dump")));
        assert!(!is_jitdump(Path::new("/srv/app/jit-.dump")));
        assert!(!is_jitdump(Path::new("/srv/app/jit-12x.dump")));
        assert!(!is_jitdump(Path::new("/tmp/perf-123.map")));
        let dir = std::env::temp_dir().join(format!("jit-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jit-77.dump");
        let mut b = Vec::new();
        for w in [0x4A69_5444u32, 1, 40, 62, 0, 77, 0, 0, 0, 0] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        let name = b"JS:*fromDump\0";
        b.extend_from_slice(&0u32.to_ne_bytes()); // CODE_LOAD
        b.extend_from_slice(&(16 + 40 + name.len() as u32).to_ne_bytes());
        b.extend_from_slice(&0u64.to_ne_bytes());
        b.extend_from_slice(&[77, 0, 0, 0, 77, 0, 0, 0]);
        for w in [0x7000_0000u64, 0x7000_0000, 0x100, 0] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(name);
        std::fs::write(&path, &b).unwrap();
        let mut space = ProcessSpace::default();
        let mut names = JitNames::default();
        // A pid no process has here (pid_max is below 2^22): no perf map of its own.
        let pid = 1 << 23;
        assert_eq!(names.lookup(pid, 0x7000_0010, Some(&space)), None);
        space.insert(crate::space::Mapping {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            path: Arc::from(path.as_path()),
            build_id: None,
        });
        assert_eq!(
            names
                .lookup(pid, 0x7000_0010, Some(&space))
                .map(|h| (h.0.to_string(), h.1)),
            Some(("JS:*fromDump".into(), 0x10))
        );
        assert_eq!(names.problems().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
