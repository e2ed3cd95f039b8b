//! `--network loopback`: the jail's own network namespace with only `lo`,
//! as `none`, but TCP is not denied by Landlock, so the jail's processes
//! talk to each other on 127.0.0.1; the host's loopback stays out of
//! reach, and where the jail cannot have a network namespace of its own
//! (the fallback) the run is refused, never downgraded.

mod common;

use common::{expect_code, stderr, stdout, Scratch, Who};
use std::os::unix::fs::PermissionsExt;

/// Binds 127.0.0.1:0 (or argv[1]'s address, e.g. ::1), connects to
/// itself from a thread, sends "hello" and prints what the server thread
/// sent back ("HELLO"); or prints "bind " and the errno's name when the
/// bind is refused.
const EXCHANGE: &str = r#"
import errno, socket, sys, threading
addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
try:
    s.bind((addr, 0))
except OSError as e:
    print("bind", errno.errorcode.get(e.errno, e.errno))
    raise SystemExit(0)
s.listen(1)
def read(c, n):
    b = b""
    while len(b) < n:
        got = c.recv(n - len(b))
        if not got:
            break
        b += got
    return b
def serve():
    c, _ = s.accept()
    c.sendall(read(c, 5).upper())
    c.close()
s.settimeout(10)
t = threading.Thread(target=serve, daemon=True)
t.start()
c = socket.create_connection(s.getsockname()[:2], timeout=10)
c.sendall(b"hello")
print(read(c, 5).decode())
t.join()
"#;

/// Connects to 127.0.0.1:PORT (argv[1]); prints "connect ok" or
/// "connect " and the errno's name.
const CONNECT: &str = r#"
import errno, socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    print("connect ok")
except OSError as e:
    print("connect", errno.errorcode.get(e.errno, e.errno))
"#;

/// Skip (and say so) unless the host has Landlock ABI 4 (TCP rules):
/// without it `none` does not deny TCP either, and there is no
/// difference to show.
fn need_tcp_landlock(test: &str) -> bool {
    let abi = common::landlock_abi();
    if abi < 4 {
        common::skip(
            test,
            &format!("host Landlock ABI is {abi}, TCP rules need 4"),
        );
        return false;
    }
    true
}

#[test]
fn loopback_jail_talks_tcp_to_itself_and_none_still_denies_it() {
    let test = "loopback_jail_talks_tcp_to_itself_and_none_still_denies_it";
    if !need_tcp_landlock(test) {
        return;
    }
    for who in common::users(test) {
        let o = common::run(
            who,
            &["--network", "loopback", "--report", "-"],
            &["python3", "-c", EXCHANGE],
        );
        expect_code(&o, 0, &format!("{who:?}: loopback"));
        let r = common::last_valid_json(&o);
        assert_eq!(r["stdout"]["data"], "HELLO\n", "{who:?}: {r}");
        // IPv6's loopback too (::1 is on lo once it is up), and the
        // default refuses it as it refuses IPv4.
        for (mode, want) in [("loopback", "HELLO\n"), ("none", "bind EACCES\n")] {
            let o = common::run(
                who,
                &["--network", mode, "--report", "-"],
                &["python3", "-c", EXCHANGE, "::1"],
            );
            expect_code(&o, 0, &format!("{who:?}: {mode} ::1"));
            let r = common::last_valid_json(&o);
            if r["stdout"]["data"] == "bind EADDRNOTAVAIL\n" {
                common::skip(test, "::1: no IPv6 on lo in a new network namespace here");
                break;
            }
            assert_eq!(r["stdout"]["data"], want, "{who:?}: {mode} ::1: {r}");
        }
        let ll = &r["layers"]["landlock"];
        assert_eq!(ll["detail"]["tcp"], "allowed", "{who:?}: {ll}");
        assert_ne!(ll["detail"]["status"], "not_enforced", "{who:?}: {ll}");
        let net = &r["layers"]["net_namespace"];
        assert_eq!(net["state"], "applied", "{who:?}: {net}");
        assert_eq!(net["detail"]["network"], "loopback", "{who:?}: {net}");
        assert_eq!(net["detail"]["interfaces"], serde_json::json!(["lo"]));

        // The default, none: the same bind is refused by Landlock.
        let o = common::run(who, &["--report", "-"], &["python3", "-c", EXCHANGE]);
        expect_code(&o, 0, &format!("{who:?}: none"));
        let r = common::last_valid_json(&o);
        assert_eq!(r["stdout"]["data"], "bind EACCES\n", "{who:?}: {r}");
        assert_eq!(r["layers"]["landlock"]["detail"]["tcp"], "denied");
        assert_eq!(r["layers"]["net_namespace"]["detail"]["network"], "none");
    }
}

#[test]
fn loopback_jail_cannot_reach_the_hosts_loopback() {
    let test = "loopback_jail_cannot_reach_the_hosts_loopback";
    for who in common::users(test) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("host listener");
        let port = l.local_addr().unwrap().port().to_string();
        // Control: from the host's network the listener is reachable.
        let o = common::run(
            who,
            &["--network", "host"],
            &["python3", "-c", CONNECT, &port],
        );
        expect_code(&o, 0, &format!("{who:?}: host control"));
        assert_eq!(stdout(&o), "connect ok\n", "{who:?}: {}", stderr(&o));
        drop(l.accept().expect("the control's connection"));

        let o = common::run(
            who,
            &["--network", "loopback"],
            &["python3", "-c", CONNECT, &port],
        );
        expect_code(&o, 0, &format!("{who:?}: loopback"));
        assert_eq!(
            stdout(&o),
            "connect ECONNREFUSED\n",
            "{who:?}: {}",
            stderr(&o)
        );
        // Nothing reached the host's listener.
        l.set_nonblocking(true).unwrap();
        let e = l.accept().expect_err("no connection from the jail");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{who:?}: {e}");
    }
}

#[test]
fn loopback_is_refused_where_the_jail_gets_no_network_namespace() {
    for who in common::users("loopback_is_refused_where_the_jail_gets_no_network_namespace") {
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--network", "loopback"],
            &["/bin/echo", "started"],
        )
        .output()
        .expect("start wrapper");
        expect_code(&o, 125, &format!("{who:?}: fallback"));
        assert_eq!(stdout(&o), "", "{who:?}: the payload ran");
        // The fallback's own warning, then the refusal: one line.
        let err = stderr(&o);
        let e: Vec<&str> = err
            .lines()
            .filter(|l| !l.starts_with("stockade: warning:"))
            .collect();
        assert_eq!(e.len(), 1, "{who:?}: not one line: {err}");
        assert!(
            e[0].starts_with("stockade: network: --network loopback: ")
                && e[0].contains("user namespaces are refused"),
            "{who:?}: {err}"
        );

        // Control: the default (none) runs there, TCP held by Landlock
        // and seccomp.
        let o = common::wrapped(&["chk_nouserns"], who, &[], &["/bin/echo", "started"])
            .output()
            .expect("start wrapper");
        expect_code(&o, 0, &format!("{who:?}: fallback none"));
        assert_eq!(stdout(&o), "started\n", "{who:?}");
    }
}

#[test]
fn allow_host_with_loopback_is_a_one_line_error() {
    let who = Who::Nobody;
    let o = common::run(
        who,
        &["--network", "loopback", "--allow-host", "pypi.org"],
        &["/bin/true"],
    );
    expect_code(&o, 125, "--allow-host with loopback");
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("--allow-host") && e.contains("--network loopback"),
        "{e}"
    );
}

fn write(s: &Scratch, name: &str, text: &str) -> String {
    let p = s.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p.display().to_string()
}

#[test]
fn profile_network_loopback_works_and_a_bad_value_names_its_place() {
    let test = "profile_network_loopback_works_and_a_bad_value_names_its_place";
    let s = Scratch::new("netlo");
    let good = write(&s, "lo.toml", "network = \"loopback\"\n");
    let bad = write(&s, "bad.toml", "network = \"lo\"\n");
    let tcp = need_tcp_landlock(test);
    for who in common::users(test) {
        if tcp {
            let o = common::run(who, &["--profile", &good], &["python3", "-c", EXCHANGE]);
            expect_code(&o, 0, &format!("{who:?}: profile"));
            assert_eq!(stdout(&o), "HELLO\n", "{who:?}: {}", stderr(&o));
        }
        let o = common::run(who, &["--profile", &bad], &["/bin/true"]);
        expect_code(&o, 125, &format!("{who:?}: bad profile"));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{who:?}: not one line: {e}");
        let want = format!(
            "stockade: {bad}:1:11: network: \"lo\": expected \"none\" or \"loopback\" or \"host\""
        );
        assert!(e.starts_with(&want), "{who:?}:\n got: {e}\nwant: {want}");
    }
}
