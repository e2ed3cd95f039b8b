//! Credentials: user and group ids, and capabilities.

use super::{err, last_errno, Errno, SysResult};

pub fn getuid() -> u32 {
    nix::unistd::getuid().as_raw()
}

pub fn getgid() -> u32 {
    nix::unistd::getgid().as_raw()
}

/// Whether host root is (or may be) uid 0 or gid 0 as this process sees
/// ids: in the initial user namespace, or in any chain of user namespaces
/// that maps host root to 0. Read from a sysctl file the kernel always owns
/// by host root (`/proc/sys/fs/file-max`), whose owner shows as 0 exactly
/// when host root is our 0 (as the overflow id when it is not mapped);
/// without /proc, assumed so.
pub fn host_root_is_zero_here() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/sys/fs/file-max").map_or(true, |m| m.uid() == 0 || m.gid() == 0)
}

/// Whether `id` is mapped in this process's user namespace (`map`:
/// `uid_map` or `gid_map`); unreadable maps say no.
pub fn id_is_mapped(map: &str, id: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/{map}")) else {
        return false;
    };
    text.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        matches!(f[..], [inside, _, len] if inside <= id as u64 && (id as u64) < inside + len)
    })
}

pub fn geteuid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

pub fn getegid() -> u32 {
    nix::unistd::getegid().as_raw()
}

pub fn setresuid(uid: u32) -> SysResult<()> {
    let u = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).or_else(|e| err("setresuid", uid, e))
}

pub fn setresgid(gid: u32) -> SysResult<()> {
    let g = nix::unistd::Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).or_else(|e| err("setresgid", gid, e))
}

/// Run `f` with the calling thread's file-system uid and gid set to `uid`
/// and `gid`, then set them back. setfsuid/setfsgid act on the calling
/// thread only, and the kernel's access checks for /proc/PID/mem, fd and
/// cwd (PTRACE_MODE_FSCREDS) compare the target's ids with these: root
/// without CAP_SYS_PTRACE reads another uid's /proc this way. Needs
/// CAP_SETUID and CAP_SETGID (root's own ids need nothing).
pub fn with_fsids<T>(uid: u32, gid: u32, f: impl FnOnce() -> T) -> SysResult<T> {
    use nix::unistd::{setfsgid, setfsuid, Gid, Uid};
    // Each call returns the previous value whether or not it changed it;
    // -1 is never a valid id, so setfs*id(-1) only reports the current one.
    let old_gid = setfsgid(Gid::from_raw(gid));
    let old_uid = setfsuid(Uid::from_raw(uid));
    let restore = || {
        setfsuid(old_uid);
        setfsgid(old_gid);
    };
    if setfsgid(Gid::from_raw(u32::MAX)).as_raw() != gid
        || setfsuid(Uid::from_raw(u32::MAX)).as_raw() != uid
    {
        restore();
        return err("setfsuid", format_args!("{uid}:{gid}"), Errno::EPERM);
    }
    let r = f();
    restore();
    Ok(r)
}

/// Make the permitted capabilities effective again (after a setresuid under
/// PR_SET_KEEPCAPS).
pub fn raise_effective_caps() -> SysResult<()> {
    let permitted = caps::read(None, caps::CapSet::Permitted)
        .or_else(|_| err("capget", "permitted", Errno::EINVAL))?;
    caps::set(None, caps::CapSet::Effective, &permitted)
        .or_else(|_| err("capset", "effective", Errno::EPERM))
}

/// Empty the bounding set (needs CAP_SETPCAP, so before anything else).
/// Without CAP_SETPCAP (the fallback, started unprivileged) there is nothing
/// to do that we are allowed to do: the set stays, and no_new_privs keeps
/// execve from gaining any of it.
pub fn drop_bounding_caps() -> SysResult<usize> {
    if !caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false)
    {
        return Ok(caps::read(None, caps::CapSet::Bounding).map_or(usize::MAX, |c| c.len()));
    }
    // One prctl per capability the kernel knows: EINVAL marks the end.
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes integer arguments only.
        let r = unsafe {
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                cap as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINVAL && cap > 0 {
                break;
            }
            return err("prctl", format!("PR_CAPBSET_DROP {cap}"), e);
        }
    }
    // Every drop succeeded up to the kernel's last capability.
    Ok(0)
}

/// Number of capabilities left in (effective, permitted, inheritable,
/// bounding, ambient), given what [`drop_all_caps`] said of the bounding
/// set (each of its drops succeeded, or the set as read back).
pub fn caps_left(bounding: usize) -> [usize; 5] {
    use caps::CapSet::*;
    let [e, p, i] = [Effective, Permitted, Inheritable]
        .map(|s| caps::read(None, s).map(|c| c.len()).unwrap_or(usize::MAX));
    // The kernel keeps ambient within permitted: nothing permitted, nothing
    // ambient.
    let a = if p == 0 {
        0
    } else {
        caps::read(None, Ambient).map_or(usize::MAX, |c| c.len())
    };
    [e, p, i, bounding, a]
}

/// Keep only the capabilities in `keep` (bit N: capability N) in every
/// set, raised in the ambient set too so they survive execve for any uid
/// (bwrap's `--cap-add`); with `inheritable` false, in the bounding,
/// permitted and effective sets only (what uid 0 gets back at execve: bwrap
/// run by root without `--cap-add`/`--cap-drop`); the bounding set keeps
/// `bounding` too. Returns how many the bounding set still holds.
pub fn keep_only_caps(keep: u64, inheritable: bool, bounding: u64) -> SysResult<usize> {
    let of = |mask: u64| -> caps::CapsHashSet {
        caps::all()
            .into_iter()
            .filter(|c| c.index() < 64 && mask & (1u64 << c.index()) != 0)
            .collect()
    };
    let (kept, bounded) = (of(keep), of(bounding | keep));
    // A read that fails fails the step, as every setup failure does.
    let read_err = |c: caps::Capability| {
        move |_| {
            err(
                "prctl",
                format!("PR_CAPBSET_READ {}", c.index()),
                Errno::EPERM,
            )
        }
    };
    for c in caps::all() {
        if !bounded.contains(&c)
            && caps::has_cap(None, caps::CapSet::Bounding, c).or_else(read_err(c))?
        {
            caps::drop(None, caps::CapSet::Bounding, c).or_else(|_| {
                err(
                    "prctl",
                    format!("PR_CAPBSET_DROP {}", c.index()),
                    Errno::EPERM,
                )
            })?;
        }
    }
    caps::clear(None, caps::CapSet::Ambient)
        .or_else(|_| err("prctl", "PR_CAP_AMBIENT_CLEAR_ALL", Errno::EPERM))?;
    let none = caps::CapsHashSet::new();
    // Effective first: it must stay within permitted at each step.
    for (set, to) in [
        (caps::CapSet::Effective, &kept),
        (
            caps::CapSet::Inheritable,
            if inheritable { &kept } else { &none },
        ),
        (caps::CapSet::Permitted, &kept),
    ] {
        caps::set(None, set, to).or_else(|_| err("capset", format!("{set:?}"), Errno::EPERM))?;
    }
    for c in kept.iter().filter(|_| inheritable) {
        caps::raise(None, caps::CapSet::Ambient, *c).or_else(|_| {
            err(
                "prctl",
                format!("PR_CAP_AMBIENT_RAISE {}", c.index()),
                Errno::EPERM,
            )
        })?;
    }
    let mut left = 0;
    for c in caps::all() {
        if caps::has_cap(None, caps::CapSet::Bounding, c).or_else(read_err(c))? {
            left += 1;
        }
    }
    Ok(left)
}

/// Empty every capability set; returns how many capabilities the bounding
/// set still holds (0 unless CAP_SETPCAP was missing).
pub fn drop_all_caps() -> SysResult<usize> {
    let bounding = drop_bounding_caps()?;
    caps::clear(None, caps::CapSet::Ambient)
        .or_else(|_| err("prctl", "PR_CAP_AMBIENT_CLEAR_ALL", Errno::EPERM))?;
    for set in [
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).or_else(|_| err("capset", format!("{set:?}"), Errno::EPERM))?;
    }
    Ok(bounding)
}
