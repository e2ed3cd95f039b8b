//! A session's persistent state between commands: the working directory
//! and the exported environment. The command's shell reports them on exit
//! (an EXIT trap runs `stockade session-state FD`, which inherits both),
//! NUL-separated on a pipe of the agent's; the agent applies the last
//! complete record to the next command. A command that writes a record of
//! its own on that pipe only changes its own session's state.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The largest record the shell may report (the state pipe's capacity is
/// set to at least this, so the report never blocks).
pub(crate) const MAX_RECORD: usize = 1 << 20;

/// The environment variables not carried over (the shell's own).
const NOT_KEPT: [&str; 2] = ["_", "SHLVL"];

/// The cwd and environment the next command starts with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct State {
    pub(crate) cwd: PathBuf,
    pub(crate) env: Vec<(OsString, OsString)>,
}

impl State {
    /// Apply the last complete record in `bytes`, if any.
    pub(crate) fn apply(&mut self, bytes: &[u8]) {
        if let Some(s) = last_record(bytes) {
            *self = s;
        }
    }
}

/// A path the wrapper names without quoting.
pub(crate) fn plain_path(p: &std::path::Path) -> bool {
    p.is_absolute()
        && p.as_os_str()
            .as_bytes()
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(b))
}

/// The script `/bin/sh -c` runs: the EXIT trap that reports the state on
/// `fd` (closed for the command itself, so nothing it starts keeps it),
/// then the command (its text is `$1`). `agent` is a [`plain_path`].
pub(crate) fn wrapper(agent: &std::path::Path, fd: i32) -> String {
    let agent = agent.display();
    format!(
        "trap '__stockade_rc=$?; trap - EXIT; {agent} session-state {fd} {fd}>&{fd} 2>/dev/null; exit $__stockade_rc' EXIT\n\
         __stockade_cmd=$1; shift\n\
         eval \"$__stockade_cmd\" {fd}>&-\n"
    )
}

/// The record: "S1\0" cwd "\0" (K=V "\0")* "S1-END\0".
fn record(cwd: &[u8], env: impl Iterator<Item = (OsString, OsString)>) -> Vec<u8> {
    let mut out = b"S1\0".to_vec();
    out.extend_from_slice(cwd);
    out.push(0);
    for (k, v) in env {
        if NOT_KEPT.iter().any(|n| k == *n) {
            continue;
        }
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out.extend_from_slice(b"S1-END\0");
    out
}

/// The last complete record in `bytes`.
fn last_record(bytes: &[u8]) -> Option<State> {
    let starts: Vec<usize> = bytes
        .windows(3)
        .enumerate()
        .filter(|(_, w)| *w == b"S1\0")
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .rev()
        .find_map(|&i| record_at(&bytes[i + 3..]))
}

/// The record whose "S1\0" came just before `bytes`, if it is complete.
fn record_at(bytes: &[u8]) -> Option<State> {
    let mut items = bytes.split(|b| *b == 0);
    let cwd = PathBuf::from(OsString::from_vec(items.next()?.to_vec()));
    if !cwd.is_absolute() {
        return None;
    }
    let mut env = Vec::new();
    for item in items {
        if item == b"S1-END" {
            return Some(State { cwd, env });
        }
        let eq = item.iter().position(|b| *b == b'=')?;
        env.push((
            OsString::from_vec(item[..eq].to_vec()),
            OsString::from_vec(item[eq + 1..].to_vec()),
        ));
    }
    None
}

/// `stockade session-state FD`: this process's cwd and environment (the
/// shell's, inherited) as one record on FD. Exit 0, or 1 when it could not.
pub(crate) fn main(args: &[OsString]) -> i32 {
    let Some(fd) = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<i32>().ok())
    else {
        return 1;
    };
    let Ok(cwd) = std::env::current_dir() else {
        return 1;
    };
    let rec = record(cwd.as_os_str().as_bytes(), std::env::vars_os());
    if rec.len() > MAX_RECORD || fd < 3 || crate::sys::write_all(fd, &rec).is_err() {
        return 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_complete_record_wins() {
        let env = vec![
            (OsString::from("A"), OsString::from("1=2")),
            (OsString::from("SHLVL"), OsString::from("1")),
        ];
        let mut bytes = record(b"/tmp", env.clone().into_iter());
        bytes.extend(record(b"/work", env.into_iter()));
        bytes.extend_from_slice(b"S1\0/etc\0B=1\0"); // cut short
        let s = last_record(&bytes).unwrap();
        assert_eq!(s.cwd, PathBuf::from("/work"));
        assert_eq!(s.env, vec![(OsString::from("A"), OsString::from("1=2"))]);
        assert!(last_record(b"S1\0relative\0S1-END\0").is_none());
        assert!(last_record(b"garbage").is_none());
    }

    #[test]
    fn the_trap_names_a_plain_agent_path() {
        assert!(!plain_path(std::path::Path::new("/a b/it's")));
        assert!(plain_path(std::path::Path::new("/.stockade/stockade")));
        let w = wrapper(std::path::Path::new("/.stockade/stockade"), 7);
        assert!(w.contains("session-state 7 7>&7"), "{w}");
        assert!(w.contains("eval \"$__stockade_cmd\" 7>&-"), "{w}");
    }
}
