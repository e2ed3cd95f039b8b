//! Every shell and Python example in README.md, SECURITY.md,
//! CONTRIBUTING.md and docs/ runs, each as a test of its own named after
//! where it is (`docs/guides/agents.md:20`), in a fresh directory with
//! `stockade` on PATH, as root and as uid 65534.
//!
//! A fence's info string says what it is:
//!
//! - `sh example`, `python example`: run here (`sh -e`, `python3`);
//! - `python package-example`: run by tests/python_integrations.rs, in a
//!   venv with the Python package installed;
//! - `sh setup`: README's set-up commands: each `cargo run --release --`
//!   line runs here with the test build of `stockade` in its place, and the
//!   test command must be the one `.ci/run` runs;
//! - `rust doctest FILE`: a copy, line for line, of a doc-test of FILE
//!   (which `cargo test` runs);
//! - `LANG no-run REASON`: cannot run here (a cluster, a systemd unit, a
//!   path of the reader's): counted as skipped, with a `SKIPPED:` line
//!   giving REASON, never as passed.
//!
//! A `sh`, `bash`, `console`, `python` or `rust` fence that says none of
//! these, or a fence with no language at all, fails its test: no example goes
//! unchecked by being left untagged. Beside the examples: every relative
//! link resolves (`links_resolve`), and every flag of `stockade run`,
//! `session` and `serve` is named in docs/reference/cli.md
//! (`cli_reference_names_every_flag`). `STOCKADE_DOCS` names other files to
//! read instead (space-separated, relative to the repository), to check
//! text before merging.

mod common;

use common::{Scratch, Who};
use libtest_mimic::{Arguments, Failed, Trial};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The skips, printed (and logged) once every test has ended: this
/// harness does not capture a test's output, so a line printed while the
/// tests run would break the `test NAME ... ok` lines the tally reads.
static SKIPS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn skip(name: &str, why: &str) {
    SKIPS
        .lock()
        .unwrap()
        .push((name.to_string(), why.to_string()));
}

/// Who runs the examples: root and uid 65534, or (not root) only the
/// latter, and the test is then a skip.
fn users(name: &str) -> Vec<Who> {
    if common::is_root() {
        vec![Who::Root, Who::Nobody]
    } else {
        skip(
            name,
            "not running as root: cannot also run the example as uid 65534 and as root",
        );
        vec![Who::Nobody]
    }
}

/// The languages whose fences must say how they are checked.
const RUNNABLE: &[&str] = &["sh", "bash", "shell", "console", "python", "py", "pycon"];

/// One fenced block.
struct Block {
    /// `docs/guides/agents.md:20` (the fence's line).
    name: String,
    info: String,
    code: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files read, relative to the repository.
fn files() -> Vec<String> {
    if let Ok(v) = std::env::var("STOCKADE_DOCS") {
        return v.split_whitespace().map(str::to_string).collect();
    }
    let mut out: Vec<String> = ["README.md", "SECURITY.md", "CONTRIBUTING.md"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut stack = vec![root().join("docs")];
    let mut found = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                found.push(p.strip_prefix(root()).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    out.extend(found);
    out
}

/// The fenced blocks of `text` (from `file`), in order.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut cur: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        match &mut cur {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    cur = Some(Block {
                        name: format!("{file}:{}", i + 1),
                        info: info.trim().to_string(),
                        code: String::new(),
                    });
                }
            }
            Some(b) => {
                if t.starts_with("```") && t.trim_start_matches('`').trim().is_empty() {
                    out.push(cur.take().unwrap());
                } else {
                    b.code.push_str(l);
                    b.code.push('\n');
                }
            }
        }
    }
    if let Some(b) = cur {
        out.push(Block {
            info: "unclosed".into(),
            ..b
        });
    }
    out
}

/// What a block asks of this test.
enum Check {
    Run(&'static str),
    Setup,
    /// A copy of a doc-test of this file, which cargo test runs.
    Doctest(String),
    Skip(String),
    Elsewhere,
    Nothing,
    Bad(String),
}

fn check_of(b: &Block) -> Check {
    let mut w = b.info.split_whitespace();
    let (lang, tag) = (w.next(), w.next());
    let rest: Vec<&str> = w.collect();
    match (lang, tag) {
        (Some("unclosed"), None) => Check::Bad("this fence is not closed".into()),
        (None, _) => Check::Bad(
            "a fence without a language: name one (`sh example`, `text`, `toml`, …)".into(),
        ),
        (Some("sh"), Some("example")) => Check::Run("sh"),
        (Some("python"), Some("example")) => Check::Run("python"),
        (Some("python"), Some("package-example")) => Check::Elsewhere,
        (Some("sh"), Some("setup")) => Check::Setup,
        (Some("rust"), Some("doctest")) if rest.len() == 1 => Check::Doctest(rest[0].to_string()),
        (Some("rust"), _) => Check::Bad(
            "a `rust` fence must name the doc-test it copies: `rust doctest src/FILE.rs`".into(),
        ),
        (Some(_), Some("no-run")) if !rest.is_empty() => Check::Skip(rest.join(" ")),
        (Some(l), t) if RUNNABLE.contains(&l) => Check::Bad(format!(
            "a `{l}` fence must say how it is checked: `{l} example`, or `{l} no-run REASON` (it says {:?})",
            t.unwrap_or("nothing")
        )),
        _ => Check::Nothing,
    }
}

/// Run `code` with `interp` in a fresh directory, as root and as uid
/// 65534 (only the latter when not root).
fn run(name: &str, interp: &str, code: &str) -> Result<(), Failed> {
    let bindir = common::binary().parent().unwrap().display().to_string();
    for who in users(name) {
        let s = Scratch::new("docs").world_writable();
        let (file, argv): (&str, &[&str]) = match interp {
            "sh" => ("example.sh", &["sh", "-e"]),
            _ => ("example.py", &["python3"]),
        };
        let f = s.join(file);
        std::fs::write(&f, code).unwrap();
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]).arg(&f);
        c.env_clear()
            .env("PATH", format!("{bindir}:/usr/local/bin:/usr/bin:/bin"))
            .env("HOME", s.path())
            .env("LANG", "C.UTF-8")
            .current_dir(s.path());
        if who == Who::Nobody && common::is_root() {
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        let o = c.output().map_err(|e| format!("{}: {e}", argv[0]))?;
        if !o.status.success() {
            return Err(format!(
                "{name}: {interp} example failed as {who:?}: {:?}\n--- code\n{code}--- stdout\n{}\n--- stderr\n{}",
                o.status,
                common::stdout(&o),
                common::stderr(&o)
            )
            .into());
        }
    }
    Ok(())
}

/// A `rust doctest FILE` block is, line for line, a doc-test of FILE
/// (`//! ` or `/// ` lines), so that the doc-test cargo runs is this code.
fn doctest(name: &str, src: &str, code: &str) -> Result<(), Failed> {
    let text =
        std::fs::read_to_string(root().join(src)).map_err(|e| format!("{name}: {src}: {e}"))?;
    let docs: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            t.strip_prefix("//!").or_else(|| t.strip_prefix("///"))
        })
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let lines: Vec<&str> = code.lines().collect();
    let found = docs
        .windows(lines.len().max(1))
        .any(|w| w == lines.as_slice());
    if found {
        Ok(())
    } else {
        Err(format!(
            "{name}: this block is not a doc-test of {src} (copy it from there, line for line)"
        )
        .into())
    }
}

/// README's set-up block: its jail command runs with the test build, and
/// its test command is `.ci/run`'s.
fn setup(name: &str, code: &str) -> Result<(), Failed> {
    let ci =
        std::fs::read_to_string(root().join(".ci/run")).map_err(|e| format!(".ci/run: {e}"))?;
    let test_cmd = ci
        .lines()
        .find_map(|l| l.strip_prefix("exec "))
        .ok_or(".ci/run: no `exec` line")?
        .trim();
    let lines: Vec<&str> = code
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if !lines.contains(&test_cmd) {
        return Err(format!(
            "{name}: the set-up block does not hold .ci/run's command `{test_cmd}`"
        )
        .into());
    }
    let jails: Vec<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("cargo run --release -- "))
        .map(|rest| format!("stockade {rest}\n"))
        .collect();
    if jails.is_empty() {
        return Err(format!("{name}: no `cargo run --release -- …` line (run a real jail)").into());
    }
    run(name, "sh", &jails.concat())
}

/// Every long flag of `stockade run`, `session` and `serve` (their
/// `--help`) is named in docs/reference/cli.md as `` `--flag``.
fn cli_flags() -> Result<(), Failed> {
    let page = std::fs::read_to_string(root().join("docs/reference/cli.md"))
        .map_err(|e| format!("docs/reference/cli.md: {e}"))?;
    let mut missing = Vec::new();
    for sub in ["run", "session", "serve"] {
        let o = Command::new(env!("CARGO_BIN_EXE_stockade"))
            .args([sub, "--help"])
            .output()
            .map_err(|e| format!("stockade {sub} --help: {e}"))?;
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let t = line.trim_start().trim_start_matches("-h, ");
            let Some(flag) = t.strip_prefix("--") else {
                continue;
            };
            let flag: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if flag != "help" && !page.contains(&format!("`--{flag}")) {
                missing.push(format!("stockade {sub} --{flag}"));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "docs/reference/cli.md names none of: {}",
            missing.join(", ")
        )
        .into())
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// made dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (outside fences).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && l.starts_with('#') {
            out.push(slug(l.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link of the files read names a file that exists and,
/// with `#anchor`, a heading of it.
fn links() -> Result<(), Failed> {
    let mut bad = Vec::new();
    for file in files() {
        let text =
            std::fs::read_to_string(root().join(&file)).map_err(|e| format!("{file}: {e}"))?;
        let dir = root().join(&file).parent().unwrap().to_path_buf();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let to = if path.is_empty() {
                root().join(&file)
            } else {
                dir.join(path)
            };
            if !to.exists() {
                bad.push(format!("{file}: {target}: no such file"));
            } else if !anchor.is_empty() {
                let t = std::fs::read_to_string(&to).unwrap_or_default();
                if !anchors(&t).iter().any(|a| a == anchor) {
                    bad.push(format!("{file}: {target}: no such heading"));
                }
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("\n").into())
    }
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    let mut readme_runs = 0;
    for file in files() {
        let text =
            std::fs::read_to_string(root().join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for b in blocks(&file, &text) {
            let Block { name, code, .. } = &b;
            let (name, code) = (name.clone(), code.clone());
            let trial = match check_of(&b) {
                Check::Run(interp) => {
                    readme_runs += usize::from(file == "README.md");
                    Trial::test(name.clone(), move || run(&name, interp, &code))
                }
                Check::Setup => Trial::test(name.clone(), move || setup(&name, &code)),
                Check::Doctest(src) => {
                    Trial::test(name.clone(), move || doctest(&name, &src, &code))
                }
                Check::Skip(why) => Trial::test(name.clone(), move || {
                    skip(&name, &why);
                    Ok(())
                }),
                Check::Bad(why) => {
                    Trial::test(name.clone(), move || Err(format!("{name}: {why}").into()))
                }
                Check::Elsewhere | Check::Nothing => continue,
            };
            trials.push(trial);
        }
    }
    trials.push(Trial::test("cli_reference_names_every_flag", cli_flags));
    trials.push(Trial::test("links_resolve", links));
    trials.push(Trial::test("readme_has_a_worked_example", move || {
        if readme_runs == 0 && std::env::var_os("STOCKADE_DOCS").is_none() {
            return Err("README.md: no `sh example` or `python example` block".into());
        }
        Ok(())
    }));
    let done = libtest_mimic::run(&args, trials);
    for (name, why) in SKIPS.lock().unwrap().iter() {
        common::skip(name, why);
    }
    done.exit();
}
