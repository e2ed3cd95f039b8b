//! stockade: a Linux jail for code nobody trusts.
//!
//! The public surface is [`Jail`] (a builder shaped like
//! `std::process::Command`) and the [`Child`] it starts, the [`Policy`] a
//! jail runs (module [`policy`]) and the [`Outcome`] it ends with (module
//! [`outcome`]). Inside: `Policy` → `Plan` (syscall-ready) → supervisor and
//! jail → `Outcome`; see ARCHITECTURE.md.

#![deny(unsafe_code)]

mod api;
mod bwrap;
mod check;
mod cli;
mod jail;
pub mod outcome;
mod plan;
pub mod policy;
mod seccomp;
mod serve;
mod session;
pub mod spawner;
mod supervise;
#[allow(unsafe_code)]
mod sys;

pub use api::{Child, Error, Jail, Killer, Output, Stdio};
pub use outcome::{Outcome, Status};
use plan::Plan;
pub use plan::SetupError;
pub use policy::{Policy, PolicyError};
pub use spawner::SpawnError;

/// The command line (the `stockade` binary's `main`): the exit code.
#[doc(hidden)]
pub fn cli_main(args: Vec<std::ffi::OsString>) -> i32 {
    cli::main(args)
}

/// Internals the integration tests look at; not part of the API.
#[doc(hidden)]
pub mod testing {
    pub use crate::seccomp::syscalls;
    pub use crate::supervise::cgroup;
}

/// Run `policy` to completion. Must be called from a single-threaded process
/// (a multi-threaded one cannot create a user namespace).
///
/// Where the kernel refuses user namespaces (an unprivileged container, a
/// hardened sysctl) and the policy does not require them, the payload still
/// runs with every layer the kernel allows (Landlock, seccomp, rlimits,
/// setsid, a cleared environment, closed fds, a private run directory,
/// process-tree kill); the outcome says what is missing.
///
/// This is the CLI's door (it runs with this process's stdio): each of the
/// outcome's [`warnings`](Outcome::warnings) is also printed on this
/// process's stderr, `stockade: warning: …`, before it returns. Runs
/// through the spawner ([`Jail::spawn`]) get them only in the outcome,
/// never on the payload's stderr.
pub fn run(policy: &Policy) -> Outcome {
    let o = run_with(policy, None);
    for w in &o.warnings {
        eprintln!("stockade: warning: {w}");
    }
    o
}

/// [`run`], killed early when `control` says so (see `supervise::spawn::run`).
pub(crate) fn run_with(policy: &Policy, control: Option<std::os::fd::RawFd>) -> Outcome {
    let (errno, why) = match Plan::build(policy) {
        Ok((plan, res)) => match supervise::spawn::run(&plan, res, control) {
            supervise::spawn::Spawned::Ran(o) => return *o,
            supervise::spawn::Spawned::Refused { errno, why } => (errno, why),
        },
        Err(e) => return Outcome::setup_error(&e),
    };
    if policy.require.contains(&policy::Layer::Userns) {
        return Outcome::setup_error(&SetupError::new(
            "create namespaces",
            "",
            format!(
                "{errno}; user namespaces refused and required (--require userns): {why}. To allow them: Docker `--security-opt seccomp=unconfined` (or a seccomp profile that allows clone/unshare with CLONE_NEWUSER); Kubernetes `securityContext.seccompProfile: {{type: Unconfined}}` or a Localhost profile, an AppArmor profile with `userns,`; `hostUsers: false` helps only together with such a seccomp profile"
            ),
        ));
    }
    let refused = format!(
        "user namespaces refused ({errno}: {why}); running without namespaces: Landlock, seccomp, rlimits, setsid, a private run directory and process-tree kill only"
    );
    let (plan, res) = match Plan::build_fallback(policy) {
        Ok(built) => built,
        Err(e) => {
            let mut o = Outcome::setup_error(&e);
            o.warnings.push(refused);
            return o;
        }
    };
    match supervise::spawn::run(&plan, res, control) {
        supervise::spawn::Spawned::Ran(mut o) => {
            // It arose first.
            o.warnings.insert(0, refused);
            for l in outcome::NAMESPACE_LAYERS {
                o.layers.insert(
                    l,
                    outcome::LayerReport::unavailable(format!("{errno}: {why}")),
                );
            }
            *o
        }
        supervise::spawn::Spawned::Refused { errno, why } => {
            Outcome::setup_error(&SetupError::new("fallback", "", format!("{errno}: {why}")))
        }
    }
}
