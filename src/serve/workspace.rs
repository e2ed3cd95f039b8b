//! A run's workspace (`"workspace": {"base", "at", "commit", "diff"}`):
//! a copy-on-write overlay of one of the operator's base directories
//! (`--workspace-base NAME=DIR`, `NAME=DIR:commit` to let runs commit).
//! Each run has an upper layer of its own (a tmpfs in its jail), so runs
//! on one base never see each other's changes; a run that may commit
//! holds its base's lock from its start to its end, so commits to one
//! base are applied one at a time. The diff, when asked, is written by
//! the run's supervisor into a file of the server's and read back, capped.

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::policy::{Commit, MountSpec, Policy};

/// Where a workspace appears in the jail unless the request says.
pub const DEFAULT_AT: &str = "/work/project";

/// The most bytes of diff a response carries (more: `diff_truncated`).
pub const MAX_DIFF: u64 = 1 << 20;

/// One base directory the operator allows (`--workspace-base`).
#[derive(Debug)]
pub struct Base {
    pub name: String,
    /// Canonical, an existing directory.
    pub dir: PathBuf,
    /// Whether runs may commit their changes to it (`:commit`).
    pub commit: bool,
    /// Held by a run that may commit, from its start to its end.
    pub lock: Arc<Mutex<()>>,
}

/// `NAME=DIR` or `NAME=DIR:commit`, checked at start-up.
pub fn parse_base(s: &str) -> Result<Base, String> {
    let bad = || format!("--workspace-base: {s:?}: expected NAME=DIR or NAME=DIR:commit");
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    let (dir, commit) = match rest.strip_suffix(":commit") {
        Some(d) => (d, true),
        None => (rest, false),
    };
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !name_ok || dir.is_empty() {
        return Err(bad());
    }
    let dir =
        std::fs::canonicalize(dir).map_err(|e| format!("--workspace-base: {name}: {dir}: {e}"))?;
    if !dir.is_dir() {
        return Err(format!(
            "--workspace-base: {name}: {}: not a directory",
            dir.display()
        ));
    }
    Ok(Base {
        name: name.to_string(),
        dir,
        commit,
        lock: Arc::new(Mutex::new(())),
    })
}

/// Every `--workspace-base`, names given once.
pub fn parse_bases(args: &[String]) -> Result<Vec<Base>, String> {
    let mut out: Vec<Base> = Vec::new();
    for a in args {
        let b = parse_base(a)?;
        if out.iter().any(|o| o.name == b.name) {
            return Err(format!("--workspace-base: {}: given twice", b.name));
        }
        out.push(b);
    }
    Ok(out)
}

/// What a request asks of its workspace (checked in shape; the base is
/// looked up by [`apply`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub base: String,
    pub at: String,
    pub commit: Commit,
    pub diff: bool,
}

/// The request's `workspace` field.
pub fn parse_ask(v: Option<&Value>) -> Result<Option<Ask>, ApiError> {
    let obj: &Map<String, Value> = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(ApiError::field(
                "workspace",
                "must be an object {\"base\": NAME, \"at\", \"commit\", \"diff\"}",
            ))
        }
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !["base", "at", "commit", "diff"].contains(&k.as_str()))
    {
        return Err(ApiError::field(
            format!("workspace.{k}"),
            "unknown field (base, at, commit, diff)",
        ));
    }
    let base = match obj.get("base") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(ApiError::field(
                "workspace.base",
                "required: the name of a --workspace-base",
            ))
        }
    };
    let at = match obj.get("at") {
        None | Some(Value::Null) => DEFAULT_AT.to_string(),
        Some(Value::String(s)) => {
            check_at(s)?;
            s.clone()
        }
        Some(_) => return Err(ApiError::field("workspace.at", "must be a string")),
    };
    let commit = match obj.get("commit") {
        None | Some(Value::Null) => Commit::Never,
        Some(Value::String(s)) if s == "never" => Commit::Never,
        Some(Value::String(s)) if s == "success" => Commit::Success,
        Some(Value::String(s)) if s == "always" => Commit::Always,
        Some(_) => {
            return Err(ApiError::field(
                "workspace.commit",
                "must be \"never\", \"success\" or \"always\"",
            ))
        }
    };
    let diff = match obj.get("diff") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::field("workspace.diff", "must be a boolean")),
    };
    Ok(Some(Ask {
        base,
        at,
        commit,
        diff,
    }))
}

/// An absolute jail path of plain components, not `/`.
fn check_at(s: &str) -> Result<(), ApiError> {
    const F: &str = "workspace.at";
    let Some(rel) = s.strip_prefix('/') else {
        return Err(ApiError::field(F, "must be an absolute path in the jail"));
    };
    if rel.is_empty() {
        return Err(ApiError::field(F, "not over the jail's whole root"));
    }
    super::request::check_path(F, rel.trim_end_matches('/'))
}

/// What [`apply`] set up: the diff file to read back and remove, and the
/// base's lock while the run may commit.
#[derive(Debug, Default)]
pub struct Held {
    pub ask: Option<Ask>,
    diff: Option<PathBuf>,
    lock: Option<Arc<Mutex<()>>>,
}

impl Held {
    /// The base's lock, for a run that may commit: held on the run's
    /// blocking thread from before its jail starts to after its end.
    pub fn commit_lock(&self) -> Option<Arc<Mutex<()>>> {
        self.lock.clone()
    }

    /// The response's `workspace` part: what was applied, and the diff
    /// (capped at [`MAX_DIFF`]) when asked.
    pub fn to_json(&self) -> Option<Value> {
        let ask = self.ask.as_ref()?;
        let mut v = serde_json::json!({
            "base": ask.base,
            "at": ask.at,
            "commit": ask.commit,
        });
        if let Some(path) = &self.diff {
            let mut text = Vec::new();
            let read =
                std::fs::File::open(path).and_then(|f| f.take(MAX_DIFF + 1).read_to_end(&mut text));
            let truncated = text.len() as u64 > MAX_DIFF;
            text.truncate(MAX_DIFF as usize);
            v["diff"] = match read {
                Ok(_) => Value::String(String::from_utf8_lossy(&text).into_owned()),
                Err(_) => Value::Null,
            };
            v["diff_truncated"] = Value::Bool(truncated);
        }
        Some(v)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(p) = &self.diff {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Put the request's workspace into `p`: the base's overlay at `at`, its
/// commit (refused unless the operator allows it), its diff file.
pub fn apply(bases: &[Base], ask: Option<Ask>, p: &mut Policy) -> Result<Held, ApiError> {
    let Some(ask) = ask else {
        return Ok(Held::default());
    };
    let Some(base) = bases.iter().find(|b| b.name == ask.base) else {
        let names: Vec<&str> = bases.iter().map(|b| b.name.as_str()).collect();
        return Err(ApiError::field(
            "workspace.base",
            format!(
                "{:?} is not a workspace base here (allowed: {})",
                ask.base,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        ));
    };
    if ask.commit != Commit::Never && !base.commit {
        return Err(ApiError::field(
            "workspace.commit",
            format!(
                "the base {:?} is read-only here (the operator allows commits with --workspace-base NAME=DIR:commit)",
                base.name
            ),
        ));
    }
    p.mounts.push(MountSpec::Workspace {
        src: base.dir.clone(),
        dst: PathBuf::from(&ask.at),
    });
    p.workspace.commit = ask.commit;
    let diff = if ask.diff {
        let f = diff_file().map_err(|e| ApiError::internal(format!("workspace.diff: {e}")))?;
        p.workspace.diff = Some(f.clone());
        Some(f)
    } else {
        None
    };
    let lock = (ask.commit != Commit::Never).then(|| base.lock.clone());
    Ok(Held {
        ask: Some(ask),
        diff,
        lock,
    })
}

/// A new, empty file of the server's own (made here, so nothing planted
/// can stand in for it) for the supervisor to write the diff into.
fn diff_file() -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("stockade-serve-diff-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether `path` is a diff file of this module's (for tests).
#[cfg(test)]
fn is_diff_file(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("stockade-serve-diff-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(v: Value) -> String {
        parse_ask(Some(&v)).unwrap_err().field.unwrap()
    }

    #[test]
    fn asks_are_checked_field_by_field() {
        let a = parse_ask(Some(&serde_json::json!({"base": "src"})))
            .unwrap()
            .unwrap();
        assert_eq!(a.at, DEFAULT_AT);
        assert_eq!(a.commit, Commit::Never);
        assert_eq!(field_of(serde_json::json!({})), "workspace.base");
        assert_eq!(
            field_of(serde_json::json!({"base": "s", "x": 1})),
            "workspace.x"
        );
        assert_eq!(
            field_of(serde_json::json!({"base": "s", "at": "rel"})),
            "workspace.at"
        );
        assert_eq!(
            field_of(serde_json::json!({"base": "s", "at": "/a/../b"})),
            "workspace.at"
        );
        assert_eq!(
            field_of(serde_json::json!({"base": "s", "commit": "yes"})),
            "workspace.commit"
        );
        assert_eq!(
            field_of(serde_json::json!({"base": "s", "diff": "yes"})),
            "workspace.diff"
        );
        assert_eq!(field_of(serde_json::json!("s")), "workspace");
    }

    #[test]
    fn bases_refuse_unknown_names_and_commits_not_allowed() {
        let dir = std::env::temp_dir();
        let bases = vec![Base {
            name: "src".into(),
            dir: dir.clone(),
            commit: false,
            lock: Arc::default(),
        }];
        let mut p = Policy::with_defaults(vec!["true".into()]);
        let ask = |base: &str, commit| Ask {
            base: base.into(),
            at: DEFAULT_AT.into(),
            commit,
            diff: false,
        };
        let e = apply(&bases, Some(ask("nope", Commit::Never)), &mut p).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("workspace.base"));
        let e = apply(&bases, Some(ask("src", Commit::Success)), &mut p).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("workspace.commit"));
        let held = apply(&bases, Some(ask("src", Commit::Never)), &mut p).unwrap();
        assert!(held.commit_lock().is_none());
        assert_eq!(crate::policy::workspace::overlays(&p).len(), 1);
        assert!(parse_base("a=/nonexistent-base").is_err());
        assert!(parse_base("=/tmp").is_err());
        assert!(parse_base("a/b=/tmp").is_err());
        let b = parse_base(&format!("a={}:commit", dir.display())).unwrap();
        assert!(b.commit);
        let f = diff_file().unwrap();
        assert!(is_diff_file(&f));
        std::fs::remove_file(f).unwrap();
    }
}
