//! `perfring doctor`: the library report and the binary's JSON, checked against what
//! this kind of machine (a VM without a hardware PMU, x86) must show.
#![cfg(feature = "profile")]

mod util;

use std::process::Command;

use serde_json::Value;

fn doctor_json() -> Value {
    let out = Command::new(util::perfring_bin())
        .args(["doctor", "--json"])
        .output()
        .expect("run perfring doctor --json");
    assert!(out.status.success(), "doctor failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON object on one line: {text}"
    );
    serde_json::from_str(&text).expect("doctor --json prints valid JSON")
}

fn has_hardware_pmu() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/cpu").exists()
}

#[test]
fn json_report_has_every_fact_and_check() {
    let v = doctor_json();
    assert_eq!(
        v["kernel"].as_str().unwrap(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap()
            .trim()
    );
    assert!(v["paranoid"].is_i64());
    assert!(v["max_sample_rate"].as_i64().unwrap() > 0);
    assert!(v["mlock_kb"].as_i64().unwrap() > 0);
    let pmus = v["pmus"].as_array().unwrap();
    let software = pmus.iter().find(|p| p["name"] == "software").unwrap();
    assert_eq!(software["type"], 1);
    assert!(pmus
        .iter()
        .any(|p| p["name"] == "breakpoint" && p["type"] == 5));
    let checks = v["checks"].as_object().unwrap();
    // serde_json's map sorts its keys, so compare as sets.
    let mut names: Vec<&str> = checks.keys().map(String::as_str).collect();
    let mut expected = perfring::doctor::CHECKS.to_vec();
    names.sort_unstable();
    expected.sort_unstable();
    assert_eq!(names, expected);
    for (name, check) in checks {
        assert!(check["ok"].is_boolean(), "{name}");
        assert!(!check["detail"].as_str().unwrap().is_empty(), "{name}");
    }
}

#[test]
fn json_report_matches_this_machine() {
    let v = doctor_json();
    let check = |name: &str| {
        (
            v["checks"][name]["ok"].as_bool().unwrap(),
            v["checks"][name]["detail"].as_str().unwrap().to_string(),
        )
    };
    for name in [
        "software",
        "breakpoint_x",
        "breakpoint_w",
        "mmap",
        "refresh",
        "signal",
        "sigtrap",
    ] {
        let (ok, detail) = check(name);
        assert!(
            ok,
            "{name} should work on any Linux box with software events: {detail}"
        );
    }
    for name in ["breakpoint_x", "breakpoint_w", "mmap", "sigtrap"] {
        assert!(check(name).1.contains("exact"), "{name}: {}", check(name).1);
    }
    if !has_hardware_pmu() {
        let (ok, detail) = check("hardware");
        assert!(!ok);
        assert!(detail.contains("PMU"), "{detail}");
        assert!(detail.contains("Fix:"), "{detail}");
        assert_eq!(
            check("rdpmc"),
            (
                false,
                "no hardware PMU: rdpmc needs a hardware counter".to_string()
            )
        );
    }
    if cfg!(target_arch = "x86_64") {
        let (ok, detail) = check("breakpoint_r");
        assert!(!ok, "x86 has no read-only watchpoints: {detail}");
        assert!(
            detail.contains("EINVAL") && detail.contains("RW"),
            "{detail}"
        );
    }
}

#[test]
fn table_lists_every_check() {
    let out = Command::new(util::perfring_bin())
        .arg("doctor")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("kernel "), "{text}");
    for name in perfring::doctor::CHECKS {
        assert!(
            text.lines()
                .any(|l| l.starts_with(name) && (l.contains(" ok ") || l.contains(" FAIL "))),
            "{name} missing from:\n{text}"
        );
    }
}

#[test]
fn library_runs_single_probes() {
    assert_eq!(perfring::doctor::run_check("no-such-probe"), None);
    let c = perfring::doctor::run_check("breakpoint_x").unwrap();
    assert!(c.ok, "{}", c.detail);
    // The signal probes reuse perfring's once-per-process handlers and remove their
    // registrations when done: running each twice works.
    for _ in 0..2 {
        for name in ["sigtrap", "signal"] {
            let c = perfring::doctor::run_check(name).unwrap();
            assert!(c.ok, "{name}: {}", c.detail);
        }
    }
}
