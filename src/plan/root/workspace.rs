//! The overlays (`MountSpec::Workspace`, `--overlay HOST_DIR:INNER`) as
//! root steps, one case of `overlay`'s: an overlayfs at INNER whose only
//! lower layer is HOST_DIR, its upper and work directories on a tmpfs of
//! its own mounted there first (charged to the run's memory, the size of
//! the workdir's unless the policy says), or in the caller's
//! `--overlay-upper DIR`; and what the supervisor needs after the run to
//! list and commit the changes.

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use super::{tmpfs_data, Access, RootStep, Writes};
use crate::plan::SetupError;
use crate::policy::{MountSpec, Policy};

/// One overlay, as the supervisor finds its layers after the run.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Where the jail saw it (absolute).
    pub inner: PathBuf,
    /// The host directory, canonical: the lower layer, and where the
    /// changes are committed.
    pub host: PathBuf,
    pub upper: Upper,
}

/// Where an overlay's upper layer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upper {
    /// On the overlay's tmpfs in the jail: init hands its fd to the
    /// supervisor as soon as it is mounted (the fd keeps the tmpfs after
    /// the jail's mount namespace is gone).
    Handed,
    /// In the caller's directory (`--overlay-upper`): `layer` holds
    /// `upper` and `work`, and outlives the run.
    Kept { layer: PathBuf },
}

/// The overlays of a plan and what becomes of their changes.
#[derive(Debug, Clone, Default)]
pub struct Workspaces {
    pub list: Vec<Workspace>,
    /// The policy's word on them (commit, diff, caps, where kept).
    pub policy: crate::policy::Workspaces,
}

/// The root step of the `index`th overlay `src:dst` (`src` canonical) and
/// its Landlock grant: what a writable bind of `src` would get.
pub(super) fn step(
    p: &Policy,
    index: usize,
    src: PathBuf,
    dst: &Path,
    rules: &mut Vec<(PathBuf, Access)>,
) -> RootStep {
    rules.push((dst.to_path_buf(), Access::ReadWrite));
    let writes = match &p.workspace.keep {
        Some(k) => {
            let layer = k.join(index.to_string());
            Writes::Dirs {
                upper: layer.join("upper"),
                work: layer.join("work"),
            }
        }
        None => Writes::Tmpfs(tmpfs_data(size(p), 0o755)),
    };
    RootStep::Overlay {
        dst: super::rel(dst),
        lower: vec![src],
        writes,
        workspace: Some(index),
    }
}

/// The size of an overlay's tmpfs: the policy's, else the workdir's.
fn size(p: &Policy) -> u64 {
    match p.workspace.size {
        0 => p.workdir.size,
        n => n,
    }
}

/// The plan's overlays, from its steps (sources canonical).
pub(super) fn of(p: &Policy, steps: &[RootStep]) -> Workspaces {
    let list = steps
        .iter()
        .filter_map(|s| match s {
            RootStep::Overlay {
                dst,
                lower,
                workspace: Some(i),
                ..
            } => Some(Workspace {
                inner: Path::new("/").join(dst),
                host: lower.first()?.clone(),
                upper: match &p.workspace.keep {
                    Some(k) => Upper::Kept {
                        layer: k.join(i.to_string()),
                    },
                    None => Upper::Handed,
                },
            }),
            _ => None,
        })
        .collect();
    Workspaces {
        list,
        policy: p.workspace.clone(),
    }
}

/// Without namespaces there is no overlayfs of the jail's own: refused,
/// never a writable bind in its place.
pub(in crate::plan) fn refuse_in_fallback(p: &Policy) -> Result<(), SetupError> {
    let Some(MountSpec::Workspace { src, dst }) = p
        .mounts
        .iter()
        .find(|m| matches!(m, MountSpec::Workspace { .. }))
    else {
        return Ok(());
    };
    Err(SetupError::new(
        "--overlay",
        format!("{}:{}", src.display(), dst.display()),
        "overlayfs needs the jail's own user and mount namespaces, and user namespaces are refused here; \
         stockade refuses the run rather than bind the directory writable",
    ))
}
