//! The fallback's denials: nothing can be mounted over a denied path, and
//! Landlock can only allow, so a rule on a directory that holds a denied
//! path is replaced by rules on each of its other entries, down to the
//! denied path.
//!
//! What that cannot express, and what is done about it:
//! * Landlock's rights are inherited by everything beneath a rule, so the
//!   directories on the way (from the bind down to the denied path's
//!   parent) get no right that reaches files: nothing can be created,
//!   removed or renamed in them, and an entry the host adds to them later
//!   is not reachable. A writable bind would lose that silently, so a
//!   denial inside a writable bind is refused (the reason names the
//!   directory). Inside a read-only bind nothing could be created anyway:
//!   the split is exact, but for entries added later.
//! * Those directories may still be listed, unless a denied directory
//!   lies beneath one (listing is inherited too, and would show the
//!   denied directory's names): then they cannot be listed either.
//! * Symlinks, sockets, fifos and device nodes among the entries get no
//!   rule: a symlink is checked at its target; the others become
//!   unreachable.
//! * A path is still looked up (stat shows the denied file's size and
//!   times); its content is unreachable: open, read, write, truncate,
//!   execute, list, and a link or rename that would give it rights
//!   (Landlock refuses a link or rename that gains rights).

use std::path::{Path, PathBuf};

use super::{Denied, Masked, Split};
use crate::plan::{Access, SetupError};

/// `rules` (host paths) with every denied path left out, and what was
/// masked; `max` bounds the directory entries listed.
pub(in crate::plan) fn split(
    rules: Vec<(PathBuf, Access)>,
    denied: &[Denied],
    max: u64,
) -> Result<Split, SetupError> {
    let mut out = Vec::new();
    let mut masked: Vec<Masked> = Vec::new();
    let mut budget = max;
    for (r, a) in rules {
        let inside: Vec<&Denied> = denied
            .iter()
            .filter(|d| r.starts_with(&d.host) || d.host.starts_with(&r))
            .collect();
        for d in &inside {
            if !masked.iter().any(|m| m.host == d.host) {
                masked.push(d.masked(d.host.clone(), "landlock"));
            }
        }
        if inside.is_empty() {
            out.push((r, a));
        } else if !inside.iter().any(|d| r.starts_with(&d.host)) {
            around(&r, a, denied, &mut out, &mut budget)?;
        }
    }
    Ok((out, masked))
}

/// Rules for the entries of the directory `dir` (a rule's path, or one on
/// the way down) but the denied ones, recursively.
fn around(
    dir: &Path,
    a: Access,
    denied: &[Denied],
    out: &mut Vec<(PathBuf, Access)>,
    budget: &mut u64,
) -> Result<(), SetupError> {
    if a != Access::ReadExec {
        let d = denied.iter().find(|d| d.host.starts_with(dir));
        let (flag, host) = d.map_or(("--deny", dir), |d| (flag_of(&d.reason), d.host.as_path()));
        return Err(SetupError::new(
            flag,
            host.display().to_string(),
            format!(
                "cannot be hidden without namespaces: nothing can be mounted over it, and \
                 Landlock can only allow, so every other entry of {} would be allowed instead \
                 of the directory, where nothing could then be created, removed or renamed \
                 (the bind is writable); bind it read-only, or run where user namespaces are \
                 allowed",
                dir.display()
            ),
        ));
    }
    if !denied.iter().any(|d| d.dir && d.host.starts_with(dir)) {
        out.push((dir.to_path_buf(), Access::List));
    }
    let rd = std::fs::read_dir(dir)
        .map_err(|e| SetupError::io("--deny", dir.display().to_string(), &e))?;
    for e in rd.flatten() {
        *budget = budget.checked_sub(1).ok_or_else(|| {
            SetupError::new(
                "--deny",
                dir.display().to_string(),
                "too many directory entries to allow one by one around the denied paths",
            )
        })?;
        let p = e.path();
        if denied.iter().any(|d| d.host == p) {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        if denied.iter().any(|d| d.host.starts_with(&p)) {
            around(&p, a, denied, out, budget)?;
        } else if ft.is_dir() || ft.is_file() {
            out.push((p, a));
        }
    }
    Ok(())
}

/// The flag a denial's reason names (`--deny-glob PATTERN` → `--deny-glob`).
fn flag_of(reason: &str) -> &str {
    match reason.split_once(' ') {
        Some(("--deny-glob", _)) => "--deny-glob",
        _ => "--deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_split_around_denied_paths() {
        let root = std::env::temp_dir().join(format!("stockade-split-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("p/.git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("p/secrets")).unwrap();
        for f in [
            "p/.env",
            "p/a.py",
            "p/.git/config",
            "p/.git/HEAD",
            "p/secrets/k",
        ] {
            std::fs::write(root.join(f), b"x").unwrap();
        }
        let d = |p: &str, dir: bool| Denied {
            host: root.join(p),
            dir,
            reason: "--deny".into(),
        };
        let denied = [d("p/.env", false), d("p/.git/config", false)];
        let rules = vec![
            (root.join("p"), Access::ReadExec),
            (PathBuf::from("/usr"), Access::ReadExec),
        ];
        let (mut got, masked) = split(rules.clone(), &denied, 100).unwrap();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want = vec![
            (root.join("p"), Access::List),
            (root.join("p/.git"), Access::List),
            (root.join("p/.git/HEAD"), Access::ReadExec),
            (root.join("p/.git/hooks"), Access::ReadExec),
            (root.join("p/a.py"), Access::ReadExec),
            (root.join("p/secrets"), Access::ReadExec),
            (PathBuf::from("/usr"), Access::ReadExec),
        ];
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want);
        assert_eq!(masked.len(), 2);
        // A denied directory: nothing above it may be listed.
        let (got, _) = split(rules.clone(), &[d("p/secrets", true)], 100).unwrap();
        assert!(!got.iter().any(|(_, a)| *a == Access::List), "{got:?}");
        // Writable: refused, naming the flag and the path.
        let rw = vec![(root.join("p"), Access::ReadWrite)];
        let e = split(rw, &denied, 100).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("--deny: {}/p/", root.display())),
            "{e}"
        );
        // The bound.
        let e = split(rules, &denied, 2).unwrap_err().to_string();
        assert!(e.contains("too many directory entries"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
