//! The jail's root as steps: the policy's mounts (defaults, workdir, the
//! caller's) resolved into [`RootStep`]s with canonical host sources, the
//! Landlock rules the same list grants, and the fallback's rules on host
//! paths.

#![deny(unsafe_code)]

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::SetupError;
use crate::policy::{MountSpec, Policy};
use crate::sys;

mod overlay;
mod workspace;
pub use overlay::Writes;
pub(super) use workspace::refuse_in_fallback;
pub use workspace::{Upper, Workspaces};

/// One filesystem step of the jail's root, with host paths resolved and jail
/// paths relative to the new root.
#[derive(Debug, Clone)]
pub enum RootStep {
    Bind {
        src: PathBuf,
        dst: PathBuf,
        writable: bool,
        optional: bool,
        /// Device nodes usable (no nodev).
        devices: bool,
    },
    Tmpfs {
        dst: PathBuf,
        data: String,
    },
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    File {
        dst: PathBuf,
        content: Vec<u8>,
        mode: u32,
        /// Bind-mounted onto itself, read-only unless true
        /// (`MountSpec::Data`); None: a plain file.
        bound: Option<bool>,
    },
    Dir {
        dst: PathBuf,
        mode: u32,
    },
    Proc {
        dst: PathBuf,
    },
    Dev {
        dst: PathBuf,
        /// The mount data of its `shm` tmpfs (`size=64m,mode=1777`).
        shm: String,
        /// An mqueue filesystem of the jail's IPC namespace at `mqueue`
        /// beneath it (stockade's own /dev; not bwrap's `--dev`): Landlock
        /// grants the jail's POSIX message queues through it.
        mqueue: bool,
    },
    /// A new mqueue filesystem.
    Mqueue {
        dst: PathBuf,
    },
    /// An overlayfs of host directories (`MountSpec::Overlay`, bwrap's;
    /// `MountSpec::Workspace`, the policy's `--overlay`): `lower` bottom
    /// to top, canonical; its writes go where `writes` says.
    Overlay {
        dst: PathBuf,
        lower: Vec<PathBuf>,
        writes: Writes,
        /// The policy's Nth overlay (`--overlay`): a tmpfs upper layer's fd
        /// goes to the supervisor (see [`Upper::Handed`]).
        workspace: Option<usize>,
    },
    /// The mode of what is at `dst` changed.
    Chmod {
        dst: PathBuf,
        mode: u32,
    },
    /// The mount at `dst` made read-only (not recursively).
    RemountRo {
        dst: PathBuf,
    },
    /// What a bind shows at `dst` hidden under an empty read-only
    /// directory (`dir`) or file (a denied path: see `plan::deny`).
    Cover {
        dst: PathBuf,
        dir: bool,
        /// (st_dev, st_ino, st_nlink) of what it hides, as the plan saw
        /// it: the jail refuses to cover anything else, or a file that
        /// gained a hard link since (found nowhere).
        id: Option<(u64, u64, u64)>,
    },
}

/// What Landlock grants beneath a jail path (derived from the mount list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and execute.
    ReadExec,
    /// Everything.
    ReadWrite,
    /// Device nodes: read and write files, no creation.
    Device,
    /// Listing the directory (and those beneath it) only: the fallback's
    /// directories on the way to a denied path.
    List,
}

/// The jail's own root, as init builds it.
#[derive(Debug, Clone)]
pub struct Root {
    /// Host directory (in the jail's private mount namespace) where the new
    /// root tmpfs is assembled before pivot_root.
    pub base: PathBuf,
    /// Empty in the fallback, which has no root of its own.
    pub steps: Vec<RootStep>,
    /// The root's own tmpfs stays writable (a bare root, as bwrap's), not
    /// sealed read-only.
    pub writable: bool,
    /// Where the root build mounts something (absolute jail paths; the
    /// masks inside /proc and /dev's own mounts lie beneath these). Empty
    /// in the fallback.
    pub mount_points: Vec<PathBuf>,
    /// The denied paths hidden (`Policy::deny`: covered, or in the
    /// fallback left out of Landlock's rules), for the outcome.
    pub masked: Vec<super::Masked>,
    /// The overlays (`--overlay`), whose changes the supervisor lists and
    /// may commit after the run.
    pub workspaces: Workspaces,
    pub hostname: String,
    /// Read-locked by init once the root is built (`Compat::lock_files`).
    pub lock_files: Vec<PathBuf>,
}

impl Root {
    /// The root of `p` with its final `steps` (covers included), and what
    /// they and the Landlock rules hide.
    pub(super) fn of(
        p: &Policy,
        steps: Vec<RootStep>,
        masked: Vec<super::Masked>,
    ) -> Result<Root, SetupError> {
        Ok(Root {
            base: assembly_dir()?,
            mount_points: mount_points(&steps),
            workspaces: workspace::of(p, &steps),
            steps,
            writable: p.base == crate::policy::BaseRoot::Bare,
            masked,
            hostname: p.hostname.clone(),
            lock_files: p.compat.lock_files.clone(),
        })
    }
}

/// The host directory the new root is assembled on.
fn assembly_dir() -> Result<PathBuf, SetupError> {
    ["/tmp", "/run", "/mnt", "/var/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| {
            std::fs::symlink_metadata(d)
                .map(|m| m.is_dir())
                .unwrap_or(false)
        })
        .ok_or_else(|| {
            SetupError::new(
                "new root",
                "/tmp",
                "no directory to assemble the new root on (/tmp, /run, /mnt, /var/tmp all missing)",
            )
        })
}

/// The root's steps and the Landlock rules they grant (jail paths).
pub(super) struct Laid {
    pub steps: Vec<RootStep>,
    pub rules: Vec<(PathBuf, Access)>,
}

/// Every mount of the jail, in order: the defaults (the base root's binds
/// unless it is empty), the workdir, the policy's own.
pub(super) fn specs(p: &Policy) -> Vec<MountSpec> {
    if p.base == crate::policy::BaseRoot::Bare {
        return p.mounts.clone();
    }
    let mut specs: Vec<MountSpec> =
        crate::policy::default_mounts(p.uid, p.gid, &p.hostname, &p.workdir.inner, p.tmp_size);
    if p.base == crate::policy::BaseRoot::Empty {
        specs.retain(|m| !matches!(m, MountSpec::Bind { .. } | MountSpec::Symlink { .. }));
    }
    specs.push(match &p.workdir.host {
        Some(h) => MountSpec::Bind {
            src: h.clone(),
            dst: p.workdir.inner.clone(),
            writable: true,
            optional: false,
        },
        None => MountSpec::Tmpfs {
            dst: p.workdir.inner.clone(),
            size: p.workdir.size,
            mode: 0o755,
        },
    });
    specs.extend(p.mounts.iter().cloned());
    specs
}

/// The policy's mounts as root steps, bind sources resolved on the host.
pub(super) fn plan(p: &Policy) -> Result<Laid, SetupError> {
    let specs = specs(p);
    let mut root = Laid {
        steps: Vec::with_capacity(specs.len()),
        rules: Vec::new(),
    };
    let mut sources = Sources::default();
    // stockade's own /dev has /dev/mqueue; bwrap's `--dev` (a bare root)
    // has what bwrap's has.
    let mqueue = p.base != crate::policy::BaseRoot::Bare;
    for s in &specs {
        root.add(p, s, &mut sources, mqueue)?;
    }
    Ok(root)
}

impl Laid {
    /// One mount: its step and what Landlock grants beneath it (an optional
    /// bind whose source is missing adds neither).
    fn add(
        &mut self,
        p: &Policy,
        s: &MountSpec,
        sources: &mut Sources,
        dev_mqueue: bool,
    ) -> Result<(), SetupError> {
        let rules = &mut self.rules;
        let step = match s {
            MountSpec::Bind {
                src,
                dst,
                writable,
                optional,
            } => {
                let Some(src) = sources.resolve(src, *optional)? else {
                    return Ok(());
                };
                let grant = if *writable {
                    Access::ReadWrite
                } else {
                    Access::ReadExec
                };
                rules.push((dst.clone(), grant));
                RootStep::Bind {
                    src,
                    dst: rel(dst),
                    writable: *writable,
                    optional: *optional,
                    devices: false,
                }
            }
            MountSpec::Workspace { src, dst } => {
                let Some(src) = sources.resolve(src, false)? else {
                    return Ok(());
                };
                let index = self
                    .steps
                    .iter()
                    .filter(|s| {
                        matches!(
                            s,
                            RootStep::Overlay {
                                workspace: Some(_),
                                ..
                            }
                        )
                    })
                    .count();
                workspace::step(p, index, src, dst, rules)
            }
            MountSpec::Overlay {
                dst,
                lower,
                upper,
                tmp,
            } => overlay::step(dst, lower, upper.as_ref(), *tmp, sources, rules)?,
            MountSpec::DevBind { src, dst, optional } => {
                let Some(src) = sources.resolve(src, *optional)? else {
                    return Ok(());
                };
                rules.push((dst.clone(), Access::ReadWrite));
                RootStep::Bind {
                    src,
                    dst: rel(dst),
                    writable: true,
                    optional: *optional,
                    devices: true,
                }
            }
            other => made(other, rules, dev_mqueue),
        };
        self.steps.push(step);
        Ok(())
    }
}

/// The step of a mount with no host source, and its Landlock grant.
/// `dev_mqueue`: a /dev gets an mqueue filesystem at /dev/mqueue.
fn made(s: &MountSpec, rules: &mut Vec<(PathBuf, Access)>, dev_mqueue: bool) -> RootStep {
    match s {
        MountSpec::Tmpfs { dst, size, mode } => {
            rules.push((dst.clone(), Access::ReadWrite));
            RootStep::Tmpfs {
                dst: rel(dst),
                data: tmpfs_data(*size, *mode),
            }
        }
        MountSpec::Symlink { target, link } => RootStep::Symlink {
            target: target.clone(),
            link: rel(link),
        },
        MountSpec::File { dst, content, mode } => {
            rules.push((dst.clone(), Access::ReadExec));
            RootStep::File {
                dst: rel(dst),
                content: content.clone(),
                mode: *mode,
                bound: None,
            }
        }
        MountSpec::Data {
            dst,
            content,
            mode,
            writable,
        } => {
            let grant = match writable {
                true => Access::ReadWrite,
                false => Access::ReadExec,
            };
            rules.push((dst.clone(), grant));
            RootStep::File {
                dst: rel(dst),
                content: content.clone(),
                mode: *mode,
                bound: Some(*writable),
            }
        }
        MountSpec::Dir { dst, mode } => RootStep::Dir {
            dst: rel(dst),
            mode: *mode,
        },
        // Landlock's grant stays; the mount refuses writes itself.
        MountSpec::RemountRo { dst } => RootStep::RemountRo { dst: rel(dst) },
        MountSpec::Mqueue { dst } => {
            rules.push((dst.clone(), Access::ReadWrite));
            RootStep::Mqueue { dst: rel(dst) }
        }
        MountSpec::Chmod { dst, mode } => RootStep::Chmod {
            dst: rel(dst),
            mode: *mode,
        },
        MountSpec::Proc { dst } => {
            rules.push((dst.clone(), Access::ReadExec));
            RootStep::Proc { dst: rel(dst) }
        }
        MountSpec::Dev { dst } => {
            rules.push((dst.clone(), Access::Device));
            rules.push((dst.join("shm"), Access::ReadWrite));
            rules.push((dst.join("pts"), Access::Device));
            if dev_mqueue {
                // mq_open(3) opens its queue on the IPC namespace's own
                // internal mqueue mount, which Landlock's path walk finds
                // no rule on (it has no parent mount); the rule on this
                // mount's root, the same superblock's root inode, is the
                // one it finds there.
                rules.push((dst.join("mqueue"), Access::ReadWrite));
            }
            RootStep::Dev {
                dst: rel(dst),
                shm: tmpfs_data(SHM_SIZE, 0o1777),
                mqueue: dev_mqueue,
            }
        }
        MountSpec::Bind { .. }
        | MountSpec::DevBind { .. }
        | MountSpec::Workspace { .. }
        | MountSpec::Overlay { .. } => {
            unreachable!("binds and overlays are resolved in Laid::add")
        }
    }
}

/// The size of the jail's /dev/shm.
pub const SHM_SIZE: u64 = 64 << 20;

pub(crate) fn tmpfs_data(size: u64, mode: u32) -> String {
    match size {
        // tmpfs reads size=0 as no limit: leave it out for the default.
        0 => format!("mode={mode:o}"),
        _ => format!("size={size},mode={mode:o}"),
    }
}

/// The size of a tmpfs made by [`tmpfs_data`] (0: no size given, the
/// kernel's default of half the memory), and its data with another size.
pub(crate) fn tmpfs_size(data: &str) -> u64 {
    data.split(',')
        .find_map(|o| o.strip_prefix("size="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn with_tmpfs_size(data: &str, size: u64) -> String {
    let rest: Vec<&str> = data
        .split(',')
        .filter(|o| !o.starts_with("size=") && !o.is_empty())
        .collect();
    let mut out = format!("size={size}");
    for o in rest {
        out.push(',');
        out.push_str(o);
    }
    out
}

fn rel(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

/// Canonical host paths of bind sources. The directories already resolved
/// are remembered: the default binds share /etc, whose every component
/// realpath(3) would otherwise read again for each file under it.
#[derive(Default)]
struct Sources {
    /// (directory as named, its canonical path).
    dirs: Vec<(PathBuf, PathBuf)>,
}

impl Sources {
    /// The canonical path of `p`, as `std::fs::canonicalize` gives it (same
    /// result, same errors): the parent directory from the cache when it
    /// is there, then one readlink(2) of the last component.
    fn canonicalize(&mut self, p: &Path) -> std::io::Result<PathBuf> {
        let Some((parent, name)) = plain_split(p) else {
            return std::fs::canonicalize(p);
        };
        let dir = match self.dirs.iter().find(|(d, _)| d == parent) {
            Some((_, c)) => c.clone(),
            None => {
                let c = std::fs::canonicalize(parent)?;
                self.dirs.push((parent.to_path_buf(), c.clone()));
                c
            }
        };
        let full = dir.join(name);
        match std::fs::read_link(&full) {
            Ok(_) => std::fs::canonicalize(&full),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(full),
            Err(e) => Err(e),
        }
    }

    /// Resolve a bind source to its canonical host path. The child opens
    /// that path again refusing every symlink, so a symlink swapped in later
    /// fails.
    fn resolve(&mut self, src: &Path, optional: bool) -> Result<Option<PathBuf>, SetupError> {
        match self.canonicalize(src) {
            Ok(p) => Ok(Some(p)),
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SetupError::from_errno(
                "bind",
                src.display().to_string(),
                sys::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )),
        }
    }
}

/// `/a/b/c` as (`/a/b`, `c`) when every component is a plain name (no `.`,
/// `..`, empty component or trailing slash, whose meaning realpath(3) settles
/// itself); `None` otherwise.
fn plain_split(p: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let b = p.as_os_str().as_bytes();
    if b.first() != Some(&b'/') || b.len() < 2 {
        return None;
    }
    if b[1..]
        .split(|c| *c == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return None;
    }
    let cut = b.iter().rposition(|c| *c == b'/')?;
    let parent = if cut == 0 { &b[..1] } else { &b[..cut] };
    Some((
        Path::new(std::ffi::OsStr::from_bytes(parent)),
        std::ffi::OsStr::from_bytes(&b[cut + 1..]),
    ))
}

/// Landlock rules for the fallback: read-only binds' sources read and
/// execute, writable ones read-write, the device nodes. Not /proc: without
/// a pid namespace it is the host's, and shows every host process (its
/// command line included).
pub(super) fn fallback_rules(steps: &[RootStep]) -> Vec<(PathBuf, Access)> {
    let mut rules = Vec::new();
    for s in steps {
        match s {
            RootStep::Bind { src, writable, .. } => rules.push((
                src.clone(),
                if *writable {
                    Access::ReadWrite
                } else {
                    Access::ReadExec
                },
            )),
            RootStep::Dev { .. } => {
                for d in ["null", "zero", "full", "random", "urandom", "tty"] {
                    rules.push((PathBuf::from("/dev").join(d), Access::Device));
                }
            }
            _ => {}
        }
    }
    rules
}

/// Whether the root mounts an mqueue filesystem (stockade's /dev/mqueue,
/// bwrap's `--mqueue`): the IPC namespace's queues are then reached
/// through its Landlock rule, or not at all where it is excluded.
pub(super) fn mounts_mqueue(steps: &[RootStep]) -> bool {
    steps.iter().any(|s| {
        matches!(
            s,
            RootStep::Mqueue { .. } | RootStep::Dev { mqueue: true, .. }
        )
    })
}

pub(super) fn mount_points(steps: &[RootStep]) -> Vec<PathBuf> {
    steps
        .iter()
        .filter_map(|s| match s {
            RootStep::Bind { dst, .. }
            | RootStep::Tmpfs { dst, .. }
            | RootStep::Proc { dst }
            | RootStep::Dev { dst, .. }
            | RootStep::Mqueue { dst }
            | RootStep::Cover { dst, .. }
            | RootStep::Overlay { dst, .. }
            | RootStep::File {
                dst,
                bound: Some(_),
                ..
            } => Some(Path::new("/").join(dst)),
            RootStep::Symlink { .. }
            | RootStep::File { .. }
            | RootStep::Dir { .. }
            | RootStep::RemountRo { .. }
            | RootStep::Chmod { .. } => None,
        })
        .collect()
}

/// Fewer Landlock rules for the same grants: each rule costs the payload
/// an open, two stats and a landlock_add_rule before execve.
///
/// Read-only rules beneath a top-level directory that stockade created on
/// the root tmpfs itself (such as /etc, which holds only what the plan
/// puts there) become one read-only rule on that directory, when
/// everything the plan puts beneath it is read-only and granted (read-only
/// binds, files, symlinks, empty directories) and no --landlock-exclude
/// lies at, above or beneath it. The same paths are readable either way;
/// the directory itself becomes listable, as `/` is when every mount is
/// granted.
pub(super) fn coalesce_rules(
    rules: Vec<(PathBuf, Access)>,
    steps: &[RootStep],
    exclude: &[PathBuf],
) -> Vec<(PathBuf, Access)> {
    let top = |p: &Path| -> Option<PathBuf> {
        let mut c = p.components();
        match (c.next(), c.next(), c.next()) {
            (Some(std::path::Component::RootDir), Some(t), Some(_)) => {
                Some(Path::new("/").join(t.as_os_str()))
            }
            _ => None,
        }
    };
    let mut tops: Vec<PathBuf> = Vec::new();
    for (path, access) in &rules {
        if *access != Access::ReadExec {
            continue;
        }
        let Some(t) = top(path) else { continue };
        if tops.contains(&t) || rules.iter().any(|(r, _)| *r == t) {
            continue;
        }
        let blocked = exclude
            .iter()
            .any(|x| x.starts_with(&t) || t.starts_with(x));
        let all_read_only = steps.iter().all(|s| {
            let (dst, ok) = match s {
                RootStep::Bind { dst, writable, .. } => (dst, !writable),
                RootStep::File { dst, bound, .. } => (dst, *bound != Some(true)),
                RootStep::Dir { dst, .. }
                | RootStep::Cover { dst, .. }
                | RootStep::RemountRo { dst }
                | RootStep::Chmod { dst, .. } => (dst, true),
                RootStep::Symlink { link, .. } => (link, true),
                RootStep::Tmpfs { dst, .. }
                | RootStep::Proc { dst }
                | RootStep::Dev { dst, .. }
                | RootStep::Mqueue { dst }
                | RootStep::Overlay { dst, .. } => (dst, false),
            };
            ok || !Path::new("/").join(dst).starts_with(&t)
        });
        if !blocked && all_read_only {
            tops.push(t);
        }
    }
    let mut out: Vec<(PathBuf, Access)> = rules
        .into_iter()
        .filter(|(path, access)| {
            *access != Access::ReadExec || !tops.iter().any(|t| path.starts_with(t))
        })
        .collect();
    out.extend(tops.into_iter().map(|t| (t, Access::ReadExec)));
    out
}

#[cfg(test)]
mod tests;
