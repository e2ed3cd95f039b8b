//! Every number a request gives `stockade serve`, against the real server:
//! each field × each JSON type (absent, `null`, a string, a float, a
//! negative, a huge number, a boolean, an array, an object) is either cut
//! to the operator's ceiling or refused with 400 naming the field, and
//! what is applied really holds in the jail (a `null` timeout is the
//! ceiling's, not the agent's default).

mod common;
mod serve_util;

use serde_json::{json, Value};
use serve_util::{Resp, Server};

/// The ceilings of the server under test.
const CEILINGS: [&str; 12] = [
    "--max-memory",
    "64m",
    "--max-timeout",
    "2s",
    "--max-pids",
    "32",
    "--max-cpus",
    "0.5",
    "--max-output",
    "1k",
    "--session-idle-timeout",
    "30s",
];

/// Every JSON type, with values that look like numbers.
fn values() -> Vec<Value> {
    vec![
        Value::Null,
        json!("lots"),
        json!(""),
        json!("1\u{0}"),
        json!(1.5),
        json!(-1),
        json!(0),
        json!(1e300),
        serde_json::from_str("18446744073709551616").unwrap(),
        json!(u64::MAX),
        json!(true),
        json!([1]),
        json!({"n": 1}),
    ]
}

fn post(s: &Server, path: &str, body: &Value) -> Resp {
    s.call("POST", path, &[], body.to_string().as_bytes())
}

/// A 400 names `field`; anything else is a success whose applied value
/// (read by `applied`) is within `max`.
fn judge(what: &str, r: &Resp, field: &str, applied: impl Fn(&Value) -> f64, max: f64) {
    if r.status == 400 {
        assert_eq!(r.json()["error"]["field"], field, "{what}: {}", r.text());
        return;
    }
    assert!(r.status == 200 || r.status == 201, "{what}: {}", r.text());
    let got = applied(&r.json());
    assert!(
        got > 0.0 && got <= max,
        "{what}: applied {got} > {max}: {}",
        r.text()
    );
}

#[test]
fn run_limits_are_cut_to_the_ceiling_or_refused_whatever_their_type() {
    for who in common::users("run_limits_are_cut_to_the_ceiling_or_refused_whatever_their_type") {
        run_limits(&Server::start(who, &CEILINGS));
    }
}

fn run_limits(s: &Server) {
    let max = [
        ("memory", 64.0 * 1048576.0),
        ("timeout", 2.0),
        ("pids", 32.0),
        ("cpus", 0.5),
        ("max_output", 1024.0),
    ];
    for (name, ceiling) in max {
        let mut bodies: Vec<(String, Value)> = values()
            .into_iter()
            .map(|v| {
                (
                    format!("{v}"),
                    json!({"argv": ["true"], "limits": {name: v}}),
                )
            })
            .collect();
        bodies.push(("absent".into(), json!({"argv": ["true"], "limits": {}})));
        bodies.push(("no limits".into(), json!({"argv": ["true"]})));
        for (what, body) in bodies {
            let what = format!("limits.{name} = {what}");
            let r = post(s, "/v1/runs", &body);
            judge(
                &what,
                &r,
                &format!("limits.{name}"),
                |v| v["applied"]["limits"][name].as_f64().unwrap_or(-1.0),
                ceiling,
            );
            if r.status == 200 {
                assert_eq!(r.json()["status"], "exited", "{what}: {}", r.text());
            }
        }
    }
}

#[test]
fn session_fields_are_cut_to_the_ceiling_or_refused_whatever_their_type() {
    // Each user's server beside the other's: a session is a jail, and
    // each value makes one.
    let users =
        common::users("session_fields_are_cut_to_the_ceiling_or_refused_whatever_their_type");
    std::thread::scope(|sc| {
        for who in users {
            sc.spawn(move || session_fields(&Server::start(who, &CEILINGS)));
        }
    });
}

fn session_fields(s: &Server) {
    // POST /v1/sessions: idle_timeout and the session's limits.
    let create = [
        ("idle_timeout", 30.0),
        ("limits.memory", 64.0 * 1048576.0),
        ("limits.pids", 32.0),
        ("limits.cpus", 0.5),
    ];
    for (field, ceiling) in create {
        for v in values() {
            let what = format!("{field} = {v}");
            let body = match field.strip_prefix("limits.") {
                Some(l) => json!({"limits": {l: v}}),
                None => json!({field: v}),
            };
            let r = post(s, "/v1/sessions", &body);
            let path: Vec<&str> = field.split('.').collect();
            judge(
                &what,
                &r,
                field,
                |v| path.iter().fold(v, |v, k| &v[*k]).as_f64().unwrap_or(-1.0),
                ceiling,
            );
            if r.status == 201 {
                let id = r.json()["id"].as_str().unwrap().to_string();
                assert_eq!(
                    s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"")
                        .status,
                    200
                );
            }
        }
    }
    // POST /v1/sessions/{id}/exec: timeout and max_output, each checked
    // in the jail: a command that would outlive the ceiling is stopped at
    // it, output past the ceiling is cut.
    let r = post(s, "/v1/sessions", &json!({"profile": "shell"}));
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    let exec = format!("/v1/sessions/{id}/exec");
    let late = "sleep 30; echo late";
    let mut timeouts = with_each("timeout", late);
    timeouts.push(("\"1h\"".into(), json!({"command": late, "timeout": "1h"})));
    exec_each(s, &exec, "timeout", timeouts, |what, v| {
        assert_eq!(v["status"], "timeout", "{what}: {v}");
        assert_eq!(v["stdout"], "", "{what}: {v}");
    });
    let outputs = with_each("max_output", "head -c 5000 /dev/zero | tr '\\0' x");
    exec_each(s, &exec, "max_output", outputs, |what, v| {
        let out = v["stdout"].as_str().unwrap_or_default().len();
        assert!(out <= 1024, "{what}: {out} bytes: {v}");
        assert_eq!(v["truncated"], true, "{what}: {v}");
    });
    assert_eq!(
        s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"")
            .status,
        200
    );
}

/// `command` with `field` set to each of [`values`], and without it.
fn with_each(field: &str, command: &str) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = values()
        .into_iter()
        .map(|v| (format!("{v}"), json!({"command": command, field: v})))
        .collect();
    out.push(("absent".into(), json!({"command": command})));
    out
}

/// Each exec: a 400 naming `field`, or a 200 whose answer `holds`.
fn exec_each(
    s: &Server,
    exec: &str,
    field: &str,
    bodies: Vec<(String, Value)>,
    holds: impl Fn(&str, &Value),
) {
    for (what, body) in bodies {
        let what = format!("{field} = {what}");
        let r = post(s, exec, &body);
        if r.status == 400 {
            assert_eq!(r.json()["error"]["field"], field, "{what}: {}", r.text());
            continue;
        }
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        holds(&what, &r.json());
    }
}

/// A body that gives a key twice reads two ways (a proxy or client
/// library that keeps the first, serde_json's own value the last): every
/// door that takes a JSON body refuses it, 400 naming the key, before
/// anything is made, and the server answers the next request.
#[test]
fn a_key_given_twice_is_refused_at_every_door() {
    for who in common::users("a_key_given_twice_is_refused_at_every_door") {
        keys_given_twice(&Server::start(who, &CEILINGS));
    }
}

fn keys_given_twice(s: &Server) {
    let refused = |path: &str, body: &str, key: &str| {
        let r = s.call("POST", path, &[], body.as_bytes());
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            msg.starts_with(&format!(
                "body: not JSON: duplicate key \"{key}\" at line 1 column"
            )),
            "{path} {body}: {msg}"
        );
    };
    refused(
        "/v1/runs",
        r#"{"argv": ["echo", "first"], "argv": ["echo", "last"]}"#,
        "argv",
    );
    refused(
        "/v1/runs",
        r#"{"argv": ["true"], "limits": {"memory": "1g", "memory": "16m"}}"#,
        "memory",
    );
    refused(
        "/v1/runs",
        r#"{"argv": ["true"], "env": {"A": "1", "\u0041": "2"}}"#,
        "A",
    );
    refused(
        "/v1/sessions",
        r#"{"profile": "shell", "profile": "python"}"#,
        "profile",
    );
    let r = post(s, "/v1/sessions", &json!({"profile": "shell"}));
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    refused(
        &format!("/v1/sessions/{id}/exec"),
        r#"{"command": "touch first", "command": "touch last"}"#,
        "command",
    );
    // Neither command ran.
    let r = post(
        s,
        &format!("/v1/sessions/{id}/exec"),
        &json!({"command": "ls -A; echo ok"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["stdout"], "ok\n", "{}", r.text());
    assert_eq!(
        s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"")
            .status,
        200
    );
    let r = post(s, "/v1/runs", &json!({"argv": ["echo", "alive"]}));
    assert_eq!(r.json()["stdout"]["data"], "alive\n", "{}", r.text());
}
