//! The host paths bwrap's ops name (the binds' sources, the overlays'
//! directories) resolved as bwrap resolves them: realpath(3) as the
//! caller, relative ones from its working directory, once the whole
//! command line is read (its `resolve_symlinks_in_ops`). A path it cannot
//! resolve ends the run with `Can't find source path PATH: ERROR`, PATH as
//! the caller gave it; a `-try` bind's missing (ENOENT) source is skipped.

use std::ffi::OsString;
use std::path::PathBuf;

use super::parse::Op;
use super::BwrapError;

/// The first source bwrap would not find, in its order: each op's in
/// command-line order; an overlay's upper directory, its work directory,
/// then its `--overlay-src`s, the last given first.
pub(super) fn missing(ops: &[Op]) -> Option<BwrapError> {
    let mut layers: Vec<&OsString> = Vec::new();
    for op in ops {
        let a = &op.args;
        let (named, try_) = match op.opt {
            "--bind" | "--dev-bind" | "--ro-bind" => (vec![a[0].clone()], false),
            "--bind-try" | "--dev-bind-try" | "--ro-bind-try" => (vec![a[0].clone()], true),
            "--bind-fd" | "--ro-bind-fd" => match super::parse::parse_fd(&a[0]) {
                Ok(fd) => (vec![format!("/proc/self/fd/{fd}").into()], false),
                Err(_) => continue,
            },
            "--overlay-src" => {
                layers.push(&a[0]);
                continue;
            }
            "--overlay" | "--tmp-overlay" | "--ro-overlay" => {
                let mut named: Vec<OsString> = match op.opt {
                    "--overlay" => vec![a[0].clone(), a[1].clone()],
                    _ => Vec::new(),
                };
                named.extend(layers.drain(..).rev().cloned());
                (named, false)
            }
            _ => continue,
        };
        for path in named {
            match std::fs::canonicalize(&path) {
                Ok(_) => {}
                Err(e) if try_ && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Some(BwrapError::NoSource {
                        path,
                        why: crate::sys::strerror(&e),
                    })
                }
            }
        }
    }
    None
}

/// `p` resolved (canonical), or as named from the caller's directory
/// where it cannot be ([`missing`] refuses the run then).
pub(super) fn resolved(p: &OsString) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| super::translate::caller_path(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(opt: &'static str, args: &[&str]) -> Op {
        Op {
            opt,
            args: args.iter().map(OsString::from).collect(),
        }
    }

    #[test]
    fn the_first_missing_source_in_bwraps_order() {
        let no = |ops: &[Op]| missing(ops).map(|e| e.to_string());
        let gone = ": No such file or directory";
        assert_eq!(no(&[op("--ro-bind", &["/usr", "/usr"])]), None);
        assert_eq!(no(&[op("--ro-bind-try", &["/nonexistent", "/x"])]), None);
        assert_eq!(
            no(&[op("--bind", &["/nonexistent", "/x"])]),
            Some(format!("Can't find source path /nonexistent{gone}"))
        );
        // The upper directory, the work directory, the sources last first.
        let overlay = |up: &str, work: &str| {
            [
                op("--overlay-src", &["/nonexistent/1"]),
                op("--overlay-src", &["/nonexistent/2"]),
                op("--overlay", &[up, work, "/o"]),
            ]
        };
        assert_eq!(
            no(&overlay("/nonexistent/u", "/nonexistent/w")),
            Some(format!("Can't find source path /nonexistent/u{gone}"))
        );
        assert_eq!(
            no(&overlay("/usr", "/nonexistent/w")),
            Some(format!("Can't find source path /nonexistent/w{gone}"))
        );
        assert_eq!(
            no(&overlay("/usr", "/usr")),
            Some(format!("Can't find source path /nonexistent/2{gone}"))
        );
        // Ops in command-line order.
        let ops = [
            op("--overlay-src", &["/nonexistent/l"]),
            op("--tmp-overlay", &["/o"]),
            op("--bind", &["/nonexistent/b", "/b"]),
        ];
        assert_eq!(
            no(&ops),
            Some(format!("Can't find source path /nonexistent/l{gone}"))
        );
        // As the caller named it; found from its directory.
        assert_eq!(
            no(&[op("--ro-bind", &["nonexistent-here", "/x"])]),
            Some(format!("Can't find source path nonexistent-here{gone}"))
        );
    }
}
