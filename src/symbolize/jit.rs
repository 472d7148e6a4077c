//! Names of JIT-compiled code, from the map files runtimes write: `/tmp/perf-PID.map`
//! (`START SIZE name` lines: node `--perf-basic-prof`, Python 3.12's `-X perf`, the
//! JVM's `-XX:+DumpPerfMapAtExit`), read again as it grows.
//!
//! blazesym reads these files only through its live-process source; perfring names
//! samples after a process may have exited, from its own address spaces, so the
//! (simple, line-based) format is read here. A process in another mount or PID
//! namespace writes the file in its own `/tmp` under its own pid: it is looked for
//! through `/proc/PID/root` with the pid the process knows itself by.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One process's perf map, as far as it was read.
#[derive(Debug, Default)]
struct PerfMap {
    path: Option<PathBuf>,
    /// Bytes read so far: the file is only ever appended to.
    read: u64,
    /// `(start, end, line index, name)`, sorted by start.
    entries: Vec<(u64, u64, usize, Arc<str>)>,
    lines: usize,
}

/// Perf maps by process.
#[derive(Debug, Default)]
pub(crate) struct PerfMaps {
    by_pid: HashMap<u32, PerfMap>,
}

impl PerfMaps {
    /// The JIT function holding `addr` in process `pid`, and `addr`'s offset in it;
    /// the file is read (again, from where it was left) when `addr` is not in it yet.
    pub(crate) fn lookup(&mut self, pid: u32, addr: u64) -> Option<(Arc<str>, u64)> {
        let map = self.by_pid.entry(pid).or_default();
        if let Some(hit) = map.find(addr) {
            return Some(hit);
        }
        if map.path.is_none() {
            map.path = perf_map_path(pid);
        }
        map.read_more();
        map.find(addr)
    }
}

impl PerfMap {
    /// The entry holding `addr`; where several do (code replaced in place), the one
    /// written last.
    fn find(&self, addr: u64) -> Option<(Arc<str>, u64)> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        self.entries[..i]
            .iter()
            .rev()
            .take(64)
            .filter(|e| addr < e.1)
            .max_by_key(|e| e.2)
            .map(|e| (e.3.clone(), addr - e.0))
    }

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
                self.entries.push((
                    start,
                    start.saturating_add(size),
                    self.lines,
                    Arc::from(name),
                ));
            }
            self.lines += 1;
        }
        self.read += end as u64 + 1;
        self.entries.sort_by_key(|e| (e.0, e.2));
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
            map.find(0x1010).map(|h| (h.0.to_string(), h.1)),
            Some(("first".into(), 0x10))
        );
        assert_eq!(
            map.find(0x1085).map(|h| h.0.to_string()),
            Some("inner".into()),
            "written last"
        );
        assert_eq!(map.find(0x2000), None);
        // The runtime appends (a half-written line is left for later).
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"2000 20 later\n3000 1").unwrap();
        map.read_more();
        assert_eq!(
            map.find(0x2005).map(|h| h.0.to_string()),
            Some("later".into())
        );
        assert_eq!(map.find(0x3000), None);
        std::io::Write::write_all(&mut f, b"0 whole\n").unwrap();
        map.read_more();
        assert_eq!(
            map.find(0x3000).map(|h| h.0.to_string()),
            Some("whole".into())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
