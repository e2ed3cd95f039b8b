//! The Python interpreter of the `python` profile, as values: what it said
//! about itself ([`Interpreter`]), why it could not be found or asked
//! ([`PythonError`]), and the read-only binds it needs ([`mounts`]).
//! Finding it is the caller's ([`Discover`]: the host's discovery, which
//! runs it, reads pyenv and keeps a cache, lives above this layer).

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use super::{MountSpec, PathError};

/// Why the interpreter could not be found, run, or understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PythonError {
    #[error("empty interpreter path")]
    EmptyPath,
    #[error("{0}")]
    Path(#[from] PathError),
    /// A bare name not found on the caller's `PATH` (`search`).
    #[error("{}: not found on PATH ({search}); give one with --python PATH", .name.display())]
    NotOnPath { name: PathBuf, search: String },
    /// Not executable by the caller; `why` names what is in the way, when
    /// that is known.
    #[error("{}: permission denied{}", .asked.display(), .why.as_deref().map(|w| format!(": {w}")).unwrap_or_default())]
    PermissionDenied { asked: PathBuf, why: Option<String> },
    #[error("{}: no such file", .asked.display())]
    NoSuchFile { asked: PathBuf },
    #[error("{}: cannot run: {why}", .asked.display())]
    CannotRun { asked: PathBuf, why: String },
    /// It ran and failed: its exit `status` and the last line of its stderr.
    #[error("{}: the interpreter failed when asked about itself ({status}){}", .asked.display(), if .last_stderr.is_empty() { String::new() } else { format!(": {}", .last_stderr) })]
    ProbeFailed {
        asked: PathBuf,
        status: String,
        last_stderr: String,
    },
    #[error("{}: is not a Python 3 interpreter (it did not answer the probe)", .asked.display())]
    NotPython { asked: PathBuf },
    #[error("{}: the interpreter does not know its own path (sys.executable = {executable:?})", .asked.display())]
    NoExecutable { asked: PathBuf, executable: String },
}

/// How an interpreter is found: from the name or path asked, what it said
/// about itself. Profiles are resolved with one
/// ([`profile::resolve`](super::profile::resolve)), so that finding it is
/// the caller's part.
pub type Discover = dyn Fn(&Path) -> Result<Interpreter, PythonError>;

/// What the interpreter said about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interpreter {
    /// The path that was asked (`--python`, or found on PATH).
    pub asked: PathBuf,
    /// `sys.executable`: the real interpreter, wrappers resolved.
    pub executable: PathBuf,
    pub version: String,
    pub prefix: PathBuf,
    pub base_prefix: PathBuf,
    pub exec_prefix: PathBuf,
    pub base_exec_prefix: PathBuf,
    /// Existing `sys.path` directories and zip files.
    pub path: Vec<PathBuf>,
    /// Targets of editable installs (`__editable___*_finder` MAPPING values
    /// and directories named by `.pth` files).
    pub editable: Vec<PathBuf>,
    /// Directories of the shared objects the interpreter mapped at start.
    pub libs: Vec<PathBuf>,
}

impl Interpreter {
    pub fn is_venv(&self) -> bool {
        self.prefix != self.base_prefix
    }

    /// The directory `python3` is found in inside the jail.
    pub fn bin_dir(&self) -> PathBuf {
        self.executable
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "/usr/bin".into())
    }
}

/// `p` and each path its symlinks lead to, the last one not a symlink
/// (relative targets resolved against the real directory of the link).
fn symlink_hops(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut cur = p.to_path_buf();
    for _ in 0..40 {
        let Ok(t) = std::fs::read_link(&cur) else {
            break;
        };
        let Some(next) = cur.parent().map(|d| d.join(&t)) else {
            break;
        };
        let Some(dir) = next.parent().and_then(|d| std::fs::canonicalize(d).ok()) else {
            break;
        };
        let Some(name) = next.file_name() else {
            break;
        };
        cur = dir.join(name);
        out.push(cur.clone());
    }
    out
}

/// Directories the system root already binds at the same path.
pub(crate) const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// Read-only binds for the interpreter: prefix and base prefix (the venv and
/// the installation it was made from), the directory of the executable,
/// every sys.path entry, editable-install targets and shared-object
/// directories — each once, and none already inside another (or inside the
/// system root when `system_root`).
pub fn mounts(i: &Interpreter, system_root: bool) -> Vec<MountSpec> {
    let mut want: Vec<PathBuf> = Vec::new();
    let exe_dir = i.bin_dir();
    let mut cands: Vec<&Path> = vec![
        &i.prefix,
        &i.base_prefix,
        &i.exec_prefix,
        &i.base_exec_prefix,
        &exe_dir,
    ];
    cands.extend(i.path.iter().map(PathBuf::as_path));
    cands.extend(i.editable.iter().map(PathBuf::as_path));
    cands.extend(i.libs.iter().map(PathBuf::as_path));
    // Every directory the executable's symlinks pass through, up to the
    // real binary (a venv's python3 links to its base interpreter, which
    // may itself be a link elsewhere): without one of them the jail's
    // `python3` would dangle, and PATH would find another.
    let hop_dirs: Vec<PathBuf> = [i.executable.clone(), exe_dir.join("python3")]
        .iter()
        .flat_map(|e| symlink_hops(e))
        .filter_map(|h| h.parent().map(Path::to_path_buf))
        .collect();
    cands.extend(hop_dirs.iter().map(PathBuf::as_path));
    for c in cands {
        if !c.is_absolute() || !c.exists() {
            continue;
        }
        // Bind at the path the interpreter uses, and also where it really
        // is when that differs (symlinked prefixes).
        for p in [Some(c.to_path_buf()), std::fs::canonicalize(c).ok()]
            .into_iter()
            .flatten()
        {
            if system_root && SYSTEM.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            if !want.contains(&p) {
                want.push(p);
            }
        }
    }
    // Drop entries inside another entry.
    let all = want.clone();
    want.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    want.sort();
    want.into_iter()
        .map(|p| MountSpec::Bind {
            src: p.clone(),
            dst: p,
            writable: false,
            optional: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interp(prefix: &str, base: &str) -> Interpreter {
        Interpreter {
            asked: "/x/python3".into(),
            executable: format!("{prefix}/bin/python3").into(),
            version: "3.12.1".into(),
            prefix: prefix.into(),
            base_prefix: base.into(),
            exec_prefix: prefix.into(),
            base_exec_prefix: base.into(),
            path: vec![],
            editable: vec![],
            libs: vec![],
        }
    }

    #[test]
    fn system_python_needs_no_extra_binds() {
        let i = interp("/usr", "/usr");
        assert!(mounts(&i, true).is_empty());
        assert!(!i.is_venv());
    }

    #[test]
    fn nested_entries_are_bound_once() {
        let d = std::env::temp_dir().join(format!("stockade-py-unit-{}", std::process::id()));
        std::fs::create_dir_all(d.join("venv/lib/site")).unwrap();
        std::fs::create_dir_all(d.join("proj/src/pkg")).unwrap();
        let mut i = interp(d.join("venv").to_str().unwrap(), "/usr");
        i.path = vec![d.join("venv/lib/site")];
        i.editable = vec![d.join("proj/src/pkg")];
        let m: Vec<PathBuf> = mounts(&i, true)
            .iter()
            .map(|m| m.dst().to_path_buf())
            .collect();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(m, vec![d.join("proj/src/pkg"), d.join("venv")]);
    }
}
