//! The syscalls that name a path, and where: learning mode sends them to
//! the supervisor's listener, which reads the path and records whether it
//! was looked at, read or written (`observe::learn`).

/// What a syscall does to the paths it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathUse {
    /// Looks at it (stat, access, readlink, chdir).
    Look,
    /// Reads or executes it.
    Read,
    /// Changes its contents or attributes (truncate, chmod, chown, utimes).
    Write,
    /// Creates, removes or renames it: an entry of its directory changes.
    Entry,
    /// open/openat: read or write by the `O_ACCMODE` and `O_CREAT`,
    /// `O_TRUNC` bits of argument `n`.
    Flags(usize),
    /// openat2: the same bits in the first field of the `open_how` that
    /// argument `n` points to.
    How(usize),
}

/// One path a syscall names: argument `path`, relative to the directory
/// fd in argument `dirfd` (or to the working directory without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathArg {
    pub dirfd: Option<usize>,
    pub path: usize,
}

/// A syscall that names paths.
#[derive(Debug)]
pub struct PathSyscall {
    pub name: &'static str,
    pub args: &'static [PathArg],
    pub how: PathUse,
}

const fn at(dirfd: usize, path: usize) -> PathArg {
    PathArg {
        dirfd: Some(dirfd),
        path,
    }
}

const fn cwd(path: usize) -> PathArg {
    PathArg { dirfd: None, path }
}

const fn sc(name: &'static str, args: &'static [PathArg], how: PathUse) -> PathSyscall {
    PathSyscall { name, args, how }
}

use PathUse::{Entry, Flags, How, Look, Read, Write};

/// Every syscall that names a path the learned profile may have to bind
/// (the legacy ones exist on x86_64 only; names this architecture lacks
/// are passed over).
pub const PATH_SYSCALLS: &[PathSyscall] = &[
    sc("open", &[cwd(0)], Flags(1)),
    sc("openat", &[at(0, 1)], Flags(2)),
    sc("openat2", &[at(0, 1)], How(2)),
    sc("creat", &[cwd(0)], Entry),
    sc("execve", &[cwd(0)], Read),
    sc("execveat", &[at(0, 1)], Read),
    sc("stat", &[cwd(0)], Look),
    sc("lstat", &[cwd(0)], Look),
    sc("newfstatat", &[at(0, 1)], Look),
    sc("statx", &[at(0, 1)], Look),
    sc("access", &[cwd(0)], Look),
    sc("faccessat", &[at(0, 1)], Look),
    sc("faccessat2", &[at(0, 1)], Look),
    sc("readlink", &[cwd(0)], Look),
    sc("readlinkat", &[at(0, 1)], Look),
    sc("chdir", &[cwd(0)], Look),
    sc("mkdir", &[cwd(0)], Entry),
    sc("mkdirat", &[at(0, 1)], Entry),
    sc("rmdir", &[cwd(0)], Entry),
    sc("unlink", &[cwd(0)], Entry),
    sc("unlinkat", &[at(0, 1)], Entry),
    sc("rename", &[cwd(0), cwd(1)], Entry),
    sc("renameat", &[at(0, 1), at(2, 3)], Entry),
    sc("renameat2", &[at(0, 1), at(2, 3)], Entry),
    sc("link", &[cwd(1)], Entry),
    sc("linkat", &[at(2, 3)], Entry),
    sc("symlink", &[cwd(1)], Entry),
    sc("symlinkat", &[at(1, 2)], Entry),
    sc("mknod", &[cwd(0)], Entry),
    sc("mknodat", &[at(0, 1)], Entry),
    sc("truncate", &[cwd(0)], Write),
    sc("chmod", &[cwd(0)], Write),
    sc("fchmodat", &[at(0, 1)], Write),
    sc("fchmodat2", &[at(0, 1)], Write),
    sc("chown", &[cwd(0)], Write),
    sc("lchown", &[cwd(0)], Write),
    sc("fchownat", &[at(0, 1)], Write),
    sc("utime", &[cwd(0)], Write),
    sc("utimes", &[cwd(0)], Write),
    sc("futimesat", &[at(0, 1)], Write),
    sc("utimensat", &[at(0, 1)], Write),
];

/// The entry for syscall number `nr` on this architecture.
pub fn path_syscall(nr: i64) -> Option<&'static PathSyscall> {
    let nr = u32::try_from(nr).ok()?;
    PATH_SYSCALLS
        .iter()
        .find(|s| super::syscalls::number(s.name) == Some(nr))
}

/// The numbers of [`PATH_SYSCALLS`] on this architecture.
pub fn path_numbers() -> impl Iterator<Item = u32> {
    PATH_SYSCALLS
        .iter()
        .filter_map(|s| super::syscalls::number(s.name))
}

/// Whether open flags `flags` write: a write access mode, or creating or
/// truncating.
pub fn flags_write(flags: u64) -> bool {
    let acc = flags & libc::O_ACCMODE as u64;
    acc == libc::O_WRONLY as u64
        || acc == libc::O_RDWR as u64
        || flags & (libc::O_CREAT | libc::O_TRUNC) as u64 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_known_or_legacy() {
        for s in PATH_SYSCALLS {
            let legacy = [
                "open",
                "creat",
                "stat",
                "lstat",
                "access",
                "readlink",
                "mkdir",
                "rmdir",
                "unlink",
                "rename",
                "link",
                "symlink",
                "mknod",
                "chmod",
                "chown",
                "lchown",
                "utime",
                "utimes",
                "futimesat",
                "newfstatat",
            ];
            assert!(
                super::super::syscalls::number(s.name).is_some() || legacy.contains(&s.name),
                "{}",
                s.name
            );
        }
        assert!(path_syscall(super::super::syscalls::number("openat").unwrap() as i64).is_some());
    }

    #[test]
    fn open_flags_say_read_or_write() {
        assert!(!flags_write(libc::O_RDONLY as u64));
        assert!(!flags_write(
            (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY) as u64
        ));
        assert!(flags_write(libc::O_WRONLY as u64));
        assert!(flags_write(libc::O_RDWR as u64));
        assert!(flags_write((libc::O_RDONLY | libc::O_CREAT) as u64));
    }
}
