//! stockade: a Linux jail for code nobody trusts.
//!
//! `Policy` (what is allowed) → `Plan` (syscall-ready) → supervisor and jail
//! → `Outcome` (how it ended, what it used, which layers were applied).

#![deny(unsafe_code)]

pub mod cli;
pub mod jail;
pub mod outcome;
pub mod plan;
pub mod policy;
pub mod supervise;
#[allow(unsafe_code)]
pub mod sys;

pub use outcome::{Outcome, Status};
pub use plan::{Plan, SetupError};
pub use policy::{Policy, PolicyError};

/// Run `policy` to completion. Must be called from a single-threaded process
/// (a multi-threaded one cannot create a user namespace).
pub fn run(policy: &Policy) -> Outcome {
    match Plan::build(policy) {
        Ok(plan) => supervise::spawn::run(plan),
        Err(e) => Outcome::setup_error(&e),
    }
}
