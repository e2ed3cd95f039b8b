//! The child side: pid 1 of the jail (init) and the payload it forks. Reads
//! top to bottom as the sequence it performs; every step is one call into
//! `sys` whose error names the step and the path.

#![deny(unsafe_code)]

pub mod caps;
pub mod error;
pub mod filter;
pub mod init;
pub mod ipc;
pub mod landlock;
pub mod payload;
pub mod proto;
pub mod rlimits;
pub mod rootfs;
pub mod seed;
pub mod unix_agent;
pub mod zygote;
