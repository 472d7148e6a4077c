//! Acting on a running process, by pid: a signal to it or to one of its threads,
//! stopping it and waiting until it is stopped — what a tool does to a process it
//! watches (`watch --signal`, `--stop-at`), whether it started it or not.
//!
//! # Safety
//! `kill(2)` and `tgkill(2)` take integers only; each call has a `// SAFETY:` comment.
#![allow(unsafe_code)]

use crate::{Error, ErrorKind, Result, Signal};

fn signal_error(op: String, err: std::io::Error) -> Error {
    match err.raw_os_error() {
        Some(libc::ESRCH) => Error::new(ErrorKind::NotFound, op, "no such process or thread")
            .with_fix("it may have exited already")
            .with_source(err),
        Some(libc::EPERM) => {
            Error::new(ErrorKind::PermissionDenied, op, "not allowed to signal it")
                .with_fix("signal only your own processes, or run as root")
                .with_source(err)
        }
        _ => Error::from_errno(op, err),
    }
}

/// `kill(pid, signal)`: sends `signal` to process `pid` (any thread of it may take it).
///
/// `SIGSTOP` freezes the whole process until `SIGCONT` (`kill -CONT PID`).
///
/// # Errors
/// [`ErrorKind::NotFound`] (`ESRCH`) when there is no such process,
/// [`ErrorKind::PermissionDenied`] (`EPERM`), or another errno (`EINVAL` for a bad signal).
#[doc(alias = "kill")]
pub fn signal_process(pid: libc::pid_t, signal: Signal) -> Result<()> {
    if pid <= 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("kill({pid}, {signal})"),
            "a process id must be positive (0 and negative ids name process groups)",
        ));
    }
    // SAFETY: kill has no memory-safety preconditions; pid > 0 names one process.
    if unsafe { libc::kill(pid, signal.number()) } != 0 {
        return Err(signal_error(
            format!("kill({pid}, {signal})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// `tgkill(pid, tid, signal)`: sends `signal` to thread `tid` of process `pid`, e.g.
/// the thread a sample says overflowed (its `pid`/`tid` fields).
///
/// Naming the process as well as the thread keeps a recycled thread id in another
/// process from being signalled.
///
/// # Errors
/// As [`signal_process`].
#[doc(alias = "tgkill")]
pub fn signal_thread(pid: libc::pid_t, tid: libc::pid_t, signal: Signal) -> Result<()> {
    if pid <= 0 || tid <= 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("tgkill({pid}, {tid}, {signal})"),
            "process and thread ids must be positive",
        ));
    }
    // SAFETY: tgkill takes three integers and has no memory-safety preconditions.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal.number()) };
    if r != 0 {
        return Err(signal_error(
            format!("tgkill({pid}, {tid}, {signal})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Freezes process `pid` with `SIGSTOP` and waits (up to `timeout`) until it is seen
/// stopped (state `T` or `t` in `/proc/PID/stat`), so that on return it runs no more
/// instructions until `kill -CONT PID`.
///
/// `SIGSTOP` is only acted on when the process is next scheduled; on a busy machine that
/// can be a while after `kill` returns.
///
/// # Errors
/// As [`signal_process`]; [`ErrorKind::NotFound`] if it exited meanwhile,
/// [`ErrorKind::Busy`] if it was not seen stopped within `timeout` (the `SIGSTOP`
/// stays pending).
pub fn stop_process(pid: libc::pid_t, timeout: std::time::Duration) -> Result<()> {
    signal_process(pid, Signal::SIGSTOP)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match crate::proc::state(pid) {
            Some('T' | 't') => return Ok(()),
            None | Some('Z' | 'X') => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("stop process {pid}"),
                    "it exited before it stopped",
                ))
            }
            Some(_) if std::time::Instant::now() >= deadline => {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!("stop process {pid}"),
                    format!("not stopped after {timeout:?}; SIGSTOP is pending"),
                )
                .with_fix("check its state with: ps -o stat= -p PID"))
            }
            Some(_) => std::thread::sleep(std::time::Duration::from_micros(200)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{Command, ExitStatus};
    use crate::proc::{is_alive, state, threads};

    #[test]
    fn stop_and_state() {
        let mut child = Command::new("sleep")
            .arg("5")
            .spawn_stopped()
            .unwrap()
            .start()
            .unwrap();
        let pid = child.pid();
        assert!(is_alive(pid));
        assert_eq!(threads(pid).unwrap(), [pid]);
        assert_eq!(child.try_wait().unwrap(), None);
        stop_process(pid, std::time::Duration::from_secs(5)).unwrap();
        assert_eq!(state(pid), Some('T'));
        signal_thread(pid, pid, Signal::SIGKILL).unwrap();
        assert_eq!(child.wait().unwrap(), ExitStatus::Signaled(Signal::SIGKILL));
        assert!(!is_alive(pid));
        assert_eq!(state(pid), None);
        assert_eq!(threads(pid).unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(
            signal_process(pid, Signal::SIGCONT).unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }
}
