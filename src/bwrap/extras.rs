//! stockade's own layers in bwrap mode, off unless asked for: by
//! `STOCKADE_PROFILE=NAME|PATH` (a profile's Landlock, seccomp allowlist,
//! limits and required layers; not its filesystem, environment or network,
//! which the bwrap ops decide) or by `--stockade-*` options among bwrap's
//! own (before the command; not inside `--args FD`):
//! `--stockade-profile NAME|PATH` (over `STOCKADE_PROFILE`),
//! `--stockade-memory SIZE`, `--stockade-pids N`, `--stockade-cpus N`,
//! `--stockade-timeout DURATION`, `--stockade-report FILE` (the JSON
//! outcome), `--stockade-landlock` (Landlock from the ops' mounts),
//! `--stockade-seccomp` (stockade's default allowlist).

use std::ffi::OsString;
use std::path::PathBuf;

use super::BwrapError;
use crate::policy::{units, Policy};

/// The `--stockade-*` options, each with how many words follow it.
const OPTIONS: &[(&str, usize)] = &[
    ("--stockade-profile", 1),
    ("--stockade-memory", 1),
    ("--stockade-pids", 1),
    ("--stockade-cpus", 1),
    ("--stockade-timeout", 1),
    ("--stockade-report", 1),
    ("--stockade-landlock", 0),
    ("--stockade-seccomp", 0),
];

/// What was asked for, in the order given (a later one wins).
#[derive(Debug, Default)]
pub(super) struct Extras {
    /// (origin, profile), origin naming where it came from.
    profile: Option<(&'static str, String)>,
    opts: Vec<(&'static str, OsString)>,
    /// `--stockade-report`'s file.
    pub report: Option<PathBuf>,
}

/// bwrap's own arguments (the `--stockade-*` options taken out) and the
/// extras; `profile_env`: `STOCKADE_PROFILE`'s value.
pub(super) fn split(
    args: &[OsString],
    profile_env: Option<OsString>,
) -> Result<(Vec<OsString>, Extras), BwrapError> {
    let mut x = Extras::default();
    if let Some(p) = profile_env.filter(|p| !p.is_empty()) {
        x.profile = Some(("STOCKADE_PROFILE", p.to_string_lossy().into_owned()));
    }
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let w = args[i].to_string_lossy();
        if let Some(&(opt, n)) = OPTIONS.iter().find(|(o, _)| *o == w) {
            let Some(v) = args.get(i + 1).filter(|_| n == 1) else {
                if n == 1 {
                    return Err(BwrapError::Usage(format!("{opt} takes an argument")));
                }
                x.opts.push((opt, OsString::new()));
                i += 1;
                continue;
            };
            x.take(opt, v)?;
            i += 2;
            continue;
        }
        if w.starts_with("--stockade-") {
            return Err(BwrapError::UnknownOption(w.into_owned()));
        }
        // bwrap's option with its words, or the command from here on.
        let n = match super::parse::OPTIONS.iter().find(|(o, _)| *o == w) {
            Some((_, n)) if w != "--" => *n,
            _ => {
                out.extend_from_slice(&args[i..]);
                break;
            }
        };
        let end = (i + 1 + n).min(args.len());
        out.extend_from_slice(&args[i..end]);
        i = end;
    }
    Ok((out, x))
}

impl Extras {
    /// One option with its word, checked now.
    fn take(&mut self, opt: &'static str, v: &OsString) -> Result<(), BwrapError> {
        let s = v.to_string_lossy();
        let bad = |e: &dyn std::fmt::Display| BwrapError::Usage(format!("{opt}: {e}"));
        match opt {
            "--stockade-profile" => {
                self.profile = Some((opt, s.into_owned()));
                return Ok(());
            }
            "--stockade-report" if s.is_empty() => return Err(bad(&"takes a file name")),
            "--stockade-report" => {
                self.report = Some(PathBuf::from(v));
                return Ok(());
            }
            "--stockade-memory" => units::parse_limit_size(&s).map(drop).map_err(|e| bad(&e))?,
            "--stockade-pids" => units::parse_count(&s).map(drop).map_err(|e| bad(&e))?,
            "--stockade-cpus" => units::parse_cpus(&s).map(drop).map_err(|e| bad(&e))?,
            _ => units::parse_limit_duration(&s)
                .map(drop)
                .map_err(|e| bad(&e))?,
        }
        self.opts.push((opt, v.clone()));
        Ok(())
    }

    /// The extras onto the bwrap policy: the profile first, then the
    /// options over it.
    pub(super) fn apply(&self, p: &mut Policy) -> Result<(), BwrapError> {
        if let Some((origin, spec)) = &self.profile {
            let opts = crate::policy::profile::Options::default();
            let r = crate::policy::profile::resolve(
                spec,
                origin,
                &opts,
                &crate::host::python::discover,
            )?
            .policy;
            p.landlock = r.landlock;
            p.seccomp = r.seccomp;
            p.limits = r.limits;
            for l in r.require {
                if !p.require.contains(&l) {
                    p.require.push(l);
                }
            }
        }
        for (opt, v) in &self.opts {
            let s = v.to_string_lossy();
            let l = &mut p.limits;
            // Checked in `take`.
            match *opt {
                "--stockade-landlock" => p.landlock.disabled = false,
                "--stockade-seccomp" => p.seccomp.enabled = true,
                "--stockade-memory" => l.memory = units::parse_limit_size(&s).ok(),
                "--stockade-pids" => l.pids = units::parse_count(&s).ok(),
                "--stockade-cpus" => l.cpus = units::parse_cpus(&s).ok(),
                _ => l.timeout = units::parse_limit_duration(&s).ok(),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn stockade_options_come_out_of_bwraps_and_the_command_stays() {
        let (rest, x) = split(
            &w(&[
                "--ro-bind",
                "/usr",
                "/usr",
                "--stockade-memory",
                "64m",
                "--stockade-seccomp",
                "--setenv",
                "--stockade-pids",
                "x",
                "sh",
                "--stockade-pids",
                "3",
            ]),
            Some("python".into()),
        )
        .unwrap();
        assert_eq!(
            rest,
            w(&[
                "--ro-bind",
                "/usr",
                "/usr",
                "--setenv",
                "--stockade-pids",
                "x",
                "sh",
                "--stockade-pids",
                "3"
            ])
        );
        assert_eq!(x.profile, Some(("STOCKADE_PROFILE", "python".into())));
        let mut p = Policy::with_defaults(vec!["x".into()]);
        p.seccomp.enabled = false;
        x.apply(&mut p).unwrap();
        assert!(p.seccomp.enabled);
        assert_eq!(p.limits.memory, Some(64 << 20));
    }

    #[test]
    fn bad_values_are_one_line_errors_naming_the_option() {
        let e = |v: &[&str]| split(&w(v), None).unwrap_err().to_string();
        assert_eq!(
            e(&["--stockade-memory"]),
            "--stockade-memory takes an argument"
        );
        assert!(e(&["--stockade-memory", "lots", "true"]).starts_with("--stockade-memory: "));
        assert!(e(&["--stockade-pids", "0", "true"]).starts_with("--stockade-pids: "));
        assert!(e(&["--stockade-cpus", "-1", "true"]).starts_with("--stockade-cpus: "));
        assert!(e(&["--stockade-timeout", "soon", "true"]).starts_with("--stockade-timeout: "));
        assert_eq!(
            e(&["--stockade-nope", "true"]),
            "Unknown option --stockade-nope"
        );
        let (_, x) = split(
            &w(&["--stockade-profile", "/nonexistent.toml", "true"]),
            None,
        )
        .unwrap();
        let mut p = Policy::with_defaults(vec!["x".into()]);
        let err = x.apply(&mut p).unwrap_err().to_string();
        assert!(err.contains("--stockade-profile"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
