//! What keeps each command of a session away from the agent: it can
//! neither signal it (SIGKILL and SIGSTOP included) nor ptrace it.
//!
//! Every command runs in a session of its own (`setsid`: no setpgid can
//! join the agent's process group, so no `kill(0)` reaches it) and, where
//! the kernel has Landlock ABI 6, in a Landlock domain of its own scoped
//! for signals ([`Isolation::Domain`]). The kernel then refuses every
//! signal from a command's processes to a process outside that domain,
//! whatever names it (pid, thread id, process group, `kill(-1)`, pidfd,
//! /proc directory fd, `F_SETOWN`), and every ptrace access
//! (`PTRACE_ATTACH`/`SEIZE`, `process_vm_writev`, /proc/PID/mem): Landlock
//! lets a domain trace only its own or nested domains.
//!
//! The agent itself enters a domain of the same ruleset first, nested in
//! the jail's, and every command's is nested in it: the agent is outside
//! every command's domain, and its own signals reach only the commands'
//! processes. So the sweep's `kill(-1)` kills what the commands left and
//! nothing else of the jail's uid: not the fallback's connect agent
//! (`jail::unix_agent`, in the jail's domain, forked before the agent
//! ran), which a sweep by uid used to kill after the first command,
//! leaving every later `connect()` refused (EACCES); nor, in the fallback
//! started by an unprivileged user, that user's other processes.
//!
//! Below ABI 6 (kernels before 6.12) there is no signal scope, and each
//! command gets a seccomp filter on top of the jail's instead
//! ([`Isolation::Guard`]): no signal to the agent's pid, its process group
//! or `kill(-1)`, no pidfd for it, no `tkill`, no `pidfd_send_signal` (a
//! /proc/PID directory fd is a pidfd) and no `F_SETSIG`. A filter compares
//! numbers it was compiled with, so it cannot name the agent's other
//! threads: `kill` or `rt_sigqueueinfo` of one of their ids reaches the
//! agent there. Ptrace is refused there by the agent being not dumpable
//! (same uid, no capability), and by the jail's Landlock domain's ptrace
//! rule only across jails.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::Arc;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule,
};

use crate::sys;

/// fcntl's F_SETSIG (Linux; not in the libc crate).
const F_SETSIG: i32 = 10;

/// A command's domain's `landlock_restrict_self` flags: none, the
/// kernel's default, under which nothing the domain refuses after the
/// command's exec is logged to audit (its refusals are the guard at work,
/// not the jail's denials, which the jail's own domain logs where the
/// supervisor reads them).
const COMMAND_FLAGS: u32 = 0;

/// How commands are kept off the agent.
pub(crate) enum Isolation {
    /// A Landlock domain per command, scoped for signals (this ruleset),
    /// nested in the agent's own of the same ruleset.
    Domain(Arc<OwnedFd>),
    /// The seccomp filter (no Landlock signal scope on this kernel).
    Guard(Arc<Vec<libc::sock_filter>>),
}

impl Isolation {
    /// The strongest this kernel gives the agent of pid `agent` and
    /// process group `pgid`. With the signal scope the calling thread (the
    /// agent's only one yet: Landlock restricts the calling thread, and
    /// the threads and processes it starts later) enters its own domain.
    pub(crate) fn detect(agent: i32, pgid: i32) -> Result<Isolation, String> {
        // landlock_restrict_self needs it (every jail's payload has it
        // already; a policy without it still gets it here).
        sys::set_no_new_privs().map_err(|e| e.to_string())?;
        if let Ok(fd) = sys::landlock::scope_only_ruleset(sys::landlock::SCOPE_SIGNAL) {
            if enter(&fd).is_ok() {
                return Ok(Isolation::Domain(Arc::new(fd)));
            }
        }
        Ok(Isolation::Guard(Arc::new(program(agent, pgid)?)))
    }

    /// The agent's signals reach the commands' processes and no other
    /// (the agent is in a signal-scoped domain of its own).
    pub(crate) fn scoped(&self) -> bool {
        matches!(self, Isolation::Domain(_))
    }

    /// `cmd`'s child, before exec: its own session, then the domain or
    /// the filter (last).
    ///
    /// The domain is made by the same call as the jail's
    /// (`sys::landlock`'s one `landlock_restrict_self`), but it is not the
    /// jail's: the jail's is decided from the plan's rules
    /// (`jail::landlock::decide`) and handles file and network rights,
    /// once per jail, in its payload; this one handles no right and only
    /// scopes signals (it takes nothing the jail's grants away), is made
    /// by the agent once per session, and entered per command in the
    /// command's child, nested in the agent's and so in the jail's. Its
    /// flags are the kernel's default ([`COMMAND_FLAGS`]).
    pub(crate) fn apply(&self, cmd: &mut Command) {
        sys::setsid_before_exec(cmd);
        match self {
            Isolation::Domain(rs) => {
                sys::landlock::restrict_before_exec(cmd, rs.clone(), COMMAND_FLAGS)
            }
            Isolation::Guard(f) => sys::seccomp::filter_before_exec(cmd, f.clone()),
        }
    }
}

/// The agent into a domain of `ruleset`. Its refusals (the sweep's
/// `kill(-1)` meets every other process of the jail's uid) are expected:
/// not logged to audit where the kernel can be asked not to (ABI 7).
fn enter(ruleset: &OwnedFd) -> Result<(), sys::SysError> {
    use sys::landlock::{restrict_self, RESTRICT_SELF_LOG_SAME_EXEC_OFF};
    match restrict_self(ruleset, RESTRICT_SELF_LOG_SAME_EXEC_OFF) {
        Err(e) if e.errno == sys::Errno::EINVAL => restrict_self(ruleset, 0),
        r => r,
    }
}

/// The filter for an agent of pid `agent` and process group `pgid`.
pub(crate) fn program(agent: i32, pgid: i32) -> Result<Vec<libc::sock_filter>, String> {
    let arg_is = |i: u8, v: i32| -> Result<SeccompRule, String> {
        let c = SeccompCondition::new(i, Len::Dword, Op::Eq, u64::from(v as u32))
            .map_err(|e| e.to_string())?;
        SeccompRule::new(vec![c]).map_err(|e| e.to_string())
    };
    let to_agent = |i: u8| -> Result<Vec<SeccompRule>, String> { Ok(vec![arg_is(i, agent)?]) };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_kill,
        vec![arg_is(0, agent)?, arg_is(0, -1)?, arg_is(0, -pgid)?],
    );
    rules.insert(libc::SYS_tgkill, to_agent(0)?);
    rules.insert(libc::SYS_rt_sigqueueinfo, to_agent(0)?);
    rules.insert(libc::SYS_rt_tgsigqueueinfo, to_agent(0)?);
    rules.insert(libc::SYS_pidfd_open, to_agent(0)?);
    rules.insert(libc::SYS_tkill, Vec::new());
    rules.insert(libc::SYS_pidfd_send_signal, Vec::new());
    rules.insert(libc::SYS_fcntl, vec![arg_is(1, F_SETSIG)?]);
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(crate::seccomp::sock_filters(&prog))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_guard_compiles() {
        let p = super::program(2, 2).unwrap();
        assert!(p.len() > 10);
    }
}
