//! Where user namespaces are refused (simulated by
//! tests/payloads/chk_nouserns.c), the jail still reaches no host unix
//! socket outside its binds, and each jail started by root has its own
//! host uid, so its `--pids-limit` is its own. The same where, as in a
//! plain `docker run`, pidfd_getfd is refused and root has no
//! CAP_SYS_PTRACE (tests/payloads/chk_noptrace.c): the connects the jail
//! may make still work.

mod common;

use common::{stderr, stdout, Scratch, Who};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

/// `chk_nouserns stockade run FLAGS -- CMD` as `who`.
fn refused_cmd(who: Who, flags: &[&str], cmd: &[&str]) -> Command {
    wrapped_cmd("chk_nouserns", who, flags, cmd)
}

/// `WRAPPER stockade run FLAGS -- CMD` as `who`, not yet started.
fn wrapped_cmd(wrapper: &str, who: Who, flags: &[&str], cmd: &[&str]) -> Command {
    common::wrapped(&[wrapper], who, flags, cmd)
}

/// The same, run to its end.
fn run_refused(who: Who, flags: &[&str], cmd: &[&str]) -> std::process::Output {
    refused_cmd(who, flags, cmd)
        .output()
        .expect("start wrapper")
}

fn report(o: &std::process::Output) -> serde_json::Value {
    common::last_json(o)
}

/// The uid a line `uid=N` in `out` names.
fn uid_in(out: &str) -> u32 {
    out.lines()
        .find_map(|l| l.strip_prefix("uid="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid= line in {out:?}"))
}

const DEFAULT_START: u32 = 2_147_418_112;
const DEFAULT_COUNT: u32 = 65_536;

#[test]
fn each_root_started_fallback_jail_has_its_own_uid_and_pids_budget() {
    for who in common::users("each_root_started_fallback_jail_has_its_own_uid_and_pids_budget") {
        if who == Who::Nobody {
            // Without root there is no other uid to give: the jail runs as
            // the caller, and the outcome says the count is shared (a limit
            // high enough for whatever else runs as 65534 here, within the
            // hard limit we pass on).
            let (_, hard) =
                nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC).unwrap();
            let lim = hard.min(1_000_000).to_string();
            let o = run_refused(
                who,
                &["--pids-limit", &lim, "--report", "-"],
                &["/bin/sh", "-c", "echo uid=$(id -u)"],
            );
            let r = report(&o);
            assert_eq!(r["status"], "exited", "{r}\n{}", stderr(&o));
            let out = r["stdout"]["data"].as_str().unwrap_or("");
            assert_eq!(uid_in(out), common::NOBODY, "{out}");
            let pids = &r["limits"]["pids"];
            assert_eq!(pids["enforced_by"], "rlimit_nproc", "{r}");
            assert!(
                pids["why"]
                    .as_str()
                    .unwrap_or("")
                    .contains("shared with the caller's other processes"),
                "{pids}"
            );
            continue;
        }
        // Jail A: sixty sleeping processes, until we stop it.
        let mut a = refused_cmd(
            who,
            &["--timeout", "120"],
            &[
                "/bin/sh",
                "-c",
                "for i in $(seq 60); do sleep 100 & done; echo uid=$(id -u); echo started; wait",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start jail A");
        let mut lines = BufReader::new(a.stdout.take().unwrap()).lines();
        let mut a_out = String::new();
        for l in lines.by_ref() {
            let l = l.unwrap();
            a_out.push_str(&l);
            a_out.push('\n');
            if l == "started" {
                break;
            }
        }
        let a_uid = uid_in(&a_out);
        // Jail B, with A's sixty running: its own fifty.
        let o = run_refused(
            who,
            &["--pids-limit", "50", "--report", "-"],
            &[
                "/bin/sh",
                "-c",
                "for i in $(seq 20); do sleep 0.1 & done; wait; echo forked-all; echo uid=$(id -u)",
            ],
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(a.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = a.wait();
        let r = report(&o);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        assert_eq!(r["status"], "exited", "{r}\n{}", stderr(&o));
        assert!(out.contains("forked-all"), "{out}\n{}", stderr(&o));
        assert!(!stderr(&o).contains("Cannot fork"), "{}", stderr(&o));
        let b_uid = uid_in(&out);
        assert_ne!(a_uid, b_uid, "two jails share a uid");
        for u in [a_uid, b_uid] {
            assert!(
                (DEFAULT_START..DEFAULT_START + DEFAULT_COUNT).contains(&u),
                "uid {u} outside the default range"
            );
            // The lease is let go with the run.
            let lock = std::path::PathBuf::from(format!("/run/stockade/uids/{u}"));
            assert!(!lock.exists(), "{} left behind", lock.display());
        }
        // The budget is this jail's own: a cgroup of its own where the
        // host gives one (v2 or, as root on a hybrid host, v1), else the
        // RLIMIT_NPROC of its own leased uid.
        let pids = &r["limits"]["pids"];
        let by = pids["enforced_by"].as_str().unwrap_or("");
        let why = pids["why"].as_str().unwrap_or("");
        if by == "rlimit_nproc" {
            assert!(
                why.contains(&format!("host uid {b_uid}, this jail's own")),
                "{why}"
            );
        } else {
            assert!(by.starts_with("cgroup"), "{pids}");
        }
    }
}

#[test]
fn a_leased_uid_is_never_given_to_a_second_jail() {
    let test = "a_leased_uid_is_never_given_to_a_second_jail";
    if !common::is_root() {
        common::skip(test, "only root gives fallback jails their own uid");
        return;
    }
    // A one-id range, held by jail A while jail B asks for it.
    let start = 2_000_000_000 + std::process::id() % 100_000;
    let range = format!("{start}:1");
    let mut a = refused_cmd(
        Who::Root,
        &["--uid-range", &range, "--timeout", "60"],
        &["/bin/sh", "-c", "echo uid=$(id -u); exec sleep 100"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("start jail A");
    let mut first = String::new();
    BufReader::new(a.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(uid_in(&first), start);
    let o = run_refused(Who::Root, &["--uid-range", &range], &["/bin/echo", "ran"]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = a.wait();
    common::expect_code(&o, 125, "second jail on a leased uid");
    assert!(!stdout(&o).contains("ran"));
    assert!(stderr(&o).contains("--uid-range"), "{}", stderr(&o));
    // Released: the next jail gets it.
    let o = run_refused(
        Who::Root,
        &["--uid-range", &range],
        &["/bin/sh", "-c", "echo uid=$(id -u)"],
    );
    common::expect_code(&o, 0, "after the release");
    assert_eq!(uid_in(&stdout(&o)), start);
}

#[test]
fn bad_uid_range_is_one_line_naming_the_flag() {
    for who in common::users("bad_uid_range_is_one_line_naming_the_flag") {
        for bad in ["0:10", "5:0", "4294967000:1000", "x:1", "100"] {
            let o = common::run(who, &["--uid-range", bad], &["/bin/echo", "ran"]);
            let err = stderr(&o);
            assert_ne!(o.status.code(), Some(0), "{bad}");
            assert!(!stdout(&o).contains("ran"), "{bad}");
            assert_eq!(err.lines().count(), 1, "{bad}: {err}");
            assert!(err.contains("--uid-range"), "{bad}: {err}");
            assert!(!err.contains("panicked"), "{bad}: {err}");
        }
    }
}

/// A root-owned listener on a 0777 socket (stream or datagram), bound in
/// `dir`, non-blocking so that "nobody came" is an answer.
struct Listener {
    stream: std::os::unix::net::UnixListener,
    dgram: std::os::unix::net::UnixDatagram,
}

impl Listener {
    fn new(dir: &std::path::Path) -> Listener {
        let stream = std::os::unix::net::UnixListener::bind(dir.join("s")).unwrap();
        let dgram = std::os::unix::net::UnixDatagram::bind(dir.join("d")).unwrap();
        for n in ["s", "d"] {
            std::fs::set_permissions(dir.join(n), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        stream.set_nonblocking(true).unwrap();
        dgram.set_nonblocking(true).unwrap();
        Listener { stream, dgram }
    }

    /// What reached the listener (after the jail is gone).
    fn received(&self) -> (bool, bool) {
        let conn = self.stream.accept().is_ok();
        let mut b = [0u8; 16];
        let dg = self.dgram.recv(&mut b).is_ok();
        (conn, dg)
    }
}

/// The hostile program: reach the host listener at DIR/s and DIR/d by every
/// route, then use unix sockets inside the jail's own places. Prints
/// `name result` lines (`err N` for an errno).
const PROBE: &str = r#"
import os, socket, sys
host, bound = sys.argv[1], sys.argv[2]
def t(name, f):
    try: print(name, f(), flush=True)
    except OSError as e: print(name, "err", e.errno, flush=True)
def conn(path):
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.send(b"leak"); return "connected"
t("host-abs", lambda: conn(host + "/s"))
def rel():
    os.chdir(host); return conn("s")
t("host-rel", rel)
os.chdir(os.environ["TMPDIR"])
def link():
    os.symlink(host + "/s", "l"); return conn("l")
t("host-link", link)
def dotdot():
    return conn(os.environ["TMPDIR"] + "/../../../../../.." + host + "/s")
t("host-dotdot", dotdot)
def opath():
    fd = os.open(host + "/s", os.O_PATH); return conn("/proc/self/fd/%d" % fd)
t("host-opath", opath)
def dgram():
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); d.sendto(b"leak", host + "/d"); return "sent"
t("host-dgram", dgram)
def pair_dgram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"leak", host + "/d"); return "sent"
t("host-pair-dgram", pair_dgram)
def inside(path):
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(1)
    c = socket.socket(socket.AF_UNIX); c.connect(path); c.send(b"in")
    a, _ = srv.accept(); return a.recv(2).decode()
t("own-rundir", lambda: inside(os.environ["TMPDIR"] + "/own.sock"))
t("own-relative", lambda: inside("rel.sock") if os.chdir(os.environ["TMPDIR"]) is None else None)
t("own-bind", lambda: inside(bound + "/b.sock"))
def pair():
    a, b = socket.socketpair(); a.send(b"pp"); return b.recv(2).decode()
t("socketpair", pair)
def abstract():
    name = "\0stockade-fbids-%d" % os.getpid()
    return inside(name)
t("abstract", abstract)
def nonblocking(path, inheritable):
    # The way asyncio connects: a non-blocking socket, then wait until it
    # is writable and read SO_ERROR. The socket keeps its fd number (the
    # send below), O_NONBLOCK and close-on-exec.
    import fcntl, select
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(1)
    c = socket.socket(socket.AF_UNIX); c.setblocking(False); c.set_inheritable(inheritable)
    try: c.connect(path)
    except BlockingIOError:
        select.select([], [c], [], 10)
        e = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if e: raise OSError(e, "SO_ERROR")
    nb = int(fcntl.fcntl(c, fcntl.F_GETFL) & os.O_NONBLOCK != 0)
    ce = int(fcntl.fcntl(c, fcntl.F_GETFD) & fcntl.FD_CLOEXEC != 0)
    c.send(b"nb")
    a, _ = srv.accept(); return "%s nb=%d cloexec=%d" % (a.recv(2).decode(), nb, ce)
t("own-nonblocking", lambda: nonblocking(os.environ["TMPDIR"] + "/nb.sock", False))
t("own-inheritable", lambda: nonblocking(os.environ["TMPDIR"] + "/inh.sock", True))
def aio():
    import asyncio
    p = os.environ["TMPDIR"] + "/aio.sock"
    async def main():
        async def echo(r, w):
            w.write(await r.read(2)); await w.drain(); w.close()
        srv = await asyncio.start_unix_server(echo, p)
        r, w = await asyncio.open_unix_connection(p)
        w.write(b"ai"); await w.drain()
        got = await r.read(2); w.close(); srv.close()
        return got.decode()
    return asyncio.run(main())
t("asyncio", aio)
def twice():
    srv = socket.socket(socket.AF_UNIX); srv.bind(os.environ["TMPDIR"] + "/2.sock"); srv.listen(2)
    c = socket.socket(socket.AF_UNIX); c.connect(srv.getsockname()); c.connect(srv.getsockname())
    return "connected twice"
t("connect-twice", twice)
t("abstract-absent", lambda: socket.socket(socket.AF_UNIX).connect("\0stockade-fbids-none-%d" % os.getpid()) or "connected")
"#;

fn expect_line(out: &str, line: &str, who: Who) {
    assert!(
        out.lines().any(|l| l == line),
        "{who:?}: want {line:?} in:\n{out}"
    );
}

fn expect_refused(out: &str, name: &str, who: Who) {
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{who:?}: no {name} line in:\n{out}"));
    assert!(
        l.starts_with(&format!("{name} err ")),
        "{who:?}: {l}\n{out}"
    );
}

/// The probe under `wrapper` as `who`: nothing reaches the host listener,
/// the jail's own sockets work. Returns the outcome's
/// `layers.seccomp.detail.unix_sockets`.
fn probe_unix(wrapper: &str, who: Who) -> serde_json::Value {
    let host = Scratch::new("fbids-host");
    let l = Listener::new(host.path());
    let bound = Scratch::new("fbids-bound").world_writable();
    let o = wrapped_cmd(
        wrapper,
        who,
        &[
            "--report",
            "-",
            "--bind",
            &bound.path().display().to_string(),
        ],
        &[
            "python3",
            "-c",
            PROBE,
            &host.path().display().to_string(),
            &bound.path().display().to_string(),
        ],
    )
    .output()
    .expect("start wrapper");
    let r = report(&o);
    assert_eq!(
        r["status"],
        "exited",
        "{who:?} {wrapper}: {r}\n{}",
        stderr(&o)
    );
    assert_eq!(r["exit_code"], 0, "{who:?} {wrapper}: {r}");
    let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
    for n in [
        "host-abs",
        "host-rel",
        "host-link",
        "host-dotdot",
        "host-opath",
        "host-dgram",
        "host-pair-dgram",
    ] {
        expect_refused(&out, n, who);
    }
    assert_eq!(
        l.received(),
        (false, false),
        "{who:?} {wrapper}: the host listener was reached:\n{out}"
    );
    for n in ["own-rundir", "own-relative", "own-bind"] {
        expect_line(&out, &format!("{n} in"), who);
    }
    expect_line(&out, "socketpair pp", who);
    expect_line(&out, "abstract in", who);
    expect_line(&out, "own-nonblocking nb nb=1 cloexec=1", who);
    expect_line(&out, "own-inheritable nb nb=1 cloexec=0", who);
    expect_line(&out, "asyncio ai", who);
    // What connect(2) answers itself: already connected, nobody listening.
    expect_line(&out, &format!("connect-twice err {}", libc::EISCONN), who);
    expect_line(
        &out,
        &format!("abstract-absent err {}", libc::ECONNREFUSED),
        who,
    );
    r["layers"]["seccomp"]["detail"]["unix_sockets"].clone()
}

#[test]
fn fallback_reaches_no_host_unix_socket_outside_its_binds() {
    for who in common::users("fallback_reaches_no_host_unix_socket_outside_its_binds") {
        let u = probe_unix("chk_nouserns", who);
        // pidfd_getfd works here: the caller's own socket is connected.
        assert_eq!(u["socket"], "caller's", "{who:?}: {u}");
        assert_eq!(u["connects_new_socket"], 0, "{who:?}: {u}");
        assert!(
            u["connects_caller_socket"].as_u64() > Some(0),
            "{who:?}: {u}"
        );
    }
}

/// The wrapper's conditions, outside stockade: pidfd_getfd and
/// process_vm_readv refused (EPERM), and as root no CAP_SYS_PTRACE.
fn noptrace_control(who: Who) {
    const CHECK: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
p = os.pidfd_open(os.getpid())
r = libc.syscall(438, p, 0, 0)
print("pidfd_getfd", r, ctypes.get_errno())
r = libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0)
print("process_vm_readv", r, ctypes.get_errno())
eff = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
print("sys_ptrace", (int(eff, 16) >> 19) & 1)
"#;
    let wrapper = common::c_payload("chk_noptrace");
    let mut c = Command::new(&wrapper);
    c.args(["/usr/bin/env", "python3", "-c", CHECK])
        .current_dir("/");
    if who == Who::Nobody && common::is_root() {
        use std::os::unix::process::CommandExt;
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    let o = c.output().expect("start chk_noptrace");
    let out = stdout(&o);
    common::expect_code(&o, 0, "chk_noptrace control");
    expect_line(&out, &format!("pidfd_getfd -1 {}", libc::EPERM), who);
    expect_line(&out, &format!("process_vm_readv -1 {}", libc::EPERM), who);
    expect_line(&out, "sys_ptrace 0", who);
}

/// As in a plain `docker run`: pidfd_getfd refused and root without
/// CAP_SYS_PTRACE. The supervisor reads the caller's memory with the
/// jail's ids and connects a new socket in the caller's place; the host's
/// sockets stay out of reach.
#[test]
fn fallback_without_pidfd_getfd_connects_a_new_socket_in_its_place() {
    for who in common::users("fallback_without_pidfd_getfd_connects_a_new_socket_in_its_place") {
        noptrace_control(who);
        let u = probe_unix("chk_noptrace", who);
        assert_eq!(u["socket"], "new", "{who:?}: {u}");
        assert!(
            u["why_new"].as_str().unwrap_or("").contains("pidfd_getfd"),
            "{who:?}: {u}"
        );
        assert_eq!(u["connects_caller_socket"], 0, "{who:?}: {u}");
        assert!(u["connects_new_socket"].as_u64() > Some(0), "{who:?}: {u}");
    }
}

/// A host listener inside a bound directory is the jail's to reach, in the
/// fallback as in the namespaced jail, and its peer is the jail's uid.
#[test]
fn a_host_socket_in_a_bound_directory_is_reachable_in_both_modes() {
    const CLIENT: &str = r#"
import socket, sys
import os
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1] + "/s"); s.send(b"hello"); print("connected")
print("uid=%d" % os.getuid())
"#;
    for who in common::users("a_host_socket_in_a_bound_directory_is_reachable_in_both_modes") {
        for wrapper in [Some("chk_nouserns"), Some("chk_noptrace"), None] {
            let dir = Scratch::new("fbids-shared");
            let l = Listener::new(dir.path());
            let d = dir.path().display().to_string();
            let cmd = ["python3", "-c", CLIENT, d.as_str()];
            let o = match wrapper {
                Some(w) => wrapped_cmd(w, who, &["--ro-bind", &d], &cmd)
                    .output()
                    .expect("start wrapper"),
                None => common::run(who, &["--ro-bind", &d], &cmd),
            };
            common::expect_code(&o, 0, &format!("{who:?} {wrapper:?}"));
            assert!(stdout(&o).contains("connected"), "{}", stderr(&o));
            l.stream.set_nonblocking(false).unwrap();
            let (mut c, _) = l.stream.accept().unwrap();
            let mut got = String::new();
            std::io::Read::read_to_string(&mut c, &mut got).unwrap();
            assert_eq!(got, "hello", "{who:?} {wrapper:?}");
            // In the fallback (no user namespace: the same uids) the peer
            // is the jail's uid, not root's when root started it (it
            // leases one of its own).
            if wrapper.is_some() {
                let peer =
                    nix::sys::socket::getsockopt(&c, nix::sys::socket::sockopt::PeerCredentials)
                        .unwrap();
                assert_eq!(peer.uid(), uid_in(&stdout(&o)), "{who:?} {wrapper:?}");
                if who == Who::Root {
                    assert_ne!(peer.uid(), 0, "{who:?} {wrapper:?}");
                }
            }
        }
    }
}

/// The namespaced jail: a host socket outside the binds is not even there.
#[test]
fn namespaced_jail_sees_no_unbound_host_socket() {
    const CLIENT: &str = r#"
import socket, sys
try:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1] + "/s"); print("connected")
except OSError as e: print("err", e.errno)
"#;
    for who in common::users("namespaced_jail_sees_no_unbound_host_socket") {
        let dir = Scratch::new("fbids-ns");
        let l = Listener::new(dir.path());
        let d = dir.path().display().to_string();
        let o = common::run(who, &[], &["python3", "-c", CLIENT, &d]);
        common::expect_code(&o, 0, "namespaced probe");
        assert!(stdout(&o).contains("err 2"), "{who:?}: {}", stdout(&o));
        assert_eq!(l.received(), (false, false));
    }
}

/// The same with `--network host`: a TCP client, blocking and
/// non-blocking (connect answers EINPROGRESS, the new socket finishes
/// connecting in the caller's place), and a UDP one, each to a listener of
/// the jail's own on 127.0.0.1.
#[test]
fn fallback_without_pidfd_getfd_connects_tcp_and_udp_with_network_host() {
    const TCP: &str = r#"
import os, select, socket
def t(name, f):
    try: print(name, f(), flush=True)
    except OSError as e: print(name, "err", e.errno, flush=True)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4)
def tcp(nonblocking):
    c = socket.socket()
    if nonblocking:
        c.setblocking(False)
        try: c.connect(srv.getsockname()); how = "at once"
        except BlockingIOError as e:
            how = "errno %d" % e.errno
            select.select([], [c], [], 10)
            e = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e: raise OSError(e, "SO_ERROR")
        c.setblocking(True)
    else:
        c.connect(srv.getsockname()); how = "blocking"
    c.send(b"tc"); a, _ = srv.accept(); return "%s %s" % (a.recv(2).decode(), how)
t("tcp", lambda: tcp(False))
t("tcp-nonblocking", lambda: tcp(True))
def udp():
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(r.getsockname()); s.send(b"ud")
    return r.recv(2).decode()
t("udp", udp)
"#;
    for who in common::users("fallback_without_pidfd_getfd_connects_tcp_and_udp_with_network_host")
    {
        let o = wrapped_cmd(
            "chk_noptrace",
            who,
            &["--report", "-", "--network", "host"],
            &["python3", "-c", TCP],
        )
        .output()
        .expect("start wrapper");
        let r = report(&o);
        assert_eq!(r["status"], "exited", "{who:?}: {r}\n{}", stderr(&o));
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        expect_line(&out, "tcp tc blocking", who);
        expect_line(
            &out,
            &format!("tcp-nonblocking tc errno {}", libc::EINPROGRESS),
            who,
        );
        expect_line(&out, "udp ud", who);
        let u = &r["layers"]["seccomp"]["detail"]["unix_sockets"];
        assert_eq!(u["socket"], "new", "{who:?}: {u}");
    }
}

/// A payload that makes itself non-dumpable: only a supervisor with
/// CAP_SYS_PTRACE (root here, not under chk_noptrace) can read its memory,
/// so its connects work there and fail with EFAULT elsewhere, as the
/// README says.
#[test]
fn non_dumpable_payload_connects_only_where_the_supervisor_may_ptrace() {
    const NODUMP: &str = r#"
import ctypes, os, socket
assert ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
p = os.environ["TMPDIR"] + "/d.sock"
srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(1)
try: socket.socket(socket.AF_UNIX).connect(p); print("connect ok")
except OSError as e: print("connect err", e.errno)
"#;
    for who in common::users("non_dumpable_payload_connects_only_where_the_supervisor_may_ptrace") {
        for wrapper in ["chk_nouserns", "chk_noptrace"] {
            let o = wrapped_cmd(wrapper, who, &[], &["python3", "-c", NODUMP])
                .output()
                .expect("start wrapper");
            common::expect_code(&o, 0, &format!("{who:?} {wrapper}"));
            let want = if who == Who::Root && wrapper == "chk_nouserns" {
                "connect ok".to_string()
            } else {
                format!("connect err {}", libc::EFAULT)
            };
            expect_line(&stdout(&o), &want, who);
        }
    }
}
