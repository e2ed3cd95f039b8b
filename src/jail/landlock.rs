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
//!
//! The `landlock` crate only names the rights here ([`decide`] works out
//! with it what to ask for); every call to the kernel goes through
//! `sys::landlock`, the same functions a fork server's child enforces its
//! ruleset with (`sys::forked`).

#![deny(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};

use landlock::{Access as _, AccessFs, AccessNet, BitFlags, Scope, ABI};

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
/// A kernel without Landlock enforces nothing: the status says so, and
/// `why` says why the ABI could not be read.
///
/// Errors (the kernel refused a step; nothing is enforced): opening `/`
/// for its listing rule, creating the ruleset, adding a rule, or
/// `landlock_restrict_self`.
///
/// `mounts`: every mount point of the jail's own root (absolute), when it
/// has one; None reads them from /proc/self/mountinfo. `mqueue`: the root
/// of the IPC namespace's mqueue filesystem, when the plan asks for a rule
/// there (see [`Decided::add_mqueue_rule`]), or why init could not open
/// it. `log_tag`: the supervisor reads the kernel's audit records: name
/// this process so (the domain's creation record carries the name, which
/// is how the supervisor tells this run's domain from others') and ask the
/// kernel to log denials after execve too
/// ([`sys::landlock::RESTRICT_SELF_LOG_NEW_EXEC_ON`], ABI 7; asked for only
/// then, so that no run fills the host's audit log with records nobody
/// reads).
pub fn apply(
    rules: &[(PathBuf, Grant)],
    deny_tcp: bool,
    connect_port: Option<u16>,
    mounts: Option<&[PathBuf]>,
    log_tag: Option<&std::ffi::CStr>,
    mqueue: Option<MqueueRoot>,
) -> Result<LandlockApplied, JailError> {
    let mut asked = Asked::new(deny_tcp);
    asked.proxy_only = connect_port.is_some();
    let mut decided = decide(asked, rules, mounts)?;
    if decided.asked.kernel == ABI::Unsupported {
        return Ok(decided.verdict());
    }
    let ruleset = decided.ruleset()?;
    let connect = BitFlags::from(AccessNet::ConnectTcp);
    if let Some(p) = connect_port.filter(|_| decided.asked.have.net.contains(connect)) {
        sys::landlock::add_port_rule(&ruleset, connect.bits(), p)
            .step("landlock", format!("tcp connect port {p}"))?;
    }
    if let Some(mq) = mqueue {
        decided.add_mqueue_rule(&ruleset, mq);
    }
    let mut flags = 0;
    if let Some(tag) = log_tag {
        sys::set_comm(tag).step("landlock", "")?;
        if decided.asked.kernel >= ABI::V7 {
            flags |= sys::landlock::RESTRICT_SELF_LOG_NEW_EXEC_ON;
        }
    }
    sys::landlock::restrict_self(&ruleset, flags).step("landlock", "")?;
    Ok(decided.verdict())
}

/// [`apply`]'s ruleset for a fork server's children, as the kernel takes
/// it: each child mounts its own /tmp, workdir, /dev/shm and /dev/pts, and
/// a Landlock rule on a mount point is not seen beneath what is mounted
/// over it, so each child makes the ruleset itself, after its mounts
/// (`sys::forked`), from this: the handled rights and scopes as the
/// kernel's bits (only those the running kernel knows) and each rule, by
/// path. The record says what enforcing it gives, as [`apply`]'s does. The
/// ruleset is made here too, with the calls each child makes, to have the
/// kernel check every rule before any child depends on it, then let go.
///
/// None, with a `not_enforced` record, when the kernel has no Landlock:
/// the children could not make the ruleset, and enforce none.
pub fn prepare(
    rules: &[(PathBuf, Grant)],
    deny_tcp: bool,
    mounts: Option<&[PathBuf]>,
) -> Result<(Option<sys::forked::Ruleset>, LandlockApplied), JailError> {
    let decided = decide(Asked::new(deny_tcp), rules, mounts)?;
    if decided.asked.kernel == ABI::Unsupported {
        return Ok((None, decided.verdict()));
    }
    drop(decided.ruleset()?);
    Ok((Some(decided.forked()), decided.verdict()))
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
    /// What to ask of the running kernel.
    fn new(deny_tcp: bool) -> Asked {
        Asked::of(sys::landlock::abi_version(), deny_tcp)
    }

    /// What to ask of a kernel whose ABI query answered `version`.
    fn of(version: sys::SysResult<i32>, deny_tcp: bool) -> Asked {
        let (abi, kernel, why) = match version {
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

    /// What enforcing `have` gives: nothing without Landlock, less than
    /// the policy when a wanted right is missing.
    fn status(&self) -> Enforced {
        if self.kernel == ABI::Unsupported {
            Enforced::Not
        } else if !self.missing.is_empty() {
            Enforced::Partially
        } else {
            Enforced::Fully
        }
    }
}

/// What [`decide`] made of the rules: the ruleset each launcher has the
/// kernel make, before anything is asked of the kernel but the ABI and
/// the rule paths' opens.
struct Decided<'a> {
    asked: Asked,
    /// Each rule kept: never one that grants nothing the kernel handles.
    rules: Vec<Rule<'a>>,
    /// Filesystem rules in the ruleset (the mqueue rule counts too).
    fs_rules: usize,
    /// Rule paths left out, and why.
    skipped: Vec<Skipped>,
    /// `/`, opened, when listing it is granted (see [`decide`]).
    root: Option<File>,
}

/// A rule of the ruleset: its path, opened (the rule is anchored on this
/// inode), and the rights it grants, as the kernel handles them.
struct Rule<'a> {
    path: &'a Path,
    fd: File,
    access: BitFlags<AccessFs>,
}

/// The ruleset for `rules`, as `asked` can have it enforced: one rule per
/// path, anchored on the path itself and granting the handled rights of
/// its grant (only file rights on what is not a directory). A path that
/// cannot be opened is left out and listed in `skipped` (less granted,
/// never more). Listing `/` (and the directories stockade created on the
/// root tmpfs, such as /etc) is granted only when every mount in the jail
/// lies at or beneath a granted path (see [`every_mount_granted`];
/// `mounts` as for [`apply`]): ReadDir on `/` reaches every directory
/// below it, so with a mount left out of the ruleset (--landlock-exclude)
/// it would reveal the names inside that mount. Errors: `/` cannot be
/// opened.
fn decide<'a>(
    asked: Asked,
    rules: &'a [(PathBuf, Grant)],
    mounts: Option<&[PathBuf]>,
) -> Result<Decided<'a>, JailError> {
    let abi = asked.kernel.max(BASELINE);
    let (fs, have) = (asked.wanted.fs, asked.have.fs);
    let mut decided = Decided {
        asked,
        rules: Vec::with_capacity(rules.len()),
        fs_rules: 0,
        skipped: Vec::new(),
        root: None,
    };
    // The paths granted something, and those that do not exist (an
    // optional bind whose source was missing, so no mount is there
    // either).
    let mut granted = Vec::with_capacity(rules.len());
    let mut absent = Vec::new();
    for (path, g) in rules {
        let (fd, is_dir) = match open_rule(path) {
            Ok(opened) => opened,
            Err((why, missing)) => {
                if missing {
                    absent.push(path.as_path());
                }
                decided.skipped.push(Skipped {
                    path: path.display().to_string(),
                    why,
                });
                continue;
            }
        };
        let access = have
            & if is_dir {
                grant_dir(*g, fs)
            } else {
                grant_file(*g, fs, abi)
            };
        if access.is_empty() {
            continue;
        }
        decided.rules.push(Rule { path, fd, access });
        decided.fs_rules += 1;
        // A listing-only rule (the fallback's way around a denied path)
        // does not make a mount beneath it granted: `/` stays unlistable
        // rather than reveal a denied directory's names.
        if *g != Grant::List {
            granted.push(path.as_path());
        }
    }
    if !decided.root_access().is_empty() && every_mount_granted(&granted, &absent, mounts) {
        let root = open_rule_path(Path::new("/")).map_err(JailError::LandlockOpenRoot)?;
        decided.root = Some(root);
    }
    Ok(decided)
}

impl Decided<'_> {
    /// What the rule on `/` grants: listing, where the kernel handles it.
    fn root_access(&self) -> BitFlags<AccessFs> {
        BitFlags::from(AccessFs::ReadDir) & self.asked.have.fs
    }

    /// The ruleset made by the kernel: the handled rights and scopes, each
    /// rule and `/`'s listing, with the calls a fork server's child makes.
    fn ruleset(&self) -> Result<std::os::fd::OwnedFd, JailError> {
        let have = &self.asked.have;
        let ruleset = sys::landlock::ruleset(have.fs.bits(), have.net.bits(), have.scopes.bits())
            .step("landlock", "")?;
        for r in &self.rules {
            sys::landlock::add_path_rule(&ruleset, r.access.bits(), &r.fd, r.path)
                .step("landlock", r.path)?;
        }
        if let Some(root) = &self.root {
            let root_path = Path::new("/");
            sys::landlock::add_path_rule(&ruleset, self.root_access().bits(), root, root_path)
                .step("landlock", root_path)?;
        }
        Ok(ruleset)
    }

    /// Add what a rule on /dev/mqueue grants ([`Grant::ReadWrite`]) on the
    /// root of the IPC namespace's mqueue filesystem, where the jail
    /// mounts none. `mq_open` resolves its queue on the namespace's
    /// internal mqueue mount, which has no parent: Landlock's walk up from
    /// the queue finds no rule but one on that root inode (the filesystem
    /// is one per IPC namespace, so the rule made through another mount of
    /// it is found there). Where init could not open it, or the kernel
    /// refuses the rule, it is left out and listed in `skipped`: `mq_open`
    /// is then refused (EACCES), as without it; the run goes on.
    fn add_mqueue_rule(&mut self, ruleset: &std::os::fd::OwnedFd, mqueue: MqueueRoot) {
        let access = grant_dir(Grant::ReadWrite, self.asked.have.fs);
        let why = match mqueue {
            Ok(_) if access.is_empty() => return,
            Ok(fd) => {
                match sys::landlock::add_path_rule(
                    ruleset,
                    access.bits(),
                    &fd,
                    MQUEUE_RULE.as_ref(),
                ) {
                    Ok(()) => {
                        self.fs_rules += 1;
                        return;
                    }
                    Err(e) => e.to_string(),
                }
            }
            Err(why) => why.to_string(),
        };
        self.skipped.push(Skipped {
            path: MQUEUE_RULE.into(),
            why,
        });
    }

    /// The ruleset as a fork server's child makes it: by path, since each
    /// child reopens every path after its own mounts. A path with a
    /// newline stays out (less granted, never more), as it did when the
    /// ruleset was text.
    fn forked(&self) -> sys::forked::Ruleset {
        let have = &self.asked.have;
        let mut rules: Vec<(u64, PathBuf)> = self
            .rules
            .iter()
            .filter(|r| !r.path.to_string_lossy().contains('\n'))
            .map(|r| (r.access.bits(), r.path.to_path_buf()))
            .collect();
        if self.root.is_some() {
            rules.push((self.root_access().bits(), PathBuf::from("/")));
        }
        sys::forked::Ruleset {
            fs: have.fs.bits(),
            net: have.net.bits(),
            scoped: have.scopes.bits(),
            rules,
        }
    }

    /// The layer's record of enforcing this ruleset.
    fn verdict(self) -> LandlockApplied {
        let asked = self.asked;
        let status = asked.status();
        let enforced = status != Enforced::Not;
        let tcp = if !asked.deny_tcp {
            Tcp::Allowed
        } else if enforced && asked.have.net == asked.wanted.net && asked.proxy_only {
            Tcp::ProxyOnly
        } else if enforced && asked.have.net == asked.wanted.net {
            Tcp::Denied
        } else {
            Tcp::Unavailable
        };
        let scopes: Vec<String> = if enforced {
            asked
                .have
                .scopes
                .iter()
                .map(|s| snake(&format!("{s:?}")))
                .collect()
        } else {
            Vec::new()
        };
        LandlockApplied {
            status,
            abi: asked.abi,
            fs_rules: if enforced { self.fs_rules } else { 0 },
            tcp,
            root_listable: enforced && self.root.is_some(),
            scopes,
            missing: asked.missing,
            skipped: self.skipped,
            why: asked.why,
        }
    }
}

/// The root of the IPC namespace's mqueue filesystem, mounted nowhere
/// (`Landlock::mqueue`, opened by init), or why it could not be.
pub type MqueueRoot<'a> = Result<std::os::fd::BorrowedFd<'a>, &'a str>;

/// How the rule on [`MqueueRoot`] is named where it is left out
/// (`skipped`): no path of the jail reaches it.
pub const MQUEUE_RULE: &str = "mqueue (the IPC namespace's own)";

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

    /// A fresh directory of this test's own, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let d = std::env::temp_dir()
                .join(format!("stockade-landlock-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("scratch directory");
            Scratch(d)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn abi7() -> Asked {
        Asked::of(Ok(7), true)
    }

    #[test]
    fn decide_leaves_out_a_missing_path_and_counts_it_absent() {
        let d = Scratch::new("absent");
        let gone = d.0.join("gone");
        let rules = vec![
            (d.0.clone(), Grant::ReadWrite),
            (gone.clone(), Grant::ReadExec),
        ];
        let mounts = [d.0.clone(), gone.clone()];
        let decided = decide(abi7(), &rules, Some(&mounts)).expect("decided");
        assert_eq!(decided.rules.len(), 1);
        assert_eq!(decided.rules[0].path, d.0.as_path());
        assert_eq!(decided.skipped.len(), 1);
        assert_eq!(decided.skipped[0].path, gone.display().to_string());
        assert!(
            decided.skipped[0].why.contains("No such file"),
            "{:?}",
            decided.skipped
        );
        // The missing bind has no mount either: `/` stays listable.
        assert!(decided.root.is_some());
        let rec = decided.verdict();
        assert_eq!(
            (rec.status, rec.fs_rules, rec.root_listable),
            (Enforced::Fully, 1, true)
        );
    }

    #[test]
    fn decide_gives_a_file_only_file_rights() {
        let d = Scratch::new("file");
        let f = d.0.join("f");
        std::fs::write(&f, b"x").expect("file");
        let rules = vec![
            (f.clone(), Grant::ReadWrite),
            (d.0.clone(), Grant::ReadExec),
        ];
        let decided = decide(abi7(), &rules, Some(&[])).expect("decided");
        assert_eq!(decided.rules[0].access, AccessFs::from_file(ABI::V7));
        assert_eq!(
            decided.rules[1].access,
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
        // Listing alone on a file grants nothing: the rule is left out,
        // and not as skipped.
        let listed = vec![(f, Grant::List)];
        let decided = decide(abi7(), &listed, Some(&[])).expect("decided");
        assert!(decided.rules.is_empty() && decided.skipped.is_empty());
    }

    #[test]
    fn decide_refuses_root_listing_with_a_mount_outside_the_grants() {
        let d = Scratch::new("outside");
        let rules = vec![(d.0.clone(), Grant::ReadExec)];
        let outside = [d.0.clone(), PathBuf::from("/elsewhere")];
        let decided = decide(abi7(), &rules, Some(&outside)).expect("decided");
        assert!(decided.root.is_none());
        assert!(!decided.verdict().root_listable);
        // A listing-only rule does not make the mount beneath it granted.
        let listed = vec![(d.0.clone(), Grant::List)];
        let decided = decide(abi7(), &listed, Some(std::slice::from_ref(&d.0))).expect("decided");
        assert!(decided.root.is_none());
        let inside = [d.0.clone()];
        let decided = decide(abi7(), &rules, Some(&inside)).expect("decided");
        assert!(decided.root.is_some());
    }

    #[test]
    fn decide_masks_rights_with_what_the_kernel_has() {
        let d = Scratch::new("masked");
        let rules = vec![(d.0.clone(), Grant::ReadWrite)];
        let decided = decide(Asked::of(Ok(3), true), &rules, Some(&[])).expect("decided");
        assert_eq!(decided.rules[0].access, AccessFs::from_all(ABI::V3));
        let r = decided.forked();
        assert_eq!((r.net, r.scoped), (0, 0));
        assert_eq!(r.fs, AccessFs::from_all(ABI::V3).bits());
        let rec = decided.verdict();
        assert_eq!(
            (rec.status, rec.tcp),
            (Enforced::Partially, Tcp::Unavailable)
        );
    }

    #[test]
    fn without_landlock_nothing_is_granted_and_the_record_says_why() {
        let d = Scratch::new("nolandlock");
        let rules = vec![
            (d.0.clone(), Grant::ReadWrite),
            (d.0.join("gone"), Grant::ReadExec),
        ];
        let enosys = sys::SysError {
            call: "landlock_create_ruleset",
            arg: String::new(),
            errno: sys::Errno::ENOSYS,
        };
        let decided = decide(Asked::of(Err(enosys), true), &rules, Some(&[])).expect("decided");
        assert!(decided.rules.is_empty() && decided.root.is_none());
        let rec = decided.verdict();
        assert_eq!((rec.status, rec.abi, rec.fs_rules), (Enforced::Not, 0, 0));
        assert_eq!(rec.skipped.len(), 1);
        assert!(
            rec.why.as_deref().unwrap_or("").contains("ENOSYS"),
            "{rec:?}"
        );
        assert!(rec.missing.contains(&"fs:read_file".to_string()));
    }

    #[test]
    fn forked_ruleset_lists_paths_and_leaves_out_a_newline() {
        let d = Scratch::new("forked");
        let odd = d.0.join("a\nb");
        std::fs::create_dir(&odd).expect("odd directory");
        let rules = vec![(d.0.clone(), Grant::ReadExec), (odd, Grant::ReadWrite)];
        let decided = decide(abi7(), &rules, Some(std::slice::from_ref(&d.0))).expect("decided");
        let r = decided.forked();
        let read_exec = AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir;
        assert_eq!(
            r.rules,
            [
                (read_exec.bits(), d.0.clone()),
                (BitFlags::from(AccessFs::ReadDir).bits(), PathBuf::from("/")),
            ]
        );
        assert_eq!(r.fs, AccessFs::from_all(ABI::V7).bits());
        assert_eq!(r.net, AccessNet::from_all(ABI::V7).bits());
        assert_eq!(r.scoped, Scope::from_all(ABI::V7).bits());
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
