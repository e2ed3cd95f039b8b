//! `cargo xtask dist [--no-image]`: what ships, in `target/dist/`:
//!
//! - `stockade`: the static binary (musl; `binaries::build_static`);
//! - `stockade-<version>-py3-none-<PLATFORM>.whl`: the Python package with
//!   that binary inside (`wheel::build`);
//! - `man/*.1` and `completions/*`: written by that binary from its own
//!   command-line definition (`man::write`);
//! - `stockade-image.tar`: a `FROM scratch` image holding only the binary
//!   (`docker build` from a context of files, `docker save`; no registry),
//!   for `docker load`, tagged `stockade:<version>`;
//! - `SHA256SUMS`: `sha256sum -c SHA256SUMS` in that directory checks every
//!   file above.
//!
//! Without a Docker engine the image is left out, said on stderr, and the
//! exit is 1; `--no-image` leaves it out on purpose (exit 0).

use crate::{binaries, man, wheel};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where it goes, relative to the root.
pub const DIR: &str = "target/dist";
/// The image tarball's name in `DIR`.
pub const IMAGE: &str = "stockade-image.tar";

const DOCKERFILE: &str = "FROM scratch\nCOPY stockade /stockade\nENTRYPOINT [\"/stockade\"]\n";

pub fn main(args: &[String]) -> i32 {
    let no_image = match args {
        [] => false,
        [a] if a == "--no-image" => true,
        _ => {
            eprintln!("usage: cargo xtask dist [--no-image]   (the static binary, the wheel, man pages, completions, a FROM scratch image tarball and SHA256SUMS, into {DIR})");
            return 2;
        }
    };
    let root = crate::logs::root();
    match build(&root, no_image) {
        Ok((files, image_missing)) => {
            for f in &files {
                println!("{}", f.strip_prefix(&root).unwrap_or(f).display());
            }
            if let Some(why) = image_missing {
                eprintln!("xtask dist: no image: {why} (`cargo xtask dist --no-image` leaves it out on purpose)");
                return 1;
            }
            0
        }
        Err(e) => {
            eprintln!("xtask dist: {e}");
            1
        }
    }
}

/// Builds everything into `DIR` (emptied first); returns the files and,
/// when the image was wanted but could not be made, why.
fn build(root: &Path, no_image: bool) -> Result<(Vec<PathBuf>, Option<String>), String> {
    let out = root.join(DIR);
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let wheel = wheel::build(root)?;
    let bin = binaries::static_path(root);
    let shipped = out.join("stockade");
    copy(&bin, &shipped)?;
    let wheel_name = wheel.file_name().ok_or("the wheel has no file name")?;
    copy(&wheel, &out.join(wheel_name))?;
    man::write(&shipped, &out.join("man"), &out.join("completions"))?;
    let image_missing = if no_image {
        None
    } else {
        image(root, &shipped, &out.join(IMAGE)).err()
    };
    sums(&out)?;
    check(&out, image_missing.is_none() && !no_image)?;
    let mut files = Vec::new();
    list(&out, &mut files)?;
    files.sort();
    Ok((files, image_missing))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))
}

/// The `FROM scratch` image: a build context holding the binary and the
/// Dockerfile, built and saved to `tar`.
fn image(root: &Path, bin: &Path, tar: &Path) -> Result<(), String> {
    let engine = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .map_err(|e| format!("docker: {e} (is Docker installed?)"))?;
    if !engine.status.success() {
        return Err(format!(
            "no Docker engine: {}",
            String::from_utf8_lossy(&engine.stderr).trim()
        ));
    }
    let ctx = root.join("target/dist-image");
    let _ = std::fs::remove_dir_all(&ctx);
    std::fs::create_dir_all(&ctx).map_err(|e| format!("{}: {e}", ctx.display()))?;
    copy(bin, &ctx.join("stockade"))?;
    std::fs::write(ctx.join("Dockerfile"), DOCKERFILE)
        .map_err(|e| format!("{}: {e}", ctx.display()))?;
    let v = Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let version = String::from_utf8_lossy(&v.stdout)
        .split_whitespace()
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| format!("{} --version: no version", bin.display()))?;
    let tag = format!("stockade:{version}");
    docker(&["build", "--quiet", "-t", &tag, &ctx.display().to_string()])?;
    docker(&["save", "-o", &tar.display().to_string(), &tag])?;
    // docker save writes 0600; the tarball is as public as the rest.
    std::fs::set_permissions(tar, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| format!("{}: {e}", tar.display()))?;
    let _ = std::fs::remove_dir_all(&ctx);
    Ok(())
}

fn docker(args: &[&str]) -> Result<(), String> {
    let o = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "docker {}: {}: {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// Checks what `dir` holds against the layout above: the binary, one
/// wheel, `man/stockade.1` and `man/stockade-run.1`, every completion
/// script, the image when `image`, and `SHA256SUMS` naming every other
/// file, each with its sum (`sha256sum -c`).
fn check(dir: &Path, image: bool) -> Result<(), String> {
    let mut want: Vec<String> = ["stockade", "man/stockade.1", "man/stockade-run.1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    want.extend(
        man::COMPLETIONS
            .iter()
            .map(|(_, f)| format!("completions/{f}")),
    );
    if image {
        want.push(IMAGE.to_string());
    }
    for f in &want {
        if !dir.join(f).is_file() {
            return Err(format!("{}: {f} is missing", dir.display()));
        }
    }
    let wheels = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".whl"))
        .count();
    if wheels != 1 {
        return Err(format!("{}: {wheels} wheels, not one", dir.display()));
    }
    let listed =
        std::fs::read_to_string(dir.join("SHA256SUMS")).map_err(|e| format!("SHA256SUMS: {e}"))?;
    let mut files = Vec::new();
    list(dir, &mut files)?;
    for f in files.iter().filter_map(|f| f.strip_prefix(dir).ok()) {
        let f = f.display().to_string();
        if f != "SHA256SUMS" && !listed.lines().any(|l| l.ends_with(&format!("  {f}"))) {
            return Err(format!("SHA256SUMS does not name {f}"));
        }
    }
    let o = Command::new("sha256sum")
        .args(["--check", "--quiet", "SHA256SUMS"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "sha256sum --check: {}",
            String::from_utf8_lossy(&o.stdout).trim()
        ));
    }
    Ok(())
}

/// `SHA256SUMS` of every file under `dir`, paths relative to it.
fn sums(dir: &Path) -> Result<(), String> {
    let mut files = Vec::new();
    list(dir, &mut files)?;
    let mut rel: Vec<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(dir).ok())
        .map(|f| f.display().to_string())
        .filter(|f| f != "SHA256SUMS")
        .collect();
    rel.sort();
    let o = Command::new("sha256sum")
        .args(&rel)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "sha256sum: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    std::fs::write(dir.join("SHA256SUMS"), &o.stdout).map_err(|e| format!("SHA256SUMS: {e}"))
}

fn list(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.is_dir() {
            list(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout as `build` leaves it passes `check` once summed, and fails
    /// it when a file is missing, unlisted or changed.
    #[test]
    fn the_layout_is_checked() {
        let dir = std::env::temp_dir().join(format!("xtask-dist-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut files = vec![
            "stockade".to_string(),
            "stockade-0.1.0-py3-none-any.whl".into(),
            "man/stockade.1".into(),
            "man/stockade-run.1".into(),
        ];
        files.extend(
            man::COMPLETIONS
                .iter()
                .map(|(_, f)| format!("completions/{f}")),
        );
        for f in &files {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f.as_bytes()).unwrap();
        }
        sums(&dir).unwrap();
        check(&dir, false).unwrap();
        assert!(check(&dir, true).unwrap_err().contains(IMAGE));
        std::fs::write(dir.join("man/stockade-serve.1"), "x").unwrap();
        assert!(check(&dir, false)
            .unwrap_err()
            .contains("does not name man/stockade-serve.1"));
        sums(&dir).unwrap();
        std::fs::write(dir.join("stockade"), "changed").unwrap();
        assert!(check(&dir, false)
            .unwrap_err()
            .contains("sha256sum --check"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
