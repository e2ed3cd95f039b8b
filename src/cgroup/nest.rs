//! A fork server's cgroups on the unified hierarchy: the zygote jail's
//! run cgroup made the parent of its children's, so that the zygote forks
//! each child straight into its run cgroup (clone3 `CLONE_INTO_CGROUP`,
//! `sys::fork_into_cgroup`) instead of the server moving it there. A move
//! takes the kernel's host-wide threadgroup lock for writing (an RCU
//! grace period without `favordynmods`): every forked run of the host
//! queued on it.
//!
//! The layout, `Z` being the zygote jail's run cgroup (the root of the
//! zygote's cgroup namespace):
//!
//! * `Z/zygote`: every process of the zygote's jail, with the template's
//!   limits (they were Z's; what the zygote had charged before its move
//!   stays charged to Z: cgroup v2 moves no charge);
//! * `Z/run-<pid>-<starttime>-<seq>`: one per child, with its run's limits;
//! * `Z` itself: no limit (each run's cgroup holds its own; a pool's runs
//!   beside Z were not bounded together either) and no
//!   `memory.oom.group` (an OOM above a run kills that run, not the pool).
//!
//! The kernel lets the zygote clone into `Z/run-…` when it may write that
//! cgroup's `cgroup.procs` and Z's (their common ancestor) and, under
//! `nsdelegate`, both are inside its cgroup namespace (rooted at Z). Where
//! the jail's host uid is not ours (root's jails map to an unprivileged
//! uid), those files are handed to it (chown): what that uid may do with
//! them is move processes between cgroups inside Z. A child cannot: its
//! cgroup namespace is rooted at its own run cgroup (it unshares one once
//! born there) and it holds no fd of cgroupfs.
//!
//! Z, with all that is in it, goes with the zygote's jail (its supervisor
//! removes the run cgroup and what is below it).

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::error::{CgroupError, FileOp};
use super::files::{words, write_file};
use super::prepare::{enable, next_run_name, write_limits, Controllers};
use super::{Controller, Enforced, Request, RunCgroup, Setup, V2Dir, RUN_PREFIX};
use crate::sys;

/// The leaf of a nest that holds the zygote's jail.
pub const NEST_LEAF: &str = "zygote";

/// A zygote jail's run cgroup, once made the parent of its children's.
#[derive(Debug)]
pub struct Nest {
    dir: PathBuf,
    /// The controllers the nest enabled for its children (its
    /// cgroup.subtree_control, read once).
    on: Vec<String>,
    /// The zygote's host uid, when it is not ours: its children's
    /// `cgroup.procs` are handed to it.
    chown_to: Option<u32>,
}

impl Nest {
    /// Make `z`, the zygote jail's run cgroup (a `run-…` of the unified
    /// hierarchy), a nest: every process in it moved into `z/zygote`, the
    /// controllers `z` has enabled for its children, `req` (the
    /// template's limits, Z's until now) written into `z/zygote`, and Z's
    /// own limits lifted; Z's `cgroup.procs` handed to `uid` (the zygote's
    /// host fsuid) when it is not ours. In that order, so that the zygote
    /// is never without its limits; an error leaves Z usable as it was (a
    /// cgroup with the zygote below it, its limits on one of the two).
    pub fn make(z: &Path, req: &Request, uid: u32) -> Result<Nest, CgroupError> {
        let name = z.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.starts_with(RUN_PREFIX) {
            return Err(CgroupError::File {
                op: FileOp::Open,
                path: z.to_path_buf(),
                source: ErrorKind::InvalidInput.into(),
            });
        }
        let leaf = z.join(NEST_LEAF);
        fs::create_dir(&leaf).map_err(|source| CgroupError::File {
            op: FileOp::Mkdir,
            path: leaf.clone(),
            source,
        })?;
        // The jail's init and the zygote (nothing forks meanwhile: the
        // zygote waits for its first request, init for its payload).
        for _ in 0..4 {
            let left = words(&z.join("cgroup.procs"));
            if left.is_empty() {
                break;
            }
            for pid in left {
                match write_file(&leaf, "cgroup.procs", &pid) {
                    Ok(()) => {}
                    // Gone meanwhile.
                    Err(e) if e.errno() == Some(sys::Errno::ESRCH) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let offered = words(&z.join("cgroup.controllers"));
        for c in Controller::ALL {
            if offered.iter().any(|w| w == c.name()) {
                enable(z, c.name())?;
            }
        }
        let on = words(&z.join("cgroup.subtree_control"));
        let ctrls = Controllers::enabled_in(z, &on);
        for e in write_limits(&leaf, &ctrls, req) {
            if let Enforced::Unavailable(why) = e {
                return Err(CgroupError::Write {
                    path: leaf.clone(),
                    value: why,
                    source: ErrorKind::Unsupported.into(),
                });
            }
        }
        for (file, value) in [
            ("memory.max", "max"),
            ("memory.high", "max"),
            ("memory.oom.group", "0"),
            ("pids.max", "max"),
            ("cpu.max", "max"),
        ] {
            if z.join(file).exists() {
                write_file(z, file, value)?;
            }
        }
        let chown_to = (uid != sys::geteuid()).then_some(uid);
        if let Some(uid) = chown_to {
            chown(&z.join("cgroup.procs"), uid)?;
        }
        Ok(Nest {
            dir: z.to_path_buf(),
            on,
            chown_to,
        })
    }

    /// The nest (the zygote jail's run cgroup).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A run cgroup in the nest with `req`'s limits, its `cgroup.procs`
    /// the zygote's to write; None (nothing left behind) when the nest
    /// cannot hold every limit `req` asks (a controller the nest lacks:
    /// the caller makes the run's cgroup elsewhere) or it could not be
    /// made (the zygote's jail gone, and its nest with it).
    pub fn prepare(&self, req: &Request) -> Option<Setup> {
        let path = self.dir.join(next_run_name());
        // Never `create_dir_all`: a nest removed with its zygote stays gone.
        fs::create_dir(&path).ok()?;
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&path);
        let Ok(dir) = dir else {
            let _ = fs::remove_dir(&path);
            return None;
        };
        let run = RunCgroup {
            v2: Some(V2Dir { path, dir }),
            v1: Vec::new(),
            systemd: None,
            owner: sys::getpid(),
            removed: false,
        };
        let got = write_limits(
            run.path(),
            &Controllers::enabled_in(&self.dir, &self.on),
            req,
        );
        let held = got
            .iter()
            .all(|e| matches!(e, Enforced::Cgroup | Enforced::NotRequested));
        let handed = match self.chown_to {
            Some(uid) => chown(&run.path().join("cgroup.procs"), uid).is_ok(),
            None => true,
        };
        if !held || !handed {
            // Dropped: removed at once (nothing is in it).
            return None;
        }
        Some(Setup::made(run, got))
    }
}

fn chown(p: &Path, uid: u32) -> Result<(), CgroupError> {
    std::os::unix::fs::chown(p, Some(uid), None).map_err(|source| CgroupError::File {
        op: FileOp::Chown,
        path: p.to_path_buf(),
        source,
    })
}
