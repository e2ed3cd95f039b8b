//! Raw kernel calls for the landlock layer (the only unsafe code for it).
//!
//! Every Landlock call of stockade goes through here, whoever enforces the
//! ruleset: a cold jail's payload (`jail::landlock::apply`), a fork
//! server's child (`forked`) and a session's guard; every domain is made
//! by one call, `restrict`'s. The `landlock` crate only names the rights
//! (`jail::landlock` decides with it what to ask for); this file is what
//! asks the kernel.

use super::{err, last_errno, SysResult};

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const CREATE_RULESET_VERSION: libc::c_ulong = 1 << 0;

/// The Landlock ABI version of the running kernel (1, 2, …).
///
/// Errors: `ENOSYS` when the kernel is built without Landlock (or a seccomp
/// filter hides the call), `EOPNOTSUPP` when it is built in but not enabled
/// at boot (`lsm=`).
pub fn abi_version() -> SysResult<i32> {
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the
    // kernel reads no memory and only returns an integer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0 as libc::size_t,
            CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        return err(
            "landlock_create_ruleset",
            "NULL, 0, LANDLOCK_CREATE_RULESET_VERSION",
            last_errno(),
        );
    }
    Ok(r as i32)
}

/// `LANDLOCK_SCOPE_SIGNAL` (ABI 6): a domain's processes may signal only
/// processes of the same domain or of domains nested in it.
pub const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr` as of ABI 6.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// A ruleset that handles no access right and only scopes `scoped`
/// (`SCOPE_SIGNAL`): a domain made from it takes nothing away from file
/// or network access. Errors: `EINVAL` below ABI 6 (no scopes), `ENOSYS`
/// or `EOPNOTSUPP` without Landlock.
pub fn scope_only_ruleset(scoped: u64) -> SysResult<std::os::fd::OwnedFd> {
    ruleset(0, 0, scoped)
}

/// `LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF` (ABI 7): the new domain's
/// refusals of the calling program (before it executes another) are not
/// logged to audit.
pub const RESTRICT_SELF_LOG_SAME_EXEC_OFF: u32 = 1 << 0;

/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (ABI 7): the new domain's
/// refusals are logged to audit after the calling program executes
/// another too (by default they are not: a sandboxer's payload would go
/// unrecorded).
pub const RESTRICT_SELF_LOG_NEW_EXEC_ON: u32 = 1 << 1;

/// Put the calling thread, and every process it starts from now on, in a
/// new Landlock domain of `ruleset`, nested in its own
/// (`landlock_restrict_self` with `flags`). Only the calling thread: the
/// process's other threads keep their domain. Needs no_new_privs.
/// Errors: `EINVAL` for a flag this kernel does not know, `E2BIG` past
/// the nesting limit.
pub fn restrict_self(ruleset: &std::os::fd::OwnedFd, flags: u32) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    restrict(ruleset.as_raw_fd(), flags)
        .or_else(|errno| err("landlock_restrict_self", format!("flags {flags:#x}"), errno))
}

/// In `cmd`'s child, before exec: what [`restrict_self`] does, with
/// `flags`, there (a session's command: the child, forked from a process
/// with threads, may only make the call, so its error is the errno alone).
/// The child must have no_new_privs (every jail's payload has).
pub fn restrict_before_exec(
    cmd: &mut std::process::Command,
    ruleset: std::sync::Arc<std::os::fd::OwnedFd>,
    flags: u32,
) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let hook = move || {
        restrict(ruleset.as_raw_fd(), flags)
            .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))
    };
    // SAFETY: the hook runs in the forked child before exec and makes one
    // system call, allocating nothing and taking no lock.
    unsafe { cmd.pre_exec(hook) };
}

/// `landlock_restrict_self(ruleset, flags)`: the one call that makes every
/// Landlock domain of stockade's, whoever enforces it ([`restrict_self`],
/// [`restrict_before_exec`]). Allocates nothing and takes no lock (a
/// forked child's pre-exec hook makes it); the errno on failure.
fn restrict(ruleset: std::os::fd::RawFd, flags: u32) -> Result<(), super::Errno> {
    // SAFETY: integer arguments only (an fd the caller owns, flags).
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            ruleset,
            flags as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_path_beneath_attr` (packed, as the kernel reads it).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_NET_PORT` (ABI 4).
const RULE_NET_PORT: libc::c_int = 2;

/// `struct landlock_net_port_attr` (packed, as the kernel reads it).
#[repr(C, packed)]
struct NetPort {
    allowed_access: u64,
    port: u64,
}

/// A ruleset handling `fs` and `net` access rights (the kernel's bits) and
/// scoping `scoped`, as the kernel's `landlock_create_ruleset` makes it:
/// every bit must be one the running kernel knows (`EINVAL` otherwise).
pub fn ruleset(fs: u64, net: u64, scoped: u64) -> SysResult<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: net,
        scoped,
    };
    // The kernel reads only as much of the struct as the ABI it is: the
    // size of its oldest struct when nothing past `handled_access_fs` is
    // asked, so that kernels before ABI 4 accept it.
    let size = match (net, scoped) {
        (0, 0) => std::mem::size_of::<u64>(),
        (_, 0) => 2 * std::mem::size_of::<u64>(),
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: attr is a live, initialised struct at least `size` long; the
    // kernel only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err(
            "landlock_create_ruleset",
            format!("fs {fs:#x}, net {net:#x}, scoped {scoped:#x}"),
            last_errno(),
        );
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
}

/// Grant `access` (the kernel's fs bits) beneath the file or directory
/// `parent` (an O_PATH fd, or any fd of the inode) in `ruleset`. `shown`
/// names it in the error.
pub fn add_path_rule(
    ruleset: &std::os::fd::OwnedFd,
    access: u64,
    parent: &impl std::os::fd::AsFd,
    shown: &std::path::Path,
) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    let attr = PathBeneath {
        allowed_access: access,
        parent_fd: parent.as_fd().as_raw_fd(),
    };
    // SAFETY: attr is a live, initialised struct of the layout the rule
    // type names; the kernel only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return err("landlock_add_rule", shown.display(), last_errno());
    }
    Ok(())
}

/// Grant `access` (the kernel's net bits: `LANDLOCK_ACCESS_NET_*`) to TCP
/// `port` in `ruleset`. Errors: `EINVAL` when `ruleset` does not handle
/// every bit of `access` (or handles no net right at all, below ABI 4).
pub fn add_port_rule(ruleset: &std::os::fd::OwnedFd, access: u64, port: u16) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    let attr = NetPort {
        allowed_access: access,
        port: u64::from(port),
    };
    // SAFETY: attr is a live, initialised struct of the layout the rule
    // type names; the kernel only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_NET_PORT,
            &attr as *const NetPort,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return err(
            "landlock_add_rule",
            format!("tcp port {port}, access {access:#x}"),
            last_errno(),
        );
    }
    Ok(())
}

/// A rule's path as `O_PATH | O_NOFOLLOW`: a rule is anchored on the mount
/// point itself, never on whatever a symlink there points to.
pub fn open_rule(path: &std::path::Path) -> SysResult<std::os::fd::OwnedFd> {
    nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| err("open", path.display(), e))
}
