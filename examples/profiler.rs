//! A profiler in a page: samples a command's CPU time with stacks, writes a pprof
//! profile and a perf.data, and prints the ten functions most samples were in, each
//! with the caller most of them came from — named by the library's symbolizer, on the
//! library's writer thread.
//!
//! ```sh
//! cargo run --release --example profiler -- ls -lR /usr/share/doc
//! go tool pprof -top profile.pb.gz; perf report -i perf.data
//! ```

use std::collections::HashMap;
use std::time::Duration;

use perfring::output::{Output, PerfData, Pprof, SampleRef};
use perfring::profiler::{End, Flow, Profiler, Rate};
use perfring::unwind::CallGraph;

/// Counts, for each leaf function, its samples and its callers' (an embedder's own
/// output, beside the library's).
#[derive(Default)]
struct Hotspots {
    leaves: HashMap<String, (u64, HashMap<String, u64>)>,
    report: Option<std::sync::mpsc::Sender<Vec<(String, u64, String)>>>,
}

impl Output for Hotspots {
    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> perfring::Result<()> {
        // Functions, not the inlined ones: the innermost, and its caller.
        let mut functions = s.frames.iter().filter(|f| !f.inlined);
        let name = |f: Option<&perfring::symbolize::Frame>| {
            f.and_then(|f| f.sym.clone())
                .unwrap_or_else(|| "[unknown]".into())
        };
        let (leaf, caller) = (name(functions.next()), name(functions.next()));
        let entry = self.leaves.entry(leaf).or_default();
        entry.0 += 1;
        *entry.1.entry(caller).or_default() += 1;
        Ok(())
    }

    fn finish(&mut self) -> perfring::Result<()> {
        let mut top: Vec<(String, u64, String)> = self
            .leaves
            .drain()
            .map(|(leaf, (n, callers))| {
                let caller = callers.into_iter().max_by_key(|c| c.1).unwrap_or_default();
                (leaf, n, caller.0)
            })
            .collect();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        if let Some(tx) = self.report.take() {
            let _ = tx.send(top);
        }
        Ok(())
    }
}

fn main() -> perfring::Result<()> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let Some(target) = perfring::profiler::command(&argv) else {
        eprintln!("usage: profiler COMMAND [ARGS...]");
        std::process::exit(2);
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let mut profiler = Profiler::builder(target)
        .event("cpu-clock")
        .rate(Rate::Frequency(999))
        .call_graph(CallGraph::Fp)
        .output(Pprof::create("profile.pb.gz")?)
        .output(PerfData::open("perf.data")?)
        .output(Hotspots {
            report: Some(tx),
            ..Hotspots::default()
        })
        .start()?;
    while profiler.target_ended()?.is_none() {
        profiler.poll(Some(Duration::from_millis(100)), |_| Flow::Continue)?;
    }
    let report = profiler.finish(End::TargetExited)?;
    println!("{} samples, {} lost", report.samples, report.lost());
    for (leaf, n, caller) in rx.recv().unwrap_or_default().into_iter().take(10) {
        let share = 100.0 * n as f64 / report.samples.max(1) as f64;
        println!("{share:6.2}%  {leaf}  (mostly from {caller})");
    }
    Ok(())
}
