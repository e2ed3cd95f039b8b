//! `stockade session`: one jail, many commands. Each test drives a real
//! session over its JSON-lines protocol as root, as uid 65534, and (through
//! tests/payloads/chk_nouserns.c) in the fallback without user namespaces.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::Who;
use serde_json::{json, Value};

/// Where a session runs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mode {
    who: Who,
    /// User namespaces refused: the fallback.
    fallback: bool,
}

/// Every mode the host allows: root and 65534, each in the full jail and
/// the fallback.
fn modes(test: &str) -> Vec<Mode> {
    common::users(test)
        .into_iter()
        .flat_map(|who| [false, true].map(|fallback| Mode { who, fallback }))
        .collect()
}

/// A running `stockade session`.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    mode: Mode,
    /// Every event read, in order.
    seen: Vec<Value>,
}

/// What one command gave.
#[derive(Debug)]
struct Done {
    stdout: String,
    stderr: String,
    exit: Value,
}

impl Session {
    fn start(mode: Mode, flags: &[&str]) -> Session {
        Session::start_sending(mode, flags, &[])
    }

    /// [`Session::start`], with `requests` written before the ready event
    /// is read (they wait in the pipe for the agent).
    fn start_sending(mode: Mode, flags: &[&str], requests: &[Value]) -> Session {
        let mut argv = vec![common::c_payload("sig_default")];
        if mode.fallback {
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
        if mode.who == Who::Nobody && common::is_root() {
            use std::os::unix::process::CommandExt;
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        let mut child = c.spawn().expect("start stockade session");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut s = Session {
            child,
            stdin,
            out,
            mode,
            seen: Vec::new(),
        };
        for r in requests {
            s.send(r);
        }
        let ready = s.event();
        assert_eq!(ready["event"], "ready", "{mode:?}: {ready}");
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
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{:?}: not an event ({e}): {line:?}", self.mode));
        self.seen.push(v.clone());
        v
    }

    /// Events until the exit event of `id`.
    fn until_exit(&mut self, id: &str) -> Done {
        let mode = self.mode;
        self.try_until_exit(id)
            .unwrap_or_else(|e| panic!("{mode:?}: session ended: {e}"))
    }

    /// Events until the exit event of `id`, or the end event (`Err`).
    fn try_until_exit(&mut self, id: &str) -> Result<Done, Value> {
        let (mut stdout, mut stderr) = (String::new(), String::new());
        loop {
            let e = self.event();
            if e["event"] == "end" {
                return Err(e);
            }
            if e["id"] != id {
                continue;
            }
            match e["event"].as_str() {
                Some("output") if e["stream"] == "stdout" => {
                    stdout.push_str(e["data"].as_str().unwrap())
                }
                Some("output") => stderr.push_str(e["data"].as_str().unwrap()),
                Some("exit") => {
                    return Ok(Done {
                        stdout,
                        stderr,
                        exit: e,
                    })
                }
                _ => panic!("{:?}: unexpected {e}", self.mode),
            }
        }
    }

    /// [`Session::exec_with`], or the end event if the session ends first.
    fn try_exec(&mut self, req: Value) -> Result<Done, Value> {
        let id = req["id"].as_str().unwrap().to_string();
        // A session that has just ended may have closed its stdin: its
        // end event says why.
        let w = self.stdin.as_mut().expect("stdin open");
        let _ = writeln!(w, "{req}").and_then(|_| w.flush());
        self.try_until_exit(&id)
    }

    fn exec(&mut self, id: &str, command: &str) -> Done {
        self.exec_with(json!({"op": "exec", "id": id, "command": command}))
    }

    fn exec_with(&mut self, req: Value) -> Done {
        let id = req["id"].as_str().unwrap().to_string();
        self.send(&req);
        self.until_exit(&id)
    }

    /// Events until the end event, and the exit status of stockade.
    fn end(&mut self) -> (Value, i32) {
        loop {
            let e = self.event();
            if e["event"] == "end" {
                let mut rest = String::new();
                self.out.read_line(&mut rest).unwrap();
                assert_eq!(rest, "", "{:?}: a line after the end event", self.mode);
                let code = self.child.wait().unwrap().code().unwrap_or(-1);
                return (e, code);
            }
        }
    }

    fn close(&mut self) -> (Value, i32) {
        self.send(&json!({"op": "close"}));
        self.end()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Host processes whose command line is `sleep DURATION`.
fn sleepers(duration: &str) -> Vec<String> {
    let want = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A sleep duration no other test (or test process) uses.
fn unique_duration(base: u32, m: Mode) -> String {
    format!(
        "{base}{:05}.{}{}",
        std::process::id() % 100_000,
        m.who as u8,
        m.fallback as u8
    )
}

#[test]
fn cwd_environment_and_workdir_files_persist_between_commands() {
    for m in modes("cwd_environment_and_workdir_files_persist_between_commands") {
        // A limit, so that the session has a cgroup (where the host gives one).
        let mut s = Session::start(m, &["--pids", "64"]);
        let d = s.exec(
            "a",
            "mkdir -p sub && cd sub && export GREETING='hi there' X=1 && echo kept > f && unset X",
        );
        assert_eq!(d.exit["status"], "exited", "{m:?}: {d:?}");
        assert_eq!(d.exit["code"], 0, "{m:?}: {d:?}");
        let d = s.exec(
            "b",
            "echo \"$GREETING|${X-unset}|$(basename \"$PWD\")|$(cat f)\"",
        );
        assert_eq!(d.stdout, "hi there|unset|sub|kept\n", "{m:?}: {d:?}");
        // A variable that is not exported does not carry over.
        s.exec("c", "LOCAL=1");
        assert_eq!(
            s.exec("d", "echo \"${LOCAL-none}\"").stdout,
            "none\n",
            "{m:?}"
        );
        // `exit` inside the command still reports the state.
        s.exec("e", "cd /tmp && export Y=2 && exit 4");
        assert_eq!(s.exec("f", "echo $PWD $Y").stdout, "/tmp 2\n", "{m:?}");
        let (end, code) = s.close();
        assert_eq!(end["reason"], "closed", "{m:?}: {end}");
        assert_eq!(end["outcome"]["status"], "exited", "{m:?}: {end}");
        assert_eq!(code, 0, "{m:?}");
        // Nothing of the session is left: its cgroup, and in the fallback
        // its run directory (the workdir the ready event named).
        let cg = &end["outcome"]["layers"]["cgroup"]["detail"]["path"];
        if let Some(cg) = cg.as_str() {
            assert!(!std::path::Path::new(cg).exists(), "{m:?}: {cg} left");
        }
        let workdir = s.seen[0]["workdir"].as_str().unwrap().to_string();
        if m.fallback {
            assert!(
                workdir.starts_with("/tmp/stockade-run-"),
                "{m:?}: {workdir}"
            );
            assert!(
                !std::path::Path::new(&workdir).exists(),
                "{m:?}: {workdir} left"
            );
        } else {
            assert_eq!(workdir, "/work", "{m:?}");
        }
    }
}

#[test]
fn a_failing_command_reports_its_code_and_the_session_lives_on() {
    for m in modes("a_failing_command_reports_its_code_and_the_session_lives_on") {
        let mut s = Session::start(m, &[]);
        let d = s.exec("a", "echo oops >&2; false");
        assert_eq!(d.exit["code"], 1, "{m:?}: {d:?}");
        assert_eq!(d.stderr, "oops\n", "{m:?}");
        let d = s.exec("b", "exit 42");
        assert_eq!(
            (d.exit["status"].clone(), d.exit["code"].clone()),
            (json!("exited"), json!(42)),
            "{m:?}"
        );
        let d = s.exec("c", "kill -SEGV $$");
        assert_eq!(d.exit["status"], "signaled", "{m:?}: {d:?}");
        assert_eq!(d.exit["signal"], 11, "{m:?}: {d:?}");
        assert_eq!(s.exec("d", "echo fine").stdout, "fine\n", "{m:?}");
        s.close();
    }
}

#[test]
fn a_command_past_its_timeout_is_killed_and_the_session_stays_usable() {
    for m in modes("a_command_past_its_timeout_is_killed_and_the_session_stays_usable") {
        let dur = unique_duration(7, m);
        let mut s = Session::start(m, &[]);
        // The shell ignores SIGTERM: SIGKILL after the grace ends it.
        let d = s.exec_with(json!({"op": "exec", "id": "t", "timeout": 0.5,
            "command": format!("trap '' TERM; sleep {dur}; echo after")}));
        assert_eq!(d.exit["status"], "timeout", "{m:?}: {d:?}");
        assert_eq!(d.stdout, "", "{m:?}: {d:?}");
        assert!(
            sleepers(&dur).is_empty(),
            "{m:?}: sleep survived its command"
        );
        assert_eq!(s.exec("n", "echo next").stdout, "next\n", "{m:?}");
        s.close();
    }
}

/// A command starts with no signal blocked (the agent blocks the ones it
/// takes; its commands must not inherit that), so its deadline's SIGTERM
/// reaches even a shell that never starts a child, and SIGALRM works.
#[test]
fn a_command_starts_with_no_signal_blocked_and_its_deadline_reaches_a_builtin_loop() {
    for m in
        modes("a_command_starts_with_no_signal_blocked_and_its_deadline_reaches_a_builtin_loop")
    {
        let mut s = Session::start(m, &[]);
        let d = s.exec(
            "b",
            "exec python3 -c 'import signal; print(signal.pthread_sigmask(signal.SIG_BLOCK, []))'",
        );
        assert_eq!(d.stdout, "set()\n", "{m:?}: {d:?}");
        let d = s.exec_with(json!({"op": "exec", "id": "l", "timeout": 0.5,
            "command": "while :; do :; done"}));
        assert_eq!(d.exit["status"], "timeout", "{m:?}: {d:?}");
        assert_eq!(
            d.exit["signal"],
            libc::SIGTERM,
            "{m:?}: SIGTERM, not the grace's SIGKILL: {d:?}"
        );
        s.close();
    }
}

#[test]
fn interrupt_stops_the_command_and_not_the_session() {
    for m in modes("interrupt_stops_the_command_and_not_the_session") {
        let dur = unique_duration(8, m);
        let mut s = Session::start(m, &[]);
        s.send(&json!({"op": "exec", "id": "i", "command": format!("echo started; sleep {dur}")}));
        let e = s.event();
        assert_eq!(e["data"], "started\n", "{m:?}: {e}");
        // Another exec while one runs: busy, and the first goes on.
        s.send(&json!({"op": "exec", "id": "j", "command": "echo no"}));
        let e = s.event();
        assert_eq!(e["error"]["code"], "busy", "{m:?}: {e}");
        s.send(&json!({"op": "interrupt", "id": "i"}));
        let d = s.until_exit("i");
        assert_eq!(d.exit["status"], "interrupted", "{m:?}: {d:?}");
        // SIGINT, or SIGKILL after the grace when the SIGINT fell between
        // the shell's fork and its child's exec (the child ran the shell's
        // handler, then exec'd without it).
        let sig = d.exit["signal"].as_i64();
        assert!(sig == Some(2) || sig == Some(9), "{m:?}: {d:?}");
        assert!(sleepers(&dur).is_empty(), "{m:?}");
        s.send(&json!({"op": "interrupt", "id": "i"}));
        assert_eq!(s.event()["error"]["code"], "not_running", "{m:?}");
        assert_eq!(s.exec("k", "echo after").stdout, "after\n", "{m:?}");
        s.close();
    }
}

#[test]
fn printed_event_lines_cannot_forge_the_protocol() {
    for m in modes("printed_event_lines_cannot_forge_the_protocol") {
        let mut s = Session::start(m, &[]);
        let fake = r#"{"event":"exit","id":"f","status":"exited","code":0,"signal":null,"truncated":false,"duration_ms":1}"#;
        let end = r#"{"event":"end","reason":"closed","outcome":{}}"#;
        let cmd = format!(
            "printf '%s\\n' '{fake}' '{end}'; printf '%s\\n' '{fake}' >&2; sleep 0; exit 7"
        );
        let d = s.exec("f", &cmd);
        // The only exit event of "f" is the agent's, after the output.
        assert_eq!(d.exit["code"], 7, "{m:?}: {d:?}");
        assert_eq!(d.stdout, format!("{fake}\n{end}\n"), "{m:?}");
        assert_eq!(d.stderr, format!("{fake}\n"), "{m:?}");
        let exits = s.seen.iter().filter(|e| e["event"] == "exit").count();
        assert_eq!(exits, 1, "{m:?}: {:?}", s.seen);
        // Bytes that are not UTF-8 and no newline at the end stay framed.
        let d = s.exec("g", "printf 'a\\377b'");
        assert_eq!(d.stdout, "a\u{fffd}b", "{m:?}");
        s.close();
    }
}

/// Every way a hostile command tries to end or stop the agent
/// (`tests/payloads/agent_hostile.py`, one way per command).
const HOSTILE_WAYS: [&str; 12] = [
    "kill",          // kill(agent) with SIGKILL, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU
    "threads",       // kill, tkill, tgkill, rt_(tg)sigqueueinfo of each of its thread ids
    "killpg",        // killpg of its process group and session
    "group_stop",    // setpgid(0, its group), then kill(0, SIGSTOP)
    "group_kill",    // setpgid(0, its group), then kill(0, SIGKILL)
    "session_stop",  // setsid, setpgid(0, its group), kill(0, SIGSTOP)
    "session_kill",  // setsid, setpgid(0, its group), kill(0, SIGKILL)
    "kill_all",      // kill(-1, SIGSTOP), kill(-1, SIGKILL)
    "pidfd",         // pidfd_open and /proc/PID fds, then pidfd_send_signal
    "ptrace",        // PTRACE_SEIZE, PTRACE_ATTACH, process_vm_writev, /proc/PID/mem
    "fsetown",       // F_SETOWN to it, F_SETSIG SIGSTOP or SIGKILL, O_ASYNC input
    "cgroup_freeze", // cgroup.freeze and cgroup.kill of its cgroup
];

#[test]
fn no_command_can_kill_stop_or_trace_the_agent() {
    let test = "no_command_can_kill_stop_or_trace_the_agent";
    // Below Landlock ABI 6 a seccomp filter guards the agent instead, and
    // it cannot name the agent's threads (src/session/guard.rs).
    let scoped = common::landlock_abi() >= 6;
    if !scoped {
        common::skip(test, "threads: Landlock ABI below 6 (no signal scope)");
    }
    let script = include_str!("payloads/agent_hostile.py");
    let mut failed = Vec::new();
    for m in modes(test) {
        let mut s = Some(Session::start(m, &[]));
        for way in HOSTILE_WAYS {
            if way == "threads" && !scoped {
                continue;
            }
            let sess = s.get_or_insert_with(|| Session::start(m, &[]));
            // The agent's pid is the shell's parent ($PPID).
            let d = sess.try_exec(json!({"op": "exec", "id": way, "timeout": 20,
                "command": format!("A=$PPID python3 - {way} 2>&1"), "stdin": script}));
            let got: Vec<String> = match &d {
                Ok(d) => d
                    .stdout
                    .lines()
                    .filter(|l| l.starts_with("through:") || l.starts_with("joined:"))
                    .map(String::from)
                    .collect(),
                Err(end) => vec![format!("the session ended: {}", end["reason"])],
            };
            // The agent still answers. A stopped agent cannot: the front
            // end ends the session once the command's timeout is well
            // past (agent_unresponsive).
            let next = match d {
                Ok(_) => sess.try_exec(json!({"op": "exec", "id": "alive", "timeout": 5,
                    "command": "echo alive"})),
                Err(e) => Err(e),
            };
            let alive = next.as_ref().is_ok_and(|d| d.stdout == "alive\n");
            if !alive || !got.is_empty() {
                let after = match next {
                    Ok(d) => format!("next command: {d:?}"),
                    Err(end) => format!("the session ended: {}", end["reason"]),
                };
                failed.push(format!("{m:?} {way}: {got:?}; {after}"));
            }
            if !alive {
                s = None;
            }
        }
        if let Some(mut sess) = s {
            sess.close();
        }
    }
    assert!(
        failed.is_empty(),
        "reached the agent:\n{}",
        failed.join("\n")
    );
}

#[test]
fn commands_keep_their_own_signals_and_cannot_read_the_agent() {
    for m in modes("commands_keep_their_own_signals_and_cannot_read_the_agent") {
        let mut s = Session::start(m, &[]);
        let d = s.exec(
            "a",
            "for sig in KILL STOP TERM INT HUP USR1 ALRM TSTP; do kill -$sig $PPID || echo refused; done; \
             kill -KILL -$PPID || echo refused; echo sent",
        );
        assert_eq!(d.stdout, "refused\n".repeat(9) + "sent\n", "{m:?}: {d:?}");
        // A command is a session of its own (so it cannot join the
        // agent's process group).
        let d = s.exec(
            "s",
            "A=$PPID python3 -c 'import os; a = int(os.environ[\"A\"]); \
             print(os.getsid(0) != os.getsid(a), os.getpgid(0) != os.getpgid(a))'",
        );
        assert_eq!(d.stdout, "True True\n", "{m:?}: {d:?}");
        // Background jobs of a command still work (its own signals).
        let d = s.exec(
            "b",
            "sleep 0.1 & wait; echo waited; sleep 60 & kill $!; wait $!; echo $?",
        );
        assert_eq!(d.stdout, "waited\n143\n", "{m:?}: {d:?}");
        // The agent is not dumpable: its fds are not the command's to open.
        let d = s.exec("c", "cat /proc/$PPID/environ >/dev/null 2>&1 && echo read; ls /proc/$PPID/fd/ >/dev/null 2>&1 && echo listed; echo done");
        assert_eq!(d.stdout, "done\n", "{m:?}: {d:?}");
        assert_eq!(s.exec("z", "echo alive").stdout, "alive\n", "{m:?}");
        s.close();
    }
}

#[test]
fn the_session_lifetime_ends_it_with_its_outcome() {
    for m in modes("the_session_lifetime_ends_it_with_its_outcome") {
        let dur = unique_duration(5, m);
        let mut s = Session::start(m, &["--timeout", "1s"]);
        s.send(&json!({"op": "exec", "id": "k", "command": format!("sleep {dur}")}));
        let (end, code) = s.end();
        assert_eq!(end["reason"], "timeout", "{m:?}: {end}");
        assert_eq!(end["outcome"]["status"], "timeout", "{m:?}: {end}");
        assert_ne!(code, 0, "{m:?}");
        assert!(sleepers(&dur).is_empty(), "{m:?}: left behind");
    }
}

/// `kill -SIG PID`.
fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn sigint_to_stockade_interrupts_the_command_and_sigterm_ends_the_session() {
    for m in modes("sigint_to_stockade_interrupts_the_command_and_sigterm_ends_the_session") {
        let dur = unique_duration(6, m);
        let mut s = Session::start(m, &[]);
        s.send(&json!({"op": "exec", "id": "i", "command": format!("echo started; sleep {dur}")}));
        assert_eq!(s.event()["data"], "started\n", "{m:?}");
        signal(s.child.id(), "INT");
        let d = s.until_exit("i");
        assert_eq!(d.exit["status"], "interrupted", "{m:?}: {d:?}");
        assert_eq!(s.exec("n", "echo next").stdout, "next\n", "{m:?}");
        s.send(&json!({"op": "exec", "id": "t", "command": format!("sleep {dur}")}));
        signal(s.child.id(), "TERM");
        let (end, code) = s.end();
        assert_eq!(end["reason"], "terminated", "{m:?}: {end}");
        assert_eq!(code, 0, "{m:?}");
        assert!(sleepers(&dur).is_empty(), "{m:?}: left behind");
    }
}

/// The host pid of session `id`'s agent (its command line names the
/// session).
fn agent_pid(id: &str) -> u32 {
    let want = format!("session-agent\0--session\0{id}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(want.len()).any(|w| w == want.as_bytes()))
        })
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no agent of session {id}"))
}

#[test]
fn a_stopped_agent_ends_the_session_once_a_command_is_past_its_timeout() {
    // The modes side by side, in lanes (common::lanes): each waits out
    // the watchdog's grace, with its own session, agent and sleep.
    let modes = modes("a_stopped_agent_ends_the_session_once_a_command_is_past_its_timeout");
    std::thread::scope(|sc| {
        for lane in common::lanes(modes, |m| m.who == Who::Root) {
            sc.spawn(move || {
                for m in lane {
                    let dur = unique_duration(4, m);
                    let mut s = Session::start(m, &[]);
                    let id = s.seen[0]["session"].as_str().unwrap().to_string();
                    s.send(&json!({"op": "exec", "id": "s", "timeout": 0.5,
                    "command": format!("echo started; sleep {dur}")}));
                    assert_eq!(s.event()["data"], "started\n", "{m:?}");
                    // No command can stop the agent: this test, from outside, does.
                    signal(agent_pid(&id), "STOP");
                    let (end, code) = s.end();
                    assert_eq!(end["reason"], "agent_unresponsive", "{m:?}: {end}");
                    assert_ne!(code, 0, "{m:?}");
                    assert!(sleepers(&dur).is_empty(), "{m:?}: left behind");
                }
            });
        }
    });
}

#[test]
fn processes_that_leave_the_command_are_killed_when_it_ends() {
    let test = "processes_that_leave_the_command_are_killed_when_it_ends";
    let scoped = common::landlock_abi() >= 6;
    if !scoped {
        common::skip(
            test,
            "the fallback's leftovers outside the group: Landlock ABI below 6 (no signal scope)",
        );
    }
    for m in modes(test) {
        let dur = unique_duration(9, m);
        let mut s = Session::start(m, &[]);
        let d = s.exec("a", &format!(
            "setsid sleep {dur} & (setsid sleep {dur} &) ; (sleep {dur} </dev/null >/dev/null 2>&1 &) ; echo left"
        ));
        assert_eq!(d.stdout, "left\n", "{m:?}: {d:?}");
        // Without a pid namespace, the agent reaches every process of the
        // commands only from a signal-scoped Landlock domain of its own
        // (ABI 6); below, only the command's process group, and the
        // jail's init kills the rest when the session ends.
        if !m.fallback || scoped {
            let alive = sleepers(&dur);
            assert!(alive.is_empty(), "{m:?}: left behind: {alive:?}");
        }
        let (end, _) = s.close();
        assert_eq!(end["reason"], "closed", "{m:?}");
        assert!(sleepers(&dur).is_empty(), "{m:?}: left behind the session");
    }
}

#[test]
fn output_over_the_cap_is_counted_and_dropped() {
    for m in modes("output_over_the_cap_is_counted_and_dropped") {
        let mut s = Session::start(m, &[]);
        let d = s.exec_with(json!({"op": "exec", "id": "o", "max_output": 1000,
            "command": "head -c 300000 /dev/zero | tr '\\0' x; echo tail >&2"}));
        assert_eq!(d.exit["truncated"], true, "{m:?}");
        assert_eq!(d.exit["code"], 0, "{m:?}");
        assert_eq!(d.stdout.len() + d.stderr.len(), 1000, "{m:?}");
        let d = s.exec_with(
            json!({"op": "exec", "id": "i", "command": "tr a-z A-Z", "stdin": "from stdin\n"}),
        );
        assert_eq!(d.stdout, "FROM STDIN\n", "{m:?}");
        assert_eq!(d.exit["truncated"], false, "{m:?}");
        s.close();
    }
}

#[test]
fn bad_requests_get_an_error_event_and_the_session_lives_on() {
    for m in modes("bad_requests_get_an_error_event_and_the_session_lives_on") {
        let mut s = Session::start(m, &[]);
        for bad in [
            "not json",
            r#"{"op":"exec","id":"x"}"#,
            r#"{"op":"exec","id":"x","command":"ls","timeout":0}"#,
            r#"{"op":"exec","id":"x","command":"ls","bogus":1}"#,
            r#"{"op":"launch"}"#,
        ] {
            writeln!(s.stdin.as_mut().unwrap(), "{bad}").unwrap();
            let e = s.event();
            assert_eq!(e["event"], "error", "{m:?}: {bad}: {e}");
            assert_eq!(e["error"]["code"], "bad_request", "{m:?}: {bad}: {e}");
        }
        assert_eq!(s.exec("ok", "echo ok").stdout, "ok\n", "{m:?}");
        s.close();
    }
}

#[test]
fn the_memory_limit_covers_the_session() {
    for m in modes("the_memory_limit_covers_the_session") {
        let mut s = Session::start(m, &["--memory", "64m"]);
        let d = s.exec("big", "head -c 200m /dev/zero | python3 -c 'import sys; d = sys.stdin.buffer.read(); print(len(d))'");
        assert_ne!(d.exit["code"], 0, "{m:?}: 200m read under 64m: {d:?}");
        assert!(!d.stdout.contains("209715200"), "{m:?}: {d:?}");
        assert_eq!(s.exec("after", "echo ok").stdout, "ok\n", "{m:?}");
        let (end, _) = s.close();
        let mem = &end["outcome"]["limits"]["memory"];
        assert_eq!(mem["limit"], 64 << 20, "{m:?}: {end}");
        assert!(mem["enforced_by"].is_string(), "{m:?}: {end}");
        // The session ended as its agent chose, after a command met the
        // limit: `closed`, `exited`, never the limit's status.
        assert_eq!(end["reason"], "closed", "{m:?}: {end}");
        assert_eq!(end["outcome"]["status"], "exited", "{m:?}: {end}");
        assert_eq!(end["outcome"]["exit_code"], 0, "{m:?}: {end}");
    }
}

#[test]
fn the_session_ends_after_its_idle_timeout_and_on_stdin_end() {
    for m in modes("the_session_ends_after_its_idle_timeout_and_on_stdin_end") {
        // A command longer than the idle timeout is not idleness (sent
        // before the agent is up, so that the idle clock cannot run out
        // before it comes).
        let slow = json!({"op": "exec", "id": "slow", "command": "sleep 0.6; echo done"});
        let mut s = Session::start_sending(m, &["--idle-timeout", "300ms"], &[slow]);
        let d = s.until_exit("slow");
        assert_eq!(d.stdout, "done\n", "{m:?}");
        let (end, code) = s.end();
        assert_eq!(end["reason"], "idle_timeout", "{m:?}: {end}");
        assert_eq!(code, 0, "{m:?}");
        let mut s = Session::start(m, &[]);
        drop(s.stdin.take());
        let (end, code) = s.end();
        assert_eq!(end["reason"], "stdin_closed", "{m:?}: {end}");
        assert_eq!(code, 0, "{m:?}");
        // A command running when stdin ends is seen to its end first.
        let last = json!({"op": "exec", "id": "last", "command": "sleep 0.2; echo finished"});
        let mut s = Session::start_sending(m, &[], &[last]);
        drop(s.stdin.take());
        assert_eq!(s.until_exit("last").stdout, "finished\n", "{m:?}");
        let (end, code) = s.end();
        assert_eq!(end["reason"], "stdin_closed", "{m:?}: {end}");
        assert_eq!(code, 0, "{m:?}");
    }
}

#[test]
fn a_bad_flag_is_refused_with_an_end_event() {
    let o = common::stockade(Who::Root)
        .args(["session", "--memory", "lots"])
        .output()
        .unwrap();
    common::expect_code(&o, 125, "--memory lots");
    assert!(
        common::stderr(&o).starts_with("stockade: --memory: "),
        "{}",
        common::stderr(&o)
    );
    let end: Value = serde_json::from_str(common::stdout(&o).trim()).unwrap();
    assert_eq!(end["reason"], "setup_error");
    assert_eq!(end["outcome"]["status"], "setup_error");
}

#[test]
fn sessions_run_under_the_python_profile_and_strict_is_refused_unless_widened() {
    for m in modes("sessions_run_under_the_python_profile_and_strict_is_refused_unless_widened") {
        let mut s = Session::start(m, &["--profile", "python"]);
        let d = s.exec(
            "p",
            "python3 -c 'import os; os.chdir(\"/tmp\"); print(6 * 7)'; export V=1",
        );
        assert_eq!(d.stdout, "42\n", "{m:?}: {d:?}");
        assert_eq!(s.exec("q", "echo $V").stdout, "1\n", "{m:?}");
        s.close();
        if m.fallback {
            continue; // strict requires user namespaces
        }
        let o = common::stockade(m.who)
            .args(["session", "--profile", "strict"])
            .output()
            .unwrap();
        common::expect_code(&o, 125, "strict session");
        assert!(
            common::stderr(&o).contains("narrower than @default"),
            "{m:?}: {}",
            common::stderr(&o)
        );
        let mut s = Session::start(m, &["--profile", "strict", "--seccomp-allow", "@default"]);
        assert_eq!(s.exec("s", "python3 -c 'print(1)'").stdout, "1\n", "{m:?}");
        s.close();
    }
}

/// A TCP connect and two UDP sends (`sendto`, and `connect` then `send`)
/// to this test's sockets on 127.0.0.1 (ports in argv), one line each:
/// `ok` or the errno.
const REACH_OUT: &str = r#"
import socket, sys
tcp, udp = int(sys.argv[1]), int(sys.argv[2])
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, e.errno)
def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(("127.0.0.1", tcp))
    s.close()
def sendto():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("127.0.0.1", udp))
    s.close()
def send():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", udp))
    s.send(b"x")
    s.close()
attempt("tcp", connect)
attempt("udp-sendto", sendto)
attempt("udp-send", send)
"#;

#[test]
fn every_command_reaches_the_network_and_proc_as_the_first_did() {
    // Ours: the listen backlog takes the connects, the socket the datagrams.
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let ports = format!(
        "{} {}",
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port()
    );
    let command = format!(
        "python3 - {ports}; cat /proc/self/status >/dev/null 2>&1 && echo status ok || echo status refused"
    );
    for m in modes("every_command_reaches_the_network_and_proc_as_the_first_did") {
        let mut s = Session::start(m, &["--network", "host"]);
        let mut answers = Vec::new();
        for id in ["a", "b", "c"] {
            let d = s
                .exec_with(json!({"op": "exec", "id": id, "command": command, "stdin": REACH_OUT}));
            assert_eq!(d.exit["code"], 0, "{m:?} {id}: {d:?}");
            answers.push(d.stdout);
        }
        assert!(
            answers[0].starts_with("tcp ok\nudp-sendto ok\nudp-send ok\n"),
            "{m:?}: the host's network from the first command: {answers:?}"
        );
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "{m:?}: later commands answered otherwise: {answers:?}"
        );
        s.close();
    }
}
