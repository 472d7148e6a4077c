//! `perfring doctor`: the report as a table or as one JSON object.

use std::fmt::Write;

use perfring::counter::diagnose::paranoid_meaning;
use perfring::doctor::{MemlockLimit, Report};

use crate::json::{self, Json};

fn opt_int(v: Option<i64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

fn limit(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".into(), |v| v.to_string())
}

fn memlock_text(m: Option<MemlockLimit>) -> String {
    match m {
        Some(m) => format!("soft {} / hard {} bytes", limit(m.soft), limit(m.hard)),
        None => "unknown".into(),
    }
}

/// The human-readable report.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let mut fact = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<26} {value}");
    };
    fact("kernel", r.kernel.clone());
    fact(
        "perf_event_paranoid",
        match r.paranoid {
            Some(l) => format!("{l} (without CAP_PERFMON: {})", paranoid_meaning(l)),
            None => "unknown".into(),
        },
    );
    fact("you are", r.privileges.describe());
    fact(
        "perf_event_max_sample_rate",
        format!("{} /s", opt_int(r.max_sample_rate)),
    );
    fact(
        "perf_cpu_time_max_percent",
        format!("{} %", opt_int(r.cpu_time_max_percent)),
    );
    fact(
        "perf_event_mlock_kb",
        format!("{} KiB", opt_int(r.mlock_kb)),
    );
    fact("RLIMIT_MEMLOCK", memlock_text(r.memlock));
    fact(
        "pmus",
        r.pmus
            .iter()
            .map(|p| format!("{}={}", p.name, p.type_))
            .collect::<Vec<_>>()
            .join(" "),
    );
    out.push('\n');
    let _ = writeln!(out, "{:<14} {:<4} detail", "check", "ok");
    for (name, check) in &r.checks {
        let status = if check.ok { "ok" } else { "FAIL" };
        let _ = writeln!(out, "{name:<14} {status:<4} {}", check.detail);
    }
    out
}

/// The report as one JSON object.
pub fn json(r: &Report) -> Json {
    let int = |v: Option<i64>| json::opt(v, Json::from);
    let memlock = json::opt(r.memlock, |m| {
        // null means unlimited.
        json::object([
            ("soft", json::opt(m.soft, Json::from)),
            ("hard", json::opt(m.hard, Json::from)),
        ])
    });
    json::object([
        ("kernel", json::str(r.kernel.clone())),
        ("paranoid", int(r.paranoid)),
        (
            "privileges",
            json::object([
                ("uid", Json::from(r.privileges.uid)),
                ("euid", Json::from(r.privileges.euid)),
                ("perfmon", Json::Bool(r.privileges.perfmon)),
                ("ipc_lock", Json::Bool(r.privileges.ipc_lock)),
                ("ptrace", Json::Bool(r.privileges.ptrace)),
                (
                    "may_profile_kernel",
                    Json::Bool(r.privileges.may_profile_kernel()),
                ),
                ("may_watch_cpus", Json::Bool(r.privileges.may_watch_cpus())),
                ("allows", json::str(r.privileges.describe())),
            ]),
        ),
        ("max_sample_rate", int(r.max_sample_rate)),
        ("cpu_time_max_percent", int(r.cpu_time_max_percent)),
        (
            "pmus",
            Json::Array(
                r.pmus
                    .iter()
                    .map(|p| {
                        json::object([
                            ("name", json::str(p.name.clone())),
                            ("type", Json::from(p.type_)),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("mlock_kb", int(r.mlock_kb)),
        ("memlock_rlimit", memlock),
        (
            "checks",
            json::object(r.checks.iter().map(|(name, c)| {
                (
                    *name,
                    json::object([
                        ("ok", Json::Bool(c.ok)),
                        ("detail", json::str(c.detail.clone())),
                    ]),
                )
            })),
        ),
    ])
}
