//! Copy-on-write workspaces after the run (`--overlay`): an overlay's
//! upper layer read against the host directory under it (`walk`), the
//! changes as the outcome lists them, their unified diff (`diff`), their
//! commit to the host directory (`commit`), and the record beside a kept
//! upper layer (`record`, for `stockade overlay commit` and `discard`).
//!
//! Everything in an upper layer is the payload's, hostile: it is read
//! through directory fds, one plain name at a time, never following a
//! symlink, bounded in entries, depth and bytes. The host directory is
//! written the same way, from an fd of its top, each file replaced
//! atomically (a temporary file beside it, then renameat2); a path that
//! crosses a symlink, or a directory that moved out of the host directory
//! meanwhile, is refused and reported, never written through.

#![deny(unsafe_code)]

mod commit;
mod cursor;
mod diff;
pub mod record;
mod snapshot;
mod walk;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::outcome::{Change, Committed};
use crate::policy::Workspaces;

pub use snapshot::{copy_tree, empty_dir};
pub use walk::{Entry, Walked};

/// One overlay's layers, open: the upper layer's top (any fd of it) and
/// the host directory's, and where the jail saw it.
pub struct Layer {
    pub upper: OwnedFd,
    pub host: OwnedFd,
    /// The host directory's path (for the messages).
    pub host_path: PathBuf,
    /// INNER: where the jail saw it.
    pub inner: PathBuf,
    /// When the host directory was last as the overlay's changes were made
    /// over it (before its overlay was mounted): what the host changed
    /// after is not overwritten or removed by a commit. None: not known
    /// (a kept layer recorded before this was kept).
    pub since: Option<crate::sys::tree::Time>,
    /// What earlier commits of these layers left on the host (a path
    /// beneath it, the ctime our change gave it): not a change of the
    /// host's.
    pub ours: std::collections::BTreeMap<PathBuf, crate::sys::tree::Time>,
}

/// The changes of every overlay of a run, as walked.
pub struct Review {
    /// Per layer, in order: its changes, or why they could not be read.
    pub walked: Vec<Result<Walked, String>>,
}

impl Review {
    /// Walk each layer (`policy`: the caps).
    pub fn of(layers: &[Layer], policy: &Workspaces) -> Review {
        let limits = walk::Limits {
            max_file: policy.max_file(),
            hash: policy.max_changes() as usize,
        };
        let walked = layers
            .iter()
            .map(|l| {
                walk::walk(&l.upper, &l.host, limits).map_err(|e| {
                    format!(
                        "{}: the upper layer could not be read: {e}",
                        l.inner.display()
                    )
                })
            })
            .collect();
        Review { walked }
    }

    /// Why the changes are not all known, if they are not: a layer that
    /// could not be read, or not whole.
    pub fn incomplete(&self) -> Option<String> {
        self.walked.iter().find_map(|w| match w {
            Err(why) => Some(why.clone()),
            Ok(w) => w.cut.clone(),
        })
    }

    /// The changes as the outcome lists them, at most `max`, and whether
    /// there are more (or some could not be read).
    pub fn changes(&self, layers: &[Layer], max: u64) -> (Vec<Change>, bool) {
        let mut out = Vec::new();
        let mut more = self.incomplete().is_some();
        for (w, l) in self.walked.iter().zip(layers) {
            let Ok(w) = w else { continue };
            for e in &w.entries {
                if out.len() as u64 >= max {
                    more = true;
                    break;
                }
                out.push(change(&l.inner, e));
            }
        }
        (out, more)
    }

    /// The changes' unified diff (git's format), text files only.
    pub fn diff(&self, layers: &[Layer], policy: &Workspaces) -> Vec<u8> {
        let mut out = Vec::new();
        for (w, l) in self.walked.iter().zip(layers) {
            if let Ok(w) = w {
                diff::write(&mut out, l, &w.entries, policy.max_file());
            }
        }
        out
    }

    /// Apply the changes to the host directories; nothing at all when they
    /// are not all known.
    pub fn commit(&self, layers: &[Layer], policy: &Workspaces) -> Committed {
        self.commit_keeping(layers, policy).0
    }

    /// [`Review::commit`], and per layer what it left on the host (see
    /// `Layer::ours`, which it extends), for a later commit of the same
    /// layers.
    pub fn commit_keeping(
        &self,
        layers: &[Layer],
        policy: &Workspaces,
    ) -> (
        Committed,
        Vec<std::collections::BTreeMap<PathBuf, crate::sys::tree::Time>>,
    ) {
        let mut ours: Vec<_> = layers.iter().map(|l| l.ours.clone()).collect();
        if let Some(why) = self.incomplete() {
            let skipped = Committed {
                skipped: Some(format!("nothing committed: {why}")),
                ..Committed::default()
            };
            return (skipped, ours);
        }
        let mut c = commit::Commit::new(policy);
        for ((w, l), o) in self.walked.iter().zip(layers).zip(ours.iter_mut()) {
            if let Ok(w) = w {
                o.extend(c.layer(l, &w.entries));
            }
        }
        (c.finish(), ours)
    }
}

/// The jail path of `rel` beneath `inner`, as the outcome shows it.
pub fn jail_path(inner: &Path, rel: &Path) -> String {
    inner.join(rel).to_string_lossy().into_owned()
}

/// One entry as the outcome lists it.
fn change(inner: &Path, e: &Entry) -> Change {
    let kind = e.new.map(|s| s.kind()).or(e.old).unwrap_or(0);
    let file = e.new.filter(|s| s.kind() == libc::S_IFREG);
    Change {
        path: jail_path(inner, &e.rel),
        kind: e.kind,
        file_type: walk::type_name(kind),
        size: file.map(|s| s.size),
        sha256: e.sha256.map(|h| walk::hex(&h)),
        target: e.target.as_ref().map(|t| t.to_string_lossy().into_owned()),
        mode: e
            .new
            .filter(|s| s.kind() != libc::S_IFLNK)
            .map(|s| format!("{:04o}", walk::perm(s.mode))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ChangeKind;
    use std::os::unix::fs::symlink;

    /// An upper layer and a host directory of plain files (no whiteouts:
    /// those need overlayfs; tests/overlay.rs has them).
    struct Trees {
        top: PathBuf,
    }

    impl Trees {
        fn new(tag: &str) -> Trees {
            let top =
                std::env::temp_dir().join(format!("stockade-ws-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&top);
            for d in ["upper/sub", "upper/planted", "host/sub", "outside"] {
                std::fs::create_dir_all(top.join(d)).unwrap();
            }
            Trees { top }
        }

        fn write(&self, p: &str, text: &str) {
            std::fs::write(self.top.join(p), text).unwrap();
        }

        fn layer(&self) -> Layer {
            let open = |p: &str| crate::sys::open_dir_path(&self.top.join(p)).unwrap();
            Layer {
                upper: open("upper"),
                host: open("host"),
                host_path: self.top.join("host"),
                inner: PathBuf::from("/w"),
                since: None,
                ours: Default::default(),
            }
        }
    }

    impl Drop for Trees {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.top);
        }
    }

    #[test]
    fn changes_are_read_and_committed_never_through_a_host_symlink() {
        let t = Trees::new("commit");
        t.write("host/sub/x", "old\n");
        t.write("host/same", "same\n");
        t.write("upper/sub/x", "new\n");
        t.write("upper/same", "same\n");
        t.write("upper/added", "added\n");
        t.write("upper/planted/f", "f\n");
        symlink("/etc/passwd", t.top.join("upper/link")).unwrap();
        // The host has a symlink where the upper layer has a directory
        // that was one when the jail ran (not opaque).
        symlink(t.top.join("outside"), t.top.join("host/planted")).unwrap();
        let layers = [t.layer()];
        let policy = Workspaces::default();
        let review = Review::of(&layers, &policy);
        let (changes, more) = review.changes(&layers, 100);
        assert!(!more);
        let got: Vec<(&str, ChangeKind)> =
            changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(
            got,
            [
                ("/w/added", ChangeKind::Added),
                ("/w/link", ChangeKind::Added),
                ("/w/planted/f", ChangeKind::Added),
                ("/w/sub/x", ChangeKind::Modified),
            ]
        );
        assert_eq!(changes[1].target.as_deref(), Some("/etc/passwd"));
        assert_eq!(
            changes[0].sha256.as_deref(),
            Some("3428719b7688c78a0cc8ba4b9e80b4e464c815fbccfd4b20695a15ffcefc22af")
        );
        let done = review.commit(&layers, &policy);
        assert_eq!(done.applied, ["/w/added", "/w/link", "/w/sub/x"]);
        assert_eq!(done.refused.len(), 1);
        assert_eq!(done.refused[0].path, "/w/planted/f");
        assert!(
            done.refused[0]
                .reason
                .contains("a symlink on the host path"),
            "{:?}",
            done.refused
        );
        assert_eq!(std::fs::read_dir(t.top.join("outside")).unwrap().count(), 0);
        assert_eq!(std::fs::read(t.top.join("host/sub/x")).unwrap(), b"new\n");
        assert_eq!(
            std::fs::read_link(t.top.join("host/link")).unwrap(),
            Path::new("/etc/passwd")
        );
        // Nothing of ours is left beside the files.
        let names: Vec<_> = std::fs::read_dir(t.top.join("host"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".stockade")),
            "{names:?}"
        );
    }

    #[test]
    fn the_listing_is_capped_and_says_so() {
        let t = Trees::new("cap");
        for i in 0..5 {
            t.write(&format!("upper/f{i}"), "x");
        }
        let layers = [t.layer()];
        let review = Review::of(&layers, &Workspaces::default());
        let (changes, more) = review.changes(&layers, 3);
        assert_eq!(changes.len(), 3);
        assert!(more);
        assert_eq!(
            changes[0].sha256.as_deref(),
            Some("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
        );
    }
}
