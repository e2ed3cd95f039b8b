//! Where the xtasks put what people do not need to read: every step's full
//! output, package installs and the VM's console go to files under
//! `target/xtask-logs/`; the terminal gets one line per step.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workspace root (the xtask lives in `<root>/xtask`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `target/xtask-logs`, relative to the root: how paths are shown.
pub const DIR: &str = "target/xtask-logs";

/// The log file `name` (created with its directory if need be).
pub fn path(name: &str) -> PathBuf {
    let dir = root().join(DIR);
    let _ = fs::create_dir_all(&dir);
    dir.join(name)
}

/// How a log is shown on the terminal: `target/xtask-logs/name`.
pub fn shown(name: &str) -> String {
    format!("{DIR}/{name}")
}

/// Runs `cmd` with its stdout and stderr both going to the log `name`
/// (one file description, so their lines keep their order). `append`
/// keeps what the log already holds. Returns whether it succeeded.
pub fn run_to(name: &str, append: bool, cmd: &mut Command) -> Result<bool, String> {
    let p = path(name);
    let f = OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(&p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let err = f.try_clone().map_err(|e| format!("{}: {e}", p.display()))?;
    let st = cmd
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(err)
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    Ok(st.success())
}

/// Appends a line to the log `name` (a note of what was run).
pub fn note(name: &str, line: &str) {
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path(name))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// A step of `cargo xtask test`: says `==> label ...` when it starts and
/// `ok (…, N s)` or `FAILED (…), log: …` when it ends, on one line.
pub struct Step {
    t0: Instant,
}

impl Step {
    pub fn start(label: &str) -> Step {
        print!("==> {label} ... ");
        let _ = std::io::stdout().flush();
        Step { t0: Instant::now() }
    }

    /// Ends the line; `what` (may be empty) goes in the parentheses, `log`
    /// (as `shown` gives it) is said when the step failed.
    pub fn end(self, ok: bool, what: &str, log: &str) {
        Step::outcome(ok, what, log, self.t0.elapsed().as_secs());
    }

    /// The whole line of a step that ran apart (in the background) and
    /// took `secs`: said when it is counted.
    pub fn ran(label: &str, ok: bool, what: &str, log: &str, secs: u64) {
        print!("==> {label} ... ");
        Step::outcome(ok, what, log, secs);
    }

    fn outcome(ok: bool, what: &str, log: &str, secs: u64) {
        let what = if what.is_empty() {
            format!("{secs} s")
        } else {
            format!("{what}, {secs} s")
        };
        if ok {
            println!("ok ({what})");
        } else {
            println!("FAILED ({what}), log: {log}");
        }
    }
}

/// The log of package installs.
pub const APT_LOG: &str = "apt.log";

/// Installs Debian packages (as root), saying which on one line first;
/// apt-get's output goes to the log `apt.log`.
pub fn apt_install(pkgs: &[&str]) -> Result<(), String> {
    if pkgs.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian packages: {}", pkgs.join(" "));
    apt_update()?;
    let ok = run_to(
        APT_LOG,
        true,
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(pkgs)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "apt-get install {} failed, log: {}",
            pkgs.join(" "),
            shown(APT_LOG)
        ))
    }
}

/// `apt-get update`, once per process, into `apt.log`.
pub fn apt_update() -> Result<(), String> {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().map_err(|_| "apt lock poisoned")?;
    if !*done {
        if !run_to(
            APT_LOG,
            true,
            Command::new("apt-get").args(["update", "-q"]),
        )? {
            return Err(format!("apt-get update failed, log: {}", shown(APT_LOG)));
        }
        *done = true;
    }
    Ok(())
}

/// Whether `cmd` is on the PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// A log file's text (empty when there is none).
pub fn read(name: &str) -> String {
    fs::read(path(name))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// An empty log `name`, ready to be appended to.
pub fn fresh(name: &str) -> Result<File, String> {
    let p = path(name);
    File::create(&p).map_err(|e| format!("{}: {e}", p.display()))
}
