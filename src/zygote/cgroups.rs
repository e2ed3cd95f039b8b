//! The fork server's cgroups: whether a template's limits can be held
//! per run, where each child's run cgroup goes (the zygote's nest on
//! cgroup v2, [`cgroup::Nest`]; else beside it, the child moved in), and
//! what the host's mount says of moves.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{pid_of, ForkError};
use crate::cgroup;
use crate::policy::Policy;

/// The nest of the zygote's children (`zygote`: its pidfd) where cgroup
/// v2 holds the template's limits (none `climbed` to cgroup v1; `host`:
/// the hierarchies as the server read them); else None, and each child
/// is moved into its run cgroup ([`moves_noted`]).
pub(super) fn nest_for(
    climbed: &Option<Vec<(cgroup::Controller, String)>>,
    zygote: Option<&OwnedFd>,
    template: &Policy,
    host: Option<&(cgroup::Hierarchies, String)>,
) -> Option<cgroup::Nest> {
    let nest = match (climbed, zygote, host) {
        (None, Some(z), Some((h, _))) => nest(z, &template.limits, h),
        _ => None,
    };
    if nest.is_none() {
        moves_noted();
    }
    nest
}

/// Why a fork server cannot hold `template`'s limits per run: each child
/// gets a cgroup of its own for memory and pids (rlimits would be shared
/// with every other child of the zygote, or not per run).
pub fn cannot_hold(template: &Policy) -> Option<ForkError> {
    probe_cgroups(template).err()
}

/// Why each forked run's move into its cgroup is slow on this host, if
/// it is: the unified hierarchy is mounted without `favordynmods`, so the
/// kernel's host-wide lock for moves may wait for an RCU grace period
/// (in every hierarchy, v1 too), and moves from every zygote take it in
/// turn (see `stockade check`, `facts.favordynmods`).
fn slow_moves() -> Option<String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let h = cgroup::parse_mountinfo(&mi);
    let at = &h.unified()?.mountpoint;
    match cgroup::favors_dynmods(&mi, at)? {
        true => None,
        false => Some(format!(
            "the cgroup2 mount {} lacks favordynmods: moving each child of --warm-fork into its \
             cgroup takes a host-wide lock that may wait for an RCU grace period, one move at a \
             time, which can cap forked runs per second on many-CPU hosts (`mount -o remount,favordynmods {}` \
             makes moves quick and forks and exits a little slower)",
            at.display(),
            at.display()
        )),
    }
}

/// The zygote's cgroup (of the unified hierarchy) made the nest of its
/// children's run cgroups ([`cgroup::Nest`]), `limits` the template's;
/// None where it cannot be (no run cgroup of its own on the unified
/// hierarchy, or a step refused: said on stderr), and each child is
/// moved into its run cgroup instead.
fn nest(
    zygote: &OwnedFd,
    limits: &crate::policy::Limits,
    h: &cgroup::Hierarchies,
) -> Option<cgroup::Nest> {
    let pid = pid_of(zygote)?;
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let dir = cgroup::cgroup_dir(h.unified()?, &cgroup::parse_proc_cgroup(&own)?)?;
    // A cgroup of its own: a run cgroup (else it is in ours, as where
    // cgroup v1 holds the limits: nothing to nest in).
    let name = dir.file_name()?.to_str()?;
    cgroup::parse_run_name(name)?;
    // Its fsuid (the jail's host uid), as our /proc shows it.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(3)?.parse().ok())?;
    match cgroup::Nest::make(&dir, &cgroup::Request::from(limits), uid) {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!(
                "stockade: serve: note: the fork server's children are moved into their cgroups \
                 ({}: {e})",
                dir.display()
            );
            None
        }
    }
}

/// Once per process, when a fork server moves its children into their
/// cgroups: [`slow_moves`]'s note, if the host's mount lacks
/// `favordynmods`.
fn moves_noted() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Some(note) = slow_moves() {
        eprintln!("stockade: serve: note: {note}");
    }
}

/// [`cannot_hold`]'s answer as an error; else, when the unified hierarchy
/// held none of `template`'s limits and cgroup v1 held some (a hybrid
/// host), why each climbed.
pub(super) fn probe_cgroups(
    template: &Policy,
) -> Result<Option<Vec<(cgroup::Controller, String)>>, ForkError> {
    let req = cgroup::Request::from(&template.limits);
    let mut setup = cgroup::prepare(&req);
    let why = unheld(&req, &setup);
    let v2_held = [&setup.memory, &setup.memory_high, &setup.cpu, &setup.pids]
        .into_iter()
        .any(|e| {
            matches!(
                e,
                cgroup::Enforced::Cgroup | cgroup::Enforced::CgroupSystemd
            )
        });
    let climbed =
        (!v2_held && !setup.climbed.is_empty()).then(|| std::mem::take(&mut setup.climbed));
    if let Some(c) = setup.cgroup {
        let _ = c.remove();
    }
    match why {
        Some(why) => Err(why),
        None => Ok(climbed),
    }
}

/// The first of `req`'s memory and pids limits that no cgroup of `setup`
/// holds (a child's are its own cgroup's, never the zygote's rlimits).
pub(super) fn unheld(req: &cgroup::Request, setup: &cgroup::Setup) -> Option<ForkError> {
    [
        ("memory", req.memory.is_some(), &setup.memory),
        ("pids", req.pids.is_some(), &setup.pids),
    ]
    .into_iter()
    .find(|(_, asked, e)| *asked && !e.is_cgroup())
    .map(|(limit, _, e)| ForkError::Unheld {
        limit,
        held_by: format!("{e:?}"),
    })
}
