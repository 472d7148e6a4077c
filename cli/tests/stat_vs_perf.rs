//! `perfring stat` against `perf stat` on the same command: the same rows, columns and
//! units, byte positions included, in the table, with `-I` and with `-r`; the same CSV
//! and JSON fields; and the same values, each within the run-to-run spread the test
//! measures for both tools (runs interleaved, so load hits both alike).

use std::process::{Command, Output};

/// A command with some CPU work and a few page faults, the same for both tools.
const WORK: &[&str] = &[
    "sh",
    "-c",
    "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done",
];

/// The software events every Linux machine counts.
const EVENTS: &str =
    "task-clock,context-switches,cpu-migrations,page-faults,minor-faults,major-faults";

/// Runs of each tool for the spread.
const RUNS: usize = 7;

fn run(tool: &str, args: &[&str]) -> Output {
    let (program, sub) = match tool {
        "perf" => ("perf".to_string(), "stat"),
        _ => (env!("CARGO_BIN_EXE_perfring").to_string(), "stat"),
    };
    let out = Command::new(&program)
        .arg(sub)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("run {program}: {e} (perf comes with linux-perf: bash scripts/setup.sh)")
        });
    assert!(
        out.status.success(),
        "{tool} stat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn report(tool: &str, args: &[&str]) -> String {
    String::from_utf8(run(tool, args).stderr).unwrap()
}

fn with_work<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.push("--");
    all.extend_from_slice(WORK);
    all
}

/// A rate's unit without its data-dependent prefix (`K/sec` is `/sec` above 1000).
fn rate_unit(word: &str) -> &str {
    match word.strip_suffix("/sec") {
        Some("K" | "M" | "G" | "") => "/sec",
        _ => word,
    }
}

/// Whether `word` is a number as perf prints them (`1.07`, `5.60%`, `+-`-less).
fn numeric_word(word: &str) -> bool {
    word.chars().any(|c| c.is_ascii_digit())
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || ".%+-,".contains(c))
}

/// A line's shape: numbers replaced by `N` with where they end (perf right-aligns
/// them in fixed columns), words with where they start (left-aligned).
fn shape(line: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices().chain([(line.len(), ' ')]) {
        match (c == ' ', start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                let word = &line[s..i];
                let numeric = numeric_word(word);
                // `( +-%6.2f%% )`: a spread of 100% or more runs into its `+-`.
                if let Some(rest) = word.strip_prefix("+-").filter(|r| !r.is_empty()) {
                    out.push(("+-".into(), s));
                    out.push((
                        if numeric_word(rest) {
                            "N".into()
                        } else {
                            rest.into()
                        },
                        i,
                    ));
                } else {
                    out.push(if numeric {
                        ("N".into(), i)
                    } else {
                        (rate_unit(word).into(), s)
                    });
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

fn assert_same_layout(what: &str, perf: &str, ours: &str) {
    let (p, o): (Vec<&str>, Vec<&str>) = (perf.lines().collect(), ours.lines().collect());
    assert_eq!(
        p.len(),
        o.len(),
        "{what}: line counts\nperf:\n{perf}\nperfring:\n{ours}"
    );
    for (lp, lo) in p.iter().zip(&o) {
        // `( +- x% )` is printed when the runs differed at all (data, not layout):
        // where one tool's runs happened to agree, compare the rest of the line.
        let noise = |l: &&str| l.find("  ( +-");
        let (lp, lo) = match (noise(lp), noise(lo)) {
            (Some(a), None) => (&lp[..a], *lo),
            (None, Some(b)) => (*lp, &lo[..b]),
            _ => (*lp, *lo),
        };
        if lp.contains(" +- ") && lp.contains("seconds time elapsed") {
            // -r's elapsed time has as many digits as its spread needs (data, not
            // layout): its words only.
            let words = |l: &str| shape(l).into_iter().map(|(w, _)| w).collect::<Vec<_>>();
            assert_eq!(words(lp), words(lo), "{what}:\n{lp:?}\n{lo:?}");
            continue;
        }
        assert_eq!(
            shape(lp),
            shape(lo),
            "{what}:\nperf:     {lp:?}\nperfring: {lo:?}\n\nperf:\n{perf}\nperfring:\n{ours}"
        );
        assert_eq!(lp.len(), lo.len(), "{what}: line length\n{lp:?}\n{lo:?}");
    }
}

/// perf stat's default table (the hardware rows included), then `-I` and `-r`.
#[test]
fn the_table_has_perfs_rows_columns_and_units() {
    let args = with_work(&[]);
    assert_same_layout(
        "default events",
        &report("perf", &args),
        &report("perfring", &args),
    );
    let args = with_work(&["-e", EVENTS, "-r", "3"]);
    assert_same_layout("-r 3", &report("perf", &args), &report("perfring", &args));
    // Intervals: the header, and a first interval that ends before the command does.
    let args = [
        "-I",
        "100",
        "-e",
        "task-clock,page-faults,cycles",
        "--",
        "sleep",
        "0.15",
    ];
    let first = |text: String| text.lines().take(4).collect::<Vec<_>>().join("\n");
    assert_same_layout(
        "-I 100",
        &first(report("perf", &args)),
        &first(report("perfring", &args)),
    );
}

#[test]
fn csv_and_json_have_perfs_fields() {
    let args = with_work(&["-x", ",", "-e", EVENTS]);
    let (p, o) = (report("perf", &args), report("perfring", &args));
    let columns = |text: &str| -> Vec<(usize, String, String, String)> {
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f.len(), f[1].into(), f[2].into(), rate_unit(f[6]).into())
            })
            .collect()
    };
    assert_eq!(columns(&p), columns(&o), "perf:\n{p}\nperfring:\n{o}");
    let args = with_work(&["--json", "-e", EVENTS]);
    let (p, o) = (report("perf", &args), report("perfring", &args));
    let keys = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let o = v.as_object().unwrap();
                let mut k: Vec<String> = o.keys().cloned().collect();
                k.push(o["event"].to_string());
                k.push(o["unit"].to_string());
                k.push(rate_unit(o["metric-unit"].as_str().unwrap()).to_string());
                k
            })
            .collect()
    };
    assert_eq!(keys(&p), keys(&o), "perf:\n{p}\nperfring:\n{o}");
}

/// Each event's values from `-x,` runs of both tools, interleaved.
fn values(runs: usize) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let args = with_work(&["-x", ",", "-e", EVENTS]);
    let parse = |text: String| -> Vec<f64> {
        text.lines()
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect()
    };
    let (mut perf, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        perf.push(parse(report("perf", &args)));
        ours.push(parse(report("perfring", &args)));
    }
    (perf, ours)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    max - min
}

/// The same command counted by both: each event's median differs by no more than the
/// larger of the two tools' run-to-run spreads.
#[test]
fn values_agree_with_perf_within_the_run_to_run_spread() {
    let (perf, ours) = values(RUNS);
    let names: Vec<&str> = EVENTS.split(',').collect();
    let mut table = String::new();
    for (i, name) in names.iter().enumerate() {
        let p: Vec<f64> = perf.iter().map(|r| r[i]).collect();
        let o: Vec<f64> = ours.iter().map(|r| r[i]).collect();
        let (mp, mo) = (median(p.clone()), median(o.clone()));
        let allowed = spread(&p).max(spread(&o));
        table += &format!(
            "{name}: perf {p:?} (median {mp}), perfring {o:?} (median {mo}), allowed {allowed}\n"
        );
        assert!(
            (mp - mo).abs() <= allowed + 1e-9,
            "{name} differs by more than the spread:\n{table}"
        );
    }
    // Not all trivially equal: the work did fault pages and take time in both.
    let faults = names.iter().position(|n| *n == "page-faults").unwrap();
    assert!(
        ours.iter().all(|r| r[faults] > 10.0 && r[0] > 0.1),
        "{table}"
    );
    eprintln!("{table}");
}
