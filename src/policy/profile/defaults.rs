//! A built-in profile that only restates the defaults (the default `shell`
//! profile), resolved without the TOML parser: parsing it costs ~60 µs of
//! a cold start (~35k instructions), about 2% of a whole run.
//!
//! What counts as restating a default is not written down here: the lines
//! are rendered from [`Policy::with_defaults`] through the value names the
//! parser itself reads ([`NETWORKS`], [`SECCOMP_ACTIONS`]). A changed
//! default changes its line, and a profile that restates the old value then
//! takes the parser; a line this reader does not know takes the parser too.

use super::schema::{name_of, NETWORKS, SECCOMP_ACTIONS};
use super::source::is_path;
use super::{builtin, Options, Resolved};
use crate::policy::{BaseRoot, Policy};

/// The lines that set a field to the value `d` has, with the table each
/// sits in (`""`: the top level).
pub(super) fn default_lines(d: &Policy) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(n) = name_of(NETWORKS, d.network) {
        lines.push(("", format!("network = {n:?}")));
    }
    let system = d.base == BaseRoot::System;
    lines.push(("filesystem", format!("system = {system}")));
    let groups: Vec<String> = d.seccomp.groups.iter().map(|g| format!("{g:?}")).collect();
    lines.push(("seccomp", format!("groups = [{}]", groups.join(", "))));
    if let Some(a) = name_of(SECCOMP_ACTIONS, d.seccomp.action) {
        lines.push(("seccomp", format!("action = {a:?}")));
    }
    lines.push(("landlock", format!("enabled = {}", !d.landlock.disabled)));
    lines
}

/// The description of a profile text that only restates the defaults
/// (comments, blank lines, `lines` and a `description` without escapes,
/// each at most once), or `None` for any other text.
pub(super) fn defaults_only<'t>(text: &'t str, lines: &[(&str, String)]) -> Option<&'t str> {
    let mut table = "";
    let mut seen_tables: Vec<&str> = Vec::new();
    let mut seen_lines = vec![false; lines.len()];
    let mut description = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let known = !t.is_empty() && lines.iter().any(|(lt, _)| *lt == t);
            if !known || seen_tables.contains(&t) {
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
        let k = lines.iter().position(|(t, l)| *t == table && l == line)?;
        if std::mem::replace(&mut seen_lines[k], true) {
            return None;
        }
    }
    description
}

/// `spec` resolved without the parser when it is a built-in that only
/// restates the defaults (and `--python` does not ask for discovery): the
/// same result as the parser's (the unit tests compare them).
pub(super) fn resolve_defaults_only(spec: &str, opts: &Options) -> Option<Resolved> {
    if opts.python.is_some() || is_path(spec) {
        return None;
    }
    let text = builtin(spec)?;
    let mut p = Policy::with_defaults(Vec::new());
    let description = defaults_only(text, &default_lines(&p))?;
    if let Some(w) = &opts.workdir_inner {
        p.env = crate::policy::default_env(w);
        p.workdir.inner = w.clone();
    }
    let system_root = p.base == BaseRoot::System;
    Some(Resolved {
        policy: p,
        chain: vec![format!("profiles/{spec}.toml")],
        description: Some(description.to_string()),
        python: None,
        system_root,
    })
}
