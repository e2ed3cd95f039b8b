//! The binds of a jail started by host root with `Identity::idmap` (bwrap run
//! by root): their mount trees are cloned here, in the host's mount
//! namespace and before clone, and idmapped so that files of host uid and
//! gid 0 belong to the leased id the jail's ids map to: inside, host
//! root's files are the jail root's, as bwrap's payload (host root) sees
//! them, while the jail's processes stay that unprivileged id.
//!
//! Only host root may idmap them (the kernel wants CAP_SYS_ADMIN over each
//! filesystem's owner, the initial user namespace), so init, which holds
//! capabilities in the jail's user namespace only, cannot: it gets the
//! trees as inherited fds and attaches them where it would have attached
//! its own clones (`jail::rootfs`).
//!
//! The policy's overlays (`--overlay`) run by host root, too (without
//! `Identity::idmap`): each host directory's owner is mapped to the host
//! id the jail's user maps to, so that the jail may change in its overlay
//! what that owner may (see [`workspaces`]).
//!
//! Per mount: a tree whose mounts all take an idmap gets it at once, as
//! one detached tree. One that holds filesystems that refuse an idmap
//! (proc, sysfs, cgroup, devtmpfs, a FUSE mount, a mount already
//! idmapped: `--bind / /`) is cloned mount by mount (the kernel idmaps a
//! whole detached tree or its top alone): its top and every mount beneath
//! it that takes the idmap get it, the others are bound as they are, and
//! init attaches them where the host has them, parents first. A bind whose
//! top takes no idmap (`--bind /proc /x`), or anything that fails here, is
//! left to init, which binds it as for any other caller.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::jail::rootfs::Idmapped;
use crate::plan::{Plan, RootStep};
use crate::sys::{self, TreeAttrs, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// One entry per plan step: the idmapped trees of a bind or the layers of
/// an overlay, None for any other step (and for one left to init). Empty without `Identity::idmap`.
/// The caller must be single-threaded (the user namespace's helper is a
/// fork).
/// The second value: a warning for the outcome when no bind could be
/// idmapped because the idmap's user namespace could not be made (the
/// binds are then plain: host root's files show as the overflow id).
pub(super) fn trees(plan: &Plan) -> (Vec<Option<Idmapped>>, Option<String>) {
    let Some((uid, gid)) = plan.identity.idmap else {
        return workspaces(plan);
    };
    let binds = plan
        .root
        .steps
        .iter()
        .any(|s| matches!(s, RootStep::Bind { .. } | RootStep::Overlay { .. }));
    if !binds {
        return (Vec::new(), None);
    }
    let userns = match sys::userns_with_maps(&format!("0 {uid} 1\n"), &format!("0 {gid} 1\n")) {
        Ok(u) => u,
        Err(e) => {
            return (
                Vec::new(),
                Some(format!(
                    "idmapped binds: the idmap's user namespace could not be made ({e}): the binds are plain, host root's files in them show as the overflow id (65534)"
                )),
            )
        }
    };
    let mut mounts = None;
    let trees = plan
        .root
        .steps
        .iter()
        .map(|s| match s {
            RootStep::Bind {
                src,
                dst,
                writable,
                devices,
                ..
            } => {
                let b = Bind {
                    dst,
                    writable: *writable,
                    devices: *devices,
                    userns: &userns,
                };
                b.trees(src, &mut mounts).map(Idmapped::Bind)
            }
            RootStep::Overlay {
                dst, lower, writes, ..
            } => overlay(dst, lower, writes.dirs(), &userns),
            _ => None,
        })
        .collect();
    (trees, None)
}

/// The policy's overlays (`--overlay HOST_DIR:INNER`) when host root runs
/// them: each host directory's lower layer idmapped so that its owner's
/// files (and its group's) show as the jail's user's (and group's), which
/// may then change them in the overlay as their owner would (the host
/// directory itself is never written). Not where its owner is the jail's
/// host id already, nor in a user namespace of the caller's. None for a
/// layer that takes no idmap (its filesystem refuses one): it is used as
/// it is, and the warning says so.
fn workspaces(plan: &Plan) -> (Vec<Option<Idmapped>>, Option<String>) {
    use std::os::unix::fs::MetadataExt;
    let any = plan.root.steps.iter().any(|s| {
        matches!(
            s,
            RootStep::Overlay {
                workspace: Some(_),
                ..
            }
        )
    });
    let jail = super::workspace::jail_host_ids(plan);
    let (true, 0, true, Some((ju, jg))) =
        (any, sys::geteuid(), sys::host_root_is_zero_here(), jail)
    else {
        return (Vec::new(), None);
    };
    let mut refused = None;
    let trees = plan
        .root
        .steps
        .iter()
        .map(|s| {
            let RootStep::Overlay {
                dst,
                lower,
                workspace: Some(_),
                ..
            } = s
            else {
                return None;
            };
            let src = lower.first()?;
            let m = std::fs::metadata(src).ok()?;
            if (m.uid(), m.gid()) == (ju, jg) {
                return None;
            }
            let userns = sys::userns_with_maps(
                &format!("{} {ju} 1\n", m.uid()),
                &format!("{} {jg} 1\n", m.gid()),
            );
            let got = userns.ok().and_then(|userns| {
                let b = Bind {
                    dst,
                    writable: false,
                    devices: false,
                    userns: &userns,
                };
                let fd = sys::open_path_nofollow(src).ok()?;
                let tree = b.clone(&fd, false)?;
                b.idmap(&tree, false).then_some(tree)
            });
            if got.is_none() {
                refused.get_or_insert(format!(
                    "--overlay {}: its owner's files could not be shown as the jail user's (the filesystem takes no idmapped mount): the jail may change only what its own host id may",
                    src.display()
                ));
            }
            Some(Idmapped::Overlay {
                upper: None,
                lower: vec![got?],
            })
        })
        .collect();
    (trees, refused)
}

/// An overlay's layers, idmapped (each layer is one mount to overlayfs):
/// the directory that holds both the upper and the work directory (they
/// must share a mount), the lower ones top to bottom. None when one of
/// them takes no idmap: init uses the host's directories as they are.
fn overlay(
    dst: &Path,
    lower: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    userns: &OwnedFd,
) -> Option<Idmapped> {
    let layer = |path: &Path, writable: bool| {
        let b = Bind {
            dst,
            writable,
            devices: false,
            userns,
        };
        let fd = sys::open_path_nofollow(path).ok()?;
        let tree = b.clone(&fd, false)?;
        b.idmap(&tree, false).then_some(tree)
    };
    let upper = match upper {
        Some((u, w)) => {
            let common: PathBuf = u
                .components()
                .zip(w.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect();
            // Both the same directory (overlayfs refuses that itself): ".".
            let rel = |p: &Path| {
                let r = p.strip_prefix(&common).ok()?;
                Some(match r.as_os_str().is_empty() {
                    true => PathBuf::from("."),
                    false => r.to_path_buf(),
                })
            };
            // A mount between them would hide one of them in the clone.
            let mounts: Vec<Option<u64>> = [&common, u, w]
                .iter()
                .map(|p| sys::open_path_nofollow(p).ok().and_then(|fd| mount_id(&fd)))
                .collect();
            if mounts[0].is_none() || mounts.iter().any(|m| *m != mounts[0]) {
                return None;
            }
            Some((layer(&common, true)?, rel(u)?, rel(w)?))
        }
        None => None,
    };
    let lower = lower
        .iter()
        .rev()
        .map(|l| layer(l, false))
        .collect::<Option<Vec<_>>>()?;
    Some(Idmapped::Overlay { upper, lower })
}

/// One bind's attributes and the user namespace of its idmap.
struct Bind<'a> {
    dst: &'a Path,
    writable: bool,
    devices: bool,
    userns: &'a OwnedFd,
}

impl Bind<'_> {
    /// `src`'s mount tree, idmapped: one detached tree when every mount in
    /// it takes the idmap, else its top alone and each mount beneath it
    /// apart (the kernel idmaps a whole detached tree or its top only),
    /// idmapped where it takes one. None when its top does not: init binds
    /// it as for any caller. `mounts`: the host's mount points, read once.
    fn trees(
        &self,
        src: &Path,
        mounts: &mut Option<Vec<PathBuf>>,
    ) -> Option<Vec<(PathBuf, OwnedFd)>> {
        let fd = sys::open_path_nofollow(src).ok()?;
        let whole = self.clone(&fd, true)?;
        if self.idmap(&whole, true) {
            return Some(vec![(PathBuf::new(), whole)]);
        }
        drop(whole);
        let top = self.clone(&fd, false)?;
        if !self.idmap(&top, false) {
            return None;
        }
        let mut out = vec![(PathBuf::new(), top)];
        let mounts = mounts.get_or_insert_with(host_mount_points);
        for rel in beneath(src, mounts) {
            // A mount that is gone, or hidden where it was, is left out.
            let Ok(fd) = sys::open_path_nofollow(&src.join(&rel)) else {
                continue;
            };
            if let Some(t) = self.clone(&fd, false) {
                // Refused (EINVAL: its filesystem takes no idmap; EPERM:
                // already idmapped): as it is on the host.
                self.idmap(&t, false);
                out.push((rel, t));
            }
        }
        Some(out)
    }

    /// A detached clone of the mount at `fd` (and those beneath it when
    /// `recursive`): private, nosuid, nodev unless `devices`, read-only
    /// unless `writable`.
    fn clone(&self, fd: &OwnedFd, recursive: bool) -> Option<OwnedFd> {
        let tree = sys::open_tree_clone_with(fd, recursive, self.dst).ok()?;
        let mut set = MOUNT_ATTR_NOSUID;
        if !self.devices {
            set |= MOUNT_ATTR_NODEV;
        }
        if !self.writable {
            set |= MOUNT_ATTR_RDONLY;
        }
        let attrs = TreeAttrs {
            set,
            private: true,
            idmap: None,
            recursive,
        };
        sys::mount_setattr_tree(&tree, &attrs, self.dst).ok()?;
        Some(tree)
    }

    /// Idmap the detached `tree` (every mount in it when `recursive`);
    /// false when the kernel refused.
    fn idmap(&self, tree: &OwnedFd, recursive: bool) -> bool {
        let attrs = TreeAttrs {
            set: 0,
            private: false,
            idmap: Some(self.userns),
            recursive,
        };
        sys::mount_setattr_tree(tree, &attrs, self.dst).is_ok()
    }
}

/// The id of the mount an open fd is on (its fdinfo's `mnt_id`).
fn mount_id(fd: &OwnedFd) -> Option<u64> {
    use std::os::fd::AsRawFd;
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The mount points of the host's mount namespace (ours), from mountinfo.
fn host_mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(sys::mountinfo_path)
        .collect()
}

/// The mount points beneath `src`, relative to it, parents before
/// children, each once (the last of mounts stacked on one path is seen).
fn beneath(src: &Path, mounts: &[PathBuf]) -> Vec<PathBuf> {
    let mut rel: Vec<PathBuf> = mounts
        .iter()
        .filter_map(|m| m.strip_prefix(src).ok())
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    rel.sort();
    rel.dedup();
    rel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_beneath_a_source_relative_to_it() {
        let m: Vec<PathBuf> = [
            "/",
            "/proc",
            "/sys",
            "/sys/fs/cgroup",
            "/srv/a",
            "/srvx",
            "/srv",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let b = beneath(Path::new("/"), &m);
        let want: Vec<PathBuf> = ["proc", "srv", "srv/a", "srvx", "sys", "sys/fs/cgroup"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(b, want);
        let b = beneath(Path::new("/srv"), &m);
        assert_eq!(b, [PathBuf::from("a")]);
    }
}
