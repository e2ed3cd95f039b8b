//! Raw kernel calls for the cgroup layer.
//!
//! Everything else in the cgroup layer is plain file I/O on cgroupfs through
//! `std::fs`; only the permission probe needs the C library. No `unsafe` here:
//! nix wraps the call.

use std::path::Path;

use nix::fcntl::{AtFlags, AT_FDCWD};
use nix::unistd::{faccessat, AccessFlags};

/// Whether the *effective* uid/gid (and capabilities) may write `path`:
/// `faccessat(AT_FDCWD, path, W_OK, AT_EACCESS)`. cgroupfs checks writes to
/// its files with the same inode permission rules, so this predicts whether
/// a later `write(2)` or `mkdir(2)` is refused with EACCES.
pub fn writable(path: &Path) -> bool {
    faccessat(AT_FDCWD, path, AccessFlags::W_OK, AtFlags::AT_EACCESS).is_ok()
}
