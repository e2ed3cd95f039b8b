//! A path of directories open from a tree's top, one plain name at a
//! time, never through a symlink: the entries of a walk come parents
//! first, so each directory is opened once for all that lies beneath it.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use crate::sys::{self, tree, Errno, SysError, SysResult};

/// One directory open on the path, and the mode to set back when it is
/// let go (see [`Cursor::upper`]).
struct Open {
    name: OsString,
    fd: OwnedFd,
    restore: Option<u32>,
}

/// The directories open from `top` down to the last one asked for.
pub struct Cursor<'a> {
    top: &'a OwnedFd,
    open: Vec<Open>,
    /// An upper layer's: a directory this uid owns but may not search is
    /// made searchable while it is open.
    owner: Option<u32>,
}

impl<'a> Cursor<'a> {
    pub fn new(top: &'a OwnedFd) -> Cursor<'a> {
        Cursor {
            top,
            open: Vec::new(),
            owner: None,
        }
    }

    /// A cursor on an upper layer, which the payload may have left with
    /// directories of ours at mode 000: each is made searchable while it
    /// is open, and set back after.
    pub fn upper(top: &'a OwnedFd) -> Cursor<'a> {
        Cursor {
            top,
            open: Vec::new(),
            owner: Some(sys::geteuid()),
        }
    }

    /// The directory `rel` (relative to the top; plain names), each step
    /// opened without following a symlink: ELOOP where one is a symlink,
    /// ENOTDIR where one is something else but a directory (the error's
    /// `arg` is the path to it).
    pub fn dir(&mut self, rel: &Path) -> SysResult<&OwnedFd> {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n.to_os_string()),
                _ => {
                    return Err(SysError {
                        call: "openat",
                        arg: rel.display().to_string(),
                        errno: Errno::EINVAL,
                    })
                }
            }
        }
        let same = self
            .open
            .iter()
            .zip(&names)
            .take_while(|(a, b)| a.name == **b)
            .count();
        self.truncate(same);
        let mut at: PathBuf = names[..same].iter().collect();
        for n in &names[same..] {
            at.push(n);
            let parent = self.open.last().map(|o| &o.fd).unwrap_or(self.top);
            let (fd, restore) = self.open_one(parent, n, &at)?;
            self.open.push(Open {
                name: n.clone(),
                fd,
                restore,
            });
        }
        Ok(self.open.last().map(|o| &o.fd).unwrap_or(self.top))
    }

    /// `n` in `parent`, and the mode to set back when it was made
    /// searchable.
    fn open_one(
        &self,
        parent: &OwnedFd,
        n: &OsString,
        at: &Path,
    ) -> SysResult<(OwnedFd, Option<u32>)> {
        match tree::open_dir(parent, n, at) {
            Ok(fd) => Ok((fd, None)),
            Err(mut e) => {
                let st = tree::lstat(parent, n, at).ok();
                // O_NOFOLLOW|O_DIRECTORY answers ENOTDIR for a symlink.
                if e.errno == Errno::ENOTDIR && st.is_some_and(|s| s.kind() == libc::S_IFLNK) {
                    e.errno = Errno::ELOOP;
                }
                match (e.errno, st, self.owner) {
                    (Errno::EACCES, Some(st), Some(me)) if st.uid == me => {
                        let p = tree::open_path(parent, n, at)?;
                        let mode = st.mode & 0o7777;
                        sys::chmod_fd(&p, mode | 0o500, at)?;
                        Ok((tree::open_dir(parent, n, at)?, Some(mode)))
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Keep the first `n` directories open; let go of the rest.
    fn truncate(&mut self, n: usize) {
        while self.open.len() > n {
            if let Some(o) = self.open.pop() {
                if let Some(mode) = o.restore {
                    let _ = tree::fchmod(&o.fd, mode, Path::new(&o.name));
                }
            }
        }
    }

    /// Forget what is open at and beneath `rel` (it is about to change).
    pub fn forget(&mut self, rel: &Path) {
        let depth = rel.components().count();
        if depth > 0 {
            self.truncate(depth - 1);
        }
    }
}

impl Drop for Cursor<'_> {
    fn drop(&mut self) {
        self.truncate(0);
    }
}
