//! `cargo xtask test`: every test the project has, in one command, with one
//! closing summary line `N passed, N failed, N skipped`.
//!
//! 1. `cargo fmt --check` and `cargo clippy -- -D warnings`;
//! 2. `cargo test --workspace` (the integration tests start real jails as
//!    root and as uid 65534 themselves);
//! 3. `cargo xtask vm-test` (cgroup v2 limits inside a small VM);
//! 4. `cargo xtask docker-test` (inside a real Docker engine).
//!
//! A test that cannot run here says `SKIPPED: <test>: <reason>`; skips are
//! counted apart and never as passed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Default, Debug)]
struct Tally {
    passed: u64,
    failed: u64,
    skipped: u64,
    failures: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Run a command, echo its output as it comes, and return (success, lines).
fn run_echo(label: &str, cmd: &mut Command) -> (bool, Vec<String>) {
    eprintln!("\n==> {label}");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xtask: cannot start {label}: {e}");
            return (false, Vec::new());
        }
    };
    let err = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{l}");
            lines.push(l);
        }
        lines
    });
    let mut lines = Vec::new();
    for l in BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        println!("{l}");
        lines.push(l);
    }
    lines.extend(err_thread.join().unwrap_or_default());
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    (ok, lines)
}

/// Sum cargo's `test result:` lines.
fn cargo_counts(lines: &[String], t: &mut Tally) {
    for l in lines {
        let Some(rest) = l.trim().strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let n = |i: usize| {
                words
                    .get(i)
                    .and_then(|w| w.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if part.contains(" passed") {
                t.passed += n(words.len().saturating_sub(2));
            } else if part.contains(" failed") {
                t.failed += n(0);
            }
        }
        if l.contains("FAILED") {
            t.failures.push(l.trim().to_string());
        }
    }
    for l in lines {
        if l.starts_with("test ") && l.ends_with("FAILED") {
            t.failures.push(l.clone());
        }
    }
}

/// Count `<TAG> PASS|FAIL|SKIPPED` lines of a sub-suite.
fn tagged_counts(tag: &str, ok: bool, lines: &[String], t: &mut Tally) {
    let (mut p, mut f, mut s) = (0, 0, 0);
    for l in lines {
        let Some(rest) = l.trim().strip_prefix(tag) else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("PASS") {
            p += 1;
        } else if rest.starts_with("FAIL") {
            f += 1;
            t.failures.push(l.clone());
        } else if rest.starts_with("SKIP") {
            s += 1;
        }
    }
    if !ok && f == 0 {
        // The suite itself broke (build, boot, engine): one failure.
        f = 1;
        t.failures
            .push(format!("{tag}: the suite did not complete"));
    }
    t.passed += p;
    t.failed += f;
    t.skipped += s;
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// Install what the tests need when it is missing (Debian packages as
/// root, rustup components).
fn prepare() {
    let want = [
        ("cc", "gcc libc6-dev"),
        ("python3", "python3"),
        ("tmux", "tmux"),
        ("setpriv", "util-linux"),
        ("bwrap", "bubblewrap"),
        ("busybox", "busybox-static"),
        ("/usr/share/doc/python3-jsonschema", "python3-jsonschema"),
    ];
    let missing: Vec<&str> = want
        .iter()
        .filter(|(c, _)| !have(c))
        .map(|(_, p)| *p)
        .collect();
    if !missing.is_empty() {
        if is_root() {
            eprintln!("xtask: installing {}", missing.join(" "));
            let _ = Command::new("apt-get").arg("update").arg("-q").status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(missing.iter().flat_map(|p| p.split(' ')))
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status();
        } else {
            eprintln!(
                "xtask: missing {} (not root, not installing)",
                missing.join(" ")
            );
        }
    }
    for comp in ["rustfmt", "clippy"] {
        let probe = if comp == "rustfmt" {
            "cargo fmt --version"
        } else {
            "cargo clippy --version"
        };
        if !Command::new("sh")
            .args(["-c", &format!("{probe} >/dev/null 2>&1")])
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
        {
            let _ = Command::new("rustup")
                .args(["component", "add", comp])
                .status();
        }
    }
}

pub fn main(args: &[String]) -> i32 {
    let only_cargo = args.iter().any(|a| a == "--cargo-only");
    prepare();
    let root = root();
    let skip_log = root.join("target").join("stockade-skipped.log");
    let _ = std::fs::create_dir_all(root.join("target"));
    let _ = std::fs::remove_file(&skip_log);
    let mut t = Tally::default();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());

    let (ok, _) = run_echo(
        "cargo fmt --check",
        Command::new(&cargo)
            .current_dir(&root)
            .args(["fmt", "--all", "--", "--check"]),
    );
    if ok {
        t.passed += 1
    } else {
        t.failed += 1;
        t.failures.push("cargo fmt --check".into());
    }
    let (ok, _) = run_echo(
        "cargo clippy -D warnings",
        Command::new(&cargo).current_dir(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    );
    if ok {
        t.passed += 1
    } else {
        t.failed += 1;
        t.failures.push("cargo clippy".into());
    }

    let (ok, lines) = run_echo(
        "cargo test --workspace",
        Command::new(&cargo)
            .current_dir(&root)
            .env("STOCKADE_SKIP_LOG", &skip_log)
            .args(["test", "--workspace", "--", "--test-threads", "4"]),
    );
    let before = t.failed;
    cargo_counts(&lines, &mut t);
    if !ok && t.failed == before {
        t.failed += 1;
        t.failures
            .push("cargo test did not complete (build error?)".into());
    }
    let skipped_cargo = std::fs::read_to_string(&skip_log)
        .map(|s| s.lines().count() as u64)
        .unwrap_or(0);
    // A skipped test returned early and cargo counted it as passed: it is not.
    t.passed = t.passed.saturating_sub(skipped_cargo);
    t.skipped += skipped_cargo;

    if !only_cargo {
        let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask"));
        let (ok, lines) = run_echo(
            "cargo xtask vm-test",
            Command::new(&me).current_dir(&root).arg("vm-test"),
        );
        tagged_counts("VMTEST", ok, &lines, &mut t);
        let (ok, lines) = run_echo(
            "cargo xtask docker-test",
            Command::new(&me).current_dir(&root).arg("docker-test"),
        );
        tagged_counts("DOCKERTEST", ok, &lines, &mut t);
    }

    if let Ok(s) = std::fs::read_to_string(&skip_log) {
        if !s.is_empty() {
            println!("\nSkipped:");
            print!("{s}");
        }
    }
    if !t.failures.is_empty() {
        println!("\nFailures:");
        for f in &t.failures {
            println!("  {f}");
        }
    }
    println!(
        "\n{} passed, {} failed, {} skipped",
        t.passed, t.failed, t.skipped
    );
    if t.failed == 0 {
        0
    } else {
        1
    }
}
