//! Command line: parse, build the Policy, run, print, exit code.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::policy::{
    self, profile, units, Layer, MountSpec, Network, Policy, PolicyError, SeccompAction,
};
use crate::Status;

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
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a command in a new jail (default profile: shell).
    #[command(long_about = RUN_ABOUT)]
    Run(Box<RunArgs>),
    /// List, show or check profiles.
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// Say which layers this host can enforce, and why not.
    Check(CheckArgs),
    /// Serve runs over HTTP/JSON (unix socket or TCP with a token), each in a fresh jail.
    Serve(crate::serve::ServeArgs),
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

const RUN_ABOUT: &str = "Run a command in a new jail.\n\n\
Without --profile the `shell` profile is used: the host's /usr, /bin, /lib* and a few /etc files \
read-only, a fresh /proc, a minimal /dev, a writable /tmp and workdir (/work), no network but \
loopback, the default seccomp allowlist and Landlock. Flags override the profile's fields. \
Built-in profiles: minimal, shell, python, strict (`stockade profile list`).";

#[derive(Subcommand, Debug)]
enum ProfileCmd {
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

#[derive(Args, Debug)]
struct CheckArgs {
    /// Exit 1 unless every layer this profile requires is available [default: shell]
    #[arg(long, value_name = "NAME|FILE")]
    profile: Option<String>,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum NetArg {
    /// A new network namespace with only loopback (default).
    None,
    /// Share the host's network (recorded in the outcome).
    Host,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum SeccompActionArg {
    /// Fail the syscall with EPERM (default)
    Errno,
    /// Kill the jail; reported as seccomp_violation
    Kill,
}

#[derive(Args, Debug)]
struct RunArgs {
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
    /// Network: none (only loopback) or host [default: the profile's, none]
    #[arg(long, value_enum)]
    network: Option<NetArg>,
    /// Read-write working directory, also $HOME [default: a fresh tmpfs at /work]
    #[arg(long, value_name = "HOST[:INNER]")]
    workdir: Option<String>,
    /// Pass the caller's fd N to the command under the same number
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    keep_fd: Vec<i32>,
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
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
    /// A `--` came before the command (set by the parsers, not a flag).
    #[arg(skip)]
    dashdash: bool,
}

/// Split `a:b` at the first `:` that starts an absolute second part.
fn split_src_dst(s: &str) -> (String, Option<String>) {
    match s.find(':') {
        Some(i) => (s[..i].to_string(), Some(s[i + 1..].to_string())),
        None => (s.to_string(), None),
    }
}

fn bind_spec(flag: &str, v: &str, writable: bool) -> Result<MountSpec, PolicyError> {
    let (src, dst) = split_src_dst(v);
    let src = policy::host_path(flag, std::path::Path::new(&src))?;
    let dst = match dst {
        Some(d) => policy::jail_path(flag, std::path::Path::new(&d))?,
        None => policy::jail_path(flag, &src)?,
    };
    Ok(MountSpec::Bind {
        src,
        dst,
        writable,
        optional: false,
    })
}

fn tmpfs_spec(v: &str) -> Result<MountSpec, PolicyError> {
    let (dst, size) = match v.rfind(':') {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    let size = match size {
        Some(s) => units::parse_size(s).map_err(|e| PolicyError::new("--tmpfs", e))?,
        None => 64 << 20,
    };
    if size == 0 {
        return Err(PolicyError::new(
            "--tmpfs",
            format!("{v}: size must be greater than 0"),
        ));
    }
    Ok(MountSpec::Tmpfs {
        dst: policy::jail_path("--tmpfs", std::path::Path::new(dst))?,
        size,
        mode: 0o1777,
    })
}

fn symlink_spec(v: &str) -> Result<MountSpec, PolicyError> {
    let i = v.rfind(":/").ok_or_else(|| {
        PolicyError::new(
            "--symlink",
            format!("{v}: expected TARGET:LINK with an absolute LINK"),
        )
    })?;
    if i == 0 {
        return Err(PolicyError::new("--symlink", format!("{v}: empty TARGET")));
    }
    Ok(MountSpec::Symlink {
        target: PathBuf::from(&v[..i]),
        link: policy::jail_path("--symlink", std::path::Path::new(&v[i + 1..]))?,
    })
}

/// A filesystem flag of `stockade run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MountFlag {
    RoBind,
    Bind,
    Tmpfs,
    Symlink,
}

impl MountFlag {
    const ALL: [MountFlag; 4] = [
        MountFlag::RoBind,
        MountFlag::Bind,
        MountFlag::Tmpfs,
        MountFlag::Symlink,
    ];

    /// The clap argument id.
    fn id(self) -> &'static str {
        match self {
            MountFlag::RoBind => "ro_bind",
            MountFlag::Bind => "bind",
            MountFlag::Tmpfs => "tmpfs",
            MountFlag::Symlink => "symlink",
        }
    }
}

/// The filesystem flags with their position on the command line.
type MountFlags = Vec<(usize, MountFlag, String)>;

/// The filesystem flags of a `run` parsed by clap, with their positions.
fn mount_flags(m: &ArgMatches) -> MountFlags {
    let mut out = Vec::new();
    for f in MountFlag::ALL {
        let (Some(vals), Some(idx)) = (m.get_many::<String>(f.id()), m.indices_of(f.id())) else {
            continue;
        };
        for (v, i) in vals.zip(idx) {
            out.push((i, f, v.clone()));
        }
    }
    out
}

/// Filesystem flags in the order they were given (they apply in that order).
/// Values are checked flag by flag (--ro-bind, --bind, --tmpfs, --symlink),
/// so the first error reported does not depend on the order given.
fn ordered_mounts(flags: &[(usize, MountFlag, String)]) -> Result<Vec<MountSpec>, PolicyError> {
    let mut items: Vec<(usize, MountSpec)> = Vec::new();
    for f in MountFlag::ALL {
        for (i, _, v) in flags.iter().filter(|(_, g, _)| *g == f) {
            let spec = match f {
                MountFlag::RoBind => bind_spec("--ro-bind", v, false)?,
                MountFlag::Bind => bind_spec("--bind", v, true)?,
                MountFlag::Tmpfs => tmpfs_spec(v)?,
                MountFlag::Symlink => symlink_spec(v)?,
            };
            items.push((*i, spec));
        }
    }
    items.sort_by_key(|(i, _)| *i);
    Ok(items.into_iter().map(|(_, s)| s).collect())
}

/// What a flag of `stockade run` takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// Nothing (a switch); once at most.
    Switch,
    /// One value; once at most.
    One,
    /// One value; may repeat.
    Many,
}

/// Every flag of `stockade run`, as the fast path knows them.
const RUN_FLAGS: &[(&str, Takes)] = &[
    ("profile", Takes::One),
    ("python", Takes::One),
    ("uid", Takes::One),
    ("gid", Takes::One),
    ("ro-bind", Takes::Many),
    ("bind", Takes::Many),
    ("tmpfs", Takes::Many),
    ("symlink", Takes::Many),
    ("setenv", Takes::Many),
    ("keep-env", Takes::Many),
    ("hostname", Takes::One),
    ("chdir", Takes::One),
    ("network", Takes::One),
    ("workdir", Takes::One),
    ("keep-fd", Takes::Many),
    ("tmp-size", Takes::One),
    ("host-uid", Takes::One),
    ("host-gid", Takes::One),
    ("uid-range", Takes::One),
    ("seccomp-action", Takes::One),
    ("seccomp-learn", Takes::Switch),
    ("seccomp-allow", Takes::Many),
    ("no-seccomp", Takes::Switch),
    ("no-landlock", Takes::Switch),
    ("landlock-exclude", Takes::Many),
    ("require", Takes::Many),
    ("memory", Takes::One),
    ("memory-high", Takes::One),
    ("cpus", Takes::One),
    ("pids-limit", Takes::One),
    ("cpu-time", Takes::One),
    ("timeout", Takes::One),
    ("grace", Takes::One),
    ("max-output", Takes::One),
    ("max-file-size", Takes::One),
    ("max-open-files", Takes::One),
    ("capture", Takes::Switch),
    ("report", Takes::One),
    ("report-fd", Takes::One),
];

/// `stockade run …` parsed without clap, for the plain command lines a
/// program or a script gives: long flags with valid values, then the
/// command. Anything else (help, a short or unknown flag, a repeated
/// single flag, a value clap would refuse or read differently, no command)
/// is `None`, and clap parses it and words the error. Building clap's
/// parser for the 40-odd flags costs about as much as the rest of the
/// supervisor's start; the unit tests check this parser against clap's.
/// A flag given a clap constraint (conflicts_with, requires, a value
/// parser of its own) must be refused here (`return None`) or mirrored.
fn fast_run_args(args: &[OsString]) -> Option<(RunArgs, MountFlags)> {
    if args.get(1).map(|a| a.as_os_str()) != Some(std::ffi::OsStr::new("run")) {
        return None;
    }
    let mut a = RunArgs {
        profile: None,
        python: None,
        uid: None,
        gid: None,
        ro_bind: Vec::new(),
        bind: Vec::new(),
        tmpfs: Vec::new(),
        symlink: Vec::new(),
        setenv: Vec::new(),
        keep_env: Vec::new(),
        hostname: None,
        chdir: None,
        network: None,
        workdir: None,
        keep_fd: Vec::new(),
        tmp_size: None,
        host_uid: None,
        host_gid: None,
        uid_range: None,
        seccomp_action: None,
        seccomp_learn: false,
        seccomp_allow: Vec::new(),
        no_seccomp: false,
        no_landlock: false,
        landlock_exclude: Vec::new(),
        require: Vec::new(),
        memory: None,
        memory_high: None,
        cpus: None,
        pids_limit: None,
        cpu_time: None,
        timeout: None,
        grace: None,
        max_output: None,
        max_file_size: None,
        max_open_files: None,
        capture: false,
        report: None,
        report_fd: None,
        command: Vec::new(),
        dashdash: false,
    };
    let mut mounts = MountFlags::new();
    let mut seen = [false; RUN_FLAGS.len()];
    let mut i = 2;
    while i < args.len() {
        let arg = args[i].to_str()?;
        if arg == "--" {
            a.dashdash = true;
            i += 1;
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            // The first positional starts the command (trailing_var_arg).
            if arg.starts_with('-') {
                return None;
            }
            break;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let k = RUN_FLAGS.iter().position(|(n, _)| *n == name)?;
        let takes = RUN_FLAGS[k].1;
        if takes != Takes::Many && std::mem::replace(&mut seen[k], true) {
            return None;
        }
        if takes == Takes::Switch {
            if inline.is_some() {
                return None;
            }
            match name {
                "seccomp-learn" => a.seccomp_learn = true,
                "no-seccomp" => a.no_seccomp = true,
                "no-landlock" => a.no_landlock = true,
                "capture" => a.capture = true,
                _ => return None,
            }
            i += 1;
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i)?.to_str()?
            }
        };
        // clap refuses an empty path and reads `-x` as a flag; leave both
        // (and their messages) to it. A lone `-` is a value (`--report -`).
        if v.is_empty() || (v.starts_with('-') && v != "-") {
            return None;
        }
        let s = || Some(v.to_string());
        let path = || Some(PathBuf::from(v));
        match name {
            "profile" => a.profile = s(),
            "python" => a.python = path(),
            "uid" => a.uid = Some(v.parse().ok()?),
            "gid" => a.gid = Some(v.parse().ok()?),
            "ro-bind" => mounts.push((i, MountFlag::RoBind, v.to_string())),
            "bind" => mounts.push((i, MountFlag::Bind, v.to_string())),
            "tmpfs" => mounts.push((i, MountFlag::Tmpfs, v.to_string())),
            "symlink" => mounts.push((i, MountFlag::Symlink, v.to_string())),
            "setenv" => a.setenv.push(v.to_string()),
            "keep-env" => a.keep_env.push(v.to_string()),
            "hostname" => a.hostname = s(),
            "chdir" => a.chdir = path(),
            "network" => {
                a.network = Some(match v {
                    "none" => NetArg::None,
                    "host" => NetArg::Host,
                    _ => return None,
                })
            }
            "workdir" => a.workdir = s(),
            "keep-fd" => a.keep_fd.push(v.parse().ok()?),
            "tmp-size" => a.tmp_size = s(),
            "host-uid" => a.host_uid = Some(v.parse().ok()?),
            "host-gid" => a.host_gid = Some(v.parse().ok()?),
            "uid-range" => a.uid_range = s(),
            "seccomp-action" => {
                a.seccomp_action = Some(match v {
                    "errno" => SeccompActionArg::Errno,
                    "kill" => SeccompActionArg::Kill,
                    _ => return None,
                })
            }
            "seccomp-allow" => a.seccomp_allow.push(v.to_string()),
            "landlock-exclude" => a.landlock_exclude.push(PathBuf::from(v)),
            "require" => a.require.push(v.to_string()),
            "memory" => a.memory = s(),
            "memory-high" => a.memory_high = s(),
            "cpus" => a.cpus = s(),
            "pids-limit" => a.pids_limit = s(),
            "cpu-time" => a.cpu_time = s(),
            "timeout" => a.timeout = s(),
            "grace" => a.grace = s(),
            "max-output" => a.max_output = s(),
            "max-file-size" => a.max_file_size = s(),
            "max-open-files" => a.max_open_files = s(),
            "report" => a.report = path(),
            "report-fd" => a.report_fd = Some(v.parse().ok()?),
            _ => return None,
        }
        i += 1;
    }
    a.command = args.get(i..)?.to_vec();
    if a.command.is_empty() {
        return None;
    }
    a.ro_bind = mount_values(&mounts, MountFlag::RoBind);
    a.bind = mount_values(&mounts, MountFlag::Bind);
    a.tmpfs = mount_values(&mounts, MountFlag::Tmpfs);
    a.symlink = mount_values(&mounts, MountFlag::Symlink);
    Some((a, mounts))
}

/// Does a `--` come before the command in `stockade run …`? (clap does not
/// say: it drops the `--` and counts no index for it.) The flags before the
/// command are those of [`RUN_FLAGS`]; clap has already accepted them.
fn dashdash_before_command(args: &[OsString]) -> bool {
    let mut i = 2;
    while let Some(arg) = args.get(i) {
        let Some(body) = arg.to_str().and_then(|a| a.strip_prefix("--")) else {
            return false;
        };
        if body.is_empty() {
            return true;
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, _)) => (n, true),
            None => (body, false),
        };
        match RUN_FLAGS.iter().find(|(n, _)| *n == name) {
            Some((_, Takes::Switch)) => i += 1,
            Some(_) if inline => i += 1,
            Some(_) => i += 2,
            None => return false,
        }
    }
    false
}

/// A `--` in the command when none came before it: `stockade run --ro-bind
/// /a /bin/x -- y` (bwrap's `SRC DST`) reads `/bin/x` as the command and
/// `--` as its argument. Refused, saying what was read and how to write it.
fn literal_dashdash(a: &RunArgs) -> Result<(), PolicyError> {
    if a.dashdash || !a.command.iter().skip(1).any(|x| x == "--") {
        return Ok(());
    }
    let word = |w: &OsString| {
        let s = w.to_string_lossy();
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            s.into_owned()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let mut shown: Vec<String> = a.command.iter().take(6).map(word).collect();
    if a.command.len() > 6 {
        shown.push("…".into());
    }
    Err(PolicyError::new(
        "command",
        format!(
            "{} was read as the command, with a literal \"--\" among its arguments \
             (a flag takes one value: --ro-bind SRC[:DST], not SRC DST); \
             if that is meant, put -- before the command: stockade run [OPTIONS] -- {}",
            word(&a.command[0]),
            shown.join(" ")
        ),
    ))
}

fn mount_values(flags: &[(usize, MountFlag, String)], f: MountFlag) -> Vec<String> {
    flags
        .iter()
        .filter(|(_, g, _)| *g == f)
        .map(|(_, _, v)| v.clone())
        .collect()
}

fn run_policy(a: &RunArgs, mounts: &[(usize, MountFlag, String)]) -> Result<Policy, PolicyError> {
    literal_dashdash(a)?;
    let workdir = a.workdir.as_deref().map(split_src_dst);
    let workdir_inner = match workdir.as_ref().and_then(|(_, i)| i.as_deref()) {
        Some(i) => Some(policy::jail_path("--workdir", std::path::Path::new(i))?),
        None => None,
    };
    let opts = profile::Options {
        python: a.python.clone(),
        workdir_inner: workdir_inner.clone(),
    };
    let spec = a.profile.as_deref().unwrap_or(profile::DEFAULT_PROFILE);
    let resolved = profile::resolve(spec, "--profile", &opts)?;
    let mut p = resolved.policy.clone();
    p.argv = a.command.clone();
    if let Some(u) = a.uid {
        p.uid = u;
    }
    if let Some(g) = a.gid {
        p.gid = g;
    }
    if let Some(u) = a.host_uid {
        p.root_host_uid = u;
    }
    if let Some(g) = a.host_gid {
        p.root_host_gid = g;
    }
    if let Some(r) = &a.uid_range {
        p.fallback_uid_range =
            policy::parse_uid_range(r).map_err(|e| PolicyError::new("--uid-range", e))?;
    }
    if let Some((host, _)) = &workdir {
        let host = policy::host_path("--workdir", std::path::Path::new(host))?;
        policy::host_exists(&host, true).map_err(|e| PolicyError::new("--workdir", e))?;
        p.workdir.host = Some(host);
        if let Some(i) = workdir_inner {
            p.workdir.inner = i;
            let home = p.workdir.inner.as_os_str().to_owned();
            policy::set_env(&mut p.env, "HOME".into(), home);
        }
    }
    if let Some(s) = &a.tmp_size {
        p.tmp_size = match units::parse_size(s) {
            Ok(0) => Err(format!("{s:?}: must be greater than 0")),
            r => r,
        }
        .map_err(|e| PolicyError::new("--tmp-size", e))?;
    }
    p.mounts.extend(ordered_mounts(mounts)?);
    if let Some(h) = &a.hostname {
        p.hostname = h.clone();
    }
    if let Some(c) = &a.chdir {
        p.chdir = Some(policy::jail_path("--chdir", c)?);
    }
    match a.network {
        Some(NetArg::None) => p.network = Network::None,
        Some(NetArg::Host) => p.network = Network::Host,
        None => {}
    }
    for k in &a.keep_env {
        if let Some(v) = std::env::var_os(k) {
            policy::set_env(&mut p.env, k.into(), v);
        }
    }
    for kv in &a.setenv {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| PolicyError::new("--setenv", format!("{kv:?}: expected NAME=VALUE")))?;
        policy::set_env(&mut p.env, k.into(), v.into());
    }
    for fd in &a.keep_fd {
        if !crate::sys::fd_is_open(*fd) {
            return Err(PolicyError::new(
                "--keep-fd",
                format!("{fd}: not an open file descriptor"),
            ));
        }
    }
    p.keep_fds = a.keep_fd.clone();

    if let Some(act) = a.seccomp_action {
        p.seccomp.action = match act {
            SeccompActionArg::Errno => SeccompAction::Errno,
            SeccompActionArg::Kill => SeccompAction::Kill,
        };
    }
    if a.seccomp_learn {
        p.seccomp.action = SeccompAction::Learn;
    }
    for n in &a.seccomp_allow {
        policy::seccomp_name(n).map_err(|e| PolicyError::new("--seccomp-allow", e))?;
        if let Some(g) = n.strip_prefix('@') {
            p.seccomp.groups.push(format!("@{g}"));
        } else {
            p.seccomp.allow.push(n.clone());
        }
    }
    if a.no_seccomp {
        p.seccomp.enabled = false;
    }
    if a.no_landlock {
        p.landlock.disabled = true;
    }
    for x in &a.landlock_exclude {
        p.landlock
            .exclude
            .push(policy::jail_path("--landlock-exclude", x)?);
    }
    for r in &a.require {
        let l = Layer::parse(r).ok_or_else(|| {
            PolicyError::new(
                "--require",
                format!("{r:?}: unknown layer (userns, landlock, seccomp, cgroup)"),
            )
        })?;
        if !p.require.contains(&l) {
            p.require.push(l);
        }
    }
    /// A limit flag's value through `parse`, the error naming the flag.
    fn limit<T>(
        flag: &str,
        v: &Option<String>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, PolicyError> {
        v.as_deref()
            .map(|s| parse(s).map_err(|e| PolicyError::new(flag, e)))
            .transpose()
    }
    let l = &mut p.limits;
    l.memory = limit("--memory", &a.memory, units::parse_limit_size)?.or(l.memory);
    l.memory_high =
        limit("--memory-high", &a.memory_high, units::parse_limit_size)?.or(l.memory_high);
    l.cpus = limit("--cpus", &a.cpus, units::parse_cpus)?.or(l.cpus);
    l.pids = limit("--pids-limit", &a.pids_limit, units::parse_count)?.or(l.pids);
    l.cpu_time = limit("--cpu-time", &a.cpu_time, units::parse_limit_duration)?.or(l.cpu_time);
    l.timeout = limit("--timeout", &a.timeout, units::parse_limit_duration)?.or(l.timeout);
    // A grace of 0 is meaningful: SIGKILL right at the deadline.
    if let Some(g) = limit("--grace", &a.grace, units::parse_duration)? {
        l.grace = g;
    }
    l.max_output = limit("--max-output", &a.max_output, units::parse_limit_size)?.or(l.max_output);
    l.max_file_size =
        limit("--max-file-size", &a.max_file_size, units::parse_limit_size)?.or(l.max_file_size);
    l.max_open_files =
        limit("--max-open-files", &a.max_open_files, units::parse_count)?.or(l.max_open_files);
    python_reachable(&resolved, &p, a.python.is_some())?;
    p.capture = a.capture;
    p.stdout_in_report = a.report.as_deref() == Some(std::path::Path::new("-"));
    if let Some(fd) = a.report_fd {
        if !crate::sys::fd_is_open(fd) {
            return Err(PolicyError::new(
                "--report-fd",
                format!("{fd}: not an open file descriptor"),
            ));
        }
        if p.keep_fds.contains(&fd) {
            return Err(PolicyError::new(
                "--report-fd",
                format!("{fd}: also given to --keep-fd"),
            ));
        }
    }
    p.validate()?;
    Ok(p)
}

/// The jail runs as an unprivileged host uid: the caller opens the binds
/// (so a private parent such as /root is fine), but what is bound of a
/// discovered interpreter must be readable by the jail's host uid. Say so
/// before the run. `flag`: the interpreter came from `--python`.
fn python_reachable(r: &profile::Resolved, p: &Policy, flag: bool) -> Result<(), PolicyError> {
    let Some(i) = &r.python else {
        return Ok(());
    };
    let (ou, og) = if crate::sys::geteuid() == 0 {
        (p.root_host_uid, p.root_host_gid)
    } else {
        (crate::sys::geteuid(), crate::sys::getegid())
    };
    let name = if flag { "--python" } else { "python" };
    if let Some(why) = policy::python::jail_cannot_run(i, r.system_root, ou, og) {
        return Err(PolicyError::new(name, why));
    }
    for m in policy::python::mounts(i, r.system_root) {
        if let MountSpec::Bind { src, .. } = &m {
            if let Some(why) = policy::python::not_readable_by(src, ou, og) {
                return Err(PolicyError::new(
                    name,
                    format!(
                        "{}: the jail (host uid {ou}) cannot reach the interpreter's {}: {why}",
                        i.executable.display(),
                        src.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `stockade profile check`: what `run` checks of a profile before it
/// starts the jail (resolve, the interpreter's reach, the policy, the
/// plan: bind sources, seccomp names, ids), without a command. The chain
/// of files applied, or the one-line error.
fn check_profile(spec: &str) -> Result<String, String> {
    let r = profile::resolve(spec, "profile check", &profile::Options::default())
        .map_err(|e| e.to_string())?;
    let mut p = r.policy.clone();
    python_reachable(&r, &p, false).map_err(|e| e.to_string())?;
    p.argv = vec!["true".into()];
    p.validate().map_err(|e| e.to_string())?;
    crate::plan::Plan::validate(&p).map_err(|e| e.to_string())?;
    Ok(r.chain.join(" <- "))
}

fn eprint_line(msg: &str) {
    eprintln!("stockade: {msg}");
}

/// Where a run's JSON outcome goes.
#[derive(Debug, Default, PartialEq, Eq)]
struct ReportTo {
    /// `--report -`
    stdout: bool,
    /// `--report FILE`
    file: Option<PathBuf>,
    /// `--report-fd N`
    fd: Option<i32>,
}

impl ReportTo {
    fn of(a: &RunArgs) -> ReportTo {
        ReportTo {
            stdout: a.report.as_deref() == Some(std::path::Path::new("-")),
            file: a.report.clone().filter(|p| p != std::path::Path::new("-")),
            fd: a.report_fd,
        }
    }

    /// The report flags of a `stockade run …` command line clap refused:
    /// read up to the `--` before the command, skipping the values of the
    /// flags that take one (and stepping over words it does not know).
    fn scan(args: &[OsString]) -> ReportTo {
        let mut to = ReportTo::default();
        if args.get(1).and_then(|a| a.to_str()) != Some("run") {
            return to;
        }
        let mut set = |name: &str, v: &std::ffi::OsStr| match name {
            "report" if to.file.is_none() && !to.stdout => {
                if v == "-" {
                    to.stdout = true;
                } else if !v.is_empty() {
                    to.file = Some(PathBuf::from(v));
                }
            }
            "report-fd" if to.fd.is_none() => {
                to.fd = v.to_str().and_then(|v| v.parse().ok());
            }
            _ => {}
        };
        let mut i = 2;
        while let Some(arg) = args.get(i) {
            i += 1;
            let Some(body) = arg.to_str().and_then(|a| a.strip_prefix("--")) else {
                continue;
            };
            if body.is_empty() {
                break;
            }
            if let Some((name, v)) = body.split_once('=') {
                set(name, std::ffi::OsStr::new(v));
                continue;
            }
            if let Some((_, Takes::One | Takes::Many)) = RUN_FLAGS.iter().find(|(n, _)| *n == body)
            {
                if let Some(v) = args.get(i) {
                    set(body, v);
                }
                i += 1;
            }
        }
        to
    }

    /// Open where the report goes, before anything runs: a bad path or a
    /// closed fd is bad input.
    fn open(&self) -> Result<Opened, String> {
        let file = match &self.file {
            Some(p) => Some(
                std::fs::File::create(p).map_err(|e| format!("--report: {}: {e}", p.display()))?,
            ),
            None => None,
        };
        if let Some(fd) = self.fd.filter(|fd| !crate::sys::fd_is_open(*fd)) {
            return Err(format!("--report-fd: {fd}: not an open file descriptor"));
        }
        Ok(Opened {
            file,
            stdout: self.stdout,
            fd: self.fd,
        })
    }
}

/// Where the report goes, opened.
struct Opened {
    file: Option<std::fs::File>,
    stdout: bool,
    fd: Option<i32>,
}

impl Opened {
    fn wanted(&self) -> bool {
        self.file.is_some() || self.stdout || self.fd.is_some()
    }

    /// Write the report everywhere asked; the first error, worded for the
    /// caller.
    fn write(self, json: &str) -> Result<(), String> {
        use std::io::Write;
        let mut wrote = Ok(());
        if let Some(mut f) = self.file {
            wrote = f
                .write_all(json.as_bytes())
                .map_err(|e| format!("--report: {e}"));
        }
        if self.stdout {
            let mut so = std::io::stdout().lock();
            wrote = wrote.and(
                so.write_all(json.as_bytes())
                    .and_then(|_| so.flush())
                    .map_err(|e| format!("--report -: {e}")),
            );
        }
        if let Some(fd) = self.fd {
            wrote = wrote.and(
                crate::sys::write_all(fd, json.as_bytes()).map_err(|e| format!("--report-fd: {e}")),
            );
        }
        wrote
    }
}

/// `msg` on stderr and, as a `setup_error` outcome, wherever a report was
/// asked for (a service reading the outcome always gets one); exit 125.
fn refuse(to: &ReportTo, msg: &str) -> i32 {
    eprint_line(msg);
    if *to != ReportTo::default() {
        let mut o = crate::Outcome::new();
        o.status = Status::SetupError;
        o.exit_code = 125;
        o.error = Some(msg.to_string());
        // The refusal is already on stderr; a report that cannot be
        // written has nowhere better to go.
        let _ = to.open().and_then(|r| r.write(&(o.to_json() + "\n")));
    }
    125
}

/// Parse and run; return the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    if let Some((a, mounts)) = fast_run_args(&args) {
        return run_cmd(&a, &mounts);
    }
    // `stockade man [DIR]` (for `cargo xtask man`) is not a clap
    // subcommand: the completion scripts would offer it, hidden or not.
    if args.get(1).is_some_and(|a| a == "man") {
        return match &args[2..] {
            [] => man(None),
            [dir] => man(Some(std::path::Path::new(dir))),
            _ => {
                eprint_line("usage: stockade man [DIR]");
                2
            }
        };
    }
    let matches = match Cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                };
            }
            let text = e.to_string();
            let to = ReportTo::scan(&args);
            if e.kind() == ErrorKind::MissingRequiredArgument {
                let missing: Vec<&str> = text
                    .lines()
                    .skip(1)
                    .map(str::trim)
                    .filter(|l| l.starts_with('<') || l.starts_with("--"))
                    .collect();
                if missing.iter().any(|m| m.starts_with("<CMD>")) {
                    return refuse(
                        &to,
                        "no command given (stockade run [OPTIONS] -- CMD [ARGS…])",
                    );
                }
                return refuse(
                    &to,
                    &format!("missing required argument: {}", missing.join(", ")),
                );
            }
            let first = text.lines().next().unwrap_or("invalid arguments");
            return refuse(&to, first.trim_start_matches("error: "));
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments");
            return refuse(&ReportTo::scan(&args), first.trim_start_matches("error: "));
        }
    };
    match cli.cmd {
        Cmd::Run(mut a) => {
            a.dashdash = dashdash_before_command(&args);
            let sub = matches.subcommand_matches("run");
            run_cmd(&a, &sub.map(mount_flags).unwrap_or_default())
        }
        Cmd::Profile(pc) => profile_cmd(pc),
        Cmd::Serve(a) => crate::serve::main(a),
        Cmd::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "stockade", &mut out);
            print_out(&out)
        }
        Cmd::Check(c) => {
            let spec = c.profile.as_deref().unwrap_or(profile::DEFAULT_PROFILE);
            let r = match profile::resolve(spec, "--profile", &profile::Options::default()) {
                Ok(r) => r,
                Err(e) => {
                    eprint_line(&e.to_string());
                    return 125;
                }
            };
            let report = crate::check::probe_all();
            let code = crate::check::exit_code(&report, &r.policy.require);
            let text = if c.json {
                crate::check::to_json(&report, spec, &r.policy.require)
            } else {
                crate::check::to_text(&report, spec, &r.policy.require)
            };
            print!("{text}");
            code
        }
    }
}

/// Write `bytes` on stdout: 0, or 1 with a line saying why not.
fn print_out(bytes: &[u8]) -> i32 {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|_| so.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprint_line(&format!("stdout: {e}"));
            1
        }
    }
}

/// The man pages from the command line's own definition: stockade.1 on
/// stdout, or every page (stockade.1, stockade-run.1, …) into `dir`.
fn man(dir: Option<&std::path::Path>) -> i32 {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let mut out = Vec::new();
        if let Err(e) = clap_mangen::Man::new(cmd).render(&mut out) {
            eprint_line(&format!("man: {e}"));
            return 1;
        }
        return print_out(&out);
    };
    match clap_mangen::generate_to(cmd, dir) {
        Ok(()) => 0,
        Err(e) => {
            eprint_line(&format!("man: {}: {e}", dir.display()));
            1
        }
    }
}

/// `stockade run`: build the policy, run it, write the report; the exit code.
fn run_cmd(a: &RunArgs, mounts: &[(usize, MountFlag, String)]) -> i32 {
    let policy = match run_policy(a, mounts) {
        Ok(p) => p,
        Err(e) => return refuse(&ReportTo::of(a), &e.to_string()),
    };
    // Open the report's destinations before running: a bad path is bad input.
    let report = match ReportTo::of(a).open() {
        Ok(r) => r,
        Err(e) => {
            eprint_line(&e);
            return 125;
        }
    };
    // The library's own door: in this process, which is single-threaded.
    let jail = crate::Jail::new(policy);
    let o = match jail.run_here() {
        Ok(o) => o,
        Err(e) => return refuse(&ReportTo::of(a), &e.to_string()),
    };
    if let Some(err) = &o.error {
        eprint_line(err);
    }
    if let Some(learned) = &o.seccomp_learned {
        eprint_line(&format!(
            "seccomp-learn: syscalls outside the allowlist: {}",
            if learned.is_empty() {
                "(none)".to_string()
            } else {
                learned.join(", ")
            }
        ));
    }
    // Serialized only when some report is asked for: the run is over, but
    // the caller still waits for this process to exit.
    if report.wanted() {
        if let Err(e) = report.write(&(o.to_json() + "\n")) {
            eprint_line(&e);
            return 125;
        }
    }
    if o.status == Status::SetupError && o.exit_code != 126 && o.exit_code != 127 {
        return 125;
    }
    o.exit_code
}

fn profile_cmd(pc: ProfileCmd) -> i32 {
    match pc {
        ProfileCmd::List => {
            for (name, text) in profile::BUILTIN {
                let about = text
                    .lines()
                    .find_map(|l| l.strip_prefix("description = "))
                    .map(|d| d.trim_matches('"'))
                    .unwrap_or("");
                let mark = if *name == profile::DEFAULT_PROFILE {
                    " (default)"
                } else {
                    ""
                };
                println!("{name:<8} {about}{mark}");
            }
            0
        }
        ProfileCmd::Show {
            profile: spec,
            python,
        } => {
            let opts = profile::Options {
                python,
                workdir_inner: None,
            };
            match profile::resolve(&spec, "profile show", &opts) {
                Ok(r) => {
                    print!("{}", profile::show(&r));
                    0
                }
                Err(e) => {
                    eprint_line(&e.to_string());
                    125
                }
            }
        }
        ProfileCmd::Check { file } => match check_profile(&file) {
            Ok(chain) => {
                println!("{file}: ok ({chain})");
                0
            }
            Err(e) => {
                eprint_line(&e);
                125
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// The run arguments and the filesystem flags in order, as text.
    fn shown(a: &RunArgs, m: &[(usize, MountFlag, String)]) -> String {
        let mut m = m.to_vec();
        m.sort_by_key(|(i, _, _)| *i);
        let m: Vec<(MountFlag, String)> = m.into_iter().map(|(_, f, v)| (f, v)).collect();
        format!("{a:?} {m:?}")
    }

    fn by_clap(args: &[OsString]) -> Option<String> {
        let matches = Cli::command().try_get_matches_from(args).ok()?;
        let Cmd::Run(mut a) = Cli::from_arg_matches(&matches).ok()?.cmd else {
            return None;
        };
        a.dashdash = dashdash_before_command(args);
        let sub = matches.subcommand_matches("run")?;
        Some(shown(&a, &mount_flags(sub)))
    }

    #[test]
    fn fast_parser_reads_what_clap_reads_or_leaves_it_to_clap() {
        let cases: &[&[&str]] = &[
            &["s", "run", "--", "/bin/true"],
            &["s", "run", "/bin/true"],
            &["s", "run", "/bin/echo", "-n", "--x", "--", "y"],
            &["s", "run", "--no-seccomp", "/bin/true", "--", "x"],
            &[
                "s",
                "run",
                "--ro-bind",
                "/tmp/x",
                "/usr/bin/echo",
                "--",
                "hi",
            ],
            &["s", "run", "--ro-bind=/a", "--capture", "--", "x", "--"],
            &["s", "run", "--memory", "-5m", "--", "x"],
            &["s", "run", "--memory=-5m", "x", "--", "y"],
            &["s", "run", "--pids-limit", "0", "--cpus", "0.5", "--", "x"],
            &["s", "run", "--timeout", "--", "x", "--"],
            &["s", "run", "--", "/bin/echo", "", "--", "-x"],
            &["s", "run", "--report", "-", "--", "true"],
            &["s", "run", "--report=-", "--capture", "--", "true"],
            &[
                "s",
                "run",
                "--profile",
                "python",
                "--python",
                "/usr/bin/python3",
                "--",
                "python3",
                "-c",
                "pass",
            ],
            &[
                "s",
                "run",
                "--profile=./x.toml",
                "--timeout",
                "10s",
                "--grace=1s",
                "--",
                "sh",
            ],
            &[
                "s",
                "run",
                "--ro-bind",
                "/a:/b",
                "--tmpfs",
                "/t:8m",
                "--bind=/c",
                "--symlink",
                "x:/y",
                "--ro-bind",
                "/d",
                "--",
                "ls",
            ],
            &["s", "run", "--tmpfs", "/t", "--tmpfs=/u:1m", "--", "ls"],
            &[
                "s",
                "run",
                "--uid",
                "0",
                "--gid=+7",
                "--host-uid",
                "1000",
                "--host-gid",
                "007",
                "--",
                "id",
            ],
            &["s", "run", "--uid", "4294967296", "--", "id"],
            &["s", "run", "--uid", "1", "--uid", "2", "--", "id"],
            &["s", "run", "--uid", "-1", "--", "id"],
            &["s", "run", "--uid", " 1", "--", "id"],
            &[
                "s",
                "run",
                "--network",
                "host",
                "--seccomp-action",
                "kill",
                "--",
                "id",
            ],
            &["s", "run", "--network", "Host", "--", "id"],
            &[
                "s",
                "run",
                "--network=none",
                "--seccomp-action=errno",
                "--seccomp-learn",
                "--",
                "id",
            ],
            &[
                "s",
                "run",
                "--seccomp-allow",
                "ptrace",
                "--seccomp-allow=@network-io",
                "--no-landlock",
                "--",
                "id",
            ],
            &["s", "run", "--no-seccomp", "--no-seccomp", "--", "id"],
            &["s", "run", "--no-seccomp=true", "--", "id"],
            &[
                "s",
                "run",
                "--landlock-exclude",
                "/work/x",
                "--require",
                "seccomp",
                "--require=landlock",
                "--",
                "id",
            ],
            &[
                "s",
                "run",
                "--memory",
                "64m",
                "--memory-high=32m",
                "--cpus",
                "0.5",
                "--pids-limit",
                "10",
                "--",
                "id",
            ],
            &[
                "s",
                "run",
                "--cpus",
                "1e0",
                "--cpu-time",
                "5s",
                "--max-output",
                "1k",
                "--",
                "id",
            ],
            &["s", "run", "--cpus", "inf", "--", "id"],
            &["s", "run", "--cpus", "-1", "--", "id"],
            &["s", "run", "--cpus=-1", "--", "id"],
            &[
                "s",
                "run",
                "--max-file-size",
                "1m",
                "--max-open-files",
                "64",
                "--",
                "id",
            ],
            &[
                "s",
                "run",
                "--keep-fd",
                "3",
                "--keep-fd=+4",
                "--report-fd",
                "5",
                "--",
                "id",
            ],
            &[
                "s",
                "run",
                "--setenv",
                "A=1",
                "--setenv=B=",
                "--keep-env",
                "TERM",
                "--",
                "env",
            ],
            &[
                "s",
                "run",
                "--hostname",
                "box",
                "--chdir",
                "/tmp",
                "--workdir",
                "./w:/home",
                "--tmp-size",
                "1m",
                "--",
                "pwd",
            ],
            &["s", "run", "--profile=", "--", "id"],
            &["s", "run", "--python=", "--", "id"],
            &["s", "run", "--python", "--", "id"],
            &["s", "run", "--profile"],
            &["s", "run", "--"],
            &["s", "run"],
            &["s", "run", "--help"],
            &["s", "run", "-h", "--", "id"],
            &["s", "run", "--version"],
            &["s", "run", "--prof", "shell", "--", "id"],
            &["s", "run", "--frobnicate", "--", "id"],
            &["s", "--version", "run", "--", "id"],
            &["s", "check"],
            &["s", "runx", "--", "id"],
        ];
        let mut fast = 0;
        for c in cases {
            let args = argv(c);
            if let Some((a, m)) = fast_run_args(&args) {
                fast += 1;
                assert_eq!(Some(shown(&a, &m)), by_clap(&args), "{c:?}");
            }
        }
        assert!(fast >= 20, "only {fast} cases took the fast path");
    }

    #[test]
    fn a_literal_dashdash_after_the_command_is_refused_by_both_parsers() {
        let clap_args = |args: &[OsString]| {
            let matches = Cli::command().try_get_matches_from(args).unwrap();
            let Cmd::Run(mut a) = Cli::from_arg_matches(&matches).unwrap().cmd else {
                panic!("not run")
            };
            a.dashdash = dashdash_before_command(args);
            a
        };
        for (c, refused) in [
            (
                &[
                    "s",
                    "run",
                    "--ro-bind",
                    "/tmp/x",
                    "/usr/bin/echo",
                    "--",
                    "hi",
                ][..],
                true,
            ),
            (&["s", "run", "/bin/sh", "-c", "x", "--", "a"], true),
            (
                &["s", "run", "--memory=1m", "--no-seccomp", "x", "--"],
                true,
            ),
            (&["s", "run", "--", "/usr/bin/echo", "--", "hi"], false),
            (&["s", "run", "--hostname=h", "--", "x", "--"], false),
            (
                &["s", "run", "--timeout", "1s", "--capture", "--", "x", "--"],
                false,
            ),
            (&["s", "run", "/bin/echo", "a", "b"], false),
            (&["s", "run", "/bin/echo", "--x"], false),
        ] {
            let args = argv(c);
            let by_clap = clap_args(&args);
            assert_eq!(literal_dashdash(&by_clap).is_err(), refused, "clap: {c:?}");
            if let Some((fast, _)) = fast_run_args(&args) {
                assert_eq!(literal_dashdash(&fast).is_err(), refused, "fast: {c:?}");
            } else {
                panic!("the fast path declined {c:?}");
            }
        }
        let (a, _) = fast_run_args(&argv(&[
            "s",
            "run",
            "--ro-bind",
            "/tmp/x",
            "/usr/bin/echo",
            "--",
            "hi there",
        ]))
        .unwrap();
        assert_eq!(
            literal_dashdash(&a).unwrap_err().to_string(),
            "command: /usr/bin/echo was read as the command, with a literal \"--\" among its \
             arguments (a flag takes one value: --ro-bind SRC[:DST], not SRC DST); if that is \
             meant, put -- before the command: stockade run [OPTIONS] -- /usr/bin/echo -- 'hi there'"
        );
    }

    #[test]
    fn fast_parser_takes_the_common_command_lines() {
        for c in [
            &["s", "run", "--", "/bin/true"][..],
            &[
                "s",
                "run",
                "--profile",
                "python",
                "--report",
                "-",
                "--timeout",
                "10s",
                "--",
                "python3",
                "x.py",
            ],
            &[
                "s",
                "run",
                "--no-seccomp",
                "--no-landlock",
                "--",
                "/bin/true",
            ],
            &[
                "s",
                "run",
                "--ro-bind",
                "/bin/x:/bench/x",
                "--",
                "/bench/x",
                "2",
            ],
        ] {
            assert!(fast_run_args(&argv(c)).is_some(), "{c:?}");
        }
    }

    #[test]
    fn flag_table_matches_clap() {
        let cmd = Cli::command();
        let run = cmd.find_subcommand("run").expect("run");
        let mut clap_flags: Vec<String> = run
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .filter(|l| l != "help")
            .collect();
        clap_flags.sort();
        let mut ours: Vec<String> = RUN_FLAGS.iter().map(|(n, _)| n.to_string()).collect();
        ours.sort();
        assert_eq!(ours, clap_flags);
        for (n, t) in RUN_FLAGS {
            let a = run
                .get_arguments()
                .find(|a| a.get_long() == Some(n))
                .expect("flag");
            let want = match a.get_action() {
                clap::ArgAction::SetTrue => Takes::Switch,
                clap::ArgAction::Append => Takes::Many,
                _ => Takes::One,
            };
            assert!(want == *t, "--{n}");
        }
    }
}
