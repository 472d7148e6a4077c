//! Profiles sent to a profile store — Grafana Pyroscope or Parca — over HTTP or
//! HTTPS, one at a time or as a long-running agent.
//!
//! Three parts:
//! - **[`Endpoint`]**: the store's URL and [`Protocol`] (Pyroscope's push API,
//!   Pyroscope's older `/ingest`, Parca's `WriteRaw`), credentials ([`Auth`], from a
//!   [`Secret`] read from the environment or a file, never shown), the tenant
//!   (`X-Scope-OrgID`), extra headers and labels, private CAs, the timeout. Checked
//!   when built, so a bad URL fails before anything runs.
//! - **[`Pusher`]**: a blocking client (ureq over rustls, with the system's trust store
//!   and any private CA): [`check`](Pusher::check) sends the protocol's empty request
//!   (reachability, TLS, credentials and tenant, before a target is started),
//!   [`push`](Pusher::push) sends one gzipped pprof, as [`output::Pprof`] writes it,
//!   unchanged. A failure is a [`PushError`]: the store's status and message quoted,
//!   whether trying again may help, credentials scrubbed.
//! - **[`Queue`]**: a thread of its own that pushes the profiles handed to it through a
//!   [`QueueSender`], never blocking the sender: at most [`QueueLimits::profiles`]
//!   profiles and [`QueueLimits::bytes`] bytes wait, the oldest dropped and counted
//!   beyond that; failures that may pass are retried with exponential backoff;
//!   [`finish`](Queue::finish) pushes what is left, within a deadline, and says what
//!   became of every profile ([`PushStats`]).
//!
//! The profiles come from [`output::Intervals`], an [`Output`](crate::output::Output)
//! that cuts a pprof profile per interval of the samples' time; `perfring record
//! --push URL --every 15s` is those three on a profiling session.
//!
//! [`output::Pprof`]: crate::output::Pprof
//! [`output::Intervals`]: crate::output::Intervals
//!
//! # Examples
//! ```no_run
//! use std::time::Duration;
//! use perfring::output::Intervals;
//! use perfring::push::{Endpoint, Protocol, Pusher, Queue, QueueLimits, Secret};
//!
//! let endpoint = Endpoint::new("https://profiles.example.com", Protocol::Pyroscope)?
//!     .basic_auth("123456", Secret::from_env("PYROSCOPE_KEY")?.expect("set $PYROSCOPE_KEY"))
//!     .service_name("checkout")?;
//! let pusher = Pusher::new(endpoint)?;
//! pusher.check()?; // before the target starts: URL, TLS, credentials
//! let mut queue = Queue::spawn(pusher, QueueLimits::default())?;
//! let sender = queue.sender();
//! let output = Intervals::every(Duration::from_secs(15), move |profile| sender.send(profile));
//! // Profiler::builder(target).output(output).start()? ... finish()
//! let stats = queue.finish(Duration::from_secs(10));
//! println!("{} profiles pushed, {} dropped", stats.pushed, stats.dropped());
//! # Ok::<(), perfring::Error>(())
//! ```

mod endpoint;
mod queue;
mod wire;

use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;

pub use endpoint::{Auth, Endpoint, Protocol, Secret, DEFAULT_TIMEOUT};
pub use queue::{PushStats, Queue, QueueLimits, QueueSender};
pub use wire::Class;

use crate::error::{Error, ErrorKind};

/// A failed push: the error (status and the store's message quoted, credentials
/// scrubbed), its [`Class`], and when to try again.
#[derive(Debug)]
pub struct PushError {
    error: Error,
    class: Class,
    status: Option<u16>,
    retry_after: Option<Duration>,
}

impl PushError {
    /// The error, for messages.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// Why it failed, as far as what to do next goes.
    pub fn class(&self) -> Class {
        self.class
    }

    /// Whether the same push may succeed later (the store was down, slow, overloaded).
    pub fn retryable(&self) -> bool {
        self.class == Class::Transient
    }

    /// The HTTP status, if the store answered.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The store's `Retry-After`, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PushError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PushError> for Error {
    fn from(e: PushError) -> Error {
        e.error
    }
}

/// A blocking client of one [`Endpoint`]: one request per call, connections kept
/// between calls. `Send` and `Sync`: the [`Queue`]'s thread owns one.
pub struct Pusher {
    endpoint: Endpoint,
    agent: ureq::Agent,
    /// What must never appear in a message: the credential, and its basic-auth form.
    secrets: Vec<String>,
    authorization: Option<String>,
}

impl fmt::Debug for Pusher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pusher")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Pusher {
    /// A client of `endpoint`: for `https://`, the system's trusted CAs (as
    /// `rustls-native-certs` finds them: `$SSL_CERT_FILE`, `$SSL_CERT_DIR`, then the
    /// distribution's bundle) and the endpoint's [`ca_file`](Endpoint::ca_file)s.
    ///
    /// # Errors
    /// - [`ErrorKind::NotFound`]/[`ErrorKind::Io`] for a CA file that cannot be read,
    ///   [`ErrorKind::InvalidArgument`] for one that holds no PEM certificate.
    /// - [`ErrorKind::NotFound`] for `https://` when no CA is trusted at all.
    pub fn new(endpoint: Endpoint) -> crate::Result<Pusher> {
        let mut roots: Vec<ureq::tls::Certificate<'static>> = Vec::new();
        for path in &endpoint.ca_files {
            roots.extend(read_ca_file(path)?);
        }
        if endpoint.https {
            let found = rustls_native_certs::load_native_certs();
            roots.extend(
                found
                    .certs
                    .iter()
                    .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()),
            );
            if roots.is_empty() {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("trust {}'s certificate", endpoint.url),
                    "no trusted certificate authority was found on this system",
                )
                .with_fix("install the ca-certificates package, set $SSL_CERT_FILE, or give the CA with --push-ca FILE"));
            }
        }
        // rustls over ring, as ureq's own default: a small C build, where aws-lc-rs
        // brings a large one. rustls 0.23.48 deprecates ring's provider for lacking the
        // post-quantum key exchange (X25519MLKEM768); classical X25519/P-256 is what
        // the stores' other agents use today.
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
            .unversioned_rustls_crypto_provider(Arc::new(provider))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            // Statuses are the protocol's to read, with their bodies.
            .http_status_as_error(false)
            // A redirect is reported, not followed: a POST body and credentials are
            // not sent on to wherever a store says.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_global(Some(endpoint.timeout))
            .user_agent(format!("perfring/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let (secrets, authorization) = match &endpoint.auth {
            Auth::None => (Vec::new(), None),
            Auth::Basic { user, password } => {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(format!("{user}:{}", password.expose()));
                (
                    vec![password.expose().to_string(), encoded.clone()],
                    Some(format!("Basic {encoded}")),
                )
            }
            Auth::Bearer(token) => (
                vec![token.expose().to_string()],
                Some(format!("Bearer {}", token.expose())),
            ),
        };
        Ok(Pusher {
            endpoint,
            agent,
            secrets,
            authorization,
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends the protocol's empty request (no profile): the store is reached, its
    /// certificate verifies, it speaks the protocol at this URL, and it lets the
    /// credentials and tenant in. A store that refuses the empty request as a bad one
    /// (Pyroscope answers `invalid_argument: no profiles received`) has passed.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn check(&self) -> Result<(), PushError> {
        let now = SystemTime::now();
        let request = wire::request(&self.endpoint, None, now, now);
        match self.send(&request) {
            Ok(()) => Ok(()),
            Err(Failed::Answer(a)) if wire::reached(&a.answer) => Ok(()),
            Err(f) => Err(self.failure(f, "check the profile store at")),
        }
    }

    /// Pushes one pprof profile (gzipped or not, sent as it is) covering
    /// `from..until`.
    ///
    /// # Errors
    /// A [`PushError`]: [`Class::Tls`] when the certificate does not verify (naming
    /// `--push-ca`), [`Class::Auth`] for refused credentials, [`Class::Route`] when
    /// nothing answers the protocol at the URL, [`Class::Rejected`] for a profile the
    /// store refused, [`Class::Transient`] for what may pass (connection refused or
    /// reset, timeouts, 429, 5xx); each with the status and the store's message.
    pub fn push(&self, pprof: &[u8], from: SystemTime, until: SystemTime) -> Result<(), PushError> {
        let request = wire::request(&self.endpoint, Some(pprof), from, until);
        self.send(&request)
            .map_err(|f| self.failure(f, "push a profile to"))
    }

    fn send(&self, r: &wire::Request) -> Result<(), Failed> {
        let url = format!("{}{}", self.endpoint.url, r.path);
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", &r.content_type);
        for (k, v) in &r.headers {
            req = req.header(*k, *v);
        }
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        if let Some(t) = &self.endpoint.tenant {
            req = req.header("X-Scope-OrgID", t);
        }
        for (k, v) in &self.endpoint.headers {
            req = req.header(k, v);
        }
        let mut response = req.send(&r.body[..]).map_err(Failed::Transport)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        // Enough of the body for a message or gRPC-Web's trailers; the rest is
        // drained by the connection's reuse or dropped with it.
        let mut body = Vec::new();
        let _ = response
            .body_mut()
            .as_reader()
            .take(64 << 10)
            .read_to_end(&mut body);
        let answer = wire::answer(self.endpoint.protocol, status, &header, &body);
        if answer.ok {
            return Ok(());
        }
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Err(Failed::Answer(Box::new(wire::AnswerWithRetry {
            answer,
            retry_after,
        })))
    }

    /// The [`PushError`] of a failure, with what to do about it; credentials scrubbed.
    fn failure(&self, f: Failed, doing: &str) -> PushError {
        let op = format!(
            "{doing} {} ({})",
            self.endpoint.url,
            self.endpoint.protocol.name()
        );
        let (class, status, retry_after, why, fix) = match f {
            Failed::Answer(a) => {
                let wire::AnswerWithRetry {
                    answer: a,
                    retry_after,
                } = *a;
                let mut why = format!("the store answered {}", a.status);
                if let Some(code) = &a.code {
                    why += &format!(" ({code})");
                }
                let message = one_line(&a.message, 300);
                if !message.is_empty() {
                    why += &format!(": {message}");
                }
                let fix = match a.class {
                    wire::Class::Auth => "check the credentials ($PERFRING_PUSH_PASSWORD or --push-password-file with --push-user; $PERFRING_PUSH_TOKEN or --push-token-file) and the tenant (--push-tenant)",
                    wire::Class::Route => "check the URL (its host, port and path prefix) and --push-protocol: pyroscope (push API), pyroscope-ingest (/ingest, Pyroscope before 1.0) or parca",
                    wire::Class::Transient => "the store is down or overloaded: the push is retried; if it lasts, check the store",
                    wire::Class::Rejected if (300..400).contains(&a.status) => "give --push the URL it redirects to",
                    wire::Class::Rejected | wire::Class::Tls => "check the store's logs for why it refused the profile",
                };
                (a.class, Some(a.status), retry_after, why, fix.to_string())
            }
            Failed::Transport(e) => {
                let (class, why, fix) = transport(&e, self.endpoint.timeout);
                (class, None, None, why, fix)
            }
        };
        let error = Error::new(
            match class {
                wire::Class::Auth | wire::Class::Tls => ErrorKind::PermissionDenied,
                wire::Class::Route => ErrorKind::NotFound,
                wire::Class::Rejected => ErrorKind::InvalidArgument,
                wire::Class::Transient => ErrorKind::Io,
            },
            scrub(&op, &self.secrets),
            scrub(&why, &self.secrets),
        )
        .with_fix(fix);
        PushError {
            error,
            class,
            status,
            retry_after,
        }
    }
}

/// A request that did not succeed: no answer, or the store's refusal.
enum Failed {
    Transport(ureq::Error),
    Answer(Box<wire::AnswerWithRetry>),
}

/// What a transport error means: its class, cause and fix.
fn transport(e: &ureq::Error, timeout: Duration) -> (Class, String, String) {
    if let Some(tls) = rustls_error(e) {
        let why = match tls {
            rustls::Error::InvalidCertificate(c) => {
                format!("the store's certificate did not verify ({c:?})")
            }
            other => format!("the TLS handshake failed ({other})"),
        };
        return (
            Class::Tls,
            why,
            "trust the certificate authority that signed the store's certificate with --push-ca FILE (PEM; Endpoint::ca_file), or check the URL's host name is the certificate's".to_string(),
        );
    }
    match e {
        ureq::Error::Timeout(t) => (
            Class::Transient,
            format!("no answer within {:?} ({t})", timeout),
            "the store is slow or stalled: the push is retried; give a longer --push-timeout if it is only slow".to_string(),
        ),
        ureq::Error::HostNotFound => (
            Class::Route,
            "the host name does not resolve".to_string(),
            "check the URL's host name".to_string(),
        ),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => (
            Class::Transient,
            "the connection was refused (nothing listens at that address and port)".to_string(),
            "check the URL's port and that the store is running (Pyroscope listens on 4040, Parca on 7070)".to_string(),
        ),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => (
            Class::Transient,
            format!("no answer within {timeout:?}"),
            "the store is slow or stalled: the push is retried; give a longer --push-timeout if it is only slow".to_string(),
        ),
        ureq::Error::Tls(what) => (
            Class::Tls,
            format!("TLS failed: {what}"),
            "check the URL's scheme and port (https:// to a TLS port), or trust the store's CA with --push-ca FILE".to_string(),
        ),
        ureq::Error::Protocol(p) => (
            Class::Transient,
            format!("the answer is not HTTP/1.1 ({p})"),
            "check the URL: http:// to a TLS port, or a port that is not the store's".to_string(),
        ),
        other => (
            Class::Transient,
            format!("the request failed: {other}"),
            "check the store is reachable; the push is retried".to_string(),
        ),
    }
}

/// The rustls error inside a ureq error, if TLS is what failed.
fn rustls_error(e: &ureq::Error) -> Option<&rustls::Error> {
    match e {
        ureq::Error::Rustls(r) => Some(r),
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>(),
        _ => None,
    }
}

/// `s` with each secret replaced by `***`.
fn scrub(s: &str, secrets: &[String]) -> String {
    let mut out = s.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret.as_str(), "***");
    }
    out
}

/// A store's message on one line, at most `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out.trim().to_string()
}

/// The certificates of a PEM file.
fn read_ca_file(path: &std::path::Path) -> crate::Result<Vec<ureq::tls::Certificate<'static>>> {
    let pem = std::fs::read(path).map_err(|e| {
        let kind = if e.kind() == std::io::ErrorKind::NotFound {
            ErrorKind::NotFound
        } else {
            ErrorKind::Io
        };
        Error::from_errno(format!("read the CA file {}", path.display()), e)
            .with_kind(kind)
            .with_fix(
                "give --push-ca a readable PEM file of the CA that signed the store's certificate",
            )
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let Ok(ureq::tls::PemItem::Certificate(c)) = item {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("read the CA file {}", path.display()),
            "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        )
        .with_fix("give --push-ca the CA's certificate in PEM form"));
    }
    Ok(certs)
}

// The queue's thread owns a pusher.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Pusher>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_and_messages_kept_short() {
        assert_eq!(scrub("a hunter2 b", &["hunter2".into()]), "a *** b");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("perfring-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("empty.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = Pusher::new(
            Endpoint::new("https://127.0.0.1:1", Protocol::Pyroscope)
                .unwrap()
                .ca_file(&f),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let e = Pusher::new(
            Endpoint::new("https://127.0.0.1:1", Protocol::Pyroscope)
                .unwrap()
                .ca_file(dir.join("missing.pem")),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.fix().unwrap().contains("--push-ca"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
