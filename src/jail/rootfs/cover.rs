//! Covers over denied paths (`plan::deny`): an empty read-only file or
//! directory bound over what a bind shows there. The empty ones are made
//! on the new root's tmpfs under a name of ours, cloned onto each denied
//! path, and unlinked once every cover is in place, so the jail never
//! sees them but as the covers.

use std::ffi::OsStr;
use std::path::Path;

use super::{step_error, Root, Step};
use crate::jail::error::JailError;
use crate::sys::{
    self, at, Errno, SysError, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};

const FILE: &str = ".stockade-cover-file";
const DIR: &str = ".stockade-cover-dir";

/// Which of the empty sources were made on the root.
#[derive(Default)]
pub(super) struct Made {
    file: bool,
    dir: bool,
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
    let name = OsStr::new(if dir { DIR } else { FILE });
    if root.bound {
        // The root is a host tree: the empty sources would be made there.
        let err = SysError {
            call: "cover",
            arg: "a bind replaced the root".into(),
            errno: Errno::EINVAL,
        };
        return Err(step_error("cover", dst, err));
    }
    if dir && !made.dir {
        at::mkdir(&root.fd, name, 0o555, Path::new(DIR)).step("cover", dst)?;
        made.dir = true;
    } else if !dir && !made.file {
        at::write_file(&root.fd, name, b"", 0o444, Path::new(FILE)).step("cover", dst)?;
        made.file = true;
    }
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
    if made.file {
        gone(std::fs::remove_file(base.join(FILE)), FILE)?;
    }
    if made.dir {
        gone(std::fs::remove_dir(base.join(DIR)), DIR)?;
    }
    Ok(())
}
