//! The jail's life: init reaps orphans, nothing outlives the payload or a
//! killed stockade, exit codes and signals pass through, and stdio streams.
//! Every test runs as root and as uid 65534. Waits are bounded polls; the
//! measured times are printed, never asserted.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::{expect_code, stderr, stdout, Scratch, Who};

/// A number no other process on the host has in its argv.
fn unique_arg(tag: u32) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{tag}{}{n}", std::process::id())
}

/// Host pids whose argv is exactly `argv`.
fn host_pids_with_argv(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            if c == want {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Poll until `cond` holds or `limit` passes; return how long it took.
fn poll_until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` ignores `sig` (its SigIgn mask in /proc).
fn ignores(pid: u32, sig: nix::sys::signal::Signal) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1u64 << (sig as i32 - 1)) != 0)
}

fn kill_pids(pids: &[i32]) {
    for p in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Lines of a child's stdout, read on a thread so a test can wait with a limit.
fn line_reader(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait for `child` with a limit; kill it and panic when it does not end.
fn wait_limited(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: stockade did not exit within 30s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sh(who: Who, script: &str) -> std::process::Output {
    common::sh(who, script)
}

// ---------------------------------------------------------------- init

#[test]
fn orphans_are_reaped_by_init() {
    for who in common::users("orphans_are_reaped_by_init") {
        // Two orphans that exit at once, one that lives (the control: it shows
        // orphans are reparented to pid 1, so pid 1 is who must reap them).
        let script = r#"
            (sleep 30 &)
            (sh -c 'echo $$ > /tmp/o1; exit 0' &)
            (sh -c 'echo $$ > /tmp/o2; exit 0' &)
            i=0; while [ ! -s /tmp/o1 ] || [ ! -s /tmp/o2 ]; do i=$((i+1)); [ $i -gt 200 ] && break; sleep 0.05; done
            p1=$(cat /tmp/o1); p2=$(cat /tmp/o2); echo "orphans $p1 $p2"
            i=0; while [ -e /proc/$p1 ] || [ -e /proc/$p2 ]; do i=$((i+1)); [ $i -gt 200 ] && break; sleep 0.05; done
            for p in $p1 $p2; do if [ -e /proc/$p ]; then echo "left $(cat /proc/$p/stat)"; else echo "gone $p"; fi; done
            echo ---
            for f in /proc/[0-9]*/stat; do cat $f 2>/dev/null; echo; done
        "#;
        let o = sh(who, script);
        let what = format!("{who:?}: orphans");
        expect_code(&o, 0, &what);
        let out = stdout(&o);
        let (head, stats) = out.split_once("---\n").expect("separator");
        let pids: Vec<&str> = head
            .lines()
            .find_map(|l| l.strip_prefix("orphans "))
            .expect("orphan pids")
            .split(' ')
            .collect();
        assert_eq!(pids.len(), 2, "{what}: {out}");
        for p in &pids {
            assert!(p.parse::<u32>().is_ok_and(|n| n > 2), "{what}: {out}");
            assert!(
                head.contains(&format!("gone {p}\n")),
                "{what}: not reaped: {out}"
            );
        }
        // No zombie anywhere; the living orphan's parent is init.
        let mut sleep_parent = None;
        for l in stats.lines().filter(|l| !l.is_empty()) {
            let (_, rest) = l.rsplit_once(") ").expect("stat line");
            let f: Vec<&str> = rest.split(' ').collect();
            assert_ne!(f[0], "Z", "{what}: zombie: {l}");
            if l.contains(" (sleep) ") && sleep_parent.is_none() {
                sleep_parent = Some(f[1].to_string());
            }
        }
        assert_eq!(
            sleep_parent.as_deref(),
            Some("1"),
            "{what}: orphan not reparented to init: {stats}"
        );
    }
}

#[test]
fn double_forked_daemon_dies_with_payload() {
    for who in common::users("double_forked_daemon_dies_with_payload") {
        let arg = unique_arg(98);
        let script = format!(
            r#"setsid sh -c "exec sleep {arg}" </dev/null >/dev/null 2>&1 &
            i=0; until grep -aqs '^sleep.{arg}' /proc/[0-9]*/cmdline; do i=$((i+1)); [ $i -gt 200 ] && break; sleep 0.05; done
            grep -aqs '^sleep.{arg}' /proc/[0-9]*/cmdline && echo daemon-running
            sleep 0.2"#
        );
        let o = sh(who, &script);
        let what = format!("{who:?}: daemon");
        expect_code(&o, 0, &what);
        // Control: the daemon was running when the payload exited.
        assert!(
            stdout(&o).contains("daemon-running"),
            "{what}: {}",
            stdout(&o)
        );
        let argv = ["sleep", arg.as_str()];
        let t = poll_until(Duration::from_secs(2), || {
            host_pids_with_argv(&argv).is_empty()
        });
        let left = host_pids_with_argv(&argv);
        kill_pids(&left);
        match t {
            Some(t) => eprintln!("{what}: daemon gone {t:?} after stockade exited"),
            None => panic!("{what}: daemon `sleep {arg}` still running on the host: {left:?}"),
        }
    }
}

#[test]
fn sigkill_of_stockade_kills_the_jail() {
    for who in common::users("sigkill_of_stockade_kills_the_jail") {
        let arg = unique_arg(87);
        let argv = ["sleep", arg.as_str()];
        let mut c = common::stockade(who);
        c.args(["run", "--", "sleep", &arg])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let what = format!("{who:?}: SIGKILL stockade");
        let seen = poll_until(Duration::from_secs(20), || {
            !host_pids_with_argv(&argv).is_empty()
        });
        if seen.is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: `sleep {arg}` never appeared on the host");
        }
        let jailed = host_pids_with_argv(&argv);
        child.kill().unwrap(); // SIGKILL: stockade gets no chance to clean up
        let killed = Instant::now();
        let st = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(9),
            "{what}: {st:?}"
        );
        let t = poll_until(Duration::from_secs(2), || {
            host_pids_with_argv(&argv).is_empty()
        });
        let left = host_pids_with_argv(&argv);
        kill_pids(&left);
        match t {
            Some(_) => eprintln!(
                "{what}: jailed sleep {jailed:?} gone {:?} after SIGKILL",
                killed.elapsed()
            ),
            None => panic!("{what}: jailed sleep {left:?} survived stockade"),
        }
    }
}

// ---------------------------------------------------------------- exit codes

#[test]
fn exit_codes_and_signals_pass_through() {
    for who in common::users("exit_codes_and_signals_pass_through") {
        for (script, code) in [
            ("exit 0", 0),
            ("exit 7", 7),
            ("exit 255", 255),
            ("echo before; kill -9 $$; echo after", 137),
            ("echo before; kill -TERM $$; echo after", 143),
        ] {
            let o = sh(who, script);
            let what = format!("{who:?}: {script}");
            expect_code(&o, code, &what);
            assert!(!stdout(&o).contains("after"), "{what}: {}", stdout(&o));
            assert!(
                !stderr(&o).contains("stockade:"),
                "{what}: stockade complained: {}",
                stderr(&o)
            );
            if script.starts_with("echo") {
                assert_eq!(stdout(&o), "before\n", "{what}");
            }
        }
    }
}

/// Exactly one stderr line, starting `stockade: `; returns it.
fn one_stockade_line(o: &std::process::Output, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(
        err.lines().count(),
        1,
        "{what}: want one stderr line: {err}"
    );
    assert!(err.starts_with("stockade: "), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    err.trim_end().to_string()
}

#[test]
fn command_not_found_exits_127() {
    for who in common::users("command_not_found_exits_127") {
        for cmd in ["no-such-command-stockade", "/no/such/dir/cmd"] {
            let o = common::run(who, &[], &[cmd, "arg"]);
            let what = format!("{who:?}: {cmd}");
            expect_code(&o, 127, &what);
            let line = one_stockade_line(&o, &what);
            assert!(line.contains(cmd), "{what}: {line}");
            assert!(line.contains("No such file or directory"), "{what}: {line}");
            assert_eq!(stdout(&o), "", "{what}");
        }
    }
}

#[test]
fn command_not_executable_exits_126() {
    for who in common::users("command_not_executable_exits_126") {
        let scratch = Scratch::new("life-noexec");
        let f = scratch.join("script");
        std::fs::write(&f, "#!/bin/sh\necho ran\n").unwrap();
        // Readable by everyone, executable by no one.
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let bind = format!("{}:/noexec", f.display());
        let o = common::run(who, &["--ro-bind", &bind], &["/noexec"]);
        let what = format!("{who:?}: /noexec");
        expect_code(&o, 126, &what);
        let line = one_stockade_line(&o, &what);
        assert!(line.contains("/noexec"), "{what}: {line}");
        assert!(line.contains("Permission denied"), "{what}: {line}");
        assert_eq!(stdout(&o), "", "{what}");
        // Control: the file is there and readable, only not executable.
        let o = common::run(who, &["--ro-bind", &bind], &["/bin/sh", "/noexec"]);
        expect_code(&o, 0, &format!("{what} via sh"));
        assert_eq!(stdout(&o), "ran\n", "{what}");
    }
}

#[test]
fn missing_bind_source_exits_125() {
    for who in common::users("missing_bind_source_exits_125") {
        let missing = format!("/tmp/stockade-missing-{}", std::process::id());
        assert!(!Path::new(&missing).exists());
        for flag in ["--ro-bind", "--bind"] {
            let b = format!("{missing}:/x");
            let o = common::run(who, &[flag, &b], &["/bin/echo", "payload-ran"]);
            let what = format!("{who:?}: {flag} {b}");
            expect_code(&o, 125, &what);
            let line = one_stockade_line(&o, &what);
            assert!(
                line.starts_with(&format!("stockade: bind: {missing}: ")),
                "{what}: {line}"
            );
            assert!(!stdout(&o).contains("payload-ran"), "{what}");
        }
    }
}

// ---------------------------------------------------------------- signals

#[test]
fn signals_are_forwarded_to_payload() {
    use nix::sys::signal::Signal;
    for who in common::users("signals_are_forwarded_to_payload") {
        for (name, sig) in [
            ("TERM", Signal::SIGTERM),
            ("INT", Signal::SIGINT),
            ("HUP", Signal::SIGHUP),
            ("QUIT", Signal::SIGQUIT),
        ] {
            let script = format!(
                "trap 'echo got-{name}; exit 0' {name}; echo ready; while :; do sleep 0.05; done"
            );
            let mut c = common::stockade(who);
            c.args(["run", "--", "/bin/sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().unwrap();
            let lines = line_reader(&mut child);
            let what = format!("{who:?}: SIG{name}");
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l == "ready" => {}
                other => {
                    let _ = child.kill();
                    panic!("{what}: expected `ready`, got {other:?}");
                }
            }
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
            let st = wait_limited(&mut child, &what);
            let rest: Vec<String> = lines.iter().collect();
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            assert_eq!(
                st.code(),
                Some(0),
                "{what}: {st:?}; stdout {rest:?}; stderr {err}"
            );
            assert_eq!(rest, [format!("got-{name}")], "{what}: stderr {err}");
        }
    }
}

/// A signal sent to stockade at every moment of its start-up and teardown:
/// before it blocks signals, between clone and the id maps, while init
/// builds the root, while the payload starts, runs, exits and init tears the
/// jail down. Whatever the moment, stockade ends promptly (it never waits
/// for a signal that was lost), with one of the outcomes that moment allows,
/// and nothing of the jail is left.
#[test]
fn a_signal_at_any_moment_of_start_up_or_teardown_ends_the_run() {
    use nix::sys::signal::Signal;
    for who in common::users("a_signal_at_any_moment_of_start_up_or_teardown_ends_the_run") {
        for sig in [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            // Delays in microseconds from spawn, through a debug build's
            // start-up (a few ms) and a loaded machine's (tens of ms).
            for delay_us in (0..=60_000u64).step_by(2_500) {
                for lasting in [true, false] {
                    // Lasting: the payload runs until the signal ends it.
                    // Not lasting: it exits at once, so the signal meets
                    // the teardown.
                    let marker = unique_arg(5);
                    let arg = if lasting {
                        format!("30.{marker}")
                    } else {
                        format!("0.00{marker}")
                    };
                    let mut c = common::stockade(who);
                    c.args(["run", "--", "/bin/sleep", &arg])
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped());
                    let mut child = c.spawn().unwrap();
                    // A signal the new process still ignores (inherited from
                    // how the test run was started, until sig_default resets
                    // it) is discarded by the kernel: the moments that count
                    // start once it is not ignored.
                    let what = format!("{who:?}: {sig} after {delay_us}us (lasting: {lasting})");
                    if poll_until(Duration::from_secs(10), || !ignores(child.id(), sig)).is_none() {
                        let _ = child.kill();
                        panic!("{what}: {sig} still ignored by the new process");
                    }
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_micros(delay_us) {
                        std::hint::spin_loop();
                    }
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig)
                        .unwrap();
                    let st = wait_limited(&mut child, &what);
                    let mut err = String::new();
                    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err)
                        .unwrap();
                    use std::os::unix::process::ExitStatusExt;
                    // Killed before it could block the signal (nothing was
                    // started yet), the payload killed by the forwarded
                    // signal, or the payload done before the signal came.
                    let ok = st.signal() == Some(sig as i32)
                        || st.code() == Some(128 + sig as i32)
                        || (!lasting && st.code() == Some(0));
                    assert!(ok, "{what}: {st:?}, stderr: {err}");
                    let gone = poll_until(Duration::from_secs(10), || {
                        host_pids_with_argv(&["/bin/sleep", &arg]).is_empty()
                    });
                    if gone.is_none() {
                        let left = host_pids_with_argv(&["/bin/sleep", &arg]);
                        kill_pids(&left);
                        panic!("{what}: the payload outlived stockade: {left:?}");
                    }
                }
            }
        }
    }
}

/// A caller that ignores SIGHUP, SIGINT, SIGQUIT and SIGTERM (nohup, a
/// shell's background job) passes the ignore on to stockade; a signal sent
/// to stockade still reaches the payload instead of being discarded.
#[test]
fn signals_reach_the_payload_even_when_the_caller_ignored_them() {
    for who in common::users("signals_reach_the_payload_even_when_the_caller_ignored_them") {
        for name in ["TERM", "INT", "HUP", "QUIT"] {
            let script = format!(
                "trap 'echo got-{name}; exit 0' {name}; echo ready; while :; do sleep 0.05; done"
            );
            // `trap ''` sets SIG_IGN, which execve keeps.
            let mut c2 = Command::new("/bin/sh");
            c2.args(["-c", "trap '' HUP INT QUIT TERM; exec \"$0\" \"$@\""])
                .arg(common::binary())
                .args(["run", "--", "/bin/sh", "-c", &script])
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .current_dir("/")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if who == Who::Nobody && common::is_root() {
                c2.uid(common::NOBODY).gid(common::NOBODY);
            }
            let mut child = c2.spawn().unwrap();
            let lines = line_reader(&mut child);
            let what = format!("{who:?}: ignored SIG{name}");
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l == "ready" => {}
                other => {
                    let _ = child.kill();
                    panic!("{what}: expected `ready`, got {other:?}");
                }
            }
            let sig: nix::sys::signal::Signal = format!("SIG{name}").parse().unwrap();
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
            let st = wait_limited(&mut child, &what);
            let rest: Vec<String> = lines.iter().collect();
            assert_eq!(st.code(), Some(0), "{what}: {st:?}; stdout {rest:?}");
            assert_eq!(rest, [format!("got-{name}")], "{what}");
        }
    }
}

/// A caller that ignores SIGCHLD (a service that never waits for its
/// children; SIG_IGN survives execve) must not make the kernel reap the
/// jail's init before stockade waits for it.
#[test]
fn a_caller_that_ignores_sigchld_still_gets_the_outcome() {
    for who in common::users("a_caller_that_ignores_sigchld_still_gets_the_outcome") {
        // bash's `trap ''` sets SIG_IGN (dash does not pass it on).
        let mut c = Command::new("/bin/bash");
        c.args(["-c", "trap '' CHLD; exec \"$0\" \"$@\""])
            .arg(common::binary())
            .args(["run", "--report", "-", "--max-output", "10", "--", "yes"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir("/")
            .stdin(Stdio::null());
        if who == Who::Nobody && common::is_root() {
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        let o = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{who:?}: {e}: {}", stderr(&o)));
        assert_eq!(v["status"], "output_limit", "{who:?}: {v}");
    }
}

// ---------------------------------------------------------------- stdio

#[test]
fn stdout_streams_before_exit() {
    for who in common::users("stdout_streams_before_exit") {
        let mut c = common::stockade(who);
        // The second line depends on input the test sends only after it has
        // read the first: the first cannot be held back until exit.
        c.args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "echo first; read x; echo second-$x",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let lines = line_reader(&mut child);
        let what = format!("{who:?}: streaming");
        let first = lines.recv_timeout(Duration::from_secs(30));
        assert_eq!(first.as_deref(), Ok("first"), "{what}");
        assert!(
            child.try_wait().unwrap().is_none(),
            "{what}: exited before input"
        );
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        let second = lines.recv_timeout(Duration::from_secs(30));
        assert_eq!(second.as_deref(), Ok("second-go"), "{what}");
        let st = wait_limited(&mut child, &what);
        assert_eq!(st.code(), Some(0), "{what}");
    }
}

#[test]
fn persistent_shell_reads_commands_from_a_pipe() {
    for who in common::users("persistent_shell_reads_commands_from_a_pipe") {
        let mut c = common::stockade(who);
        c.args(["run", "--", "/bin/sh"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let lines = line_reader(&mut child);
        let mut stdin = child.stdin.take().unwrap();
        let what = format!("{who:?}: persistent sh");
        for (cmd, want) in [
            ("echo a", "a"),
            ("echo b", "b"),
            ("x=41; echo $((x+1))", "42"),
            ("echo $x-$$", "41-2"),
        ] {
            stdin.write_all(format!("{cmd}\n").as_bytes()).unwrap();
            stdin.flush().unwrap();
            let got = lines.recv_timeout(Duration::from_secs(30));
            assert_eq!(got.as_deref(), Ok(want), "{what}: {cmd}");
        }
        drop(stdin);
        let st = wait_limited(&mut child, &what);
        assert_eq!(st.code(), Some(0), "{what}");
    }
}

/// A tmux server on a private socket, killed when dropped.
struct Tmux {
    who: Who,
    sock: std::path::PathBuf,
    home: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("SHELL", "/bin/sh")
            .env("TERM", "xterm")
            .arg("-S")
            .arg(&self.sock)
            .stdin(Stdio::null());
        if self.who == Who::Nobody && common::is_root() {
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        c
    }

    fn capture(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let st = self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(st.success(), "tmux send-keys");
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let ok = poll_until(Duration::from_secs(20), || {
            last = self.capture();
            pred(&last)
        });
        assert!(
            ok.is_some(),
            "{:?}: {what} never appeared; pane:\n{last}",
            self.who
        );
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").stderr(Stdio::null()).status();
    }
}

#[test]
fn interactive_bash_works_under_tmux() {
    let has = |p: &str| {
        Command::new(p)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("tmux") {
        common::skip("interactive_bash_works_under_tmux", "tmux is not installed");
        return;
    }
    if !Path::new("/usr/bin/bash").exists() && !Path::new("/bin/bash").exists() {
        common::skip("interactive_bash_works_under_tmux", "bash is not installed");
        return;
    }
    for who in common::users("interactive_bash_works_under_tmux") {
        let scratch = Scratch::new("life-tmux").world_writable();
        let t = Tmux {
            who,
            sock: scratch.join("sock"),
            home: scratch.path().to_path_buf(),
        };
        let inner = format!(
            "{} run -- bash -i; echo stockade-exit=$?; sleep 60",
            common::binary().display()
        );
        let st = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "120",
                "-y",
                "30",
                &inner,
            ])
            .status()
            .unwrap();
        assert!(st.success(), "{who:?}: tmux new-session");
        t.wait_for("bash prompt", |p| {
            p.lines().any(|l| l.trim_end().ends_with('$'))
        });
        t.keys(&["echo hi-$((6*7))", "Enter"]);
        // The typed line shows `hi-$((6*7))`; only bash's answer is `hi-42`.
        t.wait_for("hi-42", |p| p.lines().any(|l| l.trim_end() == "hi-42"));
        t.keys(&["exit", "Enter"]);
        let pane = t.wait_for("stockade-exit=", |p| p.contains("stockade-exit="));
        assert!(pane.contains("stockade-exit=0"), "{who:?}: pane:\n{pane}");
    }
}
