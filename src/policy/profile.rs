//! Profiles: TOML files that describe a jail, shipped in `profiles/` (embedded
//! in the binary) or loaded from a path. A profile may `extends` another; the
//! chain is applied base first onto the built-in defaults, then the CLI flags
//! go on top.
//!
//! Every error is one line that names the file, line, column and field:
//! `profiles/x.toml:12:3: limits.memory: "12q" is not a size`.

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::python::{self, Interpreter};
use super::{units, Layer, MountSpec, Network, Policy, PolicyError, SeccompAction};

/// The profiles shipped with stockade, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("minimal", include_str!("../../profiles/minimal.toml")),
    ("shell", include_str!("../../profiles/shell.toml")),
    ("python", include_str!("../../profiles/python.toml")),
    ("strict", include_str!("../../profiles/strict.toml")),
];

/// The profile `stockade run` uses without `--profile`.
pub const DEFAULT_PROFILE: &str = "shell";

/// Most profiles one `extends` chain may hold (a loop is reported before).
const MAX_CHAIN: usize = 16;

/// The text of one profile and where it came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// Shown in errors: `profiles/NAME.toml` for a built-in, else the path.
    pub shown: String,
    pub text: String,
    /// Directory of a profile file (for `${PROFILE_DIR}` and a relative
    /// `extends`); `None` for a built-in.
    pub dir: Option<PathBuf>,
}

/// What the command line decides before the profile is resolved.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--python PATH`: the interpreter to discover (turns discovery on).
    pub python: Option<PathBuf>,
    /// The workdir's path inside the jail when `--workdir HOST:INNER` names
    /// one (`${WORKDIR}` expands to it).
    pub workdir_inner: Option<PathBuf>,
}

/// A profile resolved into a policy (with an empty argv).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub policy: Policy,
    /// The files applied, base first.
    pub chain: Vec<String>,
    pub description: Option<String>,
    /// The interpreter found when the profile discovers Python.
    pub python: Option<Interpreter>,
    /// `filesystem.system`: whether the host's /usr, /bin, /lib*, and a
    /// few /etc files are bound.
    pub system_root: bool,
}

// ---------------------------------------------------------------- schema

type S<T> = Spanned<T>;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct Raw {
    extends: Option<S<String>>,
    description: Option<S<String>>,
    require: Option<Vec<S<String>>>,
    uid: Option<S<u32>>,
    gid: Option<S<u32>>,
    host_uid: Option<S<u32>>,
    host_gid: Option<S<u32>>,
    hostname: Option<S<String>>,
    network: Option<S<String>>,
    chdir: Option<S<String>>,
    workdir: Option<RawWorkdir>,
    filesystem: Option<RawFs>,
    environment: Option<RawEnv>,
    limits: Option<RawLimits>,
    seccomp: Option<RawSeccomp>,
    landlock: Option<RawLandlock>,
    namespaces: Option<RawNamespaces>,
    python: Option<RawPython>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawWorkdir {
    host: Option<S<String>>,
    path: Option<S<String>>,
    size: Option<S<Scalar>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawFs {
    system: Option<S<bool>>,
    ro: Option<Vec<S<String>>>,
    rw: Option<Vec<S<String>>>,
    bind: Option<Vec<RawBind>>,
    tmpfs: Option<Vec<RawTmpfs>>,
    symlink: Option<Vec<RawSymlink>>,
    file: Option<Vec<RawFile>>,
    dir: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawBind {
    src: S<String>,
    dst: Option<S<String>>,
    writable: Option<S<bool>>,
    optional: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawTmpfs {
    path: S<String>,
    size: Option<S<Scalar>>,
    mode: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawSymlink {
    target: S<String>,
    link: S<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawFile {
    path: S<String>,
    content: S<String>,
    mode: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawEnv {
    clear: Option<S<bool>>,
    set: Option<BTreeMap<String, S<String>>>,
    keep: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawLimits {
    memory: Option<S<Scalar>>,
    memory_high: Option<S<Scalar>>,
    cpus: Option<S<Scalar>>,
    pids: Option<S<Scalar>>,
    cpu_time: Option<S<Scalar>>,
    timeout: Option<S<Scalar>>,
    grace: Option<S<Scalar>>,
    max_output: Option<S<Scalar>>,
    max_file_size: Option<S<Scalar>>,
    max_open_files: Option<S<Scalar>>,
    tmp_size: Option<S<Scalar>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawSeccomp {
    enabled: Option<S<bool>>,
    groups: Option<Vec<S<String>>>,
    allow: Option<Vec<S<String>>>,
    action: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawLandlock {
    enabled: Option<S<bool>>,
    exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawNamespaces {
    user: Option<S<bool>>,
    mount: Option<S<bool>>,
    pid: Option<S<bool>>,
    ipc: Option<S<bool>>,
    uts: Option<S<bool>>,
    cgroup: Option<S<bool>>,
    net: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawPython {
    enabled: Option<S<bool>>,
    interpreter: Option<S<String>>,
}

/// A limit value: `"64m"`, `4096`, `0.5`, `"10s"`.
#[derive(Deserialize, Debug, Clone)]
#[serde(
    untagged,
    expecting = "expected a number or a string (a size such as \"64m\", a duration such as \"10s\")"
)]
enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    fn shown(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => format!("{s:?}"),
        }
    }
}

// ---------------------------------------------------------------- loading

/// Is `spec` a path (rather than a built-in name)?
fn is_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

/// The built-in profile called `name`.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Load a profile by built-in name or by path. `origin` names what asked
/// for it in errors (`--profile`, or `file:line:col: extends`).
pub fn load(spec: &str, origin: &str, relative_to: Option<&Path>) -> Result<Source, PolicyError> {
    if spec.is_empty() {
        return Err(PolicyError::new(origin, "empty profile name"));
    }
    if !is_path(spec) {
        return match builtin(spec) {
            Some(t) => Ok(Source {
                shown: format!("profiles/{spec}.toml"),
                text: t.to_string(),
                dir: None,
            }),
            None => Err(PolicyError::new(
                origin,
                format!(
                    "{spec:?}: no such profile (built-in: {}; or give a path to a .toml file)",
                    BUILTIN
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        };
    }
    let p = Path::new(spec);
    let full = match relative_to {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    };
    let text = std::fs::read(&full).map_err(|e| {
        PolicyError::new(
            origin,
            format!("{}: cannot read profile: {}", full.display(), io_text(&e)),
        )
    })?;
    let text = String::from_utf8(text)
        .map_err(|_| PolicyError::new(origin, format!("{}: not UTF-8 text", full.display())))?;
    let abs = super::host_path(origin, &full)?;
    Ok(Source {
        shown: full.display().to_string(),
        text,
        dir: abs.parent().map(Path::to_path_buf),
    })
}

fn io_text(e: &std::io::Error) -> String {
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
fn line_col(text: &str, off: usize) -> (usize, usize) {
    let off = off.min(text.len());
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[start..].chars().count() + 1)
}

/// The dotted field a byte offset falls in, guessed from the table header
/// above it and the key on its line (for the parser's own errors).
fn field_at(text: &str, off: usize) -> String {
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

/// Errors inside one source file.
struct Ctx<'a> {
    src: &'a Source,
    vars: &'a Vars,
}

impl Ctx<'_> {
    fn err(
        &self,
        span: std::ops::Range<usize>,
        field: &str,
        msg: impl Into<String>,
    ) -> PolicyError {
        let (l, c) = line_col(&self.src.text, span.start);
        PolicyError::new(
            format!("{}:{l}:{c}", self.src.shown),
            format!("{field}: {}", msg.into()),
        )
    }

    /// Expand `${NAME}` variables (and `$$` to `$`) in a string value.
    fn expand(&self, v: &S<String>, field: &str) -> Result<String, PolicyError> {
        let s = v.get_ref();
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(r) = after.strip_prefix('$') {
                out.push('$');
                rest = r;
            } else if let Some(r) = after.strip_prefix('{') {
                let end = r.find('}').ok_or_else(|| {
                    self.err(v.span(), field, format!("{s:?}: unterminated ${{…}}"))
                })?;
                let name = &r[..end];
                let val = self.vars.get(name).map_err(|why| {
                    self.err(v.span(), field, format!("{s:?}: ${{{name}}}: {why}"))
                })?;
                out.push_str(&val);
                rest = &r[end + 1..];
            } else {
                return Err(self.err(
                    v.span(),
                    field,
                    format!("{s:?}: a `$` must start ${{NAME}} (write $$ for a literal $)"),
                ));
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    fn jail_path(&self, v: &S<String>, field: &str) -> Result<PathBuf, PolicyError> {
        let s = self.expand(v, field)?;
        super::jail_path("", Path::new(&s)).map_err(|e| self.err(v.span(), field, e.msg))
    }

    fn host_path(&self, v: &S<String>, field: &str) -> Result<PathBuf, PolicyError> {
        let s = self.expand(v, field)?;
        if s.is_empty() {
            return Err(self.err(v.span(), field, "empty path"));
        }
        let p = Path::new(&s);
        let p = match &self.src.dir {
            Some(d) if p.is_relative() => d.join(p),
            _ if p.is_relative() => {
                return Err(self.err(
                    v.span(),
                    field,
                    format!("{s:?}: a built-in profile needs absolute host paths"),
                ))
            }
            _ => p.to_path_buf(),
        };
        super::host_path("", &p).map_err(|e| self.err(v.span(), field, e.msg))
    }

    fn size(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
        match v.get_ref() {
            Scalar::Int(i) if *i >= 0 => Ok(*i as u64),
            Scalar::Str(s) => units::parse_size(s).map_err(|_| {
                self.err(
                    v.span(),
                    field,
                    format!("{s:?} is not a size (examples: 4096, 512k, 64m, 1g)"),
                )
            }),
            other => Err(self.err(v.span(), field, format!("{} is not a size", other.shown()))),
        }
    }

    /// A size limit: above 0 (0 would stop the command at once).
    fn limit_size(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
        match self.size(v, field)? {
            0 => Err(self.zero(v, field)),
            n => Ok(n),
        }
    }

    /// A time limit: above 0.
    fn limit_duration(
        &self,
        v: &S<Scalar>,
        field: &str,
    ) -> Result<std::time::Duration, PolicyError> {
        let d = self.duration(v, field)?;
        if d.is_zero() {
            return Err(self.zero(v, field));
        }
        Ok(d)
    }

    fn zero(&self, v: &S<Scalar>, field: &str) -> PolicyError {
        self.err(
            v.span(),
            field,
            format!(
                "{}: must be greater than 0 (leave the limit out for none)",
                v.get_ref().shown()
            ),
        )
    }

    fn count(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
        match v.get_ref() {
            Scalar::Int(i) if *i > 0 => Ok(*i as u64),
            Scalar::Int(0) => Err(self.zero(v, field)),
            other => Err(self.err(
                v.span(),
                field,
                format!("{} is not a count (a whole number above 0)", other.shown()),
            )),
        }
    }

    fn duration(&self, v: &S<Scalar>, field: &str) -> Result<std::time::Duration, PolicyError> {
        let bad = || {
            self.err(
                v.span(),
                field,
                format!(
                    "{} is not a duration (examples: 500ms, 10s, 1.5s, 2m)",
                    v.get_ref().shown()
                ),
            )
        };
        match v.get_ref() {
            Scalar::Int(i) if *i >= 0 => Ok(std::time::Duration::from_secs(*i as u64)),
            Scalar::Float(f) if f.is_finite() && *f >= 0.0 && *f < 1e9 => {
                Ok(std::time::Duration::from_secs_f64(*f))
            }
            Scalar::Str(s) => units::parse_duration(s).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    fn mode(&self, v: &Option<S<String>>, field: &str, default: u32) -> Result<u32, PolicyError> {
        let Some(v) = v else { return Ok(default) };
        let s = v.get_ref();
        u32::from_str_radix(s.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| {
                self.err(
                    v.span(),
                    field,
                    format!("{s:?} is not an octal mode (e.g. \"0644\")"),
                )
            })
    }
}

/// Values of `${NAME}`.
#[derive(Debug, Clone, Default)]
struct Vars {
    workdir: PathBuf,
    profile_dir: Option<PathBuf>,
    python: Option<Interpreter>,
}

impl Vars {
    fn get(&self, name: &str) -> Result<String, String> {
        let env = |k: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("${k} is not set in stockade's environment"))
        };
        let py = |f: fn(&Interpreter) -> &Path| {
            self.python
                .as_ref()
                .map(|i| f(i).display().to_string())
                .ok_or_else(|| {
                    "only defined when the profile discovers Python ([python] enabled = true)"
                        .to_string()
                })
        };
        match name {
            "WORKDIR" => Ok(self.workdir.display().to_string()),
            "HOME" => env("HOME"),
            "USER" => env("USER"),
            "PWD" => std::env::current_dir()
                .map(|d| d.display().to_string())
                .map_err(|e| format!("cannot read the current directory: {e}")),
            "PROFILE_DIR" => self
                .profile_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .ok_or_else(|| "a built-in profile has no directory".to_string()),
            "PYTHON" => py(|i| &i.executable),
            "PYTHON_PREFIX" => py(|i| &i.prefix),
            "PYTHON_BASE_PREFIX" => py(|i| &i.base_prefix),
            _ => Err("unknown variable (WORKDIR, HOME, USER, PWD, PROFILE_DIR, PYTHON, PYTHON_PREFIX, PYTHON_BASE_PREFIX)".into()),
        }
    }
}

/// Parse one source; a parse error is a one-line `file:line:col: field: …`.
fn parse(src: &Source) -> Result<Raw, PolicyError> {
    toml::from_str::<Raw>(&src.text).map_err(|e| {
        let off = e.span().map(|s| s.start).unwrap_or(0);
        let (l, c) = line_col(&src.text, off);
        let field = field_at(&src.text, off);
        let msg = if array_of_tables_at(&src.text, off) {
            format!("expected a table ([{field}]), got an array of tables ([[{field}]])")
        } else {
            plain_message(e.message())
        };
        PolicyError::new(format!("{}:{l}:{c}", src.shown), format!("{field}: {msg}"))
    })
}

/// Tables a profile has once (`[limits]`), not as arrays (`[[limits]]`).
const TABLES: &[&str] = &[
    "workdir",
    "filesystem",
    "environment",
    "limits",
    "seccomp",
    "landlock",
    "namespaces",
    "python",
];

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
fn chain(spec: &str, origin: &str) -> Result<Vec<(Source, Raw)>, PolicyError> {
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
                return Err(PolicyError::new(
                    here,
                    format!(
                        "extends: {name:?} makes a loop ({} extends itself)",
                        target.shown
                    ),
                ));
            }
            if out.len() + 1 >= MAX_CHAIN {
                return Err(PolicyError::new(
                    here,
                    format!("extends: more than {MAX_CHAIN} profiles in one chain"),
                ));
            }
            next = Some((name, format!("{here}: extends"), src.dir.clone()));
        }
        out.push((src, raw));
    }
    out.reverse();
    Ok(out)
}

/// Lines that set a field to the value it has anyway, with the table they
/// must sit in (`""`: the top level). A built-in profile made only of these
/// (and a plain `description`) is the defaults.
const DEFAULT_LINES: &[(&str, &str)] = &[
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
fn defaults_only(text: &str) -> Option<&str> {
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
fn resolve_defaults_only(spec: &str, opts: &Options) -> Option<Resolved> {
    if opts.python.is_some() || is_path(spec) {
        return None;
    }
    let description = defaults_only(builtin(spec)?)?;
    let workdir_inner = opts
        .workdir_inner
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::DEFAULT_WORKDIR));
    let mut p = Policy::with_defaults(Vec::new());
    p.env = super::default_env(&workdir_inner);
    p.workdir.inner = workdir_inner;
    Some(Resolved {
        policy: p,
        chain: vec![format!("profiles/{spec}.toml")],
        description: Some(description.to_string()),
        python: None,
        system_root: true,
    })
}

/// Resolve `spec` (a built-in name or a path) into a policy. `origin`
/// names the flag that chose it, for errors about the choice itself.
pub fn resolve(spec: &str, origin: &str, opts: &Options) -> Result<Resolved, PolicyError> {
    match resolve_defaults_only(spec, opts) {
        Some(r) => Ok(r),
        None => resolve_parsed(spec, origin, opts),
    }
}

/// [`resolve`] through the TOML parser.
fn resolve_parsed(spec: &str, origin: &str, opts: &Options) -> Result<Resolved, PolicyError> {
    let layers = chain(spec, origin)?;

    // First pass: is Python discovered, and which interpreter?
    let mut py_on = opts.python.is_some();
    let mut py_interp: Option<(String, PathBuf)> = None;
    let mut workdir_inner = PathBuf::from(super::DEFAULT_WORKDIR);
    for (src, raw) in &layers {
        let vars = Vars {
            workdir: workdir_inner.clone(),
            profile_dir: src.dir.clone(),
            python: None,
        };
        let cx = Ctx { src, vars: &vars };
        if let Some(py) = &raw.python {
            if let Some(e) = &py.enabled {
                py_on = *e.get_ref();
            }
            if let Some(i) = &py.interpreter {
                let (l, c) = line_col(&src.text, i.span().start);
                let s = cx.expand(i, "python.interpreter")?;
                py_interp = Some((
                    format!("{}:{l}:{c}: python.interpreter", src.shown),
                    s.into(),
                ));
            }
        }
        if let Some(w) = raw.workdir.as_ref().and_then(|w| w.path.as_ref()) {
            workdir_inner = cx.jail_path(w, "workdir.path")?;
        }
    }
    if let Some(w) = &opts.workdir_inner {
        workdir_inner = w.clone();
    }
    let interpreter = if py_on {
        let (origin, path) = match &opts.python {
            Some(p) => ("--python".to_string(), p.clone()),
            None => py_interp.unwrap_or_else(|| ("python".into(), PathBuf::from("python3"))),
        };
        Some(python::discover(&path).map_err(|e| PolicyError::new(origin, e))?)
    } else {
        None
    };

    let mut p = Policy::with_defaults(Vec::new());
    p.workdir.inner = workdir_inner.clone();
    p.env = super::default_env(&workdir_inner);
    let mut system_root = true;
    let mut description = None;
    let mut shown = Vec::new();
    // Mounts the profile files ask for; the interpreter's binds go first so
    // that a profile can still cover part of them.
    let mut mounts = Vec::new();
    for (src, raw) in &layers {
        let vars = Vars {
            workdir: workdir_inner.clone(),
            profile_dir: src.dir.clone(),
            python: interpreter.clone(),
        };
        let cx = Ctx { src, vars: &vars };
        apply(&cx, raw, &mut p, &mut mounts, &mut system_root)?;
        if let Some(d) = &raw.description {
            description = Some(d.get_ref().clone());
        }
        shown.push(src.shown.clone());
    }
    if let Some(w) = &opts.workdir_inner {
        p.workdir.inner = w.clone();
    }
    let mut all = Vec::new();
    if let Some(i) = &interpreter {
        all.extend(python::mounts(i, system_root));
        // The interpreter's directory comes first on PATH, so `python3`
        // inside the jail is the interpreter that was discovered.
        let bin = i.bin_dir();
        let old = p
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let mut path = OsString::from(bin.as_os_str());
        for d in std::env::split_paths(&old) {
            if d != bin {
                path.push(":");
                path.push(d.as_os_str());
            }
        }
        super::set_env(&mut p.env, "PATH".into(), path);
    }
    all.extend(mounts);
    p.mounts = all;
    apply_system_root(&mut p, system_root)?;
    Ok(Resolved {
        policy: p,
        chain: shown,
        description,
        python: interpreter,
        system_root,
    })
}

fn bind_string(
    cx: &Ctx,
    v: &S<String>,
    field: &str,
    writable: bool,
) -> Result<MountSpec, PolicyError> {
    let s = cx.expand(v, field)?;
    let (src, dst) = match s.find(":/") {
        Some(i) => (s[..i].to_string(), Some(s[i + 1..].to_string())),
        None => (s.clone(), None),
    };
    let src_v = Spanned::new(v.span(), src);
    // Already expanded: escape `$` so it is not expanded twice.
    let src_v = Spanned::new(src_v.span(), src_v.get_ref().replace('$', "$$"));
    let src = cx.host_path(&src_v, field)?;
    super::host_exists(&src, false).map_err(|e| cx.err(v.span(), field, e))?;
    let dst = match dst {
        Some(d) => cx.jail_path(&Spanned::new(v.span(), d.replace('$', "$$")), field)?,
        None => super::jail_path("", &src).map_err(|e| cx.err(v.span(), field, e.msg))?,
    };
    Ok(MountSpec::Bind {
        src,
        dst,
        writable,
        optional: false,
    })
}

fn apply(
    cx: &Ctx,
    raw: &Raw,
    p: &mut Policy,
    mounts: &mut Vec<MountSpec>,
    system_root: &mut bool,
) -> Result<(), PolicyError> {
    if let Some(v) = &raw.uid {
        p.uid = *v.get_ref();
    }
    if let Some(v) = &raw.gid {
        p.gid = *v.get_ref();
    }
    if let Some(v) = &raw.host_uid {
        if *v.get_ref() == 0 {
            return Err(cx.err(v.span(), "host_uid", "0 would map the jail to host root"));
        }
        p.root_host_uid = *v.get_ref();
    }
    if let Some(v) = &raw.host_gid {
        if *v.get_ref() == 0 {
            return Err(cx.err(v.span(), "host_gid", "0 would map the jail to host root"));
        }
        p.root_host_gid = *v.get_ref();
    }
    if let Some(v) = &raw.hostname {
        let h = cx.expand(v, "hostname")?;
        if h.is_empty() || h.len() > 64 {
            return Err(cx.err(
                v.span(),
                "hostname",
                format!("{h:?}: must be 1 to 64 bytes"),
            ));
        }
        p.hostname = h;
    }
    if let Some(v) = &raw.network {
        p.network = match v.get_ref().as_str() {
            "none" => Network::None,
            "host" => Network::Host,
            o => {
                return Err(cx.err(
                    v.span(),
                    "network",
                    format!("{o:?}: expected \"none\" or \"host\""),
                ))
            }
        };
    }
    if let Some(v) = &raw.chdir {
        p.chdir = Some(cx.jail_path(v, "chdir")?);
    }
    if let Some(r) = &raw.require {
        for v in r {
            let l = Layer::parse(v.get_ref()).ok_or_else(|| {
                cx.err(
                    v.span(),
                    "require",
                    format!(
                        "{:?}: unknown layer (userns, landlock, seccomp, cgroup)",
                        v.get_ref()
                    ),
                )
            })?;
            if !p.require.contains(&l) {
                p.require.push(l);
            }
        }
    }
    if let Some(w) = &raw.workdir {
        if let Some(h) = &w.host {
            let host = cx.host_path(h, "workdir.host")?;
            super::host_exists(&host, true).map_err(|e| cx.err(h.span(), "workdir.host", e))?;
            p.workdir.host = Some(host);
        }
        if let Some(s) = &w.size {
            p.workdir.size = cx.size(s, "workdir.size")?;
            if p.workdir.size == 0 {
                return Err(cx.err(s.span(), "workdir.size", "must be greater than 0"));
            }
        }
    }
    if let Some(fs) = &raw.filesystem {
        if let Some(v) = &fs.system {
            *system_root = *v.get_ref();
        }
        for v in fs.ro.iter().flatten() {
            mounts.push(bind_string(cx, v, "filesystem.ro", false)?);
        }
        for v in fs.rw.iter().flatten() {
            mounts.push(bind_string(cx, v, "filesystem.rw", true)?);
        }
        for b in fs.bind.iter().flatten() {
            let src = cx.host_path(&b.src, "filesystem.bind.src")?;
            let optional = b.optional.as_ref().map(|w| *w.get_ref()).unwrap_or(false);
            if !optional {
                super::host_exists(&src, false)
                    .map_err(|e| cx.err(b.src.span(), "filesystem.bind.src", e))?;
            }
            let dst = match &b.dst {
                Some(d) => cx.jail_path(d, "filesystem.bind.dst")?,
                None => super::jail_path("", &src)
                    .map_err(|e| cx.err(b.src.span(), "filesystem.bind.src", e.msg))?,
            };
            mounts.push(MountSpec::Bind {
                src,
                dst,
                writable: b.writable.as_ref().map(|w| *w.get_ref()).unwrap_or(false),
                optional,
            });
        }
        for t in fs.tmpfs.iter().flatten() {
            let size = match &t.size {
                Some(s) => cx.size(s, "filesystem.tmpfs.size")?,
                None => 64 << 20,
            };
            if size == 0 {
                let span = t.size.as_ref().map(|s| s.span()).unwrap_or(t.path.span());
                return Err(cx.err(span, "filesystem.tmpfs.size", "must be greater than 0"));
            }
            mounts.push(MountSpec::Tmpfs {
                dst: cx.jail_path(&t.path, "filesystem.tmpfs.path")?,
                size,
                mode: cx.mode(&t.mode, "filesystem.tmpfs.mode", 0o1777)?,
            });
        }
        for s in fs.symlink.iter().flatten() {
            let target = cx.expand(&s.target, "filesystem.symlink.target")?;
            if target.is_empty() {
                return Err(cx.err(s.target.span(), "filesystem.symlink.target", "empty target"));
            }
            mounts.push(MountSpec::Symlink {
                target: target.into(),
                link: cx.jail_path(&s.link, "filesystem.symlink.link")?,
            });
        }
        for f in fs.file.iter().flatten() {
            mounts.push(MountSpec::File {
                dst: cx.jail_path(&f.path, "filesystem.file.path")?,
                content: f.content.get_ref().clone().into_bytes(),
                mode: cx.mode(&f.mode, "filesystem.file.mode", 0o644)?,
            });
        }
        for d in fs.dir.iter().flatten() {
            mounts.push(MountSpec::Dir {
                dst: cx.jail_path(d, "filesystem.dir")?,
            });
        }
    }
    if let Some(env) = &raw.environment {
        if env.clear.as_ref().map(|c| *c.get_ref()) == Some(true) {
            let home = p.workdir.inner.as_os_str().to_owned();
            p.env.clear();
            p.env
                .push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
            p.env.push(("HOME".into(), home));
        }
        for k in env.keep.iter().flatten() {
            check_env_name(cx, k.span(), "environment.keep", k.get_ref())?;
            if let Some(v) = std::env::var_os(k.get_ref()) {
                super::set_env(&mut p.env, k.get_ref().into(), v);
            }
        }
        for (k, v) in env.set.iter().flatten() {
            let field = format!("environment.set.{k}");
            check_env_name(cx, v.span(), &field, k)?;
            let val = cx.expand(v, &field)?;
            if val.contains('\0') {
                return Err(cx.err(v.span(), &field, "contains a NUL byte"));
            }
            super::set_env(&mut p.env, k.into(), val.into());
        }
    }
    if let Some(l) = &raw.limits {
        let lim = &mut p.limits;
        if let Some(v) = &l.memory {
            lim.memory = Some(cx.limit_size(v, "limits.memory")?);
        }
        if let Some(v) = &l.memory_high {
            lim.memory_high = Some(cx.limit_size(v, "limits.memory_high")?);
        }
        if let Some(v) = &l.cpus {
            let c = match v.get_ref() {
                Scalar::Int(i) => *i as f64,
                Scalar::Float(f) => *f,
                Scalar::Str(s) => s.parse().unwrap_or(f64::NAN),
            };
            if !(c.is_finite() && c > 0.0 && c <= 4096.0) {
                return Err(cx.err(
                    v.span(),
                    "limits.cpus",
                    format!(
                        "{} is not a number of CPUs above 0 (examples: 0.5, 1, 2)",
                        v.get_ref().shown()
                    ),
                ));
            }
            lim.cpus = Some(c);
        }
        if let Some(v) = &l.pids {
            lim.pids = Some(cx.count(v, "limits.pids")?);
        }
        if let Some(v) = &l.cpu_time {
            lim.cpu_time = Some(cx.limit_duration(v, "limits.cpu_time")?);
        }
        if let Some(v) = &l.timeout {
            lim.timeout = Some(cx.limit_duration(v, "limits.timeout")?);
        }
        if let Some(v) = &l.grace {
            lim.grace = cx.duration(v, "limits.grace")?;
        }
        if let Some(v) = &l.max_output {
            lim.max_output = Some(cx.limit_size(v, "limits.max_output")?);
        }
        if let Some(v) = &l.max_file_size {
            lim.max_file_size = Some(cx.limit_size(v, "limits.max_file_size")?);
        }
        if let Some(v) = &l.max_open_files {
            lim.max_open_files = Some(cx.count(v, "limits.max_open_files")?);
        }
        if let Some(v) = &l.tmp_size {
            p.tmp_size = cx.size(v, "limits.tmp_size")?;
            if p.tmp_size == 0 {
                return Err(cx.err(
                    v.span(),
                    "limits.tmp_size",
                    format!("{}: must be greater than 0", v.get_ref().shown()),
                ));
            }
        }
    }
    if let Some(s) = &raw.seccomp {
        if let Some(v) = &s.enabled {
            p.seccomp.enabled = *v.get_ref();
        }
        if let Some(g) = &s.groups {
            p.seccomp.groups.clear();
            for v in g {
                let name = v.get_ref();
                if !name.starts_with('@') || name.len() < 2 {
                    return Err(cx.err(
                        v.span(),
                        "seccomp.groups",
                        format!("{name:?}: a group name starts with @ (e.g. \"@default\")"),
                    ));
                }
                super::seccomp_name(name).map_err(|e| cx.err(v.span(), "seccomp.groups", e))?;
                if !p.seccomp.groups.contains(name) {
                    p.seccomp.groups.push(name.clone());
                }
            }
        }
        for v in s.allow.iter().flatten() {
            let name = v.get_ref();
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !ok {
                return Err(cx.err(
                    v.span(),
                    "seccomp.allow",
                    format!("{name:?}: not a syscall name (lower-case, e.g. \"ptrace\")"),
                ));
            }
            super::seccomp_name(name).map_err(|e| cx.err(v.span(), "seccomp.allow", e))?;
            if !p.seccomp.allow.contains(name) {
                p.seccomp.allow.push(name.clone());
            }
        }
        if let Some(v) = &s.action {
            p.seccomp.action = match v.get_ref().as_str() {
                "errno" => SeccompAction::Errno,
                "kill" => SeccompAction::Kill,
                o => {
                    return Err(cx.err(
                        v.span(),
                        "seccomp.action",
                        format!("{o:?}: expected \"errno\" or \"kill\""),
                    ))
                }
            };
        }
    }
    if let Some(l) = &raw.landlock {
        if let Some(v) = &l.enabled {
            p.landlock.disabled = !*v.get_ref();
        }
        for v in l.exclude.iter().flatten() {
            let x = cx.jail_path(v, "landlock.exclude")?;
            if !p.landlock.exclude.contains(&x) {
                p.landlock.exclude.push(x);
            }
        }
    }
    if let Some(ns) = &raw.namespaces {
        for (v, name) in [
            (&ns.user, "user"),
            (&ns.mount, "mount"),
            (&ns.pid, "pid"),
            (&ns.ipc, "ipc"),
            (&ns.uts, "uts"),
            (&ns.cgroup, "cgroup"),
        ] {
            if let Some(v) = v {
                if !*v.get_ref() {
                    return Err(cx.err(
                        v.span(),
                        &format!("namespaces.{name}"),
                        format!("stockade always creates a new {name} namespace; only `net` can be shared with the host"),
                    ));
                }
            }
        }
        if let Some(v) = &ns.net {
            let want = if *v.get_ref() {
                Network::None
            } else {
                Network::Host
            };
            if let Some(n) = &raw.network {
                if p.network != want {
                    return Err(cx.err(
                        v.span(),
                        "namespaces.net",
                        format!("contradicts network = {:?}", n.get_ref()),
                    ));
                }
            }
            p.network = want;
        }
    }
    Ok(())
}

fn check_env_name(
    cx: &Ctx,
    span: std::ops::Range<usize>,
    field: &str,
    k: &str,
) -> Result<(), PolicyError> {
    if k.is_empty() || k.contains('=') || k.contains('\0') {
        return Err(cx.err(span, field, format!("{k:?}: not a valid variable name")));
    }
    Ok(())
}

/// Apply `filesystem.system` to a policy. `false` leaves out the host's
/// /usr, /bin, /lib* and /etc files (the jail holds only what is named).
pub fn apply_system_root(p: &mut Policy, on: bool) -> Result<(), PolicyError> {
    p.base = if on {
        super::BaseRoot::System
    } else {
        super::BaseRoot::Empty
    };
    Ok(())
}

// ---------------------------------------------------------------- show

/// A human-readable, fully resolved description of `r` (`stockade profile
/// show`): the binds with their real host paths, the syscall list, the
/// limits.
pub fn show(r: &Resolved) -> String {
    use std::fmt::Write;
    let p = &r.policy;
    let mut o = String::new();
    let _ = writeln!(o, "# profile: {}", r.chain.join(" <- "));
    if let Some(d) = &r.description {
        let _ = writeln!(o, "# {d}");
    }
    if let Some(i) = &r.python {
        let _ = writeln!(
            o,
            "python: {} (Python {}, prefix {}, base prefix {}{})",
            i.executable.display(),
            i.version,
            i.prefix.display(),
            i.base_prefix.display(),
            if i.is_venv() { ", venv" } else { "" }
        );
    }
    let _ = writeln!(
        o,
        "uid: {}  gid: {}  hostname: {}",
        p.uid, p.gid, p.hostname
    );
    let _ = writeln!(o, "network: {}", p.network.as_str());
    let _ = writeln!(
        o,
        "workdir: {} ({})",
        p.workdir.inner.display(),
        match &p.workdir.host {
            Some(h) => format!("bind of {}", h.display()),
            None => format!("tmpfs, {}", human_size(p.workdir.size)),
        }
    );
    let _ = writeln!(o, "filesystem:");
    let mut all = Vec::new();
    if r.system_root {
        all.extend(super::default_mounts(
            p.uid,
            p.gid,
            &p.hostname,
            &p.workdir.inner,
            p.tmp_size,
        ));
    } else {
        all.extend(
            super::default_mounts(p.uid, p.gid, &p.hostname, &p.workdir.inner, p.tmp_size)
                .into_iter()
                .filter(|m| !matches!(m, MountSpec::Bind { .. } | MountSpec::Symlink { .. })),
        );
    }
    all.extend(p.mounts.iter().cloned());
    for m in &all {
        let line = match m {
            MountSpec::Bind {
                src,
                dst,
                writable,
                optional,
            } => {
                let real = std::fs::canonicalize(src);
                let shown = match &real {
                    Ok(r) => r.display().to_string(),
                    Err(_) if *optional => {
                        continue;
                    }
                    Err(e) => format!("{} (missing: {})", src.display(), io_text(e)),
                };
                format!(
                    "  {} {:<32} <- {}",
                    if *writable { "rw" } else { "ro" },
                    dst.display(),
                    shown
                )
            }
            MountSpec::Tmpfs { dst, size, mode } => {
                format!(
                    "  tmpfs {:<29} size {} mode {mode:o}",
                    dst.display(),
                    human_size(*size)
                )
            }
            MountSpec::Symlink { target, link } => {
                format!("  link {:<30} -> {}", link.display(), target.display())
            }
            MountSpec::File { dst, content, mode } => format!(
                "  file {:<30} {} bytes mode {mode:o}",
                dst.display(),
                content.len()
            ),
            MountSpec::Dir { dst } => format!("  dir  {}", dst.display()),
            MountSpec::Proc { dst } => format!("  proc {}", dst.display()),
            MountSpec::Dev { dst } => format!("  dev  {}", dst.display()),
        };
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(
        o,
        "  rw {:<32} <- {}",
        p.workdir.inner.display(),
        p.workdir
            .host
            .as_ref()
            .map(|h| h.display().to_string())
            .unwrap_or_else(|| "tmpfs".into())
    );
    let _ = writeln!(o, "environment:");
    for (k, v) in &p.env {
        let _ = writeln!(o, "  {}={}", k.to_string_lossy(), v.to_string_lossy());
    }
    let _ = writeln!(o, "seccomp:");
    if p.seccomp.enabled {
        let _ = writeln!(
            o,
            "  action: {}",
            match p.seccomp.action {
                SeccompAction::Errno => "errno (EPERM)",
                SeccompAction::Kill => "kill",
                SeccompAction::Learn => "learn",
            }
        );
        let _ = writeln!(o, "  groups: {}", p.seccomp.groups.join(" "));
        if !p.seccomp.allow.is_empty() {
            let _ = writeln!(o, "  allow: {}", p.seccomp.allow.join(" "));
        }
        match crate::seccomp::compile(&p.seccomp) {
            Ok(c) => {
                let _ = writeln!(o, "  syscalls allowed: {}", c.allowed);
            }
            Err(e) => {
                let _ = writeln!(o, "  error: {e}");
            }
        }
    } else {
        let _ = writeln!(o, "  disabled");
    }
    let _ = writeln!(
        o,
        "landlock: {}",
        if p.landlock.disabled {
            "disabled".to_string()
        } else if p.landlock.exclude.is_empty() {
            "rules from the filesystem above".to_string()
        } else {
            format!(
                "rules from the filesystem above, excluding {}",
                p.landlock
                    .exclude
                    .iter()
                    .map(|x| x.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    );
    let l = &p.limits;
    let sz = |v: Option<u64>| v.map(human_size).unwrap_or_else(|| "none".into());
    let du = |v: Option<std::time::Duration>| {
        v.map(|d| format!("{}s", d.as_secs_f64()))
            .unwrap_or_else(|| "none".into())
    };
    let _ = writeln!(o, "limits:");
    let _ = writeln!(
        o,
        "  memory: {}  memory_high: {}",
        sz(l.memory),
        sz(l.memory_high)
    );
    let _ = writeln!(
        o,
        "  cpus: {}  pids: {}",
        l.cpus
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        l.pids
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let _ = writeln!(
        o,
        "  cpu_time: {}  timeout: {}  grace: {}s",
        du(l.cpu_time),
        du(l.timeout),
        l.grace.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "  max_output: {}  max_file_size: {}  max_open_files: {}  tmp_size: {}",
        sz(l.max_output),
        sz(l.max_file_size),
        l.max_open_files
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        human_size(p.tmp_size)
    );
    let _ = writeln!(
        o,
        "require: {}",
        if p.require.is_empty() {
            "(none)".to_string()
        } else {
            p.require
                .iter()
                .map(|l| l.name())
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
    o
}

fn human_size(n: u64) -> String {
    for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(text: &str) -> Source {
        Source {
            shown: "profiles/x.toml".into(),
            text: text.into(),
            dir: Some("/tmp".into()),
        }
    }

    fn apply_text(text: &str) -> Result<Policy, PolicyError> {
        let s = src(text);
        let raw = parse(&s)?;
        let vars = Vars {
            workdir: "/work".into(),
            profile_dir: s.dir.clone(),
            python: None,
        };
        let mut p = Policy::with_defaults(Vec::new());
        let mut m = Vec::new();
        let mut sys = true;
        apply(
            &Ctx {
                src: &s,
                vars: &vars,
            },
            &raw,
            &mut p,
            &mut m,
            &mut sys,
        )?;
        p.mounts = m;
        Ok(p)
    }

    #[test]
    fn bad_size_names_file_line_column_and_field() {
        let e = apply_text("hostname = \"h\"\n\n[limits]\n  memory = \"12q\"\n").unwrap_err();
        assert_eq!(e.to_string(), "profiles/x.toml:4:12: limits.memory: \"12q\" is not a size (examples: 4096, 512k, 64m, 1g)");
    }

    #[test]
    fn zero_and_negative_limits_name_file_line_column_and_field() {
        for (line, field, shown) in [
            ("memory = 0", "limits.memory", "0"),
            ("memory = \"0m\"", "limits.memory", "\"0m\""),
            ("memory_high = 0", "limits.memory_high", "0"),
            ("timeout = \"0s\"", "limits.timeout", "\"0s\""),
            ("timeout = 0", "limits.timeout", "0"),
            ("cpu_time = 0.0", "limits.cpu_time", "0"),
            ("pids = 0", "limits.pids", "0"),
            ("max_open_files = 0", "limits.max_open_files", "0"),
            ("max_output = 0", "limits.max_output", "0"),
            ("max_file_size = \"0k\"", "limits.max_file_size", "\"0k\""),
        ] {
            let e = apply_text(&format!("[limits]\n{line}\n"))
                .unwrap_err()
                .to_string();
            let col = line.find('=').unwrap() + 3;
            assert_eq!(
                e,
                format!("profiles/x.toml:2:{col}: {field}: {shown}: must be greater than 0 (leave the limit out for none)"),
                "{line}"
            );
        }
        for line in [
            "memory = -5",
            "memory = \"-5m\"",
            "timeout = -1",
            "pids = -1",
            "cpus = -1",
            "cpus = 0",
        ] {
            let e = apply_text(&format!("[limits]\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("profiles/x.toml:2:"), "{line}: {e}");
            assert!(e.contains(" is not a "), "{line}: {e}");
        }
        let e = apply_text("[limits]\ntmp_size = 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "profiles/x.toml:2:12: limits.tmp_size: 0: must be greater than 0"
        );
        // 0 is meaningful for grace: SIGKILL right at the deadline.
        let p = apply_text("[limits]\ngrace = 0\n").unwrap();
        assert_eq!(p.limits.grace, std::time::Duration::ZERO);
    }

    #[test]
    fn wrong_types_are_named_in_the_profile_words_without_rust_types() {
        for (text, want) in [
            (
                "\n\nlimits = 5\n",
                "profiles/x.toml:3:10: limits: expected a table, got an integer (5)",
            ),
            (
                "limits = \"x\"\n",
                "profiles/x.toml:1:10: limits: expected a table, got a string (\"x\")",
            ),
            (
                "filesystem = []\n",
                "profiles/x.toml:1:14: filesystem: expected a table, got an array",
            ),
            (
                "[[limits]]\nmemory = 1\n",
                "profiles/x.toml:1:1: limits: expected a table ([limits]), got an array of tables ([[limits]])",
            ),
            (
                "uid = -1\n",
                "profiles/x.toml:1:7: uid: expected a whole number from 0 to 4294967295, got an integer (-1)",
            ),
            (
                "uid = 1.5\n",
                "profiles/x.toml:1:7: uid: expected a whole number from 0 to 4294967295, got a float (1.5)",
            ),
            (
                "require = \"seccomp\"\n",
                "profiles/x.toml:1:11: require: expected an array, got a string (\"seccomp\")",
            ),
            (
                "[filesystem]\nbind = [1]\n",
                "profiles/x.toml:2:9: filesystem.bind: expected a table, got an integer (1)",
            ),
            (
                "[seccomp]\nenabled = \"yes\"\n",
                "profiles/x.toml:2:11: seccomp.enabled: expected true or false, got a string (\"yes\")",
            ),
            (
                "[environment]\nset = 5\n",
                "profiles/x.toml:2:7: environment.set: expected a table, got an integer (5)",
            ),
            (
                "[limits]\nmemory = true\n",
                "profiles/x.toml:2:10: limits.memory: expected a number or a string (a size such as \"64m\", a duration such as \"10s\")",
            ),
        ] {
            let e = apply_text(text).unwrap_err().to_string();
            assert_eq!(e, want, "{text:?}");
        }
        for text in [
            "python = 1\n",
            "namespaces = 1\n",
            "workdir = 1\n",
            "landlock = []\n",
            "[workdir]\nsize = {}\n",
            "[filesystem]\ntmpfs = [{ path = \"/x\", size = true }]\n",
            "[filesystem]\nsymlink = [\"x\"]\n",
            "[filesystem]\nfile = [[]]\n",
            "host_uid = \"x\"\n",
        ] {
            let e = apply_text(text).unwrap_err().to_string();
            for leak in ["Raw", "Scalar", "struct", "u32", "untagged", "\n"] {
                assert!(!e.contains(leak), "{text:?}: {e}");
            }
        }
    }

    #[test]
    fn unknown_field_is_an_error_with_its_place() {
        let e = apply_text("[limits]\nmemry = \"1g\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("profiles/x.toml:2:1: limits.memry: unknown field `memry`"),
            "{e}"
        );
        let e = apply_text("[limitz]\n").unwrap_err().to_string();
        assert!(
            e.starts_with("profiles/x.toml:1:2: limitz: unknown field `limitz`"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn variables_expand_and_unknown_ones_fail() {
        let p = apply_text("[filesystem]\nro = [\"${PROFILE_DIR}:${WORKDIR}/data\"]\n").unwrap();
        assert_eq!(
            p.mounts,
            vec![MountSpec::Bind {
                src: "/tmp".into(),
                dst: "/work/data".into(),
                writable: false,
                optional: false
            }]
        );
        let e = apply_text("[environment]\nset = { A = \"${NOPE}\" }\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "profiles/x.toml:2:13: environment.set.A: \"${NOPE}\": ${NOPE}: unknown variable"
            ),
            "{e}"
        );
    }

    #[test]
    fn every_section_applies() {
        let p = apply_text(
            r#"
uid = 0
hostname = "box"
network = "host"
require = ["landlock", "seccomp"]
[filesystem]
rw = ["/tmp:/out"]
tmpfs = [{ path = "/scratch", size = "8m", mode = "0700" }]
symlink = [{ target = "/usr/bin/python3", link = "/bin/py" }]
file = [{ path = "/etc/app.conf", content = "a=1\n" }]
[environment]
set = { LANG = "C.UTF-8" }
[limits]
memory = "256m"
cpus = 1
pids = 64
timeout = "10s"
cpu_time = 5
tmp_size = "16m"
[seccomp]
groups = ["@default", "@network-io"]
allow = ["ptrace"]
action = "kill"
[landlock]
exclude = ["/out/secret"]
"#,
        )
        .unwrap();
        assert_eq!(p.uid, 0);
        assert_eq!(p.hostname, "box");
        assert_eq!(p.network, Network::Host);
        assert_eq!(p.require, vec![Layer::Landlock, Layer::Seccomp]);
        assert_eq!(p.mounts.len(), 4);
        assert_eq!(
            p.mounts[1],
            MountSpec::Tmpfs {
                dst: "/scratch".into(),
                size: 8 << 20,
                mode: 0o700
            }
        );
        assert_eq!(p.limits.memory, Some(256 << 20));
        assert_eq!(p.limits.cpus, Some(1.0));
        assert_eq!(p.limits.pids, Some(64));
        assert_eq!(p.limits.timeout, Some(std::time::Duration::from_secs(10)));
        assert_eq!(p.limits.cpu_time, Some(std::time::Duration::from_secs(5)));
        assert_eq!(p.tmp_size, 16 << 20);
        assert_eq!(p.seccomp.groups, vec!["@default", "@network-io"]);
        assert_eq!(p.seccomp.allow, vec!["ptrace"]);
        assert_eq!(p.seccomp.action, SeccompAction::Kill);
        assert_eq!(p.landlock.exclude, vec![PathBuf::from("/out/secret")]);
        assert!(p.env.iter().any(|(k, v)| k == "LANG" && v == "C.UTF-8"));
    }

    #[test]
    fn builtins_parse() {
        for (name, text) in BUILTIN {
            let s = Source {
                shown: format!("profiles/{name}.toml"),
                text: text.to_string(),
                dir: None,
            };
            parse(&s).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn default_profile_skips_the_parser_and_resolves_the_same() {
        let shell = builtin(DEFAULT_PROFILE).unwrap();
        assert!(
            defaults_only(shell).is_some(),
            "profiles/{DEFAULT_PROFILE}.toml no longer only restates the defaults: \
             extend DEFAULT_LINES (with a test) or accept the parser's cost"
        );
        for opts in [
            Options::default(),
            Options {
                python: None,
                workdir_inner: Some("/home/agent".into()),
            },
        ] {
            let fast = resolve_defaults_only(DEFAULT_PROFILE, &opts).unwrap();
            assert_eq!(
                format!("{fast:?}"),
                format!(
                    "{:?}",
                    resolve_parsed(DEFAULT_PROFILE, "--profile", &opts).unwrap()
                )
            );
        }
        let with_python = Options {
            python: Some("python3".into()),
            workdir_inner: None,
        };
        assert!(resolve_defaults_only(DEFAULT_PROFILE, &with_python).is_none());
        for (name, text) in BUILTIN {
            if defaults_only(text).is_some() {
                let fast = resolve_defaults_only(name, &Options::default()).unwrap();
                let slow = resolve_parsed(name, "--profile", &Options::default()).unwrap();
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{name}");
            }
        }
    }

    #[test]
    fn every_default_line_is_the_default() {
        let base = apply_text("").unwrap();
        for (table, line) in DEFAULT_LINES {
            let text = if table.is_empty() {
                format!("{line}\n")
            } else {
                format!("[{table}]\n{line}\n")
            };
            assert!(defaults_only(&format!("description = \"d\"\n{text}")).is_some());
            let p = apply_text(&text).unwrap();
            assert_eq!(format!("{p:?}"), format!("{base:?}"), "{text}");
        }
    }

    #[test]
    fn anything_else_takes_the_parser() {
        for text in [
            "description = \"d\"\nnetwork = \"host\"\n",
            "description = \"d\"\nsystem = true\n",
            "description = \"d\"\n[filesystem]\nsystem = false\n",
            "description = \"d\"\n[seccomp]\n[seccomp]\n",
            "description = \"d\"\nnetwork = \"none\"\nnetwork = \"none\"\n",
            "description = \"a\\\"b\"\n",
            "description = \"d\" # x\n",
            "description = \"\"\"\nd\n\"\"\"\n",
            "[limits]\ndescription = \"d\"\n",
            "network = \"none\"\n",
            "extends = \"shell\"\ndescription = \"d\"\n",
        ] {
            assert!(defaults_only(text).is_none(), "{text:?}");
        }
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("a\nbc", 0), (1, 1));
        assert_eq!(line_col("a\nbc", 3), (2, 2));
    }
}
