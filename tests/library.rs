//! The library API, `stockade::Jail`, used as a Rust program would: from
//! many threads at once (so through the spawner, a single-threaded process
//! the caller never sees), as root and as uid 65534. The forked spawner (a
//! single-threaded caller) is exercised by the doctests of `stockade::Jail`.

mod common;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use stockade::{Jail, Status, Stdio};

/// Set in the copy of this test started as uid 65534.
const AS_NOBODY: &str = "STOCKADE_LIBRARY_TEST_AS_NOBODY";

/// 8 threads each start 25 jails at once, then wait for all of them: every
/// outcome, exit code and captured stream belongs to its own jail.
fn many_threads(who: &'static str) {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let children: Vec<_> = (0..25)
                    .map(|i| {
                        let script = format!(
                            "echo out-{t}-{i}; echo err-{t}-{i} >&2; read x; echo got-$x; exit {}",
                            (t * 25 + i) % 100
                        );
                        let child = Jail::profile("shell")
                            .expect("shell profile")
                            .args(["/bin/sh", "-c", &script])
                            .timeout(Duration::from_secs(120))
                            .stdin(Stdio::piped())
                            .stdout(Stdio::piped())
                            .stderr(Stdio::piped())
                            .spawn()
                            .unwrap_or_else(|e| panic!("{who}: spawn {t}/{i}: {e}"));
                        writeln!(child.stdin.as_ref().unwrap(), "{t}.{i}").unwrap();
                        child
                    })
                    .collect();
                for (i, child) in children.into_iter().enumerate() {
                    let out = child
                        .wait_with_output()
                        .unwrap_or_else(|e| panic!("{who}: wait {t}/{i}: {e}"));
                    let what = format!("{who}: jail {t}/{i}: {:?}", out.outcome);
                    assert_eq!(out.outcome.status, Status::Exited, "{what}");
                    assert_eq!(out.outcome.exit_code, ((t * 25 + i) % 100) as i32, "{what}");
                    assert_eq!(
                        String::from_utf8_lossy(&out.stdout),
                        format!("out-{t}-{i}\ngot-{t}.{i}\n"),
                        "{what}"
                    );
                    assert_eq!(
                        String::from_utf8_lossy(&out.stderr),
                        format!("err-{t}-{i}\n"),
                        "{what}"
                    );
                    // A real jail: its own user namespace, seccomp on.
                    assert_eq!(
                        out.outcome.layers["user_namespace"].state,
                        stockade::outcome::LayerState::Applied,
                        "{what}"
                    );
                    assert_eq!(
                        out.outcome.layers["seccomp"].state,
                        stockade::outcome::LayerState::Applied,
                        "{what}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread's jails");
    }
}

/// `kill()` ends the whole jail at once, and `wait` says how.
fn kill_ends_the_jail(who: &str) {
    let mut child = Jail::profile("shell")
        .unwrap()
        .args(["/bin/sh", "-c", "trap '' TERM; echo up; sleep 600"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut up).unwrap();
    let start = Instant::now();
    child.kill().unwrap();
    let o = child.wait().unwrap();
    assert_eq!(o.status, Status::Signaled, "{who}: {o:?}");
    assert_eq!(o.signal, Some(9), "{who}: {o:?}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{who}: kill took {:?}",
        start.elapsed()
    );
}

/// A bad value given to the builder is an error naming the field, and
/// nothing runs.
fn bad_values_are_errors(who: &str) {
    let e = Jail::profile("shell")
        .unwrap()
        .arg("/bin/true")
        .memory(0)
        .spawn()
        .expect_err("memory(0)");
    assert!(e.to_string().starts_with("memory: "), "{who}: {e}");
    let e = Jail::profile("shell")
        .unwrap()
        .ro_bind("/tmp", "relative/dst")
        .arg("/bin/true")
        .spawn()
        .expect_err("a relative jail path");
    assert!(e.to_string().starts_with("ro_bind: "), "{who}: {e}");
    let e = Jail::profile("no-such-profile").expect_err("unknown profile");
    assert!(e.to_string().contains("no-such-profile"), "{who}: {e}");
    let e = Jail::profile("shell")
        .unwrap()
        .spawn()
        .expect_err("no command");
    assert!(e.to_string().contains("no command"), "{who}: {e}");
}

fn scenario(who: &'static str) {
    many_threads(who);
    kill_ends_the_jail(who);
    bad_values_are_errors(who);
}

#[test]
fn jails_start_from_many_threads_through_the_spawner() {
    // This process has threads: the spawner is the stockade binary.
    // The only test of this binary: no other thread reads the environment
    // while it is set.
    std::env::set_var("STOCKADE_BIN", common::binary());
    if std::env::var_os(AS_NOBODY).is_some() {
        scenario("uid 65534");
        return;
    }
    scenario("root");
    if !common::is_root() {
        common::skip(
            "jails_start_from_many_threads_through_the_spawner (uid 65534)",
            "not root: cannot start the copy as uid 65534",
        );
        return;
    }
    // The same scenario in a copy of this test run as uid 65534, by a caller
    // that ignores SIGCHLD (bash's `trap ''` sets SIG_IGN, which execve keeps): the
    // spawner must not inherit that, or the kernel would reap each jail's
    // init before its supervisor waits for it.
    let me = std::env::current_exe().unwrap();
    let copy = common::binary().parent().unwrap().join("library-test");
    common::copy_executable(&me, &copy);
    // (bash: dash does not pass an ignored SIGCHLD on.)
    let o = Command::new("/bin/bash")
        .args(["-c", "trap '' CHLD; exec \"$0\" \"$@\""])
        .arg(&copy)
        .args([
            "--exact",
            "jails_start_from_many_threads_through_the_spawner",
            "--nocapture",
        ])
        .env(AS_NOBODY, "1")
        .current_dir("/")
        .uid(common::NOBODY)
        .gid(common::NOBODY)
        .output()
        .unwrap();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("1 passed"),
        "as uid 65534: {:?}\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
