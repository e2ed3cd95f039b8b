//! Profiles: TOML files that describe a jail, shipped in `profiles/` (embedded
//! in the binary) or loaded from a path. A profile may `extends` another; the
//! chain is applied base first onto the built-in defaults, then the CLI flags
//! go on top.
//!
//! Every error is one line that names the file, line, column and field:
//! `profiles/x.toml:12:3: limits.memory: "12q" is not a size`.

#![deny(unsafe_code)]

mod apply;
mod context;
mod defaults;
mod schema;
mod show;
mod source;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::PathBuf;

use super::python::{self, Discover, Interpreter};
use super::{Policy, PolicyError};
use context::{Ctx, Vars};
use defaults::resolve_defaults_only;
pub use show::show;
pub(crate) use source::builtin_names;
pub use source::{builtin, load};

/// The profiles shipped with stockade, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("minimal", include_str!("../../profiles/minimal.toml")),
    ("shell", include_str!("../../profiles/shell.toml")),
    ("python", include_str!("../../profiles/python.toml")),
    ("strict", include_str!("../../profiles/strict.toml")),
];

/// The profile `stockade run` uses without `--profile`.
pub const DEFAULT_PROFILE: &str = "shell";

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

/// Resolve `spec` (a built-in name or a path) into a policy. `origin`
/// names the flag that chose it, for errors about the choice itself.
/// `discover` finds the interpreter when the profile (or `--python`) asks
/// for one; it is called at most once.
pub fn resolve(
    spec: &str,
    origin: &str,
    opts: &Options,
    discover: &Discover,
) -> Result<Resolved, PolicyError> {
    match resolve_defaults_only(spec, opts) {
        Some(r) => Ok(r),
        None => resolve_parsed(spec, origin, opts, discover),
    }
}

/// [`resolve`] through the TOML parser: the chain of files, what they
/// decide first (the interpreter, the workdir's path), then each file
/// applied in turn, base first.
fn resolve_parsed(
    spec: &str,
    origin: &str,
    opts: &Options,
    discover: &Discover,
) -> Result<Resolved, PolicyError> {
    let layers = source::chain(spec, origin)?;
    let pre = Prelude::read(&layers, opts)?;
    let interpreter = pre.interpreter(opts, discover)?;
    let mut p = Policy::with_defaults(Vec::new());
    p.workdir.inner = pre.workdir_inner.clone();
    p.env = crate::policy::default_env(&pre.workdir_inner);
    let applied = apply_layers(&layers, &pre.workdir_inner, &interpreter, &mut p)?;
    if let Some(w) = &opts.workdir_inner {
        p.workdir.inner = w.clone();
    }
    // The interpreter's binds go first, so that a profile can still cover
    // part of them.
    let mut mounts = Vec::new();
    if let Some(i) = &interpreter {
        mounts.extend(python::mounts(i, applied.system_root));
        interpreter_first_on_path(&mut p, i);
    }
    mounts.extend(applied.mounts);
    p.mounts = mounts;
    apply_system_root(&mut p, applied.system_root)?;
    Ok(Resolved {
        policy: p,
        chain: applied.chain,
        description: applied.description,
        python: interpreter,
        system_root: applied.system_root,
    })
}

/// What the files of a chain decide before the rest of them can be read:
/// whether Python is discovered and which interpreter (with where that was
/// said), and the workdir's path inside (`${WORKDIR}`).
struct Prelude {
    python_on: bool,
    interpreter: Option<(String, PathBuf)>,
    workdir_inner: PathBuf,
}

impl Prelude {
    fn read(layers: &[(Source, schema::Raw)], opts: &Options) -> Result<Prelude, PolicyError> {
        let mut pre = Prelude {
            python_on: opts.python.is_some(),
            interpreter: None,
            workdir_inner: PathBuf::from(crate::policy::DEFAULT_WORKDIR),
        };
        for (src, raw) in layers {
            let vars = Vars {
                workdir: pre.workdir_inner.clone(),
                profile_dir: src.dir.clone(),
                python: None,
            };
            let cx = Ctx { src, vars: &vars };
            if let Some(py) = &raw.python {
                if let Some(e) = &py.enabled {
                    pre.python_on = *e.get_ref();
                }
                if let Some(i) = &py.interpreter {
                    let (l, c) = source::line_col(&src.text, i.span().start);
                    let s = cx.expand(i, "python.interpreter")?;
                    pre.interpreter = Some((
                        format!("{}:{l}:{c}: python.interpreter", src.shown),
                        s.into(),
                    ));
                }
            }
            if let Some(w) = raw.workdir.as_ref().and_then(|w| w.path.as_ref()) {
                pre.workdir_inner = cx.jail_path(w, "workdir.path")?;
            }
        }
        if let Some(w) = &opts.workdir_inner {
            pre.workdir_inner = w.clone();
        }
        Ok(pre)
    }

    /// The interpreter, when the chain (or `--python`) discovers one.
    fn interpreter(
        &self,
        opts: &Options,
        discover: &Discover,
    ) -> Result<Option<Interpreter>, PolicyError> {
        if !self.python_on {
            return Ok(None);
        }
        let (origin, path) = match &opts.python {
            Some(p) => ("--python".to_string(), p.clone()),
            None => self
                .interpreter
                .clone()
                .unwrap_or_else(|| ("python".into(), PathBuf::from("python3"))),
        };
        let i = discover(&path).map_err(|e| PolicyError::value(origin, e))?;
        Ok(Some(i))
    }
}

/// What applying the files gave besides the policy's own fields.
struct Applied {
    /// The mounts the files ask for, in order.
    mounts: Vec<crate::policy::MountSpec>,
    system_root: bool,
    description: Option<String>,
    /// The files applied, base first.
    chain: Vec<String>,
}

/// Each file of the chain onto `p`, base first.
fn apply_layers(
    layers: &[(Source, schema::Raw)],
    workdir_inner: &std::path::Path,
    interpreter: &Option<Interpreter>,
    p: &mut Policy,
) -> Result<Applied, PolicyError> {
    let mut out = Applied {
        mounts: Vec::new(),
        system_root: true,
        description: None,
        chain: Vec::new(),
    };
    for (src, raw) in layers {
        let vars = Vars {
            workdir: workdir_inner.to_path_buf(),
            profile_dir: src.dir.clone(),
            python: interpreter.clone(),
        };
        let cx = Ctx { src, vars: &vars };
        apply::apply(&cx, raw, p, &mut out.mounts, &mut out.system_root)?;
        if let Some(d) = &raw.description {
            out.description = Some(d.get_ref().clone());
        }
        out.chain.push(src.shown.clone());
    }
    Ok(out)
}

/// The interpreter's directory first on the jail's PATH, so that `python3`
/// inside is the interpreter that was discovered.
fn interpreter_first_on_path(p: &mut Policy, i: &Interpreter) {
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
    crate::policy::set_env(&mut p.env, "PATH".into(), path);
}

/// Apply `filesystem.system` to a policy. `false` leaves out the host's
/// /usr, /bin, /lib* and /etc files (the jail holds only what is named).
pub fn apply_system_root(p: &mut Policy, on: bool) -> Result<(), PolicyError> {
    p.base = if on {
        crate::policy::BaseRoot::System
    } else {
        crate::policy::BaseRoot::Empty
    };
    Ok(())
}
