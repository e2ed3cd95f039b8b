//! Paths denied inside allowed trees (`--deny`, `--deny-glob`,
//! `filesystem.deny`): which host paths they name, every route to them
//! through the binds, and how each is hidden.
//!
//! Expansion happens here, before clone, with a bound on the directory
//! entries visited. A denied path's other names are denied with it:
//! every bind that shows it (the same host tree bound twice), and every
//! hard link of a denied file (or of a file beneath a denied directory)
//! found in the trees the caller bound. A hard link that may lie in a
//! bind that was not searched (same filesystem, links unaccounted for)
//! refuses the run. Another mount of the same filesystem on the host
//! that shows a denied path (a bind mount made on the host) is found in
//! /proc/self/mountinfo and denied too. Symlinks need nothing: they resolve, inside the jail
//! or through Landlock's check of the target, to the hidden path.
//!
//! With namespaces, each jail path that shows a denied path is covered
//! (an empty read-only file or directory bound over it, after every other
//! mount, before the root is sealed): [`covers`]. Without them, the
//! Landlock rules are split around it ([`split`]).

#![deny(unsafe_code)]

mod alias;
mod split;
mod walk;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use split::split;

use super::root::RootStep;
use super::SetupError;
use crate::policy::{MountSpec, Policy};

/// Landlock rules (paths and grants), and what was masked to get them.
pub(super) type Split = (Vec<(PathBuf, super::Access)>, Vec<Masked>);

/// One path the payload cannot reach, as the outcome lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Masked {
    /// Where it was hidden: the jail path covered, or (in the fallback)
    /// the host path left out of the Landlock rules.
    pub path: PathBuf,
    /// The host path it shows.
    pub host: PathBuf,
    /// `file` or `dir`.
    pub kind: String,
    /// `cover` (a mount over it) or `landlock` (no rule reaches it).
    pub how: String,
    /// What asked for it: `--deny`, `--deny-glob PATTERN`, or
    /// `hard link of PATH`.
    pub reason: String,
}

/// One denied host path (canonical).
#[derive(Debug, Clone)]
pub(super) struct Denied {
    pub host: PathBuf,
    pub dir: bool,
    pub reason: String,
}

impl Denied {
    fn masked(&self, path: PathBuf, how: &str) -> Masked {
        Masked {
            path,
            host: self.host.clone(),
            kind: if self.dir { "dir" } else { "file" }.into(),
            how: how.into(),
            reason: self.reason.clone(),
        }
    }
}

/// The host paths a policy denies, with every hard link found; empty
/// when it denies nothing. `steps` are the root's steps (bind sources
/// canonical).
pub(super) fn expand(p: &Policy, steps: &[RootStep]) -> Result<Vec<Denied>, SetupError> {
    if p.deny.paths.is_empty() && p.deny.globs.is_empty() {
        return Ok(Vec::new());
    }
    let max = match p.deny.max_entries {
        0 => crate::policy::DENY_MAX_ENTRIES,
        n => n,
    };
    let flag = if p.deny.globs.is_empty() {
        "--deny"
    } else {
        "--deny-glob"
    };
    let mut w = walk::Walk::new(max, flag, &p.deny.globs)?;
    for d in &p.deny.paths {
        let host = std::fs::canonicalize(d)
            .map_err(|e| SetupError::io("--deny", d.display().to_string(), &e))?;
        let m = std::fs::symlink_metadata(&host)
            .map_err(|e| SetupError::io("--deny", d.display().to_string(), &e))?;
        w.deny(&host, m.is_dir(), "--deny".into())?;
    }
    let roots = walk_roots(p);
    if !p.deny.globs.is_empty() || w.has_linked() {
        for r in &roots {
            w.tree(r)?;
        }
    }
    w.hard_links();
    check_unfound_links(&w, steps, &roots)?;
    Ok(with_mount_aliases(w.denied))
}

/// `denied` and every other host path a mount shows each at.
fn with_mount_aliases(mut denied: Vec<Denied>) -> Vec<Denied> {
    let mut extra = Vec::new();
    let mounts = alias::mounts();
    for d in &denied {
        for a in alias::of(&mounts, &d.host) {
            let covered = denied
                .iter()
                .chain(&extra)
                .any(|e: &Denied| a.starts_with(&e.host));
            if !covered {
                extra.push(Denied {
                    host: a,
                    dir: d.dir,
                    reason: format!("{} (another mount of {})", d.reason, d.host.display()),
                });
            }
        }
    }
    denied.extend(extra);
    denied
}

/// The trees (or single files) the caller bound (the workdir, the
/// policy's own binds and overlays), canonical, none beneath another: what globs are
/// matched in and hard links are looked for in.
fn walk_roots(p: &Policy) -> Vec<PathBuf> {
    let mut srcs: Vec<&Path> = p.workdir.host.iter().map(PathBuf::as_path).collect();
    for m in &p.mounts {
        if let MountSpec::Bind { src, .. }
        | MountSpec::DevBind { src, .. }
        | MountSpec::Workspace { src, .. } = m
        {
            srcs.push(src);
        }
    }
    let mut roots: Vec<PathBuf> = srcs
        .iter()
        .filter_map(|s| std::fs::canonicalize(s).ok())
        .collect();
    roots.sort();
    roots.dedup();
    let all = roots.clone();
    roots.retain(|r| !all.iter().any(|o| o != r && r.starts_with(o)));
    roots
}

/// A denied file whose hard links were not all found may have one in a
/// bind that was not searched (the system's): refuse when such a bind is
/// on the same filesystem.
fn check_unfound_links(
    w: &walk::Walk,
    steps: &[RootStep],
    roots: &[PathBuf],
) -> Result<(), SetupError> {
    for (dev, nlink, found, host) in w.unfound_links() {
        for s in steps {
            let RootStep::Bind { src, .. } = s else {
                continue;
            };
            if roots.iter().any(|r| src.starts_with(r)) || w.is_denied(src) {
                continue;
            }
            if std::fs::metadata(src).is_ok_and(|m| m.dev() == dev) {
                return Err(SetupError::new(
                    "--deny",
                    host.display().to_string(),
                    format!(
                        "has {nlink} hard links and only {found} were found in the trees searched; \
                         another may be reachable through the bind of {} (same filesystem), \
                         so it cannot be hidden: remove the extra links or bind less",
                        src.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Hide the denied paths: with namespaces, a cover step for each jail
/// path that shows one, appended to `steps`, the Landlock `rules` kept;
/// in the fallback (`host_rules`, the rules on host paths), no steps, and
/// those rules split around them. The rules, and what was masked.
pub(super) fn hide(
    p: &Policy,
    denied: &[Denied],
    steps: &mut Vec<RootStep>,
    rules: Vec<(PathBuf, super::Access)>,
    host_rules: Option<Vec<(PathBuf, super::Access)>>,
) -> Result<Split, SetupError> {
    let Some(host_rules) = host_rules else {
        let (covers, masked) = covers(denied, steps);
        steps.extend(covers);
        return Ok((rules, masked));
    };
    steps.clear();
    if denied.is_empty() {
        return Ok((host_rules, Vec::new()));
    }
    if p.landlock.disabled {
        return Err(SetupError::new(
            "--deny",
            "",
            "without namespaces only Landlock can hide a path, and it is disabled (--no-landlock)",
        ));
    }
    let max = match p.deny.max_entries {
        0 => crate::policy::DENY_MAX_ENTRIES,
        n => n,
    };
    split(host_rules, denied, max)
}

/// The cover steps (appended after every other step) and what they mask:
/// each jail path where a bind shows a denied path, unless a later mount
/// hides that path anyway.
fn covers(denied: &[Denied], steps: &[RootStep]) -> (Vec<RootStep>, Vec<Masked>) {
    let mut out: Vec<RootStep> = Vec::new();
    let mut masked = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for d in denied {
        for (i, s) in steps.iter().enumerate() {
            // A bind, or an overlay (`--overlay`) of one host directory:
            // what it shows of its source, the cover hides.
            let (src, dst, overlay) = match s {
                RootStep::Bind { src, dst, .. } => (src, dst, false),
                RootStep::Overlay {
                    lower,
                    dst,
                    workspace: Some(_),
                    ..
                } if lower.len() == 1 => (&lower[0], dst, true),
                _ => continue,
            };
            let (jail, dir) = if d.host == *src {
                (dst.clone(), d.dir)
            } else if let Ok(rest) = d.host.strip_prefix(src) {
                (dst.join(rest), d.dir)
            } else if src.starts_with(&d.host) {
                let dir = std::fs::symlink_metadata(src).is_ok_and(|m| m.is_dir());
                (dst.clone(), dir)
            } else {
                continue;
            };
            if shadowed(&jail, &steps[i + 1..]) || !seen.insert(jail.clone()) {
                continue;
            }
            masked.push(d.masked(Path::new("/").join(&jail), "cover"));
            // A cover on the bind's own destination hides the whole bind,
            // which the jail checked shows what it opened (or copied).
            // Through an overlay the lower layer shows a st_dev of
            // overlayfs's own (and a directory its own st_ino): not
            // compared (the kind still is).
            let id = match src.starts_with(&d.host) || overlay {
                true => None,
                false => std::fs::symlink_metadata(&d.host)
                    .ok()
                    .map(|m| (m.dev(), m.ino(), m.nlink())),
            };
            out.push(RootStep::Cover { dst: jail, dir, id });
        }
    }
    (out, masked)
}

/// Whether a later step mounts something at or above `jail` (relative).
fn shadowed(jail: &Path, later: &[RootStep]) -> bool {
    later.iter().any(|s| match s {
        RootStep::Bind { dst, .. }
        | RootStep::Tmpfs { dst, .. }
        | RootStep::Proc { dst }
        | RootStep::Dev { dst, .. }
        | RootStep::Mqueue { dst }
        | RootStep::Overlay { dst, .. } => jail.starts_with(dst),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(src: &str, dst: &str) -> RootStep {
        RootStep::Bind {
            src: PathBuf::from(src),
            dst: PathBuf::from(dst),
            writable: true,
            optional: false,
            devices: false,
        }
    }

    fn denied(host: &str, dir: bool) -> Denied {
        Denied {
            host: PathBuf::from(host),
            dir,
            reason: "--deny".into(),
        }
    }

    fn dsts(steps: &[RootStep]) -> Vec<(String, bool)> {
        steps
            .iter()
            .map(|s| match s {
                RootStep::Cover { dst, dir, .. } => (dst.display().to_string(), *dir),
                other => panic!("not a cover: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn every_bind_that_shows_a_denied_path_gets_a_cover() {
        let steps = vec![
            bind("/p", "work"),
            bind("/p", "alias"),
            bind("/p/secrets", "s"),
            bind("/p/secrets/k", "k"),
            bind("/q", "q"),
            RootStep::Tmpfs {
                dst: PathBuf::from("alias/sub"),
                data: String::new(),
            },
        ];
        let d = [
            denied("/p/.env", false),
            denied("/p/secrets", true),
            denied("/p/sub/.env", false),
        ];
        let (covers, masked) = covers(&d, &steps);
        assert_eq!(
            dsts(&covers),
            [
                ("work/.env", false),
                ("alias/.env", false),
                ("work/secrets", true),
                ("alias/secrets", true),
                ("s", true),
                // A bind of something beneath a denied directory is
                // covered whole (its kind read from the host: missing here).
                ("k", false),
                // /alias/sub is a later tmpfs: nothing of /p shows there.
                ("work/sub/.env", false),
            ]
            .map(|(p, d)| (p.to_string(), d))
        );
        assert_eq!(masked.len(), covers.len());
        assert_eq!(masked[0].path, Path::new("/work/.env"));
        // A later bind over the whole root hides everything before it.
        let mut st = steps.clone();
        st.push(bind("/r", ""));
        assert!(super::covers(&d, &st).0.is_empty());
    }
}
