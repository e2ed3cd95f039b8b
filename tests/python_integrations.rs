//! The Python package (clients/python) on the local binary: installed with
//! pip into a venv under target/ (with the `langchain` and `deepagents`
//! extras from PyPI), its unittest modules run as root and as uid 65534
//! through clients/python/tests/run_suite.py, one result per Python test:
//! a failure fails this test, a skip is a SKIPPED line (never a pass).
//! The `python package-example` blocks of docs/reference/python.md run in
//! the same venv. The
//! suites run again where user namespaces are refused (the fallback,
//! through tests/payloads/chk_nouserns.c), with STOCKADE_TEST_FALLBACK=1.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Scratch, Who};

/// The Python test modules this runs (in clients/python/tests).
const MODULES: &[&str] = &[
    "test_local",
    "test_evaluator",
    "test_langchain",
    "test_langchain_upstream",
    "test_session",
    "test_deepagents",
    "test_secrets",
    "test_options",
    "test_typing",
];
/// Where the package examples are.
const PACKAGE_DOC: &str = "docs/reference/python.md";
/// Put in $HOME/.ssh/id_rsa and the environment: the suites check that no
/// jail reads it.
const CANARY: &str = "host-canary-7c2e91";

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Copy a directory tree readable by everyone (the package is built from
/// the copy, so the build leaves nothing in the repository).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name();
        if name == "__pycache__" || name.to_string_lossy().ends_with(".egg-info") || name == "build"
        {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
            std::fs::set_permissions(to.join(&name), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
    }
}

/// The suite's venv under target/ (kept between runs: the frameworks come
/// from PyPI once; `cargo xtask test` makes it at its start, beside the
/// builds), with the package in `pkg` installed in it and the upstream
/// LangChain venv beside it: clients/python/tests/suite_venv.py, which
/// says what it installs.
fn venv(pkg: &Path) -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-integrations/venv");
    let o = Command::new("/usr/bin/python3")
        .arg(pkg.join("tests/suite_venv.py"))
        .arg(&venv)
        .arg(pkg)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/wheel-build/wheelhouse"
        ))
        .output()
        .unwrap();
    eprintln!("--- suite_venv.py\n{}", out(&o));
    assert!(o.status.success(), "suite_venv.py: {}", out(&o));
    venv
}

/// A $HOME for `who` with the canary in .ssh/id_rsa.
fn home(s: &Scratch, label: &str, who: Who) -> PathBuf {
    let home = s.join(&format!("home-{label}"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), CANARY).unwrap();
    std::fs::set_permissions(
        home.join(".ssh/id_rsa"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    if who == Who::Nobody && common::is_root() {
        for p in [home.join(".ssh/id_rsa"), home.join(".ssh"), home.clone()] {
            std::os::unix::fs::chown(&p, Some(common::NOBODY), Some(common::NOBODY)).unwrap();
        }
    }
    home
}

/// The module of static checks (`mypy --strict`, `ruff check`): no jail,
/// the same in every mode, so run once, in the first mode only.
const STATIC: &str = "test_typing";

/// The module whose tests (LangChain's own) time their commands against
/// wall-clock deadlines: run alone, never beside the other runs.
const TIMED: &str = "test_langchain_upstream";

/// Run `modules` as `who` (in the fallback when `fallback`); return the
/// result lines (test, result, detail).
fn run_suite(
    s: &Scratch,
    py: &Path,
    tests: &Path,
    (who, fallback): (Who, bool),
    modules: &[&str],
) -> Vec<serde_json::Value> {
    let label = format!("{who:?}{}", if fallback { "-fallback" } else { "" });
    let results = s.join(&format!(
        "results-{label}-{}-{}.jsonl",
        modules[0],
        modules.len()
    ));
    let mut c = if fallback {
        let mut c = Command::new(common::c_payload("chk_nouserns"));
        c.arg(py);
        c
    } else {
        Command::new(py)
    };
    c.arg(tests.join("run_suite.py"))
        .arg(&results)
        .args(modules)
        .current_dir(tests)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("HOME", home(s, &label, who))
        .env("STOCKADE_BIN", common::binary())
        .env("STOCKADE_EVAL_CANARY", CANARY)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if fallback {
        c.env("STOCKADE_TEST_FALLBACK", "1");
    }
    if who == Who::Nobody && common::is_root() {
        std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        c.uid(common::NOBODY).gid(common::NOBODY);
    }
    let o = c.output().unwrap();
    eprintln!("--- python suites as {label}\n{}", out(&o));
    let text = std::fs::read_to_string(&results).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Check that every module reported, print each result, record skips,
/// collect failures.
fn tally(results: &[serde_json::Value], label: &str, first: bool, failed: &mut Vec<String>) {
    for m in MODULES.iter().filter(|m| first || **m != STATIC) {
        let ran = results.iter().any(|r| {
            r["test"]
                .as_str()
                .is_some_and(|t| t.starts_with(&format!("{m}.")) || t.contains(&format!("({m})")))
        });
        assert!(ran, "{m}: no result as {label}: {results:?}");
    }
    for r in results {
        let (test, result) = (r["test"].as_str().unwrap(), r["result"].as_str().unwrap());
        let detail = r["detail"].as_str().unwrap_or("");
        eprintln!("python {label} {test}: {result}");
        match result {
            "pass" => {}
            "skipped" => common::skip(&format!("python::{label}::{test}"), detail),
            _ => failed.push(format!("{label} {test}: {result}\n{detail}")),
        }
    }
}

/// The ```` ```python package-example ```` blocks of the Python
/// package's reference (`PACKAGE_DOC`): (line, code).
fn readme_examples() -> Vec<(usize, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PACKAGE_DOC);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, l) in text.lines().enumerate() {
        match &mut cur {
            None if l.trim_end() == "```python package-example" => {
                cur = Some((i + 1, String::new()))
            }
            None => {}
            Some(_) if l.trim_start().starts_with("```") => out.push(cur.take().unwrap()),
            Some((_, code)) => {
                code.push_str(l);
                code.push('\n');
            }
        }
    }
    assert!(
        cur.is_none(),
        "{PACKAGE_DOC}: a package-example block is not closed"
    );
    out
}

/// Run each package example with the venv's Python as `who`, in a fresh
/// directory, with the stockade binary on PATH.
fn run_readme_examples(py: &Path, who: Who) {
    let examples = readme_examples();
    assert!(
        examples.len() >= 5,
        "{PACKAGE_DOC}: expected a package-example per integration, found {}",
        examples.len()
    );
    let bindir = common::binary().parent().unwrap().display().to_string();
    let frameworks = Command::new(py)
        .args(["-c", "import langchain, deepagents"])
        .output()
        .unwrap();
    for (line, code) in examples {
        if !frameworks.status.success()
            && (code.contains("langchain") || code.contains("deepagents"))
        {
            common::skip(
                &format!("python_package_suites::{PACKAGE_DOC}:{line}"),
                "langchain or deepagents is not installed (PyPI out of reach?)",
            );
            continue;
        }
        let s = Scratch::new("readme-python").world_writable();
        let f = s.join("example.py");
        std::fs::write(&f, &code).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = Command::new(py);
        c.arg(&f)
            .current_dir(s.path())
            .env_clear()
            .env("PATH", format!("{bindir}:/usr/local/bin:/usr/bin:/bin"))
            .env("HOME", s.path())
            .env("LANG", "C.UTF-8")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        if who == Who::Nobody && common::is_root() {
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{PACKAGE_DOC}:{line}: package-example failed as {who:?}:\n{code}--- output\n{}",
            out(&o)
        );
    }
}

#[test]
fn python_package_suites() {
    let s = Scratch::new("python-integrations");
    let pkg = s.join("pkg");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python"),
        &pkg,
    );
    let py = venv(&pkg).join("bin/python");
    let mut failed = Vec::new();
    let users = common::users("python_package_suites");
    for &who in &users {
        run_readme_examples(&py, who);
    }
    // Every run at once but uid 65534's two, which go one after the
    // other: their jails' pids limit is RLIMIT_NPROC, which counts every
    // process of uid 65534 outside a user namespace, and every process of
    // the user namespaces uid 65534 made, so two such runs at once would
    // refuse each other's forks (EAGAIN, seen). Root's jails are never
    // counted there, though the host sees them as uid 65534: the kernel
    // charges a user namespace's processes to the uid that made it (root),
    // and the fallback's jails run as leased uids. The static checks (no
    // jail) run beside them too. Then LangChain's own tests, one run at a
    // time: they time their commands.
    let runs: Vec<(Who, bool)> = users
        .iter()
        .flat_map(|&who| [(who, false), (who, true)])
        .collect();
    let tests = pkg.join("tests");
    let untimed: Vec<&str> = MODULES
        .iter()
        .copied()
        .filter(|m| *m != TIMED && *m != STATIC)
        .collect();
    let first = runs[0];
    let (mut results, checks) = std::thread::scope(|sc| {
        let (s, py, tests, untimed) = (&s, &py, &tests, &untimed);
        let checks = sc.spawn(move || run_suite(s, py, tests, first, &[STATIC]));
        let handles: Vec<_> = users
            .iter()
            .map(|&who| {
                sc.spawn(move || match who {
                    Who::Root => std::thread::scope(|inner| {
                        [false, true]
                            .map(|f| {
                                inner.spawn(move || run_suite(s, py, tests, (who, f), untimed))
                            })
                            .map(|h| h.join().unwrap())
                            .to_vec()
                    }),
                    _ => [false, true]
                        .map(|f| run_suite(s, py, tests, (who, f), untimed))
                        .to_vec(),
                })
            })
            .collect();
        let results: Vec<Vec<serde_json::Value>> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        (results, checks.join().unwrap())
    });
    results[0].extend(checks);
    for (&run, r) in runs.iter().zip(results.iter_mut()) {
        r.extend(run_suite(&s, &py, &tests, run, &[TIMED]));
    }
    for (i, ((who, fallback), results)) in runs.iter().zip(&results).enumerate() {
        let label = format!("{who:?}{}", if *fallback { "-fallback" } else { "" });
        tally(results, &label, i == 0, &mut failed);
    }
    assert!(
        failed.is_empty(),
        "Python tests failed:\n{}",
        failed.join("\n")
    );
}
