//! ELF symbols against real processes: the no-ASLR PIE base, `mem:SYMBOL` breakpoints
//! and `uprobe:PATH:SYMBOL` probes counting exactly, and ip symbolization.
#![cfg(feature = "profile")]

mod util;

use perfring::elf::{ElfFile, ElfType, NO_ASLR_PIE_BASE};
use perfring::launch::{Command, Waited};
use perfring::resolve::{resolve_event, TargetImage};
use perfring::space::AddressSpaces;
use perfring::symbolize::Symbolizer;
use perfring::unwind::RawFrame;
use perfring::{Counter, ErrorKind, Scope};

const N: u64 = 7;

#[test]
fn elf_types_and_segments() {
    let pie = ElfFile::load(util::c_program(true)).unwrap();
    let exe = ElfFile::load(util::c_program(false)).unwrap();
    assert_eq!(pie.elf_type(), ElfType::Dynamic);
    assert_eq!(exe.elf_type(), ElfType::Executable);
    assert!(pie.has_interpreter());
    assert_eq!(exe.no_aslr_bias().unwrap(), 0);
    for s in [&pie, &exe] {
        let t = s.find("target").unwrap().clone();
        assert!(t.size > 0);
        assert_eq!(s.lookup(t.addr), Some(("target", 0)));
        assert_eq!(s.lookup(t.addr + 1), Some(("target", 1)));
        assert_ne!(s.lookup(t.addr + t.size).map(|x| x.0), Some("target"));
        let off = s.file_offset(t.addr).unwrap();
        assert_eq!(s.vaddr_of_offset(off), Some(t.addr));
        assert!(s.find("counter").is_some());
    }
}

#[test]
fn missing_symbol_suggests_close_names() {
    let s = ElfFile::load(util::c_program(true)).unwrap();
    let e = s.require("targt").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("'target'"), "{e}");
    let e = resolve_event("mem:targt:x", &TargetImage::Spawned(util::c_program(true))).unwrap_err();
    assert!(e.to_string().contains("did you mean 'target'"), "{e}");
}

/// The measured constant: a PIE spawned with `no_aslr` is mapped where
/// `ElfFile::no_aslr_bias` (from `NO_ASLR_PIE_BASE`) says.
#[test]
#[cfg(target_arch = "x86_64")]
fn no_aslr_pie_base_is_what_the_kernel_uses() {
    assert_eq!(NO_ASLR_PIE_BASE, Some(0x5555_5555_4000));
    let prog = util::c_program(true);
    let symbols = ElfFile::load(&prog).unwrap();
    let stopped = Command::new(&prog)
        .args(["0", "5"])
        .no_aslr(true)
        .spawn_stopped()
        .unwrap();
    let mut child = stopped.start().unwrap();
    let mut spaces = AddressSpaces::new();
    spaces.attach(child.pid() as u32).unwrap();
    let space = spaces.process(child.pid() as u32).unwrap();
    let bias = space.bias_of(&symbols);
    child.signal(perfring::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert_eq!(bias, Some(symbols.no_aslr_bias().unwrap()), "{space:?}");
}

fn count_spawned(prog: &std::path::Path, spec: &str, no_aslr: bool) -> u64 {
    let event = resolve_event(spec, &TargetImage::Spawned(prog.to_owned())).unwrap();
    let stopped = Command::new(prog)
        .arg(N.to_string())
        .no_aslr(no_aslr)
        .spawn_stopped()
        .unwrap();
    let counter = Counter::builder_for(event)
        .target(Scope::Thread(stopped.pid()))
        .period(1)
        .exclude_kernel(true)
        .enable_on_exec(true)
        .inherit(true)
        .open()
        .unwrap();
    let mut child = stopped.start().unwrap();
    assert!(child.wait().unwrap().success());
    counter.read().unwrap().value
}

#[test]
fn mem_symbol_breakpoint_counts_each_call_pie() {
    assert_eq!(
        count_spawned(&util::c_program(true), "mem:target:x", true),
        N
    );
}

#[test]
fn mem_symbol_breakpoint_counts_each_call_no_pie() {
    assert_eq!(
        count_spawned(&util::c_program(false), "mem:target:x", false),
        N
    );
}

#[test]
fn mem_symbol_watchpoint_counts_each_write() {
    // `counter++` reads and writes once per call.
    assert_eq!(
        count_spawned(&util::c_program(true), "mem:counter:w", true),
        N
    );
}

#[test]
fn uprobe_on_symbol_counts_each_call() {
    let prog = util::c_program(true);
    let spec = format!("uprobe:{}:target", prog.display());
    // A uprobe is attached to the file, so ASLR does not matter.
    assert_eq!(count_spawned(&prog, &spec, false), N);
    let e = resolve_event(&spec, &TargetImage::None).unwrap();
    // It prints as a file offset, which parses back to the same event.
    let again = resolve_event(&e.to_string(), &TargetImage::None).unwrap();
    assert_eq!(e, again);
}

#[test]
fn attached_process_symbols_and_describe() {
    let prog = util::c_program(true);
    let symbols = ElfFile::load(&prog).unwrap();
    let target = symbols.find("target").unwrap().clone();
    // With ASLR on: the address must come from the process's maps.
    let stopped = Command::new(&prog)
        .args(["0", "5"])
        .spawn_stopped()
        .unwrap();
    let mut child = stopped.start().unwrap();
    let pid = child.pid();
    let event = resolve_event("mem:target+1:x", &TargetImage::Process(pid));
    let mut spaces = AddressSpaces::new();
    spaces.attach(pid as u32).unwrap();
    let bias = spaces
        .process(pid as u32)
        .unwrap()
        .bias_of(&symbols)
        .unwrap();
    let runtime = target.addr + bias;
    let mut names = Symbolizer::new();
    let mut describe = |ip: u64| {
        let frames = names.frames(&spaces, pid as u32, &[RawFrame::user(ip)]);
        let f = frames.iter().find(|f| !f.inlined).unwrap();
        match (f.sym.as_deref().unwrap(), f.off) {
            (sym, Some(0) | None) => sym.to_string(),
            (sym, Some(off)) => format!("{sym}+{off:#x}"),
        }
    };
    let described = (describe(runtime), describe(runtime + 4));
    assert_eq!(
        perfring::launch::wait_for_exit(pid, Some(std::time::Duration::from_millis(10))).unwrap(),
        Waited::TimedOut
    );
    child.signal(perfring::Signal::SIGKILL).unwrap();
    assert_eq!(
        perfring::launch::wait_for_exit(pid, None).unwrap(),
        Waited::Exited
    );
    child.wait().unwrap();
    assert_eq!(described.0, "target");
    assert_eq!(described.1, "target+0x4");
    let event = event.unwrap();
    assert_eq!(event.to_string(), format!("mem:{:#x}/8:x", runtime + 1));
}

/// A program that waits for a line on stdin, then calls libc's `getppid` `argv[1]` times.
const WAITS_THEN_CALLS_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
    int n = atoi(argv[1]);
    long acc = 0;
    for (int i = 0; i < n; i++) acc += getppid();
    return acc == 0;
}
"#;

/// `mem:libc.so.6:getppid:x` (and plain `mem:getppid:x`) in a running process resolve
/// through blazesym in libc, and a breakpoint there counts each call exactly.
#[test]
fn mem_symbol_in_a_loaded_library_counts_each_call() {
    use std::io::Write;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("symbols-lib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("waits.c");
    std::fs::write(&src, WAITS_THEN_CALLS_C).unwrap();
    let prog = dir.join("waits");
    let st = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());

    let mut child = std::process::Command::new(&prog)
        .arg(N.to_string())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Wait until the loader has mapped libc (it blocks in fgets afterwards).
    let loaded = || {
        std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libc"))
            && perfring::proc::state(pid) == Some('S')
    };
    while !loaded() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let qualified = resolve_event("mem:libc.so.6:getppid:x", &TargetImage::Process(pid)).unwrap();
    let plain = resolve_event("mem:getppid:x", &TargetImage::Process(pid)).unwrap();
    assert_eq!(qualified.to_string(), plain.to_string());
    assert_eq!(qualified.name(), "mem:libc.so.6:getppid:x");
    let stem = resolve_event("mem:libc.so:getppid:x:u", &TargetImage::Process(pid)).unwrap();
    assert!(
        stem.to_string().starts_with(&qualified.to_string()),
        "{stem}"
    );

    let e = resolve_event("mem:libnothing.so:getppid:x", &TargetImage::Process(pid)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = resolve_event("mem:libc.so.6:getppidd:x", &TargetImage::Process(pid)).unwrap_err();
    assert!(e.to_string().contains("did you mean 'getppid'"), "{e}");

    let counter = Counter::builder_for(qualified)
        .target(Scope::Thread(pid))
        .period(1)
        .exclude_kernel(true)
        .enabled(true)
        .open()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(counter.read().unwrap().value, N);
}

#[test]
fn a_library_symbol_of_a_program_not_started_is_refused_with_a_fix() {
    let image = TargetImage::Spawned(util::c_program(true));
    let e = resolve_event("mem:libc.so.6:malloc:x", &image).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("uprobe:PATH:malloc"), "{e}");
    // The program itself may be named, by its path.
    let path = util::c_program(true);
    let e = resolve_event(&format!("mem:{}:target:x", path.display()), &image).unwrap();
    let plain = resolve_event("mem:target:x", &image).unwrap();
    assert_eq!(e.to_string(), plain.to_string());
}

/// C functions whose names are also Itanium type encodings (`a` is `signed char`, `b`
/// `bool`, `c` `char`) keep their names, with and without debug information; a C++
/// function is demangled.
#[test]
fn c_functions_named_like_cpp_type_codes_keep_their_names() {
    const SRC: &str = r#"
volatile long sink;
void __attribute__((noinline)) a(void) { sink += 1; }
void __attribute__((noinline)) b(void) { sink += 2; }
void __attribute__((noinline)) c(void) { sink += 3; }
int main(void) { a(); b(); c(); return 0; }
"#;
    for (name, flags) in [("abc-g", &["-g"][..]), ("abc-g0", &[][..])] {
        let prog = util::compile_c(name, SRC, flags);
        let elf = ElfFile::load(&prog).unwrap();
        let mut names = Symbolizer::new();
        for f in ["a", "b", "c"] {
            let sym = elf.require(f).unwrap();
            assert_eq!(elf.lookup(sym.addr), Some((f, 0)), "{name}: the ELF table");
            let off = elf.file_offset(sym.addr).unwrap();
            let frames = names.symbolize_file_offset(&prog, off);
            let last = frames.last().and_then(|fr| fr.sym.clone());
            assert_eq!(last.as_deref(), Some(f), "{name}: {frames:?}");
        }
    }
}
