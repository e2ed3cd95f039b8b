//! inotify: the supervisor's view of opens and reads of the covers over
//! denied paths (made in the jail by init, read by the supervisor).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{err, last_errno, SysResult};

/// What a cover's watch reports: opens, and closes (so that repeated
/// opens are not merged into one event while unread: the kernel merges
/// only identical events in a row). A cover is empty: nothing is ever
/// read from it.
pub const MASK_EVENTS: u32 = libc::IN_OPEN | libc::IN_CLOSE_NOWRITE | libc::IN_CLOSE_WRITE;

/// A new inotify instance (non-blocking, close-on-exec).
pub fn inotify_init() -> SysResult<OwnedFd> {
    // SAFETY: plain inotify_init1(2); the fd is owned at once.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        return err("inotify_init1", "IN_CLOEXEC|IN_NONBLOCK", last_errno());
    }
    // SAFETY: fresh fd from the kernel, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Watch `path` (not following a symlink at its end) for `mask`: the
/// watch descriptor.
pub fn inotify_add_watch(fd: &OwnedFd, path: &Path, mask: u32) -> SysResult<i32> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .or_else(|_| err("inotify_add_watch", path.display(), super::Errno::EINVAL))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let wd =
        unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask | libc::IN_DONT_FOLLOW) };
    if wd < 0 {
        return err("inotify_add_watch", path.display(), last_errno());
    }
    Ok(wd)
}
