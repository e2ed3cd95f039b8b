//! A forked run's pid 1 and its end record: once the child has forked
//! its payload it stays as the run's init, reaping, passing signals on and
//! looking at the workdir, and writes the payload's [`End`] on the setup
//! pipe for the server.

use std::os::fd::{AsRawFd, RawFd};

use nix::sys::signal::Signal;

/// The signals the run's init reads: a child's end, and what it passes on.
pub(super) const INIT_SIGNALS: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The payload's end as its init writes it on the setup pipe: `x`, its
/// wait status, then what the run used (every process init reaped: user
/// and system µs, the largest RSS in KiB), little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub status: i32,
    pub user_us: u64,
    pub sys_us: u64,
    pub maxrss_kb: u64,
    /// The workdir's tmpfs was found full (no block or no inode left):
    /// init then killed the run, or the payload ended on its own with it
    /// full (the run's `disk_limit`, as a cold jail's init finds it).
    pub workdir_full: bool,
}

impl End {
    pub const LEN: usize = 30;

    /// `status`, with what init's reaped children used.
    fn of(status: i32, workdir_full: bool) -> End {
        let ru = crate::rusage_children();
        let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
        End {
            status,
            user_us: us(ru.ru_utime),
            sys_us: us(ru.ru_stime),
            maxrss_kb: ru.ru_maxrss.max(0) as u64,
            workdir_full,
        }
    }

    pub fn encode(&self) -> [u8; End::LEN] {
        let mut b = [0u8; End::LEN];
        b[0] = b'x';
        b[1..5].copy_from_slice(&self.status.to_le_bytes());
        b[5..13].copy_from_slice(&self.user_us.to_le_bytes());
        b[13..21].copy_from_slice(&self.sys_us.to_le_bytes());
        b[21..29].copy_from_slice(&self.maxrss_kb.to_le_bytes());
        b[29] = u8::from(self.workdir_full);
        b
    }

    /// The record at the start of `b`, if whole.
    pub fn decode(b: &[u8]) -> Option<End> {
        let b = b.get(..End::LEN).filter(|b| b[0] == b'x')?;
        let w = |r: &[u8]| u64::from_le_bytes(r.try_into().unwrap_or_default());
        Some(End {
            status: i32::from_le_bytes(b[1..5].try_into().ok()?),
            user_us: w(&b[5..13]),
            sys_us: w(&b[13..21]),
            maxrss_kb: w(&b[21..29]),
            workdir_full: b[29] == 1,
        })
    }
}

/// pid 1 of a forked run, as a jail's init: holding nothing of the run's
/// (no stdio, no capability), it reaps every process that ends, passes
/// on the signals it is sent (the server's, from outside the namespace,
/// to every process of the run, as the deadline's SIGTERM reaches a cold
/// jail's; one from inside to the payload), and once the payload has
/// ended kills the rest, writes `x` and the payload's wait status on the
/// setup pipe, and exits. Never returns.
pub(super) fn init(payload: i32, setup: RawFd) -> ! {
    let sfd = match crate::signalfd_for(&INIT_SIGNALS) {
        Ok(f) => f,
        Err(_) => {
            let _ = crate::kill(-1, libc::SIGKILL);
            crate::exit_now(125)
        }
    };
    // SAFETY: init never returns to the interpreter, whose values own the
    // fds closed here.
    let _ = unsafe { crate::close_all_but(&[setup, sfd.as_raw_fd()]) };
    let _ = crate::drop_all_caps();
    let _ = crate::set_no_new_privs();
    // Reap first, then wait: a payload that ended before the signalfd was
    // made left no SIGCHLD to read (setting SIGCHLD's disposition to
    // SIG_DFL discards one pending), so each turn looks before it sleeps.
    // The workdir (init's cwd, the run's own tmpfs) is looked at on each
    // turn and at least every WORKDIR_LOOK_MS: full, the run is killed.
    let mut full = false;
    loop {
        let mut ended = None;
        while let Ok(Some((pid, st))) = crate::waitpid(-1, true) {
            if pid == payload {
                ended = Some(st);
            }
        }
        full = full || workdir_full();
        if let Some(st) = ended {
            let _ = crate::kill(-1, libc::SIGKILL);
            while crate::waitpid(-1, false).is_ok() {}
            let _ = crate::write_all(setup, &End::of(st, full).encode());
            crate::exit_now(0)
        }
        if full {
            let _ = crate::kill(-1, libc::SIGKILL);
        }
        let mut fds = [libc::pollfd {
            fd: sfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = crate::poll(&mut fds, WORKDIR_LOOK_MS);
        while let Ok(Some(si)) = sfd.read_signal() {
            let sig = si.ssi_signo as i32;
            if sig == libc::SIGCHLD {
                continue;
            }
            // From outside the namespace (the server) the sender's pid
            // reads 0: every process of the run; else the payload.
            let to = if si.ssi_pid == 0 { -1 } else { payload };
            let _ = crate::kill(to, sig);
        }
    }
}

/// How often a forked run's init looks at its workdir while nothing else
/// wakes it.
const WORKDIR_LOOK_MS: i32 = 100;

/// Whether the workdir (the cwd) has no block or no inode left.
fn workdir_full() -> bool {
    nix::sys::statvfs::statvfs(".")
        .is_ok_and(|s| s.blocks_available() == 0 || s.files_available() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_reads_back_as_it_was_written() {
        let end = End {
            status: 9,
            user_us: 1,
            sys_us: 2,
            maxrss_kb: 3,
            workdir_full: true,
        };
        assert_eq!(End::decode(&end.encode()), Some(end));
        assert_eq!(End::decode(&end.encode()[..End::LEN - 1]), None);
    }
}
