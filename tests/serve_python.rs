//! The Python client (clients/python) against the real server: installed
//! with pip into a fresh venv (`pip install ./clients/python`), its
//! unittest suite run against `stockade serve` on a unix socket with a
//! token, the evaluator example included; a secret the server declares
//! (`--secret`, bound to a TLS server of the test's own on 127.0.0.2) is
//! named by the client's runs and sessions.

mod common;
mod serve_util;

use std::path::Path;
use std::process::Command;

use common::Who;
use serve_util::Server;

const TOKEN: &str = "python-client-test-token-0123";

/// Copy a directory tree (the package is built from the copy, so the
/// build leaves nothing in the repository).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
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
        }
    }
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn python_client_against_a_real_server() {
    let scratch = common::Scratch::new("serve-python");
    let token_file = scratch.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let base = scratch.join("base");
    std::fs::create_dir(&base).unwrap();
    std::fs::write(base.join("a.txt"), "alpha\n").unwrap();
    let workspace = format!("proj={}", base.display());
    // The secret's host, its authority, the value's file and a profile
    // whose allowlist holds the host.
    let (ca_pem, config) = common::tls::test_pki();
    let host = common::tls::tls_host("127.0.0.2", config);
    let bound = format!("127.0.0.2:{}", host.port);
    std::fs::write(scratch.join("ca.pem"), ca_pem).unwrap();
    let value = common::tls::value();
    std::fs::write(scratch.join("key"), &value).unwrap();
    let profile = scratch.join("agent.toml");
    std::fs::write(
        &profile,
        format!("extends = \"python\"\n[network]\nallow = [\"{bound}\"]\n"),
    )
    .unwrap();
    let profiles = format!("python,shell,{}", profile.display());
    let s = Server::start(
        Who::Root,
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--workspace-base",
            &workspace,
            "--profiles",
            &profiles,
            "--secret",
            &format!("API_KEY:{bound}"),
            "--secret-file",
            &format!("API_KEY={}", scratch.join("key").display()),
            "--egress-ca",
            &scratch.arg("ca.pem"),
        ],
    );

    let pkg = scratch.join("pkg");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python"),
        &pkg,
    );
    let venv = scratch.join("venv");
    let o = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(o.status.success(), "python3 -m venv: {}", out(&o));
    let py = venv.join("bin/python");
    let pip = |extra: &[&str]| {
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(extra)
            .arg(&pkg)
            .output()
            .unwrap()
    };
    // The build backend (hatchling) comes from PyPI, or, when PyPI is out
    // of reach, from the wheelhouse `cargo xtask wheel` keeps.
    let mut o = pip(&[]);
    if !o.status.success() {
        eprintln!(
            "pip install (isolated build) failed, trying the saved wheelhouse:\n{}",
            out(&o)
        );
        let house = concat!(env!("CARGO_MANIFEST_DIR"), "/target/wheel-build/wheelhouse");
        o = pip(&["--no-index", "--find-links", house]);
    }
    assert!(
        o.status.success(),
        "pip install ./clients/python: {}",
        out(&o)
    );

    // Run the suite from elsewhere: `stockade` is the installed package.
    let o = Command::new(&py)
        .args([
            "-m",
            "unittest",
            "discover",
            "-v",
            "-p",
            "test_client.py",
            "-s",
        ])
        .arg(pkg.join("tests"))
        .current_dir(scratch.path())
        .env("STOCKADE_ADDRESS", format!("unix:{}", s.sock.display()))
        .env("STOCKADE_TOKEN", TOKEN)
        .env("STOCKADE_WORKSPACE_BASE", &workspace)
        .env("STOCKADE_SECRET_PROFILE", &profile)
        .env("STOCKADE_SECRET_HOST", &bound)
        .env("STOCKADE_SECRET_VALUE", &value)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let text = out(&o);
    eprintln!("{text}");
    assert!(o.status.success(), "python -m unittest failed:\n{text}");
    assert!(!text.contains("skipped"), "no test may be skipped:\n{text}");
    let installed = Command::new(&py)
        .args([
            "-c",
            "import stockade, os; print(os.path.dirname(stockade.__file__))",
        ])
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(
        out(&installed).contains("site-packages"),
        "the tests used the installed package: {}",
        out(&installed)
    );
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    // The client's secrets tests reached the host with the value.
    let heads = host.heads.lock().unwrap().clone();
    for path in ["/client-run", "/client-session"] {
        assert!(
            heads.iter().any(|h| h.starts_with(&format!("GET {path} "))
                && h.contains(&format!("Authorization: Bearer {value}\r\n"))),
            "{path}: {heads:?}"
        );
    }
    assert!(!s.log.lock().unwrap().contains(&value));
}
