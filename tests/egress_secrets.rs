//! Secrets the jail never holds (`--secret`): inside, the variable holds a
//! placeholder; the proxy intercepts TLS to the secret's hosts with a
//! per-run authority the jail trusts, puts the value into the request
//! headers sent there, and refuses (and records) a request carrying the
//! placeholder anywhere else. The value is nowhere in the jail: not in
//! its environment, files, output, outcome, nor in its processes' memory
//! (read from the host through /proc/PID/mem).
//!
//! The hosts are TLS servers of the test's own on 127.0.0.2 and
//! 127.0.0.3, with certificates from a test authority given by
//! `--egress-ca`.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

use common::Scratch;
use tls::{descendants, memory_holds, test_pki, tls_host, token_flags, value, Host};

/// What the jail runs: requests through the proxy, then its environment
/// shown, "ready", and a wait for a line on stdin (while the host reads
/// its memory).
const JAIL: &str = r#"
import os, sys, urllib.request, urllib.error
key = os.environ["API_KEY"]
a, b = sys.argv[1], sys.argv[2]
def get(url, hdrs):
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, headers=hdrs), timeout=30)
        return f"{r.status} {r.read().decode().strip()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode().strip()}"
    except Exception as e:
        return f"failed {type(e).__name__} {e}"
print("placeholder", key)
print("bound", get(f"https://127.0.0.2:{a}/v1", {"Authorization": "Bearer " + key, "x-api-key": key}))
print("foreign", get(f"https://127.0.0.3:{b}/v1", {"Authorization": "Bearer " + key}))
print("plain", get(f"http://127.0.0.3:{b}/v1", {"x-api-key": key}))
with open("seen.txt", "w") as f:
    f.write(repr(dict(os.environ)))
    f.write(open("/proc/self/environ", "rb").read().decode(errors="replace"))
print("env", sorted(os.environ.items()))
print("ready", flush=True)
sys.stdin.readline()
"#;

#[test]
fn a_secret_goes_only_to_its_host_and_never_into_the_jail() {
    if !std::path::Path::new("/usr/bin/python3").exists() {
        common::skip(
            "a_secret_goes_only_to_its_host_and_never_into_the_jail",
            "no /usr/bin/python3",
        );
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = tls_host("127.0.0.2", config.clone());
    let b = tls_host("127.0.0.3", config);
    for who in common::users("a_secret_goes_only_to_its_host_and_never_into_the_jail") {
        let dir = Scratch::new("egress-secrets").world_writable();
        let work = dir.join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let secret = value();
        let (pa, pb) = (a.port.to_string(), b.port.to_string());
        let mut c = common::stockade(who);
        c.env("API_KEY", &secret)
            .env("OTHER_KEY", "other-0123456789abcdef0123")
            .arg("run")
            .args(["--report", &dir.arg("report.json")])
            .args(["--workdir", &work.display().to_string()])
            .args(["--allow-host", &format!("127.0.0.2:{pa}")])
            .args(["--allow-host", &format!("127.0.0.3:{pb}")])
            .args(["--secret", &format!("API_KEY:127.0.0.2:{pa}")])
            .args(["--secret", &format!("OTHER_KEY:127.0.0.3:{pb}")])
            .args(["--egress-ca", &dir.arg("ca.pem")])
            .args(["--", "/usr/bin/python3", "-c", JAIL, &pa, &pb])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            seen.push_str(&line);
            if line == "ready\n" {
                break;
            }
        }
        // The jail is alive and waits: read its processes' memory. The
        // placeholder is found there (the scan sees what the jail holds);
        // the value is not.
        let placeholder = seen
            .lines()
            .find_map(|l| l.strip_prefix("placeholder "))
            .unwrap_or_else(|| panic!("{who:?}: {seen}"))
            .to_string();
        let pids = descendants(child.id());
        let (mut scanned, mut found_placeholder) = (0, false);
        for pid in &pids {
            match memory_holds(*pid, secret.as_bytes()) {
                Some(held) => {
                    scanned += 1;
                    assert!(!held, "{who:?}: jail process {pid} holds the value");
                    found_placeholder |= memory_holds(*pid, placeholder.as_bytes()) == Some(true);
                }
                None => eprintln!("{who:?}: pid {pid}: memory not readable"),
            }
        }
        assert!(
            found_placeholder,
            "{who:?}: the scan of {pids:?} missed the placeholder"
        );
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        seen.push_str(&rest);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{who:?}: {status}\n{seen}\n{err}");
        // The jail's trust file (named after the supervisor) is gone.
        let trust = format!("stockade-ca-{}-", child.id());
        let left: Vec<_> = std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&trust))
            .collect();
        assert!(left.is_empty(), "{who:?}: {left:?}");
        assert!(scanned >= 2, "{who:?}: only {scanned} of {pids:?} read");
        let report = std::fs::read_to_string(dir.join("report.json")).unwrap();
        let files = std::fs::read_to_string(work.join("seen.txt")).unwrap();
        for (what, text) in [
            ("stdout", &seen),
            ("stderr", &err),
            ("outcome", &report),
            ("files", &files),
        ] {
            assert!(
                !text.contains(&secret),
                "{who:?}: the value is in its {what}"
            );
        }
        assert!(
            placeholder.starts_with("sk-test-") && placeholder.len() == secret.len(),
            "{who:?}: {placeholder}"
        );
        assert!(seen.contains("bound 200 ok"), "{who:?}: {seen}\n{err}");
        assert!(
            seen.contains("foreign 403") && seen.contains("placeholder of secret API_KEY"),
            "{who:?}: {seen}"
        );
        assert!(seen.contains("plain 403"), "{who:?}: {seen}");
        // The bound host got the value in both headers; the other never
        // saw a request.
        let heads = a.heads.lock().unwrap().clone();
        let last = heads.last().cloned().unwrap_or_default();
        assert!(
            last.contains(&format!("Authorization: Bearer {secret}\r\n"))
                && last
                    .to_ascii_lowercase()
                    .contains(&format!("x-api-key: {secret}\r\n"))
                && !last.contains(&placeholder),
            "{who:?}: {last}"
        );
        let other = b.heads.lock().unwrap().clone();
        assert!(
            other
                .iter()
                .all(|h| !h.contains(&secret) && !h.contains(&placeholder)),
            "{who:?}: {other:?}"
        );
        // Recorded: the refusal, and each connection (the bound host's
        // intercepted, the value's bytes counted among those sent).
        let r: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
        let conns = r["layers"]["net_namespace"]["detail"]["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conns.iter().any(|c| c["host"] == "127.0.0.2"
                && c["intercepted"] == true
                && c["verdict"] == "allowed"
                && c["sent"].as_u64().unwrap_or(0) > 0),
            "{who:?}: {conns:?}"
        );
        let denied = r["denials"].as_array().cloned().unwrap_or_default();
        assert!(
            denied.iter().any(|d| d["kind"] == "network"
                && d["host"] == "127.0.0.3"
                && d["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("secret API_KEY"))),
            "{who:?}: {denied:?}"
        );
    }
}

#[test]
fn curl_and_requests_reach_a_secret_host_with_the_value_from_a_secret_file() {
    let test = "curl_and_requests_reach_a_secret_host_with_the_value_from_a_secret_file";
    if !std::path::Path::new("/usr/bin/curl").exists() {
        common::skip(test, "no /usr/bin/curl");
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = tls_host("127.0.0.2", config);
    for who in common::users(test) {
        let dir = Scratch::new("egress-secret-file").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let secret = value();
        std::fs::write(dir.join("key"), format!("{secret}\n")).unwrap();
        let pa = a.port.to_string();
        let o = common::run(
            who,
            &token_flags(&format!("127.0.0.2:{pa}"), &dir.arg("key"), &dir.arg("ca.pem"))
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &[
                "/bin/sh",
                "-c",
                &format!(
                    "echo \"token $TOKEN\"; /usr/bin/curl -sS -H \"Authorization: Bearer $TOKEN\" https://127.0.0.2:{pa}/curl"
                ),
            ],
        );
        let (out, err) = (common::stdout(&o), common::stderr(&o));
        assert!(o.status.success(), "{who:?}: {out}\n{err}");
        assert!(
            out.ends_with("ok\n") && !out.contains(&secret) && !err.contains(&secret),
            "{who:?}: {out}\n{err}"
        );
        let heads = a.heads.lock().unwrap().clone();
        assert!(
            heads.iter().any(|h| h.starts_with("GET /curl ")
                && h.contains(&format!("Authorization: Bearer {secret}\r\n"))),
            "{who:?}: {heads:?}"
        );
        requests_client(who, &dir, &pa, &secret, &a);
        // Without --egress-ca the host's certificate does not verify: the
        // jail gets a 502 and the host no request.
        let o = common::run(
            who,
            &[
                "--allow-host",
                &format!("127.0.0.2:{pa}"),
                "--secret",
                &format!("TOKEN:127.0.0.2:{pa}"),
                "--secret-file",
                &format!("TOKEN={}", dir.arg("key")),
            ],
            &[
                "/bin/sh",
                "-c",
                &format!(
                    "/usr/bin/curl -sS -o /dev/null -w '%{{http_code}}' -H \"Authorization: Bearer $TOKEN\" https://127.0.0.2:{pa}/unverified"
                ),
            ],
        );
        assert_eq!(common::stdout(&o), "502", "{who:?}: {}", common::stderr(&o));
        let heads = a.heads.lock().unwrap().clone();
        assert!(
            !heads.iter().any(|h| h.contains("/unverified")),
            "{who:?}: {heads:?}"
        );
    }
}

/// Python's `requests` (REQUESTS_CA_BUNDLE, the proxy from the
/// environment) through interception, when the host's python3 has it.
fn requests_client(who: common::Who, dir: &Scratch, pa: &str, secret: &str, a: &Host) {
    let has = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import requests"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        common::skip(
            "curl_and_requests_reach_a_secret_host_with_the_value_from_a_secret_file",
            "no requests module for /usr/bin/python3 (its part skipped)",
        );
        return;
    }
    let py = format!(
        "import os, requests; r = requests.get('https://127.0.0.2:{pa}/requests', headers={{'x-api-key': os.environ['TOKEN']}}, timeout=30); print(r.status_code, r.text.strip())"
    );
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
        &["/usr/bin/python3", "-c", &py],
    );
    let (out, err) = (common::stdout(&o), common::stderr(&o));
    assert_eq!(out, "200 ok\n", "{who:?}: {err}");
    assert!(!err.contains(secret), "{who:?}: {err}");
    let heads = a.heads.lock().unwrap().clone();
    assert!(
        heads.iter().any(|h| h.starts_with("GET /requests ")
            && h.to_ascii_lowercase()
                .contains(&format!("x-api-key: {secret}\r\n"))),
        "{who:?}: {heads:?}"
    );
}

#[test]
fn secret_flags_that_cannot_hold_say_which() {
    let who = common::users("secret_flags_that_cannot_hold_say_which")[0];
    for (flags, env, words) in [
        (
            &["--secret", "K:api.example.com"][..],
            None,
            "--secret: K: needs an egress allowlist",
        ),
        (
            &[
                "--allow-host",
                "api.example.com",
                "--secret-file",
                "K=/etc/hostname",
            ][..],
            None,
            "--secret-file: K: no --secret K:HOST",
        ),
        (
            &[
                "--allow-host",
                "api.example.com",
                "--secret",
                "K:api.example.com",
            ][..],
            None,
            "K: not set in the environment",
        ),
        (
            &[
                "--allow-host",
                "api.example.com",
                "--secret",
                "K:api.example.com",
                "--keep-env",
                "K",
            ][..],
            Some("sk-0123456789abcdef0123"),
            "--keep-env",
        ),
        (
            &["--allow-host", "a.org", "--secret", "1K:a.org"][..],
            None,
            "not a variable name",
        ),
        (
            &["--allow-host", "a.org", "--egress-ca", "/etc/hostname"][..],
            None,
            "--egress-ca",
        ),
        (
            &[
                "--allow-host",
                "a.org",
                "--secret",
                "K:a.org",
                "--secret-body",
                "K=json",
            ][..],
            None,
            "--secret-body: \"json\" is not a media type",
        ),
        (
            &[
                "--allow-host",
                "a.org",
                "--secret-body",
                "K=application/json",
            ][..],
            None,
            "--secret-body: K: no --secret K:HOST",
        ),
    ] {
        let mut c = common::stockade(who);
        if let Some(v) = env {
            c.env("K", v);
        }
        c.arg("run").args(flags).args(["--", "/bin/true"]);
        let o = c.output().unwrap();
        let err = common::stderr(&o);
        assert!(
            !o.status.success() && err.contains(words),
            "{flags:?}: {err}"
        );
        if let Some(v) = env {
            assert!(!err.contains(v), "{flags:?}: {err}");
        }
    }
}

#[test]
fn allow_http_rules_let_only_the_requests_they_name_through() {
    let test = "allow_http_rules_let_only_the_requests_they_name_through";
    if !std::path::Path::new("/usr/bin/curl").exists() {
        common::skip(test, "no /usr/bin/curl");
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = tls_host("127.0.0.2", config);
    for who in common::users(test) {
        let dir = Scratch::new("egress-allow-http").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let pa = a.port.to_string();
        let curl =
            |args: &str| format!("/usr/bin/curl -sS -o /dev/null -w '%{{http_code}}\\n' {args}");
        let script = [
            curl(&format!("https://127.0.0.2:{pa}/v1/models?q=1")),
            curl(&format!("-X POST https://127.0.0.2:{pa}/v1/models")),
            curl(&format!("https://127.0.0.2:{pa}/v2/models")),
            curl(&format!("http://127.0.0.2:{pa}/v1/models")),
            curl(&format!(
                "-H 'Upgrade: websocket' -H 'Connection: Upgrade' https://127.0.0.2:{pa}/v1/ws"
            )),
        ]
        .join("; ");
        let o = common::run(
            who,
            &[
                "--report",
                "-",
                "--allow-host",
                &format!("127.0.0.2:{pa}"),
                "--allow-http",
                &format!("GET 127.0.0.2:{pa}/v1/*"),
                "--egress-ca",
                &dir.arg("ca.pem"),
            ],
            &["/bin/sh", "-c", &script],
        );
        let r = common::last_json(&o);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        assert_eq!(
            out,
            "200\n403\n403\n403\n403\n",
            "{who:?}: {r}\n{}",
            common::stderr(&o)
        );
        let reasons: Vec<String> = r["denials"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|d| d["reason"].as_str().unwrap_or("").to_string())
            .collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("POST /v1/models is not allowed here"))
                && reasons
                    .iter()
                    .any(|r| r.starts_with("GET /v2/models is not allowed here"))
                && reasons.iter().any(|r| r.contains("over HTTPS only"))
                && reasons.iter().any(|r| r.starts_with("an upgrade")),
            "{who:?}: {reasons:?}"
        );
        let heads = a.heads.lock().unwrap().clone();
        assert!(
            heads.iter().all(|h| h.starts_with("GET /v1/models?q=1 ")),
            "{who:?}: {heads:?}"
        );
    }
}

#[test]
fn a_session_command_sends_the_placeholder_and_the_bound_host_sees_the_value() {
    let test = "a_session_command_sends_the_placeholder_and_the_bound_host_sees_the_value";
    if !std::path::Path::new("/usr/bin/curl").exists() {
        common::skip(test, "no /usr/bin/curl");
        return;
    }
    let (ca_pem, config) = test_pki();
    let a = tls_host("127.0.0.2", config.clone());
    let b = tls_host("127.0.0.3", config);
    for who in common::users(test) {
        let dir = Scratch::new("egress-secret-session").world_writable();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let secret = value();
        let (pa, pb) = (a.port.to_string(), b.port.to_string());
        let curl = |host: &str, port: &str, path: &str| {
            format!(
                "/usr/bin/curl -sS -w ' %{{http_code}}\\n' -H \"Authorization: Bearer $API_KEY\" https://{host}:{port}/{path}"
            )
        };
        // Two commands, one after the other: the variable and a request to
        // each host (the second bound to another secret, so intercepted
        // too); the session ends at the end of its stdin.
        let requests = [
            serde_json::json!({"op": "exec", "id": "1", "command": format!("echo \"placeholder $API_KEY\"; {}", curl("127.0.0.2", &pa, "session"))}),
            serde_json::json!({"op": "exec", "id": "2", "command": format!("{}; tr '\\0' '\\n' < /proc/self/environ", curl("127.0.0.3", &pb, "foreign"))}),
        ];
        let mut c = common::stockade(who);
        c.env("API_KEY", &secret)
            .env("OTHER_KEY", "other-0123456789abcdef0123")
            .arg("session")
            .args(["--allow-host", &format!("127.0.0.2:{pa}")])
            .args(["--allow-host", &format!("127.0.0.3:{pb}")])
            .args(["--secret", &format!("API_KEY:127.0.0.2:{pa}")])
            .args(["--secret", &format!("OTHER_KEY:127.0.0.3:{pb}")])
            .args(["--egress-ca", &dir.arg("ca.pem")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut events = String::new();
        for r in &requests {
            writeln!(stdin, "{r}").unwrap();
            loop {
                let mut line = String::new();
                assert!(
                    reader.read_line(&mut line).unwrap() > 0,
                    "{who:?}: {events}"
                );
                events.push_str(&line);
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                if v["event"] == "exit" && v["id"] == r["id"] {
                    break;
                }
            }
        }
        drop(stdin);
        reader.read_to_string(&mut events).unwrap();
        let o = child.wait_with_output().unwrap();
        let err = common::stderr(&o);
        assert!(o.status.success(), "{who:?}: {events}\n{err}");
        assert!(
            !events.contains(&secret) && !err.contains(&secret),
            "{who:?}: the value left the proxy: {events}\n{err}"
        );
        let mut out = String::new();
        for line in events.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["event"] == "output" && v["stream"] == "stdout" {
                out += v["data"].as_str().unwrap_or_default();
            }
        }
        let placeholder = out
            .lines()
            .find_map(|l| l.strip_prefix("placeholder "))
            .unwrap_or_else(|| panic!("{who:?}: {events}"))
            .to_string();
        assert!(
            placeholder.starts_with("sk-test-"),
            "{who:?}: {placeholder}"
        );
        assert!(out.contains("ok\n 200\n"), "{who:?}: {out}");
        assert!(out.contains(" 403\n"), "{who:?}: {out}");
        assert!(
            out.contains(&format!("API_KEY={placeholder}\n")),
            "{who:?}: {out}"
        );
        let heads = a.heads.lock().unwrap().clone();
        assert!(
            heads.iter().any(|h| h.starts_with("GET /session ")
                && h.contains(&format!("Authorization: Bearer {secret}\r\n"))),
            "{who:?}: {heads:?}"
        );
        let other = b.heads.lock().unwrap().clone();
        assert!(
            other
                .iter()
                .all(|h| !h.contains(&secret) && !h.contains(&placeholder)),
            "{who:?}: {other:?}"
        );
    }
}
