//! A path of directories open from a tree's top, one plain name at a
//! time, never through a symlink: the entries of a walk come parents
//! first, so each directory is opened once for all that lies beneath it.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use crate::sys::{tree, Errno, SysError, SysResult};

/// The directories open from `top` down to the last one asked for.
pub struct Cursor<'a> {
    top: &'a OwnedFd,
    open: Vec<(OsString, OwnedFd)>,
}

impl<'a> Cursor<'a> {
    pub fn new(top: &'a OwnedFd) -> Cursor<'a> {
        Cursor {
            top,
            open: Vec::new(),
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
            .take_while(|((a, _), b)| a == *b)
            .count();
        self.open.truncate(same);
        let mut at: PathBuf = names[..same].iter().collect();
        for n in &names[same..] {
            at.push(n);
            let parent = self.open.last().map(|(_, fd)| fd).unwrap_or(self.top);
            let fd = tree::open_dir(parent, n, &at).map_err(|mut e| {
                // O_NOFOLLOW|O_DIRECTORY answers ENOTDIR for a symlink.
                let link = tree::lstat(parent, n, &at).is_ok_and(|s| s.kind() == libc::S_IFLNK);
                if e.errno == Errno::ENOTDIR && link {
                    e.errno = Errno::ELOOP;
                }
                e
            })?;
            self.open.push((n.clone(), fd));
        }
        Ok(self.open.last().map(|(_, fd)| fd).unwrap_or(self.top))
    }

    /// Forget what is open at and beneath `rel` (it is about to change).
    pub fn forget(&mut self, rel: &Path) {
        let depth = rel.components().count();
        if depth > 0 {
            self.open.truncate(depth - 1);
        }
    }
}
