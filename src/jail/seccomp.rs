//! seccomp-bpf allowlist: compiled in the supervisor before clone, installed
//! last in the payload, right before execve.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;

use crate::policy::{SeccompAction, SeccompPolicy};
use crate::sys::SysResult;

/// A compiled policy, ready to install.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub action: SeccompAction,
    /// Number of syscalls the allowlist names.
    pub allowed: usize,
}

/// Compile `p` (placeholder until the allowlist lands).
pub fn compile(p: &SeccompPolicy) -> Result<Compiled, String> {
    Ok(Compiled {
        action: p.action,
        allowed: 0,
    })
}

/// Install in the calling thread; returns the user-notification fd in
/// learning mode.
pub fn install(_c: &Compiled) -> SysResult<Option<OwnedFd>> {
    Ok(None)
}

/// Send the learning-mode listener to the supervisor (placeholder).
pub fn hand_over_listener(_plan: &crate::plan::Plan, _listener: OwnedFd) {}

/// One line of JSON for the outcome.
pub fn detail_json(c: &Compiled) -> String {
    format!("{{\"allowed\":{}}}", c.allowed)
}
