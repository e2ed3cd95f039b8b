//! Under the rlimit rung, `--memory` is shared between the address space
//! and the jail's tmpfs mounts: tmpfs pages belong to no process, so
//! RLIMIT_AS alone would let a payload hold its limit in memory *plus*
//! every tmpfs it can write (/tmp, /dev/shm, the workdir, `--tmpfs`, an
//! overlay's upper layer).
//! At most a quarter of `--memory` goes to the tmpfs mounts (shrunk in
//! proportion when they ask for more; a tmpfs without a size counts as
//! asking for all of it), RLIMIT_AS gets the rest: what a payload can hold
//! stays within `--memory`. With an IPC namespace of the jail's own, an
//! eighth of `--memory` goes to its SysV IPC and POSIX message queues
//! (see [`super::ipc_share`]); without one (the fallback) they are the
//! host's, and the outcome says they are not counted.

use std::path::Path;

use super::super::mode::Kind;
use super::super::root::{tmpfs_size, with_tmpfs_size, RootStep};
use super::super::{Plan, Writes};
use super::ipc_share::{self, mib, IpcBounds};

/// The smallest size a shrunk tmpfs keeps.
const MIN_TMPFS: u64 = 1 << 20;

/// How `--memory` was shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// RLIMIT_AS: `--memory` less the tmpfs mounts.
    pub rlimit_as: u64,
    /// The tmpfs mounts and their sizes after sharing (jail paths).
    pub mounts: Vec<(String, u64)>,
    /// Whether any was shrunk.
    pub shrunk: bool,
    /// The bounds of the jail's IPC namespace (None: the fallback has
    /// none, its SysV IPC is the host's).
    pub ipc: Option<IpcBounds>,
}

impl Share {
    pub fn tmpfs_total(&self) -> u64 {
        self.mounts.iter().map(|(_, s)| s).sum()
    }

    /// `RLIMIT_AS 48 MiB + tmpfs 16 MiB (/tmp 8 MiB, …) = --memory 64 MiB`.
    pub fn describe(&self, memory: u64) -> String {
        let list: Vec<String> = self
            .mounts
            .iter()
            .map(|(p, s)| format!("{p} {}", mib(*s)))
            .collect();
        let ipc = match &self.ipc {
            Some(b) => format!(" + {}", b.describe()),
            None => String::new(),
        };
        let host = match &self.ipc {
            Some(_) => "",
            None => "; SysV IPC and POSIX message queues are the host's (no IPC namespace of the jail's own): not counted",
        };
        format!(
            "the jail's tmpfs mounts count against --memory: RLIMIT_AS {} + tmpfs {} ({}){ipc} = {}{}{host}",
            mib(self.rlimit_as),
            mib(self.tmpfs_total()),
            list.join(", "),
            mib(memory),
            if self.shrunk {
                " (tmpfs sizes shrunk to a quarter of --memory)"
            } else {
                ""
            }
        )
    }
}

/// The sizes `sizes` (0: unbounded) shrunk in proportion to fit `budget`.
pub fn fit(sizes: &[u64], budget: u64) -> Vec<u64> {
    let want = |s: u64| if s == 0 { budget } else { s };
    let total: u128 = sizes.iter().map(|s| want(*s) as u128).sum();
    if total <= budget as u128 {
        return sizes.iter().map(|s| want(*s)).collect();
    }
    sizes
        .iter()
        .map(|s| {
            let scaled = (want(*s) as u128 * budget as u128 / total) as u64;
            (scaled & !4095).max(MIN_TMPFS)
        })
        .collect()
}

/// Share `memory` between RLIMIT_AS and the plan's tmpfs mounts (the
/// jail's, or the fallback's run directory when it gets a tmpfs), writing
/// the new sizes into the plan.
pub(in crate::plan) fn share(memory: u64, plan: &mut Plan, run_dir: bool) -> Share {
    let mut slots: Vec<(String, u64)> = Vec::new();
    let kind = plan.mode.kind();
    for step in &plan.root.steps {
        match step {
            RootStep::Tmpfs { dst, data } => slots.push((jail_path(dst), tmpfs_size(data))),
            RootStep::Dev { dst, shm, .. } => {
                slots.push((jail_path(&dst.join("shm")), tmpfs_size(shm)))
            }
            RootStep::Overlay {
                dst,
                writes: Writes::Tmpfs(t),
                ..
            } => slots.push((jail_path(dst), tmpfs_size(t))),
            _ => {}
        }
    }
    if kind == Kind::Fallback && run_dir {
        slots.push(("the run directory".into(), plan.limits.tmp_size));
    }
    let sizes: Vec<u64> = slots.iter().map(|(_, s)| *s).collect();
    let fitted = fit(&sizes, memory / 4);
    let shrunk = sizes.iter().zip(&fitted).any(|(a, b)| a != b);
    let mut it = fitted.iter();
    for step in &mut plan.root.steps {
        match step {
            RootStep::Tmpfs { dst, data } => {
                let s = *it.next().unwrap_or(&0);
                *data = with_tmpfs_size(data, s);
                if dst == Path::new("tmp") {
                    plan.limits.tmp_size = s;
                }
            }
            RootStep::Dev { shm, .. } => *shm = with_tmpfs_size(shm, *it.next().unwrap_or(&0)),
            RootStep::Overlay {
                writes: Writes::Tmpfs(t),
                ..
            } => *t = with_tmpfs_size(t, *it.next().unwrap_or(&0)),
            _ => {}
        }
    }
    if let (Kind::Fallback, true, Some(s)) = (kind, run_dir, it.next()) {
        plan.limits.tmp_size = *s;
    }
    let mounts: Vec<(String, u64)> = slots
        .into_iter()
        .zip(fitted)
        .map(|((p, _), s)| (p, s))
        .collect();
    let total: u64 = mounts.iter().map(|(_, s)| s).sum();
    let mq_hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MSGQUEUE)
        .map_or(0, |(_, hard)| hard);
    // Only the jail's own IPC namespace has limits of the run's.
    let ipc = match kind {
        Kind::Namespaced => Some(IpcBounds::for_budget(ipc_share::budget(memory), mq_hard)),
        Kind::Fallback => None,
    };
    plan.limits.ipc_sysctls = ipc.as_ref().map(|b| b.sysctls()).unwrap_or_default();
    let ipc_total = ipc.as_ref().map_or(0, IpcBounds::total);
    Share {
        rlimit_as: memory
            .saturating_sub(total)
            .saturating_sub(ipc_total)
            .max(MIN_TMPFS),
        mounts,
        shrunk,
        ipc,
    }
}

fn jail_path(rel: &Path) -> String {
    format!("/{}", rel.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_that_fit_a_quarter_keep_their_size_else_shrink_in_proportion() {
        assert_eq!(fit(&[4 << 20, 8 << 20], 16 << 20), vec![4 << 20, 8 << 20]);
        // 128 + 64 + 128 MiB asked of a 16 MiB budget.
        let got = fit(&[128 << 20, 64 << 20, 128 << 20], 16 << 20);
        assert!(got.iter().sum::<u64>() <= 16 << 20, "{got:?}");
        assert_eq!(got[0], got[2]);
        assert!(got[1] < got[0]);
        // A tmpfs without a size asks for the whole budget.
        let got = fit(&[0, 16 << 20], 16 << 20);
        assert!(got.iter().sum::<u64>() <= 16 << 20, "{got:?}");
        assert!(got[0] > 0);
        // Never below the floor.
        assert_eq!(fit(&[1 << 30], 4096), vec![MIN_TMPFS]);
    }

    #[test]
    fn the_description_adds_up() {
        let s = Share {
            rlimit_as: 48 << 20,
            mounts: vec![("/tmp".into(), 8 << 20), ("/dev/shm".into(), 8 << 20)],
            shrunk: true,
            ipc: None,
        };
        assert_eq!(
            s.describe(64 << 20),
            "the jail's tmpfs mounts count against --memory: RLIMIT_AS 48 MiB + tmpfs 16 MiB \
             (/tmp 8 MiB, /dev/shm 8 MiB) = 64 MiB (tmpfs sizes shrunk to a quarter of --memory); \
             SysV IPC and POSIX message queues are the host's (no IPC namespace of the jail's own): not counted"
        );
        let with_ipc = Share {
            rlimit_as: 40 << 20,
            ipc: Some(IpcBounds::for_budget(8 << 20, u64::MAX)),
            ..s
        };
        let line = with_ipc.describe(64 << 20);
        assert!(
            line.contains(" + SysV IPC and POSIX message queues ")
                && line.contains("SysV shm 4 MiB")
                && !line.contains("host's"),
            "{line}"
        );
    }
}
