//! What only the `stockade bwrap` front end asks of a run: bubblewrap's
//! options that have no place in stockade's own policy (the command's
//! argv[0], the caller's fds told or read, its namespaces joined, its
//! BPF programs, capabilities kept as root keeps them, …). The default
//! asks for nothing; a policy of any other front end leaves it so.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;

/// Where the supervisor writes the jail's pid (the process that execs the
/// command, as seen from the caller, before it does: see
/// `supervise::childpid`; init's with `userns_block_fd`) and its
/// namespaces' inode numbers, as bwrap writes them: `{"child-pid": N, "mnt-namespace": M, …}`,
/// `pretty` over several lines as `--info-fd`, else on one line as the
/// first document of `--json-status-fd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PidReport {
    pub fd: i32,
    pub pretty: bool,
}

/// bubblewrap's part of a [`super::Policy`] (`Policy::compat`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Compat {
    /// The command's own argv[0] when it differs from `argv[0]` (which
    /// names what is executed), as bwrap's `--argv0`.
    pub argv0: Option<OsString>,
    /// Directories to start in when `Policy::chdir` cannot be entered, in
    /// order, each with `PWD` set to it (bwrap's: the caller's directory,
    /// else `$HOME`, else `/`). Empty: a `chdir` that fails is a setup
    /// error.
    pub chdir_fallbacks: Vec<PathBuf>,
    /// Caller fds the supervisor tells the jail's pid once it runs, as
    /// bwrap's `--info-fd` / `--json-status-fd` do. Only for a run in the
    /// caller's own process (`run_here`): the fd numbers are this
    /// process's.
    pub pid_reports: Vec<PidReport>,
    /// Caller-compiled classic BPF programs (`struct sock_filter` arrays,
    /// as bytes, a multiple of 8), installed in order as the payload's
    /// last step before execve, after stockade's own filter (bwrap's
    /// `--seccomp` / `--add-seccomp-fd`).
    pub bpf_filters: Vec<Vec<u8>>,
    /// No user namespace can be created inside the jail: the jail's init
    /// sets the jail user namespace's `user.max_user_namespaces` to 0
    /// (bwrap's `--disable-userns`), and the payload checks it as with
    /// `assert_userns_disabled`.
    pub disable_userns: bool,
    /// The payload checks that it cannot create a user namespace before
    /// its execve, and fails if it can (bwrap's `--assert-userns-disabled`).
    pub assert_userns_disabled: bool,
    /// The command is the jail's pid 1 itself, with no init of stockade's
    /// to reap and forward signals (bwrap's `--as-pid-1`). Ignored in the
    /// fallback (no pid namespace).
    pub as_pid_1: bool,
    /// Capabilities the payload keeps inside the jail's user namespace
    /// (bit N: capability N; bwrap's `--cap-add`): every other one is
    /// dropped. 0: none (the default).
    pub keep_caps: u64,
    /// `keep_caps` are kept as a process of uid 0 keeps them across execve
    /// (bounding, permitted and effective; not inheritable or ambient), as
    /// bwrap run by root without `--cap-add` or `--cap-drop` leaves them.
    pub caps_as_root: bool,
    /// The bounding set when it is not `keep_caps`: bwrap run by root
    /// without `--unshare-user` leaves the caller's (it drops from it only
    /// in a user namespace of its own).
    pub bounding_caps: Option<u64>,
    /// Started by host root (not in a user namespace of its own): the
    /// binds of host paths are idmapped mounts on which files of host uid
    /// and gid 0 are the jail's uid and gid 0 (what bwrap run by root shows
    /// its payload), while the jail's processes run as a host id leased for
    /// the run, never host root. Mounts whose filesystem refuses an idmap
    /// stay as they are. Ignored for any other caller and in the fallback.
    pub idmap_root_binds: bool,
    /// Files (paths inside the jail) the jail's init opens and read-locks
    /// (fcntl) once the root is built, and holds until the jail ends, as
    /// bwrap's `--lock-file`.
    pub lock_files: Vec<PathBuf>,
    /// A caller fd the payload reads one byte from (or EOF) before its
    /// execve, as bwrap's `--block-fd`: the command starts only then.
    /// Only for a run in the caller's own process (`run_here`).
    pub block_fd: Option<i32>,
    /// A caller fd of a user namespace the jail enters instead of making
    /// its own (bwrap's `--userns`): the process that runs the jail (the
    /// CLI's, or the spawner's per-run supervisor) joins it for good before
    /// clone, and every namespace the jail makes is owned by it. No id maps
    /// are written: the jail's ids are those the namespace maps (see
    /// `Identity::become_user`); a namespace whose root is host root is the
    /// caller's choice. The kernel refuses a namespace the caller does not
    /// hold CAP_SYS_ADMIN in, or an fd of another type.
    pub join_userns: Option<i32>,
    /// A caller fd of a user namespace under the jail's that init enters
    /// once the root is built (bwrap's `--userns2`): the payload starts in
    /// it.
    pub join_userns2: Option<i32>,
    /// A caller fd of a pid namespace the jail's processes are born in
    /// (bwrap's `--pidns`), or under which the jail's own is made
    /// (`nest_pidns`). Without `nest_pidns`, init is not its namespace's
    /// pid 1: it kills the jail's processes as the tree of its
    /// descendants, never with `kill(-1)`.
    pub join_pidns: Option<i32>,
    /// With `join_pidns`: a new pid namespace under the given one (bwrap's
    /// `--pidns` with `--unshare-pid`).
    pub nest_pidns: bool,
    /// A caller fd the supervisor reads one byte (or EOF) from before it
    /// lets the jail go, instead of writing the id maps (bwrap's
    /// `--userns-block-fd`): the caller, told the pid through
    /// `pid_reports`, writes `/proc/PID/uid_map` and `gid_map` itself. The
    /// jail keeps the ids the caller's maps give it. Only for a run in the
    /// caller's own process, with a `pid_reports` entry.
    pub userns_block_fd: Option<i32>,
}

impl Compat {
    /// The fds only a run in the caller's own process can use, by field:
    /// the first one set.
    pub fn own_fds(&self) -> Option<&'static str> {
        [
            ("compat.pid_reports", !self.pid_reports.is_empty()),
            ("compat.block_fd", self.block_fd.is_some()),
            ("compat.userns_block_fd", self.userns_block_fd.is_some()),
        ]
        .into_iter()
        .find_map(|(field, set)| set.then_some(field))
    }

    /// The caller's namespace fds the process that runs the jail joins.
    pub fn joins(&self) -> impl Iterator<Item = i32> {
        [self.join_userns, self.join_userns2, self.join_pidns]
            .into_iter()
            .flatten()
    }

    /// Each value checked, and only the combinations that have a meaning
    /// (the joined namespaces and the caller's own id maps).
    pub(super) fn validate(&self) -> Result<(), super::PolicyError> {
        use super::PolicyError;
        let refuse = |field, why| Err(PolicyError::new(field, why));
        if self.bpf_filters.iter().any(|b| b.len() % 8 != 0) {
            return refuse(
                "compat.bpf_filters",
                "a program is whole struct sock_filter entries (a multiple of 8 bytes)",
            );
        }
        for (field, fd) in [
            ("compat.block_fd", self.block_fd),
            ("compat.join_userns", self.join_userns),
            ("compat.join_userns2", self.join_userns2),
            ("compat.join_pidns", self.join_pidns),
            ("compat.userns_block_fd", self.userns_block_fd),
        ] {
            if fd.is_some_and(|fd| fd < 0) {
                return refuse(field, "not a file descriptor");
            }
        }
        for r in &self.pid_reports {
            if r.fd < 0 {
                return Err(PolicyError::new(
                    "compat.pid_reports",
                    format!("{}: not a file descriptor", r.fd),
                ));
            }
        }
        if self.userns_block_fd.is_some() && self.join_userns.is_some() {
            return refuse(
                "compat.userns_block_fd",
                "no id maps are written into a joined user namespace (join_userns)",
            );
        }
        if self.userns_block_fd.is_some() && self.pid_reports.is_empty() {
            return refuse(
                "compat.userns_block_fd",
                "needs pid_reports (the caller must learn the pid to write its maps)",
            );
        }
        if self.disable_userns && (self.join_userns.is_some() || self.userns_block_fd.is_some()) {
            return refuse(
                "compat.disable_userns",
                "needs a user namespace of the jail's own with stockade's id maps",
            );
        }
        if self.nest_pidns && self.join_pidns.is_none() {
            return refuse("compat.nest_pidns", "needs join_pidns");
        }
        if self.as_pid_1 && self.join_pidns.is_some() && !self.nest_pidns {
            return refuse(
                "compat.as_pid_1",
                "needs a pid namespace of the jail's own (nest_pidns with join_pidns)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_namespaces_only_in_combinations_that_mean_something() {
        let check = |f: &dyn Fn(&mut Compat)| {
            let mut c = Compat::default();
            f(&mut c);
            c.validate().map_err(|e| e.to_string())
        };
        assert!(check(&|_| {}).is_ok());
        assert!(check(&|c| c.join_userns = Some(3)).is_ok());
        assert!(check(&|c| {
            c.join_pidns = Some(4);
            c.nest_pidns = true;
            c.as_pid_1 = true;
        })
        .is_ok());
        let refused = [
            check(&|c| c.join_pidns = Some(-1)),
            check(&|c| {
                c.join_userns = Some(3);
                c.userns_block_fd = Some(4);
            }),
            // The caller must learn the pid to write its maps.
            check(&|c| c.userns_block_fd = Some(4)),
            check(&|c| {
                c.join_userns = Some(3);
                c.disable_userns = true;
            }),
            check(&|c| c.nest_pidns = true),
            // No pid namespace of the jail's own for its command to be pid 1 of.
            check(&|c| {
                c.join_pidns = Some(4);
                c.as_pid_1 = true;
            }),
            check(&|c| c.bpf_filters.push(vec![0; 7])),
        ];
        for r in refused {
            assert!(r.is_err(), "{r:?}");
        }
    }

    /// A policy's JSON from before the compat part, or from a front end
    /// that asks nothing of it, reads as asking nothing.
    #[test]
    fn absent_means_nothing_asked() {
        let c: Compat = serde_json::from_str("{}").unwrap();
        assert_eq!(c, Compat::default());
        let c: Compat = serde_json::from_str(r#"{"as_pid_1": true}"#).unwrap();
        assert!(c.as_pid_1 && c.lock_files.is_empty());
    }
}
