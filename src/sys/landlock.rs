//! Raw kernel calls for the landlock layer (the only unsafe code for it).
//!
//! The ruleset itself is built with the `landlock` crate; the one thing it
//! does not expose before enforcement is the running kernel's ABI version,
//! which the layer needs to decide what it asks for and to report it.

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
