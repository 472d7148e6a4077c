//! perf stat's three output formats, byte for byte as perf 6.1 writes them: the table
//! (`perf stat`), CSV (`-x SEP`) and JSON lines (`--json`), each with perf's prefixes
//! for intervals (`-I`), threads (`--per-thread`) and CPUs (`-A`), and the spread of
//! repeated runs (`-r`). The numbers come from `perfring::stat`; this file only lays
//! them out.

use std::fmt::Write as _;
use std::time::Duration;

use perfring::stat::{metric, Part, Row, Spread, Status};

/// Width of the count column.
const COUNTS: usize = 18;
/// Width of the unit column (perf's, at least "msec").
const UNIT: usize = 4;
/// Width of the event name column (of a counted row; perf pads the others to 25).
const NAME: usize = 32;
const NAME_NOT_COUNTED: usize = 25;
/// Width of the metric column, `#` included.
const METRIC: usize = 35;

/// Which of perf's formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// The table.
    Table,
    /// `-x SEP`.
    Csv(String),
    /// `--json`.
    Json,
}

/// What the rows are printed in: the format, how many runs they average, and the
/// interval's end when printing intervals.
#[derive(Debug, Clone)]
pub struct Style {
    pub format: Format,
    pub runs: u32,
    /// `-I`: the time since the start at which this interval ended.
    pub interval: Option<Duration>,
}

/// `perf stat`'s title: `Performance counter stats for 'ls -l' (5 runs):`, with the
/// blank lines around it (table only).
pub fn header(style: &Style, what: &str) -> String {
    if style.format != Format::Table || style.interval.is_some() {
        return String::new();
    }
    let runs = if style.runs > 1 {
        format!(" ({} runs)", style.runs)
    } else {
        String::new()
    };
    format!("\n Performance counter stats for {what}{runs}:\n\n")
}

/// The column titles printed once before the first interval (table only).
pub fn interval_header(style: &Style, by: By) -> String {
    if style.format != Format::Table {
        return String::new();
    }
    match by {
        By::Total => "#           time             counts unit events\n".into(),
        By::Thread => {
            "#           time             comm-pid                  counts unit events\n".into()
        }
        By::Cpu => "#           time CPU                    counts unit events\n".into(),
    }
}

/// How rows are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// One row per event.
    Total,
    /// `--per-thread`.
    Thread,
    /// `-A`.
    Cpu,
}

/// The lines of one scope's rows (the whole target); `wall_ns` is the time "CPUs
/// utilized" divides by.
pub fn rows(style: &Style, rows: &[Row], wall_ns: f64) -> String {
    (0..rows.len())
        .map(|i| line(style, None, rows, i, wall_ns))
        .collect()
}

/// The lines of per-thread or per-CPU rows, as perf orders them: each event's line
/// for every part, then the next event's. Each part's metrics come from its own rows.
pub fn parts(style: &Style, parts: &[(Part, Vec<Row>)], wall_ns: f64) -> String {
    let events = parts.iter().map(|(_, rows)| rows.len()).max().unwrap_or(0);
    let mut out = String::new();
    for i in 0..events {
        for (part, rows) in parts {
            if i < rows.len() {
                out += &line(style, Some(part), rows, i, wall_ns);
            }
        }
    }
    out
}

/// `rows[i]`'s line (with its newline) in `style`.
fn line(style: &Style, part: Option<&Part>, rows: &[Row], i: usize, wall_ns: f64) -> String {
    let row = &rows[i];
    let m = metric::derive(rows, i, wall_ns);
    let mut line = match &style.format {
        Format::Table => table_row(style, part, row, m.as_ref()),
        Format::Csv(sep) => csv_row(style, sep, part, row, m.as_ref()),
        Format::Json => json_row(style, part, row, m.as_ref()),
    };
    line.push('\n');
    line
}

fn status_text(s: Status) -> &'static str {
    match s {
        Status::NotSupported => "<not supported>",
        _ => "<not counted>",
    }
}

/// The count as perf prints it: clocks (scaled to msec) with two decimals, others
/// without.
fn value_text(row: &Row) -> String {
    let unit = metric::unit_of(&row.event);
    let v = row.value * unit.scale;
    if unit.scale.fract() != 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

fn interval_prefix(t: Duration) -> String {
    format!("{:6}.{:09}", t.as_secs(), t.subsec_nanos())
}

fn table_row(style: &Style, part: Option<&Part>, row: &Row, m: Option<&metric::Metric>) -> String {
    let mut out = String::new();
    if let Some(t) = style.interval {
        out += &interval_prefix(t);
        out.push(' ');
    }
    match part {
        Some(Part::Thread { tid, comm, .. }) => {
            let _ = write!(out, "{comm:>16}-{tid:<8} ");
        }
        Some(Part::Cpu(cpu)) => {
            let _ = write!(out, "CPU{cpu:<7} ");
        }
        _ => {}
    }
    let unit = metric::unit_of(&row.event).name;
    if row.status == Status::Counted {
        let _ = write!(
            out,
            "{:>COUNTS$} {unit:<UNIT$} {:<NAME$}",
            value_text(row),
            row.name
        );
        match m {
            Some(m) => {
                let pad = METRIC.saturating_sub(3 + m.text.len() + 1);
                let _ = write!(out, " # {} {:<pad$}", m.text, m.unit);
            }
            None => out += &" ".repeat(METRIC),
        }
    } else {
        let _ = write!(
            out,
            "{:>COUNTS$} {unit:<UNIT$} {:<NAME_NOT_COUNTED$}{}",
            status_text(row.status),
            row.name,
            " ".repeat(METRIC)
        );
    }
    if let Some(pct) = row.noise_pct.filter(|p| *p != 0.0) {
        let _ = write!(out, "  ( +-{pct:6.2}% )");
    }
    if let Some(pct) = row.multiplexed_pct() {
        let _ = write!(out, "  ({pct:.2}%)");
    }
    out
}

/// perf's CSV share of time running: an integer percentage (its `u64` division)
/// printed with two decimals; 100 when never multiplexed.
fn csv_running_pct(row: &Row) -> f64 {
    if row.running != row.enabled && row.enabled > 0 {
        (100 * row.running / row.enabled) as f64
    } else {
        100.0
    }
}

fn csv_row(
    style: &Style,
    sep: &str,
    part: Option<&Part>,
    row: &Row,
    m: Option<&metric::Metric>,
) -> String {
    let mut out = String::new();
    if let Some(t) = style.interval {
        out += &interval_prefix(t);
        out += sep;
    }
    match part {
        Some(Part::Thread { tid, comm, .. }) => {
            let _ = write!(out, "{comm}-{tid}{sep}");
        }
        Some(Part::Cpu(cpu)) => {
            let _ = write!(out, "CPU{cpu}{sep}");
        }
        _ => {}
    }
    let value = if row.status == Status::Counted {
        value_text(row)
    } else {
        status_text(row.status).to_string()
    };
    let unit = metric::unit_of(&row.event).name;
    let _ = write!(out, "{value}{sep}{unit}{sep}{}", row.name);
    if style.runs > 1 {
        let _ = write!(out, "{sep}{:.2}%", row.noise_pct.unwrap_or(0.0));
    }
    let _ = write!(out, "{sep}{}{sep}{:.2}", row.running, csv_running_pct(row));
    match m {
        Some(m) => {
            let _ = write!(out, "{sep}{}{sep}{}", m.plain(), m.unit.trim_start());
        }
        None => {
            let _ = write!(out, "{sep}{sep}");
        }
    }
    out
}

/// A JSON string (perf writes names unescaped; a name with a quote would break its
/// line, so it is escaped here).
fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn json_row(style: &Style, part: Option<&Part>, row: &Row, m: Option<&metric::Metric>) -> String {
    let mut out = String::from("{");
    if let Some(t) = style.interval {
        let _ = write!(
            out,
            "\"interval\" : {}.{:09}, ",
            t.as_secs(),
            t.subsec_nanos()
        );
    }
    match part {
        Some(Part::Thread { tid, comm, .. }) => {
            let _ = write!(out, "\"thread\" : {}, ", json_str(&format!("{comm}-{tid}")));
        }
        Some(Part::Cpu(cpu)) => {
            let _ = write!(out, "\"cpu\" : \"{cpu}\", ");
        }
        _ => {}
    }
    let unit = metric::unit_of(&row.event);
    let value = if row.status == Status::Counted {
        format!("{:.6}", row.value * unit.scale)
    } else {
        status_text(row.status).to_string()
    };
    let _ = write!(
        out,
        "\"counter-value\" : \"{value}\", \"unit\" : \"{}\", \"event\" : {}, ",
        unit.name,
        json_str(&row.name)
    );
    if style.runs > 1 {
        let _ = write!(out, "\"variance\" : {:.2}, ", row.noise_pct.unwrap_or(0.0));
    }
    let _ = write!(
        out,
        "\"event-runtime\" : {}, \"pcnt-running\" : {:.2}, ",
        row.running,
        csv_running_pct(row)
    );
    let (mv, mu) = m.map_or((0.0, ""), |m| (m.value, m.unit.as_str()));
    let _ = write!(
        out,
        "\"metric-value\" : {mv:.6}, \"metric-unit\" : {}}}",
        json_str(mu)
    );
    out
}

/// What the footer reports.
#[derive(Debug, Clone, Copy)]
pub struct Footer {
    /// The wall-clock time of the run (or of each run).
    pub wall_ns: Spread,
    /// The command's CPU times (one run of a command, counted per task).
    pub usage: Option<perfring::launch::Usage>,
}

/// `seconds time elapsed`, and `seconds user`/`sys` after one run of a command
/// (table only, not with intervals).
pub fn footer(style: &Style, f: &Footer) -> String {
    if style.format != Format::Table || style.interval.is_some() {
        return String::new();
    }
    let mut out = String::from("\n");
    let avg = f.wall_ns.mean() / 1e9;
    if style.runs <= 1 {
        let _ = write!(out, " {avg:17.9} seconds time elapsed");
        if let Some(u) = f.usage {
            let _ = write!(
                out,
                "\n\n {:17.9} seconds user\n {:17.9} seconds sys\n",
                u.user.as_secs_f64(),
                u.system.as_secs_f64()
            );
        }
    } else {
        let sd = f.wall_ns.stddev_of_mean() / 1e9;
        // At most two digits more than the spread's first significant one, as perf.
        let precision = if sd > 1.0 {
            2
        } else if sd == 0.0 {
            9
        } else {
            (-sd.log10()).ceil() as usize + 2
        };
        let _ = write!(
            out,
            " {avg:17.precision$} +- {sd:.precision$} seconds time elapsed"
        );
        let pct = f.wall_ns.relative_pct();
        if pct != 0.0 {
            let _ = write!(out, "  ( +-{pct:6.2}% )");
        }
    }
    out += "\n\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfring::Event;

    fn row(name: &str, status: Status, value: f64, enabled: u64, running: u64) -> Row {
        Row {
            name: name.into(),
            event: Event::parse(name).unwrap(),
            status,
            value,
            enabled,
            running,
            noise_pct: None,
        }
    }

    fn table() -> Style {
        Style {
            format: Format::Table,
            runs: 1,
            interval: None,
        }
    }

    /// The lines of `perf stat -e task-clock,page-faults,cycles -- true` (perf 6.1 on
    /// this VM), with perf's numbers put in.
    #[test]
    fn table_rows_are_perfs_byte_for_byte() {
        let rows = vec![
            row("page-faults", Status::Counted, 50.0, 424_159, 424_159),
            row("cycles", Status::NotSupported, 0.0, 0, 0),
            row("task-clock", Status::Counted, 424_159.0, 424_159, 424_159),
        ];
        let text = super::rows(&table(), &rows, 881_251.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "                50      page-faults                      #  117.880 K/sec                  "
        );
        assert_eq!(
            lines[1],
            "   <not supported>      cycles                                                      "
        );
        assert_eq!(
            lines[2],
            "              0.42 msec task-clock                       #    0.481 CPUs utilized          "
        );
    }

    #[test]
    fn multiplexed_rows_show_the_share_they_ran() {
        let rows = vec![row("page-faults", Status::Counted, 300.0, 3_000, 1_000)];
        let text = super::rows(&table(), &rows, 1.0);
        assert!(text.trim_end().ends_with("  (33.33%)"), "{text}");
        let csv = Style {
            format: Format::Csv(",".into()),
            ..table()
        };
        // perf's CSV percentage is an integer division.
        assert_eq!(
            super::rows(&csv, &rows, 1.0).trim_end(),
            "300,,page-faults,1000,33.00,,"
        );
        let never = vec![row("page-faults", Status::NotCounted, 0.0, 3_000, 0)];
        assert!(super::rows(&table(), &never, 1.0).contains("<not counted>"));
    }

    #[test]
    fn csv_and_json_rows_are_perfs() {
        let rows = vec![
            row(
                "task-clock",
                Status::Counted,
                1_031_335.0,
                1_031_335,
                1_031_335,
            ),
            row("page-faults", Status::Counted, 113.0, 1_031_335, 1_031_335),
            row("cycles", Status::NotSupported, 0.0, 0, 0),
        ];
        let csv = Style {
            format: Format::Csv(",".into()),
            ..table()
        };
        let text = super::rows(&csv, &rows, 1_532_000.0);
        assert_eq!(
            text,
            "1.03,msec,task-clock,1031335,100.00,0.673,CPUs utilized\n\
             113,,page-faults,1031335,100.00,109.567,K/sec\n\
             <not supported>,,cycles,0,100.00,,\n"
        );
        let json = Style {
            format: Format::Json,
            ..table()
        };
        let text = super::rows(&json, &rows[2..], 1.0);
        assert_eq!(
            text,
            "{\"counter-value\" : \"<not supported>\", \"unit\" : \"\", \"event\" : \"cycles\", \
             \"event-runtime\" : 0, \"pcnt-running\" : 100.00, \"metric-value\" : 0.000000, \
             \"metric-unit\" : \"\"}\n"
        );
    }

    #[test]
    fn footer_of_one_run_and_of_many() {
        let mut wall = Spread::default();
        wall.add(1_644_085.0);
        let usage = perfring::launch::Usage {
            user: Duration::from_micros(1783),
            system: Duration::ZERO,
        };
        let f = footer(
            &table(),
            &Footer {
                wall_ns: wall,
                usage: Some(usage),
            },
        );
        assert_eq!(
            f,
            "\n       0.001644085 seconds time elapsed\n\n       0.001783000 seconds user\n       0.000000000 seconds sys\n\n\n"
        );
        let mut wall = Spread::default();
        for ns in [1_400_000.0, 1_500_000.0, 1_700_000.0] {
            wall.add(ns);
        }
        let f = footer(
            &Style { runs: 3, ..table() },
            &Footer {
                wall_ns: wall,
                usage: None,
            },
        );
        assert_eq!(
            f,
            "\n         0.0015333 +- 0.0000882 seconds time elapsed  ( +-  5.75% )\n\n"
        );
    }
}
