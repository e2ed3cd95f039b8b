//! Attributes of the calling process: prctl flags and resource limits.

use super::{err, last_errno, SysResult};

fn prctl(op: libc::c_int, a: libc::c_ulong, name: &'static str) -> SysResult<libc::c_int> {
    // SAFETY: the prctl operations used here take integer arguments only.
    let r = unsafe {
        libc::prctl(
            op,
            a,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err("prctl", name, last_errno());
    }
    Ok(r)
}

pub fn set_pdeathsig(sig: i32) -> SysResult<()> {
    prctl(
        libc::PR_SET_PDEATHSIG,
        sig as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    )
    .map(|_| ())
}

pub fn set_child_subreaper() -> SysResult<()> {
    prctl(libc::PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER").map(|_| ())
}

pub fn set_dumpable(on: bool) -> SysResult<()> {
    prctl(
        libc::PR_SET_DUMPABLE,
        on as libc::c_ulong,
        "PR_SET_DUMPABLE",
    )
    .map(|_| ())
}

pub fn set_keepcaps(on: bool) -> SysResult<()> {
    prctl(
        libc::PR_SET_KEEPCAPS,
        on as libc::c_ulong,
        "PR_SET_KEEPCAPS",
    )
    .map(|_| ())
}

pub fn set_no_new_privs() -> SysResult<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_NO_NEW_PRIVS,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err("prctl", "PR_SET_NO_NEW_PRIVS", last_errno());
    }
    Ok(())
}

/// Set a resource limit (soft, hard).
pub fn setrlimit2(
    res: nix::sys::resource::Resource,
    name: &'static str,
    soft: u64,
    hard: u64,
) -> SysResult<()> {
    nix::sys::resource::setrlimit(res, soft, hard)
        .or_else(|e| err("setrlimit", format!("{name}={soft}:{hard}"), e))
}

/// Name the calling thread (`PR_SET_NAME`: at most 15 bytes are kept;
/// execve replaces it with the program's name).
pub fn set_comm(name: &std::ffi::CStr) -> SysResult<()> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes from the pointer; `name` is one and outlives the call.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            name.as_ptr() as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err("prctl", "PR_SET_NAME", last_errno());
    }
    Ok(())
}

/// `n` random bytes from the kernel (getrandom(2), never blocking once
/// the pool is initialised).
pub fn random_bytes<const N: usize>() -> SysResult<[u8; N]> {
    let mut b = [0u8; N];
    // The raw call: the static musl build links libc's getrandom as a weak
    // symbol that resolves to nothing (a call to address 0).
    // SAFETY: b is a writable buffer of N bytes.
    let r = unsafe { libc::syscall(libc::SYS_getrandom, b.as_mut_ptr(), N, 0) };
    if r != N as libc::c_long {
        return err("getrandom", N, last_errno());
    }
    Ok(b)
}
