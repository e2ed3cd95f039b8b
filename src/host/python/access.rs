//! Whether a uid can reach, read or run the interpreter's files, and why
//! not: the jail runs as an unprivileged host uid, so this is said before
//! the run rather than found inside it.

use std::path::{Path, PathBuf};

use crate::policy::python::{mounts, Interpreter, SYSTEM};

/// Can a process with `uid`/`gid` search (x) or read (r) what `m` is?
fn allowed(m: &std::fs::Metadata, uid: u32, gid: u32, bit: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return true;
    }
    let mode = m.mode();
    if m.uid() == uid {
        mode & (bit << 6) != 0
    } else if m.gid() == gid {
        mode & (bit << 3) != 0
    } else {
        mode & bit != 0
    }
}

/// Why uid/gid cannot list and enter the directory (or read the file) `p`
/// itself, if it cannot. Bind sources are opened by the caller before the
/// jail's user switch, so only the bound object's own mode matters inside.
pub fn not_readable_by(p: &Path, uid: u32, gid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    let want = if m.is_dir() { 0o5 } else { 0o4 };
    (!allowed(&m, uid, gid, want)).then(|| {
        format!(
            "{} (mode {:04o}, owner uid {}) is not readable by uid {uid}",
            p.display(),
            m.mode() & 0o7777,
            m.uid()
        )
    })
}

/// A file or directory on the way to the interpreter that a uid cannot
/// get through.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Denied {
    /// The interpreter file (after symlinks) being reached.
    target: PathBuf,
    /// What is in the way: `target` or a directory above it.
    at: PathBuf,
    /// What stops it, and why (`… (mode 0700, owner uid 0) is not …`).
    why: String,
    uid: u32,
}

impl Denied {
    /// One sentence: why, and what must hold. `venv`: the venv directory
    /// the interpreter was asked through, when it is one (else looked up).
    pub(super) fn explain(&self, asked: &Path, venv: Option<&Path>) -> String {
        let found = venv_of(asked);
        let venv = venv.or(found.as_deref());
        let what = match venv {
            Some(v) if !self.target.starts_with(v) => "the base interpreter of the venv",
            _ => "the interpreter",
        };
        let which = if self.at == self.target {
            String::new()
        } else {
            format!(" ({})", self.target.display())
        };
        format!(
            "{}; {what}{which} must be readable by the jail's user (uid {})",
            self.why, self.uid
        )
    }
}

/// The venv `exe` belongs to: the directory of the `pyvenv.cfg` next to it
/// or one level up (where Python itself looks).
fn venv_of(exe: &Path) -> Option<PathBuf> {
    let bin = exe.parent()?;
    [Some(bin), bin.parent()]
        .into_iter()
        .flatten()
        .find(|d| d.join("pyvenv.cfg").is_file())
        .map(Path::to_path_buf)
}

/// Why `uid`/`gid` cannot execute `exe`, following its symlinks, if it
/// cannot: a directory on the way that is not searchable, or the file
/// itself not executable. `from(p)` is the first directory on the way to
/// `p` whose mode matters (in the jail: the top of the bind holding `p`).
pub(super) fn exec_denied(
    exe: &Path,
    uid: u32,
    gid: u32,
    from: &dyn Fn(&Path) -> PathBuf,
) -> Option<Denied> {
    use std::os::unix::fs::MetadataExt;
    let mut p = exe.to_path_buf();
    for _ in 0..40 {
        let parent = p.parent()?.to_path_buf();
        let top = from(&p);
        let mut dirs: Vec<&Path> = parent.ancestors().filter(|d| d.starts_with(&top)).collect();
        dirs.reverse();
        for d in dirs {
            let m = std::fs::metadata(d).ok()?;
            if !allowed(&m, uid, gid, 0o1) {
                return Some(Denied {
                    target: p.clone(),
                    at: d.to_path_buf(),
                    why: format!(
                        "{} (mode {:04o}, owner uid {}) is not searchable by uid {uid}",
                        d.display(),
                        m.mode() & 0o7777,
                        m.uid()
                    ),
                    uid,
                });
            }
        }
        let lm = std::fs::symlink_metadata(&p).ok()?;
        if lm.file_type().is_symlink() {
            let t = std::fs::read_link(&p).ok()?;
            let next = if t.is_absolute() { t } else { parent.join(t) };
            // Resolve `..` against the real directories, as the kernel does.
            let dir = std::fs::canonicalize(next.parent()?).ok()?;
            p = dir.join(next.file_name()?);
            continue;
        }
        if !allowed(&lm, uid, gid, 0o1) {
            return Some(Denied {
                target: p.clone(),
                at: p.clone(),
                why: format!(
                    "{} (mode {:04o}, owner uid {}) is not executable by uid {uid}",
                    p.display(),
                    lm.mode() & 0o7777,
                    lm.uid()
                ),
                uid,
            });
        }
        return None;
    }
    None
}

/// Why the jail's user (host `uid`/`gid`) could not start the interpreter
/// from the binds [`mounts`] gives, if it could not: one line naming the
/// file or directory in the way. Binds are opened by the caller, so only
/// modes from the top of each bind down matter.
pub fn jail_cannot_run(i: &Interpreter, system_root: bool, uid: u32, gid: u32) -> Option<String> {
    let mut tops: Vec<PathBuf> = mounts(i, system_root)
        .iter()
        .map(|m| m.dst().to_path_buf())
        .collect();
    if system_root {
        tops.extend(SYSTEM.iter().map(PathBuf::from));
    }
    let from = |p: &Path| {
        tops.iter()
            .filter(|t| p.starts_with(t))
            .max_by_key(|t| t.components().count())
            .cloned()
            .unwrap_or_else(|| PathBuf::from("/"))
    };
    // `python3` in the jail is found in the executable's directory.
    let exe = i.bin_dir().join("python3");
    let exe = if exe.exists() {
        exe
    } else {
        i.executable.clone()
    };
    let d = exec_denied(&exe, uid, gid, &from)?;
    let venv = i.is_venv().then_some(i.prefix.as_path());
    Some(format!(
        "{}: the jail (host uid {uid}) cannot run the interpreter: {}",
        i.executable.display(),
        d.explain(&i.executable, venv)
    ))
}
