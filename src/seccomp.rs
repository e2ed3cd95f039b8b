//! seccomp-bpf allowlist: compiled before clone (parent side, pure), and
//! installed last in the payload, right before execve (`jail::filter`).
//!
//! One filter, read top to bottom:
//!
//! 1. the *ABI guard*: kill the process for a foreign architecture (the
//!    i386 `int 0x80` entry included) and for x32 syscall numbers
//!    (`nr | 0x40000000`), whatever the policy's action; answer `clone3`
//!    with ENOSYS: its flags live in memory a filter cannot read, and
//!    ENOSYS makes libc fall back to `clone`, whose flags are checked;
//! 2. the *allowlist*: the syscalls of the policy's groups and single
//!    names, some with argument filters; anything else gets the policy's
//!    action: EPERM, kill, or (learning mode) a user notification the
//!    supervisor answers with "continue". It is a binary search over runs
//!    of syscall numbers (about eight comparisons for any number), so the
//!    kernel's per-syscall verdict cache is filled quickly when the filter
//!    is attached; a linear chain of one comparison per syscall made that
//!    cost a millisecond and more. The few argument-checked syscalls jump
//!    to a block compiled by seccompiler.
//!
//! One filter rather than two: the kernel translates and JIT-compiles each
//! filter when it is attached, a fixed cost of about 100 µs a filter here.
//!
//! Files: `policy` (what a policy asks: [`SeccompPolicy`]), `syscalls` (the
//! number table and the named groups), `rules` (the argument filters),
//! `compile` (policy → [`Compiled`]), `bpf` (the code generator: guard,
//! search tree, argument blocks). The compiled program is this file's.

#![deny(unsafe_code)]

pub mod syscalls;

mod bpf;
mod compile;
mod error;
pub mod paths;
mod policy;
mod rules;
pub(crate) use bpf::sock_filters;
pub(crate) use rules::CLONE_NS_FLAGS;

pub use compile::*;
pub use error::*;
pub use policy::*;

/// A compiled policy, ready to install.
#[derive(Clone)]
pub struct Compiled {
    pub action: SeccompAction,
    /// Number of syscalls the allowlist names.
    pub allowed: usize,
    /// The groups the policy named, for the outcome.
    pub groups: Vec<String>,
    /// The allowlist, with the mismatch action filled in for an install
    /// without a supervisor channel (EPERM, kill, or user-notif for Learn).
    allowlist: Vec<libc::sock_filter>,
    /// Indices of the mismatch returns in `allowlist`.
    mismatch_at: Vec<usize>,
    /// The syscall number the filter sends to the supervisor's listener
    /// although the allowlist allows it (`connect` in the fallback: see
    /// observe::unix).
    pub mediated: Option<i32>,
    /// Learning mode with `learn_paths`: the path-taking syscalls the
    /// allowlist allows, sent to the listener so that it records their
    /// paths (ascending).
    pub watched: Vec<i32>,
    /// The rlimit rung's allocation meter: the RLIMIT_AS the supervisor
    /// compares each metered `mmap` and `mremap` with (see
    /// [`compile_metered`]).
    pub meter: Option<u64>,
    /// Indices of the meter's user-notify returns in `allowlist`.
    metered_at: Vec<usize>,
}

impl Compiled {
    /// The program to install. With a listener in kill or errno mode,
    /// every mismatch goes to the supervisor (which kills the jail and
    /// names the syscall, or answers EPERM and records it) instead of
    /// being judged in the kernel.
    pub fn program(&self, listener: bool) -> Vec<libc::sock_filter> {
        let mut prog = self.allowlist.clone();
        if !listener {
            // Nobody to hear the meter: what it would hear of runs as is.
            for &i in &self.metered_at {
                prog[i].k = libc::SECCOMP_RET_ALLOW;
            }
        }
        if listener && self.action != SeccompAction::Learn {
            // Kill mode: the supervisor hears of it and kills the jail;
            // errno mode: it answers with EPERM and records a denial.
            for &i in &self.mismatch_at {
                prog[i].k = libc::SECCOMP_RET_USER_NOTIF;
            }
        }
        prog
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("action", &self.action)
            .field("allowed", &self.allowed)
            .field("groups", &self.groups)
            .field("instructions", &self.allowlist.len())
            .finish()
    }
}

impl Compiled {
    /// The payload should hand a user-notification listener to the
    /// supervisor: in every mode. Learning mode needs it; in kill mode the
    /// supervisor learns which syscall was refused; in errno mode it
    /// answers each refused syscall with EPERM and records it as a denial
    /// (allowed syscalls never reach it). Without a channel (no
    /// supervisor to hear it), kill and errno mode are enforced in the
    /// kernel alone.
    pub fn wants_listener(&self) -> bool {
        true
    }

    /// Instructions in the filter.
    pub fn len(&self) -> usize {
        self.allowlist.len()
    }
}

/// The action's name in the outcome's seccomp layer.
pub fn action_name(a: SeccompAction) -> &'static str {
    match a {
        SeccompAction::Errno => "errno",
        SeccompAction::Kill => "kill",
        SeccompAction::Learn => "learn",
    }
}

#[cfg(test)]
mod mediate_tests;
#[cfg(test)]
mod tests;
