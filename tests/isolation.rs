//! What a hostile payload cannot do inside the default jail: read or write
//! the host's files, see its processes, reach its network, IPC or fds, or
//! act as host root. Every test runs as root and as uid 65534, asserts the
//! effect (on the host where there is one) and has a positive control, so
//! it cannot pass because the payload failed for some other reason.

mod common;

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{expect_code, stderr, stdout, Scratch, Who};

/// A random token that cannot appear in any output by chance.
fn token() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .expect("read a random uuid")
        .trim()
        .replace('-', "")
}

/// `/bin/sh -c SCRIPT` in a jail with extra flags.
fn sh_with(who: Who, flags: &[&str], script: &str) -> Output {
    common::run(who, flags, &["/bin/sh", "-c", script])
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A host file outside every bind, removed when dropped.
struct HostFile(PathBuf);

impl HostFile {
    fn new(path: PathBuf, content: &str, mode: u32) -> HostFile {
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        HostFile(path)
    }
}

impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn uniq(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("stockade-{tag}-{}-{n}", std::process::id())
}

// ---------------------------------------------------------------- reading

#[test]
fn payload_cannot_read_canary_in_host_tmp() {
    for who in common::users("payload_cannot_read_canary_in_host_tmp") {
        let secret = token();
        let visible = token();
        // World-readable on the host: only the jail can make it unreadable.
        let canary = HostFile::new(PathBuf::from("/tmp").join(uniq("canary")), &secret, 0o644);
        let scratch = Scratch::new("iso-read");
        std::fs::write(scratch.join("bound"), &visible).unwrap();
        let bind = format!("{}:/bound", s(&scratch.join("bound")));
        let o = sh_with(
            who,
            &["--ro-bind", &bind],
            &format!(
                "cat {c}; echo canary-rc=$?; ls /tmp; cat /bound",
                c = s(&canary.0)
            ),
        );
        expect_code(&o, 0, &format!("{who:?}: read canary in host /tmp"));
        let out = stdout(&o);
        assert!(!out.contains(&secret), "{who:?}: canary leaked: {out}");
        assert!(out.contains("canary-rc=1"), "{who:?}: {out}");
        assert!(
            stderr(&o).contains(&format!("{}: No such file or directory", s(&canary.0))),
            "{who:?}: expected ENOENT for the canary: {}",
            stderr(&o)
        );
        // Control: a file that is bound is readable.
        assert!(
            out.contains(&visible),
            "{who:?}: bound file not readable: {out}"
        );
        // The canary is still there on the host (the test did not break itself).
        assert_eq!(std::fs::read_to_string(&canary.0).unwrap(), secret);
    }
}

#[test]
fn payload_cannot_read_host_root_home() {
    if !common::is_root() {
        common::skip(
            "payload_cannot_read_host_root_home",
            "not root: cannot place a canary in /root",
        );
        return;
    }
    for who in common::users("payload_cannot_read_host_root_home") {
        let secret = token();
        let canary = HostFile::new(PathBuf::from("/root").join(uniq("canary")), &secret, 0o644);
        let o = sh_with(
            who,
            &[],
            &format!(
                "cat {c}; echo canary-rc=$?; ls /root; echo ls-rc=$?; cat /etc/passwd",
                c = s(&canary.0)
            ),
        );
        expect_code(&o, 0, &format!("{who:?}: read /root canary"));
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(!out.contains(&secret), "{who:?}: canary leaked: {out}");
        assert!(out.contains("canary-rc=1"), "{who:?}: {out}");
        assert!(out.contains("ls-rc=2"), "{who:?}: {out}");
        // ENOENT, not EACCES: /root does not exist in the jail at all (uid
        // 65534 would get EACCES on the host).
        assert!(
            err.contains(&format!("{}: No such file or directory", s(&canary.0))),
            "{who:?}: {err}"
        );
        assert!(
            err.contains("'/root': No such file or directory"),
            "{who:?}: {err}"
        );
        // Control: the jail's own /etc/passwd is readable.
        assert!(out.contains("sandbox:x:1000:1000:"), "{who:?}: {out}");
    }
}

#[test]
fn payload_cannot_read_etc_shadow_or_home() {
    assert!(
        Path::new("/etc/shadow").exists(),
        "host has no /etc/shadow: test meaningless"
    );
    let host_home = Path::new("/home").is_dir();
    for who in common::users("payload_cannot_read_etc_shadow_or_home") {
        let o = sh_with(
            who,
            &[],
            "cat /etc/shadow; echo shadow-rc=$?; ls /home; echo home-rc=$?; \
             ls /etc/ld.so.cache; cat /etc/hostname",
        );
        expect_code(&o, 0, &format!("{who:?}: read /etc/shadow"));
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(out.contains("shadow-rc=1"), "{who:?}: {out}");
        assert!(!out.contains("root:"), "{who:?}: shadow content? {out}");
        assert!(
            err.contains("/etc/shadow: No such file or directory"),
            "{who:?}: {err}"
        );
        assert!(out.contains("home-rc=2"), "{who:?}: {out}");
        if host_home {
            assert!(
                err.contains("'/home': No such file or directory"),
                "{who:?}: {err}"
            );
        }
        // Control: the /etc files the jail does bind are there.
        assert!(out.contains("/etc/ld.so.cache\n"), "{who:?}: {out}");
        assert!(out.contains("stockade\n"), "{who:?}: {out}");
    }
}

/// Small read-only file binds are copied into the jail's root (cheaper than
/// a mount); the copy belongs to the jail user, so a file the jail could not
/// read through a bind must not become readable, and a copy must be as
/// unwritable as a bind.
#[test]
fn read_only_file_binds_keep_the_host_permissions() {
    for who in common::users("read_only_file_binds_keep_the_host_permissions") {
        let secret = token();
        let public = token();
        let scratch = Scratch::new("iso-perm");
        let sec = scratch.join("secret");
        let publ = scratch.join("public");
        std::fs::write(&sec, &secret).unwrap();
        std::fs::set_permissions(&sec, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&publ, &public).unwrap();
        std::fs::set_permissions(&publ, std::fs::Permissions::from_mode(0o644)).unwrap();
        let b1 = format!("{}:/etc/secret", s(&sec));
        let b2 = format!("{}:/etc/public", s(&publ));
        let o = sh_with(
            who,
            &["--ro-bind", &b1, "--ro-bind", &b2],
            "cat /etc/secret; echo secret-rc=$?; cat /etc/public; echo; \
             echo x >> /etc/public; echo append-rc=$?; chmod 666 /etc/public; echo chmod-rc=$?; \
             rm -f /etc/public; echo rm-rc=$?; cat /etc/public",
        );
        expect_code(&o, 0, &format!("{who:?}: read-only file binds"));
        let out = stdout(&o);
        assert!(!out.contains(&secret), "{who:?}: 0600 file leaked: {out}");
        assert!(out.contains("secret-rc=1"), "{who:?}: {out}");
        assert_eq!(
            out.matches(&public).count(),
            2,
            "{who:?}: public file: {out}"
        );
        for rc in ["append-rc=0", "chmod-rc=0", "rm-rc=0"] {
            assert!(!out.contains(rc), "{who:?}: {rc}: {out}");
        }
        assert_eq!(std::fs::read_to_string(&publ).unwrap(), public);
    }
}

// ---------------------------------------------------------------- writing

#[test]
fn payload_cannot_write_usr_etc_or_host_tmp() {
    for who in common::users("payload_cannot_write_usr_etc_or_host_tmp") {
        for extra in [&[][..], &["--uid", "0"][..]] {
            let name = uniq("w");
            let scratch = Scratch::new("iso-write").world_writable();
            // A host /tmp file that anyone could overwrite on the host.
            let victim = HostFile::new(PathBuf::from("/tmp").join(uniq("victim")), "orig\n", 0o666);
            let newtmp = PathBuf::from("/tmp").join(uniq("new"));
            let script = format!(
                "id -u; \
                 touch /usr/{name}; touch /usr/bin/{name}; touch /etc/{name}; touch /{name}; \
                 echo pwned > /etc/passwd; \
                 touch {scr}/f; \
                 echo pwned > {victim} && echo victim-written-in-jail; \
                 echo new > {newtmp} && cat {newtmp}",
                scr = s(scratch.path()),
                victim = s(&victim.0),
                newtmp = s(&newtmp),
            );
            let o = sh_with(who, extra, &script);
            let what = format!("{who:?} {extra:?}: write");
            expect_code(&o, 0, &what);
            let (out, err) = (stdout(&o), stderr(&o));
            let want_uid = if extra.is_empty() { "1000\n" } else { "0\n" };
            assert!(out.starts_with(want_uid), "{what}: {out}");
            for p in [
                format!("/usr/{name}"),
                format!("/usr/bin/{name}"),
                format!("/etc/{name}"),
                format!("/{name}"),
            ] {
                assert!(
                    err.contains(&format!("'{p}': Read-only file system")),
                    "{what}: {p} not EROFS: {err}"
                );
                assert!(!Path::new(&p).exists(), "{what}: {p} created on the host");
            }
            assert!(
                err.contains("/etc/passwd: Read-only file system"),
                "{what}: {err}"
            );
            assert!(
                err.contains(&format!(
                    "'{}/f': No such file or directory",
                    s(scratch.path())
                )),
                "{what}: {err}"
            );
            // The host is unchanged.
            assert!(!scratch.join("f").exists(), "{what}: scratch written");
            assert_eq!(
                std::fs::read_to_string(&victim.0).unwrap(),
                "orig\n",
                "{what}"
            );
            assert!(
                !newtmp.exists(),
                "{what}: {} created on the host",
                s(&newtmp)
            );
            // Control: the jail's own /tmp is writable (it is a private tmpfs).
            assert!(out.contains("victim-written-in-jail"), "{what}: {out}");
            assert!(out.contains("new\n"), "{what}: {out}");
        }
    }
}

// ---------------------------------------------------------------- the root

/// The jail's root as the host's layout predicts it: names, and for the
/// /bin-like entries `link TARGET` or `dir`.
fn expected_root() -> (BTreeSet<String>, Vec<String>) {
    let mut names: BTreeSet<String> = ["dev", "etc", "proc", "tmp", "usr", "work"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut kinds = Vec::new();
    for d in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
        let p = PathBuf::from("/").join(d);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                names.insert(d.into());
                let t = std::fs::read_link(&p).unwrap();
                kinds.push(format!("{d} link {}", t.display()));
            }
            Ok(m) if m.is_dir() => {
                names.insert(d.into());
                kinds.push(format!("{d} dir"));
            }
            _ => {}
        }
    }
    (names, kinds)
}

#[test]
fn root_listing_is_minimal() {
    let (names, kinds) = expected_root();
    for who in common::users("root_listing_is_minimal") {
        let o = sh_with(
            who,
            &[],
            "ls -A /; echo ---; for d in bin sbin lib lib64 lib32 libx32; do \
             if [ -L /$d ]; then echo \"$d link $(readlink /$d)\"; \
             elif [ -d /$d ]; then echo \"$d dir\"; fi; done",
        );
        expect_code(&o, 0, &format!("{who:?}: ls /"));
        let out = stdout(&o);
        let (list, types) = out.split_once("---\n").expect("separator");
        let got: BTreeSet<String> = list.lines().map(|s| s.to_string()).collect();
        assert_eq!(got, names, "{who:?}: / in the jail; stderr: {}", stderr(&o));
        let got_kinds: Vec<String> = types.lines().map(|s| s.to_string()).collect();
        assert_eq!(got_kinds, kinds, "{who:?}: /bin-like entries");
    }
}

// ---------------------------------------------------------------- pids

fn numeric(lines: &str) -> BTreeSet<u32> {
    lines
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn payload_sees_only_its_own_pids() {
    for who in common::users("payload_sees_only_its_own_pids") {
        // The payload itself is ls: only init and it exist.
        let o = common::run(who, &[], &["/bin/ls", "/proc"]);
        expect_code(&o, 0, &format!("{who:?}: ls /proc"));
        let out = stdout(&o);
        assert!(out.contains("self\n"), "{who:?}: not a proc listing: {out}");
        assert_eq!(numeric(&out), BTreeSet::from([1, 2]), "{who:?}: {out}");

        // pid 1 is stockade's init, the payload is pid 2, and its children
        // are visible (and nothing else).
        let o = sh_with(
            who,
            &[],
            "echo pid=$$; grep '^Name:' /proc/1/status; tr '\\0' ' ' < /proc/1/cmdline; echo; \
             sleep 30 & c=$!; echo child=$c; ls /proc; kill $c",
        );
        expect_code(&o, 0, &format!("{who:?}: pid 1 and 2"));
        let out = stdout(&o);
        assert!(out.starts_with("pid=2\n"), "{who:?}: {out}");
        assert!(out.contains("Name:\tstockade\n"), "{who:?}: {out}");
        let cmdline = out.lines().nth(2).unwrap_or("");
        assert!(
            cmdline.contains("stockade"),
            "{who:?}: /proc/1/cmdline {cmdline}"
        );
        let child: u32 = out
            .lines()
            .find_map(|l| l.strip_prefix("child="))
            .and_then(|c| c.parse().ok())
            .expect("child pid");
        let pids = numeric(out.split_once(&format!("child={child}\n")).unwrap().1);
        assert!(
            pids.contains(&child),
            "{who:?}: child {child} not seen: {pids:?}"
        );
        // Only 1, 2, the sleep and the ls itself (allocated after the sleep).
        let others: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| ![1, 2, child].contains(p))
            .collect();
        assert!(
            others.len() == 1 && others[0] > child,
            "{who:?}: unexpected pids {pids:?}"
        );
    }
}

// ---------------------------------------------------------------- network

const PY_CONNECT_TCP: &str = "
import socket, errno, sys
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)
    print('connected')
except OSError as e:
    print('error', errno.errorcode.get(e.errno, e.errno))
";

/// Connections the listener received (non-blocking).
fn accepted_tcp(l: &std::net::TcpListener) -> usize {
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn payload_cannot_connect_to_host_tcp_port() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    for who in common::users("payload_cannot_connect_to_host_tcp_port") {
        // Default jail (Landlock may also deny TCP: EACCES) and the network
        // namespace alone (--no-landlock: must be refused by the empty netns).
        for (flags, allowed) in [
            (&[][..], &["ECONNREFUSED", "ENETUNREACH", "EACCES"][..]),
            (&["--no-landlock"][..], &["ECONNREFUSED", "ENETUNREACH"][..]),
        ] {
            let o = common::run(
                who,
                flags,
                &["/usr/bin/python3", "-c", PY_CONNECT_TCP, &port],
            );
            let what = format!("{who:?} {flags:?}: connect 127.0.0.1:{port}");
            expect_code(&o, 0, &what);
            let out = stdout(&o);
            let errname = out.trim().strip_prefix("error ").unwrap_or("");
            assert!(
                allowed.contains(&errname),
                "{what}: expected one of {allowed:?}, got {out:?} / {}",
                stderr(&o)
            );
            assert_eq!(
                accepted_tcp(&l),
                0,
                "{what}: the host listener got a connection"
            );
        }
        // Control: with the host's network the same payload connects.
        let o = common::run(
            who,
            &["--network", "host"],
            &["/usr/bin/python3", "-c", PY_CONNECT_TCP, &port],
        );
        expect_code(&o, 0, &format!("{who:?}: --network host control"));
        assert_eq!(stdout(&o).trim(), "connected", "{who:?}: {}", stderr(&o));
        assert_eq!(
            accepted_tcp(&l),
            1,
            "{who:?}: control connection not received"
        );
    }
}

const PY_CONNECT_ABSTRACT: &str = "
import socket, errno, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect('\\0' + sys.argv[1])
    print('connected')
except OSError as e:
    print('error', errno.errorcode.get(e.errno, e.errno))
";

#[test]
fn payload_cannot_connect_to_host_abstract_unix_socket() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = uniq("abstract");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    let accepted = |l: &UnixListener| -> usize {
        let mut n = 0;
        loop {
            match l.accept() {
                Ok(_) => n += 1,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
                Err(e) => panic!("accept: {e}"),
            }
        }
    };
    for who in common::users("payload_cannot_connect_to_host_abstract_unix_socket") {
        for flags in [&[][..], &["--no-landlock"][..]] {
            let o = common::run(
                who,
                flags,
                &["/usr/bin/python3", "-c", PY_CONNECT_ABSTRACT, &name],
            );
            let what = format!("{who:?} {flags:?}: connect @{name}");
            expect_code(&o, 0, &what);
            // The abstract namespace belongs to the netns: the name is unknown.
            assert_eq!(
                stdout(&o).trim(),
                "error ECONNREFUSED",
                "{what}: {}",
                stderr(&o)
            );
            assert_eq!(
                accepted(&l),
                0,
                "{what}: the host listener got a connection"
            );
        }
        let o = common::run(
            who,
            &["--network", "host", "--no-landlock"],
            &["/usr/bin/python3", "-c", PY_CONNECT_ABSTRACT, &name],
        );
        expect_code(&o, 0, &format!("{who:?}: --network host control"));
        assert_eq!(stdout(&o).trim(), "connected", "{who:?}: {}", stderr(&o));
        assert_eq!(accepted(&l), 1, "{who:?}: control connection not received");
    }
}

// ---------------------------------------------------------------- SysV IPC

/// A SysV shm segment on the host, removed when dropped.
struct HostShm {
    id: String,
    key: String,
}

impl HostShm {
    fn new() -> Option<HostShm> {
        let o = Command::new("ipcmk").args(["-M", "4096"]).output().ok()?;
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let id = out.trim().strip_prefix("Shared memory id: ")?.to_string();
        let list = Command::new("ipcs").arg("-m").output().ok()?;
        let key = String::from_utf8_lossy(&list.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[1] == id).then(|| f[0].to_string())
            })?;
        Some(HostShm { id, key })
    }
}

impl Drop for HostShm {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-m", &self.id]).status();
    }
}

const PY_SHMGET: &str = "
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
key = int(sys.argv[1], 16)
r = libc.shmget(key, 0, 0)
print('get', r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok')
r = libc.shmget(key, 4096, 0o1600)
print('create', 'ok' if r >= 0 else os.strerror(ctypes.get_errno()))
";

#[test]
fn payload_cannot_see_host_sysv_shm() {
    let inside_tools = Path::new("/usr/bin/ipcs").exists();
    let Some(shm) = HostShm::new() else {
        common::skip(
            "payload_cannot_see_host_sysv_shm",
            "ipcmk/ipcs (util-linux) not usable on the host",
        );
        return;
    };
    assert_ne!(shm.key, "0x00000000", "ipcmk gave a private key");
    for who in common::users("payload_cannot_see_host_sysv_shm") {
        let o = common::run(who, &[], &["/usr/bin/python3", "-c", PY_SHMGET, &shm.key]);
        let what = format!("{who:?}: shmget({})", shm.key);
        expect_code(&o, 0, &what);
        let out = stdout(&o);
        // ENOENT: no such key in the jail's IPC namespace (not EPERM from a filter).
        assert!(
            out.contains("get -1 No such file or directory\n"),
            "{what}: {out}"
        );
        // Control: SysV shm works in the jail, in its own namespace.
        assert!(out.contains("create ok\n"), "{what}: {out}");
        if inside_tools {
            let o = common::run(who, &[], &["/usr/bin/ipcs", "-m"]);
            expect_code(&o, 0, &format!("{who:?}: ipcs -m"));
            let out = stdout(&o);
            assert!(out.contains("Shared Memory Segments"), "{who:?}: {out}");
            assert!(
                !out.contains(&shm.key),
                "{who:?}: host segment visible: {out}"
            );
        }
    }
    // Control: the segment is visible on the host, and was not replaced.
    let host = Command::new("ipcs").arg("-m").output().unwrap();
    assert!(String::from_utf8_lossy(&host.stdout).contains(&shm.key));
}

// ---------------------------------------------------------------- fds, env

/// Start stockade through bash with `exec 7<FILE` done first, so fd 7 is
/// open without close-on-exec in stockade.
fn run_with_fd7(who: Who, file: &Path, flags: &[&str], cmd: &[&str]) -> Output {
    let mut c = Command::new("/bin/bash");
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .current_dir("/")
        .stdin(Stdio::null())
        .arg("-c")
        .arg("exec 7<\"$1\"; shift; exec \"$@\"")
        .arg("bash")
        .arg(file)
        .arg(common::binary())
        .arg("run")
        .args(flags)
        .arg("--")
        .args(cmd);
    if who == Who::Nobody && common::is_root() {
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    c.output().expect("start bash")
}

#[test]
fn payload_does_not_inherit_leaked_fd() {
    for who in common::users("payload_does_not_inherit_leaked_fd") {
        let secret = token();
        let scratch = Scratch::new("iso-fd");
        let f = scratch.join("leaked");
        std::fs::write(&f, &secret).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let script = "ls /proc/self/fd; echo ---; cat <&7; echo cat-rc=$?";
        let o = run_with_fd7(who, &f, &[], &["/bin/sh", "-c", script]);
        expect_code(&o, 0, &format!("{who:?}: leaked fd 7"));
        let out = stdout(&o);
        let (fds, rest) = out.split_once("---\n").unwrap();
        // 0 1 2, and 3: the directory ls itself is reading.
        assert_eq!(numeric(fds), BTreeSet::from([0, 1, 2, 3]), "{who:?}: {out}");
        assert!(!rest.contains(&secret), "{who:?}: fd 7 readable: {out}");
        assert!(rest.contains("cat-rc=2"), "{who:?}: {out}");
        assert!(
            stderr(&o).contains("7: Bad file descriptor"),
            "{who:?}: {}",
            stderr(&o)
        );

        // Control: --keep-fd 7 passes it through.
        let o = run_with_fd7(who, &f, &["--keep-fd", "7"], &["/bin/sh", "-c", script]);
        expect_code(&o, 0, &format!("{who:?}: --keep-fd 7"));
        let out = stdout(&o);
        let (fds, rest) = out.split_once("---\n").unwrap();
        assert_eq!(
            numeric(fds),
            BTreeSet::from([0, 1, 2, 3, 7]),
            "{who:?}: {out}"
        );
        assert!(
            rest.contains(&secret),
            "{who:?}: kept fd not readable: {out}"
        );
    }
}

#[test]
fn payload_does_not_inherit_env() {
    for who in common::users("payload_does_not_inherit_env") {
        let secret = token();
        let run = |flags: &[&str]| {
            let mut c = common::stockade(who);
            c.env("SECRET_TOKEN", &secret)
                .arg("run")
                .args(flags)
                .args(["--", "/usr/bin/env"]);
            c.output().unwrap()
        };
        let o = run(&[]);
        expect_code(&o, 0, &format!("{who:?}: env"));
        let out = stdout(&o);
        assert!(!out.contains(&secret), "{who:?}: env leaked: {out}");
        assert!(!out.contains("SECRET_TOKEN"), "{who:?}: {out}");
        assert!(out.contains("HOME=/work\n"), "{who:?}: {out}");

        let o = run(&["--keep-env", "SECRET_TOKEN", "--setenv", "FOO=bar=baz"]);
        expect_code(&o, 0, &format!("{who:?}: --keep-env"));
        let out = stdout(&o);
        assert!(
            out.contains(&format!("SECRET_TOKEN={secret}\n")),
            "{who:?}: {out}"
        );
        assert!(out.contains("FOO=bar=baz\n"), "{who:?}: {out}");
    }
}

// ---------------------------------------------------------------- ids

/// The host uid a jail started by `who` maps to: 65534 when started by root
/// (the default --host-uid) or by 65534, else the caller's own uid.
fn host_id(who: Who) -> u32 {
    if who == Who::Root || common::is_root() {
        common::NOBODY
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

#[test]
fn jail_user_maps_to_unprivileged_host_id() {
    for who in common::users("jail_user_maps_to_unprivileged_host_id") {
        let caller = host_id(who);
        for (flags, inner) in [(&[][..], 1000), (&["--uid", "0", "--gid", "0"][..], 0)] {
            let scratch = Scratch::new("iso-ids").world_writable();
            let bind = format!("{}:/out", s(scratch.path()));
            let mut all = vec!["--bind", bind.as_str()];
            all.extend_from_slice(flags);
            let o = sh_with(
                who,
                &all,
                "id -u; cat /proc/self/uid_map /proc/self/gid_map; echo hi > /out/f; mkdir /out/d",
            );
            let what = format!("{who:?} {flags:?}: id map");
            expect_code(&o, 0, &what);
            let lines: Vec<Vec<String>> = stdout(&o)
                .lines()
                .map(|l| l.split_whitespace().map(String::from).collect())
                .collect();
            assert_eq!(lines[0], [inner.to_string()], "{what}");
            let want = [inner.to_string(), caller.to_string(), "1".into()];
            assert_eq!(lines[1], want, "{what}: uid_map");
            assert_eq!(lines[2], want, "{what}: gid_map");
            for p in [scratch.join("f"), scratch.join("d")] {
                let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{what}: {p:?}: {e}"));
                assert_eq!(
                    (m.uid(), m.gid()),
                    (caller, caller),
                    "{what}: owner of {p:?}"
                );
                assert_ne!(m.uid(), 0, "{what}: host root owns {p:?}");
            }
            assert_eq!(std::fs::read_to_string(scratch.join("f")).unwrap(), "hi\n");
        }
    }
}

// ---------------------------------------------------------------- uts, tmp, workdir

#[test]
fn hostname_is_stockade_and_settable() {
    let host_before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for who in common::users("hostname_is_stockade_and_settable") {
        let o = common::run(who, &[], &["/bin/sh", "-c", "hostname; uname -n"]);
        expect_code(&o, 0, &format!("{who:?}: hostname"));
        assert_eq!(stdout(&o), "stockade\nstockade\n", "{who:?}");
        let o = common::run(
            who,
            &["--hostname", "jail-test-7"],
            &[
                "/bin/sh",
                "-c",
                "hostname; cat /etc/hostname; hostname evil 2>&1; echo rc=$?",
            ],
        );
        expect_code(&o, 0, &format!("{who:?}: --hostname"));
        let out = stdout(&o);
        assert!(
            out.starts_with("jail-test-7\njail-test-7\n"),
            "{who:?}: {out}"
        );
        // Capabilities are dropped: the payload cannot rename its own jail.
        assert!(
            !out.contains("rc=0"),
            "{who:?}: payload could set the hostname: {out}"
        );
    }
    let host_after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(host_before, host_after, "the host's hostname changed");
}

#[test]
fn tmp_is_a_fresh_capped_tmpfs() {
    for who in common::users("tmp_is_a_fresh_capped_tmpfs") {
        for (flags, size) in [
            (&[][..], "size=131072k"),
            (&["--tmp-size", "8m"][..], "size=8192k"),
        ] {
            let o = sh_with(
                who,
                flags,
                "ls -A /tmp | wc -l; grep ' /tmp ' /proc/mounts; echo x > /tmp/f && cat /tmp/f",
            );
            let what = format!("{who:?} {flags:?}: /tmp");
            expect_code(&o, 0, &what);
            let out = stdout(&o);
            let mut l = out.lines();
            assert_eq!(l.next(), Some("0"), "{what}: /tmp not empty: {out}");
            let m = l.next().unwrap_or("");
            assert!(m.starts_with("tmpfs /tmp tmpfs rw,"), "{what}: {m}");
            assert!(
                m.split([',', ' ']).any(|o| o == size),
                "{what}: want {size}: {m}"
            );
            assert_eq!(l.next(), Some("x"), "{what}: /tmp not writable: {out}");
        }
    }
}

#[test]
fn cwd_and_home_are_a_writable_work() {
    for who in common::users("cwd_and_home_are_a_writable_work") {
        let o = sh_with(who, &[], "pwd; echo $HOME; echo x > f && cat /work/f");
        expect_code(&o, 0, &format!("{who:?}: /work"));
        assert_eq!(stdout(&o), "/work\n/work\nx\n", "{who:?}: {}", stderr(&o));
    }
}

#[test]
fn workdir_binds_host_dir_read_write() {
    for who in common::users("workdir_binds_host_dir_read_write") {
        let scratch = Scratch::new("iso-workdir").world_writable();
        std::fs::write(scratch.join("in"), "from-host\n").unwrap();
        let wd = format!("{}:/w", s(scratch.path()));
        let o = sh_with(
            who,
            &["--workdir", &wd],
            "pwd; echo $HOME; cat in; echo from-jail > out",
        );
        expect_code(&o, 0, &format!("{who:?}: --workdir"));
        assert_eq!(stdout(&o), "/w\n/w\nfrom-host\n", "{who:?}: {}", stderr(&o));
        let out = scratch.join("out");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "from-jail\n",
            "{who:?}"
        );
        assert_eq!(
            std::fs::metadata(&out).unwrap().uid(),
            host_id(who),
            "{who:?}"
        );
    }
}

// ---------------------------------------------------------------- binds

#[test]
fn ro_binds_are_readable_and_read_only_even_for_inner_root() {
    for who in common::users("ro_binds_are_readable_and_read_only_even_for_inner_root") {
        let scratch = Scratch::new("iso-robind").world_writable();
        let file_tok = token();
        let dir_tok = token();
        std::fs::write(scratch.join("file"), &file_tok).unwrap();
        std::fs::create_dir(scratch.join("dir")).unwrap();
        std::fs::set_permissions(scratch.join("dir"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        std::fs::write(scratch.join("dir/inner"), &dir_tok).unwrap();
        for p in ["file", "dir/inner"] {
            std::fs::set_permissions(scratch.join(p), std::fs::Permissions::from_mode(0o666))
                .unwrap();
        }
        let fb = format!("{}:/cfg/file.txt", s(&scratch.join("file")));
        let db = format!("{}:/data", s(&scratch.join("dir")));
        for extra in [&[][..], &["--uid", "0"][..]] {
            let mut flags = vec!["--ro-bind", fb.as_str(), "--ro-bind", db.as_str()];
            flags.extend_from_slice(extra);
            let o = sh_with(
                who,
                &flags,
                "id -u; cat /cfg/file.txt; echo; cat /data/inner; echo; \
                 echo pwned > /cfg/file.txt; echo pwned > /data/inner; touch /data/new; rm /data/inner",
            );
            let what = format!("{who:?} {extra:?}: ro-bind");
            expect_code(&o, 1, &what);
            let (out, err) = (stdout(&o), stderr(&o));
            let want_uid = if extra.is_empty() { "1000" } else { "0" };
            assert_eq!(
                out,
                format!("{want_uid}\n{file_tok}\n{dir_tok}\n"),
                "{what}: {err}"
            );
            for e in [
                "/cfg/file.txt: Read-only file system",
                "/data/inner: Read-only file system",
                "'/data/new': Read-only file system",
                "'/data/inner': Read-only file system",
            ] {
                assert!(err.contains(e), "{what}: missing {e:?} in {err}");
            }
            assert_eq!(
                std::fs::read_to_string(scratch.join("file")).unwrap(),
                file_tok
            );
            assert_eq!(
                std::fs::read_to_string(scratch.join("dir/inner")).unwrap(),
                dir_tok
            );
            assert!(!scratch.join("dir/new").exists(), "{what}");
        }
    }
}

#[test]
fn tmpfs_flag_caps_its_size() {
    for who in common::users("tmpfs_flag_caps_its_size") {
        let o = sh_with(
            who,
            &["--tmpfs", "/x:1m"],
            "grep ' /x ' /proc/mounts; \
             dd if=/dev/zero of=/x/small bs=1k count=512 2>/dev/null && echo small-ok; rm /x/small; \
             dd if=/dev/zero of=/x/big bs=1k count=2048; echo dd-rc=$?",
        );
        let what = format!("{who:?}: --tmpfs /x:1m");
        expect_code(&o, 0, &what);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(out.contains("size=1024k"), "{what}: {out}");
        assert!(out.contains("small-ok\n"), "{what}: {out}");
        assert!(out.contains("dd-rc=1\n"), "{what}: {out}");
        assert!(err.contains("No space left on device"), "{what}: {err}");
    }
}

#[test]
fn symlink_flag_creates_a_link() {
    for who in common::users("symlink_flag_creates_a_link") {
        let o = sh_with(
            who,
            &["--symlink", "/usr/bin:/ubin"],
            "readlink /ubin; /ubin/echo via-link",
        );
        expect_code(&o, 0, &format!("{who:?}: --symlink"));
        assert_eq!(
            stdout(&o),
            "/usr/bin\nvia-link\n",
            "{who:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn ro_bind_of_a_symlink_binds_its_target() {
    for who in common::users("ro_bind_of_a_symlink_binds_its_target") {
        let scratch = Scratch::new("iso-symsrc");
        let tok = token();
        std::fs::create_dir(scratch.join("real")).unwrap();
        std::fs::set_permissions(scratch.join("real"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(scratch.join("real/f"), &tok).unwrap();
        std::os::unix::fs::symlink("real", scratch.join("link")).unwrap();
        let b = format!("{}:/data", s(&scratch.join("link")));
        let o = sh_with(
            who,
            &["--ro-bind", &b],
            "if [ -L /data ]; then echo link; elif [ -d /data ]; then echo dir; fi; cat /data/f",
        );
        expect_code(&o, 0, &format!("{who:?}: ro-bind of a symlink"));
        assert_eq!(stdout(&o), format!("dir\n{tok}"), "{who:?}: {}", stderr(&o));
    }
}

#[test]
fn bind_destination_through_symlink_stays_in_jail() {
    for who in common::users("bind_destination_through_symlink_stays_in_jail") {
        let scratch = Scratch::new("iso-symdst");
        let tok = token();
        std::fs::create_dir(scratch.join("real")).unwrap();
        std::fs::set_permissions(scratch.join("real"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(scratch.join("real/f"), &tok).unwrap();
        let name = uniq("y");
        let host_etc_y = PathBuf::from("/etc").join(&name);
        assert!(!host_etc_y.exists());
        let src = format!("{}:/x/{name}", s(&scratch.join("real")));
        // /x -> /etc: the bind lands on the jail's /etc, not the host's.
        let o = sh_with(
            who,
            &["--symlink", "/etc:/x", "--ro-bind", &src],
            &format!("readlink /x; cat /etc/{name}/f"),
        );
        expect_code(&o, 0, &format!("{who:?}: bind through /x -> /etc"));
        assert_eq!(
            stdout(&o),
            format!("/etc\n{tok}"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(
            !host_etc_y.exists(),
            "{who:?}: {host_etc_y:?} created on the host"
        );

        // /x -> a host directory the jail does not contain: the bind fails
        // (it never resolves on the host) and that host directory stays empty.
        let outside = Scratch::new("iso-symdst-outside").world_writable();
        let link = format!("{}:/x", s(outside.path()));
        let src = format!("{}:/x/y", s(&scratch.join("real")));
        let o = common::run(
            who,
            &["--symlink", &link, "--ro-bind", &src],
            &["/bin/cat", "/x/y/f"],
        );
        expect_code(&o, 125, &format!("{who:?}: bind through /x -> host dir"));
        assert!(!stdout(&o).contains(&tok), "{who:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{who:?}: {err}");
        assert!(err.starts_with("stockade: bind: /x/y: "), "{who:?}: {err}");
        let left: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert!(left.is_empty(), "{who:?}: host dir written: {left:?}");
    }
}

// ---------------------------------------------------------------- /proc

#[test]
fn proc_sys_is_read_only() {
    for who in common::users("proc_sys_is_read_only") {
        // As root in the jail, the jail's own net sysctls are owned by it: only
        // the read-only mount stops the write.
        let o = sh_with(
            who,
            &["--uid", "0"],
            "f=/proc/sys/net/ipv4/ip_forward; stat -c '%u %a' $f; before=$(cat $f); \
             echo 1 > $f; echo rc=$?; echo stockade-evil > /proc/sys/kernel/hostname; \
             [ \"$(cat $f)\" = \"$before\" ] && echo unchanged; hostname; \
             grep ' /proc/sys ' /proc/mounts",
        );
        let what = format!("{who:?}: write /proc/sys");
        expect_code(&o, 0, &what);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(out.starts_with("0 644\n"), "{what}: {out}");
        assert!(out.contains("rc=2\n"), "{what}: {out}");
        assert!(out.contains("unchanged\n"), "{what}: {out}");
        assert!(
            out.contains("stockade\n"),
            "{what}: hostname changed: {out}"
        );
        assert!(out.contains("proc /proc/sys proc ro,"), "{what}: {out}");
        assert!(
            err.contains("/proc/sys/net/ipv4/ip_forward: Read-only file system"),
            "{what}: {err}"
        );
        assert!(
            err.contains("/proc/sys/kernel/hostname: Read-only file system"),
            "{what}: {err}"
        );
    }
}

#[test]
fn dangerous_proc_files_are_masked() {
    let files = [
        "kcore",
        "sysrq-trigger",
        "kmsg",
        "kallsyms",
        "timer_list",
        "keys",
    ];
    for who in common::users("dangerous_proc_files_are_masked") {
        let mut script = String::new();
        for f in files {
            script.push_str(&format!(
                "p=/proc/{f}; if [ -e $p ]; then echo \"{f} $(stat -c '%F %t:%T' $p) $(head -c 64 $p 2>/dev/null | wc -c)\"; \
                 else echo \"{f} absent\"; fi; "
            ));
        }
        script.push_str(
            "[ -e /proc/sysrq-trigger ] && { echo b > /proc/sysrq-trigger; echo sysrq-rc=$?; }; ",
        );
        script.push_str("if [ -d /proc/acpi ]; then echo acpi $(ls -A /proc/acpi | wc -l); else echo acpi absent; fi; echo alive");
        let o = sh_with(who, &["--uid", "0"], &script);
        let what = format!("{who:?}: masked /proc files");
        expect_code(&o, 0, &what);
        let out = stdout(&o);
        for f in files {
            let line = out
                .lines()
                .find(|l| l.split(' ').next() == Some(f))
                .unwrap_or_else(|| panic!("{what}: no line for {f}: {out}"));
            if Path::new("/proc").join(f).exists() {
                // Covered by /dev/null (char 1:3): reads give nothing.
                assert_eq!(line, format!("{f} character special file 1:3 0"), "{what}");
            } else {
                assert_eq!(line, format!("{f} absent"), "{what}");
                eprintln!("note: {what}: host has no /proc/{f}; checked only that it is absent");
            }
        }
        if Path::new("/proc/sysrq-trigger").exists() {
            assert!(out.contains("sysrq-rc=0\n"), "{what}: {out}");
        }
        if Path::new("/proc/acpi").is_dir() {
            assert!(out.contains("acpi 0\n"), "{what}: {out}");
        } else {
            assert!(
                out.contains("acpi absent\n") || out.contains("acpi 0\n"),
                "{what}: {out}"
            );
        }
        // The machine is still up and the payload ran to the end.
        assert!(out.ends_with("alive\n"), "{what}: {out}");
    }
}

#[test]
fn init_command_line_does_not_reveal_host_paths() {
    for who in common::users("init_command_line_does_not_reveal_host_paths") {
        let s = Scratch::new("cmdline-src");
        let bind = format!("{}:/data", s.path().display());
        let o = common::run(
            who,
            &["--ro-bind", &bind],
            &["/bin/sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo"],
        );
        common::expect_code(&o, 0, "read /proc/1/cmdline");
        let out = common::stdout(&o);
        assert!(out.contains("stockade-init"), "{who:?}: {out}");
        let bin = common::binary().display().to_string();
        assert!(
            !out.contains(&bin),
            "{who:?}: host binary path visible: {out}"
        );
        assert!(
            !out.contains(&s.path().display().to_string()),
            "{who:?}: bind source visible: {out}"
        );
    }
}
