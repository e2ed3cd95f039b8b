//! Plain file I/O on cgroupfs: one value per write(2), whitespace-separated
//! words, and what a directory's files say about it.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use super::error::{CgroupError, FileOp};

pub(super) fn read_trim(p: &Path) -> io::Result<String> {
    fs::read_to_string(p).map(|s| s.trim().to_string())
}

pub(super) fn words(p: &Path) -> Vec<String> {
    read_trim(p)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The real root cgroup has no `cgroup.type` (CFTYPE_NOT_ON_ROOT); it is
/// exempt from the no-internal-processes rule. A cgroup namespace's root is
/// not.
pub(super) fn is_true_root(dir: &Path) -> bool {
    dir.join("cgroup.controllers").exists() && !dir.join("cgroup.type").exists()
}

pub(super) fn holds_processes(dir: &Path) -> io::Result<bool> {
    Ok(!read_trim(&dir.join("cgroup.procs"))?.is_empty())
}

/// Write `value` to `dir/file` in one write(2), as cgroupfs wants.
pub(super) fn write_file(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let p = dir.join(file);
    // O_TRUNC as a shell's `>` does (cgroupfs ignores it); never O_CREAT.
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .map_err(|source| CgroupError::File {
            op: FileOp::Open,
            path: p.clone(),
            source,
        })?;
    io::Write::write_all(&mut f, value.as_bytes()).map_err(|source| CgroupError::Write {
        path: p,
        value: value.to_string(),
        source,
    })
}
