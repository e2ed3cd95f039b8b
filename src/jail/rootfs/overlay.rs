//! Overlays (bwrap's `--overlay`, `--tmp-overlay`, `--ro-overlay`, and
//! stockade's own `--overlay HOST_DIR:INNER`): the
//! host directories opened with the caller's credentials, then an
//! overlayfs named to the kernel by their fds (or by the layers the
//! supervisor idmapped), on the new root.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::{Root, Source, Step};
use crate::jail::error::JailError;
use crate::plan::step;
use crate::sys::{self, at};

/// An overlay's host directories, opened with the caller's credentials as
/// the binds' sources are (each error's path is the host directory's).
pub(super) fn overlay_sources(
    lower: &[PathBuf],
    upper: Option<(&Path, &Path)>,
) -> Result<Source, JailError> {
    let open = |p: &Path, step| {
        sys::open_dir_path(p).map_err(|err| JailError::Sys {
            step,
            path: p.display().to_string(),
            err,
            value: None,
        })
    };
    let upper = match upper {
        Some((u, w)) => Some((
            open(u, step::OVERLAY_SOURCE)?,
            open(w, step::OVERLAY_WORKDIR)?,
        )),
        None => None,
    };
    let lower = lower
        .iter()
        .rev()
        .map(|l| open(l, step::OVERLAY_SOURCE))
        .collect::<Result<_, _>>()?;
    Ok(Source::Overlay { upper, lower })
}

/// An overlay's idmapped layers (see [`Idmapped::Overlay`]).
type GivenLayers<'a> = (&'a Option<(OwnedFd, PathBuf, PathBuf)>, &'a Vec<OwnedFd>);

/// An overlayfs at `dst` of the opened host directories `src`, written to
/// its upper directory, or to a tmpfs of its own (`tmp`: its data), or
/// read-only; named to overlayfs by their fds, as bwrap does, so no path
/// needs escaping. The tmpfs is mounted on `dst` itself and the overlay
/// over it: out of the payload's sight, and always ours to write. `given`:
/// the layers as the supervisor idmapped them, attached in that tmpfs
/// (beneath the overlay: the kernel takes a layer from our own mount
/// namespace only) and used instead of `src`'s. `workspace`: the policy's
/// overlay (`--overlay`), whose refusal names the flag and why, and whose
/// upper directory on its tmpfs is returned (`O_PATH`) for the supervisor.
pub(super) fn overlay(
    root: &mut Root,
    dst: &Path,
    src: Option<&Source>,
    tmp: Option<&str>,
    workspace: bool,
    given: Option<GivenLayers>,
) -> Result<Option<OwnedFd>, JailError> {
    let Some(Source::Overlay { upper, lower }) = src else {
        return Ok(None);
    };
    let path = |fd: &OwnedFd| sys::fd_path(fd).to_string_lossy().into_owned();
    let d = root.dir(dst, 0o755).step("overlay", dst)?;
    let mut held = Vec::new();
    let mut scratch = None;
    if tmp.is_some() || given.is_some() {
        sys::mount_fs_on(
            root.fd_of(&d),
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(tmp.unwrap_or("mode=755")),
            dst,
        )
        .step("overlay", dst)?;
        root.mounted(dst);
        scratch = Some(sys::open_in_root(&root.fd, dst, libc::O_PATH).step("overlay", dst)?);
    }
    if let (Some(_), Some(t)) = (tmp, &scratch) {
        for name in ["upper", "work"] {
            at::mkdir(t, OsStr::new(name), 0o755, dst).step("overlay", dst)?;
            held.push(at::open_dir(t, OsStr::new(name), dst).step("overlay", dst)?);
        }
    }
    let mut layers = None;
    if let (Some(given), Some(t)) = (given, &scratch) {
        layers = Some(attach_layers(t, dst, given)?);
    }
    // Idmapped lower layers with a kept upper one (`--overlay-upper`, a
    // session's) that takes no idmap: the upper directories opened here.
    let own_upper = upper.as_ref().map(|(u, w)| (u, w));
    let (upper, lower) = match &layers {
        Some((u, l)) => (u.as_ref().map(|(u, w)| (u, w)).or(own_upper), l),
        None => (own_upper, lower),
    };
    let mut opts = match (upper, held.as_slice()) {
        (Some((u, w)), _) | (None, [u, w]) => format!("upperdir={},workdir={},", path(u), path(w)),
        _ => String::new(),
    };
    let names: Vec<String> = lower.iter().map(path).collect();
    opts.push_str(&format!("lowerdir={},userxattr", names.join(":")));
    let d = root.dir(dst, 0o755).step("overlay", dst)?;
    let mounted =
        sys::mount_overlay_on(root.fd_of(&d), libc::MS_NOSUID | libc::MS_NODEV, &opts, dst);
    match (mounted, workspace) {
        (Ok(()), _) => {}
        (Err(e), true) => return Err(refused(dst, e)),
        (Err(e), false) => {
            return Err(super::step_error(step::OVERLAY_MOUNT, dst, e).with_value(opts))
        }
    }
    root.mounted(dst);
    Ok(match (workspace, tmp) {
        (true, Some(_)) => held.into_iter().next(),
        _ => None,
    })
}

/// The kernel refused a policy's overlay (`--overlay`): why, as far as
/// its errno tells, never a writable bind in its place.
fn refused(dst: &Path, e: sys::SysError) -> JailError {
    let why = match e.errno {
        sys::Errno::EPERM | sys::Errno::EACCES => {
            "the kernel refused an overlayfs mount in the jail's user namespace (Linux 5.11 or later mounts one there; a security module or a sysctl may forbid it)"
        }
        sys::Errno::ENODEV => "this kernel has no overlayfs (the overlay module is not loaded)",
        sys::Errno::EINVAL | sys::Errno::EOPNOTSUPP => {
            "overlayfs refused the layers (Linux 5.11 or later mounts one in a user namespace; the host directory's filesystem, or the upper layer's, may not take part in one: it needs user extended attributes)"
        }
        _ => "overlayfs could not be mounted",
    };
    JailError::Found {
        step: "--overlay",
        path: Path::new("/").join(dst).display().to_string(),
        errno: e.errno,
        value: None,
        why: format!("{why}: {e}"),
    }
}

/// An overlay's idmapped layers attached in its scratch tmpfs `t` (at
/// `dst`): the upper and work directories, the lower ones, opened.
#[allow(clippy::type_complexity)]
fn attach_layers(
    t: &OwnedFd,
    dst: &Path,
    (upper, lower): GivenLayers,
) -> Result<(Option<(OwnedFd, OwnedFd)>, Vec<OwnedFd>), JailError> {
    let attach = |name: &str, tree: &OwnedFd| -> Result<OwnedFd, JailError> {
        let name = OsStr::new(name);
        at::mkdir(t, name, 0o700, dst).step("overlay", dst)?;
        at::move_mount(tree, t, name, dst).step("overlay", dst)?;
        at::open_dir(t, name, dst).step("overlay", dst)
    };
    let upper = match upper {
        Some((tree, u, w)) => {
            let c = attach("c", tree)?;
            let open = |rel: &Path| sys::open_path_beneath(&c, rel).step("overlay", dst);
            Some((open(u)?, open(w)?))
        }
        None => None,
    };
    let lower = lower
        .iter()
        .enumerate()
        .map(|(i, tree)| attach(&format!("l{i}"), tree))
        .collect::<Result<_, _>>()?;
    Ok((upper, lower))
}
