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
