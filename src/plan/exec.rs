//! The plan's command: what execve gets (the arguments, the environment,
//! the paths to try), where it starts, and what the payload does just
//! before it (the workdir's first files, a zygote's hand-off).

#![deny(unsafe_code)]

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::mode::Kind;
use super::SetupError;
use crate::policy::Policy;

/// The command the payload execs, and where.
#[derive(Debug, Clone)]
pub struct Exec {
    /// Paths to try for execve, in order.
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// The command as the user typed it, for messages.
    pub command: String,
    pub cwd: PathBuf,
    /// Where to start when `cwd` cannot be entered, in order, each with
    /// its environment (`PWD` set to it): `Compat::chdir_fallbacks`.
    pub cwd_fallbacks: Vec<(PathBuf, Vec<CString>)>,
    /// The workdir as the payload sees it, and the files the payload step
    /// writes into it before the command starts (`Workdir::files`).
    pub seed: Option<(PathBuf, Vec<crate::policy::SeedFile>)>,
    /// The payload is a fork server's zygote (`Policy::zygote`), never in
    /// the fallback.
    pub zygote: bool,
}

impl Exec {
    /// The command of `p` with the environment `env`, started in `cwd`;
    /// `work`: the fallback's workdir on the host (where the seed goes).
    pub(super) fn of(
        p: &Policy,
        env: &[(OsString, OsString)],
        cwd: PathBuf,
        work: Option<&Path>,
        kind: Kind,
    ) -> Result<Exec, SetupError> {
        let (argv, envp, candidates) = execve_args(p, env)?;
        let cwd_fallbacks = cwd_fallbacks(p, env)?;
        let seed = (!p.workdir.files.is_empty()).then(|| {
            let dir = match work {
                Some(w) => w.to_path_buf(),
                None => p.workdir.inner.clone(),
            };
            (dir, p.workdir.files.clone())
        });
        Ok(Exec {
            candidates,
            argv,
            envp,
            command: p.argv[0].to_string_lossy().into_owned(),
            cwd,
            cwd_fallbacks,
            seed,
            zygote: match kind {
                Kind::Namespaced => p.zygote,
                Kind::Fallback => false,
            },
        })
    }
}

/// What execve gets: the arguments, the environment, and the paths to try.
type Args = (Vec<CString>, Vec<CString>, Vec<CString>);

fn execve_args(p: &Policy, env: &[(OsString, OsString)]) -> Result<Args, SetupError> {
    let argv: Vec<CString> = p
        .argv
        .iter()
        .map(|a| cstr("command", a.as_bytes()))
        .collect::<Result<_, _>>()?;
    let envp = envp(env)?;
    let cmd = p.argv[0].as_bytes();
    let candidates = if cmd.contains(&b'/') {
        vec![argv[0].clone()]
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_bytes())
            .unwrap_or_default();
        on_path(cmd, path)?
    };
    let mut argv = argv;
    if let Some(a0) = &p.compat.argv0 {
        argv[0] = cstr("argv0", a0.as_bytes())?;
    }
    Ok((argv, envp, candidates))
}

fn envp(env: &[(OsString, OsString)]) -> Result<Vec<CString>, SetupError> {
    env.iter()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            cstr("env", &b)
        })
        .collect()
}

fn cstr(origin: &str, b: &[u8]) -> Result<CString, SetupError> {
    CString::new(b)
        .map_err(|_| SetupError::new(origin, String::from_utf8_lossy(b), "contains a NUL byte"))
}

/// Each of `Compat::chdir_fallbacks` with the environment execve gets
/// there: `env` with `PWD` set to it.
fn cwd_fallbacks(
    p: &Policy,
    env: &[(OsString, OsString)],
) -> Result<Vec<(PathBuf, Vec<CString>)>, SetupError> {
    let mut out = Vec::new();
    for dir in &p.compat.chdir_fallbacks {
        let mut e = env.to_vec();
        crate::policy::set_env(&mut e, "PWD".into(), dir.clone().into_os_string());
        out.push((dir.clone(), execve_args(p, &e)?.1));
    }
    Ok(out)
}

/// `cmd` in each absolute directory of `path`, in order, once each.
fn on_path(cmd: &[u8], path: &[u8]) -> Result<Vec<CString>, SetupError> {
    let mut c = Vec::new();
    for dir in path.split(|b| *b == b':') {
        if dir.first() != Some(&b'/') {
            continue;
        }
        let mut full = dir.to_vec();
        if full.last() != Some(&b'/') {
            full.push(b'/');
        }
        full.extend_from_slice(cmd);
        let full = cstr("command", &full)?;
        if !c.contains(&full) {
            c.push(full);
        }
    }
    Ok(c)
}
