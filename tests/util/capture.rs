//! A small live capture for the output tests, made directly with `Counter`, `Ring` and
//! `Poller`: a command started stopped, one inherited counter per event whose records
//! go to an anchor ring, every record pushed to a `Streamer`.

use std::path::Path;
use std::time::Duration;

use perfring::launch;
use perfring::notify::{Poller, Token};
use perfring::output::{EventInfo, Output, Recording, SampleRef};
use perfring::pipeline::Pipeline;
use perfring::resolve::{resolve_event, TargetImage};
use perfring::ring::{Ring, RingSize};
use perfring::stream::{Sink, StreamStats, Streamer};
use perfring::{Builder, Counter, SampleType, Scope};

/// What to record.
pub struct Spec<'a> {
    /// Event strings (`mem:target:x` is resolved in the program).
    pub events: &'a [&'a str],
    /// `-c`.
    pub period: u64,
    /// Also record call chains.
    pub callchain: bool,
}

/// What the capture saw, besides the sink.
#[derive(Debug)]
pub struct Captured {
    /// The events, with attrs and ids.
    pub events: Vec<EventInfo>,
    /// The streamer's counts.
    pub stats: StreamStats,
    /// Samples per event, counted in the drain callback.
    pub samples: Vec<u64>,
    /// Loss reported by the rings.
    pub ring_lost: u64,
}

/// The sample type every output test records (no `PERIOD`: with a fixed period the
/// kernel would then take a sample per event on software and breakpoint counters).
pub fn sample_type(callchain: bool) -> SampleType {
    let st = SampleType::IDENTIFIER | SampleType::IP | SampleType::TID | SampleType::TIME;
    if callchain {
        st | SampleType::CALLCHAIN
    } else {
        st
    }
}

/// Runs `program args` to completion under `spec`, streaming every record into the
/// sink `make_sink` builds from the event descriptions.
pub fn record<S: Sink>(
    program: &Path,
    args: &[&str],
    spec: &Spec<'_>,
    make_sink: impl FnOnce(&[EventInfo]) -> S,
) -> (S, Captured) {
    let image = TargetImage::Spawned(program.to_path_buf());
    let stopped = launch::Command::new(program)
        .args(args)
        .no_aslr(true)
        .spawn_stopped()
        .expect("spawn");
    let target = Scope::Thread(stopped.pid());
    let mut poller = Poller::new().unwrap();
    let mut events = Vec::new();
    let mut keep = Vec::new();
    for (i, e) in spec.events.iter().enumerate() {
        let event = resolve_event(e, &image).expect("resolve event");
        let b: Builder = Counter::builder_for(event)
            .target(target)
            .period(spec.period)
            .sample(sample_type(spec.callchain))
            .sample_id_all(true)
            .track_tasks(i == 0)
            .inherit(true)
            .enable_on_exec(true)
            .wakeup_events(1);
        let counter = b.open().expect("open counter");
        let id = counter.id().expect("counter id");
        events.push(EventInfo::new(*e, *counter.attr(), vec![id]).expect("describe event"));
        let (anchor, ring) = Ring::map_inherited(&counter, RingSize::Pages(256)).unwrap();
        keep.push(counter);
        poller.register(Token(i as u64), anchor, ring).unwrap();
    }
    let sink = make_sink(&events);
    let mut stream = Streamer::spawn(sink, Default::default()).unwrap();
    let mut samples = vec![0u64; events.len()];
    let mut child = stopped.start().expect("start");
    let mut notes = Vec::new();
    let push = |samples: &mut Vec<u64>, stream: &mut Streamer<S>, t: usize, b: &[u8]| {
        if u32::from_ne_bytes(b[..4].try_into().unwrap()) == perfring::sys::PERF_RECORD_SAMPLE {
            samples[t] += 1;
        }
        stream.push(t, b).unwrap();
    };
    loop {
        poller
            .poll_and_drain(&mut notes, Some(Duration::from_millis(20)), |token, raw| {
                push(&mut samples, &mut stream, token.0 as usize, raw.bytes())
            })
            .unwrap();
        stream.end_round().unwrap();
        if child.try_wait().unwrap().is_some() {
            break;
        }
    }
    // What the kernel wrote before the exit.
    for t in 0..events.len() {
        poller.drain(Token(t as u64), |_, raw| {
            push(&mut samples, &mut stream, t, raw.bytes())
        });
    }
    stream.end_round().unwrap();
    let ring_lost = (0..events.len())
        .map(|t| poller.accounting(Token(t as u64)).unwrap().lost)
        .sum();
    drop(keep);
    let (sink, stats) = stream.finish().expect("finish the file");
    (
        sink,
        Captured {
            events,
            stats,
            samples,
            ring_lost,
        },
    )
}

/// As [`record`], with the records going through a [`Pipeline`] (unwound and named) to
/// the output `make_output` builds.
pub fn record_to<O: Output + 'static>(
    program: &Path,
    args: &[&str],
    spec: &Spec<'_>,
    make_output: impl FnOnce(&[EventInfo]) -> O,
) -> Captured {
    let (_, cap) = record(program, args, spec, |ev| {
        Pipeline::new(ev, None)
            .expect("a pipeline")
            .output(make_output(ev))
    });
    cap
}

/// An output shared with the test, to look at after the recording.
pub struct Shared<O>(pub std::sync::Arc<std::sync::Mutex<O>>);

impl<O> Shared<O> {
    /// Wraps `o`; keep a clone of the `Arc` to look at it afterwards.
    pub fn new(o: O) -> (Shared<O>, std::sync::Arc<std::sync::Mutex<O>>) {
        let a = std::sync::Arc::new(std::sync::Mutex::new(o));
        (Shared(a.clone()), a)
    }
}

impl<O: Output> Output for Shared<O> {
    fn start(&mut self, r: &Recording<'_>) -> perfring::Result<()> {
        self.0.lock().unwrap().start(r)
    }
    fn wants_names(&self) -> bool {
        self.0.lock().unwrap().wants_names()
    }
    fn wants_user_stacks(&self) -> bool {
        self.0.lock().unwrap().wants_user_stacks()
    }
    fn sample(&mut self, s: &SampleRef<'_>) -> perfring::Result<()> {
        self.0.lock().unwrap().sample(s)
    }
    fn record(
        &mut self,
        event: Option<usize>,
        r: &perfring::records::Record<'_>,
        b: &[u8],
    ) -> perfring::Result<()> {
        self.0.lock().unwrap().record(event, r, b)
    }
    fn lost(&mut self, n: u64) -> perfring::Result<()> {
        self.0.lock().unwrap().lost(n)
    }
    fn end_round(&mut self) -> perfring::Result<()> {
        self.0.lock().unwrap().end_round()
    }
    fn finish(&mut self) -> perfring::Result<()> {
        self.0.lock().unwrap().finish()
    }
}

/// A test C program: `NTHREADS` threads, each spinning in its own function for a
/// share of the work (`w1` most, `w5` least), and `hot()` called `argv[1]` times.
pub const THREADS_C: &str = r#"
#include <pthread.h>
#include <stdlib.h>
volatile unsigned long sink;
void __attribute__((noinline)) hot(void) { sink++; }
#define SPIN(name) void __attribute__((noinline)) name(unsigned long n) { \
    for (unsigned long i = 0; i < n; i++) sink += i * i; }
SPIN(w1) SPIN(w2) SPIN(w3) SPIN(w4) SPIN(w5)
static unsigned long scale;
static void *run(void *arg) {
    long k = (long)arg;
    void (*f[])(unsigned long) = { w1, w2, w3, w4, w5 };
    unsigned long share[] = { 16, 8, 4, 2, 1 };
    f[k](share[k] * scale);
    return 0;
}
int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 10000;
    scale = argc > 2 ? strtoul(argv[2], 0, 10) : 0;
    for (long i = 0; i < calls; i++) hot();
    pthread_t t[5];
    for (long k = 0; k < 5 && scale; k++) pthread_create(&t[k], 0, run, (void *)k);
    for (long k = 0; k < 5 && scale; k++) pthread_join(t[k], 0);
    return 0;
}
"#;

/// Compiles [`THREADS_C`] once per test binary.
pub fn threads_program() -> std::path::PathBuf {
    use std::sync::OnceLock;
    static BUILT: OnceLock<std::path::PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("threads-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("threads.c");
            std::fs::write(&src, THREADS_C).unwrap();
            let out = dir.join("threads");
            let st = std::process::Command::new("cc")
                // -O0: every function keeps its frame, so frame-pointer call
                // chains name each caller (GCC 12 drops leaf frames at -O1).
                .args(["-O0", "-fno-omit-frame-pointer", "-g0", "-pthread"])
                .arg("-o")
                .arg(&out)
                .arg(&src)
                .status()
                .expect("run cc");
            assert!(st.success(), "cc failed");
            out
        })
        .clone()
}

/// A scratch directory for one test's files, under the target's tmp dir.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("out-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `perf` with a private HOME (no user config, no build-id cache) and its output.
pub fn perf(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("perf")
        .args(args)
        .env("HOME", dir)
        .env("PERF_CONFIG", "/dev/null")
        .env("PERF_BUILDID_DIR", dir.join("buildid"))
        .env_remove("PERF_EXEC_PATH")
        .current_dir(dir)
        .output()
        .expect("run perf (install linux-perf)")
}

/// `go tool pprof ARGS` in `dir`, with a private HOME and no symbolization of its own
/// (the names must come from the profile).
pub fn pprof(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .env("HOME", dir)
        .env("PPROF_TMPDIR", dir)
        .env("PPROF_BINARY_PATH", dir.join("no-binaries"))
        .env("GOFLAGS", "")
        .current_dir(dir)
        .output()
        .expect("run go tool pprof (install golang-go)")
}

/// `go tool pprof -top` of every function: (function, flat samples), most first.
pub fn pprof_top(dir: &Path, file: &str) -> Vec<(String, u64)> {
    let out = pprof(
        dir,
        &[
            "-top",
            "-nodecount=1000",
            "-nodefraction=0",
            "-edgefraction=0",
            file,
        ],
    );
    assert!(
        out.status.success(),
        "pprof failed: {}",
        super::stderr(&out)
    );
    // "     100   100%   100%        100   100%  hot"
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[1].ends_with('%'))
                .then(|| Some((f[5..].join(" "), f[0].parse().ok()?)))
                .flatten()
        })
        .collect()
}

/// `perf report -n --sort sym`: (symbol, self samples), most first; fails on any
/// warning of perf's.
pub fn perf_report_sym(dir: &Path, file: &str) -> Vec<(String, u64)> {
    // -f: a file written by another user (the unprivileged tests') is read too.
    let args = [
        "report",
        "-f",
        "-i",
        file,
        "--stdio",
        "-n",
        "--no-children",
        "--sort",
        "sym",
        "-q",
        "-g",
        "none",
    ];
    let out = perf(dir, &args);
    let err = super::stderr(&out);
    assert!(
        out.status.success(),
        "perf report failed ({}): {err}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !err.to_lowercase().contains("warning"),
        "perf report warned: {err}"
    );
    // "    40.00%          4000  [.] w1"
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[0].ends_with('%'))
                .then(|| Some((f[3..].join(" "), f[1].parse().ok()?)))
                .flatten()
        })
        .collect()
}
