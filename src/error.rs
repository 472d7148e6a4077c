//! The one error type: what failed, why, and what to do about it.
//!
//! Every failure of `perf_event_open`, `mmap`, an ioctl, an event string or a record
//! becomes an [`Error`] whose `Display` reads "what failed: why. Fix: ...", whose
//! [`kind`](Error::kind) a program can match on, and whose [`source`](std::error::Error::source)
//! is the underlying `errno`, when there is one.

use std::fmt;
use std::io;

/// What class of failure an [`Error`] is, for programs that react differently to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The kernel refused access: `perf_event_paranoid`, a missing capability, or seccomp.
    PermissionDenied,
    /// A hardware event on a machine without a usable hardware PMU (`ENOENT`/`EOPNOTSUPP`).
    NoPmu,
    /// The kernel or PMU does not support the requested feature.
    Unsupported,
    /// The target (process, thread, CPU, PMU, tracepoint, symbol) does not exist.
    NotFound,
    /// The kernel rejected an argument (`EINVAL`); the message names the likely fields.
    InvalidArgument,
    /// The process ran out of file descriptors (`EMFILE`/`ENFILE`).
    TooManyFiles,
    /// The ring buffer is larger than `perf_event_mlock_kb` and `RLIMIT_MEMLOCK` allow.
    MlockLimit,
    /// A resource is in use, e.g. all hardware breakpoint slots (`EBUSY`/`ENOSPC`).
    Busy,
    /// The operation is not allowed on an inherited counter (e.g. `REFRESH`).
    Inherited,
    /// An event string could not be parsed or resolved.
    BadEvent,
    /// Bytes from the ring (or a test stream) are not a valid record.
    Decode,
    /// A signal could not be set up (already handled by someone else, not real-time, ...).
    Signal,
    /// Any other operating-system error.
    Io,
}

/// A perfring failure: the operation, the cause, the fix, and the errno if any.
///
/// # Examples
/// ```
/// use perfring::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::NoPmu, "perf_event_open(cycles)", "this machine has no hardware PMU")
///     .with_fix("count a software event such as cpu-clock instead");
/// assert_eq!(e.kind(), ErrorKind::NoPmu);
/// assert_eq!(
///     e.to_string(),
///     "perf_event_open(cycles): this machine has no hardware PMU. \
///      Fix: count a software event such as cpu-clock instead"
/// );
/// ```
pub struct Error {
    kind: ErrorKind,
    op: String,
    why: String,
    fix: Option<String>,
    source: Option<io::Error>,
}

impl Error {
    /// A new error: `op` is what was attempted, `why` the cause.
    pub fn new(kind: ErrorKind, op: impl Into<String>, why: impl Into<String>) -> Self {
        Error {
            kind,
            op: op.into(),
            why: why.into(),
            fix: None,
            source: None,
        }
    }

    /// An error from an `errno`, classified as [`ErrorKind::Io`] unless a caller knows better.
    pub fn from_errno(op: impl Into<String>, errno: io::Error) -> Self {
        let why = errno.to_string();
        Error::new(ErrorKind::Io, op, why).with_source(errno)
    }

    /// Adds what the user can do about it.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Attaches the underlying OS error.
    pub fn with_source(mut self, source: io::Error) -> Self {
        self.source = Some(source);
        self
    }

    /// Changes the kind (used where the caller knows more than the errno says).
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// What class of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation that failed, e.g. `perf_event_open(cpu-clock, pid=0, cpu=-1)`.
    pub fn operation(&self) -> &str {
        &self.op
    }

    /// Why it failed.
    pub fn cause(&self) -> &str {
        &self.why
    }

    /// What to do about it, when perfring knows.
    pub fn fix(&self) -> Option<&str> {
        self.fix.as_deref()
    }

    /// The raw `errno`, if this came from a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.as_ref().and_then(io::Error::raw_os_error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.why)?;
        if let Some(fix) = &self.fix {
            write!(f, ". Fix: {fix}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("op", &self.op)
            .field("why", &self.why)
            .field("fix", &self.fix)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// perfring's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
