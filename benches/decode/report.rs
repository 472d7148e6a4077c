//! The end-of-run table: every decoder's time as a ratio to perfring's, all from one
//! run of one binary (so under one profile), and the goals of issue 25.

use std::path::PathBuf;
use std::time::SystemTime;

/// The decoders, in the table's order; `perfring` first (the denominator).
pub const DECODERS: [&str; 7] = [
    "perfring",
    "unchecked",
    "offset_table",
    "linux-perf-event-reader",
    "perf-event-data",
    "header_walk",
    "mem_scan",
];

/// One column: a stream (size and `sample_id_all` mode) and each decoder's time in
/// seconds.
pub struct Column {
    pub label: String,
    pub window: bool,
    pub secs: Vec<(&'static str, f64)>,
}

impl Column {
    fn t(&self, name: &str) -> Option<f64> {
        self.secs.iter().find(|(n, _)| *n == name).map(|&(_, s)| s)
    }
}

/// The directory the bench binary was built in (`target/<profile>`): which profile
/// the figures are for. A named profile has a directory of its own; `bench` shares
/// `release`'s.
pub fn profile_dir() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let dir = exe.parent()?.parent()?;
            Some(format!(
                "{}/{}",
                dir.parent()?.file_name()?.to_string_lossy(),
                dir.file_name()?.to_string_lossy()
            ))
        })
        .unwrap_or_else(|| "?".into())
}

/// Median time (seconds) of a criterion benchmark, from the estimate it saved in this
/// run (written after `since`; a filtered-out benchmark's old estimate is not used).
pub fn median_secs(group: &str, function: &str, since: SystemTime) -> Option<f64> {
    let dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = dir
        .join("criterion")
        .join(group.replace('/', "_"))
        .join(function)
        .join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64().map(|ns| ns * 1e-9)
}

/// Prints the table: perfring's time, every decoder's time over perfring's, and the
/// goals (each a ratio, `-` where it does not apply).
pub fn print(what: &str, columns: &[Column]) {
    if columns.is_empty() {
        return;
    }
    eprintln!(
        "\n{what}, binary in {}: time of X / time of perfring, one run",
        profile_dir()
    );
    let row = |name: &str, cells: Vec<String>| {
        let mut line = format!("  {name:<34}");
        for c in cells {
            line.push_str(&format!("{c:>13}"));
        }
        eprintln!("{line}");
    };
    row("", columns.iter().map(|c| c.label.clone()).collect());
    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
    row(
        "perfring (us)",
        columns
            .iter()
            .map(|c| fmt(c.t("perfring").map(|s| s * 1e6)))
            .collect(),
    );
    for name in &DECODERS[1..] {
        row(
            name,
            columns
                .iter()
                .map(|c| fmt(c.t(name).zip(c.t("perfring")).map(|(x, p)| x / p)))
                .collect(),
        );
    }
    eprintln!("  goals (issue 25):");
    row(
        "perfring/unchecked <= 0.90",
        columns
            .iter()
            .map(|c| fmt(c.t("perfring").zip(c.t("unchecked")).map(|(p, u)| p / u)))
            .collect(),
    );
    row(
        "perfring/header_walk <= 2 (window)",
        columns
            .iter()
            .map(|c| {
                let r = c.t("perfring").zip(c.t("header_walk")).map(|(p, h)| p / h);
                fmt(r.filter(|_| c.window))
            })
            .collect(),
    );
    row(
        "mem_scan/perfring >= 0.70 (64 MiB)",
        columns
            .iter()
            .map(|c| {
                let r = c.t("mem_scan").zip(c.t("perfring")).map(|(m, p)| m / p);
                fmt(r.filter(|_| !c.window))
            })
            .collect(),
    );
}
