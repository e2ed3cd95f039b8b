//! The jail's root: a fresh tmpfs on which only what the plan names exists,
//! then pivot_root into it with the old root detached.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::plan::{Plan, RootStep};
use crate::sys::{
    self, Errno, SysError, SysResult, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
};

/// Device nodes bound from the host into /dev.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// /proc entries that leak host state or reach the kernel: covered by
/// /dev/null (files) or an empty read-only tmpfs (directories).
const PROC_MASKED_FILES: [&str; 9] = [
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
const PROC_MASKED_DIRS: [&str; 5] = ["acpi", "scsi", "asound", "firmware", "bus"];

/// A step failed: which one, on what path.
#[derive(Debug)]
pub struct StepError {
    pub step: &'static str,
    pub path: String,
    pub err: SysError,
}

trait Step<T> {
    fn step(self, step: &'static str, path: &Path) -> Result<T, StepError>;
}

impl<T> Step<T> for SysResult<T> {
    fn step(self, step: &'static str, path: &Path) -> Result<T, StepError> {
        self.map_err(|err| StepError {
            step,
            path: Path::new("/").join(path).display().to_string(),
            err,
        })
    }
}

/// Host fds opened before the new root covers anything, and before init
/// becomes the jail user (so a root caller can bind what only root can
/// reach, such as an interpreter under /root).
pub struct Sources {
    binds: Vec<Option<OwnedFd>>,
    devices: Vec<OwnedFd>,
}

pub fn open_sources(plan: &Plan) -> Result<Sources, StepError> {
    let mut binds = Vec::with_capacity(plan.steps.len());
    for s in &plan.steps {
        binds.push(match s {
            RootStep::Bind { src, optional, .. } => match sys::open_path_nofollow(src) {
                Ok(fd) => Some(fd),
                Err(e) if *optional && e.errno == Errno::ENOENT => None,
                Err(e) => {
                    return Err(StepError {
                        step: "bind",
                        path: src.display().to_string(),
                        err: e,
                    })
                }
            },
            _ => None,
        });
    }
    let mut devices = Vec::new();
    if plan
        .steps
        .iter()
        .any(|s| matches!(s, RootStep::Dev { .. } | RootStep::Proc { .. }))
    {
        for d in DEVICES {
            let p = PathBuf::from("/dev").join(d);
            devices.push(sys::open_path_nofollow(&p).step("open device", Path::new(&p))?);
        }
    }
    Ok(Sources { binds, devices })
}

/// What could not be built but did not stop the jail.
#[derive(Debug, Default)]
pub struct Notes {
    /// Why there is no /proc (the kernel refused a new proc mount, as it does
    /// in containers whose /proc has masked entries).
    pub proc_unavailable: Option<String>,
    /// pivot_root was refused (a runtime's seccomp profile): the root was
    /// moved over / and chrooted into instead.
    pub chrooted: bool,
}

/// Build the root on a tmpfs at `plan.base` and pivot into it. Runs in init,
/// in the new mount namespace, with capabilities in the new user namespace.
pub fn build(plan: &Plan, src: Sources) -> Result<Notes, StepError> {
    let mut notes = Notes::default();
    // Nothing we mount may propagate back to the host.
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .step("make / private", Path::new(""))?;

    sys::mount(
        Some("tmpfs"),
        &plan.base,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=4m,nr_inodes=4096,mode=755"),
    )
    .step("new root", &plan.base)?;
    let root = sys::open_path_nofollow(&plan.base).step("new root", &plan.base)?;

    for (i, step) in plan.steps.iter().enumerate() {
        match step {
            RootStep::Bind { dst, writable, .. } => {
                if let Some(fd) = &src.binds[i] {
                    bind(&root, fd, dst, *writable)?;
                }
            }
            RootStep::Tmpfs { dst, data } => {
                let mp = sys::mkdir_p_in_root(&root, dst, 0o755).step("tmpfs", dst)?;
                sys::mount_fs_on(
                    &mp,
                    "tmpfs",
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(data),
                    dst,
                )
                .step("tmpfs", dst)?;
            }
            RootStep::Symlink { target, link } => {
                sys::symlink_in_root(&root, target, link).step("symlink", link)?;
            }
            RootStep::File { dst, content, mode } => {
                sys::write_file_in_root(&root, dst, content, *mode).step("file", dst)?;
            }
            RootStep::Dir { dst } => {
                sys::mkdir_p_in_root(&root, dst, 0o755).step("dir", dst)?;
            }
            RootStep::Proc { dst } => {
                if let Err(why) = proc(&root, dst, &src.devices[0])? {
                    notes.proc_unavailable = Some(why);
                }
            }
            RootStep::Dev { dst } => dev(&root, dst, &src.devices)?,
        }
    }

    // Seal: the root tmpfs itself (/etc files, mount points) is read-only.
    sys::mount_setattr(
        &root,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
        Path::new("/"),
    )
    .step("seal root", Path::new(""))?;
    drop(src);
    drop(root);
    notes.chrooted = !sys::pivot_root_and_detach(&plan.base).step("pivot_root", &plan.base)?;
    Ok(notes)
}

/// Bind `src` at `dst`: clone its mount tree, set nosuid,nodev (and rdonly)
/// on the whole detached tree, attach it, then check the mount point now
/// shows the very inode we opened.
fn bind(root: &OwnedFd, src: &OwnedFd, dst: &Path, writable: bool) -> Result<(), StepError> {
    let (dev, ino, mode) = sys::fstat_id(src).step("bind", dst)?;
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    let tree = sys::open_tree_clone(src, dst).step("bind", dst)?;
    let mut attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if !writable {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    sys::mount_setattr(&tree, attrs, true, dst).step("bind", dst)?;
    let mp = sys::mountpoint_in_root(root, dst, is_dir).step("bind", dst)?;
    sys::move_mount(&tree, &mp, dst).step("bind", dst)?;
    let (d2, i2, _) = sys::stat_in_root(root, dst).step("bind", dst)?;
    if (d2, i2) != (dev, ino) {
        return Err(StepError {
            step: "bind",
            path: Path::new("/").join(dst).display().to_string(),
            err: SysError {
                call: "verify",
                arg: "mount point does not show the source".into(),
                errno: Errno::EXDEV,
            },
        });
    }
    Ok(())
}

/// Mount /proc; `Ok(Err(why))` when the kernel refuses a new proc mount
/// (EPERM: the caller's /proc has masked entries, as in containers), which
/// leaves /proc empty rather than exposing the outer one.
fn proc(root: &OwnedFd, dst: &Path, devnull: &OwnedFd) -> Result<Result<(), String>, StepError> {
    let mp = sys::mkdir_p_in_root(root, dst, 0o555).step("proc", dst)?;
    match sys::mount_fs_on(&mp, "proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None, dst) {
        Ok(()) => {}
        Err(e) if e.errno == Errno::EPERM || e.errno == Errno::EACCES => {
            return Ok(Err(format!(
                "{e}: the kernel refuses a new proc mount where the caller's /proc is partly masked (a container runtime's masked paths); /proc is left empty"
            )))
        }
        Err(e) => return Err(e).step("proc", dst),
    }
    // /proc/sys read-only: bind it onto itself and set the flag.
    let sys_dir = dst.join("sys");
    let fd = sys::open_path_in_root(root, &sys_dir).step("proc", &sys_dir)?;
    let tree = sys::open_tree_clone(&fd, &sys_dir).step("proc", &sys_dir)?;
    sys::mount_setattr(
        &tree,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        true,
        &sys_dir,
    )
    .step("proc", &sys_dir)?;
    sys::move_mount(&tree, &fd, &sys_dir).step("proc", &sys_dir)?;
    for f in PROC_MASKED_FILES {
        let p = dst.join(f);
        match sys::open_path_in_root(root, &p) {
            Ok(fd) => sys::bind_fd_on(devnull, &fd, false, &p).step("mask", &p)?,
            Err(e) if e.errno == Errno::ENOENT => {}
            Err(e) => return Err(e).step("mask", &p),
        }
    }
    for d in PROC_MASKED_DIRS {
        let p = dst.join(d);
        match sys::open_in_root(root, &p, libc::O_PATH | libc::O_DIRECTORY) {
            Ok(fd) => sys::mount_fs_on(
                &fd,
                "tmpfs",
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("size=4k,nr_inodes=1,mode=555"),
                &p,
            )
            .step("mask", &p)?,
            Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ENOTDIR => {}
            Err(e) => return Err(e).step("mask", &p),
        }
    }
    Ok(Ok(()))
}

fn dev(root: &OwnedFd, dst: &Path, devices: &[OwnedFd]) -> Result<(), StepError> {
    let mp = sys::mkdir_p_in_root(root, dst, 0o755).step("dev", dst)?;
    sys::mount_fs_on(
        &mp,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=755"),
        dst,
    )
    .step("dev", dst)?;
    let devmount = sys::open_path_in_root(root, dst).step("dev", dst)?;
    for (name, fd) in DEVICES.iter().zip(devices) {
        let p = dst.join(name);
        let node = sys::mountpoint_in_root(root, &p, false).step("dev", &p)?;
        // The bind keeps the host /dev mount's flags (not nodev), so the node
        // works; nosuid and noexec are added.
        let tree = sys::open_tree_clone(fd, &p).step("dev", &p)?;
        sys::mount_setattr(&tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, &p)
            .step("dev", &p)?;
        sys::move_mount(&tree, &node, &p).step("dev", &p)?;
    }
    for (target, link) in [
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
        ("pts/ptmx", "ptmx"),
    ] {
        let l = dst.join(link);
        sys::symlink_in_root(root, Path::new(target), &l).step("dev", &l)?;
    }
    let shm = dst.join("shm");
    let fd = sys::mkdir_p_in_root(root, &shm, 0o1777).step("dev", &shm)?;
    sys::mount_fs_on(
        &fd,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=64m,mode=1777"),
        &shm,
    )
    .step("dev", &shm)?;
    let pts = dst.join("pts");
    let fd = sys::mkdir_p_in_root(root, &pts, 0o755).step("dev", &pts)?;
    sys::mount_fs_on(
        &fd,
        "devpts",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
        &pts,
    )
    .step("dev", &pts)?;
    // Nothing new may be created in /dev.
    sys::mount_setattr(
        &devmount,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
        false,
        dst,
    )
    .step("dev", dst)
}
