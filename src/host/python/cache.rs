//! What discovery learned, kept between runs.
//!
//! Asking the interpreter about itself costs a Python start-up (15–100 ms).
//! Its answer depends on the interpreter binary, the venv's `pyvenv.cfg`,
//! the dynamic loader's cache and environment, and the directories on
//! `sys.path` with the `.pth` files and editable-install finders in them.
//! The answer is stored with the identity (device, inode, mode, size, mtime,
//! ctime) of every one of those paths — or the fact that it was missing —
//! and used again only while every one is unchanged: `pip install` adds a
//! directory to site-packages (its mtime changes), an editable install adds
//! a `.pth` or finder file, editing pyvenv.cfg changes its identity.
//!
//! The file lives in `$XDG_CACHE_HOME/stockade`, else `~/.cache/stockade`,
//! else (root without HOME) `/var/cache/stockade`; one file per interpreter
//! path, written to a temporary file (mode 0600) and renamed into place. A
//! file or directory not owned by the caller, writable by others, or not
//! parseable is ignored (and rewritten when it can be). Any error here only
//! means discovery runs again.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::policy::python::Interpreter;

/// Bumped when the probe or this format changes.
const FORMAT: u32 = 1;

/// Environment a `python3 -I` start still reads: the loader's, and the
/// locale (how paths are decoded).
const ENV: &[&str] = &[
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LC_ALL",
    "LC_CTYPE",
    "LANG",
];

/// The identity of a path (following symlinks), or `None` when missing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
    ctime: i64,
    ctime_ns: i64,
}

fn stamp(p: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(p).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        mode: m.mode(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_ns: m.mtime_nsec(),
        ctime: m.ctime(),
        ctime_ns: m.ctime_nsec(),
    })
}

/// Everything the cached answer was taken under.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Key {
    format: u32,
    stockade: String,
    /// The interpreter that was run, and where its symlinks lead.
    run: PathBuf,
    real: PathBuf,
    env: Vec<(String, Option<String>)>,
    watch: Vec<(PathBuf, Option<Stamp>)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    key: Key,
    interpreter: Interpreter,
}

/// The paths every entry watches for `run`, before those the probe names:
/// the binary, both places Python looks for `pyvenv.cfg`, the loader cache.
fn fixed_watch(run: &Path) -> Vec<PathBuf> {
    let mut w = vec![run.to_path_buf()];
    if let Some(bin) = run.parent() {
        w.push(bin.join("pyvenv.cfg"));
        if let Some(up) = bin.parent() {
            w.push(up.join("pyvenv.cfg"));
        }
    }
    w.push("/etc/ld.so.cache".into());
    w
}

fn key(run: &Path, watch: Vec<PathBuf>) -> Option<Key> {
    Some(Key {
        format: FORMAT,
        stockade: format!(
            "{} {:016x}",
            env!("CARGO_PKG_VERSION"),
            fnv(super::PROBE.as_bytes())
        ),
        run: run.to_path_buf(),
        real: std::fs::canonicalize(run).ok()?,
        env: ENV
            .iter()
            .map(|k| {
                (
                    k.to_string(),
                    std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect(),
        watch: watch
            .into_iter()
            .map(|p| {
                let s = stamp(&p);
                (p, s)
            })
            .collect(),
    })
}

/// FNV-1a, 64 bits: a stable name for a path.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Where the cache lives for this caller, if anywhere.
pub fn dir() -> Option<PathBuf> {
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(x) = abs(std::env::var_os("XDG_CACHE_HOME")) {
        return Some(x.join("stockade"));
    }
    if let Some(h) = abs(std::env::var_os("HOME")) {
        return Some(h.join(".cache/stockade"));
    }
    (crate::sys::geteuid() == 0).then(|| PathBuf::from("/var/cache/stockade"))
}

fn file_for(dir: &Path, run: &Path) -> PathBuf {
    dir.join(format!(
        "python-{:016x}.json",
        fnv(run.as_os_str().as_bytes())
    ))
}

/// Owned by the caller and writable by nobody else.
fn private(m: &std::fs::Metadata) -> bool {
    m.uid() == crate::sys::geteuid() && m.mode() & 0o022 == 0
}

/// The stored answer for `run`, if it was taken under exactly what holds now.
pub fn load(run: &Path) -> Option<Interpreter> {
    let dir = dir()?;
    if !private(&std::fs::symlink_metadata(&dir).ok()?) {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(file_for(&dir, run))
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || !private(&m) || m.len() > 4 << 20 {
        return None;
    }
    let mut text = Vec::with_capacity(m.len() as usize);
    f.read_to_end(&mut text).ok()?;
    let e: Entry = serde_json::from_slice(&text).ok()?;
    let fixed = fixed_watch(run);
    if e.key.watch.len() < fixed.len() || e.key.watch.iter().zip(&fixed).any(|((p, _), q)| p != q) {
        return None;
    }
    let now = key(run, e.key.watch.iter().map(|(p, _)| p.clone()).collect())?;
    (now == e.key).then_some(e.interpreter)
}

/// Keep `i`, learned by running `run` at `started`, for the next runs.
/// `watch`: the paths the probe said its answer depends on.
pub fn store(run: &Path, i: &Interpreter, watch: Vec<PathBuf>, started: SystemTime) {
    let mut all = fixed_watch(run);
    for p in watch {
        if p.is_absolute() && !all.contains(&p) {
            all.push(p);
        }
    }
    let Some(key) = key(run, all) else { return };
    // A path changed while (or just before) the interpreter looked at it
    // may hold a newer state than the answer saw; file times come from a
    // coarse clock, hence the margin.
    let edge = started - Duration::from_millis(50);
    let racy = key.watch.iter().any(|(_, s)| {
        s.as_ref().is_some_and(|s| {
            let t = SystemTime::UNIX_EPOCH
                + Duration::new(
                    s.mtime.max(0) as u64,
                    s.mtime_ns.clamp(0, 999_999_999) as u32,
                );
            t >= edge
        })
    });
    if racy {
        return;
    }
    let Some(dir) = dir() else { return };
    if std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .is_err()
    {
        return;
    }
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() && private(&m) => {}
        _ => return,
    }
    let entry = Entry {
        key,
        interpreter: i.clone(),
    };
    let Ok(json) = serde_json::to_vec(&entry) else {
        return;
    };
    let dst = file_for(&dir, run);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".{}.{}.{nanos}.tmp",
        dst.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &json));
    if written.is_err() || std::fs::rename(&tmp, &dst).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_stable_per_path() {
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        let d = Path::new("/c");
        assert_ne!(
            file_for(d, Path::new("/usr/bin/python3")),
            file_for(d, Path::new("/usr/bin/python3.11"))
        );
    }

    #[test]
    fn fixed_watch_covers_both_pyvenv_cfg_places() {
        assert_eq!(
            fixed_watch(Path::new("/v/bin/python3")),
            vec![
                PathBuf::from("/v/bin/python3"),
                "/v/bin/pyvenv.cfg".into(),
                "/v/pyvenv.cfg".into(),
                "/etc/ld.so.cache".into()
            ]
        );
    }
}
