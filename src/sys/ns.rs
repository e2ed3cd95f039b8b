//! Joining and making namespaces from the calling process, and the UTS
//! namespace's hostname.

use std::os::fd::OwnedFd;

use super::{err, SysResult};

/// A new cgroup namespace rooted at the caller's current cgroup.
pub fn unshare_cgroupns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .or_else(|e| err("unshare", "CLONE_NEWCGROUP", e))
}

/// A new user namespace for the caller (bwrap's check that creating one
/// is refused: success is the failure there).
pub fn unshare_userns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .or_else(|e| err("unshare", "CLONE_NEWUSER", e))
}

/// Move the calling thread into the network namespace `ns`.
pub fn enter_netns(ns: &OwnedFd) -> SysResult<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .or_else(|e| err("setns", "CLONE_NEWNET", e))
}

/// The UTS namespace's hostname.
pub fn sethostname(name: &str) -> SysResult<()> {
    nix::unistd::sethostname(name).or_else(|e| err("sethostname", name, e))
}
