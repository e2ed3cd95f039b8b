//! One profile file's values checked where they stand: `${NAME}`
//! expansion, paths, sizes, durations, counts, modes; errors as
//! `file:line:col: field: why`.

use std::path::{Path, PathBuf};

use super::schema::{Scalar, S};
use super::source::line_col;
use super::Source;
use crate::policy::python::Interpreter;
use crate::policy::{units, PathError, PolicyError, Reason};

/// Errors inside one source file.
pub(super) struct Ctx<'a> {
    pub(super) src: &'a Source,
    pub(super) vars: &'a Vars,
}

impl Ctx<'_> {
    /// `field`, at `span` of this file, refused for `reason`.
    pub(super) fn err(
        &self,
        span: std::ops::Range<usize>,
        field: &str,
        reason: impl Into<Reason>,
    ) -> PolicyError {
        let (l, c) = line_col(&self.src.text, span.start);
        PolicyError::Field {
            at: format!("{}:{l}:{c}", self.src.shown),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// Expand `${NAME}` variables (and `$$` to `$`) in a string value.
    pub(super) fn expand(&self, v: &S<String>, field: &str) -> Result<String, PolicyError> {
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

    pub(super) fn jail_path(&self, v: &S<String>, field: &str) -> Result<PathBuf, PolicyError> {
        let s = self.expand(v, field)?;
        crate::policy::check_jail_path(Path::new(&s)).map_err(|e| self.err(v.span(), field, e))
    }

    pub(super) fn host_path(&self, v: &S<String>, field: &str) -> Result<PathBuf, PolicyError> {
        let s = self.expand(v, field)?;
        if s.is_empty() {
            return Err(self.err(v.span(), field, PathError::Empty));
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
        crate::policy::check_host_path(&p).map_err(|e| self.err(v.span(), field, e))
    }

    pub(super) fn size(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
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
    pub(super) fn limit_size(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
        match self.size(v, field)? {
            0 => Err(self.zero(v, field)),
            n => Ok(n),
        }
    }

    /// A time limit: above 0.
    pub(super) fn limit_duration(
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

    pub(super) fn zero(&self, v: &S<Scalar>, field: &str) -> PolicyError {
        self.err(
            v.span(),
            field,
            format!(
                "{}: must be greater than 0 (leave the limit out for none)",
                v.get_ref().shown()
            ),
        )
    }

    pub(super) fn count(&self, v: &S<Scalar>, field: &str) -> Result<u64, PolicyError> {
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

    pub(super) fn duration(
        &self,
        v: &S<Scalar>,
        field: &str,
    ) -> Result<std::time::Duration, PolicyError> {
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

    pub(super) fn mode(
        &self,
        v: &Option<S<String>>,
        field: &str,
        default: u32,
    ) -> Result<u32, PolicyError> {
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
pub(super) struct Vars {
    pub(super) workdir: PathBuf,
    pub(super) profile_dir: Option<PathBuf>,
    pub(super) python: Option<Interpreter>,
}

/// Why `${NAME}` has no value.
#[derive(Debug, thiserror::Error)]
pub(super) enum VarError {
    #[error("${0} is not set in stockade's environment")]
    Unset(&'static str),
    #[error("only defined when the profile discovers Python ([python] enabled = true)")]
    NoPython,
    #[error("cannot read the current directory: {0}")]
    NoCurrentDir(std::io::Error),
    #[error("a built-in profile has no directory")]
    BuiltinHasNoDir,
    #[error("unknown variable (WORKDIR, HOME, USER, PWD, PROFILE_DIR, PYTHON, PYTHON_PREFIX, PYTHON_BASE_PREFIX)")]
    Unknown,
}

impl Vars {
    pub(super) fn get(&self, name: &str) -> Result<String, VarError> {
        let env = |k: &'static str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or(VarError::Unset(k))
        };
        let py = |f: fn(&Interpreter) -> &Path| {
            self.python
                .as_ref()
                .map(|i| f(i).display().to_string())
                .ok_or(VarError::NoPython)
        };
        match name {
            "WORKDIR" => Ok(self.workdir.display().to_string()),
            "HOME" => env("HOME"),
            "USER" => env("USER"),
            "PWD" => std::env::current_dir()
                .map(|d| d.display().to_string())
                .map_err(VarError::NoCurrentDir),
            "PROFILE_DIR" => self
                .profile_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .ok_or(VarError::BuiltinHasNoDir),
            "PYTHON" => py(|i| &i.executable),
            "PYTHON_PREFIX" => py(|i| &i.prefix),
            "PYTHON_BASE_PREFIX" => py(|i| &i.base_prefix),
            _ => Err(VarError::Unknown),
        }
    }
}
