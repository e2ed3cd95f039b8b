//! Copies of upper layers (a session's checkpoints, and the rollback to
//! one): a layer's tree copied entry by entry from one directory fd to
//! another, as overlayfs reads it: files, directories (their
//! `user.overlay.opaque` mark), symlinks, whiteouts (0:0 character
//! devices, which need no privilege to make), FIFOs and sockets; modes
//! kept, owners too when we are root (the jail's ids). Hard links are
//! copied as separate files, times are not kept. Nothing is followed
//! through a symlink; the copy is bounded in entries and depth as a walk
//! is.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::commit::remove_any;
use super::walk::{open_upper_file, perm, MAX_DEPTH, MAX_ENTRIES};
use crate::sys::{self, tree, tree::Stat, Errno, SysError, SysResult};

/// The overlayfs marks a copy keeps (in a user namespace, overlayfs's
/// own attributes are `user.overlay.*`).
const MARKS: [&std::ffi::CStr; 1] = [c"user.overlay.opaque"];

/// Copy everything in the directory `from` into the directory `to`
/// (empty); `shown`: the name errors give.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let f = open(from)?;
    let t = open(to)?;
    let mut c = Copier {
        seen: 0,
        root: sys::geteuid() == 0,
        owner: sys::geteuid(),
    };
    c.dir(&f, &t, Path::new(""), 0)
        .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))
}

/// Remove everything in the directory `dir` (never following a symlink);
/// `dir` itself stays.
pub fn empty_dir(dir: &Path) -> Result<(), String> {
    let d = open(dir)?;
    let say = |e: SysError| format!("{}: {e}", dir.display());
    loop {
        let names = tree::entries(&d, 4096, Path::new("")).or_else(|e| match e.errno {
            Errno::EFBIG => tree::entries(&d, usize::MAX, Path::new("")),
            _ => Err(e),
        });
        let names = names.map_err(say)?;
        if names.is_empty() {
            return Ok(());
        }
        for n in names {
            remove_any(&d, &n, Path::new(&n), 0).map_err(say)?;
        }
    }
}

fn open(p: &Path) -> Result<OwnedFd, String> {
    sys::open_dir_path(p)
        .and_then(|d| tree::reopen_dir(&d, p))
        .map_err(|e| e.to_string())
}

struct Copier {
    seen: usize,
    root: bool,
    owner: u32,
}

impl Copier {
    fn dir(&mut self, from: &OwnedFd, to: &OwnedFd, rel: &Path, depth: usize) -> SysResult<()> {
        if depth > MAX_DEPTH {
            return too("deeper than the walk's depth", rel);
        }
        let left = MAX_ENTRIES.saturating_sub(self.seen);
        let names = tree::entries(from, left, rel)?;
        self.seen += names.len();
        for name in &names {
            let path = rel.join(name);
            let st = tree::lstat(from, name, &path)?;
            self.entry(from, to, name, &path, &st, depth)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        from: &OwnedFd,
        to: &OwnedFd,
        name: &OsStr,
        path: &Path,
        st: &Stat,
        depth: usize,
    ) -> SysResult<()> {
        match st.kind() {
            libc::S_IFDIR => {
                let (src, restore) = self.open_dir(from, name, path, st)?;
                tree::mkdir(to, name, 0o700, path)?;
                let dst = tree::open_dir(to, name, path)?;
                let copied = self.dir(&src, &dst, path, depth + 1);
                if let Some(mode) = restore {
                    let _ = tree::fchmod(&src, mode, path);
                }
                copied?;
                for m in MARKS {
                    if let Some(v) = tree::xattr(&src, m, path)? {
                        tree::set_xattr(&dst, m, &v, path)?;
                    }
                }
                if self.root {
                    tree::fchown(&dst, st.uid, st.gid, path)?;
                }
                tree::fchmod(&dst, perm(st.mode), path)
            }
            libc::S_IFREG => {
                let Some(src) = open_upper_file(from, name, path, st, self.owner)? else {
                    return Err(SysError {
                        call: "open",
                        arg: path.display().to_string(),
                        errno: Errno::EACCES,
                    });
                };
                let fd = tree::create_file(to, name, 0o600, path)?;
                let mut r = std::fs::File::from(src);
                let mut w = std::fs::File::from(fd);
                std::io::copy(&mut r, &mut w)
                    .map_err(|e| SysError::io("copy", path.display(), &e))?;
                let fd = OwnedFd::from(w);
                if self.root {
                    tree::fchown(&fd, st.uid, st.gid, path)?;
                }
                tree::fchmod(&fd, perm(st.mode), path)
            }
            libc::S_IFLNK => {
                let target = tree::readlink(from, name, path)?;
                tree::symlink(&target, to, name, path)?;
                self.own(to, name, path, st)
            }
            _ => {
                tree::mknod(to, name, st.mode, st.rdev, path)?;
                self.own(to, name, path, st)
            }
        }
    }

    fn own(&self, to: &OwnedFd, name: &OsStr, path: &Path, st: &Stat) -> SysResult<()> {
        match self.root {
            true => tree::lchown(to, name, st.uid, st.gid, path),
            false => Ok(()),
        }
    }

    /// The directory `name`, open for reading; one we own but cannot read
    /// is made so for the copy, its mode returned to set back.
    fn open_dir(
        &self,
        from: &OwnedFd,
        name: &OsStr,
        path: &Path,
        st: &Stat,
    ) -> SysResult<(OwnedFd, Option<u32>)> {
        if st.uid != self.owner || perm(st.mode) & 0o500 == 0o500 || self.root {
            return Ok((tree::open_dir(from, name, path)?, None));
        }
        let p = tree::open_path(from, name, path)?;
        sys::chmod_fd(&p, perm(st.mode) | 0o500, path)?;
        Ok((tree::open_dir(from, name, path)?, Some(perm(st.mode))))
    }
}

fn too(why: &str, rel: &Path) -> SysResult<()> {
    Err(SysError {
        call: "copy",
        arg: format!("{}: {why}", rel.display()),
        errno: Errno::EFBIG,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::PathBuf;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("stockade-snap-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// path → (mode, content or target, rdev, opaque mark).
    fn seen(top: &Path) -> Vec<(String, u32, Vec<u8>, u64, bool)> {
        let mut out = Vec::new();
        let mut todo = vec![top.to_path_buf()];
        while let Some(d) = todo.pop() {
            let mut names: Vec<_> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            for p in names {
                let m = std::fs::symlink_metadata(&p).unwrap();
                let rel = p.strip_prefix(top).unwrap().display().to_string();
                let (data, opaque) = if m.file_type().is_symlink() {
                    (
                        std::fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                        false,
                    )
                } else if m.is_dir() {
                    todo.push(p.clone());
                    let fd = sys::open_dir_path(&p)
                        .and_then(|f| tree::reopen_dir(&f, &p))
                        .unwrap();
                    let o = tree::xattr(&fd, c"user.overlay.opaque", &p).unwrap();
                    (Vec::new(), o.as_deref() == Some(b"y"))
                } else if m.file_type().is_file() {
                    let mut b = Vec::new();
                    if m.mode() & 0o400 != 0 {
                        b = std::fs::read(&p).unwrap();
                    }
                    (b, false)
                } else {
                    (Vec::new(), false)
                };
                out.push((rel, m.mode(), data, m.rdev(), opaque));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_layer_is_copied_as_overlayfs_reads_it_and_emptied() {
        let d = tmp("copy");
        let (from, to) = (d.join("from"), d.join("to"));
        std::fs::create_dir_all(from.join("opaque/sub")).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(from.join("f"), "file\n").unwrap();
        std::fs::set_permissions(from.join("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::write(from.join("opaque/sub/g"), "g\n").unwrap();
        std::os::unix::fs::symlink("../etc/passwd", from.join("link")).unwrap();
        let top = sys::open_dir_path(&from)
            .and_then(|f| tree::reopen_dir(&f, &from))
            .unwrap();
        // A whiteout (0:0 character device) and an opaque directory.
        tree::mknod(
            &top,
            OsStr::new("gone"),
            libc::S_IFCHR,
            0,
            Path::new("gone"),
        )
        .unwrap();
        let o = tree::open_dir(&top, OsStr::new("opaque"), Path::new("opaque")).unwrap();
        let marked = tree::set_xattr(&o, c"user.overlay.opaque", b"y", Path::new("opaque"));
        std::fs::set_permissions(
            from.join("opaque/sub"),
            std::fs::Permissions::from_mode(0o500),
        )
        .unwrap();
        copy_tree(&from, &to).unwrap();
        let (a, b) = (seen(&from), seen(&to));
        assert_eq!(a, b);
        assert_eq!(b.len(), 6, "{b:?}");
        assert_eq!(b.iter().any(|e| e.4), marked.is_ok(), "the opaque mark");
        // Copied once more into a layer that is not empty: refused.
        assert!(copy_tree(&from, &to).is_err());
        empty_dir(&to).unwrap();
        assert_eq!(std::fs::read_dir(&to).unwrap().count(), 0);
        assert!(to.is_dir());
        std::fs::set_permissions(
            from.join("opaque/sub"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
