//! A fresh /proc as every jail gets it, once mounted: /proc/sys read-only,
//! and the entries that leak host state or reach the kernel masked. The
//! cold jail's root (`jail::rootfs::special`) and a fork server's child
//! (`forked`) both call [`mask`].

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::{at, Errno, SysResult};
use super::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// /proc entries that leak host state or reach the kernel: covered by
/// /dev/null (files) or an empty read-only tmpfs (directories).
pub const MASKED_FILES: [&str; 9] = [
    "kcore",
    "kmsg",
    "sysrq-trigger",
    "timer_list",
    "keys",
    "latency_stats",
    "sched_debug",
    "kallsyms",
    "config.gz",
];
pub const MASKED_DIRS: [&str; 5] = ["acpi", "scsi", "asound", "firmware", "bus"];

/// The flags a proc mount gets.
pub const FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// On the proc filesystem just mounted at `dst` (`pfd`: its root, open):
/// /proc/sys made read-only (a copy of it, flagged, attached over it),
/// each of [`MASKED_FILES`] covered by `devnull`, each of [`MASKED_DIRS`]
/// by one empty read-only tmpfs (one superblock, bound over the others).
/// An entry this kernel lacks is left alone.
pub fn mask(pfd: &OwnedFd, dst: &Path, devnull: &OwnedFd) -> SysResult<()> {
    mask_these(pfd, dst, devnull, &MASKED_FILES, &MASKED_DIRS)
}

/// Of [`MASKED_FILES`] and [`MASKED_DIRS`], those the proc filesystem at
/// `proc` shows (the running kernel's: one look serves every later
/// [`mask_these`] of a fork server's children).
pub fn present(proc: &Path) -> (Vec<&'static str>, Vec<&'static str>) {
    let here = |n: &&str| proc.join(n).symlink_metadata().is_ok();
    (
        MASKED_FILES.iter().copied().filter(here).collect(),
        MASKED_DIRS.iter().copied().filter(here).collect(),
    )
}

/// [`mask`] of `files` and `dirs` only.
pub fn mask_these(
    pfd: &OwnedFd,
    dst: &Path,
    devnull: &OwnedFd,
    files: &[&str],
    dirs: &[&str],
) -> SysResult<()> {
    let sys_dir = dst.join("sys");
    let name = OsStr::new("sys");
    let tree = at::open_tree_clone(pfd, name, &sys_dir)?;
    super::mount_setattr(
        &tree,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        true,
        &sys_dir,
    )?;
    at::move_mount(&tree, pfd, name, &sys_dir)?;
    for &f in files {
        match at::bind_onto(devnull, pfd, OsStr::new(f), &dst.join(f)) {
            Err(e) if e.errno != Errno::ENOENT => return Err(e),
            _ => {}
        }
    }
    let absent = |e: &super::SysError| e.errno == Errno::ENOENT || e.errno == Errno::ENOTDIR;
    let mut first: Option<OwnedFd> = None;
    for &dname in dirs {
        let p = dst.join(dname);
        let name = OsStr::new(dname);
        let done = match &first {
            None => at::open_dir(pfd, name, &p).and_then(|fd| {
                super::mount_fs_on(
                    &fd,
                    "tmpfs",
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    Some("size=4k,nr_inodes=1,mode=555"),
                    &p,
                )?;
                first = Some(at::open_dir(pfd, name, &p)?);
                Ok(())
            }),
            Some(empty) => at::bind_onto(empty, pfd, name, &p),
        };
        match done {
            Err(e) if !absent(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}
