//! Finding where the run cgroups go: the unified hierarchy from
//! /proc/self/mountinfo, our own cgroup from /proc/self/cgroup, and the
//! base cgroup we may create children in (see the module's documentation).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::{CgroupError, FileOp, Unusable};
use super::files::{holds_processes, is_true_root};
use crate::sys;

/// A cgroup mount from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The cgroup path this mount shows at its mount point (field 4).
    pub root: String,
    pub mountpoint: PathBuf,
    /// v1 only: the controllers bound to it.
    pub controllers: Vec<String>,
}

/// The cgroup mounts of this mount namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    pub v2: Vec<Mount>,
    pub v1: Vec<Mount>,
}

impl Hierarchies {
    /// The unified hierarchy to use: the one at /sys/fs/cgroup (pure v2) or
    /// /sys/fs/cgroup/unified (hybrid) when mounted there, else the first.
    pub fn unified(&self) -> Option<&Mount> {
        for want in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            if let Some(m) = self.v2.iter().find(|m| m.mountpoint == Path::new(want)) {
                return Some(m);
            }
        }
        self.v2.first()
    }

    /// The v1 mount a controller is bound to, if any.
    pub fn v1_for(&self, ctrl: &str) -> Option<&Mount> {
        self.v1
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == ctrl))
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the cgroup2 mount at `at` in `mountinfo` has the super option
/// `favordynmods` (None: no cgroup2 mount there). Without it, each move
/// of a process into another cgroup (a write to `cgroup.procs`, in any
/// hierarchy: the lock is host-wide) may wait for an RCU grace period;
/// with it, moves are quick and every fork and exit pays a little more. A forked
/// run of `serve --warm-fork` is one move (`zygote::ForkServer::ahead`).
pub fn favors_dynmods(mountinfo: &str, at: &Path) -> Option<bool> {
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        let here = fields.get(4).map(|m| PathBuf::from(unescape(m)));
        if dash < 5 || fields.get(dash + 1) != Some(&"cgroup2") || here.as_deref() != Some(at) {
            return None;
        }
        let superopts = fields.get(dash + 3).copied().unwrap_or("");
        Some(superopts.split(',').any(|o| o == "favordynmods"))
    })
}

/// Parse /proc/self/mountinfo: `id parent maj:min root mountpoint opts
/// [optional…] - fstype source superopts`.
pub fn parse_mountinfo(text: &str) -> Hierarchies {
    let mut h = Hierarchies::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if dash < 5 || fields.len() < dash + 2 {
            continue;
        }
        let fstype = fields[dash + 1];
        let root = unescape(fields[3]);
        let mountpoint = PathBuf::from(unescape(fields[4]));
        match fstype {
            "cgroup2" => h.v2.push(Mount {
                root,
                mountpoint,
                controllers: Vec::new(),
            }),
            "cgroup" => {
                let superopts = fields.get(dash + 3).copied().unwrap_or("");
                let controllers = superopts
                    .split(',')
                    .filter(|o| {
                        !o.is_empty()
                            && !o.contains('=')
                            && !matches!(*o, "rw" | "ro" | "noprefix" | "clone_children")
                            && !o.starts_with("xattr")
                    })
                    .map(str::to_string)
                    .collect();
                h.v1.push(Mount {
                    root,
                    mountpoint,
                    controllers,
                })
            }
            _ => {}
        }
    }
    h
}

/// The unified-hierarchy path of this process from /proc/self/cgroup (the
/// `0::` line), e.g. `/user.slice/user-1000.slice/session-2.scope`.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_string())
}

/// Where cgroup `cg` (a /proc/self/cgroup path) appears under mount `m`.
/// None when the mount does not show it (a bind of another subtree, or a
/// path outside our cgroup namespace, shown as `/..`).
pub fn cgroup_dir(m: &Mount, cg: &str) -> Option<PathBuf> {
    if cg.starts_with("/..") || !cg.starts_with('/') {
        return None;
    }
    let root = m.root.trim_end_matches('/');
    let rel = if root.is_empty() {
        cg.trim_start_matches('/')
    } else if cg == root {
        ""
    } else {
        cg.strip_prefix(root)?.strip_prefix('/')?
    };
    let rel = rel.trim_end_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        m.mountpoint.clone()
    } else {
        m.mountpoint.join(rel)
    })
}

// ------------------------------------------------------------ the environment

/// What the cgroup code asks of the host, so the choice can be tested
/// against a fake cgroupfs in a temp dir.
pub trait Host {
    fn euid(&self) -> u32;
    fn writable(&self, p: &Path) -> bool;
    /// mkdir(2) in cgroupfs (the kernel fills the new directory).
    fn mkdir(&self, p: &Path) -> io::Result<()> {
        fs::create_dir(p)
    }
}

/// The real host.
pub struct RealHost;

impl Host for RealHost {
    fn euid(&self) -> u32 {
        sys::geteuid()
    }
    fn writable(&self, p: &Path) -> bool {
        sys::cgroup::writable(p)
    }
}

/// The located hierarchy and the base cgroup to create `stockade/` in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Mount point of the unified hierarchy.
    pub hierarchy: PathBuf,
    /// The cgroup that will hold `stockade/run-…`.
    pub base: PathBuf,
}

/// Read the mount table and our cgroup, and choose the base.
pub(super) fn locate(host: &dyn Host) -> Result<(Placement, Hierarchies), CgroupError> {
    let (h, pc) = read_host()?;
    let p = choose(host, &h, &pc)?;
    Ok((p, h))
}

/// The cgroup mounts of this mount namespace and /proc/self/cgroup.
pub fn read_host() -> Result<(Hierarchies, String), CgroupError> {
    let read = |path: &str| {
        fs::read_to_string(path).map_err(|source| CgroupError::File {
            op: FileOp::Read,
            path: path.into(),
            source,
        })
    };
    let mi = read("/proc/self/mountinfo")?;
    let pc = read("/proc/self/cgroup")?;
    Ok((parse_mountinfo(&mi), pc))
}

/// Choose the base cgroup (pure given the host and the files it reads).
pub fn choose(
    host: &dyn Host,
    h: &Hierarchies,
    proc_cgroup: &str,
) -> Result<Placement, CgroupError> {
    let m = h.unified().ok_or(CgroupError::NoHierarchy)?;
    let own_cg = parse_proc_cgroup(proc_cgroup).ok_or(CgroupError::NoOwnCgroup)?;
    let Some(own) = cgroup_dir(m, &own_cg) else {
        return Err(CgroupError::NotVisible {
            cgroup: own_cg,
            mountpoint: m.mountpoint.clone(),
            root: m.root.clone(),
        });
    };
    let mut tried = Vec::new();
    for c in candidates(host, m, &own) {
        match usable_base(host, &c) {
            Ok(()) => {
                return Ok(Placement {
                    hierarchy: m.mountpoint.clone(),
                    base: c,
                })
            }
            Err(why) => tried.push((c, why)),
        }
    }
    if !is_true_root(&own) {
        tried.insert(0, (own, Unusable::OwnCgroup));
    }
    Err(CgroupError::NoUsableBase {
        euid: host.euid(),
        tried,
    })
}

/// The bases to try, best first: the hierarchy's root for root, our own
/// cgroup when it is the true root, then our ancestors, nearest first.
fn candidates(host: &dyn Host, m: &Mount, own: &Path) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if host.euid() == 0 {
        candidates.push(m.mountpoint.clone());
    }
    if is_true_root(own) {
        candidates.push(own.to_path_buf());
    }
    let mut a = own.parent();
    while let Some(d) = a {
        if !d.starts_with(&m.mountpoint) {
            break;
        }
        candidates.push(d.to_path_buf());
        a = d.parent();
    }
    candidates.dedup();
    candidates
}

fn usable_base(host: &dyn Host, c: &Path) -> Result<(), Unusable> {
    if !host.writable(c) {
        return Err(Unusable::DirectoryNotWritable);
    }
    if !host.writable(&c.join("cgroup.procs")) {
        return Err(Unusable::ProcsNotWritable);
    }
    if !is_true_root(c) {
        match holds_processes(c) {
            Ok(false) => {}
            Ok(true) => return Err(Unusable::HoldsProcesses),
            Err(e) => return Err(Unusable::ReadProcs(e)),
        }
    }
    Ok(())
}
