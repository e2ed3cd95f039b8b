//! Capabilities: init keeps its (namespaced) capabilities across the switch
//! to the jail uid; the payload drops every set.

#![deny(unsafe_code)]

use crate::sys::{self, SysResult};

/// Become `uid`/`gid` inside the user namespace while keeping the
/// capabilities init needs to build the root.
pub fn become_jail_user(uid: u32, gid: u32) -> SysResult<()> {
    sys::set_keepcaps(true)?;
    sys::setresgid(gid)?;
    sys::setresuid(uid)?;
    sys::raise_effective_caps()?;
    sys::set_keepcaps(false)
}

/// Become `uid` and/or `gid` (those given) inside the user namespace,
/// keeping init's capabilities; which id failed ("uid" or "gid") and why.
pub fn become_ids(
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<(), (&'static str, u32, sys::SysError)> {
    let any = |e| ("capabilities", 0, e);
    sys::set_keepcaps(true).map_err(any)?;
    if let Some(g) = gid {
        sys::setresgid(g).map_err(|e| ("gid", g, e))?;
    }
    if let Some(u) = uid {
        sys::setresuid(u).map_err(|e| ("uid", u, e))?;
    }
    sys::raise_effective_caps().map_err(any)?;
    sys::set_keepcaps(false).map_err(any)
}

/// Empty bounding, ambient, inheritable, permitted and effective sets;
/// returns how many capabilities the bounding set still holds.
pub fn drop_all() -> SysResult<usize> {
    sys::drop_all_caps()
}

/// Only `keep` (bit N: capability N) in every set, inheritable and
/// ambient included unless `as_root` (see `Compat::caps_as_root`), and
/// only `bounding` in the bounding set.
pub fn keep_only(keep: u64, as_root: bool, bounding: u64) -> SysResult<usize> {
    sys::keep_only_caps(keep, !as_root, bounding)
}
