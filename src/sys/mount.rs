//! Mounts: mount(2), the new mount API (open_tree, mount_setattr),
//! pivot_root, and reading mountinfo's paths.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::{cpath, err, fd_path, last_errno, Errno, SysResult};

pub fn mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    mount_c(src, &cpath(target), &target.display(), fstype, flags, data)
}

fn mount_c(
    src: Option<&str>,
    target: &CStr,
    shown: &dyn fmt::Display,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    let s = src.map(|s| CString::new(s).unwrap_or_default());
    let t = fstype.map(|s| CString::new(s).unwrap_or_default());
    let d = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: every pointer is either null or a NUL-terminated string that
    // outlives the call.
    let r = unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            target.as_ptr(),
            t.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()).cast(),
        )
    };
    if r < 0 {
        return err("mount", shown, last_errno());
    }
    Ok(())
}

/// `umount2(target, MNT_DETACH)`: detach a mount made on the host (the
/// fallback's run directory), whoever still uses it.
pub fn umount_detach(target: &Path) -> SysResult<()> {
    nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH).or_else(|e| {
        err(
            "umount2",
            format_args!("{}, MNT_DETACH", target.display()),
            e,
        )
    })
}

/// Mount a fresh filesystem (tmpfs, proc, devpts, mqueue) on the directory `fd`
/// refers to.
pub fn mount_fs_on(
    fd: &OwnedFd,
    fstype: &str,
    flags: libc::c_ulong,
    data: Option<&str>,
    shown: &Path,
) -> SysResult<()> {
    mount_c(
        Some(fstype),
        &fd_path(fd),
        &shown.display(),
        Some(fstype),
        flags,
        data,
    )
}

/// A new filesystem of type `fstype` (no options), as a detached mount
/// mounted nowhere: fsopen, fsconfig(FSCONFIG_CMD_CREATE), fsmount. The
/// fd (close-on-exec) is its root; closing it unmounts it. A filesystem
/// keyed by a namespace (mqueue: the caller's IPC namespace) is that
/// namespace's. ENOSYS on kernels without the new mount API (< 5.2).
pub fn fs_detached(fstype: &str) -> SysResult<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let name = CString::new(fstype).unwrap_or_default();
    // SAFETY: a NUL-terminated string that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) };
    if r < 0 {
        return err("fsopen", fstype, last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    let fs = unsafe { OwnedFd::from_raw_fd(r as RawFd) };
    // SAFETY: FSCONFIG_CMD_CREATE takes no key or value (null, 0) on a
    // valid fs context fd.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if r < 0 {
        return err(
            "fsconfig",
            format_args!("{fstype}, FSCONFIG_CMD_CREATE"),
            last_errno(),
        );
    }
    // SAFETY: a valid fs context fd, no mount attributes.
    let r = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) };
    if r < 0 {
        return err("fsmount", fstype, last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// Clone the mount tree at `src` (recursively) as a detached mount.
pub fn open_tree_clone(src: &OwnedFd, shown: &Path) -> SysResult<OwnedFd> {
    open_tree_clone_with(src, true, shown)
}

/// Clone the mount at `src` as a detached mount: with the mounts beneath
/// it (`recursive`), or alone.
pub fn open_tree_clone_with(src: &OwnedFd, recursive: bool, shown: &Path) -> SysResult<OwnedFd> {
    const OPEN_TREE_CLONE: u32 = 1;
    const AT_RECURSIVE: u32 = 0x8000;
    let mut flags = OPEN_TREE_CLONE | libc::AT_EMPTY_PATH as u32 | libc::O_CLOEXEC as u32;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: empty NUL-terminated path with AT_EMPTY_PATH on a valid fd.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, src.as_raw_fd(), c"".as_ptr(), flags) };
    if r < 0 {
        return err("open_tree", shown.display(), last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Set mount attributes on the mount (tree) `fd` refers to. Only the named
/// bits are set; locked flags are left as they are, so this never trips
/// over flags the kernel locked in a user namespace.
pub fn mount_setattr(fd: &OwnedFd, set: u64, recursive: bool, shown: &Path) -> SysResult<()> {
    let a = TreeAttrs {
        set,
        private: false,
        idmap: None,
        recursive,
    };
    mount_setattr_tree(fd, &a, shown)
}

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// What [`mount_setattr_tree`] changes on a detached mount tree.
pub struct TreeAttrs<'a> {
    /// MOUNT_ATTR_* bits to set.
    pub set: u64,
    /// Make the mounts private (no propagation to or from their peers).
    pub private: bool,
    /// Idmap the mounts with this user namespace's mappings.
    pub idmap: Option<&'a OwnedFd>,
    /// On every mount of the tree (AT_RECURSIVE), or only on its top.
    pub recursive: bool,
}

/// mount_setattr on the detached mount (tree) `fd` refers to: an
/// open_tree clone not yet moved anywhere (the kernel refuses a mount
/// beneath its top alone). For an idmap the caller must hold CAP_SYS_ADMIN
/// over the filesystems' and the namespace's owners; a filesystem that
/// cannot be idmapped gives EINVAL, a mount already idmapped EPERM (with
/// `recursive`, no mount is changed then).
pub fn mount_setattr_tree(fd: &OwnedFd, a: &TreeAttrs, shown: &Path) -> SysResult<()> {
    const AT_RECURSIVE: u32 = 0x8000;
    let attr = MountAttr {
        attr_set: a.set
            | if a.idmap.is_some() {
                MOUNT_ATTR_IDMAP
            } else {
                0
            },
        attr_clr: 0,
        propagation: if a.private { libc::MS_PRIVATE } else { 0 },
        userns_fd: a.idmap.map_or(0, |u| u.as_raw_fd() as u64),
    };
    let flags = libc::AT_EMPTY_PATH as u32 | if a.recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: an empty path with AT_EMPTY_PATH on a valid fd; `attr`
    // outlives the call and its size is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return err("mount_setattr", shown.display(), last_errno());
    }
    Ok(())
}

/// pivot_root into `newroot` (an absolute path we mounted), stacking the old
/// root under it and detaching that at once (the ". ." idiom). Returns
/// false when pivot_root was refused and a move + chroot was used instead.
pub fn pivot_root_and_detach(newroot: &Path) -> SysResult<bool> {
    nix::unistd::chdir(newroot).or_else(|e| err("chdir", newroot.display(), e))?;
    // SAFETY: both arguments are NUL-terminated static strings.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    if r < 0 {
        let e = last_errno();
        if e != Errno::EPERM && e != Errno::EINVAL {
            return err("pivot_root", newroot.display(), e);
        }
        // EPERM: some container runtimes' seccomp profiles refuse pivot_root
        // even with CAP_SYS_ADMIN. EINVAL: / is the initramfs (rootfs), which
        // cannot be pivoted away from. Move the new root over / and chroot into it:
        // the old root stays underneath, unreachable without
        // CAP_SYS_CHROOT, which the payload never holds.
        mount_c(Some("."), c"/", &"/", None, libc::MS_MOVE, None)?;
        nix::unistd::chroot(".").or_else(|e| err("chroot", newroot.display(), e))?;
        nix::unistd::chdir("/").or_else(|e| err("chdir", "/", e))?;
        return Ok(false);
    }
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)
        .or_else(|e| err("umount2", "old root", e))?;
    nix::unistd::chdir("/").or_else(|e| err("chdir", "/", e))?;
    Ok(true)
}

pub fn chdir(p: &Path) -> SysResult<()> {
    nix::unistd::chdir(p).or_else(|e| err("chdir", p.display(), e))
}

/// A path field of /proc/self/mountinfo, its octal escapes undone (`\040`
/// for a space: space, tab, newline and backslash are escaped).
pub fn mountinfo_path(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}
