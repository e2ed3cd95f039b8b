//! Loading a profile (a built-in by name, or a file), parsing it, and its
//! `extends` chain. Every error is one line naming the file, line, column
//! and field.

use std::path::{Path, PathBuf};

use super::schema::{Raw, TABLES};
use super::{Source, BUILTIN};
use crate::policy::{PolicyError, Reason};

/// Most profiles one `extends` chain may hold (a loop is reported before).
const MAX_CHAIN: usize = 16;

/// Is `spec` a path (rather than a built-in name)?
pub(super) fn is_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

/// The names of the built-in profiles, for errors: `minimal, shell, …`.
pub(crate) fn builtin_names() -> String {
    BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The built-in profile called `name`.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Load a profile by built-in name or by path. `origin` names what asked
/// for it in errors (`--profile`, or `file:line:col: extends`).
pub fn load(spec: &str, origin: &str, relative_to: Option<&Path>) -> Result<Source, PolicyError> {
    if spec.is_empty() {
        return Err(PolicyError::value(origin, Reason::EmptyProfileName));
    }
    if !is_path(spec) {
        return match builtin(spec) {
            Some(t) => Ok(Source {
                shown: format!("profiles/{spec}.toml"),
                text: t.to_string(),
                dir: None,
            }),
            None => Err(PolicyError::value(
                origin,
                Reason::UnknownProfile {
                    name: spec.to_string(),
                },
            )),
        };
    }
    let p = Path::new(spec);
    let full = match relative_to {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    };
    let text = std::fs::read(&full).map_err(|e| {
        PolicyError::value(
            origin,
            Reason::ProfileUnreadable {
                path: full.clone(),
                kind: e.kind(),
                why: io_text(&e),
            },
        )
    })?;
    let text = String::from_utf8(text)
        .map_err(|_| PolicyError::value(origin, Reason::ProfileNotUtf8 { path: full.clone() }))?;
    let abs = crate::policy::host_path(origin, &full)?;
    Ok(Source {
        shown: full.display().to_string(),
        text,
        dir: abs.parent().map(Path::to_path_buf),
    })
}

pub(super) fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_lowercase()
        }
    }
}

/// 1-based line and column of byte `off` in `text`.
pub(super) fn line_col(text: &str, off: usize) -> (usize, usize) {
    let off = off.min(text.len());
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[start..].chars().count() + 1)
}

/// The dotted field a byte offset falls in, guessed from the table header
/// above it and the key on its line (for the parser's own errors).
pub(super) fn field_at(text: &str, off: usize) -> String {
    let off = off.min(text.len());
    let start = text[..off].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let end = text[off..]
        .find('\n')
        .map(|i| off + i)
        .unwrap_or(text.len());
    let line = text[start..end].trim();
    let header = |l: &str| -> Option<String> {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|r| r.split("]]").next());
        let inner = inner.or_else(|| l.strip_prefix('[').and_then(|r| r.split(']').next()))?;
        Some(inner.trim().to_string())
    };
    if let Some(h) = header(line) {
        return h;
    }
    let key = line
        .split('=')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('"')
        .to_string();
    let section = text[..start].lines().rev().find_map(header);
    match (section, key.is_empty()) {
        (Some(s), false) => format!("{s}.{key}"),
        (Some(s), true) => s,
        (None, false) => key,
        (None, true) => "profile".into(),
    }
}

/// Parse one source; a parse error is a one-line `file:line:col: field: …`.
pub(super) fn parse(src: &Source) -> Result<Raw, PolicyError> {
    toml::from_str::<Raw>(&src.text).map_err(|e| {
        let off = e.span().map(|s| s.start).unwrap_or(0);
        let (l, c) = line_col(&src.text, off);
        let field = field_at(&src.text, off);
        let msg = if array_of_tables_at(&src.text, off) {
            format!("expected a table ([{field}]), got an array of tables ([[{field}]])")
        } else {
            plain_message(e.message())
        };
        PolicyError::Field {
            at: format!("{}:{l}:{c}", src.shown),
            field,
            reason: Reason::Toml(msg),
        }
    })
}

/// Does the error at `off` sit on a `[[name]]` header of a plain table?
/// (serde reads the array into the table's fields and complains about its
/// first field.)
fn array_of_tables_at(text: &str, off: usize) -> bool {
    let off = off.min(text.len());
    let start = text[..off].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = text[start..].lines().next().unwrap_or("").trim();
    line.strip_prefix("[[")
        .and_then(|l| l.split("]]").next())
        .is_some_and(|name| TABLES.contains(&name.trim()))
}

/// The parser's message in the profile's own words: `expected a table, got
/// an integer (5)` for serde's `invalid type: integer `5`, expected …`, and
/// no Rust type names.
fn plain_message(msg: &str) -> String {
    let msg = msg.replace('\n', " ");
    let msg = msg.trim();
    let expected = |e: &str| -> String {
        match e {
            "u32" => "a whole number from 0 to 4294967295".into(),
            "a sequence" => "an array".into(),
            "a map" => "a table".into(),
            "a boolean" => "true or false".into(),
            e if e.starts_with("struct ") => "a table".into(),
            e => e.into(),
        }
    };
    let got = |u: &str| -> String {
        let quoted = |rest: &str| rest.trim_matches('`').to_string();
        if let Some(v) = u.strip_prefix("integer ") {
            format!("an integer ({})", quoted(v))
        } else if let Some(v) = u.strip_prefix("floating point ") {
            format!("a float ({})", quoted(v))
        } else if let Some(v) = u.strip_prefix("string ") {
            format!("a string ({v})")
        } else if let Some(v) = u.strip_prefix("boolean ") {
            format!("a boolean ({})", quoted(v))
        } else if u == "sequence" {
            "an array".into()
        } else if u == "map" {
            "a table".into()
        } else {
            u.into()
        }
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((u, e)) = msg
            .strip_prefix(prefix)
            .and_then(|r| r.rsplit_once(", expected "))
        {
            return format!("expected {}, got {}", expected(e), got(u));
        }
    }
    if let Some((_, e)) = msg
        .strip_prefix("invalid length ")
        .and_then(|r| r.split_once(", expected "))
    {
        let e = expected(e);
        if e.starts_with("a table") {
            return "expected a table, got an array".into();
        }
        return format!("expected {e}");
    }
    msg.to_string()
}

/// The `extends` chain of `spec`, base first.
pub(super) fn chain(spec: &str, origin: &str) -> Result<Vec<(Source, Raw)>, PolicyError> {
    let mut out: Vec<(Source, Raw)> = Vec::new();
    let mut next = Some((spec.to_string(), origin.to_string(), None::<PathBuf>));
    while let Some((spec, origin, rel)) = next.take() {
        let src = load(&spec, &origin, rel.as_deref())?;
        let raw = parse(&src)?;
        if let Some(ext) = &raw.extends {
            let (l, c) = line_col(&src.text, ext.span().start);
            let here = format!("{}:{l}:{c}", src.shown);
            let name = ext.get_ref().clone();
            let target = load(&name, &format!("{here}: extends"), src.dir.as_deref())?;
            if target.shown == src.shown || out.iter().any(|(s, _)| s.shown == target.shown) {
                return Err(PolicyError::Field {
                    at: here,
                    field: "extends".into(),
                    reason: Reason::Other(format!(
                        "{name:?} makes a loop ({} extends itself)",
                        target.shown
                    )),
                });
            }
            if out.len() + 1 >= MAX_CHAIN {
                return Err(PolicyError::Field {
                    at: here,
                    field: "extends".into(),
                    reason: Reason::Other(format!("more than {MAX_CHAIN} profiles in one chain")),
                });
            }
            next = Some((name, format!("{here}: extends"), src.dir.clone()));
        }
        out.push((src, raw));
    }
    out.reverse();
    Ok(out)
}
