//! `stockade profile list | show | check`.

use super::args::ProfileCmd;
use super::run::python_reachable;
use super::{eprint_line, CliError};
use crate::policy::profile;

pub(super) fn profile_cmd(pc: ProfileCmd) -> i32 {
    match pc {
        ProfileCmd::List => {
            for (name, text) in profile::BUILTIN {
                let about = text
                    .lines()
                    .find_map(|l| l.strip_prefix("description = "))
                    .map(|d| d.trim_matches('"'))
                    .unwrap_or("");
                let mark = if *name == profile::DEFAULT_PROFILE {
                    " (default)"
                } else {
                    ""
                };
                println!("{name:<8} {about}{mark}");
            }
            0
        }
        ProfileCmd::Show {
            profile: spec,
            python,
        } => {
            let opts = profile::Options {
                python,
                workdir_inner: None,
            };
            match profile::resolve(&spec, "profile show", &opts, &crate::host::python::discover) {
                Ok(r) => {
                    print!("{}", profile::show(&r));
                    0
                }
                Err(e) => {
                    eprint_line(&e.to_string());
                    125
                }
            }
        }
        ProfileCmd::Check { file } => match check_profile(&file) {
            Ok(chain) => {
                println!("{file}: ok ({chain})");
                0
            }
            Err(e) => {
                eprint_line(&e.to_string());
                125
            }
        },
    }
}

/// `stockade profile check`: what `run` checks of a profile before it
/// starts the jail (resolve, the interpreter's reach, the policy, the
/// plan: bind sources, seccomp names, ids), without a command. The chain
/// of files applied, or the one-line error.
fn check_profile(spec: &str) -> Result<String, CliError> {
    let r = profile::resolve(
        spec,
        "profile check",
        &profile::Options::default(),
        &crate::host::python::discover,
    )?;
    let mut p = r.policy.clone();
    python_reachable(&r, &p, false)?;
    p.argv = vec!["true".into()];
    p.validate()?;
    crate::plan::Plan::validate(&p)?;
    Ok(r.chain.join(" <- "))
}
