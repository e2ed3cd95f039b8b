//! What else goes through interception (`--secret`): HTTP/2 when the
//! jail's client and the host both speak it (each stream decided as an
//! HTTP/1.1 request is), request bodies of the media types a secret names
//! (`--secret-body`), a websocket upgrade, and pip against a package
//! index over TLS.
//!
//! The hosts are TLS servers of the test's own on 127.0.0.2 and
//! 127.0.0.3 (hyper's, speaking HTTP/2 or HTTP/1.1 as asked), with
//! certificates from a test authority given by `--egress-ca`.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::collections::HashMap;

use common::{Scratch, Who};
use tls::{http_host, random_hex, test_pki, token_flags, ws_host, HttpHost, Seen};

fn has(path: &str) -> bool {
    std::path::Path::new(path).exists()
}

/// curl with HTTP/2 (nghttp2), or why not.
fn curl_h2() -> Result<(), String> {
    if !has("/usr/bin/curl") {
        return Err("no /usr/bin/curl".into());
    }
    let v = std::process::Command::new("/usr/bin/curl")
        .arg("-V")
        .output()
        .map_err(|e| e.to_string())?;
    match String::from_utf8_lossy(&v.stdout).contains("HTTP2") {
        true => Ok(()),
        false => Err("/usr/bin/curl has no HTTP/2".into()),
    }
}

/// `sh -c script` in a jail run as `who` with `flags` and `--report -`:
/// the outcome, and stderr.
fn jail(who: Who, flags: &[String], script: &str) -> (serde_json::Value, String) {
    let mut f: Vec<&str> = vec!["--report", "-"];
    f.extend(flags.iter().map(String::as_str));
    let o = common::run(who, &f, &["/bin/sh", "-c", script]);
    (common::last_json(&o), common::stderr(&o))
}

fn out(r: &serde_json::Value) -> String {
    r["stdout"]["data"].as_str().unwrap_or("").to_string()
}

fn reasons(r: &serde_json::Value) -> Vec<String> {
    r["denials"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| d["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

fn seen(h: &HttpHost, path: &str) -> Vec<Seen> {
    let all = h.seen.lock().unwrap();
    all.iter().filter(|s| s.path == path).cloned().collect()
}

#[test]
fn http2_streams_get_the_value_and_are_each_checked() {
    let test = "http2_streams_get_the_value_and_are_each_checked";
    if let Err(why) = curl_h2() {
        common::skip(test, &why);
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = http_host("127.0.0.2", &config, HashMap::new());
    let b = http_host("127.0.0.3", &config, HashMap::new());
    for who in common::users(test) {
        let dir = Scratch::new("egress-h2").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let secret = format!("sk-test-{}", random_hex(24));
        std::fs::write(dir.join("key"), &secret).unwrap();
        let (pa, pb) = (a.port, b.port);
        let flags = vec![
            format!("--allow-host=127.0.0.2:{pa}"),
            format!("--allow-host=127.0.0.3:{pb}"),
            format!("--secret=TOKEN:127.0.0.2:{pa}"),
            format!("--secret-file=TOKEN={}", dir.arg("key")),
            format!("--secret=OTHER:127.0.0.3:{pb}"),
            format!("--secret-file=OTHER={}", dir.arg("key")),
            format!("--allow-http=GET,POST 127.0.0.2:{pa}/v1/*"),
            format!("--egress-ca={}", dir.arg("ca.pem")),
        ];
        let w = "-w ' %{http_code} %{http_version} %{num_connects}\\n'";
        let script = format!(
            "curl -sS --http2 {w} -H \"Authorization: Bearer $TOKEN\" \
               https://127.0.0.2:{pa}/v1/a https://127.0.0.2:{pa}/v2/b https://127.0.0.2:{pa}/v1/c; \
             curl -sS --http2 {w} -H \"x-api-key: $TOKEN\" https://127.0.0.3:{pb}/x; \
             curl -sS --http1.1 {w} -H \"Authorization: Bearer $TOKEN\" https://127.0.0.2:{pa}/v1/h1"
        );
        let (r, err) = jail(who, &flags, &script);
        let text = out(&r);
        let lines: Vec<&str> = text.lines().collect();
        // One connection, three streams: the first and the last reach the
        // host over HTTP/2, the middle one is refused on its own.
        assert_eq!(lines.len(), 10, "{who:?}: {text}\n{err}");
        assert_eq!(&lines[..2], ["ok HTTP/2.0", " 200 2 1"], "{who:?}: {text}");
        assert!(
            lines[2].contains("GET /v2/b is not allowed here") && lines[3] == " 403 2 0",
            "{who:?}: {text}"
        );
        assert_eq!(&lines[4..6], ["ok HTTP/2.0", " 200 2 0"], "{who:?}: {text}");
        assert!(
            lines[6].contains("placeholder of secret TOKEN") && lines[7] == " 403 2 1",
            "{who:?}: {text}"
        );
        // A client that offers HTTP/1.1 alone gets it, end to end.
        assert_eq!(
            &lines[8..],
            ["ok HTTP/1.1", " 200 1.1 1"],
            "{who:?}: {text}"
        );
        assert!(!text.contains(&secret) && !err.contains(&secret), "{who:?}");
        for p in ["/v1/a", "/v1/c"] {
            let s = seen(&a, p);
            assert!(
                s.last().is_some_and(|s| s.version == "HTTP/2.0"
                    && s.headers
                        .contains(&format!("authorization: Bearer {secret}\n"))),
                "{who:?}: {p}: {s:?}"
            );
        }
        assert!(seen(&a, "/v2/b").is_empty() && seen(&b, "/x").is_empty());
        let rs = reasons(&r);
        assert!(
            rs.iter()
                .any(|r| r.starts_with("GET /v2/b is not allowed here"))
                && rs.iter().any(|r| r.contains("placeholder of secret TOKEN")),
            "{who:?}: {rs:?}"
        );
        let conns = r["layers"]["net_namespace"]["detail"]["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conns.iter().any(|c| c["host"] == "127.0.0.2"
                && c["intercepted"] == true
                && c["sent"].as_u64().unwrap_or(0) > 0
                && c["received"].as_u64().unwrap_or(0) > 0),
            "{who:?}: {conns:?}"
        );
    }
    common::skip(
        test,
        "no HTTP/2 client for Python here (httpx[http2] or h2 not installed): its part skipped",
    );
}

#[test]
fn bodies_of_the_named_types_get_the_value_with_their_new_length() {
    let test = "bodies_of_the_named_types_get_the_value_with_their_new_length";
    if let Err(why) = curl_h2() {
        common::skip(test, &why);
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = http_host("127.0.0.2", &config, HashMap::new());
    for who in common::users(test) {
        let dir = Scratch::new("egress-body").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        // Short: its placeholder is longer (16 random characters at least),
        // so each body's length changes.
        let secret = format!("k{}", random_hex(5));
        std::fs::write(dir.join("key"), &secret).unwrap();
        let pa = a.port;
        let flags = vec![
            format!("--allow-host=127.0.0.2:{pa}"),
            format!("--secret=TOKEN:127.0.0.2:{pa}"),
            format!("--secret-file=TOKEN={}", dir.arg("key")),
            "--secret-body=TOKEN=application/json,application/x-www-form-urlencoded".into(),
            format!("--egress-ca={}", dir.arg("ca.pem")),
        ];
        let u = format!("https://127.0.0.2:{pa}");
        let c = "curl -sS -o /dev/null -w '%{http_code}\\n'";
        let json = "-H 'Content-Type: application/json; charset=utf-8'";
        let script = format!(
            "echo \"$TOKEN\" > /tmp/ph; \
             {c} --http1.1 {json} -d \"{{\\\"key\\\":\\\"$TOKEN\\\"}}\" {u}/h1; \
             {c} --http1.1 {json} -H 'Transfer-Encoding: chunked' -d \"{{\\\"key\\\":\\\"$TOKEN\\\"}}\" {u}/chunked; \
             {c} --http2 -d \"a=1&key=$TOKEN\" {u}/h2form; \
             {c} --http2 -H 'Content-Type: text/plain' -d \"key=$TOKEN\" {u}/plain; \
             head -c 5000000 /dev/zero | tr '\\0' a > /tmp/big; \
             {c} --http1.1 {json} --data-binary @/tmp/big {u}/big1; \
             {c} --http2 {json} --data-binary @/tmp/big {u}/big2; \
             cat /tmp/ph"
        );
        let (r, err) = jail(who, &flags, &script);
        let text = out(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            &lines[..lines.len().min(6)],
            ["200", "200", "200", "200", "413", "413"],
            "{who:?}: {text}\n{err}"
        );
        let ph = lines.last().unwrap().to_string();
        assert!(ph.len() >= 16 && ph != secret, "{who:?}: {ph}");
        for (p, want) in [
            ("/h1", format!("{{\"key\":\"{secret}\"}}")),
            ("/chunked", format!("{{\"key\":\"{secret}\"}}")),
            ("/h2form", format!("a=1&key={secret}")),
            ("/plain", format!("key={ph}")),
        ] {
            let s = seen(&a, p);
            let got = s
                .last()
                .map(|s| String::from_utf8_lossy(&s.body).into_owned());
            assert_eq!(got.as_deref(), Some(want.as_str()), "{who:?}: {p}: {s:?}");
            let s = s.last().unwrap();
            if p != "/chunked" {
                assert!(
                    s.headers
                        .contains(&format!("content-length: {}\n", want.len())),
                    "{who:?}: {p}: {s:?}"
                );
            }
        }
        assert!(seen(&a, "/big1").is_empty() && seen(&a, "/big2").is_empty());
        let rs = reasons(&r);
        assert!(
            rs.iter()
                .filter(|r| r.starts_with("a body of type application/json larger than 4 MiB"))
                .count()
                >= 1,
            "{who:?}: {rs:?}"
        );
        assert!(!text.contains(&secret) && !err.contains(&secret), "{who:?}");
    }
}

#[test]
fn a_websocket_to_a_secret_host_gets_the_value_in_its_upgrade() {
    let test = "a_websocket_to_a_secret_host_gets_the_value_in_its_upgrade";
    if !has("/usr/bin/python3") {
        common::skip(test, "no /usr/bin/python3");
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = ws_host("127.0.0.2", config);
    let client = r#"
import os, socket, ssl, sys
port, key = int(sys.argv[1]), os.environ["TOKEN"]
proxy = os.environ["HTTPS_PROXY"].split("//")[-1].rstrip("/")
h, p = proxy.rsplit(":", 1)
s = socket.create_connection((h, int(p)), timeout=30)
s.sendall(f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\n\r\n".encode())
r = b""
while not r.endswith(b"\r\n\r\n"):
    r += s.recv(1)
s = ssl.create_default_context().wrap_socket(s, server_hostname="127.0.0.2")
s.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
           f"Authorization: Bearer {key}\r\n\r\n").encode())
r = b""
while not r.endswith(b"\r\n\r\n"):
    r += s.recv(1)
print(r.split(b"\r\n")[0].decode())
msg = f"hello {key}".encode()
mask = os.urandom(4)
s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
hdr = s.recv(2)
data = b""
while len(data) < hdr[1]:
    data += s.recv(hdr[1] - len(data))
print(data.decode())
print("placeholder", key)
"#;
    for who in common::users(test) {
        let dir = Scratch::new("egress-ws").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let secret = format!("sk-test-{}", random_hex(24));
        std::fs::write(dir.join("key"), &secret).unwrap();
        let pa = a.port.to_string();
        let o = common::run(
            who,
            &token_flags(
                &format!("127.0.0.2:{pa}"),
                &dir.arg("key"),
                &dir.arg("ca.pem"),
            )
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
            &["/usr/bin/python3", "-c", client, &pa],
        );
        let (text, err) = (common::stdout(&o), common::stderr(&o));
        let ph = text
            .lines()
            .find_map(|l| l.strip_prefix("placeholder "))
            .unwrap_or_else(|| panic!("{who:?}: {text}\n{err}"))
            .to_string();
        // The upgrade's head got the value; the frames went both ways
        // untouched (the placeholder in a frame stays a placeholder).
        assert!(
            text.starts_with(&format!(
                "HTTP/1.1 101 Switching Protocols\necho: hello {ph}\n"
            )),
            "{who:?}: {text}\n{err}"
        );
        let heads = a.heads.lock().unwrap().clone();
        assert!(
            heads
                .last()
                .is_some_and(|h| h.contains(&format!("Authorization: Bearer {secret}\r\n"))),
            "{who:?}: {heads:?}"
        );
        assert!(!text.contains(&secret) && !err.contains(&secret), "{who:?}");
    }
}

/// A wheel of the package `stockade_probe` 1.0, made here.
fn wheel(dir: &Scratch) -> Vec<u8> {
    let py = r#"
import sys, zipfile, hashlib, base64
files = {
    "stockade_probe/__init__.py": "VALUE = 'installed through interception'\n",
    "stockade_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: stockade-probe\nVersion: 1.0\n",
    "stockade_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
rec = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
        d = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        rec.append(f"{n},sha256={d},{len(t.encode())}")
    rec.append("stockade_probe-1.0.dist-info/RECORD,,")
    z.writestr("stockade_probe-1.0.dist-info/RECORD", "\n".join(rec) + "\n")
"#;
    let path = dir.join("probe.whl");
    common::host_sh_ok(&format!(
        "/usr/bin/python3 -c \"$(cat <<'EOF'\n{py}\nEOF\n)\" {}",
        path.display()
    ));
    std::fs::read(path).unwrap()
}

#[test]
fn pip_installs_from_an_index_reached_through_interception() {
    let test = "pip_installs_from_an_index_reached_through_interception";
    let pip = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !pip {
        common::skip(test, "no pip for /usr/bin/python3");
        return;
    }
    let (ca_pem, config) = test_pki();
    let scratch = Scratch::new("egress-pip-wheel");
    let whl = "stockade_probe-1.0-py3-none-any.whl";
    let mut files = HashMap::new();
    files.insert(
        "/simple/stockade-probe/".to_string(),
        (
            "text/html",
            format!("<html><body><a href=\"/files/{whl}\">{whl}</a></body></html>\n").into_bytes(),
        ),
    );
    files.insert(
        format!("/files/{whl}"),
        ("application/octet-stream", wheel(&scratch)),
    );
    let a = http_host("127.0.0.2", &config, files);
    for who in common::users(test) {
        let dir = Scratch::new("egress-pip").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        std::fs::write(dir.join("key"), format!("sk-test-{}", random_hex(24))).unwrap();
        let pa = a.port;
        let flags = vec![
            format!("--allow-host=127.0.0.2:{pa}"),
            format!("--secret=TOKEN:127.0.0.2:{pa}"),
            format!("--secret-file=TOKEN={}", dir.arg("key")),
            format!("--egress-ca={}", dir.arg("ca.pem")),
        ];
        let script = format!(
            "/usr/bin/python3 -m pip install --disable-pip-version-check --no-cache-dir -q \
               --index-url https://127.0.0.2:{pa}/simple/ --target /tmp/site stockade-probe \
             && PYTHONPATH=/tmp/site /usr/bin/python3 -c 'import stockade_probe; print(stockade_probe.VALUE)'"
        );
        let (r, err) = jail(who, &flags, &script);
        assert_eq!(
            out(&r),
            "installed through interception\n",
            "{who:?}: {r}\n{err}"
        );
        let conns = r["layers"]["net_namespace"]["detail"]["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conns.iter().any(|c| c["intercepted"] == true),
            "{who:?}: {conns:?}"
        );
        assert!(!seen(&a, &format!("/files/{whl}")).is_empty());
    }
}
