//! The parent side: clone the jail, write its id maps, forward signals,
//! collect what the jail reports, reap it, and build the Outcome.

#![deny(unsafe_code)]

pub mod cgroup;
pub mod classify;
pub mod layers;
pub mod learn;
pub mod limits;
pub mod namespaces;
pub mod rundir;
pub mod spawn;
pub mod unix;
pub mod watch;
