//! For the tests of secrets (`--secret`): TLS servers of the test's own on
//! 127.0.0.0/8 with certificates from a test authority (given to stockade
//! by `--egress-ca`), a value of the usual shape, and a scan of a jail's
//! processes' memory from the host.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS server on `ip` that answers every request `200 ok` (never
/// echoing it) and keeps each request head it was sent.
pub struct Host {
    pub port: u16,
    pub heads: Arc<Mutex<Vec<String>>>,
}

/// The test's authority (its PEM) and a server certificate for both hosts.
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

pub fn tls_host(ip: &str, config: Arc<rustls::ServerConfig>) -> Host {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming().flatten() {
            let (config, heads) = (config.clone(), h.clone());
            std::thread::spawn(move || serve(tcp, config, heads));
        }
    });
    Host { port, heads }
}

fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, heads: Arc<Mutex<Vec<String>>>) {
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
    heads
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.flush();
}

/// A value of the usual shape, new for each run.
pub fn value() -> String {
    let mut r = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut r)
        .unwrap();
    let tail: String = r.iter().map(|b| format!("{b:02x}")).collect();
    format!("sk-test-{tail}")
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
