//! `cargo xtask wheel`: the Python package (clients/python) as a wheel that
//! carries the static binary, `target/wheels/stockade-<version>-py3-none-<PLATFORM>.whl`.
//! `pip install` of it gives `stockade` on PATH (the wheel's script) and a
//! package that finds that binary itself (stockade/_binary.py), with
//! nothing to build.
//!
//! The build backend is the package's own, hatchling (clients/python's
//! pyproject.toml and hatch_build.py): the version comes from Cargo.toml,
//! and the binary and the platform tag from the environment this sets.
//! hatchling is fetched from PyPI once into `target/wheel-build/wheelhouse`
//! and installed from there into `target/wheel-build/venv`; later builds
//! are offline. Nothing is written into the checkout: the build fails if
//! `git status` of clients/python changed.

use crate::binaries::{self, Linkage};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where the wheel goes, relative to the root.
pub const DIR: &str = "target/wheels";

/// The builder's venv and the wheels of hatchling (and what it needs),
/// relative to the root. `tests/python_wheel.rs` installs
/// `./clients/python` offline from the same wheelhouse.
const BUILD_DIR: &str = "target/wheel-build";

/// The build backend, as pyproject.toml's `[build-system] requires`.
const HATCHLING: &str = "hatchling>=1.26,<2";

/// The wheel's platform tag. The binary is static (musl, or glibc with
/// crt-static): it needs no libc of the host's, so it runs on every x86_64
/// Linux that pip calls manylinux (glibc 2.17 and later, pip 19.3 and
/// later) or musllinux.
pub const PLATFORM: &str = "manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64";

pub fn main(args: &[String]) -> i32 {
    if !args.is_empty() {
        eprintln!(
            "usage: cargo xtask wheel  (the Python package with the static binary, into {DIR})"
        );
        return 2;
    }
    let root = crate::logs::root();
    match build(&root) {
        Ok(wheel) => {
            let size = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
            println!(
                "{} ({:.1} MB)",
                wheel.strip_prefix(&root).unwrap_or(&wheel).display(),
                size as f64 / 1e6
            );
            0
        }
        Err(e) => {
            eprintln!("xtask wheel: {e}");
            1
        }
    }
}

/// Builds the static binary (a no-op when it is up to date) and the wheel
/// around it; returns the wheel's path.
pub fn build(root: &Path) -> Result<PathBuf, String> {
    let version = cargo_version(
        &std::fs::read_to_string(root.join("Cargo.toml"))
            .map_err(|e| format!("{}: {e}", root.join("Cargo.toml").display()))?,
    )
    .ok_or("Cargo.toml: no [package] version")?;
    let bin = binaries::build_static(root)?;
    if binaries::linkage(&bin)? == Linkage::Dynamic {
        return Err(format!("{}: dynamically linked", bin.display()));
    }
    let python = builder(root)?;
    let before = git_status(root);
    let out = root.join(DIR);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for e in std::fs::read_dir(&out).map_err(|e| format!("{}: {e}", out.display()))? {
        let p = e.map_err(|e| e.to_string())?.path();
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("stockade-") && name.ends_with(".whl") {
            std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    eprintln!(
        "xtask: pip wheel clients/python (hatchling, with {})",
        bin.display()
    );
    ok(
        "pip wheel",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
            ])
            .arg("--wheel-dir")
            .arg(&out)
            .arg(root.join("clients/python"))
            .env("STOCKADE_WHEEL_BINARY", &bin)
            .env("STOCKADE_WHEEL_PLATFORM", PLATFORM)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(root.join(BUILD_DIR)),
    )?;
    let wheel = out.join(format!("stockade-{version}-py3-none-{PLATFORM}.whl"));
    if !wheel.is_file() {
        return Err(format!("pip wheel: {} was not written", wheel.display()));
    }
    if let (Some(before), Some(after)) = (before, git_status(root)) {
        if before != after {
            return Err(format!(
                "the build wrote into the checkout: git status of clients/python was\n{before}and is\n{after}"
            ));
        }
    }
    Ok(wheel)
}

/// The builder venv's python, with hatchling installed from the wheelhouse
/// (filled from PyPI the first time).
fn builder(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join(BUILD_DIR);
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", "import hatchling"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let host = if Path::new("/usr/bin/python3").exists() {
        PathBuf::from("/usr/bin/python3")
    } else {
        PathBuf::from("python3")
    };
    if !python.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        eprintln!("xtask: {} -m venv {}", host.display(), venv.display());
        ok(
            "python3 -m venv",
            Command::new(&host).args(["-m", "venv"]).arg(&venv),
        )?;
    }
    let wheelhouse = dir.join("wheelhouse");
    let fetched = std::fs::read_dir(&wheelhouse).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("hatchling-"))
    });
    if !fetched {
        eprintln!("xtask: pip download {HATCHLING} (from PyPI, once)");
        ok(
            "pip download",
            Command::new(&python)
                .args(["-m", "pip", "download", "--only-binary=:all:", "--dest"])
                .arg(&wheelhouse)
                .arg(HATCHLING),
        )?;
    }
    if !has(&python) {
        ok(
            "pip install hatchling",
            Command::new(&python)
                .args(["-m", "pip", "install", "--no-index", "--find-links"])
                .arg(&wheelhouse)
                .arg(HATCHLING),
        )?;
    }
    Ok(python)
}

/// Runs `cmd`; `Err` with its output unless it succeeded.
fn ok(what: &str, cmd: &mut Command) -> Result<Output, String> {
    let o = cmd
        .output()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", cmd.get_program()))?;
    if o.status.success() {
        Ok(o)
    } else {
        Err(format!(
            "{what}: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// `git status` of clients/python, ignored files included, or None where
/// git cannot tell (no git, not a checkout).
fn git_status(root: &Path) -> Option<String> {
    let o = Command::new("git")
        .args([
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
            "--",
        ])
        .arg("clients/python")
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success());
    if o.is_none() {
        eprintln!("xtask wheel: git status failed: the checkout is not checked for build files");
    }
    o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The `version` of Cargo.toml's `[package]` table.
fn cargo_version(toml: &str) -> Option<String> {
    let mut in_package = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some((key, value)) = line.split_once('=') {
                if key.trim() == "version" {
                    return Some(value.trim().trim_matches('"').to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_package_tables() {
        let toml = "[workspace]\nversion = \"9\"\n\n[package]\nname = \"stockade\"\nversion = \"1.2.3\"\n\n[dependencies]\nversion = \"4\"\n";
        assert_eq!(cargo_version(toml).as_deref(), Some("1.2.3"));
        assert_eq!(cargo_version("[dependencies]\nversion = \"4\"\n"), None);
    }
}
