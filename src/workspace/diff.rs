//! The changes as a unified diff in git's format (`--changes-diff`):
//! text files line by line, binary ones (a NUL byte, or not UTF-8) and
//! ones too large noted, modes as git shows them, symlinks as their
//! target. Paths are the jail's, without the leading `/` (`a/work/p/x`).

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::cursor::Cursor;
use super::walk::{open_upper_file, perm, Entry};
use super::Layer;
use crate::outcome::ChangeKind;
use crate::sys::tree;

/// An owner no file has: a host file is read as it is.
const NOBODY_OWNS: u32 = u32::MAX;

/// The largest file diffed as text.
const MAX_TEXT: u64 = 8 << 20;

/// The most files of a deleted directory listed as deleted.
const MAX_DELETED: usize = 10_000;

/// One side of a file's diff: git's mode and the content (None: binary
/// or too large).
struct Side {
    mode: u32,
    text: Option<String>,
}

/// Append the diff of `entries` (one overlay's, parents first) to `out`.
pub fn write(out: &mut Vec<u8>, l: &Layer, entries: &[Entry], max_file: u64) {
    let mut old = Cursor::new(&l.host);
    let mut new = Cursor::upper(&l.upper);
    let max = max_file.min(MAX_TEXT);
    for e in entries {
        let name = super::jail_path(&l.inner, &e.rel);
        let name = name.trim_start_matches('/');
        let (parent, file) = match (e.rel.parent(), e.rel.file_name()) {
            (Some(p), Some(f)) => (p, f),
            _ => continue,
        };
        let old_kind = e.old;
        let new_kind = e.new.map(|s| s.kind());
        let before = match (e.kind, old_kind) {
            (ChangeKind::Added, _) | (_, None) => None,
            (_, Some(libc::S_IFDIR)) => None,
            (_, Some(k)) => old
                .dir(parent)
                .ok()
                .and_then(|d| side(d, file, k, max, &e.rel, NOBODY_OWNS)),
        };
        let after = match new_kind {
            Some(libc::S_IFDIR) | None => None,
            Some(k) => new
                .dir(parent)
                .ok()
                .and_then(|d| side(d, file, k, max, &e.rel, crate::sys::geteuid())),
        };
        let gone = matches!(e.kind, ChangeKind::Deleted | ChangeKind::TypeChanged);
        if gone && old_kind == Some(libc::S_IFDIR) {
            if let Ok(d) = old.dir(parent) {
                let mut n = 0;
                deleted_tree(out, d, file, &format!("{name}/"), max, &mut n, 0);
            }
        }
        match (before, after) {
            (Some(b), Some(a)) if e.kind != ChangeKind::TypeChanged => {
                file_diff(out, name, Some(&b), Some(&a))
            }
            (b, a) => {
                if let Some(b) = b {
                    file_diff(out, name, Some(&b), None);
                }
                if let Some(a) = a {
                    file_diff(out, name, None, Some(&a));
                }
            }
        }
    }
}

/// What of `name` in `dir` (of type `kind`) a diff shows; None for what
/// git does not show (a directory, a device). `owner`: the upper layer's
/// file we own is read even at mode 000 (see `open_upper_file`); a host
/// file is never touched.
fn side(
    dir: &OwnedFd,
    name: &OsStr,
    kind: u32,
    max: u64,
    shown: &Path,
    owner: u32,
) -> Option<Side> {
    match kind {
        libc::S_IFLNK => {
            let t = tree::readlink(dir, name, shown).ok()?;
            Some(Side {
                mode: 0o120000,
                text: t.into_string().ok(),
            })
        }
        libc::S_IFREG => {
            let st = tree::lstat(dir, name, shown).ok()?;
            let fd = open_upper_file(dir, name, shown, &st, owner).ok()??;
            let mode = match perm(st.mode) & 0o100 {
                0 => 0o100644,
                _ => 0o100755,
            };
            let text = match st.size > max {
                true => None,
                false => read_text(fd, max),
            };
            Some(Side { mode, text })
        }
        _ => None,
    }
}

/// A file's content as text: None when binary (a NUL byte, not UTF-8)
/// or larger than `max`.
fn read_text(fd: OwnedFd, max: u64) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .ok()?;
    if buf.len() as u64 > max || buf.contains(&0) {
        return None;
    }
    String::from_utf8(buf).ok()
}

/// Every file beneath the deleted directory `name` in `dir`, as deleted
/// (`prefix`: its diff path and `/`), at most [`MAX_DELETED`] in all.
fn deleted_tree(
    out: &mut Vec<u8>,
    dir: &OwnedFd,
    name: &OsStr,
    prefix: &str,
    max: u64,
    n: &mut usize,
    depth: usize,
) {
    let shown = Path::new(name);
    let Ok(d) = tree::open_dir(dir, name, shown) else {
        return;
    };
    let Ok(mut names) = tree::entries(&d, MAX_DELETED, shown) else {
        return;
    };
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    for child in names {
        if *n >= MAX_DELETED || depth > super::walk::MAX_DEPTH {
            return;
        }
        let Ok(st) = tree::lstat(&d, &child, shown) else {
            continue;
        };
        let path = format!("{prefix}{}", child.to_string_lossy());
        if st.kind() == libc::S_IFDIR {
            deleted_tree(out, &d, &child, &format!("{path}/"), max, n, depth + 1);
        } else if let Some(s) = side(&d, &child, st.kind(), max, shown, NOBODY_OWNS) {
            *n += 1;
            file_diff(out, &path, Some(&s), None);
        }
    }
}

/// One file's diff: `before` None for an added file, `after` None for a
/// deleted one.
fn file_diff(out: &mut Vec<u8>, name: &str, before: Option<&Side>, after: Option<&Side>) {
    let (a, b) = (format!("a/{name}"), format!("b/{name}"));
    out.extend_from_slice(format!("diff --git {a} {b}\n").as_bytes());
    match (before, after) {
        (None, Some(n)) => {
            out.extend_from_slice(format!("new file mode {:o}\n", n.mode).as_bytes())
        }
        (Some(o), None) => {
            out.extend_from_slice(format!("deleted file mode {:o}\n", o.mode).as_bytes())
        }
        (Some(o), Some(n)) if o.mode != n.mode => out.extend_from_slice(
            format!("old mode {:o}\nnew mode {:o}\n", o.mode, n.mode).as_bytes(),
        ),
        _ => {}
    }
    let empty = String::new();
    let (old, new) = (
        before.map_or(Some(&empty), |s| s.text.as_ref()),
        after.map_or(Some(&empty), |s| s.text.as_ref()),
    );
    let (from, to) = (
        if before.is_some() {
            a.clone()
        } else {
            "/dev/null".into()
        },
        if after.is_some() {
            b.clone()
        } else {
            "/dev/null".into()
        },
    );
    match (old, new) {
        (Some(o), Some(n)) => {
            if o == n {
                return;
            }
            let d = similar::TextDiff::configure()
                .timeout(std::time::Duration::from_secs(2))
                .diff_lines(o.as_str(), n.as_str());
            let u = d
                .unified_diff()
                .context_radius(3)
                .header(&from, &to)
                .to_string();
            out.extend_from_slice(u.as_bytes());
        }
        _ => out.extend_from_slice(format!("Binary files {from} and {to} differ\n").as_bytes()),
    }
}
