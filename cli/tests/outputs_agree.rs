//! One program, recorded once per output — `watch --json`, perf.data, pprof, and the
//! injector's JSON lines — names the same frames in all four, each file read by its
//! own reader (`perf script`, `go tool pprof -traces`): libc's internal functions named
//! from `/usr/lib/debug`, file:line, inlined frames, and the direct caller of a
//! frameless libc leaf that the kernel's frame-pointer walk skips.
//!
//! The program spends its time on two paths, `main → driver → alpha` (in a shared
//! library of its own) `→ measure` (inlined) `→ strlen` (libc's `__strlen_*`, a leaf
//! without a frame), and `main → driver → beta → spin` (inlined). Every sample of every
//! output must be on one of them, and the two must lead each output.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const LIB_C: &str = r#"
#include <string.h>
#include <stddef.h>
char work_buf[1 << 16];
static inline __attribute__((always_inline)) size_t measure(const char *s) {
    return strlen(s); /* MEASURE */
}
__attribute__((noinline)) size_t alpha(int n) {
    size_t t = 0;
    for (int i = 0; i < n; i++) {
        work_buf[i % 64] = 'a' + (i & 15);
        t += measure(work_buf + (i & 7)); /* ALPHA */
    }
    return t;
}
"#;

const PROG_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern char work_buf[];
extern size_t alpha(int n);
static inline __attribute__((always_inline)) long spin(long n) {
    long x = 0;
    for (long i = 0; i < n; i++) x += (i * i) ^ (x >> 3); /* SPIN */
    return x;
}
__attribute__((noinline)) long beta(long n) { return spin(n) + 1; /* BETA */ }
__attribute__((noinline)) long driver(int rounds) {
    long t = 0;
    for (int r = 0; r < rounds; r++) { t += alpha(3000); t += beta(2000000); }
    return t;
}
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    memset(work_buf, 'x', (1 << 16) - 1);
    printf("%ld\n", driver(rounds) & 1);
    return 0;
}
"#;

/// Rounds of work: about a second.
const ROUNDS: &str = "250";

/// One frame as a reader shows it: the function, whether it was inlined into the next
/// frame, and `file:line` (the file's name only: readers differ in how much path they
/// keep).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Frame {
    sym: String,
    inlined: bool,
    line: Option<(String, u32)>,
}

type Stack = Vec<Frame>;

/// The program and its library, with or without frame pointers, built once each.
fn build(frame_pointers: bool) -> PathBuf {
    use std::sync::OnceLock;
    static BUILT: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(frame_pointers)]
        .get_or_init(|| {
            let fp = if frame_pointers { "fp" } else { "nofp" };
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("agree-{fp}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("libwork.c"), LIB_C).unwrap();
            std::fs::write(dir.join("prog.c"), PROG_C).unwrap();
            let flag = if frame_pointers {
                "-fno-omit-frame-pointer"
            } else {
                "-fomit-frame-pointer"
            };
            let cc = |args: &[&str]| {
                let st = Command::new("cc")
                    .current_dir(&dir)
                    .args(["-O1", "-g", flag])
                    .args(args)
                    .status()
                    .expect("run cc");
                assert!(st.success(), "cc {args:?}");
            };
            cc(&["-shared", "-fPIC", "-o", "libwork.so", "libwork.c"]);
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            cc(&[
                "-fPIE", "-pie", "-o", "prog", "prog.c", "-L.", "-lwork", &rpath,
            ]);
            dir.join("prog")
        })
        .clone()
}

/// The line of `marker` in `source`.
fn line_of(source: &str, marker: &str) -> u32 {
    source
        .lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no {marker}"))
}

fn file_line(file: &str, line: u64) -> Option<(String, u32)> {
    let name = Path::new(file).file_name()?.to_string_lossy().into_owned();
    (line > 0).then_some((name, line as u32))
}

/// Each frame up to `main` (what is below it is libc's start code, which readers cut
/// differently).
fn to_main(frames: impl IntoIterator<Item = Frame>) -> Stack {
    let mut out = Vec::new();
    for f in frames {
        let main = f.sym == "main" && !f.inlined;
        out.push(f);
        if main {
            break;
        }
    }
    out
}

/// The stacks of JSON overflow lines (`watch --json -g`, the injector's).
fn json_stacks(text: &str) -> Vec<Stack> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|o| o["type"] == "overflow")
        .map(|o| {
            to_main(o["stack"].as_array().expect("a stack").iter().map(|f| {
                Frame {
                    sym: f["sym"].as_str().unwrap_or("?").to_string(),
                    inlined: f["inlined"] == true,
                    line: f["file"]
                        .as_str()
                        .and_then(|file| file_line(file, f["line"].as_u64().unwrap_or(0))),
                }
            }))
        })
        .collect()
}

/// The stacks `perf script -F ip,sym,srcline` prints: inlined frames only from its own
/// DWARF unwinding (their srcline says `(inlined)`); from a callchain, one srcline per
/// address.
fn perf_stacks(dir: &Path, file: &str) -> Vec<Stack> {
    let out = util::capture::perf(dir, &["script", "-i", file, "-F", "ip,sym,srcline"]);
    assert!(out.status.success(), "perf script: {}", util::stderr(&out));
    let err = util::stderr(&out);
    assert!(
        !err.contains("lost") && !err.contains("Warning"),
        "perf script warned: {err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stacks = Vec::new();
    let mut cur: Vec<Frame> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                stacks.push(to_main(std::mem::take(&mut cur)));
            }
        } else if line.starts_with('\t') {
            let sym = line.split_whitespace().nth(1).unwrap_or("?").to_string();
            cur.push(Frame {
                sym,
                inlined: false,
                line: None,
            });
        } else if let Some(f) = cur.last_mut() {
            // `file:line`, and ` (inlined)` for a frame perf's DWARF unwinding expanded.
            let (loc, inlined) = match line.trim().strip_suffix(" (inlined)") {
                Some(loc) => (loc, true),
                None => (line.trim(), false),
            };
            f.inlined = inlined;
            if let Some((file, n)) = loc.rsplit_once(':') {
                f.line = n.parse().ok().and_then(|n: u64| file_line(file, n));
            }
        }
    }
    if !cur.is_empty() {
        stacks.push(to_main(cur));
    }
    stacks
}

/// The stacks `go tool pprof -traces -lines` prints, each as often as its count.
fn pprof_stacks(dir: &Path, file: &str) -> Vec<Stack> {
    let out = util::capture::pprof(dir, &["-traces", "-lines", file]);
    assert!(out.status.success(), "pprof: {}", util::stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stacks = Vec::new();
    for block in text.split("-----------+") {
        let mut count = 0;
        let mut frames = Vec::new();
        for line in block.lines().filter(|l| l.starts_with(' ')) {
            let mut rest = line.trim();
            if rest.contains(':') && !rest.contains(' ') || rest.starts_with("thread_") {
                continue;
            }
            if let Some((n, tail)) = rest.split_once(char::is_whitespace) {
                if let Ok(n) = n.parse::<usize>() {
                    count = n;
                    rest = tail.trim();
                }
            }
            if rest.starts_with("pid:") || rest.starts_with("thread_") || rest.is_empty() {
                continue;
            }
            let (rest, inlined) = match rest.strip_suffix(" (inline)") {
                Some(r) => (r, true),
                None => (rest, false),
            };
            let (sym, line) = match rest.rsplit_once(' ') {
                Some((sym, loc)) => (
                    sym,
                    loc.rsplit_once(':')
                        .and_then(|(f, n)| file_line(f, n.parse().ok()?)),
                ),
                None => (rest, None),
            };
            frames.push(Frame {
                sym: sym.to_string(),
                inlined,
                line,
            });
        }
        if count > 0 && !frames.is_empty() {
            let stack = to_main(frames);
            stacks.extend(std::iter::repeat_n(stack, count));
        }
    }
    stacks
}

fn names(stack: &Stack, with_inlined: bool) -> Vec<String> {
    stack
        .iter()
        .filter(|f| with_inlined || !f.inlined)
        .map(|f| {
            // libc's string functions have one implementation per CPU feature set
            // (`__strlen_evex`, `__strlen_avx2`, ...): the same one on one machine.
            f.sym.clone()
        })
        .collect()
}

/// The program's call paths, innermost first, to `main`; `libc_leaf` is the name the
/// output gave libc's `strlen` implementation.
fn valid(libc_leaf: &str, with_inlined: bool) -> BTreeSet<Vec<String>> {
    let full: [&[&str]; 2] = [
        &[libc_leaf, "measure", "alpha", "driver", "main"],
        &["spin", "beta", "driver", "main"],
    ];
    let mut set = BTreeSet::new();
    for path in full {
        for start in 0..path.len() {
            let mut p: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
            if !with_inlined {
                p.retain(|s| s != "measure" && s != "spin");
            }
            if !p.is_empty() {
                set.insert(p);
            }
        }
    }
    set
}

/// What each output's samples say, checked against the program.
struct Seen {
    /// Distinct stacks by share, most first.
    leading: Vec<(Vec<String>, usize)>,
    libc_leaf: String,
    samples: usize,
}

fn check(what: &str, stacks: &[Stack], with_inlined: bool) -> Seen {
    assert!(stacks.len() > 300, "{what}: {} samples", stacks.len());
    let mut by: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for s in stacks {
        *by.entry(names(s, with_inlined)).or_default() += 1;
    }
    let leaf = by
        .keys()
        .find_map(|k| k.first().filter(|f| f.starts_with("__strlen")).cloned())
        .unwrap_or_else(|| panic!("{what}: no sample named libc's __strlen_*: {by:#?}"));
    let ok = valid(&leaf, with_inlined);
    for (stack, n) in &by {
        assert!(
            ok.contains(stack),
            "{what}: {n} samples on a stack the program has not: {stack:?}\nall: {by:#?}"
        );
    }
    let mut leading: Vec<(Vec<String>, usize)> = by.into_iter().collect();
    leading.sort_by_key(|l| std::cmp::Reverse(l.1));
    Seen {
        leading,
        libc_leaf: leaf,
        samples: stacks.len(),
    }
}

/// The two paths lead, each with at least a fifth of the samples.
fn assert_two_paths_lead(what: &str, seen: &Seen, with_inlined: bool) {
    let mut top: Vec<Vec<String>> = seen.leading.iter().take(2).map(|l| l.0.clone()).collect();
    top.sort();
    let full = valid(&seen.libc_leaf, with_inlined);
    let longest = |first: &str| {
        full.iter()
            .filter(|p| p[0] == first)
            .max_by_key(|p| p.len())
            .cloned()
    };
    let mut want = vec![
        longest(&seen.libc_leaf).unwrap(),
        longest(if with_inlined { "spin" } else { "beta" }).unwrap(),
    ];
    want.sort();
    assert_eq!(top, want, "{what}: {:#?}", seen.leading);
    for (_, n) in seen.leading.iter().take(2) {
        assert!(*n * 5 >= seen.samples, "{what}: {:#?}", seen.leading);
    }
}

/// The file:line each reader gives the frames of both paths.
fn assert_lines(what: &str, stacks: &[Stack], perf: bool) {
    let line = |f: &Frame| f.line.clone();
    let at = |file: &str, marker: &str| {
        let src = if file == "prog.c" { PROG_C } else { LIB_C };
        Some((file.to_string(), line_of(src, marker)))
    };
    for s in stacks {
        let find = |sym: &str| s.iter().find(|f| f.sym == sym);
        // A caller's line is its call's; a leaf's is wherever the sample fell.
        let caller = |f: &&Frame| !std::ptr::eq(*f, &s[0]);
        if let Some(alpha) = find("alpha").filter(caller) {
            if perf {
                // perf gives one srcline per address: the call's, or the inlined
                // function's line at it.
                assert!(
                    [at("libwork.c", "ALPHA"), at("libwork.c", "MEASURE")].contains(&line(alpha)),
                    "{what}: {s:?}"
                );
            } else {
                assert_eq!(line(alpha), at("libwork.c", "ALPHA"), "{what}: {s:?}");
                let measure = find("measure").unwrap_or_else(|| panic!("{what}: {s:?}"));
                assert!(measure.inlined, "{what}: {s:?}");
                assert_eq!(line(measure), at("libwork.c", "MEASURE"), "{what}: {s:?}");
            }
            if let Some(leaf) = s.first().filter(|f| f.sym.starts_with("__strlen")) {
                // libc's own source, from the debug file in /usr/lib/debug.
                let (file, _) = leaf.line.clone().unwrap_or_else(|| panic!("{what}: {s:?}"));
                assert!(file.starts_with("strlen"), "{what}: {s:?}");
            }
        }
        if let (Some(beta), Some(first)) = (find("beta"), s.first()) {
            if perf {
                if first.sym == "beta" {
                    assert!(
                        [at("prog.c", "SPIN"), at("prog.c", "BETA")].contains(&line(beta)),
                        "{what}: {s:?}"
                    );
                }
            } else if first.sym == "spin" {
                assert!(first.inlined, "{what}: {s:?}");
                assert_eq!(line(first), at("prog.c", "SPIN"), "{what}: {s:?}");
                assert_eq!(line(beta), at("prog.c", "BETA"), "{what}: {s:?}");
            }
        }
    }
}

fn perfring(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_perfring"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run perfring");
    assert!(
        out.status.success(),
        "perfring {args:?}: {}",
        util::stderr(&out)
    );
    out
}

#[test]
fn frame_pointer_stacks_name_the_same_frames_in_all_four_outputs() {
    let prog = build(true);
    let dir = prog.parent().unwrap().to_path_buf();
    let p = prog.to_str().unwrap();
    let ev = ["-e", "cpu-clock:u", "-F", "999"];

    let watch = perfring(
        &dir,
        &[&["watch", "-g", "--json"], &ev[..], &["--", p, ROUNDS]].concat(),
    );
    let watch = json_stacks(&String::from_utf8_lossy(&watch.stdout));
    perfring(
        &dir,
        &[
            &["record", "-g", "-o", "fp.data"],
            &ev[..],
            &["--", p, ROUNDS],
        ]
        .concat(),
    );
    let perf = perf_stacks(&dir, "fp.data");
    perfring(
        &dir,
        &[
            &["record", "-g", "--format", "pprof", "-o", "fp.pb.gz"],
            &ev[..],
            &["--", p, ROUNDS],
        ]
        .concat(),
    );
    let pprof = pprof_stacks(&dir, "fp.pb.gz");
    perfring(
        &dir,
        &[
            &["inject", "--action", "record", "-o", "inject.jsonl"],
            &ev[..],
            &["--", p, ROUNDS],
        ]
        .concat(),
    );
    let inject = json_stacks(&std::fs::read_to_string(dir.join("inject.jsonl")).unwrap());

    let seen = [
        ("watch --json", check("watch --json", &watch, true)),
        ("perf script", check("perf script", &perf, false)),
        ("go tool pprof", check("go tool pprof", &pprof, true)),
        ("inject json", check("inject json", &inject, true)),
    ];
    for (what, s) in &seen {
        assert_two_paths_lead(what, s, *what != "perf script");
        assert_eq!(
            s.libc_leaf, seen[0].1.libc_leaf,
            "{what}: the same libc function"
        );
    }
    assert_lines("watch --json", &watch, false);
    assert_lines("go tool pprof", &pprof, false);
    assert_lines("inject json", &inject, false);
    assert_lines("perf script", &perf, true);
}

/// `--call-graph dwarf` on a build without frame pointers: perf's own unwinding of the
/// perf.data and the pprof's stacks are those of the frame-pointer build.
#[test]
fn dwarf_stacks_without_frame_pointers_are_those_of_the_frame_pointer_build() {
    let fp = build(true);
    let nofp = build(false);
    let dir = nofp.parent().unwrap().to_path_buf();
    let ev = ["-e", "cpu-clock:u", "-F", "999"];
    let run = |prog: &Path, graph: &[&str], out: &str, format: &str| {
        let p = prog.to_str().unwrap();
        perfring(
            &dir,
            &[
                &["record", "--format", format, "-o", out],
                graph,
                &ev[..],
                &["--", p, ROUNDS],
            ]
            .concat(),
        );
    };
    run(&fp, &["-g"], "fp-ref.data", "perf");
    run(&nofp, &["--call-graph", "dwarf"], "dwarf.data", "perf");
    run(&fp, &["-g"], "fp-ref.pb.gz", "pprof");
    run(&nofp, &["--call-graph", "dwarf"], "dwarf.pb.gz", "pprof");
    let perf_fp = check("perf script, fp", &perf_stacks(&dir, "fp-ref.data"), false);
    let perf_dwarf = check(
        "perf script, dwarf",
        &perf_stacks(&dir, "dwarf.data"),
        false,
    );
    let pprof_fp = check("pprof, fp", &pprof_stacks(&dir, "fp-ref.pb.gz"), true);
    let pprof_dwarf = check("pprof, dwarf", &pprof_stacks(&dir, "dwarf.pb.gz"), true);
    for (what, s, inl) in [
        ("perf script, dwarf", &perf_dwarf, false),
        ("pprof, dwarf", &pprof_dwarf, true),
        ("perf script, fp", &perf_fp, false),
        ("pprof, fp", &pprof_fp, true),
    ] {
        assert_two_paths_lead(what, s, inl);
    }
    let lead = |s: &Seen| {
        s.leading
            .iter()
            .take(2)
            .map(|l| l.0.clone())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(lead(&perf_dwarf), lead(&perf_fp));
    assert_eq!(lead(&pprof_dwarf), lead(&pprof_fp));
}
