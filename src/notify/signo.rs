//! [`Signal`]: a signal number, checked, with its name.

use std::fmt;
use std::str::FromStr;

use crate::{Error, ErrorKind, Result};

/// A signal number in `1..=SIGRTMAX`, as the notify and sampler APIs take and return
/// it. Parsed from a name (`"SIGUSR1"`, `"usr1"`, `"RTMIN+3"`, `"SIGRTMAX-1"`) or a
/// number (`"10"`); shown as its name (`SIGUSR1`, `SIGRTMIN+3`), which parses back.
///
/// # Examples
/// ```
/// use perfring::Signal;
/// let s: Signal = "USR1".parse()?;
/// assert_eq!(s, Signal::SIGUSR1);
/// assert_eq!(s.to_string(), "SIGUSR1");
/// let rt: Signal = "RTMIN+3".parse()?;
/// assert_eq!(rt.number(), libc::SIGRTMIN() + 3);
/// assert!(rt.is_realtime());
/// assert_eq!(rt.to_string().parse::<Signal>()?, rt);
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(i32);

/// The standard signals by name (without `SIG`).
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

impl Signal {
    /// `SIGINT`.
    pub const SIGINT: Signal = Signal(libc::SIGINT);
    /// `SIGTERM`.
    pub const SIGTERM: Signal = Signal(libc::SIGTERM);
    /// `SIGKILL`.
    pub const SIGKILL: Signal = Signal(libc::SIGKILL);
    /// `SIGSTOP`.
    pub const SIGSTOP: Signal = Signal(libc::SIGSTOP);
    /// `SIGCONT`.
    pub const SIGCONT: Signal = Signal(libc::SIGCONT);
    /// `SIGTRAP`.
    pub const SIGTRAP: Signal = Signal(libc::SIGTRAP);
    /// `SIGUSR1`.
    pub const SIGUSR1: Signal = Signal(libc::SIGUSR1);
    /// `SIGUSR2`.
    pub const SIGUSR2: Signal = Signal(libc::SIGUSR2);
    /// `SIGIO`: what an fd with `O_ASYNC` sends without `F_SETSIG`.
    pub const SIGIO: Signal = Signal(libc::SIGIO);
    /// `SIGPROF`.
    pub const SIGPROF: Signal = Signal(libc::SIGPROF);
    /// `SIGALRM`.
    pub const SIGALRM: Signal = Signal(libc::SIGALRM);

    /// Signal `number`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] outside `1..=SIGRTMAX`.
    pub fn new(number: i32) -> Result<Signal> {
        let max = libc::SIGRTMAX();
        if (1..=max).contains(&number) {
            Ok(Signal(number))
        } else {
            Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("signal {number}"),
                format!("not a signal number (1..={max})"),
            )
            .with_fix("give a number in range, or a name such as USR1 or RTMIN+3"))
        }
    }

    /// `SIGRTMIN + offset`, the real-time signal glibc numbers so.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] past `SIGRTMAX`.
    pub fn rtmin(offset: u32) -> Result<Signal> {
        let n = i32::try_from(offset)
            .ok()
            .and_then(|o| libc::SIGRTMIN().checked_add(o))
            .unwrap_or(i32::MAX);
        Signal::new(n)
    }

    /// A number the kernel or `sigaction` has accepted already.
    pub(crate) const fn known(number: i32) -> Signal {
        Signal(number)
    }

    /// The number, for system calls.
    pub fn number(self) -> i32 {
        self.0
    }

    /// Whether it is a real-time signal (`SIGRTMIN..=SIGRTMAX`): those queue, one per
    /// notification, where a standard signal coalesces while pending.
    pub fn is_realtime(self) -> bool {
        (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&self.0)
    }
}

impl From<Signal> for i32 {
    fn from(s: Signal) -> i32 {
        s.0
    }
}

impl TryFrom<i32> for Signal {
    type Error = Error;

    fn try_from(number: i32) -> Result<Signal> {
        Signal::new(number)
    }
}

impl FromStr for Signal {
    type Err = Error;

    /// A name with or without `SIG`, any case (`USR1`, `SIGUSR1`, `sigusr1`), a
    /// real-time signal relative to `RTMIN` or `RTMAX` (`RTMIN`, `RTMIN+3`,
    /// `SIGRTMAX-1`), or a number.
    fn from_str(s: &str) -> Result<Signal> {
        let bad = || {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("signal {s:?}"),
                "not a signal name or number",
            )
            .with_fix("give a name (USR1, SIGUSR2, RTMIN+3, RTMAX-1) or a number")
        };
        let upper = s.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        if let Ok(n) = bare.parse::<i32>() {
            return Signal::new(n);
        }
        let relative = |rest: &str, sign: char| -> Option<i32> {
            if rest.is_empty() {
                return Some(0);
            }
            rest.strip_prefix(sign)?.parse::<i32>().ok()
        };
        let n = if let Some(rest) = bare.strip_prefix("RTMIN") {
            libc::SIGRTMIN().checked_add(relative(rest, '+').ok_or_else(bad)?)
        } else if let Some(rest) = bare.strip_prefix("RTMAX") {
            libc::SIGRTMAX().checked_sub(relative(rest, '-').ok_or_else(bad)?)
        } else {
            NAMES.iter().find(|(n, _)| *n == bare).map(|(_, s)| *s)
        };
        match n {
            Some(n)
                if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n)
                    || !bare.starts_with("RT") =>
            {
                Signal::new(n)
            }
            Some(_) => Err(bad().with_fix(format!(
                "real-time signals are RTMIN..=RTMAX (RTMIN+{})",
                libc::SIGRTMAX() - libc::SIGRTMIN()
            ))),
            None => Err(bad()),
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        if let Some((name, _)) = NAMES.iter().find(|(_, n)| *n == self.0) {
            write!(f, "SIG{name}")
        } else if self.0 == min {
            f.write_str("SIGRTMIN")
        } else if (min..=max).contains(&self.0) {
            write!(f, "SIGRTMIN+{}", self.0 - min)
        } else {
            // 32 and 33: below glibc's SIGRTMIN, kept by it; no name.
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_real_time_offsets() {
        let p = |s: &str| s.parse::<Signal>().map(Signal::number).ok();
        assert_eq!(p("USR1"), Some(libc::SIGUSR1));
        assert_eq!(p("SIGUSR2"), Some(libc::SIGUSR2));
        assert_eq!(p("sigprof"), Some(libc::SIGPROF));
        assert_eq!(p(" io "), Some(libc::SIGIO));
        assert_eq!(p("10"), Some(10));
        assert_eq!(p("RTMIN"), Some(libc::SIGRTMIN()));
        assert_eq!(p("RTMIN+3"), Some(libc::SIGRTMIN() + 3));
        assert_eq!(p("SIGRTMAX-1"), Some(libc::SIGRTMAX() - 1));
        assert_eq!(p("RTMAX"), Some(libc::SIGRTMAX()));
        for bad in [
            "", "0", "65", "-1", "USR3", "RTMIN+99", "RTMIN-1", "RTMAX+1", "RTMIN+x",
        ] {
            let e = bad.parse::<Signal>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}: {e}");
            assert!(e.fix().is_some(), "{bad:?}: {e}");
        }
    }

    #[test]
    fn display_parses_back() {
        for n in 1..=libc::SIGRTMAX() {
            let s = Signal::new(n).unwrap();
            assert_eq!(s.to_string().parse::<Signal>().unwrap(), s, "{s}");
        }
        assert_eq!(Signal::SIGUSR1.to_string(), "SIGUSR1");
        assert_eq!(Signal::rtmin(3).unwrap().to_string(), "SIGRTMIN+3");
        assert_eq!(Signal::rtmin(0).unwrap().to_string(), "SIGRTMIN");
        assert!(Signal::rtmin(1000).is_err());
        assert!(Signal::new(0).is_err());
        assert!(!Signal::SIGIO.is_realtime() && Signal::rtmin(1).unwrap().is_realtime());
    }
}
