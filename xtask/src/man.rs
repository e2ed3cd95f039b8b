//! `cargo xtask man`: the man pages and the shell completion scripts,
//! written into `target/man` (or `$CARGO_TARGET_DIR/man`; the scripts in
//! its `completions/`) by the stockade binary itself: its hidden `man DIR`
//! subcommand renders the command line's own definition with clap_mangen,
//! and `completions SHELL` with clap_complete, so the pages, the scripts
//! and `--help` have one source.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each shell `stockade completions` knows, and the file name its
/// completion directory expects.
pub const COMPLETIONS: &[(&str, &str)] = &[
    ("bash", "stockade.bash"),
    ("zsh", "_stockade"),
    ("fish", "stockade.fish"),
    ("elvish", "stockade.elv"),
    ("powershell", "_stockade.ps1"),
];

pub fn main(args: &[String]) -> i32 {
    if !args.is_empty() {
        eprintln!(
            "usage: cargo xtask man   (writes target/man/stockade.1, one page per subcommand, and target/man/completions/)"
        );
        return 2;
    }
    let root = crate::logs::root();
    let target = crate::binaries::target_dir(&root);
    let out = target.join("man");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--quiet", "-p", "stockade", "--bin", "stockade"])
        .current_dir(&root)
        .status();
    match st {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("xtask man: cargo build -p stockade: {s}");
            return 1;
        }
        Err(e) => {
            eprintln!("xtask man: cannot run cargo: {e}");
            return 1;
        }
    }
    let bin = target.join("debug/stockade");
    match write(&bin, &out, &out.join("completions")) {
        Ok(files) => {
            for p in files {
                println!("{}", p.display());
            }
            0
        }
        Err(e) => {
            eprintln!("xtask man: {e}");
            1
        }
    }
}

/// Asks `bin` for its man pages (into `pages`) and its completion scripts
/// (into `completions`); returns the files written, sorted.
pub fn write(bin: &Path, pages: &Path, completions: &Path) -> Result<Vec<PathBuf>, String> {
    for d in [pages, completions] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let st = Command::new(bin)
        .arg("man")
        .arg(pages)
        .status()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !st.success() {
        return Err(format!("{} man {}: {st}", bin.display(), pages.display()));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(pages)
        .map_err(|e| format!("{}: {e}", pages.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .collect();
    for (shell, name) in COMPLETIONS {
        let o = Command::new(bin)
            .args(["completions", shell])
            .output()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        if !o.status.success() || o.stdout.is_empty() {
            return Err(format!(
                "{} completions {shell}: {}: {}",
                bin.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        let f = completions.join(name);
        std::fs::write(&f, &o.stdout).map_err(|e| format!("{}: {e}", f.display()))?;
        files.push(f);
    }
    files.sort();
    Ok(files)
}
