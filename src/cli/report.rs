//! Where a run's JSON outcome goes, and the refusal written there when the
//! run cannot start.

use std::ffi::OsString;
use std::path::PathBuf;

use super::args::RunArgs;
use super::fast::{flag, Takes};
use super::{eprint_line, CliError};
use crate::Status;

/// Where a run's JSON outcome goes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ReportTo {
    /// `--report -`
    stdout: bool,
    /// `--report FILE`
    file: Option<PathBuf>,
    /// `--report-fd N`
    fd: Option<i32>,
}

impl ReportTo {
    pub(super) fn of(a: &RunArgs) -> ReportTo {
        ReportTo {
            stdout: a.report.as_deref() == Some(std::path::Path::new("-")),
            file: a.report.clone().filter(|p| p != std::path::Path::new("-")),
            fd: a.report_fd,
        }
    }

    /// The report flags of a `stockade run …` command line clap refused:
    /// read up to the `--` before the command, skipping the values of the
    /// flags that take one (and stepping over words it does not know).
    pub(super) fn scan(args: &[OsString]) -> ReportTo {
        let mut to = ReportTo::default();
        if args.get(1).and_then(|a| a.to_str()) != Some("run") {
            return to;
        }
        let mut set = |name: &str, v: &std::ffi::OsStr| match name {
            "report" if to.file.is_none() && !to.stdout => {
                if v == "-" {
                    to.stdout = true;
                } else if !v.is_empty() {
                    to.file = Some(PathBuf::from(v));
                }
            }
            "report-fd" if to.fd.is_none() => {
                to.fd = v.to_str().and_then(|v| v.parse().ok());
            }
            _ => {}
        };
        let mut i = 2;
        while let Some(arg) = args.get(i) {
            i += 1;
            let Some(body) = arg.to_str().and_then(|a| a.strip_prefix("--")) else {
                continue;
            };
            if body.is_empty() {
                break;
            }
            if let Some((name, v)) = body.split_once('=') {
                set(name, std::ffi::OsStr::new(v));
                continue;
            }
            if flag(body).is_some_and(|k| RunArgs::FLAGS[k].1 != Takes::Switch) {
                if let Some(v) = args.get(i) {
                    set(body, v);
                }
                i += 1;
            }
        }
        to
    }

    /// Open where the report goes, before anything runs: a bad path or a
    /// closed fd is bad input.
    pub(super) fn open(&self) -> Result<Opened, CliError> {
        let file = match &self.file {
            Some(p) => Some(
                std::fs::File::create(p).map_err(|source| CliError::ReportCreate {
                    path: p.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        if let Some(fd) = self.fd.filter(|fd| !crate::sys::fd_is_open(*fd)) {
            return Err(CliError::ReportFdClosed { fd });
        }
        Ok(Opened {
            file,
            stdout: self.stdout,
            fd: self.fd,
        })
    }
}

/// Where the report goes, opened.
pub(super) struct Opened {
    file: Option<std::fs::File>,
    stdout: bool,
    fd: Option<i32>,
}

impl Opened {
    pub(super) fn wanted(&self) -> bool {
        self.file.is_some() || self.stdout || self.fd.is_some()
    }

    /// Write the report everywhere asked; the first error, worded for the
    /// caller.
    pub(super) fn write(self, json: &str) -> Result<(), CliError> {
        use std::io::Write;
        let mut wrote = Ok(());
        if let Some(mut f) = self.file {
            wrote = f.write_all(json.as_bytes()).map_err(CliError::ReportWrite);
        }
        if self.stdout {
            let mut so = std::io::stdout().lock();
            wrote = wrote.and(
                so.write_all(json.as_bytes())
                    .and_then(|_| so.flush())
                    .map_err(CliError::ReportStdout),
            );
        }
        if let Some(fd) = self.fd {
            wrote = wrote
                .and(crate::sys::write_all(fd, json.as_bytes()).map_err(CliError::ReportFdWrite));
        }
        wrote
    }
}

/// `msg` on stderr and, as a `setup_error` outcome, wherever a report was
/// asked for (a service reading the outcome always gets one); exit 125.
pub(super) fn refuse(to: &ReportTo, msg: &str) -> i32 {
    eprint_line(msg);
    if *to != ReportTo::default() {
        let mut o = crate::Outcome::new();
        o.status = Status::SetupError;
        o.exit_code = 125;
        o.error = Some(msg.to_string());
        // The refusal is already on stderr; a report that cannot be
        // written has nowhere better to go.
        let _ = to.open().and_then(|r| r.write(&(o.to_json() + "\n")));
    }
    125
}
