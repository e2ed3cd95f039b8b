//! A built-in profile that only restates the defaults, resolved without the
//! TOML parser.

use std::path::PathBuf;

use super::source::is_path;
use super::{builtin, Options, Resolved};
use crate::policy::Policy;

/// Lines that set a field to the value it has anyway, with the table they
/// must sit in (`""`: the top level). A built-in profile made only of these
/// (and a plain `description`) is the defaults.
pub(super) const DEFAULT_LINES: &[(&str, &str)] = &[
    ("", "network = \"none\""),
    ("filesystem", "system = true"),
    ("seccomp", "groups = [\"@default\"]"),
    ("seccomp", "action = \"errno\""),
    ("landlock", "enabled = true"),
];

/// Tables [`DEFAULT_LINES`] may open.
const DEFAULT_TABLES: &[&str] = &["filesystem", "seccomp", "landlock"];

/// The description of a profile text that only restates the defaults
/// (comments, blank lines, [`DEFAULT_LINES`] and a `description` without
/// escapes, each at most once), or `None` for any other text.
pub(super) fn defaults_only(text: &str) -> Option<&str> {
    let mut table = "";
    let mut seen_tables: Vec<&str> = Vec::new();
    let mut seen_lines = [false; DEFAULT_LINES.len()];
    let mut description = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if !DEFAULT_TABLES.contains(&t) || seen_tables.contains(&t) {
                return None;
            }
            seen_tables.push(t);
            table = t;
            continue;
        }
        if let Some(d) = line
            .strip_prefix("description = \"")
            .and_then(|l| l.strip_suffix('"'))
        {
            let plain = !d.contains(['"', '\\']) && !d.chars().any(char::is_control);
            if !table.is_empty() || !plain || description.is_some() {
                return None;
            }
            description = Some(d);
            continue;
        }
        let k = DEFAULT_LINES
            .iter()
            .position(|(t, l)| *t == table && *l == line)?;
        if std::mem::replace(&mut seen_lines[k], true) {
            return None;
        }
    }
    description
}

/// A built-in profile that only restates the defaults (the default `shell`
/// profile), resolved without the TOML parser: the same result as the full
/// path below (the unit tests compare them), for a fraction of the start-up
/// cost.
pub(super) fn resolve_defaults_only(spec: &str, opts: &Options) -> Option<Resolved> {
    if opts.python.is_some() || is_path(spec) {
        return None;
    }
    let description = defaults_only(builtin(spec)?)?;
    let workdir_inner = opts
        .workdir_inner
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_WORKDIR));
    let mut p = Policy::with_defaults(Vec::new());
    p.env = crate::policy::default_env(&workdir_inner);
    p.workdir.inner = workdir_inner;
    Some(Resolved {
        policy: p,
        chain: vec![format!("profiles/{spec}.toml")],
        description: Some(description.to_string()),
        python: None,
        system_root: true,
    })
}
