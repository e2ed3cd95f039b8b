//! Opening paths without being led astray: openat2 with RESOLVE_* (no
//! symlinks, beneath a directory, in a root), directories made inside a
//! root, reopening O_PATH fds, fstat, getxattr.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::{cpath, err, last_errno, Errno, SysResult};

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

fn openat2(
    dirfd: RawFd,
    path: &CStr,
    flags: i32,
    resolve: u64,
    shown: &dyn fmt::Display,
) -> SysResult<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    loop {
        // SAFETY: `path` is NUL-terminated and `how` is a valid open_how that
        // outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR || e == Errno::EAGAIN {
                continue;
            }
            return err("openat2", shown, e);
        }
        // SAFETY: the kernel returned a fresh fd that nobody else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
    }
}

/// Open an absolute host path as O_PATH, refusing any symlink on the way
/// (the path was canonicalized before; a symlink now means someone swapped
/// one in).
pub fn open_path_nofollow(path: &Path) -> SysResult<OwnedFd> {
    let c = cpath(path);
    openat2(
        libc::AT_FDCWD,
        &c,
        libc::O_PATH,
        RESOLVE_NO_SYMLINKS,
        &path.display(),
    )
}

/// Open `rel` (relative, may contain symlinks) under `root` as if `root`
/// were `/`: symlinks cannot lead out of it.
pub fn open_in_root(root: &OwnedFd, rel: &Path, flags: i32) -> SysResult<OwnedFd> {
    let c = cpath(rel);
    openat2(
        root.as_raw_fd(),
        &c,
        flags,
        RESOLVE_IN_ROOT,
        &format_args!("/{}", rel.display()),
    )
}

/// chmod the file an O_PATH fd refers to (fchmodat2 with AT_EMPTY_PATH;
/// before Linux 6.6, through its /proc/self/fd link).
pub fn chmod_fd(fd: &OwnedFd, mode: u32, shown: &Path) -> SysResult<()> {
    const SYS_FCHMODAT2: libc::c_long = 452;
    // SAFETY: the path is a NUL-terminated empty string; the kernel only
    // reads it, and `fd` is open for the call.
    let r = unsafe {
        libc::syscall(
            SYS_FCHMODAT2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode as libc::c_uint,
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = last_errno();
    // ENOSYS before Linux 6.6; EINVAL where fchmodat2 takes no
    // AT_EMPTY_PATH: the magic link does the same (and a bad mode fails
    // there too).
    if e != Errno::ENOSYS && e != Errno::EINVAL {
        return err("chmod", shown.display(), e);
    }
    let link = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    // SAFETY: `link` is NUL-terminated and outlives the call.
    if unsafe { libc::chmod(link.as_ptr(), mode as libc::mode_t) } != 0 {
        return err("chmod", shown.display(), last_errno());
    }
    Ok(())
}

/// An O_PATH fd of `rel` beneath the directory `dir`: EXDEV when the path
/// (through `..` or a symlink) would leave it; no /proc magic links.
pub fn open_path_beneath(dir: &OwnedFd, rel: &Path) -> SysResult<OwnedFd> {
    let c = cpath(rel);
    openat2(
        dir.as_raw_fd(),
        &c,
        libc::O_PATH,
        RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        &rel.display(),
    )
}

/// Create every missing directory of `rel` under `root` (contained as in
/// [`open_in_root`]) and return an O_PATH fd of the last one.
pub fn mkdir_p_in_root(root: &OwnedFd, rel: &Path, mode: u32) -> SysResult<OwnedFd> {
    let mut cur = std::path::PathBuf::new();
    let mut last: Option<OwnedFd> = None;
    for comp in rel.components() {
        let name = comp.as_os_str();
        cur.push(name);
        match open_in_root(root, &cur, libc::O_PATH | libc::O_DIRECTORY) {
            Ok(fd) => last = Some(fd),
            Err(e) if e.errno == Errno::ENOENT => {
                let parent = last.as_ref().unwrap_or(root);
                mkdirat(parent, Path::new(name), mode, &cur)?;
                last = Some(open_in_root(root, &cur, libc::O_PATH | libc::O_DIRECTORY)?);
            }
            Err(e) => return Err(e),
        }
    }
    match last {
        Some(fd) => Ok(fd),
        None => open_in_root(root, Path::new("."), libc::O_PATH | libc::O_DIRECTORY),
    }
}

fn mkdirat(dir: &OwnedFd, name: &Path, mode: u32, shown: &Path) -> SysResult<()> {
    let c = cpath(name);
    // SAFETY: `c` is NUL-terminated; dir is a valid directory fd.
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) };
    if r < 0 && last_errno() != Errno::EEXIST {
        return err("mkdir", format_args!("/{}", shown.display()), last_errno());
    }
    Ok(())
}

/// An O_PATH fd of the directory at `path`, symlinks followed.
pub fn open_dir_path(path: &Path) -> SysResult<OwnedFd> {
    let flags =
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC;
    nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty())
        .or_else(|e| err("open", path.display(), e))
}

pub fn fd_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// (st_mode, st_size) of `fd`.
pub fn fstat_mode_size(fd: &OwnedFd) -> SysResult<(u32, u64)> {
    let st = nix::sys::stat::fstat(fd).or_else(|e| err("fstat", fd.as_raw_fd(), e))?;
    Ok((st.st_mode, st.st_size as u64))
}

/// Open what the O_PATH fd `fd` refers to, for reading.
pub fn reopen_read(fd: &OwnedFd) -> SysResult<OwnedFd> {
    let p = fd_path(fd);
    // SAFETY: `p` is NUL-terminated and outlives the call.
    let r = unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if r < 0 {
        return err("open", fd.as_raw_fd(), last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// (st_dev, st_ino, st_mode) of `fd`.
pub fn fstat_id(fd: &OwnedFd) -> SysResult<(u64, u64, u32)> {
    let st = nix::sys::stat::fstat(fd).or_else(|e| err("fstat", fd.as_raw_fd(), e))?;
    Ok((st.st_dev, st.st_ino, st.st_mode))
}

/// The extended attribute `name` of the file at `path` (following
/// symlinks, /proc's magic links included), at most 255 bytes.
pub fn getxattr(path: &Path, name: &CStr) -> SysResult<Vec<u8>> {
    let p = cpath(path);
    let mut buf = vec![0u8; 255];
    // SAFETY: `p` and `name` are NUL-terminated strings, and the kernel
    // writes at most `buf.len()` bytes into `buf`, which we own.
    let r = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return err("getxattr", path.display(), last_errno());
    }
    buf.truncate(r as usize);
    Ok(buf)
}
