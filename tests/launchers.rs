//! One jail whoever starts it: the same hostile probe run by a cold jail,
//! a warm member and a fork server's child (`stockade serve`, the real
//! binary, as root) sees the same jail and gets the same layer report;
//! a session's command sees the same jail too; and a payload that traps
//! SIGTERM, or one that does not, ends its deadline the same way in each
//! (SIGTERM to every process of the run, the grace, then SIGKILL).

mod common;
mod serve_util;

use common::Who;
use serde_json::{json, Value};
use serve_util::{metric, py, Server};

const HITS: &str = "stockade_pool_hits_total{profile=\"python\"}";

/// What a hostile program finds of its jail, as JSON on stdout.
const PROBE: &str = r#"import os, json, socket, signal, ctypes, resource
st = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(f):
    try:
        r = f()
        return 0 if r is None or r >= 0 else ctypes.get_errno()
    except OSError as e:
        return e.errno
r = {
  'pid': os.getpid(), 'ppid': os.getppid(), 'sid_is_pid': os.getsid(0) == os.getpid(),
  'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
  'caps': [st[k] for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
  'nnp': st['NoNewPrivs'], 'seccomp': st['Seccomp'], 'sig_blocked': st['SigBlk'],
  'sig_ignored': st['SigIgn'],
  'proc': sorted(os.listdir('/proc')),
  'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
  'kallsyms': len(open('/proc/kallsyms').read()),
  'proc_sys_write': errno_of(lambda: os.open('/proc/sys/kernel/hostname', os.O_WRONLY)),
  'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
  'cwd': os.getcwd(), 'cwd_listing': sorted(os.listdir('.')),
  'tmp': sorted(os.listdir('/tmp')), 'shm': sorted(os.listdir('/dev/shm')),
  'pts': sorted(os.listdir('/dev/pts')),
  'cgroup': open('/proc/self/cgroup').read().splitlines()[-1].rsplit(':', 1)[1],
  'hostname': socket.gethostname(),
  'nofile': resource.getrlimit(resource.RLIMIT_NOFILE),
  'core': resource.getrlimit(resource.RLIMIT_CORE),
  'write_usr': errno_of(lambda: os.open('/usr/x', os.O_CREAT | os.O_WRONLY)),
  'write_tmp': errno_of(lambda: os.close(os.open('/tmp/x', os.O_CREAT | os.O_WRONLY))),
  'tcp': errno_of(lambda: socket.create_connection(('127.0.0.1', 1), 1)),
  'mount': errno_of(lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
  'userns': errno_of(lambda: libc.unshare(0x10000000)),
  'kill_all': errno_of(lambda: os.kill(-1, signal.SIGKILL)),
  'kill_init': errno_of(lambda: os.kill(1, 0)),
  'ptrace_init': errno_of(lambda: libc.ptrace(16, 1, None, None)),
  'keyring': errno_of(lambda: libc.syscall(248, b'user', b'k', b'x', 1, -4)),
  'dumpable': libc.prctl(3, 0, 0, 0, 0),
  'umask': os.umask(0o22),
}
print(json.dumps(r, sort_keys=True))"#;

fn stdout(v: &Value) -> &str {
    v["stdout"]["data"].as_str().unwrap_or_default()
}

/// A server for each launcher of a python run: cold (no pool), warm
/// member, fork server.
fn servers() -> [(&'static str, Server); 3] {
    servers_with(&[])
}

/// [`servers`], each started with `more` flags.
fn servers_with(more: &[&str]) -> [(&'static str, Server); 3] {
    let modules = ["--warm-import", "json,socket,ctypes,resource"];
    let warm = ["--warm", "python=1"];
    let cold = Server::start(Who::Root, more);
    let member = Server::start(Who::Root, &[&warm[..], &modules[..], more].concat());
    member.wait_ready();
    let fork = Server::start(
        Who::Root,
        &[&warm[..], &modules[..], &["--warm-fork"][..], more].concat(),
    );
    fork.wait_ready();
    [("cold", cold), ("warm", member), ("forked", fork)]
}

/// Run `body` on `s`, checking a pool served it when `launcher` is one.
fn run_as(launcher: &str, s: &Server, body: &Value) -> Value {
    let before = metric(s, HITS);
    let v = s.run(body).json();
    let hit = metric(s, HITS) > before;
    assert_eq!(hit, launcher != "cold", "{launcher}: a pool hit? {v}");
    v
}

#[test]
fn every_launcher_runs_the_same_jail() {
    if !common::is_root() {
        common::skip(
            "every_launcher_runs_the_same_jail",
            "not root: no cgroup holds a forked run's limits, so no fork server",
        );
        return;
    }
    let mut seen: Vec<(&str, Value, Value)> = Vec::new();
    for (launcher, s) in servers() {
        let v = run_as(launcher, &s, &py(PROBE));
        assert_eq!(v["exit_code"], 0, "{launcher}: {v}");
        let probe: Value =
            serde_json::from_str(stdout(&v)).unwrap_or_else(|e| panic!("{launcher}: {e}: {v}"));
        let mut layers = v["layers"].clone();
        // The limits' reports (what holds each, its verdict) beside them.
        layers["limits (outcome)"] = v["limits"].clone();
        seen.push((launcher, probe, layers));
    }
    let (_, cold, cold_layers) = &seen[0];
    // The jail a hostile program finds, as a cold payload finds it.
    assert_eq!(cold["pid"], 2, "{cold}");
    assert_eq!(cold["ppid"], 1, "{cold}");
    assert_eq!(cold["caps"], json!(vec!["0000000000000000"; 5]), "{cold}");
    assert_eq!(cold["seccomp"], "2", "{cold}");
    assert_eq!(cold["pids"], json!([1, 2]), "{cold}");
    assert_eq!(cold["kallsyms"], 0, "masked: {cold}");
    assert_ne!(cold["proc_sys_write"], 0, "{cold}");
    assert_eq!(cold["kill_all"], libc_errno("ESRCH"), "{cold}");
    assert_ne!(cold["write_usr"], 0, "{cold}");
    assert_eq!(cold["write_tmp"], 0, "{cold}");
    for (launcher, probe, layers) in &seen[1..] {
        assert_eq!(probe, cold, "{launcher} vs cold");
        let mut layers = layers.clone();
        let mut cold_layers = cold_layers.clone();
        // What differs by design: each run's cgroup is its own, and the
        // fork server's child shares the zygote's user namespace (which
        // holds no capability left), made by the zygote's clone.
        for l in [&mut layers, &mut cold_layers] {
            let cg = &mut l["cgroup"]["detail"];
            assert!(
                cg["path"].as_str().is_some_and(|p| p.contains("/run-")),
                "{launcher}: {cg}"
            );
            cg["path"] = Value::Null;
            cg["v1"] = Value::Null;
            if let Some(u) = l["user_namespace"]["detail"].as_object_mut() {
                u.remove("shared_with");
                u.remove("created_by");
            }
        }
        let names = |l: &Value| l.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        assert_eq!(
            names(&layers),
            names(&cold_layers),
            "{launcher}'s layers vs cold's"
        );
        for (name, cold_layer) in cold_layers.as_object().unwrap() {
            assert_eq!(
                &layers[name], cold_layer,
                "{launcher}'s layer {name} vs cold's"
            );
        }
    }
}

/// A session's command (`/bin/sh -c`, under the session's agent) is in
/// the same jail as a cold run's payload: what it finds of its confinement
/// is the cold payload's (its pid, parent and session are the agent's
/// business).
#[test]
fn a_sessions_command_runs_in_the_same_jail() {
    if !common::is_root() {
        common::skip(
            "a_sessions_command_runs_in_the_same_jail",
            "the comparison is made as root (the other launchers' test)",
        );
        return;
    }
    let s = Server::start(Who::Root, &[]);
    let cold = s.run(&py(PROBE)).json();
    let cold: Value = serde_json::from_str(stdout(&cold)).unwrap();
    let r = s.call(
        "POST",
        "/v1/sessions",
        &[],
        json!({"profile": "python"}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    // Without its kill(-1), which would reach the command's own shell and
    // end the command (the agent sweeps what a command leaves).
    let kill_all = "  'kill_all': errno_of(lambda: os.kill(-1, signal.SIGKILL)),\n";
    assert!(PROBE.contains(kill_all));
    let quoted = PROBE.replace(kill_all, "").replace('\'', "'\\''");
    let r = s.call(
        "POST",
        &format!("/v1/sessions/{id}/exec"),
        &[],
        json!({"command": format!("python3 -c '{quoted}'")})
            .to_string()
            .as_bytes(),
    );
    let v = r.json();
    assert_eq!(v["code"], 0, "{v}");
    let probe: Value = serde_json::from_str(v["stdout"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {v}"));
    for field in [
        "caps",
        "nnp",
        "seccomp",
        "uid",
        "gid",
        "groups",
        "cwd",
        "hostname",
        "nofile",
        "core",
        "write_usr",
        "write_tmp",
        "tcp",
        "mount",
        "userns",
        "keyring",
        "kallsyms",
        "proc_sys_write",
        "sig_blocked",
        "sig_ignored",
        "dumpable",
        "cgroup",
    ] {
        assert_eq!(
            probe[field], cold[field],
            "{field}: session {probe} vs cold {cold}"
        );
    }
}

fn libc_errno(name: &str) -> Value {
    json!(match name {
        "ESRCH" => libc::ESRCH,
        _ => unreachable!(),
    })
}

/// A payload that traps SIGTERM prints what it does on it and ends
/// `timeout`, as a cold run, a warm member, a forked child and a
/// session's command; one that
/// does not dies of the SIGTERM, in each alike. (The deadline leaves the
/// interpreter ample time to start and trap SIGTERM while other tests
/// load the host.)
#[test]
fn every_launcher_ends_a_deadline_alike() {
    if !common::is_root() {
        common::skip(
            "every_launcher_ends_a_deadline_alike",
            "not root: no cgroup holds a forked run's limits, so no fork server",
        );
        return;
    }
    let trap = "import signal, sys, time\n\
        def on_term(*_):\n    print('cleaning up', flush=True)\n    sys.exit(7)\n\
        signal.signal(signal.SIGTERM, on_term)\n\
        print('ready', flush=True)\n\
        time.sleep(60)";
    let plain = "import time\nprint('ready', flush=True)\ntime.sleep(60)";
    let servers = servers();
    // Each launcher beside the others (the session on the first's
    // server, before its runs): every run waits out its 3 s deadline, and
    // each launcher has its own server.
    std::thread::scope(|sc| {
        for (i, (launcher, s)) in servers.into_iter().enumerate() {
            sc.spawn(move || {
                if i == 0 {
                    session_ends_a_deadline_alike(&s, trap, plain);
                }
                deadline_alike(launcher, &s, trap, plain)
            });
        }
    });
}

/// One launcher's runs of [`every_launcher_ends_a_deadline_alike`]: the
/// payload that traps SIGTERM cleans up and exits 7, the other dies of it.
fn deadline_alike(launcher: &str, s: &Server, trap: &str, plain: &str) {
    let cases = [
        (trap, "ready\ncleaning up\n", json!(7), Value::Null),
        (
            plain,
            "ready\n",
            json!(128 + libc::SIGTERM),
            json!(libc::SIGTERM),
        ),
    ];
    for (code, out, exit, signal) in cases {
        let mut body = py(code);
        body["limits"] = json!({"timeout": "3s"});
        let v = run_as(launcher, s, &body);
        assert_eq!(v["status"], "timeout", "{launcher}: {v}");
        assert_eq!(stdout(&v), out, "{launcher}: {v}");
        assert_eq!(
            (&v["exit_code"], &v["signal"]),
            (&exit, &signal),
            "{launcher}: {v}"
        );
    }
}

/// A session's command, given the same payloads and timeout as the runs
/// of [`every_launcher_ends_a_deadline_alike`], ends as they do: the one
/// that traps SIGTERM is given the grace to clean up, the other dies of
/// the SIGTERM. The exit is the command's shell's, which the SIGTERM ends
/// at once (as `sh -c` would end in a cold run).
fn session_ends_a_deadline_alike(s: &Server, trap: &str, plain: &str) {
    let r = s.call(
        "POST",
        "/v1/sessions",
        &[],
        json!({"profile": "python"}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    for (payload, out) in [(trap, "ready\ncleaning up\n"), (plain, "ready\n")] {
        let quoted = payload.replace('\'', "'\\''");
        let r = s.call(
            "POST",
            &format!("/v1/sessions/{id}/exec"),
            &[],
            json!({"command": format!("python3 -c '{quoted}'"), "timeout": 3})
                .to_string()
                .as_bytes(),
        );
        let v = r.json();
        assert_eq!(v["status"], "timeout", "session: {v}");
        assert_eq!(v["stdout"], out, "session: {v}");
        assert_eq!(
            (&v["code"], &v["signal"]),
            (&json!(128 + libc::SIGTERM), &json!(libc::SIGTERM)),
            "session: {v}"
        );
    }
}

/// A run that fills its workdir (`--max-workdir 8m`) and stays ends as
/// `disk_limit`, killed, by every launcher.
#[test]
fn every_launcher_ends_a_full_workdir_alike() {
    if !common::is_root() {
        common::skip(
            "every_launcher_ends_a_full_workdir_alike",
            "not root: no cgroup holds a forked run's limits, so no fork server",
        );
        return;
    }
    let fill = "import time\ntry:\n    with open('big', 'wb') as f:\n        for i in range(64):\n            f.write(bytes(1 << 20))\n            f.flush()\nexcept OSError as e:\n    print(e.strerror, flush=True)\ntime.sleep(30)";
    for (launcher, s) in servers_with(&["--max-workdir", "8m"]) {
        let v = run_as(launcher, &s, &py(fill));
        assert_eq!(v["status"], "disk_limit", "{launcher}: {v}");
        assert_eq!(v["signal"], libc::SIGKILL, "{launcher}: {v}");
    }
}

/// A run whose pids limit leaves no room for its payload (its init is
/// the one process the limit allows) fails the same setup step, on the
/// same path, with the same errno, whether a cold jail or a fork
/// server's child starts it; the outcome's `error` names that step.
#[test]
fn every_launcher_names_a_failed_setup_step_alike() {
    if !common::is_root() {
        common::skip(
            "every_launcher_names_a_failed_setup_step_alike",
            "not root: no cgroup holds a forked run's limits, so no fork server",
        );
        return;
    }
    let cold = Server::start(Who::Root, &[]);
    let fork = Server::start(
        Who::Root,
        &["--warm", "python=1", "--warm-import", "json", "--warm-fork"],
    );
    fork.wait_ready();
    let mut body = py("print('never')");
    body["limits"] = json!({"pids": 1});
    let mut seen = Vec::new();
    for (launcher, s) in [("cold", &cold), ("forked", &fork)] {
        let v = run_as(launcher, s, &body);
        assert_eq!(v["status"], "setup_error", "{launcher}: {v}");
        assert_eq!(stdout(&v), "", "{launcher}: {v}");
        let setup = &v["setup"];
        let step = setup["step"].as_str().unwrap_or_default();
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.starts_with(&format!("{step}: "))),
            "{launcher}: {v}"
        );
        seen.push((launcher, setup.clone()));
    }
    let (_, cold_setup) = &seen[0];
    assert_eq!(cold_setup["step"], "start payload", "cold: {cold_setup}");
    assert_eq!(cold_setup["errno"], libc::EAGAIN, "cold: {cold_setup}");
    for (launcher, setup) in &seen[1..] {
        for part in ["step", "path", "errno"] {
            assert_eq!(
                setup[part], cold_setup[part],
                "{launcher}'s setup {part} vs cold's: {setup} vs {cold_setup}"
            );
        }
    }
}
