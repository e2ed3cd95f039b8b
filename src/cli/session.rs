//! `stockade session`: the flags onto the profile's policy (as `run` puts
//! them), the agent as the payload, the jail run here with this process's
//! stdin and stdout (the agent reads and writes the protocol there), then
//! the `end` event.

use std::ffi::OsString;
use std::io::Write;

use super::args::{MountFlag, RunArgs, SessionArgs};
use super::report::{refuse, ReportTo};
use crate::policy::{units, PolicyError};
use crate::session::{self, policy::session_policy};

/// `stockade session`: the exit code (0 when the session ended as asked:
/// `close`, stdin's end, the idle timeout, SIGTERM).
pub(super) fn session_cmd(a: &SessionArgs, mounts: &[(usize, MountFlag, String)]) -> i32 {
    let policy = match policy(a, mounts) {
        Ok(p) => p,
        Err(e) => return refused(&e.to_string()),
    };
    let o = match crate::Jail::new(policy).run_here() {
        Ok(o) => o,
        Err(e) => return refused(&e.to_string()),
    };
    if let Some(err) = &o.error {
        super::eprint_line(err);
    }
    let end = session::end_event(&o);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{end}").and_then(|_| out.flush());
    match session::end_reason(&o).as_str() {
        "closed" | "stdin_closed" | "idle_timeout" | "terminated" => 0,
        "setup_error" => 125,
        _ if o.exit_code == 0 => 1,
        _ => o.exit_code,
    }
}

/// Refused before the jail: the line on stderr, and the `end` event with
/// a `setup_error` outcome (a client reading events sees why).
fn refused(msg: &str) -> i32 {
    let mut o = crate::Outcome::new();
    o.status = crate::Status::SetupError;
    o.exit_code = 125;
    o.error = Some(msg.to_string());
    println!("{}", session::end_event(&o));
    refuse(&ReportTo::default(), msg)
}

fn policy(
    a: &SessionArgs,
    mounts: &[(usize, MountFlag, String)],
) -> Result<crate::Policy, PolicyError> {
    let run = RunArgs {
        profile: a.profile.clone(),
        python: a.python.clone(),
        ro_bind: a.ro_bind.clone(),
        bind: a.bind.clone(),
        tmpfs: a.tmpfs.clone(),
        symlink: a.symlink.clone(),
        setenv: a.setenv.clone(),
        keep_env: a.keep_env.clone(),
        network: a.network,
        workdir: a.workdir.clone(),
        tmp_size: a.tmp_size.clone(),
        memory: a.memory.clone(),
        cpus: a.cpus.clone(),
        pids_limit: a.pids_limit.clone(),
        seccomp_allow: a.seccomp_allow.clone(),
        require: a.require.clone(),
        uid_range: a.uid_range.clone(),
        command: vec![OsString::from(session::AGENT_ARG)],
        dashdash: true,
        ..RunArgs::default()
    };
    let base = super::run::run_policy(&run, mounts)?;
    let dur = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| units::parse_duration(s).map_err(|e| PolicyError::value(flag, e)))
            .transpose()
            .map(|d| d.filter(|d| !d.is_zero()))
    };
    let idle = dur("--idle-timeout", &a.idle_timeout)?;
    let lifetime = dur("--timeout", &a.timeout)?;
    session_policy(base, &session::policy::new_id(), idle, lifetime)
}
