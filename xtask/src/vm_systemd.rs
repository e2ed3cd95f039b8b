//! `cargo xtask vm-systemd-test`: the systemd rung of the limit ladder
//! against a real systemd, inside a small VM.
//!
//! The rung (a transient scope with `Delegate=yes` asked of the user's
//! `systemd --user` over D-Bus) needs a systemd system manager as PID 1, a
//! system bus, and a user manager with its user bus; and, for the limits to
//! mean anything, a pure cgroup v2 hierarchy with the memory, cpu and pids
//! controllers. This host has none of that (no systemd as PID 1, hybrid
//! cgroups whose controllers sit on v1, so a container here could not have
//! them either), hence a VM: the Debian kernel of `cargo xtask vm-test`
//! (shared cache), booted with `cgroup_no_v1=all`, whose initramfs is a
//! Debian bookworm root file system built by mmdebstrap from Debian's
//! systemd, dbus and dbus-user-session packages (cached as
//! ~/.cache/stockade-xtask/vm-systemd/rootfs.cpio), plus stockade, the static C payloads of
//! tests/vm and tests/vm-systemd/*. systemd boots as PID 1 and starts
//! `vmtest.service`, which starts `user@1000.service` and runs
//! tests/vm-systemd/tests.sh: stockade as uid 1000 from a cgroup the user
//! does not own (the service's), so only the systemd rung can hold limits.
//! The VM prints `VMTEST PASS|FAIL systemd/…` lines and `VMTEST DONE`.
//!
//! The VM's console goes to target/xtask-logs/vm-systemd-console.log,
//! mmdebstrap's output to apt.log.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::vm::{Cpio, R};

const DEFAULT_TIMEOUT_S: u64 = 300;
/// The log of the VM's console (under target/xtask-logs).
pub const CONSOLE_LOG: &str = "vm-systemd-console.log";
/// The Debian release of the VM's root file system (the kernel's, too).
const SUITE: &str = "bookworm";
/// What the root file system holds beyond the Essential packages.
const PACKAGES: &str = "systemd,dbus,dbus-user-session,libpam-systemd,jq";
/// The payloads of tests/vm the tests use.
const PAYLOADS: &[&str] = &["memhog", "forkbomb", "spin", "runas"];

pub fn main(args: &[String]) -> i32 {
    let usage = format!("usage: cargo xtask vm-systemd-test [--timeout SECS] [--stockade STATIC-BINARY]\n  boots a VM (qemu, TCG) with systemd as PID 1 on a pure cgroup v2 hierarchy and runs\n  tests/vm-systemd/tests.sh: stockade as a user whose limits only a scope of their\n  systemd --user can hold; exits 1 on any FAIL, a missing DONE or a timeout (default {DEFAULT_TIMEOUT_S}s)");
    crate::vm::task_main("vm-systemd-test", args, DEFAULT_TIMEOUT_S, &usage, run)
}

fn step(what: &str) {
    eprintln!("xtask vm-systemd-test: {what}");
}

fn run(timeout: u64, prebuilt: Option<PathBuf>) -> R<bool> {
    let t0 = Instant::now();
    let root = crate::logs::root();
    let vm = root.join("target/vm");
    let here = root.join("target/vm-systemd");
    let cache = cache_dir().unwrap_or_else(|| here.clone());
    for d in [&vm, &here, &cache] {
        fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
    }
    crate::logs::apt_install(&missing_packages())?;
    let kernel = crate::vm::kernel(&vm)?;
    let rootfs = rootfs(&cache)?;
    let stockade = crate::vm::stockade_binary(&root, prebuilt)?;
    let bins: Vec<(String, PathBuf)> = crate::vm::payloads(&root, &vm)?
        .into_iter()
        .filter(|(n, _)| PAYLOADS.contains(&n.as_str()))
        .collect();
    if bins.len() != PAYLOADS.len() {
        return Err(format!("tests/vm does not build all of {PAYLOADS:?}"));
    }
    let initrd = here.join("initramfs.cpio");
    initramfs(&root, &rootfs, &initrd, &stockade, &bins)?;
    step(&format!("prepared in {:.0?}; booting", t0.elapsed()));
    boot(&kernel, &initrd, Duration::from_secs(timeout))
}

/// Where the root file system's archive is kept between runs, also across
/// clones (CI starts from a fresh one): `$XDG_CACHE_HOME` or `~/.cache`,
/// under `stockade-xtask/vm-systemd`. Only an optimisation: it is rebuilt
/// when missing or made from another recipe.
fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".cache"),
    };
    Some(base.join("stockade-xtask/vm-systemd"))
}

/// The Debian packages this suite needs that are not installed (besides
/// `cargo xtask vm-test`'s).
pub fn missing_packages() -> Vec<&'static str> {
    let mut want = crate::vm::missing_packages();
    if !crate::logs::have("mmdebstrap") {
        want.push("mmdebstrap");
    }
    want
}

// ---------------------------------------------------------------- rootfs

/// The root file system as a cpio archive, made once by mmdebstrap and
/// kept while the recipe (the stamp) is the same.
fn rootfs(dir: &Path) -> R<PathBuf> {
    let cpio = dir.join("rootfs.cpio");
    let stamp = dir.join("rootfs.stamp");
    let args = [
        "--variant=essential".to_string(),
        format!("--include={PACKAGES}"),
        "--dpkgopt=path-exclude=/usr/share/man/*".to_string(),
        "--dpkgopt=path-exclude=/usr/share/doc/*".to_string(),
        "--dpkgopt=path-exclude=/usr/share/locale/*".to_string(),
        "--dpkgopt=path-exclude=/usr/share/info/*".to_string(),
        SUITE.to_string(),
    ];
    let recipe = format!("mmdebstrap {}\n", args.join(" "));
    if cpio.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == recipe) {
        return Ok(cpio);
    }
    let tree = dir.join("rootfs");
    let _ = fs::remove_dir_all(&tree);
    step(&format!(
        "building the VM's root file system (Debian {SUITE}: {PACKAGES}) with mmdebstrap"
    ));
    crate::vm::logged(Command::new("mmdebstrap").args(&args).arg(&tree))?;
    let mut c = Cpio::new();
    add_tree(&mut c, &tree, Path::new(""))?;
    fs::write(&cpio, c.finish()).map_err(|e| format!("write {}: {e}", cpio.display()))?;
    fs::write(&stamp, recipe).map_err(|e| format!("write {}: {e}", stamp.display()))?;
    let _ = fs::remove_dir_all(&tree);
    Ok(cpio)
}

/// `root/rel` and everything below it into `c`, with owners and modes
/// (hard links become copies; sockets and fifos are left out).
fn add_tree(c: &mut Cpio, root: &Path, rel: &Path) -> R<()> {
    let p = root.join(rel);
    let md = fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let name = rel
        .to_str()
        .ok_or_else(|| format!("{}: not UTF-8", p.display()))?;
    let ft = md.file_type();
    let (mode, uid, gid) = (md.mode(), md.uid(), md.gid());
    if ft.is_dir() {
        if !name.is_empty() {
            c.entry(name, mode, uid, gid, &[], (0, 0));
        }
        let mut kids: Vec<_> = fs::read_dir(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        kids.sort();
        for k in kids {
            add_tree(c, root, &rel.join(k))?;
        }
    } else if ft.is_file() {
        c.entry(name, mode, uid, gid, &crate::vm::read(&p)?, (0, 0));
    } else if ft.is_symlink() {
        let to = fs::read_link(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let to = to
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", p.display()))?;
        c.entry(name, mode, uid, gid, to.as_bytes(), (0, 0));
    } else {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() || ft.is_block_device() {
            c.entry(name, mode, uid, gid, &[], major_minor(md.rdev()));
        }
    }
    Ok(())
}

/// A device number's (major, minor), as glibc's major(3) and minor(3).
fn major_minor(r: u64) -> (u32, u32) {
    let major = ((r >> 8) & 0xfff) | ((r >> 32) & !0xfff);
    let minor = (r & 0xff) | ((r >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// The root file system's archive followed by one with stockade, the
/// payloads and the suite's files (the kernel unpacks both, the second
/// over the first).
fn initramfs(
    root: &Path,
    rootfs: &Path,
    dst: &Path,
    stockade: &Path,
    bins: &[(String, PathBuf)],
) -> R<()> {
    let src = root.join("tests/vm-systemd");
    let mut c = Cpio::new();
    const REG: u32 = 0o100000;
    const DIR: u32 = 0o040000;
    c.entry("usr/share/vmtest", DIR | 0o755, 0, 0, &[], (0, 0));
    c.entry(
        "init",
        REG | 0o755,
        0,
        0,
        &crate::vm::read(&src.join("init.sh"))?,
        (0, 0),
    );
    c.entry(
        "usr/share/vmtest/tests.sh",
        REG | 0o755,
        0,
        0,
        &crate::vm::read(&src.join("tests.sh"))?,
        (0, 0),
    );
    c.entry(
        "etc/systemd/system/vmtest.service",
        REG | 0o644,
        0,
        0,
        &crate::vm::read(&src.join("vmtest.service"))?,
        (0, 0),
    );
    c.entry(
        "usr/local/bin/stockade",
        REG | 0o755,
        0,
        0,
        &crate::vm::read(stockade)?,
        (0, 0),
    );
    for (name, p) in bins {
        c.entry(
            &format!("usr/local/bin/{name}"),
            REG | 0o755,
            0,
            0,
            &crate::vm::read(p)?,
            (0, 0),
        );
    }
    let mut f = fs::File::create(dst).map_err(|e| format!("create {}: {e}", dst.display()))?;
    let mut base = fs::File::open(rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))?;
    std::io::copy(&mut base, &mut f).map_err(|e| format!("write {}: {e}", dst.display()))?;
    f.write_all(&c.finish())
        .map_err(|e| format!("write {}: {e}", dst.display()))
}

// ---------------------------------------------------------------- boot

fn boot(kernel: &Path, initrd: &Path, timeout: Duration) -> R<bool> {
    let mut console = crate::logs::fresh(CONSOLE_LOG)?;
    let machine = crate::vm::Machine {
        kernel,
        initrd,
        cmdline: "console=ttyS0 quiet panic=-1 rdinit=/init cgroup_no_v1=all lsm=landlock,yama \
                  systemd.unified_cgroup_hierarchy=1 systemd.wants=vmtest.service \
                  systemd.mask=serial-getty@ttyS0.service systemd.mask=getty.target",
        mem_mib: 1536,
    };
    crate::vm::qemu(
        &machine,
        timeout,
        &mut console,
        CONSOLE_LOG,
        "xtask vm-systemd-test",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_split_as_glibc_does() {
        // /dev/null, /dev/console, and a large minor (259:65536).
        assert_eq!(major_minor(0x103), (1, 3));
        assert_eq!(major_minor(0x501), (5, 1));
        assert_eq!(major_minor((259 << 8) | (0x10000 << 12)), (259, 0x10000));
    }
}
