//! Kept upper layers (`--overlay-upper DIR`): the Nth overlay's upper and
//! work directories in `DIR/N`, and `DIR/stockade-overlay.json` saying
//! which host directory each belongs to and where the jail saw it, for a
//! later `stockade overlay commit DIR` or `discard DIR`.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sys::{self, tree};

/// The record's file name in DIR.
pub const RECORD: &str = "stockade-overlay.json";

/// The record's format version.
pub const VERSION: u32 = 1;

/// What DIR holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub version: u32,
    pub overlays: Vec<Kept>,
}

/// One kept upper layer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Kept {
    /// The host directory (the lower layer, where a commit goes).
    pub host: PathBuf,
    /// Where the jail saw it.
    pub inner: PathBuf,
    /// The layer's directory in DIR (`0`, `1`, …), which holds `upper`
    /// and `work`.
    pub layer: String,
    /// When the host directory was last as the changes were made over it
    /// (`[seconds, nanoseconds]`, before the overlay was mounted): a commit
    /// leaves what the host changed after alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<[i64; 2]>,
    /// What earlier commits left on the host: a path beneath it, the
    /// ctime the commit gave it (`workspace::Layer::ours`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub ours: std::collections::BTreeMap<PathBuf, [i64; 2]>,
}

impl Kept {
    pub fn upper(&self, dir: &Path) -> PathBuf {
        dir.join(&self.layer).join("upper")
    }

    pub fn since(&self) -> Option<tree::Time> {
        self.since.map(|[sec, nsec]| tree::Time { sec, nsec })
    }

    pub fn ours(&self) -> std::collections::BTreeMap<PathBuf, tree::Time> {
        self.ours
            .iter()
            .map(|(p, [sec, nsec])| {
                (
                    p.clone(),
                    tree::Time {
                        sec: *sec,
                        nsec: *nsec,
                    },
                )
            })
            .collect()
    }

    pub fn set_ours(&mut self, ours: &std::collections::BTreeMap<PathBuf, tree::Time>) {
        self.ours = ours
            .iter()
            .map(|(p, t)| (p.clone(), [t.sec, t.nsec]))
            .collect();
    }
}

/// Make DIR (missing or empty) ready for `overlays` (host, inner), in
/// order: each layer's `upper` and `work` owned by `owner` (the host ids
/// the jail's map to, when we are root), and the record, which says
/// `since` (see [`Kept::since`]).
pub fn prepare(
    dir: &Path,
    overlays: &[(PathBuf, PathBuf)],
    owner: Option<(u32, u32)>,
    since: tree::Time,
) -> Result<(), String> {
    let say = |p: &Path, e: std::io::Error| format!("{}: {}", p.display(), sys::strerror(&e));
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut rd = std::fs::read_dir(dir).map_err(|e| say(dir, e))?;
            if rd.next().is_some() {
                return Err(format!("{}: not empty", dir.display()));
            }
        }
        Err(e) => return Err(say(dir, e)),
    }
    let mut record = Record {
        version: VERSION,
        overlays: Vec::new(),
    };
    for (i, (host, inner)) in overlays.iter().enumerate() {
        let layer = dir.join(i.to_string());
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&layer)
            .map_err(|e| say(&layer, e))?;
        for sub in ["upper", "work"] {
            let d = layer.join(sub);
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&d)
                .map_err(|e| say(&d, e))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&d, Some(uid), Some(gid)).map_err(|e| say(&d, e))?;
            }
        }
        record.overlays.push(Kept {
            host: host.clone(),
            inner: inner.clone(),
            layer: i.to_string(),
            since: Some([since.sec, since.nsec]),
            ours: Default::default(),
        });
    }
    let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())? + "\n";
    let f = dir.join(RECORD);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&f)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))
        .map_err(|e| say(&f, e))
}

/// Write `r` as DIR's record again (a new file renamed over the old).
pub fn rewrite(dir: &Path, r: &Record) -> Result<(), String> {
    let text = serde_json::to_string_pretty(r).map_err(|e| e.to_string())? + "\n";
    let tmp = dir.join(format!(".{RECORD}.{}", std::process::id()));
    let say = |p: &Path, e: std::io::Error| format!("{}: {}", p.display(), sys::strerror(&e));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))
        .map_err(|e| say(&tmp, e))?;
    std::fs::rename(&tmp, dir.join(RECORD)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        say(&dir.join(RECORD), e)
    })
}

/// The record of DIR.
pub fn read(dir: &Path) -> Result<Record, String> {
    let f = dir.join(RECORD);
    let text = std::fs::read_to_string(&f).map_err(|e| {
        format!(
            "{}: {} (not a directory of kept upper layers: --overlay-upper)",
            f.display(),
            sys::strerror(&e)
        )
    })?;
    let r: Record = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
    if r.version != VERSION {
        return Err(format!(
            "{}: version {} (this stockade reads {VERSION})",
            f.display(),
            r.version
        ));
    }
    for k in &r.overlays {
        let plain = !k.layer.is_empty() && k.layer.bytes().all(|b| b.is_ascii_digit());
        if !plain || !k.host.is_absolute() || !k.inner.is_absolute() {
            return Err(format!(
                "{}: layer {:?}: not a layer stockade made",
                f.display(),
                k.layer
            ));
        }
    }
    Ok(r)
}

/// Remove what stockade made in DIR (the layers, then the record); DIR
/// itself stays. Nothing is followed through a symlink.
pub fn discard(dir: &Path, r: &Record) -> Result<(), String> {
    let d = sys::open_dir_path(dir).map_err(|e| e.to_string())?;
    let d = tree::reopen_dir(&d, dir).map_err(|e| e.to_string())?;
    for k in &r.overlays {
        let name = OsStr::new(&k.layer);
        match tree::lstat(&d, name, Path::new(&k.layer)) {
            Err(e) if e.errno == sys::Errno::ENOENT => continue,
            _ => {}
        }
        super::commit::remove_any(&d, name, &dir.join(&k.layer), 0).map_err(|e| e.to_string())?;
    }
    tree::unlink(&d, OsStr::new(RECORD), false, &dir.join(RECORD)).map_err(|e| e.to_string())
}
