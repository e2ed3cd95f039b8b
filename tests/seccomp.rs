//! The seccomp layer, seen from inside the jail: what a hostile program
//! calling a forbidden syscall gets (exact errno, or death by SIGSYS), the
//! argument filters (clone, socket, ioctl), foreign ABIs, and that ordinary
//! programs still run under the default allowlist.

mod common;

use std::process::Output;

use common::{expect_code, run, stderr, stdout, users, Who};
use stockade::testing::syscalls;

/// `--ro-bind HOST:/opt/NAME` for a compiled payload.
fn bind(path: &std::path::Path, name: &str) -> String {
    format!("{}:/opt/{name}", path.display())
}

/// NAME=NR for every never-allowed syscall this architecture has.
fn never_args() -> Vec<String> {
    syscalls::NEVER
        .iter()
        .filter_map(|n| syscalls::number(n).map(|nr| format!("{n}={nr}")))
        .collect()
}

fn line_for<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
}

/// `stockade run FLAGS --ro-bind PAYLOAD -- /opt/NAME ARGS…` for the
/// payload NAME of tests/payloads.
fn run_payload(who: Who, flags: &[&str], name: &str, args: &[&str]) -> Output {
    let bound = bind(&common::c_payload(name), name);
    let path = format!("/opt/{name}");
    let flags = [flags, &["--ro-bind", &bound]].concat();
    run(who, &flags, &[&[path.as_str()], args].concat())
}

/// Each of `names` has its line `NAME RESULT` in `out`.
fn assert_lines(who: Who, out: &str, names: &[&str], result: &str) {
    for n in names {
        assert_eq!(
            line_for(out, n),
            Some(format!("{n} {result}").as_str()),
            "{who:?}: {out}"
        );
    }
}

/// `o` killed by SIGSYS (exit 128 + 31) once it was calling `name`.
fn assert_killed(who: Who, o: &Output, name: &str) {
    expect_code(o, 159, &format!("{who:?}: {name} killed by SIGSYS"));
    let out = stdout(o);
    assert!(out.contains(&format!("calling {name}")), "{who:?}: {out}");
    assert!(!out.contains("survived"), "{who:?}: {name}: {out}");
}

#[test]
fn payload_runs_under_a_seccomp_filter() {
    for who in users("payload_runs_under_a_seccomp_filter") {
        let o = run(
            who,
            &[],
            &["/bin/sh", "-c", "grep ^Seccomp /proc/self/status"],
        );
        expect_code(&o, 0, "status");
        let out = stdout(&o);
        assert!(out.contains("Seccomp:\t2"), "{who:?}: {out}");
        // One filter: the ABI guard and the allowlist in one program.
        assert!(out.contains("Seccomp_filters:\t1"), "{who:?}: {out}");
        // And the opposite, so the check above can fail.
        let o = run(
            who,
            &["--no-seccomp"],
            &["/bin/sh", "-c", "grep ^Seccomp: /proc/self/status"],
        );
        expect_code(&o, 0, "status without seccomp");
        assert!(
            stdout(&o).contains("Seccomp:\t0"),
            "{who:?}: {}",
            stdout(&o)
        );
    }
}

#[test]
fn never_allowed_syscalls_fail_with_eperm() {
    let args = never_args();
    assert!(args.len() > 60, "{}", args.len());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    for who in users("never_allowed_syscalls_fail_with_eperm") {
        let o = run_payload(who, &[], "sc_call", &argv);
        expect_code(&o, 0, "sc_call");
        let out = stdout(&o);
        for a in &args {
            let name = a.split('=').next().unwrap();
            let line = line_for(&out, name)
                .unwrap_or_else(|| panic!("{who:?}: no line for {name}\n{out}"));
            assert_eq!(
                line,
                format!("{name} rc=-1 errno=1"),
                "{who:?}: {name} was not refused with EPERM"
            );
        }
    }
}

#[test]
fn never_allowed_syscalls_kill_in_kill_mode() {
    let args = never_args();
    for who in users("never_allowed_syscalls_kill_in_kill_mode") {
        for a in &args {
            let name = a.split('=').next().unwrap();
            let o = run_payload(who, &["--seccomp-action", "kill"], "sc_call", &["-k", a]);
            assert_killed(who, &o, name);
        }
    }
}

#[test]
fn kill_mode_still_runs_allowed_syscalls() {
    for who in users("kill_mode_still_runs_allowed_syscalls") {
        let getpid = format!("getpid={}", libc::SYS_getpid);
        let o = run_payload(
            who,
            &["--seccomp-action", "kill"],
            "sc_call",
            &["-k", &getpid],
        );
        expect_code(&o, 0, "getpid in kill mode");
        assert!(
            stdout(&o).contains("survived getpid"),
            "{who:?}: {}",
            stdout(&o)
        );
    }
}

#[test]
fn tiocsti_and_tioclinux_are_refused_whatever_the_high_bits() {
    for who in users("tiocsti_and_tioclinux_are_refused_whatever_the_high_bits") {
        let o = run_payload(who, &[], "sc_ioctl", &[]);
        expect_code(&o, 0, "sc_ioctl");
        let out = stdout(&o);
        // Without the filter these give ENOTTY (25) on /dev/null.
        let refused = [
            "TIOCSTI",
            "TIOCSTI_HIGH",
            "TIOCSTI_HIGH2",
            "TIOCLINUX",
            "TIOCLINUX_HIGH",
        ];
        assert_lines(who, &out, &refused, "rc=-1 errno=1");
        assert_eq!(
            line_for(&out, "FIONREAD"),
            Some("FIONREAD rc=0 errno=0"),
            "{out}"
        );
        assert!(out.contains("FIONREAD value=3"), "{who:?}: {out}");
    }
}

#[test]
fn clone_with_namespace_flags_is_refused_fork_and_threads_work() {
    for who in users("clone_with_namespace_flags_is_refused_fork_and_threads_work") {
        let o = run_payload(who, &[], "sc_clone", &[]);
        expect_code(&o, 0, "sc_clone");
        let out = stdout(&o);
        let refused = [
            "clone_newuser",
            "clone_newns",
            "clone_newpid",
            "clone_newnet",
            "clone_newuts",
            "clone_newipc",
            "clone_newcgroup",
        ];
        assert_lines(who, &out, &refused, "rc=-1 errno=1");
        assert!(out.contains("fork pid=ok status=7"), "{who:?}: {out}");
        assert!(out.contains("clone3 rc=-1 errno=38"), "{who:?}: {out}");
        assert!(out.contains("pthread_create=0 result=42"), "{who:?}: {out}");
    }
}

#[test]
fn sockets_limited_to_unix_and_inet() {
    for who in users("sockets_limited_to_unix_and_inet") {
        let o = run_payload(who, &[], "sc_socket", &[]);
        expect_code(&o, 0, "sc_socket");
        let out = stdout(&o);
        let refused = [
            "netlink_dgram",
            "netlink_raw",
            "packet_raw",
            "packet_dgram",
            "inet_raw",
            "inet6_raw",
        ];
        assert_lines(who, &out, &refused, "rc=-1 errno=1");
        let allowed = [
            "unix_stream",
            "unix_dgram",
            "inet_stream",
            "inet_dgram",
            "inet6_stream",
            "socketpair_unix",
        ];
        assert_lines(who, &out, &allowed, "rc=ok errno=0");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_abis_are_killed() {
    for who in users("foreign_abis_are_killed") {
        for abi in ["x32", "int80"] {
            for action in ["errno", "kill"] {
                let o = run_payload(who, &["--seccomp-action", action], "sc_abi", &[abi]);
                assert_killed(who, &o, abi);
            }
        }
    }
}

#[test]
fn stacked_errno_filters_last_installed_wins() {
    // The kernel semantics the design note relies on (and avoids needing):
    // for two SECCOMP_RET_ERRNO verdicts, the most recently installed
    // filter's errno is returned. Also shows a payload may add filters.
    for who in users("stacked_errno_filters_last_installed_wins") {
        let o = run_payload(who, &[], "sc_stack", &[]);
        expect_code(&o, 0, "sc_stack");
        assert_eq!(stdout(&o).trim(), "getppid rc=-1 errno=22", "{who:?}");
    }
}

#[test]
fn ordinary_python_work_runs_under_the_default_allowlist() {
    let script = r##"
import json, re, math, sqlite3, threading, subprocess, multiprocessing
db = sqlite3.connect(":memory:")
db.execute("create table t (x integer)")
db.executemany("insert into t values (?)", [(i,) for i in range(10)])
print("sqlite", db.execute("select sum(x) from t").fetchone()[0])
print("json", json.dumps({"a": [1, 2]}), re.sub(r"\d", "#", "a1b2"), math.isqrt(49))
with multiprocessing.Pool(2) as p:
    print("pool", sum(p.map(abs, [-1, -2, -3, 4])))
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("threads", sorted(out))
print("sub", subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())
"##;
    for who in users("ordinary_python_work_runs_under_the_default_allowlist") {
        let o = run(who, &[], &["python3", "-c", script]);
        expect_code(&o, 0, "python");
        let out = stdout(&o);
        for want in [
            "sqlite 45",
            "json {\"a\": [1, 2]} a#b# 7",
            "pool 10",
            "threads [0, 1, 2, 3]",
            "sub child",
        ] {
            assert!(
                out.contains(want),
                "{who:?}: missing {want:?}\n{out}\n{}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn shell_and_coreutils_run_under_the_default_allowlist() {
    let script = r#"
set -e
cd /tmp
printf 'b\na\nc\n' > f
echo "sorted $(sort f | tr '\n' ' ')"
echo "wc $(cat f | wc -l)"
echo "grep $(grep -c a f)"
echo "sed $(sed 's/a/A/' f | tr -d '\n')"
echo "awk $(awk 'BEGIN{s=0} {s+=length($0)} END{print s}' f)"
echo "ls $(ls /tmp)"
( x=sub; echo "subshell $x" )
echo "pipe $(echo hello | tr a-z A-Z | rev)"
"#;
    for who in users("shell_and_coreutils_run_under_the_default_allowlist") {
        let o = run(who, &[], &["/bin/bash", "-c", script]);
        expect_code(&o, 0, "bash");
        let out = stdout(&o);
        for want in [
            "sorted a b c ",
            "wc 3",
            "grep 1",
            "sed bAc",
            "awk 3",
            "ls f",
            "subshell sub",
            "pipe OLLEH",
        ] {
            assert!(
                out.contains(want),
                "{who:?}: missing {want:?}\n{out}\n{}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn learning_mode_reports_syscalls_outside_the_allowlist() {
    for who in users("learning_mode_reports_syscalls_outside_the_allowlist") {
        // Enforcing: both refused.
        let o = run_payload(who, &[], "sc_learn", &[]);
        expect_code(&o, 0, "sc_learn enforcing");
        let out = stdout(&o);
        assert!(out.contains("personality rc=-1 errno=1"), "{who:?}: {out}");
        assert!(!stderr(&o).contains("seccomp-learn"), "{}", stderr(&o));
        // Learning: both run (acct still fails for lack of CAP_SYS_PACCT,
        // personality succeeds) and the supervisor lists them.
        let o = run_payload(who, &["--seccomp-learn"], "sc_learn", &[]);
        expect_code(&o, 0, "sc_learn learning");
        let out = stdout(&o);
        assert!(out.contains("personality rc=0 errno=0"), "{who:?}: {out}");
        assert!(out.contains("query=0x40000"), "{who:?}: {out}");
        assert!(out.contains("done"), "{who:?}: {out}");
        let err = stderr(&o);
        assert!(
            err.contains(
                "stockade: seccomp-learn: syscalls outside the allowlist: acct, personality"
            ),
            "{who:?}: {err}"
        );
    }
}

#[test]
fn learning_mode_with_nothing_outside_says_none() {
    for who in users("learning_mode_with_nothing_outside_says_none") {
        let o = run(
            who,
            &["--seccomp-learn"],
            &["/bin/sh", "-c", "echo hi | cat"],
        );
        expect_code(&o, 0, "learn sh");
        assert_eq!(stdout(&o), "hi\n");
        assert!(
            stderr(&o).contains("seccomp-learn: syscalls outside the allowlist: (none)"),
            "{who:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn unknown_group_or_syscall_is_a_clear_error() {
    let who = Who::Nobody;
    for (arg, want) in [
        ("@no-such-group", "unknown syscall group \"@no-such-group\""),
        ("frobnicate", "unknown syscall \"frobnicate\""),
    ] {
        let o = run(who, &["--seccomp-allow", arg], &["/bin/true"]);
        expect_code(&o, 125, arg);
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn kill_mode_names_the_refused_syscall_and_kills_the_whole_jail() {
    let bin = common::c_payload("sc_call");
    let acct = format!("acct={}", libc::SYS_acct);
    for who in users("kill_mode_names_the_refused_syscall_and_kills_the_whole_jail") {
        // A grandchild of the command refuses: the shell must not go on.
        let script = format!("/opt/sc_call -k {acct}; echo shell-went-on");
        let o = run(
            who,
            &[
                "--seccomp-action",
                "kill",
                "--report",
                "-",
                "--ro-bind",
                &bind(&bin, "sc_call"),
            ],
            &["/bin/sh", "-c", &script],
        );
        expect_code(&o, 159, "kill mode, grandchild");
        let out = stdout(&o);
        assert!(!out.contains("shell-went-on"), "{who:?}: {out}");
        assert!(!out.contains("survived"), "{who:?}: {out}");
        let json = out
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("{who:?}: no JSON report\n{out}"));
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["status"], "seccomp_violation", "{json}");
        assert_eq!(v["seccomp_violation"]["syscall_name"], "acct", "{json}");
        assert_eq!(
            v["seccomp_violation"]["syscall_nr"],
            libc::SYS_acct,
            "{json}"
        );
    }
}

/// A payload that makes refused syscalls from two threads: ptrace three
/// times from the main thread, acct once from another; prints each
/// thread's id and the errno it got.
const TWO_THREADS: &str = r#"
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, n):
    for _ in range(n):
        rc = libc.syscall(nr, 0, 0, 0, 0)
        print(threading.get_native_id(), nr, rc, ctypes.get_errno(), flush=True)
call(101, 3)
t = threading.Thread(target=call, args=(163, 1))
t.start(); t.join()
"#;

fn denials_of(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["denials"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter(|r| r["kind"] == "seccomp")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Each refused syscall is answered EPERM (the program goes on) and
/// recorded per thread, with a count, as the jail sees the thread.
fn check_denials(who: Who, o: &std::process::Output, what: &str) {
    expect_code(o, 0, what);
    let v = common::last_json(o);
    // `--report -`: the payload's stdout is in the report.
    let out = v["stdout"]["data"].as_str().unwrap_or_default().to_string();
    let lines: Vec<Vec<i64>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(lines.len(), 4, "{who:?} {what}: {out}");
    for l in &lines {
        assert_eq!(
            (l[2], l[3]),
            (-1, libc::EPERM as i64),
            "{who:?} {what}: {out}"
        );
    }
    let (main, other) = (lines[0][0], lines[3][0]);
    assert_ne!(main, other, "{who:?} {what}: {out}");
    let want = serde_json::json!([
        {"kind": "seccomp", "syscall": "ptrace", "thread": main, "count": 3},
        {"kind": "seccomp", "syscall": "acct", "thread": other, "count": 1},
    ]);
    assert_eq!(
        serde_json::Value::from(denials_of(&v)),
        want,
        "{who:?} {what}: {v}"
    );
}

#[test]
fn refused_syscalls_are_recorded_as_denials_per_thread() {
    for who in users("refused_syscalls_are_recorded_as_denials_per_thread") {
        let o = run(who, &["--report", "-"], &["python3", "-c", TWO_THREADS]);
        check_denials(who, &o, "in the jail");
        // The same program without namespaces.
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--report", "-"],
            &["python3", "-c", TWO_THREADS],
        )
        .output()
        .unwrap();
        check_denials(who, &o, "in the fallback");
        // A run that refuses nothing records nothing.
        let o = run(who, &["--report", "-"], &["python3", "-c", "print(1)"]);
        expect_code(&o, 0, "nothing refused");
        let v = common::last_json(&o);
        assert!(v.get("denials").is_none(), "{who:?}: {v}");
    }
}

/// Under a seccomp filter that already has a user-notification listener
/// (a container runtime's, an outer jail's: one per process tree), the
/// allowlist is judged in the kernel alone: refused syscalls still fail
/// with EPERM, and the outcome says they went unrecorded.
#[test]
fn refusals_under_another_listener_still_fail_and_say_unrecorded() {
    for who in users("refusals_under_another_listener_still_fail_and_say_unrecorded") {
        // ll_fake_abi holds a listener over everything it starts.
        let o = common::host_command(who, common::c_payload("ll_fake_abi"))
            .arg("7")
            .arg(common::binary())
            .args(["run", "--report", "-", "--", "python3", "-c", TWO_THREADS])
            .output()
            .unwrap();
        expect_code(&o, 0, "under another listener");
        let v = common::last_json(&o);
        let out = v["stdout"]["data"].as_str().unwrap_or_default();
        assert_eq!(out.lines().count(), 4, "{who:?}: {v}");
        assert!(
            out.lines().all(|l| l.ends_with(" -1 1")),
            "{who:?}: not EPERM: {v}"
        );
        assert!(denials_of(&v).is_empty(), "{who:?}: {v}");
        let warned = v["warnings"].as_array().is_some_and(|w| {
            w.iter().any(|w| {
                w.as_str()
                    .unwrap_or("")
                    .contains("refused syscalls were not recorded")
            })
        });
        assert!(warned, "{who:?}: {v}");
    }
}

/// `--denials-fd N`: each refusal as a JSON line while the run goes on
/// (here a file the shell opened as fd 3); a bad fd is refused naming the
/// flag.
#[test]
fn denials_are_written_as_lines_to_the_denials_fd() {
    for who in users("denials_are_written_as_lines_to_the_denials_fd") {
        let dir = common::Scratch::new("denials-fd").world_writable();
        let file = dir.join("denials.jsonl");
        let script = format!(
            "exec 3>'{}' && exec '{}' run --denials-fd 3 --report - -- python3 -c \"$0\"",
            file.display(),
            common::binary().display()
        );
        let o = host_sh(who, &script, TWO_THREADS);
        check_denials(who, &o, "with --denials-fd");
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let names: Vec<&str> = lines
            .iter()
            .map(|l| l["syscall"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["ptrace", "acct"], "{who:?}: {text}");
        assert!(
            lines.iter().all(|l| l["kind"] == "seccomp"),
            "{who:?}: {text}"
        );
        let o = run(who, &["--denials-fd", "97"], &["true"]);
        expect_code(&o, 125, "a closed fd");
        assert!(
            stderr(&o).contains("--denials-fd: 97: not an open file descriptor"),
            "{who:?}: {}",
            stderr(&o)
        );
    }
}

/// `sh -c SCRIPT ARG0` on the host as `who`, with a clean environment.
fn host_sh(who: Who, script: &str, arg0: &str) -> Output {
    common::host_command(who, "/bin/sh")
        .args(["-c", script, arg0])
        .output()
        .unwrap()
}
