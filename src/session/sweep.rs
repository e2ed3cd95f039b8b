//! Killing what a command left behind when it ends, processes that left
//! its process group (setsid, setpgid) included.
//!
//! The agent is a child subreaper, so every orphan of a command becomes its
//! child. In the jail's own pid namespace (the agent is pid 2),
//! `kill(-1, SIGKILL)` reaches every process but the agent and init; in the
//! fallback started by root, the jail runs as a leased host uid of its own,
//! and `kill(-1)` reaches exactly that uid's processes. In the fallback
//! started by an unprivileged user, that uid is the caller's too: only the
//! command's process group is killed, and a process that left it lives on
//! until the session ends (the jail's init kills its whole tree then).

use crate::sys;

/// How much of a command's tree the agent can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The jail's pid namespace: everything but the agent and init.
    PidNamespace,
    /// A host uid leased to this jail alone.
    OwnUid,
    /// Only the command's process group.
    Group,
}

impl Reach {
    /// Where this agent runs; `leased`: the fallback's uid range.
    pub(crate) fn detect(leased: (u32, u32)) -> Reach {
        let uid = sys::getuid();
        if sys::getpid() == 2 {
            Reach::PidNamespace
        } else if uid != 0
            && uid >= leased.0
            && u64::from(uid) < u64::from(leased.0) + u64::from(leased.1)
        {
            Reach::OwnUid
        } else {
            Reach::Group
        }
    }

    /// Kill every process of the command (group `pgid`) and reap them:
    /// every process but the agent (and init) with `PidNamespace` and
    /// `OwnUid`, the group with `Group`.
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
