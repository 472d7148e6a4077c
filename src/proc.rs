//! Reading `/proc`: a process's mappings (the one parser of `/proc/PID/maps` in the
//! crate), its threads, their names, its state.
//!
//! Everything here reads files; nothing signals or opens a perf fd. The address-space
//! model built from these mappings (and from the ring's `MMAP2` records) is
//! `perfring::space`'s, with the `profile` feature.

use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// One line of `/proc/PID/maps`: a mapping of a file, or an anonymous one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Mapped readable (`r`).
    pub read: bool,
    /// Mapped writable (`w`).
    pub write: bool,
    /// Mapped executable (`x`).
    pub exec: bool,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The device of the file (`major:minor`), 0:0 for anonymous mappings.
    pub dev: (u32, u32),
    /// The file's inode, 0 for anonymous mappings.
    pub inode: u64,
    /// What the kernel names the mapping: a file's path (`/usr/lib/…/libc.so.6`, with
    /// ` (deleted)` when the file was removed), `[vdso]`, `[heap]`, `[stack]`, or empty.
    pub name: String,
}

impl MapsEntry {
    /// The mapped file, for a mapping of a file (a name starting with `/`), without a
    /// ` (deleted)` suffix.
    pub fn path(&self) -> Option<&Path> {
        let name = self.name.strip_suffix(" (deleted)").unwrap_or(&self.name);
        name.starts_with('/').then(|| Path::new(name))
    }

    /// Whether the mapped file was deleted (or replaced) since it was mapped.
    pub fn deleted(&self) -> bool {
        self.name.starts_with('/') && self.name.ends_with(" (deleted)")
    }
}

/// Parses the text of a `/proc/PID/maps` file; lines that do not parse are skipped.
///
/// # Examples
/// ```
/// let text = "555555554000-555555556000 r-xp 00001000 fe:00 1234   /tmp/my prog\n\
///             7ffff7fc5000-7ffff7fc7000 rw-p 00000000 00:00 0 \n";
/// let maps = perfring::proc::parse_maps(text);
/// assert_eq!(maps.len(), 2);
/// assert_eq!(maps[0].path(), Some(std::path::Path::new("/tmp/my prog")));
/// assert!(maps[0].exec && maps[0].offset == 0x1000);
/// assert_eq!(maps[1].path(), None);
/// ```
pub fn parse_maps(text: &str) -> Vec<MapsEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapsEntry> {
    // "start-end perms offset dev inode   name": the name, which may contain spaces,
    // is the rest of the line after the padding.
    let mut f = line.splitn(6, ' ');
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?.as_bytes();
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let inode = f.next()?.parse().ok()?;
    let name = f.next().unwrap_or("").trim_start().to_string();
    Some(MapsEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        read: perms.first() == Some(&b'r'),
        write: perms.get(1) == Some(&b'w'),
        exec: perms.get(2) == Some(&b'x'),
        offset,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        inode,
        name,
    })
}

/// Reads `/proc/PID/maps` (`pid` 0: this process).
///
/// # Errors
/// [`ErrorKind::NotFound`] if there is no such process, [`ErrorKind::PermissionDenied`]
/// if its maps may not be read (ptrace access mode: another user's process).
pub fn maps(pid: libc::pid_t) -> Result<Vec<MapsEntry>> {
    let file = proc_path(pid, "maps");
    let text = std::fs::read_to_string(&file).map_err(|e| read_error(&file, e))?;
    Ok(parse_maps(&text))
}

fn proc_path(pid: libc::pid_t, what: &str) -> PathBuf {
    if pid == 0 {
        PathBuf::from(format!("/proc/self/{what}"))
    } else {
        PathBuf::from(format!("/proc/{pid}/{what}"))
    }
}

fn read_error(file: &Path, e: std::io::Error) -> Error {
    let (kind, fix) = match e.kind() {
        std::io::ErrorKind::NotFound => (ErrorKind::NotFound, "check the pid (ps -e)"),
        std::io::ErrorKind::PermissionDenied => (
            ErrorKind::PermissionDenied,
            "run as the process's owner or with CAP_SYS_PTRACE",
        ),
        _ => (ErrorKind::Io, "check /proc is mounted"),
    };
    Error::new(kind, format!("read {}", file.display()), e.to_string())
        .with_fix(fix)
        .with_source(e)
}

/// The name (`comm`) of thread `tid` of process `pid`, without its newline; `None` if
/// either has gone.
pub fn comm(pid: libc::pid_t, tid: libc::pid_t) -> Option<Vec<u8>> {
    let mut name = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    if name.last() == Some(&b'\n') {
        name.pop();
    }
    Some(name)
}

/// The process (thread group) that thread `tid` belongs to, from `/proc/TID/status`.
pub fn tgid(tid: libc::pid_t) -> Option<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The file process `pid` runs, as `/proc/PID/exe` links to it.
pub fn exe(pid: libc::pid_t) -> Option<PathBuf> {
    std::fs::read_link(proc_path(pid, "exe")).ok()
}

/// The thread ids of process `pid` (from `/proc/PID/task`), sorted: what a per-thread
/// counter on a whole running process is opened on. Threads created later are not in it.
///
/// # Errors
/// [`ErrorKind::NotFound`] if there is no process `pid`.
pub fn threads(pid: libc::pid_t) -> Result<Vec<libc::pid_t>> {
    let dir = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("list the threads of process {pid}"),
            format!("no process with id {pid}"),
        )
        .with_fix("check the pid (ps -e)")
        .with_source(e)
    })?;
    let mut tids: Vec<libc::pid_t> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether process `pid` exists and has not exited: `/proc/PID/stat` is there and its
/// state is not zombie (`Z`) or dead (`X`). A stopped process is alive.
pub fn is_alive(pid: libc::pid_t) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `D`, `T` stopped, `t` traced, `Z`, ...),
/// or `None` when there is no such process.
pub fn state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ".
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// `kernel.perf_event_max_sample_rate` (`/proc/sys/kernel/perf_event_max_sample_rate`):
/// the most overflows a second the kernel allows an event in frequency mode, which it
/// lowers when overflow handling takes too long. `None` if it cannot be read.
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parse_paths_with_spaces_anonymous_and_deleted() {
        let text = "\
555555554000-555555555000 r--p 00000000 fe:00 1234                       /tmp/my prog
555555555000-555555556000 r-xp 00001000 fe:00 1234                       /tmp/my prog
7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0                          [vvar]
7ffff7fc5000-7ffff7fc7000 rw-p 00000000 00:00 0 
7ffff7fd0000-7ffff7fd1000 r-xp 00002000 08:01 99                         /lib/gone.so (deleted)
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].path(), Some(Path::new("/tmp/my prog")));
        assert!(m[1].exec && m[1].read && !m[1].write);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!((m[1].dev, m[1].inode), ((0xfe, 0), 1234));
        assert_eq!(m[2].name, "[vvar]");
        assert_eq!(m[2].path(), None);
        assert_eq!(m[3].name, "");
        assert_eq!(m[4].path(), Some(Path::new("/lib/gone.so")));
        assert!(m[4].deleted() && !m[1].deleted());
    }

    #[test]
    fn this_process_is_read() {
        let me = std::process::id() as libc::pid_t;
        let maps = maps(0).unwrap();
        assert!(maps.iter().any(|m| m.exec && m.path().is_some()));
        assert_eq!(tgid(me), Some(me));
        assert!(threads(me).unwrap().contains(&me));
        assert!(comm(me, me).is_some_and(|c| !c.is_empty()));
        assert_eq!(exe(0), std::env::current_exe().ok());
        assert!(is_alive(me));
        assert_eq!(maps_error_kind(), ErrorKind::NotFound);
    }

    fn maps_error_kind() -> ErrorKind {
        // pid_max is at most 2^22: this pid cannot exist.
        maps(i32::MAX).unwrap_err().kind()
    }
}
