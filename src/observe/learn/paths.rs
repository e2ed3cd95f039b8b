//! Learning mode's record of the paths a command used: each path-taking
//! syscall (`seccomp::paths`) reaches the listener, which reads the path
//! from the caller's memory (/proc/TID/mem), makes it absolute against its
//! working directory or directory fd (/proc/TID/cwd, /proc/TID/fd/N), and
//! lets the syscall continue.
//!
//! What is read can change between our read and the kernel's (another
//! thread may rewrite the string): this is a record for learning, never a
//! decision. A path is kept only when the caller was still blocked in the
//! syscall after it was read (so the thread id named it all along).

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use crate::seccomp::paths::{flags_write, PathSyscall, PathUse};
use crate::sys;

/// The most distinct paths kept; beyond, counted in `more`.
pub const MAX_PATHS: usize = 100_000;

/// What a command did to a path, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Look,
    Read,
    Write,
    /// Created, removed or renamed: its directory changes.
    Entry,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Look => "look",
            Access::Read => "read",
            Access::Write => "write",
            Access::Entry => "entry",
        }
    }
}

/// The paths heard, each with the strongest access seen.
#[derive(Debug, Default)]
pub struct PathLog {
    pub seen: BTreeMap<PathBuf, Access>,
    pub more: u64,
}

impl PathLog {
    /// Record the paths of notification `n` of syscall `sc` (the caller is
    /// blocked in it; the caller of this replies afterwards).
    pub fn record(&mut self, listener: &OwnedFd, n: &sys::seccomp::Notif, sc: &PathSyscall) {
        let Ok(mem) = std::fs::File::open(format!("/proc/{}/mem", n.pid)) else {
            return;
        };
        let access = match sc.how {
            PathUse::Look => Access::Look,
            PathUse::Read => Access::Read,
            PathUse::Write => Access::Write,
            PathUse::Entry => Access::Entry,
            PathUse::Flags(i) => open_access(n.args[i]),
            PathUse::How(i) => {
                let mut f = [0u8; 8];
                if mem.read_exact_at(&mut f, n.args[i]).is_err() {
                    return;
                }
                open_access(u64::from_ne_bytes(f))
            }
        };
        let mut found = Vec::with_capacity(sc.args.len());
        for a in sc.args {
            let Some(raw) = c_string(&mem, n.args[a.path]) else {
                continue;
            };
            if raw.is_empty() {
                continue;
            }
            let dirfd = a.dirfd.map(|i| n.args[i] as i32);
            if let Some(p) = absolute(n.pid, dirfd, Path::new(std::ffi::OsStr::from_bytes(&raw))) {
                found.push(p);
            }
        }
        if !sys::seccomp::notif_id_valid(listener, n.id) {
            return;
        }
        for p in found {
            self.add(p, access);
        }
    }

    fn add(&mut self, p: PathBuf, access: Access) {
        if let Some(a) = self.seen.get_mut(&p) {
            *a = (*a).max(access);
        } else if self.seen.len() < MAX_PATHS {
            self.seen.insert(p, access);
        } else {
            self.more += 1;
        }
    }
}

/// An open's access by its flags: O_CREAT may add an entry.
fn open_access(flags: u64) -> Access {
    if flags & libc::O_CREAT as u64 != 0 {
        Access::Entry
    } else if flags_write(flags) {
        Access::Write
    } else {
        Access::Read
    }
}

/// The NUL-terminated string at `addr` in `mem`, at most PATH_MAX bytes,
/// read a page at a time (the next page may not be mapped).
fn c_string(mem: &std::fs::File, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let room = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; room];
        let n = mem.read_at(&mut buf, at).ok().filter(|n| *n > 0)?;
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// `p` made absolute against thread `tid`'s working directory (`dirfd`
/// None or AT_FDCWD) or its directory fd, and `.` and `..` taken out
/// lexically; None when the base is not a path (a pipe, a deleted
/// directory).
fn absolute(tid: u32, dirfd: Option<i32>, p: &Path) -> Option<PathBuf> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        let base = match dirfd {
            None | Some(libc::AT_FDCWD) => std::fs::read_link(format!("/proc/{tid}/cwd")),
            Some(fd) => std::fs::read_link(format!("/proc/{tid}/fd/{fd}")),
        }
        .ok()?;
        if !base.is_absolute() || base.as_os_str().as_bytes().ends_with(b" (deleted)") {
            return None;
        }
        base.join(p)
    };
    Some(normalize(&joined))
}

/// `.` and `..` taken out of an absolute path without looking at the
/// filesystem (`/..` is `/`).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../../x")), Path::new("/x"));
        assert_eq!(normalize(Path::new("/")), Path::new("/"));
    }

    #[test]
    fn strongest_access_is_kept() {
        let mut l = PathLog::default();
        l.add("/a".into(), Access::Read);
        l.add("/a".into(), Access::Look);
        l.add("/a".into(), Access::Write);
        l.add("/a".into(), Access::Read);
        assert_eq!(l.seen[Path::new("/a")], Access::Write);
    }

    #[test]
    fn a_relative_path_is_resolved_against_the_threads_directory() {
        let me = std::process::id();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(me, None, Path::new("x/../y")), Some(cwd.join("y")));
        let d = std::fs::File::open("/usr").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&d);
        assert_eq!(
            absolute(me, Some(fd), Path::new("lib")),
            Some(PathBuf::from("/usr/lib"))
        );
    }
}
