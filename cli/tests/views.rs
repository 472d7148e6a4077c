//! Looking at a profile: the flame graph as a browser renders it, `perfring report`
//! against `perf report`, off-CPU and wall-clock profiles, the status line. Each file
//! is read by what a user reads it with: headless Chromium, `perf report`, inferno's
//! folded format as text; each CLI path also runs as an unprivileged user
//! (`setpriv --reuid=65534`), at the machine's `perf_event_paranoid`.
#![cfg(feature = "profile")]

#[path = "../../tests/util/mod.rs"]
mod util;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use util::capture::{perf, scratch};

/// The `perfring` binary.
fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_perfring")
}

/// `perfring ARGS` in `dir`, as root (or whoever runs the tests).
fn perfring(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run perfring")
}

/// Whether the tests can switch to an unprivileged user (they run as root).
fn can_drop_privileges() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("setpriv").arg("--version").output().is_ok()
}

/// `perfring ARGS` in `dir` as the unprivileged user 65534.
fn perfring_nobody(dir: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()])
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("run setpriv")
}

/// A scratch directory the unprivileged user may write too.
fn shared_scratch(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

fn ok(out: &Output, what: &str) -> String {
    let err = util::stderr(out);
    assert!(out.status.success(), "{what} failed: {err}");
    err
}

fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// `perf report --stdio --no-children --sort sym -q -g none` of `file`: (symbol with
/// its `[.]`/`[k]`, percent), most first.
fn perf_report_percent(dir: &Path, file: &str) -> Vec<(String, f64)> {
    let out = perf(
        dir,
        &[
            "report",
            "-i",
            file,
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-q",
            "-g",
            "none",
        ],
    );
    assert!(
        out.status.success(),
        "perf report failed: {}",
        util::stderr(&out)
    );
    table_rows(&String::from_utf8_lossy(&out.stdout))
}

/// The rows of a `--no-children` table: `    12.34%  [.] name`.
fn table_rows(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let l = l.trim();
            let (pct, rest) = l.split_once('%')?;
            Some((rest.trim().to_string(), pct.trim().parse().ok()?))
        })
        .collect()
}

/// Three functions of known shares of the work (50, 30, 20), each a leaf doing its
/// own loop, called in turn in many rounds.
const THREE_C: &str = r#"
#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) void hot_alpha(long n) { for (long i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void hot_beta(long n) { for (long i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void hot_gamma(long n) { for (long i = 0; i < n; i++) sink += i; }
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    for (int r = 0; r < rounds; r++) {
        hot_alpha(500000); hot_beta(300000); hot_gamma(200000);
    }
    return 0;
}
"#;
const THREE: [&str; 3] = ["hot_alpha", "hot_beta", "hot_gamma"];
const THREE_ROUNDS: &str = "400";

/// What Chromium rendered of a flame graph: per frame name, the summed width of its
/// boxes and the text shown in them, and the width of the whole graph.
struct Rendered {
    total: f64,
    widths: BTreeMap<String, f64>,
    shown: BTreeMap<String, String>,
}

/// Chromium, headless, without network or a profile of its own.
fn chromium(dir: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--allow-file-access-from-files",
    ])
    .arg(format!(
        "--user-data-dir={}",
        dir.join("chromium-profile").display()
    ))
    .current_dir(dir);
    c
}

/// Opens `svg` in headless Chromium inside a page whose script measures every frame's
/// box (its rendered width) and text once the picture has loaded and run its own
/// script; writes a screenshot of the picture to `png`.
fn render(dir: &Path, svg: &Path, png: &Path) -> Rendered {
    let page = dir.join("measure.html");
    std::fs::write(
        &page,
        format!(
            r#"<!DOCTYPE html><html><body style="margin:0">
<object id="fg" data="{}" type="image/svg+xml" style="width:1200px;height:800px"></object>
<pre id="out">not loaded</pre>
<script>
document.getElementById('fg').addEventListener('load', function () {{
  var doc = this.contentDocument;
  var lines = ['TOTAL\t' + doc.getElementById('frames').getBoundingClientRect().width];
  doc.querySelectorAll('#frames > g').forEach(function (g) {{
    var name = g.querySelector('title').textContent.replace(/ \([^(]*\)$/, '');
    var text = g.querySelector('text');
    lines.push(['FRAME', name, g.querySelector('rect').getBoundingClientRect().width,
                text ? text.textContent : ''].join('\t'));
  }});
  lines.push('END');
  document.getElementById('out').textContent = lines.join('\n');
}});
</script></body></html>"#,
            svg.display()
        ),
    )
    .unwrap();
    let out = chromium(dir)
        .args(["--virtual-time-budget=10000", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium (install it: scripts/setup.sh)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        util::stderr(&out)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let mut r = Rendered {
        total: 0.0,
        widths: BTreeMap::new(),
        shown: BTreeMap::new(),
    };
    for line in dom.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[..] {
            [t, w] if t.ends_with("TOTAL") => r.total = w.parse().unwrap(),
            ["FRAME", name, w, text, ..] => {
                *r.widths.entry(name.to_string()).or_default() += w.parse::<f64>().unwrap();
                if !text.is_empty() {
                    r.shown.insert(name.to_string(), text.to_string());
                }
            }
            _ => {}
        }
    }
    assert!(r.total > 0.0, "the page measured nothing: {dom}");
    let shot = chromium(dir)
        .args(["--window-size=1200,800", "--hide-scrollbars"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("run chromium");
    assert!(shot.status.success() && png.exists(), "no screenshot");
    eprintln!("flame graph screenshot: {}", png.display());
    r
}

/// Checks a rendered flame graph of [`THREE_C`] against perf's shares.
fn check_three(r: &Rendered, perf_shares: &BTreeMap<String, f64>, who: &str) {
    for name in THREE {
        let width = 100.0 * r.widths.get(name).copied().unwrap_or(0.0) / r.total;
        let perf = perf_shares[name];
        assert!(
            (width - perf).abs() <= 3.0,
            "{who}: {name} is {width:.2}% wide, perf report gives {perf:.2}%"
        );
        assert_eq!(
            r.shown.get(name).map(String::as_str),
            Some(name),
            "{who}: {name}'s box does not show its name"
        );
    }
}

#[test]
fn flame_graph_rendered_by_chromium_shows_perf_report_s_shares() {
    let dir = shared_scratch("flame");
    let prog = util::compile_c("three", THREE_C, &[]);
    let prog = prog.to_str().unwrap();
    // perf's own recording of the program, and its shares.
    let out = perf(
        &dir,
        &[
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "4000",
            "-o",
            "perf.data",
            prog,
            THREE_ROUNDS,
        ],
    );
    ok(&out, "perf record");
    let perf_shares: BTreeMap<String, f64> = perf_report_percent(&dir, "perf.data")
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("[.] ")?.to_string(), v)))
        .collect();
    for name in THREE {
        assert!(
            perf_shares.contains_key(name),
            "perf report: {perf_shares:?}"
        );
    }
    // perfring's flame graph of the same program.
    let out = perfring(
        &dir,
        &[
            "record",
            "-g",
            "--format",
            "svg",
            "-o",
            "flame.svg",
            prog,
            THREE_ROUNDS,
        ],
    );
    ok(&out, "perfring record --format svg");
    let svg = std::fs::read_to_string(dir.join("flame.svg")).unwrap();
    // The title: event, target, samples, lost.
    let title = svg
        .split("<text id=\"title\"")
        .nth(1)
        .and_then(|t| t.split('>').nth(1))
        .and_then(|t| t.split('<').next())
        .expect("a title");
    assert!(
        title.starts_with("cpu-clock of three: ") && title.ends_with(" lost"),
        "{title}"
    );
    let samples: u64 = title
        .split(": ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a sample count in the title");
    assert!(samples > 500, "{title}");
    // Interactive: inferno's search and zoom.
    assert!(svg.contains("function search(") && svg.contains("function zoom("));
    let r = render(&dir, &dir.join("flame.svg"), &dir.join("flame.png"));
    check_three(&r, &perf_shares, "root");

    if can_drop_privileges() {
        // The same as an ordinary user: at paranoid 2 only user space may be sampled.
        let event = if paranoid() >= 2 {
            "cpu-clock:u"
        } else {
            "cpu-clock"
        };
        let out = perfring_nobody(
            &dir,
            &[
                "record",
                "-e",
                event,
                "-g",
                "--format",
                "svg",
                "-o",
                "nobody.svg",
                prog,
                THREE_ROUNDS,
            ],
        );
        ok(&out, "perfring record --format svg as nobody");
        let r = render(&dir, &dir.join("nobody.svg"), &dir.join("nobody.png"));
        check_three(&r, &perf_shares, "nobody");
    }
}

/// Twelve functions with distinct shares of the work (from 23 down to 1 parts), each
/// a leaf, called in turn.
fn twelve_c() -> String {
    let mut src = String::from("#include <stdlib.h>\nstatic volatile long sink;\n");
    for i in 1..=12 {
        src += &format!(
            "__attribute__((noinline)) void work_{i:02}(long n) {{ for (long i = 0; i < n; i++) sink += i; }}\n"
        );
    }
    src += "int main(int argc, char **argv) {\n int rounds = argc > 1 ? atoi(argv[1]) : 100;\n for (int r = 0; r < rounds; r++) {\n";
    for i in 1..=12 {
        src += &format!("  work_{i:02}({}L);\n", (25 - 2 * i) * 20000);
    }
    src += " }\n return 0;\n}\n";
    src
}

/// `perfring report`'s table against `perf report`'s on one file: the same top ten
/// symbols in the same order, each within 0.1 point.
fn check_against_perf(dir: &Path, file: &str, who: &str) {
    let perf_rows = perf_report_percent(dir, file);
    let out = perfring(
        dir,
        &["report", "-i", file, "--no-children", "--sort", "symbol"],
    );
    ok(&out, "perfring report");
    let ours = table_rows(&String::from_utf8_lossy(&out.stdout));
    assert!(
        perf_rows.len() >= 10 && ours.len() >= 10,
        "{who}: {perf_rows:?} / {ours:?}"
    );
    for (i, (p, o)) in perf_rows.iter().zip(&ours).take(10).enumerate() {
        assert_eq!(
            p.0, o.0,
            "{who}: row {i}: perf {perf_rows:?}\nperfring {ours:?}"
        );
        assert!(
            (p.1 - o.1).abs() <= 0.1,
            "{who}: {}: perf {}%, perfring {}%",
            p.0,
            p.1,
            o.1
        );
    }
    // The ten are the program's.
    assert!(
        ours[..10].iter().all(|(k, _)| k.starts_with("[.] work_")),
        "{ours:?}"
    );
    if can_drop_privileges() {
        // An ordinary user reading a copy it may read gets the same table.
        let copy = dir.join(format!("{file}.shared"));
        std::fs::copy(dir.join(file), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = perfring_nobody(
            dir,
            &[
                "report",
                "-i",
                copy.to_str().unwrap(),
                "--no-children",
                "--sort",
                "symbol",
            ],
        );
        ok(&out, "perfring report as nobody");
        let theirs = table_rows(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(theirs[..10], ours[..10], "{who}: as nobody");
    }
}

#[test]
fn report_prints_perf_report_s_top_ten_for_perf_s_and_perfring_s_files() {
    let dir = shared_scratch("report");
    let prog = util::compile_c("twelve", &twelve_c(), &["-fno-omit-frame-pointer"]);
    let prog = prog.to_str().unwrap();
    let out = perf(
        &dir,
        &[
            "record",
            "-q",
            "-g",
            "-e",
            "cpu-clock",
            "-F",
            "4000",
            "-o",
            "perf.data",
            prog,
            "40",
        ],
    );
    ok(&out, "perf record -g");
    check_against_perf(&dir, "perf.data", "perf record -g");

    let out = perfring(&dir, &["record", "-g", "-o", "mine.data", prog, "40"]);
    ok(&out, "perfring record -g");
    check_against_perf(&dir, "mine.data", "perfring record -g");

    // The children column: main holds every sample of the work.
    let out = perfring(&dir, &["report", "-i", "mine.data", "--sort", "sym"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("# Children      Self  Symbol"), "{text}");
    let main = text
        .lines()
        .find(|l| l.ends_with("[.] main"))
        .expect("main in the children table");
    let children: f64 = main.split('%').next().unwrap().trim().parse().unwrap();
    assert!(children > 90.0, "{main}");

    // --sort comm and dso.
    let out = perfring(
        &dir,
        &[
            "report",
            "-i",
            "perf.data",
            "--sort",
            "comm",
            "--no-children",
        ],
    );
    let rows = table_rows(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows[0].0, "twelve", "{rows:?}");
    let out = perfring(
        &dir,
        &[
            "report",
            "-i",
            "perf.data",
            "--sort",
            "dso",
            "--no-children",
        ],
    );
    let rows = table_rows(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows[0].0, "twelve", "{rows:?}");
    assert!(rows[0].1 > 90.0, "{rows:?}");
}

#[test]
fn report_on_a_cut_file_says_how_far_it_read_and_a_wrong_one_where_it_is_wrong() {
    let dir = shared_scratch("report-cut");
    let prog = util::compile_c("twelve", &twelve_c(), &["-fno-omit-frame-pointer"]);
    let out = perfring(
        &dir,
        &[
            "record",
            "-g",
            "-o",
            "whole.data",
            prog.to_str().unwrap(),
            "8",
        ],
    );
    ok(&out, "perfring record");
    let whole = std::fs::read(dir.join("whole.data")).unwrap();
    // The data section: offset and size at 0x28 and 0x30 of the header.
    let word = |at: usize| u64::from_ne_bytes(whole[at..at + 8].try_into().unwrap()) as usize;
    let (data, size) = (word(0x28), word(0x30));
    let cut = data + size / 2 + 3; // mid-record, most likely
    std::fs::write(dir.join("cut.data"), &whole[..cut]).unwrap();
    let out = perfring(&dir, &["report", "-i", "cut.data", "--no-children"]);
    let err = ok(&out, "perfring report on a cut file");
    assert!(err.contains("truncated"), "{err}");
    let read_to = err
        .split("up to offset 0x")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|h| usize::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| panic!("no offset in: {err}"));
    assert!(
        read_to > data && read_to <= cut && cut - read_to < 4096,
        "{read_to:#x} of {cut:#x}: {err}"
    );
    assert!(err.contains("records"), "{err}");
    // What it read is printed.
    let rows = table_rows(&String::from_utf8_lossy(&out.stdout));
    assert!(
        rows.iter().any(|(k, _)| k.starts_with("[.] work_")),
        "{rows:?}"
    );

    // Not a perf.data: the offset and what was expected.
    std::fs::write(dir.join("not.data"), b"hello, this is not a profile").unwrap();
    let out = perfring(&dir, &["report", "-i", "not.data"]);
    assert_eq!(out.status.code(), Some(1));
    let err = util::stderr(&out);
    assert!(
        err.contains("at offset 0x0") && err.contains("PERFILE2"),
        "{err}"
    );
    // A header cut short: where the attrs were expected.
    std::fs::write(dir.join("short.data"), &whole[..200.min(data)]).unwrap();
    let out = perfring(&dir, &["report", "-i", "short.data"]);
    assert_eq!(out.status.code(), Some(1));
    let err = util::stderr(&out);
    assert!(
        err.contains("at offset 0x") && err.contains("expected"),
        "{err}"
    );
}

/// `waiter` sleeps 30 ms and `spinner` computes 30 ms of CPU time, ten rounds each.
/// `waiter` sleeps 30 ms and `spinner` computes 30 ms of CPU time, ten rounds each;
/// at the end the program prints the wall time its waits took and the CPU time its
/// spins took, in ns: what a wall-clock profile must find (a loaded host wakes a
/// sleeper late, and that wait is the program's too).
const WAIT_SPIN_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static volatile long sink;
static long waited, spun;
static long ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
/* Blocks 30 ms in one system call: a frame-pointer stack keeps this caller
 * (glibc's nanosleep goes through a second frameless wrapper). */
__attribute__((noinline)) void waiter(void) {
    struct timespec t = {0, 30000000};
    long start = ns(CLOCK_MONOTONIC);
    syscall(SYS_nanosleep, &t, 0);
    waited += ns(CLOCK_MONOTONIC) - start;
}
/* Runs 30 ms of this thread's CPU time. */
__attribute__((noinline)) void spinner(void) {
    long start = ns(CLOCK_THREAD_CPUTIME_ID), end = start + 30000000L, now;
    while ((now = ns(CLOCK_THREAD_CPUTIME_ID)) < end)
        for (int i = 0; i < 20000; i++) sink += i;
    spun += now - start;
}
int main(void) {
    for (int i = 0; i < 10; i++) { waiter(); spinner(); }
    printf("%ld %ld\n", waited, spun);
    return 0;
}
"#;

/// The share of the program's time its waits took, in percent, from what it printed.
fn measured_wait_share(out: &Output) -> f64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = text.split_whitespace().map(|w| w.parse::<f64>().unwrap());
    let (waited, spun) = (n.next().expect("waited"), n.next().expect("spun"));
    // The waits are at least the 300 ms asked for; the spins 300 ms of CPU time.
    assert!(waited >= 3e8 && spun >= 3e8, "{text}");
    100.0 * waited / (waited + spun)
}

/// A wall-clock profile's shares against the program's own: each within 5 points.
/// On a quiet host the program measures 50 % each, the issue's figure.
fn check_wall(out: &Output, folded: &Path, who: &str) {
    let truth = measured_wait_share(out);
    let (waiter, spinner, text) = folded_shares(folded);
    assert!(
        (waiter - truth).abs() <= 5.0 && (spinner - (100.0 - truth)).abs() <= 5.0,
        "{who}: waiter {waiter:.1}% and spinner {spinner:.1}%, the program measured {truth:.1}% waiting:\n{text}"
    );
    eprintln!("{who}: waiter {waiter:.1}%, spinner {spinner:.1}%; the program measured {truth:.1}% waiting");
}

/// Shares of the folded stacks that pass through `waiter` and `spinner`, in percent.
fn folded_shares(path: &Path) -> (f64, f64, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let (mut w, mut s, mut total) = (0u64, 0u64, 0u64);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("stack weight");
        let n: u64 = n.parse().expect("a weight");
        total += n;
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.contains(&"waiter") {
            w += n;
        }
        if frames.contains(&"spinner") {
            s += n;
        }
    }
    assert!(total > 0, "no stacks in {}", path.display());
    let pct = |x: u64| 100.0 * x as f64 / total as f64;
    (pct(w), pct(s), text)
}

#[test]
fn off_cpu_and_wall_clock_profiles_weigh_waiting_by_time() {
    let dir = shared_scratch("offcpu");
    let prog = util::compile_c("waitspin", WAIT_SPIN_C, &[]);
    let prog = prog.to_str().unwrap();
    // Wall clock: on-CPU time and off-CPU time, both in ns.
    let out = perfring(
        &dir,
        &[
            "record",
            "--off-cpu",
            "--format",
            "folded",
            "-o",
            "wall.folded",
            prog,
        ],
    );
    ok(&out, "perfring record --off-cpu");
    check_wall(&out, &dir.join("wall.folded"), "record --off-cpu");
    let text = std::fs::read_to_string(dir.join("wall.folded")).unwrap();
    // The waits are marked, and end where the thread blocked.
    assert!(
        text.lines()
            .any(|l| l.contains(";waiter;") && l.split(' ').next().unwrap().ends_with(";[off-cpu]")),
        "{text}"
    );
    // On-CPU only: the spinner's.
    let out = perfring(
        &dir,
        &[
            "record",
            "-g",
            "--format",
            "folded",
            "-o",
            "cpu.folded",
            prog,
        ],
    );
    ok(&out, "perfring record -g");
    let (waiter, spinner, text) = folded_shares(&dir.join("cpu.folded"));
    assert!(
        spinner >= 95.0,
        "spinner {spinner:.1}%, waiter {waiter:.1}%:\n{text}"
    );
    assert!(!text.contains("[off-cpu]"));

    // pprof: the waits as a sample type of their own, in ns, under an [off-cpu] frame.
    let out = perfring(
        &dir,
        &[
            "record",
            "--off-cpu",
            "--format",
            "pprof",
            "-o",
            "wall.pb.gz",
            prog,
        ],
    );
    ok(&out, "perfring record --off-cpu --format pprof");
    let top = util::capture::pprof(
        &dir,
        &[
            "-top",
            "-sample_index=off_cpu",
            "-nodefraction=0",
            "wall.pb.gz",
        ],
    );
    let top = String::from_utf8_lossy(&top.stdout);
    let row = |name: &str| {
        top.lines()
            .find(|l| l.trim_end().ends_with(&format!(" {name}")))
    };
    let cum = |l: &str| l.split_whitespace().nth(4).unwrap_or("").to_string();
    let (marker, waiter) = (row("[off-cpu]").expect(&top), row("waiter").expect(&top));
    let pct = |s: String| s.trim_end_matches('%').parse::<f64>().unwrap_or(0.0);
    // Every wait ends in the marker; the program's waits (nearly all) are waiter's.
    assert!(
        pct(cum(marker)) == 100.0 && pct(cum(waiter)) >= 95.0,
        "{top}"
    );

    // The same report from perf.data: the switch records travel with the samples.
    let recorded = perfring(&dir, &["record", "--off-cpu", "-o", "wall.data", prog]);
    ok(&recorded, "perfring record --off-cpu -o perf.data");
    // perf reads it too: every switch-out sampled, the ten sleeps among them.
    let out = perf(&dir, &["script", "-i", "wall.data", "-F", "event,sym"]);
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "perf script: {}", util::stderr(&out));
    let switches = script.matches("context-switches").count();
    assert!(switches >= 10, "{switches} context-switches samples");
    let out = perfring(
        &dir,
        &[
            "report",
            "-i",
            "wall.data",
            "--format",
            "folded",
            "-o",
            "replayed.folded",
        ],
    );
    ok(&out, "perfring report --format folded");
    check_wall(
        &recorded,
        &dir.join("replayed.folded"),
        "report of perf.data",
    );

    if can_drop_privileges() {
        let out = perfring_nobody(
            &dir,
            &[
                "record",
                "--off-cpu",
                "--format",
                "folded",
                "-o",
                "nobody.folded",
                prog,
            ],
        );
        if paranoid() >= 2 {
            // The switch is in the kernel, which this user may not sample: said, with
            // the fix, before the program runs.
            assert_eq!(out.status.code(), Some(1), "{}", util::stderr(&out));
            let err = util::stderr(&out);
            assert!(
                err.contains("perf_event_paranoid") && err.contains("CAP_PERFMON"),
                "{err}"
            );
            assert!(
                !dir.join("nobody.folded").exists(),
                "a file made for nothing"
            );
        } else {
            ok(&out, "perfring record --off-cpu as nobody");
            check_wall(&out, &dir.join("nobody.folded"), "nobody");
        }
        // On-CPU as nobody (user space only at paranoid 2).
        let event = if paranoid() >= 2 {
            "cpu-clock:u"
        } else {
            "cpu-clock"
        };
        let out = perfring_nobody(
            &dir,
            &[
                "record",
                "-e",
                event,
                "-g",
                "--format",
                "folded",
                "-o",
                "nobody-cpu.folded",
                prog,
            ],
        );
        ok(&out, "perfring record -g as nobody");
        let (_, spinner, text) = folded_shares(&dir.join("nobody-cpu.folded"));
        assert!(spinner >= 95.0, "{text}");
    }
}

#[test]
fn record_shows_a_status_line_on_a_terminal_only() {
    let dir = shared_scratch("status");
    // stderr a pipe: the summary, no status line.
    let out = perfring(&dir, &["record", "-o", "quiet.data", "sleep", "0.3"]);
    let err = ok(&out, "perfring record");
    assert!(!err.contains('\r') && !err.contains("\x1b["), "{err:?}");
    // stderr a terminal (script(1) gives the command one).
    let line = format!("{} record -o tty.data sleep 0.6", bin());
    let out = Command::new("script")
        .args(["-qefc", &line, "/dev/null"])
        .current_dir(&dir)
        .output()
        .expect("run script (util-linux)");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{seen}");
    assert!(
        seen.contains("\r\x1b[K[")
            && seen.contains(" samples, ")
            && seen.contains(" lost, ")
            && seen.contains("KiB written]"),
        "{seen:?}"
    );
    // Cleared before the summary.
    let summary = seen.rfind("perfring: ").expect("the summary");
    assert!(seen[..summary].ends_with("\r\x1b[K"), "{seen:?}");
}
