//! docs/openapi.json against the real server: every documented path,
//! method and status is produced for real, and every answer validates
//! against the schema documented for its status and content type (the
//! schemas forbid undocumented fields). The outcome part of `RunResult`
//! is kept equal to src/outcome.schema.json.

mod common;
mod serve_util;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use common::Who;
use serde_json::{json, Value};
use serve_util::{Lines, Resp, Server};

const TOKEN: &str = "openapi-test-token-0123456789";

struct Spec {
    doc: Value,
    /// (path, method, status, content type) produced so far.
    seen: BTreeSet<(String, String, u16, String)>,
}

impl Spec {
    fn load() -> Spec {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
                .expect("docs/openapi.json");
        Spec {
            doc: serde_json::from_str(&text).expect("openapi.json is JSON"),
            seen: BTreeSet::new(),
        }
    }

    fn resolve<'a>(&'a self, s: &'a Value) -> &'a Value {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let ptr = r.strip_prefix('#').expect("local $ref");
                self.resolve(self.doc.pointer(ptr).unwrap_or_else(|| panic!("$ref {r}")))
            }
            None => s,
        }
    }

    /// The documented response for an answer; panics when undocumented.
    fn response(&self, path: &str, method: &str, status: u16) -> &Value {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        let r = &op["responses"][status.to_string()];
        assert!(
            r.is_object(),
            "{method} {path} → {status} is not documented"
        );
        self.resolve(r)
    }

    /// Check an answer against the document and record it.
    fn check(&mut self, path: &str, method: &str, r: &Resp) {
        let ct = r
            .header("content-type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap()
            .trim()
            .to_string();
        let doc = self.response(path, method, r.status);
        let schema = doc["content"][&ct]["schema"].clone();
        assert!(
            schema.is_object(),
            "{method} {path} → {}: content type {ct:?} is not documented",
            r.status
        );
        for h in doc["headers"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
        {
            assert!(
                r.header(h).is_some(),
                "{method} {path} → {}: header {h} missing",
                r.status
            );
        }
        match ct.as_str() {
            "application/json" => self.validate(&schema, &r.json(), "$"),
            "text/plain" => assert!(!r.body.is_empty()),
            other => panic!("unexpected content type {other}"),
        }
        self.seen.insert((path.into(), method.into(), r.status, ct));
    }

    fn validate(&self, schema: &Value, v: &Value, at: &str) {
        if let Err(e) = self.valid(schema, v, at) {
            panic!("{e}\nvalue: {v}");
        }
    }

    /// A JSON Schema validator for the keywords the document uses (any
    /// other keyword is an error, so nothing is skipped silently).
    fn valid(&self, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
        let s = self.resolve(schema);
        let Some(obj) = s.as_object() else {
            return Err(format!("{at}: schema is not an object: {s}"));
        };
        for (k, kv) in obj {
            match k.as_str() {
                "description" | "title" | "minItems" | "exclusiveMinimum" => {}
                "type" => {
                    let types: Vec<&str> = match kv {
                        Value::String(t) => vec![t],
                        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                        _ => return Err(format!("{at}: bad type {kv}")),
                    };
                    if !types.iter().any(|t| type_is(t, v)) {
                        return Err(format!("{at}: {v} is not {types:?}"));
                    }
                }
                "enum" => {
                    if !kv.as_array().unwrap().contains(v) {
                        return Err(format!("{at}: {v} not in {kv}"));
                    }
                }
                "const" if kv != v => return Err(format!("{at}: {v} is not {kv}")),
                "const" => {}
                "minimum" | "maximum" => {
                    if let (Some(x), Some(lim)) = (v.as_f64(), kv.as_f64()) {
                        if (k == "minimum" && x < lim) || (k == "maximum" && x > lim) {
                            return Err(format!("{at}: {x} outside {k} {lim}"));
                        }
                    }
                }
                "required" => {
                    for r in kv.as_array().unwrap() {
                        if v.is_object() && v.get(r.as_str().unwrap()).is_none() {
                            return Err(format!("{at}: required {r} missing"));
                        }
                    }
                }
                "properties" | "additionalProperties" | "propertyNames" => {
                    if let Some(m) = v.as_object() {
                        self.valid_object(obj, m, at)?;
                    }
                }
                "items" => {
                    for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                        self.valid(kv, x, &format!("{at}[{i}]"))?;
                    }
                }
                "oneOf" => {
                    let ok = kv
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|s| self.valid(s, v, at).is_ok())
                        .count();
                    if ok != 1 {
                        return Err(format!("{at}: {ok} branches of oneOf match"));
                    }
                }
                "pattern" => {
                    let text = v.as_str().unwrap_or_default();
                    if v.is_string() && !class_repeat(kv.as_str().unwrap_or_default(), text)? {
                        return Err(format!("{at}: {v} does not match {kv}"));
                    }
                }
                "$ref" => {}
                other => {
                    return Err(format!(
                        "{at}: the test's validator does not know {other:?}"
                    ))
                }
            }
        }
        Ok(())
    }

    fn valid_object(
        &self,
        s: &serde_json::Map<String, Value>,
        m: &serde_json::Map<String, Value>,
        at: &str,
    ) -> Result<(), String> {
        let props = s.get("properties").and_then(Value::as_object);
        for (k, x) in m {
            let here = format!("{at}.{k}");
            if let Some(names) = s.get("propertyNames") {
                self.valid(names, &json!(k), &here)?;
            }
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => self.valid(ps, x, &here)?,
                (None, Some(Value::Bool(false))) => return Err(format!("{here}: not documented")),
                (None, Some(ap)) if ap.is_object() => self.valid(ap, x, &here)?,
                (None, _) => {}
            }
        }
        Ok(())
    }
}

/// Whether `text` matches `pattern`, of the one form the document uses:
/// `^[CLASS]{N}$`, CLASS of characters and `a-z` ranges.
fn class_repeat(pattern: &str, text: &str) -> Result<bool, String> {
    let unknown = || format!("the test's validator does not know the pattern {pattern:?}");
    let body = pattern
        .strip_prefix("^[")
        .and_then(|p| p.strip_suffix("}$"))
        .ok_or_else(unknown)?;
    let (class, n) = body.split_once("]{").ok_or_else(unknown)?;
    let n: usize = n.parse().map_err(|_| unknown())?;
    let class: Vec<char> = class.chars().collect();
    let in_class = |c: char| {
        let mut i = 0;
        while i < class.len() {
            if i + 2 < class.len() && class[i + 1] == '-' {
                if (class[i]..=class[i + 2]).contains(&c) {
                    return true;
                }
                i += 3;
            } else {
                if class[i] == c {
                    return true;
                }
                i += 1;
            }
        }
        false
    };
    Ok(text.chars().count() == n && text.chars().all(in_class))
}

/// The one child process of `pid` (a server's spawner: the jails'
/// supervisors are the spawner's children, not the server's).
fn only_child(pid: u32) -> u32 {
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let kids: Vec<u32> = kids
        .split_whitespace()
        .map(|k| k.parse().unwrap())
        .collect();
    assert_eq!(kids.len(), 1, "children of the server: {kids:?}");
    kids[0]
}

/// Wait until `pid` has exited (a zombie or reaped): its fds are closed.
fn wait_exited(pid: u32) {
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            Ok(st) if st.rsplit(')').next().unwrap().trim_start().starts_with('Z') => return,
            Ok(_) => std::thread::yield_now(),
        }
    }
}

fn type_is(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

#[test]
fn outcome_copy_matches_the_outcome_schema() {
    let spec = Spec::load();
    let outcome: Value = serde_json::from_str(include_str!("../src/outcome.schema.json")).unwrap();
    let rr = &spec.doc["components"]["schemas"]["RunResult"];
    let mut props = rr["properties"].as_object().unwrap().clone();
    props.remove("applied");
    props.remove("workspace");
    assert_eq!(
        Value::Object(props),
        outcome["properties"],
        "RunResult.properties (less `applied` and `workspace`) must equal src/outcome.schema.json's"
    );
    let mut req = rr["required"].as_array().unwrap().clone();
    req.retain(|r| r != "applied");
    assert_eq!(Value::Array(req), outcome["required"]);
}

#[test]
fn the_server_answers_as_documented() {
    let scratch = common::Scratch::new("serve-openapi");
    let tf = scratch.join("token");
    std::fs::write(&tf, TOKEN).unwrap();
    let tf = tf.to_str().unwrap().to_string();
    let ws = scratch.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a"), "a\n").unwrap();
    let ws = format!("ws={}", ws.display());
    let out = scratch.join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("a"), "a\n").unwrap();
    let out = format!("out={}:commit", out.display());
    let mut s = Server::start(
        Who::Root,
        &[
            "--token-file",
            &tf,
            "--workspace-base",
            &ws,
            "--workspace-base",
            &out,
            "--max-concurrent",
            "1",
            "--max-queue",
            "0",
            "--max-body",
            "64k",
            "--max-sessions",
            "1",
        ],
    );
    let mut spec = Spec::load();
    let auth = format!("Bearer {TOKEN}");
    let h = [("Authorization", auth.as_str())];
    let post =
        |s: &Server, body: &Value| s.call("POST", "/v1/runs", &h, body.to_string().as_bytes());

    spec.check("/healthz", "get", &s.call("GET", "/healthz", &[], b""));
    spec.check("/readyz", "get", &s.call("GET", "/readyz", &[], b""));
    spec.check("/metrics", "get", &s.call("GET", "/metrics", &h, b""));
    spec.check("/metrics", "get", &s.call("GET", "/metrics", &[], b""));
    spec.check("/v1/runs", "post", &post(&s, &json!({"profile": "shell", "argv": ["sh", "-c", "echo hi; echo there >&2"], "files": {"a": "b"}})));
    spec.check(
        "/v1/runs",
        "post",
        &post(
            &s,
            &json!({"profile": "shell", "argv": ["sleep", "60"], "limits": {"timeout": "500ms"}}),
        ),
    );
    spec.check(
        "/v1/runs",
        "post",
        &post(
            &s,
            &json!({"profile": "shell", "argv": ["/no/such/program"]}),
        ),
    );
    spec.check(
        "/v1/runs",
        "post",
        &post(
            &s,
            &json!({"profile": "shell", "argv": ["sh", "-c", "echo b > /work/project/a"], "workspace": {"base": "ws", "diff": true}}),
        ),
    );
    spec.check("/v1/runs", "post", &post(&s, &json!({"argv": []})));
    spec.check(
        "/v1/runs",
        "post",
        &s.call("POST", "/v1/runs", &[], b"{\"argv\":[\"true\"]}"),
    );
    spec.check(
        "/v1/runs",
        "post",
        &post(&s, &json!({"argv": ["true"], "profile": "nope"})),
    );
    spec.check(
        "/v1/runs",
        "post",
        &post(&s, &json!({"argv": ["true"], "stdin": "x".repeat(70_000)})),
    );

    // Streaming: every line is a StreamLine, the last a RunResult.
    let mut c = s.connect();
    std::io::Write::write_all(&mut c, b"").unwrap();
    let body = json!({"profile": "shell", "argv": ["sh", "-c", "echo started; printf '\\377'; sleep 600"], "limits": {"timeout": "2s"}});
    let req = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {auth}\r\nAccept: application/x-ndjson\r\nContent-Length: {}\r\n\r\n{body}",
        body.to_string().len()
    );
    std::io::Write::write_all(&mut c, req.as_bytes()).unwrap();
    let mut l = Lines::from_stream(c);
    assert_eq!(l.status, 200);
    assert_eq!(l.header("content-type"), Some("application/x-ndjson"));
    // While it runs, the one slot is busy and there is no queue: 429.
    l.until("stdout");
    spec.check(
        "/v1/runs",
        "post",
        &post(&s, &json!({"argv": ["true"], "profile": "shell"})),
    );
    let line_schema =
        spec.response("/v1/runs", "post", 200)["content"]["application/x-ndjson"]["schema"].clone();
    let mut last = Value::Null;
    while let Some(line) = l.next_line() {
        spec.validate(&line_schema, &line, "$");
        last = line;
    }
    assert_eq!(last["status"], "timeout", "{last}");
    spec.seen.insert((
        "/v1/runs".into(),
        "post".into(),
        200,
        "application/x-ndjson".into(),
    ));

    sessions_answer_as_documented(&s, &mut spec, &h);
    workspaces_answer_as_documented(&s, &mut spec, &h);

    // Shutting down: a run in flight keeps the server up; new runs and
    // readiness answer 503.
    let mut a = Lines::open_with(
        s.connect(),
        &json!({"profile": "shell", "argv": ["sh", "-c", "echo started; read x < /dev/null; sleep 600"], "limits": {"timeout": "60s"}}),
        &h,
    );
    a.until("stdout");
    s.term();
    s.wait_line("draining");
    spec.check(
        "/v1/runs",
        "post",
        &post(&s, &json!({"argv": ["true"], "profile": "shell"})),
    );
    spec.check("/readyz", "get", &s.call("GET", "/readyz", &[], b""));
    spec.check(
        "/v1/sessions",
        "post",
        &s.call("POST", "/v1/sessions", &h, b"{}"),
    );
    drop(a);
    assert_eq!(s.wait().code(), Some(0));

    // A server whose spawner is gone is unhealthy and not ready (it cannot
    // start a jail, and, confined, cannot start a new spawner).
    let mut s = Server::start(Who::Root, &[]);
    let spawner = only_child(s.pid());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_exited(spawner);
    let health = s.call("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 503, "{}", health.text());
    assert_eq!(health.json()["status"], "spawner_gone", "{}", health.text());
    spec.check("/healthz", "get", &health);
    let ready = s.call("GET", "/readyz", &[], b"");
    assert_eq!(ready.json()["spawner"], false, "{}", ready.text());
    spec.check("/readyz", "get", &ready);
    s.term();
    assert_eq!(s.wait().code(), Some(0));

    // Every documented answer was produced (500 cannot be on demand).
    let mut documented = BTreeSet::new();
    for (path, ops) in spec.doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for (status, r) in op["responses"].as_object().unwrap() {
                let r = spec.resolve(r);
                for ct in r["content"].as_object().unwrap().keys() {
                    documented.insert((
                        path.clone(),
                        method.clone(),
                        status.parse::<u16>().unwrap(),
                        ct.clone(),
                    ));
                }
            }
        }
    }
    let missing: Vec<_> = documented
        .difference(&spec.seen)
        .filter(|(_, _, st, _)| *st != 500)
        .collect();
    assert!(
        missing.is_empty(),
        "documented but never produced: {missing:?}"
    );
}

/// `/v1/sessions`, `/v1/sessions/{id}/exec` and `/v1/sessions/{id}`: every
/// documented answer (the server allows one session: `--max-sessions 1`).
fn sessions_answer_as_documented(s: &Server, spec: &mut Spec, h: &[(&str, &str)]) {
    let call = |method: &str, path: &str, body: &Value| {
        s.call(method, path, h, body.to_string().as_bytes())
    };
    let open = |spec: &mut Spec| {
        let r = call(
            "POST",
            "/v1/sessions",
            &json!({"profile": "shell", "idle_timeout": 60}),
        );
        spec.check("/v1/sessions", "post", &r);
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_string()
    };
    let id = open(spec);
    let exec = format!("/v1/sessions/{id}/exec");
    let one = "/v1/sessions/{id}";
    let ex = "/v1/sessions/{id}/exec";
    spec.check(
        "/v1/sessions",
        "post",
        &call("POST", "/v1/sessions", &json!({})),
    );
    spec.check(
        "/v1/sessions",
        "post",
        &call("POST", "/v1/sessions", &json!({"limits": {"timeout": 1}})),
    );
    spec.check(
        "/v1/sessions",
        "post",
        &s.call("POST", "/v1/sessions", &[], b"{}"),
    );
    spec.check(
        "/v1/sessions",
        "post",
        &call("POST", "/v1/sessions", &json!({"profile": "nope"})),
    );
    spec.check(
        "/v1/sessions",
        "post",
        &call(
            "POST",
            "/v1/sessions",
            &json!({"files": {"a": "x".repeat(70_000)}}),
        ),
    );
    spec.check(
        ex,
        "post",
        &call(
            "POST",
            &exec,
            &json!({"command": "cd /tmp; echo hi; echo there >&2"}),
        ),
    );
    spec.check(
        ex,
        "post",
        &call(
            "POST",
            &exec,
            &json!({"command": "sleep 60", "timeout": 0.2}),
        ),
    );
    spec.check(
        ex,
        "post",
        &call("POST", &exec, &json!({"command": "true", "timeout": -1})),
    );
    spec.check(ex, "post", &s.call("POST", &exec, &[], b"{}"));
    spec.check(
        ex,
        "post",
        &call("POST", &exec, &json!({"command": "x".repeat(70_000)})),
    );
    spec.check(
        ex,
        "post",
        &call(
            "POST",
            "/v1/sessions/nope/exec",
            &json!({"command": "true"}),
        ),
    );
    // Streamed: every line a SessionEvent; another exec meanwhile is 409.
    // It ends once the test creates `go` in its workdir (a tmpfs of the
    // jail's, reached through the waiting shell's /proc cwd).
    let body = json!({"command": "echo started; cd \"$HOME\"; while [ ! -e go-openapi ]; do sleep 0.01; done; echo done"});
    let req = format!(
        "POST {exec} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {}\r\nAccept: application/x-ndjson\r\nContent-Length: {}\r\n\r\n{body}",
        h[0].1,
        body.to_string().len()
    );
    let mut c = s.connect();
    std::io::Write::write_all(&mut c, req.as_bytes()).unwrap();
    let mut l = Lines::from_stream(c);
    assert_eq!(l.header("content-type"), Some("application/x-ndjson"));
    let schema =
        spec.response(ex, "post", 200)["content"]["application/x-ndjson"]["schema"].clone();
    let first = l.next_line().unwrap();
    spec.validate(&schema, &first, "$");
    spec.check(
        ex,
        "post",
        &call("POST", &exec, &json!({"command": "true"})),
    );
    serve_util::touch_in_jail_cwd(s.pid(), "go-openapi", "go-openapi");
    while let Some(line) = l.next_line() {
        spec.validate(&schema, &line, "$");
    }
    spec.seen
        .insert((ex.into(), "post".into(), 200, "application/x-ndjson".into()));
    // One session at a time here: 429.
    spec.check(
        "/v1/sessions",
        "post",
        &call("POST", "/v1/sessions", &json!({})),
    );
    assert_eq!(
        s.call("DELETE", &format!("/v1/sessions/{id}"), h, b"")
            .status,
        200
    );
    // The session is closed while a command runs: that exec gets 410.
    let id = open(spec);
    let exec = format!("/v1/sessions/{id}/exec");
    let r = std::thread::scope(|t| {
        let sock = s.sock.clone();
        let body = json!({"command": "sleep 600; echo closed-while-running"}).to_string();
        let exec = exec.clone();
        let waiting = t.spawn(move || {
            let c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
            serve_util::send(c, "POST", &exec, h, body.as_bytes())
        });
        serve_util::process_with(s.pid(), "closed-while-running");
        assert_eq!(
            call("DELETE", &format!("/v1/sessions/{id}"), &json!({})).status,
            200
        );
        waiting.join().unwrap()
    });
    assert_eq!(r.json()["error"]["code"], "session_ended", "{}", r.text());
    spec.check(ex, "post", &r);
    let id = open(spec);
    let path = format!("/v1/sessions/{id}");
    spec.check(one, "delete", &s.call("DELETE", &path, &[], b""));
    spec.check(one, "delete", &s.call("DELETE", &path, h, b""));
    spec.check(one, "delete", &s.call("DELETE", &path, h, b""));
}

const WORKSPACE_OPS: [&str; 4] = ["changes", "checkpoint", "rollback", "commit"];

/// A session's workspace routes, `/v1/sessions/{id}/changes|checkpoint|
/// rollback|commit`, and a session's `workspace`: every documented answer
/// but 500 (the server allows one session: `--max-sessions 1`; base `out`
/// allows commits, `ws` does not).
fn workspaces_answer_as_documented(s: &Server, spec: &mut Spec, h: &[(&str, &str)]) {
    let call = |path: &str, body: &Value| s.call("POST", path, h, body.to_string().as_bytes());
    // A session's `commit` and `diff` are refused, naming the field.
    for (ws, field) in [
        (
            json!({"base": "out", "commit": "success"}),
            "workspace.commit",
        ),
        (json!({"base": "out", "diff": true}), "workspace.diff"),
    ] {
        let r = call("/v1/sessions", &json!({"workspace": ws}));
        assert_eq!(r.json()["error"]["field"], field, "{}", r.text());
        spec.check("/v1/sessions", "post", &r);
    }
    let id = ws_open(s, h, spec, Some("out"));
    let at = |op: &str| format!("/v1/sessions/{id}/{op}");
    let r = call(
        &at("exec"),
        &json!({"command": "cd /work/project && echo b > a && ln -s a l && mkdir d && echo n > d/n"}),
    );
    assert_eq!(r.json()["code"], 0, "{}", r.text());
    let r = call(&at("changes"), &json!({}));
    ws_expect(spec, "changes", &r, 200, None);
    assert_eq!(
        r.json()["changes"].as_array().unwrap().len(),
        4,
        "{}",
        r.text()
    );
    let r = s.call("POST", &at("changes"), h, b"");
    ws_expect(spec, "changes", &r, 200, None);
    let r = call(&at("checkpoint"), &json!({"name": "k.1"}));
    ws_expect(spec, "checkpoint", &r, 200, None);
    assert_eq!(r.json(), json!({"name": "k.1"}));
    let r = call(&at("exec"), &json!({"command": "rm /work/project/a"}));
    assert_eq!(r.json()["code"], 0, "{}", r.text());
    let r = call(&at("rollback"), &json!({"name": "k.1"}));
    ws_expect(spec, "rollback", &r, 200, None);
    let r = call(&at("rollback"), &json!({"name": "nope"}));
    ws_expect(spec, "rollback", &r, 404, Some("no_checkpoint"));
    for (op, body) in [
        ("changes", json!({"name": "x"})),
        ("checkpoint", json!({"name": "../x"})),
        ("rollback", json!({})),
        ("commit", json!({"name": "k.1"})),
    ] {
        let r = call(&at(op), &body);
        ws_expect(spec, op, &r, 400, Some("bad_request"));
        assert!(r.json()["error"]["field"].is_string(), "{}", r.text());
        let r = s.call("POST", &at(op), h, b"[]");
        ws_expect(spec, op, &r, 400, Some("bad_request"));
        let r = s.call("POST", &at(op), &[], b"{}");
        ws_expect(spec, op, &r, 401, Some("unauthorized"));
        let r = call(&format!("/v1/sessions/nope/{op}"), &json!({}));
        ws_expect(spec, op, &r, 404, Some("not_found"));
        let r = call(&at(op), &json!({"name": "x".repeat(70_000)}));
        ws_expect(spec, op, &r, 413, Some("payload_too_large"));
    }
    // While a command runs: 409 busy. It ends once the test creates
    // `go-workspace` in its cwd (a tmpfs of the jail's).
    let body = json!({"command": "echo started; cd \"$HOME\"; while [ ! -e go-workspace ]; do sleep 0.01; done"});
    let mut c = s.connect();
    write!(
        c,
        "POST {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {}\r\nAccept: application/x-ndjson\r\nContent-Length: {}\r\n\r\n{body}",
        at("exec"),
        h[0].1,
        body.to_string().len()
    )
    .unwrap();
    let mut l = Lines::from_stream(c);
    l.until("data");
    for op in WORKSPACE_OPS {
        let r = call(&at(op), &good_body(op));
        ws_expect(spec, op, &r, 409, Some("busy"));
    }
    serve_util::touch_in_jail_cwd(s.pid(), "go-workspace", "go-workspace");
    assert_eq!(l.until("status")["code"], 0);
    let r = call(&at("commit"), &json!({}));
    ws_expect(spec, "commit", &r, 200, None);
    assert_eq!(r.json()["commit"]["applied_count"], 4, "{}", r.text());
    ws_close(s, h, &id);
    workspace_refusals_answer_as_documented(s, spec, h);
}

/// A session's workspace requests refused: a base without `:commit`
/// (403), a session without a workspace (409 no_overlay), a session that
/// ends while the request is made (410).
fn workspace_refusals_answer_as_documented(s: &Server, spec: &mut Spec, h: &[(&str, &str)]) {
    let call = |path: &str, body: &Value| s.call("POST", path, h, body.to_string().as_bytes());
    // A base without `:commit`: 403.
    let id = ws_open(s, h, spec, Some("ws"));
    let r = call(&format!("/v1/sessions/{id}/commit"), &json!({}));
    ws_expect(spec, "commit", &r, 403, Some("commit_refused"));
    ws_close(s, h, &id);
    // A session without a workspace: 409 no_overlay.
    let id = ws_open(s, h, spec, None);
    for op in WORKSPACE_OPS {
        let r = call(&format!("/v1/sessions/{id}/{op}"), &good_body(op));
        ws_expect(spec, op, &r, 409, Some("no_overlay"));
    }
    ws_close(s, h, &id);
    // The session ends while the request's body is awaited: 410.
    let id = ws_open(s, h, spec, Some("out"));
    let waiting: Vec<UnixStream> = WORKSPACE_OPS
        .iter()
        .map(|op| found_then_wait(s, h, &format!("/v1/sessions/{id}/{op}"), op))
        .collect();
    ws_close(s, h, &id);
    for (op, c) in WORKSPACE_OPS.iter().zip(waiting) {
        let r = body_then_answer(c, op);
        ws_expect(spec, op, &r, 410, Some("session_ended"));
    }
}

/// Open a session (over `base`, when given) and check its answer.
fn ws_open(s: &Server, h: &[(&str, &str)], spec: &mut Spec, base: Option<&str>) -> String {
    let mut body = json!({"profile": "shell"});
    if let Some(b) = base {
        body["workspace"] = json!({"base": b});
    }
    let r = s.call("POST", "/v1/sessions", h, body.to_string().as_bytes());
    spec.check("/v1/sessions", "post", &r);
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    match base {
        Some(b) => assert_eq!(v["workspace"], json!({"base": b, "at": "/work/project"})),
        None => assert!(v.get("workspace").is_none(), "{v}"),
    }
    v["id"].as_str().unwrap().to_string()
}

fn ws_close(s: &Server, h: &[(&str, &str)], id: &str) {
    let r = s.call("DELETE", &format!("/v1/sessions/{id}"), h, b"");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A workspace request's answer: `status` (and the error's `code`), as
/// documented.
fn ws_expect(spec: &mut Spec, op: &str, r: &Resp, status: u16, code: Option<&str>) {
    assert_eq!(r.status, status, "{op}: {}", r.text());
    if let Some(c) = code {
        assert_eq!(r.json()["error"]["code"], c, "{op}: {}", r.text());
    }
    spec.check(&format!("/v1/sessions/{{id}}/{op}"), "post", r);
}

/// A well-formed body for a workspace request: a checkpoint's name for a
/// checkpoint and a rollback.
fn good_body(op: &str) -> Value {
    match op {
        "checkpoint" | "rollback" => json!({"name": "k.1"}),
        _ => json!({}),
    }
}

/// Send a request's head with `Expect: 100-continue` and no body yet, and
/// wait for `100 Continue`: the server has found the session (it looks it
/// up before it reads the body) and waits for the body, `op`'s
/// [`good_body`].
fn found_then_wait(s: &Server, h: &[(&str, &str)], path: &str, op: &str) -> UnixStream {
    let mut c = s.connect();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: {}\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        h[0].1,
        good_body(op).to_string().len()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            c.read(&mut b).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    c
}

/// The body of a request [`found_then_wait`] began, and its answer.
fn body_then_answer(mut c: UnixStream, op: &str) -> Resp {
    c.write_all(good_body(op).to_string().as_bytes()).unwrap();
    serve_util::send(Sent(c), "", "", &[], b"")
}

/// A stream whose request was written already: `serve_util::send`'s
/// writes go nowhere, its reads get the answer.
struct Sent(UnixStream);

impl Read for Sent {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Sent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
