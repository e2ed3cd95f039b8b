//! Builds the fork server's confinement library (`src/confine`, a cdylib of
//! stockade-sys's `forked` steps) so that the stockade binary carries it
//! (`jail::zygote::LIBRARY`): the zygote, a host interpreter, loads it and
//! its children confine themselves with the same code as every jail.
//!
//! The library is loaded into the host's interpreter, so it is built for the
//! glibc flavour of the target (a musl build of stockade carries a glibc
//! library), in release, into `<target dir>/confine`, with none of the
//! caller's RUSTFLAGS (a static binary's flags make no shared library).
//!
//! In this workspace the library is `src/confine`'s package. Built from
//! stockade's published package (which holds no other package), it is a
//! crate this script writes into OUT_DIR, the same one line on
//! stockade-sys's sources, which stockade-sys's build script names
//! (`DEP_STOCKADE_SYS_ROOT`), with this package's Cargo.lock.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `src/confine/lib.rs`, for the crate written when that file is not here.
const CONFINE_LIB: &str = "pub use stockade_sys::forked::abi::*;\n";

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    for p in ["src/sys", "src/confine", "Cargo.lock", "build.rs"] {
        if root.join(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target = std::env::var("TARGET")
        .expect("TARGET")
        .replace("-musl", "-gnu");
    let dir = target_dir(&out).join("confine");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--quiet"]);
    if root.join("src/confine/Cargo.toml").is_file() {
        cmd.args(["-p", "stockade-confine", "--manifest-path"])
            .arg(root.join("Cargo.toml"));
    } else {
        cmd.arg("--manifest-path").arg(confine_crate(&root, &out));
    }
    cmd.arg("--target")
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

/// Writes the confinement library's crate into OUT_DIR (for a build from
/// the published package); returns its manifest.
fn confine_crate(root: &Path, out: &Path) -> PathBuf {
    let sys = std::env::var("DEP_STOCKADE_SYS_ROOT")
        .expect("stockade-sys's build script names its sources (DEP_STOCKADE_SYS_ROOT)");
    let dir = out.join("confine-crate");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let manifest = format!(
        "[package]\nname = \"stockade-confine\"\nversion = \"{}\"\nedition = \"2021\"\npublish = false\n\n\
         [lib]\npath = \"lib.rs\"\ncrate-type = [\"cdylib\"]\n\n\
         [dependencies]\nstockade-sys = {{ path = {sys:?} }}\n\n\
         [workspace]\n\n\
         [profile.release]\nlto = true\ncodegen-units = 1\npanic = \"abort\"\n",
        std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION")
    );
    for (name, text) in [("Cargo.toml", manifest.as_str()), ("lib.rs", CONFINE_LIB)] {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    if let Ok(lock) = std::fs::read(root.join("Cargo.lock")) {
        std::fs::write(dir.join("Cargo.lock"), lock).expect("Cargo.lock");
    }
    dir.join("Cargo.toml")
}

/// The build's target directory: the nearest ancestor of OUT_DIR that
/// cargo marked as one (CACHEDIR.TAG), else OUT_DIR itself.
fn target_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .unwrap_or(out)
        .to_path_buf()
}
