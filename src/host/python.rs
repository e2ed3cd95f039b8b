//! Python interpreter discovery for the `python` profile.
//!
//! The interpreter is asked about itself: it is run once, outside the jail,
//! as the caller, in isolated mode (`-I`), and prints its real executable
//! (which resolves pyenv shims and other wrapper scripts), its prefixes,
//! sys.path, the targets of editable installs and every file it has mapped.
//! The jail then binds exactly those paths read-only
//! ([`policy::python::mounts`](crate::policy::python::mounts)).
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

use crate::policy::python::{Interpreter, PythonError};
use access::exec_denied;
pub use access::{jail_cannot_run, not_readable_by};

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
        return Ok(crate::policy::check_host_path(name)?);
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
