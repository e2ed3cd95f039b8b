//! Completion scripts and man pages, from the command line's own
//! definition.

use std::ffi::OsString;
use std::path::Path;

use clap::CommandFactory;

use super::args::Cli;
use super::eprint_line;

/// `stockade completions SHELL`.
pub(super) fn completions(shell: clap_complete::Shell) -> i32 {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "stockade", &mut out);
    print_out(&out)
}

/// `stockade man [DIR]`, given what follows `man`.
pub(super) fn man_cmd(rest: &[OsString]) -> i32 {
    match rest {
        [] => man(None),
        [dir] => man(Some(Path::new(dir))),
        _ => {
            eprint_line("usage: stockade man [DIR]");
            2
        }
    }
}

/// Write `bytes` on stdout: 0, or 1 with a line saying why not.
fn print_out(bytes: &[u8]) -> i32 {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|_| so.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprint_line(&format!("stdout: {e}"));
            1
        }
    }
}

/// The man pages: stockade.1 on stdout, or every page (stockade.1,
/// stockade-run.1, …) into `dir`.
fn man(dir: Option<&Path>) -> i32 {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let mut out = Vec::new();
        if let Err(e) = clap_mangen::Man::new(cmd).render(&mut out) {
            eprint_line(&format!("man: {e}"));
            return 1;
        }
        return print_out(&out);
    };
    match clap_mangen::generate_to(cmd, dir) {
        Ok(()) => 0,
        Err(e) => {
            eprint_line(&format!("man: {}: {e}", dir.display()));
            1
        }
    }
}
