//! The outcome's record of denials (issue 17, point 3) for what the kernel
//! refuses on its own: Landlock's refusals, read from the kernel's audit
//! records where stockade can read them (root, audit enabled) and said to
//! be unreadable, with the reason, where it cannot (rootless, audit off);
//! each run sees only its own domain's records; and a hostile payload's
//! flood of refusals (opens, syscalls, connects) stays bounded and
//! counted, the run ending normally.
//!
//! Landlock writes audit records only while the kernel's audit is
//! enabled. stockade never changes that setting; these tests, as the
//! host's operator, switch it on (or off) for the tests that need it and
//! put it back as it was (one test at a time: see `Audit`).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use common::{Scratch, Who};
use serde_json::Value;

/// The kernel's audit setting, held as a test needs it and put back as
/// it was when dropped. Tests that depend on it run one at a time.
struct Audit {
    before: u32,
    _one: MutexGuard<'static, ()>,
}

static AUDIT: Mutex<()> = Mutex::new(());

const AUDIT_PY: &str = r#"
import socket, struct, sys, select
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
if len(sys.argv) > 1:
    body = struct.pack("=8I", 1, int(sys.argv[1]), 0, 0, 0, 0, 0, 0) + b"\0" * 32
    s.send(struct.pack("=IHHII", 16 + len(body), 1001, 1 | 4, 1, 0) + body)
else:
    s.send(struct.pack("=IHHII", 16, 1000, 1, 1, 0))
while True:
    select.select([s], [], [], 2)
    d = s.recv(8192)
    typ = struct.unpack("=H", d[4:6])[0]
    if typ == 2:
        err = struct.unpack("=i", d[16:20])[0]
        if err or len(sys.argv) > 1:
            print("error" if err else "ok", err)
            break
    elif typ == 1000:
        print("enabled", struct.unpack("=I", d[20:24])[0])
        break
"#;

fn audit_py(args: &[&str]) -> String {
    let o = Command::new("python3")
        .arg("-c")
        .arg(AUDIT_PY)
        .args(args)
        .output()
        .expect("run python3");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The kernel's audit setting (0 off, 1 on, 2 on and locked), if it can
/// be read (root).
fn audit_state() -> Option<u32> {
    audit_py(&[]).strip_prefix("enabled ")?.parse().ok()
}

impl Audit {
    /// Audit `on` (or off) for the test, or why not.
    fn set(on: bool) -> Result<Audit, String> {
        let one = AUDIT.lock().unwrap_or_else(|e| e.into_inner());
        let before = audit_state().ok_or("cannot read the kernel's audit setting")?;
        if (before != 0) != on {
            if before == 2 {
                return Err("the kernel's audit setting is locked on".into());
            }
            let r = audit_py(&[if on { "1" } else { "0" }]);
            if !r.starts_with("ok") {
                return Err(format!("cannot change the kernel's audit setting: {r}"));
            }
        }
        Ok(Audit { before, _one: one })
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        if audit_state() != Some(self.before) && self.before != 2 {
            audit_py(&[&self.before.to_string()]);
        }
    }
}

/// Landlock ABI 7 (audit records) and root, or a SKIPPED line.
fn can_read_records(test: &str) -> bool {
    if !common::is_root() {
        common::skip(test, "not root: stockade cannot read audit records");
        return false;
    }
    let abi = common::landlock_abi();
    if abi < 7 {
        common::skip(
            test,
            &format!("Landlock ABI {abi}: no audit records before 7"),
        );
        return false;
    }
    true
}

/// Records readable (`can_read_records`) and the kernel's audit set `on`
/// for the test, or a SKIPPED line.
fn audit_for(test: &str, on: bool) -> Option<Audit> {
    if !can_read_records(test) {
        return None;
    }
    match Audit::set(on) {
        Ok(a) => Some(a),
        Err(why) => {
            common::skip(test, &why);
            None
        }
    }
}

/// A scratch tree with `sec/key` (a secret) and `sec/f0..fN` (flood
/// targets), every file world-readable so only Landlock refuses them.
fn secrets(tag: &str, files: usize) -> Scratch {
    let s = Scratch::new(tag).world_writable();
    let sec = s.join("sec");
    std::fs::create_dir_all(&sec).unwrap();
    std::fs::write(sec.join("key"), "s3cret\n").unwrap();
    for i in 0..files {
        std::fs::write(sec.join(format!("f{i}")), "x").unwrap();
    }
    let mut perms = vec![sec.clone()];
    perms.extend(std::fs::read_dir(&sec).unwrap().map(|e| e.unwrap().path()));
    for p in perms {
        use std::os::unix::fs::PermissionsExt;
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    s
}

/// `stockade run --report - FLAGS -- CMD` as `who`, through `wrappers`
/// (`chk_nouserns`: the fallback without namespaces).
/// The outcome is checked against src/outcome.schema.json.
fn run(wrappers: &[&str], who: Who, flags: &[&str], cmd: &[&str]) -> Output {
    let mut f = vec!["--report", "-"];
    f.extend_from_slice(flags);
    let o = common::wrapped(wrappers, who, &f, cmd)
        .output()
        .expect("start stockade");
    valid(&o);
    o
}

/// The outcome on `o`'s last line of stdout validates against the schema.
fn valid(o: &Output) {
    common::validate_outcome(common::stdout(o).lines().last().unwrap_or(""));
}

/// The jail sees `sec` at /sec, bound read-only and left out of the
/// Landlock ruleset (in the fallback: not granted at all, at its host
/// path). Flags and the path the payload uses for `sec`.
fn hidden_sec(s: &Scratch, fallback: bool) -> (Vec<String>, String) {
    let host = s.join("sec").display().to_string();
    if fallback {
        (Vec::new(), host)
    } else {
        (
            vec![
                "--ro-bind".into(),
                format!("{host}:/sec"),
                "--landlock-exclude".into(),
                "/sec".into(),
            ],
            "/sec".into(),
        )
    }
}

fn landlock_denials(r: &Value) -> Vec<(String, Option<String>, u64)> {
    r["denials"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| d["kind"] == "landlock")
                .map(|d| {
                    (
                        d["access"].as_str().unwrap_or("").to_string(),
                        d["path"].as_str().map(str::to_string),
                        d["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

const MODES: [(&[&str], &str); 2] = [(&[], "jail"), (&["chk_nouserns"], "fallback")];

#[test]
fn a_landlock_refusal_is_recorded_with_its_path() {
    let Some(_audit) = audit_for("a_landlock_refusal_is_recorded_with_its_path", true) else {
        return;
    };
    for (wrappers, mode) in MODES {
        let s = secrets("denials-ll", 0);
        let fallback = !wrappers.is_empty();
        let (flags, sec) = hidden_sec(&s, fallback);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let script = format!("cat {sec}/key; cat {sec}/key; ls {sec}; echo done");
        let o = run(wrappers, Who::Root, &flags, &["/bin/sh", "-c", &script]);
        let r = common::last_json(&o);
        assert_eq!(r["exit_code"], 0, "{mode}: {r}");
        assert!(!common::stdout(&o).contains("s3cret"), "{mode}: read it");
        let got = landlock_denials(&r);
        let key = format!("{sec}/key");
        assert!(
            got.contains(&("fs.read_file".into(), Some(key.clone()), 2)),
            "{mode}: {got:?}\n{r}"
        );
        assert!(
            got.iter()
                .any(|(a, p, _)| a == "fs.read_dir" && p.as_deref() == Some(sec.as_str())),
            "{mode}: {got:?}"
        );
        assert!(r.get("denials_unrecorded").is_none(), "{mode}: {r}");
    }
}

#[test]
fn where_records_cannot_be_read_the_outcome_says_why() {
    for (wrappers, mode) in MODES {
        // As uid 65534 (or, the suite run as a user, as that user).
        let who = Who::Nobody;
        let o = run(wrappers, who, &[], &["/bin/true"]);
        let r = common::last_json(&o);
        assert_eq!(r["exit_code"], 0, "{mode}: {r}");
        let why = r["denials_unrecorded"]["landlock"].as_str().unwrap_or("");
        let abi = common::landlock_abi();
        if abi < 7 {
            assert!(why.contains("ABI"), "{mode}: {r}");
        } else {
            assert!(why.contains("CAP_AUDIT_READ"), "{mode}: {r}");
        }
    }
}

#[test]
fn audit_off_is_said_and_left_off() {
    let Some(_audit) = audit_for("audit_off_is_said_and_left_off", false) else {
        return;
    };
    let s = secrets("denials-off", 0);
    let (flags, sec) = hidden_sec(&s, false);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let o = run(&[], Who::Root, &flags, &["/bin/cat", &format!("{sec}/key")]);
    let r = common::last_json(&o);
    let why = r["denials_unrecorded"]["landlock"].as_str().unwrap_or("");
    assert!(why.contains("audit is disabled"), "{r}");
    assert!(landlock_denials(&r).is_empty(), "{r}");
    assert_eq!(audit_state(), Some(0), "stockade changed the audit setting");
}

#[test]
fn concurrent_runs_each_see_only_their_own_landlock_records() {
    let Some(_audit) = audit_for(
        "concurrent_runs_each_see_only_their_own_landlock_records",
        true,
    ) else {
        return;
    };
    let s = secrets("denials-two", 2);
    let (flags, sec) = hidden_sec(&s, false);
    let start = |file: &str| {
        // Each run reads only its own file, many times over.
        let script = format!("i=0; while [ $i -lt 300 ]; do cat {sec}/{file} 2>/dev/null; i=$((i+1)); done; echo done");
        let mut f = vec!["--report", "-"];
        f.extend(flags.iter().map(String::as_str));
        common::wrapped(&[], Who::Root, &f, &["/bin/sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stockade")
    };
    let (a, b) = (start("f0"), start("f1"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for (o, mine, theirs) in [(&a, "f0", "f1"), (&b, "f1", "f0")] {
        let r = common::last_json(o);
        let got = landlock_denials(&r);
        let paths: Vec<&str> = got.iter().filter_map(|(_, p, _)| p.as_deref()).collect();
        assert!(
            paths.contains(&format!("{sec}/{mine}").as_str()),
            "{mine}: {got:?}"
        );
        assert!(
            !paths.iter().any(|p| p.ends_with(theirs)),
            "{mine} saw the other run's records: {got:?}"
        );
        // Its own refusals, counted: never more than it made.
        let n: u64 = got.iter().map(|(_, _, n)| n).sum::<u64>()
            + r["denials_more"]["landlock"].as_u64().unwrap_or(0);
        assert!((1..=300).contains(&n), "{mine}: {n} {r}");
    }
}

/// `refused=R of=N` from tests/payloads/flood.c.
fn flood_said(o: &Output) -> (u64, u64) {
    // The payload's stdout is in the report (`--report -`).
    let r = common::last_json(o);
    let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
    let line = out
        .lines()
        .find(|l| l.starts_with("refused="))
        .unwrap_or_else(|| panic!("no flood line: {r}\n{}", common::stderr(o)));
    let mut it = line
        .split(' ')
        .map(|w| w.split('=').nth(1).unwrap().parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// The run ended by itself with exit code 0.
fn assert_exited_0(r: &Value, what: &str) {
    assert_eq!(
        (r["status"].as_str(), r["exit_code"].as_i64()),
        (Some("exited"), Some(0)),
        "{what}: {r}"
    );
}

fn count_of(r: &Value, kind: &str) -> (usize, u64) {
    let list: Vec<&Value> = r["denials"]
        .as_array()
        .map(|a| a.iter().filter(|d| d["kind"] == kind).collect())
        .unwrap_or_default();
    let n = list
        .iter()
        .map(|d| d["count"].as_u64().unwrap())
        .sum::<u64>()
        + r["denials_more"][kind].as_u64().unwrap_or(0);
    (list.len(), n)
}

#[test]
fn a_flood_of_refused_opens_stays_bounded_and_counted() {
    let Some(_audit) = audit_for("a_flood_of_refused_opens_stays_bounded_and_counted", true) else {
        return;
    };
    let flood = common::c_payload("flood");
    for (wrappers, mode) in MODES {
        let s = secrets("denials-flood", 300);
        let (mut flags, sec) = hidden_sec(&s, !wrappers.is_empty());
        flags.extend(["--ro-bind".into(), flood.display().to_string()]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let flood = flood.to_str().unwrap();
        let o = run(
            wrappers,
            Who::Root,
            &flags,
            &[flood, "open", &sec, "300", "100000"],
        );
        let r = common::last_json(&o);
        assert_exited_0(&r, mode);
        assert_eq!(flood_said(&o), (100_000, 100_000), "{mode}");
        let (records, counted) = count_of(&r, "landlock");
        assert!((1..=256).contains(&records), "{mode}: {records} records");
        assert!(counted <= 100_000, "{mode}: counted {counted}");
    }
}

#[test]
fn a_flood_of_refused_syscalls_stays_bounded_and_counted() {
    let flood = common::c_payload("flood");
    let flood = flood.to_str().unwrap();
    for who in common::users("a_flood_of_refused_syscalls_stays_bounded_and_counted") {
        for (wrappers, mode) in MODES {
            // One thread, 100k refusals: one record, every one counted.
            let flags = ["--seccomp-action", "errno", "--ro-bind", flood];
            let o = run(wrappers, who, &flags, &[flood, "sys", "100000", "1"]);
            let r = common::last_json(&o);
            assert_eq!(r["exit_code"], 0, "{who:?} {mode}: {r}");
            assert_eq!(flood_said(&o), (100_000, 100_000), "{who:?} {mode}");
            if r["denials_unrecorded"]["seccomp"].is_string() {
                continue; // another filter holds the listener (said so)
            }
            assert_eq!(count_of(&r, "seccomp"), (1, 100_000), "{who:?} {mode}: {r}");
            // 300 threads: more pairs than records kept; the rest counted.
            let o = run(wrappers, who, &flags, &[flood, "sys", "3000", "300"]);
            let r = common::last_json(&o);
            assert_eq!(r["exit_code"], 0, "{who:?} {mode}: {r}");
            assert_eq!(count_of(&r, "seccomp"), (256, 3000), "{who:?} {mode}: {r}");
        }
    }
}

#[test]
fn a_flood_of_refused_connects_stays_bounded_and_counted() {
    let flood = common::c_payload("flood");
    let bind = format!("{}:/flood", flood.display());
    for who in common::users("a_flood_of_refused_connects_stays_bounded_and_counted") {
        let flags = ["--allow-host", "pypi.org", "--ro-bind", &bind];
        let script = "p=${HTTP_PROXY##*:}; p=${p%/}; exec /flood connect \"$p\" 3000";
        let o = run(&[], who, &flags, &["/bin/sh", "-c", script]);
        let r = common::last_json(&o);
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}");
        assert_eq!(flood_said(&o), (3000, 3000), "{who:?}");
        assert_eq!(count_of(&r, "network"), (256, 3000), "{who:?}: {r}");
    }
}

/// 100k direct TCP connects, each refused by Landlock (the jail's
/// network has only `lo`, and Landlock denies TCP connect): 1000 distinct
/// ports, so more than the records kept; the rest counted.
#[test]
fn a_flood_of_refused_tcp_connects_stays_bounded_and_counted() {
    let Some(_audit) = audit_for(
        "a_flood_of_refused_tcp_connects_stays_bounded_and_counted",
        true,
    ) else {
        return;
    };
    let flood = common::c_payload("flood");
    let flood = flood.to_str().unwrap();
    let o = run(
        &[],
        Who::Root,
        &["--ro-bind", flood],
        &[flood, "tcp", "100000"],
    );
    let r = common::last_json(&o);
    assert_exited_0(&r, "tcp flood");
    assert_eq!(flood_said(&o), (100_000, 100_000));
    let (records, counted) = count_of(&r, "landlock");
    assert!((1..=256).contains(&records), "{records} records");
    assert!(counted <= 100_000, "counted {counted}");
    let first = &r["denials"].as_array().unwrap()[0];
    assert_eq!(first["access"], "net.connect_tcp", "{r}");
    assert!(
        first["detail"]
            .as_str()
            .unwrap_or("")
            .contains("daddr=127.0.0.1"),
        "{r}"
    );
}

/// `--denials-fd 3` as a file the shell opened; the lines it got.
fn lines_on_fd(who: Who, flags: &str, cmd: &str, dir: &Path) -> (Output, Vec<Value>) {
    let file = dir.join("denials.jsonl");
    let script = format!(
        "exec 3>'{}' && exec '{}' run --report - --denials-fd 3 {flags} -- sh -c \"$0\"",
        file.display(),
        common::binary().display(),
    );
    let o = common::host_command(who, "/bin/sh")
        .args(["-c", &script, cmd])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (o, lines)
}

#[test]
fn landlock_refusals_reach_the_denials_fd_as_json_lines() {
    let Some(_audit) = audit_for("landlock_refusals_reach_the_denials_fd_as_json_lines", true)
    else {
        return;
    };
    let s = secrets("denials-fd", 0);
    let host = s.join("sec").display().to_string();
    let flags = format!("--ro-bind {host}:/sec --landlock-exclude /sec");
    let (o, lines) = lines_on_fd(
        Who::Root,
        &flags,
        "cat /sec/key; cat /sec/key; true",
        s.path(),
    );
    let r = common::last_json(&o);
    // One line per new record (the repeat only counts in the outcome).
    let ll: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "landlock").collect();
    assert_eq!(ll.len(), 1, "{lines:?}");
    assert_eq!(ll[0]["path"], "/sec/key");
    assert_eq!(ll[0]["access"], "fs.read_file");
    assert_eq!(
        landlock_denials(&r),
        vec![("fs.read_file".into(), Some("/sec/key".into()), 2)]
    );
}

/// A reader that never reads (its pipe already full): the run is not
/// held up, and the lines it could not take are counted.
#[test]
fn a_stalled_denials_reader_does_not_hold_the_run() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::io::Write;
    let flood = common::c_payload("flood");
    let bind = format!("{}:/flood", flood.display());
    for who in common::users("a_stalled_denials_reader_does_not_hold_the_run") {
        let (reader, mut writer) = std::io::pipe().unwrap();
        fcntl(&writer, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
        let page = [b'x'; 4096];
        while writer.write(&page).is_ok() {}
        fcntl(&writer, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
        let o = common::stockade(who)
            .args(["run", "--report-fd", "2", "--denials-fd", "1"])
            .args(["--seccomp-action", "errno", "--ro-bind", &bind, "--"])
            .args(["/bin/sh", "-c", "/flood sys 300 300 >/dev/null"])
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        drop(reader);
        let err = common::stderr(&o);
        let line = err.lines().rfind(|l| l.starts_with('{')).unwrap_or("");
        let r: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{who:?}: {e}: {err}"));
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}");
        if r["denials_unrecorded"]["seccomp"].is_string() {
            continue;
        }
        assert_eq!(count_of(&r, "seccomp"), (256, 300), "{who:?}: {r}");
        // Every new record's line found the pipe full.
        assert_eq!(r["denial_lines_dropped"], 256, "{who:?}: {r}");
    }
}

/// A project every user can read: `.env`, `sub/.env`, `secrets/key`.
fn project(tag: &str) -> Scratch {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new(tag).world_writable();
    let p = s.path();
    std::fs::create_dir_all(p.join("sub")).unwrap();
    std::fs::create_dir_all(p.join("secrets")).unwrap();
    for (f, text) in [
        (".env", "SECRET-ENV\n"),
        ("sub/.env", "SECRET-SUB\n"),
        ("secrets/key", "SECRET-KEY\n"),
        ("a.txt", "sibling\n"),
    ] {
        std::fs::write(p.join(f), text).unwrap();
        std::fs::set_permissions(p.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    for d in ["sub", "secrets"] {
        std::fs::set_permissions(p.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    s
}

fn mask_denials(r: &Value) -> Vec<(String, String, u64)> {
    r["denials"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| d["kind"] == "mask")
                .map(|d| {
                    (
                        d["path"].as_str().unwrap_or("").to_string(),
                        d["access"].as_str().unwrap_or("").to_string(),
                        d["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The payload opens a masked `.env` (twice) and lists a masked
/// directory: each is recorded with its jail path and count. A stat of a
/// masked file is not an open, and is not seen (the README says so).
#[test]
fn opening_a_masked_path_records_a_mask_access() {
    for who in common::users("opening_a_masked_path_records_a_mask_access") {
        let s = project("denials-mask");
        let p = s.path().display().to_string();
        let bind = format!("{p}:/work");
        let secrets = format!("{p}/secrets");
        let flags = [
            "--ro-bind",
            &bind,
            "--deny-glob",
            "**/.env",
            "--deny",
            &secrets,
        ];
        let script = "cat /work/.env; cat /work/.env; ls /work/secrets; stat /work/sub/.env >/dev/null; cat /work/a.txt";
        let o = run(&[], who, &flags, &["/bin/sh", "-c", script]);
        let r = common::last_json(&o);
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}");
        let out = r["stdout"]["data"].as_str().unwrap_or("");
        assert!(!out.contains("SECRET"), "{who:?}: {out}");
        assert!(out.contains("sibling"), "{who:?}: {out}");
        let mut got = mask_denials(&r);
        got.sort();
        assert_eq!(
            got,
            vec![
                ("/work/.env".into(), "open".into(), 2),
                ("/work/secrets".into(), "open".into(), 1),
            ],
            "{who:?}: {r}"
        );
        assert!(
            r["denials_unrecorded"].get("mask").is_none(),
            "{who:?}: {r}"
        );
    }
}

/// 100k opens of a masked file: one record, bounded, the run ends
/// normally; and the attempts reach --denials-fd as one JSON line.
#[test]
fn a_flood_of_masked_opens_stays_bounded_and_reaches_the_denials_fd() {
    let flood = common::c_payload("flood");
    for who in common::users("a_flood_of_masked_opens_stays_bounded_and_reaches_the_denials_fd") {
        let s = project("denials-mask-flood");
        let p = s.path().display().to_string();
        let flags = format!(
            "--ro-bind {p}:/work --deny-glob '**/.env' --ro-bind {}:/flood",
            flood.display()
        );
        let (o, lines) = lines_on_fd(who, &flags, "/flood open /work/.env 0 100000", s.path());
        let r = common::last_json(&o);
        assert_exited_0(&r, &format!("{who:?}"));
        assert_eq!(
            flood_said(&o),
            (0, 100_000),
            "{who:?}: the cover opens (empty)"
        );
        let got = mask_denials(&r);
        assert_eq!(got.len(), 1, "{who:?}: {got:?}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str()),
            ("/work/.env", "open")
        );
        // At least one, never more than were made.
        assert!((1..=100_000).contains(&got[0].2), "{who:?}: {got:?}");
        let ml: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "mask").collect();
        assert_eq!(ml.len(), 1, "{who:?}: {lines:?}");
        assert_eq!(ml[0]["path"], "/work/.env", "{who:?}");
    }
}

/// In the fallback nothing can be mounted over a denied path: Landlock
/// keeps it out, and the refusal is a Landlock denial with the host path.
#[test]
fn in_the_fallback_a_masked_path_is_a_landlock_refusal() {
    let Some(_audit) = audit_for("in_the_fallback_a_masked_path_is_a_landlock_refusal", true)
    else {
        return;
    };
    let s = project("denials-mask-fb");
    let p = s.path().display().to_string();
    let flags = ["--ro-bind", &p, "--deny-glob", "**/.env"];
    let env = format!("{p}/.env");
    let o = run(&["chk_nouserns"], Who::Root, &flags, &["/bin/cat", &env]);
    let r = common::last_json(&o);
    assert_ne!(r["layers"]["user_namespace"]["state"], "applied", "{r}");
    assert!(!common::stdout(&o).contains("SECRET"), "{r}");
    let got = landlock_denials(&r);
    assert!(
        got.iter()
            .any(|(a, path, _)| a == "fs.read_file" && path.as_deref() == Some(env.as_str())),
        "{got:?}\n{r}"
    );
}
