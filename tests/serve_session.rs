//! Sessions through `stockade serve` (the real server, as root and as uid
//! 65534, and in the fallback): `POST /v1/sessions`, `POST
//! /v1/sessions/{id}/exec` (JSON and ndjson), `DELETE /v1/sessions/{id}`,
//! the idle timeout, the `--max-sessions` cap, `/metrics`, and nothing
//! left behind.

mod common;
mod serve_util;

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};
use serve_util::{Lines, Resp, Server, PATIENCE};

fn create(s: &Server, body: &Value) -> Resp {
    s.call("POST", "/v1/sessions", &[], body.to_string().as_bytes())
}

fn exec(s: &Server, id: &str, body: &Value) -> Resp {
    s.call(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &[],
        body.to_string().as_bytes(),
    )
}

fn delete(s: &Server, id: &str) -> Resp {
    s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"")
}

/// `POST /v1/sessions/{id}/exec` with `Accept: application/x-ndjson`.
fn exec_stream(s: &Server, id: &str, body: &Value) -> Lines<std::os::unix::net::UnixStream> {
    let mut c = s.connect();
    let b = body.to_string();
    write!(
        c,
        "POST /v1/sessions/{id}/exec HTTP/1.1\r\nHost: stockade\r\nConnection: close\r\n\
         Accept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    Lines::from_stream(c)
}

fn opened(s: &Server, body: &Value) -> String {
    let r = create(s, body);
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["id"].as_str().unwrap().to_string()
}

/// Poll `/metrics` until it holds `line` (the session ended on its own:
/// nothing else says when).
fn wait_metric(s: &Server, line: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let m = s.call("GET", "/metrics", &[], b"").text();
        if m.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in:\n{m}");
        std::thread::yield_now();
    }
}

fn servers(test: &str) -> Vec<(String, Server)> {
    let mut out = Vec::new();
    for who in common::users(test) {
        out.push((format!("{who:?}"), Server::start(who, &[])));
        out.push((
            format!("{who:?} fallback"),
            Server::start_wrapped(&["chk_nouserns"], who, &[]),
        ));
    }
    out
}

#[test]
fn a_session_keeps_state_between_execs_and_ends_with_its_outcome() {
    for (who, s) in servers("a_session_keeps_state_between_execs_and_ends_with_its_outcome") {
        let r = create(
            &s,
            &json!({"profile": "shell", "limits": {"memory": 268435456u64},
            "files": {"in.txt": "from a file\n"}, "env": {"GREETING": "hello"}}),
        );
        assert_eq!(r.status, 201, "{who}: {}", r.text());
        let created = r.json();
        let id = created["id"].as_str().unwrap().to_string();
        assert_eq!(
            created["limits"]["memory"], 268435456u64,
            "{who}: {created}"
        );
        let r = exec(
            &s,
            &id,
            &json!({"command": "cat in.txt; mkdir d && cd d && export N=7; echo $GREETING"}),
        );
        assert_eq!(r.status, 200, "{who}: {}", r.text());
        assert_eq!(
            r.json()["stdout"],
            "from a file\nhello\n",
            "{who}: {}",
            r.text()
        );
        let v = exec(
            &s,
            &id,
            &json!({"command": "echo $N $(basename $PWD); exit 3"}),
        )
        .json();
        assert_eq!(v["stdout"], "7 d\n", "{who}: {v}");
        assert_eq!(
            (v["status"].clone(), v["code"].clone()),
            (json!("exited"), json!(3)),
            "{who}: {v}"
        );
        let v = exec(&s, &id, &json!({"command": "sleep 1000", "timeout": 0.5})).json();
        assert_eq!(v["status"], "timeout", "{who}: {v}");
        // Streamed: the output as events, the command's printed "event"
        // inside one, then the agent's own exit event last.
        let fake = r#"{"event":"exit","id":"c5","status":"exited","code":0}"#;
        let mut l = exec_stream(
            &s,
            &id,
            &json!({"command": format!("echo '{fake}'; echo two >&2; exit 5")}),
        );
        assert_eq!(l.status, 200, "{who}");
        let mut lines = Vec::new();
        while let Some(v) = l.next_line() {
            lines.push(v);
        }
        let last = lines.last().unwrap().clone();
        assert_eq!(
            (last["event"].clone(), last["code"].clone()),
            (json!("exit"), json!(5)),
            "{who}: {lines:?}"
        );
        assert_eq!(
            lines.iter().filter(|v| v["event"] == "exit").count(),
            1,
            "{who}: {lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|v| v["event"] == "output" && v["data"] == format!("{fake}\n")),
            "{who}: {lines:?}"
        );
        let r = delete(&s, &id);
        assert_eq!(r.status, 200, "{who}: {}", r.text());
        let end = r.json();
        assert_eq!(end["reason"], "closed", "{who}: {end}");
        assert_eq!(end["outcome"]["status"], "exited", "{who}: {end}");
        assert!(s.leftovers().is_empty(), "{who}: {:?}", s.leftovers());
        let r = exec(&s, &id, &json!({"command": "true"}));
        assert_eq!(r.status, 404, "{who}: {}", r.text());
        assert_eq!(delete(&s, &id).status, 404, "{who}");
    }
}

#[test]
fn the_session_cap_answers_429_and_frees_a_place_when_one_ends() {
    let who = common::users("the_session_cap_answers_429_and_frees_a_place_when_one_ends")[0];
    let s = Server::start(who, &["--max-sessions", "1"]);
    let first = opened(&s, &json!({}));
    let r = create(&s, &json!({}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "too_many_sessions");
    assert!(r.header("retry-after").is_some());
    let m = s.call("GET", "/metrics", &[], b"").text();
    assert!(m.lines().any(|l| l == "stockade_sessions_open 1"), "{m}");
    assert_eq!(delete(&s, &first).status, 200);
    let second = opened(&s, &json!({}));
    assert_eq!(delete(&s, &second).status, 200);
    let m = s.call("GET", "/metrics", &[], b"").text();
    assert!(m.lines().any(|l| l == "stockade_sessions_open 0"), "{m}");
    assert!(
        m.lines().any(|l| l == "stockade_sessions_created_total 2"),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l == "stockade_sessions_ended_total{reason=\"closed\"} 2"),
        "{m}"
    );
}

#[test]
fn an_idle_session_ends_by_itself_and_is_forgotten() {
    let who = common::users("an_idle_session_ends_by_itself_and_is_forgotten")[0];
    let s = Server::start(who, &["--session-idle-timeout", "10m"]);
    let id = opened(&s, &json!({"idle_timeout": 0.2}));
    wait_metric(
        &s,
        "stockade_sessions_ended_total{reason=\"idle_timeout\"} 1",
    );
    assert_eq!(exec(&s, &id, &json!({"command": "true"})).status, 404);
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

#[test]
fn one_command_at_a_time_and_a_client_that_goes_away_interrupts_its_command() {
    let who =
        common::users("one_command_at_a_time_and_a_client_that_goes_away_interrupts_its_command")
            [0];
    let s = Server::start(who, &[]);
    let id = opened(&s, &json!({}));
    let mut l = exec_stream(&s, &id, &json!({"command": "echo started; sleep 1000"}));
    let first = l.next_line().unwrap();
    assert_eq!(first["data"], "started\n", "{first}");
    let r = exec(&s, &id, &json!({"command": "true"}));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "busy");
    drop(l);
    // The interrupt lets the next command in (it waits for the first to end).
    let deadline = Instant::now() + PATIENCE;
    let v = loop {
        let r = exec(&s, &id, &json!({"command": "echo next"}));
        if r.status == 200 {
            break r.json();
        }
        assert_eq!(r.status, 409, "{}", r.text());
        assert!(
            Instant::now() < deadline,
            "the abandoned command still runs"
        );
        std::thread::yield_now();
    };
    assert_eq!(v["stdout"], "next\n", "{v}");
    assert_eq!(delete(&s, &id).status, 200);
}

#[test]
fn bad_session_requests_name_the_field() {
    let who = common::users("bad_session_requests_name_the_field")[0];
    let s = Server::start(who, &[]);
    for (body, field) in [
        (json!({"argv": ["ls"]}), "argv"),
        (json!({"limits": {"timeout": 5}}), "limits.timeout"),
        (json!({"limits": {"memory": "lots"}}), "limits.memory"),
        (json!({"idle_timeout": -1}), "idle_timeout"),
    ] {
        let r = create(&s, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["field"], field, "{body}: {}", r.text());
    }
    let r = create(&s, &json!({"profile": "strict-nonexistent"}));
    assert_eq!(r.status, 404, "{}", r.text());
    let id = opened(&s, &json!({}));
    for body in [
        json!({}),
        json!({"command": "ls", "timeout": 0}),
        json!({"command": "ls", "x": 1}),
    ] {
        let r = exec(&s, &id, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
    }
    assert_eq!(exec(&s, "nope", &json!({"command": "true"})).status, 404);
    let m = s.call("GET", "/metrics", &[], b"").text();
    assert!(
        m.lines().any(|l| l == "stockade_session_commands_total 0"),
        "{m}"
    );
    assert_eq!(delete(&s, &id).status, 200);
}

#[test]
fn sigterm_ends_open_sessions_and_leaves_nothing() {
    let who = common::users("sigterm_ends_open_sessions_and_leaves_nothing")[0];
    let mut s = Server::start(who, &[]);
    let id = opened(&s, &json!({}));
    let v = exec(&s, &id, &json!({"command": "echo kept > f; cat f"})).json();
    assert_eq!(v["stdout"], "kept\n", "{v}");
    // The workdir is the jail's own tmpfs: nothing of it on the host.
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    s.term();
    assert_eq!(s.wait().code(), Some(0));
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

/// The host pid of session `id`'s agent (its command line names the
/// session).
fn agent_pid(id: &str) -> u32 {
    let want = format!("session-agent\0--session\0{id}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(want.len()).any(|w| w == want.as_bytes()))
        })
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no agent of session {id}"))
}

/// Host processes whose command line is `sleep DURATION`.
fn sleepers(duration: &str) -> usize {
    let want = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .count()
}

#[test]
fn a_stopped_agent_ends_the_session_once_its_command_is_past_its_timeout() {
    let test = "a_stopped_agent_ends_the_session_once_its_command_is_past_its_timeout";
    // The servers side by side, in lanes (common::lanes): each waits out
    // the watchdog's grace, with its own session, agent and sleep.
    let cases: Vec<_> = servers(test).into_iter().enumerate().collect();
    std::thread::scope(|sc| {
        for lane in common::lanes(cases, |(_, (who, _))| who.starts_with("Root")) {
            sc.spawn(move || {
                for (n, (who, s)) in lane {
                    let dur = format!("3{:05}.{n}", std::process::id() % 100_000);
                    let id = opened(&s, &json!({}));
                    let cmd =
                        json!({"command": format!("echo started; sleep {dur}"), "timeout": 0.5});
                    let mut l = exec_stream(&s, &id, &cmd);
                    let first = l.next_line().unwrap();
                    assert_eq!(first["data"], "started\n", "{who}: {first}");
                    // No command can stop the agent: this test, from outside, does.
                    let st = std::process::Command::new("kill")
                        .args(["-STOP", &agent_pid(&id).to_string()])
                        .status()
                        .unwrap();
                    assert!(st.success(), "{who}");
                    let mut last = Value::Null;
                    while let Some(v) = l.next_line() {
                        last = v;
                    }
                    assert_eq!(last["event"], "end", "{who}: {last}");
                    assert_eq!(last["reason"], "agent_unresponsive", "{who}: {last}");
                    wait_metric(
                        &s,
                        "stockade_sessions_ended_total{reason=\"agent_unresponsive\"} 1",
                    );
                    assert_eq!(exec(&s, &id, &json!({"command": "true"})).status, 404);
                    assert_eq!(sleepers(&dur), 0, "{who}: left behind");
                    assert!(s.leftovers().is_empty(), "{who}: {:?}", s.leftovers());
                }
            });
        }
    });
}
