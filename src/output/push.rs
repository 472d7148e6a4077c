//! Pushing a pprof profile to Pyroscope's HTTP ingest (`POST /ingest`).
//!
//! One request over plain HTTP/1.1 (`http://` only: for TLS, put a proxy in front or
//! use `curl`/`profilecli`, as the README shows), the profile as the `profile` field of
//! a `multipart/form-data` body, which is how Pyroscope's own agents send pprof.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, SystemTime};

use crate::error::{Error, ErrorKind, Result};

/// How long to wait for the server at each step.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The multipart boundary: long and arbitrary, so a profile's bytes will not hold it.
const BOUNDARY: &str = "perfring-7d1c0f3a9e5b42c88f60a1e2b7c4d9f0";

/// Sends `profile` (a gzipped pprof, as [`Pprof`](super::Pprof) writes) to a Pyroscope
/// server at `url` (e.g. `http://127.0.0.1:4040`), as application `app` (Pyroscope's
/// `name`, e.g. `myapp.cpu{host=a}`), covering `from`..`until`.
///
/// # Errors
/// - [`ErrorKind::InvalidArgument`] for a URL that is not `http://HOST[:PORT][/PATH]`.
/// - [`ErrorKind::Io`] if the server cannot be reached or does not answer 2xx (the
///   status line and the start of the body are quoted).
pub fn push_pyroscope(
    url: &str,
    app: &str,
    profile: &[u8],
    from: SystemTime,
    until: SystemTime,
) -> Result<()> {
    let op = format!("push the profile to {url}");
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            &op,
            "only http:// URLs are supported",
        )
        .with_fix("give http://HOST:PORT, or upload with curl or profilecli (see the README)")
    })?;
    let (hostport, base) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if hostport.is_empty() {
        return Err(
            Error::new(ErrorKind::InvalidArgument, &op, "no host in the URL")
                .with_fix("give http://HOST:PORT"),
        );
    }
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let path = format!(
        "{base}/ingest?name={}&from={}&until={}&format=pprof&spyName=perfring",
        encode_query(app),
        secs(from),
        secs(until).max(secs(from) + 1)
    );
    let mut body = Vec::with_capacity(profile.len() + 256);
    write!(
        body,
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; \
         filename=\"profile.pb.gz\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .expect("write to a Vec");
    body.extend_from_slice(profile);
    write!(body, "\r\n--{BOUNDARY}--\r\n").expect("write to a Vec");

    let io = |what: &str, e: std::io::Error| {
        Error::from_errno(format!("{op} ({what})"), e)
            .with_fix("check the server is running and the URL (Pyroscope listens on :4040)")
    };
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| io("resolve", e))?
        .next()
        .ok_or_else(|| Error::new(ErrorKind::NotFound, &op, "the host has no address"))?;
    let mut conn = TcpStream::connect_timeout(&sock, TIMEOUT).map_err(|e| io("connect", e))?;
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| io("set timeouts", e))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nUser-Agent: perfring/{}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    conn.write_all(head.as_bytes())
        .and_then(|()| conn.write_all(&body))
        .map_err(|e| io("send", e))?;
    let mut reply = Vec::new();
    conn.take(64 * 1024)
        .read_to_end(&mut reply)
        .map_err(|e| io("read the reply", e))?;
    let reply = String::from_utf8_lossy(&reply);
    let status_line = reply.lines().next().unwrap_or("");
    let code: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if (200..300).contains(&code) {
        return Ok(());
    }
    let body = reply.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    Err(Error::new(
        ErrorKind::Io,
        op,
        format!(
            "the server answered {:?}{}",
            status_line,
            if body.is_empty() {
                String::new()
            } else {
                format!(": {}", body.chars().take(200).collect::<String>())
            }
        ),
    )
    .with_fix("check the URL points at Pyroscope's HTTP port and the application name"))
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode_query("app.cpu{a=b}"), "app.cpu%7Ba%3Db%7D");
    }

    #[test]
    fn https_is_refused_with_a_fix() {
        let t = SystemTime::now();
        let e = push_pyroscope("https://x", "a", b"", t, t).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.fix().unwrap().contains("curl"), "{e}");
    }
}
