//! The jail a session runs in: the caller's policy with the agent as its
//! payload.
//!
//! The agent is this very binary, bound read-only at `/.stockade/NAME` and
//! found through the jail's PATH: `/.stockade` first (the jail's own
//! root), then the binary's host directory (the fallback without a mount
//! namespace, where the bind's host path is what Landlock allows). The
//! agent gives the commands the profile's PATH back.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::state;
use crate::policy::{self, MountSpec, Policy, PolicyError};

/// Where the agent is bound inside the jail.
pub(crate) const AGENT_DIR: &str = "/.stockade";

/// `base` turned into the session `id`'s jail. `idle`: the idle timeout.
/// The jail has no deadline of its own unless `lifetime` gives one, and
/// no output cap (each command has its own).
pub(crate) fn session_policy(
    mut base: Policy,
    id: &str,
    idle: Option<Duration>,
    lifetime: Option<Duration>,
) -> Result<Policy, PolicyError> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| PolicyError::new("session", format!("this binary's path: {e}")))?;
    let (Some(dir), Some(name)) = (exe.parent(), exe.file_name()) else {
        return Err(PolicyError::new("session", "this binary has no file name"));
    };
    if !state::plain_path(&exe) {
        return Err(PolicyError::new(
            "session",
            format!(
                "{}: the agent's path may hold only letters, digits and /._+-",
                exe.display()
            ),
        ));
    }
    agent_can_run(&base)?;
    let path = base
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let mut argv: Vec<OsString> = vec![
        name.into(),
        super::AGENT_ARG.into(),
        "--session".into(),
        id.into(),
        "--idle-timeout".into(),
        idle.map_or(0.0, |d| d.as_secs_f64()).to_string().into(),
    ];
    if let Some(p) = path {
        argv.extend(["--path".into(), p]);
    }
    base.argv = argv;
    base.compat.argv0 = None;
    base.mounts.push(MountSpec::Bind {
        src: exe.clone(),
        dst: PathBuf::from(AGENT_DIR).join(name),
        writable: false,
        optional: false,
    });
    let mut search = OsString::from(format!("{AGENT_DIR}:"));
    search.push(dir);
    policy::set_env(&mut base.env, "PATH".into(), search);
    base.limits.timeout = lifetime;
    base.limits.max_output = None;
    base.capture = false;
    base.stdout_in_report = false;
    base.validate()?;
    Ok(base)
}

/// The agent and `/bin/sh` need the system root and at least the
/// `@default` syscalls: a narrower profile is refused, saying how to widen
/// it, rather than killed at its first step.
fn agent_can_run(p: &Policy) -> Result<(), PolicyError> {
    if p.base != policy::BaseRoot::System {
        return Err(PolicyError::new(
            "session",
            "the profile's root has no system binaries (/bin/sh and its libraries); \
             sessions need a profile with the system root, such as shell or python",
        ));
    }
    let s = &p.seccomp;
    if s.enabled && !s.groups.iter().any(|g| g == "@default") {
        return Err(PolicyError::new(
            "session",
            "the profile's seccomp allowlist is narrower than @default, which the session's \
             agent and /bin/sh need (add --seccomp-allow @default, or use shell or python)",
        ));
    }
    Ok(())
}

/// A fresh session id: 16 hex digits from the kernel's random pool.
pub(crate) fn new_id() -> String {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
