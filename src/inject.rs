//! What the in-process injector (`libperfring_inject.so`, the `inject/` crate) is told
//! to do, and how that travels from `perfring inject` to the preloaded library: the
//! `PERFRING_*` environment variables.
//!
//! The injector is preloaded (`LD_PRELOAD`) into an unmodified program. Its constructor
//! reads these variables, opens one inherited `sigtrap` counter per event in the main
//! thread (so every thread created later — by `pthread_create` or a raw `clone` —
//! overflows into itself), and on each overflow runs the [`Action`]s in the
//! overflowing thread, in signal context.
//!
//! | variable | meaning |
//! |---|---|
//! | `PERFRING_EVENT` | events, `;`-separated (`mem:hot:x`, `cpu-clock:u`); unset: the injector does nothing |
//! | `PERFRING_PERIOD` / `PERFRING_FREQ` | overflow every N events / about HZ times a second (one of them) |
//! | `PERFRING_ACTION` | actions, `,`-separated: `record`, `hook:LIB.so:SYMBOL`, `abort-at:N`, `stop-at:N` |
//! | `PERFRING_OUTPUT` | where `record` writes (default `perfring-inject.jsonl`) |
//! | `PERFRING_FORMAT` | `json` (lines as `perfring watch --json`) or `perf` (perf.data); default `perf` for a `*.data` output, else `json` |
//! | `PERFRING_SIGNAL` | a real-time signal (`RTMIN+3`, `40`) instead of SIGTRAP: one counter per thread, opened at its start |
//!
//! This module is pure: it parses and renders, and opens nothing.

use std::path::PathBuf;
use std::str::FromStr;

use crate::{Error, ErrorKind, Result};

/// `PERFRING_EVENT`: `;`-separated event strings.
pub const ENV_EVENT: &str = "PERFRING_EVENT";
/// `PERFRING_PERIOD`: the sample period.
pub const ENV_PERIOD: &str = "PERFRING_PERIOD";
/// `PERFRING_FREQ`: the sample frequency.
pub const ENV_FREQ: &str = "PERFRING_FREQ";
/// `PERFRING_ACTION`: `,`-separated actions.
pub const ENV_ACTION: &str = "PERFRING_ACTION";
/// `PERFRING_OUTPUT`: the JSON-lines file of `record`.
pub const ENV_OUTPUT: &str = "PERFRING_OUTPUT";
/// `PERFRING_FORMAT`: `json` or `perf`, what `record` writes.
pub const ENV_FORMAT: &str = "PERFRING_FORMAT";
/// `PERFRING_SIGNAL`: a real-time signal to the overflowing thread instead of SIGTRAP.
pub const ENV_SIGNAL: &str = "PERFRING_SIGNAL";
/// The preload library's file name.
pub const LIBRARY: &str = "libperfring_inject.so";
/// Where `record` writes when no output is given.
pub const DEFAULT_OUTPUT: &str = "perfring-inject.jsonl";

/// What the injector does on each overflow, in the overflowing thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Copy the sample (ip, tid, time, frame-pointer stack) into the thread's lock-free
    /// buffer; a background thread writes it out as a JSON line.
    Record,
    /// Call `SYMBOL` of the shared library `LIB` as
    /// `void SYMBOL(const perfring_overflow *, void *user)` (user is NULL), in signal
    /// context.
    Hook {
        /// The shared library, as `dlopen` takes it.
        library: String,
        /// The function's name.
        symbol: String,
    },
    /// `abort()` (a core dump) at the Nth overflow of the process.
    AbortAt(u64),
    /// Stop the whole process with `SIGSTOP` at the Nth overflow.
    StopAt(u64),
}

fn usage(what: impl Into<String>, why: impl Into<String>, fix: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, what, why).with_fix(fix)
}

fn count(s: &str, what: &str) -> Result<u64> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(usage(
            what.to_string(),
            format!("'{s}' is not a positive count"),
            "give a whole number of overflows, e.g. 100",
        )),
    }
}

impl FromStr for Action {
    type Err = Error;

    /// Parses `record`, `hook:LIB.so:SYMBOL`, `abort-at:N` or `stop-at:N`.
    fn from_str(s: &str) -> Result<Action> {
        let what = format!("action '{s}'");
        if s == "record" {
            return Ok(Action::Record);
        }
        if let Some(n) = s.strip_prefix("abort-at:") {
            return Ok(Action::AbortAt(count(n, &what)?));
        }
        if let Some(n) = s.strip_prefix("stop-at:") {
            return Ok(Action::StopAt(count(n, &what)?));
        }
        if let Some(rest) = s.strip_prefix("hook:") {
            return match rest.rsplit_once(':') {
                Some((lib, sym)) if !lib.is_empty() && !sym.is_empty() => Ok(Action::Hook {
                    library: lib.to_string(),
                    symbol: sym.to_string(),
                }),
                _ => Err(usage(
                    what,
                    "a hook needs a library and a function",
                    "write hook:LIB.so:SYMBOL, e.g. hook:./libmyhook.so:on_overflow",
                )),
            };
        }
        Err(usage(
            what,
            "unknown action",
            "use record, hook:LIB.so:SYMBOL, abort-at:N or stop-at:N",
        ))
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Record => f.write_str("record"),
            Action::Hook { library, symbol } => write!(f, "hook:{library}:{symbol}"),
            Action::AbortAt(n) => write!(f, "abort-at:{n}"),
            Action::StopAt(n) => write!(f, "stop-at:{n}"),
        }
    }
}

/// What `record` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordFormat {
    /// JSON lines shaped like `perfring watch --json`'s overflow lines, plus `stack`,
    /// and a summary line per process.
    #[default]
    Json,
    /// `perf.data`, for `perf script` and `perf report`: each overflow a
    /// `PERF_RECORD_SAMPLE` (ip, tid, time, period, frame-pointer callchain), with the
    /// process's threads and mappings as `COMM` and `MMAP2` records.
    Perf,
}

impl RecordFormat {
    /// The format a file name implies: `perf` for `*.data` (as `perf.data`), else
    /// `json`.
    ///
    /// ```
    /// use perfring::inject::RecordFormat;
    /// assert_eq!(RecordFormat::for_path("perf.data".as_ref()), RecordFormat::Perf);
    /// assert_eq!(RecordFormat::for_path("out.jsonl".as_ref()), RecordFormat::Json);
    /// ```
    pub fn for_path(path: &std::path::Path) -> RecordFormat {
        if path.extension().is_some_and(|e| e == "data") {
            RecordFormat::Perf
        } else {
            RecordFormat::Json
        }
    }
}

impl FromStr for RecordFormat {
    type Err = Error;

    /// Parses `json` or `perf`.
    fn from_str(s: &str) -> Result<RecordFormat> {
        match s {
            "json" => Ok(RecordFormat::Json),
            "perf" => Ok(RecordFormat::Perf),
            _ => Err(usage(
                format!("format '{s}'"),
                "unknown record format",
                "use json (JSON lines) or perf (perf.data)",
            )),
        }
    }
}

impl std::fmt::Display for RecordFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordFormat::Json => "json",
            RecordFormat::Perf => "perf",
        })
    }
}

/// How often a counter overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Every N events (`-c`).
    Period(u64),
    /// About HZ times a second (`-F`).
    Frequency(u64),
}

/// Everything the injector needs, from flags or from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectConfig {
    /// Event strings, resolved inside the program (`mem:SYMBOL:x` against its own
    /// executable).
    pub events: Vec<String>,
    /// The sampling rate.
    pub rate: Rate,
    /// What to do on each overflow, in order.
    pub actions: Vec<Action>,
    /// The `record` output file.
    pub output: PathBuf,
    /// What `record` writes into it.
    pub format: RecordFormat,
    /// A real-time signal to deliver overflows with (`F_SETOWN_EX` to each thread's
    /// own counter) instead of the synchronous SIGTRAP; `None` for SIGTRAP.
    pub signal: Option<crate::Signal>,
}

impl InjectConfig {
    /// Checks a configuration built from flags.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] with the fix when there is no event or action,
    /// an event contains `;` (the separator of `PERFRING_EVENT`), or a frequency is
    /// given for an event other than a clock (its samples' periods are unknowable in
    /// the program).
    pub fn validate(&self) -> Result<()> {
        if self.events.is_empty() {
            return Err(usage(
                "inject",
                "no event",
                "give one with -e, e.g. -e mem:hot:x or -e cpu-clock:u",
            ));
        }
        if let Some(e) = self.events.iter().find(|e| e.contains(';') || e.is_empty()) {
            return Err(usage(
                format!("event '{e}'"),
                "an event is empty or contains ';'",
                "give each event with its own -e",
            ));
        }
        if self.actions.is_empty() {
            return Err(usage(
                "inject",
                "no action",
                "give one with --action: record, hook:LIB.so:SYMBOL, abort-at:N or stop-at:N",
            ));
        }
        if let Rate::Frequency(hz) = self.rate {
            // A clock under a frequency has the fixed period 1e9/HZ; any other event's
            // period is adapted per thread by the kernel, and the handler cannot learn
            // it: SIGTRAP carries no period, and an inherited counter cannot be read
            // per thread. Its samples would carry a made-up period.
            let clock = |e: &String| crate::Event::parse(e).is_ok_and(|e| e.counts_cpu_time());
            if let Some(e) = self.events.iter().find(|e| !clock(e)) {
                return Err(usage(
                    format!("inject -F {hz} -e {e}"),
                    "under a frequency the kernel adapts each thread's period of this event, and the injector's handler cannot learn it (SIGTRAP carries no period; an inherited counter cannot be read per thread), so its samples would carry a wrong period",
                    "give a period (-c N), or sample a clock (cpu-clock, task-clock: the kernel fixes their period at 1e9/HZ), or record it with perfring record -F",
                ));
            }
        }
        match self.rate {
            Rate::Period(0) | Rate::Frequency(0) => Err(usage(
                "inject",
                "a period or frequency of 0 never overflows",
                "give -c N or -F HZ with N, HZ > 0",
            )),
            _ => Ok(()),
        }
    }

    /// The period every sample of this configuration carries: `-c N`'s N, or under
    /// `-F HZ` (clocks only, see [`validate`](Self::validate)) the kernel's fixed
    /// `1e9 / HZ` nanoseconds.
    pub fn sample_period(&self) -> u64 {
        match self.rate {
            Rate::Period(n) => n,
            Rate::Frequency(hz) => 1_000_000_000 / hz.max(1),
        }
    }

    /// The `PERFRING_*` variables that tell the preloaded library this configuration.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(ENV_EVENT, self.events.join(";"))];
        env.push(match self.rate {
            Rate::Period(n) => (ENV_PERIOD, n.to_string()),
            Rate::Frequency(hz) => (ENV_FREQ, hz.to_string()),
        });
        let actions: Vec<String> = self.actions.iter().map(Action::to_string).collect();
        env.push((ENV_ACTION, actions.join(",")));
        env.push((ENV_OUTPUT, self.output.display().to_string()));
        env.push((ENV_FORMAT, self.format.to_string()));
        if let Some(sig) = self.signal {
            env.push((ENV_SIGNAL, sig.to_string()));
        }
        env
    }

    /// Reads the configuration from variables looked up by `get`; `Ok(None)` when
    /// `PERFRING_EVENT` is unset (the injector then stays inert).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] naming the variable, the bad value and the fix.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<InjectConfig>> {
        let Some(events) = get(ENV_EVENT) else {
            return Ok(None);
        };
        let events: Vec<String> = events
            .split(';')
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        let rate = match (get(ENV_PERIOD), get(ENV_FREQ)) {
            (Some(_), Some(_)) => {
                return Err(usage(
                    "PERFRING_PERIOD and PERFRING_FREQ",
                    "both are set",
                    "set one of them",
                ))
            }
            (Some(p), None) => Rate::Period(count(&p, ENV_PERIOD)?),
            (None, Some(f)) => Rate::Frequency(count(&f, ENV_FREQ)?),
            (None, None) => {
                return Err(usage(
                    ENV_EVENT,
                    "no sampling rate",
                    "set PERFRING_PERIOD=N (every N events) or PERFRING_FREQ=HZ",
                ))
            }
        };
        let actions = get(ENV_ACTION)
            .unwrap_or_default()
            .split(',')
            .filter(|a| !a.is_empty())
            .map(Action::from_str)
            .collect::<Result<Vec<_>>>()?;
        let output: PathBuf = get(ENV_OUTPUT)
            .filter(|o| !o.is_empty())
            .unwrap_or_else(|| DEFAULT_OUTPUT.to_string())
            .into();
        let format = match get(ENV_FORMAT).filter(|f| !f.is_empty()) {
            Some(f) => f.parse().map_err(|e: Error| {
                e.with_fix("set PERFRING_FORMAT to json or perf, or unset it")
            })?,
            None => RecordFormat::for_path(&output),
        };
        let signal = match get(ENV_SIGNAL).filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(s.parse::<crate::Signal>().map_err(|_| {
                usage(
                    ENV_SIGNAL,
                    format!("'{s}' is not a signal"),
                    "give a real-time signal, e.g. RTMIN+3, or unset it for SIGTRAP",
                )
            })?),
        };
        let config = InjectConfig {
            events,
            rate,
            actions,
            output,
            format,
            signal,
        };
        config.validate()?;
        Ok(Some(config))
    }

    /// [`from_vars`](Self::from_vars) over the process environment.
    ///
    /// # Errors
    /// As [`from_vars`](Self::from_vars).
    pub fn from_env() -> Result<Option<InjectConfig>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }
}

/// Finds `libperfring_inject.so`: `$PERFRING_INJECT_LIB`, else beside the running
/// executable (where cargo puts both `perfring` and the library).
///
/// # Errors
/// [`ErrorKind::NotFound`] with the places looked at and how to build it.
pub fn find_library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PERFRING_INJECT_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| Error::from_errno("current_exe()", e))?;
    let candidate = exe.with_file_name(LIBRARY);
    if candidate.is_file() {
        return Ok(candidate);
    }
    Err(Error::new(
        ErrorKind::NotFound,
        "inject",
        format!("{} not found", candidate.display()),
    )
    .with_fix(
        "build it beside perfring with `cargo build --release` (workspace member inject/), \
         or point PERFRING_INJECT_LIB at it",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(kv: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn actions_round_trip() {
        for s in [
            "record",
            "hook:./libh.so:on_overflow",
            "abort-at:7",
            "stop-at:1",
        ] {
            assert_eq!(s.parse::<Action>().unwrap().to_string(), s);
        }
        assert_eq!(
            "hook:/a:b/lib.so:f".parse::<Action>().unwrap(),
            Action::Hook {
                library: "/a:b/lib.so".into(),
                symbol: "f".into()
            }
        );
    }

    #[test]
    fn bad_actions_name_the_fix() {
        for s in ["recod", "hook:lib.so", "abort-at:0", "stop-at:x"] {
            let e = s.parse::<Action>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{s}");
            assert!(e.fix().is_some(), "{s}: {e}");
        }
    }

    #[test]
    fn env_round_trip() {
        let c = InjectConfig {
            events: vec!["mem:hot:x".into(), "cpu-clock:u".into()],
            rate: Rate::Period(100),
            actions: vec![Action::Record, Action::StopAt(5)],
            output: "out.data".into(),
            format: RecordFormat::Json,
            signal: Some(crate::Signal::rtmin(6).unwrap()),
        };
        let env = c.to_env();
        let got =
            InjectConfig::from_vars(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
                .unwrap()
                .unwrap();
        assert_eq!(got, c);
    }

    #[test]
    fn env_without_event_is_inert_and_without_rate_is_an_error() {
        assert_eq!(InjectConfig::from_vars(vars(&[])).unwrap(), None);
        let e = InjectConfig::from_vars(vars(&[(ENV_EVENT, "cpu-clock"), (ENV_ACTION, "record")]))
            .unwrap_err();
        assert!(e.to_string().contains("PERFRING_PERIOD"), "{e}");
        let e = InjectConfig::from_vars(vars(&[(ENV_EVENT, "cpu-clock"), (ENV_PERIOD, "10")]))
            .unwrap_err();
        assert!(e.to_string().contains("no action"), "{e}");
    }

    #[test]
    fn the_format_follows_the_output_name_unless_given() {
        let base = [
            (ENV_EVENT, "cpu-clock"),
            (ENV_PERIOD, "10"),
            (ENV_ACTION, "record"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut kv = base.to_vec();
            kv.extend_from_slice(extra);
            InjectConfig::from_vars(vars(&kv))
        };
        let format = |extra: &[(&'static str, &'static str)]| with(extra).unwrap().unwrap().format;
        assert_eq!(format(&[]), RecordFormat::Json);
        assert_eq!(format(&[(ENV_OUTPUT, "perf.data")]), RecordFormat::Perf);
        assert_eq!(
            format(&[(ENV_OUTPUT, "x.data"), (ENV_FORMAT, "json")]),
            RecordFormat::Json
        );
        assert_eq!(format(&[(ENV_FORMAT, "perf")]), RecordFormat::Perf);
        let e = with(&[(ENV_FORMAT, "pprof")]).unwrap_err();
        assert!(e.to_string().contains("json or perf"), "{e}");
    }
}
