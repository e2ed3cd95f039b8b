//! Under the rlimit rung, the jail's SysV IPC and POSIX message queues
//! count against `--memory` too: their memory belongs to no process (a
//! SysV shm segment outlives every attach, a queued message is kernel
//! memory), so RLIMIT_AS does not see it. The jail has an IPC namespace of
//! its own, whose limits init writes before the payload starts
//! (`jail::ipc`): an eighth of `--memory` is shared between them, and the
//! rest of `--memory` goes to RLIMIT_AS and the tmpfs mounts.
//!
//! The bounds, each a worst case of the kernel's own accounting:
//!
//! * SysV shm: `kernel.shmall` (pages, the namespace's total) and
//!   `kernel.shmmax` half the budget; `kernel.shmmni` segments.
//! * POSIX message queues: `RLIMIT_MSGQUEUE` a quarter (the kernel charges
//!   each queue's full size and its message headers to it when it is
//!   made); `fs.mqueue.queues_max` queues.
//! * SysV message queues: `kernel.msgmni` queues of `kernel.msgmnb` bytes;
//!   a queue holds at most msgmnb messages, each a kmalloc of its header
//!   (48 bytes) and text rounded up to a power of two, so at worst
//!   [`MSG_QUEUE_WORST`] bytes.
//! * SysV semaphores: `kernel.sem` (`SEMMSL SEMMNS SEMOPM SEMMNI`), a few
//!   dozen KiB at most ([`SEM_WORST`]).

/// The bytes of a page (shmall counts pages).
const PAGE: u64 = 4096;
/// kernel.msgmnb (and msgmax): bytes one SysV message queue may hold.
const MSGMNB: u64 = 4096;
/// One SysV queue at worst: msgmnb one-byte messages of a 64-byte
/// allocation each, bounded by 98 bytes per byte of text (2 × (48 + s)
/// for s ≥ 1), and the queue itself.
const MSG_QUEUE_WORST: u64 = 98 * MSGMNB + 1024;
/// kernel.sem: 250 semaphores per set, 1024 in all, 32 operations per
/// semop, 32 sets.
const SEM: (u64, u64, u64, u64) = (250, 1024, 32, 32);
/// 1024 semaphores of 64 bytes and 32 sets of at most 1 KiB each.
const SEM_WORST: u64 = 1024 * 64 + 32 * 1024;
/// SysV shm segments; POSIX queues.
const SHMMNI: u64 = 128;
const MQ_QUEUES: u64 = 16;

/// The limits of the jail's IPC namespace under the rlimit rung.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcBounds {
    /// kernel.shmmax and kernel.shmall (in bytes here; pages when written).
    pub shm: u64,
    /// RLIMIT_MSGQUEUE.
    pub mq: u64,
    /// kernel.msgmni (kernel.msgmnb is [`MSGMNB`]).
    pub msg_queues: u64,
}

impl IpcBounds {
    /// The bounds for `budget` bytes; `mq_hard` is RLIMIT_MSGQUEUE's hard
    /// limit now, which an unprivileged payload cannot raise.
    pub fn for_budget(budget: u64, mq_hard: u64) -> IpcBounds {
        let shm = (budget / 2) / PAGE * PAGE;
        let mq_share = budget / 4;
        let mq = mq_share.min(mq_hard);
        let msg_queues = (budget - shm - mq_share).saturating_sub(SEM_WORST) / MSG_QUEUE_WORST;
        IpcBounds {
            shm,
            mq,
            msg_queues,
        }
    }

    /// The most memory they let a payload hold.
    pub fn total(&self) -> u64 {
        self.shm + self.mq + self.msg_queues * MSG_QUEUE_WORST + SEM_WORST
    }

    /// The sysctls init writes in the jail's IPC namespace: (path under
    /// /proc/sys, value).
    pub fn sysctls(&self) -> Vec<(&'static str, String)> {
        let (msl, mns, opm, mni) = SEM;
        vec![
            ("kernel/shmmax", self.shm.to_string()),
            ("kernel/shmall", (self.shm / PAGE).to_string()),
            ("kernel/shmmni", SHMMNI.to_string()),
            ("kernel/msgmax", MSGMNB.to_string()),
            ("kernel/msgmnb", MSGMNB.to_string()),
            ("kernel/msgmni", self.msg_queues.to_string()),
            ("kernel/sem", format!("{msl} {mns} {opm} {mni}")),
            ("fs/mqueue/queues_max", MQ_QUEUES.to_string()),
        ]
    }

    /// `SysV shm 4 MiB (kernel.shmall) + …`, for the outcome.
    pub fn describe(&self) -> String {
        format!(
            "SysV IPC and POSIX message queues {} (SysV shm {} in at most {SHMMNI} segments, \
             {} SysV message queues of {MSGMNB} bytes, {} semaphores, POSIX queues {} by RLIMIT_MSGQUEUE)",
            mib(self.total()),
            mib(self.shm),
            self.msg_queues,
            SEM.1,
            mib(self.mq),
        )
    }
}

/// The share of `--memory` the IPC namespace gets.
pub fn budget(memory: u64) -> u64 {
    memory / 8
}

/// A size as the outcome's `why` says it.
pub(super) fn mib(b: u64) -> String {
    if b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_fit_their_budget() {
        for memory in [4u64 << 20, 32 << 20, 64 << 20, 1 << 30, 100 << 30] {
            let b = IpcBounds::for_budget(budget(memory), u64::MAX);
            assert!(b.total() <= budget(memory), "{memory}: {b:?}");
            assert_eq!(b.shm % PAGE, 0);
        }
        let b = IpcBounds::for_budget(8 << 20, u64::MAX);
        assert_eq!((b.shm, b.mq, b.msg_queues), (4 << 20, 2 << 20, 4));
        // RLIMIT_MSGQUEUE's hard limit (800 KiB by default) is kept.
        let low = IpcBounds::for_budget(8 << 20, 819200);
        assert_eq!((low.mq, low.msg_queues), (819200, 4));
        let s = b.sysctls();
        assert!(s.contains(&("kernel/shmall", "1024".into())), "{s:?}");
        assert!(s.contains(&("kernel/msgmni", "4".into())), "{s:?}");
    }
}
