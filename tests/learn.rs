//! `stockade run --learn FILE`: the profile learned from a run lets the
//! same program pass and refuses what it did not use; nothing written
//! during the learning run reaches the host. As root and as uid 65534.
//!
//! The learning run shows the host's /var read-only, so each test works in
//! a directory of its own under /var/tmp (the host's /tmp is the jail's
//! own tmpfs there).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{expect_code, report, run_stdin, stderr, stdout, Who};

/// A fresh directory under /var/tmp every user can enter, removed when
/// dropped.
struct VarScratch(PathBuf);

impl VarScratch {
    fn new(tag: &str) -> VarScratch {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = PathBuf::from(format!(
            "/var/tmp/stockade-learn-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        chmod(&p, 0o755);
        VarScratch(p)
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    /// A directory for the learned profiles, writable by the caller.
    fn profiles(&self) -> PathBuf {
        let d = self.join("profiles");
        std::fs::create_dir_all(&d).unwrap();
        chmod(&d, 0o777);
        d
    }
}

impl Drop for VarScratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The learned profile, parsed.
fn learned(p: &Path) -> toml::Table {
    let text = std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: no learned profile: {e}", p.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: not TOML: {e}\n{text}", p.display()))
}

/// The learned binds as (src, writable), in order.
fn binds(t: &toml::Table) -> Vec<(String, bool)> {
    let Some(fs) = t.get("filesystem") else {
        return Vec::new();
    };
    fs["bind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert!(b.get("dst").is_none(), "{b}: same path expected");
            (
                b["src"].as_str().unwrap().to_string(),
                b.get("writable").and_then(|w| w.as_bool()).unwrap_or(false),
            )
        })
        .collect()
}

/// One line on stderr (of stockade's) says what was learned and where.
fn expect_summary(o: &Output, file: &Path) {
    let want = format!("stockade: learn: wrote {}", file.display());
    let own: Vec<String> = stderr(o)
        .lines()
        .filter(|l| l.starts_with("stockade: "))
        .map(str::to_string)
        .collect();
    assert_eq!(own.len(), 1, "{own:?}");
    assert!(
        own[0].starts_with(&want),
        "no summary line {want:?}: {own:?}"
    );
}

fn profile_check(who: Who, file: &Path) {
    let o = common::stockade(who)
        .args(["profile", "check", s(file)])
        .output()
        .unwrap();
    expect_code(&o, 0, &format!("profile check {}", file.display()));
}

#[test]
fn evaluator_corpus_round_trip_passes_under_the_learned_profile() {
    let (expected, input) = common::evaluator_cases();
    for who in common::users("evaluator_corpus_round_trip_passes_under_the_learned_profile") {
        let d = VarScratch::new("corpus");
        let eval = d.join("eval");
        common::copy_evaluators(&eval);
        let profiles = d.profiles();
        for (name, score) in expected.as_object().unwrap() {
            let what = format!("{name} as {who:?}");
            let prog = eval.join(format!("{name}.py"));
            let file = profiles.join(format!("{name}.toml"));
            let score_of = |o: &Output, phase: &str| {
                let (r, v) = common::evaluator_result(o, &format!("{what} ({phase})"));
                assert_eq!(v["score"], *score, "{what} ({phase}): {v}");
                r
            };
            // Learn.
            let o = run_stdin(
                who,
                &["--profile", "python", "--learn", s(&file), "--report", "-"],
                &["python3", s(&prog)],
                &input,
            );
            expect_code(&o, 0, &format!("{what}: learning"));
            expect_summary(&o, &file);
            let r = score_of(&o, "learning");
            assert_eq!(r["layers"]["seccomp"]["state"], "applied", "{what}");
            let t = learned(&file);
            assert_eq!(t["extends"].as_str(), Some("python"), "{what}");
            assert_eq!(
                binds(&t),
                vec![(s(&prog).to_string(), false)],
                "{what}: exactly the evaluator's file, read-only: {t}"
            );
            assert!(t.get("network").is_none(), "{what}: no network used: {t}");
            profile_check(who, &file);
            // Enforce.
            let o = run_stdin(
                who,
                &["--profile", s(&file), "--report", "-"],
                &["python3", s(&prog)],
                &input,
            );
            expect_code(&o, 0, &format!("{what}: under the learned profile"));
            let r = score_of(&o, "enforced");
            assert_eq!(r["layers"]["seccomp"]["state"], "applied", "{what}");
            assert_eq!(r["layers"]["landlock"]["state"], "applied", "{what}");
            assert!(r.get("learned").is_none(), "{what}: not learning: {r}");
            // What it did not use, beside it, stays out of reach.
            let o = run_stdin(
                who,
                &["--profile", s(&file)],
                &[
                    "python3",
                    "-c",
                    &format!("open({:?}).read()", s(&eval.join("expected.json"))),
                ],
                b"",
            );
            assert_ne!(o.status.code(), Some(0), "{what}: read expected.json");
            assert!(
                stderr(&o).contains("FileNotFoundError"),
                "{what}: {}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn a_read_file_and_a_written_directory_become_exactly_those_binds() {
    for who in common::users("a_read_file_and_a_written_directory_become_exactly_those_binds") {
        let d = VarScratch::new("binds");
        std::fs::create_dir_all(d.join("in")).unwrap();
        std::fs::write(d.join("in/data.txt"), "the data\n").unwrap();
        std::fs::write(d.join("in/other.txt"), "not used\n").unwrap();
        chmod(&d.join("in"), 0o755);
        chmod(&d.join("in/data.txt"), 0o644);
        chmod(&d.join("in/other.txt"), 0o644);
        std::fs::create_dir_all(d.join("out")).unwrap();
        chmod(&d.join("out"), 0o777);
        let file = d.profiles().join("p.toml");
        let data = d.join("in/data.txt");
        let out = d.join("out");
        let script = format!(
            "cat {data}; echo result > {out}/new.txt; cat {out}/new.txt",
            data = s(&data),
            out = s(&out)
        );
        let o = run_stdin(
            who,
            &["--learn", s(&file)],
            &["/bin/sh", "-c", &script],
            b"",
        );
        expect_summary(&o, &file);
        assert!(stdout(&o).contains("the data"), "{}", stderr(&o));
        // The write was refused to the learning run, and reached nothing.
        assert!(!out.join("new.txt").exists(), "learning wrote to the host");
        let t = learned(&file);
        assert_eq!(t["extends"].as_str(), Some("shell"));
        assert_eq!(
            binds(&t),
            vec![(s(&data).to_string(), false), (s(&out).to_string(), true)],
            "{t}"
        );
        assert!(t.get("network").is_none(), "no network used: {t}");
        profile_check(who, &file);
        // Under it: the same program passes…
        let o = run_stdin(
            who,
            &["--profile", s(&file)],
            &["/bin/sh", "-c", &script],
            b"",
        );
        expect_code(&o, 0, &format!("the learned profile as {who:?}"));
        assert_eq!(stdout(&o), "the data\nresult\n");
        assert_eq!(
            std::fs::read_to_string(out.join("new.txt")).unwrap(),
            "result\n"
        );
        // …and what it did not use stays out of reach.
        let other = d.join("in/other.txt");
        let o = run_stdin(
            who,
            &["--profile", s(&file)],
            &["/bin/sh", "-c", &format!("cat {}", s(&other))],
            b"",
        );
        assert_ne!(
            o.status.code(),
            Some(0),
            "read an unused file: {}",
            stdout(&o)
        );
        assert!(!stdout(&o).contains("not used"));
        let o = run_stdin(
            who,
            &["--profile", s(&file)],
            &[
                "/bin/sh",
                "-c",
                &format!("echo x > {}", s(&d.join("in/new"))),
            ],
            b"",
        );
        assert_ne!(o.status.code(), Some(0), "wrote beside the read file");
        assert!(!d.join("in/new").exists());
    }
}

#[test]
fn nothing_written_while_learning_reaches_the_hosts_files() {
    for who in common::users("nothing_written_while_learning_reaches_the_hosts_files") {
        let d = VarScratch::new("hostile");
        let victim = d.join("victim.txt");
        std::fs::write(&victim, "intact\n").unwrap();
        chmod(&victim, 0o666);
        let open = d.join("open");
        std::fs::create_dir_all(&open).unwrap();
        chmod(&open, 0o777);
        let file = d.profiles().join("p.toml");
        // Everything a payload might try on files every user may write.
        let script = format!(
            "echo pwned > {v}; echo more >> {v}; truncate -s 0 {v}; rm -f {v}; \
             mv {v} {o}/moved; ln -s /etc/shadow {o}/link; mkdir {o}/dir; touch {o}/file; \
             chmod 777 {v}; true",
            v = s(&victim),
            o = s(&open),
        );
        let o = run_stdin(
            who,
            &["--learn", s(&file)],
            &["/bin/sh", "-c", &script],
            b"",
        );
        expect_code(&o, 0, &format!("learning as {who:?}"));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "intact\n");
        assert_eq!(
            std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o666
        );
        assert_eq!(
            std::fs::read_dir(&open).unwrap().count(),
            0,
            "{}",
            open.display()
        );
        // What it tried is in the learned profile, writable.
        let t = learned(&file);
        let b = binds(&t);
        let writable = |p: &Path| b.iter().any(|(src, w)| *w && p.starts_with(src));
        assert!(writable(&open) && writable(&victim), "{t}");
        assert!(
            b.iter().all(|(src, _)| Path::new(src).starts_with(&d.0)),
            "{t}"
        );
    }
}

#[test]
fn hosts_reached_through_the_proxy_are_learned_and_others_refused() {
    let fetch =
        |url: &str| format!("curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}\\n' {url}");
    for who in common::users("hosts_reached_through_the_proxy_are_learned_and_others_refused") {
        let d = VarScratch::new("hosts");
        let file = d.profiles().join("p.toml");
        let pypi = fetch("https://pypi.org/simple/six/");
        let o = run_stdin(who, &["--learn", s(&file)], &["/bin/sh", "-c", &pypi], b"");
        expect_code(&o, 0, &format!("learning as {who:?}"));
        assert_eq!(stdout(&o).trim(), "200", "{}", stderr(&o));
        let t = learned(&file);
        let allow: Vec<&str> = t["network"]["allow"]
            .as_array()
            .unwrap_or_else(|| panic!("no network.allow: {t}"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(allow, vec!["pypi.org:443"], "{t}");
        profile_check(who, &file);
        // The same host under it…
        let o = run_stdin(
            who,
            &["--profile", s(&file)],
            &["/bin/sh", "-c", &pypi],
            b"",
        );
        expect_code(&o, 0, &format!("pypi under the learned profile as {who:?}"));
        assert_eq!(stdout(&o).trim(), "200");
        // …another one refused by the proxy, and said so.
        let other = fetch("https://deb.debian.org/");
        let o = run_stdin(
            who,
            &["--profile", s(&file), "--report", "-"],
            &["/bin/sh", "-c", &other],
            b"",
        );
        let r = report(&o);
        assert_ne!(r["exit_code"], 0, "{r}");
        let denied = r["denials"].as_array().cloned().unwrap_or_default();
        assert!(
            denied
                .iter()
                .any(|x| x["kind"] == "network" && x["host"] == "deb.debian.org"),
            "{r}"
        );
    }
}

#[test]
fn a_syscall_outside_the_allowlist_is_learned_and_another_stays_refused() {
    // io_setup(0, NULL): EFAULT from the kernel when it runs, EPERM from
    // the filter when refused; io_destroy(0) EINVAL when it runs.
    let prog = "import ctypes, os, sys\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                nr = {'io_setup': 206, 'io_destroy': 207}[sys.argv[1]]\n\
                r = libc.syscall(nr, 0, 0)\n\
                print(sys.argv[1], os.strerror(ctypes.get_errno()) if r < 0 else 'ok')\n";
    if std::env::consts::ARCH != "x86_64" {
        common::skip(
            "a_syscall_outside_the_allowlist_is_learned_and_another_stays_refused",
            "the probe uses x86_64 syscall numbers",
        );
        return;
    }
    for who in common::users("a_syscall_outside_the_allowlist_is_learned_and_another_stays_refused")
    {
        let d = VarScratch::new("syscalls");
        let py = d.join("probe.py");
        std::fs::write(&py, prog).unwrap();
        chmod(&py, 0o644);
        let file = d.profiles().join("p.toml");
        let o = run_stdin(
            who,
            &["--profile", "python", "--learn", s(&file)],
            &["python3", s(&py), "io_setup"],
            b"",
        );
        expect_code(&o, 0, &format!("learning as {who:?}"));
        assert_eq!(stdout(&o).trim(), "io_setup Bad address", "{}", stderr(&o));
        let t = learned(&file);
        let allow: Vec<&str> = t["seccomp"]["allow"]
            .as_array()
            .unwrap_or_else(|| panic!("no seccomp.allow: {t}"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(allow, vec!["io_setup"], "{t}");
        profile_check(who, &file);
        let o = run_stdin(
            who,
            &["--profile", s(&file)],
            &["python3", s(&py), "io_setup"],
            b"",
        );
        expect_code(
            &o,
            0,
            &format!("io_setup under the learned profile as {who:?}"),
        );
        assert_eq!(stdout(&o).trim(), "io_setup Bad address");
        let o = run_stdin(
            who,
            &["--profile", s(&file), "--report", "-"],
            &["python3", s(&py), "io_destroy"],
            b"",
        );
        let r = report(&o);
        let out = r["stdout"]["data"].as_str().unwrap_or_default();
        assert_eq!(out.trim(), "io_destroy Operation not permitted", "{r}");
    }
}

#[test]
fn an_unwritable_learn_file_is_one_line_before_the_run() {
    for who in common::users("an_unwritable_learn_file_is_one_line_before_the_run") {
        let d = VarScratch::new("unwritable");
        let marker = d.join("ran");
        let missing = d.join("no/such/dir/p.toml");
        let o = run_stdin(
            who,
            &["--learn", s(&missing), "--ro-bind", s(&d.0)],
            &["/bin/sh", "-c", "echo RAN"],
            b"",
        );
        expect_code(&o, 125, "a missing directory");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("stockade: --learn: "), "{err}");
        assert!(!stdout(&o).contains("RAN"), "the command ran");
        assert!(!marker.exists());
        assert!(!missing.exists());
        // A directory the caller may not write.
        let ro = d.join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        chmod(&ro, 0o555);
        if who == Who::Nobody || !common::is_root() {
            let o = run_stdin(
                who,
                &["--learn", s(&ro.join("p.toml"))],
                &["/bin/sh", "-c", "echo RAN"],
                b"",
            );
            expect_code(&o, 125, "an unwritable directory");
            assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
            assert!(!stdout(&o).contains("RAN"));
        }
    }
}

#[test]
fn a_command_that_does_not_run_writes_no_profile_and_leaves_nothing() {
    for who in common::users("a_command_that_does_not_run_writes_no_profile_and_leaves_nothing") {
        let d = VarScratch::new("norun");
        let profiles = d.profiles();
        let file = profiles.join("p.toml");
        let o = run_stdin(who, &["--learn", s(&file)], &["/no/such/command"], b"");
        expect_code(&o, 127, "a missing command");
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        let left: Vec<_> = std::fs::read_dir(&profiles).unwrap().flatten().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        // Where user namespaces are refused, learning refuses to run (the
        // host's trees could not be shown read-only, nor the hosts
        // recorded): one line, nothing written, nothing left.
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--learn", s(&file)],
            &["/bin/sh", "-c", "echo RAN"],
        )
        .output()
        .unwrap();
        expect_code(&o, 125, "learning without user namespaces");
        assert!(!stdout(&o).contains("RAN"));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("stockade: create namespaces: "), "{err}");
        let left: Vec<_> = std::fs::read_dir(&profiles).unwrap().flatten().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
