//! The session's wire format (v1): requests on the agent's stdin, events on
//! its stdout, one JSON object a line. Shared with the Python package
//! (`clients/python`); see README's "Sessions".

use serde::Deserialize;
use serde_json::{json, Value};

/// The default of a command's `timeout`, in seconds.
pub(crate) const DEFAULT_TIMEOUT: f64 = 60.0;
/// The default of a command's `max_output`, in bytes.
pub(crate) const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;
/// The longest request line read.
pub(crate) const MAX_LINE: usize = 16 << 20;

/// One request line.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub(crate) enum Request {
    Exec(Exec),
    Interrupt { id: String },
    Close {},
}

/// `{"op":"exec",…}`.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Exec {
    pub(crate) id: String,
    pub(crate) command: String,
    #[serde(default)]
    pub(crate) timeout: Option<f64>,
    #[serde(default)]
    pub(crate) max_output: Option<u64>,
    #[serde(default)]
    pub(crate) stdin: Option<String>,
}

/// A request line read, or why not (the message of a `bad_request` error).
pub(crate) fn parse(line: &[u8]) -> Result<Request, String> {
    let r: Request = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if let Request::Exec(e) = &r {
        check_exec(e)?;
    }
    if let Request::Interrupt { id } = &r {
        check_id(id)?;
    }
    Ok(r)
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("id: must be 1 to 128 characters".into());
    }
    Ok(())
}

fn check_exec(e: &Exec) -> Result<(), String> {
    check_id(&e.id)?;
    if e.command.contains('\0') {
        return Err("command: contains a NUL byte".into());
    }
    if let Some(t) = e.timeout {
        if !(t.is_finite() && t > 0.0 && t <= 86400.0) {
            return Err(format!(
                "timeout: {t}: must be greater than 0 and at most 86400"
            ));
        }
    }
    Ok(())
}

/// `{"event":"ready",…}`.
pub(crate) fn ready(session: &str, workdir: &str) -> Value {
    json!({"event": "ready", "session": session, "workdir": workdir})
}

/// `{"event":"output",…}`: `data` as text (invalid UTF-8 replaced).
pub(crate) fn output(id: &str, stream: &str, data: &str) -> Value {
    json!({"event": "output", "id": id, "stream": stream, "data": data})
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Exited,
    Signaled,
    Timeout,
    Interrupted,
}

impl ExitStatus {
    fn name(self) -> &'static str {
        match self {
            ExitStatus::Exited => "exited",
            ExitStatus::Signaled => "signaled",
            ExitStatus::Timeout => "timeout",
            ExitStatus::Interrupted => "interrupted",
        }
    }
}

/// What the `exit` event says.
#[derive(Debug, Clone)]
pub(crate) struct Exit {
    pub(crate) status: ExitStatus,
    pub(crate) code: i32,
    pub(crate) signal: Option<i32>,
    pub(crate) truncated: bool,
    pub(crate) duration_ms: u64,
}

/// `{"event":"exit",…}`.
pub(crate) fn exit(id: &str, e: &Exit) -> Value {
    json!({
        "event": "exit", "id": id, "status": e.status.name(), "code": e.code,
        "signal": e.signal, "truncated": e.truncated, "duration_ms": e.duration_ms,
    })
}

/// The agent's stdout, where every event goes, one line each. The first
/// write that fails is kept (the front end is gone) and nothing more is
/// written; the agent ends on it ([`Events::failed`]).
#[derive(Clone, Default)]
pub(crate) struct Events(std::rc::Rc<std::cell::RefCell<Option<String>>>);

impl Events {
    pub(crate) fn emit(&self, ev: &Value) {
        use std::io::Write;
        if self.0.borrow().is_some() {
            return;
        }
        let out = std::io::stdout();
        let mut o = out.lock();
        if let Err(e) = writeln!(o, "{ev}").and_then(|_| o.flush()) {
            *self.0.borrow_mut() = Some(format!("stdout: {e}"));
        }
    }

    /// The write that failed, if one did.
    pub(crate) fn failed(&self) -> Result<(), String> {
        match &*self.0.borrow() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// `{"event":"error",…}`.
pub(crate) fn error(id: Option<&str>, code: &str, message: &str) -> Value {
    json!({"event": "error", "id": id, "error": {"code": code, "message": message}})
}

/// Why a session ended, as the `end` event's `reason` says it.
pub(crate) fn end(reason: &str, outcome: Value) -> Value {
    json!({"event": "end", "reason": reason, "outcome": outcome})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        let r = parse(br#"{"op":"exec","id":"c1","command":"ls","timeout":2}"#).unwrap();
        assert!(matches!(r, Request::Exec(Exec { timeout: Some(t), .. }) if t == 2.0));
        assert_eq!(parse(br#"{"op":"close"}"#).unwrap(), Request::Close {});
        assert!(parse(br#"{"op":"exec","id":"","command":"ls"}"#)
            .unwrap_err()
            .contains("id"));
        assert!(
            parse(br#"{"op":"exec","id":"a","command":"ls","timeout":-1}"#)
                .unwrap_err()
                .contains("timeout")
        );
        assert!(parse(br#"{"op":"exec","id":"a","command":"ls","x":1}"#)
            .unwrap_err()
            .contains("unknown field"));
        assert!(parse(br#"{"op":"fly"}"#).is_err());
        assert!(parse(b"not json").is_err());
    }
}
