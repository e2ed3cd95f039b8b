//! The egress rules (`--allow-host`): a listed name that resolves to a
//! loopback (or private, link-local, metadata) address is refused unless
//! that address, or a range holding it, is listed literally; the address
//! checked is the one connected to (one lookup per connection); and every
//! connection asked for is recorded, in the outcome (the network layer's
//! `connections`) and as a line on `--denials-fd`: the host and port, the
//! address, the bytes each way, allowed or refused, and the rule.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{Scratch, Who};

/// An HTTP server on the host's 127.0.0.1 that answers `hello` to every
/// request.
fn http_host() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    port
}

/// `curl` through the proxy (even to `localhost`, which NO_PROXY names)
/// in a jail run with `flags` as `who`, its fd 3 a file for
/// `--denials-fd`: the outcome, and the lines.
fn curl(who: Who, flags: &[String], url: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let dir = Scratch::new("egress-records").world_writable();
    let file = dir.join("lines.jsonl");
    let script = format!(
        "exec 3>'{}' && exec '{}' run --report - --denials-fd 3 {} -- /bin/sh -c \"$0\"",
        file.display(),
        common::binary().display(),
        flags.join(" ")
    );
    let mut c = std::process::Command::new("/bin/sh");
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .args([
            "-c",
            &script,
            &format!("/usr/bin/curl -sS --noproxy '' -x http://127.0.0.1:3128 {url}; echo rc=$?"),
        ]);
    if who == Who::Nobody && common::is_root() {
        use std::os::unix::process::CommandExt;
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    let o = c.output().unwrap();
    let r = common::last_json(&o);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (r, lines)
}

fn connections(r: &serde_json::Value) -> Vec<serde_json::Value> {
    r["layers"]["net_namespace"]["detail"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_name_resolving_to_loopback_is_refused_unless_its_range_is_listed() {
    let test = "a_name_resolving_to_loopback_is_refused_unless_its_range_is_listed";
    if !std::path::Path::new("/usr/bin/curl").exists() {
        common::skip(test, "no /usr/bin/curl");
        return;
    }
    let port = http_host();
    let url = format!("http://localhost:{port}/x");
    for who in common::users(test) {
        // Listed by name only: localhost is 127.0.0.1, a loopback address.
        let flags = vec![format!("--allow-host localhost:{port}")];
        let (r, lines) = curl(who, &flags, &url);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        assert!(
            out.contains(
                "refused: localhost resolves only to refused addresses: 127.0.0.1 (loopback)"
            ),
            "{who:?}: {out}"
        );
        let c = connections(&r);
        assert_eq!(c.len(), 1, "{who:?}: {c:?}");
        assert_eq!(
            (&c[0]["host"], &c[0]["port"], &c[0]["verdict"]),
            (&"localhost".into(), &port.into(), &"refused".into()),
            "{who:?}: {c:?}"
        );
        assert!(
            lines.iter().any(|l| l["kind"] == "network")
                && lines
                    .iter()
                    .any(|l| l["kind"] == "connection" && l["verdict"] == "refused"),
            "{who:?}: {lines:?}"
        );
        // Its range listed literally: reached, and recorded with the
        // address connected to, the bytes and the two entries that let it.
        let flags = vec![
            format!("--allow-host localhost:{port}"),
            format!("--allow-host 127.0.0.0/8:{port}"),
        ];
        let (r, lines) = curl(who, &flags, &url);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        assert!(out.starts_with("hello\nrc=0"), "{who:?}: {out}");
        let c = connections(&r);
        assert_eq!(c.len(), 1, "{who:?}: {c:?}");
        let c = &c[0];
        assert_eq!(
            (&c["verdict"], &c["address"], &c["rule"]),
            (
                &"allowed".into(),
                &format!("127.0.0.1:{port}").into(),
                &format!("localhost:{port} and 127.0.0.0/8:{port}").into()
            ),
            "{who:?}: {c:?}"
        );
        assert!(
            c["sent"].as_u64().unwrap() > 20 && c["received"].as_u64().unwrap() > 20,
            "{who:?}: {c:?}"
        );
        assert!(r["denials"].is_null(), "{who:?}: {}", r["denials"]);
        assert_eq!(
            lines.iter().filter(|l| l["kind"] == "connection").count(),
            1,
            "{who:?}: {lines:?}"
        );
        // An address outside the range listed stays refused.
        let flags = vec![format!("--allow-host 127.0.0.0/30:{port}")];
        let (r, _) = curl(who, &flags, &format!("http://127.0.0.9:{port}/"));
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        assert!(
            out.contains("127.0.0.9 port") && out.contains("not on the allowlist"),
            "{who:?}: {out}"
        );
    }
}

/// A DNS server on `at`:53 for the test's names: `rebind.test` is
/// 127.0.0.2 on its first A query and 127.0.0.3 on every later one,
/// `private.test` is 10.1.2.3; any other name does not exist, and no
/// name has an AAAA record. The count of `rebind.test`'s A queries.
fn dns_server(at: &str) -> std::io::Result<Arc<AtomicUsize>> {
    let sock = std::net::UdpSocket::bind((at, 53))?;
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let q = &buf[..n];
            // The question: labels from byte 12, then type and class.
            let (mut i, mut name) = (12, Vec::new());
            while i < n && q[i] != 0 {
                let l = q[i] as usize;
                name.push(String::from_utf8_lossy(&q[i + 1..(i + 1 + l).min(n)]).to_lowercase());
                i += 1 + l;
            }
            if i + 5 > n {
                continue;
            }
            let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
            let name = name.join(".");
            let ip = match (name.as_str(), qtype) {
                ("rebind.test", 1) => match count.fetch_add(1, Ordering::SeqCst) {
                    0 => Some([127, 0, 0, 2]),
                    _ => Some([127, 0, 0, 3]),
                },
                ("private.test", 1) => Some([10, 1, 2, 3]),
                _ => None,
            };
            let known = matches!(name.as_str(), "rebind.test" | "private.test");
            let mut r = q[..2].to_vec();
            r.extend_from_slice(&[0x81, if known { 0x80 } else { 0x83 }]);
            r.extend_from_slice(&[0, 1, 0, ip.is_some() as u8, 0, 0, 0, 0]);
            r.extend_from_slice(&q[12..i + 5]);
            if let Some(ip) = ip {
                r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
                r.extend_from_slice(&ip);
            }
            let _ = sock.send_to(&r, from);
        }
    });
    Ok(asked)
}

/// An HTTP server on `ip`:`port` answering `name`: how many connections
/// it took.
fn named_host(ip: &str, port: u16, name: &'static str) -> std::io::Result<Arc<AtomicUsize>> {
    let l = TcpListener::bind((ip, port))?;
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            let r = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}\n",
                name.len() + 1
            );
            let _ = c.write_all(r.as_bytes());
        }
    });
    Ok(n)
}

#[test]
fn a_name_is_connected_only_to_the_address_that_was_checked() {
    let test = "a_name_is_connected_only_to_the_address_that_was_checked";
    if !common::is_root() {
        common::skip(
            test,
            "not root: cannot serve DNS on port 53 nor bind /etc/resolv.conf",
        );
        return;
    }
    for tool in ["/usr/bin/curl", "/usr/bin/unshare", "/usr/bin/setpriv"] {
        if !std::path::Path::new(tool).exists() {
            common::skip(test, &format!("no {tool}"));
            return;
        }
    }
    let asked = match dns_server("127.0.0.153") {
        Ok(a) => a,
        Err(e) => {
            common::skip(test, &format!("cannot serve DNS on 127.0.0.153:53: {e}"));
            return;
        }
    };
    let a = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = a.local_addr().unwrap().port();
    drop(a);
    let (a, b) = (
        named_host("127.0.0.2", port, "A").unwrap(),
        named_host("127.0.0.3", port, "B").unwrap(),
    );
    let dir = Scratch::new("egress-rebind").world_writable();
    std::fs::write(
        dir.join("resolv.conf"),
        "nameserver 127.0.0.153\noptions attempts:1 timeout:5\n",
    )
    .unwrap();
    for who in common::users(test) {
        asked.store(0, Ordering::SeqCst);
        b.store(0, Ordering::SeqCst);
        let curl = |name: &str| {
            format!("/usr/bin/curl -sS --noproxy '' -x http://127.0.0.1:3128 http://{name}:{port}/; echo rc=$?")
        };
        let script = [
            curl("rebind.test"),
            curl("rebind.test"),
            curl("private.test"),
        ]
        .join("; ");
        // The supervisor (whose proxy resolves names) in a mount
        // namespace of its own, with the test's resolver configuration.
        let mut argv: Vec<String> = vec![
            "-m".into(),
            "/bin/sh".into(),
            "-c".into(),
            "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"".into(),
            dir.arg("resolv.conf"),
        ];
        if who == Who::Nobody {
            argv.extend(
                [
                    "/usr/bin/setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                ]
                .map(String::from),
            );
        }
        argv.push(common::binary().display().to_string());
        argv.extend(
            [
                "run",
                "--report",
                "-",
                "--allow-host",
                &format!("rebind.test:{port}"),
                "--allow-host",
                &format!("private.test:{port}"),
                "--allow-host",
                &format!("127.0.0.2:{port}"),
                "--",
                "/bin/sh",
                "-c",
                &script,
            ]
            .map(String::from),
        );
        let o = std::process::Command::new("/usr/bin/unshare")
            .args(&argv)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let r = common::last_json(&o);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 6, "{who:?}: {out}\n{}", common::stderr(&o));
        // The first lookup answered the address listed: connected to it.
        assert_eq!(&lines[..2], ["A", "rc=0"], "{who:?}: {out}");
        assert!(
            lines[2]
                .contains("rebind.test resolves only to refused addresses: 127.0.0.3 (loopback)"),
            "{who:?}: {out}"
        );
        assert!(
            lines[4]
                .contains("private.test resolves only to refused addresses: 10.1.2.3 (private)"),
            "{who:?}: {out}"
        );
        // One lookup a connection: the address checked is the one
        // connected to, never a later answer's.
        assert_eq!(
            b.load(Ordering::SeqCst),
            0,
            "{who:?}: the later answer was reached"
        );
        assert!(a.load(Ordering::SeqCst) >= 1, "{who:?}");
        let c = connections(&r);
        let verdicts: Vec<(&str, &str)> = c
            .iter()
            .map(|c| {
                (
                    c["verdict"].as_str().unwrap_or(""),
                    c["address"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                ("allowed", format!("127.0.0.2:{port}").as_str()),
                ("refused", ""),
                ("refused", "")
            ],
            "{who:?}: {c:?}"
        );
        assert_eq!(
            c[0]["rule"],
            format!("rebind.test:{port} and 127.0.0.2:{port}"),
            "{who:?}: {c:?}"
        );
    }
}
