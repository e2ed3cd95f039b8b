//! Resource limits applied in the payload before anything else narrows it.

#![deny(unsafe_code)]

use crate::plan::Rlimit;
use crate::sys::{self, SysResult};

/// Apply every limit, in order.
pub fn apply(limits: &[Rlimit]) -> SysResult<()> {
    for l in limits {
        sys::setrlimit2(l.resource, l.name, l.soft, l.hard)?;
    }
    Ok(())
}
