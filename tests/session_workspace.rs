//! A session over an overlay (`stockade session --overlay HOST_DIR:INNER`):
//! `changes` lists what its commands changed, `checkpoint` names a copy of
//! the upper layer, `rollback` brings one back (the jail started again on
//! it), `commit` applies the changes to the host directory as `--commit`
//! does, never through a symlink planted on the host. Each is refused
//! while a command runs, a bad name or an unknown checkpoint is an error
//! event and the session lives on; the host directory is untouched until
//! the commit. As root and as uid 65534; the fallback refuses an overlay.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::{Scratch, Who, NOBODY};
use serde_json::{json, Value};

/// A running `stockade session`, driven line by line.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    who: Who,
}

impl Session {
    /// `stockade session FLAGS` as `who` (`fallback`: user namespaces
    /// refused, through tests/payloads/chk_nouserns.c).
    fn spawn(who: Who, fallback: bool, flags: &[&str]) -> Session {
        let mut argv = vec![common::c_payload("sig_default")];
        if fallback {
            argv.push(common::c_payload("chk_nouserns"));
        }
        argv.push(common::binary().to_path_buf());
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).arg("session").args(flags);
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if who == Who::Nobody && common::is_root() {
            use std::os::unix::process::CommandExt;
            c.uid(NOBODY).gid(NOBODY);
        }
        let mut child = c.spawn().expect("start stockade session");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        Session {
            child,
            stdin,
            out,
            who,
        }
    }

    fn start(who: Who, flags: &[&str]) -> Session {
        let mut s = Session::spawn(who, false, flags);
        let ready = s.event();
        assert_eq!(ready["event"], "ready", "{who:?}: {ready}");
        s
    }

    fn send(&mut self, v: &Value) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{v}").unwrap();
        w.flush().unwrap();
    }

    fn event(&mut self) -> Value {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{:?}: not an event ({e}): {line:?}", self.who))
    }

    /// The next event of `id` (an output, exit, error or answer), or the
    /// end event.
    fn of(&mut self, id: &str) -> Value {
        loop {
            let e = self.event();
            if e["id"] == id || e["event"] == "end" {
                return e;
            }
        }
    }

    /// Run `command`; its stdout and exit event.
    fn exec(&mut self, id: &str, command: &str) -> (String, Value) {
        self.send(&json!({"op": "exec", "id": id, "command": command}));
        let mut out = String::new();
        loop {
            let e = self.of(id);
            match e["event"].as_str() {
                Some("output") if e["stream"] == "stdout" => {
                    out.push_str(e["data"].as_str().unwrap())
                }
                Some("output") => {}
                Some("exit") => return (out, e),
                _ => panic!("{:?}: {id}: {e}", self.who),
            }
        }
    }

    /// Ask `req` (given an id); its answer.
    fn ask(&mut self, id: &str, mut req: Value) -> Value {
        req["id"] = json!(id);
        self.send(&req);
        self.of(id)
    }

    /// Close; the end event and stockade's exit code.
    fn close(&mut self) -> (Value, i32) {
        self.send(&json!({"op": "close"}));
        loop {
            let e = self.event();
            if e["event"] == "end" {
                let code = self.child.wait().unwrap().code().unwrap_or(-1);
                return (e, code);
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A host directory the jail's user owns: `a.txt`, `gone.txt`, `d/x`.
fn project(s: &Scratch) -> PathBuf {
    let p = s.join("host");
    std::fs::create_dir_all(p.join("d")).unwrap();
    for (f, text) in [("a.txt", "one\n"), ("gone.txt", "bye\n"), ("d/x", "x\n")] {
        std::fs::write(p.join(f), text).unwrap();
    }
    common::host_sh_ok(&format!(
        "chown -hR {NOBODY}:{NOBODY} '{}'",
        s.path().display()
    ));
    p
}

/// path → kind of a `changes` answer.
fn kinds(ev: &Value) -> BTreeMap<String, String> {
    ev["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {ev}"))
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>"))
}

#[test]
fn a_session_lists_checkpoints_rolls_back_and_commits_its_overlay() {
    for who in common::users("session overlay") {
        let s = Scratch::new("sws-flow");
        let host = project(&s);
        let flag = format!("{}:/work/p", host.display());
        let mut j = Session::start(who, &["--overlay", &flag]);
        let (_, x) = j.exec(
            "e1",
            "cd /work/p && echo two > a.txt && echo new > b.txt && rm gone.txt && echo y > d/y",
        );
        assert_eq!(x["code"], 0, "{who:?}: {x}");
        let c = j.ask("c1", json!({"op": "changes"}));
        assert_eq!(c["event"], "changes", "{who:?}: {c}");
        let edited = map(&[
            ("/work/p/a.txt", "modified"),
            ("/work/p/b.txt", "added"),
            ("/work/p/d/y", "added"),
            ("/work/p/gone.txt", "deleted"),
        ]);
        assert_eq!(kinds(&c), edited, "{who:?}");
        assert_eq!(c["truncated"], false);
        let b = c["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == "/work/p/b.txt")
            .unwrap();
        // sha256("new\n")
        assert_eq!(
            b["sha256"],
            "7aa7a5359173d05b63cfd682e3c38487f3cb4f7f1d60659fe59fab1505977d4c"
        );
        let k = j.ask("k1", json!({"op": "checkpoint", "name": "edited"}));
        assert_eq!(
            k,
            json!({"event": "checkpoint", "id": "k1", "name": "edited"})
        );
        let (_, x) = j.exec("e2", "cd /work/p && rm -r a.txt d && echo three > b.txt && echo bye > gone.txt && echo z > z");
        assert_eq!(x["code"], 0, "{who:?}: {x}");
        let r = j.ask("r1", json!({"op": "rollback", "name": "edited"}));
        assert_eq!(
            r,
            json!({"event": "rollback", "id": "r1", "name": "edited"}),
            "{who:?}"
        );
        let (out, _) = j.exec("e3", "cd /work/p && cat a.txt b.txt d/x d/y && ls");
        assert_eq!(
            out, "two\nnew\nx\ny\na.txt\nb.txt\nd\n",
            "{who:?}: the checkpoint's view"
        );
        assert_eq!(
            kinds(&j.ask("c2", json!({"op": "changes"}))),
            edited,
            "{who:?}"
        );
        // Nothing reached the host before the commit.
        assert_eq!(read(&host.join("a.txt")), "one\n");
        assert!(host.join("gone.txt").exists() && !host.join("b.txt").exists());
        let m = j.ask("m1", json!({"op": "commit"}));
        assert_eq!(m["event"], "commit", "{who:?}: {m}");
        let mut applied: Vec<&str> = m["commit"]["applied"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        applied.sort();
        assert_eq!(
            applied,
            [
                "/work/p/a.txt",
                "/work/p/b.txt",
                "/work/p/d/y",
                "/work/p/gone.txt"
            ]
        );
        assert_eq!(m["commit"]["refused"], json!([]));
        assert_eq!(read(&host.join("a.txt")), "two\n");
        assert_eq!(read(&host.join("d/y")), "y\n");
        assert!(!host.join("gone.txt").exists());
        assert_eq!(kinds(&j.ask("c3", json!({"op": "changes"}))), map(&[]));
        // The commit forgot the checkpoints; the session lives on.
        let r = j.ask("r2", json!({"op": "rollback", "name": "edited"}));
        assert_eq!(r["error"]["code"], "no_checkpoint", "{who:?}: {r}");
        let (out, _) = j.exec("e4", "cat /work/p/a.txt");
        assert_eq!(out, "two\n");
        let (end, code) = j.close();
        assert_eq!((end["reason"].as_str(), code), (Some("closed"), 0), "{end}");
        assert_eq!(end["outcome"]["changes"], json!([]), "{end}");
    }
}

/// A session commits a file twice: what its first commit left is not a
/// change of the host's to the second. A file the host edited since the
/// session began is refused, and stays the host's.
#[test]
fn a_session_commits_a_file_again_but_never_over_the_host_s_edit() {
    for who in common::users("session overlay commits again") {
        let s = Scratch::new("sws-again");
        let host = project(&s);
        let flag = format!("{}:/work/p", host.display());
        let mut j = Session::start(who, &["--overlay", &flag]);
        let (_, x) = j.exec("e1", "cd /work/p && echo two > a.txt && echo new > d/y");
        assert_eq!(x["code"], 0, "{who:?}: {x}");
        let m = j.ask("m1", json!({"op": "commit"}));
        assert_eq!(m["commit"]["refused"], json!([]), "{who:?}: {m}");
        // The host edits d/x meanwhile; the session edits a.txt again and
        // d/x too.
        std::fs::write(host.join("d/x"), "host\n").unwrap();
        let (_, x) = j.exec(
            "e2",
            "cd /work/p && echo three > a.txt && echo jail > d/x && echo more > d/y",
        );
        assert_eq!(x["code"], 0, "{who:?}: {x}");
        let m = j.ask("m2", json!({"op": "commit"}));
        let mut applied: Vec<&str> = m["commit"]["applied"]
            .as_array()
            .unwrap_or_else(|| panic!("{who:?}: {m}"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        applied.sort();
        assert_eq!(applied, ["/work/p/a.txt", "/work/p/d/y"], "{who:?}: {m}");
        assert_eq!(
            m["commit"]["refused"][0]["path"], "/work/p/d/x",
            "{who:?}: {m}"
        );
        assert_eq!(read(&host.join("a.txt")), "three\n");
        assert_eq!(read(&host.join("d/y")), "more\n");
        assert_eq!(read(&host.join("d/x")), "host\n");
        j.close();
    }
}

#[test]
fn workspace_requests_wait_for_the_running_command_and_bad_ones_are_errors() {
    for who in common::users("session overlay busy") {
        let s = Scratch::new("sws-busy");
        let host = project(&s);
        let flag = format!("{}:/work/p", host.display());
        let mut j = Session::start(who, &["--overlay", &flag]);
        let k = j.ask("k", json!({"op": "checkpoint", "name": "start"}));
        assert_eq!(k["event"], "checkpoint", "{who:?}: {k}");
        j.send(&json!({"op": "exec", "id": "slow", "command": "echo go; exec sleep 600", "timeout": 60}));
        let first = j.of("slow");
        assert_eq!(first["data"], "go\n", "{who:?}: {first}");
        for (id, req) in [
            ("r", json!({"op": "rollback", "name": "start"})),
            ("m", json!({"op": "commit"})),
            ("c", json!({"op": "changes"})),
            ("k2", json!({"op": "checkpoint", "name": "mid"})),
        ] {
            let e = j.ask(id, req);
            assert_eq!(e["error"]["code"], "busy", "{who:?}: {e}");
            assert!(
                e["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("a command is running"),
                "{e}"
            );
        }
        j.send(&json!({"op": "interrupt", "id": "slow"}));
        let x = j.of("slow");
        assert_eq!(x["status"], "interrupted", "{who:?}: {x}");
        for (name, code) in [
            ("../x", "bad_request"),
            ("a/b", "bad_request"),
            ("..", "bad_request"),
            ("", "bad_request"),
            ("nope", "no_checkpoint"),
        ] {
            let e = j.ask("bad", json!({"op": "rollback", "name": name}));
            assert_eq!(e["error"]["code"], code, "{who:?}: {name:?}: {e}");
        }
        let e = j.ask("bad", json!({"op": "commit", "name": "x"}));
        assert_eq!(e["error"]["code"], "bad_request", "{who:?}: {e}");
        let (_, x) = j.exec("after", "echo more > /work/p/a.txt");
        assert_eq!(x["code"], 0, "{who:?}: the session lives on: {x}");
        let r = j.ask("r2", json!({"op": "rollback", "name": "start"}));
        assert_eq!(r["event"], "rollback", "{who:?}: {r}");
        let (out, _) = j.exec("e", "cat /work/p/a.txt");
        assert_eq!(out, "one\n", "{who:?}");
        j.close();
    }
}

#[test]
fn a_session_s_commit_never_writes_through_a_symlink_planted_on_the_host() {
    for who in common::users("session overlay planted") {
        let s = Scratch::new("sws-planted");
        let host = project(&s);
        let outside = s.join("outside");
        std::fs::create_dir(&outside).unwrap();
        common::host_sh_ok(&format!("chown {NOBODY}:{NOBODY} '{}'", outside.display()));
        let flag = format!("{}:/work/p", host.display());
        let mut j = Session::start(who, &["--overlay", &flag]);
        let (_, x) = j.exec("e", "echo new > /work/p/d/f && echo top > /work/p/top");
        assert_eq!(x["code"], 0, "{who:?}: {x}");
        // The host's d/ becomes a symlink out of the host directory.
        std::fs::rename(host.join("d"), s.join("d-moved")).unwrap();
        std::os::unix::fs::symlink(&outside, host.join("d")).unwrap();
        let m = j.ask("m", json!({"op": "commit"}));
        assert_eq!(
            m["commit"]["applied"],
            json!(["/work/p/top"]),
            "{who:?}: {m}"
        );
        let refused = &m["commit"]["refused"][0];
        assert_eq!(refused["path"], "/work/p/d/f", "{m}");
        assert!(
            refused["reason"]
                .as_str()
                .unwrap()
                .contains("a symlink on the host path"),
            "{m}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "{who:?}: written outside"
        );
        assert_eq!(read(&host.join("top")), "top\n");
        // What was refused is still a change.
        let c = j.ask("c", json!({"op": "changes"}));
        assert!(kinds(&c).contains_key("/work/p/d/f"), "{who:?}: {c}");
        j.close();
    }
}

#[test]
fn a_kept_upper_layer_outlives_the_session_for_a_later_commit() {
    for who in common::users("session overlay kept") {
        let s = Scratch::new("sws-kept");
        let host = project(&s);
        let keep = s.join("keep");
        let flag = format!("{}:/work/p", host.display());
        let k = keep.display().to_string();
        let mut j = Session::start(who, &["--overlay", &flag, "--overlay-upper", &k]);
        j.exec("e", "echo kept > /work/p/a.txt");
        // A rollback starts the jail again on the kept layers.
        j.ask("k", json!({"op": "checkpoint", "name": "one"}));
        j.exec("e2", "echo later > /work/p/a.txt");
        let r = j.ask("r", json!({"op": "rollback", "name": "one"}));
        assert_eq!(r["event"], "rollback", "{who:?}: {r}");
        let (end, _) = j.close();
        assert_eq!(
            kinds(&end["outcome"]),
            map(&[("/work/p/a.txt", "modified")]),
            "{who:?}: {end}"
        );
        assert_eq!(read(&host.join("a.txt")), "one\n");
        let mut c = common::stockade(who);
        let o = c.args(["overlay", "commit"]).arg(&keep).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
        assert_eq!(read(&host.join("a.txt")), "kept\n");
    }
}

#[test]
fn the_fallback_refuses_a_session_s_overlay() {
    for who in common::users("session overlay fallback") {
        let s = Scratch::new("sws-fallback");
        let host = project(&s);
        let flag = format!("{}:/work/p", host.display());
        let mut j = Session::spawn(who, true, &["--overlay", &flag]);
        let end = j.event();
        assert_eq!(end["event"], "end", "{who:?}: {end}");
        assert_eq!(end["outcome"]["status"], "setup_error", "{end}");
        assert!(
            end["outcome"]["error"]
                .as_str()
                .unwrap_or_default()
                .contains("--overlay"),
            "{end}"
        );
        let code = j.child.wait().unwrap().code();
        assert_eq!(code, Some(125), "{who:?}");
    }
}

#[test]
fn root_s_session_over_a_directory_it_owns_changes_and_commits_it() {
    if !common::is_root() {
        common::skip("session overlay root-owned", "not root");
        return;
    }
    // Root's own files are shown as the jail user's (an idmapped lower
    // layer) over the session's kept upper layer.
    let s = Scratch::new("sws-rootown");
    let host = s.join("host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("a.txt"), "root\n").unwrap();
    let flag = format!("{}:/work/p", host.display());
    let mut j = Session::start(Who::Root, &["--overlay", &flag]);
    let (out, x) = j.exec(
        "e",
        "echo more >> /work/p/a.txt && echo n > /work/p/n && cat /work/p/a.txt",
    );
    assert_eq!(
        (out.as_str(), &x["code"]),
        ("root\nmore\n", &json!(0)),
        "{x}"
    );
    j.ask("k", json!({"op": "checkpoint", "name": "k"}));
    let r = j.ask("r", json!({"op": "rollback", "name": "k"}));
    assert_eq!(r["event"], "rollback", "{r}");
    let m = j.ask("m", json!({"op": "commit"}));
    assert_eq!(
        m["commit"]["applied"],
        json!(["/work/p/a.txt", "/work/p/n"]),
        "{m}"
    );
    j.close();
    assert_eq!(read(&host.join("a.txt")), "root\nmore\n");
    use std::os::unix::fs::MetadataExt;
    for f in ["a.txt", "n"] {
        let m = std::fs::metadata(host.join(f)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (0, 0),
            "{f} keeps (or takes) root's ownership"
        );
    }
}
