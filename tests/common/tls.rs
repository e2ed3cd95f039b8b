//! The TLS hosts of the egress tests: a test authority, and servers of the
//! test's own on 127.0.0.0/8 that keep what they were sent; for the tests
//! of secrets, a value of the usual shape and a scan of a jail's
//! processes' memory from the host.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The test's authority (its PEM) and a server certificate for
/// 127.0.0.2 and 127.0.0.3 (no ALPN).
pub fn test_pki() -> (String, Arc<rustls::ServerConfig>) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.2".into(), "127.0.0.3".into()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    (ca.pem(), Arc::new(config))
}

/// A TLS server on `ip` that answers every request `200 ok` (never
/// echoing it) and keeps each request head it was sent (HTTP/1.1 only).
pub struct Host {
    pub port: u16,
    pub heads: Arc<Mutex<Vec<String>>>,
}

pub fn tls_host(ip: &str, config: Arc<rustls::ServerConfig>) -> Host {
    raw_host(ip, config, |s, head| {
        let _ = head;
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
    })
}

type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// A TLS server on `ip` whose connections each read one request head,
/// keep it, and hand the stream to `then`.
fn raw_host(ip: &str, config: Arc<rustls::ServerConfig>, then: fn(&mut Tls, &str)) -> Host {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming().flatten() {
            let (config, heads) = (config.clone(), h.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut s = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                heads.lock().unwrap().push(head.clone());
                then(&mut s, &head);
                let _ = s.flush();
                s.conn.send_close_notify();
                let _ = s.flush();
            });
        }
    });
    Host { port, heads }
}

/// A websocket server on `ip`: it answers the upgrade (its accept key is
/// not computed: the test's client does not check it), then echoes one
/// text frame back as `echo: …`, and keeps the head and the frame.
pub fn ws_host(ip: &str, config: Arc<rustls::ServerConfig>) -> Host {
    raw_host(ip, config, |s, _| {
        let _ = s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        );
        let _ = s.flush();
        let mut hdr = [0u8; 2];
        if s.read_exact(&mut hdr).is_err() || hdr[1] & 0x80 == 0 {
            return;
        }
        let len = match hdr[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                let _ = s.read_exact(&mut l);
                u16::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut mask = [0u8; 4];
        let mut data = vec![0u8; len];
        if s.read_exact(&mut mask).is_err() || s.read_exact(&mut data).is_err() {
            return;
        }
        for (i, b) in data.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        let mut reply = b"echo: ".to_vec();
        reply.extend_from_slice(&data);
        let mut frame = vec![0x81];
        match reply.len() {
            n if n < 126 => frame.push(n as u8),
            n => {
                frame.push(126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        frame.extend_from_slice(&reply);
        let _ = s.write_all(&frame);
    })
}

/// One request as an HTTP host saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub version: String,
    pub method: String,
    pub path: String,
    /// `name: value` lines, names in lower case.
    pub headers: String,
    pub body: Vec<u8>,
}

/// An HTTPS server on `ip` by hyper, speaking HTTP/2 or HTTP/1.1 as its
/// client chooses (ALPN): each path of `files` answered with its type and
/// bytes, any other with `ok VERSION`; each request kept.
pub struct HttpHost {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

pub fn http_host(
    ip: &str,
    config: &rustls::ServerConfig,
    files: HashMap<String, (&'static str, Vec<u8>)>,
) -> HttpHost {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let mut config = config.clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind((ip, 0)).unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (kept, files) = (seen.clone(), Arc::new(files));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            while let Ok((tcp, _)) = l.accept().await {
                let _ = tcp.set_nodelay(true);
                let (acceptor, kept, files) = (acceptor.clone(), kept.clone(), files.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    let service = hyper::service::service_fn(move |req| {
                        answer(req, kept.clone(), files.clone())
                    });
                    let io = TokioIo::new(tls);
                    let _ = match h2 {
                        true => {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, service)
                                .await
                        }
                        false => {
                            hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await
                        }
                    };
                });
            }
        });
    });
    HttpHost { port, seen }
}

type Files = Arc<HashMap<String, (&'static str, Vec<u8>)>>;

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    kept: Arc<Mutex<Vec<Seen>>>,
    files: Files,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, hyper::Error> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    let mut headers = String::new();
    for (n, v) in &parts.headers {
        headers.push_str(&format!(
            "{}: {}\n",
            n,
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    let version = format!("{:?}", parts.version);
    let path = parts.uri.path().to_string();
    kept.lock().unwrap().push(Seen {
        version: version.clone(),
        method: parts.method.to_string(),
        path: path.clone(),
        headers,
        body,
    });
    let (ct, bytes) = match files.get(&path) {
        Some((ct, b)) => (*ct, b.clone()),
        None => ("text/plain", format!("ok {version}\n").into_bytes()),
    };
    let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(bytes)));
    r.headers_mut()
        .insert("content-type", hyper::header::HeaderValue::from_static(ct));
    Ok(r)
}

/// `stockade run` flags that allow `host` (`IP:PORT`) and bind the secret
/// TOKEN, read from the file `key`, to it, trusting the test authority's
/// certificate in the file `ca`.
pub fn token_flags(host: &str, key: &str, ca: &str) -> Vec<String> {
    let (secret, file) = (format!("TOKEN:{host}"), format!("TOKEN={key}"));
    [
        "--allow-host",
        host,
        "--secret",
        &secret,
        "--secret-file",
        &file,
        "--egress-ca",
        ca,
    ]
    .map(String::from)
    .to_vec()
}

/// `n` random bytes as hex, new for each call.
pub fn random_hex(n: usize) -> String {
    let mut r = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut r)
        .unwrap();
    r.iter().map(|b| format!("{b:02x}")).collect()
}

/// A value of the usual shape, new for each run.
pub fn value() -> String {
    format!("sk-test-{}", random_hex(24))
}

/// The pids below `root` (its descendants), from /proc.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        if let Some(pp) = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.push((pid, pp));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for (c, _) in parent.iter().filter(|(_, pp)| *pp == p) {
            out.push(*c);
            todo.push(*c);
        }
    }
    out
}

/// Whether `needle` is in any readable mapping of `pid`'s memory, or in
/// its environ or cmdline; None when its memory cannot be read.
pub fn memory_holds(pid: u32, needle: &[u8]) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let find = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    let mut read_any = false;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.read_exact_at(&mut buf, a).is_ok() {
            read_any = true;
            if find(&buf) {
                return Some(true);
            }
        }
    }
    for f in ["environ", "cmdline"] {
        if let Ok(b) = std::fs::read(format!("/proc/{pid}/{f}")) {
            if find(&b) {
                return Some(true);
            }
        }
    }
    read_any.then_some(false)
}
