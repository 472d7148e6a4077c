//! The jitdump format (`jit-PID.dump`: V8's `--perf-prof`, the JVM's perf agent,
//! Python 3.12's `-X perf_jit`), as `tools/perf/Documentation/jitdump-specification.txt`
//! in the Linux tree describes it: a header, then records that each say their own
//! size. `CODE_LOAD` names a range of code, `CODE_MOVE` moves a loaded function (by
//! its code index); the rest (debug and unwinding information, `CODE_CLOSE`) is
//! skipped.
//!
//! The runtime appends records while it runs, so the file is read again from the
//! last whole record whenever an address is not found. The file is never read
//! whole: a record's code bytes are skipped, its name read up to [`NAME_LIMIT`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::Ranges;

/// "JiTD", as the writer's byte order stores it.
const MAGIC: u32 = 0x4A69_5444;
/// The header as version 1 defines it; `total_size` may say it is longer.
const HEADER_LEN: u64 = 40;
/// A record's header: id, total_size, timestamp.
const RECORD_HEADER_LEN: u64 = 16;
/// `CODE_LOAD`'s fields before the name: pid, tid, vma, code_addr, code_size, code_index.
const LOAD_FIXED: u64 = 40;
/// `CODE_MOVE`'s fields: pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
const MOVE_FIXED: u64 = 48;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_CLOSE: u32 = 3;
/// Longest name kept: a bound on memory for a record that claims a huge one.
const NAME_LIMIT: u64 = 64 << 10;

/// One jitdump file of a process, as far as it was read.
#[derive(Debug)]
pub(super) struct JitDump {
    path: PathBuf,
    /// Where the next unread record starts (0: the header is not read yet).
    read: u64,
    /// Why the file is read no further (bad header, a malformed record, closed).
    stopped: Option<String>,
    /// Loaded code, by address; a move changes an entry in place.
    names: Ranges,
}

impl JitDump {
    /// The dump at `path` (read on the first [`read_more`](Self::read_more)).
    pub(super) fn new(path: PathBuf) -> JitDump {
        JitDump {
            path,
            read: 0,
            stopped: None,
            names: Ranges::default(),
        }
    }

    /// The file this reads.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Why the file is read no further, if it is not (the runtime closed it, or what
    /// was wrong with it); loads read before that still name code.
    pub(super) fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// The loaded function holding `addr` and `addr`'s offset in it.
    pub(super) fn find(&self, addr: u64) -> Option<(std::sync::Arc<str>, u64)> {
        self.names.find(addr)
    }

    /// Reads the records appended since the last call (a record still being written
    /// is left for the next); an unreadable file is tried again next time.
    pub(super) fn read_more(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        let Ok(file) = File::open(&self.path) else {
            return;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        let mut r = BufReader::with_capacity(64 << 10, file);
        if self.read == 0 {
            match header(&mut r, len) {
                Ok(Some(first)) => self.read = first,
                Ok(None) => return,
                Err(why) => {
                    self.stopped = Some(format!("{}: {why}", self.path.display()));
                    return;
                }
            }
        }
        if r.seek(SeekFrom::Start(self.read)).is_err() {
            return;
        }
        let mut changed = false;
        loop {
            match self.record(&mut r, len) {
                Ok(Step::Next(size)) => {
                    self.read += size;
                    changed = true;
                }
                Ok(Step::Incomplete) | Err(Bad::Io) => break,
                Err(Bad::Malformed(why)) => {
                    self.stopped = Some(format!(
                        "{}: record at byte {}: {why}; names after it are not read",
                        self.path.display(),
                        self.read
                    ));
                    break;
                }
                Ok(Step::Closed) => {
                    self.stopped = Some(format!("{}: closed by the runtime", self.path.display()));
                    break;
                }
            }
        }
        if changed {
            self.names.sort();
        }
    }

    /// Reads the record at `self.read` (where `r` stands) and takes it in.
    fn record(&mut self, r: &mut BufReader<File>, len: u64) -> Result<Step, Bad> {
        let left = len.saturating_sub(self.read);
        if left < RECORD_HEADER_LEN {
            return Ok(Step::Incomplete);
        }
        let mut head = [0u8; RECORD_HEADER_LEN as usize];
        r.read_exact(&mut head).map_err(|_| Bad::Io)?;
        let id = u32_at(&head, 0);
        let size = u64::from(u32_at(&head, 4));
        if size < RECORD_HEADER_LEN {
            return Err(Bad::Malformed(format!(
                "total_size {size} is smaller than a record header"
            )));
        }
        if size > left {
            return Ok(Step::Incomplete);
        }
        let body = size - RECORD_HEADER_LEN;
        let used = match id {
            CODE_LOAD => {
                if body < LOAD_FIXED {
                    return Err(Bad::Malformed(format!(
                        "a CODE_LOAD of {size} bytes is too short for its fields"
                    )));
                }
                let mut f = [0u8; LOAD_FIXED as usize];
                r.read_exact(&mut f).map_err(|_| Bad::Io)?;
                let (vma, size_of_code, index) = (u64_at(&f, 8), u64_at(&f, 24), u64_at(&f, 32));
                let mut name = Vec::new();
                r.by_ref()
                    .take((body - LOAD_FIXED).min(NAME_LIMIT))
                    .read_until(0, &mut name)
                    .map_err(|_| Bad::Io)?;
                let read = LOAD_FIXED + name.len() as u64;
                if name.last() == Some(&0) {
                    name.pop();
                }
                let name = String::from_utf8_lossy(&name);
                self.names
                    .push(vma, vma.saturating_add(size_of_code), Some(index), &name);
                read
            }
            CODE_MOVE => {
                if body < MOVE_FIXED {
                    return Err(Bad::Malformed(format!(
                        "a CODE_MOVE of {size} bytes is too short for its fields"
                    )));
                }
                let mut f = [0u8; MOVE_FIXED as usize];
                r.read_exact(&mut f).map_err(|_| Bad::Io)?;
                let (vma, size_of_code, index) = (u64_at(&f, 8), u64_at(&f, 32), u64_at(&f, 40));
                self.names
                    .relocate(index, vma, vma.saturating_add(size_of_code));
                MOVE_FIXED
            }
            CODE_CLOSE => return Ok(Step::Closed),
            _ => 0,
        };
        let skip = i64::try_from(body - used).map_err(|_| Bad::Io)?;
        r.seek_relative(skip).map_err(|_| Bad::Io)?;
        Ok(Step::Next(size))
    }
}

/// What reading one record did.
enum Step {
    /// Took in a whole record of this many bytes.
    Next(u64),
    /// The record is not all written yet (or not at all).
    Incomplete,
    /// `CODE_CLOSE`: the runtime writes no more.
    Closed,
}

/// Why a record was not read.
enum Bad {
    /// Reading failed (tried again next time).
    Io,
    /// The record cannot be what it says (the file is read no further).
    Malformed(String),
}

/// Checks the file header; the offset of the first record, `None` while the header
/// is not all written, or why the file cannot be read.
fn header(r: &mut BufReader<File>, len: u64) -> Result<Option<u64>, String> {
    if len < HEADER_LEN {
        return Ok(None);
    }
    let mut h = [0u8; HEADER_LEN as usize];
    if r.read_exact(&mut h).is_err() {
        return Ok(None);
    }
    parse_header(&h, len)
}

/// [`header`] over the header's bytes (`h.len() >= HEADER_LEN`) of a file of `len`
/// bytes.
fn parse_header(h: &[u8], len: u64) -> Result<Option<u64>, String> {
    let magic = u32_at(h, 0);
    if magic == MAGIC.swap_bytes() {
        return Err(
            "written in the other byte order (magic 0x4454694a): a dump from \
                    another machine cannot name this one's code"
                .into(),
        );
    }
    if magic != MAGIC {
        return Err(format!(
            "not a jitdump file (magic {magic:#010x}, expected 0x4a695444)"
        ));
    }
    let version = u32_at(h, 4);
    if version == 0 {
        return Err("jitdump version 0 (versions start at 1)".into());
    }
    let total = u64::from(u32_at(h, 8));
    if total < HEADER_LEN {
        return Err(format!(
            "header total_size {total} is shorter than the {HEADER_LEN} bytes of its fields"
        ));
    }
    Ok((total <= len).then_some(total))
}

/// The native-endian `u32` at `at` (the magic showed the writer's order is ours).
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// The native-endian `u64` at `at`.
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(magic: u32, version: u32, total: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [magic, version, total, 62, 0, 4242] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(&7u64.to_ne_bytes()); // timestamp
        b.extend_from_slice(&0u64.to_ne_bytes()); // flags
        b.resize(total.max(40) as usize, 0);
        b
    }

    fn record(id: u32, body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&id.to_ne_bytes());
        b.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
        b.extend_from_slice(&9u64.to_ne_bytes());
        b.extend_from_slice(body);
        b
    }

    fn load(vma: u64, size: u64, index: u64, name: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&4242u32.to_ne_bytes());
        b.extend_from_slice(&4243u32.to_ne_bytes());
        for w in [vma, vma, size, index] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend(std::iter::repeat_n(0xcc, size as usize)); // the code
        record(CODE_LOAD, &b)
    }

    fn moved(old: u64, new: u64, size: u64, index: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&4242u32.to_ne_bytes());
        b.extend_from_slice(&4243u32.to_ne_bytes());
        for w in [new, old, new, size, index] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        record(CODE_MOVE, &b)
    }

    /// A dump of two functions with a debug-info and an unwinding-info record between.
    fn sample_dump() -> Vec<u8> {
        let mut b = header_bytes(MAGIC, 1, 40);
        let mut debug = Vec::new();
        debug.extend_from_slice(&0x1000u64.to_ne_bytes());
        debug.extend_from_slice(&1u64.to_ne_bytes());
        debug.extend_from_slice(&0x1000u64.to_ne_bytes());
        debug.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        debug.extend_from_slice(b"hot.js\0");
        b.extend(record(2, &debug));
        b.extend(load(0x1000, 0x40, 1, "JS:*hot /tmp/hot.js:1:1"));
        b.extend(record(4, &[0u8; 24]));
        b.extend(load(0x2000, 0x10, 2, "Builtin:Other"));
        b
    }

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("jit-unit-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir.join("jit-4242.dump"))
        }

        fn write(&self, bytes: &[u8]) -> JitDump {
            std::fs::write(&self.0, bytes).unwrap();
            let mut d = JitDump::new(self.0.clone());
            d.read_more();
            d
        }

        fn append(&self, bytes: &[u8]) {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.0)
                .unwrap();
            std::io::Write::write_all(&mut f, bytes).unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
        }
    }

    fn name(d: &JitDump, addr: u64) -> Option<(String, u64)> {
        d.find(addr).map(|(n, off)| (n.to_string(), off))
    }

    #[test]
    fn loads_name_their_ranges_and_other_records_are_skipped() {
        let s = Scratch::new("load");
        let d = s.write(&sample_dump());
        assert_eq!(
            name(&d, 0x1010),
            Some(("JS:*hot /tmp/hot.js:1:1".into(), 0x10))
        );
        assert_eq!(name(&d, 0x2000), Some(("Builtin:Other".into(), 0)));
        assert_eq!(name(&d, 0x1040), None, "one past the code");
        assert_eq!(name(&d, 0xfff), None);
        assert_eq!(d.stopped(), None);
        assert_eq!(d.read, sample_dump().len() as u64);
    }

    #[test]
    fn a_move_takes_the_name_to_the_new_address() {
        let s = Scratch::new("move");
        let mut b = sample_dump();
        b.extend(moved(0x1000, 0x5000, 0x40, 1));
        let d = s.write(&b);
        assert_eq!(name(&d, 0x5008).map(|h| h.1), Some(8));
        assert_eq!(name(&d, 0x5008).unwrap().0, "JS:*hot /tmp/hot.js:1:1");
        assert_eq!(name(&d, 0x1008), None, "moved away");
        // A later load at the old address names it again; a move of an unknown
        // index changes nothing.
        let mut more = load(0x1000, 0x8, 3, "JS:*again");
        more.extend(moved(0x7000, 0x8000, 0x10, 99));
        s.append(&more);
        let mut d = d;
        d.read_more();
        assert_eq!(name(&d, 0x1004).unwrap().0, "JS:*again");
        assert_eq!(name(&d, 0x8000), None);
    }

    #[test]
    fn a_truncated_tail_is_read_once_written() {
        let s = Scratch::new("tail");
        let whole = sample_dump();
        let last = load(0x3000, 0x20, 3, "JS:*late");
        let mut b = whole.clone();
        b.extend_from_slice(&last[..30]); // the runtime is mid-record
        let mut d = s.write(&b);
        assert_eq!(name(&d, 0x2000).unwrap().0, "Builtin:Other");
        assert_eq!(name(&d, 0x3000), None);
        assert_eq!(
            d.read,
            whole.len() as u64,
            "stopped at the last whole record"
        );
        assert_eq!(d.stopped(), None, "an unfinished record is no error");
        s.append(&last[30..]);
        d.read_more();
        assert_eq!(name(&d, 0x3004), Some(("JS:*late".into(), 4)));
    }

    #[test]
    fn a_file_that_grows_from_nothing_is_read_as_it_grows() {
        let s = Scratch::new("grow");
        let all = sample_dump();
        let mut d = s.write(&[]);
        // Written a few bytes at a time: the header first in pieces, then records.
        for chunk in all.chunks(7) {
            s.append(chunk);
            d.read_more();
            assert_eq!(d.stopped(), None);
        }
        assert_eq!(name(&d, 0x1000).unwrap().0, "JS:*hot /tmp/hot.js:1:1");
        assert_eq!(name(&d, 0x200f).unwrap().0, "Builtin:Other");
        // A header longer than its fields (a later version): records start after it.
        let mut longer = header_bytes(MAGIC, 2, 56);
        longer.extend(load(0x4000, 4, 1, "JS:*v2"));
        let d = s.write(&longer);
        assert_eq!(name(&d, 0x4000).unwrap().0, "JS:*v2");
    }

    #[test]
    fn a_bad_header_stops_with_the_reason() {
        let s = Scratch::new("magic");
        let mut swapped = sample_dump();
        swapped[..4].copy_from_slice(&MAGIC.swap_bytes().to_ne_bytes());
        let d = s.write(&swapped);
        assert!(
            d.stopped().unwrap().contains("other byte order"),
            "{:?}",
            d.stopped()
        );
        assert!(d.stopped().unwrap().contains("jit-4242.dump"));
        assert_eq!(name(&d, 0x1000), None);
        let d = s.write(b"#!/bin/sh\necho this is no jitdump at all, no no\n");
        assert!(
            d.stopped().unwrap().contains("not a jitdump file"),
            "{:?}",
            d.stopped()
        );
        let d = s.write(&header_bytes(MAGIC, 0, 40));
        assert!(d.stopped().unwrap().contains("version 0"));
        let mut short = header_bytes(MAGIC, 1, 40);
        short[8..12].copy_from_slice(&16u32.to_ne_bytes());
        let d = s.write(&short);
        assert!(d.stopped().unwrap().contains("total_size 16"));
    }

    #[test]
    fn a_malformed_record_keeps_what_came_before() {
        let s = Scratch::new("malformed");
        let mut b = sample_dump();
        b.extend(record(CODE_LOAD, &[0u8; 10])); // too short for a load's fields
        b.extend(load(0x3000, 4, 3, "JS:*after"));
        let d = s.write(&b);
        assert_eq!(name(&d, 0x1000).unwrap().0, "JS:*hot /tmp/hot.js:1:1");
        assert!(
            d.stopped().unwrap().contains("too short"),
            "{:?}",
            d.stopped()
        );
        assert_eq!(name(&d, 0x3000), None);
        // A size smaller than the record header cannot be stepped over.
        let mut b = sample_dump();
        b.extend_from_slice(&CODE_LOAD.to_ne_bytes());
        b.extend_from_slice(&8u32.to_ne_bytes());
        b.extend_from_slice(&[0u8; 40]);
        let d = s.write(&b);
        assert!(d
            .stopped()
            .unwrap()
            .contains("smaller than a record header"));
        // A name that claims the whole file, and a CODE_CLOSE.
        let mut b = sample_dump();
        b.extend(record(CODE_CLOSE, &[]));
        b.extend(load(0x3000, 4, 3, "JS:*closed"));
        let d = s.write(&b);
        assert!(d.stopped().unwrap().contains("closed"));
        assert_eq!(name(&d, 0x3000), None);
    }

    #[test]
    fn any_bytes_read_without_panic() {
        let s = Scratch::new("fuzz");
        let mut good = sample_dump();
        good.extend(moved(0x1000, 0x5000, 0x40, 1));
        good.extend(record(CODE_CLOSE, &[]));
        // Every truncation, with a byte flipped at every position: whatever the
        // reader makes of it, it does not panic and never reads past the file.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for cut in 0..=good.len() {
            let mut b = good[..cut].to_vec();
            if cut > 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x % cut as u64) as usize;
                b[at] ^= (x >> 32) as u8 | 1;
            }
            for bytes in [&good[..cut], &b[..]] {
                let d = s.write(bytes);
                assert!(d.read <= bytes.len() as u64, "cut {cut}");
            }
        }
        // Random records after a good header, sizes included.
        for _ in 0..200 {
            let mut b = header_bytes(MAGIC, 1, 40);
            for _ in 0..64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.extend_from_slice(&x.to_ne_bytes());
            }
            b[40..44].copy_from_slice(&((x % 5) as u32).to_ne_bytes());
            b[44..48].copy_from_slice(&((x >> 8) as u32 % 600).to_ne_bytes());
            let d = s.write(&b);
            assert!(d.read <= b.len() as u64);
        }
    }
}
