//! Builds the fork server's confinement library (`src/confine`, a cdylib of
//! stockade-sys's `forked` steps) so that the stockade binary carries it
//! (`jail::zygote::LIBRARY`): the zygote, a host interpreter, loads it and
//! its children confine themselves with the same code as every jail.
//!
//! The library is loaded into the host's interpreter, so it is built for the
//! glibc flavour of the target (a musl build of stockade carries a glibc
//! library), in release, into `<target dir>/confine`, with none of the
//! caller's RUSTFLAGS (a static binary's flags make no shared library).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for p in ["src/sys", "src/confine", "Cargo.lock", "build.rs"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target = std::env::var("TARGET")
        .expect("TARGET")
        .replace("-musl", "-gnu");
    let dir = target_dir(&out).join("confine");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("Cargo.toml");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--quiet", "-p", "stockade-confine"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target")
        .arg(&target)
        .arg("--target-dir")
        .arg(&dir);
    for v in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(v);
    }
    let status = cmd.status().expect("running cargo for src/confine");
    assert!(
        status.success(),
        "building the fork server's confinement library (src/confine) failed: {status}"
    );
    let lib = dir
        .join(&target)
        .join("release")
        .join("libstockade_confine.so");
    std::fs::copy(&lib, out.join("libstockade_confine.so"))
        .unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
}

/// The build's target directory: the nearest ancestor of OUT_DIR that
/// cargo marked as one (CACHEDIR.TAG), else OUT_DIR itself.
fn target_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out)
        .to_path_buf()
}
