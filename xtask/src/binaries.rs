//! The stockade binaries the bench measures: the static release build that
//! ships (README, "A static binary for `FROM scratch`") and the dynamic one
//! a plain `cargo build --release` gives.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target triple of the static build (crt-static needs it named).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// RUSTFLAGS of the static build, as the README gives them.
pub const STATIC_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// The static binary: `target/static/x86_64-unknown-linux-gnu/release/stockade`.
pub fn static_path(root: &Path) -> PathBuf {
    root.join("target/static")
        .join(TARGET)
        .join("release/stockade")
}

/// The dynamic binary: `release/stockade` under `$CARGO_TARGET_DIR` or `target`.
pub fn dynamic_path(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| root.join(t))
        .unwrap_or_else(|| root.join("target"))
        .join("release/stockade")
}

/// The README's command for the static binary, with the full release
/// profile (LTO, one codegen unit): what is shipped is what is measured.
pub fn build_static(root: &Path) -> Result<(), String> {
    let shown = format!(
        "RUSTFLAGS=\"{STATIC_RUSTFLAGS}\" cargo build --release --target {TARGET} --target-dir target/static -p stockade"
    );
    eprintln!("xtask bench: {shown}");
    let st = cargo()
        .args(["build", "--release", "--target", TARGET, "-p", "stockade"])
        .arg("--target-dir")
        .arg(root.join("target/static"))
        .current_dir(root)
        .env("RUSTFLAGS", STATIC_RUSTFLAGS)
        // Would take precedence over RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if !st.success() {
        return Err(format!(
            "{shown}: {st} (--no-build measures the binaries as they are)"
        ));
    }
    Ok(())
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
}
