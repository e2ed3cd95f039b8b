//! Killing what a command left behind when it ends, processes that left
//! its process group (setsid, setpgid) included.
//!
//! The agent is a child subreaper, so every orphan of a command becomes its
//! child. In the jail's own pid namespace (the agent is pid 2),
//! `kill(-1, SIGKILL)` reaches every process but the agent and init. Where
//! the agent is in a Landlock domain of its own scoped for signals
//! (`guard`, Landlock ABI 6), `kill(-1)` reaches only that domain and
//! those nested in it: the commands' processes, whatever they did, and
//! nothing else that has the jail's uid (the fallback's connect agent,
//! `jail::unix_agent`; the caller's other processes in the fallback started
//! by an unprivileged user). Without either, no `kill(-1)` is safe (even
//! a uid leased to the jail alone is the connect agent's too): only the
//! command's process group is killed, and a process that left it lives on
//! until the session ends (the jail's init kills its whole tree then).

use crate::sys;

/// How much of a command's tree the agent can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The jail's pid namespace: everything but the agent and init.
    PidNamespace,
    /// The agent's signal-scoped Landlock domain: every process of the
    /// commands, nothing else.
    Domain,
    /// Only the command's process group.
    Group,
}

impl Reach {
    /// Where this agent runs; `scoped`: the agent is in a signal-scoped
    /// domain of its own (`Isolation::scoped`).
    pub(crate) fn detect(scoped: bool) -> Reach {
        if sys::getpid() == 2 {
            Reach::PidNamespace
        } else if scoped {
            Reach::Domain
        } else {
            Reach::Group
        }
    }

    /// Kill every process of the command (group `pgid`) and reap them:
    /// every process the agent can signal but itself (and init) with
    /// `PidNamespace` and `Domain`, the group with `Group`.
    pub(crate) fn sweep(self, pgid: i32) {
        let _ = sys::kill(-pgid, libc::SIGKILL);
        if self == Reach::Group {
            while let Ok(Some(_)) = sys::waitpid(-pgid, false) {}
            while let Ok(Some(_)) = sys::waitpid(-1, true) {}
            return;
        }
        loop {
            let _ = sys::kill(-1, libc::SIGKILL);
            // Every process left was killed; its orphans are ours.
            match sys::waitpid(-1, false) {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    }
}
