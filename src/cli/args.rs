//! The command line's definition (clap): one place for every subcommand
//! and flag. `stockade run`'s flags are declared through [`run_args!`], which
//! also derives the fast parser's table from them (see `fast.rs`).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgMatches, Args, Parser, Subcommand, ValueEnum};

use super::fast::{run_args, FastScalar};

#[derive(Parser, Debug)]
#[command(
    name = "stockade",
    version,
    about = "A Linux jail for code nobody trusts",
    long_about = "stockade runs a command in new user, mount, pid, net, ipc, uts and cgroup namespaces, \
on a minimal read-only root where only what is named exists.\n\n\
Examples:\n\
  # an evaluator: JSON in on stdin, the JSON outcome (with the program's stdout) on stdout\n\
  stockade run --profile python --report - --timeout 10s -- python3 -c 'import json,sys; print(json.load(sys.stdin))' < input.json\n\
  # a service on a hardened host: the layers the profile requires, or it does not start\n\
  stockade check --profile strict && stockade run --profile ./my-service.toml -- /usr/bin/my-service\n\
  # a persistent shell for an agent: state lives in the workdir between calls\n\
  stockade run --workdir ./agent-home -- bash -c 'cd ~ && ls'"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(super) enum Cmd {
    /// Run a command in a new jail (default profile: shell).
    #[command(long_about = RUN_ABOUT)]
    Run(Box<RunArgs>),
    /// Keep one jail up and run commands in it, one at a time (JSON lines on stdin and stdout).
    #[command(long_about = SESSION_ABOUT)]
    Session(Box<SessionArgs>),
    /// List, show or check profiles.
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// List, commit or discard the overlays' upper layers a run kept (--overlay-upper DIR).
    #[command(subcommand)]
    Overlay(OverlayCmd),
    /// Say which layers this host can enforce, and why not.
    Check(CheckArgs),
    /// Serve runs over HTTP/JSON (unix socket or TCP with a token), each in a fresh jail.
    Serve(Box<crate::serve::ServeArgs>),
    /// Run a bubblewrap (bwrap 0.12) command line: `stockade bwrap --help`.
    #[command(disable_help_flag = true)]
    Bwrap {
        /// bwrap's options and the command, read as bwrap reads them.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    #[command(long_about = "Print a shell completion script on stdout.\n\n\
Examples:\n\
  stockade completions bash > /etc/bash_completion.d/stockade\n\
  stockade completions zsh > \"${fpath[1]}/_stockade\"\n\
  stockade completions fish > ~/.config/fish/completions/stockade.fish")]
    Completions {
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

pub(super) const RUN_ABOUT: &str = "Run a command in a new jail.\n\n\
Without --profile the `shell` profile is used: the host's /usr, /bin, /lib* and a few /etc files \
read-only, a fresh /proc, a minimal /dev, a writable /tmp and workdir (/work), no network but \
loopback, the default seccomp allowlist and Landlock. Flags override the profile's fields. \
Built-in profiles: minimal, shell, python, strict (`stockade profile list`).\n\n\
--overlay HOST_DIR:INNER shows a host directory copy-on-write: the jail may change anything \
there, HOST_DIR is not written while it runs, and the outcome lists the changes (`changes`); \
--commit applies them after exit 0, --overlay-upper DIR keeps them for `stockade overlay \
commit DIR`.";

pub(super) const SESSION_ABOUT: &str =
    "Keep one jail up and run commands in it, one at a time.\n\n\
Requests are JSON lines on stdin, events JSON lines on stdout (README: Sessions):\n\
  {\"op\":\"exec\",\"id\":\"c1\",\"command\":\"cd /tmp && ls\",\"timeout\":10}\n\
  {\"op\":\"interrupt\",\"id\":\"c1\"}\n\
  {\"op\":\"close\"}\n\
The working directory and exported environment carry over between commands; the jail's limits \
cover the whole session. The last line is {\"event\":\"end\",\"reason\":…,\"outcome\":{…}}.\n\n\
Example:\n\
  echo '{\"op\":\"exec\",\"id\":\"1\",\"command\":\"cd /tmp; id -un\"}' | stockade session --memory 256m\n\
At the end of stdin the running command is seen to its end, then the session ends.";

/// `stockade session`: the jail flags of `run` that make sense for a
/// session, and its own.
#[derive(Args, Debug, Default)]
pub(super) struct SessionArgs {
    /// Profile: a built-in name (minimal, shell, python, strict) or a .toml file [default: shell]
    #[arg(long, value_name = "NAME|FILE")]
    pub(super) profile: Option<String>,
    /// The Python interpreter the jail runs (discovered and bound read-only) [default: python3 on PATH]
    #[arg(long, value_name = "PATH")]
    pub(super) python: Option<PathBuf>,
    /// Bind a host path read-only (nosuid, nodev) at DST (default: the same path)
    #[arg(long, value_name = "SRC[:DST]")]
    pub(super) ro_bind: Vec<String>,
    /// Bind a host path read-write (nosuid, nodev) at DST (default: the same path)
    #[arg(long, value_name = "SRC[:DST]")]
    pub(super) bind: Vec<String>,
    /// Mount a fresh tmpfs at DST, capped at SIZE (default 64m)
    #[arg(long, value_name = "DST[:SIZE]")]
    pub(super) tmpfs: Vec<String>,
    /// Create a symlink LINK -> TARGET inside the jail
    #[arg(long, value_name = "TARGET:LINK")]
    pub(super) symlink: Vec<String>,
    /// Set an environment variable in the jail
    #[arg(long, value_name = "NAME=VALUE")]
    pub(super) setenv: Vec<String>,
    /// Pass the caller's value of an environment variable into the jail
    #[arg(long, value_name = "NAME")]
    pub(super) keep_env: Vec<String>,
    /// Network: none (only loopback, TCP denied), loopback (only loopback, TCP between the jail's processes) or host [default: the profile's, none]
    #[arg(long, visible_alias = "net", value_enum)]
    pub(super) network: Option<NetArg>,
    /// Reach only this host through stockade's proxy: NAME, *.SUFFIX, IP or [IPV6], each with :PORT (default: 80 and 443); repeat for more
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(super) allow_host: Vec<String>,
    /// A secret the session's jail never holds: its variable NAME holds a placeholder in every command, and stockade's proxy puts the value (the caller's variable NAME, or --secret-file's) into the request headers sent to these hosts only; repeat for more
    #[arg(long, value_name = "NAME:HOST[,HOST…]")]
    pub(super) secret: Vec<String>,
    /// Read the value of --secret NAME from this file (one trailing newline dropped) instead of the caller's environment
    #[arg(long, value_name = "NAME=PATH")]
    pub(super) secret_file: Vec<String>,
    /// Trust these certificate authorities (PEM) too when the proxy reaches a secret's hosts, beside the host's trust store
    #[arg(long, value_name = "FILE")]
    pub(super) egress_ca: Vec<PathBuf>,
    /// Only these requests go to the host: methods (or *), then HOST[:PORT]/PATH with * for any run of characters; repeat for more
    #[arg(long, value_name = "'GET,POST HOST/PATH'")]
    pub(super) allow_http: Vec<String>,
    /// Read-write working directory, also $HOME [default: a fresh tmpfs at /work]
    #[arg(long, value_name = "HOST[:INNER]")]
    pub(super) workdir: Option<String>,
    /// Size cap of the jail's /tmp [default: 128m]
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub(super) tmp_size: Option<String>,
    /// Memory limit of the whole session (cgroup memory.max; RLIMIT_AS when no memory controller)
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub(super) memory: Option<String>,
    /// CPU quota of the whole session in CPUs, e.g. 0.5 (cgroup cpu.max)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub(super) cpus: Option<String>,
    /// Maximum processes and threads of the whole session
    #[arg(
        long,
        visible_alias = "pids",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub(super) pids_limit: Option<String>,
    /// Allow one more syscall, or a group (@network-io, …), on top of the profile's
    #[arg(long, value_name = "NAME|@GROUP")]
    pub(super) seccomp_allow: Vec<String>,
    /// Fail (exit 125) unless this layer is applied: userns, landlock, seccomp, cgroup
    #[arg(long, value_name = "LAYER")]
    pub(super) require: Vec<String>,
    /// Where user namespaces are refused and stockade is root: host uids to give each jail one of [default: 2147418112:65536]
    #[arg(long, value_name = "START:COUNT")]
    pub(super) uid_range: Option<String>,
    /// Show a host directory at INNER copy-on-write: the session may change anything there, HOST_DIR is not written until a `commit` request
    #[arg(long, value_name = "HOST_DIR:INNER")]
    pub(super) overlay: Vec<String>,
    /// Keep the overlays' upper layers in DIR (missing or empty), for `stockade overlay commit|discard DIR` after the session [default: a directory of the session's, removed at its end]
    #[arg(long, value_name = "DIR")]
    pub(super) overlay_upper: Option<PathBuf>,
    /// End the session after this long without a command running, e.g. 10m; 0: never [default: 0]
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub(super) idle_timeout: Option<String>,
    /// End the session after this long in all, e.g. 1h [default: none]
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub(super) timeout: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum ProfileCmd {
    /// List the built-in profiles.
    List,
    /// Print a profile fully resolved: binds with their real paths, syscalls, limits.
    Show {
        /// A built-in name or a path to a .toml file
        #[arg(value_name = "NAME|FILE")]
        profile: String,
        /// The Python interpreter to discover (profiles that discover Python)
        #[arg(long, value_name = "PATH")]
        python: Option<PathBuf>,
    },
    /// Validate a profile file: exit 0, or 125 with a one-line error.
    Check {
        #[arg(value_name = "FILE")]
        file: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum OverlayCmd {
    /// Print the changes (JSON on stdout, as a run's outcome lists them).
    Changes {
        /// The directory a run kept its upper layers in (--overlay-upper)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Also write them to FILE as a unified diff (git's format)
        #[arg(long, value_name = "FILE")]
        diff: Option<PathBuf>,
    },
    /// Apply the changes to their host directories, then drop the layers (kept when a change is refused; exit 1).
    #[command(
        long_about = "Apply the changes to their host directories, then drop the layers.\n\n\
Each file is replaced atomically; nothing is written through a symlink or outside the host \
directory (a change whose path crosses one is refused). What was applied and refused is printed \
as JSON on stdout; when something was refused the layers stay, and the exit code is 1."
    )]
    Commit {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Drop the layers without applying them.
    Discard {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// Exit 1 unless every layer this profile requires is available [default: shell]
    #[arg(long, value_name = "NAME|FILE")]
    pub(super) profile: Option<String>,
    /// Print the result as JSON
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(super) enum NetArg {
    /// A new network namespace with only loopback; TCP denied (default).
    None,
    /// As none, but TCP allowed: the jail's processes talk to each other on 127.0.0.1/::1 (needs user namespaces).
    Loopback,
    /// Share the host's network (recorded in the outcome).
    Host,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(super) enum SeccompActionArg {
    /// Fail the syscall with EPERM (default)
    Errno,
    /// Kill the jail; reported as seccomp_violation
    Kill,
}

impl FastScalar for NetArg {
    fn read(v: &str) -> Option<Self> {
        ValueEnum::from_str(v, false).ok()
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(super) enum CommitArg {
    /// After the command exits 0 (the default)
    Success,
    /// After the command ends, however it ends
    Always,
}

impl FastScalar for CommitArg {
    fn read(v: &str) -> Option<Self> {
        ValueEnum::from_str(v, false).ok()
    }
}

impl FastScalar for SeccompActionArg {
    fn read(v: &str) -> Option<Self> {
        ValueEnum::from_str(v, false).ok()
    }
}

run_args! {
    #[derive(Args, Debug, Default)]
    pub(super) struct RunArgs {
        flags {
            /// Profile: a built-in name (minimal, shell, python, strict) or a .toml file [default: shell]
            #[arg(long, value_name = "NAME|FILE")]
            profile: Option<String>,
            /// The Python interpreter the jail runs (discovered and bound read-only) [default: python3 on PATH]
            #[arg(long, value_name = "PATH")]
            python: Option<PathBuf>,
            /// uid inside the jail [default: 1000]
            #[arg(long, value_name = "UID", allow_hyphen_values = true)]
            uid: Option<u32>,
            /// gid inside the jail [default: 1000]
            #[arg(long, value_name = "GID", allow_hyphen_values = true)]
            gid: Option<u32>,
            /// Bind a host path read-only (nosuid, nodev) at DST (default: the same path)
            #[arg(long, value_name = "SRC[:DST]")]
            ro_bind: Vec<String>,
            /// Bind a host path read-write (nosuid, nodev) at DST (default: the same path)
            #[arg(long, value_name = "SRC[:DST]")]
            bind: Vec<String>,
            /// Mount a fresh tmpfs at DST, capped at SIZE (default 64m)
            #[arg(long, value_name = "DST[:SIZE]")]
            tmpfs: Vec<String>,
            /// Create a symlink LINK -> TARGET inside the jail
            #[arg(long, value_name = "TARGET:LINK")]
            symlink: Vec<String>,
            /// Show a host directory at INNER copy-on-write: the jail may change anything there, HOST_DIR is not written; the outcome lists the changes
            #[arg(long, value_name = "HOST_DIR:INNER")]
            overlay: Vec<String>,
            /// Keep the overlays' upper layers in DIR (missing or empty) for `stockade overlay commit|discard DIR` [default: a tmpfs of the jail's, discarded]
            #[arg(long, value_name = "DIR")]
            overlay_upper: Option<PathBuf>,
            /// Apply the overlays' changes to their host directories after the command exits 0 (or, with `always`, however it ends)
            #[arg(long, value_enum, value_name = "WHEN")]
            commit: Option<Option<CommitArg>>,
            /// Write the overlays' changes to FILE as a unified diff (git's format; binary files noted)
            #[arg(long, value_name = "FILE")]
            changes_diff: Option<PathBuf>,
            /// Set an environment variable in the jail
            #[arg(long, value_name = "NAME=VALUE")]
            setenv: Vec<String>,
            /// Pass the caller's value of an environment variable into the jail
            #[arg(long, value_name = "NAME")]
            keep_env: Vec<String>,
            /// Hostname inside the jail [default: stockade]
            #[arg(long, value_name = "NAME")]
            hostname: Option<String>,
            /// Directory to start in, inside the jail [default: the workdir]
            #[arg(long, value_name = "DIR")]
            chdir: Option<PathBuf>,
            /// Network: none (only loopback, TCP denied), loopback (only loopback, TCP between the jail's processes) or host [default: the profile's, none]
            #[arg(long, value_enum)]
            network: Option<NetArg>,
            /// Reach only this host through stockade's proxy: NAME, *.SUFFIX, IP or [IPV6], each with :PORT (default: 80 and 443); repeat for more
            #[arg(long, value_name = "HOST[:PORT]")]
            allow_host: Vec<String>,
            /// A secret the jail never holds: its variable NAME holds a placeholder, and stockade's proxy puts the value (the caller's variable NAME, or --secret-file's) into the request headers sent to these hosts only, over TLS it intercepts; repeat for more
            #[arg(long, value_name = "NAME:HOST[,HOST…]")]
            secret: Vec<String>,
            /// Read the value of --secret NAME from this file (one trailing newline dropped) instead of the caller's environment
            #[arg(long, value_name = "NAME=PATH")]
            secret_file: Vec<String>,
            /// Trust these certificate authorities (PEM) too when the proxy reaches a secret's hosts, beside the host's trust store
            #[arg(long, value_name = "FILE")]
            egress_ca: Vec<PathBuf>,
            /// Only these requests go to the host: methods (or *), then HOST[:PORT]/PATH with * for any run of characters; the proxy intercepts the host's TLS to check each request; repeat for more
            #[arg(long, value_name = "'GET,POST HOST/PATH'")]
            allow_http: Vec<String>,
            /// Read-write working directory, also $HOME [default: a fresh tmpfs at /work]
            #[arg(long, value_name = "HOST[:INNER]")]
            workdir: Option<String>,
            /// Pass the caller's fd N to the command under the same number
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            keep_fd: Vec<i32>,
            /// Write each new refusal (a syscall, a connection, a Landlock access, a masked path opened) to fd N as a JSON line while the run goes on, never waiting for the reader
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            denials_fd: Option<i32>,
            /// Size cap of the jail's /tmp [default: 128m]
            #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
            tmp_size: Option<String>,
            /// Host uid the jail maps to when started by root [default: 65534]
            #[arg(long, value_name = "UID", allow_hyphen_values = true)]
            host_uid: Option<u32>,
            /// Host gid the jail maps to when started by root [default: 65534]
            #[arg(long, value_name = "GID", allow_hyphen_values = true)]
            host_gid: Option<u32>,
            /// Where user namespaces are refused and stockade is root: host uids to give each jail one of [default: 2147418112:65536]
            #[arg(long, value_name = "START:COUNT")]
            uid_range: Option<String>,
            /// What a syscall outside the allowlist gets: errno (EPERM) or kill
            #[arg(long, value_enum, value_name = "ACTION")]
            seccomp_action: Option<SeccompActionArg>,
            /// Learning mode: allow every syscall, and list those outside the allowlist the command used
            #[arg(long)]
            seccomp_learn: bool,
            /// Learn: run with every layer reporting instead of refusing where it can (seccomp learning, paths and hosts recorded, the host's /home /root /opt /srv /var shown with writes thrown away), then write a profile of what the command used to FILE
            #[arg(long, value_name = "FILE")]
            learn: Option<PathBuf>,
            /// Allow one more syscall, or a group (@network-io, …), on top of the profile's
            #[arg(long, value_name = "NAME|@GROUP")]
            seccomp_allow: Vec<String>,
            /// Do not install a seccomp filter
            #[arg(long)]
            no_seccomp: bool,
            /// Do not apply Landlock
            #[arg(long)]
            no_landlock: bool,
            /// Leave a jail path out of the Landlock ruleset (it stays mounted, but unreadable)
            #[arg(long, value_name = "PATH")]
            landlock_exclude: Vec<PathBuf>,
            /// Hide a host file or directory inside the binds: an empty read-only one covers it (~ is $HOME)
            #[arg(long, value_name = "PATH")]
            deny: Vec<PathBuf>,
            /// Hide every entry of the workdir and the --bind/--ro-bind trees matching a glob ('**/.env')
            #[arg(long, value_name = "GLOB")]
            deny_glob: Vec<String>,
            /// Most directory entries --deny and --deny-glob may look at [default: 200000]
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            deny_max_entries: Option<String>,
            /// Fail (exit 125) unless this layer is applied: userns, landlock, seccomp, cgroup
            #[arg(long, value_name = "LAYER")]
            require: Vec<String>,
            /// Memory limit (cgroup memory.max; RLIMIT_AS when no memory controller)
            #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
            memory: Option<String>,
            /// Memory throttling point (cgroup memory.high)
            #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
            memory_high: Option<String>,
            /// CPU quota in CPUs, e.g. 0.5 (cgroup cpu.max)
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            cpus: Option<String>,
            /// Maximum processes and threads (cgroup pids.max; RLIMIT_NPROC when no pids controller)
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            pids_limit: Option<String>,
            /// CPU time limit, e.g. 5s (RLIMIT_CPU)
            #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
            cpu_time: Option<String>,
            /// Wall-clock deadline, e.g. 10s: SIGTERM to the whole jail, SIGKILL after --grace
            #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
            timeout: Option<String>,
            /// Time between SIGTERM and SIGKILL at the deadline; 0: SIGKILL at once [default: 2s]
            #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
            grace: Option<String>,
            /// Cap on stdout + stderr bytes; the jail is killed at the cap
            #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
            max_output: Option<String>,
            /// Largest file the command may write (RLIMIT_FSIZE)
            #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
            max_file_size: Option<String>,
            /// Most open files (RLIMIT_NOFILE)
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            max_open_files: Option<String>,
            /// Keep stdout and stderr in the outcome (UTF-8, or base64)
            #[arg(long)]
            capture: bool,
            /// Write the JSON outcome to FILE (- for stdout)
            #[arg(long, value_name = "FILE")]
            report: Option<PathBuf>,
            /// Write the JSON outcome to an inherited fd
            #[arg(long, value_name = "N", allow_hyphen_values = true)]
            report_fd: Option<i32>,
        }
        /// The command and its arguments
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        command: Vec<OsString>,
        /// A `--` came before the command (set by the parsers, not a flag).
        #[arg(skip)]
        dashdash: bool,
    }
}

/// A filesystem flag of `stockade run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MountFlag {
    RoBind,
    Bind,
    Tmpfs,
    Symlink,
    Overlay,
}

impl MountFlag {
    pub(super) const ALL: [MountFlag; 5] = [
        MountFlag::RoBind,
        MountFlag::Bind,
        MountFlag::Tmpfs,
        MountFlag::Symlink,
        MountFlag::Overlay,
    ];

    /// The clap argument id.
    pub(super) fn id(self) -> &'static str {
        match self {
            MountFlag::RoBind => "ro_bind",
            MountFlag::Bind => "bind",
            MountFlag::Tmpfs => "tmpfs",
            MountFlag::Symlink => "symlink",
            MountFlag::Overlay => "overlay",
        }
    }
}

/// The filesystem flags with their position on the command line.
pub(super) type MountFlags = Vec<(usize, MountFlag, String)>;

/// The filesystem flags of a `run` parsed by clap, with their positions.
pub(super) fn mount_flags(m: &ArgMatches) -> MountFlags {
    let mut out = Vec::new();
    for f in MountFlag::ALL {
        // `ok()`: a subcommand without the flag (session has no --overlay).
        let Some(vals) = m.try_get_many::<String>(f.id()).ok().flatten() else {
            continue;
        };
        let Some(idx) = m.indices_of(f.id()) else {
            continue;
        };
        for (v, i) in vals.zip(idx) {
            out.push((i, f, v.clone()));
        }
    }
    out
}
