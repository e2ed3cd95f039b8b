//! `stockade run --learn FILE`: run with every layer reporting where the
//! kernel allows it, and write a profile of what the command used.
//!
//! - seccomp: learning mode (everything outside the allowlist runs and is
//!   recorded), and the path-taking syscalls sent to the listener too,
//!   which records their paths (`observe::learn::paths`);
//! - the filesystem: Landlock has no report-only mode, so the jail is the
//!   base profile's, plus [`LEARN_TREES`] of the host bound read-only. A
//!   write there fails (EROFS), and nothing the command writes reaches the
//!   host, but the listener has seen it first: the learned profile makes
//!   that place writable. (A throw-away overlay is not possible here:
//!   copying up a directory owned by an id the jail does not map, such as
//!   root's /var/tmp, fails with EOVERFLOW inside a user namespace.) A
//!   command that stops at such a write is learned further by learning
//!   again with the learned profile as the base;
//! - the network: the egress proxy in record mode (any public host,
//!   each one reached recorded).
//!
//! The profile written `extends` the base profile the run used and adds
//! only what the command needed on top of it: binds, `network.allow`,
//! `seccomp.allow`. It is written to a temporary file beside FILE,
//! created before the run (an unwritable place is an error before
//! anything runs), and renamed over FILE at the end.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::outcome::Outcome;
use crate::policy::{self, MountSpec, Network, Policy, PolicyError};

/// The host's trees a learning run shows, read-only, where they exist
/// (around what the jail already has there: see [`read_only_trees`]). The
/// rest of the host (`/etc` beyond the base root's files, `/tmp`, `/run`,
/// `/sys`, `/boot`, `/mnt`) is not shown.
pub const LEARN_TREES: &[&str] = &["/home", "/root", "/opt", "/srv", "/var", "/media", "/nix"];

/// So many entries learned in one directory make it one bind.
const COLLAPSE_AT: usize = 8;

/// `--learn FILE`, checked before the run: the temporary file beside FILE,
/// removed unless the profile is committed.
pub(super) struct Learning {
    file: PathBuf,
    tmp: PathBuf,
    out: Option<File>,
    /// The base profile as `--profile` named it (absolute when a path).
    base_spec: String,
    base: Policy,
}

impl Drop for Learning {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl Learning {
    /// Check that FILE can be written (its directory exists and takes a
    /// new file), before the run.
    pub(super) fn prepare(file: &Path, base_spec: &str, base: Policy) -> Result<Learning, String> {
        let shown = file.display();
        let name = file
            .file_name()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("--learn: {shown}: not a file name"))?;
        if file.is_dir() {
            return Err(format!("--learn: {shown}: is a directory"));
        }
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".learn-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| format!("--learn: {shown}: cannot write there: {}", io_text(&e)))?;
        let base_spec = if base_spec.contains('/') || base_spec.ends_with(".toml") {
            std::path::absolute(base_spec)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| base_spec.to_string())
        } else {
            base_spec.to_string()
        };
        Ok(Learning {
            file: file.to_path_buf(),
            tmp,
            out: Some(out),
            base_spec,
            base,
        })
    }

    /// Write the profile learned from `o` (a run of `run`) and rename it
    /// over FILE; the one-line summary for stderr.
    pub(super) fn commit(mut self, run: &Policy, o: &Outcome) -> Result<String, String> {
        let learned = profile_of(&self.base_spec, &self.base, run, o);
        let text = learned.render(&run.argv);
        let shown = self.file.display().to_string();
        let mut out = self.out.take().expect("committed once");
        let written = out
            .write_all(text.as_bytes())
            .and_then(|_| out.sync_all())
            .and_then(|_| std::fs::rename(&self.tmp, &self.file));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(format!("--learn: {shown}: {}", io_text(&e)));
        }
        Ok(learned.summary(&shown, o.exit_code))
    }
}

fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_lowercase()
}

/// Learning mode onto the run's policy (after every other flag).
pub(super) fn apply(p: &mut Policy) -> Result<(), PolicyError> {
    if !p.seccomp.enabled {
        return Err(PolicyError::new(
            "--learn",
            "records through the seccomp listener: not with --no-seccomp (or seccomp.enabled = false)",
        ));
    }
    if p.network != Network::None {
        return Err(PolicyError::new(
            "--learn",
            format!(
                "records the hosts reached through the egress proxy: needs --network none, not --network {}",
                p.network.as_str()
            ),
        ));
    }
    p.seccomp.action = policy::SeccompAction::Learn;
    p.seccomp.learn_paths = true;
    p.egress_record = true;
    if !p.require.contains(&policy::Layer::Userns) {
        p.require.push(policy::Layer::Userns);
    }
    // The host's trees, first among the policy's own mounts, shown around
    // every mount the jail already has (the base root's, the workdir, the
    // profile's and the flags' binds) and every mount point of the host:
    // a tree beneath one of them is left out, one above one of them is
    // shown directory by directory around it.
    let taken: Vec<PathBuf> = crate::plan::mount_specs(p)
        .iter()
        .map(|m| m.dst().to_path_buf())
        .collect();
    let mut around = host_mount_points();
    around.extend(taken.iter().cloned());
    let mut trees = Vec::new();
    for t in LEARN_TREES {
        let t = Path::new(t);
        if !taken.iter().any(|d| t.starts_with(d)) {
            read_only_trees(t, &around, 0, &mut trees);
        }
    }
    p.mounts.splice(0..0, trees);
    Ok(())
}

/// The mount points of this mount namespace.
fn host_mount_points() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(crate::sys::mountinfo_path)
        .collect()
}

/// Read-only binds showing the directory `t` of the host at the same
/// path. A tree with something of `around` inside (a host mount point, a
/// mount of the jail's own) is shown directory by directory around it,
/// what is in `around` itself not at all (a host mount point is another
/// filesystem, often the machine's own business, such as
/// /var/lib/docker; a bind inside a bind would need its mount point made
/// in the host's directory). Unreadable directories are passed over.
fn read_only_trees(t: &Path, mounts: &[PathBuf], depth: usize, out: &mut Vec<MountSpec>) {
    let is_dir = std::fs::symlink_metadata(t).is_ok_and(|m| m.is_dir());
    let Ok(entries) = std::fs::read_dir(t) else {
        return;
    };
    if !is_dir || depth > 4 || mounts.iter().any(|m| m == t) {
        return;
    }
    if !mounts.iter().any(|m| m.starts_with(t)) {
        out.push(MountSpec::Bind {
            src: t.to_path_buf(),
            dst: t.to_path_buf(),
            writable: false,
            optional: true,
        });
        return;
    }
    let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    children.sort();
    for c in children {
        read_only_trees(&c, mounts, depth + 1, out);
    }
}

/// One bind of the learned profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bind {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub writable: bool,
}

/// What the learned profile says on top of its base.
#[derive(Debug, Default)]
pub(super) struct Learned {
    base: String,
    binds: Vec<Bind>,
    hosts: Vec<String>,
    groups: Option<Vec<String>>,
    syscalls: Vec<String>,
    /// Syscalls used that no profile may allow.
    refused: Vec<String>,
}

/// The profile learned from a run of `run` (the base's policy with the
/// flags and learning mode on top) whose outcome is `o`.
fn profile_of(base_spec: &str, base: &Policy, run: &Policy, o: &Outcome) -> Learned {
    let mut l = Learned {
        base: base_spec.to_string(),
        ..Default::default()
    };
    let none = Default::default();
    let heard = o.learned.as_ref().unwrap_or(&none);
    let paths: Vec<(PathBuf, &str)> = heard
        .paths
        .iter()
        .map(|p| (p.path.clone(), p.access.as_str()))
        .collect();
    l.binds = reduce(&paths, &shown_from_host(base, run), &|p| {
        std::fs::symlink_metadata(p).ok().map(|m| m.is_dir())
    });
    l.hosts = heard.hosts.clone();
    if run.seccomp.groups != base.seccomp.groups {
        l.groups = Some(run.seccomp.groups.clone());
    }
    let extra = run
        .seccomp
        .allow
        .iter()
        .filter(|n| !base.seccomp.allow.contains(n));
    let used = o.seccomp_learned.iter().flatten();
    for n in extra.chain(used) {
        if l.syscalls.contains(n) || l.refused.contains(n) {
            continue;
        }
        match policy::seccomp_name(n) {
            Ok(()) if crate::seccomp::syscalls::number(n).is_some() => l.syscalls.push(n.clone()),
            _ => l.refused.push(n.clone()),
        }
    }
    l
}

/// Where the learning run showed the host beyond the base root: each
/// `(jail path, host path)`: the learning trees (at their own path) and the
/// binds the flags added, in order.
fn shown_from_host(base: &Policy, run: &Policy) -> Vec<(PathBuf, PathBuf)> {
    let base_mounts = crate::plan::mount_specs(base);
    let mut out = Vec::new();
    for m in &run.mounts {
        match m {
            MountSpec::Bind { src, dst, .. } if !base_mounts.contains(m) => {
                out.push((dst.clone(), src.clone()))
            }
            _ => {}
        }
    }
    out
}

/// The binds a list of `(jail path, access)` needs, given where the host
/// was shown (`shown`: jail path → host path, the last one wins) and what
/// is on the host now (`is_dir`: None when missing). Files looked at or
/// read that exist become read-only binds (a directory looked at or
/// listed, none); a file written, a writable
/// bind of it; an entry created, removed or renamed (or a write to what
/// does not exist now), a writable bind of its nearest existing
/// directory. [`COLLAPSE_AT`] read-only entries in one directory become
/// that directory (never a top-level one); what a bind already covers is
/// left out. Parents come before their children.
pub(super) fn reduce(
    paths: &[(PathBuf, &str)],
    shown: &[(PathBuf, PathBuf)],
    is_dir: &dyn Fn(&Path) -> Option<bool>,
) -> Vec<Bind> {
    // host path → (jail path, writable)
    let mut want: BTreeMap<PathBuf, (PathBuf, bool)> = BTreeMap::new();
    for (jail, access) in paths {
        let Some((top_jail, host)) = shown
            .iter()
            .rev()
            .find(|(d, _)| jail.starts_with(d))
            .map(|(d, s)| (d, s.join(jail.strip_prefix(d).unwrap_or(Path::new("")))))
        else {
            continue;
        };
        let host_top = shown
            .iter()
            .find(|(d, _)| d == top_jail)
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        let to_jail = |h: &Path| match h.strip_prefix(&host_top) {
            Ok(rest) if !rest.as_os_str().is_empty() => top_jail.join(rest),
            _ => top_jail.clone(),
        };
        let here = is_dir(&host);
        let (h, writable) = match (*access, here) {
            // A directory only looked at or listed (stat, chdir, open
            // for reading) needs no bind of its own: binding it would show
            // all of it. What was used in it is bound; its listing then
            // shows that much.
            ("look" | "read", Some(true)) => continue,
            ("look" | "read", Some(_)) => (host.clone(), false),
            ("look" | "read", None) => continue,
            ("write", Some(false)) => (host.clone(), true),
            _ => {
                // An entry of a directory: the nearest directory that exists.
                let mut d = match here {
                    Some(true) if *access != "entry" => host.clone(),
                    _ => host.parent().map(Path::to_path_buf).unwrap_or_default(),
                };
                while is_dir(&d) != Some(true) && d.starts_with(&host_top) && d != host_top {
                    d.pop();
                }
                if is_dir(&d) != Some(true) || !d.starts_with(&host_top) {
                    continue;
                }
                (d, true)
            }
        };
        let j = to_jail(&h);
        let e = want.entry(h).or_insert((j, writable));
        e.1 |= writable;
    }
    collapse(&mut want, is_dir);
    // Leave out what a bind above covers as well: read-only beneath
    // anything, writable beneath writable.
    let all: Vec<(PathBuf, bool)> = want.iter().map(|(h, (_, w))| (h.clone(), *w)).collect();
    want.retain(|h, (_, w)| {
        !all.iter()
            .any(|(a, aw)| a != h && h.starts_with(a) && (*aw || !*w))
    });
    want.into_iter()
        .map(|(src, (dst, writable))| Bind { src, dst, writable })
        .collect()
}

/// Many read-only entries in one directory: that directory instead, up
/// the tree while it holds; never a directory at the top (`/var`, `/home`).
fn collapse(want: &mut BTreeMap<PathBuf, (PathBuf, bool)>, is_dir: &dyn Fn(&Path) -> Option<bool>) {
    loop {
        let mut per_dir: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (h, (_, w)) in want.iter() {
            if let Some(parent) = h.parent() {
                if !*w && parent.components().count() > 2 {
                    *per_dir.entry(parent.to_path_buf()).or_default() += 1;
                }
            }
        }
        let Some((dir, _)) = per_dir
            .into_iter()
            .find(|(d, n)| *n >= COLLAPSE_AT && is_dir(d) == Some(true))
        else {
            return;
        };
        let jail = want
            .iter()
            .find(|(h, _)| h.parent() == Some(dir.as_path()))
            .and_then(|(_, (j, _))| j.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| dir.clone());
        want.retain(|h, (_, w)| *w || h.parent() != Some(dir.as_path()));
        want.entry(dir).or_insert((jail, false));
    }
}

/// A TOML string (basic, escaped), with `$` doubled: profile strings
/// expand `${NAME}`.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.replace('$', "$$")).to_string()
}

impl Learned {
    /// The profile's text.
    fn render(&self, argv: &[std::ffi::OsString]) -> String {
        let cmd: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().replace('\n', " "))
            .collect();
        let mut t = String::new();
        t.push_str("# Learned by `stockade run --learn` from:\n");
        t.push_str(&format!("#   {}\n", cmd.join(" ")));
        t.push_str("# what the command used on top of its base profile.\n");
        t.push_str(&format!("extends = {}\n", toml_str(&self.base)));
        if !self.hosts.is_empty() {
            let hosts: Vec<String> = self.hosts.iter().map(|h| toml_str(h)).collect();
            t.push_str(&format!("\n[network]\nallow = [{}]\n", hosts.join(", ")));
        }
        if self.groups.is_some() || !self.syscalls.is_empty() || !self.refused.is_empty() {
            t.push_str("\n[seccomp]\n");
            if let Some(g) = &self.groups {
                let g: Vec<String> = g.iter().map(|s| toml_str(s)).collect();
                t.push_str(&format!("groups = [{}]\n", g.join(", ")));
            }
            if !self.syscalls.is_empty() {
                let s: Vec<String> = self.syscalls.iter().map(|s| toml_str(s)).collect();
                t.push_str(&format!("allow = [{}]\n", s.join(", ")));
            }
            if !self.refused.is_empty() {
                t.push_str(&format!(
                    "# used, but never allowed by stockade: {}\n",
                    self.refused.join(", ")
                ));
            }
        }
        for b in &self.binds {
            t.push_str("\n[[filesystem.bind]]\n");
            t.push_str(&format!("src = {}\n", toml_str(&b.src.to_string_lossy())));
            if b.dst != b.src {
                t.push_str(&format!("dst = {}\n", toml_str(&b.dst.to_string_lossy())));
            }
            if b.writable {
                t.push_str("writable = true\n");
            }
        }
        t
    }

    fn summary(&self, file: &str, exit: i32) -> String {
        let rw = self.binds.iter().filter(|b| b.writable).count();
        let mut s = format!(
            "learn: wrote {file} (extends {}): {} syscalls, {} binds ({} read-only, {rw} writable), {} hosts",
            self.base,
            self.syscalls.len(),
            self.binds.len(),
            self.binds.len() - rw,
            self.hosts.len()
        );
        if !self.refused.is_empty() {
            s.push_str(&format!(
                "; never allowed, left out: {}",
                self.refused.join(", ")
            ));
        }
        if exit != 0 {
            s.push_str(&format!("; the command exited {exit}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(
        dirs: &'static [&'static str],
        files: &'static [&'static str],
    ) -> impl Fn(&Path) -> Option<bool> {
        move |p: &Path| {
            if dirs.iter().any(|d| Path::new(d) == p) {
                Some(true)
            } else if files.iter().any(|f| Path::new(f) == p) {
                Some(false)
            } else {
                None
            }
        }
    }

    fn b(src: &str, writable: bool) -> Bind {
        Bind {
            src: src.into(),
            dst: src.into(),
            writable,
        }
    }

    #[test]
    fn a_read_file_and_a_written_directory_are_exactly_two_binds() {
        let shown = vec![("/srv".into(), "/srv".into())];
        let is = fs(&["/srv", "/srv/in", "/srv/out"], &["/srv/in/data.txt"]);
        let paths = vec![
            (PathBuf::from("/srv/in/data.txt"), "read"),
            (PathBuf::from("/srv/in/missing"), "look"),
            (PathBuf::from("/srv/in"), "read"),
            (PathBuf::from("/srv"), "look"),
            (PathBuf::from("/srv/out/new.txt"), "entry"),
            (PathBuf::from("/srv/out/new.txt"), "read"),
            (PathBuf::from("/etc/shadow"), "read"),
        ];
        assert_eq!(
            reduce(&paths, &shown, &is),
            vec![b("/srv/in/data.txt", false), b("/srv/out", true)]
        );
    }

    #[test]
    fn many_reads_in_one_directory_become_that_directory() {
        let shown = vec![("/opt".into(), "/opt".into())];
        static FILES: [&str; 9] = [
            "/opt/app/lib/a",
            "/opt/app/lib/b",
            "/opt/app/lib/c",
            "/opt/app/lib/d",
            "/opt/app/lib/e",
            "/opt/app/lib/f",
            "/opt/app/lib/g",
            "/opt/app/lib/h",
            "/opt/app/bin",
        ];
        let is = fs(&["/opt", "/opt/app", "/opt/app/lib"], &FILES);
        let paths: Vec<(PathBuf, &str)> =
            FILES.iter().map(|f| (PathBuf::from(f), "read")).collect();
        assert_eq!(
            reduce(&paths, &shown, &is),
            vec![b("/opt/app/bin", false), b("/opt/app/lib", false)]
        );
    }

    #[test]
    fn a_flags_bind_maps_back_to_its_source() {
        let shown = vec![("/data".into(), "/host/data".into())];
        let is = fs(&["/host/data"], &["/host/data/x"]);
        let paths = vec![(PathBuf::from("/data/x"), "read")];
        assert_eq!(
            reduce(&paths, &shown, &is),
            vec![Bind {
                src: "/host/data/x".into(),
                dst: "/data/x".into(),
                writable: false
            }]
        );
    }

    #[test]
    fn a_writable_directory_covers_what_is_read_beneath_it() {
        let shown = vec![("/var".into(), "/var".into())];
        let is = fs(&["/var", "/var/w"], &["/var/w/a"]);
        let paths = vec![
            (PathBuf::from("/var/w/a"), "read"),
            (PathBuf::from("/var/w/b"), "entry"),
        ];
        assert_eq!(reduce(&paths, &shown, &is), vec![b("/var/w", true)]);
    }

    #[test]
    fn profile_strings_escape_dollars_and_quotes() {
        for raw in ["/a/$x\"y", "/b/'q'\\", "/c\nd"] {
            let v: toml::Table = toml::from_str(&format!("v = {}", toml_str(raw))).unwrap();
            assert_eq!(v["v"].as_str().unwrap(), raw.replace('$', "$$"));
        }
    }
}
