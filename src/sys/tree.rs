//! Calls on a directory tree nobody trusts (an overlay's upper layer the
//! payload wrote, a host directory changes are committed to): each names
//! one plain entry of a directory fd, never follows a symlink, and never
//! opens what is not a regular file or a directory. `shown` is the path
//! the errors name (relative to the tree's top).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::{err, last_errno, Errno, SysError, SysResult};

fn cname(name: &OsStr) -> CString {
    // Names come from getdents or from paths split on `/`: never a NUL.
    CString::new(name.as_bytes()).unwrap_or_else(|_| CString::from(c"\u{1}nonexistent"))
}

/// What lstat says of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    /// Type and permission bits (`st_mode`).
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// The device a character or block device node is (`st_rdev`).
    pub rdev: u64,
    /// The last change of its content or metadata (`st_ctime`): no call
    /// sets it but the change itself.
    pub ctime: Time,
}

/// A wall-clock time as the kernel stamps files, to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Time {
    pub sec: i64,
    pub nsec: i64,
}

/// Now, by the real-time clock. The kernel stamps a file with the coarse
/// clock's time (its last tick, at or before this one) or a finer one: a
/// file changed before this call has a ctime at or before it, one changed
/// after the tick this call falls in has a ctime after it.
pub fn now() -> Time {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a writable timespec the kernel fills on success.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
    Time {
        sec: t.tv_sec,
        nsec: t.tv_nsec,
    }
}

impl Stat {
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    fn of(st: &libc::stat) -> Stat {
        // st_nlink is u32 on some architectures (aarch64).
        #[allow(clippy::unnecessary_cast)]
        Stat {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            nlink: st.st_nlink as u64,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size.max(0) as u64,
            rdev: st.st_rdev,
            ctime: Time {
                sec: st.st_ctime,
                nsec: st.st_ctime_nsec,
            },
        }
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<Stat> {
    match lstat_raw(dir, &cname(name)) {
        Ok(st) => Ok(Stat::of(&st)),
        Err(e) => err("fstatat", shown.display(), e),
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`, the kernel's stat buffer.
pub(crate) fn lstat_raw(dir: &OwnedFd, name: &std::ffi::CStr) -> Result<libc::stat, Errno> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated, `st` is a writable stat buffer the
    // kernel fills on success.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return Err(last_errno());
    }
    // SAFETY: fstatat returned 0: the buffer is initialised.
    Ok(unsafe { st.assume_init() })
}

/// `fstat(fd)`.
pub fn fstat(fd: &OwnedFd, shown: &Path) -> SysResult<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable stat buffer the kernel fills on success.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if r < 0 {
        return err("fstat", shown.display(), last_errno());
    }
    // SAFETY: fstat returned 0: the buffer is initialised.
    Ok(Stat::of(unsafe { &st.assume_init() }))
}

fn openat(dir: &OwnedFd, name: &OsStr, flags: i32, mode: u32, shown: &Path) -> SysResult<OwnedFd> {
    let c = cname(name);
    loop {
        // SAFETY: `c` is NUL-terminated and outlives the call; `dir` is a
        // valid fd.
        let r = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
                mode as libc::c_uint,
            )
        };
        if r >= 0 {
            // SAFETY: a fresh fd from the kernel, owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(r) });
        }
        let e = last_errno();
        if e != Errno::EINTR {
            return err("openat", shown.display(), e);
        }
    }
}

/// The directory `name` in `dir`, open for reading (ELOOP: a symlink;
/// ENOTDIR: not a directory).
pub fn open_dir(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<OwnedFd> {
    openat(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0, shown)
}

/// The directory an `O_PATH` fd names, open for reading.
pub fn reopen_dir(dir: &OwnedFd, shown: &Path) -> SysResult<OwnedFd> {
    open_dir(dir, OsStr::new("."), shown)
}

/// `..` of `dir`, as an `O_PATH` fd.
pub fn parent(dir: &OwnedFd, shown: &Path) -> SysResult<OwnedFd> {
    openat(
        dir,
        OsStr::new(".."),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
        shown,
    )
}

/// An `O_PATH` fd of `name` in `dir`, whatever it is (a symlink itself).
pub fn open_path(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<OwnedFd> {
    openat(dir, name, libc::O_PATH, 0, shown)
}

/// The regular file `name` in `dir`, open for reading, and its stat
/// (EINVAL: not a regular file; no FIFO is waited on, no device opened).
pub fn open_file(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<(OwnedFd, Stat)> {
    let fd = openat(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0, shown)?;
    let st = fstat(&fd, shown)?;
    if st.kind() != libc::S_IFREG {
        return err(
            "open",
            format_args!("{}: not a regular file", shown.display()),
            Errno::EINVAL,
        );
    }
    Ok((fd, st))
}

/// Create the regular file `name` in `dir` (`O_EXCL`: never one already
/// there, never through a symlink), open for writing.
pub fn create_file(dir: &OwnedFd, name: &OsStr, mode: u32, shown: &Path) -> SysResult<OwnedFd> {
    openat(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        mode,
        shown,
    )
}

/// The entries of the directory `dir` (open for reading), without `.` and
/// `..`, at most `max` of them: `Err(EFBIG)` when it holds more.
pub fn entries(dir: &OwnedFd, max: usize, shown: &Path) -> SysResult<Vec<OsString>> {
    use nix::dir::Dir;
    let fd = openat(
        dir,
        OsStr::new("."),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
        shown,
    )?;
    let mut d = Dir::from_fd(fd).map_err(|e| SysError {
        call: "fdopendir",
        arg: shown.display().to_string(),
        errno: e,
    })?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(|e| SysError {
            call: "getdents64",
            arg: shown.display().to_string(),
            errno: e,
        })?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        if out.len() >= max {
            return err(
                "getdents64",
                format_args!("{}: more than {max} entries", shown.display()),
                Errno::EFBIG,
            );
        }
        out.push(OsString::from_vec(n.to_vec()));
    }
    Ok(out)
}

/// The extended attribute `attr` of the file open at `fd` (not `O_PATH`);
/// None when it has none (ENODATA), at most 256 bytes.
pub fn xattr(fd: &OwnedFd, attr: &std::ffi::CStr, shown: &Path) -> SysResult<Option<Vec<u8>>> {
    let mut buf = [0u8; 256];
    // SAFETY: `attr` is NUL-terminated; `buf` is writable for its length,
    // which is what the kernel is told.
    let r = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            attr.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return match last_errno() {
            Errno::ENODATA | Errno::ENOTSUP => Ok(None),
            e => err("fgetxattr", shown.display(), e),
        };
    }
    Ok(Some(buf[..r as usize].to_vec()))
}

/// The target of the symlink `name` in `dir` (EINVAL: not a symlink).
pub fn readlink(dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<OsString> {
    nix::fcntl::readlinkat(dir, name).map_err(|e| SysError {
        call: "readlinkat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// How [`rename`] may treat what is at the new name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rename {
    /// EEXIST when something is there.
    NoReplace,
    /// Swap the two (both must exist).
    Exchange,
}

/// `renameat2(from_dir, from, to_dir, to, how)`.
pub fn rename(
    from_dir: &OwnedFd,
    from: &OsStr,
    to_dir: &OwnedFd,
    to: &OsStr,
    how: Rename,
    shown: &Path,
) -> SysResult<()> {
    // nix has renameat2 for glibc only; the static build is musl's.
    const RENAME_NOREPLACE: libc::c_uint = 1;
    const RENAME_EXCHANGE: libc::c_uint = 2;
    let flags = match how {
        Rename::NoReplace => RENAME_NOREPLACE,
        Rename::Exchange => RENAME_EXCHANGE,
    };
    let (f, t) = (cname(from), cname(to));
    // SAFETY: both names are NUL-terminated and outlive the call; the
    // directory fds are open (borrowed); renameat2 touches no memory of
    // ours but the two names.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            f.as_ptr(),
            to_dir.as_raw_fd(),
            t.as_ptr(),
            flags,
        )
    };
    if r < 0 {
        return err("renameat2", shown.display(), last_errno());
    }
    Ok(())
}

/// `unlinkat(dir, name)`, with `AT_REMOVEDIR` for a directory.
pub fn unlink(dir: &OwnedFd, name: &OsStr, is_dir: bool, shown: &Path) -> SysResult<()> {
    use nix::unistd::UnlinkatFlags;
    let flags = match is_dir {
        true => UnlinkatFlags::RemoveDir,
        false => UnlinkatFlags::NoRemoveDir,
    };
    nix::unistd::unlinkat(dir, name, flags).map_err(|e| SysError {
        call: "unlinkat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// `mkdirat(dir, name, mode)` (EEXIST when something is there).
pub fn mkdir(dir: &OwnedFd, name: &OsStr, mode: u32, shown: &Path) -> SysResult<()> {
    let m = nix::sys::stat::Mode::from_bits_truncate(mode as libc::mode_t);
    nix::sys::stat::mkdirat(dir, name, m).map_err(|e| SysError {
        call: "mkdirat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// `symlinkat(target, dir, name)`.
pub fn symlink(target: &OsStr, dir: &OwnedFd, name: &OsStr, shown: &Path) -> SysResult<()> {
    nix::unistd::symlinkat(target, dir, name).map_err(|e| SysError {
        call: "symlinkat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// `fchmod(fd, mode)` (an fd open for reading or writing).
pub fn fchmod(fd: &OwnedFd, mode: u32, shown: &Path) -> SysResult<()> {
    let m = nix::sys::stat::Mode::from_bits_truncate(mode as libc::mode_t);
    nix::sys::stat::fchmod(fd, m).map_err(|e| SysError {
        call: "fchmod",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// `fchown(fd, uid, gid)`.
pub fn fchown(fd: &OwnedFd, uid: u32, gid: u32, shown: &Path) -> SysResult<()> {
    use nix::unistd::{Gid, Uid};
    nix::unistd::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(|e| {
        SysError {
            call: "fchown",
            arg: shown.display().to_string(),
            errno: e,
        }
    })
}

/// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`: a symlink's own
/// owner.
pub fn lchown(dir: &OwnedFd, name: &OsStr, uid: u32, gid: u32, shown: &Path) -> SysResult<()> {
    use nix::unistd::{Gid, Uid};
    nix::unistd::fchownat(
        dir,
        name,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|e| SysError {
        call: "fchownat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// `mknodat(dir, name, mode, dev)`: a FIFO, a socket, a device node (a
/// 0:0 character device: overlayfs's whiteout, which needs no privilege).
pub fn mknod(dir: &OwnedFd, name: &OsStr, mode: u32, dev: u64, shown: &Path) -> SysResult<()> {
    let kind = nix::sys::stat::SFlag::from_bits_truncate(mode & libc::S_IFMT);
    let perm = nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777);
    nix::sys::stat::mknodat(dir, name, kind, perm, dev).map_err(|e| SysError {
        call: "mknodat",
        arg: shown.display().to_string(),
        errno: e,
    })
}

/// Set the extended attribute `attr` of the file open at `fd` (not
/// `O_PATH`) to `value`.
pub fn set_xattr(fd: &OwnedFd, attr: &std::ffi::CStr, value: &[u8], shown: &Path) -> SysResult<()> {
    // SAFETY: `attr` is NUL-terminated; `value` is readable for its
    // length, which is what the kernel is told.
    let r = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            attr.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return err("fsetxattr", shown.display(), last_errno());
    }
    Ok(())
}
