//! The plan's identity: the ids the jail runs as, the host ids they map
//! to, which ids init takes after GO, the capabilities the payload keeps,
//! and the host id leased for the run (the fallback's, or a root-started
//! bwrap run's idmap).

#![deny(unsafe_code)]

use std::sync::Arc;

use super::mode::Kind;
use super::{uids, SetupError};
use crate::policy::Policy;
use crate::sys;

/// Who the jail is.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The jail's uid and gid (what stockade's id maps map, the ids init
    /// takes with [`BecomeUser::Policy`]).
    pub uid: u32,
    pub gid: u32,
    /// `inner outer 1` lines for /proc/PID/uid_map and gid_map.
    pub uid_map: String,
    pub gid_map: String,
    /// Which ids init takes after GO (see [`BecomeUser`]).
    pub become_user: BecomeUser,
    /// Capabilities the payload keeps (`Compat::keep_caps`), and how
    /// (`Compat::caps_as_root`).
    pub keep_caps: u64,
    pub caps_as_root: bool,
    /// `Compat::bounding_caps` (never in the fallback).
    pub bounding_caps: Option<u64>,
    /// Started by host root with `Compat::idmap_root_binds`: the host uid
    /// and gid (a leased id, which the jail's ids map to) that files of
    /// host uid and gid 0 show as on the binds, idmapped by the supervisor
    /// (`supervise::idmap`).
    pub idmap: Option<(u32, u32)>,
    /// The lease on the fallback's ids (`Fallback::ids`) or `idmap`'s id
    /// (see plan::uids), held until the plan is dropped after the run.
    pub lease: Option<Arc<uids::Lease>>,
}

/// Which ids init takes after GO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BecomeUser {
    /// `Identity::uid`/`gid`, which stockade's id maps map (the jail's
    /// own user namespace).
    Policy,
    /// None: the ids stay the caller's (the fallback; the caller's own
    /// maps, `userns_block_fd`, give them their meaning).
    Keep,
    /// In a joined user namespace (`Compat::join_userns`): the ids asked
    /// for (bwrap's `--uid`/`--gid`, as that namespace maps them); else
    /// the caller's, as bwrap keeps them, except host root: where that
    /// namespace does not map the caller's uid 0 (or gid 0), the jail
    /// takes the policy's id there instead (`unmapped_root`), so a jail in
    /// a namespace that does not map host root never runs as host root.
    /// A namespace that maps host root was the caller's choice.
    Joined {
        uid: Option<u32>,
        gid: Option<u32>,
        unmapped_root: Option<u32>,
        unmapped_root_group: Option<u32>,
    },
}

/// The host ids the jail's ids map to, decided first (before the root is
/// planned): our own or the policy's, or an id leased for idmapped binds.
pub(super) struct Mapped {
    /// Our effective uid.
    pub euid: u32,
    uid: u32,
    gid: u32,
    idmap_lease: Option<Arc<uids::Lease>>,
}

impl Mapped {
    /// Our own ids, or (root) the policy's; never host root. Inside a
    /// user namespace where host root is not 0 (a sandbox's), uid 0 is not
    /// host root: when the policy's ids do not exist there, the jail maps
    /// to uid 0 as to any caller's own uid.
    ///
    /// Host root's files shown as the jail root's on the binds (bwrap run
    /// by root): the jail's ids map to a host id of its own, leased for
    /// the run, so that no other process on the host shares the uid that
    /// owns those files here (and could ptrace or signal the payload). Not
    /// in a user namespace the caller hands over (`join_userns`) or maps
    /// itself (`userns_block_fd`): the jail's ids are what that namespace
    /// maps, not a leased id. Never in the fallback.
    pub(super) fn of(p: &Policy, kind: Kind) -> Result<Mapped, SetupError> {
        let euid = sys::geteuid();
        let egid = sys::getegid();
        let nested = !sys::host_root_is_zero_here();
        let policy_ids_exist = sys::id_is_mapped("uid_map", p.root_host_uid)
            && sys::id_is_mapped("gid_map", p.root_host_gid);
        let (mut uid, mut gid) = if euid == 0 && (!nested || policy_ids_exist) {
            (p.root_host_uid, p.root_host_gid)
        } else {
            (euid, egid)
        };
        if (uid == 0 || gid == 0) && !nested {
            return Err(SetupError::new(
                "id map",
                "",
                "the jail would map to host root (uid or gid 0); choose an unprivileged host id",
            ));
        }
        let c = &p.compat;
        let idmap_lease = match c.idmap_root_binds
            && kind == Kind::Namespaced
            && euid == 0
            && c.join_userns.is_none()
            && c.userns_block_fd.is_none()
            && sys::host_root_is_zero_here()
        {
            true => {
                let l = lease_id(p.fallback_uid_range)?;
                (uid, gid) = (l.id, l.id);
                Some(Arc::new(l))
            }
            false => None,
        };
        Ok(Mapped {
            euid,
            uid,
            gid,
            idmap_lease,
        })
    }

    /// The identity, with the fallback's lease (`fallback_lease`) when it
    /// took one.
    pub(super) fn identity(
        self,
        p: &Policy,
        kind: Kind,
        fallback_lease: Option<Arc<uids::Lease>>,
    ) -> Identity {
        let c = &p.compat;
        let (keep_caps, bounding_caps) = match kind {
            Kind::Namespaced => (c.keep_caps, c.bounding_caps),
            // Root's capabilities are kept inside the jail's user
            // namespace only: the fallback's payload, no longer root,
            // keeps none; and it has no bounding set of its own to narrow.
            Kind::Fallback => (if self.euid == 0 { 0 } else { c.keep_caps }, None),
        };
        Identity {
            uid: p.uid,
            gid: p.gid,
            uid_map: format!("{} {} 1\n", p.uid, self.uid),
            gid_map: format!("{} {} 1\n", p.gid, self.gid),
            become_user: become_user(p, kind),
            keep_caps,
            caps_as_root: c.caps_as_root,
            bounding_caps,
            idmap: self.idmap_lease.as_ref().map(|l| (l.id, l.id)),
            lease: self.idmap_lease.or(fallback_lease),
        }
    }
}

/// Which ids init takes after GO (see [`BecomeUser`]).
fn become_user(p: &Policy, kind: Kind) -> BecomeUser {
    if kind == Kind::Fallback || p.compat.userns_block_fd.is_some() {
        return BecomeUser::Keep;
    }
    if p.compat.join_userns.is_none() {
        return BecomeUser::Policy;
    }
    // bwrap's `--uid`/`--gid`: ids other than the caller's own.
    let asked = |mine: u32, wanted: u32| (mine != wanted).then_some(wanted);
    BecomeUser::Joined {
        uid: asked(sys::getuid(), p.uid),
        gid: asked(sys::getegid(), p.gid),
        unmapped_root: (sys::geteuid() == 0).then_some(p.uid),
        unmapped_root_group: (sys::getegid() == 0).then_some(p.gid),
    }
}

/// A host id of the run's own from `range` (`--uid-range`), its refusal
/// as a setup error naming the flag.
pub(super) fn lease_id(range: (u32, u32)) -> Result<uids::Lease, SetupError> {
    uids::lease(range).map_err(|e| {
        let s = SetupError::new("--uid-range", "", e.to_string());
        match e.errno() {
            Some(n) => s.with_errno(n),
            None => s,
        }
    })
}
