//! Landlock on its own: what a payload cannot reach even where the mount
//! layout would let it (paths left out of the ruleset, TCP, abstract unix
//! sockets and signals outside its domain), that what it needs still works,
//! and that a kernel with less Landlock is reported, never silently trusted.
//! Every test runs as root and as uid 65534 and has a positive control
//! (`--no-landlock`, or the same run without the exclusion).

mod common;

use std::io::{BufRead, BufReader};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{expect_code, stderr, stdout, Scratch, Who};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A random token that cannot appear in any output by chance.
fn token() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .expect("read a random uuid")
        .trim()
        .replace('-', "")
}

/// The host kernel's Landlock ABI (0: none), asked through python's ctypes
/// so the test needs no unsafe code.
fn host_abi() -> i32 {
    common::landlock_abi()
}

/// Skip (and say so) unless the host has at least Landlock ABI `need`.
fn need_abi(test: &str, need: i32) -> bool {
    let abi = host_abi();
    if abi < need {
        common::skip(
            test,
            &format!("host Landlock ABI is {abi}, this test needs {need}"),
        );
        return false;
    }
    true
}

/// `stockade run FLAGS --report FILE -- CMD…`: the output and the parsed
/// JSON outcome.
fn run_report(who: Who, flags: &[&str], cmd: &[&str]) -> (Output, serde_json::Value) {
    let dir = Scratch::new("ll-report").world_writable();
    let rep = dir.join("outcome.json");
    let mut all: Vec<&str> = flags.to_vec();
    all.extend(["--report", s(&rep)]);
    let o = common::run(who, &all, cmd);
    let text = std::fs::read_to_string(&rep).unwrap_or_else(|e| {
        panic!(
            "no report at {}: {e}\n--- stdout\n{}\n--- stderr\n{}",
            rep.display(),
            stdout(&o),
            stderr(&o)
        )
    });
    let v: serde_json::Value = serde_json::from_str(&text).expect("outcome is JSON");
    (o, v)
}

/// A scratch dir with `canary` holding a fresh token (mode 0644).
fn canary_dir(tag: &str) -> (Scratch, String) {
    let d = Scratch::new(tag);
    let t = token();
    std::fs::write(d.join("canary"), &t).unwrap();
    (d, t)
}

// ---------------------------------------------------------------- files

#[test]
fn path_mounted_but_left_out_of_the_ruleset_is_unreadable() {
    for who in common::users("path_mounted_but_left_out_of_the_ruleset_is_unreadable") {
        let (d, secret) = canary_dir("ll-ro");
        let bind = format!("{}:/data", s(d.path()));

        let o = common::run(
            who,
            &["--ro-bind", &bind, "--landlock-exclude", "/data"],
            &["cat", "/data/canary"],
        );
        expect_code(&o, 1, &format!("{who:?}: cat excluded path"));
        assert!(
            stderr(&o).contains("/data/canary: Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains(&secret), "{who:?}: canary leaked");
        // Listing the directory is refused too.
        let o = common::run(
            who,
            &["--ro-bind", &bind, "--landlock-exclude", "/data"],
            &["ls", "/data"],
        );
        assert_ne!(o.status.code(), Some(0), "{who:?}: ls /data succeeded");
        assert!(
            stderr(&o).contains("Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains("canary"), "{who:?}: listing leaked");
        // With a mount left out, `/` is not listable either: ReadDir on `/`
        // would reach the names inside the excluded mount.
        let (o, rep) = run_report(
            who,
            &["--ro-bind", &bind, "--landlock-exclude", "/data"],
            &["/bin/sh", "-c", "ls /; echo rc=$?"],
        );
        expect_code(&o, 0, &format!("{who:?}: ls /"));
        assert!(
            stdout(&o).contains("rc=") && !stdout(&o).contains("rc=0"),
            "{who:?}: {}",
            stdout(&o)
        );
        assert_eq!(
            rep["layers"]["landlock"]["detail"]["root_listable"], false,
            "{who:?}: {rep}"
        );

        // Control: the same mount inside the ruleset is readable.
        let o = common::run(who, &["--ro-bind", &bind], &["cat", "/data/canary"]);
        expect_code(&o, 0, &format!("{who:?}: cat with the rule"));
        assert_eq!(stdout(&o), secret, "{who:?}");
    }
}

#[test]
fn writable_bind_left_out_of_the_ruleset_is_not_writable() {
    for who in common::users("writable_bind_left_out_of_the_ruleset_is_not_writable") {
        let d = Scratch::new("ll-rw").world_writable();
        let existing = d.join("existing");
        std::fs::write(&existing, "before\n").unwrap();
        std::fs::set_permissions(
            &existing,
            std::os::unix::fs::PermissionsExt::from_mode(0o666),
        )
        .unwrap();
        let bind = format!("{}:/data", s(d.path()));
        let script =
            "echo pwned > /data/new; echo c1=$?; echo pwned >> /data/existing; echo c2=$?; \
                      mkdir /data/dir; echo c3=$?; rm -f /data/existing; echo c4=$?";

        let o = common::run(
            who,
            &["--bind", &bind, "--landlock-exclude", "/data"],
            &["/bin/sh", "-c", script],
        );
        expect_code(&o, 0, &format!("{who:?}: script ran"));
        let out = stdout(&o);
        for c in ["c1=", "c2=", "c3=", "c4="] {
            assert!(
                out.contains(c) && !out.contains(&format!("{c}0")),
                "{who:?}: {c} succeeded\n{out}\n{}",
                stderr(&o)
            );
        }
        assert!(
            stderr(&o).contains("Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!d.join("new").exists(), "{who:?}: /data/new was created");
        assert!(!d.join("dir").exists(), "{who:?}: /data/dir was created");
        assert_eq!(
            std::fs::read_to_string(&existing).unwrap(),
            "before\n",
            "{who:?}: existing file changed or removed"
        );

        // Control: inside the ruleset the same writes land on the host.
        let o = common::run(who, &["--bind", &bind], &["/bin/sh", "-c", script]);
        expect_code(&o, 0, &format!("{who:?}: control"));
        assert!(
            stdout(&o).contains("c1=0") && stdout(&o).contains("c3=0"),
            "{who:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert_eq!(
            std::fs::read_to_string(d.join("new")).unwrap(),
            "pwned\n",
            "{who:?}"
        );
    }
}

#[test]
fn shell_loader_and_python_run_under_full_landlock() {
    let test = "shell_loader_and_python_run_under_full_landlock";
    if !need_abi(test, 6) {
        return;
    }
    for who in common::users(test) {
        let script = "set -e; /lib64/ld-linux-x86-64.so.2 --version | head -n1; \
                      python3 -c 'print(\"py\", 6*7)'; echo x > /dev/null; \
                      head -c 4 /dev/urandom | wc -c; echo tmp > /tmp/t; cat /tmp/t; \
                      echo home > ./h; cat ./h; grep -c . /etc/passwd; cat /proc/self/comm; \
                      ls / | grep -x usr; ls /etc | grep -x passwd";
        let (o, rep) = run_report(who, &["--require", "landlock"], &["/bin/sh", "-c", script]);
        expect_code(&o, 0, &format!("{who:?}: toolchain under Landlock"));
        let out = stdout(&o);
        for want in [
            "ld.so", "py 42\n", "4\n", "tmp\n", "home\n", "cat\n", "usr\n", "passwd\n",
        ] {
            assert!(
                out.contains(want),
                "{who:?}: missing {want:?}\n{out}\n{}",
                stderr(&o)
            );
        }
        let ll = &rep["layers"]["landlock"];
        assert_eq!(ll["state"], "applied", "{who:?}: {ll}");
        let d = &ll["detail"];
        assert_eq!(d["status"], "fully_enforced", "{who:?}: {d}");
        assert_eq!(d["abi"], host_abi(), "{who:?}: {d}");
        assert_eq!(d["tcp"], "denied", "{who:?}: {d}");
        assert_eq!(
            d["scopes"],
            serde_json::json!(["abstract_unix_socket", "signal"]),
            "{who:?}: {d}"
        );
        assert_eq!(d["missing"], serde_json::json!([]), "{who:?}: {d}");
        assert!(d["fs_rules"].as_u64().unwrap_or(0) > 5, "{who:?}: {d}");
        assert_eq!(d["root_listable"], true, "{who:?}: {d}");
    }
}

// ---------------------------------------------------------------- network

const TCP_PROBE: &str = r#"
import errno, socket
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
srv = socket.socket()
try:
    srv.bind(("127.0.0.1", 8080)); srv.listen(1); print("bind ok")
except OSError as e:
    print("bind", name(e))
c = socket.socket()
try:
    c.connect(("127.0.0.1", 8080)); print("connect ok")
except OSError as e:
    print("connect", name(e))
"#;

#[test]
fn tcp_bind_and_connect_are_denied_in_a_jail_without_network() {
    let test = "tcp_bind_and_connect_are_denied_in_a_jail_without_network";
    if !need_abi(test, 4) {
        return;
    }
    for who in common::users(test) {
        let o = common::run(who, &[], &["python3", "-c", TCP_PROBE]);
        expect_code(&o, 0, &format!("{who:?}: probe"));
        assert_eq!(
            stdout(&o),
            "bind EACCES\nconnect EACCES\n",
            "{who:?}: {}",
            stderr(&o)
        );

        // Control: without Landlock the loopback works.
        let o = common::run(who, &["--no-landlock"], &["python3", "-c", TCP_PROBE]);
        expect_code(&o, 0, &format!("{who:?}: control"));
        assert_eq!(
            stdout(&o),
            "bind ok\nconnect ok\n",
            "{who:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn host_network_leaves_tcp_to_the_policy() {
    let test = "host_network_leaves_tcp_to_the_policy";
    if !need_abi(test, 4) {
        return;
    }
    for who in common::users(test) {
        let probe = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); \
                     c = socket.create_connection(s.getsockname()); print('tcp ok')";
        let (o, rep) = run_report(who, &["--network", "host"], &["python3", "-c", probe]);
        expect_code(&o, 0, &format!("{who:?}: host network tcp"));
        assert_eq!(stdout(&o), "tcp ok\n", "{who:?}: {}", stderr(&o));
        assert_eq!(
            rep["layers"]["landlock"]["detail"]["tcp"], "allowed",
            "{who:?}: {rep}"
        );
    }
}

#[test]
fn abstract_unix_socket_outside_the_domain_is_unreachable() {
    let test = "abstract_unix_socket_outside_the_domain_is_unreachable";
    if !need_abi(test, 6) {
        return;
    }
    for who in common::users(test) {
        // A listener on the host; `--network host` shares the namespace in
        // which abstract names live, so only Landlock stands in between.
        let name = format!("stockade-ll-{}", token());
        let listener = std::os::unix::net::UnixListener::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
        )
        .expect("bind host abstract socket");
        listener.set_nonblocking(true).unwrap();
        let probe = format!(
            r#"
import errno, socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0{name}"); print("outside ok")
except OSError as e:
    print("outside", errno.errorcode.get(e.errno, e.errno))
t = socket.socket(socket.AF_UNIX); t.bind("\0inner-{name}"); t.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("\0inner-{name}"); print("inside ok")
"#
        );
        let o = common::run(who, &["--network", "host"], &["python3", "-c", &probe]);
        expect_code(&o, 0, &format!("{who:?}: probe"));
        assert_eq!(
            stdout(&o),
            "outside EPERM\ninside ok\n",
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(
            listener.accept().is_err(),
            "{who:?}: the host listener got a connection"
        );

        // Control: without Landlock the host's socket is reachable.
        let o = common::run(
            who,
            &["--network", "host", "--no-landlock"],
            &["python3", "-c", &probe],
        );
        expect_code(&o, 0, &format!("{who:?}: control"));
        assert_eq!(
            stdout(&o),
            "outside ok\ninside ok\n",
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(
            listener.accept().is_ok(),
            "{who:?}: control connection never arrived"
        );
    }
}

// ---------------------------------------------------------------- signals

#[test]
fn payload_signals_its_children_but_not_init() {
    let test = "payload_signals_its_children_but_not_init";
    if !need_abi(test, 6) {
        return;
    }
    let probe = r#"
import errno, os, signal, subprocess
p = subprocess.Popen(["sleep", "100"])
os.kill(p.pid, signal.SIGTERM)
print("child", p.wait())
for sig in (0, signal.SIGTERM):
    try:
        os.kill(1, sig); print("init", int(sig), "ok")
    except OSError as e:
        print("init", int(sig), errno.errorcode.get(e.errno, e.errno))
"#;
    for who in common::users(test) {
        let o = common::run(who, &[], &["python3", "-c", probe]);
        expect_code(&o, 0, &format!("{who:?}: probe"));
        assert_eq!(
            stdout(&o),
            "child -15\ninit 0 EPERM\ninit 15 EPERM\n",
            "{who:?}: {}",
            stderr(&o)
        );
        let o = common::run(
            who,
            &[],
            &[
                "/bin/sh",
                "-c",
                "sleep 100 & kill $!; wait $!; echo status=$?",
            ],
        );
        expect_code(&o, 0, &format!("{who:?}: sh kills its job"));
        assert_eq!(stdout(&o), "status=143\n", "{who:?}: {}", stderr(&o));

        // Control: without Landlock, init is reachable (signal 0 only).
        let o = common::run(
            who,
            &["--no-landlock"],
            &[
                "python3",
                "-c",
                "import os; os.kill(1, 0); print('init reachable')",
            ],
        );
        expect_code(&o, 0, &format!("{who:?}: control"));
        assert_eq!(stdout(&o), "init reachable\n", "{who:?}: {}", stderr(&o));
    }
}

#[test]
fn signals_from_outside_still_reach_the_payload() {
    let test = "signals_from_outside_still_reach_the_payload";
    if !need_abi(test, 6) {
        return;
    }
    for who in common::users(test) {
        let mut c = common::stockade(who);
        c.args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "echo ready; sleep 1000; echo survived",
        ]);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("start stockade");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{who:?}");
        // SIGTERM to stockade: forwarded to init, which (outside the
        // payload's domain) passes it on to the payload.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("kill stockade");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(143), "{who:?}: {st:?} {rest}");
        assert!(!rest.contains("survived"), "{who:?}: {rest}");
    }
}

// ---------------------------------------------------------------- weak kernels

/// `ll_fake_abi N stockade run FLAGS -- CMD…` as `who`: stockade sees a
/// kernel with Landlock ABI N (0: none) through a seccomp filter that answers
/// the version query (see tests/payloads/ll_fake_abi.c).
fn run_fake_abi(who: Who, abi: u32, flags: &[&str], cmd: &[&str]) -> (Output, serde_json::Value) {
    let wrapper = common::c_payload("ll_fake_abi");
    let dir = Scratch::new("ll-fake").world_writable();
    let rep = dir.join("outcome.json");
    let mut c = Command::new(wrapper);
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .current_dir("/")
        .stdin(Stdio::null());
    if who == Who::Nobody && common::is_root() {
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    c.arg(abi.to_string())
        .arg(common::binary())
        .arg("run")
        .args(flags)
        .args(["--report", s(&rep)])
        .arg("--")
        .args(cmd);
    let o = c.output().expect("start ll_fake_abi");
    let text = std::fs::read_to_string(&rep).unwrap_or_else(|e| {
        panic!(
            "no report: {e}\n--- stdout\n{}\n--- stderr\n{}",
            stdout(&o),
            stderr(&o)
        )
    });
    (o, serde_json::from_str(&text).expect("outcome is JSON"))
}

#[test]
fn landlock_is_required_and_held_on_this_host() {
    let test = "landlock_is_required_and_held_on_this_host";
    if !need_abi(test, 6) {
        return;
    }
    for who in common::users(test) {
        let (d, secret) = canary_dir("ll-req");
        let bind = format!("{}:/data", s(d.path()));
        let o = common::run(
            who,
            &[
                "--require",
                "landlock",
                "--ro-bind",
                &bind,
                "--landlock-exclude",
                "/data",
            ],
            &["cat", "/data/canary"],
        );
        expect_code(&o, 1, &format!("{who:?}: required and enforced"));
        assert!(
            stderr(&o).contains("Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains(&secret), "{who:?}");
    }
}

#[test]
fn older_kernel_is_reported_partially_enforced() {
    let test = "older_kernel_is_reported_partially_enforced";
    if !need_abi(test, 4) {
        return;
    }
    for who in common::users(test) {
        // ABI 3: filesystem rights up to truncate, no TCP, no scopes.
        let (o, rep) = run_fake_abi(who, 3, &["--require", "landlock"], &["true"]);
        expect_code(&o, 125, &format!("{who:?}: required on ABI 3"));
        assert!(
            stderr(&o).contains("landlock")
                && stderr(&o).contains("partially_enforced")
                && stderr(&o).contains("net:bind_tcp"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert_eq!(rep["exit_code"], 125, "{who:?}: {rep}");

        // Without --require the run goes on, says what is missing, and what
        // ABI 3 can enforce still holds: the excluded path stays unreadable
        // while TCP (which ABI 3 cannot deny) is open.
        let (d, secret) = canary_dir("ll-abi3");
        let bind = format!("{}:/data", s(d.path()));
        let script = format!(
            "cat /data/canary; python3 -c '{}'",
            "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 8080)); print(\"bind ok\")"
        );
        let (o, rep) = run_fake_abi(
            who,
            3,
            &["--ro-bind", &bind, "--landlock-exclude", "/data"],
            &["/bin/sh", "-c", &script],
        );
        expect_code(&o, 0, &format!("{who:?}: ABI 3 run"));
        assert!(
            stderr(&o).contains("/data/canary: Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains(&secret), "{who:?}");
        assert!(stdout(&o).contains("bind ok"), "{who:?}: {}", stderr(&o));
        let dt = &rep["layers"]["landlock"]["detail"];
        assert_eq!(dt["status"], "partially_enforced", "{who:?}: {dt}");
        assert_eq!(dt["abi"], 3, "{who:?}: {dt}");
        assert_eq!(dt["tcp"], "unavailable", "{who:?}: {dt}");
        assert_eq!(dt["scopes"], serde_json::json!([]), "{who:?}: {dt}");
        assert_eq!(
            dt["missing"],
            serde_json::json!([
                "fs:ioctl_dev",
                "net:bind_tcp",
                "net:connect_tcp",
                "scope:abstract_unix_socket",
                "scope:signal"
            ]),
            "{who:?}: {dt}"
        );
    }
}

#[test]
fn kernel_without_landlock_is_reported_not_enforced() {
    let test = "kernel_without_landlock_is_reported_not_enforced";
    for who in common::users(test) {
        let (o, rep) = run_fake_abi(who, 0, &["--require", "landlock"], &["true"]);
        expect_code(&o, 125, &format!("{who:?}: required without Landlock"));
        assert!(
            stderr(&o).contains("landlock") && stderr(&o).contains("not_enforced"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert_eq!(rep["exit_code"], 125, "{who:?}: {rep}");

        // Without --require: the run goes on and the outcome says so; the
        // excluded path is then readable, which is exactly why the status
        // must be read.
        let (d, secret) = canary_dir("ll-abi0");
        let bind = format!("{}:/data", s(d.path()));
        let (o, rep) = run_fake_abi(
            who,
            0,
            &["--ro-bind", &bind, "--landlock-exclude", "/data"],
            &["cat", "/data/canary"],
        );
        expect_code(&o, 0, &format!("{who:?}: run without Landlock"));
        assert_eq!(stdout(&o), secret, "{who:?}");
        let dt = &rep["layers"]["landlock"]["detail"];
        assert_eq!(dt["status"], "not_enforced", "{who:?}: {dt}");
        assert_eq!(dt["abi"], 0, "{who:?}: {dt}");
        assert!(
            dt["why"].as_str().unwrap_or("").contains("ENOSYS"),
            "{who:?}: {dt}"
        );
        assert!(
            dt["missing"]
                .as_array()
                .map(|m| m.iter().any(|x| x == "fs:read_file"))
                .unwrap_or(false),
            "{who:?}: {dt}"
        );
    }
}
