//! The parent side of one run: clone the jail, release it (cgroup, id
//! maps, GO, network), pump its output, watch the deadline, forward
//! signals, collect what the jail reports, reap it, classify how it ended,
//! and build the Outcome. What it runs is a Plan, final when built
//! (crate::plan), in the run's cgroup the plan holds (crate::cgroup).

#![deny(unsafe_code)]

mod channels;
mod childpid;
pub mod classify;
pub(crate) mod engine;
mod idmap;
pub mod layers;
pub mod namespaces;
pub(crate) mod report;
pub mod rundir;
pub mod spawn;
pub mod watch;
mod workspace;

pub(crate) use crate::observe::deadline::{
    encode_start, encode_start_limits, hold, OutputTo, LIMITS_REFUSED, LIMITS_SET,
};
