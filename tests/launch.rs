//! Commands started stopped, counted from their exec.

use perfring::launch::{Command, ExitStatus};
use perfring::{Counter, ErrorKind, Scope};

#[test]
fn counters_enabled_on_exec_count_the_command_and_its_status_passes_through() {
    let stopped = Command::new("sh")
        .args([
            "-c",
            "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; exit 3",
        ])
        .spawn_stopped()
        .unwrap();
    let counter = Counter::builder("task-clock")
        .unwrap()
        .target(Scope::Thread(stopped.pid()))
        .inherit(true)
        .enable_on_exec(true)
        .exclude_kernel(true)
        .open()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        counter.read().unwrap().value,
        0,
        "nothing is counted before exec"
    );
    let mut child = stopped.start().unwrap();
    assert_eq!(child.wait().unwrap(), ExitStatus::Exited(3));
    assert!(counter.read().unwrap().value > 0);
}

#[test]
fn a_missing_program_is_reported_before_forking() {
    let err = Command::new("perfring-no-such-program")
        .spawn_stopped()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string()
            .contains("no executable 'perfring-no-such-program' found"),
        "{err}"
    );
}

#[test]
fn a_non_program_fails_at_exec_with_the_errno() {
    let dir = std::env::temp_dir().join(format!("perfring-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("not-a-program");
    std::fs::write(&f, [0u8, 1, 2, 3]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = Command::new(&f)
        .spawn_stopped()
        .unwrap()
        .start()
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn dropping_a_stopped_command_reaps_it() {
    let stopped = Command::new("true").spawn_stopped().unwrap();
    let pid = stopped.pid();
    drop(stopped);
    // SAFETY: kill(pid, 0) only checks existence.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "the child was reaped, not left as a zombie");
}
