//! What a policy asks of the seccomp layer: the groups and single
//! syscalls it allows, and what anything else gets.

/// What a syscall outside the allowlist gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SeccompAction {
    /// Fail with EPERM (programs fail cleanly: Python raises PermissionError).
    Errno,
    /// Kill the process; reported as `seccomp_violation`.
    Kill,
    /// Allow, but tell the supervisor (learning mode).
    Learn,
}

/// The seccomp layer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeccompPolicy {
    pub enabled: bool,
    /// Named groups (`@default`, `@basic-io`, …).
    pub groups: Vec<String>,
    /// Single syscalls allowed on top of the groups.
    pub allow: Vec<String>,
    pub action: SeccompAction,
    /// socket() only for AF_UNIX: set for the fallback without a network
    /// namespace, where Landlock can deny TCP but not UDP.
    pub unix_sockets_only: bool,
    /// The fallback's unix-socket mediation (see observe::unix): connect()
    /// goes to the supervisor, and AF_UNIX datagram sockets are refused.
    pub mediate_unix: bool,
    /// The payload shares the host's IPC namespace (the fallback): the
    /// syscalls that name a POSIX message queue (`mq_open`, `mq_unlink`)
    /// are left out whatever the groups say, as its queues would be the
    /// host's (see `compile::HOST_QUEUE_NAMES`).
    #[serde(default)]
    pub host_ipc: bool,
    /// Learning mode: the path-taking syscalls (`paths`) go to the
    /// supervisor's listener too, which records their paths and lets
    /// them continue (`--learn`).
    #[serde(default)]
    pub learn_paths: bool,
}

impl Default for SeccompPolicy {
    fn default() -> Self {
        SeccompPolicy {
            enabled: true,
            groups: vec!["@default".into()],
            allow: Vec::new(),
            action: SeccompAction::Errno,
            unix_sockets_only: false,
            mediate_unix: false,
            host_ipc: false,
            learn_paths: false,
        }
    }
}
