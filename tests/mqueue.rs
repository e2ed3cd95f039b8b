//! POSIX message queues in the jail: mq_open, mq_send, mq_receive and
//! mq_unlink work in the jail's own IPC namespace (as root and as uid
//! 65534, under the rlimit rung with its bounds), a jail's queues are its
//! own (neither the host's nor another jail's), and where there is no IPC
//! namespace (the fallback) no queue is named in the host's. The same
//! under `stockade bwrap` with STOCKADE_PROFILE's Landlock, where the
//! root mounts no mqueue (bwrap's `--dev` has none): the rule is on the
//! IPC namespace's mqueue filesystem, mounted nowhere.
//! tests/payloads/mq_check.c is the program.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use common::{stdout, Who};

const ENOSPC: i32 = 28;

fn mq_check() -> PathBuf {
    common::c_payload("mq_check")
}

/// `--ro-bind mq_check:/mq_check`.
fn bind() -> String {
    format!("{}:/mq_check", mq_check().display())
}

/// A queue name of this test process.
fn name(tag: &str) -> String {
    format!("/stockade-mq-{tag}-{}", std::process::id())
}

/// mq_check on the host, as `who`.
fn host(who: Who, args: &[&str]) -> Command {
    let mut c = Command::new(mq_check());
    c.args(args);
    if who == Who::Nobody && common::is_root() {
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    c
}

fn host_probe(q: &str) -> String {
    let o = host(Who::Root, &["probe", q])
        .output()
        .expect("run mq_check");
    stdout(&o).trim().to_string()
}

/// Start `cmd` (an `mq_check hold …`) with stdin and stdout piped and
/// wait for its "made" line.
fn hold(mut cmd: Command) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "made", "the holder did not make its queue");
    (child, out)
}

/// Close the holder's stdin and collect the rest of its output.
fn release(mut child: Child, mut out: BufReader<std::process::ChildStdout>) -> String {
    drop(child.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "holder: {st:?}: {rest}");
    rest
}

fn expect_ok(o: &Output, want: &str, what: &str) {
    common::expect_code(o, 0, what);
    assert!(stdout(o).contains(want), "{what}: {}", stdout(o));
}

#[test]
fn message_queues_work_in_the_jail() {
    for who in common::users("message_queues_work_in_the_jail") {
        let q = name("rt");
        let o = common::run(
            who,
            &["--ro-bind", &bind()],
            &["/mq_check", "roundtrip", &q],
        );
        expect_ok(&o, "roundtrip ok", &format!("{who:?}: C"));
        // Python through librt, as evaluator code calls it.
        let script = format!(
            "import ctypes, os\n\
             rt = ctypes.CDLL('librt.so.1', use_errno=True)\n\
             q = rt.mq_open(b'{q}', os.O_CREAT | os.O_RDWR, 0o600, None)\n\
             assert q >= 0, os.strerror(ctypes.get_errno())\n\
             assert rt.mq_send(q, b'hi', 2, 0) == 0\n\
             b = ctypes.create_string_buffer(8192)\n\
             n = rt.mq_receive(q, b, 8192, None)\n\
             assert b.raw[:n] == b'hi', n\n\
             print(sorted(os.listdir('/dev/mqueue')))\n\
             assert rt.mq_unlink(b'{q}') == 0\n\
             print('python ok')\n"
        );
        let o = common::run(who, &["--profile", "python"], &["python3", "-c", &script]);
        expect_ok(&o, "python ok", &format!("{who:?}: Python"));
        // /dev/mqueue shows the jail's queues (the one it made, nothing else).
        let listed = format!("['{}']", &q[1..]);
        assert!(stdout(&o).contains(&listed), "{who:?}: {}", stdout(&o));
    }
}

#[test]
fn under_the_rlimit_rung_queues_work_within_their_bounds() {
    let test = "under_the_rlimit_rung_queues_work_within_their_bounds";
    if !common::is_root() {
        common::skip(test, "not root: cannot start stockade as uid 65534");
        return;
    }
    // uid 65534 has no cgroup here unless one is delegated: --memory is
    // RLIMIT_AS, and the IPC namespace is the helper's, with
    // fs.mqueue.queues_max 16.
    let mut c = common::stockade(Who::Nobody);
    c.args([
        "run",
        "--report",
        "-",
        "--memory",
        "64m",
        "--ro-bind",
        &bind(),
    ])
    .args(["--", "/bin/sh", "-c"])
    .arg(format!(
        "/mq_check roundtrip {} && /mq_check fill {}",
        name("rung"),
        name("fill")
    ));
    let o = c.output().expect("start stockade");
    let v = common::last_json(&o);
    let m = &v["limits"]["memory"];
    if m["enforced_by"] != "rlimit_as" {
        common::skip(test, &format!("uid 65534 gets a cgroup rung here: {m}"));
        return;
    }
    assert_eq!(v["layers"]["ipc_namespace"]["state"], "applied", "{v}");
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    let out = v["stdout"]["data"].as_str().unwrap_or_default();
    assert!(out.contains("roundtrip ok"), "{out}");
    // The 17th queue is refused with ENOSPC: the bound held.
    assert!(out.contains(&format!("queues 16 errno {ENOSPC}")), "{out}");
}

#[test]
fn a_jails_queues_are_its_own() {
    for who in common::users("a_jails_queues_are_its_own") {
        // A queue made in a jail (held open while we look) is not on the
        // host nor in another jail.
        let q = name("jail");
        let mut c = common::stockade(who);
        c.args(["run", "--ro-bind", &bind(), "--", "/mq_check", "hold", &q]);
        let (child, out) = hold(c);
        assert_eq!(host_probe(&q), "absent", "{who:?}: on the host");
        let o = common::run(who, &["--ro-bind", &bind()], &["/mq_check", "probe", &q]);
        expect_ok(&o, "absent", &format!("{who:?}: in another jail"));
        assert!(release(child, out).contains("unlinked"), "{who:?}");

        // A queue of the host (its owner's, as the caller) is not in a
        // jail: it can be neither seen nor unlinked there.
        let q = name("host");
        let mut c = host(who, &["hold", &q]);
        c.stderr(Stdio::inherit());
        let (child, out) = hold(c);
        let o = common::run(
            who,
            &["--ro-bind", &bind()],
            &[
                "/bin/sh",
                "-c",
                &format!("/mq_check probe {q}; /mq_check unlink {q}"),
            ],
        );
        let seen = stdout(&o);
        assert!(seen.starts_with("absent\n"), "{who:?}: {seen}");
        assert!(seen.contains("FAIL mq_unlink: errno 2 "), "{who:?}: {seen}");
        assert_eq!(host_probe(&q), "present", "{who:?}");
        assert!(release(child, out).contains("unlinked"), "{who:?}");
    }
}

#[test]
fn without_an_ipc_namespace_no_queue_is_named_in_the_hosts() {
    // The fallback (user namespaces refused) shares the host's IPC
    // namespace: mq_open and mq_unlink are refused (EPERM, recorded), so a
    // queue is neither made on the host nor one of the host's removed.
    for who in common::users("without_an_ipc_namespace_no_queue_is_named_in_the_hosts") {
        let q = name("fb-host");
        let mut c = host(who, &["hold", &q]);
        c.stderr(Stdio::inherit());
        let (child, out) = hold(c);
        let made = name("fb-jail");
        let bin = mq_check();
        let bin = bin.to_str().unwrap();
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--report", "-", "--ro-bind", bin],
            &[
                "/bin/sh",
                "-c",
                &format!("{bin} roundtrip {made}; {bin} probe {q}; {bin} unlink {q}"),
            ],
        )
        .output()
        .expect("start stockade");
        let v = common::last_json(&o);
        assert_eq!(v["layers"]["user_namespace"]["state"], "unavailable", "{v}");
        let data = v["stdout"]["data"].as_str().unwrap_or_default();
        let lines: Vec<&str> = data.lines().collect();
        assert_eq!(
            lines,
            [
                "FAIL mq_open: errno 1 (Operation not permitted)",
                "FAIL mq_open: errno 1 (Operation not permitted)",
                // glibc's mq_unlink says EPERM as EACCES; the denials
                // below show seccomp refused it.
                "FAIL mq_unlink: errno 13 (Permission denied)",
            ],
            "{who:?}: {v}"
        );
        let denied: Vec<&str> = v["denials"]
            .as_array()
            .map(|d| d.iter().filter_map(|r| r["syscall"].as_str()).collect())
            .unwrap_or_default();
        assert!(
            denied.contains(&"mq_open") && denied.contains(&"mq_unlink"),
            "{who:?}: {v}"
        );
        assert_eq!(host_probe(&made), "absent", "{who:?}: made on the host");
        assert_eq!(host_probe(&q), "present", "{who:?}: the host's removed");
        assert!(release(child, out).contains("unlinked"), "{who:?}");
    }
}

/// `STOCKADE_PROFILE=python stockade bwrap --ro-bind mq_check /mq_check
/// --dev /dev ARGS… -- /mq_check CMD…` as `who` (with `--stockade-report`
/// into `report`): Landlock and seccomp on, no mqueue in the root.
fn bwrap(who: Who, report: &std::path::Path, args: &[&str], cmd: &[&str]) -> Command {
    let mut c = common::stockade(who);
    c.env("STOCKADE_PROFILE", "python");
    c.arg("bwrap")
        .args(["--ro-bind", mq_check().to_str().unwrap(), "/mq_check"])
        .args(["--dev", "/dev", "--stockade-report"])
        .arg(report)
        .args(args)
        .args(["--", "/mq_check"])
        .args(cmd);
    c
}

/// The run's outcome: Landlock was enforced, the mqueue rule not left out.
fn landlock_enforced(report: &std::path::Path, what: &str) {
    let text = std::fs::read_to_string(report).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let l = &v["layers"]["landlock"];
    assert_eq!(l["state"], "applied", "{what}: {v}");
    assert_eq!(l["detail"]["status"], "fully_enforced", "{what}: {v}");
    assert_eq!(l["detail"]["skipped"], serde_json::json!([]), "{what}: {v}");
    let warned = v["warnings"].as_array().is_some_and(|w| !w.is_empty());
    assert!(!warned, "{what}: {v}");
}

#[test]
fn bwrap_under_landlock_queues_work_in_its_ipc_namespace() {
    let test = "bwrap_under_landlock_queues_work_in_its_ipc_namespace";
    if common::landlock_abi() <= 0 {
        common::skip(test, "Landlock is not enabled on this host");
        return;
    }
    for who in common::users(test) {
        let s = common::Scratch::new("mqbw").world_writable();
        let report = s.join("report.json");
        for ipc in ["--unshare-ipc", "--unshare-all"] {
            let what = format!("{who:?} {ipc}");
            let q = name("bw");
            let o = bwrap(who, &report, &[ipc], &["roundtrip", &q])
                .output()
                .expect("start stockade bwrap");
            expect_ok(&o, "roundtrip ok", &what);
            landlock_enforced(&report, &what);
            // A queue the jail holds is its IPC namespace's, not the host's.
            let (child, out) = hold(bwrap(who, &report, &[ipc], &["hold", &q]));
            assert_eq!(host_probe(&q), "absent", "{what}: on the host");
            assert!(release(child, out).contains("unlinked"), "{what}");
        }
    }
}

#[test]
fn bwrap_without_unshare_ipc_makes_no_queue_on_the_host() {
    // stockade bwrap makes an IPC namespace with or without --unshare-ipc
    // (unlike bwrap, which shares the host's without it): a queue the
    // jail makes is in it, never on the host, and the host's are not
    // there. Where user namespaces are refused (the host's IPC
    // namespace), seccomp refuses mq_open: nothing is granted there.
    let test = "bwrap_without_unshare_ipc_makes_no_queue_on_the_host";
    if common::landlock_abi() <= 0 {
        common::skip(test, "Landlock is not enabled on this host");
        return;
    }
    for who in common::users(test) {
        let s = common::Scratch::new("mqbw").world_writable();
        let report = s.join("report.json");
        let q = name("bw-shared");
        let (child, out) = hold(bwrap(who, &report, &[], &["hold", &q]));
        assert_eq!(host_probe(&q), "absent", "{who:?}: on the host");
        assert!(release(child, out).contains("unlinked"), "{who:?}");
        landlock_enforced(&report, &format!("{who:?}"));

        let h = name("bw-host");
        let mut c = host(who, &["hold", &h]);
        c.stderr(Stdio::inherit());
        let (child, out) = hold(c);
        let o = bwrap(who, &report, &[], &["unlink", &h])
            .output()
            .expect("start stockade bwrap");
        assert!(
            stdout(&o).contains("FAIL mq_unlink: errno 2 "),
            "{who:?}: {}",
            stdout(&o)
        );
        assert_eq!(host_probe(&h), "present", "{who:?}");
        assert!(release(child, out).contains("unlinked"), "{who:?}");

        // The fallback: mq_open refused, nothing made on the host.
        let bin = mq_check();
        let bin = bin.to_str().unwrap();
        let made = name("bw-fb");
        let mut c = common::host_command(who, common::c_payload("sig_default"));
        c.arg(common::c_payload("chk_nouserns"))
            .arg(common::binary())
            .env("STOCKADE_PROFILE", "python")
            .args(["bwrap", "--ro-bind", bin, bin, "--unshare-ipc", "--", bin])
            .args(["roundtrip", &made]);
        let o = c.output().expect("start stockade bwrap");
        assert!(
            common::stderr(&o).contains("running without namespaces"),
            "{who:?}: not the fallback: {}",
            common::stderr(&o)
        );
        assert_eq!(
            stdout(&o).trim(),
            "FAIL mq_open: errno 1 (Operation not permitted)",
            "{who:?}: {}",
            common::stderr(&o)
        );
        assert_eq!(host_probe(&made), "absent", "{who:?}: made on the host");
    }
}
