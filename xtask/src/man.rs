//! `cargo xtask man`: the man pages, written into `target/man` (or
//! `$CARGO_TARGET_DIR/man`) by the stockade binary itself (its hidden `man
//! DIR` subcommand renders the command line's own definition with
//! clap_mangen, so the pages and `--help` have one source).

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn main(args: &[String]) -> i32 {
    if !args.is_empty() {
        eprintln!(
            "usage: cargo xtask man   (writes target/man/stockade.1 and one page per subcommand)"
        );
        return 2;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf();
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| root.join(t))
        .unwrap_or_else(|| root.join("target"))
        .join("man");
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("xtask man: {}: {e}", out.display());
        return 1;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let st = Command::new(cargo)
        .args([
            "run", "--quiet", "-p", "stockade", "--bin", "stockade", "--", "man",
        ])
        .arg(&out)
        .current_dir(&root)
        .status();
    match st {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("xtask man: stockade man {}: {s}", out.display());
            return 1;
        }
        Err(e) => {
            eprintln!("xtask man: cannot run cargo: {e}");
            return 1;
        }
    }
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&out)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    pages.retain(|p| p.extension().is_some_and(|x| x == "1"));
    pages.sort();
    for p in &pages {
        println!("{}", p.display());
    }
    0
}
