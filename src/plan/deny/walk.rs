//! The bounded walk that expands denials: globs matched, hard links of
//! denied files collected. Symlinks are never followed.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Denied;
use crate::plan::SetupError;

/// What the walk found so far, and how much it may still visit.
pub(super) struct Walk {
    visited: u64,
    max: u64,
    flag: &'static str,
    globs: Vec<(String, glob::Pattern)>,
    pub(super) denied: Vec<Denied>,
    /// The paths in `denied`, for the walk's exact look-ups.
    exact: HashSet<PathBuf>,
    /// Every path seen of each inode with more than one link.
    links: HashMap<(u64, u64), Vec<PathBuf>>,
    /// Denied inodes with more than one link: (nlink, the denied path
    /// they were found at or beneath).
    linked: HashMap<(u64, u64), (u64, PathBuf)>,
}

const OPTS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

impl Walk {
    pub(super) fn new(max: u64, flag: &'static str, globs: &[String]) -> Result<Walk, SetupError> {
        let globs = globs
            .iter()
            .map(|g| {
                glob::Pattern::new(g)
                    .map(|p| (g.clone(), p))
                    .map_err(|e| SetupError::new("--deny-glob", g.as_str(), e.msg))
            })
            .collect::<Result<_, _>>()?;
        Ok(Walk {
            visited: 0,
            max,
            flag,
            globs,
            denied: Vec::new(),
            exact: HashSet::new(),
            links: HashMap::new(),
            linked: HashMap::new(),
        })
    }

    /// One more entry visited, or the bound's error naming the flag.
    fn visit(&mut self, at: &Path) -> Result<(), SetupError> {
        self.visited += 1;
        if self.visited > self.max {
            return Err(SetupError::new(
                self.flag,
                at.display().to_string(),
                format!(
                    "more than {} directory entries to look at while expanding denials; \
                     deny fewer or narrower trees",
                    self.max
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn has_linked(&self) -> bool {
        !self.linked.is_empty()
    }

    pub(super) fn is_denied(&self, p: &Path) -> bool {
        self.denied.iter().any(|d| p.starts_with(&d.host))
    }

    /// Deny `host` (canonical) and collect the linked inodes beneath it.
    pub(super) fn deny(
        &mut self,
        host: &Path,
        dir: bool,
        reason: String,
    ) -> Result<(), SetupError> {
        if self.is_denied(host) {
            return Ok(());
        }
        self.denied.retain(|d| !d.host.starts_with(host));
        self.exact.insert(host.to_path_buf());
        self.denied.push(Denied {
            host: host.to_path_buf(),
            dir,
            reason,
        });
        let top = host.to_path_buf();
        self.each(host, &mut |w, p, m| {
            w.note_link(p, m, Some(&top));
            Ok(true)
        })
    }

    /// Remember a path of an inode with several links.
    fn note_link(&mut self, p: &Path, m: &std::fs::Metadata, denied_under: Option<&Path>) {
        if m.is_dir() || m.file_type().is_symlink() || m.nlink() < 2 {
            return;
        }
        let key = (m.dev(), m.ino());
        let paths = self.links.entry(key).or_default();
        if !paths.iter().any(|q| q == p) {
            paths.push(p.to_path_buf());
        }
        if let Some(top) = denied_under {
            self.linked
                .entry(key)
                .or_insert_with(|| (m.nlink(), top.to_path_buf()));
        }
    }

    /// `root` and everything beneath it, depth first, not following
    /// symlinks; `f` says whether to descend into a directory. Entries
    /// that vanish or cannot be read are passed over (the payload could
    /// not reach what stockade cannot read either, as the same or a less
    /// privileged user).
    fn each(
        &mut self,
        root: &Path,
        f: &mut dyn FnMut(&mut Walk, &Path, &std::fs::Metadata) -> Result<bool, SetupError>,
    ) -> Result<(), SetupError> {
        let mut stack = vec![root.to_path_buf()];
        while let Some(p) = stack.pop() {
            self.visit(&p)?;
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if !f(self, &p, &m)? || !m.is_dir() {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&p) else {
                continue;
            };
            for e in rd.flatten() {
                stack.push(e.path());
            }
        }
        Ok(())
    }

    /// Walk a bound tree: match the globs, collect links; denied subtrees
    /// (already walked, or matched now) are walked once, by [`Walk::deny`].
    pub(super) fn tree(&mut self, root: &Path) -> Result<(), SetupError> {
        if self.is_denied(root) {
            return Ok(());
        }
        let root_buf = root.to_path_buf();
        self.each(root, &mut |w, p, m| {
            // Not beneath a denied directory (the walk stops there): only
            // the path itself can be denied already.
            if w.exact.contains(p) {
                return Ok(false);
            }
            if let Some(g) = w.matching(&root_buf, p) {
                let reason = format!("--deny-glob {g}");
                if !m.file_type().is_symlink() {
                    w.deny(p, m.is_dir(), reason)?;
                } else if let Ok(t) = std::fs::canonicalize(p) {
                    // Nothing can be mounted over a symlink: what it
                    // names is hidden (and the link resolves to that).
                    let dir = std::fs::metadata(&t).is_ok_and(|m| m.is_dir());
                    w.deny(&t, dir, format!("{reason} (through {})", p.display()))?;
                }
                return Ok(false);
            }
            w.note_link(p, m, None);
            Ok(true)
        })
    }

    /// The first glob `p` matches: a relative one against `p` relative to
    /// the tree's root, an absolute one against `p`.
    fn matching(&self, root: &Path, p: &Path) -> Option<String> {
        let rel = p.strip_prefix(root).ok()?;
        if rel.as_os_str().is_empty() {
            return None;
        }
        self.globs
            .iter()
            .find(|(g, pat)| {
                if g.starts_with('/') {
                    pat.matches_path_with(p, OPTS)
                } else {
                    pat.matches_path_with(rel, OPTS)
                }
            })
            .map(|(g, _)| g.clone())
    }

    /// Every other path of a denied linked inode, denied too.
    pub(super) fn hard_links(&mut self) {
        let mut extra = Vec::new();
        for (key, (_, top)) in &self.linked {
            for p in self.links.get(key).into_iter().flatten() {
                if !self.is_denied(p) {
                    extra.push((p.clone(), format!("hard link of {}", top.display())));
                }
            }
        }
        extra.sort();
        extra.dedup_by(|a, b| a.0 == b.0);
        for (p, reason) in extra {
            self.denied.push(Denied {
                host: p,
                dir: false,
                reason,
            });
        }
    }

    /// Denied linked inodes with links not found: (dev, nlink, found, a
    /// denied path of it).
    pub(super) fn unfound_links(&self) -> Vec<(u64, u64, usize, PathBuf)> {
        let mut out = Vec::new();
        for (key, (nlink, top)) in &self.linked {
            let found = self.links.get(key).map_or(0, Vec::len);
            if (found as u64) < *nlink {
                out.push((key.0, *nlink, found, top.clone()));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_beneath_the_root_and_the_walk_is_bounded() {
        let root = std::env::temp_dir().join(format!("stockade-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        for f in [".env", "a/b/.env", "a/x.env", "a/b/y.env", "out/.env"] {
            std::fs::write(root.join(f), b"x").unwrap();
        }
        // A symlinked directory is not followed.
        std::os::unix::fs::symlink(root.join("out"), root.join("a/link")).unwrap();
        // Relative patterns are matched relative to the tree's root (`a`).
        let globs = ["**/.env".to_string(), "*.env".to_string()];
        let mut w = Walk::new(100, "--deny-glob", &globs).unwrap();
        w.tree(&root.join("a")).unwrap();
        let mut got: Vec<(String, String)> = w
            .denied
            .iter()
            .map(|d| {
                let rel = d.host.strip_prefix(&root).unwrap().display().to_string();
                (rel, d.reason.clone())
            })
            .collect();
        got.sort();
        let want = [
            ("a/b/.env", "--deny-glob **/.env"),
            ("a/x.env", "--deny-glob *.env"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(got, want);
        let mut w = Walk::new(3, "--deny-glob", &globs).unwrap();
        let e = w.tree(&root).unwrap_err().to_string();
        assert!(e.starts_with("--deny-glob: "), "{e}");
        assert!(e.contains("more than 3 directory entries"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
