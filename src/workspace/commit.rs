//! The changes applied to the host directory, from an fd of its top.
//!
//! Every directory on a change's path is opened one plain name at a time
//! with `O_NOFOLLOW|O_DIRECTORY`: a symlink or a non-directory there (one
//! planted on the host, or left by an earlier commit) refuses the change,
//! and nothing is written through it. A file or symlink is made under a
//! temporary name beside its place (`O_EXCL`), then renamed into place
//! (`renameat2`: `RENAME_NOREPLACE` where nothing was, `RENAME_EXCHANGE`
//! to replace, so the old one can be put back); a deletion first renames
//! what it removes aside. After each change the directory it was made in
//! is checked to still lie beneath the top (its `..` walked up): a
//! directory renamed out of the host directory meanwhile gets the change
//! undone and refused, so nothing stays written outside it.
//!
//! What the host changed after the overlay was mounted (its ctime after
//! the layer's `since`: no call sets a ctime but the change itself) is neither replaced nor removed, nor a directory holding such
//! a change removed: the change is refused, the host's kept.
//!
//! Set-user-ID and set-group-ID bits are never applied; devices, FIFOs
//! and sockets are not committed. Run by root, what is made takes the
//! owner of its directory, what is replaced keeps its own.

#![deny(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::cursor::Cursor;
use super::walk::{open_upper_file, perm, type_name, Entry};
use super::Layer;
use crate::outcome::{ChangeKind, Committed, RefusedChange};
use crate::policy::Workspaces;
use crate::sys::{self, tree, tree::Rename, tree::Stat, Errno, SysError};

/// The bits a commit applies of a mode: never set-user-ID or set-group-ID.
const APPLIED_BITS: u32 = 0o1777;

/// A commit in progress.
pub struct Commit {
    out: Committed,
    /// The most paths each list keeps.
    max: u64,
    max_file: u64,
    /// We are root: what is made is given its directory's owner.
    root: bool,
    /// Temporary names made so far.
    made: u64,
}

/// Why one change was not applied.
type Refusal = String;

impl Commit {
    pub fn new(policy: &Workspaces) -> Commit {
        Commit {
            out: Committed::default(),
            max: policy.max_changes(),
            max_file: policy.max_file(),
            root: sys::geteuid() == 0,
            made: 0,
        }
    }

    /// Apply one overlay's changes (parents first); what they left on
    /// the host (each path changed and each directory changed in, with
    /// its ctime now: see `Layer::ours`).
    pub fn layer(&mut self, l: &Layer, entries: &[Entry]) -> BTreeMap<PathBuf, tree::Time> {
        let top = match tree::fstat(&l.host, &l.host_path) {
            Ok(st) => (st.dev, st.ino),
            Err(e) => {
                for e2 in entries {
                    self.refused(super::jail_path(&l.inner, &e2.rel), format!("{e}"));
                }
                return BTreeMap::new();
            }
        };
        let mut at = At {
            host: Cursor::new(&l.host),
            upper: Cursor::upper(&l.upper),
            top,
            modes: Vec::new(),
            since: l.since,
            ours: &l.ours,
        };
        let mut touched = BTreeSet::new();
        for e in entries {
            let path = super::jail_path(&l.inner, &e.rel);
            match self.apply(&mut at, e) {
                Ok(()) => {
                    touched.insert(e.rel.clone());
                    touched.extend(e.rel.parent().map(Path::to_path_buf));
                    self.applied(path)
                }
                Err(why) => self.refused(path, why),
            }
        }
        // Directories' modes last, deepest first: a directory made
        // read-only still took what goes beneath it.
        let modes = std::mem::take(&mut at.modes);
        for (rel, mode) in modes.iter().rev() {
            if let Err(why) = at.chmod(rel, libc::S_IFDIR, *mode) {
                self.refused(super::jail_path(&l.inner, rel), why);
            }
        }
        // What we left, as it is now (the top itself is never replaced).
        touched.remove(Path::new(""));
        let mut left = BTreeMap::new();
        for rel in touched {
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                continue;
            };
            at.host.forget(&rel);
            if let Ok(h) = at.host.dir(parent) {
                if let Ok(st) = tree::lstat(h, name, &rel) {
                    left.insert(rel, st.ctime);
                }
            }
        }
        left
    }

    pub fn finish(self) -> Committed {
        self.out
    }

    fn applied(&mut self, path: String) {
        self.out.applied_count += 1;
        if (self.out.applied.len() as u64) < self.max {
            self.out.applied.push(path);
        }
    }

    fn refused(&mut self, path: String, reason: String) {
        if (self.out.refused.len() as u64) < self.max {
            self.out.refused.push(RefusedChange { path, reason });
        }
    }

    /// A temporary name of ours, unique in this process.
    fn temp(&mut self) -> OsString {
        self.made += 1;
        OsString::from(format!(
            ".stockade-commit-{}-{}",
            std::process::id(),
            self.made
        ))
    }

    fn apply(&mut self, at: &mut At, e: &Entry) -> Result<(), Refusal> {
        let (Some(parent), Some(name)) = (e.rel.parent(), e.rel.file_name()) else {
            return Err("not a path beneath the overlay".into());
        };
        at.host.forget(&e.rel);
        let h = at.host.dir(parent).map_err(|err| on_path(parent, err))?;
        let there = lstat_opt(h, name, &e.rel)?;
        // Nothing the host changed since is overwritten or removed (a
        // mode change takes nothing away).
        if let (Some(t), Some(since), false) = (there, at.since, e.kind == ChangeKind::ModeChanged)
        {
            let replaced = e
                .new
                .is_none_or(|n| n.kind() != libc::S_IFDIR || t.kind() != libc::S_IFDIR);
            if replaced && changed_since(h, name, t, (since, at.ours), &e.rel, 0)? {
                return Err(CHANGED_ON_HOST.into());
            }
        }
        let Some(new) = e.new else {
            // Deleted: whatever is there now goes (already gone is fine).
            return match there {
                None => Ok(()),
                Some(_) => {
                    let aside = self.temp();
                    remove(h, name, &aside, at.top, &e.rel)
                }
            };
        };
        let want = new.kind();
        // What the host must hold for the change to apply as it was seen.
        let expected = match e.kind {
            ChangeKind::Added => None,
            ChangeKind::TypeChanged => e.old,
            _ => Some(want),
        };
        match (there.map(|s| s.kind()), expected) {
            (now, exp) if now == exp => {}
            // A directory made on the host since: the new one's content
            // goes into it.
            (Some(libc::S_IFDIR), None) if want == libc::S_IFDIR => {}
            (None, _) if e.kind != ChangeKind::ModeChanged => {}
            (Some(k), _) => {
                return Err(format!(
                    "the host has a {} there now (the change was made over {})",
                    type_name(k),
                    e.old.map_or("nothing", type_name)
                ))
            }
            (None, _) => return Err("gone from the host since".into()),
        }
        if e.kind == ChangeKind::ModeChanged {
            return match want {
                libc::S_IFDIR => {
                    at.modes.push((e.rel.clone(), perm(new.mode)));
                    Ok(())
                }
                _ => at.chmod(&e.rel, want, perm(new.mode)),
            };
        }
        match want {
            libc::S_IFDIR => self.make_dir(at, e, name, there, &new),
            libc::S_IFREG | libc::S_IFLNK => self.place(at, e, name, there, &new),
            k => Err(format!("a {} is not committed", type_name(k))),
        }
    }

    /// A directory in place of what `there` is (nothing, a directory
    /// already, or the old type it replaces).
    fn make_dir(
        &mut self,
        at: &mut At,
        e: &Entry,
        name: &OsStr,
        there: Option<Stat>,
        new: &Stat,
    ) -> Result<(), Refusal> {
        let parent = e.rel.parent().unwrap_or(Path::new(""));
        at.modes.push((e.rel.clone(), perm(new.mode)));
        if there.is_some_and(|s| s.kind() == libc::S_IFDIR) {
            return Ok(());
        }
        if there.is_some() {
            let aside = self.temp();
            let h = at.host.dir(parent).map_err(|err| on_path(parent, err))?;
            remove(h, name, &aside, at.top, &e.rel)?;
        }
        let h = at.host.dir(parent).map_err(|err| on_path(parent, err))?;
        tree::mkdir(h, name, 0o700, &e.rel).map_err(|err| err.to_string())?;
        if !beneath(h, at.top) {
            let _ = tree::unlink(h, name, true, &e.rel);
            return Err(MOVED_OUT.into());
        }
        if self.root {
            if let Ok(p) = tree::fstat(h, parent) {
                let _ = tree::lchown(h, name, p.uid, p.gid, &e.rel);
            }
        }
        Ok(())
    }

    /// A file or symlink in place of what `there` is: made under a
    /// temporary name beside it, then renamed into place.
    fn place(
        &mut self,
        at: &mut At,
        e: &Entry,
        name: &OsStr,
        there: Option<Stat>,
        new: &Stat,
    ) -> Result<(), Refusal> {
        let parent = e.rel.parent().unwrap_or(Path::new(""));
        if new.kind() == libc::S_IFREG && new.size > self.max_file {
            return Err(format!(
                "{} bytes: larger than the cap on a committed file ({} bytes)",
                new.size, self.max_file
            ));
        }
        // What was there, if it is not replaced in one rename: a
        // directory (or anything, for a type change) goes first.
        if let Some(t) = there {
            if t.kind() == libc::S_IFDIR || e.kind == ChangeKind::TypeChanged {
                let aside = self.temp();
                let h = at.host.dir(parent).map_err(|err| on_path(parent, err))?;
                remove(h, name, &aside, at.top, &e.rel)?;
            }
        }
        let there = match e.kind {
            ChangeKind::TypeChanged => None,
            _ => there.filter(|t| t.kind() != libc::S_IFDIR),
        };
        let tmp = self.temp();
        // The content, from the upper layer.
        let content = match new.kind() {
            libc::S_IFREG => {
                let u = at.upper.dir(parent).map_err(|err| err.to_string())?;
                let st = tree::lstat(u, name, &e.rel).map_err(|err| err.to_string())?;
                if st.size > self.max_file {
                    return Err("grew past the cap on a committed file".into());
                }
                match open_upper_file(u, name, &e.rel, &st, sys::geteuid()) {
                    Ok(Some(fd)) => Content::File(fd),
                    Ok(None) => return Err("the upper layer's file cannot be read".into()),
                    Err(err) => return Err(err.to_string()),
                }
            }
            _ => {
                let target = match &e.target {
                    Some(t) => t.clone(),
                    None => {
                        let u = at.upper.dir(parent).map_err(|err| err.to_string())?;
                        tree::readlink(u, name, &e.rel).map_err(|err| err.to_string())?
                    }
                };
                Content::Symlink(target)
            }
        };
        let h = at.host.dir(parent).map_err(|err| on_path(parent, err))?;
        let owner = match (self.root, there) {
            (false, _) => None,
            (true, Some(t)) => Some((t.uid, t.gid)),
            (true, None) => tree::fstat(h, parent).ok().map(|p| (p.uid, p.gid)),
        };
        let mode = perm(new.mode) & APPLIED_BITS;
        if let Err(why) = make(h, &tmp, content, mode, owner, self.max_file, &e.rel) {
            let _ = tree::unlink(h, &tmp, false, &e.rel);
            return Err(why);
        }
        let how = match there {
            Some(_) => Rename::Exchange,
            None => Rename::NoReplace,
        };
        if let Err(err) = tree::rename(h, &tmp, h, name, how, &e.rel) {
            let _ = tree::unlink(h, &tmp, false, &e.rel);
            return Err(match err.errno {
                Errno::EEXIST => "the host has something there now".into(),
                Errno::ENOENT => "gone from the host since".into(),
                _ => err.to_string(),
            });
        }
        if !beneath(h, at.top) {
            // Undone: the old one back (or the new one gone), in the
            // directory that moved.
            match there {
                Some(_) => {
                    let _ = tree::rename(h, &tmp, h, name, Rename::Exchange, &e.rel);
                }
                None => {
                    let _ = tree::rename(h, name, h, &tmp, Rename::NoReplace, &e.rel);
                }
            }
            let _ = tree::unlink(h, &tmp, false, &e.rel);
            return Err(MOVED_OUT.into());
        }
        if there.is_some() {
            // The old file, now under the temporary name.
            let _ = tree::unlink(h, &tmp, false, &e.rel);
        }
        Ok(())
    }
}

/// The refusal of a change over what the host changed meanwhile.
const CHANGED_ON_HOST: &str =
    "changed on the host since the overlay was mounted: the host's is kept, not overwritten";

/// The most entries of a host directory looked at for a change before it
/// is removed (more: refused, as if changed).
const MAX_LOOKED_AT: usize = 100_000;

/// Whether `name` in `dir` (`st`, at `shown` beneath the top), or
/// anything beneath it when it is a directory, changed after `since`
/// other than as an earlier commit left it (`ours`). A change in the
/// clock tick `since` fell in, after it, is not seen (it came before the
/// overlay was mounted, a moment later); one before it is never taken for
/// the host's. A tree too
/// large or too deep to look through counts as changed.
fn changed_since(
    dir: &OwnedFd,
    name: &OsStr,
    st: Stat,
    (since, ours): (tree::Time, &BTreeMap<PathBuf, tree::Time>),
    shown: &Path,
    depth: usize,
) -> Result<bool, Refusal> {
    if st.ctime > since && ours.get(shown) != Some(&st.ctime) {
        return Ok(true);
    }
    if st.kind() != libc::S_IFDIR {
        return Ok(false);
    }
    if depth > super::walk::MAX_DEPTH {
        return Ok(true);
    }
    let d = tree::open_dir(dir, name, shown).map_err(|e| e.to_string())?;
    let names = match tree::entries(&d, MAX_LOOKED_AT, shown) {
        Ok(n) => n,
        Err(e) if e.errno == Errno::EFBIG => return Ok(true),
        Err(e) => return Err(e.to_string()),
    };
    for n in names {
        let p = shown.join(&n);
        let Some(s) = lstat_opt(&d, &n, &p)? else {
            // Gone meanwhile: a change.
            return Ok(true);
        };
        if changed_since(&d, &n, s, (since, ours), &p, depth + 1)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The refusal of a change whose directory left the host directory while
/// it was made.
const MOVED_OUT: &str =
    "its directory was moved out of the host directory during the commit: undone";

/// Where a commit stands in one overlay.
struct At<'a> {
    host: Cursor<'a>,
    upper: Cursor<'a>,
    /// The host directory's top (st_dev, st_ino).
    top: (u64, u64),
    /// Directories whose mode is set last: (path, mode).
    modes: Vec<(PathBuf, u32)>,
    /// See `Layer::since` and `Layer::ours`.
    since: Option<tree::Time>,
    ours: &'a BTreeMap<PathBuf, tree::Time>,
}

impl At<'_> {
    /// The mode of what is at `rel` (of type `kind`, else refused) set
    /// to `mode`, undone if its directory left the host directory.
    fn chmod(&mut self, rel: &Path, kind: u32, mode: u32) -> Result<(), Refusal> {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Ok(());
        };
        self.host.forget(rel);
        let h = self.host.dir(parent).map_err(|err| on_path(parent, err))?;
        let p = tree::open_path(h, name, rel).map_err(|err| err.to_string())?;
        let st = tree::fstat(&p, rel).map_err(|err| err.to_string())?;
        if st.kind() != kind {
            return Err(format!("the host has a {} there now", type_name(st.kind())));
        }
        sys::chmod_fd(&p, mode & APPLIED_BITS, rel).map_err(|err| err.to_string())?;
        if !beneath(h, self.top) {
            let _ = sys::chmod_fd(&p, perm(st.mode), rel);
            return Err(MOVED_OUT.into());
        }
        Ok(())
    }
}

/// What a temporary entry is made of.
enum Content {
    File(OwnedFd),
    Symlink(OsString),
}

/// The temporary entry `tmp` in `dir`: a copy of the upper file (at most
/// `max` bytes), or a symlink; its mode and owner set.
fn make(
    dir: &OwnedFd,
    tmp: &OsStr,
    content: Content,
    mode: u32,
    owner: Option<(u32, u32)>,
    max: u64,
    shown: &Path,
) -> Result<(), Refusal> {
    match content {
        Content::File(src) => {
            let fd = tree::create_file(dir, tmp, 0o600, shown).map_err(|err| err.to_string())?;
            let mut from = std::fs::File::from(src).take(max);
            let mut to = std::fs::File::from(fd);
            std::io::copy(&mut from, &mut to)
                .map_err(|err| SysError::io("copy", shown.display(), &err).to_string())?;
            let fd = OwnedFd::from(to);
            if let Some((uid, gid)) = owner {
                tree::fchown(&fd, uid, gid, shown).map_err(|err| err.to_string())?;
            }
            // After the owner: chown clears set-ID bits (none are set).
            tree::fchmod(&fd, mode, shown).map_err(|err| err.to_string())
        }
        Content::Symlink(target) => {
            tree::symlink(&target, dir, tmp, shown).map_err(|err| err.to_string())?;
            if let Some((uid, gid)) = owner {
                tree::lchown(dir, tmp, uid, gid, shown).map_err(|err| err.to_string())?;
            }
            Ok(())
        }
    }
}

/// Remove `name` from `dir`: renamed aside first (to `aside`), and only
/// when `dir` still lies beneath the top, removed (a directory with all it
/// holds, never following a symlink); else renamed back and refused.
fn remove(
    dir: &OwnedFd,
    name: &OsStr,
    aside: &OsStr,
    top: (u64, u64),
    shown: &Path,
) -> Result<(), Refusal> {
    match tree::rename(dir, name, dir, aside, Rename::NoReplace, shown) {
        Ok(()) => {}
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.to_string()),
    }
    if !beneath(dir, top) {
        let _ = tree::rename(dir, aside, dir, name, Rename::NoReplace, shown);
        return Err(MOVED_OUT.into());
    }
    remove_any(dir, aside, shown, 0).map_err(|e| e.to_string())
}

/// Remove `name` in `dir` and, when it is a directory, all beneath it.
pub(super) fn remove_any(
    dir: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    depth: usize,
) -> Result<(), SysError> {
    let st = tree::lstat(dir, name, shown)?;
    if st.kind() != libc::S_IFDIR {
        return tree::unlink(dir, name, false, shown);
    }
    if depth > 4 * super::walk::MAX_DEPTH {
        return Err(SysError {
            call: "unlinkat",
            arg: format!("{}: too deep", shown.display()),
            errno: Errno::ELOOP,
        });
    }
    let d = match tree::open_dir(dir, name, shown) {
        Ok(d) => d,
        Err(e) if e.errno == Errno::EACCES && st.uid == sys::geteuid() => {
            let p = tree::open_path(dir, name, shown)?;
            sys::chmod_fd(&p, 0o700, shown)?;
            tree::open_dir(dir, name, shown)?
        }
        Err(e) => return Err(e),
    };
    if st.uid == sys::geteuid() && perm(st.mode) & 0o700 != 0o700 {
        tree::fchmod(&d, 0o700, shown)?;
    }
    loop {
        let names = tree::entries(&d, 4096, shown).or_else(|e| match e.errno {
            Errno::EFBIG => tree::entries(&d, usize::MAX, shown),
            _ => Err(e),
        })?;
        if names.is_empty() {
            break;
        }
        for n in names {
            remove_any(&d, &n, &shown.join(&n), depth + 1)?;
        }
    }
    tree::unlink(dir, name, true, shown)
}

/// Whether the directory `dir` lies at or beneath `top` now: its `..`
/// walked up until the top is met, or the root.
fn beneath(dir: &OwnedFd, top: (u64, u64)) -> bool {
    let here = Path::new(".");
    let Ok(mut st) = tree::fstat(dir, here) else {
        return false;
    };
    let mut cur: Option<OwnedFd> = None;
    for _ in 0..4096 {
        if (st.dev, st.ino) == top {
            return true;
        }
        let Ok(up) = tree::parent(cur.as_ref().unwrap_or(dir), here) else {
            return false;
        };
        let Ok(ust) = tree::fstat(&up, here) else {
            return false;
        };
        if (ust.dev, ust.ino) == (st.dev, st.ino) {
            // The root: its `..` is itself.
            return false;
        }
        st = ust;
        cur = Some(up);
    }
    false
}

/// lstat, None when nothing is there.
fn lstat_opt(dir: &OwnedFd, name: &OsStr, shown: &Path) -> Result<Option<Stat>, Refusal> {
    match tree::lstat(dir, name, shown) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.errno == Errno::ENOENT => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Why a change's directory on the host could not be reached.
fn on_path(parent: &Path, e: SysError) -> Refusal {
    let at = |p: &str| match p.is_empty() {
        true => "the host directory".to_string(),
        false => p.to_string(),
    };
    match e.errno {
        Errno::ELOOP => format!("a symlink on the host path ({}): not followed", at(&e.arg)),
        Errno::ENOTDIR => format!("not a directory on the host path ({})", at(&e.arg)),
        Errno::ENOENT => format!("{}: missing on the host", at(&parent.display().to_string())),
        _ => e.to_string(),
    }
}
