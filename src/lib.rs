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
mod cgroup;
mod check;
mod cli;
mod egress;
mod host;
mod jail;
mod observe;
pub mod outcome;
mod plan;
pub mod policy;
mod seccomp;
mod serve;
mod session;
pub mod spawner;
mod stages;
mod supervise;
mod workspace;
mod zygote;

/// The kernel-facing calls (the `stockade-sys` crate), named `sys` as before.
use stockade_sys as sys;

pub use api::{Child, Error, Jail, Killer, Output, Stdio};
pub use outcome::{Outcome, Status};
use plan::Plan;
pub use plan::{Masked, SetupError};
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
    /// The cgroup layer's public items (`crate::cgroup`).
    pub mod cgroup {
        pub use crate::cgroup::*;
    }
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
/// This is the CLI's door (it runs with this process's stdio): the
/// outcome's [`detail`](Outcome::detail), `stockade: …`, and each of its
/// [`warnings`](Outcome::warnings), `stockade: warning: …`, are also
/// printed on this process's stderr before it returns. Runs
/// through the spawner ([`Jail::spawn`]) get them only in the outcome,
/// never on the payload's stderr.
pub fn run(policy: &Policy) -> Outcome {
    let o = run_with(policy, None);
    if let Some(d) = &o.detail {
        eprintln!("stockade: {d}");
    }
    for w in &o.warnings {
        eprintln!("stockade: warning: {w}");
    }
    o
}

/// [`run`], killed early when `control` says so (see `supervise::spawn::run`).
pub(crate) fn run_with(policy: &Policy, control: Option<std::os::fd::RawFd>) -> Outcome {
    let (errno, why) = match run_namespaced(policy, control) {
        Ok(o) => return o,
        Err(refused) => refused,
    };
    if policy.require.contains(&policy::Layer::Userns) {
        return Outcome::setup_error(&SetupError::new(
            plan::step::CREATE_NAMESPACES,
            "",
            format!(
                "{errno}; user namespaces refused and required (--require userns): {why}. To allow them: Docker `--security-opt seccomp=unconfined` (or a seccomp profile that allows clone/unshare with CLONE_NEWUSER); Kubernetes `securityContext.seccompProfile: {{type: Unconfined}}` or a Localhost profile, an AppArmor profile with `userns,`; `hostUsers: false` helps only together with such a seccomp profile"
            ),
        ).with_errno(errno as i32));
    }
    run_fallback(policy, control, errno, &why)
}

/// The namespaced run, or (nothing ran) the errno and reason with which
/// the kernel refused user namespaces.
pub(crate) fn run_namespaced(
    policy: &Policy,
    control: Option<std::os::fd::RawFd>,
) -> Result<Outcome, (sys::Errno, String)> {
    match Plan::build(policy) {
        Ok((plan, res)) => match supervise::spawn::run(&plan, res, control) {
            supervise::spawn::Spawned::Ran(o) => Ok(*o),
            supervise::spawn::Spawned::Refused { errno, why } => Err((errno, why)),
        },
        Err(e) => Ok(Outcome::setup_error(&e)),
    }
}

/// The run without namespaces (`Plan::build_fallback`), after they were
/// refused with `errno` and `why`; the outcome's first warning says so.
pub(crate) fn run_fallback(
    policy: &Policy,
    control: Option<std::os::fd::RawFd>,
    errno: sys::Errno,
    why: &str,
) -> Outcome {
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
