//! `stockade serve`, the real binary, as root and as uid 65534: runs over
//! HTTP on a unix socket (and TCP with a token), their outcomes, bad
//! requests, the bounded queue, client disconnects, SIGTERM drains, and
//! nothing left behind.

mod common;
mod serve_util;

use std::io::Read;
use std::time::{Duration, Instant};

use common::Who;
use serde_json::json;
use serve_util::{who_name, Lines, Server, PATIENCE};

/// The process (on this host) whose command line holds `token`.
fn pid_with(token: &str) -> u32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).contains(token) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no process with {token:?}");
        std::thread::yield_now();
    }
}

/// Wait until process `pid` is gone (polling /proc: a test cannot wait on
/// a process that is not its child without a pidfd).
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + PATIENCE;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "process {pid} is still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read stream lines until a stdout chunk holds `needle`.
fn until_stdout<S: Read>(l: &mut Lines<S>, needle: &str) {
    loop {
        let line = l.until("stdout");
        if line["stdout"].as_str().unwrap_or("").contains(needle) {
            return;
        }
    }
}

#[test]
fn hello_world_and_what_was_applied() {
    for who in common::users("hello_world_and_what_was_applied") {
        let w = who_name(who);
        let s = Server::start(who, &["--max-memory", "256m"]);
        let r = s.run(&json!({
            "profile": "shell",
            "argv": ["sh", "-c", "echo hello; echo oops >&2; cat in/a.txt; cat; exit 3"],
            "stdin": "from stdin\n",
            "files": {"in/a.txt": "a file\n"},
            "limits": {"memory": "1g", "timeout": 30},
        }));
        assert_eq!(r.status, 200, "{w}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v = r.json();
        assert_eq!(v["status"], "exited", "{w}: {v}");
        assert_eq!(v["exit_code"], 3, "{w}: {v}");
        assert_eq!(
            v["stdout"]["data"], "hello\na file\nfrom stdin\n",
            "{w}: {v}"
        );
        assert_eq!(v["stderr"]["data"], "oops\n", "{w}: {v}");
        let a = &v["applied"];
        assert_eq!(a["profile"], "shell");
        assert_eq!(a["limits"]["memory"], 256u64 << 20, "{w}: clamped: {a}");
        assert_eq!(a["limits"]["timeout"], 30.0, "{w}: {a}");
        assert_eq!(a["clamped"], json!(["memory"]), "{w}: {a}");
        // No pool: a cold jail, and the answer says why.
        assert_eq!(
            a["pool"],
            json!({"hit": false, "reason": "no_pool"}),
            "{w}: {a}"
        );
        assert_eq!(v["limits"]["memory"]["limit"], 256u64 << 20, "{w}: {v}");
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
        // The health of the server, its own confinement included.
        let h = s.call("GET", "/healthz", &[], b"").json();
        assert_eq!(h["status"], "ok", "{w}: {h}");
        assert_eq!(h["confinement"]["no_new_privs"], true, "{w}: {h}");
        assert_eq!(h["confinement"]["seccomp"], "filter", "{w}: {h}");
        let m = s.call("GET", "/metrics", &[], b"").text();
        assert!(
            m.contains("stockade_runs_total{status=\"exited\"} 1"),
            "{w}: {m}"
        );
        assert!(
            m.contains("stockade_pool_misses_total{profile=\"shell\",reason=\"no_pool\"} 1"),
            "{w}: {m}"
        );
        assert_eq!(s.call("GET", "/readyz", &[], b"").status, 200);
    }
}

#[test]
fn timeout_and_memory_limit_are_outcomes() {
    for who in common::users("timeout_and_memory_limit_are_outcomes") {
        let w = who_name(who);
        let s = Server::start(who, &[]);
        let v = s
            .run(
                &json!({"profile": "shell", "argv": ["sleep", "600"], "limits": {"timeout": "1s"}}),
            )
            .json();
        assert_eq!(v["status"], "timeout", "{w}: {v}");
        let v = s
            .run(&json!({
                "profile": "shell",
                "argv": ["python3", "-c", "a = []\nwhile True:\n    a.append(bytearray(1 << 20))"],
                "limits": {"memory": "128m", "timeout": 60},
            }))
            .json();
        assert_eq!(v["status"], "memory_limit", "{w}: {v}");
        assert_eq!(v["limits"]["memory"]["limit"], 128u64 << 20, "{w}: {v}");
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
    }
}

#[test]
fn bad_requests_get_the_right_status_and_field() {
    let s = Server::start(Who::Root, &["--max-body", "64k", "--max-files", "2"]);
    let cases: Vec<(serde_json::Value, u16, &str)> = vec![
        (json!({}), 400, "argv"),
        (json!({"argv": []}), 400, "argv"),
        (json!({"argv": ["sh", 1]}), 400, "argv[1]"),
        (json!({"argv": ["sh"], "bogus": 1}), 400, "bogus"),
        (
            json!({"argv": ["sh"], "files": {"../x": "a"}}),
            400,
            "files[\"../x\"]",
        ),
        (
            json!({"argv": ["sh"], "files": {"a/../../x": "a"}}),
            400,
            "files[\"a/../../x\"]",
        ),
        (
            json!({"argv": ["sh"], "files": {"/etc/passwd": "a"}}),
            400,
            "files[\"/etc/passwd\"]",
        ),
        (
            json!({"argv": ["sh"], "files": {"a\u{0}b": "a"}}),
            400,
            "files[\"a\\u0000b\"]",
        ),
        (
            json!({"argv": ["sh"], "files": {"l": {"symlink": "/etc"}}}),
            400,
            "files[\"l\"]",
        ),
        (
            json!({"argv": ["sh"], "files": {"a": "x", "a/b": "y"}}),
            400,
            "files[\"a/b\"]",
        ),
        (
            json!({"argv": ["sh"], "limits": {"memory": "lots"}}),
            400,
            "limits.memory",
        ),
        (
            json!({"argv": ["sh"], "limits": {"timeout": 0}}),
            400,
            "limits.timeout",
        ),
        (json!({"argv": ["sh"], "env": {"A=B": "x"}}), 400, "env.A=B"),
        (json!({"argv": ["sh"], "stdin": 5}), 400, "stdin"),
        (json!({"argv": ["sh"], "profile": "strict"}), 404, "profile"),
        (
            json!({"argv": ["sh"], "files": {"a": "", "b": "", "c": ""}}),
            413,
            "",
        ),
    ];
    for (body, status, field) in cases {
        let r = s.run(&body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert!(
            e["code"].is_string() && e["message"].is_string(),
            "{body}: {e}"
        );
        if !field.is_empty() {
            assert_eq!(e["field"], field, "{body}: {e}");
            assert!(e["message"].as_str().unwrap().starts_with(field), "{e}");
        }
    }
    let r = s.call("POST", "/v1/runs", &[], b"{not json");
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!("bad_request"))
    );
    let big = json!({"argv": ["sh"], "stdin": "x".repeat(100_000)});
    let r = s.run(&big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
    let r = s.call("GET", "/v1/nothing", &[], b"");
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    let r = s.call("GET", "/v1/runs", &[], b"");
    assert_eq!(r.status, 405);
    let m = s.call("GET", "/metrics", &[], b"").text();
    assert!(
        m.contains("stockade_rejected_total{code=\"bad_request\"}"),
        "{m}"
    );
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

#[test]
fn tcp_needs_the_token() {
    let scratch = common::Scratch::new("serve-token");
    let token_file = scratch.join("token");
    std::fs::write(&token_file, "s3cret-s3cret-s3cret\n").unwrap();
    // No token, no TCP.
    let o = common::stockade(Who::Root)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--token-file"));
    let tf = token_file.to_str().unwrap();
    let s = Server::start(Who::Root, &["--listen", "127.0.0.1:0", "--token-file", tf]);
    let addr = s.tcp.clone().expect("a TCP address");
    let tcp = || std::net::TcpStream::connect(&addr).unwrap();
    let body = json!({"profile": "shell", "argv": ["echo", "hi"]}).to_string();
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-s3cret-s3cre"),
        Some("s3cret-s3cret-s3cret"),
    ] {
        let h: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        let r = serve_util::send(tcp(), "POST", "/v1/runs", &h, body.as_bytes());
        assert_eq!(r.status, 401, "{auth:?}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "unauthorized");
        let r = serve_util::send(tcp(), "GET", "/metrics", &h, b"");
        assert_eq!(r.status, 401, "{auth:?}");
    }
    let good = [("Authorization", "Bearer s3cret-s3cret-s3cret")];
    let r = serve_util::send(tcp(), "POST", "/v1/runs", &good, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["stdout"]["data"], "hi\n");
    // Probes need no token.
    assert_eq!(
        serve_util::send(tcp(), "GET", "/healthz", &[], b"").status,
        200
    );
}

/// One run slot and one queue place: a third request gets 429 with
/// Retry-After; a client that goes away kills its jail.
#[test]
fn full_queue_is_429_and_disconnect_kills_the_jail() {
    for who in common::users("full_queue_is_429_and_disconnect_kills_the_jail") {
        let w = who_name(who);
        let s = Server::start(who, &["--max-concurrent", "1", "--max-queue", "1"]);
        let token = format!("serve-disconnect-{}-{}", std::process::id(), w.len());
        let mut a = Lines::open(
            s.connect(),
            &json!({"profile": "shell", "argv": ["sh", "-c", "echo started; while :; do sleep 1; done", &token]}),
        );
        assert_eq!(a.status, 200);
        until_stdout(&mut a, "started");
        let pid = pid_with(&token);
        // Two more: one waits in the queue, the other is refused at once.
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let (tx, sock) = (tx.clone(), s.connect());
            std::thread::spawn(move || {
                let r = serve_util::send(
                    sock,
                    "POST",
                    "/v1/runs",
                    &[],
                    json!({"profile": "shell", "argv": ["echo", "queued"]})
                        .to_string()
                        .as_bytes(),
                );
                let _ = tx.send(r);
            });
        }
        let first = rx.recv_timeout(PATIENCE).expect("an answer");
        assert_eq!(first.status, 429, "{w}: {}", first.text());
        assert_eq!(first.json()["error"]["code"], "queue_full");
        assert!(
            first.header("retry-after").is_some(),
            "{w}: {:?}",
            first.headers
        );
        // The client of the running jail goes away: the jail is killed,
        // and the queued request runs.
        drop(a.into_inner());
        wait_gone(pid);
        let second = rx.recv_timeout(PATIENCE).expect("the queued answer");
        assert_eq!(second.status, 200, "{w}: {}", second.text());
        assert_eq!(second.json()["stdout"]["data"], "queued\n");
        let m = s.call("GET", "/metrics", &[], b"").text();
        assert!(
            m.contains("stockade_rejected_total{code=\"queue_full\"} 1"),
            "{w}: {m}"
        );
        assert!(
            m.contains("stockade_runs_total{status=\"signaled\"} 1"),
            "{w}: {m}"
        );
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
    }
}

/// Streaming: chunks as written, then the outcome line.
#[test]
fn ndjson_streams_chunks_then_the_outcome() {
    for who in common::users("ndjson_streams_chunks_then_the_outcome") {
        let w = who_name(who);
        let s = Server::start(who, &[]);
        let mut l = Lines::open(
            s.connect(),
            &json!({"profile": "shell", "argv": ["sh", "-c", "echo one; echo two >&2; printf '\\377'; exit 4"]}),
        );
        assert_eq!(l.status, 200);
        let (mut out, mut err, mut last) = (Vec::new(), String::new(), None);
        while let Some(line) = l.next_line() {
            if let Some(t) = line["stdout"].as_str() {
                if line["encoding"] == "base64" {
                    out.extend_from_slice(&serve_util::b64(t));
                } else {
                    out.extend_from_slice(t.as_bytes());
                }
            } else if let Some(t) = line["stderr"].as_str() {
                err.push_str(t);
            } else {
                last = Some(line);
            }
        }
        assert_eq!(out, b"one\n\xff", "{w}");
        assert!(err.contains("two\n"), "{w}: {err}");
        let o = last.expect("the outcome line");
        assert_eq!(o["status"], "exited", "{w}: {o}");
        assert_eq!(o["exit_code"], 4, "{w}: {o}");
        assert!(
            o.get("stdout").is_none(),
            "{w}: streamed, not captured: {o}"
        );
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
    }
}

/// A run sees only its own files: not another run's workdir, by its
/// jail path or by the host path under the workdir root.
#[test]
fn a_run_cannot_read_another_runs_files() {
    for who in common::users("a_run_cannot_read_another_runs_files") {
        let w = who_name(who);
        let s = Server::start(who, &[]);
        let mut a = Lines::open(
            s.connect(),
            &json!({"profile": "shell",
                    "argv": ["sh", "-c", "cat secret.txt; echo; while :; do sleep 1; done"],
                    "files": {"secret.txt": "the-secret-of-a"}}),
        );
        until_stdout(&mut a, "the-secret-of-a");
        let root = s.runs.display().to_string();
        let v = s
            .run(&json!({"profile": "shell", "argv": ["sh", "-c",
                format!("ls -a /work; cat /work/secret.txt; ls {root}; cat {root}/*/secret.txt; true")]}))
            .json();
        let out = format!("{}{}", v["stdout"]["data"], v["stderr"]["data"]);
        assert!(!out.contains("the-secret-of-a"), "{w}: {out}");
        assert!(!out.contains("secret.txt\n"), "{w}: {out}");
        drop(a);
    }
}

/// SIGTERM: new requests are refused, a run in flight finishes, the server
/// exits 0 and leaves nothing behind.
#[test]
fn sigterm_drains_in_flight_runs() {
    let mut s = Server::start(Who::Root, &["--drain-timeout", "120s"]);
    let mut a = Lines::open(
        s.connect(),
        &json!({"profile": "shell", "argv": ["sh", "-c", "echo started; read x < /dev/null; sleep 1; echo finished"]}),
    );
    until_stdout(&mut a, "started");
    s.term();
    s.wait_line("draining");
    // New runs are refused with 503, and the server is not ready.
    let r = s.run(&json!({"profile": "shell", "argv": ["echo", "late"]}));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "shutting_down");
    assert!(r.header("retry-after").is_some());
    assert_eq!(s.call("GET", "/readyz", &[], b"").status, 503);
    assert_eq!(
        s.call("GET", "/healthz", &[], b"").json()["status"],
        "draining"
    );
    until_stdout(&mut a, "finished");
    let o = a.until("status");
    assert_eq!(o["status"], "exited", "{o}");
    assert_eq!(s.wait().code(), Some(0), "{}", s.log.lock().unwrap());
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    assert!(!s.sock.exists(), "the socket is removed");
}

/// SIGTERM with a run that will not end: killed at the drain timeout, and
/// the server still exits 0.
#[test]
fn sigterm_kills_what_outlives_the_drain_timeout() {
    let mut s = Server::start(Who::Root, &["--drain-timeout", "1s"]);
    let mut a = Lines::open(
        s.connect(),
        &json!({"profile": "shell", "argv": ["sh", "-c", "trap '' TERM; echo started; while :; do sleep 1; done"]}),
    );
    until_stdout(&mut a, "started");
    s.term();
    s.wait_line("drain timeout");
    let o = a.until("status");
    assert_eq!(o["status"], "signaled", "{o}");
    assert_eq!(s.wait().code(), Some(0), "{}", s.log.lock().unwrap());
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

/// Where user namespaces are refused, runs take the fallback (a leased uid
/// when the server is root): the workdir is still theirs to read and
/// write, and is removed after.
#[test]
fn fallback_runs_use_their_workdir() {
    for who in common::users("fallback_runs_use_their_workdir") {
        let w = who_name(who);
        let s = Server::start_wrapped(&["chk_nouserns"], who, &[]);
        let v = s
            .run(&json!({
                "profile": "shell",
                "argv": ["sh", "-c", "cat in/a.txt && echo written > in/b.txt && mkdir -p d/e && cat in/b.txt && id -u"],
                "files": {"in/a.txt": "given\n"},
            }))
            .json();
        assert_eq!(v["status"], "exited", "{w}: {v}");
        assert_eq!(
            v["layers"]["user_namespace"]["state"], "unavailable",
            "{w}: {v}"
        );
        let out = v["stdout"]["data"].as_str().unwrap_or("");
        assert!(out.starts_with("given\nwritten\n"), "{w}: {v}");
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
    }
}

/// The unix socket is 0660 and belongs to --socket-group; the server
/// process itself runs with no_new_privs and a seccomp filter, as the
/// kernel reports it.
#[test]
fn socket_mode_group_and_the_servers_own_confinement() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = Server::start(Who::Root, &["--socket-group", "65534"]);
    let m = std::fs::metadata(&s.sock).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o660);
    assert_eq!(m.gid(), 65534);
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    let s = Server::start(Who::Root, &["--no-confine"]);
    let h = s.call("GET", "/healthz", &[], b"").json();
    assert_eq!(h["confinement"]["confined"], false, "{h}");
    assert_eq!(h["confinement"]["why"], "--no-confine", "{h}");
}

#[test]
fn a_kill_mode_violation_is_explained_in_the_answer() {
    for who in common::users("a_kill_mode_violation_is_explained_in_the_answer") {
        let w = who_name(who);
        let s = Server::start(who, &["--profiles", "strict"]);
        // ptrace is outside every allowlist; `strict` kills on it.
        let code = "import ctypes\nctypes.CDLL(None).syscall(101, 0, 0, 0, 0)\nprint('survived')";
        let v = s
            .run(&json!({"profile": "strict", "argv": ["python3", "-c", code]}))
            .json();
        assert_eq!(v["status"], "seccomp_violation", "{w}: {v}");
        let d = v["detail"].as_str().unwrap_or_default();
        assert!(
            d.starts_with("seccomp: ") && d.ends_with(" is not allowed: jail killed"),
            "{w}: {v}"
        );
    }
}
