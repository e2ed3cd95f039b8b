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

/// A new filesystem of type `fstype` on the directory `fd` (with the
/// `MS_RDONLY`, `MS_NOSUID`, `MS_NODEV` and `MS_NOEXEC` of `flags`, and
/// `data`'s comma-separated options), made with the new mount API: fsopen,
/// fsconfig, fsmount, then move_mount onto `fd` itself. No path is looked
/// up (mount(2) would resolve `/proc/self/fd/N`, a walk through procfs
/// that costs more than the mount). `shown` names the target in errors.
/// Overlayfs is [`mount_overlay_on`]'s.
pub fn mount_fs_on(
    fd: &OwnedFd,
    fstype: &str,
    flags: libc::c_ulong,
    data: Option<&str>,
    shown: &Path,
) -> SysResult<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    let what = format!("{fstype} on {}", shown.display());
    let fs = fs_open(fstype, &what)?;
    fs_set(&fs, "source", Some(fstype), &what)?;
    if flags & libc::MS_RDONLY != 0 {
        fs_set(&fs, "ro", None, &what)?;
    }
    for (key, value) in mount_options(data.unwrap_or("")) {
        fs_set(&fs, &key, value.as_deref(), &what)?;
    }
    let attrs = [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ]
    .iter()
    .filter(|(ms, _)| flags & ms != 0)
    .fold(0, |a, (_, attr)| a | attr);
    let mnt = fs_mount(&fs, attrs, &what)?;
    // SAFETY: empty NUL-terminated paths with the EMPTY_PATH flags on two
    // valid fds.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            fd.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r < 0 {
        return err("move_mount", what, last_errno());
    }
    Ok(())
}

/// An overlay filesystem with the options `opts` on the directory `fd`,
/// with mount(2) on `/proc/self/fd/N`: its options are paths
/// (`lowerdir=/proc/self/fd/…`), and overlayfs reads them through
/// fsconfig differently from one kernel release to the next.
pub fn mount_overlay_on(
    fd: &OwnedFd,
    flags: libc::c_ulong,
    opts: &str,
    shown: &Path,
) -> SysResult<()> {
    let target = fd_path(fd);
    mount_c(
        Some("overlay"),
        &target,
        &shown.display(),
        Some("overlay"),
        flags,
        Some(opts),
    )
}

const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// fsopen: a new filesystem context of type `fstype` (`what` names it in
/// the error).
fn fs_open(fstype: &str, what: &str) -> SysResult<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    let name = CString::new(fstype).unwrap_or_default();
    // SAFETY: a NUL-terminated string that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) };
    if r < 0 {
        return err("fsopen", what, last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// One option of a filesystem being made: `key=value`, or the flag `key`.
fn fs_set(fs: &OwnedFd, key: &str, value: Option<&str>, what: &str) -> SysResult<()> {
    let opt = match value {
        Some(v) => format!("{key}={v}"),
        None => key.to_string(),
    };
    let bad = || super::SysError {
        call: "fsconfig",
        arg: format!("{what}: {opt:?}"),
        errno: Errno::EINVAL,
    };
    let k = CString::new(key).map_err(|_| bad())?;
    let v = value.map(CString::new).transpose().map_err(|_| bad())?;
    let (cmd, vp) = match &v {
        Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
        None => (FSCONFIG_SET_FLAG, std::ptr::null()),
    };
    // SAFETY: a valid fs context fd; NUL-terminated key and value (or
    // null for a flag) that outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, k.as_ptr(), vp, 0) };
    if r < 0 {
        return err("fsconfig", format_args!("{what}: {opt}"), last_errno());
    }
    Ok(())
}

/// FSCONFIG_CMD_CREATE, then fsmount with the MOUNT_ATTR_* bits `attrs`:
/// the filesystem made of its options, as a detached mount.
fn fs_mount(fs: &OwnedFd, attrs: u64, what: &str) -> SysResult<OwnedFd> {
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: a command takes no key or value (null, 0) on a valid fs
    // context fd.
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
            format_args!("{what}, FSCONFIG_CMD_CREATE"),
            last_errno(),
        );
    }
    // SAFETY: a valid fs context fd; attrs are MOUNT_ATTR_* bits.
    let r = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
    if r < 0 {
        return err("fsmount", what, last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// mount(2)'s comma-separated `data` as (key, value) pairs, split as the
/// kernel splits it: a piece that starts with a digit continues the value
/// before it (tmpfs's `mpol=bind:0,2` names nodes 0 and 2).
fn mount_options(data: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for piece in data.split(',').filter(|p| !p.is_empty()) {
        if piece.starts_with(|c: char| c.is_ascii_digit()) {
            if let Some((_, Some(v))) = out.last_mut() {
                v.push(',');
                v.push_str(piece);
                continue;
            }
        }
        out.push(match piece.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (piece.to_string(), None),
        });
    }
    out
}

/// A new filesystem of type `fstype` (no options), as a detached mount
/// mounted nowhere: fsopen, fsconfig(FSCONFIG_CMD_CREATE), fsmount. The
/// fd (close-on-exec) is its root; closing it unmounts it. A filesystem
/// keyed by a namespace (mqueue: the caller's IPC namespace) is that
/// namespace's. ENOSYS on kernels without the new mount API (< 5.2).
pub fn fs_detached(fstype: &str) -> SysResult<OwnedFd> {
    let fs = fs_open(fstype, fstype)?;
    fs_mount(&fs, 0, fstype)
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

#[cfg(test)]
mod tests {
    use super::mount_options;

    fn pairs(p: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn options_split_into_keys_values_and_flags() {
        let tmpfs = [
            ("size", Some("4m")),
            ("nr_inodes", Some("4096")),
            ("mode", Some("755")),
        ];
        assert_eq!(
            mount_options("size=4m,nr_inodes=4096,mode=755"),
            pairs(&tmpfs)
        );
        let devpts = [
            ("newinstance", None),
            ("ptmxmode", Some("0666")),
            ("mode", Some("620")),
        ];
        assert_eq!(
            mount_options("newinstance,ptmxmode=0666,mode=620"),
            pairs(&devpts)
        );
        assert!(mount_options("").is_empty());
        assert_eq!(mount_options(",,ro,"), pairs(&[("ro", None)]));
    }

    #[test]
    fn a_piece_that_starts_with_a_digit_continues_the_value_before_it() {
        // tmpfs's node lists, as the kernel reads them.
        let mpol = [("mpol", Some("bind:0,2-3")), ("size", Some("1m"))];
        assert_eq!(mount_options("mpol=bind:0,2-3,size=1m"), pairs(&mpol));
        // Nothing before it to continue: a key of its own, which the
        // filesystem refuses as it would from mount(2).
        assert_eq!(mount_options("5,size=1m")[0], ("5".into(), None));
    }
}
