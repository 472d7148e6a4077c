//! Any string: `Event::parse_in` never panics, and a parsed event prints as a string
//! that parses back to an equal event.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use perfring::event::{Event, Sysfs};

/// A small fake sysfs + tracefs tree, built once per process.
fn sysfs() -> &'static Sysfs {
    static SYSFS: OnceLock<Sysfs> = OnceLock::new();
    SYSFS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("perfring-fuzz-event-{}", std::process::id()));
        let files = [
            ("sys/bus/event_source/devices/cpu/type", "4"),
            (
                "sys/bus/event_source/devices/cpu/format/event",
                "config:0-7",
            ),
            (
                "sys/bus/event_source/devices/cpu/format/umask",
                "config:8-15",
            ),
            (
                "sys/bus/event_source/devices/cpu/format/split",
                "config:20-23,32-35",
            ),
            (
                "sys/bus/event_source/devices/cpu/format/ldlat",
                "config1:0-15",
            ),
            (
                "sys/bus/event_source/devices/cpu/format/filter",
                "config2:0-63",
            ),
            (
                "sys/bus/event_source/devices/cpu/events/foo",
                "event=0x3c,umask=0x1",
            ),
            ("sys/bus/event_source/devices/tracepoint/type", "2"),
            ("sys/bus/event_source/devices/software/type", "1"),
            ("sys/kernel/tracing/events/sched/sched_switch/id", "316"),
        ];
        for (rel, text) in files {
            let path: PathBuf = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Sysfs::new(root)
    })
}

fuzz_target!(|s: &str| {
    let sysfs = sysfs();
    if let Ok(event) = Event::parse_in(s, sysfs) {
        let shown = event.to_string();
        match Event::parse_in(&shown, sysfs) {
            Ok(again) => assert_eq!(again, event, "{s:?} printed as {shown:?}"),
            Err(e) => panic!("{s:?} printed as {shown:?}, which does not parse: {e}"),
        }
    }
});
