//! Secrets through `stockade serve` (the real server, as root and as uid
//! 65534): the operator declares them (`--secret`, `--secret-file`,
//! `--egress-ca`), a run or a session names them (`"secrets": [NAME]`),
//! and the jail holds a placeholder while the bound host gets the value.
//! The value is in no answer, no jail's environment, files or memory, not
//! in `/metrics` nor the server's log; a run with secrets is a cold one and
//! says so; hostile `secrets` fields get a 400 naming the field, and the
//! server lives on.
//!
//! The hosts are TLS servers of the test's own on 127.0.0.2 and
//! 127.0.0.3, with certificates from a test authority (tests/common/tls).

mod common;
mod serve_util;

use common::tls::{memory_holds, test_pki, tls_host, value, Host};
use common::{Scratch, Who};
use serde_json::{json, Value};
use serve_util::{Lines, Server};

/// What the jail runs: its variable, a request to the bound host with the
/// placeholder in two headers, one to the other host, its environment
/// (as Python and /proc see it) written to a file and printed; then, with
/// a marker, it waits for that file in its workdir (while the host reads
/// its memory).
const JAIL: &str = r#"
import os, sys, time, urllib.request, urllib.error
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
with open("seen.txt", "w") as f:
    f.write(repr(dict(os.environ)))
    f.write(open("/proc/self/environ", "rb").read().decode(errors="replace"))
print("files", open("seen.txt").read())
print("ready", flush=True)
if len(sys.argv) > 3:
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.01)
"#;

/// The test's hosts, its authority and an operator's files: the value, a
/// profile allowing both hosts (`python` with `network.allow`).
struct Setup {
    a: Host,
    b: Host,
    dir: Scratch,
    secret: String,
    profile: String,
}

fn setup(tag: &str) -> Setup {
    let (ca_pem, config) = test_pki();
    let a = tls_host("127.0.0.2", config.clone());
    let b = tls_host("127.0.0.3", config);
    let dir = Scratch::new(tag).world_writable();
    std::fs::write(dir.join("ca.pem"), ca_pem).unwrap();
    let secret = value();
    std::fs::write(dir.join("key"), format!("{secret}\n")).unwrap();
    std::fs::write(dir.join("other"), "other-0123456789abcdef0123").unwrap();
    let profile = dir.arg("agent.toml");
    std::fs::write(
        &profile,
        format!(
            "extends = \"python\"\n[network]\nallow = [\"127.0.0.2:{}\", \"127.0.0.3:{}\"]\n",
            a.port, b.port
        ),
    )
    .unwrap();
    Setup {
        a,
        b,
        dir,
        secret,
        profile,
    }
}

impl Setup {
    /// `stockade serve` declaring API_KEY (bound to the first host) and
    /// OTHER (the second) with their files and the test's authority,
    /// serving `python` and the allowlist's profile (a warm pool of that
    /// profile too).
    fn server(&self, who: Who) -> Server {
        let profiles = format!("python,{}", self.profile);
        let warm = format!("{}=1", self.profile);
        let secret = format!("API_KEY:127.0.0.2:{}", self.a.port);
        let file = format!("API_KEY={}", self.dir.arg("key"));
        let other = format!("OTHER:127.0.0.3:{}", self.b.port);
        let other_file = format!("OTHER={}", self.dir.arg("other"));
        let ca = self.dir.arg("ca.pem");
        Server::start(
            who,
            &[
                "--profiles",
                &profiles,
                "--warm",
                &warm,
                "--secret",
                &secret,
                "--secret-file",
                &file,
                "--secret",
                &other,
                "--secret-file",
                &other_file,
                "--egress-ca",
                &ca,
            ],
        )
    }

    fn run_body(&self, marker: Option<&str>) -> Value {
        let mut argv = vec![
            "python3".to_string(),
            "-c".into(),
            JAIL.into(),
            self.a.port.to_string(),
            self.b.port.to_string(),
        ];
        argv.extend(marker.map(String::from));
        json!({"profile": self.profile, "argv": argv, "secrets": ["API_KEY", "OTHER"]})
    }

    /// The bound host's last request carried the value in both headers
    /// (never the placeholder); the other host saw neither.
    fn hosts_saw_the_value_only_where_bound(&self, placeholder: &str, who: Who) {
        let heads = self.a.heads.lock().unwrap().clone();
        let last = heads.last().cloned().unwrap_or_default();
        assert!(
            last.contains(&format!("Authorization: Bearer {}\r\n", self.secret))
                && last
                    .to_ascii_lowercase()
                    .contains(&format!("x-api-key: {}\r\n", self.secret))
                && !last.contains(placeholder),
            "{who:?}: {last}"
        );
        let other = self.b.heads.lock().unwrap().clone();
        assert!(
            other
                .iter()
                .all(|h| !h.contains(&self.secret) && !h.contains(placeholder)),
            "{who:?}: {other:?}"
        );
    }
}

/// The placeholder the jail printed.
fn placeholder_in(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("placeholder "))
        .unwrap_or_else(|| panic!("no placeholder in {out}"))
        .to_string()
}

#[test]
fn a_run_names_a_secret_and_only_its_host_gets_the_value() {
    let test = "a_run_names_a_secret_and_only_its_host_gets_the_value";
    let st = setup("serve-secrets");
    for who in common::users(test) {
        let s = st.server(who);
        // JSON: the outcome, what was bound, and why the run was cold.
        let r = s.run(&st.run_body(None));
        let text = r.text();
        assert_eq!(r.status, 200, "{who:?}: {text}");
        assert!(
            !text.contains(&st.secret),
            "{who:?}: the value is in the answer"
        );
        let v = r.json();
        let out = v["stdout"]["data"].as_str().unwrap_or_default().to_string();
        let placeholder = placeholder_in(&out);
        assert!(
            placeholder.starts_with("sk-test-") && placeholder.len() == st.secret.len(),
            "{who:?}: {placeholder}"
        );
        assert!(out.contains("bound 200 ok"), "{who:?}: {v}");
        assert!(
            out.contains("foreign 403") && out.contains("placeholder of secret API_KEY"),
            "{who:?}: {out}"
        );
        assert!(
            out.contains(&format!("'API_KEY': '{placeholder}'")),
            "{who:?}: {out}"
        );
        st.hosts_saw_the_value_only_where_bound(&placeholder, who);
        assert_eq!(
            v["applied"]["secrets"],
            json!([
                {"name": "API_KEY", "hosts": [format!("127.0.0.2:{}", st.a.port)]},
                {"name": "OTHER", "hosts": [format!("127.0.0.3:{}", st.b.port)]},
            ]),
            "{who:?}: {v}"
        );
        assert_eq!(serve_util::pool_use(&v), Err("secrets".into()), "{who:?}");
        let miss = format!(
            "stockade_pool_misses_total{{profile=\"{}\",reason=\"secrets\"}}",
            st.profile
        );
        assert_eq!(serve_util::metric(&s, &miss), 1, "{who:?}");
        // ndjson: the jail waits while its processes' memory is read from
        // the host.
        let mut l = Lines::open(s.connect(), &st.run_body(Some("go-secret-mem")));
        let mut seen = String::new();
        while !seen.contains("ready\n") {
            let line = l.next_line().unwrap_or_else(|| panic!("{who:?}: {seen}"));
            seen.push_str(line["stdout"].as_str().unwrap_or_default());
        }
        let jail = serve_util::process_with(s.pid(), "go-secret-mem");
        let mut pids = vec![jail];
        pids.extend(serve_util::descendants(jail));
        let mut scanned = 0;
        for pid in &pids {
            if let Some(held) = memory_holds(*pid, st.secret.as_bytes()) {
                scanned += 1;
                assert!(!held, "{who:?}: jail process {pid} holds the value");
            }
        }
        assert!(scanned >= 1, "{who:?}: none of {pids:?} read");
        serve_util::touch_in_jail_cwd(s.pid(), "go-secret-mem", "go-secret-mem");
        let (out, err, outcome) = l.output_then_outcome();
        assert_eq!(outcome["status"], "exited", "{who:?}: {outcome}\n{err}");
        for (what, t) in [
            ("stdout", &out),
            ("stderr", &err),
            ("outcome", &outcome.to_string()),
        ] {
            assert!(
                !t.contains(&st.secret),
                "{who:?}: the value is in the stream's {what}"
            );
        }
        assert_eq!(
            outcome["applied"]["secrets"][0]["name"], "API_KEY",
            "{who:?}"
        );
        assert_eq!(serve_util::metric(&s, &miss), 2, "{who:?}");
        let metrics = s.call("GET", "/metrics", &[], b"").text();
        assert!(
            !metrics.contains(&st.secret),
            "{who:?}: the value is in /metrics"
        );
        assert!(
            !s.log.lock().unwrap().contains(&st.secret),
            "{who:?}: the value is in the server's log"
        );
    }
}

#[test]
fn a_session_names_a_secret_and_its_commands_send_the_placeholder() {
    let test = "a_session_names_a_secret_and_its_commands_send_the_placeholder";
    if !std::path::Path::new("/usr/bin/curl").exists() {
        common::skip(test, "no /usr/bin/curl");
        return;
    }
    let st = setup("serve-secret-session");
    for who in common::users(test) {
        let s = st.server(who);
        let body = json!({"profile": st.profile, "secrets": ["API_KEY"]});
        let r = s.call("POST", "/v1/sessions", &[], body.to_string().as_bytes());
        assert_eq!(r.status, 201, "{who:?}: {}", r.text());
        let created = r.json();
        assert_eq!(
            created["secrets"][0]["name"], "API_KEY",
            "{who:?}: {created}"
        );
        let id = created["id"].as_str().unwrap().to_string();
        let exec = |command: &str| {
            let b = json!({ "command": command });
            let r = s.call(
                "POST",
                &format!("/v1/sessions/{id}/exec"),
                &[],
                b.to_string().as_bytes(),
            );
            assert_eq!(r.status, 200, "{who:?}: {}", r.text());
            assert!(
                !r.text().contains(&st.secret),
                "{who:?}: the value is in an answer"
            );
            r.json()
        };
        let placeholder = exec("echo \"$API_KEY\"")["stdout"]
            .as_str()
            .unwrap()
            .trim()
            .to_string();
        assert!(
            placeholder.starts_with("sk-test-"),
            "{who:?}: {placeholder}"
        );
        let curl = format!(
            "/usr/bin/curl -sS -H \"Authorization: Bearer $API_KEY\" -H \"x-api-key: $API_KEY\" https://127.0.0.2:{}/session",
            st.a.port
        );
        let r = exec(&curl);
        assert_eq!(r["stdout"], "ok\n", "{who:?}: {r}");
        st.hosts_saw_the_value_only_where_bound(&placeholder, who);
        let env = exec("tr '\\0' '\\n' < /proc/self/environ; env; cat /proc/1/environ 2>&1");
        assert!(
            env["stdout"].as_str().unwrap().contains(&placeholder),
            "{who:?}: {env}"
        );
        let r = s.call("DELETE", &format!("/v1/sessions/{id}"), &[], b"");
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        assert!(!r.text().contains(&st.secret), "{who:?}");
        assert!(!s.log.lock().unwrap().contains(&st.secret), "{who:?}");
    }
}

#[test]
fn hostile_secrets_fields_are_refused_by_name_and_the_server_lives_on() {
    let test = "hostile_secrets_fields_are_refused_by_name_and_the_server_lives_on";
    let st = setup("serve-secret-hostile");
    let who = common::users(test)[0];
    let s = st.server(who);
    let p = st.profile.clone();
    let many: Vec<String> = (0..10_000).map(|i| format!("K{i}")).collect();
    let long = "K".repeat(1 << 20);
    let run = |secrets: Value| json!({"profile": p, "argv": ["true"], "secrets": secrets});
    for (body, field, words) in [
        (
            run(json!(["NOPE"])),
            "secrets[0]",
            "not a secret this server declares",
        ),
        (
            json!({"profile": "python", "argv": ["true"], "secrets": ["API_KEY"]}),
            "secrets[0]",
            "does not allow",
        ),
        (run(json!([null])), "secrets[0]", "must be a string"),
        (
            run(json!(["API_KEY", null])),
            "secrets[1]",
            "must be a string",
        ),
        (run(json!("API_KEY")), "secrets", "array"),
        (run(json!(7)), "secrets", "array"),
        (run(json!({"API_KEY": "x"})), "secrets", "array"),
        (run(json!([["API_KEY"]])), "secrets[0]", "must be a string"),
        (run(json!(["API_KEY", "API_KEY"])), "secrets[1]", "twice"),
        (run(json!(many)), "secrets", "at most 64"),
        (run(json!([long])), "secrets[0]", "not a secret name"),
        (
            run(json!(["../etc/passwd"])),
            "secrets[0]",
            "not a secret name",
        ),
        (
            run(json!(["API_KEY\u{0}"])),
            "secrets[0]",
            "not a secret name",
        ),
        (run(json!(["API KEY"])), "secrets[0]", "not a secret name"),
        (run(json!(["API_KEY=1"])), "secrets[0]", "not a secret name"),
        (run(json!(["ÄPI"])), "secrets[0]", "not a secret name"),
        (
            json!({"profile": p, "argv": ["true"], "secrets": ["API_KEY"], "env": {"API_KEY": "x"}}),
            "secrets[0]",
            "placeholder",
        ),
    ] {
        let r = s.run(&body);
        let text = r.text();
        assert_eq!(r.status, 400, "{field}: {text}");
        let e = r.json();
        assert_eq!(e["error"]["code"], "bad_request", "{e}");
        assert_eq!(e["error"]["field"], field, "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(words) && msg.len() < 400, "{field}: {msg}");
        assert!(!text.contains(&st.secret));
    }
    for secrets in [json!(["NOPE"]), json!([null]), json!(3)] {
        let body = json!({"profile": p, "secrets": secrets});
        let r = s.call("POST", "/v1/sessions", &[], body.to_string().as_bytes());
        assert_eq!(r.status, 400, "{secrets}: {}", r.text());
        assert!(r.json()["error"]["field"]
            .as_str()
            .unwrap()
            .starts_with("secrets"));
    }
    // Alive, and a run without secrets is served as before.
    let r = s.run(&json!({"profile": p, "argv": ["sh", "-c", "echo \"[$API_KEY]\""]}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["stdout"]["data"], "[]\n");
    assert!(r.json()["applied"].get("secrets").is_none());
}

#[test]
fn operators_secrets_that_cannot_hold_stop_the_server_at_start() {
    let test = "operators_secrets_that_cannot_hold_stop_the_server_at_start";
    let st = setup("serve-secret-start");
    let who = common::users(test)[0];
    std::fs::write(st.dir.join("empty"), "\n").unwrap();
    std::fs::write(st.dir.join("lines"), "a\nb\n").unwrap();
    let bound = format!("API_KEY:127.0.0.2:{}", st.a.port);
    let key = format!("API_KEY={}", st.dir.arg("key"));
    let profiles = format!("python,{}", st.profile);
    for (args, words) in [
        (vec!["--secret", &bound], "--secret-file API_KEY=PATH"),
        (
            vec!["--secret", &bound, "--secret-file", "API_KEY=relative"],
            "--secret-file",
        ),
        (
            vec!["--secret", "API_KEY:127.0.0.9:1", "--secret-file", &key],
            "no profile of --profiles allows",
        ),
        (vec!["--secret-file", &key], "no --secret API_KEY:HOST"),
        (vec!["--egress-ca", &st.dir.arg("ca.pem")], "--egress-ca"),
        (vec!["--secret", "1X:a.org"], "not a variable name"),
    ] {
        let sock = format!("unix:{}", st.dir.arg("s.sock"));
        let o = common::stockade(who)
            .args(["serve", "--listen", &sock, "--profiles", &profiles])
            .args(&args)
            .output()
            .unwrap();
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(!err.contains(&st.secret), "{args:?}: {err}");
    }
    for (file, words) in [("empty", "the value is empty"), ("lines", "line break")] {
        let f = format!("API_KEY={}", st.dir.arg(file));
        let sock = format!("unix:{}", st.dir.arg("s.sock"));
        let o = common::stockade(who)
            .args(["serve", "--listen", &sock, "--profiles", &profiles])
            .args(["--secret", &bound, "--secret-file", &f])
            .output()
            .unwrap();
        let err = common::stderr(&o);
        assert!(
            o.status.code() == Some(2) && err.contains(words),
            "{file}: {err}"
        );
    }
}
