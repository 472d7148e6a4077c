//! `Pipeline::forget_exited`: a long recording drops an exited process's map and a
//! thread's name a round after their `EXIT` — not before, so samples drained late are
//! still named, and not never, so memory stays flat over processes that come and go.
#![cfg(feature = "profile")]

use perfring::pipeline::Pipeline;
use perfring::records::{encode, Mmap, RecordKind, Task};
use perfring::sampler::EventInfo;
use perfring::SampleType;

fn event() -> EventInfo {
    let b = perfring::Counter::builder("cpu-clock")
        .unwrap()
        .sample(SampleType::IP | SampleType::TID | SampleType::TIME)
        .sample_id_all(true);
    EventInfo::new("cpu-clock", *b.attr(), vec![1]).unwrap()
}

/// A process (pid 100, a second thread 101) that maps its program, then exits.
fn records(ev: &EventInfo, exit: bool) -> Vec<u8> {
    let layout = ev.layout();
    let ids = |pid, tid, time| encode::Ids {
        pid,
        tid,
        time,
        id: 1,
        ..Default::default()
    };
    let mut out = Vec::new();
    if !exit {
        encode::comm(&mut out, layout, 0, 100, 100, b"main", &ids(100, 100, 1));
        encode::comm(&mut out, layout, 0, 100, 101, b"worker", &ids(100, 101, 2));
        encode::record_kind(
            &mut out,
            layout,
            0,
            &RecordKind::Mmap(Mmap {
                pid: 100,
                tid: 100,
                addr: 0x40_0000,
                len: 0x1000,
                pgoff: 0,
                filename: b"/usr/bin/prog",
            }),
            &ids(100, 100, 3),
        );
        return out;
    }
    for (tid, time) in [(101, 10), (100, 11)] {
        encode::record_kind(
            &mut out,
            layout,
            0,
            &RecordKind::Exit(Task {
                pid: 100,
                ppid: 1,
                tid,
                ptid: 1,
                time,
            }),
            &ids(100, tid, time),
        );
    }
    out
}

fn run(forget: bool) -> Vec<(bool, Option<String>)> {
    let ev = event();
    let mut p = Pipeline::new(std::slice::from_ref(&ev), None)
        .unwrap()
        .forget_exited(forget);
    let mut states = Vec::new();
    let mut state = |p: &Pipeline| {
        states.push((
            p.spaces().mapping(100, 0x40_0100).is_some(),
            p.spaces().thread_name(101).map(str::to_string),
        ))
    };
    p.push_records(0, &records(&ev, false)).unwrap();
    p.end_round().unwrap();
    state(&p);
    p.push_records(0, &records(&ev, true)).unwrap();
    p.end_round().unwrap();
    state(&p);
    p.end_round().unwrap();
    state(&p);
    states
}

#[test]
fn exited_processes_are_forgotten_a_round_after_their_exit() {
    let known = (true, Some("worker".to_string()));
    // The round of the EXIT still names them; the next one has forgotten them.
    assert_eq!(run(true), [known.clone(), known.clone(), (false, None)]);
    // By default a recording keeps every map (a file's samples are named however late).
    assert_eq!(run(false), [known.clone(), known.clone(), known]);
}
