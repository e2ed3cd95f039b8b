//! The seccomp filter each command of a session gets on top of the jail's:
//! no signal to the agent (its pid, its process group, `kill(-1)`), no
//! pidfd for it, no `pidfd_send_signal` (a /proc/PID directory fd is a
//! pidfd) and no `F_SETSIG` (SIGIO as any signal). Whatever else a command
//! may do, it cannot SIGKILL or SIGSTOP the session's agent. (Every
//! catchable signal the agent has blocked.) `tkill`, which could name one
//! of the agent's threads, is refused too.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule,
};

/// fcntl's F_SETSIG (Linux; not in the libc crate).
const F_SETSIG: i32 = 10;

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
