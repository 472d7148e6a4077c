//! The README's "For perf users" table, run: every perf command of its first column
//! and every perfring command of its second, each in a shell in one scratch directory
//! (in the table's order: later rows read the perf.data earlier ones wrote), must
//! succeed; a row without a perfring command must say what there is instead.
#![cfg(feature = "profile")]

mod util;

use std::path::Path;
use std::process::Command;

/// The table's rows, each a list of cells.
fn table(readme: &str) -> Vec<Vec<String>> {
    let section = readme
        .split_once("## For perf users")
        .expect("README has a 'For perf users' section")
        .1;
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the titles and the rule
        .map(|l| {
            // Cells split on `|`, except GitHub's escaped `\|` inside code.
            let mut cells = Vec::new();
            let mut cell = String::new();
            let mut chars = l.trim().trim_matches('|').chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => cell.push(chars.next().unwrap()),
                    '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
                    c => cell.push(c),
                }
            }
            cells.push(cell.trim().to_string());
            cells
        })
        .collect()
}

/// The code spans of a cell.
fn commands(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_of_the_table_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let rows = table(&readme);
    assert!(rows.len() > 20, "{rows:?}");
    let bin = util::perfring_bin();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let dir = util::capture::scratch("perf-users");
    let mut failed = Vec::new();
    let mut ran = 0;
    for row in &rows {
        assert_eq!(row.len(), 3, "{row:?}");
        let (perf, ours) = (commands(&row[0]), commands(&row[1]));
        assert!(perf.iter().all(|c| c.starts_with("perf ")), "{row:?}");
        assert!(ours.iter().all(|c| c.contains("perfring ")), "{row:?}");
        if ours.is_empty() {
            assert!(
                row[2].contains("not there"),
                "a row without perfring's command: {row:?}"
            );
        }
        for cmd in perf.iter().chain(&ours) {
            let out = Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(&dir)
                .env("PATH", &path)
                .output()
                .expect("run sh");
            ran += 1;
            if !out.status.success() {
                failed.push(format!("{cmd}: {:?}\n{}", out.status, util::stderr(&out)));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ran} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
