//! `perfring record --push URL [--every D]`: the profile store's side of a recording —
//! the endpoint from the flags and the environment, the check before the target
//! starts, the pushing queue, failures as they happen, and what became of every
//! profile.

use std::time::Duration;

use perfring::output::{Intervals, IntervalsHandle};
use perfring::push::{Endpoint, PushStats, Pusher, Queue, QueueLimits, Secret};

use crate::args::PushArgs;
use crate::Failure;

/// The password of `--push-user`, unless `--push-password-file` is given.
pub const PASSWORD_ENV: &str = "PERFRING_PUSH_PASSWORD";
/// A bearer token, unless `--push-token-file` is given.
pub const TOKEN_ENV: &str = "PERFRING_PUSH_TOKEN";
/// At the end, how long the profiles still waiting get to be pushed.
pub const DRAIN: Duration = Duration::from_secs(10);
/// How often the drain tells the writer how far it has come, so that intervals are
/// cut on time while the target is idle.
const PROGRESS: Duration = Duration::from_millis(250);

/// The endpoint the flags describe, without credentials (those are read at
/// [`Agent::connect`]): checked at parse time, so a bad URL, header or label fails
/// before anything starts.
pub fn endpoint(a: &PushArgs, url: &str) -> perfring::Result<Endpoint> {
    let mut e = Endpoint::new(url, a.protocol)?;
    for ca in &a.ca {
        e = e.ca_file(ca);
    }
    if let Some(t) = &a.tenant {
        e = e.tenant(t)?;
    }
    for (name, value) in &a.headers {
        e = e.header(name, value)?;
    }
    for (k, v) in &a.labels {
        e = e.label(k, v)?;
    }
    if let Some(s) = &a.service {
        e = e.service_name(s)?;
    }
    if let Some(t) = a.timeout {
        e = e.timeout(t);
    }
    Ok(e)
}

/// Whether the events (the default one if none is given) count CPU time: the stores
/// then file the profiles as CPU profiles.
pub fn counts_cpu_time(specs: &[String]) -> bool {
    let default;
    let specs = if specs.is_empty() {
        default = [perfring::profiler::default_event().0];
        &default[..]
    } else {
        specs
    };
    specs.iter().all(|spec| {
        perfring::Counter::builder(spec)
            .ok()
            .and_then(|b| perfring::sampler::EventInfo::new(spec, *b.attr(), Vec::new()).ok())
            .is_some_and(|e| e.counts_cpu_time())
    })
}

/// The default `service_name`: the target's program (a command's, a process's
/// executable), else `perfring`.
pub fn service_name(w: &crate::args::WatchArgs) -> String {
    let pid = w.pid.or(w.tid);
    let program = match (w.command.first(), pid) {
        (Some(program), _) => Some(std::path::PathBuf::from(program)),
        (None, Some(pid)) => perfring::proc::exe(perfring::proc::tgid(pid).unwrap_or(pid)),
        _ => None,
    };
    program
        .as_deref()
        .and_then(std::path::Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "perfring".to_string())
}

/// A recording's pushing side: the queue and its thread, and the counts reported.
pub struct Agent {
    queue: Queue,
    every: Option<Duration>,
    url: String,
    service: String,
    intervals: Option<IntervalsHandle>,
    /// Failures already reported.
    reported: u64,
}

impl Agent {
    /// Builds the endpoint with its credentials (`--push-user` with
    /// `$PERFRING_PUSH_PASSWORD` or `--push-password-file`; `--push-token-file` or
    /// `$PERFRING_PUSH_TOKEN`), checks the store with the protocol's empty request —
    /// reachable, certificate verified, credentials and tenant let in — and starts the
    /// pushing thread. All before the target starts.
    pub fn connect(a: &PushArgs, cpu: bool, service: &str) -> Result<Agent, Failure> {
        let url = a.url.as_deref().expect("--push given");
        let mut e = endpoint(a, url).map_err(Failure::Input)?.cpu(cpu);
        if a.service.is_none() {
            e = e.service_name(service).map_err(Failure::Input)?;
        }
        let token = match &a.token_file {
            Some(f) => Some(Secret::from_file(f).map_err(Failure::Input)?),
            None => Secret::from_env(TOKEN_ENV).map_err(Failure::Input)?,
        };
        if let Some(user) = &a.user {
            let password = match &a.password_file {
                Some(f) => Secret::from_file(f).map_err(Failure::Input)?,
                None => Secret::from_env(PASSWORD_ENV)
                    .map_err(Failure::Input)?
                    .ok_or_else(|| {
                        Failure::Usage(format!(
                            "record: --push-user {user} needs a password: set ${PASSWORD_ENV} or give --push-password-file FILE"
                        ))
                    })?,
            };
            e = e.basic_auth(user, password);
        } else if let Some(token) = token {
            e = e.bearer(token);
        } else if std::env::var_os(PASSWORD_ENV).is_some_and(|v| !v.is_empty()) {
            return Err(Failure::Usage(format!(
                "record: ${PASSWORD_ENV} is set but no --push-user: give the user it belongs to"
            )));
        }
        let service = e.service().to_string();
        let pusher = Pusher::new(e).map_err(Failure::Runtime)?;
        pusher.check().map_err(|e| Failure::Runtime(e.into()))?;
        let mut limits = QueueLimits::default();
        if let Some(n) = a.queue {
            limits.profiles = n;
        }
        let queue = Queue::spawn(pusher, limits).map_err(Failure::Runtime)?;
        Ok(Agent {
            queue,
            every: a.every,
            url: url.to_string(),
            service,
            intervals: None,
            reported: 0,
        })
    }

    /// The session's output: a profile per `--every` interval (or one at the end),
    /// each handed to the queue; and how to set the session up for it.
    pub fn output(&mut self) -> Intervals {
        let sender = self.queue.sender();
        let out = match self.every {
            Some(every) => Intervals::every(every, move |p| sender.send(p)),
            None => Intervals::whole(move |p| sender.send(p)),
        };
        self.intervals = Some(out.handle());
        out
    }

    /// The session options an agent needs: progress marks from the drain (intervals
    /// cut on time however idle the target), exited processes forgotten (memory flat).
    pub fn session(
        &self,
        setup: perfring::profiler::ProfilerBuilder,
    ) -> perfring::profiler::ProfilerBuilder {
        setup.progress_every(PROGRESS).forget_exited(true)
    }

    /// Reports failed pushes since the last call, on stderr (one line each time the
    /// count grows: the store's own words, credentials scrubbed).
    pub fn poll(&mut self) {
        if let Some((failures, last)) = self.queue.last_error() {
            if failures > self.reported {
                let new = failures - self.reported;
                self.reported = failures;
                eprintln!(
                    "perfring: push failed{}: {last}",
                    if new > 1 {
                        format!(" ({new} times)")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }

    /// Pushes what is left (for at most [`DRAIN`]), then says what became of every
    /// profile; a failure if any was dropped.
    pub fn finish(mut self) -> Result<PushStats, Failure> {
        let cut = self.intervals.as_ref().map(IntervalsHandle::stats);
        let stats = self.queue.finish(DRAIN);
        self.poll();
        let (late, empty) = cut.map_or((0, 0), |c| (c.late, c.empty));
        eprintln!(
            "perfring: push: {} profiles cut ({} samples, {late} late, {empty} empty intervals); \
             {} pushed ({} samples) to {} as service_name={}; {} dropped ({} samples: \
             {} queue full, {} failed, {} rejected, {} unsent); {} requests, {} failed",
            stats.profiles,
            stats.samples,
            stats.pushed,
            stats.pushed_samples,
            self.url,
            self.service,
            stats.dropped(),
            stats.dropped_samples,
            stats.dropped_full,
            stats.dropped_failed,
            stats.dropped_rejected,
            stats.dropped_unsent,
            stats.attempts,
            stats.failures,
        );
        if stats.dropped() > 0 {
            return Err(Failure::Runtime(perfring::Error::new(
                perfring::ErrorKind::Io,
                format!("push the profiles to {}", self.url),
                format!(
                    "{} of {} profiles ({} samples) could not be pushed",
                    stats.dropped(),
                    stats.profiles,
                    stats.dropped_samples
                ),
            )
            .with_fix(
                "see the failures above; a store that is slow or down loses the oldest profiles once --push-queue are waiting",
            )));
        }
        Ok(stats)
    }
}
