//! Other host paths that show a denied path: mounts of the same
//! filesystem whose root holds it (a bind mount on the host, a second
//! mount of the same device), read from /proc/self/mountinfo. Each is
//! checked to be the very same inode before it is denied too.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One mount: its device, the path of its root inside the filesystem,
/// and where it is mounted.
pub(super) struct Mount {
    dev: String,
    root: PathBuf,
    at: PathBuf,
}

/// The mounts of stockade's own mount namespace (the host's view).
pub(super) fn mounts() -> Vec<Mount> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ').skip(2);
            let dev = f.next()?.to_string();
            let root = crate::sys::mountinfo_path(f.next()?);
            let at = crate::sys::mountinfo_path(f.next()?);
            Some(Mount { dev, root, at })
        })
        .collect()
}

/// The other host paths where a mount shows `host` (canonical), each the
/// same inode as `host`.
pub(super) fn of(all: &[Mount], host: &Path) -> Vec<PathBuf> {
    // The mount `host` is reached through: the deepest mount point above
    // it, the last mounted there (the one on top).
    let Some(own) = all
        .iter()
        .enumerate()
        .filter(|(_, m)| host.starts_with(&m.at))
        .max_by_key(|(i, m)| (m.at.components().count(), *i))
        .map(|(_, m)| m)
    else {
        return Vec::new();
    };
    let Ok(rest) = host.strip_prefix(&own.at) else {
        return Vec::new();
    };
    let inside = own.root.join(rest);
    let Ok(id) = std::fs::symlink_metadata(host).map(|m| (m.dev(), m.ino())) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for m in all.iter().filter(|m| m.dev == own.dev) {
        let Ok(r) = inside.strip_prefix(&m.root) else {
            continue;
        };
        let alias = match r.as_os_str().is_empty() {
            true => m.at.clone(),
            false => m.at.join(r),
        };
        let same = std::fs::symlink_metadata(&alias).is_ok_and(|a| (a.dev(), a.ino()) == id);
        if alias != host && same && !out.contains(&alias) {
            out.push(alias);
        }
    }
    out
}
