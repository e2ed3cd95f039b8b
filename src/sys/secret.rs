//! A secret taken out of this process's environment (`--secret`) before
//! clone: its value moved into a sealed memfd, never copied into this
//! process's memory, and its bytes in the environment overwritten, so that
//! a clone of this process (the jail's init) never holds it.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use super::{err, memfd_with, Errno, SysResult};

/// The value of the environment variable `name`, moved into a sealed,
/// close-on-exec memfd; its bytes in the environment overwritten with
/// zeros and the variable removed. None when it is not set.
///
/// # Safety
///
/// No other thread may exist (the supervisor's plan, made before clone,
/// in a single-threaded process): like std's `set_var`, it reads and
/// changes the environment, which another thread could be reading.
pub unsafe fn take_env(name: &str) -> SysResult<Option<OwnedFd>> {
    let Ok(c) = CString::new(name) else {
        return err("getenv", name, Errno::EINVAL);
    };
    // SAFETY: getenv with a NUL-terminated name that outlives the call; no
    // other thread exists (the contract above), so the environment does
    // not change while the pointer is used.
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: getenv's result is a NUL-terminated string in the
    // environment, valid until the environment changes (not before the
    // unsetenv below).
    let len = unsafe { libc::strlen(p) };
    // SAFETY: `len` bytes at `p`, as strlen counted them; read only until
    // they are overwritten below, and not kept.
    let value = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let fd = memfd_with("stockade-secret", value);
    for i in 0..len {
        // SAFETY: the variable's own bytes, `len` of them from `p`, in
        // writable memory (the initial stack, or the heap where setenv put
        // it); volatile so that the compiler keeps the writes.
        unsafe { std::ptr::write_volatile(p.add(i).cast::<u8>(), 0) };
    }
    // SAFETY: as for getenv.
    unsafe { libc::unsetenv(c.as_ptr()) };
    fd.map(Some)
}
