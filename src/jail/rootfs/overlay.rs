//! Overlays (bwrap's `--overlay`, `--tmp-overlay`, `--ro-overlay`): the
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
    upper: Option<&(PathBuf, PathBuf)>,
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
/// its upper directory, or to a tmpfs of its own (`tmp`), or read-only;
/// named to overlayfs by their fds, as bwrap does, so no path needs
/// escaping. The tmpfs is mounted on `dst` itself and the overlay over it:
/// out of the payload's sight, and always ours to write. `given`: the
/// layers as the supervisor idmapped them, attached in that tmpfs (beneath
/// the overlay: the kernel takes a layer from our own mount namespace
/// only) and used instead of `src`'s.
pub(super) fn overlay(
    root: &mut Root,
    dst: &Path,
    src: Option<&Source>,
    tmp: bool,
    given: Option<GivenLayers>,
) -> Result<(), JailError> {
    let Some(Source::Overlay { upper, lower }) = src else {
        return Ok(());
    };
    let path = |fd: &OwnedFd| sys::fd_path(fd).to_string_lossy().into_owned();
    let d = root.dir(dst, 0o755).step("overlay", dst)?;
    let mut held = Vec::new();
    let mut scratch = None;
    if tmp || given.is_some() {
        sys::mount_fs_on(
            root.fd_of(&d),
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=755"),
            dst,
        )
        .step("overlay", dst)?;
        root.mounted(dst);
        scratch = Some(sys::open_in_root(&root.fd, dst, libc::O_PATH).step("overlay", dst)?);
    }
    if let (true, Some(t)) = (tmp, &scratch) {
        for name in ["upper", "work"] {
            at::mkdir(t, OsStr::new(name), 0o755, dst).step("overlay", dst)?;
            held.push(at::open_dir(t, OsStr::new(name), dst).step("overlay", dst)?);
        }
    }
    let mut layers = None;
    if let (Some(given), Some(t)) = (given, &scratch) {
        layers = Some(attach_layers(t, dst, given)?);
    }
    let (upper, lower) = match &layers {
        Some((u, l)) => (u.as_ref().map(|(u, w)| (u, w)), l),
        None => (upper.as_ref().map(|(u, w)| (u, w)), lower),
    };
    let mut opts = match (upper, held.as_slice()) {
        (Some((u, w)), _) | (None, [u, w]) => format!("upperdir={},workdir={},", path(u), path(w)),
        _ => String::new(),
    };
    let names: Vec<String> = lower.iter().map(path).collect();
    opts.push_str(&format!("lowerdir={},userxattr", names.join(":")));
    let d = root.dir(dst, 0o755).step("overlay", dst)?;
    sys::mount_fs_on(
        root.fd_of(&d),
        "overlay",
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
        dst,
    )
    .step(step::OVERLAY_MOUNT, dst)
    .map_err(|e| e.with_value(opts))?;
    root.mounted(dst);
    Ok(())
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
