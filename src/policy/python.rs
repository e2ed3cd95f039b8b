//! Python interpreter discovery for the `python` profile.
//!
//! The interpreter is asked about itself: it is run once, outside the jail,
//! as the caller, in isolated mode (`-I`), and prints its real executable
//! (which resolves pyenv shims and other wrapper scripts), its prefixes,
//! sys.path, the targets of editable installs and every file it has mapped.
//! The jail then binds exactly those paths read-only.
//!
//! Two things keep this cheap on every run after the first: a pyenv shim is
//! resolved by reading pyenv's files rather than by running its bash
//! ([`pyenv`]), and the interpreter's answer is kept in a per-user cache
//! that is used only while nothing it depends on has changed ([`cache`]).

#![deny(unsafe_code)]

mod access;
mod cache;
mod pyenv;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{MountSpec, PathError};
use access::exec_denied;
pub use access::{jail_cannot_run, not_readable_by, unreachable_by};

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

/// Printed by the interpreter as one JSON line. `watch`: every path whose
/// state the answer depends on (sys.path entries, present or not, site
/// directories, the .pth and finder files read, the directories .pth lines
/// name, sitecustomize).
const PROBE: &str = r##"
import sys, os, json, glob, ast
out = {"executable": sys.executable, "version": sys.version.split()[0],
       "prefix": sys.prefix, "base_prefix": sys.base_prefix,
       "exec_prefix": sys.exec_prefix, "base_exec_prefix": sys.base_exec_prefix,
       "path": [p for p in sys.path if p and os.path.exists(p)],
       "editable": [], "libs": [], "watch": [p for p in sys.path if p]}
watch = out["watch"]
dirs = [p for p in sys.path if p and os.path.isdir(p)]
try:
    import site
    watch += site.getsitepackages()
    dirs += [d for d in site.getsitepackages() if os.path.isdir(d) and d not in dirs]
except Exception:
    pass
m = sys.modules.get("sitecustomize")
if m is not None and getattr(m, "__file__", None):
    watch.append(m.__file__)
for d in dirs:
    for f in sorted(glob.glob(os.path.join(d, "__editable___*_finder.py"))):
        watch.append(f)
        try:
            tree = ast.parse(open(f, encoding="utf-8").read())
        except Exception:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MAPPING" for t in node.targets):
                try:
                    m = ast.literal_eval(node.value)
                except Exception:
                    continue
                out["editable"] += [str(v) for v in m.values()]
    for f in sorted(glob.glob(os.path.join(d, "*.pth"))):
        watch.append(f)
        try:
            lines = open(f, encoding="utf-8", errors="replace").read().splitlines()
        except Exception:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            p = os.path.abspath(os.path.join(d, line))
            watch.append(p)
            if os.path.isdir(p):
                out["editable"].append(p)
try:
    for line in open("/proc/self/maps"):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
            out["libs"].append(os.path.dirname(parts[5].strip()))
except Exception:
    pass
print(json.dumps(out))
"##;

#[derive(serde::Deserialize)]
struct Probe {
    executable: String,
    version: String,
    prefix: String,
    base_prefix: String,
    exec_prefix: String,
    base_exec_prefix: String,
    path: Vec<String>,
    editable: Vec<String>,
    libs: Vec<String>,
    #[serde(default)]
    watch: Vec<String>,
}

/// Find `name` on the caller's PATH (a name with a `/` is used as is).
fn which(name: &Path) -> Result<PathBuf, PythonError> {
    if name.as_os_str().is_empty() {
        return Err(PythonError::EmptyPath);
    }
    if name.to_string_lossy().contains('/') {
        return Ok(super::check_host_path(name)?);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for d in std::env::split_paths(&path) {
        let c = d.join(name);
        if let Ok(m) = std::fs::metadata(&c) {
            if m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            {
                return Ok(c);
            }
        }
    }
    Err(PythonError::NotOnPath {
        name: name.to_path_buf(),
        search: path.to_string_lossy().into_owned(),
    })
}

/// Find the interpreter `name` names and learn what it needs: from the
/// cache when nothing it depends on changed, else by asking it.
pub fn discover(name: &Path) -> Result<Interpreter, PythonError> {
    let asked = which(name)?;
    // A pyenv shim: the interpreter it would run, found without running it.
    let run = pyenv::resolve(&asked).unwrap_or_else(|| asked.clone());
    // Only a real interpreter's answer is kept: a wrapper script's choice
    // can depend on anything (its environment, the working directory).
    let cacheable = is_elf(&run);
    if cacheable {
        if let Some(mut i) = cache::load(&run) {
            i.asked = asked;
            return Ok(i);
        }
    }
    let started = std::time::SystemTime::now();
    let (i, watch) = probe(&asked, &run)?;
    if cacheable && i.executable == run {
        cache::store(&run, &i, watch, started);
    }
    Ok(i)
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// Run `run` (found as `asked`) once and ask it about itself; also the
/// paths its answer depends on.
fn probe(asked: &Path, run: &Path) -> Result<(Interpreter, Vec<PathBuf>), PythonError> {
    let out = run_probe(asked, run)?;
    let p = read_answer(asked, &out)?;
    let abs = |v: Vec<String>| -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for s in v {
            let pb = PathBuf::from(s);
            if pb.is_absolute() && !out.contains(&pb) {
                out.push(pb);
            }
        }
        out
    };
    let i = Interpreter {
        asked: asked.to_path_buf(),
        executable: p.executable.into(),
        version: p.version,
        prefix: p.prefix.into(),
        base_prefix: p.base_prefix.into(),
        exec_prefix: p.exec_prefix.into(),
        base_exec_prefix: p.base_exec_prefix.into(),
        path: abs(p.path),
        editable: abs(p.editable),
        libs: abs(p.libs),
    };
    Ok((i, abs(p.watch)))
}

/// Run the probe; a failure to start it, said for the path asked.
fn run_probe(asked: &Path, run: &Path) -> Result<std::process::Output, PythonError> {
    Command::new(run)
        .args(["-I", "-c", PROBE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            let asked = asked.to_path_buf();
            match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    let me = (crate::sys::geteuid(), crate::sys::getegid());
                    let why = exec_denied(run, me.0, me.1, &|_| PathBuf::from("/"))
                        .map(|d| d.explain(&asked, None));
                    PythonError::PermissionDenied { asked, why }
                }
                std::io::ErrorKind::NotFound => PythonError::NoSuchFile { asked },
                _ => PythonError::CannotRun {
                    asked,
                    why: e.to_string(),
                },
            }
        })
}

/// The probe's answer: it succeeded, printed its JSON line, and knows its
/// own absolute path.
fn read_answer(asked: &Path, out: &std::process::Output) -> Result<Probe, PythonError> {
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(PythonError::ProbeFailed {
            asked: asked.to_path_buf(),
            status: out.status.to_string(),
            last_stderr: last.trim().to_string(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let p: Probe = serde_json::from_str(line).map_err(|_| PythonError::NotPython {
        asked: asked.to_path_buf(),
    })?;
    if p.executable.is_empty() || !p.executable.starts_with('/') {
        return Err(PythonError::NoExecutable {
            asked: asked.to_path_buf(),
            executable: p.executable,
        });
    }
    Ok(p)
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
const SYSTEM: &[&str] = &[
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
