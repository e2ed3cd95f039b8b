//! `stockade run …` read without building clap's parser, for the plain
//! command lines a program or a script gives.
//!
//! Building clap's `Command` for the 40-odd flags of `run` and matching
//! against it costs about 110 µs of a cold start (callgrind: ~145k
//! instructions; the whole jail costs ~2.7 ms), so the common command lines
//! take this path. It is not a second definition of the flags: [`run_args!`]
//! declares `RunArgs` for clap and, from the same field list, the table this
//! parser reads ([`RunArgs::FLAGS`]: the long name is the field's name in
//! kebab case, as clap derives it; what a flag takes comes from the field's
//! type, as clap's derive reads it) and the setter of each field. Adding a
//! flag is adding a field there.
//!
//! Anything this parser is not sure of (help, a short or unknown flag, a
//! repeated single flag, a value clap would refuse or read differently, no
//! command) is `None`, and clap parses it and words the error.

use std::ffi::OsString;
use std::path::PathBuf;

use super::args::{MountFlag, MountFlags, RunArgs};

/// What a flag of `stockade run` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Takes {
    /// Nothing (a switch); once at most.
    Switch,
    /// One value; once at most.
    One,
    /// One value; may repeat.
    Many,
}

/// A field type of a `run` flag, as clap's derive reads it: `bool` is a
/// switch, `Option<T>` one value, `Vec<T>` a value that may repeat.
pub(super) trait FastValue {
    const TAKES: Takes;
    /// Take the value `v` (ignored for a switch); `None` leaves it to clap.
    fn set(&mut self, v: &str) -> Option<()>;
}

/// A value type clap parses for a `run` flag, read the way clap reads it
/// (`None`: clap would refuse it, or might read it differently).
pub(super) trait FastScalar: Sized {
    fn read(v: &str) -> Option<Self>;
}

impl FastValue for bool {
    const TAKES: Takes = Takes::Switch;
    fn set(&mut self, _: &str) -> Option<()> {
        *self = true;
        Some(())
    }
}

impl<T: FastScalar> FastValue for Option<T> {
    const TAKES: Takes = Takes::One;
    fn set(&mut self, v: &str) -> Option<()> {
        *self = Some(T::read(v)?);
        Some(())
    }
}

impl<T: FastScalar> FastValue for Vec<T> {
    const TAKES: Takes = Takes::Many;
    fn set(&mut self, v: &str) -> Option<()> {
        self.push(T::read(v)?);
        Some(())
    }
}

impl FastScalar for String {
    fn read(v: &str) -> Option<Self> {
        Some(v.to_string())
    }
}

impl FastScalar for PathBuf {
    fn read(v: &str) -> Option<Self> {
        Some(PathBuf::from(v))
    }
}

impl FastScalar for u32 {
    fn read(v: &str) -> Option<Self> {
        v.parse().ok()
    }
}

impl FastScalar for i32 {
    fn read(v: &str) -> Option<Self> {
        v.parse().ok()
    }
}

/// Declares `RunArgs`: the fields in `flags { … }` are `run`'s flags (clap
/// attributes and all), the others its positional and internal fields. From
/// the same list it derives [`RunArgs::FLAGS`] and `RunArgs::fast_set`.
macro_rules! run_args {
    (
        $(#[$meta:meta])*
        pub(super) struct $name:ident {
            flags {
                $( $(#[$fmeta:meta])* $flag:ident : $fty:ty, )*
            }
            $( $(#[$rmeta:meta])* $field:ident : $rty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub(super) struct $name {
            $( $(#[$fmeta])* pub(super) $flag: $fty, )*
            $( $(#[$rmeta])* pub(super) $field: $rty, )*
        }

        impl $name {
            /// Every flag: its field's name and what it takes.
            pub(super) const FLAGS: &'static [(&'static str, $crate::cli::fast::Takes)] = &[
                $( (stringify!($flag), <$fty as $crate::cli::fast::FastValue>::TAKES), )*
            ];

            /// Give the flag whose field is `field` the value `v`; `None`
            /// leaves the command line to clap.
            pub(super) fn fast_set(&mut self, field: &str, v: &str) -> Option<()> {
                match field {
                    $( stringify!($flag) => $crate::cli::fast::FastValue::set(&mut self.$flag, v), )*
                    _ => None,
                }
            }
        }
    };
}
pub(super) use run_args;

/// Is the command-line flag `--name` the field `field` (`ro-bind` and
/// `ro_bind`)? clap's derive names a flag after its field in kebab case.
fn is_field(name: &str, field: &str) -> bool {
    name.len() == field.len()
        && name
            .bytes()
            .zip(field.bytes())
            .all(|(n, f)| (n == f && n != b'_') || (n == b'-' && f == b'_'))
}

/// The flag `--name` of `stockade run`: its index in [`RunArgs::FLAGS`].
pub(super) fn flag(name: &str) -> Option<usize> {
    RunArgs::FLAGS.iter().position(|(f, _)| is_field(name, f))
}

/// `stockade run …` parsed without clap (see the module's doc), with the
/// filesystem flags in order; `None` for anything clap must read.
pub(super) fn parse_run(args: &[OsString]) -> Option<(RunArgs, MountFlags)> {
    if args.get(1).map(|a| a.as_os_str()) != Some(std::ffi::OsStr::new("run")) {
        return None;
    }
    let mut a = RunArgs::default();
    let mut mounts = MountFlags::new();
    let mut seen = [false; RunArgs::FLAGS.len()];
    let mut i = 2;
    while i < args.len() {
        let arg = args[i].to_str()?;
        if arg == "--" {
            a.dashdash = true;
            i += 1;
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            // The first positional starts the command (trailing_var_arg).
            if arg.starts_with('-') {
                return None;
            }
            break;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let k = flag(name)?;
        let (field, takes) = RunArgs::FLAGS[k];
        if takes != Takes::Many && std::mem::replace(&mut seen[k], true) {
            return None;
        }
        let v = match (takes, inline) {
            (Takes::Switch, Some(_)) => return None,
            (Takes::Switch, None) => "",
            (_, Some(v)) => v,
            (_, None) => {
                i += 1;
                args.get(i)?.to_str()?
            }
        };
        // clap refuses an empty path and reads `-x` as a flag; leave both
        // (and their messages) to it. A lone `-` is a value (`--report -`).
        if takes != Takes::Switch && (v.is_empty() || (v.starts_with('-') && v != "-")) {
            return None;
        }
        a.fast_set(field, v)?;
        if let Some(f) = MountFlag::ALL.into_iter().find(|f| f.id() == field) {
            mounts.push((i, f, v.to_string()));
        }
        i += 1;
    }
    a.command = args.get(i..)?.to_vec();
    if a.command.is_empty() {
        return None;
    }
    Some((a, mounts))
}

/// Does a `--` come before the command in `stockade run …`? (clap does not
/// say: it drops the `--` and counts no index for it.) The flags before the
/// command are those of [`RunArgs::FLAGS`]; clap has already accepted them.
pub(super) fn dashdash_before_command(args: &[OsString]) -> bool {
    let mut i = 2;
    while let Some(arg) = args.get(i) {
        let Some(body) = arg.to_str().and_then(|a| a.strip_prefix("--")) else {
            return false;
        };
        if body.is_empty() {
            return true;
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, _)) => (n, true),
            None => (body, false),
        };
        match flag(name).map(|k| RunArgs::FLAGS[k].1) {
            Some(Takes::Switch) => i += 1,
            Some(_) if inline => i += 1,
            Some(_) => i += 2,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
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
            let want = match a.get_action() {
                clap::ArgAction::SetTrue => Takes::Switch,
                clap::ArgAction::Append => Takes::Many,
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
}
