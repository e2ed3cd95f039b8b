//! bwrap's command line, read as bwrap reads it: options up to the first
//! word that is not one (or after `--`), each option taking a fixed number
//! of words, `--args FD` splicing in NUL-separated words read from FD.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::translate::OVERLAY_SRC_ALONE;
use super::BwrapError;

/// Every option of bubblewrap 0.12 and how many words follow it.
pub(super) const OPTIONS: &[(&str, usize)] = &[
    ("--help", 0),
    ("--version", 0),
    ("--args", 1),
    ("--argv0", 1),
    ("--level-prefix", 0),
    ("--not-a-security-boundary", 0),
    ("--unshare-all", 0),
    ("--share-net", 0),
    ("--unshare-user", 0),
    ("--unshare-user-try", 0),
    ("--unshare-ipc", 0),
    ("--unshare-pid", 0),
    ("--unshare-net", 0),
    ("--unshare-uts", 0),
    ("--unshare-cgroup", 0),
    ("--unshare-cgroup-try", 0),
    ("--userns", 1),
    ("--userns2", 1),
    ("--disable-userns", 0),
    ("--assert-userns-disabled", 0),
    ("--pidns", 1),
    ("--uid", 1),
    ("--gid", 1),
    ("--hostname", 1),
    ("--chdir", 1),
    ("--clearenv", 0),
    ("--setenv", 2),
    ("--unsetenv", 1),
    ("--lock-file", 1),
    ("--sync-fd", 1),
    ("--bind", 2),
    ("--bind-try", 2),
    ("--dev-bind", 2),
    ("--dev-bind-try", 2),
    ("--ro-bind", 2),
    ("--ro-bind-try", 2),
    ("--bind-fd", 2),
    ("--ro-bind-fd", 2),
    ("--remount-ro", 1),
    ("--exec-label", 1),
    ("--file-label", 1),
    ("--proc", 1),
    ("--dev", 1),
    ("--tmpfs", 1),
    ("--mqueue", 1),
    ("--dir", 1),
    ("--file", 2),
    ("--bind-data", 2),
    ("--ro-bind-data", 2),
    ("--symlink", 2),
    ("--seccomp", 1),
    ("--add-seccomp-fd", 1),
    ("--block-fd", 1),
    ("--userns-block-fd", 1),
    ("--info-fd", 1),
    ("--json-status-fd", 1),
    ("--new-session", 0),
    ("--die-with-parent", 0),
    ("--as-pid-1", 0),
    ("--cap-add", 1),
    ("--cap-drop", 1),
    ("--perms", 1),
    ("--size", 1),
    ("--chmod", 2),
    ("--overlay-src", 1),
    ("--overlay", 3),
    ("--tmp-overlay", 1),
    ("--ro-overlay", 1),
];

/// The options of which only the last one counts; bwrap warns when one
/// is given again.
const LAST_ONE_COUNTS: &[&str] = &[
    "--chdir",
    "--exec-label",
    "--file-label",
    "--sync-fd",
    "--block-fd",
    "--userns-block-fd",
    "--info-fd",
    "--json-status-fd",
    "--seccomp",
    "--userns",
    "--userns2",
    "--pidns",
    "--uid",
    "--gid",
    "--hostname",
];

/// One option as given, with its words, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Op {
    pub opt: &'static str,
    pub args: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Parsed {
    Help,
    Version,
    Run { ops: Vec<Op>, argv: Vec<OsString> },
}

/// How bwrap says an option lacks its words.
fn takes(opt: &str, n: usize) -> String {
    match n {
        // bwrap words these two differently from the other one-word options.
        1 if opt == "--chdir" || opt == "--remount-ro" => "takes one argument".into(),
        1 => "takes an argument".into(),
        2 => "takes two arguments".into(),
        _ => "takes three arguments".into(),
    }
}

/// Parse `args` (without argv[0]).
pub(super) fn parse(args: &[OsString]) -> Result<Parsed, BwrapError> {
    let mut ops = Vec::new();
    let argv = match options(args, &mut ops)? {
        Ok(rest) => rest,
        Err(done) => return Ok(done),
    };
    Ok(Parsed::Run { ops, argv })
}

/// The options at the head of `words` into `ops`; the words after them
/// (the command), or help or version. The words of `--args FD` are read
/// the same way, as options only: the command comes from the command
/// line, and bwrap ignores what follows a non-option in FD.
fn options(
    words: &[OsString],
    ops: &mut Vec<Op>,
) -> Result<Result<Vec<OsString>, Parsed>, BwrapError> {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        if w == "--" {
            i += 1;
            break;
        }
        if !w.as_bytes().starts_with(b"-") {
            break;
        }
        let Some(&(opt, n)) = OPTIONS.iter().find(|(o, _)| OsStr::new(o) == w) else {
            return Err(BwrapError::UnknownOption(w.to_string_lossy().into_owned()));
        };
        let Some(op_args) = words.get(i + 1..i + 1 + n) else {
            // bwrap counts it without looking for its word, then finds it
            // followed by no overlay.
            if opt == "--overlay-src" {
                return Err(BwrapError::Usage(OVERLAY_SRC_ALONE.into()));
            }
            return Err(BwrapError::Usage(format!("{opt} {}", takes(opt, n))));
        };
        i += 1 + n;
        if LAST_ONE_COUNTS.contains(&opt) && ops.iter().any(|o: &Op| o.opt == opt) {
            super::eprint_level(4, &format!("Only the last {opt} option will take effect"));
        }
        match opt {
            "--exec-label" | "--file-label" => return Err(label(opt)),
            "--help" => return Ok(Err(Parsed::Help)),
            "--version" => return Ok(Err(Parsed::Version)),
            // Messages from here on carry their level, as in bwrap.
            "--level-prefix" => {
                super::LEVEL_PREFIX.store(true, std::sync::atomic::Ordering::Relaxed)
            }
            "--args" => {
                let read = read_args(parse_fd(&op_args[0])?)?;
                // Kept as an op too: its fd is bwrap's, not the command's.
                ops.push(Op {
                    opt,
                    args: op_args.to_vec(),
                });
                if let Err(done) = options(&read, ops)? {
                    return Ok(Err(done));
                }
            }
            _ => ops.push(Op {
                opt,
                args: op_args.to_vec(),
            }),
        }
    }
    Ok(Ok(words[i.min(words.len())..].to_vec()))
}

/// An SELinux label option refused: as bwrap refuses it where SELinux is
/// not enabled, and as not supported by stockade where it is (stockade
/// sets no labels).
fn label(opt: &'static str) -> BwrapError {
    match std::path::Path::new("/sys/fs/selinux/enforce").exists() {
        true => BwrapError::Unsupported(opt),
        false => BwrapError::Usage("labeling not supported on this system".into()),
    }
}

/// A file descriptor number, as bwrap takes one.
pub(super) fn parse_fd(s: &OsStr) -> Result<i32, BwrapError> {
    s.to_str()
        .and_then(|t| t.parse::<i32>().ok())
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| BwrapError::Usage(format!("Invalid fd: {}", s.to_string_lossy())))
}

/// Everything left to read in fd.
pub(super) fn read_fd(fd: i32) -> crate::sys::SysResult<Vec<u8>> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match crate::sys::read(fd, &mut buf)? {
            0 => return Ok(data),
            n => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// The NUL-separated words in fd (read to its end).
fn read_args(fd: i32) -> Result<Vec<OsString>, BwrapError> {
    let data = read_fd(fd).map_err(|_| BwrapError::Usage("Failed to read --args data".into()))?;
    Ok(data
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| OsString::from_vec(w.to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, BwrapError> {
        parse(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn options_in_order_then_the_command() {
        let Parsed::Run { ops, argv } =
            p(&["--tmpfs", "/a", "--bind", "/x", "/a", "--", "sh", "-c", "x"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].opt, "--tmpfs");
        assert_eq!(
            ops[1].args,
            vec![OsString::from("/x"), OsString::from("/a")]
        );
        assert_eq!(argv, vec!["sh", "-c", "x"]);
    }

    #[test]
    fn the_first_non_option_starts_the_command() {
        let Parsed::Run { argv, .. } = p(&["--proc", "/proc", "ls", "--bind"]).unwrap() else {
            panic!()
        };
        assert_eq!(argv, vec!["ls", "--bind"]);
    }

    #[test]
    fn errors_are_worded_as_bwrap_words_them() {
        let e = |a: &[&str]| p(a).unwrap_err().to_string();
        assert_eq!(e(&["--bogus"]), "Unknown option --bogus");
        assert_eq!(e(&["-x"]), "Unknown option -x");
        assert_eq!(e(&["--bind", "/"]), "--bind takes two arguments");
        assert_eq!(e(&["--chdir"]), "--chdir takes one argument");
        assert_eq!(e(&["--tmpfs"]), "--tmpfs takes an argument");
        assert_eq!(e(&["--overlay", "a"]), "--overlay takes three arguments");
        assert_eq!(e(&["--tmp-overlay"]), "--tmp-overlay takes an argument");
        // bwrap takes --overlay-src's word without looking for it.
        assert_eq!(e(&["--overlay-src"]), OVERLAY_SRC_ALONE);
        assert_eq!(e(&["--args", "x"]), "Invalid fd: x");
    }

    #[test]
    fn help_and_version_win_where_they_stand() {
        assert_eq!(p(&["--help", "--bogus"]).unwrap(), Parsed::Help);
        assert_eq!(p(&["--version"]).unwrap(), Parsed::Version);
        assert!(p(&["--bogus", "--help"]).is_err());
    }
}
