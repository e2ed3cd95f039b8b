//! An overlayfs as a root step, whoever asks for it: bwrap's overlays
//! (`MountSpec::Overlay`: several lower layers, written to host
//! directories, to a tmpfs of its own, or not at all) and the policy's
//! workspaces (`MountSpec::Workspace`, see `workspace`: one lower layer,
//! written to a tmpfs or to a kept layer) are the same [`RootStep::Overlay`],
//! which the jail mounts one way (`jail::rootfs::overlay`).

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use super::{rel, Access, RootStep, Sources};
use crate::plan::{step, SetupError};
use crate::sys;

/// Where an overlay's writes go: its upper layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writes {
    /// Host directories (canonical): the upper layer and overlayfs's work
    /// directory beside it, on one filesystem (bwrap's `--overlay`; a
    /// workspace kept with `--overlay-upper`).
    Dirs { upper: PathBuf, work: PathBuf },
    /// A tmpfs of the overlay's own (its mount data), mounted at the
    /// overlay's destination first and hidden beneath it: gone with the
    /// jail (bwrap's `--tmp-overlay`; a workspace's by default).
    Tmpfs(String),
    /// Nowhere: the overlay is read-only (bwrap's `--ro-overlay`).
    ReadOnly,
}

impl Writes {
    /// The upper and work directories, when on the host.
    pub fn dirs(&self) -> Option<(&Path, &Path)> {
        match self {
            Writes::Dirs { upper, work } => Some((upper, work)),
            _ => None,
        }
    }

    /// The tmpfs's mount data, when on a tmpfs of its own.
    pub fn tmpfs(&self) -> Option<&str> {
        match self {
            Writes::Tmpfs(data) => Some(data),
            _ => None,
        }
    }

    /// What Landlock grants beneath the overlay: what a bind of the same
    /// writability would get.
    pub(super) fn access(&self) -> Access {
        match self {
            Writes::ReadOnly => Access::ReadExec,
            _ => Access::ReadWrite,
        }
    }
}

/// The step of an overlay at `dst` of the host directories `lower` (bottom
/// to top), written to host directories (`upper`: upper and work), to a
/// tmpfs of its own (`tmp`), or not at all; each host directory resolved
/// to its canonical path as a bind's source is (a missing one is the
/// step's error: the upper directory's and the lower ones' as
/// [`step::OVERLAY_SOURCE`], the work directory's as
/// [`step::OVERLAY_WORKDIR`]). Its Landlock grant goes to `rules`.
pub(super) fn step(
    dst: &Path,
    lower: &[PathBuf],
    upper: Option<&(PathBuf, PathBuf)>,
    tmp: bool,
    sources: &mut Sources,
    rules: &mut Vec<(PathBuf, Access)>,
) -> Result<RootStep, SetupError> {
    let mut resolve = |p: &Path, step: &str| {
        sources.canonicalize(p).map_err(|e| {
            let errno = sys::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
            SetupError::from_errno(step, p.display().to_string(), errno)
        })
    };
    let writes = match (upper, tmp) {
        (Some((u, w)), _) => Writes::Dirs {
            upper: resolve(u, step::OVERLAY_SOURCE)?,
            work: resolve(w, step::OVERLAY_WORKDIR)?,
        },
        (None, true) => Writes::Tmpfs("mode=755".into()),
        (None, false) => Writes::ReadOnly,
    };
    let lower = lower
        .iter()
        .map(|l| resolve(l, step::OVERLAY_SOURCE))
        .collect::<Result<_, _>>()?;
    rules.push((dst.to_path_buf(), writes.access()));
    Ok(RootStep::Overlay {
        dst: rel(dst),
        lower,
        writes,
        workspace: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bwraps_overlays_are_one_step_with_their_writes() {
        let d = std::env::temp_dir().join(format!("overlay-step-unit-{}", std::process::id()));
        for sub in ["l", "u", "w"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(d.join("l"), d.join("link")).ok();
        let d = std::fs::canonicalize(d).unwrap();
        let dst = Path::new("/o");
        let step_of = |upper: Option<&(PathBuf, PathBuf)>, tmp: bool| {
            let mut rules = Vec::new();
            let lower = [d.join("link"), d.join("u")];
            let s = step(dst, &lower, upper, tmp, &mut Sources::default(), &mut rules);
            (s, rules)
        };
        let dirs = (d.join("u"), d.join("w"));
        let (s, rules) = step_of(Some(&dirs), false);
        let Ok(RootStep::Overlay {
            dst,
            lower,
            writes,
            workspace: None,
        }) = s
        else {
            panic!("{s:?}")
        };
        assert_eq!(dst, Path::new("o"));
        // Canonical, bottom to top as given.
        assert_eq!(lower, [d.join("l"), d.join("u")]);
        assert_eq!(
            writes.dirs(),
            Some((d.join("u").as_path(), d.join("w").as_path()))
        );
        assert_eq!(rules, [(PathBuf::from("/o"), Access::ReadWrite)]);
        let (s, rules) = step_of(None, true);
        assert!(matches!(
            s,
            Ok(RootStep::Overlay {
                writes: Writes::Tmpfs(_),
                ..
            })
        ));
        assert_eq!(rules, [(PathBuf::from("/o"), Access::ReadWrite)]);
        let (s, rules) = step_of(None, false);
        assert!(matches!(
            s,
            Ok(RootStep::Overlay {
                writes: Writes::ReadOnly,
                ..
            })
        ));
        assert_eq!(rules, [(PathBuf::from("/o"), Access::ReadExec)]);
        // A missing directory is the step's error, the work one's its own.
        let gone = (d.join("u"), d.join("nonexistent"));
        let e = step_of(Some(&gone), false).0.unwrap_err();
        assert_eq!(
            (e.step(), e.path()),
            (step::OVERLAY_WORKDIR, gone.1.to_str().unwrap())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
