//! `cargo xtask bench egress`: the latency the egress proxy adds, per
//! connection and per request, to a secret's host (intercepted: the proxy
//! ends the jail's TLS and makes its own to the host) and to an allowed
//! host (tunnelled: bytes passed on), beside the same client on the host
//! with no proxy. Printed as medians and p90s, never asserted.
//!
//! The hosts are HTTPS servers of the bench's own (the host's python3,
//! `http.server` over `ssl`) on 127.0.0.2 and 127.0.0.3, with certificates
//! from an authority made for the run (`openssl`), given to stockade with
//! `--egress-ca`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{bench, binaries};

const USAGE: &str = "usage: cargo xtask bench egress [--runs N] [--no-build] [--binary PATH]
  --runs N        connections, then requests on one connection, per case (default 200)
  --no-build      measure the static binary as it is, without building it
  --binary PATH   measure this stockade binary instead of the static build
Needs openssl and python3 on PATH, and 127.0.0.2 and 127.0.0.3 (Linux routes all of 127/8 to lo).";

#[derive(Debug)]
struct Options {
    runs: usize,
    build: bool,
    binary: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        runs: 200,
        build: true,
        binary: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag}: needs a value"))
        };
        match a.as_str() {
            "--runs" => o.runs = crate::bench_serve::positive(&value(a)?, a)?,
            "--no-build" => o.build = false,
            "--binary" => o.binary = Some(PathBuf::from(value(a)?)),
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

pub fn main(args: &[String]) -> i32 {
    bench::main_with(args, USAGE, "bench egress", parse_args, run)
}

/// The client, run on the host (no proxy) and in the jail (`HTTPS_PROXY`
/// set by stockade): `N PORT_A PORT_B CLIENT`. For each host, N fresh
/// connections with one request each, then N requests on one connection;
/// one JSON line per host with the median and p90 of each, in ms.
/// `CLIENT` `nodelay` turns Nagle's algorithm off, as curl does (Python's
/// clients do not).
const CLIENT: &str = r#"
import http.client, json, os, socket, ssl, sys, time
n, proxy = int(sys.argv[1]), os.environ.get("HTTPS_PROXY")
connect = socket.create_connection
def nodelay(*a, **k):
    s = connect(*a, **k)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
if sys.argv[4] == "nodelay":
    socket.create_connection = nodelay
ctx = ssl._create_unverified_context()
def conn(host, port):
    if proxy:
        h, p = proxy.split("//")[-1].rstrip("/").rsplit(":", 1)
        c = http.client.HTTPSConnection(h, int(p), context=ctx, timeout=30)
        c.set_tunnel(host, port)
        return c
    return http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
def get(c):
    c.request("GET", "/m", headers={"Authorization": "Bearer " + os.environ.get("TOKEN", "none")})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
def stats(t):
    t = sorted(t); return [round(t[len(t) // 2] * 1000, 3), round(t[len(t) * 9 // 10] * 1000, 3)]
for name, host, port in [("intercepted", "127.0.0.2", int(sys.argv[2])), ("tunnelled", "127.0.0.3", int(sys.argv[3]))]:
    per_conn, per_req = [], []
    for _ in range(n):
        t = time.perf_counter(); c = conn(host, port); get(c); per_conn.append(time.perf_counter() - t); c.close()
    c = conn(host, port); get(c)
    for _ in range(n):
        t = time.perf_counter(); get(c); per_req.append(time.perf_counter() - t)
    c.close()
    print(json.dumps({"host": name, "connection": stats(per_conn), "request": stats(per_req)}))
"#;

/// An HTTPS host: `ADDR CERT KEY`; prints its port, then answers every
/// GET with 200 and `ok`, keeping connections open (HTTP/1.1). Its
/// headers and body are two writes: Nagle's algorithm is off, or the
/// second would wait for the client's delayed ACK (40 ms).
const HOST: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer((sys.argv[1], 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// A host process, killed when dropped.
struct Host {
    child: Child,
    port: u16,
}

impl Host {
    fn start(addr: &str, cert: &Path, key: &Path) -> Result<Host, String> {
        let mut child = Command::new("python3")
            .args(["-c", HOST, addr])
            .arg(cert)
            .arg(key)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("python3 (the host on {addr}): {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().ok_or("no stdout")?;
        let read = BufReader::new(out).read_line(&mut line);
        let port = match (read, line.trim().parse::<u16>()) {
            (Ok(_), Ok(p)) => p,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the host on {addr} did not start: {line:?}"));
            }
        };
        Ok(Host { child, port })
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(args: &[&str], dir: &Path) -> Result<(), String> {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("openssl: {e} (install it: apt-get install openssl)"))?;
    if !o.status.success() {
        return Err(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// An authority (`ca.pem`) and a certificate for 127.0.0.2 and 127.0.0.3
/// signed by it (`host.pem`, `host.key`), made in `dir`.
fn pki(dir: &Path) -> Result<(), String> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=stockade bench CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(&ca, dir)?;
    let mut host = vec!["req", "-x509", "-days", "2", "-subj", "/CN=127.0.0.2"];
    host.extend(ec);
    host.extend([
        "-keyout",
        "host.key",
        "-out",
        "host.pem",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-addext",
        "subjectAltName=IP:127.0.0.2,IP:127.0.0.3",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
    ]);
    openssl(&host, dir)
}

/// A value of a secret's usual shape, new for each run.
fn value() -> Result<String, String> {
    let mut r = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut r))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(format!(
        "sk-bench-{}",
        r.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// One client's lines: per host, (connection [p50, p90], request [p50, p90]).
type Measured = Vec<(String, [f64; 2], [f64; 2])>;

fn measured(what: &str, o: &std::process::Output) -> Result<Measured, String> {
    let text = String::from_utf8_lossy(&o.stdout);
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v = crate::json::parse(line).map_err(|e| format!("{what}: {e}: {line}"))?;
        let pair = |k: &str| -> Option<[f64; 2]> {
            match v.get(k)? {
                crate::json::Value::Arr(a) => Some([a.first()?.as_f64()?, a.get(1)?.as_f64()?]),
                _ => None,
            }
        };
        match (
            v.get("host").and_then(|h| h.as_str()),
            pair("connection"),
            pair("request"),
        ) {
            (Some(h), Some(c), Some(r)) => rows.push((h.to_string(), c, r)),
            _ => return Err(format!("{what}: not a measurement: {line}")),
        }
    }
    if rows.len() != 2 || !o.status.success() {
        return Err(format!(
            "{what}: {} ({})\n{}",
            o.status,
            text.trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(rows)
}

fn run(opts: &Options) -> Result<(), String> {
    let root = bench::workspace_root()?;
    let bin = match (&opts.binary, opts.build) {
        (Some(p), _) => p.clone(),
        (None, true) => binaries::build_static(&root)?,
        (None, false) => binaries::static_path(&root),
    };
    let stockade = std::fs::canonicalize(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let scratch = bench::Scratch::new()?;
    let dir = scratch.path();
    pki(dir)?;
    std::fs::write(dir.join("key"), value()?).map_err(|e| format!("key: {e}"))?;
    let (cert, key) = (dir.join("host.pem"), dir.join("host.key"));
    let a = Host::start("127.0.0.2", &cert, &key)?;
    let b = Host::start("127.0.0.3", &cert, &key)?;
    let (pa, pb, n) = (
        a.port.to_string(),
        b.port.to_string(),
        opts.runs.to_string(),
    );
    let secret_host = format!("127.0.0.2:{pa}");
    let flags: Vec<String> = vec![
        "--allow-host".into(),
        secret_host.clone(),
        "--secret".into(),
        format!("TOKEN:{secret_host}"),
        "--secret-file".into(),
        format!("TOKEN={}", dir.join("key").display()),
        "--egress-ca".into(),
        dir.join("ca.pem").display().to_string(),
        "--allow-host".into(),
        format!("127.0.0.3:{pb}"),
    ];
    println!(
        "stockade bench egress: {n} connections (one request each), then {n} requests on one \
         connection, per case; ms, median and p90"
    );
    println!("note: stockade binary: {}", stockade.display());
    println!(
        "note: jail: stockade run {} -- /usr/bin/python3 -c CLIENT",
        flags.join(" ")
    );
    if let Some(busy) = bench::busy_host() {
        println!("note: {busy}");
    }
    println!();
    println!(
        "{:<12} {:<8} | {:>17} | {:>17} | {:>9} | {:>17} | {:>17} | {:>9}",
        "host",
        "client",
        "connection direct",
        "through the proxy",
        "added",
        "request direct",
        "through the proxy",
        "added"
    );
    println!("{}", "-".repeat(128));
    for client in ["default", "nodelay"] {
        let direct = Command::new("/usr/bin/python3")
            .env_remove("HTTPS_PROXY")
            .args(["-c", CLIENT, &n, &pa, &pb, client])
            .output()
            .map_err(|e| format!("python3: {e}"))?;
        let direct = measured("the client on the host", &direct)?;
        let jailed = Command::new(&stockade)
            .arg("run")
            .args(&flags)
            .args(["--", "/usr/bin/python3", "-c", CLIENT, &n, &pa, &pb, client])
            .current_dir(dir)
            .output()
            .map_err(|e| format!("{}: {e}", stockade.display()))?;
        let jailed = measured("the client in the jail", &jailed)?;
        for ((host, dc, dr), (_, jc, jr)) in direct.iter().zip(&jailed) {
            let ms = |v: [f64; 2]| format!("{:>7.3} {:>8.3}", v[0], v[1]);
            println!(
                "{host:<12} {client:<8} | {} | {} | {:>+9.3} | {} | {} | {:>+9.3}",
                ms(*dc),
                ms(*jc),
                jc[0] - dc[0],
                ms(*dr),
                ms(*jr),
                jr[0] - dr[0]
            );
        }
    }
    println!(
        "\nadded: the median through the proxy less the median direct; intercepted: the \
         secret's host (the proxy ends TLS, reads the request, puts the value in, makes its own \
         TLS to the host); tunnelled: an allowed host (CONNECT, bytes passed on)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Result<Options, String> {
        parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(a(&[]).unwrap().runs, 200);
        assert!(a(&["--runs", "0"]).unwrap_err().contains("--runs"));
        assert!(a(&["--runs"])
            .unwrap_err()
            .contains("--runs: needs a value"));
        assert!(a(&["--bogus"]).unwrap_err().contains("--bogus"));
        let o = a(&["--runs", "7", "--no-build", "--binary", "/x"]).unwrap();
        assert_eq!((o.runs, o.build), (7, false));
        assert_eq!(o.binary, Some(PathBuf::from("/x")));
        assert!(a(&["--help"]).unwrap_err().is_empty());
    }

    #[test]
    fn a_measurement_is_read_or_refused() {
        let out = |stdout: &str, code: i32| std::process::Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
        };
        let two = "{\"host\": \"intercepted\", \"connection\": [1.5, 2.0], \"request\": [0.25, 0.5]}\n\
                   {\"host\": \"tunnelled\", \"connection\": [1.0, 1.25], \"request\": [0.125, 0.2]}\n";
        let m = measured("x", &out(two, 0)).unwrap();
        assert_eq!(m[0], ("intercepted".into(), [1.5, 2.0], [0.25, 0.5]));
        assert_eq!(m[1].0, "tunnelled");
        assert!(measured("x", &out(two, 1)).is_err());
        assert!(measured("x", &out(&two[..two.find('\n').unwrap()], 0)).is_err());
        assert!(measured("x", &out("{\"host\": \"a\"}\n{}\n", 0)).is_err());
    }
}
