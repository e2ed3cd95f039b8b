//! The fast parser against clap, on the same command lines.

use super::*;
use crate::cli::args::{mount_flags, Cli, Cmd};
use crate::cli::run::literal_dashdash;
use clap::{CommandFactory, FromArgMatches};

fn argv(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// The run arguments and the filesystem flags in order, as text.
fn shown(a: &RunArgs, m: &[(usize, MountFlag, String)]) -> String {
    let mut m = m.to_vec();
    m.sort_by_key(|(i, _, _)| *i);
    let m: Vec<(MountFlag, String)> = m.into_iter().map(|(_, f, v)| (f, v)).collect();
    format!("{a:?} {m:?}")
}

fn by_clap(args: &[OsString]) -> Option<String> {
    let matches = Cli::command().try_get_matches_from(args).ok()?;
    let Cmd::Run(mut a) = Cli::from_arg_matches(&matches).ok()?.cmd else {
        return None;
    };
    a.dashdash = dashdash_before_command(args);
    let sub = matches.subcommand_matches("run")?;
    Some(shown(&a, &mount_flags(sub)))
}

#[test]
fn fast_parser_reads_what_clap_reads_or_leaves_it_to_clap() {
    let cases: &[&[&str]] = &[
        &["s", "run", "--", "/bin/true"],
        &["s", "run", "/bin/true"],
        &["s", "run", "/bin/echo", "-n", "--x", "--", "y"],
        &["s", "run", "--no-seccomp", "/bin/true", "--", "x"],
        &[
            "s",
            "run",
            "--ro-bind",
            "/tmp/x",
            "/usr/bin/echo",
            "--",
            "hi",
        ],
        &["s", "run", "--ro-bind=/a", "--capture", "--", "x", "--"],
        &["s", "run", "--memory", "-5m", "--", "x"],
        &["s", "run", "--memory=-5m", "x", "--", "y"],
        &["s", "run", "--pids-limit", "0", "--cpus", "0.5", "--", "x"],
        &["s", "run", "--timeout", "--", "x", "--"],
        &["s", "run", "--", "/bin/echo", "", "--", "-x"],
        &["s", "run", "--report", "-", "--", "true"],
        &["s", "run", "--report=-", "--capture", "--", "true"],
        &[
            "s",
            "run",
            "--profile",
            "python",
            "--python",
            "/usr/bin/python3",
            "--",
            "python3",
            "-c",
            "pass",
        ],
        &[
            "s",
            "run",
            "--profile=./x.toml",
            "--timeout",
            "10s",
            "--grace=1s",
            "--",
            "sh",
        ],
        &[
            "s",
            "run",
            "--ro-bind",
            "/a:/b",
            "--tmpfs",
            "/t:8m",
            "--bind=/c",
            "--symlink",
            "x:/y",
            "--ro-bind",
            "/d",
            "--",
            "ls",
        ],
        &["s", "run", "--tmpfs", "/t", "--tmpfs=/u:1m", "--", "ls"],
        &[
            "s",
            "run",
            "--overlay",
            "/a:/w/a",
            "--commit",
            "--",
            "ls",
            "--",
        ],
        &["s", "run", "--commit=always", "--overlay=/a:/b", "--", "ls"],
        &["s", "run", "--commit", "always", "--", "ls"],
        &["s", "run", "--commit", "ls", "-l"],
        &["s", "run", "--commit", "--capture", "ls"],
        &["s", "run", "--commit=", "--", "ls"],
        &["s", "run", "--commit=never", "--", "ls"],
        &["s", "run", "--commit", "--commit", "--", "ls"],
        &[
            "s",
            "run",
            "--bind",
            "/a",
            "--overlay",
            "/b:/c",
            "--ro-bind",
            "/d",
            "--",
            "ls",
        ],
        &[
            "s",
            "run",
            "--uid",
            "0",
            "--gid=+7",
            "--host-uid",
            "1000",
            "--host-gid",
            "007",
            "--",
            "id",
        ],
        &["s", "run", "--uid", "4294967296", "--", "id"],
        &["s", "run", "--uid", "1", "--uid", "2", "--", "id"],
        &["s", "run", "--uid", "-1", "--", "id"],
        &["s", "run", "--uid", " 1", "--", "id"],
        &[
            "s",
            "run",
            "--network",
            "host",
            "--seccomp-action",
            "kill",
            "--",
            "id",
        ],
        &["s", "run", "--network", "Host", "--", "id"],
        &[
            "s",
            "run",
            "--network=none",
            "--seccomp-action=errno",
            "--seccomp-learn",
            "--",
            "id",
        ],
        &[
            "s",
            "run",
            "--seccomp-allow",
            "ptrace",
            "--seccomp-allow=@network-io",
            "--no-landlock",
            "--",
            "id",
        ],
        &["s", "run", "--no-seccomp", "--no-seccomp", "--", "id"],
        &["s", "run", "--no-seccomp=true", "--", "id"],
        &[
            "s",
            "run",
            "--landlock-exclude",
            "/work/x",
            "--require",
            "seccomp",
            "--require=landlock",
            "--",
            "id",
        ],
        &[
            "s",
            "run",
            "--memory",
            "64m",
            "--memory-high=32m",
            "--cpus",
            "0.5",
            "--pids-limit",
            "10",
            "--",
            "id",
        ],
        &[
            "s",
            "run",
            "--cpus",
            "1e0",
            "--cpu-time",
            "5s",
            "--max-output",
            "1k",
            "--",
            "id",
        ],
        &["s", "run", "--cpus", "inf", "--", "id"],
        &["s", "run", "--cpus", "-1", "--", "id"],
        &["s", "run", "--cpus=-1", "--", "id"],
        &[
            "s",
            "run",
            "--max-file-size",
            "1m",
            "--max-open-files",
            "64",
            "--",
            "id",
        ],
        &[
            "s",
            "run",
            "--keep-fd",
            "3",
            "--keep-fd=+4",
            "--report-fd",
            "5",
            "--",
            "id",
        ],
        &[
            "s",
            "run",
            "--setenv",
            "A=1",
            "--setenv=B=",
            "--keep-env",
            "TERM",
            "--",
            "env",
        ],
        &[
            "s",
            "run",
            "--hostname",
            "box",
            "--chdir",
            "/tmp",
            "--workdir",
            "./w:/home",
            "--tmp-size",
            "1m",
            "--",
            "pwd",
        ],
        &["s", "run", "--profile=", "--", "id"],
        &["s", "run", "--python=", "--", "id"],
        &["s", "run", "--python", "--", "id"],
        &["s", "run", "--profile"],
        &["s", "run", "--"],
        &["s", "run"],
        &["s", "run", "--help"],
        &["s", "run", "-h", "--", "id"],
        &["s", "run", "--version"],
        &["s", "run", "--prof", "shell", "--", "id"],
        &["s", "run", "--frobnicate", "--", "id"],
        &["s", "--version", "run", "--", "id"],
        &["s", "check"],
        &["s", "runx", "--", "id"],
    ];
    let mut fast = 0;
    for c in cases {
        let args = argv(c);
        if let Some((a, m)) = parse_run(&args) {
            fast += 1;
            assert_eq!(Some(shown(&a, &m)), by_clap(&args), "{c:?}");
        }
    }
    assert!(fast >= 20, "only {fast} cases took the fast path");
}

#[test]
fn a_literal_dashdash_after_the_command_is_refused_by_both_parsers() {
    let clap_args = |args: &[OsString]| {
        let matches = Cli::command().try_get_matches_from(args).unwrap();
        let Cmd::Run(mut a) = Cli::from_arg_matches(&matches).unwrap().cmd else {
            panic!("not run")
        };
        a.dashdash = dashdash_before_command(args);
        a
    };
    for (c, refused) in [
        (
            &[
                "s",
                "run",
                "--ro-bind",
                "/tmp/x",
                "/usr/bin/echo",
                "--",
                "hi",
            ][..],
            true,
        ),
        (&["s", "run", "/bin/sh", "-c", "x", "--", "a"], true),
        (
            &["s", "run", "--memory=1m", "--no-seccomp", "x", "--"],
            true,
        ),
        (&["s", "run", "--", "/usr/bin/echo", "--", "hi"], false),
        (&["s", "run", "--hostname=h", "--", "x", "--"], false),
        (
            &["s", "run", "--timeout", "1s", "--capture", "--", "x", "--"],
            false,
        ),
        (&["s", "run", "/bin/echo", "a", "b"], false),
        (&["s", "run", "/bin/echo", "--x"], false),
        (&["s", "run", "--commit", "--", "x", "--"], false),
        (&["s", "run", "--commit=always", "--", "x", "--"], false),
    ] {
        let args = argv(c);
        let by_clap = clap_args(&args);
        assert_eq!(literal_dashdash(&by_clap).is_err(), refused, "clap: {c:?}");
        if let Some((fast, _)) = parse_run(&args) {
            assert_eq!(literal_dashdash(&fast).is_err(), refused, "fast: {c:?}");
        } else {
            panic!("the fast path declined {c:?}");
        }
    }
    let (a, _) = parse_run(&argv(&[
        "s",
        "run",
        "--ro-bind",
        "/tmp/x",
        "/usr/bin/echo",
        "--",
        "hi there",
    ]))
    .unwrap();
    assert_eq!(
        literal_dashdash(&a).unwrap_err().to_string(),
        "command: /usr/bin/echo was read as the command, with a literal \"--\" among its \
         arguments (a flag takes one value: --ro-bind SRC[:DST], not SRC DST); if that is \
         meant, put -- before the command: stockade run [OPTIONS] -- /usr/bin/echo -- 'hi there'"
    );
}

#[test]
fn fast_parser_takes_the_common_command_lines() {
    for c in [
        &["s", "run", "--", "/bin/true"][..],
        &[
            "s",
            "run",
            "--profile",
            "python",
            "--report",
            "-",
            "--timeout",
            "10s",
            "--",
            "python3",
            "x.py",
        ],
        &[
            "s",
            "run",
            "--no-seccomp",
            "--no-landlock",
            "--",
            "/bin/true",
        ],
        &[
            "s",
            "run",
            "--ro-bind",
            "/bin/x:/bench/x",
            "--",
            "/bench/x",
            "2",
        ],
    ] {
        assert!(parse_run(&argv(c)).is_some(), "{c:?}");
    }
}

#[test]
fn the_flag_table_is_what_clap_derives_from_the_same_fields() {
    let cmd = Cli::command();
    let run = cmd.find_subcommand("run").expect("run");
    let mut clap_flags: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .filter(|l| l != "help")
        .collect();
    clap_flags.sort();
    let mut ours: Vec<String> = RunArgs::FLAGS
        .iter()
        .map(|(f, _)| f.replace('_', "-"))
        .collect();
    ours.sort();
    assert_eq!(ours, clap_flags, "a flag's long name must be its field's");
    for (field, takes) in RunArgs::FLAGS {
        let a = run
            .get_arguments()
            .find(|a| a.get_id() == *field)
            .expect("flag");
        let optional = a.get_num_args().is_some_and(|n| n.min_values() == 0);
        let want = match a.get_action() {
            clap::ArgAction::SetTrue => Takes::Switch,
            clap::ArgAction::Append => Takes::Many,
            _ if optional => Takes::Optional,
            _ => Takes::One,
        };
        assert_eq!(want, *takes, "--{field}");
        // What the fast path does not read: refuse it there first.
        assert!(a.get_short().is_none(), "--{field}");
        assert!(a.get_value_delimiter().is_none(), "--{field}");
        assert!(!a.is_required_set(), "--{field}");
        assert!(
            a.get_num_args()
                .is_none_or(|n| n.min_values() <= 1 && n.max_values() <= 1),
            "--{field}"
        );
        assert!(a.get_default_values().is_empty(), "--{field}");
    }
    assert!(flag("ro-bind").is_some() && flag("ro_bind").is_none());
}
