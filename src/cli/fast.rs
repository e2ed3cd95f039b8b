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
    /// A switch, or one value given with `=` (`--commit`, `--commit=always`);
    /// once at most. A value after it as a word of its own is left to clap.
    Optional,
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

impl<T: FastScalar> FastValue for Option<Option<T>> {
    const TAKES: Takes = Takes::Optional;
    fn set(&mut self, v: &str) -> Option<()> {
        *self = Some(match v {
            "" => None,
            v => Some(T::read(v)?),
        });
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
            (Takes::Optional, Some("")) => return None,
            (Takes::Optional, Some(v)) => v,
            // clap takes the next word as its value unless it is a flag
            // (or `--`): leave that to clap.
            (Takes::Optional, None) => match args.get(i + 1).and_then(|a| a.to_str()) {
                Some(next) if !next.starts_with('-') => return None,
                _ => "",
            },
            (_, Some(v)) => v,
            (_, None) => {
                i += 1;
                args.get(i)?.to_str()?
            }
        };
        // clap refuses an empty path and reads `-x` as a flag; leave both
        // (and their messages) to it. A lone `-` is a value (`--report -`).
        let valued = !matches!((takes, v), (Takes::Switch, _) | (Takes::Optional, ""));
        if valued && (v.is_empty() || (v.starts_with('-') && v != "-")) {
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
            Some(Takes::Optional) if inline => i += 1,
            Some(Takes::Optional) => match args.get(i + 1).and_then(|a| a.to_str()) {
                Some(next) if !next.starts_with('-') => i += 2,
                _ => i += 1,
            },
            Some(_) if inline => i += 1,
            Some(_) => i += 2,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests;
