//! The one place that talks to the kernel directly.
//!
//! Every raw call goes through a function here whose error names the call and
//! its argument (`pivot_root("/tmp/.stockade-root"): EPERM`). This is the only
//! module allowed to contain `unsafe`; each block says why it is sound.
//!
//! One file per concern; every item is re-exported here, so callers name
//! it `sys::X` whichever file holds it:
//!
//! - `error`: [`SysError`], [`SysResult`], [`errno_text`];
//! - `clone`: [`clone_jail`] (clone3 / clone into new namespaces);
//! - `vfork`: [`spawn_vfork`] (a child sharing our memory until execve);
//! - `process`: fork, exit, kill, pidfds, waiting, execve;
//! - `signals`: masks, dispositions, signalfd;
//! - `fd`: pipes, read/write, dup, fd flags, closing in bulk;
//! - `creds`: uids, gids, capabilities;
//! - `attrs`: prctl flags and rlimits of the calling process;
//! - `cmdline`: what /proc/PID/cmdline shows;
//! - `open`: openat2 with RESOLVE_*, fstat, getxattr;
//! - `mount`: mount, open_tree, mount_setattr, pivot_root, mountinfo paths;
//! - `ns`: unshare, setns, hostname;
//! - `arena`: the allocator of a process that runs one jail;
//! - and the per-layer modules below, named by path: `at` (calls relative
//!   to a directory fd), `cgroup`, `fdpass`, `landlock`, `netns`, `seccomp`,
//!   `secret` (a value moved out of the environment), `tree` (a directory
//!   tree nobody trusts: an overlay's upper layer, the host directory its
//!   changes are committed to).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use nix::errno::Errno;

#[allow(unsafe_code)]
pub mod arena;
#[allow(unsafe_code)]
pub mod at;
#[allow(unsafe_code)]
pub mod audit;
#[allow(unsafe_code)]
pub mod cgroup;
#[allow(unsafe_code)]
pub mod fdpass;
#[allow(unsafe_code)]
pub mod forked;
#[allow(unsafe_code)]
pub mod landlock;
#[allow(unsafe_code)]
pub mod netns;
pub mod procfs;
#[allow(unsafe_code)]
pub mod seccomp;
#[allow(unsafe_code)]
pub mod secret;
#[allow(unsafe_code)]
pub mod tree;

#[allow(unsafe_code)]
mod attrs;
#[allow(unsafe_code)]
mod clone;
#[allow(unsafe_code)]
mod cmdline;
#[allow(unsafe_code)]
mod creds;
mod error;
#[allow(unsafe_code)]
mod fd;
#[allow(unsafe_code)]
mod inotify;
#[allow(unsafe_code)]
mod mount;
#[allow(unsafe_code)]
mod ns;
#[allow(unsafe_code)]
mod open;
#[allow(unsafe_code)]
mod process;
#[allow(unsafe_code)]
mod signals;
#[allow(unsafe_code)]
mod vfork;

pub use attrs::*;
pub use clone::*;
pub use cmdline::*;
pub use creds::*;
pub use error::*;
pub use fd::*;
pub use inotify::*;
pub use mount::*;
pub use ns::*;
pub use open::*;
pub use process::*;
pub use signals::*;
pub use vfork::*;

fn cpath(p: &Path) -> CString {
    // Paths reaching here come from Policy/Plan, which rejects NUL bytes.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|_| CString::from(c"/nonexistent"))
}
