//! `cargo xtask vm-bench`: `cargo xtask bench serve` inside the cgroup v2
//! VM of `cargo xtask vm-test` (its kernel, busybox, the host's python3
//! and standard library, a pure cgroup v2 hierarchy), as root. The VM is
//! emulated (TCG): only the ratios mean anything (the fork server's p50
//! against a bare `python3 -c pass`, forked runs/s against cold), never
//! the milliseconds. The xtask binary itself goes in, built static (musl);
//! its output comes back on the console as `VMTEST BENCH` lines.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::vm::{self, R};

/// The bench's arguments in the VM unless given after `--`: few rounds
/// and runs (an emulated CPU is about 20 times slower).
const DEFAULT_ARGS: &str = "--latency-runs 10 --runs 120 --clients 8";
/// The whole boot, bench included.
const DEFAULT_TIMEOUT_S: u64 = 1800;
/// The kernel command line: vm-test's cgroup v2 boot, then the bench.
const CMDLINE: &str = "console=ttyS0 quiet panic=-1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all lsm=landlock,yama stockade_vm=bench";
/// The console's log (under target/xtask-logs).
const CONSOLE_LOG: &str = "vm-bench-console.log";

pub fn main(args: &[String]) -> i32 {
    let usage = format!(
        "usage: cargo xtask vm-bench [--timeout SECS] [--stockade STATIC-BINARY] [-- BENCH-SERVE-ARGS…]\n  boots the cgroup v2 VM of vm-test (qemu, TCG) and runs `cargo xtask bench serve`\n  in it as root (default arguments: {DEFAULT_ARGS}); the VM is emulated, so read\n  its ratios, not its milliseconds (default timeout {DEFAULT_TIMEOUT_S}s)"
    );
    let (ours, bench) = match split(args) {
        Ok(split) => split,
        Err(e) => {
            eprintln!("xtask vm-bench: {e}");
            return 2;
        }
    };
    vm::task_main("vm-bench", ours, DEFAULT_TIMEOUT_S, &usage, |t, p| {
        run(t, p, &bench)
    })
}

/// vm-bench's own arguments, and bench serve's (after `--`, or the
/// defaults) as one line for the VM's shell, which splits it at spaces:
/// an argument that the split would change is refused, named.
fn split(args: &[String]) -> R<(&[String], String)> {
    let Some(i) = args.iter().position(|a| a == "--") else {
        return Ok((args, DEFAULT_ARGS.to_string()));
    };
    let plain = |a: &&String| {
        !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.,=/:".contains(c))
    };
    match args[i + 1..].iter().find(|a| !plain(a)) {
        Some(bad) => Err(format!(
            "bench serve argument {bad:?}: only letters, digits and -_.,=/: can reach the VM"
        )),
        None => Ok((&args[..i], args[i + 1..].join(" "))),
    }
}

fn run(timeout: u64, prebuilt: Option<PathBuf>, args: &str) -> R<bool> {
    let t0 = Instant::now();
    let root = crate::logs::root();
    let dir = root.join("target/vm");
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let kernel = vm::kernel(&dir)?;
    let busybox = vm::busybox(&dir)?;
    let stockade = vm::stockade_binary(&root, prebuilt)?;
    let xtask = static_xtask(&root)?;
    let bins = vm::payloads(&root, &dir)?;
    let extra = vec![
        ("usr/bin/xtask".to_string(), vm::read(&xtask)?),
        (
            "usr/share/vmtest/bench-args".to_string(),
            format!("{args}\n").into_bytes(),
        ),
    ];
    let initrd = dir.join("initramfs-bench.cpio");
    vm::initramfs(&root, &dir, &initrd, &busybox, &stockade, &bins, &extra)?;
    eprintln!(
        "xtask vm-bench: prepared in {:.0?}; booting (bench serve {args})",
        t0.elapsed()
    );
    let mut console = crate::logs::fresh(CONSOLE_LOG)?;
    let machine = vm::Machine {
        kernel: &kernel,
        initrd: &initrd,
        cmdline: CMDLINE,
        mem_mib: 2048,
    };
    let ok = vm::qemu(
        &machine,
        Duration::from_secs(timeout),
        &mut console,
        CONSOLE_LOG,
        "xtask vm-bench",
    )?;
    eprintln!("xtask vm-bench: took {:.0?}", t0.elapsed());
    Ok(ok)
}

/// The xtask binary built static, for the VM.
fn static_xtask(root: &Path) -> R<PathBuf> {
    let bin = crate::binaries::build_static_bin(root, "xtask")?;
    match vm::is_static(&bin)? {
        true => Ok(bin),
        false => Err(format!("{} is not statically linked", bin.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bench_arguments_follow_the_double_dash_and_odd_ones_are_refused() {
        let a = owned(&["--timeout", "60"]);
        assert_eq!(split(&a).unwrap(), (&a[..], DEFAULT_ARGS.to_string()));
        let a = owned(&[
            "--timeout",
            "60",
            "--",
            "--runs",
            "50",
            "--load",
            "fork,cold",
        ]);
        let (ours, bench) = split(&a).unwrap();
        assert_eq!(ours, &a[..2]);
        assert_eq!(bench, "--runs 50 --load fork,cold");
        for bad in ["two words", "a'quote", "$(reboot)", "*", ""] {
            let a = owned(&["--", "--runs", bad]);
            let e = split(&a).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
