//! The overlays' part of a run (`--overlay`): before clone, the kept
//! upper layers' directories (`--overlay-upper DIR`) made for the jail's
//! ids, with their record; after the run, each upper layer (handed over by
//! init from its tmpfs, or kept) read against its host directory: the
//! changes into the outcome, their diff written (`--changes-diff`), and
//! their commit when the policy asks and the payload's end allows.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crate::outcome::{Committed, Outcome, Status};
use crate::plan::{Plan, SetupError, Upper};
use crate::policy::Commit;
use crate::sys;
use crate::workspace::{record, Layer, Review};

/// The kept layers' directories and record, before clone (init opens
/// them): owned by the host ids the jail's map to when we are root, so
/// that the jail's overlayfs can write them. Returned: when the host
/// directories were last as the overlays will show them (see
/// `workspace::Layer::since`).
pub(super) fn prepare(plan: &Plan) -> Result<sys::tree::Time, SetupError> {
    let since = sys::tree::now();
    let ws = &plan.root.workspaces;
    let Some(dir) = &ws.policy.keep else {
        return Ok(since);
    };
    let list: Vec<_> = ws
        .list
        .iter()
        .map(|w| (w.host.clone(), w.inner.clone()))
        .collect();
    if ws.policy.resume {
        return resume(dir, &list);
    }
    let owner = match sys::geteuid() {
        0 => jail_host_ids(plan),
        _ => None,
    };
    record::prepare(dir, &list, owner, since)
        .map_err(|why| SetupError::new("--overlay-upper", dir.display().to_string(), why))?;
    Ok(since)
}

/// A session's jail started again on its kept layers: their record must
/// name these overlays, in this order. Their time is the record's.
fn resume(
    dir: &Path,
    list: &[(std::path::PathBuf, std::path::PathBuf)],
) -> Result<sys::tree::Time, SetupError> {
    let fail = |why: String| SetupError::new("--overlay-upper", dir.display().to_string(), why);
    let r = record::read(dir).map_err(fail)?;
    let same = r.overlays.len() == list.len()
        && r.overlays
            .iter()
            .zip(list)
            .all(|(k, (h, i))| &k.host == h && &k.inner == i);
    if !same {
        return Err(fail("its record names other overlays".into()));
    }
    Ok(r.overlays
        .first()
        .and_then(|k| k.since())
        .unwrap_or_else(sys::tree::now))
}

/// Nothing ran (the namespaces were refused): what [`prepare`] made goes
/// (a resumed session's layers stay).
pub(super) fn unprepare(plan: &Plan) {
    let Some(dir) = &plan.root.workspaces.policy.keep else {
        return;
    };
    if plan.root.workspaces.policy.resume {
        return;
    }
    if let Ok(r) = record::read(dir) {
        let _ = record::discard(dir, &r);
    }
}

/// The host uid and gid the jail's user maps to (the first line of each
/// id map, `inner outer count`).
pub(super) fn jail_host_ids(plan: &Plan) -> Option<(u32, u32)> {
    let outer = |map: &str| map.split_whitespace().nth(1)?.parse().ok();
    outer(&plan.identity.uid_map).zip(outer(&plan.identity.gid_map))
}

/// After the run: the changes, their diff, their commit. `handed`: our
/// end of the socket init handed the tmpfs upper layers over.
pub(super) fn conclude(
    plan: &Plan,
    handed: Option<OwnedFd>,
    since: sys::tree::Time,
    o: &mut Outcome,
) {
    let ws = &plan.root.workspaces;
    if ws.list.is_empty() || o.status == Status::SetupError {
        return;
    }
    let mut got = received(handed);
    let mut layers = Vec::new();
    let mut missing = None;
    for (i, w) in ws.list.iter().enumerate() {
        let upper = match &w.upper {
            Upper::Handed => got
                .iter()
                .position(|(n, _)| *n == i)
                .map(|at| got.swap_remove(at).1)
                .ok_or_else(|| "no upper layer came from the jail".to_string()),
            Upper::Kept { layer } => {
                let p = layer.join("upper");
                sys::open_dir_path(&p).map_err(|e| e.to_string())
            }
        };
        let host = sys::open_dir_path(&w.host).map_err(|e| e.to_string());
        match (upper, host) {
            (Ok(upper), Ok(host)) => layers.push(Layer {
                upper,
                host,
                host_path: w.host.clone(),
                inner: w.inner.clone(),
                since: Some(since),
                ours: Default::default(),
            }),
            (Err(why), _) | (_, Err(why)) => {
                missing.get_or_insert(format!("--overlay {}: {why}", w.inner.display()));
            }
        }
    }
    if let Some(why) = &missing {
        o.warnings.push(format!(
            "{why}: its changes are unknown, and nothing is committed"
        ));
    }
    let review = Review::of(&layers, &ws.policy);
    if let Some(why) = review.incomplete() {
        o.warnings.push(format!("--overlay: {why}"));
    }
    let (changes, more) = review.changes(&layers, ws.policy.max_changes());
    o.changes = Some(changes);
    o.changes_truncated = more || missing.is_some();
    if let Some(file) = &ws.policy.diff {
        if let Err(e) = write_diff(file, &review.diff(&layers, &ws.policy)) {
            o.warnings.push(format!(
                "--changes-diff: {}: {}",
                file.display(),
                sys::strerror(&e)
            ));
        }
    }
    o.commit = match (ws.policy.commit, &missing) {
        (Commit::Never, _) => None,
        (_, Some(why)) => Some(skipped(format!("nothing committed: {why}"))),
        (Commit::Success, _) if o.status != Status::Exited || o.exit_code != 0 => {
            Some(skipped(format!(
                "nothing committed: the payload did not exit 0 ({}, exit code {}); --commit=always commits whatever the end",
                status_name(o.status),
                o.exit_code
            )))
        }
        _ => Some(review.commit(&layers, &ws.policy)),
    };
    // Said where a command line shows it, as well as in the outcome.
    match &o.commit {
        Some(c) if c.skipped.is_some() => {
            o.warnings.push(format!("--commit: {}", c.skipped.as_deref().unwrap_or_default()))
        }
        Some(c) if !c.refused.is_empty() => o.warnings.push(format!(
            "--commit: {} changes applied, {} refused (the outcome's commit.refused says why), the first: {}: {}",
            c.applied_count,
            c.refused.len(),
            c.refused[0].path,
            c.refused[0].reason
        )),
        _ => {}
    }
}

fn skipped(why: String) -> Committed {
    Committed {
        skipped: Some(why),
        ..Committed::default()
    }
}

fn status_name(s: Status) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The upper layers init handed over (its index, the fd), without
/// waiting: it sent them as soon as the root was built, or never.
fn received(sock: Option<OwnedFd>) -> Vec<(usize, OwnedFd)> {
    let Some(sock) = sock else {
        return Vec::new();
    };
    if sys::set_nonblocking(sock.as_raw_fd()).is_err() {
        return Vec::new();
    }
    let mut index = [0u8; crate::policy::workspace::MAX_OVERLAYS];
    match sys::fdpass::recv_with_fds(sock.as_raw_fd(), &mut index) {
        Ok((n, fds)) => index[..n.min(fds.len())]
            .iter()
            .map(|i| *i as usize)
            .zip(fds)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The diff into `file` (made or truncated).
fn write_diff(file: &Path, diff: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(file)?;
    f.write_all(diff)
}
