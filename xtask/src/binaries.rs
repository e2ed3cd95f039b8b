//! The stockade binaries the bench measures, and the one place that knows
//! how to build and find the static binary that ships (README, "A static
//! binary for `FROM scratch`"); `cargo xtask bench`, `vm-test` and
//! `docker-test` all use it.
//!
//! The static binary is a musl build: `x86_64-unknown-linux-musl` links
//! statically by default. glibc's static start-up probes the CPU (dozens of
//! CPUID instructions for its cache information), which costs about 0.5 ms
//! per start under nested virtualisation; musl's does not. When the musl
//! target cannot be installed, the glibc crt-static build is the fallback,
//! and the build says so.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target triple of the static build.
pub const TARGET: &str = "x86_64-unknown-linux-musl";

/// The fallback static build: glibc with crt-static (it needs the target
/// named, or build scripts and proc macros would be linked statically too).
pub const GLIBC_TARGET: &str = "x86_64-unknown-linux-gnu";

/// RUSTFLAGS of the glibc fallback.
pub const GLIBC_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// The static binaries' own target dir, so they do not invalidate the
/// normal builds.
const STATIC_DIR: &str = "target/static";

/// The static binary, for callers that do not build it: the musl one
/// (`target/static/x86_64-unknown-linux-musl/release/stockade`) if it
/// exists, else the glibc fallback's.
pub fn static_path(root: &Path) -> PathBuf {
    let musl = built_path(root, TARGET);
    if musl.exists() {
        musl
    } else {
        built_path(root, GLIBC_TARGET)
    }
}

fn built_path(root: &Path, target: &str) -> PathBuf {
    built_bin(root, target, "stockade")
}

fn built_bin(root: &Path, target: &str, name: &str) -> PathBuf {
    root.join(STATIC_DIR)
        .join(target)
        .join("release")
        .join(name)
}

/// The build command of the static binary at `path` (as `static_path` or
/// `build_static` gave it), for notes that say what was measured.
pub fn static_command(path: &Path) -> String {
    if path.components().any(|c| c.as_os_str() == GLIBC_TARGET) {
        shown(GLIBC_TARGET, Some(GLIBC_RUSTFLAGS), "stockade")
    } else {
        shown(TARGET, None, "stockade")
    }
}

fn shown(target: &str, rustflags: Option<&str>, name: &str) -> String {
    let env = rustflags
        .map(|f| format!("RUSTFLAGS=\"{f}\" "))
        .unwrap_or_default();
    format!(
        "{env}cargo build --release --target {target} --target-dir {STATIC_DIR} -p {name} --bin {name}"
    )
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to `root`
/// when relative) or `root/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| root.join(t))
        .unwrap_or_else(|| root.join("target"))
}

/// The dynamic binary: `release/stockade` under [`target_dir`].
pub fn dynamic_path(root: &Path) -> PathBuf {
    target_dir(root).join("release/stockade")
}

/// Makes sure the musl target's standard library is installed: asks rustup,
/// and runs `rustup target add` when it is missing. Without rustup, looks
/// in the toolchain's sysroot. `Err` says why the target is not available.
pub fn ensure_musl_target() -> Result<(), String> {
    match Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    {
        Ok(o) if o.status.success() => {
            if String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
            {
                return Ok(());
            }
            eprintln!("xtask: rustup target add {TARGET}");
            let st = Command::new("rustup")
                .args(["target", "add", TARGET])
                .status()
                .map_err(|e| format!("cannot start rustup: {e}"))?;
            if st.success() {
                Ok(())
            } else {
                Err(format!("rustup target add {TARGET}: {st}"))
            }
        }
        Ok(o) => Err(format!(
            "rustup target list --installed: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        // No rustup: the toolchain may still carry the target.
        Err(e) => {
            let sysroot = Command::new("rustc")
                .args(["--print", "sysroot"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
            match sysroot {
                Some(s) if s.join("lib/rustlib").join(TARGET).join("lib").is_dir() => Ok(()),
                _ => Err(format!(
                    "cannot start rustup ({e}) and the toolchain has no {TARGET} standard library"
                )),
            }
        }
    }
}

/// Builds the static binary with the full release profile (LTO, one
/// codegen unit): what is shipped is what is measured. The musl build, or,
/// when the musl target cannot be installed, the glibc crt-static one (said
/// on stderr). Returns the path of the binary built.
pub fn build_static(root: &Path) -> Result<PathBuf, String> {
    build_static_bin(root, "stockade")
}

/// [`build_static`] for the binary `name` of the workspace's package of
/// that name (`stockade`; `xtask`, which `cargo xtask vm-bench` carries
/// into its VM).
pub fn build_static_bin(root: &Path, name: &str) -> Result<PathBuf, String> {
    let (target, rustflags) = match ensure_musl_target() {
        Ok(()) => (TARGET, None),
        Err(why) => {
            eprintln!(
                "xtask: the musl target is not available ({why}); building the glibc static binary instead (its start-up is slower: glibc probes the CPU at start)"
            );
            (GLIBC_TARGET, Some(GLIBC_RUSTFLAGS))
        }
    };
    let shown = shown(target, rustflags, name);
    eprintln!("xtask: {shown}");
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--target", target])
        .arg("--target-dir")
        .arg(root.join(STATIC_DIR))
        .args(["-p", name, "--bin", name])
        .current_dir(root)
        // Would take precedence over RUSTFLAGS (and carries the caller's).
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // The test suite's clippy (`cargo xtask test`) lints the host
        // build; this one need not lint the same code again.
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    match rustflags {
        Some(f) => cmd.env("RUSTFLAGS", f),
        // musl links statically by default; no flags of the caller's.
        None => cmd.env_remove("RUSTFLAGS"),
    };
    let st = cmd
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if !st.success() {
        return Err(format!("{shown}: {st}"));
    }
    let bin = built_bin(root, target, name);
    if !bin.is_file() {
        return Err(format!("{shown}: {} was not built", bin.display()));
    }
    Ok(bin)
}

/// `cargo build --release -p stockade`.
pub fn build_dynamic(root: &Path) -> Result<(), String> {
    eprintln!("xtask bench: cargo build --release -p stockade");
    let st = cargo()
        .args(["build", "--release", "-p", "stockade"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if !st.success() {
        return Err(format!(
            "cargo build --release -p stockade: {st} (--no-build measures the binaries as they are)"
        ));
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// How an executable is linked, read from its ELF headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// It names an interpreter (ld.so).
    Dynamic,
    /// No interpreter, position-independent (relocates itself at start).
    StaticPie,
    /// No interpreter, fixed addresses.
    Static,
}

impl Linkage {
    pub fn name(self) -> &'static str {
        match self {
            Linkage::Dynamic => "dynamic",
            Linkage::StaticPie => "static-pie",
            Linkage::Static => "static, non-PIE",
        }
    }
}

/// The linkage of the ELF executable at `path`.
pub fn linkage(path: &Path) -> Result<Linkage, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    elf_linkage(&bytes).ok_or_else(|| format!("{}: not a 64-bit little-endian ELF", path.display()))
}

fn elf_linkage(b: &[u8]) -> Option<Linkage> {
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    const PT_INTERP: u32 = 3;
    if b.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let e_type = u16_at(16)?;
    let phoff = usize::try_from(u64_at(32)?).ok()?;
    let phentsize = usize::from(u16_at(54)?);
    let phnum = usize::from(u16_at(56)?);
    for i in 0..phnum {
        if u32_at(phoff.checked_add(i.checked_mul(phentsize)?)?)? == PT_INTERP {
            return Some(Linkage::Dynamic);
        }
    }
    match e_type {
        ET_DYN => Some(Linkage::StaticPie),
        ET_EXEC => Some(Linkage::Static),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linkage_reads_the_interpreter_and_the_type() {
        // This test binary is dynamic unless built with crt-static.
        let me = std::env::current_exe().unwrap();
        let l = linkage(&me).unwrap();
        let static_build = cfg!(target_feature = "crt-static");
        assert_eq!(l == Linkage::Dynamic, !static_build, "{l:?}");
        let mut h = vec![0u8; 64 + 56];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[16] = 2;
        h[32] = 64;
        h[54] = 56;
        h[56] = 1;
        h[64] = 1; // PT_LOAD
        assert_eq!(elf_linkage(&h), Some(Linkage::Static));
        h[16] = 3;
        assert_eq!(elf_linkage(&h), Some(Linkage::StaticPie));
        h[64] = 3; // PT_INTERP
        assert_eq!(elf_linkage(&h), Some(Linkage::Dynamic));
        assert_eq!(elf_linkage(b"#!/bin/sh\n"), None);
        assert_eq!(elf_linkage(&h[..66]), None);
    }

    #[test]
    fn static_path_prefers_the_musl_build() {
        let root = std::env::temp_dir().join(format!("xtask-binaries-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let musl = root.join("target/static/x86_64-unknown-linux-musl/release/stockade");
        let glibc = root.join("target/static/x86_64-unknown-linux-gnu/release/stockade");
        assert_eq!(static_path(&root), glibc);
        std::fs::create_dir_all(musl.parent().unwrap()).unwrap();
        std::fs::write(&musl, b"").unwrap();
        assert_eq!(static_path(&root), musl);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            static_command(&musl),
            "cargo build --release --target x86_64-unknown-linux-musl --target-dir target/static -p stockade --bin stockade"
        );
        assert_eq!(
            static_command(&glibc),
            "RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release --target x86_64-unknown-linux-gnu --target-dir target/static -p stockade --bin stockade"
        );
    }
}
