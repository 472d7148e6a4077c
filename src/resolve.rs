//! Event strings beyond perf's syntax, resolved against a target's symbols:
//! `mem:SYMBOL…` and `mem:OBJECT:SYMBOL…` (a breakpoint on a symbol of the target's
//! program, or of any object a running process has loaded), and `uprobe:PATH:SYMBOL…`.
//!
//! Symbols are read through [`ElfFile`]; a running process's objects and their load
//! biases come from its address space ([`space`](crate::space)). For a command not yet
//! started, see "Breakpoints on a command not yet started" in [`elf`](crate::elf).
//!
//! This module reads files and `/proc`; it opens no perf fd.

use std::path::{Path, PathBuf};

use crate::elf::ElfFile;
use crate::event::names::did_you_mean;
use crate::event::{Access, Event, Sysfs};
use crate::space::{AddressSpaces, ProcessSpace};
use crate::{Error, ErrorKind, Result};

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

/// Whether resolving `spec` for a program about to be started
/// ([`TargetImage::Spawned`]) predicts an address for its no-ASLR base: a `mem:SYMBOL`
/// breakpoint, whose program must then be started with
/// [`Command::no_aslr`](crate::launch::Command::no_aslr).
pub fn needs_fixed_base(spec: &str) -> bool {
    spec.starts_with("mem:") && is_symbolic(spec)
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
/// use perfring::resolve::{resolve_event, TargetImage};
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
            let s = ElfFile::load(program)?;
            let bias = s.no_aslr_bias()?;
            (s, bias)
        }
        (TargetImage::Process(pid), None) => {
            let (exe, bias) = process_exe(*pid)?;
            if exe.find(name).is_some() {
                (exe, bias)
            } else {
                // Not in the program: the first loaded object that defines it.
                let space = process_space(*pid)?;
                match loaded_objects(&space)
                    .into_iter()
                    .filter_map(|p| load_mapped(*pid, &space, &p).ok())
                    .find(|s| s.find(name).is_some())
                {
                    Some(s) => {
                        let bias = bias_in(*pid, &space, &s)?;
                        (s, bias)
                    }
                    // The program's closest names make the best suggestion.
                    None => (exe, bias),
                }
            }
        }
        (TargetImage::Process(pid), Some(object)) => {
            let space = process_space(*pid)?;
            let objects = loaded_objects(&space);
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
            let s = load_mapped(*pid, &space, path)?;
            let bias = bias_in(*pid, &space, &s)?;
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

/// A running process's address space, from `/proc`.
fn process_space(pid: libc::pid_t) -> Result<ProcessSpace> {
    let mut spaces = AddressSpaces::new();
    spaces.attach(pid as u32)?;
    Ok(spaces.process(pid as u32).cloned().unwrap_or_default())
}

/// The load bias of `elf` in process `pid`.
fn bias_in(pid: libc::pid_t, space: &ProcessSpace, elf: &ElfFile) -> Result<u64> {
    space.bias_of(elf).ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!("locate {} in process {pid}", elf.path().display()),
            "the file is not mapped in the process",
        )
        .with_fix(format!("check /proc/{pid}/maps for the file's path"))
    })
}

/// The distinct files mapped executable in `space`, in address order.
fn loaded_objects(space: &ProcessSpace) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in space.mappings().filter(|m| m.is_file()) {
        if !out.iter().any(|p| p.as_path() == &*m.path) {
            out.push(m.path.to_path_buf());
        }
    }
    out
}

/// The symbols of a file mapped in a process, read through `/proc/PID/map_files` when
/// the path no longer opens (deleted, or in another mount namespace).
fn load_mapped(pid: libc::pid_t, space: &ProcessSpace, path: &Path) -> Result<ElfFile> {
    ElfFile::load(path).or_else(|e| {
        let m = space.mappings().find(|m| &*m.path == path).ok_or(e)?;
        let alias = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
        Ok(ElfFile::load(alias)?.renamed(path))
    })
}

/// A running process's executable's symbols and load bias.
fn process_exe(pid: libc::pid_t) -> Result<(ElfFile, u64)> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("find the executable of process {pid}"),
            e.to_string(),
        )
        .with_fix("check the pid (ps -e) and that you may trace it")
        .with_source(e)
    })?;
    let space = process_space(pid)?;
    // The link may name a file since replaced; /proc/PID/exe still opens it.
    let s = ElfFile::load(format!("/proc/{pid}/exe"))?.renamed(&exe);
    let bias = bias_in(pid, &space, &s)?;
    Ok((s, bias))
}

fn uprobe(spec: &str, rest: &str, sysfs: &Sysfs) -> Result<Event> {
    // uprobe:PATH:SYMBOL[+OFF] or uprobe:PATH+0xOFFSET
    let (path, offset) = match rest.rsplit_once(':') {
        Some((path, sym)) if !path.is_empty() => {
            let (name, off) = symbol_and_offset(spec, sym)?;
            let symbols = ElfFile::load(path)?;
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
