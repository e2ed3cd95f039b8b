//! Sessions: one jail that outlives one command (`stockade session`, and
//! `/v1/sessions` in `serve`).
//!
//! A session is a front end on the library: its jail's payload is the
//! *agent*, stockade's own binary bound read-only into the jail and run as
//! `stockade session-agent`. The agent reads requests (JSON lines, see
//! `proto`) on its stdin and runs each command as `/bin/sh -c` in a new
//! process group, framing everything the command writes as events of its
//! own: nothing a command prints can forge an event. State (cwd, exported
//! environment) is reported by the command's shell on exit, on a pipe of
//! the agent's, and applied to the next command. When a command ends, its
//! whole process tree is killed (`sweep`). The jail's limits cover the
//! whole session; the front end adds the `end` event with the jail's
//! outcome.
//!
//! The front end watches each command's deadline itself (`watchdog`): an
//! agent that stops answering cannot stretch a command to the session's
//! lifetime.
//!
//! `agent` is the loop, `input` what it hears (request lines, signals),
//! `command` one command watched by the engine, `guard` what keeps
//! commands' signals off the agent (a Landlock domain scoped for signals;
//! a seccomp filter below Landlock ABI 6), `sweep` the kill of
//! what a command left, `state` the shell's report of its state, `proto`
//! the wire format, `policy` the jail a session runs in, `workspace` its
//! overlays' requests (changes, checkpoints, rollback, commit), which the
//! front end answers itself.

#![deny(unsafe_code)]

mod agent;
mod command;
mod guard;
mod input;
pub(crate) mod policy;
pub(crate) mod proto;
mod state;
mod sweep;
pub(crate) mod watchdog;
pub(crate) mod workspace;

/// The hidden subcommand the jail's payload runs.
pub(crate) const AGENT_ARG: &str = "session-agent";
/// The hidden subcommand a command's shell runs on exit to report its state.
pub(crate) const STATE_ARG: &str = "session-state";

pub(crate) use agent::main as agent_main;
pub(crate) use state::main as state_main;

/// Why a session ended, from its jail's outcome: the agent's exit code
/// says it for the ends it chose (`closed`, `stdin_closed`,
/// `idle_timeout`, `terminated`: SIGTERM, SIGHUP or SIGQUIT); otherwise the outcome's status (`memory_limit`,
/// `timeout`, `signaled` when a command killed the agent, …).
pub(crate) fn end_reason(o: &crate::Outcome) -> String {
    if chose_its_end(o) {
        match o.exit_code {
            agent::EXIT_CLOSED => return "closed".into(),
            agent::EXIT_STDIN_END => return "stdin_closed".into(),
            agent::EXIT_IDLE => return "idle_timeout".into(),
            agent::EXIT_TERMINATED => return "terminated".into(),
            _ => {}
        }
    }
    serde_json::to_value(o.status)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "ended".into())
}

/// The agent exited with one of its own ends. A command of the session
/// may have met the memory or pids limit on the way (a child OOM-killed,
/// a fork refused), which the limit's report says: the session itself
/// still ended as the agent chose, so its status is `exited`, as a
/// payload's that exits 0 after such a hit (see supervise::classify).
fn chose_its_end(o: &crate::Outcome) -> bool {
    use crate::Status::{Exited, MemoryLimit, PidsLimit};
    o.signal.is_none()
        && matches!(o.status, Exited | MemoryLimit | PidsLimit)
        && [
            agent::EXIT_CLOSED,
            agent::EXIT_STDIN_END,
            agent::EXIT_IDLE,
            agent::EXIT_TERMINATED,
        ]
        .contains(&o.exit_code)
}

/// The `end` event: the last line of a session.
pub(crate) fn end_event(o: &crate::Outcome) -> serde_json::Value {
    let mut settled = o.clone();
    if chose_its_end(o) {
        settled.status = crate::Status::Exited;
    }
    let outcome = serde_json::from_str(&settled.to_json()).unwrap_or(serde_json::Value::Null);
    proto::end(&end_reason(o), outcome)
}

/// The `end` event of a session the front end ended itself because its
/// agent stopped answering (`watchdog`): that reason, the jail's outcome.
pub(crate) fn end_event_unresponsive(o: &crate::Outcome) -> serde_json::Value {
    let outcome = serde_json::from_str(&o.to_json()).unwrap_or(serde_json::Value::Null);
    proto::end(watchdog::UNRESPONSIVE, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_its_agent_ended_is_exited_even_after_a_command_met_a_limit() {
        let mut o = crate::Outcome::new();
        o.status = crate::Status::MemoryLimit;
        o.exit_code = agent::EXIT_STDIN_END;
        assert_eq!(end_reason(&o), "stdin_closed");
        assert_eq!(end_event(&o)["outcome"]["status"], "exited");
        o.status = crate::Status::PidsLimit;
        o.exit_code = agent::EXIT_CLOSED;
        assert_eq!(end_reason(&o), "closed");
        // The agent itself killed at the limit: the limit's end.
        o.status = crate::Status::MemoryLimit;
        o.signal = Some(libc::SIGKILL);
        o.exit_code = 128 + libc::SIGKILL;
        assert_eq!(end_reason(&o), "memory_limit");
        assert_eq!(end_event(&o)["outcome"]["status"], "memory_limit");
    }
}
