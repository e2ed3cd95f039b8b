//! A session's overlays (`stockade session --overlay`, a serve session's
//! `workspace`): the requests `changes`, `checkpoint`, `rollback` and
//! `commit`, answered by the front end, never by the agent.
//!
//! The front end owns the upper layers: a session's overlays are always
//! kept on the host (the caller's `--overlay-upper DIR`, or a directory
//! of the front end's, removed at the end), so it can read and write them
//! itself, and its checkpoints are copies of them in a directory of its
//! own. overlayfs leaves a change to a layer under a mounted overlay
//! undefined (its caches keep what they saw), so:
//!
//! - `changes` and `checkpoint` only read the upper layers, and only while
//!   no command runs (the agent has swept each command's processes before
//!   its exit event): nothing writes them meanwhile.
//! - `rollback` and `commit` write a layer (the upper one, the host
//!   directory under it), so the front end ends the session's jail first
//!   (`close`: its overlays are unmounted with its mount namespace),
//!   writes, and starts the jail again on the same layers
//!   ([`restart_policy`]): a fresh mount that sees them as they are. The
//!   session's processes, cwd, exported environment, /tmp and workdir
//!   start afresh with it; the overlays hold what the operation left.
//! - Each is refused (`busy`) while a command runs; a bad name, or an
//!   unknown checkpoint, is an error event and the session lives on.
//!
//! A commit applies the changes as `--commit` does (`workspace::Review`:
//! each file replaced atomically, never through a symlink, nothing
//! written outside the host directory); what it applied then reads the
//! same in both layers and is no longer a change; the checkpoints are
//! forgotten (they were taken against the host directory before it).

#![deny(unsafe_code)]

use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::policy::{self, Policy};
use crate::sys;
use crate::workspace::{self, record, Layer, Review};

/// A workspace request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Changes,
    Checkpoint(String),
    Rollback(String),
    Commit,
}

impl Op {
    /// Whether it writes a layer: the jail is ended first, and started
    /// again after.
    pub(crate) fn restarts(&self) -> bool {
        matches!(self, Op::Rollback(_) | Op::Commit)
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Changes => "changes",
            Op::Checkpoint(_) => "checkpoint",
            Op::Rollback(_) => "rollback",
            Op::Commit => "commit",
        }
    }
}

/// One request line: its `id` (echoed in the answer) and what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) id: Option<String>,
    pub(crate) op: Op,
}

/// The ops answered here.
const OPS: [&str; 4] = ["changes", "checkpoint", "rollback", "commit"];

/// A request line, when it is one of ours (`None`: the agent's): the
/// request, or the id it gave and why it is refused.
pub(crate) fn parse(line: &[u8]) -> Option<Result<Request, (Option<String>, String)>> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let obj = v.as_object()?;
    let op = obj.get("op")?.as_str()?;
    if !OPS.contains(&op) {
        return None;
    }
    let id = obj.get("id").and_then(Value::as_str).map(String::from);
    Some(request(op, obj, id.clone()).map_err(|why| (id, why)))
}

fn request(
    op: &str,
    obj: &serde_json::Map<String, Value>,
    id: Option<String>,
) -> Result<Request, String> {
    let named = matches!(op, "checkpoint" | "rollback");
    if let Some(k) = obj
        .keys()
        .find(|k| !(["op", "id"].contains(&k.as_str()) || (named && *k == "name")))
    {
        return Err(format!("{k}: unknown field of {op}"));
    }
    match obj.get("id") {
        None => {}
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => {}
        Some(_) => return Err("id: must be a string of 1 to 128 characters".into()),
    }
    let name = || -> Result<String, String> {
        match obj.get("name") {
            Some(Value::String(n)) => check_name(n).map(|_| n.clone()),
            _ => Err(format!("name: {op} needs the checkpoint's name")),
        }
    };
    let op = match op {
        "changes" => Op::Changes,
        "checkpoint" => Op::Checkpoint(name()?),
        "rollback" => Op::Rollback(name()?),
        _ => Op::Commit,
    };
    Ok(Request { id, op })
}

/// A checkpoint's name: 1 to 64 letters, digits, `-`, `_` or `.`, not
/// starting with `.` (no path separator, no `..`).
pub(crate) fn check_name(n: &str) -> Result<(), String> {
    let plain = n
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if n.is_empty() || n.len() > 64 || !plain || n.starts_with('.') {
        return Err(format!(
            "name: {n:?}: a checkpoint's name is 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'"
        ));
    }
    Ok(())
}

/// The error event of a refused request.
pub(crate) fn refused(id: Option<&str>, code: &str, message: &str) -> Value {
    super::proto::error(id, code, message)
}

/// The answer to a request no command may run beside.
pub(crate) fn busy(r: &Request) -> Value {
    let m = format!(
        "{}: a command is running; wait for its exit event (or interrupt it) first",
        r.op.name()
    );
    refused(r.id.as_deref(), "busy", &m)
}

/// The answer of a session without overlays.
pub(crate) fn no_overlay(r: &Request) -> Value {
    let m = format!(
        "{}: this session has no overlay (start it with --overlay HOST_DIR:INNER, or a workspace)",
        r.op.name()
    );
    refused(r.id.as_deref(), "no_overlay", &m)
}

/// Whether the jail ended for a rollback or a commit ended as asked (the
/// agent closed): not on its own meanwhile (its idle timeout, a limit,
/// its lifetime), when the session is over instead.
pub(crate) fn closed_as_asked(o: &crate::Outcome) -> bool {
    super::end_reason(o) == "closed"
}

/// The answer to a request whose session ended on its own before it was
/// made.
pub(crate) fn ended_first(r: &Request, o: &crate::Outcome) -> Value {
    let m = format!(
        "{}: the session ended first ({}); nothing was done",
        r.op.name(),
        super::end_reason(o)
    );
    refused(r.id.as_deref(), "session_ended", &m)
}

/// The jail policy a session starts again with after a rollback or a
/// commit (the session began at `began`): the same, on the layers it
/// kept, with what is left of its lifetime (a restart never lengthens
/// it); an error once nothing is left.
pub(crate) fn restart_policy(p: &Policy, began: std::time::Instant) -> Result<Policy, String> {
    let mut p = p.clone();
    p.workspace.resume = true;
    if let Some(life) = p.limits.timeout {
        let left = life.saturating_sub(began.elapsed());
        if left.is_zero() {
            return Err("the session's lifetime is over".into());
        }
        p.limits.timeout = Some(left);
    }
    Ok(p)
}

/// A session's overlays, seen from the front end.
#[derive(Debug)]
pub(crate) struct Layers {
    /// The kept layers' directory.
    dir: PathBuf,
    /// Made by us: removed at the end (else the caller's, kept for
    /// `stockade overlay commit|discard`).
    ours: bool,
    /// The checkpoints: `NAME/LAYER` a copy of each upper layer.
    checkpoints: PathBuf,
    names: BTreeSet<String>,
    policy: policy::Workspaces,
}

/// A directory of ours beside the others in the temporary directory.
fn private_dir(tag: &str) -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let d = base.join(format!(
            "stockade-session-{}-{tag}",
            super::policy::new_id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {}", d.display(), sys::strerror(&e))),
        }
    }
    Err(format!("{}: no fresh name", base.display()))
}

impl Layers {
    /// The overlays of `p`, a session's jail policy before its first
    /// start, kept on the host: in `p`'s `--overlay-upper`, else in a
    /// directory made here (`p` then names it). None without overlays.
    pub(crate) fn prepare(p: &mut Policy) -> Result<Option<Layers>, String> {
        if policy::workspace::overlays(p).is_empty() {
            return Ok(None);
        }
        if p.workspace.commit != policy::Commit::Never || p.workspace.diff.is_some() {
            return Err(
                "a session commits with its `commit` request, and lists its changes with `changes`: not with --commit or --changes-diff".into(),
            );
        }
        let ours = p.workspace.keep.is_none();
        let tmp = std::env::temp_dir();
        if let (true, Some((host, _))) = (
            ours,
            policy::workspace::overlays(p)
                .into_iter()
                .find(|(h, _)| tmp.starts_with(h)),
        ) {
            return Err(format!(
                "{}: holds the temporary directory {}, where a session keeps its upper layers (overlayfs refuses layers inside each other): give --overlay-upper DIR outside it, or set TMPDIR",
                host.display(),
                tmp.display()
            ));
        }
        let dir = match &p.workspace.keep {
            Some(d) => d.clone(),
            None => {
                // Made empty by us; the supervisor fills it.
                let d = private_dir("layers")?;
                p.workspace.keep = Some(d.clone());
                d
            }
        };
        let checkpoints = match private_dir("checkpoints") {
            Ok(c) => c,
            Err(e) => {
                if ours {
                    let _ = std::fs::remove_dir(&dir);
                }
                return Err(e);
            }
        };
        Ok(Some(Layers {
            dir,
            ours,
            checkpoints,
            names: BTreeSet::new(),
            policy: p.workspace.clone(),
        }))
    }

    fn open(&self) -> Result<(record::Record, Vec<Layer>), String> {
        let r = record::read(&self.dir)?;
        let mut out = Vec::new();
        for k in &r.overlays {
            let open =
                |p: &Path| sys::open_dir_path(p).map_err(|e| format!("{}: {e}", p.display()));
            out.push(Layer {
                upper: open(&k.upper(&self.dir))?,
                host: open(&k.host)?,
                host_path: k.host.clone(),
                inner: k.inner.clone(),
                since: k.since(),
                ours: k.ours(),
            });
        }
        Ok((r, out))
    }

    /// Answer `r` (a command may not be running; for a rollback or a
    /// commit, the jail must have ended): its event, or its error event.
    pub(crate) fn answer(&mut self, r: &Request) -> Value {
        let id = r.id.as_deref();
        let done = match &r.op {
            Op::Changes => self.changes(),
            Op::Checkpoint(n) => self.checkpoint(n).map(|_| json!({"name": n})),
            Op::Rollback(n) if !self.names.contains(n) => {
                let known: Vec<&str> = self.names.iter().map(String::as_str).collect();
                let m = format!(
                    "rollback: {n:?}: no such checkpoint (this session has: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
                return refused(id, "no_checkpoint", &m);
            }
            Op::Rollback(n) => self.rollback(n).map(|_| json!({"name": n})),
            Op::Commit => self.commit(),
        };
        match done {
            Ok(mut v) => {
                v["event"] = json!(r.op.name());
                v["id"] = json!(id);
                v
            }
            Err(m) => refused(id, "workspace_failed", &format!("{}: {m}", r.op.name())),
        }
    }

    /// Whether `r` can be answered: a rollback to a checkpoint that
    /// exists (checked before the jail is ended for it).
    pub(crate) fn knows(&self, r: &Request) -> bool {
        match &r.op {
            Op::Rollback(n) => self.names.contains(n),
            _ => true,
        }
    }

    /// The changes so far, as a run's outcome lists them.
    fn changes(&self) -> Result<Value, String> {
        let (_, layers) = self.open()?;
        let review = Review::of(&layers, &self.policy);
        let (changes, more) = review.changes(&layers, self.policy.max_changes());
        Ok(json!({"changes": changes, "truncated": more}))
    }

    /// A copy of every upper layer as checkpoint `name` (one of that name
    /// replaced once the copy is whole).
    fn checkpoint(&mut self, name: &str) -> Result<(), String> {
        let (r, _) = self.open()?;
        let new = self.checkpoints.join(".new");
        if new.exists() {
            remove_tree(&new)?;
        }
        let made = (|| {
            mkdir(&new)?;
            for k in &r.overlays {
                let to = new.join(&k.layer);
                mkdir(&to)?;
                workspace::copy_tree(&k.upper(&self.dir), &to)?;
            }
            let at = self.checkpoints.join(name);
            if at.exists() {
                remove_tree(&at)?;
            }
            std::fs::rename(&new, &at).map_err(|e| format!("{}: {e}", at.display()))
        })();
        if made.is_err() {
            let _ = remove_tree(&new);
        }
        made?;
        self.names.insert(name.to_string());
        Ok(())
    }

    /// Every upper layer made checkpoint `name`'s again (the jail ended).
    fn rollback(&self, name: &str) -> Result<(), String> {
        let (r, _) = self.open()?;
        for k in &r.overlays {
            let upper = k.upper(&self.dir);
            workspace::empty_dir(&upper)?;
            workspace::copy_tree(&self.checkpoints.join(name).join(&k.layer), &upper)?;
        }
        Ok(())
    }

    /// The changes applied to the host directories (the jail ended); the
    /// checkpoints forgotten.
    fn commit(&mut self) -> Result<Value, String> {
        let (mut record, layers) = self.open()?;
        let review = Review::of(&layers, &self.policy);
        let (done, ours) = review.commit_keeping(&layers, &self.policy);
        // What this commit left is not the host's change to a later one.
        for (k, o) in record.overlays.iter_mut().zip(&ours) {
            k.set_ours(o);
        }
        record::rewrite(&self.dir, &record)?;
        for n in std::mem::take(&mut self.names) {
            let _ = remove_tree(&self.checkpoints.join(n));
        }
        Ok(json!({"commit": done}))
    }

    /// The session is over: the checkpoints go, and the layers when they
    /// are ours.
    pub(crate) fn finish(self) {
        let _ = remove_tree(&self.checkpoints);
        if self.ours {
            if let Ok(r) = record::read(&self.dir) {
                let _ = record::discard(&self.dir, &r);
            }
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn mkdir(p: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(p)
        .map_err(|e| format!("{}: {}", p.display(), sys::strerror(&e)))
}

/// `p` and all beneath it, never through a symlink.
fn remove_tree(p: &Path) -> Result<(), String> {
    workspace::empty_dir(p)?;
    std::fs::remove_dir(p).map_err(|e| format!("{}: {}", p.display(), sys::strerror(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_ours_are_told_apart_and_bad_names_refused() {
        assert!(parse(br#"{"op":"exec","id":"a","command":"x"}"#).is_none());
        assert!(parse(b"not json").is_none());
        let r = parse(br#"{"op":"checkpoint","id":"k","name":"one.1"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.op, Op::Checkpoint("one.1".into()));
        assert_eq!(r.id.as_deref(), Some("k"));
        assert_eq!(
            parse(br#"{"op":"changes"}"#).unwrap().unwrap().op,
            Op::Changes
        );
        for bad in ["../x", "a/b", "..", ".hidden", "", "a b"] {
            let line = json!({"op": "rollback", "id": "r", "name": bad}).to_string();
            let (id, why) = parse(line.as_bytes()).unwrap().unwrap_err();
            assert_eq!(id.as_deref(), Some("r"));
            assert!(why.starts_with("name: "), "{why}");
        }
        let (_, why) = parse(br#"{"op":"commit","name":"x"}"#)
            .unwrap()
            .unwrap_err();
        assert_eq!(why, "name: unknown field of commit");
        let (_, why) = parse(br#"{"op":"rollback"}"#).unwrap().unwrap_err();
        assert!(why.contains("needs the checkpoint's name"), "{why}");
        assert!(Op::Commit.restarts() && !Op::Changes.restarts());
    }

    #[test]
    fn a_restart_keeps_what_is_left_of_the_lifetime() {
        use std::time::{Duration, Instant};
        let mut p = Policy::with_defaults(vec!["true".into()]);
        p.limits.timeout = Some(Duration::from_secs(10));
        let again = restart_policy(&p, Instant::now() - Duration::from_secs(4)).unwrap();
        assert!(again.workspace.resume);
        assert!(again.limits.timeout.unwrap() <= Duration::from_secs(6));
        let e = restart_policy(&p, Instant::now() - Duration::from_secs(11)).unwrap_err();
        assert_eq!(e, "the session's lifetime is over");
        p.limits.timeout = None;
        assert_eq!(
            restart_policy(&p, Instant::now()).unwrap().limits.timeout,
            None
        );
    }

    #[test]
    fn a_jail_that_ended_on_its_own_is_not_started_again() {
        let mut o = crate::Outcome::new();
        o.status = crate::Status::Exited;
        o.exit_code = 0;
        assert!(closed_as_asked(&o));
        o.exit_code = 11; // the agent's idle timeout
        assert!(!closed_as_asked(&o));
        let r = Request {
            id: Some("r".into()),
            op: Op::Rollback("k".into()),
        };
        let e = ended_first(&r, &o);
        assert_eq!(e["error"]["code"], "session_ended");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("idle_timeout"),
            "{e}"
        );
    }
}
