//! Copy-on-write views of host directories (`--overlay HOST_DIR:INNER`,
//! [`super::MountSpec::Workspace`]): the jail may change anything it sees
//! at INNER, the changes go to an upper layer of the run's own, and the
//! host directory is never written while the jail runs. What the policy
//! says of them all: where the upper layers live, whether the changes are
//! committed to the host after the run, where their diff goes, and how
//! many are listed.

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use super::{MountSpec, Policy, PolicyError};

/// The most overlays one run may have (their upper layers go to the
/// supervisor in one message).
pub const MAX_OVERLAYS: usize = 16;

/// The default cap on the changes an outcome lists.
pub const DEFAULT_MAX_CHANGES: u64 = 10_000;

/// The default cap on one changed file's size: larger ones are listed
/// without a hash and refused at commit (a sparse file costs the jail
/// nothing and could fill the host).
pub const DEFAULT_MAX_FILE: u64 = 1 << 30;

/// When the changes are applied to the host directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Commit {
    /// Never by the run (the upper layer is discarded, or kept with
    /// [`Workspaces::keep`] for `stockade overlay commit`).
    #[default]
    Never,
    /// After the payload exited with 0 (`--commit`).
    Success,
    /// After the payload ended, however it ended (`--commit always`); not
    /// after a setup error (nothing ran).
    Always,
}

/// What a policy says of its overlays (the [`MountSpec::Workspace`]
/// entries of its mounts).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Workspaces {
    /// A host directory of the caller's (missing or empty; absolute, no
    /// symlink on its path) that holds the
    /// upper layers (`--overlay-upper DIR`): the Nth overlay's in `DIR/N`,
    /// with `DIR/stockade-overlay.json` saying which host directory each
    /// belongs to; kept after the run for `stockade overlay commit` or
    /// `discard`. None: each upper layer is on a tmpfs of the jail's own,
    /// charged to the run's memory, gone with the run.
    #[serde(default)]
    pub keep: Option<PathBuf>,
    /// The size cap of each overlay's tmpfs (0: the workdir's size).
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub commit: Commit,
    /// A host file the changes' unified diff (git's format) is written to
    /// (`--changes-diff FILE`).
    #[serde(default)]
    pub diff: Option<PathBuf>,
    /// The most changes the outcome lists (0: [`DEFAULT_MAX_CHANGES`]).
    #[serde(default)]
    pub max_changes: u64,
    /// The largest changed file hashed, diffed and committed (0:
    /// [`DEFAULT_MAX_FILE`]).
    #[serde(default)]
    pub max_file: u64,
    /// The kept layers in [`Workspaces::keep`] exist already, with their
    /// record, and are used as they are: a session's jail started again
    /// on its layers (after a rollback or a commit).
    #[serde(default)]
    pub resume: bool,
}

impl Workspaces {
    pub fn max_changes(&self) -> u64 {
        match self.max_changes {
            0 => DEFAULT_MAX_CHANGES,
            n => n,
        }
    }

    pub fn max_file(&self) -> u64 {
        match self.max_file {
            0 => DEFAULT_MAX_FILE,
            n => n,
        }
    }
}

/// The overlays of `p`, in the order they are mounted: (HOST_DIR, INNER).
pub fn overlays(p: &Policy) -> Vec<(&Path, &Path)> {
    p.mounts
        .iter()
        .filter_map(|m| match m {
            MountSpec::Workspace { src, dst } => Some((src.as_path(), dst.as_path())),
            _ => None,
        })
        .collect()
}

/// The checks that need the whole policy (no I/O).
pub(super) fn check(p: &Policy) -> Result<(), PolicyError> {
    let list = overlays(p);
    let w = &p.workspace;
    if list.is_empty() {
        let asked = [
            ("--overlay-upper", w.keep.is_some()),
            ("--commit", w.commit != Commit::Never),
            ("--changes-diff", w.diff.is_some()),
        ];
        if let Some((flag, _)) = asked.iter().find(|(_, on)| *on) {
            return Err(PolicyError::new(*flag, "needs an --overlay HOST_DIR:INNER"));
        }
        return Ok(());
    }
    if list.len() > MAX_OVERLAYS {
        return Err(PolicyError::new(
            "--overlay",
            format!("at most {MAX_OVERLAYS} overlays in one run"),
        ));
    }
    if p.base == super::BaseRoot::Bare {
        return Err(PolicyError::new(
            "--overlay",
            "not on a bare root (stockade bwrap's); use bwrap's own --overlay options",
        ));
    }
    for (i, (host, inner)) in list.iter().enumerate() {
        if inner == &Path::new("/") {
            return Err(PolicyError::new(
                "--overlay",
                format!("{}:/: not over the jail's whole root", host.display()),
            ));
        }
        if let Some((_, other)) = list[..i].iter().find(|(_, o)| o == inner) {
            return Err(PolicyError::new(
                "--overlay",
                format!("{} is given twice", other.display()),
            ));
        }
        if let Some(k) = &w.keep {
            if k.starts_with(host) || host.starts_with(k) {
                return Err(PolicyError::new(
                    "--overlay-upper",
                    format!(
                        "{}: overlaps the overlay's host directory {} (overlayfs refuses layers inside each other)",
                        k.display(),
                        host.display()
                    ),
                ));
            }
        }
    }
    if w.resume && w.keep.is_none() {
        return Err(PolicyError::new(
            "workspace.resume",
            "needs the kept layers' directory (--overlay-upper)",
        ));
    }
    if w.keep.is_some() && w.size != 0 {
        return Err(PolicyError::new(
            "workspace.size",
            "sizes the tmpfs of upper layers, and --overlay-upper puts them on the host",
        ));
    }
    Ok(())
}

/// `--overlay HOST_DIR:INNER`: HOST_DIR an existing directory (relative
/// to the current directory), INNER an absolute jail path.
pub fn parse_overlay(v: &str) -> Result<MountSpec, PolicyError> {
    const FLAG: &str = "--overlay";
    let Some((host, inner)) = v.split_once(':') else {
        return Err(PolicyError::new(
            FLAG,
            format!("{v}: expected HOST_DIR:INNER (INNER absolute, inside the jail)"),
        ));
    };
    if host.is_empty() {
        return Err(PolicyError::new(FLAG, format!("{v}: empty HOST_DIR")));
    }
    let src = super::host_path(FLAG, Path::new(host))?;
    super::host_exists(&src, true).map_err(|e| PolicyError::value(FLAG, e))?;
    let dst = super::jail_path(FLAG, Path::new(inner))?;
    Ok(MountSpec::Workspace { src, dst })
}

/// `--overlay-upper DIR`: a directory that is missing (its parent must
/// exist) or empty; canonical (its parent's symlinks resolved).
pub fn parse_upper(v: &Path) -> Result<PathBuf, PolicyError> {
    const FLAG: &str = "--overlay-upper";
    let dir = super::host_path(FLAG, v)?;
    let dir = match (std::fs::canonicalize(&dir), dir.parent(), dir.file_name()) {
        (Ok(c), _, _) => c,
        (Err(_), Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(dir.clone()),
        _ => dir,
    };
    match std::fs::read_dir(&dir) {
        Ok(mut rd) => {
            if rd.next().is_some() {
                return Err(PolicyError::new(
                    FLAG,
                    format!(
                        "{}: not empty (a kept upper layer? `stockade overlay commit` or `discard` it first)",
                        dir.display()
                    ),
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = dir.parent().unwrap_or(Path::new("/"));
            super::host_exists(parent, true).map_err(|e| PolicyError::value(FLAG, e))?;
        }
        Err(_) => super::host_exists(&dir, true).map_err(|e| PolicyError::value(FLAG, e))?,
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(mounts: Vec<MountSpec>, w: Workspaces) -> Policy {
        let mut p = Policy::with_defaults(vec!["true".into()]);
        p.mounts = mounts;
        p.workspace = w;
        p
    }

    fn ws(src: &str, dst: &str) -> MountSpec {
        MountSpec::Workspace {
            src: PathBuf::from(src),
            dst: PathBuf::from(dst),
        }
    }

    #[test]
    fn flags_that_need_an_overlay_say_so() {
        let w = Workspaces {
            commit: Commit::Success,
            ..Default::default()
        };
        let e = check(&with(vec![], w)).unwrap_err();
        assert_eq!(e.to_string(), "--commit: needs an --overlay HOST_DIR:INNER");
        assert!(check(&with(vec![ws("/a", "/w/a")], Workspaces::default())).is_ok());
    }

    #[test]
    fn overlapping_or_doubled_overlays_are_refused() {
        let two = vec![ws("/a", "/w/a"), ws("/b", "/w/a")];
        let e = check(&with(two, Workspaces::default())).unwrap_err();
        assert_eq!(e.to_string(), "--overlay: /w/a is given twice");
        let w = Workspaces {
            keep: Some(PathBuf::from("/a/keep")),
            ..Default::default()
        };
        let e = check(&with(vec![ws("/a", "/w/a")], w)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--overlay-upper: /a/keep: overlaps"),
            "{e}"
        );
        let e = check(&with(vec![ws("/a", "/")], Workspaces::default())).unwrap_err();
        assert!(e.to_string().contains("whole root"), "{e}");
    }

    #[test]
    fn overlay_values_are_host_dir_colon_inner() {
        for (v, want) in [
            (
                "/nonexistent-x:/w",
                "--overlay: /nonexistent-x: no such directory",
            ),
            (
                "/tmp",
                "--overlay: /tmp: expected HOST_DIR:INNER (INNER absolute, inside the jail)",
            ),
            (":/w", "--overlay: :/w: empty HOST_DIR"),
            (
                "/tmp:w",
                "--overlay: w: path inside the jail must be absolute",
            ),
            (
                "/tmp:/w/../y",
                "--overlay: /w/../y: `..` is not allowed in a jail path",
            ),
        ] {
            assert_eq!(parse_overlay(v).unwrap_err().to_string(), want, "{v}");
        }
        assert_eq!(parse_overlay("/tmp:/w/t").unwrap(), ws("/tmp", "/w/t"));
    }
}
