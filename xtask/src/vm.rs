//! `cargo xtask vm-test`: the cgroup tests inside a small VM, booted twice.
//!
//! The host's cgroups are hybrid and its v2 hierarchy has no memory, cpu or
//! pids controller, so the cgroup layer is tested in a VM: Debian's kernel
//! (downloaded, unpacked, never installed), busybox, a static stockade,
//! static C payloads, the host's python3 (with its standard library, for
//! `stockade serve`'s python profile and fork server) and perl with their
//! libraries, and an /init. The first boot mounts a pure v2 hierarchy and
//! runs tests/vm/tests.sh (cold runs' cgroup limits, and the fork server's
//! forked runs) as root and as a user with a delegated subtree; the
//! second (`stockade_vm=v1` on the kernel command line) mounts the memory,
//! pids and cpu,cpuacct controllers as cgroup v1 hierarchies, with no
//! cgroup2 at all, and runs tests/vm/v1.sh as root. Each boot prints
//! `VMTEST PASS|FAIL …` lines and `VMTEST DONE` on its serial port.
//!
//! Everything downloaded is cached in target/vm/. The VM's console goes to
//! target/xtask-logs/vm-console.log (only the `VMTEST` lines are printed),
//! package installs and downloads to target/xtask-logs/apt.log.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Static C payloads: (name in the VM, source under the worktree).
const PAYLOADS: &[(&str, &str)] = &[
    ("memhog", "tests/vm/memhog.c"),
    ("forkbomb", "tests/vm/forkbomb.c"),
    ("spin", "tests/vm/spin.c"),
    ("spew", "tests/vm/spew.c"),
    ("runas", "tests/vm/runas.c"),
    ("mem_malloc", "tests/payloads/mem_malloc.c"),
];
/// The two boots: a name for the log lines and the kernel command line.
const BOOTS: &[(&str, &str)] = &[
    (
        "cgroup v2",
        "console=ttyS0 quiet panic=-1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all lsm=landlock,yama",
    ),
    (
        "cgroup v1",
        "console=ttyS0 quiet panic=-1 lsm=landlock,yama stockade_vm=v1",
    ),
];
/// Per boot.
const DEFAULT_TIMEOUT_S: u64 = 240;
/// The log of the VM's console (under target/xtask-logs).
pub const CONSOLE_LOG: &str = "vm-console.log";

pub(crate) type R<T> = Result<T, String>;

pub fn main(args: &[String]) -> i32 {
    let usage = format!("usage: cargo xtask vm-test [--timeout SECS] [--stockade STATIC-BINARY]\n  boots a VM (qemu, TCG) with a pure cgroup v2 hierarchy and runs tests/vm/tests.sh\n  as root and as a delegated user, then boots it again with cgroup v1 hierarchies and\n  runs tests/vm/v1.sh as root; exits 1 on any FAIL, a missing DONE or a timeout\n  (default {DEFAULT_TIMEOUT_S}s per boot)");
    task_main("vm-test", args, DEFAULT_TIMEOUT_S, &usage, run)
}

/// The command line of a VM task (`--timeout SECS`, `--stockade PATH`,
/// `--help`) read for `task` (its name in messages), then `run(timeout,
/// prebuilt stockade)`; the task's exit code: 0 passed (or help), 1
/// failed, 2 a bad argument.
pub(crate) fn task_main(
    task: &str,
    args: &[String],
    default_timeout: u64,
    usage: &str,
    run: impl FnOnce(u64, Option<PathBuf>) -> R<bool>,
) -> i32 {
    let mut timeout = default_timeout;
    let mut prebuilt = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--timeout" => match it.next().and_then(|v| v.parse().ok()) {
                Some(v) => timeout = v,
                None => {
                    eprintln!("xtask {task}: --timeout needs a number of seconds");
                    return 2;
                }
            },
            "--stockade" => match it.next() {
                Some(v) => prebuilt = Some(PathBuf::from(v)),
                None => {
                    eprintln!("xtask {task}: --stockade needs the path of a static stockade");
                    return 2;
                }
            },
            "-h" | "--help" => {
                println!("{usage}");
                return 0;
            }
            other => {
                eprintln!("xtask {task}: unknown argument {other:?} (try --help)");
                return 2;
            }
        }
    }
    match run(timeout, prebuilt) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("xtask {task}: {e}");
            1
        }
    }
}

fn step(what: &str) {
    eprintln!("xtask vm-test: {what}");
}

fn run(timeout: u64, prebuilt: Option<PathBuf>) -> R<bool> {
    let t0 = Instant::now();
    let root = crate::logs::root();
    let vm = root.join("target/vm");
    fs::create_dir_all(&vm).map_err(|e| format!("mkdir {}: {e}", vm.display()))?;

    ensure_tools()?;
    let kernel = kernel(&vm)?;
    let busybox = busybox(&vm)?;
    let stockade = stockade_binary(&root, prebuilt)?;
    let bins = payloads(&root, &vm)?;
    let initrd = vm.join("initramfs.cpio");
    initramfs(&root, &vm, &initrd, &busybox, &stockade, &bins, &[])?;
    let size = fs::metadata(&initrd).map_or(0, |m| m.len() as usize);
    step(&format!(
        "prepared in {:.0?}, initramfs {:.1} MiB; booting",
        t0.elapsed(),
        mib(size)
    ));
    let mut console = crate::logs::fresh(CONSOLE_LOG)?;
    let mut ok = true;
    for (name, cmdline) in BOOTS {
        let t = Instant::now();
        step(&format!("booting with {name}"));
        ok &= boot(
            &kernel,
            &initrd,
            cmdline,
            name,
            Duration::from_secs(timeout),
            &mut console,
        )?;
        step(&format!("{name} boot took {:.0?}", t.elapsed()));
    }
    Ok(ok)
}

// ---------------------------------------------------------------- host tools

fn output(cmd: &mut Command) -> R<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{shown}: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn status(cmd: &mut Command) -> R<()> {
    let shown = format!("{cmd:?}");
    let st = cmd.status().map_err(|e| format!("{shown}: {e}"))?;
    if !st.success() {
        return Err(format!("{shown}: {st}"));
    }
    Ok(())
}

/// Static or static-pie, read from the ELF headers.
pub(crate) fn is_static(path: &Path) -> R<bool> {
    crate::binaries::linkage(path).map(|l| l != crate::binaries::Linkage::Dynamic)
}

/// The Debian packages the VM suite needs that are not installed.
pub fn missing_packages() -> Vec<&'static str> {
    let mut want = Vec::new();
    if !crate::logs::have("qemu-system-x86_64") {
        want.push("qemu-system-x86");
    }
    if !is_static(Path::new("/bin/busybox")).unwrap_or(false) {
        want.push("busybox-static");
    }
    if !crate::logs::have("gcc") {
        want.extend(["gcc", "libc6-dev"]);
    }
    want
}

fn ensure_tools() -> R<()> {
    crate::logs::apt_install(&missing_packages())
}

/// A download step, its output into apt.log.
pub(crate) fn logged(cmd: &mut Command) -> R<()> {
    let shown = format!("{cmd:?}");
    crate::logs::note(crate::logs::APT_LOG, &format!("$ {shown}"));
    if crate::logs::run_to(crate::logs::APT_LOG, true, cmd)? {
        Ok(())
    } else {
        Err(format!(
            "{shown} failed, log: {}",
            crate::logs::shown(crate::logs::APT_LOG)
        ))
    }
}

// ---------------------------------------------------------------- kernel

/// Debian's kernel, unpacked (not installed) into target/vm/kernel.
pub(crate) fn kernel(vm: &Path) -> R<PathBuf> {
    let vmlinuz = vm.join("vmlinuz");
    if vmlinuz.exists() {
        return Ok(vmlinuz);
    }
    let deps = match output(Command::new("apt-cache").args(["depends", "linux-image-amd64"])) {
        Ok(d) if d.contains("Depends: linux-image-") => d,
        _ => {
            crate::logs::apt_update()?;
            output(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))?
        }
    };
    let pkg = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
        .ok_or_else(|| {
            format!("no linux-image-*-amd64 in `apt-cache depends linux-image-amd64`:\n{deps}")
        })?
        .to_string();
    let dl = vm.join("dl");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).map_err(|e| format!("mkdir {}: {e}", dl.display()))?;
    step(&format!(
        "downloading Debian's kernel ({pkg}, not installed)"
    ));
    logged(
        Command::new("apt-get")
            .args(["download", "-q", &pkg])
            .current_dir(&dl),
    )?;
    let deb = fs::read_dir(&dl)
        .map_err(|e| format!("{}: {e}", dl.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("apt-get download {pkg} left no .deb in {}", dl.display()))?;
    let unpacked = vm.join("kernel");
    let _ = fs::remove_dir_all(&unpacked);
    logged(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let boot = unpacked.join("boot");
    let mut image = None;
    let mut config = None;
    for e in fs::read_dir(&boot)
        .map_err(|e| format!("{}: {e}", boot.display()))?
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("vmlinuz-") {
            image = Some(e.path());
        } else if n.starts_with("config-") {
            config = Some(e.path());
        }
    }
    let image = image.ok_or_else(|| format!("no vmlinuz-* in {}", boot.display()))?;
    if let Some(c) = config {
        check_config(&c)?;
    }
    fs::copy(&image, &vmlinuz).map_err(|e| format!("copy {}: {e}", image.display()))?;
    // The modules are not needed: everything the tests use is built in.
    let _ = fs::remove_dir_all(&dl);
    let _ = fs::remove_dir_all(&unpacked);
    Ok(vmlinuz)
}

/// The tests need these built in (the initramfs carries no modules).
fn check_config(path: &Path) -> R<()> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let need = [
        "CONFIG_BLK_DEV_INITRD",
        "CONFIG_DEVTMPFS",
        "CONFIG_SERIAL_8250_CONSOLE",
        "CONFIG_CGROUPS",
        "CONFIG_MEMCG",
        "CONFIG_CGROUP_PIDS",
        "CONFIG_CFS_BANDWIDTH",
        "CONFIG_USER_NS",
        "CONFIG_PID_NS",
        "CONFIG_NET_NS",
        "CONFIG_SECCOMP_FILTER",
        "CONFIG_SECURITY_LANDLOCK",
    ];
    let missing: Vec<&str> = need
        .iter()
        .copied()
        .filter(|o| !text.lines().any(|l| l == format!("{o}=y")))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: not built in: {} (the VM has no modules)",
            path.display(),
            missing.join(", ")
        ))
    }
}

pub(crate) fn busybox(vm: &Path) -> R<PathBuf> {
    let dst = vm.join("busybox");
    if !dst.exists() {
        fs::copy("/bin/busybox", &dst).map_err(|e| format!("copy /bin/busybox: {e}"))?;
    }
    if !is_static(&dst)? {
        let _ = fs::remove_file(&dst);
        return Err("/bin/busybox is not static (install busybox-static)".into());
    }
    Ok(dst)
}

// ---------------------------------------------------------------- binaries

/// The static release stockade that ships, built in target/static (its own
/// target dir, so it does not invalidate the normal builds) by
/// `binaries::build_static`, as the README's, the Docker suite's and the
/// bench's: the musl build, or the glibc crt-static fallback.
/// The static stockade to put in the VM: `prebuilt` (which must be
/// static), else one built from `root`.
pub(crate) fn stockade_binary(root: &Path, prebuilt: Option<PathBuf>) -> R<PathBuf> {
    match prebuilt {
        Some(p) if is_static(&p)? => Ok(p),
        Some(p) => Err(format!("{} is not statically linked", p.display())),
        None => static_stockade(root),
    }
}

pub(crate) fn static_stockade(root: &Path) -> R<PathBuf> {
    step("building a static stockade (target/static)");
    let bin = crate::binaries::build_static(root)?;
    if !is_static(&bin)? {
        return Err(format!("{} is not statically linked", bin.display()));
    }
    Ok(bin)
}

pub(crate) fn payloads(root: &Path, vm: &Path) -> R<Vec<(String, PathBuf)>> {
    let out = vm.join("bin");
    fs::create_dir_all(&out).map_err(|e| format!("mkdir {}: {e}", out.display()))?;
    let mut bins = Vec::new();
    for (name, src) in PAYLOADS {
        let src = root.join(src);
        let bin = out.join(name);
        let fresh = match (fs::metadata(&src), fs::metadata(&bin)) {
            (Ok(s), Ok(b)) => match (s.modified(), b.modified()) {
                (Ok(s), Ok(b)) => b > s,
                _ => false,
            },
            _ => false,
        };
        if !fresh {
            status(
                Command::new("gcc")
                    .args(["-static", "-O2", "-Wall", "-Werror", "-o"])
                    .arg(&bin)
                    .arg(&src),
            )?;
        }
        bins.push((name.to_string(), bin));
    }
    Ok(bins)
}

// ---------------------------------------------------------------- initramfs

/// A cpio archive in the "newc" format the kernel unpacks into its rootfs.
pub(crate) struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Cpio {
    pub(crate) fn new() -> Cpio {
        Cpio {
            buf: Vec::new(),
            ino: 1,
        }
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn entry(
        &mut self,
        name: &str,
        mode: u32,
        uid: u32,
        gid: u32,
        data: &[u8],
        rdev: (u32, u32),
    ) {
        let nlink = if mode & 0o170000 == S_IFDIR { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            uid,
            gid,
            nlink,
            0, // mtime
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn dir(&mut self, name: &str, mode: u32, owner: u32) {
        self.entry(name, S_IFDIR | mode, owner, owner, &[], (0, 0));
    }

    fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, S_IFREG | mode, 0, 0, data, (0, 0));
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, 0, 0, target.as_bytes(), (0, 0));
    }

    fn chardev(&mut self, name: &str, mode: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | mode, 0, 0, &[], (major, minor));
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 0, 0, &[], (0, 0));
        while !self.buf.len().is_multiple_of(512) {
            self.buf.push(0);
        }
        self.buf
    }
}

pub(crate) fn read(p: &Path) -> R<Vec<u8>> {
    fs::read(p).map_err(|e| format!("read {}: {e}", p.display()))
}

/// `extra`: more files (path in the initramfs, contents), mode 0755.
pub(crate) fn initramfs(
    root: &Path,
    vm: &Path,
    dst: &Path,
    busybox: &Path,
    stockade: &Path,
    bins: &[(String, PathBuf)],
    extra: &[(String, Vec<u8>)],
) -> R<()> {
    let mut c = Cpio::new();
    for d in [
        "usr",
        "usr/bin",
        "usr/share",
        "usr/share/vmtest",
        "etc",
        "proc",
        "sys",
        "dev",
        "tmp",
        "root",
        "home",
        "run",
        "var",
    ] {
        c.dir(d, 0o755, 0);
    }
    c.dir("home/user", 0o755, 1000);
    c.symlink("bin", "usr/bin");
    c.symlink("sbin", "usr/bin");
    c.symlink("lib", "usr/lib");
    c.symlink("lib64", "usr/lib64");
    for (name, files) in interpreters(vm) {
        match files {
            Ok(files) => {
                let mut dirs: Vec<String> = Vec::new();
                for (path, _) in &files {
                    let mut d = Path::new(path).parent();
                    let mut chain = Vec::new();
                    while let Some(p) = d.filter(|p| !p.as_os_str().is_empty()) {
                        chain.push(p.to_string_lossy().into_owned());
                        d = p.parent();
                    }
                    for p in chain.into_iter().rev() {
                        if p != "usr" && p != "usr/bin" && !dirs.contains(&p) {
                            c.dir(&p, 0o755, 0);
                            dirs.push(p);
                        }
                    }
                }
                for (path, data) in &files {
                    c.file(path, 0o755, data);
                }
            }
            Err(why) => step(&format!("no {name} in the VM: {why}")),
        }
    }
    c.chardev("dev/console", 0o600, 5, 1);
    c.chardev("dev/null", 0o666, 1, 3);
    c.file("usr/bin/busybox", 0o755, &read(busybox)?);
    c.file("usr/bin/stockade", 0o755, &read(stockade)?);
    for (name, p) in bins {
        c.file(&format!("usr/bin/{name}"), 0o755, &read(p)?);
    }
    for (path, data) in extra {
        c.file(path, 0o755, data);
    }
    c.file("init", 0o755, &read(&root.join("tests/vm/init.sh"))?);
    for f in ["lib.sh", "tests.sh", "v1.sh"] {
        c.file(
            &format!("usr/share/vmtest/{f}"),
            0o755,
            &read(&root.join("tests/vm").join(f))?,
        );
    }
    c.file(
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:delegated user:/home/user:/bin/sh\n",
    );
    c.file("etc/group", 0o644, b"root:x:0:\nuser:x:1000:\n");
    let data = c.finish();
    let mut f = fs::File::create(dst).map_err(|e| format!("create {}: {e}", dst.display()))?;
    f.write_all(&data)
        .map_err(|e| format!("write {}: {e}", dst.display()))
}

/// The host's python3 and perl, each with the shared libraries `ldd`
/// names (into usr/lib/x86_64-linux-gnu, the dynamic loader into
/// usr/lib64): perl for the memory payloads, python3 for those and for
/// `stockade serve`'s python profile and fork server, with its standard
/// library ([`python_stdlib`]). Paths are relative to the initramfs root,
/// deduplicated across both (a file seen twice is one entry); Err: why
/// one is left out.
type Files = Vec<(String, Vec<u8>)>;

fn interpreters(vm: &Path) -> Vec<(&'static str, R<Files>)> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (name, bin) in [("python3", "/usr/bin/python3"), ("perl", "/usr/bin/perl")] {
        let got = interpreter(bin)
            .and_then(|mut files| {
                if name == "python3" {
                    files.extend(python_stdlib(bin, vm)?);
                }
                Ok(files)
            })
            .map(|files| {
                files
                    .into_iter()
                    .filter(|(p, _)| {
                        let new = !seen.contains(p);
                        seen.push(p.clone());
                        new
                    })
                    .collect()
            });
        out.push((name, got));
    }
    out
}

fn interpreter(bin: &str) -> R<Files> {
    let real = fs::canonicalize(bin).map_err(|e| format!("{bin}: {e}"))?;
    let mut files = vec![(bin.trim_start_matches('/').to_string(), read(&real)?)];
    for (dst, src) in libraries(&real)? {
        files.push((dst, read(&src)?));
    }
    Ok(files)
}

/// The shared libraries `ldd` names for `elf`: (where in the initramfs,
/// the host's file).
fn libraries(elf: &Path) -> R<Vec<(String, PathBuf)>> {
    let shown = elf.display();
    let ldd = output(Command::new("ldd").arg(elf))?;
    let mut out = Vec::new();
    for line in ldd.lines() {
        // `libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x…)`, or the
        // loader: `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        let Some(path) = path else { continue };
        let file = Path::new(path)
            .file_name()
            .ok_or_else(|| format!("ldd {shown}: {line}"))?
            .to_string_lossy()
            .into_owned();
        let dst = if line.contains("=>") {
            format!("usr/lib/x86_64-linux-gnu/{file}")
        } else if path.starts_with("/lib64/") {
            format!("usr/lib64/{file}")
        } else {
            return Err(format!("ldd {shown}: a loader outside /lib64: {line}"));
        };
        out.push((dst, PathBuf::from(path)));
    }
    Ok(out)
}

/// Directories of the stdlib left out of the VM's zip, at any depth: test
/// suites, the GUI and IDE, installers and what only they read, and what
/// is not the stdlib (site packages, the build configuration `config-*`,
/// the extension modules, which a zip cannot hold).
const PY_SKIP_DIRS: &[&str] = &[
    "test",
    "tests",
    "idle_test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "site-packages",
    "dist-packages",
    "lib-dynload",
    "__pycache__",
];
/// Files of the stdlib left out: turtle needs tkinter; Debian's
/// sitecustomize is the host's configuration (apport's hook), not the
/// stdlib.
const PY_SKIP_FILES: &[&str] = &["turtle.py", "sitecustomize.py"];
/// Extension modules (by the start of their name) left out: test modules,
/// the terminal's (no tty in a jail), and those whose libraries would
/// outweigh the rest together: TLS and OpenSSL's hashes (libcrypto,
/// 4.7 MB; hashlib keeps its builtin md5, sha* and blake2), databases
/// (libsqlite3, libdb), NIS (Kerberos), audio, and the CJK codecs.
const PY_SKIP_EXT: &[&str] = &[
    "_test",
    "_ctypes_test",
    "_xxtestfuzz",
    "_xxsubinterpreters",
    "xxlimited",
    "_curses",
    "readline",
    "_ssl",
    "_hashlib",
    "_sqlite3",
    "_dbm",
    "_gdbm",
    "nis",
    "ossaudiodev",
    "_tkinter",
    "_codecs_",
    "_multibytecodec",
];
/// Run by the host's python3 (`-I -S -c ZIP_STDLIB LIB ZIP OUT SKIP_DIRS
/// SKIP_FILES`): every module of LIB compiled by that interpreter into
/// OUT, a zip at LIB's layout that the interpreter finds as ZIP (its
/// default sys.path entry, before LIB). Bytecode only, as unchecked
/// hash-based .pyc (nothing to compare with a source, and no compile on
/// import: a TCG VM compiles slowly); tracebacks name the file in the zip
/// without its line.
const ZIP_STDLIB: &str = r#"
import importlib.util, marshal, os, sys, zipfile
lib, zip_path, out = sys.argv[1:4]
skip_dirs, skip_files = set(sys.argv[4].split(",")), set(sys.argv[5].split(","))
n = 0
with zipfile.ZipFile(out + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for d, dirs, files in os.walk(lib):
        dirs[:] = sorted(x for x in dirs if x not in skip_dirs and not x.startswith("config-"))
        for f in sorted(files):
            if not f.endswith(".py") or f in skip_files:
                continue
            rel = os.path.relpath(os.path.join(d, f), lib)
            src = open(os.path.join(d, f), "rb").read()
            code = compile(src, os.path.join(zip_path, rel), "exec", dont_inherit=True)
            pyc = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(src) + marshal.dumps(code)
            info = zipfile.ZipInfo(rel[:-3] + ".pyc", (1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, pyc)
            n += 1
os.replace(out + ".tmp", out)
print(n)
"#;

/// python3's standard library for the VM, at the paths the interpreter
/// searches by default (`python3 -I -S` prints them), so that stockade's
/// discovery (src/host/python.rs) finds it as on the host: the pure-Python
/// modules as one zip (`/usr/lib/python3XY.zip`, built by [`ZIP_STDLIB`]
/// and kept in target/vm until the interpreter or the recipe changes),
/// `os.py` beside it (the landmark by which the interpreter finds its
/// prefix), the extension modules of lib-dynload but [`PY_SKIP_EXT`] with
/// the libraries they link (ctypes: libffi), and libgcc_s, which the fork
/// server's confinement library (a glibc cdylib the zygote loads, carried
/// inside stockade) links.
fn python_stdlib(bin: &str, vm: &Path) -> R<Files> {
    let said = output(Command::new(bin).args([
        "-I",
        "-S",
        "-c",
        "import os, sys; print(os.path.dirname(os.__file__)); print(*sys.path, sep='\\n')",
    ]))?;
    let mut lines = said.lines().map(str::trim);
    let lib = PathBuf::from(lines.next().unwrap_or_default());
    let path: Vec<&str> = lines.collect();
    let zip = path.iter().find(|p| p.ends_with(".zip"));
    let dynload = path.iter().find(|p| p.ends_with("/lib-dynload"));
    let (Some(zip), Some(dynload)) = (zip, dynload) else {
        return Err(format!(
            "{bin}: no zip or lib-dynload on its sys.path: {path:?}"
        ));
    };
    for p in [lib.as_path(), Path::new(zip), Path::new(dynload)] {
        if !p.starts_with("/usr/") {
            return Err(format!("{bin}: {} is not under /usr", p.display()));
        }
    }
    let rel = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
    let mut files = vec![(rel(&lib.join("os.py")), read(&lib.join("os.py"))?)];
    let built = stdlib_zip(bin, &lib, zip, vm)?;
    let zipped = read(&built)?;
    let mut ext = 0;
    let mut ext_bytes = 0;
    let mut libs: Vec<(String, PathBuf)> = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dynload)
        .map_err(|e| format!("{dynload}: {e}"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for so in entries {
        let name = so.file_name().unwrap_or_default().to_string_lossy();
        if !name.ends_with(".so") || PY_SKIP_EXT.iter().any(|s| name.starts_with(s)) {
            continue;
        }
        let data = read(&so)?;
        ext += 1;
        ext_bytes += data.len();
        files.push((rel(&so), data));
        libs.extend(libraries(&so)?);
    }
    // python3's own libraries are in already (by `interpreter`).
    let own = libraries(&fs::canonicalize(bin).map_err(|e| format!("{bin}: {e}"))?)?;
    let libc = own
        .iter()
        .find(|(d, _)| d.ends_with("/libc.so.6"))
        .ok_or_else(|| format!("ldd {bin}: no libc.so.6"))?;
    libs.push((
        libc.0.replace("libc.so.6", "libgcc_s.so.1"),
        libc.1.with_file_name("libgcc_s.so.1"),
    ));
    let mut lib_bytes = 0;
    let mut more = 0;
    let mut seen: Vec<String> = own.into_iter().map(|(d, _)| d).collect();
    for (dst, src) in libs {
        if seen.contains(&dst) {
            continue;
        }
        let data = read(&src)?;
        lib_bytes += data.len();
        more += 1;
        seen.push(dst.clone());
        files.push((dst, data));
    }
    step(&format!(
        "python3's stdlib for the VM: {} ({:.1} MiB), {ext} extension modules ({:.1} MiB), {more} more libraries ({:.1} MiB)",
        zip,
        mib(zipped.len()),
        mib(ext_bytes),
        mib(lib_bytes)
    ));
    files.push((rel(Path::new(zip)), zipped));
    Ok(files)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The zip of [`python_stdlib`], built into target/vm unless the one
/// there was built by the same recipe from the same interpreter (its
/// `.stamp` says which).
fn stdlib_zip(bin: &str, lib: &Path, zip: &str, vm: &Path) -> R<PathBuf> {
    let name = Path::new(zip)
        .file_name()
        .ok_or_else(|| format!("{bin}: a zip named {zip}"))?;
    let out = vm.join(name);
    let stamp_path = vm.join(format!("{}.stamp", name.to_string_lossy()));
    let real = fs::canonicalize(bin).map_err(|e| format!("{bin}: {e}"))?;
    let mtime = fs::metadata(&real)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{}: {e}", real.display()))?;
    let stamp = format!(
        "{} {mtime:?}\n{PY_SKIP_DIRS:?}\n{PY_SKIP_FILES:?}\n{ZIP_STDLIB}",
        real.display()
    );
    if out.exists() && fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
        return Ok(out);
    }
    step(&format!(
        "compiling {}'s stdlib into {}",
        bin,
        out.display()
    ));
    let _ = fs::remove_file(&stamp_path);
    output(
        Command::new(bin)
            .args(["-I", "-S", "-c", ZIP_STDLIB])
            .arg(lib)
            .arg(zip)
            .arg(&out)
            .arg(PY_SKIP_DIRS.join(","))
            .arg(PY_SKIP_FILES.join(",")),
    )?;
    fs::write(&stamp_path, stamp).map_err(|e| format!("write {}: {e}", stamp_path.display()))?;
    Ok(out)
}

// ---------------------------------------------------------------- boot

fn boot(
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    name: &str,
    timeout: Duration,
    console: &mut fs::File,
) -> R<bool> {
    let _ = writeln!(
        console,
        "==== xtask vm-test: booting with {name}: {cmdline}"
    );
    // 2 GiB: the kernel's overcommit heuristic refuses one allocation
    // larger than RAM + swap outright, and the v1 boot's payloads
    // allocate 1 GiB at once (a perl string, a malloc) so that the
    // memory controller, not that heuristic, must stop them.
    let machine = Machine {
        kernel,
        initrd,
        cmdline,
        mem_mib: 2048,
    };
    qemu(
        &machine,
        timeout,
        console,
        CONSOLE_LOG,
        &format!("xtask vm-test: {name}"),
    )
}

/// What qemu boots.
pub(crate) struct Machine<'a> {
    pub(crate) kernel: &'a Path,
    pub(crate) initrd: &'a Path,
    pub(crate) cmdline: &'a str,
    /// Its RAM.
    pub(crate) mem_mib: u32,
}

/// Boots `m` in qemu (TCG, 2 CPUs), its console and its stderr into
/// `console` (the log `console_log` under target/xtask-logs), until it
/// exits or `timeout` (then it is killed); reports what the `VMTEST` lines
/// said, each line of the report led by `what`. True where at least one
/// test passed, none failed, and `VMTEST DONE` came in time.
pub(crate) fn qemu(
    m: &Machine,
    timeout: Duration,
    console: &mut fs::File,
    console_log: &str,
    what: &str,
) -> R<bool> {
    let qemu_err = console
        .try_clone()
        .map_err(|e| format!("{console_log}: {e}"))?;
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-smp", "2"])
        .args(["-m", &m.mem_mib.to_string()])
        .args(["-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(m.kernel)
        .arg("-initrd")
        .arg(m.initrd)
        .args(["-append", m.cmdline])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(qemu_err)
        .spawn()
        .map_err(|e| format!("qemu-system-x86_64: {e}"))?;
    let stdout = child.stdout.take().ok_or("qemu: no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let s = String::from_utf8_lossy(&line)
                        .trim_end_matches(['\r', '\n'])
                        .to_string();
                    if tx.send(s).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let seen = watch(&rx, Instant::now() + timeout, console);
    if seen.timed_out {
        let _ = child.kill();
    }
    let _ = child.wait();
    eprintln!(
        "{what}: {} passed, {} failed{}{}",
        seen.pass,
        seen.fail.len(),
        if seen.done { "" } else { ", no VMTEST DONE" },
        if seen.timed_out {
            format!(", killed qemu after {}s", timeout.as_secs())
        } else {
            String::new()
        }
    );
    for f in &seen.fail {
        eprintln!("  FAIL {f}");
    }
    let ok = seen.fail.is_empty() && seen.done && !seen.timed_out && seen.pass > 0;
    if !ok {
        eprintln!("{what}: the console: {}", crate::logs::shown(console_log));
    }
    Ok(ok)
}

/// What the VM's console said.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) pass: u32,
    pub(crate) fail: Vec<String>,
    pub(crate) done: bool,
    pub(crate) timed_out: bool,
}

/// Reads the console until qemu exits or the deadline: every line into the
/// console log, the `VMTEST` lines also to stdout.
pub(crate) fn watch(
    rx: &mpsc::Receiver<String>,
    deadline: Instant,
    console: &mut fs::File,
) -> Seen {
    let mut seen = Seen::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            seen.timed_out = true;
            return seen;
        }
        let line = match rx.recv_timeout(left) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                seen.timed_out = true;
                return seen;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return seen,
        };
        let _ = writeln!(console, "{line}");
        let Some(i) = line.find("VMTEST ") else {
            continue;
        };
        println!("{}", &line[i..]);
        let rest = &line[i + 7..];
        if rest.starts_with("PASS ") {
            seen.pass += 1;
        } else if let Some(f) = rest.strip_prefix("FAIL ") {
            seen.fail.push(f.to_string());
        } else if rest.starts_with("DONE") {
            seen.done = true;
        }
    }
}
