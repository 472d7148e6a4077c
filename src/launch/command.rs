//! A command forked stopped, waiting on a pipe for the word to `exec`.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::child::{reap, retry_eintr, Child};
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
    stdout_to_stderr: bool,
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
            stdout_to_stderr: false,
        }
    }

    /// Give the program our stderr as its stdout too (`dup2(2, 1)` before the `exec`):
    /// what `perf record -o -` does, so that a tool whose own output is stdout (a
    /// perf.data stream, JSON lines) does not get the program's output mixed into it.
    pub fn stdout_to_stderr(mut self, yes: bool) -> Command {
        self.stdout_to_stderr = yes;
        self
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

    /// The program, as given.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments, as given.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
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
        let stdout_to_stderr = self.stdout_to_stderr;

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
            // SAFETY: only async-signal-safe calls with valid pointers: dup2 on two
            // descriptor numbers, personality (a
            // plain syscall on integers; 0xffffffff only queries it), an empty signal
            // mask (notifiers may have blocked theirs), SIGPIPE back to default, a one-byte
            // read, execv with NUL-terminated strings and a null-terminated argv, and
            // on failure a write of the errno and _exit.
            unsafe {
                if stdout_to_stderr && libc::dup2(2, 1) < 0 {
                    let errno = *libc::__errno_location();
                    libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                    libc::_exit(127);
                }
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
