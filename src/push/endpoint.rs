//! Where profiles go and how to be let in: the store's URL and protocol, credentials,
//! tenant, extra headers and labels, trust roots and timeouts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// The store's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Grafana Pyroscope's push API, `push.v1.PusherService/Push`, as the Connect
    /// protocol maps a unary call to HTTP: a `POST` of the protobuf `PushRequest`
    /// (`application/proto`) to `URL/push.v1.PusherService/Push`. What Grafana Alloy
    /// and the Pyroscope SDKs send; Pyroscope 1.0 and later, Grafana Cloud Profiles.
    #[default]
    Pyroscope,
    /// Pyroscope's older HTTP ingest, `POST URL/ingest?name=…&from=…&until=…&format=pprof`
    /// with the profile as the multipart field `profile`: Pyroscope before 1.0 (and
    /// still accepted by later ones).
    PyroscopeIngest,
    /// Parca's `parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw`, as gRPC-Web
    /// over HTTP/1.1 (`application/grpc-web+proto`): Parca serves it on its HTTP port
    /// (7070) for any path prefix, beside native gRPC.
    Parca,
}

impl Protocol {
    /// The protocol's name as [`FromStr`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pyroscope => "pyroscope",
            Protocol::PyroscopeIngest => "pyroscope-ingest",
            Protocol::Parca => "parca",
        }
    }
}

impl FromStr for Protocol {
    type Err = Error;

    /// `pyroscope`, `pyroscope-ingest` (or `ingest`), `parca`.
    fn from_str(s: &str) -> Result<Protocol> {
        match s {
            "pyroscope" | "pyroscope-push" => Ok(Protocol::Pyroscope),
            "pyroscope-ingest" | "ingest" => Ok(Protocol::PyroscopeIngest),
            "parca" => Ok(Protocol::Parca),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                "choose the push protocol",
                format!("unknown protocol {other:?}"),
            )
            .with_fix("give pyroscope (push API), pyroscope-ingest (/ingest) or parca")),
        }
    }
}

/// A credential: a password, an API key, a token. Never shown: its `Debug` prints
/// `Secret(***)`, it has no `Display`, and errors that might quote it have it
/// replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Secret {
    /// A secret held in memory (read from wherever the caller keeps it).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an empty secret, or one with a line break
    /// or a control character (it could not go in a header).
    pub fn new(value: impl Into<String>) -> Result<Secret> {
        let value = value.into();
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "take a credential",
                if value.is_empty() {
                    "it is empty"
                } else {
                    "it holds a control character or a line break"
                },
            )
            .with_fix("give the password or token alone, on one line"));
        }
        Ok(Secret(value))
    }

    /// The secret in environment variable `var`, if set (and not empty).
    ///
    /// # Errors
    /// As [`new`](Self::new), naming the variable, for a value with control characters;
    /// [`ErrorKind::InvalidArgument`] for one that is not UTF-8.
    pub fn from_env(var: &str) -> Result<Option<Secret>> {
        match std::env::var(var) {
            Ok(v) if v.is_empty() => Ok(None),
            Ok(v) => Secret::new(v).map(Some).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("read the credential in ${var}"),
                    e.cause().to_string(),
                )
                .with_fix(e.fix().unwrap_or_default().to_string())
            }),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("read the credential in ${var}"),
                "it is not valid UTF-8",
            )),
        }
    }

    /// The secret in file `path`: its first line, without the line break (as
    /// Kubernetes mounts secrets and `--bearer-token-file`s are written).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (or `PermissionDenied`, `NotFound`) naming the file; as
    /// [`new`](Self::new) for an empty first line.
    pub fn from_file(path: &Path) -> Result<Secret> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let kind = match e.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            };
            Error::from_errno(format!("read the credential file {}", path.display()), e)
                .with_kind(kind)
                .with_fix("give a readable file holding the password or token on its first line")
        })?;
        let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
        Secret::new(line).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("read the credential file {}", path.display()),
                format!("its first line: {}", e.cause()),
            )
            .with_fix("put the password or token alone on the file's first line")
        })
    }

    /// The value, for the request that carries it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// How the client proves who it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Auth {
    /// Nothing.
    #[default]
    None,
    /// HTTP basic authentication (Grafana Cloud: the stack's user id and an API key).
    Basic {
        /// The user (not secret: shown in messages).
        user: String,
        /// The password or API key.
        password: Secret,
    },
    /// `Authorization: Bearer TOKEN` (Parca, Polar Signals, gateways).
    Bearer(Secret),
}

/// Where and how to push: built once, checked when built, shared by every push.
///
/// # Examples
/// ```
/// use perfring::push::{Endpoint, Protocol, Secret};
/// let endpoint = Endpoint::new("https://profiles.example.com", Protocol::Pyroscope)?
///     .basic_auth("123456", Secret::new("glc_key")?)
///     .tenant("team-a")?
///     .service_name("checkout")?
///     .label("env", "prod")?;
/// assert!(!format!("{endpoint:?}").contains("glc_key"));
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(crate) url: String,
    pub(crate) https: bool,
    pub(crate) protocol: Protocol,
    pub(crate) auth: Auth,
    pub(crate) tenant: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) service: String,
    pub(crate) cpu: bool,
    pub(crate) ca_files: Vec<PathBuf>,
    pub(crate) timeout: Duration,
}

/// How long one request may take, from connecting to the last byte of the answer,
/// unless [`Endpoint::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Endpoint {
    /// The store at `url` (`http://HOST[:PORT][/PREFIX]` or `https://…`), spoken to in
    /// `protocol`. The URL is checked now, so a typo fails before anything runs.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a URL that is not `http://` or `https://`,
    /// has no host, carries credentials (`user:pass@`: they would show in `ps`, use
    /// [`basic_auth`](Self::basic_auth)), a query or a fragment.
    pub fn new(url: &str, protocol: Protocol) -> Result<Endpoint> {
        let op = format!("push to {url:?}");
        let bad = |why: &str, fix: &str| {
            Err(Error::new(ErrorKind::InvalidArgument, &op, why.to_string())
                .with_fix(fix.to_string()))
        };
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return bad(
                "the URL is not http:// or https://",
                "give the store's address, e.g. http://localhost:4040 (Pyroscope) or http://localhost:7070 (Parca)",
            );
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            // Not quoted back: what precedes '@' is a credential.
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "push to the store",
                "the URL carries credentials (USER:PASSWORD@), which any user can read in the process list",
            )
            .with_fix("give the URL without them, the user with --push-user and the password in $PERFRING_PUSH_PASSWORD or --push-password-file"));
        }
        if authority.is_empty() || authority.starts_with(':') {
            return bad(
                "the URL has no host",
                "give http://HOST[:PORT], e.g. http://localhost:4040",
            );
        }
        if rest.contains('?') || rest.contains('#') {
            return bad(
                "the URL has a query or a fragment",
                "give the store's base URL only; labels go with --push-label",
            );
        }
        // The http crate, which the client uses, must take it as it is.
        let Ok(uri) = ureq::http::Uri::try_from(url) else {
            return bad(
                "the URL is not well formed (a port that is not a number, a space, an unusual character)",
                "give http://HOST[:PORT][/PREFIX], e.g. http://localhost:4040",
            );
        };
        let port = match authority.rfind(']') {
            Some(i) => authority[i + 1..].strip_prefix(':'),
            None => authority.rsplit_once(':').map(|(_, p)| p),
        };
        if port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return bad(
                "the port is not a number from 0 to 65535",
                "give HOST:PORT, e.g. localhost:4040",
            );
        }
        if uri.host().is_none_or(str::is_empty) {
            return bad(
                "the URL has no host",
                "give http://HOST[:PORT], e.g. http://localhost:4040",
            );
        }
        Ok(Endpoint {
            url: url.trim_end_matches('/').to_string(),
            https,
            protocol,
            auth: Auth::None,
            tenant: None,
            headers: Vec::new(),
            labels: Vec::new(),
            service: "perfring".to_string(),
            cpu: true,
            ca_files: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The base URL (without a trailing `/`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// HTTP basic authentication: `user` and `password` (an API key for Grafana Cloud).
    pub fn basic_auth(mut self, user: impl Into<String>, password: Secret) -> Endpoint {
        self.auth = Auth::Basic {
            user: user.into(),
            password,
        };
        self
    }

    /// `Authorization: Bearer token`.
    pub fn bearer(mut self, token: Secret) -> Endpoint {
        self.auth = Auth::Bearer(token);
        self
    }

    /// The tenant, sent as `X-Scope-OrgID` (multi-tenant Pyroscope, Grafana's
    /// gateways).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an empty id or one that cannot go in a header.
    pub fn tenant(mut self, id: impl Into<String>) -> Result<Endpoint> {
        let id = id.into();
        check_header_value("X-Scope-OrgID", &id)?;
        if id.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "set the tenant",
                "the tenant id is empty",
            )
            .with_fix("give the tenant's id, e.g. --push-tenant team-a"));
        }
        self.tenant = Some(id);
        Ok(self)
    }

    /// An extra header on every request (a proxy's routing header, say). Credentials
    /// do not go here: `Authorization` is refused (use [`basic_auth`](Self::basic_auth)
    /// or [`bearer`](Self::bearer), which keep it out of messages).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a name that is not a header token, a value
    /// with a line break, or `Authorization`, `Content-Type`, `Content-Length`, `Host`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Result<Endpoint> {
        let (name, value) = (name.into(), value.into());
        let op = format!("add the header {name:?}");
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(
                Error::new(ErrorKind::InvalidArgument, op, "it is not a header name")
                    .with_fix("give NAME: VALUE, with a name of letters, digits and -"),
            );
        }
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "authorization" | "proxy-authorization" | "cookie"
        ) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                op,
                "a credential in a header given on the command line can be read by any user in the process list",
            )
            .with_fix("give a token with --push-token-file FILE or $PERFRING_PUSH_TOKEN, a password with --push-password-file or $PERFRING_PUSH_PASSWORD"));
        }
        if matches!(
            lower.as_str(),
            "content-type" | "content-length" | "host" | "transfer-encoding" | "connection"
        ) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                op,
                "the protocol sets this header itself",
            )
            .with_fix("leave it out"));
        }
        check_header_value(&name, &value)?;
        self.headers.push((name, value));
        Ok(self)
    }

    /// A label on every profile (Pyroscope's and Parca's series labels; in the
    /// `/ingest` name's `{…}`). A label given twice keeps the last value; `service_name`
    /// is [`service_name`](Self::service_name)'s, `__name__` replaces the profile's
    /// name.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a name that is not `[a-zA-Z_][a-zA-Z0-9_.]*`
    /// (Prometheus' label names, and the dots of OpenTelemetry's that Pyroscope takes),
    /// or an empty value.
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Result<Endpoint> {
        let (name, value) = (name.into(), value.into());
        check_label_name(&name)?;
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("add the label {name}"),
                "its value is empty or holds a control character",
            )
            .with_fix("give KEY=VALUE with a value on one line"));
        }
        if name == "service_name" {
            self.service = value;
            return Ok(self);
        }
        self.labels.retain(|(n, _)| *n != name);
        self.labels.push((name, value));
        Ok(self)
    }

    /// The service the profiles are of (Pyroscope's `service_name`, the application
    /// name of `/ingest`, Parca's `service_name` label); default `perfring`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an empty name or one with control characters
    /// or `{`, `}`, `,`, `=` (which `/ingest`'s name syntax reserves).
    pub fn service_name(mut self, name: impl Into<String>) -> Result<Endpoint> {
        let name = name.into();
        if name.is_empty() || name.chars().any(|c| c.is_control() || "{},=".contains(c)) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("name the service {name:?}"),
                "a service name must be non-empty, without control characters or { } , =",
            )
            .with_fix("give a name such as checkout or my-app.worker"));
        }
        self.service = name;
        Ok(self)
    }

    /// The service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Whether the profiles are of CPU time (`cpu-clock`, `task-clock`): stores then
    /// file them as their CPU profiles (Pyroscope's `process_cpu`, `/ingest`'s `.cpu`,
    /// Parca's `parca_agent_cpu`); else as `perfring_samples` (`.samples`). Default true.
    pub fn cpu(mut self, yes: bool) -> Endpoint {
        self.cpu = yes;
        self
    }

    /// A PEM file of certificate authorities trusted beside the system's (a private
    /// CA). Read by [`Pusher::new`](super::Pusher::new).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Endpoint {
        self.ca_files.push(path.into());
        self
    }

    /// How long one request may take, connection to last byte (default
    /// [`DEFAULT_TIMEOUT`]): a stalled store fails the attempt, which is retried.
    pub fn timeout(mut self, timeout: Duration) -> Endpoint {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The labels every profile carries, in order: `__name__`, `service_name`, then
    /// the extra ones (a later `__name__` replaces the first).
    pub fn series_labels(&self) -> Vec<(String, String)> {
        let default_name = match (self.protocol, self.cpu) {
            (Protocol::Parca, true) => "parca_agent_cpu",
            (_, true) => "process_cpu",
            (_, false) => "perfring_samples",
        };
        let name = self
            .labels
            .iter()
            .find(|(n, _)| n == "__name__")
            .map_or(default_name.to_string(), |(_, v)| v.clone());
        let mut out = vec![
            ("__name__".to_string(), name),
            ("service_name".to_string(), self.service.clone()),
        ];
        out.extend(self.labels.iter().filter(|(n, _)| n != "__name__").cloned());
        out
    }
}

fn check_header_value(name: &str, value: &str) -> Result<()> {
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) || !value.is_ascii() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("set the header {name}"),
            "its value holds a line break, a NUL or a non-ASCII character",
        )
        .with_fix("give a value on one line, in ASCII"));
    }
    Ok(())
}

fn check_label_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !ok {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("add the label {name:?}"),
            "a label name is a letter or _, then letters, digits, _ or .",
        )
        .with_fix("give KEY=VALUE, e.g. --push-label env=prod"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_when_built() {
        let ok = |u: &str| Endpoint::new(u, Protocol::Pyroscope).unwrap();
        assert_eq!(ok("http://localhost:4040/").url(), "http://localhost:4040");
        assert!(ok("https://example.com/prefix").https);
        assert!(!ok("http://[::1]:4040").https);
        let err = |u: &str| Endpoint::new(u, Protocol::Pyroscope).unwrap_err();
        assert!(err("ftp://x").cause().contains("http"));
        assert!(err("localhost:4040").cause().contains("http"));
        assert!(err("http://").cause().contains("no host"));
        assert!(err("http://host:port").cause().contains("port"));
        assert!(err("http://a b").cause().contains("well formed"));
        assert!(err("http://a/b?x=1").cause().contains("query"));
        let e = err("https://me:hunter2@example.com");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.fix().unwrap().contains("PERFRING_PUSH_PASSWORD"));
    }

    #[test]
    fn secrets_never_show() {
        let s = Secret::new("hunter2").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let e = Endpoint::new("http://x", Protocol::Parca)
            .unwrap()
            .bearer(s);
        assert!(!format!("{e:?}").contains("hunter2"));
        assert!(Secret::new("a\nb").is_err());
        assert!(Secret::new("").is_err());
    }

    #[test]
    fn headers_and_labels_are_checked() {
        let e = Endpoint::new("http://x", Protocol::Pyroscope).unwrap();
        assert!(e.clone().header("Authorization", "Bearer x").is_err());
        assert!(e.clone().header("X-A", "a\r\nb").is_err());
        assert!(e.clone().header("bad name", "v").is_err());
        assert!(e.clone().label("1x", "v").is_err());
        assert!(e.clone().tenant("").is_err());
        let e = e
            .header("X-Route", "blue")
            .unwrap()
            .label("env", "prod")
            .unwrap()
            .label("service_name", "svc")
            .unwrap()
            .label("env", "dev")
            .unwrap();
        assert_eq!(
            e.series_labels(),
            [
                ("__name__".to_string(), "process_cpu".to_string()),
                ("service_name".into(), "svc".into()),
                ("env".into(), "dev".into())
            ]
        );
        let e = e.cpu(false).label("__name__", "mine").unwrap();
        assert_eq!(e.series_labels()[0].1, "mine");
        assert!("nope".parse::<Protocol>().is_err());
        assert_eq!(
            "ingest".parse::<Protocol>().unwrap(),
            Protocol::PyroscopeIngest
        );
    }
}
