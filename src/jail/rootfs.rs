//! The jail's root: a fresh tmpfs on which only what the plan names exists,
//! then pivot_root into it with the old root detached.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use super::error::JailError;
use crate::plan::{step, Plan, RootStep};
use crate::sys::{
    self, at, Errno, SysError, SysResult, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};

/// Device nodes bound from the host into /dev.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

mod cover;
pub use cover::watch as watch_covers;
mod overlay;
use overlay::{overlay, overlay_sources};
mod special;
use special::{dev, proc};

/// Name the step of a failed call and the path (relative to the new
/// root, or absolute) it worked on, as the jail sees it.
trait Step<T> {
    fn step(self, step: &'static str, path: &Path) -> Result<T, JailError>;
}

impl<T> Step<T> for SysResult<T> {
    fn step(self, step: &'static str, path: &Path) -> Result<T, JailError> {
        self.map_err(|err| step_error(step, path, err))
    }
}

fn step_error(step: &'static str, path: &Path, err: SysError) -> JailError {
    JailError::Sys {
        step,
        path: Path::new("/").join(path).display().to_string(),
        err,
        value: None,
    }
}

/// Host fds opened before the new root covers anything, and before init
/// becomes the jail user (so a root caller can bind what only root can
/// reach, such as an interpreter under /root).
pub struct Sources {
    binds: Vec<Option<Source>>,
    devices: Vec<OwnedFd>,
    /// The mount trees the supervisor idmapped (per step; empty: none).
    idmapped: Vec<Option<Idmapped>>,
}

/// A step's host mounts as the supervisor idmapped them
/// (`supervise::idmap`), detached trees to attach instead of clones of
/// our own.
pub enum Idmapped {
    /// A bind: its top (path empty), then, when it was cloned mount by
    /// mount, each mount beneath it, relative to it, parents first, to
    /// attach where the host has them.
    Bind(Vec<(PathBuf, OwnedFd)>),
    /// An overlay's layers: the directory holding its upper and work
    /// directories with their paths relative to it, and the lower ones
    /// top to bottom (as [`Source::Overlay`]).
    Overlay {
        upper: Option<(OwnedFd, PathBuf, PathBuf)>,
        lower: Vec<OwnedFd>,
    },
}

/// A bind source: mounted, or (small read-only world-readable files such
/// as /etc/ld.so.cache) copied into the root, which is cheaper to set up
/// and to tear down than a mount and shows the payload the same bytes.
enum Source {
    Mount(OwnedFd),
    /// An overlay's directories: upper and work (when given), the lower
    /// ones top to bottom.
    Overlay {
        upper: Option<(OwnedFd, OwnedFd)>,
        lower: Vec<OwnedFd>,
    },
    /// Open for reading; copied with its permission bits, at most `len`
    /// bytes (its size when opened).
    Copy {
        file: OwnedFd,
        len: u64,
        mode: u32,
    },
}

/// Read-only file binds up to this size are copied, up to COPY_TOTAL in
/// all (the root tmpfs holds 4 MiB).
const COPY_MAX: u64 = 128 * 1024;
const COPY_TOTAL: u64 = 1024 * 1024;

/// The world-readable regular file `fd` (an O_PATH fd) open for reading,
/// its size and mode, when it is small enough to copy; None: bind it.
fn copy_of(fd: &OwnedFd, budget: &mut u64) -> Option<Source> {
    let (mode, len) = sys::fstat_mode_size(fd).ok()?;
    // World-readable only: the jail user owns the copy, so a file it could
    // not read through the bind must stay a bind.
    if mode & libc::S_IFMT != libc::S_IFREG || mode & 0o004 == 0 || len > COPY_MAX.min(*budget) {
        return None;
    }
    let file = sys::reopen_read(fd).ok()?;
    *budget -= len;
    Some(Source::Copy {
        file,
        len,
        mode: mode & 0o755,
    })
}

/// Every bind's source, opened; `idmapped`: the trees the supervisor made
/// (see `supervise::idmap`), attached instead of clones of our own.
pub fn open_sources(plan: &Plan, idmapped: Vec<Option<Idmapped>>) -> Result<Sources, JailError> {
    let mut binds = Vec::with_capacity(plan.root.steps.len());
    let mut budget = COPY_TOTAL;
    for s in &plan.root.steps {
        binds.push(match s {
            RootStep::Bind {
                src,
                optional,
                writable,
                ..
            } => match sys::open_path_nofollow(src) {
                // A bare root (bwrap's) is built exactly as asked: a
                // read-only bind is a read-only mount there, never a copy.
                Ok(fd) if *writable || plan.root.writable => Some(Source::Mount(fd)),
                Ok(fd) => match copy_of(&fd, &mut budget) {
                    Some(copy) => Some(copy),
                    None => Some(Source::Mount(fd)),
                },
                Err(e) if *optional && e.errno == Errno::ENOENT => None,
                Err(e) => {
                    return Err(JailError::Sys {
                        step: "bind",
                        path: src.display().to_string(),
                        err: e,
                        value: None,
                    })
                }
            },
            RootStep::Overlay { lower, writes, .. } => Some(overlay_sources(lower, writes.dirs())?),
            _ => None,
        });
    }
    let mut devices = Vec::new();
    if plan
        .root
        .steps
        .iter()
        .any(|s| matches!(s, RootStep::Dev { .. } | RootStep::Proc { .. }))
    {
        for d in DEVICES {
            let p = PathBuf::from("/dev").join(d);
            devices.push(sys::open_path_nofollow(&p).step("open device", Path::new(&p))?);
        }
    }
    Ok(Sources {
        binds,
        devices,
        idmapped,
    })
}

/// What could not be built but did not stop the jail.
#[derive(Debug, Default)]
pub struct Notes {
    /// Why there is no /proc (the kernel refused a new proc mount, as it does
    /// in containers whose /proc has masked entries).
    pub proc_unavailable: Option<JailError>,
    /// pivot_root was refused (a runtime's seccomp profile): the root was
    /// moved over / and chrooted into instead.
    pub chrooted: bool,
    /// The upper directories of the policy's overlays on their tmpfs
    /// (`O_PATH`), with each overlay's index (`RootStep::Overlay`'s
    /// `workspace`): for the supervisor.
    pub uppers: Vec<(usize, OwnedFd)>,
}

/// The new root while it is built: its fd and a cache of O_PATH fds of the
/// directories walked so far, keyed by their path under the root. Only
/// directories reached one plain name at a time without meeting a symlink
/// are cached, so a key is the directory's real path; a mount on a path
/// drops the entries at and below it (the cached fd would show the
/// covered directory). Nothing else runs in this mount namespace while it
/// is built, so nothing can change the tree behind the cache.
struct Root {
    fd: OwnedFd,
    dirs: Vec<(PathBuf, OwnedFd)>,
    /// A bind replaced the tmpfs as the root (`stockade bwrap --bind / /`):
    /// its own attributes stand, the seal leaves it as bound.
    bound: bool,
}

/// A directory fd: cached in [`Root`] or resolved through a symlink (and
/// then not cached).
enum Dir {
    Root,
    Cached(usize),
    Resolved(OwnedFd),
}

impl Root {
    fn fd_of<'a>(&'a self, d: &'a Dir) -> &'a OwnedFd {
        match d {
            Dir::Root => &self.fd,
            Dir::Cached(i) => &self.dirs[*i].1,
            Dir::Resolved(fd) => fd,
        }
    }

    /// The directory `rel`, creating what is missing with `mode`.
    fn dir(&mut self, rel: &Path, mode: u32) -> SysResult<Dir> {
        if rel.as_os_str().is_empty() {
            return Ok(Dir::Root);
        }
        if let Some(i) = self.dirs.iter().position(|(p, _)| p == rel) {
            return Ok(Dir::Cached(i));
        }
        let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
        let (Some(parent), Some(name), true) = (rel.parent(), rel.file_name(), plain) else {
            return Ok(Dir::Resolved(sys::mkdir_p_in_root(&self.fd, rel, mode)?));
        };
        let pdir = self.dir(parent, mode)?;
        if let Dir::Resolved(_) = pdir {
            // Beneath a symlink: resolve the whole path inside the root.
            return Ok(Dir::Resolved(sys::mkdir_p_in_root(&self.fd, rel, mode)?));
        }
        let pfd = self.fd_of(&pdir);
        let fd = match at::open_dir(pfd, name, rel) {
            Ok(fd) => fd,
            Err(e) if e.errno == Errno::ENOENT => {
                at::mkdir(pfd, name, mode, rel)?;
                at::open_dir(pfd, name, rel)?
            }
            Err(e) if e.errno == Errno::ENOTDIR || e.errno == Errno::ELOOP => {
                // A symlink (or a file: the slow path gives the error).
                return Ok(Dir::Resolved(sys::mkdir_p_in_root(&self.fd, rel, mode)?));
            }
            Err(e) => return Err(e),
        };
        self.dirs.push((rel.to_path_buf(), fd));
        Ok(Dir::Cached(self.dirs.len() - 1))
    }

    /// The parent directory of `rel` and its last name.
    fn parent<'p>(&mut self, rel: &'p Path) -> SysResult<(Dir, &'p OsStr)> {
        let name = rel.file_name().ok_or_else(|| SysError {
            call: "path",
            arg: format!("/{}", rel.display()),
            errno: Errno::EINVAL,
        })?;
        let d = self.dir(rel.parent().unwrap_or(Path::new("")), 0o755)?;
        Ok((d, name))
    }

    /// Something was mounted on `rel`: forget the fds at and below it.
    fn mounted(&mut self, rel: &Path) {
        self.dirs.retain(|(p, _)| !p.starts_with(rel));
    }
}

/// Build the root on a tmpfs at `plan.root.base` and pivot into it. Runs in init,
/// in the new mount namespace, with capabilities in the new user namespace.
pub fn build(plan: &Plan, mut src: Sources) -> Result<(Notes, Held), JailError> {
    // Nothing we mount may propagate back to the host.
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .step("make / private", Path::new(""))?;
    let mut trees = clone_trees(plan, &mut src)?;
    let mut root = new_root(&plan.root.base)?;
    // Modes below are meant as written.
    let umask = at::umask(0);
    let mut made = cover::Made::default();
    let notes = apply_steps(plan, &mut root, &src, &mut trees, &mut made)?;
    cover::finish(&made, &plan.root.base)?;
    at::umask(umask);
    let chrooted = seal_and_pivot(&root, &plan.root.base, plan.root.writable)?;
    Ok((
        Notes { chrooted, ..notes },
        Held {
            _src: src,
            _root: root,
        },
    ))
}

/// Clone every bind's mount tree before the new root exists: a source
/// that holds plan.root.base (`--bind /tmp`, `--ro-bind /:/host`) must show
/// the host's tree, not the jail's root being built on it. A tree the
/// supervisor idmapped is taken as it is.
fn clone_trees(plan: &Plan, src: &mut Sources) -> Result<Vec<Option<OwnedFd>>, JailError> {
    let mut trees = Vec::with_capacity(plan.root.steps.len());
    for (i, step) in plan.root.steps.iter().enumerate() {
        // The top of an idmapped tree; the mounts beneath it stay in
        // `src.idmapped` for `attach_beneath`.
        let given = src.idmapped.get_mut(i);
        if let (Some(Some(Idmapped::Bind(all))), Some(Source::Mount(_))) = (given, &src.binds[i]) {
            if !all.is_empty() {
                let (_, top) = all.remove(0);
                trees.push(Some(top));
                continue;
            }
        }
        trees.push(match (step, &src.binds[i]) {
            (
                RootStep::Bind {
                    dst,
                    writable,
                    devices,
                    ..
                },
                Some(Source::Mount(fd)),
            ) => Some(clone_tree(fd, dst, *writable, *devices)?),
            _ => None,
        });
    }
    Ok(trees)
}

/// The root's tmpfs mounted on `base`, and its fd.
fn new_root(base: &Path) -> Result<Root, JailError> {
    sys::mount(
        Some("tmpfs"),
        base,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=4m,nr_inodes=4096,mode=755"),
    )
    .step("new root", base)?;
    let fd = sys::open_path_nofollow(base).step("new root", base)?;
    Ok(Root {
        fd,
        dirs: Vec::new(),
        bound: false,
    })
}

/// The plan's steps, in order, on the new root (`trees`: the binds' cloned
/// mount trees, see [`clone_trees`]).
fn apply_steps(
    plan: &Plan,
    root: &mut Root,
    src: &Sources,
    trees: &mut [Option<OwnedFd>],
    made: &mut cover::Made,
) -> Result<Notes, JailError> {
    let mut notes = Notes::default();
    for (i, step) in plan.root.steps.iter().enumerate() {
        match step {
            RootStep::Bind { dst, .. } => match (&src.binds[i], trees[i].take()) {
                (Some(Source::Mount(fd)), Some(tree)) => {
                    match dst.as_os_str().is_empty() {
                        true => bind_root(root, fd, tree, &plan.root.base)?,
                        false => bind(root, fd, tree, dst)?,
                    }
                    if let Some(Some(Idmapped::Bind(beneath))) = src.idmapped.get(i) {
                        attach_beneath(root, dst, beneath)?;
                    }
                }
                (Some(Source::Copy { file, len, mode }), _) => {
                    let (d, name) = root.parent(dst).step("bind", dst)?;
                    at::copy_file(root.fd_of(&d), name, file, *len, *mode, dst)
                        .step("bind", dst)?;
                }
                _ => {}
            },
            RootStep::Tmpfs { dst, data } => {
                let d = root.dir(dst, 0o755).step("tmpfs", dst)?;
                sys::mount_fs_on(
                    root.fd_of(&d),
                    "tmpfs",
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(data),
                    dst,
                )
                .step("tmpfs", dst)?;
                root.mounted(dst);
            }
            RootStep::Symlink { target, link } => {
                let (d, name) = root.parent(link).step("symlink", link)?;
                symlink(root.fd_of(&d), name, target, link)?;
            }
            RootStep::File {
                dst,
                content,
                mode,
                bound,
            } => {
                let (d, name) = root.parent(dst).step("file", dst)?;
                at::write_file(root.fd_of(&d), name, content, *mode, dst).step("file", dst)?;
                if let Some(writable) = bound {
                    bind_onto_itself(root, dst, *writable)?;
                }
            }
            RootStep::Dir { dst, mode } => {
                if let Some(parent) = dst.parent() {
                    root.dir(parent, parent_mode(*mode)).step("dir", dst)?;
                }
                root.dir(dst, *mode).step("dir", dst)?;
            }
            RootStep::Proc { dst } => {
                if let Some(refused) = proc(root, dst, &src.devices[0])? {
                    notes.proc_unavailable = Some(refused);
                }
            }
            RootStep::Dev { dst, shm, mqueue } => {
                dev(root, dst, shm, *mqueue, &src.devices, plan.root.writable)?
            }
            RootStep::Mqueue { dst } => mqueue(root, dst)?,
            RootStep::Cover { dst, dir, id } => cover::cover(root, made, dst, *dir, *id)?,
            RootStep::Overlay {
                dst,
                writes,
                workspace,
                ..
            } => {
                let given = match src.idmapped.get(i) {
                    Some(Some(Idmapped::Overlay { upper, lower })) => Some((upper, lower)),
                    _ => None,
                };
                let bind = src.binds[i].as_ref();
                let upper = overlay(root, dst, bind, writes.tmpfs(), workspace.is_some(), given)?;
                if let (Some(n), Some(fd)) = (workspace, upper) {
                    notes.uppers.push((*n, fd));
                }
            }
            RootStep::Chmod { dst, mode } => chmod(root, dst, *mode)?,
            RootStep::RemountRo { dst } => {
                let opened;
                let fd = if dst.as_os_str().is_empty() {
                    &root.fd
                } else {
                    opened =
                        sys::open_in_root(&root.fd, dst, libc::O_PATH).step("remount-ro", dst)?;
                    &opened
                };
                sys::mount_setattr(fd, MOUNT_ATTR_RDONLY, false, dst).step("remount-ro", dst)?;
            }
        }
    }
    Ok(notes)
}

/// The mode of the missing parents of a directory made with `mode`: 0755,
/// without the group's (others') read and search when `mode` gives the
/// group (others) nothing, as bwrap makes them.
fn parent_mode(mode: u32) -> u32 {
    let mut m = 0o755;
    if mode & 0o070 == 0 {
        m &= !0o050;
    }
    if mode & 0o007 == 0 {
        m &= !0o005;
    }
    m
}

/// Seal: the root tmpfs itself (/etc files, mount points) is read-only,
/// unless it is `writable` (a bare root, as bwrap's) or a bind replaced it.
/// Then pivot into it; false when pivot_root was refused and the root was
/// chrooted into instead.
fn seal_and_pivot(root: &Root, base: &Path, writable: bool) -> Result<bool, JailError> {
    if root.bound || writable {
        return Ok(!sys::pivot_root_and_detach(base).step("pivot_root", base)?);
    }
    sys::mount_setattr(
        &root.fd,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
        Path::new("/"),
    )
    .step("seal root", Path::new(""))?;
    Ok(!sys::pivot_root_and_detach(base).step("pivot_root", base)?)
}

/// The fds the build used (sources, directories of the new root). Closing
/// a few dozen fds takes a while; init drops this once the payload runs.
/// Init is not dumpable by then, so no one in the jail can reach them.
pub struct Held {
    _src: Sources,
    _root: Root,
}

fn verify_error(dst: &Path) -> JailError {
    let err = SysError {
        call: "verify",
        arg: "mount point does not show the source".into(),
        errno: Errno::EXDEV,
    };
    step_error("bind", dst, err)
}

/// A new mqueue filesystem at `dst`, with no flags, as bwrap mounts it.
fn mqueue(root: &mut Root, dst: &Path) -> Result<(), JailError> {
    let d = root.dir(dst, 0o755).step("mqueue", dst)?;
    sys::mount_fs_on(root.fd_of(&d), "mqueue", 0, None, dst).step("mqueue", dst)?;
    root.mounted(dst);
    Ok(())
}

/// chmod what is at `dst`, resolved inside the root.
fn chmod(root: &Root, dst: &Path, mode: u32) -> Result<(), JailError> {
    let fd = sys::open_in_root(&root.fd, dst, libc::O_PATH).step(step::CHMOD_OPEN, dst)?;
    sys::chmod_fd(&fd, mode, dst).step(step::CHMOD, dst)
}

/// The file just made at `dst` bind-mounted onto itself, read-only unless
/// `writable` (bwrap's `--bind-data` / `--ro-bind-data`).
fn bind_onto_itself(root: &mut Root, dst: &Path, writable: bool) -> Result<(), JailError> {
    let fd = sys::open_in_root(&root.fd, dst, libc::O_PATH).step("bind", dst)?;
    let tree = clone_tree(&fd, dst, writable, false)?;
    bind(root, &fd, tree, dst)
}

/// A detached copy of `src`'s mount tree with nosuid, nodev (unless
/// `devices`) and rdonly (unless `writable`) set on all of it.
fn clone_tree(
    src: &OwnedFd,
    dst: &Path,
    writable: bool,
    devices: bool,
) -> Result<OwnedFd, JailError> {
    let tree = sys::open_tree_clone(src, dst).step("bind", dst)?;
    let mut attrs = MOUNT_ATTR_NOSUID;
    if !devices {
        attrs |= MOUNT_ATTR_NODEV;
    }
    if !writable {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    sys::mount_setattr(&tree, attrs, true, dst).step("bind", dst)?;
    Ok(tree)
}

/// Bind `src` (whose tree [`clone_tree`] copied) at `dst`: attach the tree,
/// then check the mount point now shows the very inode we opened.
fn bind(root: &mut Root, src: &OwnedFd, tree: OwnedFd, dst: &Path) -> Result<(), JailError> {
    let (dev, ino, mode) = sys::fstat_id(src).step("bind", dst)?;
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    let (d, name) = root.parent(dst).step("bind", dst)?;
    let pfd = root.fd_of(&d);
    mount_point(pfd, name, is_dir, dst)?;
    at::move_mount(&tree, pfd, name, dst).step("bind", dst)?;
    let (d2, i2, _) = at::stat(pfd, name, dst).step("bind", dst)?;
    if (d2, i2) != (dev, ino) {
        return Err(verify_error(dst));
    }
    root.mounted(dst);
    Ok(())
}

/// The mounts beneath an idmapped bind at `dst`, each where the host has
/// it (see [`Idmapped`]).
fn attach_beneath(
    root: &mut Root,
    dst: &Path,
    beneath: &[(PathBuf, OwnedFd)],
) -> Result<(), JailError> {
    for (rel, tree) in beneath {
        let at = dst.join(rel);
        let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
            continue;
        };
        let opened;
        let pfd = match parent.as_os_str().is_empty() {
            true => &root.fd,
            false => {
                opened = sys::open_path_beneath(&root.fd, parent).step("bind", &at)?;
                &opened
            }
        };
        at::move_mount(tree, pfd, name, &at).step("bind", &at)?;
    }
    root.mounted(dst);
    Ok(())
}

/// The mount point for a bind at `dst` (`name` in `pfd`): a directory or
/// an empty file of our own, or what is already there, as bubblewrap
/// takes it: never a symlink (mount would follow it), a directory for a
/// directory, anything but a directory for a file.
fn mount_point(pfd: &OwnedFd, name: &OsStr, is_dir: bool, dst: &Path) -> Result<(), JailError> {
    let mode = match at::stat(pfd, name, dst) {
        Ok((_, _, mode)) => mode & libc::S_IFMT,
        Err(e) if e.errno == Errno::ENOENT => {
            if is_dir {
                at::mkdir(pfd, name, 0o755, dst).step("bind", dst)?;
            } else {
                // Read-only for all, as bwrap makes it (seen where the
                // mount point is made in a bound host directory).
                at::open(pfd, name, libc::O_RDONLY | libc::O_CREAT, 0o444, dst)
                    .step("bind", dst)?;
            }
            return Ok(());
        }
        Err(e) => return Err(step_error("bind", dst, e)),
    };
    let (errno, why) = match mode {
        libc::S_IFLNK => (Errno::ELOOP, "a symlink is there (a mount would follow it)"),
        libc::S_IFDIR if !is_dir => (
            Errno::EISDIR,
            "a directory is there, for a source that is not one",
        ),
        m if is_dir && m != libc::S_IFDIR => (
            Errno::ENOTDIR,
            "what is there is not a directory, for a source that is one",
        ),
        _ => return Ok(()),
    };
    Err(found(step::MOUNT_POINT, dst, errno, None, why.into()))
}

/// What `step` found at the jail path `path` does not fit it.
fn found(
    step: &'static str,
    path: &Path,
    errno: Errno,
    value: Option<String>,
    why: String,
) -> JailError {
    JailError::Found {
        step,
        path: Path::new("/").join(path).display().to_string(),
        errno,
        value,
        why,
    }
}

/// The symlink `link` (`name` in `dir`) to `target`; one already there
/// with the same target is fine, anything else there is refused.
fn symlink(dir: &OwnedFd, name: &OsStr, target: &Path, link: &Path) -> Result<(), JailError> {
    let e = match at::symlink(target, dir, name, link) {
        Ok(()) => return Ok(()),
        Err(e) if e.errno == Errno::EEXIST => e,
        Err(e) => return Err(step_error("symlink", link, e)),
    };
    let (there, why) = match at::readlink(dir, name, link) {
        Ok(t) if t == target.as_os_str() => return Ok(()),
        Ok(t) => {
            let t = Path::new(&t).display().to_string();
            let why = format!("a symlink to {t} is there");
            (Some(t), why)
        }
        Err(r) if r.errno == Errno::EINVAL => {
            (None, "something other than a symlink is there".into())
        }
        Err(_) => return Err(step_error("symlink", link, e)),
    };
    Err(found(step::SYMLINK_EXISTS, link, Errno::EEXIST, there, why))
}

/// Bind `src` over the whole root (a bind whose destination is `/`): the
/// tree goes on `base`, over the tmpfs and what was built on it, and the
/// root is that tree from now on.
fn bind_root(root: &mut Root, src: &OwnedFd, tree: OwnedFd, base: &Path) -> Result<(), JailError> {
    let dst = Path::new("");
    let (dev, ino, mode) = sys::fstat_id(src).step("bind", dst)?;
    if mode & libc::S_IFMT != libc::S_IFDIR {
        let err = SysError {
            call: "mount point",
            arg: "/ is not a file".into(),
            errno: Errno::EISDIR,
        };
        return Err(step_error("bind", dst, err));
    }
    let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
        return Err(verify_error(dst));
    };
    let pfd = sys::open_path_nofollow(parent).step("bind", dst)?;
    at::move_mount(&tree, &pfd, name, dst).step("bind", dst)?;
    let fd = sys::open_path_nofollow(base).step("bind", dst)?;
    let (d2, i2, _) = sys::fstat_id(&fd).step("bind", dst)?;
    if (d2, i2) != (dev, ino) {
        return Err(verify_error(dst));
    }
    root.fd = fd;
    root.dirs.clear();
    root.bound = true;
    Ok(())
}
