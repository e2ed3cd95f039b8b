//! Each run's workdir: a fresh host directory, bound read-write at the
//! profile's workdir inside the jail, holding the request's files; removed
//! (whatever the payload left in it) when the run is over.
//!
//! The jail's user on the host is the server's own uid (user namespaces,
//! unprivileged server), uid 65534 (a root server's jails map there) or a
//! leased uid (the fallback without user namespaces, root server). So the
//! directory and what the server writes in it are open to every uid
//! (0777/0666), under a root directory that is 0711: a run's directory can
//! be entered by name only, and the name is 128 random bits.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::ApiError;
use super::request::FileSpec;

/// The directory under which run directories are made.
pub fn prepare_root(dir: Option<&Path>) -> Result<PathBuf, String> {
    let root = match dir {
        Some(d) => d.to_path_buf(),
        None if nix::unistd::geteuid().as_raw() == 0 => PathBuf::from("/run/stockade/runs"),
        None => std::env::temp_dir().join(format!(
            "stockade-serve-{}",
            nix::unistd::geteuid().as_raw()
        )),
    };
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| format!("{}: {e}", root.display()))?;
    Ok(root)
}

/// One run's directory; removed on drop.
#[derive(Debug)]
pub struct Workdir {
    path: PathBuf,
}

impl Workdir {
    /// Make a fresh directory under `root` and write `files` into it.
    pub fn create(root: &Path, files: &[FileSpec]) -> Result<Workdir, ApiError> {
        let name = random_name().map_err(|e| ApiError::internal(format!("workdir name: {e}")))?;
        let path = root.join(name);
        std::fs::create_dir(&path)
            .and_then(|()| open_up(&path, 0o777))
            .map_err(|e| ApiError::internal(format!("workdir: {}: {e}", path.display())))?;
        let w = Workdir { path };
        w.write_files(files)?;
        Ok(w)
    }

    /// Refuse `files` that cannot all be written (a path that is also
    /// another's directory), as writing them would: for a fork server's
    /// child, which writes them itself.
    pub fn check_files(files: &[FileSpec]) -> Result<(), ApiError> {
        for f in files {
            let field = format!("files[{}]", serde_json::Value::String(f.path.clone()));
            for g in files {
                if g.path.len() > f.path.len()
                    && g.path.starts_with(&f.path)
                    && g.path.as_bytes()[f.path.len()] == b'/'
                {
                    let part = f.path.rsplit('/').next().unwrap_or(&f.path);
                    return Err(ApiError::field(
                        format!("files[{}]", serde_json::Value::String(g.path.clone())),
                        format!("{part:?} is also given as a file"),
                    ));
                }
                if std::ptr::eq(f, g) {
                    continue;
                }
                if g.path == f.path {
                    return Err(ApiError::field(field, "given twice"));
                }
            }
        }
        Ok(())
    }

    /// Write `files` (a warm pool's member gets them at its hand-over).
    pub fn write_files(&self, files: &[FileSpec]) -> Result<(), ApiError> {
        files.iter().try_for_each(|f| self.write(f))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write one file (its path checked by the request parser: plain
    /// relative components). Nothing is followed: parents are made here,
    /// and the file is created new with O_NOFOLLOW.
    fn write(&self, f: &FileSpec) -> Result<(), ApiError> {
        let field = format!("files[{}]", serde_json::Value::String(f.path.clone()));
        let mut dir = self.path.clone();
        let parts: Vec<&str> = f.path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            dir.push(part);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => {
                    return Err(ApiError::field(
                        field,
                        format!("{part:?} is also given as a file"),
                    ))
                }
                Err(_) => {}
            }
            std::fs::create_dir(&dir)
                .and_then(|()| open_up(&dir, 0o777))
                .map_err(|e| ApiError::internal(format!("{field}: {e}")))?;
        }
        let file = dir.join(parts[parts.len() - 1]);
        let mode = if f.executable { 0o777 } else { 0o666 };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&file)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    ApiError::field(field.clone(), "a directory of that name is also given")
                }
                _ => ApiError::internal(format!("{field}: {e}")),
            })?;
        out.write_all(&f.content)
            .and_then(|()| open_up(&file, mode))
            .map_err(|e| ApiError::internal(format!("{field}: {e}")))
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        remove_all(&self.path);
    }
}

/// chmod (the umask would keep the mode from the jail's uid).
fn open_up(p: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// Remove a tree the payload may have left unreadable (a 0000 directory
/// of ours): each directory is opened up before it is read.
pub fn remove_all(p: &Path) {
    if std::fs::remove_dir_all(p).is_ok() || std::fs::symlink_metadata(p).is_err() {
        return;
    }
    fn walk(p: &Path) {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return;
        };
        if m.is_dir() {
            let _ = open_up(p, 0o700);
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    walk(&e.path());
                }
            }
            let _ = std::fs::remove_dir(p);
        } else {
            let _ = std::fs::remove_file(p);
        }
    }
    walk(p);
}

/// 32 hex digits from the kernel's random pool.
fn random_name() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}
