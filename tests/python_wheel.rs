//! The Python package's wheel (`cargo xtask wheel`, which `cargo xtask
//! test` runs before the cargo tests): installed with `pip --no-index` into
//! a fresh venv, it puts the static binary on the venv's PATH, and
//! `import stockade` runs real jails with that binary, found by the package
//! itself, as root and as uid 65534, with no other stockade on PATH.
//! `pip install ./clients/python` (offline, hatchling from the wheelhouse
//! the xtask filled) writes nothing into the checkout. Without the wheel
//! (a plain `cargo test`), each test prints SKIPPED.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Scratch, Who};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(what: &str, cmd: &mut Command) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(o.status.success(), "{what}: {}\n{}", o.status, out(&o));
    o
}

/// The wheel `cargo xtask wheel` wrote for this version, or a SKIPPED line.
fn wheel(test: &str) -> Option<PathBuf> {
    let dir = root().join("target/wheels");
    let prefix = format!("stockade-{VERSION}-py3-none-");
    let found = std::fs::read_dir(&dir).ok().and_then(|d| {
        d.flatten().map(|e| e.path()).find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".whl")
        })
    });
    if found.is_none() {
        common::skip(
            test,
            &format!(
                "no {prefix}*.whl in {}: run `cargo xtask wheel` (cargo xtask test does)",
                dir.display()
            ),
        );
    }
    found
}

/// A fresh venv in `s` (readable by uid 65534).
fn fresh_venv(s: &Scratch) -> PathBuf {
    let venv = s.join("venv");
    ok(
        "python3 -m venv",
        Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv),
    );
    venv
}

/// A PATH of the usual directories that hold no `stockade`.
fn path_without_stockade() -> String {
    let dirs: Vec<&str> = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .into_iter()
    .filter(|d| !Path::new(d).join("stockade").exists())
    .collect();
    assert!(dirs.contains(&"/usr/bin"), "/usr/bin/stockade exists");
    dirs.join(":")
}

/// `git status` of clients/python, ignored files included.
fn git_status() -> String {
    let o = ok(
        "git status",
        Command::new("git")
            .args([
                "status",
                "--porcelain",
                "--ignored",
                "--untracked-files=all",
                "--",
            ])
            .arg("clients/python")
            .current_dir(root()),
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Python run as `who` with a clean environment, in /.
fn python(who: Who, venv: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    let mut c = common::host_command(who, venv.join("bin/python"));
    c.env("PATH", path_without_stockade());
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["-c", script]).output().unwrap()
}

const RUN: &str = r#"
import stockade
from stockade import local
print(local.find_binary())
o = stockade.run(["sh", "-c", "echo jailed; id -u"])
assert o.status == "exited" and o.exit_code == 0, o
print(o.stdout.decode().strip().replace("\n", " "))
"#;

#[test]
fn wheel_installs_the_binary_and_the_package_runs_jails_with_it() {
    const TEST: &str = "wheel_installs_the_binary_and_the_package_runs_jails_with_it";
    let Some(wheel) = wheel(TEST) else { return };
    let size = std::fs::metadata(&wheel).unwrap().len();
    eprintln!("{}: {size} bytes", wheel.display());
    let s = Scratch::new("wheel");
    let venv = fresh_venv(&s);
    ok(
        "pip install --no-index the wheel",
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--no-index"])
            .arg(&wheel)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    );
    let bin = venv.join("bin/stockade");
    for who in common::users(TEST) {
        let o = common::host_command(who, &bin)
            .arg("--version")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "[{who:?}] stockade --version: {}",
            out(&o)
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("stockade {VERSION}\n"),
            "[{who:?}]"
        );

        let o = python(who, &venv, RUN, &[]);
        assert!(
            o.status.success(),
            "[{who:?}] import stockade; run: {}",
            out(&o)
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(bin.to_str().unwrap()),
            "[{who:?}] {text}"
        );
        let line = lines.next().unwrap_or_default();
        assert!(line.starts_with("jailed "), "[{who:?}] {text}");

        // STOCKADE_BIN and binary= still come first.
        let missing = s.join("no-such-stockade");
        let missing = missing.to_str().unwrap();
        let script = format!(
            "import stockade\nfrom stockade import local\n\
             for kw in ({{}}, {{'binary': {missing:?}}}):\n\
             \x20   try:\n\
             \x20       stockade.run(['true'], **kw)\n\
             \x20   except stockade.StockadeNotFound as e:\n\
             \x20       assert {missing:?} in str(e), e\n\
             \x20   else:\n\
             \x20       raise AssertionError(kw)\n"
        );
        let env = [("STOCKADE_BIN", missing)];
        let o = python(who, &venv, &script, &env);
        assert!(
            o.status.success(),
            "[{who:?}] STOCKADE_BIN first: {}",
            out(&o)
        );
    }
}

#[test]
fn installing_the_package_from_the_checkout_writes_nothing_there() {
    const TEST: &str = "installing_the_package_from_the_checkout_writes_nothing_there";
    let wheelhouse = root().join("target/wheel-build/wheelhouse");
    if !wheelhouse.is_dir() {
        common::skip(
            TEST,
            &format!(
                "no {}: run `cargo xtask wheel` (it fetches hatchling there)",
                wheelhouse.display()
            ),
        );
        return;
    }
    let before = git_status();
    let s = Scratch::new("wheel-src");
    let venv = fresh_venv(&s);
    ok(
        "pip install ./clients/python",
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--no-index", "--find-links"])
            .arg(&wheelhouse)
            .arg("./clients/python")
            .current_dir(root()),
    );
    assert_eq!(git_status(), before, "pip install wrote into the checkout");
    // Without the binary in it, the package looks on PATH.
    let script = "import stockade, stockade._binary as b\nassert b.bundled() is None\n\
                  from importlib import metadata\nprint(metadata.version('stockade'))";
    let o = python(Who::Root, &venv, script, &[]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), VERSION);
    assert!(!venv.join("bin/stockade").exists());
}
