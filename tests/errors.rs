//! Error messages name the cause and the fix, for each failure provokable on this VM.
//! (The fd and mlock limits are provoked in tests/limits.rs, which changes process limits.)

mod util;

use perfring::event::Access;
use perfring::{Counter, ErrorKind, Event, Scope};

fn has_hardware_pmu() -> bool {
    Counter::builder("cycles").unwrap().open().is_ok()
}

#[test]
fn hardware_event_without_pmu_says_so_and_suggests_cpu_clock() {
    if has_hardware_pmu() {
        eprintln!("this machine has a hardware PMU: the no-PMU message cannot be provoked");
        return;
    }
    let err = Counter::builder("cycles").unwrap().open().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoPmu, "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("perf_event_open(cycles, pid=0, cpu=-1): "),
        "{msg}"
    );
    assert!(msg.contains("no hardware PMU"), "{msg}");
    assert!(
        msg.contains("Fix: count a software event such as cpu-clock"),
        "{msg}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn missing_thread_is_not_found() {
    // pid_max is at most 2^22: this tid cannot exist.
    let err = Counter::builder("cpu-clock")
        .unwrap()
        .target(Scope::Thread(1 << 23))
        .open()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string()
            .contains("no process or thread with id 8388608"),
        "{err}"
    );
}

#[test]
fn einval_names_the_suspect_fields() {
    // sigtrap without remove_on_exec is rejected by the kernel.
    let mut b = Counter::builder("cpu-clock").unwrap().period(1000);
    b.attr_mut().set_sigtrap(1);
    let err = b.open().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        err.to_string().contains("sigtrap requires remove_on_exec"),
        "{err}"
    );
}

#[test]
fn misaligned_watchpoint_is_explained() {
    let addr = &util::WATCHED as *const _ as u64 + 1;
    let err = Counter::builder_for(Event::breakpoint(Access::Write, addr, 8))
        .open()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("aligned to their length"), "{err}");
}

#[test]
fn refresh_on_an_inherited_counter_is_explained() {
    let c = Counter::builder("page-faults")
        .unwrap()
        .period(1)
        .inherit(true)
        .open()
        .unwrap();
    let err = c.refresh(1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Inherited, "{err}");
    assert!(
        err.to_string().contains("Fix: use enable()/disable()"),
        "{err}"
    );
}
