//! The plan's layers inside the jail: which are required, the network
//! asked for, Landlock's rules (and whether its denials can be recorded),
//! the compiled seccomp program and the caller's own BPF programs.

#![deny(unsafe_code)]

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::mode::Kind;
use super::{root, Access, Resources, Root, SetupError};
use crate::policy::{Layer, Network, Policy};
use crate::sys;

/// What confines the payload from inside.
#[derive(Debug, Clone)]
pub struct Layers {
    /// Layers that must be applied.
    pub require: Vec<Layer>,
    pub network: Network,
    /// Landlock, unless disabled (`--no-landlock`).
    pub landlock: Option<Landlock>,
    /// The compiled seccomp filter, if any.
    pub seccomp: Option<crate::seccomp::Compiled>,
    /// The caller's own BPF programs (`Compat::bpf_filters`), installed in
    /// order after `seccomp`.
    pub bpf_filters: Vec<Vec<libc::sock_filter>>,
    /// `Compat::assert_userns_disabled`, or `disable_userns`: the payload
    /// checks that no user namespace can be made.
    pub assert_userns_disabled: bool,
}

/// Landlock as the payload applies it.
#[derive(Debug, Clone)]
pub struct Landlock {
    /// Paths (inside the jail, or the host's in the fallback) with the
    /// access granted beneath them.
    pub rules: Vec<(PathBuf, Access)>,
    /// Deny TCP bind/connect (network `none`).
    pub deny_tcp: bool,
    /// Also grant what /dev/mqueue's rule grants on the root of the IPC
    /// namespace's mqueue filesystem, which the root does not mount (a
    /// bare root, bwrap's `--dev`): `mq_open` resolves its queue there,
    /// and without a rule on that root Landlock refuses it. Init opens it
    /// (`sys::fs_detached`), mounted nowhere. Never in the fallback (the
    /// host's IPC namespace) nor in a zygote (its children make their own).
    pub mqueue: bool,
    /// The supervisor can read the kernel's Landlock audit records (its
    /// socket in [`Resources::audit`]): whether it will is its verdict,
    /// one byte on the control socket after GO (`proto::AUDIT_LOG`: the
    /// kernel's audit settings are asked for then, while init builds the
    /// root, each query costing a kernel thread). When it will, the
    /// payload takes this name before it enforces its domain (the domain's
    /// creation record carries it: this run's domain, told from every
    /// other) and asks for denials after execve to be logged.
    pub log_tag: Option<CString>,
    /// Its denials cannot be recorded: why (for the outcome's
    /// `denials_unrecorded`).
    pub unrecorded: Option<String>,
}

impl Layers {
    /// The layers of `p` over `root`, with the Landlock `rules` its binds
    /// (or, in the fallback, their host paths) grant; and, in the
    /// fallback, where a pathname unix socket may be connected to.
    pub(super) fn of(
        p: &Policy,
        kind: Kind,
        mut rules: Vec<(PathBuf, Access)>,
        root: &Root,
    ) -> Result<(Layers, Vec<PathBuf>), SetupError> {
        let mut require = p.require.clone();
        rules.retain(|(path, _)| !p.landlock.exclude.iter().any(|x| path.starts_with(x)));
        let (rules, unix_roots, mqueue) = match kind {
            Kind::Namespaced => (
                root::coalesce_rules(rules, &root.steps, &p.landlock.exclude),
                Vec::new(),
                !p.zygote && !root::mounts_mqueue(&root.steps),
            ),
            Kind::Fallback => {
                if !root.masked.is_empty() && !require.contains(&Layer::Landlock) {
                    // Only Landlock hides them there: no silent downgrade.
                    require.push(Layer::Landlock);
                }
                let unix_roots = unix_roots(&rules);
                (rules, unix_roots, false)
            }
        };
        let seccomp = seccomp(p, kind, None)?;
        let landlock = (!p.landlock.disabled).then(|| Landlock {
            rules,
            deny_tcp: p.network == Network::None,
            mqueue,
            log_tag: None,
            unrecorded: None,
        });
        let layers = Layers {
            require,
            network: p.network,
            landlock,
            seccomp,
            bpf_filters: p
                .compat
                .bpf_filters
                .iter()
                .map(|b| sock_filters(b))
                .collect(),
            assert_userns_disabled: p.compat.assert_userns_disabled || p.compat.disable_userns,
        };
        Ok((layers, unix_roots))
    }
}

impl Layers {
    /// The name the payload takes before it enforces its Landlock domain,
    /// when the supervisor can read that domain's audit records
    /// ([`Landlock::log_tag`]).
    pub fn log_tag(&self) -> Option<&CString> {
        self.landlock.as_ref().and_then(|l| l.log_tag.as_ref())
    }
}

impl Landlock {
    /// The audit read-log socket its denials are read from, and the
    /// payload's tag; or why they cannot be read.
    pub(super) fn open_audit(&mut self, res: &mut Resources) {
        match landlock_audit() {
            Ok(fd) => {
                let tag = sys::random_bytes::<6>()
                    .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
                match tag {
                    Ok(t) => {
                        self.log_tag = CString::new(format!("sk{t}")).ok();
                        res.audit = Some(fd);
                    }
                    Err(e) => self.unrecorded = Some(e.to_string()),
                }
            }
            Err(why) => self.unrecorded = Some(why),
        }
    }
}

/// Where a pathname socket may be reached in the fallback: beneath what
/// Landlock grants, but not /proc (magic links) or /dev.
fn unix_roots(rules: &[(PathBuf, Access)]) -> Vec<PathBuf> {
    rules
        .iter()
        .filter(|(path, a)| {
            !matches!(a, Access::Device | Access::List)
                && !path.starts_with("/proc")
                && !path.starts_with("/dev")
        })
        .map(|(path, _)| path.clone())
        .collect()
}

/// The seccomp program, compiled for this run; with the allocation meter
/// when `rlimit_as` (the rlimit rung) holds `--memory`.
pub(super) fn seccomp(
    p: &Policy,
    kind: Kind,
    rlimit_as: Option<u64>,
) -> Result<Option<crate::seccomp::Compiled>, SetupError> {
    if !p.seccomp.enabled {
        return Ok(None);
    }
    let mut sp = p.seccomp.clone();
    match kind {
        // The jail's own network, mount and IPC namespaces hold the rest.
        Kind::Namespaced => {
            sp.mediate_unix = false;
            sp.host_ipc = false;
        }
        Kind::Fallback => {
            // Without a network namespace only Landlock stands between
            // the payload and the network, and it knows TCP only: no
            // inet sockets.
            sp.unix_sockets_only |= p.network == Network::None;
            // Nor a mount namespace to hide the host's unix sockets:
            // connect() is mediated, no unix datagram sockets.
            sp.mediate_unix = true;
            // Nor an IPC namespace: no queue is named in the host's.
            sp.host_ipc = true;
        }
    }
    crate::seccomp::compile_metered(&sp, rlimit_as)
        .map(Some)
        .map_err(|e| SetupError::new("seccomp", "", e.to_string()))
}

/// A classic BPF program from its bytes (`struct sock_filter`: code u16,
/// jt u8, jf u8, k u32, native endian); a trailing partial entry is
/// dropped (the policy's check refuses it).
fn sock_filters(bytes: &[u8]) -> Vec<libc::sock_filter> {
    bytes
        .chunks_exact(8)
        .map(|b| libc::sock_filter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        })
        .collect()
}

/// A socket on the kernel's audit read-log, where Landlock's denial
/// records can be read; or why they cannot be (in the outcome's words).
/// Whether audit is on is asked later (`audit_verdict`). Nothing here
/// changes the host's audit settings.
fn landlock_audit() -> Result<OwnedFd, String> {
    let abi = sys::landlock::abi_version().map_err(|e| format!("Landlock: {e}"))?;
    if abi < 7 {
        return Err(format!(
            "Landlock ABI {abi} writes no audit records (ABI 7, Linux 6.15, does)"
        ));
    }
    let fd = sys::audit::open_readlog(1 << 20).map_err(|e| match e.errno {
        sys::Errno::EPERM => "reading the kernel's audit records needs CAP_AUDIT_READ in the initial user namespace, which stockade does not have here".to_string(),
        _ => format!("cannot read the kernel's audit records: {e}"),
    })?;
    Ok(fd)
}

/// Whether the payload may ask for its Landlock denials to be logged,
/// from the kernel's audit settings; else why not (the outcome's words).
pub fn audit_verdict() -> Result<(), String> {
    match sys::audit::audit_status() {
        Ok(st) if st.enabled == 0 => Err("the kernel's audit is disabled on this host, so Landlock writes no records (`auditctl -e 1` enables it; stockade leaves the host's audit settings as they are)".into()),
        // A payload could flood the audit backlog with denials; a lost
        // record must not panic the host.
        Ok(st) if st.failure == 2 => Err("the host's audit panics the kernel when a record is lost (`auditctl -f 2`), and a payload could make the kernel lose some: stockade does not ask Landlock to log the payload's denials".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cannot ask the kernel whether audit is enabled: {e}")),
    }
}
