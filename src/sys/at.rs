//! Calls relative to a directory fd and one plain name (no `/`, no `..`):
//! the root builder walks its own fresh tmpfs with these, one component at
//! a time, never following a symlink in the last component.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{err, last_errno, Errno, SysResult};

fn cname(name: &OsStr) -> CString {
    // Names come from Plan paths, which reject NUL bytes.
    CString::new(name.as_bytes()).unwrap_or_else(|_| CString::from(c"nonexistent"))
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
pub fn open(
    dir: &OwnedFd,
    name: &OsStr,
    flags: i32,
    mode: u32,
    shown: &Path,
) -> SysResult<OwnedFd> {
    let c = cname(name);
    loop {
        // SAFETY: `c` is NUL-terminated and outlives the call; `dir` is a
        // valid fd.
        let r = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if r >= 0 {
            // SAFETY: fresh fd from the kernel, owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(r) });
        }
        let e = last_errno();
        if e != Errno::EINTR {
            return err("openat", format_args!("/{}", shown.display()), e);
        }
    }
}

/// An O_PATH fd of the directory `name` in `dir` (ENOTDIR or ELOOP when it
/// is a file or a symlink).
pub fn open_dir(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<OwnedFd> {
    open(dir, name, libc::O_PATH | libc::O_DIRECTORY, 0, shown)
}

/// `mkdirat(dir, name, mode)`; Ok(false) when something is already there.
pub fn mkdir(dir: &OwnedFd, name: &OsStr, mode: u32, shown: &Path) -> SysResult<bool> {
    let c = cname(name);
    // SAFETY: `c` is NUL-terminated; `dir` is a valid directory fd.
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) };
    if r == 0 {
        return Ok(true);
    }
    match last_errno() {
        Errno::EEXIST => Ok(false),
        e => err("mkdir", format_args!("/{}", shown.display()), e),
    }
}

/// `symlinkat(target, dir, name)`.
pub fn symlink(target: &Path, dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<()> {
    let t = super::cpath(target);
    let n = cname(name);
    // SAFETY: both strings are NUL-terminated; `dir` is a valid fd.
    let r = unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), n.as_ptr()) };
    if r < 0 {
        return err(
            "symlink",
            format_args!("{} -> /{}", target.display(), shown.display()),
            last_errno(),
        );
    }
    Ok(())
}

/// Create (or truncate) the regular file `name` in `dir` with `content`.
/// The mode is applied as given when the caller has set umask 0.
pub fn write_file(
    dir: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: u32,
    shown: &Path,
) -> SysResult<()> {
    let fd = open(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        mode,
        shown,
    )?;
    super::write_all(fd.as_raw_fd(), content).map_err(|e| super::SysError {
        call: "write",
        arg: format!("/{}", shown.display()),
        errno: e.errno,
    })
}

/// Create `name` in `dir` with `mode` and copy at most `max` bytes of
/// `src` (open for reading) into it, in the kernel (no buffer of ours).
pub fn copy_file(
    dir: &OwnedFd,
    name: &OsStr,
    src: &OwnedFd,
    max: u64,
    mode: u32,
    shown: &Path,
) -> SysResult<()> {
    let fd = open(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        mode,
        shown,
    )?;
    let mut left = max;
    while left > 0 {
        // SAFETY: both fds are valid; a null offset means "the file
        // position of `src`".
        let r = unsafe {
            libc::sendfile(
                fd.as_raw_fd(),
                src.as_raw_fd(),
                std::ptr::null_mut(),
                left as usize,
            )
        };
        match r {
            0 => break,
            n if n > 0 => left -= n as u64,
            _ => {
                let e = last_errno();
                if e != Errno::EINTR {
                    return err("sendfile", format_args!("/{}", shown.display()), e);
                }
            }
        }
    }
    Ok(())
}

/// The target of the symlink `name` in `dir` (EINVAL: not a symlink).
pub fn readlink(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    let c = cname(name);
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `c` is NUL-terminated; `buf` is writable for its length,
    // which is what the kernel is told.
    let r = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return err(
            "readlink",
            format_args!("/{}", shown.display()),
            last_errno(),
        );
    }
    buf.truncate(r as usize);
    Ok(std::ffi::OsString::from_vec(buf))
}

/// (st_dev, st_ino, st_mode) of `name` in `dir`, not following a final
/// symlink; a mount point shows the root of what is mounted on it.
pub fn stat(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<(u64, u64, u32)> {
    stat_links(dir, name, shown).map(|(d, i, m, _)| (d, i, m))
}

/// [`stat`] and st_nlink.
pub fn stat_links(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<(u64, u64, u32, u64)> {
    let st = match super::tree::lstat_raw(dir, &cname(name)) {
        Ok(st) => st,
        Err(e) => return err("stat", format_args!("/{}", shown.display()), e),
    };
    // st_nlink is u32 on some architectures (aarch64).
    #[allow(clippy::unnecessary_cast)]
    let nlink = st.st_nlink as u64;
    Ok((st.st_dev, st.st_ino, st.st_mode, nlink))
}

/// Attach the detached mount `tree` on `name` in `dir` (a final symlink is
/// not followed).
pub fn move_mount(tree: &OwnedFd, dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
    let n = cname(name);
    // SAFETY: NUL-terminated paths; `tree` and `dir` are valid fds.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            n.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return err(
            "move_mount",
            format_args!("/{}", shown.display()),
            last_errno(),
        );
    }
    Ok(())
}

/// A detached copy of the mount tree at `name` in `dir` (not following a
/// final symlink).
pub fn open_tree_clone(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<OwnedFd> {
    const OPEN_TREE_CLONE: u32 = 1;
    const AT_RECURSIVE: u32 = 0x8000;
    let n = cname(name);
    let flags =
        OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW as u32 | libc::O_CLOEXEC as u32;
    // SAFETY: NUL-terminated path relative to a valid dir fd.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), n.as_ptr(), flags) };
    if r < 0 {
        return err(
            "open_tree",
            format_args!("/{}", shown.display()),
            last_errno(),
        );
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// Bind the file or directory `src` (that mount alone) onto `name` in
/// `dir` (the /proc masks): Err(ENOENT) when `name` does not exist, known
/// before any mount is cloned (a clone never attached costs an RCU grace
/// period when it is dropped).
pub fn bind_onto(src: &OwnedFd, dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<()> {
    let n = cname(name);
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated path relative to a valid dir fd, and a
    // buffer of the size fstatat writes.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            n.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return err("stat", format_args!("/{}", shown.display()), last_errno());
    }
    let tree = super::open_tree_clone_with(src, false, shown)?;
    move_mount(&tree, dir, name, shown)
}

/// Set the process umask; returns the previous one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask takes and returns an integer and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}
