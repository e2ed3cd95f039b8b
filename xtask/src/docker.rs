//! `cargo xtask docker-test`: stockade inside a real Docker engine.
//!
//! Builds the static binary (musl, or the glibc crt-static fallback, in
//! target/static; see `binaries`), assembles an image from local files only
//! (FROM scratch: the binary, busybox-static, Debian's python3.11 and bwrap
//! with their shared libraries; no registry), and runs tests/docker/case.sh
//! under several `docker run` settings. Each setting is one container; the
//! script prints `key=value` lines and the checks below assert on them: the
//! JSON outcome's status and layers, and the *effects* of a hostile Python
//! payload (canary not read, no file written outside, the listener never saw
//! a connection), each beside a control run outside stockade in the same
//! container. Where the setting gives the fallback, `docker_fallback` runs
//! issue 12's hostile programs in a second container.
//!
//! Each check prints one line, `DOCKERTEST PASS|FAIL|SKIPPED: <name>…`, which
//! `cargo xtask test` counts; the run ends with `N passed, N failed, N
//! skipped`. Without a reachable engine (or a host prerequisite) every check
//! is reported `SKIPPED` with the reason and counted as skipped, never passed.

use crate::{docker_bwrap, docker_compose, docker_fallback, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cargo xtask docker-test [--no-build] [--only compose|bwrap]
  --no-build  use the static binary as it is: target/static/x86_64-unknown-linux-musl/release/stockade,
              else (the glibc fallback) target/static/x86_64-unknown-linux-gnu/release/stockade
  --only compose  run only the Docker Compose sidecar checks (docker_compose.rs)
  --only bwrap    run only the `stockade bwrap` fallback checks (docker_bwrap.rs)";

/// The image the cases run in.
const IMAGE: &str = "stockade-docker-test:latest";
/// An image with nothing but the static binary.
const IMAGE_BARE: &str = "stockade-docker-bare:latest";
/// Bump when the base layer's contents change (forces a rebuild of base/).
const BASE_VERSION: &str = "3";
/// Debian's interpreter, copied into the image with its libraries.
const PYTHON: &str = "/usr/bin/python3.11";
const PYTHON_LIB: &str = "/usr/lib/python3.11";
/// The payload's seccomp probe calls unshare(2) through ctypes (needs libffi).
const PYTHON_CTYPES: &str =
    "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so";
const BUSYBOX: &str = "/bin/busybox";
const BWRAP: &str = "/usr/bin/bwrap";
/// Longest one container may take before it is removed and the case fails.
const CASE_DEADLINE: Duration = Duration::from_secs(120);

/// Counts for the summary line of `cargo xtask test`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
}

impl Summary {
    pub(crate) fn pass(&mut self, name: &str) {
        self.passed += 1;
        println!("DOCKERTEST PASS {name}");
    }
    pub(crate) fn fail(&mut self, name: &str, why: &str) {
        self.failed += 1;
        println!("DOCKERTEST FAIL {name}: {why}");
    }
    pub(crate) fn skip(&mut self, name: &str, why: &str) {
        self.skipped += 1;
        println!("DOCKERTEST SKIPPED: {name}: {why}");
    }
    pub(crate) fn check(&mut self, name: &str, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => {
                self.pass(name);
                true
            }
            Err(why) => {
                self.fail(name, &why);
                false
            }
        }
    }
}

pub fn main(args: &[String]) -> i32 {
    let mut build = true;
    let mut compose_only = false;
    let mut bwrap_only = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-build" => build = false,
            "--only" => match it.next().map(String::as_str) {
                Some("compose") => compose_only = true,
                Some("bwrap") => bwrap_only = true,
                other => {
                    eprintln!("xtask docker-test: --only {other:?}: compose or bwrap\n{USAGE}");
                    return 2;
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return 0;
            }
            other => {
                eprintln!("xtask docker-test: unknown argument {other:?}\n{USAGE}");
                return 2;
            }
        }
    }
    let s = run(build, compose_only, bwrap_only);
    println!(
        "{} passed, {} failed, {} skipped",
        s.passed, s.failed, s.skipped
    );
    i32::from(s.failed > 0)
}

/// What a configuration's run must show.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Namespaces refused: the layered fallback, with every namespace layer
    /// `unavailable`, Landlock and seccomp `applied`, and `--require userns`
    /// failing closed with 125.
    Fallback,
    /// The full jail: user, mount, pid and net namespaces `applied`.
    FullJail,
    /// Either of the two (the engine allows user namespaces but refuses a
    /// step after them); the payload must be confined all the same, and the
    /// mode seen is printed.
    Confined,
}

pub(crate) struct Config {
    pub(crate) name: &'static str,
    pub(crate) docker: &'static [&'static str],
    expect: Expect,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "default",
        docker: &[],
        expect: Expect::Fallback,
    },
    Config {
        name: "default-uid65534",
        docker: &["--user", "65534:65534"],
        expect: Expect::Fallback,
    },
    Config {
        name: "seccomp-unconfined",
        docker: &["--security-opt", "seccomp=unconfined"],
        expect: Expect::Confined,
    },
    Config {
        name: "cap-sys-admin",
        docker: &["--cap-add", "SYS_ADMIN"],
        expect: Expect::Confined,
    },
    Config {
        name: "seccomp-unconfined-systempaths-unconfined",
        docker: &[
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "systempaths=unconfined",
        ],
        expect: Expect::FullJail,
    },
    Config {
        name: "seccomp-unconfined-systempaths-unconfined-uid65534",
        docker: &[
            "--user",
            "65534:65534",
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "systempaths=unconfined",
        ],
        expect: Expect::FullJail,
    },
];

/// Names of the checks each configuration reports (so a skip counts them all).
fn check_names(c: &Config) -> Vec<String> {
    let mut v = vec![
        "runs the payload",
        "layers",
        "canary not read",
        "no write outside",
        "no tcp connect",
        "environment cleared",
        "seccomp filter added",
    ];
    match c.expect {
        Expect::Fallback => v.extend([
            "stderr names missing layers",
            "--require userns fails closed",
        ]),
        Expect::FullJail => v.push("--require userns runs"),
        Expect::Confined => {}
    }
    v.push("bwrap comparison");
    v.into_iter()
        .map(|n| format!("docker/{}: {n}", c.name))
        .collect()
}

const HOST_CHECKS: &[&str] = &[
    "docker/static binary has no interpreter",
    "docker/static binary runs from a FROM scratch image",
];

fn skip_all(s: &mut Summary, why: &str, compose_only: bool) {
    docker_compose::skip_all(s, why);
    if compose_only {
        return;
    }
    for n in HOST_CHECKS {
        s.skip(n, why);
    }
    for c in CONFIGS {
        for n in check_names(c) {
            s.skip(&n, why);
        }
        if c.expect == Expect::Fallback {
            for n in docker_fallback::check_names(c) {
                s.skip(&n, why);
            }
            for n in docker_bwrap::check_names(c) {
                s.skip(&n, why);
            }
        }
    }
}

/// Build, then run every configuration (with `compose_only`, only the
/// Docker Compose checks).
fn run(build: bool, compose_only: bool, bwrap_only: bool) -> Summary {
    let mut s = Summary::default();
    let t0 = Instant::now();
    let root = match workspace_root() {
        Ok(r) => r,
        Err(e) => {
            s.fail("docker/setup", &e);
            return s;
        }
    };
    // 1. An engine.
    let server = match engine_version() {
        Ok(v) => v,
        Err(why) => {
            skip_all(
                &mut s,
                &format!("no Docker engine reachable: {why}"),
                compose_only,
            );
            return s;
        }
    };
    println!("docker-test: engine {server}");
    // 2. Host prerequisites for the image.
    for (path, pkg) in [(BUSYBOX, "busybox-static"), (PYTHON, "python3.11-minimal")] {
        if !Path::new(path).exists() {
            skip_all(
                &mut s,
                &format!("{path} missing (apt-get install {pkg})"),
                compose_only,
            );
            return s;
        }
    }
    if !matches!(elf_interpreter(Path::new(BUSYBOX)), Ok(None)) {
        skip_all(
            &mut s,
            &format!("{BUSYBOX} is not a static binary (apt-get install busybox-static)"),
            compose_only,
        );
        return s;
    }
    // 3. The static binary.
    let t = Instant::now();
    let bin = match static_binary(&root, build) {
        Ok(b) => b,
        Err(e) => {
            s.fail("docker/static build", &e);
            return s;
        }
    };
    println!(
        "docker-test: static binary {} ({:.1}s)",
        bin.display(),
        t.elapsed().as_secs_f64()
    );
    if compose_only {
        docker_compose::run(&mut s, &root, &root.join("target/docker"), &bin);
        return s;
    }
    let interp = elf_interpreter(&bin);
    s.check(
        HOST_CHECKS[0],
        match interp {
            Ok(None) => Ok(()),
            Ok(Some(i)) => Err(format!("{} asks for the interpreter {i}", bin.display())),
            Err(e) => Err(e),
        },
    );
    // 4. Images.
    let t = Instant::now();
    let ctx = root.join("target/docker");
    if let Err(e) = build_images(&root, &ctx, &bin) {
        s.fail("docker/image build", &e);
        return s;
    }
    println!(
        "docker-test: images built ({:.1}s)",
        t.elapsed().as_secs_f64()
    );
    s.check(HOST_CHECKS[1], bare_image_runs(&bin));
    // 5. The cases.
    let have_bwrap = Path::new(BWRAP).exists();
    for (i, c) in CONFIGS.iter().enumerate() {
        if bwrap_only {
            if c.expect == Expect::Fallback {
                docker_bwrap::run(&mut s, c, i);
            }
            continue;
        }
        let t = Instant::now();
        let out = run_case(c, i, have_bwrap);
        let secs = t.elapsed().as_secs_f64();
        match out {
            Ok(r) => {
                println!(
                    "--- docker/{} ({:.1}s): docker run {}",
                    c.name,
                    secs,
                    c.docker.join(" ")
                );
                judge(&mut s, c, &r, have_bwrap);
            }
            Err(e) => {
                for n in check_names(c) {
                    s.fail(&n, &e);
                }
            }
        }
        // Issue 12's hostile programs, where the fallback is what users get.
        if c.expect == Expect::Fallback {
            docker_fallback::run(&mut s, c, i);
            // `stockade bwrap` where the real bwrap cannot start.
            docker_bwrap::run(&mut s, c, i);
        }
    }
    if bwrap_only {
        return s;
    }
    // The sidecar pattern under Docker Compose.
    let t = Instant::now();
    docker_compose::run(&mut s, &root, &root.join("target/docker"), &bin);
    println!("docker-test: compose ({:.1}s)", t.elapsed().as_secs_f64());
    println!("docker-test: total {:.1}s", t0.elapsed().as_secs_f64());
    s
}

fn workspace_root() -> Result<PathBuf, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "CARGO_MANIFEST_DIR has no parent".to_string())
}

pub(crate) fn first_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

pub(crate) fn output(cmd: &mut Command, what: &str) -> Result<Output, String> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))
}

fn engine_version() -> Result<String, String> {
    let o = output(
        Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]),
        "docker version",
    )?;
    if !o.status.success() {
        let err = first_line(&o.stderr);
        return Err(if err.is_empty() {
            format!("docker version: {}", o.status)
        } else {
            err
        });
    }
    Ok(first_line(&o.stdout))
}

/// `Ok(None)` for an ELF without PT_INTERP (static or static-pie), else the
/// interpreter it asks for.
fn elf_interpreter(path: &Path) -> Result<Option<String>, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = || format!("{}: not a 64-bit little-endian ELF", path.display());
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return Err(bad());
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |o: usize| -> Option<usize> {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap()) as usize)
    };
    let phoff = u64_at(0x20).ok_or_else(bad)?;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    for i in 0..phnum {
        let h = phoff + i * phentsize;
        let ty = b.get(h..h + 4).ok_or_else(bad)?;
        if u32::from_le_bytes(ty.try_into().unwrap()) == 3 {
            let off = u64_at(h + 8).ok_or_else(bad)?;
            let size = u64_at(h + 32).ok_or_else(bad)?;
            let s = b.get(off..off + size).ok_or_else(bad)?;
            return Ok(Some(
                String::from_utf8_lossy(s)
                    .trim_end_matches('\0')
                    .to_string(),
            ));
        }
    }
    Ok(None)
}

/// The static binary that ships (README, "A static binary for `FROM
/// scratch`"), built by `binaries::build_static`: the musl build, or the
/// glibc crt-static fallback. With `--no-build`, the one `static_path` finds.
fn static_binary(root: &Path, build: bool) -> Result<PathBuf, String> {
    let bin = if build {
        crate::binaries::build_static(root)
            .map_err(|e| format!("static build failed: {e} (cargo's output is above)"))?
    } else {
        crate::binaries::static_path(root)
    };
    if !bin.exists() {
        return Err(format!(
            "{} missing (run without --no-build)",
            bin.display()
        ));
    }
    Ok(bin)
}

pub(crate) fn mkdir_mode(p: &Path, mode: u32) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

pub(crate) fn copy_file(src: &Path, dst: &Path, mode: u32) -> Result<(), String> {
    if let Some(d) = dst.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
    }
    let _ = std::fs::remove_file(dst);
    std::fs::copy(src, dst)
        .map_err(|e| format!("copy {} to {}: {e}", src.display(), dst.display()))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", dst.display()))
}

fn under(base: &Path, abs: &str) -> PathBuf {
    base.join(abs.trim_start_matches('/'))
}

/// Shared libraries `ldd` lists for `bin` (the loader included).
fn shared_libs(bin: &str) -> Result<Vec<String>, String> {
    let o = output(Command::new("ldd").arg(bin), "ldd")?;
    if !o.status.success() {
        return Err(format!("ldd {bin}: {}", first_line(&o.stderr)));
    }
    let mut libs = Vec::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let l = l.trim();
        let path = match l.split_once("=> ") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => l.split_whitespace().next().filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(p.to_string());
        }
    }
    Ok(libs)
}

/// base/: busybox and its applets, python3.11 (trimmed stdlib), bwrap, and
/// their libraries. Built once; kept until BASE_VERSION changes.
pub(crate) fn build_base(base: &Path) -> Result<(), String> {
    let stamp = base.with_file_name("base.stamp");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(BASE_VERSION) && base.exists() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(base);
    mkdir_mode(base, 0o755)?;
    copy_file(Path::new(BUSYBOX), &under(base, "/bin/busybox"), 0o755)?;
    let o = output(Command::new(BUSYBOX).arg("--list"), "busybox --list")?;
    for applet in String::from_utf8_lossy(&o.stdout).lines() {
        let applet = applet.trim();
        if applet.is_empty() || applet == "busybox" || applet.contains('/') {
            continue;
        }
        let link = under(base, &format!("/bin/{applet}"));
        std::os::unix::fs::symlink("busybox", &link)
            .map_err(|e| format!("symlink {}: {e}", link.display()))?;
    }
    copy_file(Path::new(PYTHON), &under(base, PYTHON), 0o755)?;
    std::os::unix::fs::symlink("python3.11", under(base, "/usr/bin/python3"))
        .map_err(|e| format!("symlink python3: {e}"))?;
    mkdir_mode(&under(base, "/usr/lib"), 0o755)?;
    let st = Command::new("cp")
        .args(["-a", PYTHON_LIB])
        .arg(under(base, "/usr/lib/"))
        .status()
        .map_err(|e| format!("cp: {e}"))?;
    if !st.success() {
        return Err(format!("cp -a {PYTHON_LIB}: {st}"));
    }
    for big in [
        "config-3.11-x86_64-linux-gnu",
        "test",
        "idlelib",
        "tkinter",
        "ensurepip",
        "lib2to3",
        "pydoc_data",
        "dist-packages",
        "site-packages",
    ] {
        let _ = std::fs::remove_dir_all(under(base, &format!("{PYTHON_LIB}/{big}")));
    }
    let mut bins = vec![PYTHON, PYTHON_CTYPES];
    if Path::new(BWRAP).exists() {
        copy_file(Path::new(BWRAP), &under(base, BWRAP), 0o755)?;
        bins.push(BWRAP);
    }
    for b in bins {
        for lib in shared_libs(b)? {
            copy_file(Path::new(&lib), &under(base, &lib), 0o755)?;
        }
    }
    std::fs::write(&stamp, BASE_VERSION).map_err(|e| format!("{}: {e}", stamp.display()))
}

/// test/: the static stockade, tests/docker/*, and the directories the
/// cases use (all 1777, so uid 65534 may write where only the jail stops it).
fn build_test_layer(root: &Path, test: &Path, bin: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(test);
    mkdir_mode(test, 0o755)?;
    copy_file(bin, &test.join("stockade"), 0o755)?;
    for f in [
        "case.sh",
        "payload.py",
        "listener.py",
        "fallback.sh",
        "fallback.py",
        "bwrap_fallback.sh",
    ] {
        copy_file(
            &root.join("tests/docker").join(f),
            &test.join("t").join(f),
            0o755,
        )?;
    }
    mkdir_mode(&test.join("t"), 0o755)?;
    for d in ["tmp", "secret", "outside"] {
        mkdir_mode(&test.join(d), 0o1777)?;
    }
    Ok(())
}

fn docker_build(ctx: &Path, tag: &str) -> Result<(), String> {
    docker_build_file(ctx, "Dockerfile", tag)
}

/// `docker build -f CTX/DOCKERFILE -t TAG CTX` (the classic builder: no
/// registry, no BuildKit).
pub(crate) fn docker_build_file(ctx: &Path, dockerfile: &str, tag: &str) -> Result<(), String> {
    let o = output(
        Command::new("docker")
            .env("DOCKER_BUILDKIT", "0")
            .args(["build", "-q", "-t", tag, "-f"])
            .arg(ctx.join(dockerfile))
            .arg(ctx),
        "docker build",
    )?;
    if !o.status.success() {
        return Err(format!(
            "docker build {tag}: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(())
}

fn build_images(root: &Path, dir: &Path, bin: &Path) -> Result<(), String> {
    let ctx = dir.join("ctx");
    mkdir_mode(&ctx, 0o755)?;
    build_base(&ctx.join("base"))?;
    build_test_layer(root, &ctx.join("test"), bin)?;
    copy_file(
        &root.join("tests/docker/Dockerfile"),
        &ctx.join("Dockerfile"),
        0o644,
    )?;
    docker_build(&ctx, IMAGE)?;
    let bare = dir.join("bare");
    let _ = std::fs::remove_dir_all(&bare);
    mkdir_mode(&bare, 0o755)?;
    copy_file(bin, &bare.join("stockade"), 0o755)?;
    std::fs::write(
        bare.join("Dockerfile"),
        "FROM scratch\nCOPY stockade /stockade\nENTRYPOINT [\"/stockade\"]\n",
    )
    .map_err(|e| format!("bare Dockerfile: {e}"))?;
    docker_build(&bare, IMAGE_BARE)
}

/// The image holds only /stockade: it must start and print its version,
/// the same as on the host.
fn bare_image_runs(bin: &Path) -> Result<(), String> {
    let host = output(Command::new(bin).arg("--version"), "stockade --version")?;
    let o = output(
        Command::new("docker").args(["run", "--rm", "--network", "none", IMAGE_BARE, "--version"]),
        "docker run",
    )?;
    let (want, got) = (first_line(&host.stdout), first_line(&o.stdout));
    println!("    FROM scratch + /stockade only: `docker run {IMAGE_BARE} --version` -> {got:?} (exit {:?})", o.status.code());
    if !o.status.success() || want.is_empty() || got != want {
        return Err(format!(
            "exit {:?}, stdout {got:?} (host says {want:?}), stderr {:?}",
            o.status.code(),
            first_line(&o.stderr)
        ));
    }
    Ok(())
}

/// A random hex token that cannot turn up in any output by chance.
pub(crate) fn token() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().replace('-', ""))
        .unwrap_or_else(|_| format!("{:x}", std::process::id() as u64 * 0x9e37_79b9_7f4a_7c15))
}

struct CaseRun {
    /// Every `key=value` line, in order, per key.
    kv: BTreeMap<String, Vec<String>>,
    text: String,
    canary: String,
    env_token: String,
}

impl CaseRun {
    fn get(&self, k: &str) -> Option<&str> {
        self.kv.get(k).and_then(|v| v.first()).map(String::as_str)
    }
    fn all(&self, k: &str) -> &[String] {
        self.kv.get(k).map(Vec::as_slice).unwrap_or(&[])
    }
}

fn run_case(c: &Config, n: usize, bwrap: bool) -> Result<CaseRun, String> {
    let canary = token();
    let env_token = token();
    let env = [
        format!("CANARY_TOKEN={canary}"),
        format!("STOCKADE_TEST_ENV={env_token}"),
        format!("WITH_BWRAP={}", u8::from(bwrap)),
    ];
    let (kv, text) = run_container(
        c,
        &format!("{n}"),
        &env,
        &["/bin/sh", "/t/case.sh", "--timeout", "60s"],
        "case=done",
    )?;
    Ok(CaseRun {
        kv,
        text,
        canary,
        env_token,
    })
}

/// `docker run` of `cmd` in the test image under `c`'s settings, with `env`
/// (`NAME=VALUE`); its `key=value` stdout lines per key, and the whole text
/// for a failure's report. The script must have printed the line `done`.
pub(crate) fn run_container(
    c: &Config,
    tag: &str,
    env: &[String],
    cmd: &[&str],
    done: &str,
) -> Result<(BTreeMap<String, Vec<String>>, String), String> {
    let name = format!("stockade-test-{}-{tag}", std::process::id());
    let mut dc = Command::new("docker");
    dc.args(["run", "--rm", "--name", &name, "--network", "none"])
        .args(c.docker);
    for e in env {
        dc.args(["-e", e]);
    }
    dc.arg(IMAGE)
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = dc.spawn().map_err(|e| format!("docker run: {e}"))?;
    // Read both pipes on threads so a chatty container cannot block.
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let ho = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut so, &mut v);
        v
    });
    let he = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut se, &mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > CASE_DEADLINE => {
                let _ = Command::new("docker")
                    .args(["rm", "-f", &name])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "container did not finish within {CASE_DEADLINE:?}; removed"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("docker run: wait: {e}")),
        }
    };
    let stdout = String::from_utf8_lossy(&ho.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&he.join().unwrap_or_default()).into_owned();
    let mut kv: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in stdout.lines() {
        if let Some((k, v)) = l.split_once('=') {
            kv.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    let text = format!("docker run exit {status}\n--- stdout\n{stdout}--- stderr\n{stderr}");
    if !stdout.lines().any(|l| l == done) {
        return Err(format!("{} did not finish\n{text}", cmd.join(" ")));
    }
    Ok((kv, text))
}

/// Assert what one configuration must show; print what was observed.
fn judge(s: &mut Summary, c: &Config, r: &CaseRun, bwrap: bool) {
    let names = check_names(c);
    let name = |suffix: &str| {
        names
            .iter()
            .find(|n| n.ends_with(suffix))
            .cloned()
            .unwrap_or_else(|| format!("docker/{}: {suffix}", c.name))
    };
    let outcome = r.get("outcome").map(json::parse);
    let o = match &outcome {
        Some(Ok(v)) => Some(v),
        _ => None,
    };
    // The payload's own lines, from the outcome's captured stdout.
    let mut payload: BTreeMap<String, String> = BTreeMap::new();
    let captured = o
        .and_then(|o| o.at(&["stdout", "data"]))
        .and_then(json::Value::as_str)
        .unwrap_or("");
    for l in captured.lines() {
        if let Some((k, v)) = l.split_once('=') {
            payload.insert(k.to_string(), v.to_string());
        }
    }
    let p = |k: &str| payload.get(k).map(String::as_str).unwrap_or("(missing)");
    let state = |layer: &str| -> String {
        o.and_then(|o| o.at(&["layers", layer, "state"]))
            .and_then(json::Value::as_str)
            .unwrap_or("(missing)")
            .to_string()
    };
    let why = |layer: &str| -> String {
        o.and_then(|o| o.at(&["layers", layer, "detail", "why"]))
            .and_then(json::Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    const NAMESPACES: [&str; 7] = [
        "user_namespace",
        "mount_namespace",
        "pid_namespace",
        "net_namespace",
        "ipc_namespace",
        "uts_namespace",
        "cgroup_namespace",
    ];
    // What was observed, whatever the verdicts.
    let mut seen = String::new();
    let _ = write!(
        seen,
        "    stockade exit {}, status {}; layers:",
        r.get("stockade_rc").unwrap_or("?"),
        o.and_then(|o| o.at(&["status"]))
            .and_then(json::Value::as_str)
            .unwrap_or("(no outcome)")
    );
    for l in NAMESPACES
        .iter()
        .chain(&["landlock", "seccomp", "rootfs", "proc", "process_tree"])
    {
        let _ = write!(seen, " {l}={}", state(l));
    }
    println!("{seen}");
    if !why("user_namespace").is_empty() {
        println!("    user_namespace why: {}", why("user_namespace"));
    }
    for l in r.all("stockade_stderr") {
        println!("    stockade stderr: {l}");
    }
    println!(
        "    payload: read_canary={} write_outside={} connect={} own_write={} env_probe={} seccomp_filters={} (container {}) unshare_userns={} (container {})",
        p("read_canary"),
        p("write_outside"),
        p("connect"),
        p("own_write"),
        p("env_probe"),
        p("seccomp_filters"),
        r.get("control_seccomp_filters").unwrap_or("?"),
        p("unshare_userns"),
        r.get("control_unshare_userns").unwrap_or("?")
    );
    println!(
        "    --require userns: exit {}{}",
        r.get("require_rc").unwrap_or("?"),
        r.all("require_stderr")
            .first()
            .map(|l| format!(": {l}"))
            .unwrap_or_default()
    );

    let mut any_failed = false;
    // runs the payload
    let ok = s.check(&name("runs the payload"), {
        let rc = r.get("stockade_rc");
        match (&outcome, rc) {
            (Some(Ok(o)), Some("0"))
                if o.at(&["status"]).and_then(json::Value::as_str) == Some("exited")
                    && o.at(&["exit_code"]).and_then(json::Value::as_f64) == Some(0.0)
                    && p("payload") == "done" =>
            {
                Ok(())
            }
            (Some(Err(e)), _) => Err(format!("outcome is not JSON: {e}")),
            (None, _) => Err("no outcome printed".into()),
            _ => Err(format!(
                "stockade exit {rc:?}, status {:?}, payload {:?}",
                o.and_then(|o| o.at(&["status"]))
                    .and_then(json::Value::as_str),
                p("payload")
            )),
        }
    });
    any_failed |= !ok;

    // layers
    let ok = s.check(&name("layers"), {
        let mut bad = Vec::new();
        for l in ["landlock", "seccomp"] {
            if state(l) != "applied" {
                bad.push(format!("{l} is {}", state(l)));
            }
        }
        let full = state("user_namespace") == "applied";
        let fallback = match c.expect {
            Expect::Fallback => true,
            Expect::FullJail => false,
            Expect::Confined => !full,
        };
        if fallback {
            for l in NAMESPACES {
                if state(l) != "unavailable" {
                    bad.push(format!("{l} is {} (want unavailable)", state(l)));
                } else if l == "user_namespace" && why(l).is_empty() {
                    bad.push(format!("{l} unavailable without a reason"));
                }
            }
        } else {
            for l in [
                "user_namespace",
                "mount_namespace",
                "pid_namespace",
                "net_namespace",
            ] {
                if state(l) != "applied" {
                    bad.push(format!("{l} is {} (want applied)", state(l)));
                }
            }
        }
        let ran = o
            .and_then(|o| o.at(&["status"]))
            .and_then(json::Value::as_str)
            == Some("exited");
        if c.expect == Expect::Confined {
            println!(
                "    observed mode: {}",
                if !ran {
                    "none (stockade did not run the payload)"
                } else if full {
                    "full jail (namespaces)"
                } else {
                    "fallback (no namespaces)"
                }
            );
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    });
    any_failed |= !ok;

    // Effects. In the fallback Landlock is what stops each attempt: EACCES.
    let fallback_expected = c.expect == Expect::Fallback;
    let denied = |v: &str, good: &str| -> Result<(), String> {
        if v == "(missing)" || v == good || v.starts_with(&format!("{good}:")) {
            return Err(format!("payload reports {v}"));
        }
        if fallback_expected && v != "EACCES" {
            return Err(format!("payload reports {v}, want EACCES (Landlock)"));
        }
        Ok(())
    };
    let control_read = r.get("control_read").unwrap_or("");
    let ok = s.check(&name("canary not read"), {
        if control_read != format!("canary-{}", r.canary) {
            Err(format!(
                "control read outside stockade failed: {control_read:?}"
            ))
        } else if captured.contains(&r.canary)
            || r.all("stockade_stderr")
                .iter()
                .any(|l| l.contains(&r.canary))
        {
            Err("the canary's token is in the payload's output".into())
        } else {
            denied(p("read_canary"), "LEAKED")
        }
    });
    any_failed |= !ok;
    let outside = r.get("outside_files").unwrap_or("?").trim().to_string();
    let ok = s.check(&name("no write outside"), {
        if !outside.is_empty() {
            Err(format!("/outside now holds {outside:?}"))
        } else if !p("own_write").starts_with("OK:") {
            Err(format!(
                "control: the payload cannot write its own directory either: {}",
                p("own_write")
            ))
        } else {
            denied(p("write_outside"), "WROTE")
        }
    });
    any_failed |= !ok;
    let (before, after) = (r.get("accepted_before"), r.get("accepted_after"));
    let ok = s.check(&name("no tcp connect"), {
        if r.get("control_connect") != Some("CONNECTED") || before != Some("1") {
            Err(format!(
                "control connect outside stockade: {:?}, listener saw {before:?}",
                r.get("control_connect")
            ))
        } else if after != before {
            Err(format!(
                "the listener accepted a connection from the jail ({before:?} -> {after:?})"
            ))
        } else {
            // In the fallback, seccomp refuses inet sockets (EPERM) before
            // Landlock could refuse the connect (EACCES).
            let v = p("connect");
            if fallback_expected && v == "EPERM" {
                Ok(())
            } else {
                denied(v, "CONNECTED")
            }
        }
    });
    any_failed |= !ok;
    let ok = s.check(&name("environment cleared"), {
        if captured.contains(&r.env_token) {
            Err("STOCKADE_TEST_ENV's value reached the payload".into())
        } else if p("env_probe") != "absent" {
            Err(format!("env_probe={}", p("env_probe")))
        } else {
            Ok(())
        }
    });
    any_failed |= !ok;
    let ok = s.check(&name("seccomp filter added"), {
        // With a /proc of the jail's own, count the filters; in a jail
        // without /proc, call unshare(CLONE_NEWUSER), which the same
        // container allows outside stockade and stockade's allowlist denies.
        let outer = r
            .get("control_seccomp_filters")
            .and_then(|v| v.parse::<u32>().ok());
        let inner = p("seccomp_filters").parse::<u32>().ok();
        match (outer, inner) {
            (Some(a), Some(b)) if b > a => Ok(()),
            (Some(_), Some(_)) => Err(format!(
                "Seccomp_filters in the payload {:?}, in the container {:?}",
                p("seccomp_filters"),
                r.get("control_seccomp_filters")
            )),
            // The fallback keeps the host's /proc out of reach (Landlock:
            // EACCES); there the allowlist shows itself by refusing inet
            // sockets (EPERM), which the container allows outside stockade.
            _ if p("seccomp_filters") == "EACCES"
                && p("connect") == "EPERM"
                && r.get("control_connect") == Some("CONNECTED") =>
            {
                Ok(())
            }
            _ if r.get("control_unshare_userns") != Some("OK") => Err(format!(
                "no /proc in the jail ({}) and unshare(CLONE_NEWUSER) is refused outside stockade too ({:?}): no way to see stockade's filter",
                p("seccomp_filters"),
                r.get("control_unshare_userns")
            )),
            _ if p("unshare_userns") == "EPERM" => Ok(()),
            _ => Err(format!(
                "unshare(CLONE_NEWUSER) in the payload: {}, want EPERM from the allowlist",
                p("unshare_userns")
            )),
        }
    });
    any_failed |= !ok;

    match c.expect {
        Expect::Fallback => {
            let lines = r.all("stockade_stderr");
            let ok = s.check(&name("stderr names missing layers"), {
                let hits: Vec<&String> = lines
                    .iter()
                    .filter(|l| l.starts_with("stockade:") && l.to_lowercase().contains("namespace"))
                    .collect();
                if hits.len() == 1 {
                    Ok(())
                } else {
                    Err(format!(
                        "want one `stockade:` line naming the missing namespaces, got {} in {lines:?}",
                        hits.len()
                    ))
                }
            });
            any_failed |= !ok;
            let ok = s.check(&name("--require userns fails closed"), {
                let err = r.all("require_stderr");
                if r.get("require_rc") != Some("125") {
                    Err(format!("exit {:?}, want 125", r.get("require_rc")))
                } else if err.len() != 1 || !err[0].starts_with("stockade:") {
                    Err(format!("want one `stockade:` line, got {err:?}"))
                } else if !err[0].contains("seccomp") {
                    Err(format!(
                        "the message does not name the seccomp profile to change: {:?}",
                        err[0]
                    ))
                } else {
                    Ok(())
                }
            });
            any_failed |= !ok;
        }
        Expect::FullJail => {
            let ok = s.check(&name("--require userns runs"), {
                if r.get("require_rc") == Some("0") {
                    Ok(())
                } else {
                    Err(format!(
                        "exit {:?}: {:?}",
                        r.get("require_rc"),
                        r.all("require_stderr")
                    ))
                }
            });
            any_failed |= !ok;
        }
        Expect::Confined => {}
    }

    // The comparison: bwrap's result is printed; the check only proves bwrap ran.
    let bname = name("bwrap comparison");
    if !bwrap {
        s.skip(
            &bname,
            &format!("{BWRAP} missing on the host (apt-get install bubblewrap)"),
        );
    } else {
        let rc = r.get("bwrap_rc").unwrap_or("(missing)");
        let said = r.all("bwrap_output").join(" | ");
        println!(
            "    bwrap {} --unshare-all --proc /proc: exit {rc}{}",
            r.get("bwrap_version").unwrap_or("?"),
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        );
        let ran = match rc.parse::<i32>() {
            Ok(0) => true,
            Ok(126 | 127) | Err(_) => false,
            Ok(_) => said.starts_with("bwrap:"),
        };
        let ok = s.check(
            &bname,
            if ran
                && r.get("bwrap_version")
                    .is_some_and(|v| v.starts_with("bubblewrap"))
            {
                Ok(())
            } else {
                Err(format!("bwrap did not run: exit {rc}: {said}"))
            },
        );
        any_failed |= !ok;
    }
    if any_failed {
        println!("{}", r.text);
    }
}
