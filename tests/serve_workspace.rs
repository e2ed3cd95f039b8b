//! A serve run's workspace (`--workspace-base NAME=DIR[:commit]`, the
//! request's `"workspace"`): a copy-on-write overlay of the operator's
//! directory. The run's changes come back in its outcome (and their diff
//! when asked), the directory is untouched unless the operator allows
//! commits and the request asks for one, a refused name or field is a
//! JSON 400 naming it and the server serves the next request, and two
//! runs at once on one base each see only their own changes. A session
//! over a workspace lists its changes, checkpoints, rolls back and
//! commits (where the base allows it) through
//! `POST /v1/sessions/{id}/changes|checkpoint|rollback|commit`, refused
//! with 409 while a command runs. As root and as uid 65534; in the
//! fallback (no user namespaces) a workspace run is refused as its setup,
//! saying why.

mod common;
mod serve_util;

use std::path::Path;

use common::Scratch;
use serde_json::{json, Value};
use serve_util::Server;

/// A base directory of two files, owned by `who`'s server user.
fn base(s: &Scratch, name: &str) -> String {
    let p = s.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(p.join("b.txt"), "bravo\n").unwrap();
    common::host_sh_ok(&format!("chown -hR 65534:65534 '{}'", s.path().display()));
    p.display().to_string()
}

fn read(dir: &str, f: &str) -> String {
    std::fs::read_to_string(Path::new(dir).join(f)).unwrap_or_default()
}

/// The changes' (path's last component, kind).
fn changes(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {v}"))
        .iter()
        .map(|c| {
            let p = c["path"].as_str().unwrap_or_default();
            let name = p.rsplit('/').next().unwrap_or(p).to_string();
            (name, c["kind"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    out.sort();
    out
}

fn sh(script: &str, workspace: Value) -> Value {
    json!({"profile": "shell", "argv": ["sh", "-c", script], "workspace": workspace})
}

const EDIT: &str = "cd /work/project && echo changed > a.txt && rm b.txt && echo new > n.txt";

#[test]
fn a_serve_run_gets_its_own_overlay_of_a_workspace_base_and_commits_only_where_allowed() {
    for who in common::users(
        "a_serve_run_gets_its_own_overlay_of_a_workspace_base_and_commits_only_where_allowed",
    ) {
        let scratch = Scratch::new("serve-ws");
        let ro = base(&scratch, "ro");
        let rw = base(&scratch, "rw");
        let s = Server::start(
            who,
            &[
                "--max-concurrent",
                "2",
                "--workspace-base",
                &format!("src={ro}"),
                "--workspace-base",
                &format!("out={rw}:commit"),
            ],
        );

        // Edits: listed, diffed, the host untouched.
        let r = s.run(&sh(
            &format!("{EDIT} && cat a.txt"),
            json!({"base": "src", "diff": true}),
        ));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["status"], "exited", "{who:?}: {v}");
        assert_eq!(v["stdout"]["data"], "changed\n", "{who:?}: {v}");
        assert_eq!(
            changes(&v),
            [
                ("a.txt".into(), "modified".into()),
                ("b.txt".into(), "deleted".into()),
                ("n.txt".into(), "added".into())
            ],
            "{who:?}: {v}"
        );
        let diff = v["workspace"]["diff"].as_str().unwrap_or_default();
        assert!(diff.contains("+changed"), "{who:?}: {v}");
        assert_eq!(v["workspace"]["diff_truncated"], false, "{who:?}: {v}");
        assert_eq!(v["workspace"]["base"], "src", "{who:?}: {v}");
        assert_eq!(read(&ro, "a.txt"), "alpha\n", "{who:?}");
        assert_eq!(read(&ro, "b.txt"), "bravo\n", "{who:?}");
        assert!(!Path::new(&ro).join("n.txt").exists(), "{who:?}");

        // Refused: a JSON 400 naming the field, and the server goes on.
        for (ws, field) in [
            (json!({"base": "nope"}), "workspace.base"),
            (
                json!({"base": "src", "commit": "success"}),
                "workspace.commit",
            ),
            (
                json!({"base": "src", "commit": "maybe"}),
                "workspace.commit",
            ),
            (json!({"base": "src", "at": "rel/p"}), "workspace.at"),
            (json!({"base": "src", "at": "/w/../etc"}), "workspace.at"),
            (json!({"base": "src", "extra": 1}), "workspace.extra"),
            (json!("src"), "workspace"),
        ] {
            let r = s.run(&sh("true", ws.clone()));
            assert_eq!(r.status, 400, "{who:?} {ws}: {}", r.text());
            assert_eq!(r.json()["error"]["field"], field, "{who:?} {ws}");
            assert_eq!(r.json()["error"]["code"], "bad_request", "{who:?} {ws}");
        }
        let r = s.run(&sh("cat /work/project/a.txt", json!({"base": "src"})));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        assert_eq!(r.json()["stdout"]["data"], "alpha\n", "{who:?}");
        assert!(read(&ro, "a.txt") == "alpha\n", "{who:?}");

        // Never by default, even where allowed; then a commit.
        let r = s.run(&sh(EDIT, json!({"base": "out", "at": "/work/project"})));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        assert_eq!(read(&rw, "a.txt"), "alpha\n", "{who:?}");
        let r = s.run(&sh(EDIT, json!({"base": "out", "commit": "success"})));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        let v = r.json();
        assert!(v["commit"].is_object(), "{who:?}: {v}");
        assert_eq!(read(&rw, "a.txt"), "changed\n", "{who:?}: {v}");
        assert_eq!(read(&rw, "n.txt"), "new\n", "{who:?}: {v}");
        assert!(!Path::new(&rw).join("b.txt").exists(), "{who:?}: {v}");

        // Two at once on one base: each sees its own changes only.
        let seen: Vec<Value> = std::thread::scope(|t| {
            let runs: Vec<_> = (0..2)
                .map(|i| {
                    let conn = s.connect();
                    t.spawn(move || {
                        let script = format!(
                            "cd /work/project && echo {i} > mine-{i} && echo {i} > a.txt && sleep 1 && ls && cat a.txt"
                        );
                        let body = sh(&script, json!({"base": "src"})).to_string();
                        serve_util::send(conn, "POST", "/v1/runs", &[], body.as_bytes()).json()
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, v) in seen.iter().enumerate() {
            let out = v["stdout"]["data"].as_str().unwrap_or_default();
            let other = 1 - i;
            assert!(out.contains(&format!("mine-{i}")), "{who:?} {i}: {v}");
            assert!(!out.contains(&format!("mine-{other}")), "{who:?} {i}: {v}");
            assert!(out.ends_with(&format!("{i}\n")), "{who:?} {i}: {v}");
            assert_eq!(
                changes(v),
                [
                    ("a.txt".into(), "modified".into()),
                    (format!("mine-{i}"), "added".into())
                ],
                "{who:?} {i}: {v}"
            );
        }
        assert_eq!(read(&ro, "a.txt"), "alpha\n", "{who:?}");

        // Two committing runs at once on one base: one after the other
        // (two run slots, yet the second's overlay is made once the
        // first has committed), both commits applied. Each lists the
        // base as its run found it: the second, and only it, sees the
        // first's file.
        let listed: Vec<String> = std::thread::scope(|t| {
            let runs: Vec<_> = (0..2)
                .map(|i| {
                    let conn = s.connect();
                    t.spawn(move || {
                        let script = format!("ls /work/project && echo {i} > /work/project/c-{i}");
                        let body =
                            sh(&script, json!({"base": "out", "commit": "always"})).to_string();
                        let r = serve_util::send(conn, "POST", "/v1/runs", &[], body.as_bytes());
                        assert_eq!(r.status, 200, "{who:?} {i}: {}", r.text());
                        r.json()["stdout"]["data"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let saw_other = (0..2)
            .filter(|&i| listed[i].lines().any(|l| l == format!("c-{}", 1 - i)))
            .count();
        assert_eq!(saw_other, 1, "{who:?}: {listed:?}");
        assert_eq!(read(&rw, "c-0"), "0\n", "{who:?}");
        assert_eq!(read(&rw, "c-1"), "1\n", "{who:?}");
        s.wait_ready();
    }
}

#[test]
fn in_the_fallback_a_workspace_run_is_refused_saying_why_and_the_base_is_untouched() {
    for who in common::users("in_the_fallback_a_workspace_run_is_refused_saying_why") {
        let scratch = Scratch::new("serve-ws-fb");
        let dir = base(&scratch, "b");
        let s = Server::start_wrapped(
            &["chk_nouserns"],
            who,
            &["--workspace-base", &format!("b={dir}:commit")],
        );
        let r = s.run(&sh(EDIT, json!({"base": "b", "commit": "always"})));
        // Refused as the run's setup: an outcome saying why, nothing run.
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["status"], "setup_error", "{who:?}: {v}");
        assert_eq!(v["setup"]["step"], "--overlay", "{who:?}: {v}");
        let why = v["error"].as_str().unwrap_or_default();
        assert!(why.contains("user namespaces are refused"), "{who:?}: {v}");
        assert_eq!(read(&dir, "a.txt"), "alpha\n", "{who:?}");
        assert!(!Path::new(&dir).join("n.txt").exists(), "{who:?}");
        let r = s.run(&json!({"profile": "shell", "argv": ["true"]}));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
    }
}

/// `POST PATH` with a JSON body.
fn post(s: &Server, path: &str, body: &Value) -> serve_util::Resp {
    s.call("POST", path, &[], body.to_string().as_bytes())
}

#[test]
fn a_serve_session_over_a_workspace_lists_checkpoints_rolls_back_and_commits_where_allowed() {
    use std::io::Write;
    for who in common::users("a_serve_session_over_a_workspace") {
        let scratch = Scratch::new("serve-ws-session");
        let ro = base(&scratch, "ro");
        let rw = base(&scratch, "rw");
        let s = Server::start(
            who,
            &[
                "--workspace-base",
                &format!("src={ro}"),
                "--workspace-base",
                &format!("out={rw}:commit"),
            ],
        );
        let r = post(
            &s,
            "/v1/sessions",
            &json!({"profile": "shell", "workspace": {"base": "out"}}),
        );
        assert_eq!(r.status, 201, "{who:?}: {}", r.text());
        let v = r.json();
        assert_eq!(
            v["workspace"],
            json!({"base": "out", "at": "/work/project"}),
            "{v}"
        );
        let id = v["id"].as_str().unwrap().to_string();
        let at = |op: &str| format!("/v1/sessions/{id}/{op}");
        let exec = |cmd: &str| {
            let r = post(&s, &at("exec"), &json!({"command": cmd}));
            assert_eq!(r.status, 200, "{who:?}: {}", r.text());
            r.json()
        };
        assert_eq!(exec(EDIT)["code"], 0);
        let c = post(&s, &at("changes"), &json!({}));
        assert_eq!(c.status, 200, "{who:?}: {}", c.text());
        let edited = [
            ("a.txt".to_string(), "modified".to_string()),
            ("b.txt".into(), "deleted".into()),
            ("n.txt".into(), "added".into()),
        ];
        assert_eq!(changes(&c.json()), edited, "{who:?}");
        assert_eq!(c.json()["truncated"], false);
        let k = post(&s, &at("checkpoint"), &json!({"name": "edited"}));
        assert_eq!(
            (k.status, k.json()),
            (200, json!({"name": "edited"})),
            "{who:?}"
        );
        assert_eq!(
            exec("cd /work/project && rm a.txt && echo z > z.txt")["code"],
            0
        );
        let r = post(&s, &at("rollback"), &json!({"name": "edited"}));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        let ls = exec("cd /work/project && ls && cat a.txt");
        assert_eq!(ls["stdout"], "a.txt\nn.txt\nchanged\n", "{who:?}: {ls}");
        // Refused: JSON errors naming why, and the session lives on.
        for (op, body, status, code) in [
            ("rollback", json!({"name": "../x"}), 400, "bad_request"),
            ("rollback", json!({"name": "a/b"}), 400, "bad_request"),
            ("rollback", json!({}), 400, "bad_request"),
            ("rollback", json!({"name": "nope"}), 404, "no_checkpoint"),
            (
                "checkpoint",
                json!({"name": "k", "x": 1}),
                400,
                "bad_request",
            ),
            ("commit", json!({"name": "k"}), 400, "bad_request"),
        ] {
            let r = post(&s, &at(op), &body);
            assert_eq!(
                (r.status, r.json()["error"]["code"].as_str()),
                (status, Some(code)),
                "{who:?}: {op} {body}: {}",
                r.text()
            );
        }
        let r = s.call("POST", &at("changes"), &[], b"not json");
        assert_eq!(r.status, 400, "{}", r.text());
        // While a command runs: 409 (it ends at its timeout).
        let mut c = s.connect();
        let b = json!({"command": "echo go; exec sleep 600", "timeout": 2}).to_string();
        write!(
            c,
            "POST {} HTTP/1.1\r\nHost: stockade\r\nConnection: close\r\n\
             Accept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            at("exec"),
            b.len()
        )
        .unwrap();
        let mut lines = serve_util::Lines::from_stream(c);
        assert_eq!(lines.until("data")["data"], "go\n");
        for (op, body) in [
            ("rollback", json!({"name": "edited"})),
            ("checkpoint", json!({"name": "mid"})),
            ("commit", json!({})),
            ("changes", json!({})),
        ] {
            let r = post(&s, &at(op), &body);
            let got = (
                r.status,
                r.json()["error"]["code"].as_str().map(String::from),
            );
            assert_eq!(
                got,
                (409, Some("busy".into())),
                "{who:?}: {op}: {}",
                r.text()
            );
        }
        assert_eq!(lines.until("status")["status"], "timeout");
        // The base is untouched until the commit, which applies the
        // checkpoint's changes.
        assert_eq!(read(&rw, "a.txt"), "alpha\n", "{who:?}");
        let m = post(&s, &at("commit"), &json!({}));
        assert_eq!(m.status, 200, "{who:?}: {}", m.text());
        let mut applied: Vec<String> = m.json()["commit"]["applied"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        applied.sort();
        assert_eq!(
            applied,
            [
                "/work/project/a.txt",
                "/work/project/b.txt",
                "/work/project/n.txt"
            ]
        );
        assert_eq!(read(&rw, "a.txt"), "changed\n");
        assert!(!Path::new(&rw).join("b.txt").exists());
        assert_eq!(changes(&post(&s, &at("changes"), &json!({})).json()), []);
        assert_eq!(exec("cat /work/project/n.txt")["stdout"], "new\n");
        let end = s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"");
        assert_eq!(end.status, 200, "{}", end.text());

        // A read-only base: the session may not commit; without a
        // workspace, there is nothing to list.
        let r = post(
            &s,
            "/v1/sessions",
            &json!({"workspace": {"base": "src", "at": "/work/src"}}),
        );
        assert_eq!(r.status, 201, "{who:?}: {}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_string();
        let r = post(
            &s,
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "echo x > /work/src/a.txt"}),
        );
        assert_eq!(r.json()["code"], 0, "{}", r.text());
        let m = post(&s, &format!("/v1/sessions/{id}/commit"), &json!({}));
        assert_eq!(
            (m.status, m.json()["error"]["code"].as_str()),
            (403, Some("commit_refused")),
            "{}",
            m.text()
        );
        assert_eq!(read(&ro, "a.txt"), "alpha\n");
        for (ws, field) in [
            (
                json!({"base": "out", "commit": "success"}),
                "workspace.commit",
            ),
            (json!({"base": "out", "diff": true}), "workspace.diff"),
            (json!({"base": "nope"}), "workspace.base"),
        ] {
            let r = post(&s, "/v1/sessions", &json!({"workspace": ws}));
            assert_eq!(
                (r.status, r.json()["error"]["field"].as_str()),
                (400, Some(field)),
                "{}",
                r.text()
            );
        }
        let r = post(&s, "/v1/sessions", &json!({}));
        let plain = r.json()["id"].as_str().unwrap().to_string();
        let c = post(&s, &format!("/v1/sessions/{plain}/changes"), &json!({}));
        assert_eq!(
            (c.status, c.json()["error"]["code"].as_str()),
            (409, Some("no_overlay")),
            "{}",
            c.text()
        );
        let c = post(&s, "/v1/sessions/nonexistent/changes", &json!({}));
        assert_eq!(c.status, 404);
    }
}
