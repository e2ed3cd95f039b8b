//! Landlock: a second wall derived from the same mount list that builds the
//! root. Applied in the payload after pivot_root, after capabilities are
//! dropped and no_new_privs is set, before seccomp.
//!
//! What the ruleset handles (denies unless a rule grants it):
//! * every filesystem right of the running kernel's ABI, or of [`BASELINE`]
//!   when the kernel is older (then the layer reports itself partially
//!   enforced and names the rights it could not get);
//! * TCP bind and connect when `deny_tcp` (ABI ≥ 4), with no rule at all,
//!   or one: connect to the egress proxy's port (`--allow-host`);
//! * abstract unix sockets and signals scoped to the domain (ABI ≥ 6).
//!
//! Beneath each rule path it grants: read + execute ([`Grant::ReadExec`]),
//! everything ([`Grant::ReadWrite`]), or read/write/ioctl of existing files
//! and listing, never creating or removing anything ([`Grant::Device`]). A
//! rule whose path is not a directory grants only the file rights among
//! those. Nothing else in the jail is reachable through the filesystem.

#![deny(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};

use landlock::{
    Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use super::error::{JailError, Step};
use super::proto::{Enforced, LandlockApplied, Skipped, Tcp};
use crate::plan::Access as Grant;
use crate::sys;

/// The ABI whose features the jail's threat model relies on: filesystem
/// rights up to `IOCTL_DEV` (V5), TCP bind/connect (V4), abstract unix
/// socket and signal scoping (V6). A kernel below it is reported as
/// `partially_enforced`, naming what is missing; a newer kernel's extra
/// filesystem rights are handled too (and then wanted).
pub const BASELINE: ABI = ABI::V6;

/// What the layer asks the kernel for, given the kernel's ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    fs: BitFlags<AccessFs>,
    net: BitFlags<AccessNet>,
    scopes: BitFlags<Scope>,
}

impl Wanted {
    /// The policy: everything the newer of `kernel` and [`BASELINE`] knows.
    fn policy(kernel: ABI, deny_tcp: bool) -> Wanted {
        let abi = kernel.max(BASELINE);
        Wanted::at(abi, deny_tcp)
    }

    /// What an `abi` kernel can enforce of the same policy.
    fn at(abi: ABI, deny_tcp: bool) -> Wanted {
        Wanted {
            fs: AccessFs::from_all(abi),
            net: if deny_tcp {
                AccessNet::from_all(abi)
            } else {
                BitFlags::EMPTY
            },
            scopes: Scope::from_all(abi),
        }
    }

    /// `self` minus what `have` covers, as `fs:read_file`, `net:bind_tcp`,
    /// `scope:signal` names.
    fn missing(&self, have: &Wanted) -> Vec<String> {
        let mut out = Vec::new();
        for a in self.fs & !have.fs {
            out.push(format!("fs:{}", snake(&format!("{a:?}"))));
        }
        for a in self.net & !have.net {
            out.push(format!("net:{}", snake(&format!("{a:?}"))));
        }
        for s in self.scopes & !have.scopes {
            out.push(format!("scope:{}", snake(&format!("{s:?}"))));
        }
        out
    }
}

/// `ReadFile` → `read_file`, `AbstractUnixSocket` → `abstract_unix_socket`.
fn snake(camel: &str) -> String {
    let mut s = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// The rights a rule grants beneath a directory, out of the handled `fs`.
fn grant_dir(g: Grant, fs: BitFlags<AccessFs>) -> BitFlags<AccessFs> {
    let want = match g {
        Grant::ReadExec => AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir,
        Grant::ReadWrite => fs,
        Grant::Device => {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::ReadDir | AccessFs::IoctlDev
        }
        Grant::List => AccessFs::ReadDir.into(),
    };
    want & fs
}

/// The rights a rule grants on a single file (not a directory).
fn grant_file(g: Grant, fs: BitFlags<AccessFs>, abi: ABI) -> BitFlags<AccessFs> {
    grant_dir(g, fs) & AccessFs::from_file(abi)
}

fn enforcement(s: &RulesetStatus) -> Enforced {
    match s {
        RulesetStatus::FullyEnforced => Enforced::Fully,
        RulesetStatus::PartiallyEnforced => Enforced::Partially,
        RulesetStatus::NotEnforced => Enforced::Not,
    }
}

/// `O_PATH | O_NOFOLLOW`: a rule is anchored on the mount point itself,
/// never on whatever a symlink there points to.
fn open_rule_path(p: &Path) -> std::io::Result<File> {
    sys::landlock::open_rule(p)
        .map(File::from)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))
}

/// Whether every mount point other than `/` is at or beneath one of
/// `granted`. The mount points are `mounts` when the caller knows them
/// (the jail's own root: init mounted exactly what the plan lists, with `/`
/// made private first, so nothing else can appear), otherwise those of
/// /proc/self/mountinfo. False when that cannot be read (fail closed: `/`
/// then stays unlistable).
fn every_mount_granted(granted: &[&Path], absent: &[&Path], mounts: Option<&[PathBuf]>) -> bool {
    if let Some(m) = mounts {
        return m
            .iter()
            .filter(|mp| !absent.contains(&mp.as_path()))
            .all(|mp| granted.iter().any(|g| mp.starts_with(g)));
    }
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    text.lines().all(|line| match line.split(' ').nth(4) {
        Some("/") => true,
        Some(mp) => {
            let mp = sys::mountinfo_path(mp);
            granted.iter().any(|g| mp.starts_with(g))
        }
        None => false,
    })
}

/// Restrict the calling process (and everything it executes) to `rules`;
/// with `deny_tcp`, also forbid every TCP bind and connect but a connect
/// to `connect_port` (the egress proxy's, when given). Signals and
/// abstract unix sockets are scoped to the new domain.
///
/// Best effort, but never silently: the returned status says what the
/// kernel enforced and the detail names every right that the policy wanted
/// and the kernel could not provide. A rule path that cannot be opened is
/// left out (so less is granted, never more) and listed under `skipped`.
///
/// Errors (the kernel refused a step; nothing is enforced): creating the
/// ruleset, adding a rule, or `landlock_restrict_self`.
///
/// `mounts`: every mount point of the jail's own root (absolute), when it
/// has one; None reads them from /proc/self/mountinfo. `mqueue`: the root
/// of the IPC namespace's mqueue filesystem, when the plan asks for a rule
/// there (see [`add_mqueue_rule`]), or why init could not open it. `log_tag`: the
/// supervisor reads the kernel's audit records: name this process so
/// (the domain's creation record carries the name, which is how the
/// supervisor tells this run's domain from others') and ask the kernel
/// to log denials after execve too (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`,
/// ABI 7; asked for only then, so that no run fills the host's audit log
/// with records nobody reads).
pub fn apply(
    rules: &[(PathBuf, Grant)],
    deny_tcp: bool,
    connect_port: Option<u16>,
    mounts: Option<&[PathBuf]>,
    log_tag: Option<&std::ffi::CStr>,
    mqueue: Option<MqueueRoot>,
) -> Result<LandlockApplied, JailError> {
    let mut asked = Asked::new(deny_tcp);
    let created = ruleset(&asked.wanted)?;
    let created = allow_connect(created, &asked.wanted, connect_port)?;
    asked.proxy_only = connect_port.is_some();
    let abi = asked.kernel.max(BASELINE);
    let (mut created, mut added) = add_rules(created, rules, asked.wanted.fs, abi)?;
    if let Some(mq) = mqueue {
        add_mqueue_rule(&mut created, &mut added, mq, asked.wanted.fs);
    }
    let (mut created, root_listable) =
        grant_root_listing(created, asked.wanted.fs, &added, mounts)?;
    if let Some(tag) = log_tag {
        sys::set_comm(tag).step("landlock", "")?;
        created = created
            .log_new_exec(true)
            .map_err(JailError::LandlockRestrict)?;
    }
    let st = created
        .restrict_self()
        .map_err(JailError::LandlockRestrict)?;
    Ok(asked.verdict(&st.ruleset, added, root_listable))
}

/// [`apply`]'s ruleset for a fork server's children, as the kernel takes
/// it: each child mounts its own /tmp, workdir, /dev/shm and /dev/pts, and
/// a Landlock rule on a mount point is not seen beneath what is mounted
/// over it, so each child makes the ruleset itself, after its mounts
/// (`sys::forked`), from this: the handled rights and scopes as the
/// kernel's bits (only those the running kernel knows) and each rule. The record says what enforcing it gives, as [`apply`]'s does
/// (the ruleset is made here too, to check every rule, then let go).
pub fn prepare(
    rules: &[(PathBuf, Grant)],
    deny_tcp: bool,
    mounts: Option<&[PathBuf]>,
) -> Result<(sys::forked::Ruleset, LandlockApplied), JailError> {
    let asked = Asked::new(deny_tcp);
    let created = ruleset(&asked.wanted)?;
    let abi = asked.kernel.max(BASELINE);
    let (created, added) = add_rules(created, rules, asked.wanted.fs, abi)?;
    let (created, root_listable) = grant_root_listing(created, asked.wanted.fs, &added, mounts)?;
    let fd: Option<std::os::fd::OwnedFd> = created.into();
    let st = match &fd {
        None => RulesetStatus::NotEnforced,
        Some(_) if asked.kernel == ABI::Unsupported => RulesetStatus::NotEnforced,
        Some(_) if !asked.missing.is_empty() => RulesetStatus::PartiallyEnforced,
        Some(_) => RulesetStatus::FullyEnforced,
    };
    let have = asked.have;
    // A path with a newline stays out of the children's ruleset too (less
    // granted, never more), as it did when the ruleset was text.
    let mut rules: Vec<(u64, PathBuf)> = added
        .rules
        .iter()
        .filter(|(p, _)| !p.to_string_lossy().contains('\n'))
        .map(|(path, access)| ((*access & have.fs).bits(), path.to_path_buf()))
        .collect();
    if root_listable {
        let list = BitFlags::from(AccessFs::ReadDir) & have.fs;
        rules.push((list.bits(), PathBuf::from("/")));
    }
    let ruleset = sys::forked::Ruleset {
        fs: have.fs.bits(),
        net: have.net.bits(),
        scoped: have.scopes.bits(),
        rules,
    };
    let record = asked.verdict(&st, added, root_listable);
    Ok((ruleset, record))
}

/// What the layer asks of the running kernel.
struct Asked {
    /// The kernel's Landlock ABI version (0: none), and why it could not
    /// be read.
    abi: i32,
    kernel: ABI,
    why: Option<String>,
    deny_tcp: bool,
    /// TCP connect is allowed to one port (the egress proxy's).
    proxy_only: bool,
    wanted: Wanted,
    /// What the kernel can enforce of `wanted`.
    have: Wanted,
    /// `wanted` minus `have`, by name.
    missing: Vec<String>,
}

impl Asked {
    fn new(deny_tcp: bool) -> Asked {
        let (abi, kernel, why) = match sys::landlock::abi_version() {
            Ok(v) => (v, ABI::from(v), None),
            Err(e) => (0, ABI::Unsupported, Some(e.to_string())),
        };
        let wanted = Wanted::policy(kernel, deny_tcp);
        let have = Wanted::at(kernel, deny_tcp);
        let missing = wanted.missing(&have);
        Asked {
            abi,
            kernel,
            why,
            deny_tcp,
            proxy_only: false,
            wanted,
            have,
            missing,
        }
    }

    /// The layer's record, from the kernel's verdict on the ruleset.
    fn verdict(self, st: &RulesetStatus, added: Added, root_listable: bool) -> LandlockApplied {
        // The crate's verdict, made stricter by our own accounting: a right
        // the policy wanted and the kernel lacks is never "fully" enforced.
        let status = match st {
            RulesetStatus::FullyEnforced if !self.missing.is_empty() => Enforced::Partially,
            s => enforcement(s),
        };
        let enforced = status != Enforced::Not;
        let tcp = if !self.deny_tcp {
            Tcp::Allowed
        } else if enforced && self.have.net == self.wanted.net && self.proxy_only {
            Tcp::ProxyOnly
        } else if enforced && self.have.net == self.wanted.net {
            Tcp::Denied
        } else {
            Tcp::Unavailable
        };
        let scopes: Vec<String> = if enforced {
            self.have
                .scopes
                .iter()
                .map(|s| snake(&format!("{s:?}")))
                .collect()
        } else {
            Vec::new()
        };
        LandlockApplied {
            status,
            abi: self.abi,
            fs_rules: if enforced { added.fs_rules } else { 0 },
            tcp,
            root_listable: enforced && root_listable,
            scopes,
            missing: self.missing,
            skipped: added.skipped,
            why: self.why,
        }
    }
}

/// Listing `/` (and the directories stockade created on the root tmpfs,
/// such as /etc) is granted only when every mount in the jail lies at or
/// beneath a granted path. ReadDir on `/` reaches every directory below
/// it, so with a mount left out of the ruleset (--landlock-exclude) it
/// would reveal the names inside that mount: then `/` stays unlistable.
/// Returns whether `/` is listable.
fn grant_root_listing(
    created: RulesetCreated,
    fs: BitFlags<AccessFs>,
    added: &Added,
    mounts: Option<&[PathBuf]>,
) -> Result<(RulesetCreated, bool), JailError> {
    let list = BitFlags::from(AccessFs::ReadDir) & fs;
    if list.is_empty() || !every_mount_granted(&added.granted, &added.absent, mounts) {
        return Ok((created, false));
    }
    let f = open_rule_path(Path::new("/")).map_err(JailError::LandlockOpenRoot)?;
    let created =
        created
            .add_rule(PathBeneath::new(f, list))
            .map_err(|err| JailError::LandlockAddRule {
                path: "/".into(),
                err,
            })?;
    Ok((created, true))
}

/// A ruleset that handles everything `wanted` names.
fn ruleset(wanted: &Wanted) -> Result<RulesetCreated, JailError> {
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(wanted.fs)
        .map_err(JailError::LandlockHandleFs)?;
    if !wanted.net.is_empty() {
        rs = rs
            .handle_access(wanted.net)
            .map_err(JailError::LandlockHandleNet)?;
    }
    rs = rs.scope(wanted.scopes).map_err(JailError::LandlockScope)?;
    rs.create().map_err(JailError::LandlockCreate)
}

/// Allow TCP connect to `port` (when given and the ruleset handles TCP).
fn allow_connect(
    created: RulesetCreated,
    wanted: &Wanted,
    port: Option<u16>,
) -> Result<RulesetCreated, JailError> {
    match port {
        Some(p) if wanted.net.contains(AccessNet::ConnectTcp) => created
            .add_rule(NetPort::new(p, AccessNet::ConnectTcp))
            .map_err(|err| JailError::LandlockAddRule {
                path: format!("tcp connect port {p}").into(),
                err,
            }),
        _ => Ok(created),
    }
}

/// What [`add_rules`] put in the ruleset, and what it left out.
struct Added<'a> {
    /// Each rule added: its path and the rights it grants.
    rules: Vec<(&'a Path, BitFlags<AccessFs>)>,
    fs_rules: usize,
    skipped: Vec<Skipped>,
    /// The paths granted something.
    granted: Vec<&'a Path>,
    /// Rule paths that do not exist: an optional bind whose source was
    /// missing, so no mount is there either.
    absent: Vec<&'a Path>,
}

/// One rule per path of `rules` (out of `fs`, the handled rights; `abi`
/// decides which are file rights), anchored on the path itself.
fn add_rules(
    mut created: RulesetCreated,
    rules: &[(PathBuf, Grant)],
    fs: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<(RulesetCreated, Added<'_>), JailError> {
    let mut added = Added {
        rules: Vec::new(),
        fs_rules: 0,
        skipped: Vec::new(),
        granted: Vec::with_capacity(rules.len()),
        absent: Vec::new(),
    };
    for (path, g) in rules {
        let (f, is_dir) = match open_rule(path) {
            Ok(opened) => opened,
            Err((why, absent)) => {
                if absent {
                    added.absent.push(path);
                }
                added.skipped.push(Skipped {
                    path: path.display().to_string(),
                    why,
                });
                continue;
            }
        };
        let access = if is_dir {
            grant_dir(*g, fs)
        } else {
            grant_file(*g, fs, abi)
        };
        if access.is_empty() {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(f, access))
            .map_err(|err| JailError::LandlockAddRule {
                path: path.clone(),
                err,
            })?;
        added.fs_rules += 1;
        added.rules.push((path.as_path(), access));
        // A listing-only rule (the fallback's way around a denied path)
        // does not make a mount beneath it granted: `/` stays unlistable
        // rather than reveal a denied directory's names.
        if *g != Grant::List {
            added.granted.push(path.as_path());
        }
    }
    Ok((created, added))
}

/// The root of the IPC namespace's mqueue filesystem, mounted nowhere
/// (`Landlock::mqueue`, opened by init), or why it could not be.
pub type MqueueRoot<'a> = Result<std::os::fd::BorrowedFd<'a>, &'a str>;

/// How the rule on [`MqueueRoot`] is named where it is left out
/// (`skipped`): no path of the jail reaches it.
pub const MQUEUE_RULE: &str = "mqueue (the IPC namespace's own)";

/// What a rule on /dev/mqueue grants ([`Grant::ReadWrite`]), on the root
/// of the IPC namespace's mqueue filesystem where the jail mounts none.
/// `mq_open` resolves its queue on the namespace's internal mqueue mount,
/// which has no parent: Landlock's walk up from the queue finds no rule
/// but one on that root inode (the filesystem is one per IPC namespace,
/// so the rule made through another mount of it is found there). Where
/// init could not open it, or the kernel refuses the rule, it is left out
/// and listed in `skipped`: `mq_open` is then refused (EACCES), as
/// without it; the run goes on.
fn add_mqueue_rule(
    created: &mut RulesetCreated,
    added: &mut Added,
    mqueue: MqueueRoot,
    fs: BitFlags<AccessFs>,
) {
    let access = grant_dir(Grant::ReadWrite, fs);
    let why = match mqueue {
        Ok(_) if access.is_empty() => return,
        Ok(fd) => match created.add_rule(PathBeneath::new(fd, access)) {
            Ok(_) => {
                added.fs_rules += 1;
                return;
            }
            Err(e) => e.to_string(),
        },
        Err(why) => why.to_string(),
    };
    added.skipped.push(Skipped {
        path: MQUEUE_RULE.into(),
        why,
    });
}

/// A rule path opened, and whether it is a directory; or why it is left
/// out, and whether that is because it does not exist.
fn open_rule(path: &Path) -> Result<(File, bool), (String, bool)> {
    let f = open_rule_path(path)
        .map_err(|e| (e.to_string(), e.kind() == std::io::ErrorKind::NotFound))?;
    let md = f.metadata().map_err(|e| (e.to_string(), false))?;
    if md.file_type().is_symlink() {
        return Err(("is a symlink".into(), false));
    }
    Ok((f, md.is_dir()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi7_kernel_misses_nothing() {
        let w = Wanted::policy(ABI::V7, true);
        assert!(w.missing(&Wanted::at(ABI::V7, true)).is_empty());
        assert!(w
            .fs
            .contains(AccessFs::IoctlDev | AccessFs::Truncate | AccessFs::Refer));
        assert_eq!(w.net, AccessNet::BindTcp | AccessNet::ConnectTcp);
        assert_eq!(w.scopes, Scope::AbstractUnixSocket | Scope::Signal);
    }

    #[test]
    fn old_kernel_names_what_is_missing() {
        let w = Wanted::policy(ABI::V3, true);
        let m = w.missing(&Wanted::at(ABI::V3, true));
        assert_eq!(
            m,
            [
                "fs:ioctl_dev",
                "net:bind_tcp",
                "net:connect_tcp",
                "scope:abstract_unix_socket",
                "scope:signal"
            ]
        );
        let none = w.missing(&Wanted::at(ABI::Unsupported, true));
        assert!(none.contains(&"fs:read_file".to_string()));
        assert!(none.contains(&"fs:execute".to_string()));
    }

    #[test]
    fn host_network_does_not_want_tcp_rights() {
        let w = Wanted::policy(ABI::V3, false);
        assert!(w.net.is_empty());
        assert!(!w
            .missing(&Wanted::at(ABI::V3, false))
            .iter()
            .any(|m| m.starts_with("net:")));
    }

    #[test]
    fn newer_kernel_rights_are_wanted_too() {
        let w = Wanted::policy(ABI::V9, true);
        assert!(w.fs.contains(AccessFs::ResolveUnix));
        let w6 = Wanted::policy(ABI::V6, true);
        assert!(!w6.fs.contains(AccessFs::ResolveUnix));
    }

    #[test]
    fn read_only_grants_no_write_right() {
        let fs = AccessFs::from_all(ABI::V7);
        let g = grant_dir(Grant::ReadExec, fs);
        assert_eq!(
            g,
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
        assert_eq!(grant_dir(Grant::ReadWrite, fs), fs);
    }

    #[test]
    fn device_grants_no_create_or_remove() {
        let fs = AccessFs::from_all(ABI::V7);
        let g = grant_dir(Grant::Device, fs);
        assert!(g.contains(AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev));
        for bad in [
            AccessFs::MakeReg,
            AccessFs::MakeChar,
            AccessFs::MakeDir,
            AccessFs::MakeSym,
            AccessFs::RemoveFile,
            AccessFs::RemoveDir,
            AccessFs::Execute,
            AccessFs::Refer,
            AccessFs::Truncate,
        ] {
            assert!(!g.contains(bad), "{bad:?}");
        }
        // ioctl_dev only where the handled set has it.
        let v4 = AccessFs::from_all(ABI::V4);
        assert!(!grant_dir(Grant::Device, v4).contains(AccessFs::IoctlDev));
    }

    #[test]
    fn files_get_only_file_rights() {
        let fs = AccessFs::from_all(ABI::V7);
        let g = grant_file(Grant::ReadWrite, fs, ABI::V7);
        assert_eq!(g, AccessFs::from_file(ABI::V7));
        assert!(!g.contains(AccessFs::ReadDir));
        assert_eq!(
            grant_file(Grant::ReadExec, fs, ABI::V7),
            AccessFs::Execute | AccessFs::ReadFile
        );
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(sys::mountinfo_path("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(sys::mountinfo_path("/x\\134y"), PathBuf::from("/x\\y"));
        assert_eq!(sys::mountinfo_path("/plain"), PathBuf::from("/plain"));
        assert_eq!(sys::mountinfo_path("/end\\04"), PathBuf::from("/end\\04"));
    }

    #[test]
    fn names_are_snake_case() {
        assert_eq!(snake("AbstractUnixSocket"), "abstract_unix_socket");
        assert_eq!(snake("IoctlDev"), "ioctl_dev");
    }
}
