//! A profile store on 127.0.0.1 for the push tests: HTTP/1.1, or HTTPS with a
//! throwaway CA (rcgen) and rustls; speaking Pyroscope's push API (Connect, protobuf),
//! Pyroscope's `/ingest` (multipart) or Parca's `WriteRaw` (gRPC-Web); checking basic
//! auth, a bearer token and the tenant header; decoding every profile it is sent; and
//! failing on purpose (503s, stalls) by request number, deterministically.
//!
//! The messages are defined here from the stores' `.proto` files, apart from the
//! library's own definitions, so a wrong field number on either side shows.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;

/// Pyroscope's push.v1 messages.
mod pyroscope {
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawProfileSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct LabelPair {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        #[prost(string, tag = "2")]
        pub id: String,
    }
}

/// Parca's profilestore messages.
mod parca {
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct WriteRawRequest {
        #[prost(string, tag = "1")]
        pub tenant: String,
        #[prost(message, repeated, tag = "2")]
        pub series: Vec<RawProfileSeries>,
        #[prost(bool, tag = "3")]
        pub normalized: bool,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawProfileSeries {
        #[prost(message, optional, tag = "1")]
        pub labels: Option<LabelSet>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct LabelSet {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct RawSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
    }
}

/// The part of pprof's `profile.proto` the tests read.
pub mod pprof {
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
    }

    impl Profile {
        /// Gunzips and decodes a profile; panics on anything else.
        pub fn decode_gz(bytes: &[u8]) -> Profile {
            use std::io::Read;
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(bytes)
                .read_to_end(&mut raw)
                .expect("the profile is gzipped");
            <Profile as prost::Message>::decode(&raw[..]).expect("the profile is a pprof Profile")
        }

        /// Samples (the `samples/count` value, the first).
        pub fn samples(&self) -> u64 {
            self.sample.iter().map(|s| s.value[0] as u64).sum()
        }

        /// Samples by leaf function name.
        pub fn by_leaf(&self) -> std::collections::BTreeMap<String, u64> {
            let mut out = std::collections::BTreeMap::new();
            for s in &self.sample {
                let name = s
                    .location_id
                    .first()
                    .and_then(|&l| self.location.iter().find(|x| x.id == l))
                    .and_then(|l| l.line.first())
                    .and_then(|line| self.function.iter().find(|f| f.id == line.function_id))
                    .map_or("[unknown]".to_string(), |f| {
                        self.string_table[f.name as usize].clone()
                    });
                *out.entry(name).or_default() += s.value[0] as u64;
            }
            out
        }
    }
}

/// Which protocol the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Pyroscope,
    Ingest,
    Parca,
}

/// What the store answers request number `n` (from 0), before looking at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer as the protocol does.
    None,
    /// Answer 503 without recording.
    Unavailable,
    /// Read the request, then answer nothing for this long, then close (not recorded).
    Stall(Duration),
}

/// How the store is set up.
pub struct Config {
    pub protocol: Protocol,
    pub tls: bool,
    pub basic: Option<(String, String)>,
    pub bearer: Option<String>,
    pub tenant: Option<String>,
    pub fault: fn(u64) -> Fault,
}

impl Config {
    pub fn new(protocol: Protocol) -> Config {
        Config {
            protocol,
            tls: false,
            basic: None,
            bearer: None,
            tenant: None,
            fault: |_| Fault::None,
        }
    }
}

/// One profile the store accepted.
#[derive(Debug, Clone)]
pub struct Received {
    pub labels: BTreeMap<String, String>,
    pub id: Option<String>,
    /// `/ingest`'s query parameters.
    pub query: BTreeMap<String, String>,
    pub profile: pprof::Profile,
}

/// What the store saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub received: Vec<Received>,
    pub requests: u64,
    pub unavailable: u64,
    pub stalled: u64,
    pub refused_auth: u64,
    pub empty: u64,
    /// Every request's headers, lower-cased names.
    pub headers: Vec<BTreeMap<String, String>>,
}

/// A running store; stops when dropped.
pub struct Store {
    pub port: u16,
    pub url: String,
    /// The CA's certificate (PEM), when TLS.
    pub ca_pem: Option<PathBuf>,
    pub seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl Store {
    /// Starts a store on 127.0.0.1 (an ephemeral port); `dir` holds the CA's PEM.
    pub fn start(config: Config, dir: &Path) -> Store {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let (tls, ca_pem) = if config.tls {
            let (server, ca) = tls_config(dir);
            (Some(server), Some(ca))
        } else {
            (None, None)
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let host = if tls.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        let url = format!("{scheme}://{host}:{port}");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let config = Arc::new(config);
        let counter = Arc::new(AtomicU64::new(0));
        {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (seen, config, counter, tls) =
                        (seen.clone(), config.clone(), counter.clone(), tls.clone());
                    std::thread::spawn(move || {
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                        match tls {
                            Some(tls) => {
                                let Ok(server) = rustls::ServerConnection::new(tls) else {
                                    return;
                                };
                                serve(
                                    rustls::StreamOwned::new(server, conn),
                                    &config,
                                    &seen,
                                    &counter,
                                );
                            }
                            None => serve(conn, &config, &seen, &counter),
                        }
                    });
                }
            });
        }
        Store {
            port,
            url,
            ca_pem,
            seen,
            stop,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.seen.lock().unwrap().received.clone()
    }
}

/// A throwaway CA and a certificate for localhost and 127.0.0.1 signed by it; the CA's
/// PEM written to `dir/ca.pem`.
fn tls_config(dir: &Path) -> (Arc<rustls::ServerConfig>, PathBuf) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "perfring test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (Arc::new(config), ca_path)
}

struct Request {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(r: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        path,
        headers,
        body,
    })
}

fn respond(w: &mut impl Write, status: u16, content_type: &str, extra: &str, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    );
    w.write_all(head.as_bytes())
        .and_then(|()| w.write_all(body))
        .and_then(|()| w.flush())
        .is_ok()
}

fn serve<S: Read + Write>(stream: S, config: &Config, seen: &Mutex<Seen>, counter: &AtomicU64) {
    let mut r = BufReader::new(stream);
    while let Some(req) = read_request(&mut r) {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        {
            let mut s = seen.lock().unwrap();
            s.requests += 1;
            s.headers.push(req.headers.clone());
        }
        match (config.fault)(n) {
            Fault::None => {}
            Fault::Unavailable => {
                seen.lock().unwrap().unavailable += 1;
                let body = match config.protocol {
                    Protocol::Pyroscope => {
                        br#"{"code":"unavailable","message":"test store: try later"}"#.to_vec()
                    }
                    _ => b"test store: try later".to_vec(),
                };
                if !respond(r.get_mut(), 503, "application/json", "", &body) {
                    return;
                }
                continue;
            }
            Fault::Stall(d) => {
                seen.lock().unwrap().stalled += 1;
                std::thread::sleep(d);
                return;
            }
        }
        let (status, ctype, extra, body) = handle(config, seen, &req);
        if !respond(r.get_mut(), status, &ctype, &extra, &body) {
            return;
        }
    }
}

/// Standard base64 (for the expected basic-auth header).
pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The answer to a request the fault did not take: (status, content type, extra
/// headers, body).
fn handle(config: &Config, seen: &Mutex<Seen>, req: &Request) -> (u16, String, String, Vec<u8>) {
    let denied = |why: &str| {
        seen.lock().unwrap().refused_auth += 1;
        match config.protocol {
            Protocol::Pyroscope => (
                401,
                "application/json".to_string(),
                String::new(),
                format!(r#"{{"code":"unauthenticated","message":"{why}"}}"#).into_bytes(),
            ),
            Protocol::Ingest => (
                401,
                "text/plain".to_string(),
                String::new(),
                why.as_bytes().to_vec(),
            ),
            Protocol::Parca => (
                200,
                "application/grpc-web+proto".to_string(),
                String::new(),
                grpc_trailer(&format!(
                    "grpc-status: 16\r\ngrpc-message: {}\r\n",
                    why.replace(' ', "%20")
                )),
            ),
        }
    };
    let auth = req.headers.get("authorization");
    if let Some((user, pass)) = &config.basic {
        let want = format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()));
        if auth != Some(&want) {
            return denied("invalid credentials");
        }
    }
    if let Some(token) = &config.bearer {
        if auth != Some(&format!("Bearer {token}")) {
            return denied("invalid token");
        }
    }
    if let Some(t) = &config.tenant {
        if req.headers.get("x-scope-orgid") != Some(t) {
            return denied("no org id");
        }
    }
    let not_found = (
        404,
        "text/plain".to_string(),
        String::new(),
        b"404 page not found".to_vec(),
    );
    match config.protocol {
        Protocol::Pyroscope => {
            if req.path != "/push.v1.PusherService/Push"
                || req.headers.get("content-type").map(String::as_str) != Some("application/proto")
            {
                return not_found;
            }
            let Ok(m) = pyroscope::PushRequest::decode(&req.body[..]) else {
                return (
                    400,
                    "application/json".into(),
                    String::new(),
                    br#"{"code":"invalid_argument","message":"bad protobuf"}"#.to_vec(),
                );
            };
            if m.series.is_empty() {
                seen.lock().unwrap().empty += 1;
                return (
                    400,
                    "application/json".into(),
                    String::new(),
                    br#"{"code":"invalid_argument","message":"no profiles received"}"#.to_vec(),
                );
            }
            let mut s = seen.lock().unwrap();
            for series in m.series {
                let labels: BTreeMap<String, String> = series
                    .labels
                    .into_iter()
                    .map(|l| (l.name, l.value))
                    .collect();
                for sample in series.samples {
                    s.received.push(Received {
                        labels: labels.clone(),
                        id: Some(sample.id),
                        query: BTreeMap::new(),
                        profile: pprof::Profile::decode_gz(&sample.raw_profile),
                    });
                }
            }
            (200, "application/proto".into(), String::new(), Vec::new())
        }
        Protocol::Ingest => {
            let Some(q) = req.path.strip_prefix("/ingest?") else {
                return not_found;
            };
            let query: BTreeMap<String, String> = q
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), percent_decode(v)))
                .collect();
            let ctype = req.headers.get("content-type").cloned().unwrap_or_default();
            let Some(boundary) = ctype.strip_prefix("multipart/form-data; boundary=") else {
                return (
                    400,
                    "text/plain".into(),
                    String::new(),
                    b"not multipart".to_vec(),
                );
            };
            let start = format!("--{boundary}\r\n");
            let body = &req.body;
            let head_end = find(body, b"\r\n\r\n").expect("part headers");
            assert!(body.starts_with(start.as_bytes()));
            assert!(String::from_utf8_lossy(&body[..head_end]).contains("name=\"profile\""));
            let end =
                find(body, format!("\r\n--{boundary}--").as_bytes()).expect("closing boundary");
            let profile = &body[head_end + 4..end];
            if profile.is_empty() {
                seen.lock().unwrap().empty += 1;
                return (
                    422,
                    "text/plain".into(),
                    String::new(),
                    b"empty profile".to_vec(),
                );
            }
            seen.lock().unwrap().received.push(Received {
                labels: BTreeMap::new(),
                id: None,
                query,
                profile: pprof::Profile::decode_gz(profile),
            });
            (200, "text/plain".into(), String::new(), Vec::new())
        }
        Protocol::Parca => {
            if req.path != "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"
                || !req
                    .headers
                    .get("content-type")
                    .is_some_and(|c| c.starts_with("application/grpc-web"))
            {
                return not_found;
            }
            let b = &req.body;
            assert_eq!(b[0], 0, "a data frame");
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            let m = parca::WriteRawRequest::decode(&b[5..5 + len]).expect("WriteRawRequest");
            let mut s = seen.lock().unwrap();
            if m.series.is_empty() {
                s.empty += 1;
            }
            for series in m.series {
                let labels: BTreeMap<String, String> = series
                    .labels
                    .unwrap_or_default()
                    .labels
                    .into_iter()
                    .map(|l| (l.name, l.value))
                    .collect();
                for sample in series.samples {
                    s.received.push(Received {
                        labels: labels.clone(),
                        id: None,
                        query: BTreeMap::new(),
                        profile: pprof::Profile::decode_gz(&sample.raw_profile),
                    });
                }
            }
            let mut body = grpc_frame(0, &[]);
            body.extend(grpc_trailer("grpc-status: 0\r\ngrpc-message: \r\n"));
            (
                200,
                "application/grpc-web+proto".into(),
                String::new(),
                body,
            )
        }
    }
}

fn grpc_frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn grpc_trailer(text: &str) -> Vec<u8> {
    grpc_frame(0x80, text.as_bytes())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
