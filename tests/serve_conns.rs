//! `stockade serve` on TCP against clients that show no token: half-open
//! connections, heads that never end, bodies never sent, idle keep-alive
//! connections. None of them may hold the server: a request with the
//! token is still answered, with the server's open-file limit at 1024
//! (systemd's default for a service). As root and as uid 65534.

mod common;
mod serve_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::json;
use serve_util::Server;

const TOKEN: &str = "s3cret-s3cret-s3cret";

/// A server on 127.0.0.1 with a token and at most 1024 open files.
fn server(who: common::Who, extra: &[&str]) -> (Server, SocketAddr, common::Scratch) {
    let scratch = common::Scratch::new("serve-conns").world_writable();
    let tf = scratch.join("token");
    std::fs::write(&tf, TOKEN).unwrap();
    std::fs::set_permissions(&tf, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        tf.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let s = Server::start_wrapped(&["nofile_1024"], who, &args);
    let addr = s.tcp.clone().expect("a TCP address").parse().unwrap();
    (s, addr, scratch)
}

/// A thousand connections to `to` from 127.0.0.2 (another client, as the
/// server counts them), held by a Python process: half of them start a
/// head and never end it. Once it has said `held`, a line on its stdin
/// makes it wait for the server to close each one; it says `closed` then
/// (or fails: a connection still open after a minute).
const HOLDER: &str = r#"
import socket, sys
to = (sys.argv[1], int(sys.argv[2]))
socks = []
for i in range(1000):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.connect(to)
    if i % 2 == 0:
        s.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\n")
    socks.append(s)
print("held", flush=True)
sys.stdin.readline()
for s in socks:
    s.settimeout(60)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
print("closed", flush=True)
"#;

/// A request with the token on a fresh connection from 127.0.0.1; its
/// answer must come (a server that is held never answers: the read
/// times out and the test fails).
fn run_with_token(addr: SocketAddr) -> serve_util::Resp {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(serve_util::PATIENCE)).unwrap();
    let body = json!({"profile": "shell", "argv": ["echo", "hi"]}).to_string();
    serve_util::send(
        c,
        "POST",
        "/v1/runs",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        body.as_bytes(),
    )
}

/// Reads until the server closes the connection; what it sent.
fn until_closed(mut c: TcpStream) -> Vec<u8> {
    c.set_read_timeout(Some(serve_util::PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
}

#[test]
fn a_thousand_half_open_connections_do_not_hold_a_request_with_the_token() {
    for who in
        common::users("a_thousand_half_open_connections_do_not_hold_a_request_with_the_token")
    {
        // A head's deadline shorter than the default (10 s): the test
        // waits it out once the thousand are opened.
        let (s, addr, _scratch) = server(who, &["--header-timeout", "3s"]);
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                HOLDER,
                &addr.ip().to_string(),
                &addr.port().to_string(),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = std::io::BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut said, &mut line).unwrap();
        assert_eq!(line, "held\n", "{who:?}");
        let r = run_with_token(addr);
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        assert_eq!(r.json()["stdout"]["data"], "hi\n", "{who:?}: {}", r.text());
        // Each of the thousand is closed by the server: those past the
        // per-client cap at once, the others at the head's deadline.
        holder.stdin.take().unwrap().write_all(b"go\n").unwrap();
        line.clear();
        std::io::BufRead::read_line(&mut said, &mut line).unwrap();
        assert_eq!(line, "closed\n", "{who:?}");
        assert!(holder.wait().unwrap().success(), "{who:?}");
        let r = run_with_token(addr);
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        drop(s);
    }
}

#[test]
fn the_token_is_checked_before_the_body_and_slow_or_idle_connections_are_closed() {
    for who in common::users(
        "the_token_is_checked_before_the_body_and_slow_or_idle_connections_are_closed",
    ) {
        let (s, addr, _scratch) = server(who, &["--header-timeout", "1s"]);
        // A head without the token announcing a body it never sends: 401
        // at once, from the head alone.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n",
        )
        .unwrap();
        let got = String::from_utf8_lossy(&until_closed(c)).into_owned();
        assert!(got.starts_with("HTTP/1.1 401"), "{who:?}: {got}");
        // The same on a session's path.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
            .unwrap();
        let got = String::from_utf8_lossy(&until_closed(c)).into_owned();
        assert!(got.starts_with("HTTP/1.1 401"), "{who:?}: {got}");
        // A head that never ends: closed at the deadline, nothing served.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        let got = until_closed(c);
        assert!(!got.starts_with(b"HTTP/1.1 200"), "{who:?}: {got:?}");
        // A connection that says nothing at all: closed too.
        let got = until_closed(TcpStream::connect(addr).unwrap());
        assert!(!got.starts_with(b"HTTP/1.1 200"), "{who:?}: {got:?}");
        // An idle keep-alive connection: its request answered, then closed.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let got = String::from_utf8_lossy(&until_closed(c)).into_owned();
        assert!(got.starts_with("HTTP/1.1 200"), "{who:?}: {got}");
        let r = run_with_token(addr);
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        drop(s);
    }
}

#[test]
fn connection_caps_are_checked_at_start() {
    let who = common::users("connection_caps_are_checked_at_start")[0];
    for (flag, v) in [
        ("--max-connections", "0"),
        ("--max-connections-per-client", "0"),
        ("--max-connections", "x"),
        ("--header-timeout", "0"),
    ] {
        let o = common::stockade(who)
            .args(["serve", "--listen", "unix:/nonexistent/s.sock", flag, v])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{flag} {v}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{flag} {v}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{flag} {v}: {err}");
    }
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A command writing a byte at a time, as much as the output cap allows.
const BYTE_AT_A_TIME: &str = "python3 -c 'import os\nfor i in range(2 << 20): os.write(1, b\"x\")'";

#[test]
fn a_client_that_never_reads_a_stream_costs_the_server_at_most_its_output_cap() {
    for who in
        common::users("a_client_that_never_reads_a_stream_costs_the_server_at_most_its_output_cap")
    {
        let s = Server::start(who, &["--max-output", "2m", "--max-timeout", "60s"]);
        let r = s.call(
            "POST",
            "/v1/sessions",
            &[],
            json!({"profile": "shell"}).to_string().as_bytes(),
        );
        assert_eq!(r.status, 201, "{who:?}: {}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_string();
        let exec = format!("/v1/sessions/{id}/exec");
        let before = rss_kib(s.pid());
        // An ndjson exec whose answer is never read.
        let mut c = s.connect();
        let body = json!({"command": BYTE_AT_A_TIME}).to_string();
        write!(
            c,
            "POST {exec} HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // The command is over once the session takes another (409 until
        // its exit event has come).
        loop {
            let r = s.call(
                "POST",
                &exec,
                &[],
                json!({"command": "true"}).to_string().as_bytes(),
            );
            if r.status == 200 {
                break;
            }
            assert_eq!(r.status, 409, "{who:?}: {}", r.text());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let grew = rss_kib(s.pid()).saturating_sub(before);
        eprintln!("{who:?}: the server grew by {grew} KiB");
        assert!(
            grew < 16 << 10,
            "{who:?}: the server grew by {grew} KiB for 2 MiB of output never read"
        );
        drop(c);
        let r = s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"");
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
    }
}
