//! An overlay's upper layer read against its lower one (the host
//! directory): what changed, path by path, in the order a commit applies
//! it (parents first, names sorted). Whiteouts (a 0:0 character device)
//! are deletions; an opaque directory (`user.overlay.opaque` = `y`) hides
//! everything the lower one held that it does not hold itself. A file
//! copied up but left as it was (same content, same mode) is no change.
//!
//! The upper layer is the payload's: every entry is opened relative to its
//! directory's fd without following a symlink, only regular files and
//! directories are opened, and the walk is bounded in entries, depth and
//! bytes compared.

#![deny(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::outcome::ChangeKind;
use crate::sys::{self, tree, tree::Stat, Errno, SysResult};

/// The most entries of an upper layer read (each directory's entries and
/// the lower ones an opaque directory hides).
pub const MAX_ENTRIES: usize = 500_000;

/// The deepest directory read, below the overlay's top.
pub const MAX_DEPTH: usize = 200;

/// One change.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Relative to the overlay's top: plain names.
    pub rel: PathBuf,
    pub kind: ChangeKind,
    /// What the upper layer has there (None: deleted).
    pub new: Option<Stat>,
    /// The type the lower layer had there (`S_IFMT` bits; None: nothing).
    pub old: Option<u32>,
    /// A symlink's target.
    pub target: Option<OsString>,
    /// A file's SHA-256, hashed while walking (see [`Limits::hash`]).
    pub sha256: Option<[u8; 32]>,
}

/// The bounds of one walk.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Files larger than this are not compared or hashed.
    pub max_file: u64,
    /// Hash the first this many changed files.
    pub hash: usize,
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct Walked {
    pub entries: Vec<Entry>,
    /// Why the upper layer was not read whole (the entries are then a
    /// part of the changes only).
    pub cut: Option<String>,
}

/// Read the upper layer `upper` (any fd of its top directory) against
/// `lower` (the host directory's).
pub fn walk(upper: &OwnedFd, lower: &OwnedFd, limits: Limits) -> SysResult<Walked> {
    let top = Path::new("");
    let u = tree::reopen_dir(upper, Path::new("."))?;
    let l = tree::reopen_dir(lower, Path::new("."))?;
    let mut w = Walker {
        out: Walked::default(),
        seen: 0,
        limits,
        hashed: 0,
        owner: sys::geteuid(),
    };
    w.dir(&u, Some(&l), false, top, 0)?;
    Ok(w.out)
}

struct Walker {
    out: Walked,
    seen: usize,
    limits: Limits,
    hashed: usize,
    /// Our uid: an unreadable entry we own is made readable for a moment.
    owner: u32,
}

/// A character device 0:0: overlayfs's whiteout.
pub fn is_whiteout(st: &Stat) -> bool {
    st.kind() == libc::S_IFCHR && st.rdev == 0
}

impl Walker {
    fn cut(&mut self, why: String) {
        if self.out.cut.is_none() {
            self.out.cut = Some(why);
        }
    }

    fn push(&mut self, rel: PathBuf, kind: ChangeKind, new: Option<Stat>, old: Option<u32>) {
        self.out.entries.push(Entry {
            rel,
            kind,
            new,
            old,
            target: None,
            sha256: None,
        });
    }

    /// The directory `rel` (open: `u`, and `l` its lower one, if any);
    /// `opaque`: what `l` holds that `u` does not is deleted.
    fn dir(
        &mut self,
        u: &OwnedFd,
        l: Option<&OwnedFd>,
        opaque: bool,
        rel: &Path,
        depth: usize,
    ) -> SysResult<()> {
        if depth > MAX_DEPTH {
            self.cut(format!(
                "{}: deeper than {MAX_DEPTH} directories",
                rel.display()
            ));
            return Ok(());
        }
        let left = MAX_ENTRIES.saturating_sub(self.seen);
        let mut names = match tree::entries(u, left, rel) {
            Ok(n) => n,
            Err(e) if e.errno == Errno::EFBIG => {
                self.cut(format!(
                    "more than {MAX_ENTRIES} entries in the upper layer"
                ));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.seen += names.len();
        let upper_names = names.len();
        if let (true, Some(l)) = (opaque, l) {
            let left = MAX_ENTRIES.saturating_sub(self.seen);
            match tree::entries(l, left, rel) {
                Ok(lower) => {
                    self.seen += lower.len();
                    names.extend(lower);
                }
                Err(e) if e.errno == Errno::EFBIG => {
                    self.cut(format!(
                        "more than {MAX_ENTRIES} entries in the upper layer"
                    ));
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let in_upper: std::collections::HashSet<OsString> =
            names[..upper_names].iter().cloned().collect();
        names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
        names.dedup();
        for name in &names {
            let path = rel.join(name);
            let lower = match l {
                Some(l) => lstat_opt(l, name, &path)?,
                None => None,
            };
            if !in_upper.contains(name) {
                // Hidden by an opaque directory.
                if let Some(ls) = lower {
                    self.push(path, ChangeKind::Deleted, None, Some(ls.kind()));
                }
                continue;
            }
            let st = tree::lstat(u, name, &path)?;
            self.entry(u, l, name, path, st, lower, depth)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn entry(
        &mut self,
        u: &OwnedFd,
        l: Option<&OwnedFd>,
        name: &OsStr,
        path: PathBuf,
        st: Stat,
        lower: Option<Stat>,
        depth: usize,
    ) -> SysResult<()> {
        if is_whiteout(&st) {
            if let Some(ls) = lower {
                self.push(path, ChangeKind::Deleted, None, Some(ls.kind()));
            }
            return Ok(());
        }
        let old = lower.map(|s| s.kind());
        if st.kind() == libc::S_IFDIR {
            let (ud, restore) = self.open_dir(u, name, &path, &st)?;
            let opaque = tree::xattr(&ud, c"user.overlay.opaque", &path)?.as_deref() == Some(b"y");
            match lower {
                None => {
                    self.push(path.clone(), ChangeKind::Added, Some(st), None);
                    self.dir(&ud, None, false, &path, depth + 1)?;
                }
                Some(ls) if ls.kind() == libc::S_IFDIR => {
                    if perm(ls.mode) != perm(st.mode) {
                        self.push(path.clone(), ChangeKind::ModeChanged, Some(st), old);
                    }
                    let ld = l.map(|l| tree::open_dir(l, name, &path)).transpose()?;
                    self.dir(&ud, ld.as_ref(), opaque, &path, depth + 1)?;
                }
                // A directory made where the lower layer had something
                // else is opaque (overlayfs makes it over a whiteout).
                Some(_) if opaque => {
                    self.push(path.clone(), ChangeKind::TypeChanged, Some(st), old);
                    self.dir(&ud, None, false, &path, depth + 1)?;
                }
                // One that is not was a directory when the jail ran: the
                // host has put something else there since (a later
                // commit). What lies beneath goes there, or (a symlink, a
                // file on the host path) is refused: never the host's
                // entry replaced for a directory the payload did not make.
                Some(_) => self.dir(&ud, None, false, &path, depth + 1)?,
            }
            if let Some(mode) = restore {
                let _ = tree::fchmod(&ud, mode, &path);
            }
            return Ok(());
        }
        let kind = match lower {
            None => ChangeKind::Added,
            Some(ls) if ls.kind() != st.kind() => ChangeKind::TypeChanged,
            Some(ls) => match self.same(u, l, name, &path, &st, &ls)? {
                true if perm(ls.mode) == perm(st.mode) => return Ok(()),
                true => ChangeKind::ModeChanged,
                false => ChangeKind::Modified,
            },
        };
        let mut e = Entry {
            rel: path,
            kind,
            new: Some(st),
            old,
            target: None,
            sha256: None,
        };
        match st.kind() {
            libc::S_IFLNK => e.target = Some(tree::readlink(u, name, &e.rel)?),
            libc::S_IFREG if self.hashed < self.limits.hash && st.size <= self.limits.max_file => {
                self.hashed += 1;
                e.sha256 = self.hash(u, name, &e.rel, &st)?;
            }
            _ => {}
        }
        self.out.entries.push(e);
        Ok(())
    }

    /// Whether the upper and lower `name` hold the same (same-typed)
    /// content: a file's bytes, a symlink's target.
    fn same(
        &mut self,
        u: &OwnedFd,
        l: Option<&OwnedFd>,
        name: &OsStr,
        path: &Path,
        st: &Stat,
        ls: &Stat,
    ) -> SysResult<bool> {
        let Some(l) = l else { return Ok(false) };
        match st.kind() {
            libc::S_IFLNK => Ok(tree::readlink(u, name, path)? == tree::readlink(l, name, path)?),
            libc::S_IFREG => {
                if st.size != ls.size || st.size > self.limits.max_file {
                    return Ok(false);
                }
                let a = self.open_file(u, name, path, st)?;
                let Some(a) = a else { return Ok(false) };
                let Ok((b, _)) = tree::open_file(l, name, path) else {
                    return Ok(false);
                };
                Ok(same_bytes(a, b, st.size))
            }
            _ => Ok(true),
        }
    }

    /// The SHA-256 of the upper file `name` (None: unreadable).
    fn hash(
        &self,
        u: &OwnedFd,
        name: &OsStr,
        path: &Path,
        st: &Stat,
    ) -> SysResult<Option<[u8; 32]>> {
        let Some(fd) = self.open_file(u, name, path, st)? else {
            return Ok(None);
        };
        let mut f = std::fs::File::from(fd);
        let mut h = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut left = self.limits.max_file;
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Ok(None),
            };
            if n as u64 > left {
                // Grew past the cap since it was seen: no hash.
                return Ok(None);
            }
            left -= n as u64;
            h.update(&buf[..n]);
        }
        Ok(Some(h.finalize().into()))
    }

    /// The upper file `name`, open for reading (see [`open_upper_file`]).
    fn open_file(
        &self,
        u: &OwnedFd,
        name: &OsStr,
        path: &Path,
        st: &Stat,
    ) -> SysResult<Option<OwnedFd>> {
        open_upper_file(u, name, path, st, self.owner)
    }

    /// The upper directory `name`, open for reading; one we own but cannot
    /// read or search is made so for the walk, its mode returned to set
    /// back after.
    fn open_dir(
        &self,
        u: &OwnedFd,
        name: &OsStr,
        path: &Path,
        st: &Stat,
    ) -> SysResult<(OwnedFd, Option<u32>)> {
        match tree::open_dir(u, name, path) {
            Ok(fd) if perm(st.mode) & 0o500 == 0o500 || st.uid != self.owner => Ok((fd, None)),
            Ok(fd) => {
                // Readable (by root, say) but not searchable by us, its
                // owner: its entries need search.
                let p = tree::open_path(u, name, path)?;
                sys::chmod_fd(&p, perm(st.mode) | 0o500, path)?;
                Ok((fd, Some(perm(st.mode))))
            }
            Err(e) if e.errno == Errno::EACCES && st.uid == self.owner => {
                let p = tree::open_path(u, name, path)?;
                sys::chmod_fd(&p, perm(st.mode) | 0o500, path)?;
                Ok((tree::open_dir(u, name, path)?, Some(perm(st.mode))))
            }
            Err(e) => Err(e),
        }
    }
}

/// The upper file `name` (of stat `st`), open for reading; one `owner`
/// (our uid) owns but cannot read (mode 000) is made readable for the
/// open and set back. None when it cannot be read.
pub(super) fn open_upper_file(
    u: &OwnedFd,
    name: &OsStr,
    path: &Path,
    st: &Stat,
    owner: u32,
) -> SysResult<Option<OwnedFd>> {
    match tree::open_file(u, name, path) {
        Ok((fd, _)) => Ok(Some(fd)),
        Err(e) if e.errno == Errno::EACCES && st.uid == owner => {
            let p = tree::open_path(u, name, path)?;
            sys::chmod_fd(&p, perm(st.mode) | 0o400, path)?;
            let got = tree::open_file(u, name, path).ok().map(|(fd, _)| fd);
            let _ = sys::chmod_fd(&p, perm(st.mode), path);
            Ok(got)
        }
        Err(e) if e.errno == Errno::EACCES => Ok(None),
        Err(e) => Err(e),
    }
}

/// The permission bits of a mode.
pub fn perm(mode: u32) -> u32 {
    mode & 0o7777
}

/// lstat, None when nothing is there (or it cannot be reached).
fn lstat_opt(dir: &OwnedFd, name: &OsStr, path: &Path) -> SysResult<Option<Stat>> {
    match tree::lstat(dir, name, path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if matches!(e.errno, Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether two files hold the same `len` bytes.
fn same_bytes(a: OwnedFd, b: OwnedFd, len: u64) -> bool {
    let (mut a, mut b) = (std::fs::File::from(a), std::fs::File::from(b));
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut left = len;
    while left > 0 {
        let n = (left.min(x.len() as u64)) as usize;
        if a.read_exact(&mut x[..n]).is_err() || b.read_exact(&mut y[..n]).is_err() {
            return false;
        }
        if x[..n] != y[..n] {
            return false;
        }
        left -= n as u64;
    }
    // Neither may hold more than was seen.
    matches!((a.read(&mut x[..1]), b.read(&mut y[..1])), (Ok(0), Ok(0)))
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(H[(b >> 4) as usize] as char);
        s.push(H[(b & 15) as usize] as char);
    }
    s
}

/// The name of a file type (`S_IFMT` bits) as the outcome gives it.
pub fn type_name(kind: u32) -> &'static str {
    match kind {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "device",
    }
}
