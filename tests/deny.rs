//! Paths denied inside allowed trees (`--deny`, `--deny-glob`,
//! `filesystem.deny`): a hostile payload gets nothing of their content
//! through any route (the path itself, a hard link, a symlink, a second
//! bind of the same tree, /proc/self/fd, openat from a directory fd,
//! /proc/*/root, mount or umount), can neither write, rename, unlink nor
//! re-link them, while everything else in the tree stays usable. As root
//! and as uid 65534, in the jail and in the fallback without namespaces
//! (tests/payloads/chk_nouserns.c), where a denial inside a writable bind
//! is refused with the reason.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{stderr, stdout, Scratch, Who};

/// The secrets' content: none of it may reach the payload's output.
const SECRET: &str = "SECRET";

/// A project tree every user can read and write (so only the denial can
/// keep the payload out): `.env`, `sub/.env`, `.git/config`, `secrets/`,
/// `hard` (a hard link of `.env`), `soft` (a relative symlink to it),
/// `abs` (an absolute one), `keylink` (a hard link of `secrets/key`) and
/// `linkdir/.env`, a symlink to `other.txt` (what a glob matching a
/// symlink hides is what it names).
fn project(tag: &str) -> Scratch {
    let s = Scratch::new(tag).world_writable();
    let p = s.path();
    for d in ["sub", ".git", "secrets", "linkdir"] {
        std::fs::create_dir(p.join(d)).unwrap();
    }
    for (f, text) in [
        (".env", "SECRET-ENV\n"),
        ("sub/.env", "SECRET-SUB\n"),
        (".git/config", "token=SECRET-GIT\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        ("secrets/key", "SECRET-KEY\n"),
        ("a.txt", "sibling\n"),
        ("other.txt", "SECRET-OTHER\n"),
    ] {
        std::fs::write(p.join(f), text).unwrap();
    }
    std::fs::hard_link(p.join(".env"), p.join("hard")).unwrap();
    std::os::unix::fs::symlink(".env", p.join("soft")).unwrap();
    std::os::unix::fs::symlink(p.join(".env"), p.join("abs")).unwrap();
    std::fs::hard_link(p.join("secrets/key"), p.join("keylink")).unwrap();
    std::os::unix::fs::symlink("../other.txt", p.join("linkdir/.env")).unwrap();
    for e in walk(p) {
        let mode = if e.is_dir() { 0o777 } else { 0o666 };
        if !e.is_symlink() {
            std::fs::set_permissions(&e, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    s
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![p.to_path_buf()];
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// The hostile payload: every route to the denied paths beneath each base
/// directory given; `SIBLINGS` then uses the rest of the first one (`rw`:
/// writes too).
const HOSTILE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rw = sys.argv[1] == "rw"
bases = sys.argv[2:]
def say(*a):
    print(*a, flush=True)
def read(p):
    try:
        with open(p, "rb") as f:
            say("read", p, repr(f.read()))
    except OSError as e:
        say("read-refused", p, e.errno)
read("/single.env")
for b in bases:
    for n in [".env", "hard", "soft", "abs", "sub/.env", ".git/config", "secrets/key",
              "keylink", "other.txt", "linkdir/.env"]:
        read(os.path.join(b, n))
    for d in ["secrets", "."]:
        try:
            say("list", b, d, sorted(os.listdir(os.path.join(b, d))))
        except OSError as e:
            say("list-refused", b, d, e.errno)
    p = os.path.join(b, ".env")
    for mode in ["w", "a", "r+"]:
        try:
            open(p, mode).write("x")
            say("WROTE", p, mode)
        except OSError as e:
            say("write-refused", p, mode, e.errno)
    for op, args in [("rename", (p, p + ".moved")), ("unlink", (p,)),
                     ("link", (p, os.path.join(b, "relinked"))),
                     ("rename", (os.path.join(b, "secrets"), os.path.join(b, "s2"))),
                     ("rmdir", (os.path.join(b, "secrets"),))]:
        try:
            getattr(os, op)(*args)
            say("DID", op, args)
        except OSError as e:
            say(op + "-refused", e.errno)
    try:
        fd = os.open(p, os.O_PATH)
        read("/proc/self/fd/%d" % fd)
        # A hard link of the O_PATH fd into the writable temporary directory.
        stolen = os.path.join(os.environ.get("TMPDIR", "/tmp"), "stolen")
        try:
            os.link("/proc/self/fd/%d" % fd, stolen, follow_symlinks=True)
            say("LINKED", stolen)
            read(stolen)
        except OSError as e:
            say("fd-link-refused", e.errno)
        dfd = os.open(b, os.O_PATH | os.O_DIRECTORY)
        try:
            f = os.open(".env", os.O_RDONLY, dir_fd=dfd)
            say("openat", repr(os.read(f, 100)))
        except OSError as e:
            say("openat-refused", e.errno)
    except OSError as e:
        say("opath-refused", e.errno)
    say("umount", libc.umount2(p.encode(), 2))
    say("mount", libc.mount(b"/tmp", p.encode(), None, 4096, None))
    read("/proc/self/root" + p)
    read("/proc/1/root" + p)
b = bases[0]
with open(os.path.join(b, "a.txt")) as f:
    assert f.read() == "sibling\n"
with open(os.path.join(b, ".git/HEAD")) as f:
    assert f.read().startswith("ref:")
assert "HEAD" in os.listdir(os.path.join(b, ".git"))
if rw:
    with open(os.path.join(b, "a.txt"), "a") as f:
        f.write("more\n")
    for d in [b, os.path.join(b, ".git"), os.path.join(b, "sub")]:
        n = os.path.join(d, "new.txt")
        with open(n, "w") as f:
            f.write("new\n")
        os.rename(n, n + ".2")
        os.unlink(n + ".2")
say("siblings-ok")
"#;

/// What the payload printed must show nothing of the secrets, no write,
/// rename, unlink, link or mount that went through, and the siblings
/// used.
fn assert_nothing_leaked(o: &std::process::Output, r: &serde_json::Value, what: &str) {
    let out = r["stdout"]["data"].as_str().unwrap_or("");
    let all = format!("{out}\n{}\n{}", stdout(o), stderr(o));
    assert!(!all.contains(SECRET), "{what}: a secret leaked:\n{all}");
    for bad in ["WROTE", "DID", "LINKED", "mount 0", "umount 0"] {
        assert!(!out.contains(bad), "{what}: {bad}:\n{out}");
    }
    assert!(out.contains("siblings-ok"), "{what}:\n{out}\n{}", stderr(o));
    assert_eq!(r["status"], "exited", "{what}");
}

/// The host's tree is as it was.
fn assert_untouched(p: &Path, what: &str) {
    assert_eq!(
        std::fs::read_to_string(p.join(".env")).unwrap(),
        "SECRET-ENV\n",
        "{what}"
    );
    assert!(p.join("secrets/key").exists(), "{what}");
    for gone in [".env.moved", "relinked", "s2", ".stockade-cover-file"] {
        assert!(!p.join(gone).exists(), "{what}: {gone}");
    }
}

/// (path, reason) of each entry of the outcome's `masked` list.
fn masked(r: &serde_json::Value) -> Vec<(String, String, String)> {
    r["masked"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["path"].as_str().unwrap_or("").to_string(),
                        m["reason"].as_str().unwrap_or("").to_string(),
                        m["how"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn run(wrappers: &[&str], who: Who, flags: &[&str], cmd: &[&str]) -> std::process::Output {
    common::wrapped(wrappers, who, flags, cmd)
        .output()
        .expect("start stockade")
}

#[test]
fn denied_paths_stay_hidden_in_the_jail() {
    for who in common::users("denied_paths_stay_hidden_in_the_jail") {
        let s = project("deny-jail");
        let p = s.path().display().to_string();
        let (git, secrets) = (format!("{p}/.git/config"), format!("{p}/secrets"));
        let alias = format!("{p}:/alias");
        // A small read-only file bind is copied into the root: covered too.
        let single = format!("{p}/.env:/single.env");
        let flags = [
            "--workdir",
            &p,
            "--bind",
            &alias,
            "--ro-bind",
            &single,
            "--bind",
            &p,
            "--deny-glob",
            "**/.env",
            "--deny",
            &git,
            "--deny",
            &secrets,
            "--report",
            "-",
        ];
        let cmd = [
            "/usr/bin/python3",
            "-c",
            HOSTILE,
            "rw",
            "/work",
            "/alias",
            &p,
        ];
        let o = run(&[], who, &flags, &cmd);
        let r = common::last_valid_json(&o);
        if r["layers"]["user_namespace"]["state"] != "applied" {
            common::skip(
                "denied_paths_stay_hidden_in_the_jail",
                "user namespaces refused on this host",
            );
            return;
        }
        let what = format!("{who:?}: {r}");
        assert_nothing_leaked(&o, &r, &what);
        let out = r["stdout"]["data"].as_str().unwrap_or("");
        // The covers: empty, and an empty directory.
        assert!(out.contains("read /work/.env b''"), "{what}");
        assert!(out.contains("read /single.env b''"), "{what}");
        let single = (
            "/single.env".into(),
            "--deny-glob **/.env".into(),
            "cover".into(),
        );
        assert!(masked(&r).contains(&single), "{what}");
        assert!(
            out.contains("list /work . ['.env', '.git', 'a.txt'"),
            "{what}"
        );
        assert!(out.contains("list /alias secrets []"), "{what}");
        assert_untouched(s.path(), &what);
        let m = masked(&r);
        for base in ["/work", "/alias", p.as_str()] {
            for (rel, reason) in [
                (".env", "--deny-glob **/.env"),
                ("sub/.env", "--deny-glob **/.env"),
                (".git/config", "--deny"),
                ("secrets", "--deny"),
            ] {
                let want = (format!("{base}/{rel}"), reason.to_string(), "cover".into());
                assert!(m.contains(&want), "{what}: {want:?} not in {m:?}");
            }
            for (rel, reason) in [
                ("hard", format!("hard link of {p}/.env")),
                ("keylink", format!("hard link of {p}/secrets")),
                (
                    "other.txt",
                    format!("--deny-glob **/.env (through {p}/linkdir/.env)"),
                ),
            ] {
                let want = (format!("{base}/{rel}"), reason, "cover".to_string());
                assert!(m.contains(&want), "{what}: {want:?} not in {m:?}");
            }
        }
    }
}

#[test]
fn denied_paths_stay_hidden_without_namespaces() {
    // Also started by a root without CAP_SYS_ADMIN (a default Docker
    // container), as tests/fallback_fs.rs does.
    let wrappers: [&[&str]; 2] = [&["chk_nouserns"], &["fb_nosysadmin", "chk_nouserns"]];
    for (who, wrappers) in common::users("denied_paths_stay_hidden_without_namespaces")
        .into_iter()
        .flat_map(|w| wrappers.map(|x| (w, x)))
    {
        let s = project("deny-fallback");
        let p = s.path().display().to_string();
        let (git, secrets) = (format!("{p}/.git/config"), format!("{p}/secrets"));
        let flags = [
            "--ro-bind",
            &p,
            "--deny-glob",
            "**/.env",
            "--deny",
            &git,
            "--deny",
            &secrets,
            "--report",
            "-",
        ];
        let cmd = ["/usr/bin/python3", "-c", HOSTILE, "ro", &p];
        let o = run(wrappers, who, &flags, &cmd);
        let r = common::last_valid_json(&o);
        let what = format!("{who:?} {wrappers:?}: {r}\n{}", stderr(&o));
        assert_ne!(r["layers"]["user_namespace"]["state"], "applied", "{what}");
        if r["layers"]["landlock"]["state"] != "applied" {
            // Required once something is denied: the run must not go on.
            assert_eq!(r["status"], "setup_error", "{what}");
            common::skip(
                "denied_paths_stay_hidden_without_namespaces",
                "Landlock unavailable on this kernel",
            );
            return;
        }
        assert_nothing_leaked(&o, &r, &what);
        assert_untouched(s.path(), &what);
        // The directories on the way cannot be listed when a denied
        // directory lies beneath them (the project's own, for secrets/);
        // .git can (only a file is denied in it: the payload checks).
        let out = r["stdout"]["data"].as_str().unwrap_or("");
        for d in ["secrets", "."] {
            let refused = format!("list-refused {p} {d} 13");
            assert!(out.contains(&refused), "{what}: {refused}");
        }
        let m = masked(&r);
        for (rel, reason) in [
            (".env", "--deny-glob **/.env"),
            ("sub/.env", "--deny-glob **/.env"),
            (".git/config", "--deny"),
            ("secrets", "--deny"),
            ("hard", &format!("hard link of {p}/.env")),
            ("keylink", &format!("hard link of {p}/secrets")),
            (
                "other.txt",
                &format!("--deny-glob **/.env (through {p}/linkdir/.env)"),
            ),
        ] {
            let want = (format!("{p}/{rel}"), reason.to_string(), "landlock".into());
            assert!(m.contains(&want), "{what}: {want:?} not in {m:?}");
        }
    }
}

#[test]
fn a_denial_inside_a_writable_bind_is_refused_without_namespaces() {
    for who in common::users("a_denial_inside_a_writable_bind_is_refused_without_namespaces") {
        let s = project("deny-fallback-rw");
        let p = s.path().display().to_string();
        let env = format!("{p}/.env");
        let ran = format!("{p}/ran");
        let o = run(
            &["chk_nouserns"],
            who,
            &["--workdir", &p, "--deny", &env],
            &["/usr/bin/touch", &ran],
        );
        common::expect_code(&o, 125, "a denial in a writable bind, fallback");
        let want = format!("stockade: --deny: {env}: cannot be hidden without namespaces");
        assert!(
            stderr(&o).lines().any(|l| l.starts_with(&want)),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!Path::new(&ran).exists(), "{who:?}: the payload ran");
        assert_untouched(s.path(), "rw fallback");
    }
}

#[test]
fn bad_denials_are_refused_naming_the_flag_or_field() {
    let s = project("deny-bad");
    let p = s.path().display().to_string();
    let prof = s.join("p.toml");
    std::fs::write(&prof, "[filesystem]\ndeny = [\"a[x\"]\n").unwrap();
    let prof = prof.display().to_string();
    for (flags, want) in [
        (
            vec!["--deny", "/nonexistent/x"],
            "stockade: --deny: /nonexistent/x: no such file or directory".to_string(),
        ),
        (
            vec!["--deny-glob", "[x"],
            "stockade: --deny-glob: \"[x\": ".to_string(),
        ),
        (
            vec!["--profile", &prof],
            format!("stockade: {prof}:2:9: filesystem.deny: \"a[x\": "),
        ),
        (
            vec![
                "--workdir",
                &p,
                "--deny-glob",
                "**/nothing",
                "--deny-max-entries",
                "5",
            ],
            "stockade: --deny-glob: ".to_string(),
        ),
    ] {
        let o = common::run(Who::Root, &flags, &["/bin/true"]);
        assert_ne!(o.status.code(), Some(0), "{flags:?}");
        let err = stderr(&o);
        assert!(
            err.lines().any(|l| l.starts_with(&want)),
            "{flags:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_profile_denies_beneath_the_callers_home() {
    let who = Who::Root;
    let s = project("deny-home");
    let p = s.path().display().to_string();
    let prof = s.join("p.toml");
    // ~/.aws is not there: a shared profile's entry that hides nothing.
    std::fs::write(
        &prof,
        "[filesystem]\ndeny = [\"~/.env\", \"~/.aws\", \"sub/*\"]\n",
    )
    .unwrap();
    let mut c = common::stockade(who);
    c.env("HOME", &p).args(["run", "--profile"]).arg(&prof);
    c.args(["--workdir", &p, "--report", "-", "--"]);
    c.args(["/bin/sh", "-c", "cat /work/.env /work/sub/.env /work/a.txt"]);
    let o = c.output().expect("start stockade");
    let r = common::last_json(&o);
    if r["layers"]["user_namespace"]["state"] != "applied" {
        common::skip(
            "a_profile_denies_beneath_the_callers_home",
            "user namespaces refused",
        );
        return;
    }
    let out = r["stdout"]["data"].as_str().unwrap_or("");
    assert_eq!(out, "sibling\n", "{r}");
    let m = masked(&r);
    assert!(
        m.contains(&("/work/.env".into(), "--deny".into(), "cover".into())),
        "{m:?}"
    );
    let g = "--deny-glob sub/*".to_string();
    assert!(
        m.contains(&("/work/sub/.env".into(), g, "cover".into())),
        "{m:?}"
    );
}

#[test]
fn a_hard_link_outside_the_searched_trees_refuses_the_run() {
    // The link lies in a directory no bind shows; stockade cannot know
    // that, only that it was not found in the trees it searched: where a
    // bind it did not search (the system's /usr) is on the same
    // filesystem, the run is refused; elsewhere it goes on, masked.
    let who = Who::Root;
    let s = project("deny-unfound");
    let elsewhere = Scratch::new("deny-elsewhere");
    std::fs::hard_link(s.join(".env"), elsewhere.join("copy")).unwrap();
    let p = s.path().display().to_string();
    let env = format!("{p}/.env");
    let o = run(
        &[],
        who,
        &["--workdir", &p, "--deny", &env, "--report", "-"],
        &["/bin/cat", "/work/.env"],
    );
    let same_fs = {
        use std::os::unix::fs::MetadataExt;
        let dev = |x: &Path| std::fs::metadata(x).map(|m| m.dev()).ok();
        dev(s.path()) == dev(Path::new("/usr"))
    };
    let err = stderr(&o);
    if same_fs {
        common::expect_code(&o, 125, "an unfound hard link");
        let want = format!(
            "stockade: --deny: {env}: has 3 hard links and only 2 were found in the trees searched; \
             another may be reachable through the bind of /usr"
        );
        assert!(err.lines().any(|l| l.starts_with(&want)), "{err}");
    } else {
        let r = common::last_valid_json(&o);
        assert!(!stdout(&o).contains(SECRET), "{r}");
        assert_eq!(r["status"], "exited", "{r}");
    }
}

#[test]
fn another_mount_of_the_tree_on_the_host_is_covered_too() {
    // The host shows the project at a second path through a bind mount of
    // its own (made here in a mount namespace of the test's, so nothing
    // outlives it); both paths are bound into the jail, one denial names
    // the first: the second is covered as well.
    if !common::is_root() {
        common::skip(
            "another_mount_of_the_tree_on_the_host_is_covered_too",
            "not root: cannot make a bind mount on the host",
        );
        return;
    }
    let s = project("deny-mount");
    let q = Scratch::new("deny-mount-alias");
    let (p, qs) = (
        s.path().display().to_string(),
        q.path().display().to_string(),
    );
    let script = format!("mount --bind {p} {qs} && exec \"$@\"",);
    let mut c = std::process::Command::new("/usr/bin/unshare");
    c.args([
        "-m",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        &script,
        "sh",
    ]);
    c.arg(common::binary()).arg("run");
    let secrets = format!("{p}/secrets");
    let (bp, bq) = (format!("{p}:/p"), format!("{qs}:/q"));
    c.args([
        "--bind", &bp, "--bind", &bq, "--deny", &secrets, "--report", "-", "--",
    ]);
    c.args([
        "/bin/sh",
        "-c",
        "cat /p/secrets/key /q/secrets/key; ls /q/secrets; cat /q/a.txt",
    ]);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null());
    let o = c.output().expect("start unshare");
    let r = common::last_valid_json(&o);
    if r["layers"]["user_namespace"]["state"] != "applied" {
        common::skip(
            "another_mount_of_the_tree_on_the_host_is_covered_too",
            "user namespaces refused",
        );
        return;
    }
    assert_eq!(r["stdout"]["data"], "sibling\n", "{r}");
    let m = masked(&r);
    let want = (
        "/q/secrets".to_string(),
        format!("--deny (another mount of {p}/secrets)"),
        "cover".to_string(),
    );
    assert!(m.contains(&want), "{want:?} not in {m:?}");
    // The test's mount namespace is gone with unshare: the host never had
    // the bind.
    assert!(!q.join("a.txt").exists());
}
