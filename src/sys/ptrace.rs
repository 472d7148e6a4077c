//! `ptrace(2)` and `waitpid(2)`, as the sampler holds a target's new tasks (see
//! `sampler::hold`): thin wrappers returning the `errno`, no policy.

use std::io::{Error, Result};

/// `PTRACE_EVENT_STOP` from `<linux/ptrace.h>` (the `libc` crate lacks it for glibc;
/// `tests/bindings.rs` checks it against a C compiler's value).
pub const PTRACE_EVENT_STOP: i32 = 128;

fn check(ret: libc::c_long) -> Result<()> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `PTRACE_SEIZE` thread `tid` with `options` (`PTRACE_O_*`): traced without being
/// stopped; the calling *thread* becomes its tracer.
pub fn seize(tid: libc::pid_t, options: libc::c_int) -> Result<()> {
    // SAFETY: PTRACE_SEIZE takes a pid, a null address and the options as data; it
    // touches no memory of ours.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            options as libc::c_long,
        )
    })
}

/// `PTRACE_CONT`: resumes a tracee in a ptrace-stop, delivering `signal` (0: none).
pub fn cont(tid: libc::pid_t, signal: libc::c_int) -> Result<()> {
    // SAFETY: PTRACE_CONT takes a pid, an ignored address and a signal number as data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_CONT,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long,
        )
    })
}

/// `PTRACE_LISTEN`: lets a tracee in group-stop wait for `SIGCONT` as if untraced.
pub fn listen(tid: libc::pid_t) -> Result<()> {
    // SAFETY: PTRACE_LISTEN takes a pid and ignores address and data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_LISTEN,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            0 as libc::c_long,
        )
    })
}

/// `PTRACE_INTERRUPT`: stops a running tracee (it reports `PTRACE_EVENT_STOP`).
pub fn interrupt(tid: libc::pid_t) -> Result<()> {
    // SAFETY: PTRACE_INTERRUPT takes a pid and ignores address and data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_INTERRUPT,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            0 as libc::c_long,
        )
    })
}

/// `PTRACE_DETACH`: lets a tracee in a ptrace-stop go, delivering `signal` (0: none).
pub fn detach(tid: libc::pid_t, signal: libc::c_int) -> Result<()> {
    // SAFETY: PTRACE_DETACH takes a pid, an ignored address and a signal as data.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long,
        )
    })
}

/// `PTRACE_GETEVENTMSG`: for a `PTRACE_EVENT_CLONE`/`FORK`/`VFORK` stop, the new task's id.
pub fn event_msg(tid: libc::pid_t) -> Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: PTRACE_GETEVENTMSG writes one unsigned long through the data pointer,
    // which points at `msg`, alive across the call.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_GETEVENTMSG,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut msg as *mut libc::c_ulong,
        )
    })?;
    Ok(msg as u64)
}

/// `waitid(P_ALL, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL | __WNOTHREAD)`:
/// the first pending state change of a tracee of the calling thread, left pending, as
/// `(tid, exited)`; `None` if there is none. `ECHILD` when the thread traces nothing.
pub fn peek_any_nohang() -> Result<Option<(libc::pid_t, bool)>> {
    // SAFETY: an all-zero siginfo_t is valid plain data for the kernel to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes one siginfo_t through a pointer to `info`, alive across
    // the call.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED
                | libc::WSTOPPED
                | libc::WNOHANG
                | libc::WNOWAIT
                | libc::__WALL
                | libc::__WNOTHREAD,
        )
    };
    if r < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: waitid filled `info` as a SIGCHLD siginfo (si_pid valid), or left it
    // zeroed when nothing was pending (si_pid 0).
    let pid = unsafe { info.si_pid() };
    if pid == 0 {
        return Ok(None);
    }
    let exited = matches!(
        info.si_code,
        libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
    );
    Ok(Some((pid, exited)))
}

/// `waitpid(tid, WNOHANG | __WALL | __WNOTHREAD)`: the pending state change of one
/// tracee, as its status (`None` if there is none).
pub fn wait_nohang(tid: libc::pid_t) -> Result<Option<libc::c_int>> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes the status through a pointer to `status`, alive across
    // the call.
    let pid = unsafe {
        libc::waitpid(
            tid,
            &mut status,
            libc::WNOHANG | libc::__WALL | libc::__WNOTHREAD,
        )
    };
    match pid {
        p if p < 0 => Err(Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(status)),
    }
}
