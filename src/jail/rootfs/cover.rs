//! Covers over denied paths (`plan::deny`): an empty read-only file or
//! directory bound over what a bind shows there. Each is made on the new
//! root's tmpfs under a name of ours (one inode per cover, so that an
//! open of one can be told from an open of another: see [`watch`]),
//! cloned onto its denied path, and unlinked once every cover is in
//! place, so the jail never sees them but as the covers.

use std::ffi::OsStr;
use std::path::Path;

use super::{step_error, Root, Step};
use crate::jail::error::JailError;
use crate::sys::{
    self, at, Errno, SysError, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};

const FILE: &str = ".stockade-cover-file";
const DIR: &str = ".stockade-cover-dir";

/// The empty sources made on the root, by name.
#[derive(Default)]
pub(super) struct Made {
    names: Vec<String>,
}

/// Cover `dst` (a path some bind shows) with an empty read-only `dir` or
/// file, then check the mount point shows the cover.
pub(super) fn cover(
    root: &mut Root,
    made: &mut Made,
    dst: &Path,
    dir: bool,
    id: Option<(u64, u64, u64)>,
) -> Result<(), JailError> {
    let name = format!("{}-{}", if dir { DIR } else { FILE }, made.names.len());
    let name = OsStr::new(&name);
    if root.bound {
        // The root is a host tree: the empty sources would be made there.
        let err = SysError {
            call: "cover",
            arg: "a bind replaced the root".into(),
            errno: Errno::EINVAL,
        };
        return Err(step_error("cover", dst, err));
    }
    if dir {
        at::mkdir(&root.fd, name, 0o555, Path::new(name)).step("cover", dst)?;
    } else {
        at::write_file(&root.fd, name, b"", 0o444, Path::new(name)).step("cover", dst)?;
    }
    made.names.push(name.to_string_lossy().into_owned());
    let (sdev, sino, _) = at::stat(&root.fd, name, dst).step("cover", dst)?;
    // The parent as the payload will see it, creating nothing.
    let target = dst.file_name().unwrap_or_default();
    let parent = dst.parent().unwrap_or(Path::new(""));
    let opened;
    let pfd = if parent.as_os_str().is_empty() {
        &root.fd
    } else {
        opened = sys::open_in_root(&root.fd, parent, libc::O_PATH | libc::O_DIRECTORY)
            .step("cover", dst)?;
        &opened
    };
    // The denied path must still be what the plan saw: of the same kind,
    // not a symlink swapped in since.
    let (dev, ino, mode, nlink) = at::stat_links(pfd, target, dst).step("cover", dst)?;
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    let same = id.is_none_or(|(d, i, n)| (d, i) == (dev, ino) && (is_dir || nlink <= n));
    if is_dir != dir || mode & libc::S_IFMT == libc::S_IFLNK || !same {
        let err = SysError {
            call: "cover",
            arg: "the denied path changed since the plan (another file, kind or hard link)".into(),
            errno: Errno::ESTALE,
        };
        return Err(step_error("cover", dst, err));
    }
    let tree = at::open_tree_clone(&root.fd, name, dst).step("cover", dst)?;
    sys::mount_setattr(
        &tree,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        true,
        dst,
    )
    .step("cover", dst)?;
    at::move_mount(&tree, pfd, target, dst).step("cover", dst)?;
    let (d2, i2, _) = at::stat(pfd, target, dst).step("cover", dst)?;
    if (d2, i2) != (sdev, sino) {
        return Err(super::verify_error(dst));
    }
    root.mounted(dst);
    Ok(())
}

/// Unlink the empty sources from the root (the covers keep them).
pub(super) fn finish(made: &Made, base: &Path) -> Result<(), JailError> {
    let gone = |r: std::io::Result<()>, n: &str| {
        r.map_err(|e| {
            let err = SysError {
                call: "unlink",
                arg: n.into(),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            };
            step_error("cover", Path::new(n), err)
        })
    };
    for n in &made.names {
        let p = base.join(n);
        if n.starts_with(DIR) {
            gone(std::fs::remove_dir(p), n)?;
        } else {
            gone(std::fs::remove_file(p), n)?;
        }
    }
    Ok(())
}

/// Watch every cover (in the plan's order; after pivot_root, by its jail
/// path) for opens and reads, on one inotify instance whose watch
/// descriptors are 1, 2, … in that order: the supervisor maps them back
/// (`observe::masks`). Returns the instance and how many covers are
/// watched (the first N; a watch refused, say for lack of inotify
/// watches, ends the list). None when there are no covers.
pub fn watch(covers: &[&Path]) -> Option<(std::os::fd::OwnedFd, u32)> {
    if covers.is_empty() {
        return None;
    }
    let fd = sys::inotify_init().ok()?;
    let mut n = 0u32;
    for p in covers {
        match sys::inotify_add_watch(&fd, p, sys::MASK_EVENTS) {
            Ok(wd) if wd == n as i32 + 1 => n += 1,
            _ => break,
        }
    }
    Some((fd, n))
}
