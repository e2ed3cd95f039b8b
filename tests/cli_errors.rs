//! Bad command lines: one `stockade: ` line on stderr naming the flag, exit
//! 125, no panic, and the command never runs. As root and as uid 65534.

mod common;

use common::{stderr, stdout, Who};

const RAN: &str = "payload-ran";

/// `stockade ARGS…` (ARGS include `run`) as `who`.
fn stockade(who: Who, args: &[&str]) -> std::process::Output {
    common::stockade(who)
        .args(args)
        .output()
        .expect("start stockade")
}

/// Run `stockade run FLAGS -- echo payload-ran` and check the error shape:
/// exit 125, exactly one stderr line starting `stockade: ` that contains
/// every string in `names`, no panic, nothing printed by the payload.
fn rejects(test: &str, flags: &[&str], names: &[&str]) {
    for who in common::users(test) {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "/bin/echo", RAN]);
        let o = stockade(who, &args);
        check(who, &args, &o, names);
    }
}

fn check(who: Who, args: &[&str], o: &std::process::Output, names: &[&str]) {
    let what = format!("{who:?}: stockade {}", args.join(" "));
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{what}: panic: {err}");
    assert!(!stdout(o).contains(RAN), "{what}: the command ran");
    assert_eq!(
        o.status.code(),
        Some(125),
        "{what}: {:?}; stderr: {err}",
        o.status
    );
    assert_eq!(err.lines().count(), 1, "{what}: want one line: {err:?}");
    assert!(err.starts_with("stockade: "), "{what}: {err}");
    for n in names {
        assert!(err.contains(n), "{what}: {n:?} not named in: {err}");
    }
}

#[test]
fn unknown_flag_is_rejected() {
    rejects(
        "unknown_flag_is_rejected",
        &["--bogus-flag"],
        &["--bogus-flag"],
    );
}

#[test]
fn relative_tmpfs_is_rejected() {
    rejects(
        "relative_tmpfs_is_rejected",
        &["--tmpfs", "relative"],
        &["--tmpfs", "relative"],
    );
}

#[test]
fn relative_ro_bind_destination_is_rejected() {
    // /usr exists: the only thing wrong is the relative destination.
    for src in ["/usr", "/x"] {
        let v = format!("{src}:relative");
        rejects(
            "relative_ro_bind_destination_is_rejected",
            &["--ro-bind", &v],
            &["--ro-bind", "relative"],
        );
    }
}

#[test]
fn bad_tmp_size_is_rejected() {
    rejects(
        "bad_tmp_size_is_rejected",
        &["--tmp-size", "lots"],
        &["--tmp-size", "lots"],
    );
}

#[test]
fn bad_memory_size_is_rejected() {
    rejects(
        "bad_memory_size_is_rejected",
        &["--memory", "12q"],
        &["--memory", "12q"],
    );
}

#[test]
fn bad_timeout_is_rejected() {
    rejects(
        "bad_timeout_is_rejected",
        &["--timeout", "soon"],
        &["--timeout", "soon"],
    );
}

#[test]
fn keep_fd_that_is_not_open_is_rejected() {
    // The harness opens everything close-on-exec: fd 99 is not open in stockade.
    rejects(
        "keep_fd_that_is_not_open_is_rejected",
        &["--keep-fd", "99"],
        &["--keep-fd", "99"],
    );
}

#[test]
fn setenv_without_equals_is_rejected() {
    rejects(
        "setenv_without_equals_is_rejected",
        &["--setenv", "NOEQUALS"],
        &["--setenv", "NOEQUALS"],
    );
}

#[test]
fn unknown_required_layer_is_rejected() {
    rejects(
        "unknown_required_layer_is_rejected",
        &["--require", "bogus"],
        &["--require", "bogus"],
    );
}

#[test]
fn missing_command_is_rejected() {
    for who in common::users("missing_command_is_rejected") {
        for args in [
            &["run"][..],
            &["run", "--"][..],
            &["run", "--hostname", "x"][..],
        ] {
            let o = stockade(who, args);
            // The line must say what is missing: the command (CMD).
            let err = stderr(&o).to_lowercase();
            check(who, args, &o, &[]);
            assert!(
                err.contains("cmd") || err.contains("command"),
                "{who:?}: stockade {}: does not say the command is missing: {err}",
                args.join(" ")
            );
        }
    }
}

#[test]
fn valid_flags_still_run_the_command() {
    // Control for the tests above: the same shape of command line, without
    // the mistake, runs the command.
    for who in common::users("valid_flags_still_run_the_command") {
        let args = [
            "run",
            "--tmpfs",
            "/x:1m",
            "--ro-bind",
            "/usr:/u",
            "--tmp-size",
            "8m",
            "--memory",
            "512m",
            "--timeout",
            "30s",
            "--setenv",
            "A=b",
            "--require",
            "userns",
            "--",
            "/bin/echo",
            RAN,
        ];
        let o = stockade(who, &args);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("{RAN}\n"), "{who:?}");
    }
}

#[test]
fn zero_and_negative_limits_are_rejected() {
    for (flag, v, want) in [
        ("--timeout", "0s", "must be greater than 0"),
        ("--timeout", "-1s", "is not a duration"),
        ("--cpu-time", "0", "must be greater than 0"),
        ("--memory", "0", "must be greater than 0"),
        ("--memory", "-5m", "\"-5m\" is not a size"),
        ("--memory-high", "0m", "must be greater than 0"),
        ("--pids-limit", "0", "must be greater than 0"),
        ("--pids-limit", "-1", "is not a count"),
        ("--cpus", "0", "is not a number of CPUs above 0"),
        ("--cpus", "-1", "is not a number of CPUs above 0"),
        ("--max-output", "0", "must be greater than 0"),
        ("--max-file-size", "0", "must be greater than 0"),
        ("--max-open-files", "0", "must be greater than 0"),
        ("--tmp-size", "0", "must be greater than 0"),
    ] {
        rejects(
            "zero_and_negative_limits_are_rejected",
            &[flag, v],
            &[&format!("{flag}: "), want],
        );
        let joined = format!("{flag}={v}");
        rejects(
            "zero_and_negative_limits_are_rejected",
            &[&joined],
            &[&format!("{flag}: "), want],
        );
    }
}

#[test]
fn zero_grace_kills_at_the_deadline_and_short_commands_still_run() {
    // 0 is a meaningful grace (SIGKILL right at the deadline), not refused.
    for who in common::users("zero_grace_kills_at_the_deadline_and_short_commands_still_run") {
        let o = stockade(
            who,
            &[
                "run",
                "--grace",
                "0",
                "--timeout",
                "30s",
                "--",
                "/bin/echo",
                RAN,
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("{RAN}\n"));
    }
}

/// A profile file with `text` that uid 65534 can read.
fn profile_file(dir: &common::Scratch, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn zero_limits_in_a_profile_name_file_line_column_and_field() {
    let dir = common::Scratch::new("zero-limits");
    for (line, field) in [
        ("timeout = \"0s\"", "limits.timeout"),
        ("memory = 0", "limits.memory"),
        ("memory = \"-5m\"", "limits.memory"),
        ("pids = 0", "limits.pids"),
        ("cpus = 0", "limits.cpus"),
        ("max_output = 0", "limits.max_output"),
    ] {
        let f = profile_file(&dir, "z.toml", &format!("[limits]\n{line}\n"));
        let place = format!("{f}:2:");
        for who in common::users("zero_limits_in_a_profile_name_file_line_column_and_field") {
            rejects_args(who, &["profile", "check", &f], &[&place, field]);
            rejects_args(
                who,
                &["run", "--profile", &f, "--", "/bin/echo", RAN],
                &[&place, field],
            );
        }
    }
}

/// `stockade ARGS…` fails the way [`check`] wants.
fn rejects_args(who: Who, args: &[&str], names: &[&str]) {
    let o = stockade(who, args);
    check(who, args, &o, names);
}

#[test]
fn wrong_type_in_a_profile_is_named_without_internal_type_names() {
    let dir = common::Scratch::new("wrong-type");
    let f = profile_file(&dir, "my.toml", "description = \"d\"\n\nlimits = 5\n");
    for who in common::users("wrong_type_in_a_profile_is_named_without_internal_type_names") {
        for args in [
            vec!["profile", "check", &f],
            vec!["run", "--profile", &f, "--", "/bin/echo", RAN],
        ] {
            let o = stockade(who, &args);
            check(
                who,
                &args,
                &o,
                &[
                    &format!("{f}:3:"),
                    "limits: expected a table, got an integer",
                ],
            );
            assert!(!stderr(&o).contains("Raw"), "{}", stderr(&o));
        }
    }
}

#[test]
fn a_literal_dashdash_after_the_command_is_refused_with_how_to_write_it() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    // bwrap's `--ro-bind SRC DST`: /usr/bin/echo is read as the command.
    // The second line takes clap's path (a value that is not UTF-8).
    let not_utf8 = OsStr::from_bytes(b"/tmp/\xff");
    for who in common::users("a_literal_dashdash_after_the_command_is_refused_with_how_to_write_it")
    {
        for extra in [None, Some(not_utf8)] {
            let mut c = common::stockade(who);
            c.args(["run", "--ro-bind", "/tmp/x"]);
            if let Some(v) = extra {
                c.arg("--chdir").arg(v);
            }
            c.args(["/bin/echo", "--", RAN]);
            let o = c.output().expect("start stockade");
            check(
                who,
                &["run", "--ro-bind", "/tmp/x", "…", "/bin/echo", "--", RAN],
                &o,
                &[
                    "/bin/echo was read as the command",
                    "--ro-bind SRC[:DST]",
                    &format!("stockade run [OPTIONS] -- /bin/echo -- {RAN}"),
                ],
            );
        }
        // With `--` before the command, a later `--` is the command's.
        let o = stockade(who, &["run", "--", "/bin/echo", "--", RAN]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("-- {RAN}\n"));
    }
}

#[test]
fn profile_check_refuses_what_run_refuses_with_the_same_line() {
    let dir = common::Scratch::new("check-like-run");
    let cases = [
        (
            "[seccomp]\ngroups = [\"@nope\"]\n",
            ":2:11: seccomp.groups: unknown syscall group \"@nope\"",
        ),
        (
            "[seccomp]\nallow = [\"frobnicate\"]\n",
            ":2:10: seccomp.allow: unknown syscall \"frobnicate\"",
        ),
        (
            "[filesystem]\nro = [\"/nonexistent/stockade-src:/x\"]\n",
            ":2:7: filesystem.ro: /nonexistent/stockade-src: no such file or directory",
        ),
        (
            "[filesystem]\nbind = [{ src = \"/nonexistent/stockade-src\", dst = \"/x\" }]\n",
            ":2:17: filesystem.bind.src: /nonexistent/stockade-src: no such file or directory",
        ),
        (
            "[workdir]\nhost = \"/etc/passwd\"\n",
            ":2:8: workdir.host: /etc/passwd is not a directory",
        ),
        (
            "[limits]\ntimeout = \"0s\"\n",
            ":2:11: limits.timeout: \"0s\": must be greater than 0",
        ),
        (
            "\n\nlimits = 5\n",
            ":3:10: limits: expected a table, got an integer (5)",
        ),
    ];
    for who in common::users("profile_check_refuses_what_run_refuses_with_the_same_line") {
        for (text, want) in cases {
            let f = profile_file(&dir, "p.toml", text);
            let by_check = stockade(who, &["profile", "check", &f]);
            let by_run = stockade(who, &["run", "--profile", &f, "--", "/bin/echo", RAN]);
            let want = format!("stockade: {f}{want}");
            for (what, o) in [("check", &by_check), ("run", &by_run)] {
                check(who, &[what, &f], o, &[]);
                assert!(
                    stderr(o).starts_with(&want),
                    "{who:?} {what}: {}\nwant: {want}",
                    stderr(o)
                );
            }
            assert_eq!(stderr(&by_check), stderr(&by_run), "{who:?}: {text:?}");
        }
        // Control: an optional bind of a missing source, and a good profile,
        // pass both.
        let f = profile_file(
            &dir,
            "ok.toml",
            "[filesystem]\nbind = [{ src = \"/nonexistent/x\", optional = true }]\n[seccomp]\ngroups = [\"@default\", \"@network-io\"]\n",
        );
        let o = stockade(who, &["profile", "check", &f]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let o = stockade(who, &["run", "--profile", &f, "--", "/bin/echo", RAN]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
    }
}

#[test]
fn workdir_that_is_a_file_or_missing_is_refused_naming_the_flag() {
    rejects(
        "workdir_that_is_a_file_or_missing_is_refused_naming_the_flag",
        &["--workdir", "/etc/passwd"],
        &["--workdir: /etc/passwd is not a directory"],
    );
    rejects(
        "workdir_that_is_a_file_or_missing_is_refused_naming_the_flag",
        &["--workdir", "/nonexistent/stockade-wd:/home"],
        &["--workdir: /nonexistent/stockade-wd: no such directory"],
    );
}

#[test]
fn unknown_seccomp_group_on_the_command_line_names_the_flag() {
    rejects(
        "unknown_seccomp_group_on_the_command_line_names_the_flag",
        &["--seccomp-allow", "@nope"],
        &["--seccomp-allow: unknown syscall group \"@nope\""],
    );
}
