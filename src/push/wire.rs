//! What each store is sent and what its answers mean: the protobuf messages of
//! Pyroscope's push API and Parca's profile store (prost derives, field numbers checked
//! against the stores' `.proto` files, quoted above each message), each protocol's
//! request, and each protocol's answer turned into success or a classed failure.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::SystemTime;

use prost::Message;

use super::endpoint::{Endpoint, Protocol};

/// Pyroscope's `api/push/v1/push.proto` (package `push.v1`) and the `LabelPair` of
/// `api/types/v1/types.proto` (package `types.v1`).
pub mod pyroscope {
    /// `message PushRequest { repeated RawProfileSeries series = 1; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct PushRequest {
        /// The series, each a label set and its profiles.
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }

    /// `message RawProfileSeries { repeated types.v1.LabelPair labels = 1;
    /// repeated RawSample samples = 2; repeated ProfileAnnotation annotations = 3; }`
    /// (annotations are dropped by the server when pushed; not sent).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawProfileSeries {
        /// The series' labels (`__name__`, `service_name`, …).
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        /// The profiles.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }

    /// `message LabelPair { string name = 1; string value = 2; }` (types.v1).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct LabelPair {
        /// The label's name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Its value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `message RawSample { bytes raw_profile = 1; string ID = 2; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawSample {
        /// The pprof profile, gzipped or not.
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        /// A unique id of the profile (the same on every attempt to push it).
        #[prost(string, tag = "2")]
        pub id: String,
    }
}

/// Parca's `proto/parca/profilestore/v1alpha1/profilestore.proto` (package
/// `parca.profilestore.v1alpha1`).
pub mod parca {
    /// `message WriteRawRequest { string tenant = 1 [deprecated = true];
    /// repeated RawProfileSeries series = 2; bool normalized = 3; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct WriteRawRequest {
        /// Deprecated by Parca; left empty.
        #[prost(string, tag = "1")]
        pub tenant: String,
        /// The series.
        #[prost(message, repeated, tag = "2")]
        pub series: Vec<RawProfileSeries>,
        /// Whether addresses are already normalized for position-independent code
        /// (perfring's pprof keeps the process's addresses with each mapping: false).
        #[prost(bool, tag = "3")]
        pub normalized: bool,
    }

    /// `message RawProfileSeries { LabelSet labels = 1; repeated RawSample samples = 2; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawProfileSeries {
        /// The series' labels.
        #[prost(message, optional, tag = "1")]
        pub labels: Option<LabelSet>,
        /// The profiles.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }

    /// `message LabelSet { repeated Label labels = 1; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct LabelSet {
        /// The labels.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
    }

    /// `message Label { string name = 1; string value = 2; }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Label {
        /// The label's name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Its value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `message RawSample { bytes raw_profile = 1; … }`
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawSample {
        /// The pprof profile.
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
    }
}

/// Connect's unary path for Pyroscope's push.
pub const PYROSCOPE_PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// gRPC-Web's path for Parca's WriteRaw.
pub const PARCA_WRITE_RAW_PATH: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw";
/// The multipart boundary of `/ingest`: long and arbitrary, so a profile will not hold
/// it by chance (a gzip stream of the profile, whose bytes look random).
const BOUNDARY: &str = "perfring-7d1c0f3a9e5b42c88f60a1e2b7c4d9f0";

/// One HTTP request: the path and query after the endpoint's URL, the content type,
/// any protocol headers, the body.
#[derive(Debug)]
pub(crate) struct Request {
    pub path: String,
    pub content_type: String,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Vec<u8>,
}

/// The request that pushes `pprof` (`None`: the empty request of
/// [`Pusher::check`](super::Pusher::check)) covering `from..until`.
pub(crate) fn request(
    endpoint: &Endpoint,
    pprof: Option<&[u8]>,
    from: SystemTime,
    until: SystemTime,
) -> Request {
    let labels = endpoint.series_labels();
    match endpoint.protocol {
        Protocol::Pyroscope => {
            let series = pprof.map(|p| pyroscope::RawProfileSeries {
                labels: labels
                    .iter()
                    .map(|(name, value)| pyroscope::LabelPair {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                samples: vec![pyroscope::RawSample {
                    raw_profile: p.to_vec(),
                    id: profile_id(p, from, until),
                }],
            });
            Request {
                path: PYROSCOPE_PUSH_PATH.to_string(),
                content_type: "application/proto".to_string(),
                headers: vec![("Connect-Protocol-Version", "1")],
                body: pyroscope::PushRequest {
                    series: series.into_iter().collect(),
                }
                .encode_to_vec(),
            }
        }
        Protocol::PyroscopeIngest => {
            let secs = |t: SystemTime| {
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            };
            let kind = if endpoint.cpu { "cpu" } else { "samples" };
            let mut name = format!("{}.{kind}", endpoint.service);
            let extra: Vec<String> = labels
                .iter()
                .skip(2)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !extra.is_empty() {
                let _ = write!(name, "{{{}}}", extra.join(","));
            }
            let (from, until) = (secs(from), secs(until));
            let mut body = Vec::with_capacity(pprof.map_or(0, <[u8]>::len) + 256);
            body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; \
                     filename=\"profile.pb.gz\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(pprof.unwrap_or_default());
            body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
            Request {
                path: format!(
                    "/ingest?name={}&from={from}&until={}&format=pprof&spyName=perfring",
                    encode_query(&name),
                    until.max(from + 1)
                ),
                content_type: format!("multipart/form-data; boundary={BOUNDARY}"),
                headers: Vec::new(),
                body,
            }
        }
        Protocol::Parca => {
            let series = pprof.map(|p| parca::RawProfileSeries {
                labels: Some(parca::LabelSet {
                    labels: labels
                        .iter()
                        .map(|(name, value)| parca::Label {
                            name: name.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                }),
                samples: vec![parca::RawSample {
                    raw_profile: p.to_vec(),
                }],
            });
            let message = parca::WriteRawRequest {
                tenant: String::new(),
                series: series.into_iter().collect(),
                normalized: false,
            }
            .encode_to_vec();
            Request {
                path: PARCA_WRITE_RAW_PATH.to_string(),
                content_type: "application/grpc-web+proto".to_string(),
                headers: vec![
                    ("X-Grpc-Web", "1"),
                    ("Accept", "application/grpc-web+proto"),
                ],
                body: grpc_web_frame(0, &message),
            }
        }
    }
}

/// A gRPC-Web frame: a flag byte (0 data, 0x80 trailers), the length (big-endian u32),
/// the payload.
pub fn grpc_web_frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flag);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A profile's id, the same for the same bytes and span (so a retried push that had
/// in fact arrived can be recognized), shaped as a UUID.
fn profile_id(pprof: &[u8], from: SystemTime, until: SystemTime) -> String {
    let word = |seed: u64| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        pprof.hash(&mut h);
        from.hash(&mut h);
        until.hash(&mut h);
        h.finish()
    };
    let (a, b) = (word(0x7065_7266), word(0x7269_6e67));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Why a request failed, as far as what to do next goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The store is down, slow, overloaded or briefly failing: try again later.
    Transient,
    /// The credentials or tenant were refused.
    Auth,
    /// Nothing answers this protocol at this URL (a wrong path, port or protocol).
    Route,
    /// The store refused this request (bad request, too large, a redirect): trying the
    /// same again will not help.
    Rejected,
    /// TLS failed: the certificate did not verify, or the handshake failed.
    Tls,
}

/// The store's answer, in the protocol's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The protocol's error code (Connect's name, gRPC's number as text), if any.
    pub code: Option<String>,
    /// The store's message (decoded, not yet shortened).
    pub message: String,
    /// Whether the request succeeded.
    pub ok: bool,
    /// The class of a failure.
    pub class: Class,
}

/// A failed answer and the store's `Retry-After`.
#[derive(Debug)]
pub(crate) struct AnswerWithRetry {
    pub answer: Answer,
    pub retry_after: Option<std::time::Duration>,
}

/// Reads an answer of `protocol`: HTTP status, the `grpc-status`/`grpc-message`
/// headers (gRPC-Web's trailers-only answer), `Location`, and the body.
pub(crate) fn answer(
    protocol: Protocol,
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Answer {
    let text = || String::from_utf8_lossy(body).trim().to_string();
    let http_class = http_class(status);
    if (300..400).contains(&status) {
        let to = header("location").unwrap_or_default();
        return Answer {
            status,
            code: None,
            message: format!("redirected to {to:?}"),
            ok: false,
            class: Class::Rejected,
        };
    }
    match protocol {
        Protocol::Pyroscope => {
            if status == 200 {
                // Connect answers a unary protobuf call in kind; anything else (a UI's
                // page, another RPC system) is not Pyroscope's push API.
                let ctype = header("content-type").unwrap_or_default();
                if ctype.starts_with("application/proto") {
                    return ok(status);
                }
                return Answer {
                    status,
                    code: None,
                    message: format!(
                        "the answer is not the push API's (Content-Type {ctype:?}, not application/proto)"
                    ),
                    ok: false,
                    class: Class::Route,
                };
            }
            // Connect's errors are JSON: {"code": "unavailable", "message": "..."}.
            let code = json_string_field(body, "code");
            let message = json_string_field(body, "message").unwrap_or_else(text);
            let class = code.as_deref().map_or(http_class, connect_class);
            Answer {
                status,
                code,
                message,
                ok: false,
                class,
            }
        }
        Protocol::PyroscopeIngest => {
            if (200..300).contains(&status) {
                return ok(status);
            }
            Answer {
                status,
                code: None,
                message: text(),
                ok: false,
                class: http_class,
            }
        }
        Protocol::Parca => {
            if status != 200 {
                return Answer {
                    status,
                    code: header("grpc-status"),
                    message: header("grpc-message")
                        .map(|m| percent_decode(&m))
                        .unwrap_or_else(text),
                    ok: false,
                    class: http_class,
                };
            }
            // Trailers-only answers put the status in the headers; others in the
            // body's trailer frame (flag 0x80), after the data frames.
            let (mut code, mut message) = (header("grpc-status"), header("grpc-message"));
            if code.is_none() {
                let mut rest = body;
                while rest.len() >= 5 {
                    let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
                    let Some(payload) = rest.get(5..5 + len) else {
                        break;
                    };
                    if rest[0] & 0x80 != 0 {
                        for line in String::from_utf8_lossy(payload).split("\r\n") {
                            if let Some((k, v)) = line.split_once(':') {
                                match k.trim().to_ascii_lowercase().as_str() {
                                    "grpc-status" => code = Some(v.trim().to_string()),
                                    "grpc-message" => message = Some(v.trim().to_string()),
                                    _ => {}
                                }
                            }
                        }
                    }
                    rest = &rest[5 + len..];
                }
            }
            match code.as_deref() {
                Some("0") => ok(status),
                None => Answer {
                    status,
                    code: None,
                    message: format!(
                        "the answer is not gRPC-Web (no grpc-status): {}",
                        text().chars().take(120).collect::<String>()
                    ),
                    ok: false,
                    class: Class::Route,
                },
                Some(c) => Answer {
                    status,
                    code: Some(c.to_string()),
                    message: message.map(|m| percent_decode(&m)).unwrap_or_default(),
                    ok: false,
                    class: grpc_class(c),
                },
            }
        }
    }
}

fn ok(status: u16) -> Answer {
    Answer {
        status,
        code: None,
        message: String::new(),
        ok: true,
        class: Class::Transient,
    }
}

fn http_class(status: u16) -> Class {
    match status {
        401 | 403 => Class::Auth,
        404 | 405 | 415 | 501 => Class::Route,
        408 | 425 | 429 | 500..=599 => Class::Transient,
        _ => Class::Rejected,
    }
}

/// Connect's error codes (the names of gRPC's).
fn connect_class(code: &str) -> Class {
    match code {
        "unauthenticated" | "permission_denied" => Class::Auth,
        "unimplemented" => Class::Route,
        "unavailable" | "resource_exhausted" | "deadline_exceeded" | "aborted" | "internal"
        | "unknown" | "canceled" => Class::Transient,
        _ => Class::Rejected,
    }
}

/// gRPC's status codes, by number.
fn grpc_class(code: &str) -> Class {
    match code {
        "16" | "7" => Class::Auth,
        "12" => Class::Route,
        "1" | "2" | "4" | "8" | "10" | "13" | "14" => Class::Transient,
        _ => Class::Rejected,
    }
}

/// Whether a failed check's answer still shows the store took the request as its
/// protocol's and let the credentials in: it refused the empty request as a bad one
/// (Pyroscope answers "no profiles received" with `invalid_argument`).
pub(crate) fn reached(a: &Answer) -> bool {
    a.ok || (a.class == Class::Rejected
        && (matches!(a.status, 400 | 422) || a.code.as_deref() == Some("3")))
}

/// The string value of `"key"` in a JSON object (the first occurrence as a key), with
/// its escapes decoded: enough to read the `message` and `code` of a Connect error
/// without a JSON library.
pub(crate) fn json_string_field(body: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let quoted = format!("\"{key}\"");
    let mut from = 0;
    while let Some(i) = text[from..].find(&quoted) {
        let after = &text[from + i + quoted.len()..];
        let after = after.trim_start();
        if let Some(v) = after.strip_prefix(':') {
            let v = v.trim_start();
            if let Some(s) = v.strip_prefix('"') {
                return json_unescape(s);
            }
        }
        from += i + quoted.len();
    }
    None
}

/// A JSON string's contents up to its closing quote, decoded.
fn json_unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                    out.push(c.unwrap_or('\u{fffd}'));
                }
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
}

/// gRPC's `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn endpoint(p: Protocol) -> Endpoint {
        Endpoint::new("http://127.0.0.1:1/base", p)
            .unwrap()
            .service_name("svc")
            .unwrap()
            .label("env", "prod")
            .unwrap()
    }

    #[test]
    fn pyroscope_request_is_a_push_request_with_labels_and_a_stable_id() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let r = request(&endpoint(Protocol::Pyroscope), Some(b"pprof"), t, t);
        assert_eq!(r.path, "/push.v1.PusherService/Push");
        assert_eq!(r.content_type, "application/proto");
        let m = pyroscope::PushRequest::decode(&r.body[..]).unwrap();
        let s = &m.series[0];
        let labels: Vec<_> = s.labels.iter().map(|l| (&*l.name, &*l.value)).collect();
        assert_eq!(
            labels,
            [
                ("__name__", "process_cpu"),
                ("service_name", "svc"),
                ("env", "prod")
            ]
        );
        assert_eq!(s.samples[0].raw_profile, b"pprof");
        let again = request(&endpoint(Protocol::Pyroscope), Some(b"pprof"), t, t);
        let id = |r: &Request| {
            pyroscope::PushRequest::decode(&r.body[..]).unwrap().series[0].samples[0]
                .id
                .clone()
        };
        assert_eq!(id(&r), id(&again));
        assert_eq!(id(&r).len(), 36);
        let other = request(&endpoint(Protocol::Pyroscope), Some(b"pprof2"), t, t);
        assert_ne!(id(&r), id(&other));
        // The check's request holds no series.
        let empty = request(&endpoint(Protocol::Pyroscope), None, t, t);
        assert!(pyroscope::PushRequest::decode(&empty.body[..])
            .unwrap()
            .series
            .is_empty());
    }

    #[test]
    fn ingest_request_names_the_application_with_its_labels() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let r = request(
            &endpoint(Protocol::PyroscopeIngest),
            Some(b"pprof"),
            t,
            t + Duration::from_secs(15),
        );
        assert_eq!(
            r.path,
            "/ingest?name=svc.cpu%7Benv%3Dprod%7D&from=100&until=115&format=pprof&spyName=perfring"
        );
        assert!(r.content_type.starts_with("multipart/form-data; boundary="));
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains("name=\"profile\""));
        assert!(body.contains("\r\n\r\npprof\r\n--"));
    }

    #[test]
    fn parca_request_is_one_grpc_web_frame_of_write_raw() {
        let t = SystemTime::UNIX_EPOCH;
        let r = request(&endpoint(Protocol::Parca), Some(b"pprof"), t, t);
        assert_eq!(r.body[0], 0);
        let len = u32::from_be_bytes(r.body[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, r.body.len() - 5);
        let m = parca::WriteRawRequest::decode(&r.body[5..]).unwrap();
        let labels = &m.series[0].labels.as_ref().unwrap().labels;
        assert_eq!(labels[0].value, "parca_agent_cpu");
        assert_eq!(m.series[0].samples[0].raw_profile, b"pprof");
        assert!(!m.normalized);
    }

    #[test]
    fn answers_are_classed() {
        let none = |_: &str| None;
        let a = answer(
            Protocol::Pyroscope,
            400,
            &none,
            br#"{"code":"invalid_argument","message":"no profiles \"received\""}"#,
        );
        assert_eq!(a.code.as_deref(), Some("invalid_argument"));
        assert_eq!(a.message, "no profiles \"received\"");
        assert_eq!(a.class, Class::Rejected);
        assert!(reached(&a));
        let a = answer(Protocol::Pyroscope, 200, &none, b"<html>");
        assert_eq!(a.class, Class::Route);
        let proto = |h: &str| (h == "content-type").then(|| "application/proto".to_string());
        assert!(answer(Protocol::Pyroscope, 200, &proto, b"").ok);
        let a = answer(Protocol::Pyroscope, 503, &none, b"upstream down");
        assert_eq!(
            (a.class, a.message.as_str()),
            (Class::Transient, "upstream down")
        );
        assert_eq!(
            answer(Protocol::Pyroscope, 401, &none, b"").class,
            Class::Auth
        );
        assert_eq!(
            answer(Protocol::PyroscopeIngest, 404, &none, b"").class,
            Class::Route
        );
        let loc = |h: &str| (h == "location").then(|| "https://x/".to_string());
        let a = answer(Protocol::PyroscopeIngest, 308, &loc, b"");
        assert!(a.message.contains("https://x/"), "{a:?}");
        // gRPC-Web: trailers in the body, or in the headers.
        let mut body = grpc_web_frame(0, b"");
        body.extend(grpc_web_frame(
            0x80,
            b"grpc-status: 16\r\ngrpc-message: bad%20token\r\n",
        ));
        let a = answer(Protocol::Parca, 200, &none, &body);
        assert_eq!((a.class, a.message.as_str()), (Class::Auth, "bad token"));
        let ok = answer(
            Protocol::Parca,
            200,
            &none,
            &grpc_web_frame(0x80, b"grpc-status:0\r\n"),
        );
        assert!(ok.ok);
        let hdr = |h: &str| (h == "grpc-status").then(|| "14".to_string());
        assert_eq!(
            answer(Protocol::Parca, 200, &hdr, b"").class,
            Class::Transient
        );
        assert_eq!(
            answer(Protocol::Parca, 200, &none, b"<html>").class,
            Class::Route
        );
    }

    #[test]
    fn json_strings_are_unescaped() {
        assert_eq!(
            json_string_field(br#"{"x":1, "message" : "a\nb\u0041\\"}"#, "message").as_deref(),
            Some("a\nbA\\")
        );
        assert_eq!(json_string_field(b"{}", "message"), None);
        assert_eq!(percent_decode("a%2Cb%zz"), "a,b%zz");
    }
}
