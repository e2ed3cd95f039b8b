//! `stockade bwrap` beyond bwrap: where user namespaces are refused
//! (tests/payloads/chk_nouserns.c, as a container runtime's seccomp
//! profile refuses them) it runs without them, Landlock on the binds; and
//! stockade's own layers, off by default, switched on by
//! `STOCKADE_PROFILE` or `--stockade-*`. As root and as uid 65534.

mod common;

use std::process::Output;

use common::{expect_code, stderr, stdout, users, Scratch, Who};

/// How stockade is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Namespaces allowed.
    Jail,
    /// Under chk_nouserns: user namespaces refused.
    Refused,
}

/// `[chk_nouserns] stockade bwrap ARGS…` as `who`, with `env` added.
fn bwrap(mode: Mode, who: Who, env: &[(&str, &str)], args: &[&str]) -> Output {
    let wrappers: &[&str] = match mode {
        Mode::Jail => &[],
        Mode::Refused => &["chk_nouserns"],
    };
    let mut c = common::stockade_under(wrappers, who);
    c.arg("bwrap").args(args).envs(env.iter().copied());
    c.output().expect("start stockade bwrap")
}

/// Without Landlock the fallback refuses to run (it is its only file
/// layer): skip the tests that need it.
fn landlock(test: &str) -> bool {
    // The kernel's own answer (securityfs, where
    // /sys/kernel/security/lsm lives, may not be mounted).
    let abi = common::landlock_abi();
    if abi > 0 {
        return true;
    }
    common::skip(
        test,
        "Landlock is not enabled on this host (no Landlock ABI)",
    );
    false
}

/// The users to test as ([`users`]), none where there is no Landlock.
fn landlocked_users(test: &str) -> Vec<Who> {
    match landlock(test) {
        true => users(test),
        false => Vec::new(),
    }
}

/// A root of the host's own system directories, each bound where it is
/// (the only kind of bind the fallback can honour), and /dev.
const SYSTEM: &[&str] = &[
    "--ro-bind",
    "/usr",
    "/usr",
    "--ro-bind",
    "/bin",
    "/bin",
    "--ro-bind",
    "/lib",
    "/lib",
    "--ro-bind-try",
    "/lib64",
    "/lib64",
    "--ro-bind",
    "/etc",
    "/etc",
    "--dev",
    "/dev",
];

fn args<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    SYSTEM.iter().chain(head).chain(tail).copied().collect()
}

/// The lines of stderr that stockade itself wrote (`bwrap: …`).
fn ours(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("bwrap: ") || l.starts_with("stockade"))
        .map(str::to_string)
        .collect()
}

/// Exit 1 and one line of stderr that starts with `start`: how stockade
/// refuses what it cannot honour.
fn one_line_error(o: &Output, start: &str, what: &str) {
    expect_code(o, 1, what);
    let e = stderr(o);
    assert_eq!(e.lines().count(), 1, "{what}: {e}");
    assert!(e.starts_with(start), "{what}: {e}");
}

/// A `--stockade-report` file in a directory every user may write.
struct Report {
    _dir: Scratch,
    path: String,
}

impl Report {
    fn new(tag: &str) -> Report {
        let dir = Scratch::new(tag).world_writable();
        let path = dir.arg("outcome.json");
        Report { _dir: dir, path }
    }

    /// The outcome written there.
    fn read(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&self.path).unwrap()).unwrap()
    }
}

/// A scratch tree every user may write: in/ (bound writable), ro/f (bound
/// read-only), t/f (covered by a --tmpfs), secret (never bound).
fn tree() -> Scratch {
    let s = Scratch::new("bwfb").world_writable();
    for d in ["in", "ro", "t"] {
        std::fs::create_dir(s.join(d)).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
        std::fs::set_permissions(s.join(d), mode).unwrap();
    }
    std::fs::write(s.join("ro/f"), "readable\n").unwrap();
    std::fs::write(s.join("t/f"), "hidden\n").unwrap();
    std::fs::write(s.join("secret"), "secret\n").unwrap();
    // Writable by whoever the payload runs as (a leased uid when root
    // starts the fallback): only Landlock may refuse it.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o666);
    std::fs::set_permissions(s.join("secret"), mode).unwrap();
    s
}

#[test]
fn fallback_reaches_only_the_binds() {
    for who in landlocked_users("fallback_reaches_only_the_binds") {
        let s = tree();
        let p = |x: &str| s.arg(x);
        let script = format!(
            "cat {ro}/f; echo w > {inn}/w && echo wrote-in; echo w > {ro}/w 2>/dev/null || echo ro-refused; \
             cat {secret} 2>/dev/null || echo secret-refused; cat {t}/f 2>/dev/null || echo tmpfs-refused; \
             ls /proc/1 >/dev/null 2>&1 || echo proc-refused; echo x > /dev/null && echo null-ok",
            ro = p("ro"), inn = p("in"), secret = p("secret"), t = p("t")
        );
        let (ro, inn, t) = (p("ro"), p("in"), p("t"));
        let o = bwrap(
            Mode::Refused,
            who,
            &[],
            &args(
                &[
                    "--ro-bind",
                    &ro,
                    &ro,
                    "--bind",
                    &inn,
                    &inn,
                    "--tmpfs",
                    &t,
                    "--proc",
                    "/proc",
                ],
                &["--", "/bin/sh", "-c", &script],
            ),
        );
        expect_code(&o, 0, &format!("{who:?}"));
        assert_eq!(
            stdout(&o),
            "readable\nwrote-in\nro-refused\nsecret-refused\ntmpfs-refused\nproc-refused\nnull-ok\n",
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(s.join("in/w").exists() && !s.join("ro/w").exists());
        // One line says so, naming what the ops made unreachable.
        let lines = ours(&o);
        assert_eq!(lines.len(), 1, "{who:?}: {lines:?}");
        assert!(
            lines[0].starts_with("bwrap: user namespaces are refused here"),
            "{lines:?}"
        );
        assert!(lines[0].contains("unreachable: /dev (all but"), "{lines:?}");
        assert!(
            lines[0].contains(&t) && lines[0].contains("/proc"),
            "{lines:?}"
        );
    }
}

#[test]
fn fallback_cuts_narrower_ops_out_of_wider_binds() {
    for who in landlocked_users("fallback_cuts_narrower_ops_out_of_wider_binds") {
        let s = tree();
        let root = s.path().display().to_string();
        let p = |x: &str| s.arg(x);
        let (ro, inn, t) = (p("ro"), p("in"), p("t"));
        // Writable as a whole, then ro/ read-only, in/ remounted
        // read-only, t/ a tmpfs: Landlock alone must not leave them as
        // the first bind made them. The rest stays writable, but no new
        // entry can be made in the directory they were cut out of (the
        // grant is now on each of its entries, not on itself).
        let script = format!(
            "echo w >> {root}/secret && echo top-ok; echo w > {root}/new 2>/dev/null || echo new-refused; echo w > {ro}/w 2>/dev/null || echo ro-refused; \
             cat {ro}/f; echo w > {inn}/w 2>/dev/null || echo in-refused; cat {t}/f 2>/dev/null || echo t-refused"
        );
        let o = bwrap(
            Mode::Refused,
            who,
            &[],
            &args(
                &[
                    "--bind",
                    &root,
                    &root,
                    "--ro-bind",
                    &ro,
                    &ro,
                    "--remount-ro",
                    &inn,
                    "--tmpfs",
                    &t,
                ],
                &["/bin/sh", "-c", &script],
            ),
        );
        expect_code(&o, 0, &format!("{who:?}"));
        assert_eq!(
            stdout(&o),
            "top-ok\nnew-refused\nro-refused\nreadable\nin-refused\nt-refused\n",
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!s.join("ro/w").exists() && !s.join("in/w").exists());
    }
}

#[test]
fn fallback_refuses_what_it_cannot_build() {
    let s = tree();
    let (inn, ro) = (s.arg("in"), s.arg("ro"));
    let missing_link = s.arg("no-such-link");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["--bind", &inn, "/work"], format!("--bind {inn} /work")),
        (
            vec!["--symlink", "usr/bin", &missing_link],
            format!("--symlink usr/bin {missing_link}"),
        ),
        (vec!["--chmod", "0700", &ro], format!("--chmod {ro}")),
        (vec!["--dev", "/mydev"], "--dev /mydev".into()),
        (
            vec!["--unshare-uts", "--hostname", "h"],
            "--hostname".into(),
        ),
        (
            vec!["--dir", "/no-such-dir-here"],
            "--dir /no-such-dir-here".into(),
        ),
    ];
    for who in users("fallback_refuses_what_it_cannot_build") {
        for (ops, what) in &cases {
            let o = bwrap(Mode::Refused, who, &[], &args(ops, &["/bin/true"]));
            let head = format!(
                "bwrap: {what}: cannot be honoured without a mount namespace (user namespaces are refused here): "
            );
            one_line_error(&o, &head, &format!("{who:?} {ops:?}"));
        }
        // Nothing was changed on the host.
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&ro).unwrap().permissions());
        assert_eq!(mode & 0o7777, 0o777);
    }
}

#[test]
fn unshare_user_makes_the_namespace_mandatory_as_in_bwrap() {
    for who in users("unshare_user_makes_the_namespace_mandatory_as_in_bwrap") {
        let o = bwrap(
            Mode::Refused,
            who,
            &[],
            &args(&["--unshare-user"], &["/bin/true"]),
        );
        expect_code(&o, 1, &format!("{who:?}"));
        assert_eq!(
            stderr(&o),
            "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.\n"
        );
        if !landlock("unshare_user_makes_the_namespace_mandatory_as_in_bwrap") {
            continue;
        }
        // -try (and --unshare-all, which tries) is not mandatory.
        for opt in ["--unshare-user-try", "--unshare-all"] {
            let o = bwrap(
                Mode::Refused,
                who,
                &[],
                &args(&[opt], &["/bin/echo", "ran"]),
            );
            expect_code(&o, 0, &format!("{who:?} {opt}"));
            assert_eq!(stdout(&o), "ran\n");
        }
    }
}

/// bwrap cannot mount an overlay without namespaces, nor can stockade:
/// where they are refused, a run with one fails as bwrap's does there,
/// and nothing of it ran.
#[test]
fn an_overlay_makes_the_namespace_mandatory_as_in_bwrap() {
    let s = tree();
    let (inn, ro) = (s.arg("in"), s.arg("ro"));
    let ran = s.arg("in/ran");
    let overlays: [&[&str]; 3] = [
        &["--overlay-src", &ro, "--overlay", &inn, &s.arg("t"), "/o"],
        &["--overlay-src", &ro, "--tmp-overlay", &inn],
        &[
            "--overlay-src",
            &ro,
            "--overlay-src",
            &inn,
            "--ro-overlay",
            &ro,
        ],
    ];
    for who in users("an_overlay_makes_the_namespace_mandatory_as_in_bwrap") {
        for ops in overlays {
            let o = bwrap(
                Mode::Refused,
                who,
                &[],
                &args(ops, &["/bin/sh", "-c", &format!("echo > {ran}")]),
            );
            let what = format!("{who:?} {ops:?}");
            expect_code(&o, 1, &what);
            assert_eq!(
                stderr(&o),
                "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.\n",
                "{what}"
            );
            assert!(!s.join("in/ran").exists(), "{what}");
        }
    }
}

/// A memory hog under `--stockade-memory` never survives; its report says
/// memory_limit (or, under RLIMIT_AS, that the verdict is only inferred).
#[test]
fn stockade_memory_ends_a_hog_and_the_report_says_so() {
    for mode in [Mode::Jail, Mode::Refused] {
        if mode == Mode::Refused && !landlock("stockade_memory_ends_a_hog_and_the_report_says_so") {
            continue;
        }
        for who in users("stockade_memory_ends_a_hog_and_the_report_says_so") {
            let report = Report::new("bwfb-report");
            let hog = "x = []\nwhile len(x) < 1024: x.append(bytearray(1 << 20))\nprint('survived', len(x))";
            let o = bwrap(
                mode,
                who,
                &[],
                &args(
                    // --proc: where the limit is RLIMIT_AS, the verdict
                    // comes from the peak init samples in the jail's /proc.
                    &[
                        "--proc",
                        "/proc",
                        "--stockade-memory",
                        "64m",
                        "--stockade-report",
                        &report.path,
                    ],
                    &["/usr/bin/python3", "-c", hog],
                ),
            );
            assert_ne!(o.status.code(), Some(0), "{mode:?} {who:?}: {}", stderr(&o));
            assert!(!stdout(&o).contains("survived"));
            let v = report.read();
            // With a memory controller the verdict is counted; under
            // RLIMIT_AS it is inferred from the peak init samples, which a
            // hog that dies between two samples escapes: then the run is
            // `exited` (MemoryError) and the outcome must say the verdict
            // is only inferred.
            let mem = &v["limits"]["memory"];
            let inferred = mem["enforced_by"] == "rlimit_as" && mem["verdict"] == "inferred";
            assert!(
                v["status"] == "memory_limit" || (inferred && v["status"] == "exited"),
                "{mode:?} {who:?}: {v}"
            );
            assert_eq!(mem["limit"], 64 << 20, "{v}");
        }
    }
}

#[test]
fn stockade_timeout_and_pids_are_reported() {
    for who in users("stockade_timeout_and_pids_are_reported") {
        let report = Report::new("bwfb-timeout");
        let o = bwrap(
            Mode::Jail,
            who,
            &[],
            &args(
                &[
                    "--stockade-timeout",
                    "1s",
                    "--stockade-pids",
                    "16",
                    "--stockade-report",
                    &report.path,
                ],
                &["/bin/sleep", "600"],
            ),
        );
        assert_ne!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let v = report.read();
        assert_eq!(v["status"], "timeout", "{who:?}: {v}");
        assert_eq!(v["limits"]["pids"]["limit"], 16, "{v}");
    }
}

/// Off by default: bwrap's root tmpfs is writable where nothing is
/// mounted. STOCKADE_PROFILE=python (or --stockade-landlock) puts Landlock
/// on: only what the ops mount is reachable.
#[test]
fn stockade_profile_puts_landlock_on_the_binds() {
    let cmd = [
        "--dir",
        "/d",
        "--",
        "/bin/sh",
        "-c",
        "touch /d/x 2>/dev/null && echo wrote || echo denied",
    ];
    for who in landlocked_users("stockade_profile_puts_landlock_on_the_binds") {
        let plain = bwrap(Mode::Jail, who, &[], &args(&[], &cmd));
        expect_code(&plain, 0, &format!("{who:?}"));
        assert_eq!(stdout(&plain), "wrote\n", "{who:?}: {}", stderr(&plain));
        let env = [("STOCKADE_PROFILE", "python")];
        let on = bwrap(Mode::Jail, who, &env, &args(&[], &cmd));
        assert_eq!(stdout(&on), "denied\n", "{who:?}: {}", stderr(&on));
        let flag = bwrap(Mode::Jail, who, &[], &args(&["--stockade-landlock"], &cmd));
        assert_eq!(stdout(&flag), "denied\n", "{who:?}: {}", stderr(&flag));
        // In the fallback, a host path outside the binds, profile or not.
        let s = tree();
        let secret = s.arg("secret");
        let o = bwrap(Mode::Refused, who, &env, &args(&[], &["/bin/cat", &secret]));
        assert_ne!(o.status.code(), Some(0), "{who:?}");
        assert!(!stdout(&o).contains("secret"), "{who:?}");
        assert!(
            stderr(&o).contains("Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
    }
}

/// (environment, options, how stderr starts).
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);

#[test]
fn bad_stockade_values_are_one_line_errors() {
    let cases: &[Case] = &[
        (
            &[],
            &["--stockade-memory", "lots"],
            "bwrap: --stockade-memory: ",
        ),
        (&[], &["--stockade-pids", "0"], "bwrap: --stockade-pids: "),
        (
            &[],
            &["--stockade-cpus", "many"],
            "bwrap: --stockade-cpus: ",
        ),
        (
            &[],
            &["--stockade-timeout", "later"],
            "bwrap: --stockade-timeout: ",
        ),
        (
            &[],
            &["--stockade-bogus"],
            "bwrap: Unknown option --stockade-bogus",
        ),
        (
            &[("STOCKADE_PROFILE", "no-such-profile")],
            &[],
            "bwrap: STOCKADE_PROFILE: ",
        ),
        (
            &[],
            &["--stockade-profile", "/no/such.toml"],
            "bwrap: --stockade-profile: ",
        ),
    ];
    for who in users("bad_stockade_values_are_one_line_errors") {
        for (env, opts, start) in cases {
            let o = bwrap(Mode::Jail, who, env, &args(opts, &["/bin/true"]));
            one_line_error(&o, start, &format!("{who:?} {opts:?}"));
        }
        let missing = bwrap(Mode::Jail, who, &[], &["--stockade-memory"]);
        assert_eq!(
            stderr(&missing),
            "bwrap: --stockade-memory takes an argument\n"
        );
    }
}

/// Off by default: a nested user namespace is made as under bwrap.
/// `--stockade-seccomp` (or a profile) puts stockade's allowlist on, which
/// refuses it, and the report says the layer was applied.
#[test]
fn stockade_seccomp_is_off_until_asked_for() {
    let cmd = ["/usr/bin/unshare", "-U", "/bin/true"];
    for who in users("stockade_seccomp_is_off_until_asked_for") {
        let plain = bwrap(Mode::Jail, who, &[], &args(&[], &cmd));
        expect_code(&plain, 0, &format!("{who:?} without --stockade-seccomp"));
        let report = Report::new("bwfb-seccomp");
        let opts = ["--stockade-seccomp", "--stockade-report", &report.path];
        let on = bwrap(Mode::Jail, who, &[], &args(&opts, &cmd));
        assert_ne!(on.status.code(), Some(0), "{who:?}: {}", stderr(&on));
        assert!(
            stderr(&on).contains("Operation not permitted"),
            "{who:?}: {}",
            stderr(&on)
        );
        let v = report.read();
        assert_eq!(v["layers"]["seccomp"]["state"], "applied", "{v}");
    }
}
