//! A serve run's workdir cannot fill the host: it is the jail's own (a
//! tmpfs in the jail, charged to the run, of `--max-workdir` or the
//! memory limit's size; in the fallback the jail's metered run
//! directory), the request's files count against it, and a run that fills
//! it ends as `disk_limit` with nothing else on the host touched. Cold
//! runs, warm members and sessions; as root and as uid 65534; in the
//! fallback. A server killed mid-run leaves nothing the next one keeps.

mod common;
mod serve_util;

use serde_json::{json, Value};
use serve_util::Server;

/// Writes 64 MiB into the workdir, says how much got there, and stays:
/// the jail is killed once its workdir is found full.
const FILL: &str =
    "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; echo wrote $(stat -c %s big); sleep 30";

fn servers(test: &str, args: &[&str]) -> Vec<(String, bool, Server)> {
    let mut out = Vec::new();
    for who in common::users(test) {
        out.push((format!("{who:?}"), false, Server::start(who, args)));
        out.push((
            format!("{who:?} fallback"),
            true,
            Server::start_wrapped(&["chk_nouserns"], who, args),
        ));
    }
    out
}

/// How much of the 64 MiB the payload says it wrote.
fn wrote(v: &Value) -> u64 {
    v["stdout"]["data"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .strip_prefix("wrote ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_run_that_fills_its_workdir_ends_as_disk_limit_and_the_host_keeps_nothing() {
    let servers = servers(
        "a_run_that_fills_its_workdir_ends_as_disk_limit_and_the_host_keeps_nothing",
        &["--max-workdir", "8m", "--max-timeout", "5s"],
    );
    // The servers side by side, in lanes (common::lanes): some runs wait
    // out the 5 s timeout, and each server has its own workdirs.
    std::thread::scope(|sc| {
        for lane in common::lanes(servers, |(who, _, _)| who.starts_with("Root")) {
            sc.spawn(move || for (who, fallback, s) in lane {
                // Files past the cap: refused before a jail starts.
                let big = "x".repeat(9 << 20);
                let r = s.run(&json!({"profile": "shell", "argv": ["true"], "files": {"a": big}}));
                assert_eq!(r.status, 413, "{who}: {}", r.text());
                // A payload that writes past the cap.
                let r = s.run(&json!({"profile": "shell", "argv": ["sh", "-c", FILL]}));
                assert_eq!(r.status, 200, "{who}: {}", r.text());
                let v = r.json();
                assert!(wrote(&v) <= 8 << 20, "{who}: {v}");
                if fallback {
                    // The fallback's run directory: metered (killed, disk_limit)
                    // or, started by root, a tmpfs of its own (ENOSPC).
                    assert!(
                        v["status"] == "disk_limit" || wrote(&v) < 64 << 20,
                        "{who}: {v}"
                    );
                } else {
                    assert_eq!(v["status"], "disk_limit", "{who}: {v}");
                    assert_eq!(v["signal"], 9, "{who}: {v}");
                    assert_eq!(v["applied"]["limits"]["memory"], 512u64 << 20, "{who}: {v}");
                }
                // The request's files count: 6 MiB of them, then 4 MiB more (a
                // payload that ends on its own: the full workdir is found after).
                let six = "y".repeat(6 << 20);
                let r = s.run(&json!({"profile": "shell",
                    "argv": ["sh", "-c", "dd if=/dev/zero of=more bs=1M count=4 2>/dev/null; stat -c %s a more"],
                    "files": {"a": six}}));
                assert_eq!(r.status, 200, "{who}: {}", r.text());
                let v = r.json();
                if !fallback {
                    assert_eq!(v["status"], "disk_limit", "{who}: {v}");
                }
                // Nothing of any run stays on the host.
                assert!(s.leftovers().is_empty(), "{who}: {:?}", s.leftovers());
                // And the server serves on.
                let r = s.run(&json!({"profile": "shell", "argv": ["echo", "ok"]}));
                assert_eq!(r.json()["stdout"]["data"], "ok\n", "{who}: {}", r.text());
            });
        }
    });
}

#[test]
fn the_workdir_defaults_to_the_memory_limit_and_holds_the_files() {
    let who = common::users("the_workdir_defaults_to_the_memory_limit_and_holds_the_files")[0];
    let s = Server::start(who, &[]);
    let r = s.run(&json!({"profile": "shell",
        "argv": ["sh", "-c", "df -k . | tail -1; cat d/in.txt; ls -l run.sh | cut -c1-10"],
        "files": {"d/in.txt": "hello\n", "run.sh": {"text": "echo", "executable": true}},
        "limits": {"memory": "96m"}}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let out = v["stdout"]["data"].as_str().unwrap_or_default().to_string();
    let mut lines = out.lines();
    let df: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(df.first(), Some(&"tmpfs"), "{v}");
    assert_eq!(df.get(1), Some(&"98304"), "{v}");
    assert_eq!(lines.next(), Some("hello"), "{v}");
    assert_eq!(lines.next(), Some("-rwxr-xr-x"), "{v}");
}

#[test]
fn a_session_or_a_warm_member_that_fills_its_workdir_ends_as_disk_limit() {
    for who in common::users("a_session_or_a_warm_member_that_fills_its_workdir_ends_as_disk_limit")
    {
        let s = Server::start(who, &["--max-workdir", "8m", "--warm", "python=1"]);
        // A session: its jail ends, the exec hears why.
        let r = s.call(
            "POST",
            "/v1/sessions",
            &[],
            json!({"profile": "shell", "files": {"in": "x"}})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(r.status, 201, "{who:?}: {}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_string();
        let r = s.call(
            "POST",
            &format!("/v1/sessions/{id}/exec"),
            &[],
            json!({"command": FILL}).to_string().as_bytes(),
        );
        assert_eq!(r.status, 410, "{who:?}: {}", r.text());
        assert!(r.text().contains("disk_limit"), "{who:?}: {}", r.text());
        // A warm member (python=1 is filled before /readyz says ready).
        s.wait_ready();
        let code = "open('big', 'wb').write(bytes(64 << 20))";
        let r = s.run(
            &json!({"profile": "python", "argv": ["python3", "-c", code],
            "files": {"in.txt": "x"}}),
        );
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["status"], "disk_limit", "{who:?}: {v}");
        // It was the warm member's run, not a cold one.
        let hits = serve_util::metric(&s, "stockade_pool_hits_total{profile=\"python\"}");
        assert_eq!(hits, 1, "{who:?}");
        assert!(s.leftovers().is_empty(), "{who:?}: {:?}", s.leftovers());
    }
}

#[test]
fn a_server_killed_mid_run_leaves_nothing_the_next_one_keeps() {
    for who in common::users("a_server_killed_mid_run_leaves_nothing_the_next_one_keeps") {
        let mut s = Server::start_wrapped(&["chk_nouserns"], who, &[]);
        let runs = s.runs.clone();
        // A fallback run in flight, with files: its run directory is on
        // the host (under the server's TMPDIR).
        let sock = s.sock.clone();
        let body = json!({"profile": "shell", "argv": ["sh", "-c", "sleep 600; echo killed-mid-run"],
            "files": {"f": "x"}});
        let t = std::thread::spawn(move || {
            let c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
            serve_util::send(c, "POST", "/v1/runs", &[], body.to_string().as_bytes())
        });
        serve_util::process_with(s.pid(), "killed-mid-run");
        assert!(!s.leftovers().is_empty(), "{who:?}: the run's directory");
        // SIGKILL the server alone, as an OOM killer or an operator would:
        // its runs' supervisors see their caller gone and end their jails,
        // and each run's directory goes with its run.
        s.kill_hard();
        let _ = t.join();
        let deadline = std::time::Instant::now() + serve_util::PATIENCE;
        while !s.leftovers().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{who:?}: {:?} outlive the server",
                s.leftovers()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The next server on the same TMPDIR: its first run removes what
        // no live run holds (the run directories' locks say which).
        let s2 = Server::start_wrapped_in(&["chk_nouserns"], who, &[], runs.clone());
        let r = s2.run(&json!({"profile": "shell", "argv": ["true"]}));
        assert_eq!(r.status, 200, "{who:?}: {}", r.text());
        assert!(s2.leftovers().is_empty(), "{who:?}: {:?}", s2.leftovers());
        drop(s2);
        drop(s);
    }
}
