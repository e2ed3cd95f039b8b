//! A fork server's child: the steps that confine it, in the payload's
//! order, run by the child itself inside the zygote's interpreter. The
//! zygote loads this crate as a shared library (`src/confine`, carried
//! inside the stockade binary and handed over as a memfd), so the child
//! runs the same calls as every other launcher's jail, from the same code.
//!
//! The zygote's jail (stockade's payload step, `jail::zygote`) writes the
//! [`Recipe`] of its children on the hand-off pipe; [`Zygote::prepare`]
//! reads it once. Per run: [`Zygote::before_fork`] (the next child's pid
//! namespace), the fork (into the run's cgroup, `abi`'s
//! `stockade_zygote_fork_into` between the interpreter's own before- and
//! after-fork steps; else the interpreter's fork), [`Zygote::after_fork`] in the
//! zygote (its children's pid namespace is its own again), and
//! [`Zygote::confine`] in the child: its stdio, a session of its own, new
//! mount, network, IPC, UTS and cgroup namespaces, its /proc, /tmp,
//! workdir, /dev/shm, /dev/pts and /dev/mqueue, `lo` up, every capability
//! dropped, no_new_privs, the Landlock ruleset made (after the mounts: a
//! rule on a mount point is not seen beneath a mount over it) and
//! enforced, every other fd closed, the seccomp program installed.
//!
//! One file per part: `recipe` (what the children are handed: the
//! [`Recipe`], the server's [`Go`]), `steps` (the [`Zygote`] and its
//! child's steps), `init` (the run's pid 1 and its [`End`] record),
//! `failure` (a failed step's record, [`failure_of`]) and [`abi`] (the
//! shared library's door).

pub mod abi;
mod failure;
mod init;
mod recipe;
mod steps;

pub use failure::{failure_of, Failure};
pub use init::End;
pub use recipe::{Go, Recipe, Ruleset, HANDOFF_MAX};
pub use steps::Zygote;
