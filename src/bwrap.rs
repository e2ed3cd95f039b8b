//! `stockade bwrap ARGS…` (and the binary started as `bwrap`): a drop-in
//! for bubblewrap 0.12's command line. It only translates: `parse` reads
//! bwrap's argv into setup ops in command-line order, `translate` turns
//! them into a [`Policy`], and the run is the library's own
//! (`crate::run_namespaced`, and `crate::run_fallback` where user
//! namespaces are refused, as `stockade run` runs them); errors are
//! worded as bwrap words them, after `bwrap: `, with bwrap's exit code 1.
//!
//! bwrap's semantics, not stockade's defaults:
//! - the root is empty ([`crate::policy::BaseRoot::Bare`]): only what the ops put there,
//!   no generated /etc, no /proc, /dev, /tmp or workdir unless asked;
//! - the environment is the caller's, changed by `--setenv`, `--unsetenv`
//!   and `--clearenv` in order, and `PWD` is set to the working directory;
//! - the caller's open fds (all but those bwrap's options use up) pass
//!   through to the command under the same numbers;
//! - the network is the host's unless `--unshare-net` or `--unshare-all`
//!   (without `--share-net`);
//! - the hostname is the host's unless `--hostname` (which, as in bwrap,
//!   needs `--unshare-uts`);
//! - the uid and gid are the caller's unless `--uid` / `--gid` (which need
//!   `--unshare-user`);
//! - the working directory is `--chdir`, else, decided at the command's
//!   start as bwrap does, the caller's if it can be entered inside, else
//!   `$HOME`, else `/`.
//!
//! stockade's own layers that stay ON: the user, mount, pid, ipc, uts and
//! cgroup namespaces are always new (bwrap makes the ones asked for; a
//! payload here sees its own pids and ipc even without `--unshare-pid`),
//! every capability is dropped but those `--cap-add` names (kept in the
//! jail's user namespace, ambient too, as bwrap keeps them; a root
//! caller's sandbox starts with root's, as bwrap's, but in the jail's user
//! namespace only), no_new_privs, the payload leads a new
//! session (as with `--new-session`), and the jail dies with this process
//! (which `--die-with-parent` kills when its parent dies).
//! Started by host root, the jail's ids map to a host id leased for the
//! run, never host root, and the binds are idmapped so that host root's
//! files are the jail root's on them (`Compat::idmap_root_binds`,
//! `supervise::idmap`): what bwrap's payload, host root, sees on the
//! filesystem it was given, and nothing of root's beyond it.
//! Layers that are OFF unless asked for (`extras`: `STOCKADE_PROFILE`,
//! `--stockade-*`): Landlock and the seccomp allowlist (bwrap has neither
//! unless `--seccomp FD`; callers such as Flatpak run programs that need
//! syscalls and paths stockade's defaults refuse, and they bring their own
//! filters), resource limits, the deadline and output caps (bwrap has
//! none), the JSON outcome. Where user namespaces are refused, the run
//! goes on without them (`fallback`: Landlock on the binds, seccomp,
//! rlimits, a new session; one stderr line says so), unless the ops make
//! the namespace mandatory, where it fails with bwrap's words. Options
//! stockade cannot honour (see `translate`, `fallback`) are refused before
//! anything runs, never ignored.

#![deny(unsafe_code)]

mod extras;
mod fallback;
mod help;
mod parse;
mod sources;
mod translate;
mod words;

use std::ffi::OsString;

use crate::outcome::Status;
use crate::policy::Policy;

/// What bwrap would have refused; the text is the line after `bwrap: `.
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error("Unknown option {0}")]
    UnknownOption(String),
    /// A usage error worded as bwrap words it.
    #[error("{0}")]
    Usage(String),
    /// An option bwrap has and stockade cannot honour.
    #[error("{0}: not supported by stockade")]
    Unsupported(&'static str),
    /// A path or value the policy refused.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// A bind's source or an overlay's directory that is not there
    /// (`why`: strerror's words; see `sources`).
    #[error("Can't find source path {}: {why}", .path.to_string_lossy())]
    NoSource { path: OsString, why: String },
}

/// bwrap's exit code for a usage error or a failed setup.
pub const USAGE_EXIT: i32 = 1;

/// Set by `--level-prefix` once parsed: bwrap's own messages from then on
/// start with their syslog level (`<3>` for errors), as bwrap 0.12's do.
static LEVEL_PREFIX: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One error line as bwrap writes it.
fn eprint_line(msg: &str) {
    eprint_level(3, msg);
}

/// One message at syslog `level` (3: error, 4: warning), as bwrap writes it.
fn eprint_level(level: u8, msg: &str) {
    match LEVEL_PREFIX.load(std::sync::atomic::Ordering::Relaxed) {
        true => eprintln!("<{level}>bwrap: {msg}"),
        false => eprintln!("bwrap: {msg}"),
    }
}

/// `args[0]` is the program name, as bwrap's help shows it.
pub fn main(args: &[OsString]) -> i32 {
    let argv0 = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bwrap".into());
    // Before anything here opens an fd: the caller's, passed through.
    let inherited = crate::sys::inherited_fds();
    let rest = args.get(1..).unwrap_or_default();
    let (rest, extras) = match extras::split(rest, std::env::var_os("STOCKADE_PROFILE")) {
        Ok(split) => split,
        Err(e) => {
            eprint_line(&e.to_string());
            return USAGE_EXIT;
        }
    };
    let (ops, argv) = match parse::parse(&rest) {
        Ok(parse::Parsed::Help) => {
            print!("{}", help::usage(&argv0));
            return 0;
        }
        Ok(parse::Parsed::Version) => {
            println!("bubblewrap 0.12.0");
            return 0;
        }
        Ok(parse::Parsed::Run { ops, argv }) => (ops, argv),
        Err(e) => {
            eprint_line(&e.to_string());
            return USAGE_EXIT;
        }
    };
    if argv.is_empty() {
        // bwrap prints its usage to stderr when no command is given.
        eprint!("{}", help::usage(&argv0));
        return USAGE_EXIT;
    }
    let mut policy = match translate::policy(&ops, argv) {
        Ok(p) => p,
        Err(e) => {
            eprint_line(&e.to_string());
            return USAGE_EXIT;
        }
    };
    policy.keep_fds = translate::passed_fds(&ops, &inherited);
    if let Err(lines) = translate::namespace_fds(&mut policy, &inherited) {
        for l in lines {
            eprint_line(&l);
        }
        return USAGE_EXIT;
    }
    if let Some(e) = sources::missing(&ops) {
        eprint_line(&e.to_string());
        return USAGE_EXIT;
    }
    if ops.iter().any(|o| o.opt == "--die-with-parent") {
        // SIGKILL when our parent goes; the jail dies with this process.
        if let Err(e) = crate::sys::set_pdeathsig(libc::SIGKILL) {
            eprint_line(&format!("prctl(PR_SET_PDEATHSIG): {e}"));
            return USAGE_EXIT;
        }
    }
    // stockade's own layers, when asked for (`extras`).
    if let Err(e) = extras.apply(&mut policy) {
        eprint_line(&e.to_string());
        return USAGE_EXIT;
    }
    let o = match outcome(policy, &ops) {
        Ok(o) => o,
        Err(e) => {
            eprint_line(&e);
            return USAGE_EXIT;
        }
    };
    if let Some(f) = &extras.report {
        if let Err(e) = std::fs::write(f, o.1.to_json() + "\n") {
            eprint_line(&format!(
                "--stockade-report {}: {}",
                f.display(),
                crate::sys::strerror(&e)
            ));
            return USAGE_EXIT;
        }
    }
    exit_code(o.0, &o.1)
}

/// What the run's end needs of its policy: the command, the directory,
/// the chmods and the status fds, for bwrap's words and documents.
struct Ends {
    argv0: String,
    cwd: std::path::PathBuf,
    chmods: Vec<(std::path::PathBuf, u32)>,
    status_fds: Vec<i32>,
}

impl Ends {
    fn of(policy: &Policy) -> Ends {
        Ends {
            argv0: policy.argv[0].to_string_lossy().into_owned(),
            cwd: policy.chdir.clone().unwrap_or_default(),
            chmods: policy
                .mounts
                .iter()
                .filter_map(|m| match m {
                    crate::policy::MountSpec::Chmod { dst, mode } => Some((dst.clone(), *mode)),
                    _ => None,
                })
                .collect(),
            status_fds: policy
                .compat
                .pid_reports
                .iter()
                .filter(|r| !r.pretty)
                .map(|r| r.fd)
                .collect(),
        }
    }
}

/// Run the policy here, namespaced, or (where user namespaces are refused
/// and the ops do not make them mandatory) without namespaces, saying so
/// on one line; the text of the error line otherwise.
fn outcome(policy: Policy, ops: &[parse::Op]) -> Result<(Ends, crate::outcome::Outcome), String> {
    policy.validate().map_err(|e| e.to_string())?;
    let ends = Ends::of(&policy);
    let (errno, why) = match crate::run_namespaced(&policy, None) {
        Ok(o) => {
            for w in &o.warnings {
                eprintln!("stockade: warning: {w}");
            }
            return Ok((ends, o));
        }
        Err(refused) => refused,
    };
    if fallback::mandatory(ops) || policy.require.contains(&crate::policy::Layer::Userns) {
        return Err(words::namespace_refused(errno));
    }
    let (fb, hidden) = fallback::policy(&policy, ops).map_err(|e| e.to_string())?;
    let mut line = format!(
        "user namespaces are refused here ({errno}), running without namespaces: the host's filesystem through Landlock on the binds, seccomp, rlimits, a new session"
    );
    if !hidden.is_empty() {
        line += &format!("; unreachable: {}", hidden.join(", "));
    }
    eprint_line(&line);
    Ok((ends, crate::run_fallback(&fb, None, errno, &why)))
}

/// The payload's exit code, or bwrap's 1 (and its words) after a failed
/// setup; `--json-status-fd`'s last document.
fn exit_code(ends: Ends, o: &crate::outcome::Outcome) -> i32 {
    if o.status == Status::SetupError {
        let cx = words::Context {
            argv0: &ends.argv0,
            cwd: &ends.cwd,
            chmods: &ends.chmods,
        };
        let said = o.setup.as_ref().and_then(|f| words::setup_failure(f, &cx));
        let lines = said.unwrap_or_else(|| vec![o.error.clone().unwrap_or("setup failed".into())]);
        for l in lines {
            eprint_line(&l);
        }
        return USAGE_EXIT;
    }
    // --json-status-fd's last document, as bwrap writes it.
    for fd in ends.status_fds {
        let line = format!("{{ \"exit-code\": {} }}\n", o.exit_code);
        let _ = crate::sys::write_all(fd, line.as_bytes());
    }
    o.exit_code
}
