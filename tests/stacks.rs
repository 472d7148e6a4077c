//! Call stacks of real samples, unwound (frame pointers, DWARF with framehop) and named
//! (blazesym) after the process has exited, from the ring's records alone.
//!
//! Each test compiles its target at test time, spawns it stopped, opens an execute
//! breakpoint (or a uprobe) with period 1 before its `exec`, lets it run to the end,
//! then drains the ring: MMAP2/COMM/EXIT records feed the address spaces, each sample
//! is unwound and named. Every sample's stack is checked, and the number of samples is
//! the number of calls.
#![cfg(feature = "profile")]

mod util;

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use perfring::elf::ElfFile;
use perfring::launch::Command;
use perfring::records::{Layout, RecordKind};
use perfring::resolve::{resolve_event, TargetImage};
use perfring::ring::{Ring, RingSize};
use perfring::space::AddressSpaces;
use perfring::symbolize::{Frame, Symbolizer};
use perfring::unwind::{CallGraph, Unwinder};
use perfring::{Counter, Event, SampleType, Scope};

/// Calls: each `top` call reaches `leaf` once.
const N: usize = 6;

const STACK_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile int sink;
/* Each caller uses its callee's result, so no call is a tail call. leaf needs no stack,
   so gcc sets up no frame in it (even with -fno-omit-frame-pointer): the kernel's fp
   chain from it, and from any function's first instruction, starts at its caller's
   frame and skips the caller; perfring's unwinder puts it back with the CFI. */
NOINLINE int leaf(int x) { sink += x; return sink * 3; }
NOINLINE int mid(int x) { int r = leaf(x + 1); sink += r; return r + 1; }
NOINLINE int top(int x) { int r = mid(x + 2); sink += r; return r + 2; }
static inline __attribute__((always_inline)) int twice(int x) { sink = x; return sink * 2; }
NOINLINE int outer(int x) { int r = twice(x + 5); sink += r; return r + 1; }
NOINLINE int cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    sink++;
    return (x > y) - (x < y);
}
NOINLINE int sorter(void) {
    int v[8] = {5, 3, 7, 1, 8, 2, 6, 4};
    qsort(v, 8, sizeof v[0], cmp);
    sink += v[0];
    return v[7];
}
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "stack";
    int n = argc > 2 ? atoi(argv[2]) : 5, acc = 0;
    if (mode[0] == 's') {
        for (int i = 0; i < n; i++) acc += top(i);
    } else if (mode[0] == 'q') {
        acc += sorter();
    } else if (mode[0] == 'd') {
        void *h = dlopen(argv[3], RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        int (*work)(int) = (int (*)(int))dlsym(h, "lib_work");
        for (int i = 0; i < n; i++) acc += work(i);
    } else {
        acc += outer(n);
    }
    printf("%d\n", acc & 1);
    return 0;
}
"#;

const LIB_C: &str = r#"
__attribute__((noinline)) int lib_work(int x) { return x * 3 + 1; }
"#;

const DEMO_RS: &str = r#"
#[inline(never)]
#[no_mangle]
pub extern "C" fn rs_leaf(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3)
}
mod inner {
    #[inline(never)]
    pub fn middle<T: Into<u64>>(x: T) -> u64 {
        let r = super::rs_leaf(x.into());
        std::hint::black_box(r) + 1
    }
}
fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut acc = 0;
    for i in 0..n {
        acc += inner::middle(i as u32);
    }
    println!("{}", acc & 1);
}
"#;

fn dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stacks-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cc(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let d = dir();
    let c = d.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = d.join(name);
    let st = Process::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {flags:?} failed");
    out
}

/// The C program, with frame pointers or without (built once per test binary).
fn stack_prog(frame_pointers: bool) -> PathBuf {
    use std::sync::OnceLock;
    static BUILT: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(frame_pointers)]
        .get_or_init(|| build_stack_prog(frame_pointers))
        .clone()
}

fn build_stack_prog(frame_pointers: bool) -> PathBuf {
    let fp: &[&str] = if frame_pointers {
        &["-fno-omit-frame-pointer"]
    } else {
        &["-fomit-frame-pointer"]
    };
    cc(
        if frame_pointers {
            "stack-fp"
        } else {
            "stack-nofp"
        },
        STACK_C,
        &[&["-O1", "-g", "-fPIE", "-pie"], fp].concat(),
    )
}

/// What a run gave: each sample's named frames (user frames only), and what was lost.
struct Run {
    stacks: Vec<Vec<Frame>>,
    lost: u64,
}

fn run(prog: &Path, args: &[&str], event: Event, graph: CallGraph, build_id: bool) -> Run {
    let stopped = Command::new(prog)
        .args(args)
        .no_aslr(true)
        .spawn_stopped()
        .unwrap();
    let mut builder = graph.configure(
        Counter::builder_for(event)
            .target(Scope::Thread(stopped.pid()))
            .period(1)
            .sample(SampleType::IP | SampleType::TID)
            .exclude_kernel(true)
            .enable_on_exec(true)
            .track_tasks(true),
    );
    if build_id {
        builder.attr_mut().set_build_id(1);
    }
    let layout = Layout::new(builder.attr()).unwrap();
    let counter = builder.open().unwrap();
    let mut ring = Ring::map(&counter, RingSize::Pages(128)).unwrap();
    let mut child = stopped.start().unwrap();
    assert!(child.wait().unwrap().success());

    // The process is gone: everything below comes from the ring.
    let (mut spaces, mut unwinder, mut names) =
        (AddressSpaces::new(), Unwinder::new(), Symbolizer::new());
    let mut stacks = Vec::new();
    let mut batch = ring.batch();
    while let Some(rec) = batch.next_record(&layout) {
        let rec = rec.unwrap();
        spaces.observe(&rec);
        if let RecordKind::Sample(s) = rec.kind() {
            let mut raw = Vec::new();
            unwinder.sample_frames(&spaces, s, &mut raw);
            let frames = names.frames(&spaces, s.pid().unwrap(), &raw);
            stacks.push(frames.into_iter().filter(|f| !f.kernel).collect());
        }
    }
    drop(batch);
    let st = ring.stats();
    Run {
        stacks,
        lost: st.lost + st.lost_samples,
    }
}

/// The non-inlined function names of a stack, up to and including `main`.
fn names(stack: &[Frame]) -> Vec<String> {
    let mut out = Vec::new();
    for f in stack.iter().filter(|f| !f.inlined) {
        out.push(f.sym.clone().unwrap_or_else(|| format!("{:#x}", f.ip)));
        if f.sym.as_deref() == Some("main") {
            break;
        }
    }
    out
}

fn breakpoint(prog: &Path, spec: &str) -> Event {
    resolve_event(spec, &TargetImage::Spawned(prog.to_owned())).unwrap()
}

fn assert_every_stack(run: &Run, expect: &[&str], what: &str) {
    assert_eq!(run.lost, 0, "{what}: records lost");
    assert_eq!(run.stacks.len(), N, "{what}: one sample per call");
    for stack in &run.stacks {
        assert_eq!(names(stack), expect, "{what}: {stack:#?}");
        let prog = stack[0].dso.as_deref().unwrap();
        assert!(
            prog.ends_with("stack-fp") || prog.ends_with("stack-nofp"),
            "{prog}"
        );
    }
}

/// At the function's first instruction (an execute breakpoint on it) of a leaf that
/// sets up no frame: the kernel's chain starts at `mid`'s frame and skips `mid`; the
/// CFI of the first frame puts it back.
#[test]
fn fp_stack_is_leaf_mid_top_main_at_the_entry() {
    let prog = stack_prog(true);
    let ev = breakpoint(&prog, "mem:leaf:x");
    let run = run(&prog, &["stack", &N.to_string()], ev, CallGraph::Fp, false);
    assert_every_stack(&run, &["leaf", "mid", "top", "main"], "fp");
    assert!(run.stacks.iter().all(|s| s[0].off == Some(0)));
}

#[test]
fn dwarf_stack_is_leaf_mid_top_main_even_at_the_entry() {
    let prog = stack_prog(true);
    let ev = breakpoint(&prog, "mem:leaf:x");
    let graph = CallGraph::Dwarf { stack_bytes: 4096 };
    let run = run(&prog, &["stack", &N.to_string()], ev, graph, true);
    assert_every_stack(&run, &["leaf", "mid", "top", "main"], "dwarf");
    // Below main: libc's start code, still named from libc.
    let below = &run.stacks[0][4..];
    assert!(
        below
            .iter()
            .any(|f| f.dso.as_deref().is_some_and(|d| d.contains("libc"))),
        "{below:#?}"
    );
}

#[test]
fn dwarf_stack_without_frame_pointers() {
    let prog = stack_prog(false);
    let ev = breakpoint(&prog, "mem:leaf:x");
    let graph = CallGraph::Dwarf { stack_bytes: 4096 };
    let run = run(&prog, &["stack", &N.to_string()], ev, graph, false);
    assert_every_stack(&run, &["leaf", "mid", "top", "main"], "dwarf, no fp");
}

#[test]
fn qsort_comparator_then_libc_then_the_caller() {
    let prog = stack_prog(false);
    let ev = breakpoint(&prog, "mem:cmp:x");
    let graph = CallGraph::Dwarf { stack_bytes: 8192 };
    let run = run(&prog, &["qsort"], ev, graph, false);
    assert_eq!(run.lost, 0);
    // Sorting 8 elements needs at least 7 comparisons.
    assert!(run.stacks.len() >= 7, "{}", run.stacks.len());
    for stack in &run.stacks {
        let n = names(stack);
        assert_eq!(n[0], "cmp", "{stack:#?}");
        let libc: Vec<&Frame> = stack[1..]
            .iter()
            .take_while(|f| f.dso.as_deref().is_some_and(|d| d.contains("libc")))
            .collect();
        assert!(!libc.is_empty(), "no libc frames: {stack:#?}");
        assert!(
            libc.iter()
                .any(|f| f.sym.as_deref().is_some_and(|s| s.contains("qsort"))),
            "qsort not named: {stack:#?}"
        );
        let after = &stack[1 + libc.len()..];
        assert_eq!(after[0].sym.as_deref(), Some("sorter"), "{stack:#?}");
        assert_eq!(after[1].sym.as_deref(), Some("main"), "{stack:#?}");
    }
}

#[test]
fn leaf_file_and_line_are_addr2lines() {
    let prog = stack_prog(true);
    let ev = breakpoint(&prog, "mem:leaf:x");
    let run = run(&prog, &["stack", "1"], ev, CallGraph::Fp, false);
    assert_eq!(run.stacks.len(), 1);
    let leaf = &run.stacks[0][0];
    assert_eq!(leaf.sym.as_deref(), Some("leaf"));
    let vaddr = ElfFile::load(&prog).unwrap().find("leaf").unwrap().addr;
    let out = Process::new("addr2line")
        .arg("-e")
        .arg(&prog)
        .arg(format!("{vaddr:#x}"))
        .output()
        .expect("run addr2line");
    let text = String::from_utf8_lossy(&out.stdout);
    let (file, line) = text.trim().rsplit_once(':').unwrap();
    let line: u32 = line.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(leaf.line, Some(line), "addr2line: {text}");
    assert_eq!(
        Path::new(leaf.file.as_deref().unwrap()).file_name(),
        Path::new(file).file_name(),
        "addr2line: {text}"
    );
}

#[test]
fn an_inlined_function_is_reported_inlined() {
    let prog = stack_prog(true);
    let symbols = ElfFile::load(&prog).unwrap();
    let outer = symbols.find("outer").unwrap().clone();
    let mut names = Symbolizer::new();
    let mut found = None;
    for vaddr in outer.addr..outer.addr + outer.size {
        let off = symbols.file_offset(vaddr).unwrap();
        let frames = names.symbolize_file_offset(&prog, off);
        if frames.len() == 2 && frames[0].sym.as_deref() == Some("twice") {
            found = Some((vaddr, frames));
            break;
        }
    }
    let (vaddr, frames) = found.expect("no address of outer is in the inlined twice");
    assert!(frames[0].inlined);
    assert_eq!(frames[1].sym.as_deref(), Some("outer"));
    assert!(!frames[1].inlined);
    // addr2line agrees: twice, inlined into outer.
    let out = Process::new("addr2line")
        .args(["-i", "-f", "-e"])
        .arg(&prog)
        .arg(format!("{vaddr:#x}"))
        .output()
        .expect("run addr2line");
    let text = String::from_utf8_lossy(&out.stdout);
    let funcs: Vec<&str> = text.lines().step_by(2).collect();
    assert_eq!(funcs, ["twice", "outer"], "{text}");
    let line: u32 = text
        .lines()
        .nth(1)
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(frames[0].line, Some(line), "{text}");
}

#[test]
fn a_library_dlopened_after_the_watch_started_is_named() {
    let prog = stack_prog(true);
    let lib = cc("libwork.so", LIB_C, &["-O1", "-g", "-shared", "-fPIC"]);
    let lib = lib.canonicalize().unwrap();
    let ev = resolve_event(
        &format!("uprobe:{}:lib_work", lib.display()),
        &TargetImage::None,
    )
    .unwrap();
    for graph in [CallGraph::Fp, CallGraph::Dwarf { stack_bytes: 4096 }] {
        let run = run(
            &prog,
            &["dlopen", &N.to_string(), lib.to_str().unwrap()],
            ev.clone(),
            graph,
            false,
        );
        assert_eq!(run.lost, 0);
        assert_eq!(run.stacks.len(), N, "{graph:?}");
        for stack in &run.stacks {
            assert_eq!(
                stack[0].sym.as_deref(),
                Some("lib_work"),
                "{graph:?}: {stack:#?}"
            );
            assert_eq!(stack[0].dso.as_deref(), lib.to_str(), "{stack:#?}");
            // A uprobe fires at the entry, before lib_work pushes a frame: the kernel's
            // fp chain skips its caller there, the CFI of the first frame does not.
            assert_eq!(names(stack)[1..], ["main"], "{graph:?}: {stack:#?}");
        }
    }
}

#[test]
fn rust_frames_are_demangled() {
    let d = dir();
    let src = d.join("demo.rs");
    std::fs::write(&src, DEMO_RS).unwrap();
    let prog = d.join("demo");
    let st = Process::new("rustc")
        .args(["-g", "-C", "opt-level=1", "--edition", "2021", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .expect("run rustc");
    assert!(st.success());
    let ev = breakpoint(&prog, "mem:rs_leaf:x");
    let run = run(
        &prog,
        &[&N.to_string()],
        ev,
        CallGraph::Dwarf { stack_bytes: 8192 },
        false,
    );
    assert_eq!(run.lost, 0);
    assert_eq!(run.stacks.len(), N);
    for stack in &run.stacks {
        let n = names(stack);
        assert_eq!(n[0], "rs_leaf", "{stack:#?}");
        let middle = &n[1];
        assert!(middle.starts_with("demo::inner::middle"), "{stack:#?}");
        // demo::main, reached through the unwinding (no frame pointers asked for).
        assert!(
            stack.iter().any(|f| f.sym.as_deref() == Some("demo::main")),
            "{stack:#?}"
        );
        for f in stack.iter().filter_map(|f| f.sym.as_deref()) {
            assert!(
                !f.starts_with("_ZN") && !f.starts_with("_R"),
                "mangled: {f}"
            );
        }
    }
}

fn watch(args: &[&str]) -> std::process::Output {
    Process::new(util::perfring_bin())
        .arg("watch")
        .args(args)
        .output()
        .expect("run perfring")
}

/// `watch --call-graph dwarf --json`: each overflow line's "stack" is leaf, mid, top,
/// main (innermost first), each frame with ip, sym, off, file, line, inlined, dso.
#[test]
fn watch_json_lines_carry_the_stack() {
    let prog = stack_prog(false);
    let n = N.to_string();
    let out = watch(&[
        "-e",
        "mem:leaf:x",
        "--call-graph",
        "dwarf,4096",
        "--json",
        "--",
        prog.to_str().unwrap(),
        "stack",
        &n,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let overflows: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["type"] == "overflow").collect();
    assert_eq!(overflows.len(), N, "{text}");
    for o in overflows {
        let stack = o["stack"].as_array().unwrap();
        let syms: Vec<&str> = stack
            .iter()
            .filter(|f| f["inlined"] == false)
            .map(|f| f["sym"].as_str().unwrap_or("?"))
            .take(4)
            .collect();
        assert_eq!(syms, ["leaf", "mid", "top", "main"], "{o}");
        assert_eq!(stack[0]["ip"], o["ip"]);
        assert_eq!(stack[0]["off"], 0);
        assert!(stack[0]["line"].as_u64().unwrap() > 0);
        assert!(stack[0]["file"].as_str().unwrap().ends_with("stack-nofp.c"));
        assert_eq!(stack[0]["dso"].as_str(), prog.to_str());
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["lost"], 0);
}

/// `watch -g -e mem:leaf:x`: the breakpoint at the entry of the frameless `leaf`.
#[test]
fn watch_g_prints_the_stack_indented_under_each_line() {
    let prog = stack_prog(true);
    let out = watch(&[
        "-e",
        "mem:leaf:x",
        "-g",
        "--",
        prog.to_str().unwrap(),
        "stack",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let firsts: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("mem:leaf:x"))
        .collect();
    assert_eq!(firsts.len(), 2, "{text}");
    for i in firsts {
        let frames: Vec<&str> = lines[i + 1..i + 5]
            .iter()
            .map(|l| {
                assert!(l.starts_with("    "), "{text}");
                l.split_whitespace().nth(1).unwrap()
            })
            .collect();
        assert_eq!(frames[0], "leaf", "{text}");
        assert_eq!(
            frames[1..]
                .iter()
                .map(|f| f.split('+').next().unwrap())
                .collect::<Vec<_>>(),
            ["mid", "top", "main"],
            "{text}"
        );
    }
}

#[test]
fn watch_refuses_an_unknown_call_graph_mode() {
    let out = watch(&["--call-graph", "lbr", "-e", "cpu-clock", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'lbr' is not a call graph mode") && err.contains("dwarf,BYTES"),
        "{err}"
    );
}

/// A mapping whose build id (as the kernel reported it) is not the file's on disk is
/// not named from that file: a rebuilt program would give wrong names.
#[test]
fn a_file_with_another_build_id_is_not_used_for_names() {
    use perfring::space::Mapping;
    use perfring::unwind::RawFrame;
    let prog = stack_prog(true);
    let symbols = ElfFile::load(&prog).unwrap();
    let leaf = symbols.find("leaf").unwrap().addr;
    let off = symbols.file_offset(leaf).unwrap();
    let page = off & !0xfff;
    let mapping = |build_id: Option<Vec<u8>>| Mapping {
        start: 0x10_0000,
        end: 0x10_0000 + 0x1000,
        pgoff: page,
        path: prog.as_path().into(),
        build_id: build_id.map(std::sync::Arc::from),
    };
    let ip = 0x10_0000 + (off - page);
    let mut names = Symbolizer::new();
    for (pid, id, named) in [(1, None, true), (2, Some(vec![0u8; 20]), false)] {
        let mut spaces = AddressSpaces::new();
        spaces.insert(pid, mapping(id));
        let frames = names.frames(&spaces, pid, &[RawFrame::user(ip)]);
        assert_eq!(
            frames[0].sym.as_deref() == Some("leaf"),
            named,
            "{frames:?}"
        );
        assert_eq!(frames[0].dso.as_deref(), prog.to_str());
    }
}

/// The same through the library's sampler: its tracking counter's records feed the
/// address spaces, each sample of the event is unwound and named in the drain callback.
#[test]
fn sampler_samples_carry_named_stacks() {
    use perfring::sampler::{Sampler, Target as SamplerTarget};
    let prog = stack_prog(false);
    let event = CallGraph::Dwarf { stack_bytes: 4096 }.configure(
        Counter::builder_for(breakpoint(&prog, "mem:leaf:x"))
            .period(1)
            .sample(SampleType::IP | SampleType::TID)
            .exclude_kernel(true),
    );
    let command = Command::new(&prog)
        .args(["stack", &N.to_string()])
        .no_aslr(true);
    let mut sampler = Sampler::builder(SamplerTarget::Command(command))
        .event(event)
        .start()
        .unwrap();
    let (mut spaces, mut unwinder, mut symbolizer) =
        (AddressSpaces::new(), Unwinder::new(), Symbolizer::new());
    let mut stacks = Vec::new();
    let mut on_record = |d: perfring::sampler::Delivery<'_>| {
        spaces.observe(&d.record);
        if let (Some(0), RecordKind::Sample(s)) = (d.event, d.record.kind()) {
            let mut raw = Vec::new();
            unwinder.sample_frames(&spaces, s, &mut raw);
            stacks.push(names(&symbolizer.frames(&spaces, s.pid().unwrap(), &raw)));
        }
    };
    while sampler.target_ended().unwrap().is_none() {
        sampler
            .poll(Some(std::time::Duration::from_millis(20)), &mut on_record)
            .unwrap();
    }
    sampler.drain(&mut on_record).unwrap();
    assert_eq!(sampler.stats().lost, 0);
    assert_eq!(stacks.len(), N);
    for s in &stacks {
        assert_eq!(s, &["leaf", "mid", "top", "main"]);
    }
}
