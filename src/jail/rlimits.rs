//! Resource limits applied in the payload before anything else narrows it.

#![deny(unsafe_code)]

use nix::sys::resource::Resource;

use crate::sys::{self, SysResult};

/// One rlimit to set (soft, hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: Resource,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

/// Apply every limit, in order.
pub fn apply(limits: &[Rlimit]) -> SysResult<()> {
    for l in limits {
        sys::setrlimit2(l.resource, l.name, l.soft, l.hard)?;
    }
    Ok(())
}
