//! Starting a command stopped, so counters can be attached before it runs a single
//! instruction of its own (`perf stat -- cmd`, `perf record -- cmd`).
//!
//! The child is forked and waits on a pipe; the caller opens counters on its pid with
//! [`Builder::enable_on_exec`](crate::Builder::enable_on_exec) and then calls
//! [`Stopped::start`], which lets it `exec`. Counting starts at the `exec`, so the
//! fork/exec plumbing itself is not measured.
//!
//! # Address-space layout
//! [`Command::no_aslr`] sets `ADDR_NO_RANDOMIZE` in the child's personality before the
//! `exec`, as `setarch -R` does, so a position-independent executable is loaded at the
//! kernel's fixed `ELF_ET_DYN_BASE` and its symbols' runtime addresses are known before
//! it runs: what a breakpoint attached before `exec` needs. See
//! [`symbols::NO_ASLR_PIE_BASE`](crate::symbols::NO_ASLR_PIE_BASE).
//!
//! # Safety
//! Between `fork` and `exec` the child only makes async-signal-safe calls (`read`,
//! `write`, `sigprocmask`, `signal`, `personality`, `execv`, `_exit`) on data prepared before the fork,
//! as POSIX requires of a multithreaded parent.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Result};

static SPAWN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A command to start stopped.
///
/// # Examples
/// ```no_run
/// use perfring::{launch::Command, Counter, Scope};
/// let stopped = Command::new("ls").arg("/").spawn_stopped()?;
/// let counter = Counter::builder("task-clock")?
///     .target(Scope::Thread(stopped.pid()))
///     .inherit(true)
///     .enable_on_exec(true)
///     .open()?;
/// let mut child = stopped.start()?;
/// let status = child.wait()?;
/// println!("{status:?}: {} ns", counter.read()?.value);
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Command {
    program: OsString,
    args: Vec<OsString>,
    no_aslr: bool,
}

/// A forked child waiting to `exec`; dropping it kills the child and reaps it.
#[derive(Debug)]
pub struct Stopped {
    pid: libc::pid_t,
    go: Option<OwnedFd>,
    exec_error: OwnedFd,
    program: String,
    /// Set by `start`: the child then belongs to a [`Child`] and drop leaves it alone.
    started: bool,
}

/// A running child started by [`Stopped::start`].
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    reaped: bool,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl ExitStatus {
    /// The shell's convention: the code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled(s) => 128 + s,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }
}

fn op(program: &str) -> String {
    format!("start '{program}'")
}

fn cstring(s: &OsStr, program: &str) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            op(program),
            "an argument contains a NUL byte",
        )
        .with_fix("remove the NUL byte from the command line")
    })
}

/// Finds `program` like `execvp` would: as given if it has a `/`, else along `$PATH`.
///
/// This is the file [`Command::spawn_stopped`] will `exec`, so its symbols are the ones
/// the child will run.
pub fn find_program(program: impl AsRef<OsStr>) -> Option<PathBuf> {
    resolve(program.as_ref())
}

fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; access() only reads it.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Command {
    /// The program to run, found along `$PATH` unless it contains a `/`.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            no_aslr: false,
        }
    }

    /// Run the program with address-space randomization off (`personality(2)`
    /// `ADDR_NO_RANDOMIZE`, like `setarch -R`), so that a PIE is loaded at a known base.
    ///
    /// The setting is inherited by the program's own children.
    #[doc(alias = "ADDR_NO_RANDOMIZE")]
    pub fn no_aslr(mut self, yes: bool) -> Command {
        self.no_aslr = yes;
        self
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Command {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Command {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Forks a child that waits, before `exec`, for [`Stopped::start`].
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] when the program is not found along `$PATH`, or a path
    /// given does not exist (checked before forking), or the `fork`/`pipe` errno.
    pub fn spawn_stopped(&self) -> Result<Stopped> {
        let name = self.program.to_string_lossy().into_owned();
        let path = resolve(&self.program).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                op(&name),
                format!("no executable '{name}' found (searched $PATH)"),
            )
            .with_fix("check the program name, or give its full path")
        })?;
        if !path.exists() {
            return Err(Error::new(
                ErrorKind::NotFound,
                op(&name),
                format!("no such file '{}'", path.display()),
            )
            .with_fix("check the program's path"));
        }
        let path_c = cstring(path.as_os_str(), &name)?;
        let mut argv_c = vec![cstring(&self.program, &name)?];
        for a in &self.args {
            argv_c.push(cstring(a, &name)?);
        }
        let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let no_aslr = self.no_aslr;

        // Between pipe2 and the parent closing its copies of the child's ends, a fork by
        // another thread would leak those ends into its child (close-on-exec only acts at
        // exec), making EOF on the error pipe wait for that child. Serialize our forks.
        let _guard = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let (go_r, go_w) = pipe().map_err(|e| Error::from_errno(op(&name), e))?;
        let (err_r, err_w) = pipe().map_err(|e| Error::from_errno(op(&name), e))?;
        // SAFETY: fork has no preconditions; the child branch below only makes
        // async-signal-safe calls on memory prepared before the fork (see module docs).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::from_errno(
                op(&name),
                std::io::Error::last_os_error(),
            ));
        }
        if pid == 0 {
            // Child: no allocation, no locks, no unwinding from here on.
            // SAFETY: only async-signal-safe calls with valid pointers: personality (a
            // plain syscall on integers; 0xffffffff only queries it), an empty signal
            // mask (notifiers may have blocked theirs), SIGPIPE back to default, a one-byte
            // read, execv with NUL-terminated strings and a null-terminated argv, and
            // on failure a write of the errno and _exit.
            unsafe {
                if no_aslr {
                    let current = libc::personality(0xffff_ffff);
                    if current == -1
                        || libc::personality(
                            current as libc::c_ulong | libc::ADDR_NO_RANDOMIZE as libc::c_ulong,
                        ) == -1
                    {
                        let errno = *libc::__errno_location();
                        libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                        libc::_exit(127);
                    }
                }
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let mut byte = 0u8;
                // Until the exec the child has the parent's handlers: a signal handled
                // without SA_RESTART interrupts the wait (EINTR), which is not the end.
                loop {
                    let n = libc::read(go_r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        break;
                    }
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    libc::_exit(127);
                }
                libc::execv(path_c.as_ptr(), argv.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        Ok(Stopped {
            pid,
            go: Some(go_w),
            exec_error: err_r,
            program: name,
            started: false,
        })
    }
}

impl Stopped {
    /// The child's pid (= tid of its only thread), to open counters on.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the child `exec`; returns once the exec has succeeded or failed.
    ///
    /// # Errors
    /// The exec's errno (e.g. `ENOEXEC` for a file that is not a program).
    pub fn start(mut self) -> Result<Child> {
        let go = self.go.take().expect("start consumes self");
        // Both calls are retried on EINTR: a signal handled meanwhile must neither fail
        // the start nor hide the exec's outcome.
        let n = retry_eintr(|| {
            // SAFETY: writes one byte from a valid buffer to an fd we own.
            unsafe { libc::write(go.as_raw_fd(), b"g".as_ptr().cast(), 1) }
        });
        drop(go);
        if n != 1 {
            return Err(Error::from_errno(
                op(&self.program),
                std::io::Error::last_os_error(),
            ));
        }
        let mut errno = 0i32;
        let n = retry_eintr(|| {
            // SAFETY: reads at most 4 bytes into a valid i32. The pipe is close-on-exec,
            // so it reads 0 bytes (EOF) once the exec succeeded.
            unsafe {
                libc::read(
                    self.exec_error.as_raw_fd(),
                    (&mut errno as *mut i32).cast(),
                    4,
                )
            }
        });
        let pid = self.pid;
        // The child now belongs to `Child`; dropping `self` closes the error pipe.
        self.started = true;
        let mut child = Child { pid, reaped: false };
        if n == 4 {
            let _ = child.wait();
            let err = std::io::Error::from_raw_os_error(errno);
            return Err(
                Error::new(ErrorKind::NotFound, "exec", format!("exec failed: {err}"))
                    .with_fix("check the program is an executable for this machine")
                    .with_source(err),
            );
        }
        Ok(child)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        // Never started: the child is blocked in read(). Kill it rather than rely on EOF,
        // which a concurrently forked child holding a copy of the pipe would delay.
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        self.go.take();
        reap(self.pid);
    }
}

/// Calls `f` (a `read`/`write`) again while it fails with `EINTR`.
fn retry_eintr(mut f: impl FnMut() -> isize) -> isize {
    loop {
        let n = f();
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n;
        }
    }
}

fn reap(pid: libc::pid_t) -> Option<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
    Some(if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled(libc::WTERMSIG(status))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    })
}

impl Child {
    /// The child's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the child to end (retrying on `EINTR`).
    pub fn wait(&mut self) -> Result<ExitStatus> {
        let st = reap(self.pid).ok_or_else(|| {
            Error::from_errno(
                format!("waitpid({})", self.pid),
                std::io::Error::last_os_error(),
            )
        })?;
        self.reaped = true;
        Ok(st)
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: i32) -> Result<()> {
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(self.pid, signal) } != 0 {
            return Err(Error::from_errno(
                format!("kill({}, {signal})", self.pid),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

impl Drop for Child {
    /// A child that was not waited for is left running (like `std::process::Child`),
    /// but it is reaped if it has already exited so no zombie is left.
    fn drop(&mut self) {
        if !self.reaped {
            let mut status = 0;
            // SAFETY: non-blocking waitpid into a valid int.
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// Why [`wait_for_exit`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The process exited (for a child of ours: it can now be reaped with [`Child::wait`]).
    Exited,
    /// `SIGINT` (Ctrl-C) arrived first.
    Interrupted,
    /// The timeout passed first.
    TimedOut,
}

/// Waits until process `pid` exits, `SIGINT` arrives, or `timeout` passes, whichever
/// comes first: what `perf stat -p PID` does between opening and reading its counters.
///
/// The process need not be a child of ours: it is watched through a pidfd
/// (`pidfd_open(2)`, Linux 5.3), which becomes readable when it exits. `SIGINT` is
/// blocked for the calling thread while waiting and received through a `signalfd`, so
/// Ctrl-C ends the wait instead of the program; an interrupt that arrived is consumed,
/// and the previous signal mask is restored on return.
///
/// A process-directed `SIGINT` goes to a thread that does not block it, so in a
/// multithreaded program the others should block `SIGINT` too (a single-threaded
/// command line tool needs nothing).
///
/// # Errors
/// [`ErrorKind::NotFound`] if there is no process `pid`; the errno of `pidfd_open`,
/// `signalfd` or `poll` otherwise.
#[doc(alias = "pidfd_open")]
pub fn wait_for_exit(pid: libc::pid_t, timeout: Option<std::time::Duration>) -> Result<Waited> {
    let op = format!("wait for process {pid}");
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Err(
                Error::new(ErrorKind::NotFound, op, format!("no process with id {pid}"))
                    .with_fix("check the pid (ps -e), or start the command with perfring")
                    .with_source(err),
            );
        }
        return Err(Error::from_errno(op, err));
    }
    // SAFETY: pidfd_open succeeded, so `raw` is a new fd owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };

    let mut set: libc::sigset_t = unsafe_zeroed_sigset();
    // SAFETY: `set` is a valid sigset_t to initialise and extend.
    unsafe {
        libc::sigemptyset(&mut set);
    }
    // SAFETY: `set` was initialised by sigemptyset; SIGINT is a valid signal.
    unsafe {
        libc::sigaddset(&mut set, libc::SIGINT);
    }
    let mut old: libc::sigset_t = unsafe_zeroed_sigset();
    // SAFETY: both pointers are valid sigset_t; this changes the calling thread's mask.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    if r != 0 {
        return Err(Error::from_errno(op, std::io::Error::from_raw_os_error(r)));
    }
    let result = poll_exit_or_sigint(&pidfd, &set, timeout).map_err(|e| Error::from_errno(op, e));
    // SAFETY: restores the mask saved above from a valid sigset_t.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    result
}

fn unsafe_zeroed_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is a plain C struct of integers, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

fn poll_exit_or_sigint(
    pidfd: &OwnedFd,
    set: &libc::sigset_t,
    timeout: Option<std::time::Duration>,
) -> std::io::Result<Waited> {
    // SAFETY: `set` is a valid, initialised sigset_t; -1 asks for a new fd.
    let raw = unsafe { libc::signalfd(-1, set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: signalfd succeeded, so `raw` is a new fd owned by nobody else.
    let sigfd = unsafe { OwnedFd::from_raw_fd(raw) };
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(Waited::TimedOut);
                }
                // Round up so that we never wake just before the deadline.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: `fds` is a valid array of two pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
            // SAFETY: reads at most `info.len()` bytes into a valid buffer; consumes the
            // pending SIGINT so it does not fire when the mask is restored.
            unsafe { libc::read(sigfd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) };
            return Ok(Waited::Interrupted);
        }
        if fds[0].revents != 0 {
            return Ok(Waited::Exited);
        }
    }
}

impl Child {
    /// Reaps the child if it has ended, without waiting (`waitpid(WNOHANG)`).
    ///
    /// Returns `Ok(None)` while it runs (or is stopped). Once it returned a status the
    /// child is reaped: do not call it again.
    ///
    /// # Errors
    /// The `waitpid` errno (`ECHILD` if it was already reaped).
    #[doc(alias = "waitpid")]
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.reaped {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("waitpid({})", self.pid),
                "the child was already reaped",
            ));
        }
        let mut status = 0;
        loop {
            // SAFETY: non-blocking waitpid writing into a valid int.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == 0 {
                return Ok(None);
            }
            if r == self.pid {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::from_errno(format!("waitpid({})", self.pid), err));
        }
        self.reaped = true;
        Ok(Some(if libc::WIFSIGNALED(status) {
            ExitStatus::Signaled(libc::WTERMSIG(status))
        } else {
            ExitStatus::Exited(libc::WEXITSTATUS(status))
        }))
    }
}

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
pub fn signal_process(pid: libc::pid_t, signal: i32) -> Result<()> {
    if pid <= 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("kill({pid}, {signal})"),
            "a process id must be positive (0 and negative ids name process groups)",
        ));
    }
    // SAFETY: kill has no memory-safety preconditions; pid > 0 names one process.
    if unsafe { libc::kill(pid, signal) } != 0 {
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
pub fn signal_thread(pid: libc::pid_t, tid: libc::pid_t, signal: i32) -> Result<()> {
    if pid <= 0 || tid <= 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("tgkill({pid}, {tid}, {signal})"),
            "process and thread ids must be positive",
        ));
    }
    // SAFETY: tgkill takes three integers and has no memory-safety preconditions.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
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
    signal_process(pid, libc::SIGSTOP)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match process_state(pid) {
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

/// Whether `fd` is a pipe or socket whose reading side has gone (`poll(2)` reports
/// `POLLERR` or `POLLHUP` on it, without waiting): what `| head -1` does to a writer,
/// seen before it has anything more to write. `false` for a terminal or a file.
#[doc(alias = "poll")]
pub fn output_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call; timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// A signal number from its name: `USR1`, `SIGUSR1`, `sigusr1`, `RTMIN+2`, or a number
/// (parsed as a [`Signal`](crate::Signal)).
///
/// Returns `None` for an unknown name or a number outside `1..=SIGRTMAX`.
pub fn signal_from_name(name: &str) -> Option<i32> {
    name.parse::<crate::Signal>()
        .ok()
        .map(crate::Signal::number)
}

/// The thread ids of process `pid` (from `/proc/PID/task`), sorted: what a per-thread
/// counter on a whole running process is opened on. Threads created later are not in it.
///
/// # Errors
/// [`ErrorKind::NotFound`] if there is no process `pid`.
pub fn threads(pid: libc::pid_t) -> Result<Vec<libc::pid_t>> {
    let dir = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("list the threads of process {pid}"),
            format!("no process with id {pid}"),
        )
        .with_fix("check the pid (ps -e)")
        .with_source(e)
    })?;
    let mut tids: Vec<libc::pid_t> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether process `pid` exists and has not exited: `/proc/PID/stat` is there and its
/// state is not zombie (`Z`) or dead (`X`). A stopped process is alive.
pub fn is_alive(pid: libc::pid_t) -> bool {
    process_state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `D`, `T` stopped, `t` traced, `Z`, ...),
/// or `None` when there is no such process.
pub fn process_state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ".
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Blocks `SIGINT` and `SIGTERM` for the calling thread (and threads it creates later)
/// so that Ctrl-C can be noticed with [`Interrupts::take`] between two polls, instead of
/// ending the program before it has reported. The previous mask is restored on drop.
///
/// Children started with [`Command`] unblock every signal before they `exec`, so a
/// terminal's Ctrl-C still reaches them.
#[derive(Debug)]
pub struct Interrupts {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl Interrupts {
    /// `pthread_sigmask(SIG_BLOCK, {SIGINT, SIGTERM})`.
    ///
    /// # Errors
    /// The `pthread_sigmask` error (it has none for these arguments in practice).
    #[doc(alias = "pthread_sigmask")]
    pub fn block() -> Result<Interrupts> {
        let mut set = unsafe_zeroed_sigset();
        // SAFETY: `set` is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut set) };
        // SAFETY: `set` was initialised by sigemptyset; SIGINT is a valid signal.
        unsafe { libc::sigaddset(&mut set, libc::SIGINT) };
        // SAFETY: as above, for SIGTERM.
        unsafe { libc::sigaddset(&mut set, libc::SIGTERM) };
        let mut old = unsafe_zeroed_sigset();
        // SAFETY: both pointers are valid sigset_t; this changes the calling thread's mask.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        if r != 0 {
            return Err(Error::from_errno(
                "pthread_sigmask(SIG_BLOCK, SIGINT|SIGTERM)",
                std::io::Error::from_raw_os_error(r),
            ));
        }
        Ok(Interrupts { set, old })
    }

    /// Consumes a pending `SIGINT` or `SIGTERM` and returns it, without waiting
    /// (`sigtimedwait` with a zero timeout).
    #[doc(alias = "sigtimedwait")]
    pub fn take(&self) -> Option<i32> {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `set` is an initialised sigset_t and `zero` a valid timespec; a null
        // siginfo pointer is allowed.
        let r = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) };
        (r > 0).then_some(r)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `block` from a valid sigset_t.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod signal_tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_from_name("USR1"), Some(libc::SIGUSR1));
        assert_eq!(signal_from_name("sigusr2"), Some(libc::SIGUSR2));
        assert_eq!(signal_from_name("9"), Some(9));
        assert_eq!(signal_from_name("RTMIN+1"), Some(libc::SIGRTMIN() + 1));
        assert_eq!(signal_from_name("RTMIN"), Some(libc::SIGRTMIN()));
        assert_eq!(signal_from_name("0"), None);
        assert_eq!(signal_from_name("NOPE"), None);
        assert_eq!(signal_from_name("RTMIN+99"), None);
    }

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
        assert_eq!(process_state(pid), Some('T'));
        signal_thread(pid, pid, libc::SIGKILL).unwrap();
        assert_eq!(child.wait().unwrap(), ExitStatus::Signaled(libc::SIGKILL));
        assert!(!is_alive(pid));
        assert_eq!(process_state(pid), None);
        assert_eq!(threads(pid).unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(
            signal_process(pid, 0).unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn interrupts_are_taken_not_delivered() {
        let guard = Interrupts::block().unwrap();
        assert_eq!(guard.take(), None);
        // SAFETY: raise has no memory-safety preconditions; SIGINT is blocked here.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGINT) };
        assert_eq!(guard.take(), Some(libc::SIGINT));
        assert_eq!(guard.take(), None);
    }
}
