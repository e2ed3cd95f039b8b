//! `stockade bwrap` where user namespaces are refused (a default Docker
//! container): no mount namespace, so the payload sees the host's own
//! tree, and Landlock alone decides what of it is reachable.
//!
//! Each filesystem op either is honoured exactly, or takes access away
//! (named on the run's one stderr line), or refuses the run; none widens
//! what the payload reaches. The ops, in order, give each host path a grant
//! (nothing, read, read-write); a later op overrides earlier ones at and
//! beneath its path, as a later mount covers earlier ones:
//!
//! - a bind whose source is the destination (the same host file, symlinks
//!   resolved): read (`--ro-bind`) or read-write (`--bind`, `--dev-bind`);
//!   a bind elsewhere cannot be built: refused;
//! - `--remount-ro`: everything at and beneath it read-only;
//! - `--dev /dev`: the host's null, zero, full, random, urandom and tty
//!   (the nodes bwrap binds from the host), the rest of /dev unreachable;
//! - `--proc`, `--tmpfs`, `--mqueue`: unreachable (the host's /proc shows
//!   every host process; a tmpfs cannot be made without a mount namespace);
//! - `--dir`: nothing to do where the host has that directory, else refused;
//!   `--symlink`: nothing to do where the host has that very symlink, else
//!   refused;
//! - `--file`, `--bind-data`, `--ro-bind-data`, `--chmod`, `--dev` elsewhere
//!   than /dev: refused (they would write to the host);
//! - the overlays (`--overlay`, `--tmp-overlay`, `--ro-overlay`): they make
//!   the namespaces mandatory (see [`mandatory`]): bwrap cannot mount one
//!   without them, nor can stockade, and nothing else shows the payload the
//!   same tree.
//!
//! Landlock only adds access: a path granted less than one above it is cut
//! out by granting the directories around it one by one instead (the entries
//! of each directory on the way, read when the run starts; a symlink among
//! them is never granted itself, its target is where its grant comes from).
//! The directories on the way are then not listable.

use std::path::{Path, PathBuf};

use super::BwrapError;
use crate::policy::{Layer, MountSpec, Policy};

/// What the payload may do beneath a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Grant {
    Nothing,
    Read,
    Write,
}

/// The nodes of bwrap's `--dev` that come from the host.
const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Host paths with their grant; a path's grant is its deepest entry's.
#[derive(Default)]
struct Zones(Vec<(PathBuf, Grant)>);

impl Zones {
    /// `g` at and beneath `p`, over whatever was there.
    fn set(&mut self, p: PathBuf, g: Grant) {
        self.0.retain(|(q, _)| !q.starts_with(&p));
        self.0.push((p, g));
    }

    /// Everything at and beneath `p` read-only at most.
    fn remount_ro(&mut self, p: PathBuf) {
        let above = self.grant(&p).min(Grant::Read);
        for (q, g) in self.0.iter_mut() {
            if q.starts_with(&p) {
                *g = (*g).min(Grant::Read);
            }
        }
        if !self.0.iter().any(|(q, _)| *q == p) {
            self.0.push((p, above));
        }
    }

    fn grant(&self, p: &Path) -> Grant {
        self.0
            .iter()
            .filter(|(q, _)| p.starts_with(q))
            .max_by_key(|(q, _)| q.components().count())
            .map_or(Grant::Nothing, |(_, g)| *g)
    }

    /// Landlock rules (path, grant) that give every path its grant.
    fn rules(&self) -> Vec<(PathBuf, Grant)> {
        let mut out = Vec::new();
        for (p, g) in &self.0 {
            if *g == Grant::Nothing {
                continue;
            }
            let holes: Vec<&Path> = self
                .0
                .iter()
                .filter(|(q, h)| q != p && q.starts_with(p) && h < g)
                .map(|(q, _)| q.as_path())
                .collect();
            around(p, *g, &holes, &mut out);
        }
        out
    }
}

/// `g` beneath `p` except beneath each of `holes` (all beneath `p`).
fn around(p: &Path, g: Grant, holes: &[&Path], out: &mut Vec<(PathBuf, Grant)>) {
    if holes.contains(&p) {
        return;
    }
    if !holes.iter().any(|h| h.starts_with(p)) {
        out.push((p.to_path_buf(), g));
        return;
    }
    // Unreadable: nothing of it is granted (less, never more).
    let Ok(entries) = std::fs::read_dir(p) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    for e in names {
        let link = std::fs::symlink_metadata(&e).map_or(true, |m| m.file_type().is_symlink());
        if !link {
            around(&e, g, holes, out);
        }
    }
}

/// Whether the namespaces are mandatory, as bwrap makes them: with
/// `--unshare-user` (not `-try`) or `--assert-userns-disabled` bwrap
/// fails where they are refused, and so does stockade; so does a run
/// that joins the caller's namespaces or waits for its id maps, and one
/// with an overlay (overlayfs in a mount namespace of the jail's own, or
/// nothing: bwrap's words for the refused namespace, as bwrap's own run
/// ends there).
pub(super) fn mandatory(ops: &[super::parse::Op]) -> bool {
    ops.iter().any(|o| {
        matches!(
            o.opt,
            "--unshare-user"
                | "--assert-userns-disabled"
                | "--userns"
                | "--userns2"
                | "--pidns"
                | "--userns-block-fd"
                | "--overlay"
                | "--tmp-overlay"
                | "--ro-overlay"
        )
    })
}

/// The policy of the run without namespaces, from the namespaced one
/// (`translate`'s), and the host paths its ops made unreachable; or the
/// first op that cannot be honoured.
pub(super) fn policy(
    ns: &Policy,
    ops: &[super::parse::Op],
) -> Result<(Policy, Vec<String>), BwrapError> {
    if ops.iter().any(|o| o.opt == "--hostname") {
        return Err(refuse("--hostname", "needs a UTS namespace"));
    }
    let mut zones = Zones::default();
    let mut hidden = Vec::new();
    for m in &ns.mounts {
        zone(m, &mut zones, &mut hidden)?;
    }
    let mut p = ns.clone();
    p.mounts = zones
        .rules()
        .into_iter()
        .map(|(path, g)| MountSpec::Bind {
            src: path.clone(),
            dst: path,
            writable: g == Grant::Write,
            optional: false,
        })
        .collect();
    // The only layers between the payload and the host: never without them.
    p.landlock.disabled = false;
    p.seccomp.enabled = true;
    p.require.retain(|l| *l != Layer::Userns);
    for l in [Layer::Landlock, Layer::Seccomp] {
        if !p.require.contains(&l) {
            p.require.push(l);
        }
    }
    // The caller's $HOME stays (the fallback's is its run directory).
    if let Some((_, home)) = p.env.iter().find(|(k, _)| k == "HOME") {
        if Path::new(home).is_dir() {
            p.workdir.host = Some(PathBuf::from(home));
        }
    }
    Ok((p, hidden))
}

/// One mount onto the zones.
fn zone(m: &MountSpec, zones: &mut Zones, hidden: &mut Vec<String>) -> Result<(), BwrapError> {
    match m {
        MountSpec::Bind {
            src, dst, writable, ..
        } => {
            let opt = if *writable { "--bind" } else { "--ro-bind" };
            let at = same_file(opt, src, dst)?;
            zones.set(at, if *writable { Grant::Write } else { Grant::Read });
        }
        MountSpec::DevBind { src, dst, .. } => {
            let at = same_file("--dev-bind", src, dst)?;
            zones.set(at, Grant::Write);
        }
        MountSpec::RemountRo { dst } => zones.remount_ro(host("--remount-ro", dst)?),
        MountSpec::Dev { dst } if dst == Path::new("/dev") => {
            let at = host("--dev", dst)?;
            zones.set(at.clone(), Grant::Nothing);
            // Those the host has (a container may lack /dev/tty).
            for n in DEV_NODES {
                let node = at.join(n);
                if std::fs::symlink_metadata(&node).is_ok_and(|m| !m.file_type().is_symlink()) {
                    zones.set(node, Grant::Write);
                }
            }
            hidden.push("/dev (all but null, zero, full, random, urandom, tty)".into());
        }
        MountSpec::Dev { dst } => {
            return Err(refuse(
                &format!("--dev {}", dst.display()),
                "only /dev can be honoured",
            ))
        }
        MountSpec::Proc { dst } | MountSpec::Tmpfs { dst, .. } | MountSpec::Mqueue { dst } => {
            if let Ok(at) = std::fs::canonicalize(dst) {
                zones.set(at, Grant::Nothing);
            }
            hidden.push(dst.display().to_string());
        }
        MountSpec::Dir { dst, .. } if dst.is_dir() => {}
        MountSpec::Dir { dst, .. } => {
            return Err(refuse(
                &format!("--dir {}", dst.display()),
                "the host has no such directory",
            ))
        }
        MountSpec::Symlink { target, link }
            if std::fs::read_link(link).ok().as_ref() == Some(target) => {}
        MountSpec::Symlink { target, link } => {
            return Err(refuse(
                &format!("--symlink {} {}", target.display(), link.display()),
                "the host has no such symlink",
            ))
        }
        // Not reached from bwrap's ops: an overlay makes the namespaces
        // mandatory.
        MountSpec::Overlay { dst, .. } | MountSpec::Workspace { dst, .. } => {
            return Err(refuse(
                &format!("--overlay {}", dst.display()),
                "an overlay cannot be mounted",
            ))
        }
        MountSpec::File { dst, .. } => {
            return Err(refuse(
                &format!("--file {}", dst.display()),
                "it would write to the host",
            ))
        }
        MountSpec::Data { dst, .. } => {
            return Err(refuse(
                &format!("--bind-data {}", dst.display()),
                "it would write to the host",
            ))
        }
        MountSpec::Chmod { dst, .. } => {
            return Err(refuse(
                &format!("--chmod {}", dst.display()),
                "it would change the host's file",
            ))
        }
    }
    Ok(())
}

/// The host path that `src` and `dst` both name, or a refusal.
fn same_file(opt: &str, src: &Path, dst: &Path) -> Result<PathBuf, BwrapError> {
    let what = format!("{opt} {} {}", src.display(), dst.display());
    let s = std::fs::canonicalize(src).map_err(|e| refuse(&what, &crate::sys::strerror(&e)))?;
    match std::fs::canonicalize(dst) {
        Ok(d) if d == s => Ok(s),
        _ => Err(refuse(&what, "the source is not at the destination")),
    }
}

/// `dst` on the host, symlinks resolved.
fn host(opt: &str, dst: &Path) -> Result<PathBuf, BwrapError> {
    std::fs::canonicalize(dst).map_err(|e| {
        refuse(
            &format!("{opt} {}", dst.display()),
            &crate::sys::strerror(&e),
        )
    })
}

fn refuse(what: &str, why: &str) -> BwrapError {
    BwrapError::Usage(format!(
        "{what}: cannot be honoured without a mount namespace (user namespaces are refused here): {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("bwrapfb-unit-{}", std::process::id()));
        for sub in ["a/x", "a/y/z", "b"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(d.join("a/y"), d.join("a/link")).ok();
        std::fs::canonicalize(d).unwrap()
    }

    #[test]
    fn a_narrower_zone_is_cut_out_of_a_wider_one() {
        let d = dir();
        let mut z = Zones::default();
        z.set(d.clone(), Grant::Write);
        z.set(d.join("a/y"), Grant::Nothing);
        z.set(d.join("a/y/z"), Grant::Read);
        let mut rules = z.rules();
        rules.sort();
        assert_eq!(
            rules,
            [
                (d.join("a/x"), Grant::Write),
                (d.join("a/y/z"), Grant::Read),
                (d.join("b"), Grant::Write),
            ]
        );
        // A later zone over an earlier one's path replaces what is beneath.
        z.set(d.clone(), Grant::Read);
        assert_eq!(z.rules(), [(d.clone(), Grant::Read)]);
        z.remount_ro(d.join("b"));
        z.set(d.join("a"), Grant::Write);
        z.remount_ro(d.clone());
        assert!(z.rules().iter().all(|(_, g)| *g == Grant::Read));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
