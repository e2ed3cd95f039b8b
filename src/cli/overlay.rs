//! `stockade overlay changes|commit|discard DIR`: the upper layers a run
//! kept (`--overlay-upper DIR`), listed, applied to their host
//! directories, or dropped.

use std::path::{Path, PathBuf};

use super::args::OverlayCmd;
use super::eprint_line;
use crate::policy::Workspaces;
use crate::sys;
use crate::workspace::{record, Layer, Review};

/// The subcommand; the exit code: 0, 1 when a commit refused a change,
/// 125 when DIR cannot be read.
pub(super) fn overlay_cmd(c: OverlayCmd) -> i32 {
    let got = match c {
        OverlayCmd::Changes { dir, diff } => changes(&dir, diff.as_deref()),
        OverlayCmd::Commit { dir } => commit(&dir),
        OverlayCmd::Discard { dir } => discard(&dir),
    };
    match got {
        Ok(code) => code,
        Err(e) => {
            eprint_line(&e);
            125
        }
    }
}

/// DIR's layers, open, with the record.
fn open(dir: &Path) -> Result<(record::Record, Vec<Layer>), String> {
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| format!("{}: {}", dir.display(), sys::strerror(&e)))?;
    let r = record::read(&dir)?;
    let mut layers = Vec::new();
    for k in &r.overlays {
        let upper = k.upper(&dir);
        let open = |p: &Path| sys::open_dir_path(p).map_err(|e| e.to_string());
        layers.push(Layer {
            upper: open(&upper)?,
            host: open(&k.host)?,
            host_path: k.host.clone(),
            inner: k.inner.clone(),
            since: k.since(),
            ours: k.ours(),
        });
    }
    Ok((r, layers))
}

fn changes(dir: &Path, diff: Option<&Path>) -> Result<i32, String> {
    let (_, layers) = open(dir)?;
    let policy = Workspaces::default();
    let review = Review::of(&layers, &policy);
    if let Some(why) = review.incomplete() {
        eprint_line(&format!("warning: {why}"));
    }
    let (changes, more) = review.changes(&layers, policy.max_changes());
    if let Some(f) = diff {
        std::fs::write(f, review.diff(&layers, &policy))
            .map_err(|e| format!("--diff: {}: {}", f.display(), sys::strerror(&e)))?;
    }
    print_json(&serde_json::json!({
        "changes": changes,
        "changes_truncated": more,
    }));
    Ok(0)
}

fn commit(dir: &Path) -> Result<i32, String> {
    let (r, layers) = open(dir)?;
    let policy = Workspaces::default();
    let review = Review::of(&layers, &policy);
    let (changes, more) = review.changes(&layers, policy.max_changes());
    let done = review.commit(&layers, &policy);
    print_json(&serde_json::json!({
        "changes": changes,
        "changes_truncated": more,
        "commit": done,
    }));
    if let Some(why) = &done.skipped {
        eprint_line(why);
        return Ok(1);
    }
    if !done.refused.is_empty() {
        eprint_line(&format!(
            "{} changes applied, {} refused (the upper layers stay in {})",
            done.applied_count,
            done.refused.len(),
            dir.display()
        ));
        return Ok(1);
    }
    // All applied: the layers are spent.
    let canon: PathBuf = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    drop(layers);
    record::discard(&canon, &r)?;
    Ok(0)
}

fn discard(dir: &Path) -> Result<i32, String> {
    let canon = std::fs::canonicalize(dir)
        .map_err(|e| format!("{}: {}", dir.display(), sys::strerror(&e)))?;
    let r = record::read(&canon)?;
    record::discard(&canon, &r)?;
    Ok(0)
}

fn print_json(v: &serde_json::Value) {
    println!("{v}");
}
