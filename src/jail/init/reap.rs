//! init's wait for the payload: reap whatever dies (orphans come back to
//! init), forward signals, obey the supervisor's control bytes, and sample
//! the jail's peaks, until the payload ends or the supervisor is gone.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};

use nix::sys::signalfd::SignalFd;

use super::tree::{Tree, REAP_BATCH};
use super::SUPERVISOR_GONE;
use crate::jail::proto;
use crate::sys;

/// The wait loop's state.
pub(super) struct Waiter<'a> {
    /// The payload.
    child: i32,
    sfd: &'a SignalFd,
    ctl: RawFd,
    sample_ms: i32,
    /// Sample on every wake-up, not once per period: a limit's
    /// classification depends on it (the rlimit fallbacks ask for a short
    /// period).
    eager: bool,
    tree: &'a Tree,
    pub(super) peak: Peak,
    /// The workdir's tmpfs, when filling it ends the run.
    pub(super) workdir: Option<std::os::fd::OwnedFd>,
    /// More dead children than one batch reaps: poll without waiting, so
    /// the supervisor's messages are still read during a flood of orphans.
    backlog: bool,
    /// A FORWARD was read and its signal number not yet (the stream has no
    /// record boundaries).
    forward_next: bool,
}

impl<'a> Waiter<'a> {
    pub(super) fn new(
        child: i32,
        sfd: &'a SignalFd,
        ctl: RawFd,
        sample_ms: i32,
        tree: &'a Tree,
    ) -> Waiter<'a> {
        Waiter {
            child,
            sfd,
            ctl,
            sample_ms,
            eager: (0..=10).contains(&sample_ms),
            tree,
            peak: Peak::default(),
            workdir: None,
            backlog: false,
            forward_next: false,
        }
    }

    /// Reap until the payload ends; return its raw wait status, or None
    /// when the supervisor is gone.
    pub(super) fn run(&mut self) -> Option<i32> {
        // Sampling reads /proc for every process: on every wake-up only
        // when eager, otherwise once per period. The payload alone is one
        // task.
        if self.eager {
            self.peak.sample(self.tree);
        } else {
            self.peak.tasks = 1;
        }
        loop {
            let (signalled, control) = self.wait();
            if signalled {
                self.forward_signals()?;
            }
            if signalled || self.backlog {
                if let Some(status) = self.reap() {
                    return Some(status);
                }
            }
            if control {
                self.obey_control()?;
            }
        }
    }

    /// Sleep until a signal, a control byte or the end of the sample
    /// period, sampling as due: whether signals, control bytes wait.
    fn wait(&mut self) -> (bool, bool) {
        let mut fds = [
            libc::pollfd {
                fd: self.sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.ctl,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = if self.backlog { 0 } else { self.sample_ms };
        match sys::poll(&mut fds, timeout) {
            Ok(0) if self.backlog && !self.eager => {}
            Ok(0) => self.sample(),
            Ok(_) if self.eager => self.sample(),
            Ok(_) => {}
            // Should not happen; keep reaping without busy-looping.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
        (fds[0].revents != 0, fds[1].revents != 0)
    }

    /// The peaks, and whether the workdir is full: then every process of
    /// the jail is killed (its pid namespace's, init aside) and the run
    /// ends as `disk_limit`.
    fn sample(&mut self) {
        self.peak.sample(self.tree);
        if self.check_workdir() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-1),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Whether the workdir has just been found full (noted in the peaks).
    pub(super) fn check_workdir(&mut self) -> bool {
        let Some(w) = &self.workdir else { return false };
        if self.peak.workdir_full {
            return false;
        }
        let full = nix::sys::statfs::fstatfs(w)
            .is_ok_and(|s| s.blocks_available() == 0 || s.files_free() == 0);
        self.peak.workdir_full = full;
        full
    }

    /// Forward every pending signal but SIGCHLD to the payload. None: the
    /// supervisor is gone (the fallback's parent death signal).
    fn forward_signals(&self) -> Option<()> {
        while let Ok(Some(si)) = self.sfd.read_signal() {
            let sig = si.ssi_signo as i32;
            if sig == SUPERVISOR_GONE as i32 {
                return None;
            }
            if sig != libc::SIGCHLD {
                let _ = sys::kill(self.child, sig);
            }
        }
        Some(())
    }

    /// Reap the dead, in one batch (each waitpid costs the same however
    /// many orphans came back); the payload's status when it was among
    /// them.
    fn reap(&mut self) -> Option<i32> {
        if sys::ended_unreaped(self.child) {
            // Most of the jail at once, before the payload's zombie lets go
            // of the group's number.
            self.tree.kill_group();
            if let Ok(Some((_, st))) = sys::waitpid(self.child, true) {
                return Some(st);
            }
        }
        self.backlog = true;
        for _ in 0..REAP_BATCH {
            // While the payload's group still reaches most of the jail,
            // look before reaping: the payload may end during this batch,
            // and its group is killed before its zombie lets go of the
            // number (reaped blindly, the chase in Tree::end is all that
            // is left, slow against a flood of forkers).
            let next = match self.tree.has_group() {
                true => match sys::dead_child_unreaped() {
                    Ok(Some(pid)) => pid,
                    _ => {
                        self.backlog = false;
                        break;
                    }
                },
                false => -1,
            };
            if next == self.child {
                self.tree.kill_group();
            }
            match sys::waitpid(next, true) {
                Ok(Some((pid, st))) if pid == self.child => {
                    self.tree.forget_group();
                    return Some(st);
                }
                Ok(Some(_)) => {}
                _ => {
                    self.backlog = false;
                    break;
                }
            }
        }
        None
    }

    /// Read the supervisor's control bytes and do what they say. None: the
    /// supervisor is gone (in a pid namespace, PDEATHSIG kills us all at
    /// once; without one, it is caught in [`Waiter::forward_signals`]).
    fn obey_control(&mut self) -> Option<()> {
        let mut buf = [0u8; 64];
        let n = match sys::read(self.ctl, &mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            // A FORWARD and its signal number may arrive in two reads.
            if self.forward_next {
                self.forward_next = false;
                let _ = sys::kill(self.child, b as i32);
                continue;
            }
            match b {
                proto::TERM_ALL => self.tree.signal_all(libc::SIGTERM),
                proto::KILL_ALL => self.tree.signal_all(libc::SIGKILL),
                proto::FORWARD => self.forward_next = true,
                _ => {}
            }
        }
        Some(())
    }
}

/// Peaks seen by sampling the jail's /proc.
#[derive(Default)]
pub(super) struct Peak {
    pub(super) tasks: u64,
    pub(super) vm_bytes: u64,
    pub(super) workdir_full: bool,
}

impl Peak {
    /// Count the tasks (threads included) alive in the jail, excluding init,
    /// and the largest VmPeak of one process.
    fn sample(&mut self, tree: &Tree) {
        let pids: Vec<u32> = if tree.contained {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return;
            };
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .filter(|p| *p != 1)
                .collect()
        } else {
            tree.members()
        };
        let mut tasks = 0u64;
        for pid in pids {
            let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            for line in st.lines() {
                if let Some(v) = line.strip_prefix("Threads:") {
                    tasks += v.trim().parse::<u64>().unwrap_or(1);
                } else if let Some(v) = line.strip_prefix("VmPeak:") {
                    let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    self.vm_bytes = self.vm_bytes.max(kb * 1024);
                }
            }
        }
        self.tasks = self.tasks.max(tasks);
    }
}
