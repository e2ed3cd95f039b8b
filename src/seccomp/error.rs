//! What can go wrong compiling a seccomp policy. The text of each variant is
//! the one line the CLI and the outcome show.

use seccompiler::BackendError;

use super::syscalls;

/// A policy that cannot be compiled: a name the tables do not know, or a
/// filter seccompiler or the kernel would refuse.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// A group (`@name`) that is not in `syscalls::GROUPS`.
    #[error("unknown syscall group {group:?} (known: {})", known_groups())]
    UnknownGroup { group: String },
    /// A single syscall name this architecture's table does not have.
    #[error(
        "unknown syscall {name:?} (not in the {} syscall table)",
        std::env::consts::ARCH
    )]
    UnknownSyscall { name: String },
    /// seccompiler refused one of the argument conditions or rules.
    #[error("argument filter: {0}")]
    ArgumentFilter(#[source] BackendError),
    /// seccompiler refused an argument block's filter.
    #[error("building the filter: {0}")]
    Build(#[source] BackendError),
    /// seccompiler could not compile an argument block to BPF.
    #[error("compiling the filter: {0}")]
    Compile(#[source] BackendError),
    /// The program is longer than the kernel's BPF_MAXINSNS.
    #[error("the filter has {instructions} instructions, more than the kernel accepts")]
    TooLong { instructions: usize },
}

/// At the edges (a setup error's reason, a profile's summary) the error is
/// its one line.
impl From<SeccompError> for String {
    fn from(e: SeccompError) -> String {
        e.to_string()
    }
}

fn known_groups() -> String {
    let known: Vec<&str> = syscalls::GROUPS.iter().map(|(n, _)| *n).collect();
    known.join(", ")
}
