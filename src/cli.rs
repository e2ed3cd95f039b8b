//! Command line: parse, build the Policy, run, print, exit code.
//!
//! `args` is the definition (clap), `fast` the parser of plain `run`
//! command lines derived from it, `run` the policy from the flags and the
//! run, `report` where the outcome goes, `profile_cmd` the profile
//! subcommands, `docs` the completion scripts and man pages.

#![deny(unsafe_code)]

mod args;
mod docs;
mod fast;
mod learn;
mod overlay;
mod profile_cmd;
mod report;
mod run;
mod session;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::policy::{profile, PolicyError};
use args::{Cli, Cmd};
use report::{refuse, ReportTo};

/// What the command line could not do; the text is the line printed after
/// `stockade: `.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The plan of a profile checked by `stockade profile check`.
    #[error(transparent)]
    Plan(#[from] crate::SetupError),
    #[error("--report: {}: {source}", .path.display())]
    ReportCreate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--report-fd: {fd}: not an open file descriptor")]
    ReportFdClosed { fd: i32 },
    #[error("--report: {0}")]
    ReportWrite(#[source] std::io::Error),
    #[error("--report -: {0}")]
    ReportStdout(#[source] std::io::Error),
    #[error("--report-fd: {0}")]
    ReportFdWrite(#[source] crate::sys::SysError),
}

fn eprint_line(msg: &str) {
    eprintln!("stockade: {msg}");
}

/// Parse and run; return the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    // Started as `bwrap` (a symlink), or `stockade bwrap ARGS…`: bwrap's
    // command line, read raw (clap would not read it as bwrap does).
    // A session's agent and its shell's state report (hidden): first, as
    // the agent's binary may be named anything.
    if args.get(1).is_some_and(|a| a == crate::session::AGENT_ARG) {
        return crate::session::agent_main(&args[2..]);
    }
    if args.get(1).is_some_and(|a| a == crate::session::STATE_ARG) {
        return crate::session::state_main(&args[2..]);
    }
    let argv0 = args.first().map(std::path::Path::new);
    // Or re-run through /proc/self/exe with options first, as a program
    // run by bwrap re-runs bwrap (stockade's own first word is a command).
    let reexec = argv0.is_some_and(|a| a == std::path::Path::new("/proc/self/exe"))
        && args
            .get(1)
            .is_some_and(|a| a.as_encoded_bytes().starts_with(b"-"));
    if reexec
        || argv0
            .and_then(|a| a.file_name())
            .is_some_and(|n| n == "bwrap")
    {
        one_jail();
        return crate::bwrap::main(&args);
    }
    if args.get(1).is_some_and(|a| a == "bwrap") {
        one_jail();
        return bwrap_sub(&args[2..]);
    }
    if let Some((a, mounts)) = fast::parse_run(&args) {
        one_jail();
        return run::run_cmd(&a, &mounts);
    }
    // `stockade man [DIR]` (for `cargo xtask man`) is not a clap
    // subcommand: the completion scripts would offer it, hidden or not.
    if args.get(1).is_some_and(|a| a == "man") {
        return docs::man_cmd(&args[2..]);
    }
    let (cli, matches) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    match cli.cmd {
        Cmd::Run(mut a) => {
            one_jail();
            a.dashdash = fast::dashdash_before_command(&args);
            let sub = matches.subcommand_matches("run");
            run::run_cmd(&a, &sub.map(args::mount_flags).unwrap_or_default())
        }
        Cmd::Session(a) => {
            let sub = matches.subcommand_matches("session");
            session::session_cmd(&a, &sub.map(args::mount_flags).unwrap_or_default())
        }
        Cmd::Profile(pc) => profile_cmd::profile_cmd(pc),
        Cmd::Overlay(oc) => overlay::overlay_cmd(oc),
        Cmd::Completions { shell } => docs::completions(shell),
        Cmd::Check(c) => check_cmd(&c),
        Cmd::Serve(a) => crate::serve::main(*a),
        Cmd::Bwrap { args } => bwrap_sub(&args),
    }
}

/// This process runs one jail and exits: small allocations are cut from
/// a region and never freed (see `sys::arena`; the binary's allocator).
fn one_jail() {
    crate::sys::arena::Arena::on();
}

/// `stockade bwrap ARGS…`, its help naming it so.
fn bwrap_sub(rest: &[OsString]) -> i32 {
    let mut args = vec![OsString::from("stockade bwrap")];
    args.extend_from_slice(rest);
    crate::bwrap::main(&args)
}

/// The command line through clap; on an error, the exit code (after help
/// or version on stdout, or the refusal on stderr and in the report).
fn parse(args: &[OsString]) -> Result<(Cli, ArgMatches), i32> {
    let matches = Cli::command()
        .try_get_matches_from(args)
        .map_err(|e| clap_error(&e, args))?;
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => Ok((cli, matches)),
        Err(e) => Err(refuse(&ReportTo::scan(args), &first_line(&e))),
    }
}

/// What clap refused, said in one line (and as a `setup_error` report
/// where one was asked for); help and version printed as clap words them.
fn clap_error(e: &clap::Error, args: &[OsString]) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            return 0;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return 2;
        }
        _ => {}
    }
    let to = ReportTo::scan(args);
    if e.kind() != ErrorKind::MissingRequiredArgument {
        return refuse(&to, &first_line(e));
    }
    let text = e.to_string();
    let missing: Vec<&str> = text
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.starts_with('<') || l.starts_with("--"))
        .collect();
    if missing.iter().any(|m| m.starts_with("<CMD>")) {
        return refuse(
            &to,
            "no command given (stockade run [OPTIONS] -- CMD [ARGS…])",
        );
    }
    refuse(
        &to,
        &format!("missing required argument: {}", missing.join(", ")),
    )
}

/// The first line of clap's message, without its `error: `.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("invalid arguments");
    first.trim_start_matches("error: ").to_string()
}

/// `stockade check [--profile P] [--json]`.
fn check_cmd(c: &args::CheckArgs) -> i32 {
    let spec = c.profile.as_deref().unwrap_or(profile::DEFAULT_PROFILE);
    let r = match profile::resolve(
        spec,
        "--profile",
        &profile::Options::default(),
        &crate::host::python::discover,
    ) {
        Ok(r) => r,
        Err(e) => {
            eprint_line(&e.to_string());
            return 125;
        }
    };
    let report = crate::check::probe_all();
    let code = crate::check::exit_code(&report, &r.policy.require);
    let text = if c.json {
        crate::check::to_json(&report, spec, &r.policy.require)
    } else {
        crate::check::to_text(&report, spec, &r.policy.require)
    };
    print!("{text}");
    code
}
