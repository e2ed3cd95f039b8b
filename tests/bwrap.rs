//! `stockade bwrap`: the same command lines under the real bwrap (where it
//! runs here) and under stockade, as root and as uid 65534, with the same
//! stdout, stderr and exit code.
//!
//! Most tests are tables of [`Case`]s, one per theme, each run by
//! [`check`]: a command line under both, then what stockade's run must
//! show besides (its [`Want`]s). A failure names the case and the user.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{expect_code, is_root, stderr, stdout, users, Who, NOBODY};
use Want::*;

/// The reference bwrap: `$STOCKADE_REAL_BWRAP`, else bubblewrap 0.12 as
/// `cargo xtask bwrap-test` builds it from Debian's source, else the
/// host's /usr/bin/bwrap (an older release on some hosts).
fn real_path() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let built = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bwrap-test/meson/bwrap");
        match std::env::var("STOCKADE_REAL_BWRAP") {
            Ok(p) => p,
            Err(_) if Path::new(built).exists() => built.into(),
            Err(_) => "/usr/bin/bwrap".into(),
        }
    })
}

/// The host's /usr/bin/bwrap, taken when 0.12 was not built, is compared
/// with only when it is 0.12 too: an older release words its refusals
/// otherwise (Debian 12's 0.8, which `cargo xtask bench` installs), and
/// each case would fail on them. A path given in `$STOCKADE_REAL_BWRAP`
/// is taken as it is.
fn host_bwrap_is_the_reference() -> bool {
    static IS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IS.get_or_init(|| {
        let path = real_path();
        if path != "/usr/bin/bwrap" {
            return true;
        }
        let version = Command::new(path)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let is = version.starts_with("bubblewrap 0.12");
        if !is {
            common::skip(
                "bwrap",
                &format!("{path} is {version:?}, not bubblewrap 0.12 (cargo xtask bwrap-test builds it): stockade alone"),
            );
        }
        is
    })
}

/// A minimal root from the host's /usr, as bwrap's own examples build it.
const ROOT: &[&str] = &[
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--symlink",
    "usr/lib",
    "/lib",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
];

/// A script that prints the capability sets of /proc/self/status on one
/// line (inheritable, permitted, effective, bounding, ambient).
const CAPS: &str = "grep Cap /proc/self/status | cut -f2 | tr '\\n' ' '";

/// Whether the real bwrap can make a sandbox here as `who` (user
/// namespaces, a proc mount); asked once per user.
fn real_runs(who: Who) -> bool {
    static RUNS: [std::sync::OnceLock<bool>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    *RUNS[who as usize].get_or_init(|| {
        if !Path::new(real_path()).exists() || !host_bwrap_is_the_reference() {
            return false;
        }
        let mut probe = Command::new(real_path());
        common::start_as(&mut probe, who);
        let st = probe.args(ROOT).arg("true").stderr(Stdio::null()).status();
        st.is_ok_and(|s| s.success())
    })
}

/// The real bwrap started as `who` the way `common::stockade` starts
/// stockade (clean environment, cwd /); None when it cannot run here.
fn real(who: Who) -> Option<Command> {
    real_runs(who).then(|| common::host_command(who, real_path()))
}

fn ours(who: Who) -> Command {
    let mut c = common::stockade(who);
    c.arg("bwrap");
    c
}

/// `stockade bwrap`, as the first words of a command line.
fn ours_bin() -> [&'static str; 2] {
    [common::binary().to_str().unwrap(), "bwrap"]
}

fn with_args(mut c: Command, args: &[&str], stdin: Option<&Path>) -> Output {
    c.args(args);
    if let Some(f) = stdin {
        c.stdin(std::fs::File::open(f).unwrap());
    }
    c.output().expect("start")
}

fn root_and(rest: &[&str]) -> Vec<String> {
    ROOT.iter().chain(rest).map(|s| s.to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// What stockade's run of a [`Case`] must show, besides being the same as
/// the real bwrap's.
#[derive(Clone, Copy, Debug)]
enum Want<'a> {
    /// This exit code.
    Code(i32),
    /// This stdout, whole.
    Stdout(&'a str),
    StdoutStarts(&'a str),
    StdoutEnds(&'a str),
    StdoutHas(&'a str),
    StdoutLacks(&'a str),
    /// This stderr, whole.
    Stderr(&'a str),
    StderrHas(&'a str),
    /// Refused as bwrap refuses: exit 1 and the one line `bwrap: {0}`.
    Refused(&'a str),
}

impl Want<'_> {
    /// Panics, naming `what`, unless `o` shows it.
    fn check(&self, o: &Output, what: &str) {
        let (out, err) = (stdout(o), stderr(o));
        let holds = match *self {
            Code(c) => o.status.code() == Some(c),
            Stdout(s) => out == s,
            StdoutStarts(s) => out.starts_with(s),
            StdoutEnds(s) => out.ends_with(s),
            StdoutHas(s) => out.contains(s),
            StdoutLacks(s) => !out.contains(s),
            Stderr(s) => err == s,
            StderrHas(s) => err.contains(s),
            Refused(e) => o.status.code() == Some(1) && err == format!("bwrap: {e}\n"),
        };
        assert!(
            holds,
            "{what}: wanted {self:?}, got {}\n--- stdout\n{out:?}\n--- stderr\n{err:?}",
            o.status
        );
    }
}

/// What a case's command has open besides stdout and stderr.
#[derive(Clone, Debug)]
enum Fds {
    /// Nothing more: stdin from /dev/null.
    Null,
    /// This file on stdin.
    Stdin(PathBuf),
    /// Fds 3 and 4 on these, opened by the shell that starts the command
    /// ([`fds_command`]).
    Two(PathBuf, PathBuf),
}

/// One command line, run under stockade and under the real bwrap, and
/// what stockade's run must show.
struct Case<'a> {
    /// Named when the case fails.
    what: &'a str,
    args: Vec<String>,
    fds: Fds,
    /// A change to both commands before they start (their directory,
    /// their environment).
    with: fn(&mut Command),
    want: Vec<Want<'a>>,
}

impl<'a> Case<'a> {
    /// `words` (split at whitespace) after [`ROOT`].
    fn root(what: &'a str, words: &str, want: &[Want<'a>]) -> Case<'a> {
        let mut case = Case::bare(what, words, want);
        case.args.splice(0..0, ROOT.iter().map(|s| s.to_string()));
        case
    }

    /// `words` (split at whitespace) alone.
    fn bare(what: &'a str, words: &str, want: &[Want<'a>]) -> Case<'a> {
        Case {
            what,
            args: Vec::new(),
            fds: Fds::Null,
            with: |_| {},
            want: want.to_vec(),
        }
        .words(words)
    }

    /// With more `words` (split at whitespace) after its own.
    fn words(mut self, words: &str) -> Case<'a> {
        self.args.extend(words.split_whitespace().map(String::from));
        self
    }

    /// With one more argument, as it is (a script, a word with spaces).
    fn arg(mut self, arg: &str) -> Case<'a> {
        self.args.push(arg.to_string());
        self
    }

    /// With `f` on stdin.
    fn stdin(self, f: impl AsRef<Path>) -> Case<'a> {
        let fds = Fds::Stdin(f.as_ref().to_path_buf());
        Case { fds, ..self }
    }

    /// With fds 3 and 4 on `f3` and `f4`.
    fn fds(self, f3: impl AsRef<Path>, f4: impl AsRef<Path>) -> Case<'a> {
        let fds = Fds::Two(f3.as_ref().to_path_buf(), f4.as_ref().to_path_buf());
        Case { fds, ..self }
    }

    /// With both commands changed by `f` before they start.
    fn with(self, f: fn(&mut Command)) -> Case<'a> {
        Case { with: f, ..self }
    }

    /// Its command line started as `who` by stockade, or by the real bwrap.
    fn start(&self, who: Who, real: bool) -> Output {
        let args = strs(&self.args);
        let mut c = match (&self.fds, real) {
            (Fds::Two(f3, f4), true) => fds_command(who, &[real_path()], &args, f3, f4),
            (Fds::Two(f3, f4), false) => fds_command(who, &ours_bin(), &args, f3, f4),
            (_, true) => common::host_command(who, real_path()),
            (_, false) => ours(who),
        };
        match &self.fds {
            Fds::Null => c.args(&args),
            Fds::Stdin(f) => c.args(&args).stdin(std::fs::File::open(f).unwrap()),
            Fds::Two(..) => &mut c,
        };
        (self.with)(&mut c);
        c.output().expect("start")
    }

    /// Runs it as `who` under stockade and, where it runs here, under the
    /// real bwrap: the same stdout, stderr and exit code. Returns
    /// stockade's run.
    fn same(&self, who: Who) -> Output {
        let o = self.start(who, false);
        if real_runs(who) {
            let r = self.start(who, true);
            let what = format!("{who:?} {}: {:?}", self.what, self.args);
            assert_eq!(
                stdout(&o),
                stdout(&r),
                "stdout: {what}\nours stderr: {}\nreal stderr: {}",
                stderr(&o),
                stderr(&r)
            );
            assert_eq!(stderr(&o), stderr(&r), "stderr: {what}");
            assert_eq!(o.status.code(), r.status.code(), "exit code: {what}");
        } else {
            common::skip("bwrap", "the real bwrap cannot run here: stockade alone");
        }
        o
    }
}

/// Each case as `who`: the same under both ([`Case::same`]), then each of
/// its [`Want`]s of stockade's run, in order.
fn check(who: Who, cases: &[Case]) {
    for case in cases {
        let o = case.same(who);
        let what = format!("{who:?} {}", case.what);
        for want in &case.want {
            want.check(&o, &what);
        }
    }
}

#[test]
fn a_minimal_root_and_the_exit_code() {
    let cases = [
        Case::root(
            "exit 3",
            "-- sh -c",
            &[
                Code(3),
                StdoutStarts("hi\nbin\ndev\nlib\nlib64\nproc\ntmp\nusr\n/\n"),
            ],
        )
        .arg("echo hi; ls /; pwd; id -u; echo $HOME; exit 3"),
        Case::root("killed", "sh -c", &[Code(137)]).arg("kill -9 $$"),
    ];
    for who in users("bwrap_minimal_root") {
        check(who, &cases);
    }
}

#[test]
fn mounts_keep_the_command_line_order() {
    let null = "echo x > /dev/null && echo ok";
    let cases = [
        // A bind over an earlier tmpfs shows the bind...
        Case::root(
            "bind over tmpfs",
            "--tmpfs /x --ro-bind /usr/share /x ls /x/doc",
            &[Code(0)],
        ),
        // ...a tmpfs over an earlier bind hides it.
        Case::root(
            "tmpfs over bind",
            "--ro-bind /usr/share /x --tmpfs /x ls -A /x",
            &[Stdout("")],
        ),
        // A directory and its missing parent.
        Case::root("--dir /d/e", "--dir /d/e sh -c", &[]).arg("ls -d /d/e"),
        // The root itself stays writable, as bwrap's tmpfs root.
        Case::root("a writable root", "--dir /d sh -c", &[Code(0)])
            .arg("touch /d/x && mkdir /y && stat -c '%a %u' / /d"),
        Case::root(
            "--cap-drop, --sync-fd",
            "--cap-drop cap_sys_admin --cap-drop all --sync-fd 1 true",
            &[Code(0)],
        ),
        Case::bare(
            "--ro-bind / /",
            "--ro-bind / / sh -c",
            &[StderrHas("Read-only file system")],
        )
        .arg("ls -d /etc; touch /x"),
        // Devices: only a --dev-bind leaves them usable.
        Case::bare("nodev", "--ro-bind / / sh -c", &[Code(2)]).arg(null),
        Case::bare(
            "--dev-bind /dev",
            "--ro-bind / / --dev-bind /dev /dev sh -c",
            &[Stdout("ok\n")],
        )
        .arg(null),
        // --remount-ro in its place: after the tmpfs, before what follows.
        Case::root(
            "--remount-ro",
            "--remount-ro /tmp --tmpfs /dev/shm sh -c",
            &[Code(1)],
        )
        .arg("touch /dev/shm/a && touch /tmp/x"),
        Case::bare(
            "--remount-ro /",
            "--bind / / --remount-ro / sh -c",
            &[Code(1)],
        )
        .arg("touch /x"),
    ];
    for who in users("bwrap_order") {
        check(who, &cases);
    }
}

#[test]
fn environment_chdir_and_hostname() {
    let cases = [
        Case::root(
            "--clearenv --setenv",
            "--clearenv --setenv A",
            &[Stdout("A=b c\nPWD=/\n")],
        )
        .arg("b c")
        .words("/usr/bin/env"),
        Case::root(
            "--setenv --unsetenv",
            "--setenv B 1 --unsetenv LANG /usr/bin/env",
            &[StdoutHas("B=1\n"), StdoutLacks("LANG")],
        ),
        Case::root(
            "--chdir",
            "--chdir /usr/share sh -c",
            &[Stdout("/usr/share\n/usr/share\n")],
        )
        .arg("pwd; echo $PWD"),
        Case::root(
            "--hostname",
            "--unshare-uts --hostname jailed hostname",
            &[Stdout("jailed\n")],
        ),
        Case::root(
            "--uid --gid",
            "--unshare-user --uid 5 --gid 6 id",
            &[Stdout("uid=5 gid=6 groups=6\n")],
        ),
    ];
    for who in users("bwrap_env") {
        check(who, &cases);
    }
}

/// `--uid`/`--gid` without `--unshare-user`, as bwrap judges them: a
/// caller other than root gets a user namespace anyway (so they apply),
/// root gets one only when asked (so they are refused, but an id equal to
/// its own, which needs none).
#[test]
fn uid_and_gid_without_unshare_user_as_bwrap() {
    let ids = "id -u; id -g";
    for who in users("bwrap_uid_without_unshare_user") {
        let (five, mine) = match who {
            Who::Nobody => (Stdout("5\n6\n"), "65534"),
            Who::Root => (Code(1), "0"),
        };
        let both_mine = format!("{mine}\n{mine}\n");
        let cases = [
            Case::root("--uid 5 --gid 6", "--uid 5 --gid 6 sh -c", &[five]).arg(ids),
            Case::root("--uid 0", "--uid 0 sh -c", &[Code(0)]).arg(ids),
            Case::root(
                "the caller's own ids",
                &format!("--uid {mine} --gid {mine} sh -c"),
                &[Stdout(&both_mine)],
            )
            .arg(ids),
        ];
        check(who, &cases);
    }
}

#[test]
fn unshare_net_leaves_only_lo() {
    let ifaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";
    let cases = [
        Case::root("--unshare-net", "--unshare-net sh -c", &[Stdout("lo\n")]).arg(ifaces),
        Case::root("--unshare-all", "--unshare-all sh -c", &[Stdout("lo\n")]).arg(ifaces),
        // --share-net keeps the host's.
        Case::root("--share-net", "--unshare-all --share-net sh -c", &[]).arg(ifaces),
    ];
    for who in users("bwrap_net") {
        check(who, &cases);
    }
}

#[test]
fn usage_errors_in_bwraps_words() {
    let cases = [
        Case::bare("unknown", "--bogus", &[Refused("Unknown option --bogus")]),
        Case::bare(
            "--bind /",
            "--bind /",
            &[Refused("--bind takes two arguments")],
        ),
        Case::bare(
            "--chdir",
            "--chdir",
            &[Refused("--chdir takes one argument")],
        ),
        Case::bare(
            "--tmpfs",
            "--tmpfs",
            &[Refused("--tmpfs takes an argument")],
        ),
        Case::bare(
            "--size 0",
            "--size 0 --tmpfs /t true",
            &[Refused("--size takes a non-zero number of bytes")],
        ),
        Case::bare("--uid x", "--uid x true", &[Refused("Invalid uid: x")]),
        Case::bare(
            "--cap-drop sys_admin",
            "--cap-drop sys_admin true",
            &[Refused("unknown cap: sys_admin")],
        ),
        Case::bare(
            "--sync-fd x",
            "--sync-fd x true",
            &[Refused("Invalid fd: x")],
        ),
        Case::bare(
            "--hostname alone",
            "--ro-bind / / --hostname h true",
            &[Refused("Specifying --hostname requires --unshare-uts")],
        ),
        Case::bare(
            "missing source",
            "--ro-bind /nonexistent /x true",
            &[Refused(
                "Can't find source path /nonexistent: No such file or directory",
            )],
        ),
        Case::bare(
            "missing --chdir",
            "--ro-bind / / --chdir /nonexistent true",
            &[Refused(
                "Can't chdir to /nonexistent: No such file or directory",
            )],
        ),
        Case::bare(
            "missing command",
            "--ro-bind / / /nonexistent",
            &[Refused("execvp /nonexistent: No such file or directory")],
        ),
    ];
    for who in users("bwrap_errors") {
        check(who, &cases);
        // No command: the usage, on stderr (its option list is our own).
        let o = with_args(ours(who), &["--ro-bind", "/", "/"], None);
        expect_code(&o, 1, "no command");
        assert!(
            stderr(&o).starts_with("usage: stockade bwrap [OPTIONS...] [--] COMMAND [ARGS...]\n")
        );
        let o = with_args(ours(who), &["--help"], None);
        expect_code(&o, 0, "--help");
        assert!(
            stdout(&o).starts_with("usage: stockade bwrap [OPTIONS...] [--] COMMAND [ARGS...]\n")
        );
        assert!(stdout(&o).contains("--ro-bind SRC DEST"));
        let o = with_args(ours(who), &["--version"], None);
        assert_eq!(stdout(&o), "bubblewrap 0.12.0\n");
    }
}

#[test]
fn args_from_an_fd() {
    let s = common::Scratch::new("bwrap-args");
    let f = s.join("args");
    let mut data = Vec::new();
    for w in root_and(&["--setenv", "A", "from file", "not-an-option", "--bogus"]) {
        data.extend_from_slice(w.as_bytes());
        data.push(0);
    }
    std::fs::write(&f, data).unwrap();
    let len = std::fs::metadata(&f).unwrap().len();
    let copied = format!("640 {len}\n{}\n", len + 2);
    let cases = [
        // Options only: what follows a non-option in the file is ignored.
        Case::bare(
            "--args",
            "--args 0 sh -c",
            &[Stdout("from file\n"), Code(0)],
        )
        .arg("echo $A")
        .stdin(&f),
        // --file copies an fd's content into a file of the sandbox.
        Case::root(
            "--file",
            "--perms 0640 --file 0 /tmp/f sh -c",
            &[Stdout(&copied)],
        )
        .arg("stat -c '%a %s' /tmp/f; echo x >> /tmp/f && wc -c < /tmp/f")
        .stdin(&f),
    ];
    for who in users("bwrap_args") {
        check(who, &cases);
    }
}

#[test]
fn argv0_and_die_with_parent() {
    for who in users("bwrap_argv0") {
        let o = with_args(
            ours(who),
            &[
                "--ro-bind",
                "/",
                "/",
                "--argv0",
                "named",
                "sh",
                "-c",
                "echo $0",
            ],
            None,
        );
        expect_code(&o, 0, "--argv0");
        assert_eq!(stdout(&o), "named\n");
        // The parent (sh) dies: the sandbox is killed with it.
        // The parent is killed once the sandboxed command has said it runs
        // (so --die-with-parent is in force by then).
        let script = format!(
            "fifo=$(mktemp -u); mkfifo \"$fifo\"; \
             {} bwrap --ro-bind / / --die-with-parent sh -c 'echo up; exec sleep 600' > \"$fifo\" & \
             pid=$!; read up < \"$fifo\"; rm -f \"$fifo\"; echo $pid; kill -9 $$",
            common::binary().display()
        );
        let mut c = Command::new("/bin/sh");
        c.args(["-c", &script]);
        let o = common::start_as(&mut c, who).output().unwrap();
        let pid: u32 = stdout(&o).trim().parse().unwrap();
        // Polled until it is gone; the bound (well under the sleep) only
        // ends a broken run.
        let gone = (0..1200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "stockade bwrap {pid} outlived its parent");
    }
}

#[test]
fn started_as_bwrap() {
    let s = common::Scratch::new("bwrap-link");
    let link = s.join("bwrap");
    std::os::unix::fs::symlink(common::binary(), &link).unwrap();
    let o = Command::new(&link)
        .args(["--ro-bind", "/", "/", "--clearenv", "/usr/bin/env"])
        .current_dir("/")
        .output()
        .unwrap();
    expect_code(&o, 0, "as bwrap");
    assert_eq!(stdout(&o), "PWD=/\n");
    let o = Command::new(&link).arg("--help").output().unwrap();
    assert!(stdout(&o).starts_with(&format!("usage: {} [OPTIONS...]", link.display())));
}

/// The JSON documents in `text`, one after another.
fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .map(|v| v.expect("JSON"))
        .collect()
}

#[test]
fn info_fd_and_json_status_fd() {
    for who in users("bwrap_info_fd") {
        let run = |c: Command, args: &[&str]| with_args(c, args, None);
        let info = ["--ro-bind", "/", "/", "--info-fd", "1", "true"];
        let status = [
            "--ro-bind",
            "/",
            "/",
            "--json-status-fd",
            "1",
            "sh",
            "-c",
            "exit 4",
        ];
        let o = run(ours(who), &info);
        expect_code(&o, 0, "--info-fd");
        let text = stdout(&o);
        assert!(text.starts_with("{\n    \"child-pid\": "), "{text}");
        let d = documents(&text);
        assert_eq!(d.len(), 1);
        assert!(d[0]["child-pid"].as_u64().is_some_and(|p| p > 1));
        assert!(d[0]["mnt-namespace"].as_u64().is_some());
        let o = run(ours(who), &status);
        expect_code(&o, 4, "--json-status-fd");
        let d = documents(&stdout(&o));
        assert_eq!(d.len(), 2, "{}", stdout(&o));
        assert!(d[0]["child-pid"].as_u64().is_some());
        assert_eq!(d[1], serde_json::json!({"exit-code": 4}));
        assert!(stdout(&o).ends_with("\n{ \"exit-code\": 4 }\n"));
        // What the real bwrap writes, we write too (stockade makes more
        // namespaces, so it may say more).
        if let Some(r) = real(who) {
            let theirs = documents(&stdout(&run(r, &status)));
            for (t, o) in theirs.iter().zip(&d) {
                for k in t.as_object().unwrap().keys() {
                    assert!(o.get(k).is_some(), "{k} missing in {o}");
                }
            }
        }
    }
}

/// A classic BPF program (`struct sock_filter` array) that fails mkdir and
/// mkdirat with EPERM (x86_64 numbers; aarch64 has only mkdirat, 34) and
/// allows everything else.
fn no_mkdir_filter() -> Vec<u8> {
    let (mkdir, mkdirat) = match std::env::consts::ARCH {
        "aarch64" => (34, 34),
        _ => (83, 258),
    };
    let insns: [(u16, u8, u8, u32); 5] = [
        (0x20, 0, 0, 0),           // ld [0] (the syscall number)
        (0x15, 2, 0, mkdir),       // jeq mkdir → deny
        (0x15, 1, 0, mkdirat),     // jeq mkdirat → deny
        (0x06, 0, 0, 0x7fff_0000), // ret ALLOW
        (0x06, 0, 0, 0x0005_0001), // ret ERRNO(EPERM)
    ];
    let mut b = Vec::new();
    for (code, jt, jf, k) in insns {
        b.extend_from_slice(&code.to_ne_bytes());
        b.extend_from_slice(&[jt, jf]);
        b.extend_from_slice(&k.to_ne_bytes());
    }
    b
}

/// `bin [pre…] args…` to start through sh as `who` with fd 3 and 4 open
/// on `f3` and `f4`, as the other tests start bwrap.
fn fds_command(who: Who, bin: &[&str], args: &[&str], f3: &Path, f4: &Path) -> Command {
    let mut c = common::host_command(who, "/bin/sh");
    c.args(["-c", "exec \"$@\" 3<\"$F3\" 4<\"$F4\"", "sh"]);
    c.args(bin).args(args);
    c.env("F3", f3).env("F4", f4);
    c
}

/// [`fds_command`], run.
fn with_fds(who: Who, bin: &[&str], args: &[&str], f3: &Path, f4: &Path) -> Output {
    fds_command(who, bin, args, f3, f4).output().expect("start")
}

#[test]
fn seccomp_programs_from_fds() {
    let s = common::Scratch::new("bwrap-seccomp");
    let (prog, odd) = (s.join("prog"), s.join("odd"));
    std::fs::write(&prog, no_mkdir_filter()).unwrap();
    std::fs::write(&odd, [0u8; 7]).unwrap();
    let script = "mkdir /tmp/x 2>/dev/null; echo $?; ls -d /proc/self/fd/3 2>/dev/null; echo ok";
    let both = "--add-seccomp-fd 3 --add-seccomp-fd 4 sh -c";
    let cases = [
        // --seccomp alone: the payload's mkdir fails, the rest works, and
        // the program's fd is not passed on.
        Case::root("--seccomp", "--seccomp 0 sh -c", &[Stdout("1\nok\n")])
            .arg(script)
            .stdin(&prog),
        // Two stacked programs (the same one twice), and the refusals.
        Case::root("two programs", both, &[Code(0), Stdout("1\nok\n")])
            .arg(script)
            .fds(&prog, &prog),
        Case::root(
            "--seccomp, then --add-seccomp-fd",
            "--seccomp 3 --add-seccomp-fd 4 sh -c",
            &[Code(1), Stdout("")],
        )
        .arg(script)
        .fds(&prog, &prog),
        Case::root(
            "--add-seccomp-fd, then --seccomp",
            "--add-seccomp-fd 3 --seccomp 4 sh -c",
            &[Code(1), Stdout("")],
        )
        .arg(script)
        .fds(&prog, &prog),
        Case::root("a program of 7 bytes", both, &[Code(1), Stdout("")])
            .arg(script)
            .fds(&prog, &odd),
    ];
    for who in users("bwrap_seccomp") {
        check(who, &cases);
    }
}

/// `args` started as `c` with a pipe on stdin: the payload must not have
/// run (nor the run ended) before a byte is written to it.
fn blocked_until_written(mut c: Command, args: &[&str]) -> Output {
    use std::io::Write;
    c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped());
    c.stderr(Stdio::piped());
    let mut child = c.spawn().expect("start");
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "ran before the block fd was written"
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"x").unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn block_fd_holds_the_command_back() {
    let v = root_and(&["--block-fd", "0", "sh", "-c", "echo ran"]);
    let a: Vec<&str> = v.iter().map(String::as_str).collect();
    for who in users("bwrap_block_fd") {
        let o = blocked_until_written(ours(who), &a);
        expect_code(&o, 0, "--block-fd");
        assert_eq!(stdout(&o), "ran\n");
        if let Some(r) = real(who) {
            let r = blocked_until_written(r, &a);
            assert_eq!(stdout(&o), stdout(&r));
            assert_eq!(stderr(&o), stderr(&r));
        }
    }
}

#[test]
fn level_prefix_and_not_a_security_boundary() {
    // Options bwrap 0.8 lacks: stockade's side only.
    for who in users("bwrap_level_prefix") {
        let o = with_args(ours(who), &["--level-prefix", "--bogus"], None);
        expect_code(&o, 1, "--level-prefix");
        assert_eq!(stderr(&o), "<3>bwrap: Unknown option --bogus\n");
        // Only messages after it carry the level, as in bwrap.
        let o = with_args(ours(who), &["--bogus", "--level-prefix"], None);
        assert_eq!(stderr(&o), "bwrap: Unknown option --bogus\n");
        let o = with_args(
            ours(who),
            &["--level-prefix", "--ro-bind", "/", "/", "/nonexistent"],
            None,
        );
        expect_code(&o, 1, "--level-prefix execvp");
        assert_eq!(
            stderr(&o),
            "<3>bwrap: execvp /nonexistent: No such file or directory\n"
        );
        let v = root_and(&["--not-a-security-boundary", "sh", "-c", "echo ok"]);
        let a: Vec<&str> = v.iter().map(String::as_str).collect();
        let o = with_args(ours(who), &a, None);
        expect_code(&o, 0, "--not-a-security-boundary");
        assert_eq!(stdout(&o), "ok\n");
    }
}

#[test]
fn bind_data_and_ro_bind_data() {
    let s = common::Scratch::new("bwrap-data");
    let (a3, a4) = (s.join("a3"), s.join("a4"));
    std::fs::write(&a3, "three\n").unwrap();
    std::fs::write(&a4, "four\n").unwrap();
    let script = "stat -c '%a %s' /etc/x /y; cat /etc/x /y; \
                  (echo a >> /etc/x) 2>/dev/null || echo refused; echo b >> /y; echo $?; cat /y; \
                  grep -E ' /(etc/x|y) ' /proc/self/mountinfo | cut -d' ' -f5,6";
    let data = Case::root(
        "--ro-bind-data, --bind-data",
        "--ro-bind-data 3 /etc/x --perms 0640 --bind-data 4 /y sh -c",
        &[
            Code(0),
            StdoutStarts("600 6\n640 5\nthree\nfour\nrefused\n0\nfour\nb\n"),
        ],
    )
    .arg(script)
    .fds(&a3, &a4);
    for who in users("bwrap_data") {
        check(who, std::slice::from_ref(&data));
    }
}

#[test]
fn perms_before_dir() {
    // Missing parents get the same mode; an existing directory keeps its own.
    let perms = Case::root(
        "--perms --dir",
        "--perms 0777 --dir /d --perms 0700 --dir /e/f --dir /g --perms 0711 --dir /tmp sh -c",
        &[
            Code(0),
            Stdout("777 /d\n700 /e\n700 /e/f\n755 /g\n755 /tmp\n"),
        ],
    )
    .arg("stat -c '%a %n' /d /e /e/f /g /tmp");
    for who in users("bwrap_perms_dir") {
        check(who, std::slice::from_ref(&perms));
    }
}

#[test]
fn chmod_after_the_op_that_made_the_path() {
    let cases = [
        Case::root(
            "--chmod",
            "--dir /g --chmod 0701 /g --chmod 1777 /tmp sh -c",
            &[Code(0), Stdout("701 /g\n1777 /tmp\n")],
        )
        .arg("stat -c '%a %n' /g /tmp"),
        Case::root("--chmod 9", "--chmod 9 /g true", &[Code(1)]),
        Case::root(
            "--chmod of nothing",
            "--chmod 0755 /nonexistent true",
            &[Code(1)],
        ),
        Case::root("--chmod 7777 /usr", "--chmod 7777 /usr true", &[Code(1)]),
    ];
    for who in users("bwrap_chmod") {
        check(who, &cases);
    }
}

#[test]
fn mqueue() {
    let cases = [
        // Under --dev too: bwrap's /dev stays writable for later ops.
        Case::root(
            "--mqueue under --dev",
            "--unshare-ipc --mqueue /dev/mqueue sh -c",
            &[Stdout("1777\n/proc/kcore\n")],
        )
        .arg("stat -c %a /dev/mqueue; readlink /dev/core"),
        Case::root(
            "--mqueue",
            "--unshare-ipc --mqueue /mq sh -c",
            &[Code(0), Stdout("/mq rw,relatime mqueue rw\n1777\n")],
        )
        .arg("grep ' /mq ' /proc/self/mountinfo | cut -d' ' -f5,6,9-; stat -c %a /mq"),
    ];
    for who in users("bwrap_mqueue") {
        check(who, &cases);
    }
}

#[test]
fn bind_fd_and_ro_bind_fd() {
    let s = common::Scratch::new("bwrap-bind-fd").world_writable();
    std::fs::write(s.join("in"), "inside\n").unwrap();
    let d = s.path();
    // sh opens the directory on fd 3 and 4 (a read of a directory opens
    // it all the same).
    let cases = [
        Case::root(
            "--bind-fd",
            "--ro-bind-fd 3 /r --bind-fd 4 /w sh -c",
            &[Code(0), Stdout("inside\ninside\nro\ny\n")],
        )
        .arg(
            "cat /r/in /w/in; (echo x > /r/new) 2>/dev/null || echo ro; \
             echo y > /w/new && cat /w/new; rm /w/new",
        )
        .fds(d, d),
        Case::root(
            "--bind-fd 9",
            "--bind-fd 9 /m true",
            &[Refused(
                "Can't find source path /proc/self/fd/9: No such file or directory",
            )],
        )
        .fds(d, d),
    ];
    for who in users("bwrap_bind_fd") {
        check(who, &cases);
    }
}

#[test]
fn the_callers_fds_pass_through_but_not_those_options_use() {
    let s = common::Scratch::new("bwrap-fds");
    let (a3, a4) = (s.join("a3"), s.join("a4"));
    std::fs::write(&a3, "three\n").unwrap();
    std::fs::write(&a4, "four\n").unwrap();
    // fd 3 is the command's; fd 4 is --file's (bwrap closes it).
    let list = "ls /proc/self/fd | tr '\\n' ' '";
    let script = format!("cat <&3; {{ cat <&4; }} 2>/dev/null || echo no-4; cat /x; {list}");
    for who in users("bwrap_fds") {
        // The same numbers as without a sandbox, whatever else this test
        // process was given by its own caller.
        let direct = with_fds(
            who,
            &["sh"],
            &["-c", &format!("exec 4<&-; {list}")],
            &a3,
            &a4,
        );
        let want = format!("three\nno-4\nfour\n{}", stdout(&direct));
        let case = Case::root(
            "fd passthrough",
            "--file 4 /x sh -c",
            &[Code(0), Stdout(&want)],
        )
        .arg(&script)
        .fds(&a3, &a4);
        check(who, &[case]);
    }
}

#[test]
fn without_chdir_the_callers_directory_else_home_else_root() {
    let cases = [
        // The caller's directory, where the sandbox has it.
        Case::root(
            "the caller's directory",
            "sh -c",
            &[Stdout("/usr/share\n/usr/share\n")],
        )
        .arg("pwd; echo $PWD")
        .with(|c| {
            c.current_dir("/usr/share");
        }),
        // Not inside (no /etc here): $HOME...
        Case::root("$HOME", "sh -c", &[Stdout("/usr/lib\n/usr/lib\n")])
            .arg("pwd; echo $PWD")
            .with(|c| {
                c.current_dir("/etc").env("HOME", "/usr/lib");
            }),
        // ...else /.
        Case::root("/", "sh -c", &[Stdout("/\n/\n")])
            .arg("pwd; echo $PWD")
            .with(|c| {
                c.current_dir("/etc").env("HOME", "/nonexistent");
            }),
        // An explicit --chdir that cannot be entered fails, as bwrap's.
        Case::root(
            "--chdir /etc",
            "--chdir /etc true",
            &[Refused("Can't chdir to /etc: No such file or directory")],
        ),
    ];
    for who in users("bwrap_cwd") {
        check(who, &cases);
    }
}

#[test]
fn what_is_in_the_way_is_refused_in_bwraps_words() {
    let s = common::Scratch::new("bwrap-dest").world_writable();
    let f = s.join("f");
    std::fs::write(&f, "hello\n").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let f = f.to_str().unwrap();
    let cases = [
        Case::root(
            "a second symlink",
            "--symlink /usr /tmp/l --symlink /etc /tmp/l true",
            &[Refused(
                "Can't make symlink at /tmp/l: existing destination is /usr",
            )],
        ),
        Case::root(
            "a symlink on a directory",
            "--dir /tmp/d --symlink /usr /tmp/d true",
            &[Refused(
                "Can't make symlink at /tmp/d: destination exists and is not a symlink",
            )],
        ),
        Case::root(
            "a bind on a symlink",
            "--symlink /usr /tmp/l --ro-bind /usr /tmp/l true",
            &[Refused("Can't mount on symlink destination /tmp/l")],
        ),
        Case::root(
            "a file bind on a dangling symlink",
            &format!("--symlink d /tmp/l --ro-bind {f} /tmp/l true"),
            &[Refused("Can't mount on symlink destination /tmp/l")],
        ),
        Case::root(
            "a file bind on a directory",
            &format!("--dir /tmp/d --ro-bind {f} /tmp/d true"),
            &[Refused("Destination is not a file /tmp/d")],
        ),
        Case::root(
            "a directory bind on a file",
            &format!("--ro-bind {f} /tmp/f --ro-bind /usr /tmp/f true"),
            &[Refused("Destination is not a directory /tmp/f")],
        ),
        Case::root(
            "--chmod of nothing",
            "--chmod 0755 /nonexistent true",
            &[Refused(
                "Can't open /nonexistent: No such file or directory",
            )],
        ),
        // The same symlink again is fine; a file bound onto a device node
        // too; a read-only file bind is a read-only mount (not a copy).
        Case::root(
            "symlink again, file on a device, ro file",
            &format!(
                "--symlink /usr /tmp/l --symlink /usr /tmp/l --dev-bind {f} /dev/null \
                 --ro-bind {f} /tmp/f sh -c"
            ),
            &[Code(0), Stdout("/usr\nhello\nRead-only file system\n1\n")],
        )
        .arg(
            "readlink /tmp/l; cat /dev/null; (echo x >> /tmp/f) 2>&1 | sed 's/.*: //'; \
             grep -c ' /tmp/f ro,' /proc/self/mountinfo",
        ),
    ];
    for who in users("bwrap_dest") {
        check(who, &cases);
    }
}

#[test]
fn lock_file_is_held_while_the_sandbox_runs() {
    let s = common::Scratch::new("bwrap-lock").world_writable();
    let lock = s.join("lock");
    std::fs::write(&lock, "").unwrap();
    std::fs::set_permissions(&lock, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let lock = lock.to_str().unwrap();
    // A write lock from inside conflicts with the sandbox's read lock.
    let try_lock = format!(
        "import fcntl\nf = open('{lock}', 'a')\ntry:\n    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\nexcept OSError as e:\n    print('held', e.errno)"
    );
    let held = format!("held {}\n", libc_eagain());
    let cases = [
        Case::bare(
            "no --lock-file",
            "--bind / / python3 -c",
            &[Stdout("free\n")],
        )
        .arg(&try_lock),
        Case::bare(
            "--lock-file",
            &format!("--bind / / --lock-file {lock} python3 -c"),
            &[Stdout(&held)],
        )
        .arg(&try_lock),
        Case::bare(
            "--lock-file /nonexistent",
            "--bind / / --lock-file /nonexistent true",
            &[Refused(
                "Unable to open lock file /nonexistent: No such file or directory",
            )],
        ),
    ];
    for who in users("bwrap_lock_file") {
        check(who, &cases);
    }
}

/// EAGAIN, which a refused F_SETLK gives.
fn libc_eagain() -> i32 {
    11
}

#[test]
fn repeated_options_warn_and_labels_are_refused_without_selinux() {
    if Path::new("/sys/fs/selinux/enforce").exists() {
        return common::skip("bwrap_labels", "SELinux is enabled here");
    }
    let cases = [
        Case::bare(
            "--chdir twice",
            "--level-prefix --chdir / --chdir / --ro-bind / / true",
            &[
                Code(0),
                Stderr("<4>bwrap: Only the last --chdir option will take effect\n"),
            ],
        ),
        Case::bare(
            "--exec-label",
            "--ro-bind / / --exec-label x true",
            &[Refused("labeling not supported on this system")],
        ),
        Case::bare(
            "--file-label",
            "--ro-bind / / --file-label x true",
            &[Refused("labeling not supported on this system")],
        ),
    ];
    for who in users("bwrap_labels") {
        check(who, &cases);
    }
}

#[test]
fn cap_add_and_cap_drop_in_order_inside_the_user_namespace() {
    let one = "0000000000002000 ".repeat(5);
    let cases = [
        // From none (root's sandbox starts with all under the real bwrap:
        // --cap-drop ALL first makes the start the same).
        Case::root(
            "--cap-add",
            "--unshare-user --cap-drop ALL --cap-add CAP_NET_RAW --cap-add cap_chown \
             --cap-drop CAP_CHOWN sh -c",
            &[Code(0), Stdout(&one)],
        )
        .arg(CAPS),
        // Kept across a change of uid inside too (ambient), and usable.
        Case::root(
            "--cap-add ALL --cap-drop CAP_SYS_ADMIN",
            "--unshare-user --uid 5 --cap-drop ALL --cap-add ALL --cap-drop CAP_SYS_ADMIN sh -c",
            &[Code(0), StdoutEnds("no-mount\nx\n")],
        )
        .arg(&format!(
            "{CAPS}; mount -t tmpfs none /tmp 2>/dev/null || echo no-mount; \
             echo x > /tmp/f; chmod 0 /tmp/f; cat /tmp/f"
        )),
    ];
    for who in users("bwrap_cap_add") {
        check(who, &cases);
    }
}

#[test]
fn as_pid_1_the_command_is_pid_1() {
    let cases = [
        Case::root(
            "--as-pid-1",
            "--unshare-pid --as-pid-1 sh -c",
            &[Code(3), Stdout("1\nsh\n1\n")],
        )
        .arg("echo $$; cat /proc/1/comm; sh -c 'echo $PPID'; exit 3"),
        Case::root(
            "--as-pid-1 alone",
            "--as-pid-1 true",
            &[Refused("Specifying --as-pid-1 requires --unshare-pid")],
        ),
        Case::root(
            "--as-pid-1 --lock-file",
            "--unshare-pid --as-pid-1 --lock-file /usr true",
            &[Refused(
                "Specifying --as-pid-1 and --lock-file is not permitted",
            )],
        ),
    ];
    for who in users("bwrap_as_pid_1") {
        check(who, &cases);
    }
}

#[test]
fn disable_userns_and_assert_userns_disabled() {
    let cases = [
        Case::bare(
            "--disable-userns",
            "--unshare-user --disable-userns --dev-bind / / sh -c",
            &[Code(0), Stdout("kept\nrefused\n")],
        )
        .arg(
            "echo 2 > /proc/sys/user/max_user_namespaces 2>/dev/null || echo kept; \
             unshare -U true 2>/dev/null || echo refused",
        ),
        // Without it, a user namespace can be made inside.
        Case::bare(
            "no --disable-userns",
            "--unshare-user --dev-bind / / unshare -U true",
            &[Code(0)],
        ),
        Case::bare(
            "--assert-userns-disabled alone",
            "--assert-userns-disabled --dev-bind / / true",
            &[Refused(
                "creation of new user namespaces was not disabled as requested",
            )],
        ),
        Case::bare(
            "--disable-userns alone",
            "--disable-userns --dev-bind / / true",
            &[Refused("--disable-userns requires --unshare-user")],
        ),
        // Asserted where it holds: fine.
        Case::bare(
            "--disable-userns --assert-userns-disabled",
            "--unshare-user --disable-userns --assert-userns-disabled --dev-bind / / true",
            &[Code(0)],
        ),
    ];
    for who in users("bwrap_disable_userns") {
        check(who, &cases);
    }
}

#[test]
fn perms_and_size_as_bwrap_reads_them() {
    let cases = [
        // Missing parents: 0755, less what the directory denies group and others.
        Case::root(
            "--perms --dir, --size 0x…",
            "--perms 0750 --dir /a/b --perms 0700 --dir /c/d --perms 1777 --dir /e/f \
             --size 0x100000 --tmpfs /g sh -c",
            &[Code(0), Stdout("750 /a\n750 /a/b\n700 /c\n700 /c/d\n755 /e\n1777 /e/f\n1048576\n")],
        )
        .arg("stat -c '%a %n' /a /a/b /c /c/d /e /e/f; df -B1 --output=size /g | tail -1 | tr -d ' '"),
        Case::bare("--perms twice", "--perms 0640 --perms 0640 --tmpfs /a true", &[Refused(
            "--perms given twice for the same action",
        )]),
        Case::bare("--size twice", "--size 1 --size 1 --tmpfs /a true", &[Refused(
            "--size given twice for the same action",
        )]),
        Case::bare("--perms --proc", "--perms 0640 --proc /a true", &[Refused(
            "--perms must be followed by an option that creates a file",
        )]),
        Case::bare("--size --dir", "--size 4096 --dir /a true", &[Refused(
            "--size must be followed by --tmpfs",
        )]),
        Case::bare("--size ' 1'", "--size", &[Refused("--size takes a non-zero number of bytes")])
            .arg(" 1")
            .words("--tmpfs /a true"),
        Case::bare("--size past i64", "--size 9223372036854775809 --tmpfs /a true", &[Refused(
            "--size (for tmpfs) is limited to 9223372036854775807",
        )]),
    ];
    for who in users("bwrap_perms_size") {
        check(who, &cases);
    }
}

/// Host directories for bwrap's overlays, in a scratch directory every
/// user may enter: l1 (a=1, b=2, c=5), l2 (b=3), l3 (c=6), and up/ and
/// work/ for `--overlay`.
fn overlay_dirs(tag: &str) -> common::Scratch {
    let s = common::Scratch::new(tag).world_writable();
    for d in ["l1", "l2", "l3", "up", "work"] {
        std::fs::create_dir(s.join(d)).unwrap();
    }
    for (f, text) in [
        ("l1/a", "1"),
        ("l1/b", "2"),
        ("l1/c", "5"),
        ("l2/b", "3"),
        ("l3/c", "6"),
    ] {
        std::fs::write(s.join(f), text).unwrap();
    }
    s
}

/// Everything in `s` (but what `keep` names, and the directories up/ and
/// work/ themselves) owned by `who`, whose sandbox maps it: overlayfs
/// copies a file up with its owner, which must be mapped there (started
/// by root, stockade's layers are idmapped: host root's files are the
/// jail root's). Root's previous run's upper layer emptied first.
fn overlay_dirs_for(s: &common::Scratch, who: Who) {
    for d in ["up", "work"] {
        // overlayfs leaves work/work at mode 000.
        common::host_sh_ok(&format!(
            "chmod -R u+rwx {0} && rm -rf {0} && mkdir -m 777 {0}",
            s.arg(d)
        ));
    }
    if !is_root() {
        return;
    }
    let owner = if who == Who::Root { 0 } else { NOBODY };
    common::host_sh_ok(&format!(
        "chown -R {owner}:{owner} {0}/l1 {0}/l2 {0}/l3 {0}/up {0}/work",
        s.arg("")
    ));
}

/// The host's lower layers hold what [`overlay_dirs`] put there, and
/// nothing more.
fn layers_untouched(s: &common::Scratch, what: &str) {
    for (d, files) in [("l1", "a b c"), ("l2", "b"), ("l3", "c")] {
        let mut names: Vec<String> = std::fs::read_dir(s.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.join(" "), files, "{what}: {d}");
    }
    for (f, text) in [
        ("l1/a", "1"),
        ("l1/b", "2"),
        ("l1/c", "5"),
        ("l2/b", "3"),
        ("l3/c", "6"),
    ] {
        assert_eq!(
            std::fs::read_to_string(s.join(f)).unwrap(),
            text,
            "{what}: {f}"
        );
    }
}

#[test]
fn overlays_read_through_their_layers_in_order() {
    let s = overlay_dirs("bwrap-overlay-read");
    let (l1, l2, l3) = (s.arg("l1"), s.arg("l2"), s.arg("l3"));
    // Relative to the caller's directory (/ here), as bwrap takes them.
    let (r1, r2) = (&l1[1..], &l2[1..]);
    let show = "echo $(cat /o/a) $(cat /o/b) $(cat /o/c)";
    let cases = [
        // The first --overlay-src at the bottom: b from l2, c from l3.
        Case::root(
            "--ro-overlay, three sources",
            &format!(
                "--overlay-src {l1} --overlay-src {l2} --overlay-src {l3} --ro-overlay /o sh -c"
            ),
            &[
                Code(1),
                Stdout("1 3 6\n"),
                StderrHas("Read-only file system"),
            ],
        )
        .arg(&format!("{show}; touch /o/x")),
        Case::root(
            "--ro-overlay, the other way up",
            &format!(
                "--overlay-src {l3} --overlay-src {l2} --overlay-src {l1} --ro-overlay /o sh -c"
            ),
            &[Code(0), Stdout("1 2 5\n")],
        )
        .arg(show),
        Case::root(
            "--ro-overlay, relative sources",
            &format!("--overlay-src {r1} --overlay-src {r2} --ro-overlay /o cat /o/b"),
            &[Code(0), Stdout("3")],
        ),
        // Writes go to a tmpfs of its own, gone with the sandbox: the
        // second run (the real bwrap's) sees the layers as they were.
        Case::root(
            "--tmp-overlay",
            &format!(
                "--overlay-src {l1} --overlay-src {l2} --overlay-src {l3} --tmp-overlay /o sh -c"
            ),
            &[Code(0), Stdout("1 3 6\n7 new\nb\nc\nn\n")],
        )
        .arg(&format!(
            "{show}; printf 7 > /o/b; echo new > /o/n; rm /o/a; echo $(cat /o/b) $(cat /o/n); ls /o"
        )),
        // Each --tmp-overlay has its own.
        Case::root(
            "two --tmp-overlay",
            &format!(
                "--overlay-src {l1} --tmp-overlay /o --overlay-src {l1} --tmp-overlay /p sh -c"
            ),
            &[Code(0), Stdout("7 1\n")],
        )
        .arg("printf 7 > /o/a; echo $(cat /o/a) $(cat /p/a)"),
    ];
    for who in users("bwrap_overlay_read") {
        overlay_dirs_for(&s, who);
        check(who, &cases);
        layers_untouched(&s, &format!("{who:?}"));
        // No upper layer on the host for these.
        assert!(std::fs::read_dir(s.join("up")).unwrap().next().is_none());
    }
}

#[test]
fn an_overlays_writes_land_in_its_upper_directory() {
    let s = overlay_dirs("bwrap-overlay-upper");
    let (l1, l2, up, work) = (s.arg("l1"), s.arg("l2"), s.arg("up"), s.arg("work"));
    // The upper directory read first (c), then the sources; a write copies
    // up (a), a new file is made there (n), a removal leaves a whiteout
    // (b). The same for both runs: the second finds the first's writes.
    let cases = [Case::root(
        "--overlay",
        &format!("--overlay-src {l1} --overlay-src {l2} --overlay {up} {work} /o sh -c"),
        &[Code(0), Stdout("9\n7 new 9\na\nc\nn\n")],
    )
    .arg("cat /o/c; echo; printf 7 > /o/a; echo new > /o/n; rm -f /o/b; echo $(cat /o/a) $(cat /o/n) $(cat /o/c); ls /o")];
    for who in users("bwrap_overlay_upper") {
        overlay_dirs_for(&s, who);
        std::fs::write(s.join("up/c"), "9").unwrap();
        if is_root() {
            let owner = if who == Who::Root { 0 } else { NOBODY };
            std::os::unix::fs::chown(s.join("up/c"), Some(owner), Some(owner)).unwrap();
        }
        check(who, &cases);
        let what = format!("{who:?}");
        assert_eq!(
            std::fs::read_to_string(s.join("up/a")).unwrap(),
            "7",
            "{what}"
        );
        assert_eq!(
            std::fs::read_to_string(s.join("up/n")).unwrap(),
            "new\n",
            "{what}"
        );
        let b = std::fs::symlink_metadata(s.join("up/b")).unwrap();
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        assert!(
            b.file_type().is_char_device() && b.rdev() == 0,
            "{what}: a whiteout"
        );
        layers_untouched(&s, &what);
    }
}

#[test]
fn overlays_refused_as_bwrap_refuses_them() {
    let s = overlay_dirs("bwrap-overlay-refused");
    let (l1, up, work) = (s.arg("l1"), s.arg("up"), s.arg("work"));
    let no = |n: &str| s.arg(&format!("no-{n}"));
    let (no1, no2, no_up, no_work) = (no("1"), no("2"), no("up"), no("work"));
    let missing = |p: &str| format!("Can't find source path {p}: No such file or directory");
    let (miss1, miss2, miss_up, miss_work) = (
        missing(&no1),
        missing(&no2),
        missing(&no_up),
        missing(&no_work),
    );
    let relative = missing("tmp/stockade-no-such-layer");
    let alone = "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay";
    let cases = [
        Case::bare(
            "--overlay-src alone",
            "--overlay-src /usr --chdir / true",
            &[Refused(alone)],
        ),
        Case::bare("--overlay-src last", "--overlay-src", &[Refused(alone)]),
        Case::bare(
            "--overlay-src at the command",
            "--overlay-src /usr true",
            &[Refused(alone)],
        ),
        // bwrap takes --overlay-src's word unseen, an option too.
        Case::bare(
            "--overlay-src --tmp-overlay",
            "--overlay-src --tmp-overlay /o true",
            &[Refused(alone)],
        ),
        Case::bare(
            "--overlay, no source",
            "--overlay /a /b /o true",
            &[Refused("--overlay requires at least one --overlay-src")],
        ),
        Case::bare(
            "--tmp-overlay, no source",
            "--tmp-overlay /o true",
            &[Refused("--tmp-overlay requires at least one --overlay-src")],
        ),
        Case::bare(
            "--ro-overlay, one source",
            "--overlay-src /usr --ro-overlay /o true",
            &[Refused("--ro-overlay requires at least two --overlay-src")],
        ),
        // The sources before another overlay are not this one's.
        Case::bare(
            "--ro-overlay, the other's source",
            "--overlay-src /usr --tmp-overlay /o --overlay-src /usr --ro-overlay /p true",
            &[Refused("--ro-overlay requires at least two --overlay-src")],
        ),
        Case::bare(
            "--overlay, two words",
            "--overlay-src /usr --overlay /a /b",
            &[Refused("--overlay takes three arguments")],
        ),
        Case::bare(
            "--tmp-overlay, no word",
            "--overlay-src /usr --tmp-overlay",
            &[Refused("--tmp-overlay takes an argument")],
        ),
        Case::bare(
            "--ro-overlay, no word",
            "--overlay-src /usr --overlay-src /usr --ro-overlay",
            &[Refused("--ro-overlay takes an argument")],
        ),
        Case::root(
            "a missing source",
            &format!("--overlay-src {l1} --overlay-src {no1} --tmp-overlay /o true"),
            &[Refused(&miss1)],
        ),
        Case::root(
            "a missing relative source",
            "--overlay-src tmp/stockade-no-such-layer --tmp-overlay /o true",
            &[Refused(&relative)],
        ),
        // bwrap resolves the upper directory, the work directory, then the
        // sources from the last.
        Case::root(
            "a missing upper directory",
            &format!("--overlay-src {no1} --overlay {no_up} {no_work} /o true"),
            &[Refused(&miss_up)],
        ),
        Case::root(
            "a missing work directory",
            &format!("--overlay-src {no1} --overlay {up} {no_work} /o true"),
            &[Refused(&miss_work)],
        ),
        Case::root(
            "two missing sources",
            &format!("--overlay-src {no1} --overlay-src {no2} --ro-overlay /o true"),
            &[Refused(&miss2)],
        ),
        // Sources are resolved once the command line is read: its usage
        // errors come first, then the ops' sources in order.
        Case::root(
            "a missing source, then a usage error",
            &format!("--overlay-src {no1} --tmp-overlay /o --perms 0700 --proc /p true"),
            &[Refused(
                "--perms must be followed by an option that creates a file",
            )],
        ),
        Case::root(
            "a missing source, then a missing bind",
            &format!("--overlay-src {no1} --tmp-overlay /o --bind {no2} /b true"),
            &[Refused(&miss1)],
        ),
        // Root finds no such file; 65534 may not look (/root is 0700).
        Case::root(
            "a source the caller may not reach",
            &format!("--overlay-src /root/stockade-no-such-layer --overlay {up} {work} /o true"),
            &[Code(1)],
        ),
    ];
    for who in users("bwrap_overlay_refused") {
        overlay_dirs_for(&s, who);
        check(who, &cases);
        layers_untouched(&s, &format!("{who:?}"));
    }
}

/// bwrap 0.12's line for an overlay the kernel refused, with the
/// destination bwrap names "(null)" (its op pointer has moved on) put
/// back, and the fd numbers in the options (each bwrap's own) as N.
fn overlay_mount_line(err: &str, dst: &str) -> String {
    let line = err.replace("on (null) with", &format!("on {dst} with"));
    let mut out = String::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("/proc/self/fd/") {
        out.push_str(&rest[..i + "/proc/self/fd/".len()]);
        rest = rest[i + "/proc/self/fd/".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out + rest
}

#[test]
fn an_overlay_the_kernel_refuses_fails_as_in_bwrap() {
    let s = overlay_dirs("bwrap-overlay-kernel");
    let (l1, up, work) = (s.arg("l1"), s.arg("up"), s.arg("work"));
    let upper_in = s.arg("up/in");
    let cases = [
        // The same directory twice, a source inside the upper one: ELOOP.
        (
            format!("--overlay-src {l1} --overlay-src {l1} --ro-overlay /o true"),
            "Can't make overlay mount on /o with options lowerdir=/proc/self/fd/N:/proc/self/fd/N,userxattr: Overlay directories may not overlap\n",
        ),
        (
            format!("--overlay-src {upper_in} --overlay {up} {work} /o true"),
            "Can't make overlay mount on /o with options upperdir=/proc/self/fd/N,workdir=/proc/self/fd/N,lowerdir=/proc/self/fd/N,userxattr: Overlay directories may not overlap\n",
        ),
        // The upper directory as the work directory: EINVAL.
        (
            format!("--overlay-src {l1} --overlay {up} {up} /o true"),
            "Can't make overlay mount on /o with options upperdir=/proc/self/fd/N,workdir=/proc/self/fd/N,lowerdir=/proc/self/fd/N,userxattr: Invalid argument\n",
        ),
    ];
    for who in users("bwrap_overlay_kernel") {
        overlay_dirs_for(&s, who);
        std::fs::create_dir(s.join("up/in")).unwrap();
        if is_root() && who == Who::Nobody {
            std::os::unix::fs::chown(s.join("up/in"), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        for (line, want) in &cases {
            let args = root_and(&line.split_whitespace().collect::<Vec<_>>());
            let what = format!("{who:?} {line}");
            let o = with_args(ours(who), &strs(&args), None);
            expect_code(&o, 1, &what);
            assert_eq!(
                overlay_mount_line(&stderr(&o), "/o"),
                format!("bwrap: {want}"),
                "{what}"
            );
            match real(who) {
                Some(c) => {
                    let r = with_args(c, &strs(&args), None);
                    expect_code(&r, 1, &what);
                    assert_eq!(
                        overlay_mount_line(&stderr(&r), "/o"),
                        format!("bwrap: {want}"),
                        "{what}: the real bwrap"
                    );
                }
                None => common::skip("bwrap", "the real bwrap cannot run here: stockade alone"),
            }
        }
    }
}

#[test]
fn rerun_through_proc_self_exe_is_bwrap_again() {
    // A sandboxed program re-running "its" bwrap as bubblewrap's tests do.
    let cases = [
        Case::bare(
            "/proc/self/exe --version",
            "--ro-bind / / --proc /proc /proc/self/exe --version",
            &[Code(0), Stdout("bubblewrap 0.12.0\n")],
        ),
        Case::bare(
            "/proc/self/exe --bogus",
            "--ro-bind / / --proc /proc /proc/self/exe --bogus",
            &[Refused("Unknown option --bogus")],
        ),
    ];
    for who in users("bwrap_reexec") {
        check(who, &cases);
    }
}

#[test]
fn an_fd_read_by_one_option_is_gone_for_the_next() {
    let s = common::Scratch::new("bwrap-fd-twice");
    let prog = s.join("prog");
    std::fs::write(&prog, no_mkdir_filter()).unwrap();
    let twice = Case::bare(
        "the same seccomp fd twice",
        "--ro-bind / / --add-seccomp-fd 3 --add-seccomp-fd 3 true",
        &[Refused("Can't read seccomp data: Bad file descriptor")],
    )
    .fds(&prog, &prog);
    for who in users("bwrap_fd_twice") {
        check(who, std::slice::from_ref(&twice));
    }
}

#[test]
fn a_sandbox_inside_a_sandbox_with_the_outer_proc() {
    // The inner run sees the outer pid namespace's /proc (bound from the
    // host), not its own: its child is found there by NSpid. As uid 65534
    // only: started by root, the outer sandbox's root runs the inner one
    // as uid 0, which stockade maps to its root_host_uid, a uid the outer
    // user namespace does not map (the jail's root is never host root).
    for who in users("bwrap_nested")
        .into_iter()
        .filter(|w| *w == Who::Nobody)
    {
        let uid = if who == Who::Nobody { NOBODY } else { 0 };
        let hello = format!("hello\n{uid}\n");
        let nested = Case::bare(
            "nested",
            "--unshare-user --bind / / --bind /proc /proc -- /proc/self/exe \
             --unshare-all --bind / / --bind /proc /proc sh -c",
            &[Code(0), Stdout(&hello)],
        )
        .arg("echo hello; id -u");
        check(who, &[nested]);
    }
}

/// Started by root, as the real bwrap run by root: a root-owned 0700
/// directory given with `--bind` is the payload's to enter, read, write
/// and chmod in, and what it makes there belongs to host root on disk.
/// The caller's capabilities are the payload's (in the jail's user
/// namespace) unless `--cap-*` says otherwise, as bwrap's.
#[test]
fn a_root_callers_binds_show_root_files_as_the_payloads() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        common::skip(
            "bwrap_root_binds",
            "not running as root: this is what bwrap does for root",
        );
        return;
    }
    let s = common::Scratch::new("bwrap-root-binds");
    let d = s.join("private");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(d.join("f"), "secret\n").unwrap();
    std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let dir = d.to_str().unwrap();
    let script = "cd /w && rm -rf g sub && cat f && echo new > g && chmod 640 g && mkdir sub && \
                  stat -c '%n %u %g %a' f g sub && id -u && id -g";
    let args = root_and(&["--bind", dir, "/w", "sh", "-c", script]);
    // Ours alone first: what it made is on disk, owned by host root.
    let o = with_args(ours(Who::Root), &strs(&args), None);
    expect_code(&o, 0, "root's private directory");
    assert_eq!(
        stdout(&o),
        "secret\nf 0 0 600\ng 0 0 640\nsub 0 0 755\n0\n0\n"
    );
    for (name, mode) in [("g", 0o100640), ("sub", 0o40755)] {
        let m = std::fs::metadata(d.join(name)).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode()), (0, 0, mode), "{name} on disk");
    }
    assert_eq!(std::fs::read_to_string(d.join("g")).unwrap(), "new\n");
    // Its capabilities: the caller's, none inheritable or ambient, as
    // bwrap's without --cap-add or --cap-drop; with them, every set.
    let mine = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = mine
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .unwrap();
    let callers = format!("0000000000000000 {eff} {eff} {eff} 0000000000000000 ");
    // Every set but the bounding one, which bwrap changes only in a user
    // namespace of its own (--unshare-user).
    let left = u64::from_str_radix(eff, 16).unwrap() & !(1 << 5); // CAP_KILL
    let dropped = format!("{left:016x} {left:016x} {left:016x} {eff} {left:016x} ");
    let cases = [
        // And the same as the real bwrap run by root.
        Case::root(
            "root's private directory",
            &format!("--bind {dir} /w sh -c"),
            &[],
        )
        .arg(script),
        Case::root(
            "root's capabilities",
            "--unshare-pid sh -c",
            &[Code(0), Stdout(&callers)],
        )
        .arg(CAPS),
        Case::root(
            "--cap-drop as root",
            "--cap-drop CAP_KILL sh -c",
            &[Code(0), Stdout(&dropped)],
        )
        .arg(CAPS),
    ];
    check(Who::Root, &cases);
}

/// Started by root, the payload sees host root's files on its binds as its
/// own, yet none of its processes is host root: its uid map does not map
/// host uid 0 (nor 65534, which other host processes run as), and through
/// the host's /proc bound inside it can neither signal a host root process
/// (by a pidfd of it), nor read pid 1's environment, nor write a root-owned
/// host file through pid 1's root (a file no bind gave it), nor remount a
/// read-only bind writable.
#[test]
fn a_root_callers_sandbox_is_not_host_root() {
    if !is_root() {
        common::skip(
            "bwrap_root_not_host_root",
            "not running as root: this is what bwrap does for root",
        );
        return;
    }
    let s = common::Scratch::new("bwrap-root-hostile");
    let victim = s.join("victim");
    std::fs::write(&victim, "root's\n").unwrap();
    let given = s.join("given");
    std::fs::create_dir(&given).unwrap();
    let mut host = Command::new("sleep").arg("1000").spawn().unwrap();
    let script = format!(
        "read inner outer n < /proc/self/uid_map; echo uid $inner $outer; \
         read inner gouter n < /proc/self/gid_map; echo gid $inner $gouter; \
         python3 -c '
import os, signal
fd = os.open(\"/hostproc/{pid}\", os.O_RDONLY | os.O_DIRECTORY)
try:
    signal.pidfd_send_signal(fd, signal.SIGKILL)
    print(\"killed\")
except OSError as e:
    # EPERM (not its uid) or EINVAL (not in its pid namespace).
    print(\"kill refused\" if e.errno in (1, 22) else e)
'; \
         cat /hostproc/1/environ >/dev/null 2>&1 && echo read environ || echo environ refused; \
         (echo owned >> /hostproc/1/root{victim}) 2>/dev/null && echo wrote || echo write refused; \
         (echo owned >> /hostproc/self/root{victim}) 2>/dev/null && echo wrote || echo write refused; \
         echo ok > /given/mine && echo wrote given; \
         (echo x > /usr/stockade-test) 2>/dev/null && echo wrote usr || echo usr refused; \
         mount -o remount,bind,rw /usr 2>/dev/null; \
         (echo x > /usr/stockade-test) 2>/dev/null && echo wrote usr || echo usr refused",
        pid = host.id(),
        victim = victim.display(),
    );
    let o = with_args(
        ours(Who::Root),
        &[
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--bind",
            "/proc",
            "/hostproc",
            "--bind",
            given.to_str().unwrap(),
            "/given",
            "--cap-drop",
            "CAP_SYS_ADMIN",
            "sh",
            "-c",
            &script,
        ],
        None,
    );
    let alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    expect_code(&o, 0, "hostile checks as root");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let outer = |l: &str, what: &str| -> u32 {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f[..2], [what, "0"], "{l}");
        f[2].parse().unwrap()
    };
    let (uid, gid) = (outer(lines[0], "uid"), outer(lines[1], "gid"));
    assert!(
        uid != 0 && uid != NOBODY,
        "the jail's root is host uid {uid}"
    );
    assert!(
        gid != 0 && gid != NOBODY,
        "the jail's root is host gid {gid}"
    );
    assert_eq!(
        lines[2..],
        [
            "kill refused",
            "environ refused",
            "write refused",
            "write refused",
            "wrote given",
            "usr refused",
            "usr refused"
        ],
        "{out}\n{}",
        stderr(&o)
    );
    assert!(alive, "the host's root process was killed");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's\n");
    assert!(!Path::new("/usr/stockade-test").exists());
    let m = std::fs::metadata(given.join("mine")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&m), 0);
}

/// A user namespace and a pid namespace (pid 1: `sleep`) made by
/// util-linux's `unshare` as `who`, for the options that join given ones;
/// with `nested`, a second user namespace under the first, held by a
/// process of its own. The unshare is SIGKILLed when dropped, and its child
/// with it (`--kill-child`: the pid namespace ends).
struct Holder {
    unshare: std::process::Child,
    /// pid 1 of the pid namespace, in the outer user namespace.
    pid: u32,
    /// A process in the nested user namespace, when asked for.
    inner: Option<u32>,
    /// Another process of the pid namespace (not nested).
    bystander: Option<u32>,
}

/// The children of `pid` (host pids).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

impl Holder {
    /// None (and a SKIPPED line) where unshare cannot make them here.
    fn new(who: Who, nested: bool, test: &str) -> Option<Holder> {
        use std::io::BufRead;
        let inner = match nested {
            true => "unshare -U -r sh -c 'echo ready; exec sleep 600' & wait",
            // A bystander besides pid 1: kill(-1) in the namespace would
            // reach it (never pid 1).
            false => "sleep 600 & echo ready; exec sleep 601",
        };
        let mut c = Command::new("unshare");
        c.args(["-U", "-r", "-p", "-f", "--kill-child", "sh", "-c", inner]);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        c.current_dir("/");
        common::start_as(&mut c, who);
        let mut unshare = c.spawn().expect("unshare");
        let mut line = String::new();
        let out = unshare.stdout.take().unwrap();
        // "ready" comes once the namespaces exist (and the nested one).
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        if line != "ready\n" {
            let _ = unshare.kill();
            let _ = unshare.wait();
            common::skip(test, "unshare cannot make a user and pid namespace here");
            return None;
        }
        let pid = children(unshare.id())[0];
        // The nested namespace's process, or the bystander.
        let kid = children(pid)[0];
        Some(Holder {
            unshare,
            pid,
            inner: nested.then_some(kid),
            bystander: (!nested).then_some(kid),
        })
    }

    /// Started by root without a mapping of its own (no `-r`): the user
    /// namespace gets `map` as its uid and gid map, written from here.
    fn mapped_by_root(map: &str) -> Holder {
        use std::io::BufRead;
        let mut c = Command::new("unshare");
        c.args([
            "-U",
            "-p",
            "-f",
            "--kill-child",
            "sh",
            "-c",
            "echo ready; exec sleep 600",
        ]);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut unshare = c.spawn().expect("unshare");
        let mut line = String::new();
        std::io::BufReader::new(unshare.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = children(unshare.id())[0];
        let h = Holder {
            unshare,
            pid,
            inner: None,
            bystander: None,
        };
        for f in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{f}"), map).unwrap();
        }
        h
    }

    fn ns(&self, kind: &str) -> std::path::PathBuf {
        format!("/proc/{}/ns/{kind}", self.pid).into()
    }

    fn link(&self, kind: &str) -> String {
        std::fs::read_link(self.ns(kind))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// Every live process of the holder's pid namespace but its own.
    fn others(&self) -> Vec<u32> {
        let mine = self.link("pid");
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| *p != self.pid && Some(*p) != self.bystander)
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/ns/pid"))
                    .is_ok_and(|l| l.to_string_lossy() == mine)
            })
            .filter(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                let state = stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .next();
                !matches!(state, Some("Z" | "X") | None)
            })
            .collect()
    }

    /// Its pid 1 and its bystander both still run.
    fn alive(&self) -> bool {
        let runs = |p: u32| {
            std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e.ends_with("sleep"))
        };
        runs(self.pid) && self.bystander.is_none_or(runs)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

#[test]
fn userns_the_payload_is_in_the_given_user_namespace() {
    let script =
        "readlink /proc/self/ns/user; cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g";
    for who in users("bwrap_userns") {
        let Some(h) = Holder::new(who, false, "bwrap_userns") else {
            continue;
        };
        let host = if who == Who::Nobody { NOBODY } else { 0 };
        let map = format!("{:>10} {:>10} {:>10}\n", 0, host, 1);
        let want = format!("{}\n{map}{map}0\n0\n", h.link("user"));
        let userns = Case::root("--userns", "--userns 3 sh -c", &[Code(0), Stdout(&want)])
            .arg(script)
            .fds(h.ns("user"), "/dev/null");
        check(who, &[userns]);
    }
}

#[test]
fn pidns_the_payload_is_in_the_given_pid_namespace_which_outlives_it() {
    for who in users("bwrap_pidns") {
        let Some(h) = Holder::new(who, false, "bwrap_pidns") else {
            continue;
        };
        // The payload sees the holder's sleep as pid 1, and is not pid 1.
        let want = format!("{}\nsleep 601 \nnot-1\n", h.link("pid"));
        let pidns = Case::root("--pidns", "--userns 3 --pidns 4 sh -c", &[Code(0), Stdout(&want)])
            .arg("readlink /proc/self/ns/pid; tr '\\0' ' ' < /proc/1/cmdline; echo; test $$ != 1 && echo not-1")
            .fds(h.ns("user"), h.ns("pid"));
        check(who, &[pidns]);
        // The jail's end kills what it left there (a process in the
        // background), never the namespace's other processes (kill(-1)
        // there would reach the holder).
        let v = root_and(&[
            "--userns",
            "3",
            "--pidns",
            "4",
            "sh",
            "-c",
            "sleep 300 & echo left",
        ]);
        let o = with_fds(who, &ours_bin(), &strs(&v), &h.ns("user"), &h.ns("pid"));
        expect_code(&o, 0, "--pidns, a process left behind");
        assert_eq!(stdout(&o), "left\n");
        assert!(
            h.alive(),
            "the joined pid namespace's processes were killed"
        );
        assert_eq!(
            h.others(),
            Vec::<u32>::new(),
            "the jail left processes behind"
        );
    }
}

#[test]
fn pidns_with_unshare_pid_nests_a_new_one_under_it() {
    for who in users("bwrap_pidns_nested") {
        let Some(h) = Holder::new(who, false, "bwrap_pidns_nested") else {
            continue;
        };
        // Its own pid namespace (the command is pid 2 under an init), whose
        // parent is the given one: the host's /proc shows three levels.
        let script = "readlink /proc/self/ns/pid; echo $$; grep NSpid /proc/self/status | wc -w";
        let args = [
            "--ro-bind",
            "/",
            "/",
            "--userns",
            "3",
            "--pidns",
            "4",
            "--unshare-pid",
            "sh",
            "-c",
            script,
        ];
        let (user, pid) = (h.ns("user"), h.ns("pid"));
        let mut outs = vec![with_fds(who, &ours_bin(), &args, &user, &pid)];
        if real(who).is_some() {
            outs.push(with_fds(who, &[real_path()], &args, &user, &pid));
        }
        for o in &outs {
            expect_code(o, 0, "--pidns --unshare-pid");
            let out = stdout(o);
            let lines: Vec<&str> = out.lines().collect();
            assert_ne!(lines[0], h.link("pid"), "not a new pid namespace");
            // The host /proc's NSpid: host, the holder's, the new one.
            assert_eq!(lines[1..], ["2", "4"], "{out}");
            assert_eq!(stderr(o), "");
        }
        assert!(h.alive());
    }
}

#[test]
fn userns2_after_setup_the_payload_is_in_the_nested_namespace() {
    for who in users("bwrap_userns2") {
        let Some(h) = Holder::new(who, true, "bwrap_userns2") else {
            continue;
        };
        let inner = std::path::PathBuf::from(format!("/proc/{}/ns/user", h.inner.unwrap()));
        let want = format!("{}\n0\n", std::fs::read_link(&inner).unwrap().display());
        let userns2 = Case::root(
            "--userns2",
            "--userns 3 --userns2 4 sh -c",
            &[Code(0), Stdout(&want)],
        )
        .arg("readlink /proc/self/ns/user; id -u")
        .fds(h.ns("user"), &inner);
        check(who, &[userns2]);
    }
}

#[test]
fn namespace_fds_refused_as_bwrap_refuses_them() {
    let not_descendant = "bwrap: Joining the specified user namespace failed, it might not be a descendant of the current user namespace.\n";
    let no_pid = "bwrap: Unexpected short read from pid socket\n";
    let (bad_fd, not_userns, not_permitted) = (
        format!("bwrap: Setting pidns failed: Bad file descriptor\n{no_pid}"),
        format!("bwrap: Setting pidns failed: Invalid argument\n{no_pid}"),
        format!("bwrap: Setting pidns failed: Operation not permitted\n{no_pid}"),
    );
    /// `opts` between `--ro-bind / /` and `true`, refused with `err`.
    fn refused<'a>(what: &'a str, opts: &str, err: &'a str) -> Case<'a> {
        Case::bare(
            what,
            &format!("--ro-bind / / {opts} true"),
            &[Code(1), Stderr(err)],
        )
    }
    for who in users("bwrap_ns_errors") {
        let Some(h) = Holder::new(who, false, "bwrap_ns_errors") else {
            continue;
        };
        let (user, pid) = (h.ns("user"), h.ns("pid"));
        let null = "/dev/null";
        let mut cases = vec![
            refused(
                "--userns --unshare-user",
                "--userns 3 --unshare-user",
                "bwrap: --userns is not compatible with --unshare-user\n",
            )
            .fds(&user, null),
            refused(
                "--userns --unshare-all",
                "--userns 3 --unshare-all",
                "bwrap: --userns is not compatible with --unshare-user-try\n",
            )
            .fds(&user, null),
            refused(
                "--userns-block-fd alone",
                "--userns-block-fd 3",
                "bwrap: --userns-block-fd requires --unshare-user\n",
            )
            .fds(null, null),
            refused(
                "--userns-block-fd without --info-fd",
                "--unshare-user --userns-block-fd 3",
                "bwrap: --userns-block-fd requires --info-fd\n",
            )
            .fds(null, null),
            refused(
                "--disable-userns --userns-block-fd",
                "--unshare-user --disable-userns --info-fd 4 --userns-block-fd 3",
                "bwrap: --disable-userns is not compatible with --userns-block-fd\n",
            )
            .fds(null, null),
            // Not a namespace, a namespace of another type, our own.
            refused("--userns /dev/null", "--userns 3", not_descendant).fds(null, null),
            refused("--userns of a pid namespace", "--userns 3", not_descendant).fds(&pid, null),
            refused("--userns of our own", "--userns 3", not_descendant)
                .fds("/proc/self/ns/user", null),
            refused(
                "--userns 9",
                "--userns 9",
                "bwrap: Joining specified user namespace failed: Bad file descriptor\n",
            )
            .fds(null, null),
            refused("--pidns 9", "--pidns 9", &bad_fd).fds(null, null),
            refused("--pidns of a user namespace", "--pidns 3", &not_userns).fds(&user, null),
        ];
        if who == Who::Nobody {
            // A pid namespace whose owner we do not join; a second user
            // namespace that is not under ours. (Root may: bwrap makes no
            // user namespace of its own for root, stockade always does.)
            cases.push(
                refused("--pidns of another owner", "--pidns 3", &not_permitted).fds(&pid, null),
            );
            cases.push(
                refused(
                    "--userns2 not under ours",
                    "--userns2 3",
                    "bwrap: Setting userns2 failed: Operation not permitted\n",
                )
                .fds(&user, null),
            );
        }
        check(who, &cases);
    }
}

#[test]
fn a_root_caller_in_a_namespace_without_host_root_is_not_host_root() {
    // Root hands a user namespace whose uid 0 is host 100000 and where
    // host root is not mapped: bwrap's payload keeps host uid 0 there
    // (unmapped: it cannot create files), stockade's takes the namespace's
    // uid 0, host 100000. A namespace that maps host root is the caller's
    // choice (see userns_the_payload_is_in_the_given_user_namespace).
    if !is_root() {
        common::skip("bwrap_userns_root", "needs root to write another uid's map");
        return;
    }
    let h = Holder::mapped_by_root("0 100000 1\n");
    let s = common::Scratch::new("bwrap-userns-root").world_writable();
    let dir = s.path().to_str().unwrap();
    let v = root_and(&[
        "--bind",
        dir,
        "/out",
        "--userns",
        "3",
        "sh",
        "-c",
        "id -u; touch /out/f",
    ]);
    let o = with_fds(
        Who::Root,
        &ours_bin(),
        &strs(&v),
        &h.ns("user"),
        Path::new("/dev/null"),
    );
    expect_code(&o, 0, "--userns without host root");
    assert_eq!(stdout(&o), "0\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(s.join("f")).unwrap().uid(), 100_000);
    // And where the namespace maps neither host root nor its own uid 0,
    // the run is refused, never run as host root.
    drop(h);
    let h = Holder::mapped_by_root("5 100000 1\n");
    std::fs::remove_file(s.join("f")).unwrap();
    let o = with_fds(
        Who::Root,
        &ours_bin(),
        &strs(&v),
        &h.ns("user"),
        Path::new("/dev/null"),
    );
    expect_code(&o, 1, "--userns mapping neither");
    assert_eq!(
        stderr(&o),
        "bwrap: unable to switch to gid 0: Invalid argument\n"
    );
    assert!(!s.join("f").exists(), "the payload ran");
}

/// `args` with fds 3 (`--info-fd`) and 4 (`--userns-block-fd`) on two
/// fifos of `s`; this process reads the pid from the info, writes the id
/// maps (`inner` for the caller's own ids), then writes to the block fd.
fn with_own_maps(who: Who, bin: &[&str], args: &[&str], s: &common::Scratch, inner: u32) -> Output {
    use std::io::{Read, Write};
    let (info, block) = (s.join("info"), s.join("block"));
    for f in [&info, &block] {
        let _ = std::fs::remove_file(f);
        let made = Command::new("mkfifo")
            .arg("-m")
            .arg("0666")
            .arg(f)
            .status()
            .unwrap();
        assert!(made.success());
    }
    let mut c = common::host_command(who, "/bin/sh");
    c.args(["-c", "exec \"$@\" 3>\"$F3\" 4<\"$F4\"", "sh"]);
    c.args(bin).args(args);
    c.env("F3", &info).env("F4", &block);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("start");
    let mut info_r = std::fs::File::open(&info).unwrap();
    let mut block_w = std::fs::OpenOptions::new()
        .write(true)
        .open(&block)
        .unwrap();
    let mut text = String::new();
    let doc = loop {
        let mut buf = [0u8; 4096];
        let n = info_r.read(&mut buf).unwrap();
        assert!(n > 0, "no --info-fd document");
        text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            break v;
        }
    };
    let pid = doc["child-pid"].as_u64().unwrap();
    let host = if who == Who::Nobody { NOBODY } else { 0 };
    std::fs::write(format!("/proc/{pid}/setgroups"), "deny").unwrap();
    for f in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{pid}/{f}"), format!("{inner} {host} 1\n")).unwrap();
    }
    block_w.write_all(b"x").unwrap();
    drop(block_w);
    child.wait_with_output().unwrap()
}

#[test]
fn userns_block_fd_waits_for_the_callers_own_maps() {
    if !is_root() {
        common::skip(
            "bwrap_userns_block_fd",
            "needs root to write the maps of a sandbox of uid 65534",
        );
        return;
    }
    let s = common::Scratch::new("bwrap-userns-block").world_writable();
    let v = root_and(&[
        "--unshare-user",
        "--info-fd",
        "3",
        "--userns-block-fd",
        "4",
        "sh",
        "-c",
        "cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g",
    ]);
    for who in users("bwrap_userns_block_fd") {
        let o = with_own_maps(who, &ours_bin(), &strs(&v), &s, 5);
        expect_code(&o, 0, "--userns-block-fd");
        let host = if who == Who::Nobody { NOBODY } else { 0 };
        let map = format!("{:>10} {:>10} {:>10}\n", 5, host, 1);
        assert_eq!(stdout(&o), format!("{map}{map}5\n5\n"), "{}", stderr(&o));
        if real(who).is_some() {
            let r = with_own_maps(who, &[real_path()], &strs(&v), &s, 5);
            assert_eq!(stdout(&o), stdout(&r));
            assert_eq!(stderr(&o), stderr(&r));
            assert_eq!(o.status.code(), r.status.code());
        }
    }
}

/// The namespaces a `--info-fd` reader hands on (bubblewrap's
/// test-specifying-userns.sh and test-specifying-pidns.sh, Flatpak's
/// `flatpak enter`).
const NS: &str = "user pid mnt net ipc uts cgroup";

/// What [`handoff`] saw: the command's own namespace links, those of the
/// info's child-pid read by the caller, those of a second sandbox given
/// `--userns`/`--pidns` fds the caller opened from /proc/<child-pid>/ns,
/// the exit codes, and the `--json-status-fd` documents.
struct Handoff {
    command: String,
    child: String,
    second: String,
    second_err: String,
    codes: (Option<i32>, Option<i32>),
    status: Vec<serde_json::Value>,
    info_pid: u64,
}

/// A sandbox with `--info-fd` (a regular file, as the scripts use: the
/// info must be in it before the command starts) and `--json-status-fd`
/// whose command prints its namespace links and waits for its stdin to
/// end (its output, none, is ours); then, as `who`, the links of /proc/<child-pid>/ns and a second
/// sandbox started with `--userns 11` (and `--pidns 12` with `pidns`)
/// opened from there.
fn handoff(who: Who, bin: &[&str], first: &[&str], pidns: bool, s: &common::Scratch) -> Handoff {
    use std::io::{BufRead, Write};
    let (info, status) = (s.join("info.json"), s.join("status.json"));
    let _ = std::fs::remove_file(&info);
    let _ = std::fs::remove_file(&status);
    let mut c = common::host_command(who, "bash");
    // bash: dash takes no fd above 9 in a redirection.
    c.args(["-c", "exec \"$@\" 42>\"$INFO\" 43>\"$STATUS\"", "sh"]);
    c.args(bin)
        .args(["--bind", "/", "/", "--tmpfs", "/tmp", "--info-fd", "42"])
        .args(["--json-status-fd", "43", "--unshare-user"])
        .args(first)
        .args([
            "sh",
            "-c",
            "for n in $0; do readlink /proc/self/ns/$n; done; exec cat",
            NS,
        ]);
    c.env("INFO", &info).env("STATUS", &status);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("start");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut command = String::new();
    for _ in NS.split(' ') {
        out.read_line(&mut command).unwrap();
    }
    // The command runs: the info is written already.
    let doc = documents(&std::fs::read_to_string(&info).unwrap_or_default());
    let info_pid = doc
        .first()
        .and_then(|d| d["child-pid"].as_u64())
        .unwrap_or(0);
    let mut c = common::host_command(who, "bash");
    let script = "P=$1; shift; for n in $NS; do readlink /proc/$P/ns/$n || echo unreadable; done; \
                  echo --; exec \"$@\" 11</proc/$P/ns/user 12</proc/$P/ns/pid";
    c.args(["-c", script, "sh", &info_pid.to_string()]);
    c.args(bin)
        .args(["--bind", "/", "/", "--tmpfs", "/tmp", "--userns", "11"]);
    if pidns {
        c.args(["--pidns", "12"]);
    }
    c.args(["readlink", "/proc/self/ns/user", "/proc/self/ns/pid"]);
    c.env("NS", NS);
    let o = c.output().expect("start");
    let text = stdout(&o);
    let (child_links, second) = text.split_once("--\n").unwrap_or((&text, ""));
    // The first sandbox's command ends with its stdin.
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.flush();
    drop(stdin);
    let first_code = child.wait().unwrap().code();
    Handoff {
        command,
        child: child_links.to_string(),
        second: second.to_string(),
        second_err: stderr(&o),
        codes: (first_code, o.status.code()),
        status: documents(&std::fs::read_to_string(&status).unwrap_or_default()),
        info_pid,
    }
}

/// The info's child-pid is a process whose /proc/PID/ns the caller (not
/// root) may open, in the command's namespaces: a second sandbox joins
/// them with `--userns`/`--pidns`, as bubblewrap's
/// test-specifying-userns.sh and test-specifying-pidns.sh do; the same
/// under the real bwrap.
#[test]
fn info_child_pid_namespaces_can_be_joined_by_the_caller() {
    let s = common::Scratch::new("bwrap-child-pid").world_writable();
    let cases: [(&[&str], bool); 4] = [
        (&[], false),
        (&["--unshare-pid"], false),
        (&["--unshare-pid"], true),
        (&["--unshare-pid", "--as-pid-1"], true),
    ];
    for who in users("bwrap_info_child_pid") {
        for (first, pidns) in cases {
            let mut runs = vec![("stockade", handoff(who, &ours_bin(), first, pidns, &s))];
            match real(who) {
                Some(_) => runs.push(("bwrap", handoff(who, &[real_path()], first, pidns, &s))),
                None => common::skip("bwrap_info_child_pid", "the real bwrap cannot run here"),
            }
            for (name, h) in &runs {
                let what = format!("{name} {who:?} {first:?} pidns={pidns}");
                assert_eq!(h.codes, (Some(0), Some(0)), "{what}: {}", h.second_err);
                assert_eq!(h.command.lines().count(), 7, "{what}: {}", h.command);
                assert!(h.info_pid > 1, "{what}: no child-pid");
                // The child-pid's namespaces, read by the caller, are the
                // command's own.
                assert_eq!(h.child, h.command, "{what}");
                let cmd: Vec<&str> = h.command.lines().collect();
                let second: Vec<&str> = h.second.lines().collect();
                assert_eq!(second.first(), cmd.first(), "{what}: user namespace");
                if pidns {
                    assert_eq!(second.get(1), cmd.get(1), "{what}: pid namespace");
                }
                // --json-status-fd: the same child-pid, then the exit code.
                assert_eq!(h.status.len(), 2, "{what}: {:?}", h.status);
                assert_eq!(
                    h.status[0]["child-pid"].as_u64(),
                    Some(h.info_pid),
                    "{what}"
                );
                assert_eq!(h.status[1], serde_json::json!({"exit-code": 0}), "{what}");
            }
        }
    }
}

/// A sandbox that fails before its command (here at its `--chdir`) still
/// tells a child-pid on `--json-status-fd`, then no exit code, as bwrap.
#[test]
fn json_status_fd_tells_a_child_pid_when_the_command_never_starts() {
    for who in users("bwrap_status_no_command") {
        let args = [
            "--bind",
            "/",
            "/",
            "--json-status-fd",
            "1",
            "--chdir",
            "/nonexistent",
            "true",
        ];
        let mut runs = vec![("stockade", with_args(ours(who), &args, None))];
        match real(who) {
            Some(r) => runs.push(("bwrap", with_args(r, &args, None))),
            None => common::skip("bwrap_status_no_command", "the real bwrap cannot run here"),
        }
        for (name, o) in &runs {
            expect_code(o, 1, &format!("{name} {who:?}"));
            assert_eq!(
                stderr(o),
                "bwrap: Can't chdir to /nonexistent: No such file or directory\n"
            );
            let d = documents(&stdout(o));
            assert_eq!(d.len(), 1, "{name} {who:?}: {}", stdout(o));
            assert!(d[0]["child-pid"].as_u64().is_some_and(|p| p > 1), "{name}");
        }
    }
}
