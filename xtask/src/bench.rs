//! `cargo xtask bench`: stockade's start-up and per-syscall cost beside bare
//! exec, bubblewrap and firejail, measured side by side in one run.
//!
//! Every timed command is started with `std::process::Command` (stdin, stdout
//! and stderr on /dev/null) and timed with `Instant` from spawn to reap. Cases
//! are interleaved round by round, with the starting case rotated each round,
//! after a few warm-up runs, so drift on the host (frequency scaling, page
//! cache, a noisy neighbour) lands on every case alike. The bench only prints;
//! nothing here asserts a timing.

use crate::binaries;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cargo xtask bench [--runs N] [--json FILE] [--syscalls N] [--syscall-reps N] [--user UID[:GID]] [--no-install] [--no-build] [--also PATH]
  --runs N          timed runs per start-up case (default 200)
  --json FILE       also write the results as JSON to FILE
  --syscalls N      getpid() calls per run of the syscall probe (default 2000000)
  --syscall-reps N  runs of the syscall probe per case; the median is kept (default 7)
  --user UID[:GID]  run every measured command as this user (root only), e.g. 65534
  --no-install      do not apt-get install missing bubblewrap / firejail
  --no-build        measure the binaries as they are, without building them
  --also PATH       also measure this stockade binary: one more /bin/true row (repeatable)
The `stockade` rows measure the static binary that ships, built as the README
says: the musl build (cargo build --release --target x86_64-unknown-linux-musl,
in target/static), or, when the musl target cannot be installed, the glibc
crt-static build (RUSTFLAGS=\"-C target-feature=+crt-static\", --target
x86_64-unknown-linux-gnu), which starts slower (glibc probes the CPU at start).
With --no-build, the musl binary if it exists, else the glibc one. One more row
measures the dynamic target/release/stockade.";

/// Source of the per-syscall probe: N raw getpid() calls; prints ns/call and
/// the `Seccomp:` mode of /proc/self/status (-1 when unreadable), so a run
/// where no filter was installed cannot pass for a cheap filter.
const GETPID_C: &str = r#"#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int seccomp_mode(void) {
    char line[256];
    int mode = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Seccomp:", 8) == 0) { mode = atoi(line + 8); break; }
    fclose(f);
    return mode;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    volatile long sink = 0;
    struct timespec a, b;
    if (n <= 0) return 2;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) sink += syscall(SYS_getpid);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("%.2f %d\n", ns / (double)n, seccomp_mode());
    return sink == 0;
}
"#;

struct Options {
    runs: usize,
    json: Option<PathBuf>,
    syscalls: u64,
    syscall_reps: usize,
    user: Option<(u32, u32)>,
    install: bool,
    build: bool,
    /// More stockade binaries to measure (`--also`).
    also: Vec<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        runs: 200,
        json: None,
        syscalls: 2_000_000,
        syscall_reps: 7,
        user: None,
        install: true,
        build: true,
        also: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("xtask bench: {name} needs a value"))
        };
        match flag {
            "--runs" => o.runs = positive(&value("--runs")?, "--runs")?,
            "--json" => o.json = Some(PathBuf::from(value("--json")?)),
            "--syscalls" => o.syscalls = positive(&value("--syscalls")?, "--syscalls")? as u64,
            "--syscall-reps" => {
                o.syscall_reps = positive(&value("--syscall-reps")?, "--syscall-reps")?
            }
            "--user" => o.user = Some(parse_user(&value("--user")?)?),
            "--no-install" => o.install = false,
            "--no-build" => o.build = false,
            "--also" => o.also.push(PathBuf::from(value("--also")?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("xtask bench: unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn positive(s: &str, flag: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "xtask bench: {flag} wants a positive integer, got {s:?}"
        )),
    }
}

fn parse_user(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("xtask bench: --user wants UID or UID:GID, got {s:?}");
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// Which table a case belongs to; each has its own bare and bwrap reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    True,
    Python,
    Layers,
}

impl Group {
    fn key(self) -> &'static str {
        match self {
            Group::True => "true",
            Group::Python => "python",
            Group::Layers => "layers",
        }
    }
    /// The group whose bare / bwrap rows this group's ratios are taken against.
    fn reference(self) -> Group {
        match self {
            Group::Layers => Group::True,
            g => g,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bare,
    Stockade,
    Bwrap,
    Firejail,
    Layer,
    /// Another stockade binary (the dynamic build, `--also`).
    Variant,
    /// `--profile python`, the interpreter found on PATH (maybe a pyenv shim).
    ProfileFound,
    /// `--profile python --python REAL`, the same interpreter named directly.
    ProfileReal,
}

struct Case {
    group: Group,
    kind: Kind,
    name: String,
    argv: Vec<OsString>,
    /// Why the case was not measured ("did not run: …").
    skipped: Option<String>,
    samples: Vec<Duration>,
    /// The sample of each round (None: that run failed), for paired deltas.
    by_round: Vec<Option<Duration>>,
    failures: usize,
}

#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    p90: f64,
    min: f64,
    mean: f64,
}

/// Milliseconds statistics of a sample set (nearest-rank percentiles).
fn stats(samples: &[Duration]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    Some(Stats {
        median: percentile(&ms, 50.0),
        p90: percentile(&ms, 90.0),
        min: ms[0],
        mean: ms.iter().sum::<f64>() / ms.len() as f64,
    })
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn main(args: &[String]) -> i32 {
    if args.first().map(String::as_str) == Some("egress") {
        return crate::bench_egress::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("serve") {
        return crate::bench_serve::main(&args[1..]);
    }
    main_with(args, USAGE, "bench", parse_args, run)
}

/// A bench's `main`: its arguments parsed (an empty error: `--help`, the
/// usage printed, 0; another: the error and the usage, 2), then run (an
/// error: `xtask NAME: ERROR`, 1).
pub(crate) fn main_with<O>(
    args: &[String],
    usage: &str,
    name: &str,
    parse: fn(&[String]) -> Result<O, String>,
    run: fn(&O) -> Result<(), String>,
) -> i32 {
    let opts = match parse(args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{usage}");
            return 0;
        }
        Err(e) => {
            eprintln!("{e}\n{usage}");
            return 2;
        }
    };
    match run(&opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("xtask {name}: {e}");
            1
        }
    }
}

fn run(opts: &Options) -> Result<(), String> {
    let root = workspace_root()?;
    let root_user = effective_uid() == Some(0);
    if opts.user.is_some() && !root_user {
        return Err("--user needs root (it sets the uid of every measured command)".into());
    }

    // The rows named `stockade` measure the static binary that ships: the
    // one just built (musl, or the glibc fallback), or with --no-build the
    // one `static_path` finds.
    let stockade = if opts.build {
        let built = binaries::build_static(&root)
            .map_err(|e| format!("{e} (--no-build measures the binaries as they are)"))?;
        binaries::build_dynamic(&root)?;
        built
    } else {
        binaries::static_path(&root)
    };
    if !stockade.is_file() {
        return Err(format!(
            "{} does not exist (build it without --no-build)",
            stockade.display()
        ));
    }
    let linkage = binaries::linkage(&stockade)?;
    if linkage == binaries::Linkage::Dynamic {
        return Err(format!(
            "{} is dynamically linked: not the shipped static build (build it without --no-build)",
            stockade.display()
        ));
    }
    let dynamic = binaries::dynamic_path(&root);
    let mut variants = vec![Variant {
        name: "stockade run -- /bin/true (dynamic build)".into(),
        linkage: binaries::linkage(&dynamic).ok(),
        path: dynamic,
    }];
    for p in &opts.also {
        let path = if p.is_absolute() {
            p.clone()
        } else {
            std::env::current_dir()
                .map_err(|e| format!("--also: {e}"))?
                .join(p)
        };
        let linkage = binaries::linkage(&path).ok();
        variants.push(Variant {
            name: format!(
                "stockade run -- /bin/true ({}{})",
                p.display(),
                linkage
                    .map(|l| format!(", {}", l.name()))
                    .unwrap_or_default()
            ),
            path,
            linkage,
        });
    }

    let mut notes = vec![binaries_note(&root, &stockade, linkage, &variants[0])];
    if let Some(n) = busy_host() {
        notes.push(n);
    }
    ensure_tools(opts.install, root_user, &mut notes);
    let bwrap = find_in_path("bwrap");
    let firejail = find_in_path("firejail");
    let python = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());

    let scratch = Scratch::new()?;
    let profile = python_on_path(opts, scratch.path());
    match &profile {
        Ok(p) => notes.push(format!(
            "`--profile python` rows: python3 on PATH is {}{}, which runs {}; discovery is cached in {}",
            p.found.display(),
            if p.shim { " (a pyenv shim)" } else { "" },
            p.real.display(),
            cache_dir_for(opts)
        )),
        Err(e) => notes.push(format!("`--profile python` rows: {e}")),
    }

    let mut cases = build_cases(
        &stockade,
        &variants,
        bwrap.as_deref(),
        firejail.as_deref(),
        python.as_deref(),
        profile.as_ref().map_err(String::as_str),
    );
    eprintln!(
        "xtask bench: {} start-up cases, {} runs each{}",
        cases.len(),
        opts.runs,
        match opts.user {
            Some((u, g)) => format!(", as uid {u} gid {g}"),
            None => String::new(),
        }
    );
    for c in cases.iter_mut().filter(|c| c.skipped.is_none()) {
        c.skipped = probe(c, opts, scratch.path());
    }
    measure(&mut cases, opts, scratch.path());

    let syscall = syscall_bench(&stockade, opts, scratch.path());
    notes.push(layer_states(&stockade, opts, scratch.path()));

    let report = render(&cases, &syscall, opts, &notes);
    print!("{report}");
    if let Some(path) = &opts.json {
        let json = to_json(&cases, &syscall, opts, &notes);
        std::fs::write(path, json).map_err(|e| format!("--json {}: {e}", path.display()))?;
        eprintln!("xtask bench: wrote {}", path.display());
    }
    Ok(())
}

/// Another stockade binary measured on /bin/true beside the shipped one.
struct Variant {
    name: String,
    path: PathBuf,
    /// `None`: not a readable ELF (the row says why it did not run).
    linkage: Option<binaries::Linkage>,
}

/// The interpreter `--profile python` finds on PATH, and the real one it runs.
struct ProfilePython {
    found: PathBuf,
    real: PathBuf,
    shim: bool,
}

/// `python3` on PATH as the measured user finds it, and its
/// `sys.executable` (asked through it, so a shim resolves as it would).
fn python_on_path(opts: &Options, cwd: &Path) -> Result<ProfilePython, String> {
    let found = find_in_path("python3").ok_or("did not run: no python3 on PATH")?;
    let argv: Vec<OsString> = vec![
        found.clone().into(),
        "-c".into(),
        "import sys; print(sys.executable)".into(),
    ];
    let out = command(&argv, opts, cwd)
        .output()
        .map_err(|e| format!("did not run: cannot start {}: {e}", found.display()))?;
    let real = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !real.starts_with('/') {
        return Err(format!(
            "did not run: {} did not say where it is ({})",
            found.display(),
            first_line(&out.stderr)
        ));
    }
    let shim = std::fs::read_to_string(&found)
        .map(|t| t.starts_with("#!") && t.contains("pyenv\" exec"))
        .unwrap_or(false);
    Ok(ProfilePython {
        found,
        real: real.into(),
        shim,
    })
}

/// Where stockade keeps its discovery cache for the measured user.
fn cache_dir_for(opts: &Options) -> String {
    let env = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let dir = env("XDG_CACHE_HOME")
        .map(|x| x.join("stockade"))
        .or_else(|| env("HOME").map(|h| h.join(".cache/stockade")));
    match (dir, opts.user) {
        (Some(d), Some((u, _))) => format!(
            "{} (if uid {u} can write there; else discovery runs every time)",
            d.display()
        ),
        (Some(d), None) => d.display().to_string(),
        (None, _) => "no cache directory (HOME unset): discovery runs every time".into(),
    }
}

/// Which binary each stockade row measured.
fn binaries_note(
    root: &Path,
    stockade: &Path,
    linkage: binaries::Linkage,
    dynamic: &Variant,
) -> String {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    format!(
        "`stockade` rows: {} ({}, the shipped build: {}); `(dynamic build)` row: {} ({})",
        rel(stockade),
        linkage.name(),
        binaries::static_command(stockade),
        rel(&dynamic.path),
        dynamic.linkage.map(|l| l.name()).unwrap_or("missing")
    )
}

/// The checkout this xtask was built from, or, for a binary carried to
/// another machine (`bench serve --no-build --binary PATH` there), the
/// current directory when it holds the workspace's Cargo.toml.
pub(crate) fn workspace_root() -> Result<PathBuf, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let built = manifest
        .parent()
        .ok_or("CARGO_MANIFEST_DIR has no parent")?
        .to_path_buf();
    let here = std::env::current_dir().unwrap_or_default();
    [built.clone(), here]
        .into_iter()
        .find(|r| r.join("Cargo.toml").is_file() && r.join("xtask").is_dir())
        .ok_or_else(|| {
            format!(
                "no Cargo.toml in {} nor in the current directory",
                built.display()
            )
        })
}

/// The effective uid, from /proc/self/status (std has no geteuid).
pub(crate) fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/bin".into(), "/usr/sbin".into(), "/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Installs Debian's bubblewrap and firejail when missing and we are root.
fn ensure_tools(install: bool, root_user: bool, notes: &mut Vec<String>) {
    let missing: Vec<&str> = [("bwrap", "bubblewrap"), ("firejail", "firejail")]
        .iter()
        .filter(|(bin, _)| find_in_path(bin).is_none())
        .map(|&(_, pkg)| pkg)
        .collect();
    if missing.is_empty() {
        return;
    }
    let list = missing.join(" ");
    if !install {
        notes.push(format!("missing (not installed: --no-install): {list}"));
        return;
    }
    if !root_user {
        notes.push(format!("missing (not root, so not installed): {list}"));
        eprintln!("xtask bench: {list} missing and not root; continuing without");
        return;
    }
    if find_in_path("apt-get").is_none() {
        notes.push(format!("missing (no apt-get): {list}"));
        return;
    }
    eprintln!("xtask bench: apt-get install -y {list}");
    let quiet = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
    };
    let ok = quiet(&["update", "-qq"]).is_ok_and(|s| s.success())
        && quiet(&[&["install", "-y", "-qq"][..], &missing[..]].concat())
            .is_ok_and(|s| s.success());
    if !ok {
        notes.push(format!("apt-get install {list} failed"));
    }
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// bwrap arguments equivalent to stockade's default jail: every namespace, a
/// read-only /usr, the host's /bin /sbin /lib* layout, the same few /etc
/// files, /proc, /dev, /tmp, a tmpfs workdir, a clean environment.
fn bwrap_args(bwrap: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![bwrap.into()];
    a.extend(os(&[
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "stockade",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
    ]));
    for d in ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"] {
        match std::fs::symlink_metadata(d) {
            Ok(md) if md.file_type().is_symlink() => {
                if let Ok(t) = std::fs::read_link(d) {
                    a.extend(["--symlink".into(), t.into_os_string(), d.into()]);
                }
            }
            Ok(md) if md.is_dir() => a.extend(os(&["--ro-bind", d, d])),
            _ => {}
        }
    }
    for f in [
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/nsswitch.conf",
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/alternatives",
        "/etc/mime.types",
        "/etc/localtime",
        "/etc/passwd",
        "/etc/group",
        "/etc/hosts",
    ] {
        a.extend(os(&["--ro-bind-try", f, f]));
    }
    a.extend(os(&[
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/work",
        "--chdir",
        "/work",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/work",
        "--",
    ]));
    a
}

/// firejail flags for a comparable jail: private home, /dev and /tmp, no
/// network, no capabilities, no_new_privs, its default seccomp filter, a user
/// namespace.
fn firejail_args(firejail: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![firejail.into()];
    a.extend(os(&[
        "--quiet",
        "--noprofile",
        "--private",
        "--private-dev",
        "--private-tmp",
        "--net=none",
        "--caps.drop=all",
        "--nonewprivs",
        "--seccomp",
        "--noroot",
        "--nogroups",
    ]));
    a
}

fn build_cases(
    stockade: &Path,
    variants: &[Variant],
    bwrap: Option<&Path>,
    firejail: Option<&Path>,
    python: Option<&Path>,
    profile: Result<&ProfilePython, &str>,
) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut push = |group, kind, name: &str, argv: Option<Vec<OsString>>, why: &str| {
        cases.push(Case {
            group,
            kind,
            name: name.to_string(),
            skipped: argv.is_none().then(|| format!("did not run: {why}")),
            argv: argv.unwrap_or_default(),
            samples: Vec::new(),
            by_round: Vec::new(),
            failures: 0,
        });
    };
    let with = |prefix: Option<Vec<OsString>>, cmd: &[OsString]| {
        prefix.map(|mut p| {
            p.extend(cmd.iter().cloned());
            p
        })
    };
    let st_run = |flags: &[&str]| {
        let mut a: Vec<OsString> = vec![stockade.into(), "run".into()];
        a.extend(os(flags));
        a.push("--".into());
        a
    };
    let bw = bwrap.map(bwrap_args);
    let fj = firejail.map(firejail_args);

    let t = os(&["/bin/true"]);
    push(
        Group::True,
        Kind::Bare,
        "/bin/true (bare)",
        Some(t.clone()),
        "",
    );
    push(
        Group::True,
        Kind::Stockade,
        "stockade run -- /bin/true",
        with(Some(st_run(&[])), &t),
        "",
    );
    for v in variants {
        let argv = v.path.is_file().then(|| {
            let mut a: Vec<OsString> = vec![v.path.clone().into(), "run".into(), "--".into()];
            a.extend(t.iter().cloned());
            a
        });
        let why = format!("{} does not exist", v.path.display());
        push(Group::True, Kind::Variant, &v.name, argv, &why);
    }
    push(
        Group::True,
        Kind::Bwrap,
        "bwrap … /bin/true",
        with(bw.clone(), &t),
        "bwrap not installed",
    );
    push(
        Group::True,
        Kind::Firejail,
        "firejail … /bin/true",
        with(fj.clone(), &t),
        "firejail not installed",
    );

    let py = python.map(|p| vec![p.as_os_str().to_owned(), "-c".into(), "pass".into()]);
    let no_py = "no python3 under /usr/bin, /usr/local/bin or /bin";
    push(
        Group::Python,
        Kind::Bare,
        "python3 -c pass (bare)",
        py.clone(),
        no_py,
    );
    let py_in = |prefix: Option<Vec<OsString>>| match (&py, prefix) {
        (Some(cmd), p) => with(p, cmd),
        (None, _) => None,
    };
    push(
        Group::Python,
        Kind::Stockade,
        "stockade run -- python3 -c pass",
        py_in(Some(st_run(&[]))),
        no_py,
    );
    push(
        Group::Python,
        Kind::Bwrap,
        "bwrap … python3 -c pass",
        py_in(bw.clone()),
        if py.is_none() {
            no_py
        } else {
            "bwrap not installed"
        },
    );
    push(
        Group::Python,
        Kind::Firejail,
        "firejail … python3 -c pass",
        py_in(fj.clone()),
        if py.is_none() {
            no_py
        } else {
            "firejail not installed"
        },
    );

    // The python profile's discovery: python3 found on PATH (a pyenv shim
    // on a pyenv host) against the same interpreter named with --python.
    let pass = os(&["python3", "-c", "pass"]);
    let (found_argv, real_argv, why) = match profile {
        Ok(p) => {
            let real = p.real.to_string_lossy();
            (
                Some(st_run(&["--profile", "python"])),
                Some(st_run(&["--profile", "python", "--python", &real])),
                String::new(),
            )
        }
        Err(e) => (
            None,
            None,
            e.trim_start_matches("did not run: ").to_string(),
        ),
    };
    // Twice: with /bin/true (discovery and jail alone) and with python3
    // (what an evaluator runs; its start-up adds noise).
    for (group, cmd, shown) in [
        (Group::True, &t, "/bin/true"),
        (Group::Python, &pass, "python3 -c pass"),
    ] {
        push(
            group,
            Kind::ProfileFound,
            &format!("stockade --profile python -- {shown}"),
            with(found_argv.clone(), cmd),
            &why,
        );
        push(
            group,
            Kind::ProfileReal,
            &format!("stockade --profile python --python REAL -- {shown}"),
            with(real_argv.clone(), cmd),
            &why,
        );
    }

    for (name, flags) in [
        ("stockade --no-seccomp", &["--no-seccomp"][..]),
        ("stockade --no-landlock", &["--no-landlock"][..]),
        (
            "stockade --no-seccomp --no-landlock",
            &["--no-seccomp", "--no-landlock"][..],
        ),
    ] {
        push(
            Group::Layers,
            Kind::Layer,
            &format!("{name} -- /bin/true"),
            with(Some(st_run(flags)), &t),
            "",
        );
    }
    cases
}

fn command(argv: &[OsString], opts: &Options, cwd: &Path) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]).current_dir(cwd).stdin(Stdio::null());
    if let Some((u, g)) = opts.user {
        use std::os::unix::process::CommandExt;
        c.uid(u).gid(g);
    }
    c
}

/// Runs a case once with its output kept; a failure becomes the reason the
/// case is left out ("did not run: …").
fn probe(c: &Case, opts: &Options, cwd: &Path) -> Option<String> {
    let out = match command(&c.argv, opts, cwd).output() {
        Ok(o) => o,
        Err(e) => return Some(format!("did not run: cannot start {:?}: {e}", c.argv[0])),
    };
    if out.status.success() {
        return None;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().map(str::trim).find(|l| !l.is_empty());
    Some(format!(
        "did not run: {} ({})",
        first.unwrap_or("no message"),
        describe(out.status)
    ))
}

fn describe(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => st.to_string(),
    }
}

fn time_once(argv: &[OsString], opts: &Options, cwd: &Path) -> Option<Duration> {
    let mut cmd = command(argv, opts, cwd);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let st = cmd.status().ok()?;
    let took = start.elapsed();
    st.success().then_some(took)
}

/// Warm-up, then `runs` rounds; each round runs every live case once, the
/// starting case rotated so none is always first after a slow one.
fn measure(cases: &mut [Case], opts: &Options, cwd: &Path) {
    let live: Vec<usize> = (0..cases.len())
        .filter(|&i| cases[i].skipped.is_none())
        .collect();
    if live.is_empty() {
        return;
    }
    let warm = opts.runs.clamp(1, 5);
    for &i in &live {
        for _ in 0..warm {
            let _ = time_once(&cases[i].argv, opts, cwd);
        }
    }
    let total = opts.runs * live.len();
    let mut done = 0usize;
    let started = Instant::now();
    for round in 0..opts.runs {
        for k in 0..live.len() {
            let c = &mut cases[live[(k + round) % live.len()]];
            let t = time_once(&c.argv, opts, cwd);
            match t {
                Some(d) => c.samples.push(d),
                None => c.failures += 1,
            }
            c.by_round.push(t);
            done += 1;
        }
        if round % 20 == 19 || round + 1 == opts.runs {
            eprint!(
                "\rxtask bench: {done}/{total} runs, {:.1}s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!();
}

/// What one variant of the syscall probe measured.
struct Probe {
    /// Median ns per getpid() over the reps.
    median: f64,
    /// Every rep's ns/call, sorted.
    all: Vec<f64>,
    /// `Seccomp:` of /proc/self/status inside the probe (0 none, 2 filter).
    seccomp_mode: i32,
}

/// One variant of the syscall probe: its name, and what it measured or why
/// it did not run.
type SyscallRow = (String, Result<Probe, String>);

/// The layer states stockade's own report gives for a default run, one line
/// ("landlock applied, seccomp applied, …"), so a delta measured against a
/// layer that was not really applied is visible as such.
fn layer_states(stockade: &Path, opts: &Options, cwd: &Path) -> String {
    let argv: Vec<OsString> = vec![
        stockade.into(),
        "run".into(),
        "--report".into(),
        "-".into(),
        "--".into(),
        "/bin/true".into(),
    ];
    let out = match command(&argv, opts, cwd).output() {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => return format!("layers: cannot start stockade: {e}"),
    };
    let states: Vec<String> = [
        "user_namespace",
        "net_namespace",
        "rootfs",
        "landlock",
        "seccomp",
        "cgroup",
    ]
    .iter()
    .map(|layer| {
        let key = format!("\"{layer}\":{{\"state\":\"");
        let state = out
            .find(&key)
            .map(|i| &out[i + key.len()..])
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("not reported");
        format!("{layer} {state}")
    })
    .collect();
    format!(
        "layers per stockade --report (default run): {}",
        states.join(", ")
    )
}

/// The per-syscall probe's results: median ns/call per variant.
struct SyscallBench {
    /// Why it did not run at all.
    skipped: Option<String>,
    /// How the probe was compiled ("cc -O2 -static", or the fallback).
    build: String,
    /// (name, median ns/call, all reps) or (name, reason it did not run).
    rows: Vec<SyscallRow>,
}

fn syscall_bench(stockade: &Path, opts: &Options, scratch: &Path) -> SyscallBench {
    let mut sb = SyscallBench {
        skipped: None,
        build: String::new(),
        rows: Vec::new(),
    };
    let src = scratch.join("getpid.c");
    let bin = scratch.join("getpid");
    if let Err(e) = std::fs::write(&src, GETPID_C) {
        sb.skipped = Some(format!("did not run: write {}: {e}", src.display()));
        return sb;
    }
    let cc = |extra: &[&str]| {
        Command::new("cc")
            .args(["-O2"])
            .args(extra)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
    };
    match cc(&["-static"]) {
        Ok(o) if o.status.success() => sb.build = "cc -O2 -static".into(),
        static_try => match cc(&[]) {
            Ok(o) if o.status.success() => {
                let why = match static_try {
                    Ok(o) => first_line(&o.stderr),
                    Err(e) => e.to_string(),
                };
                sb.build = format!("cc -O2 (dynamic: -static failed: {why})");
            }
            Ok(o) => {
                sb.skipped = Some(format!("did not run: cc failed: {}", first_line(&o.stderr)));
                return sb;
            }
            Err(e) => {
                sb.skipped = Some(format!("did not run: cannot start cc: {e}"));
                return sb;
            }
        },
    }
    let n = opts.syscalls.to_string();
    let inner = "/bench/getpid";
    let mut variants: Vec<(String, Vec<OsString>)> = vec![(
        "getpid bare".into(),
        vec![bin.clone().into(), n.clone().into()],
    )];
    for (name, flags) in [
        ("getpid in stockade (default)", &[][..]),
        ("getpid in stockade --no-seccomp", &["--no-seccomp"][..]),
    ] {
        let mut a: Vec<OsString> = vec![stockade.into(), "run".into(), "--ro-bind".into()];
        let mut bind = bin.clone().into_os_string();
        bind.push(":");
        bind.push(inner);
        a.push(bind);
        a.extend(os(flags));
        a.extend(os(&["--", inner, &n]));
        variants.push((name.into(), a));
    }
    let mut reps: Vec<Result<(Vec<f64>, i32), String>> = vec![Ok((Vec::new(), -1)); variants.len()];
    eprintln!(
        "xtask bench: syscall probe, {} getpid() x {} reps x {} variants",
        opts.syscalls,
        opts.syscall_reps,
        variants.len()
    );
    for round in 0..opts.syscall_reps {
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            let Ok(acc) = &mut reps[i] else { continue };
            let res = command(&variants[i].1, opts, scratch).output();
            let parsed = match res {
                Ok(o) if o.status.success() => parse_probe(&o.stdout).ok_or_else(|| {
                    format!(
                        "did not run: unexpected output {:?}",
                        String::from_utf8_lossy(&o.stdout)
                    )
                }),
                Ok(o) => Err(format!(
                    "did not run: {} ({})",
                    first_line(&o.stderr),
                    describe(o.status)
                )),
                Err(e) => Err(format!("did not run: {e}")),
            };
            match parsed {
                Ok((ns, mode)) => {
                    acc.0.push(ns);
                    acc.1 = mode;
                }
                Err(e) => reps[i] = Err(e),
            }
        }
    }
    for ((name, _), r) in variants.into_iter().zip(reps) {
        sb.rows.push((
            name,
            r.map(|(mut all, seccomp_mode)| {
                all.sort_by(f64::total_cmp);
                Probe {
                    median: percentile(&all, 50.0),
                    all,
                    seccomp_mode,
                }
            }),
        ));
    }
    sb
}

/// "<ns/call> <seccomp mode>" from the probe.
fn parse_probe(out: &[u8]) -> Option<(f64, i32)> {
    let text = String::from_utf8_lossy(out);
    let mut it = text.split_whitespace();
    let ns = it.next()?.parse::<f64>().ok()?;
    let mode = it.next()?.parse::<i32>().ok()?;
    Some((ns, mode))
}

fn first_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message")
        .to_string()
}

fn find(cases: &[Case], group: Group, kind: Kind) -> Option<Stats> {
    case(cases, group, kind).and_then(|c| stats(&c.samples))
}

fn case(cases: &[Case], group: Group, kind: Kind) -> Option<&Case> {
    cases
        .iter()
        .find(|c| c.group == group && c.kind == kind && c.skipped.is_none())
}

fn ratio(a: f64, b: Option<Stats>) -> String {
    match b {
        Some(b) if b.median > 0.0 => format!("{:.2}", a / b.median),
        _ => "-".into(),
    }
}

fn render(cases: &[Case], sb: &SyscallBench, opts: &Options, notes: &[String]) -> String {
    let mut o = String::new();
    let host = host_line();
    let _ = writeln!(o, "\nstockade bench: {host}; {} runs per case", opts.runs);
    if let Some((u, g)) = opts.user {
        let _ = writeln!(o, "every measured command ran as uid {u} gid {g}");
    }
    for n in notes {
        let _ = writeln!(o, "note: {n}");
    }
    let width = cases
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(20)
        .max(36);
    let header = format!(
        "{:<width$} | {:>9} | {:>9} | {:>7} | {:>7}",
        "name", "median ms", "p90 ms", "× bare", "× bwrap"
    );
    for (group, title) in [
        (Group::True, "start-up: /bin/true"),
        (Group::Python, "start-up: python3 -c pass"),
        (
            Group::Layers,
            "start-up cost of each stockade layer (/bin/true)",
        ),
    ] {
        let _ = writeln!(
            o,
            "\n## {title}\n{header}\n{}",
            "-".repeat(header.chars().count())
        );
        let bare = find(cases, group.reference(), Kind::Bare);
        let bw = find(cases, group.reference(), Kind::Bwrap);
        let rows: Vec<&Case> = if group == Group::Layers {
            cases
                .iter()
                .filter(|c| {
                    c.group == Group::Layers || (c.group == Group::True && c.kind == Kind::Stockade)
                })
                .collect()
        } else {
            cases.iter().filter(|c| c.group == group).collect()
        };
        for c in rows {
            let _ = match (&c.skipped, stats(&c.samples)) {
                (Some(why), _) => writeln!(o, "{:<width$} | {why}", c.name),
                (None, None) => writeln!(o, "{:<width$} | did not run: every run failed", c.name),
                (None, Some(s)) => writeln!(
                    o,
                    "{:<width$} | {:>9.3} | {:>9.3} | {:>7} | {:>7}{}",
                    c.name,
                    s.median,
                    s.p90,
                    ratio(s.median, bare),
                    ratio(s.median, bw),
                    if c.failures > 0 {
                        format!("  ({} runs failed)", c.failures)
                    } else {
                        String::new()
                    }
                ),
            };
        }
        if group == Group::Layers {
            render_layer_deltas(&mut o, cases);
        } else {
            render_verdict(&mut o, cases, group);
        }
        if group != Group::Layers {
            render_profile(&mut o, cases, group);
        }
    }

    let _ = writeln!(o, "\n## per-syscall cost of the seccomp filter");
    match &sb.skipped {
        Some(why) => {
            let _ = writeln!(o, "{why}");
        }
        None => {
            let _ = writeln!(
                o,
                "{} getpid() via syscall(SYS_getpid), {} reps each, median; built with {}",
                opts.syscalls, opts.syscall_reps, sb.build
            );
            let bare = sb
                .rows
                .first()
                .and_then(|(_, r)| r.as_ref().ok())
                .map(|r| r.median);
            for (name, r) in &sb.rows {
                let _ = match r {
                    Ok(p) => writeln!(
                        o,
                        "{:<36} | {:>8.2} ns/call | {:>+8.2} ns vs bare | min {:.2} max {:.2} | Seccomp: {}",
                        name,
                        p.median,
                        p.median - bare.unwrap_or(p.median),
                        p.all[0],
                        p.all[p.all.len() - 1],
                        match p.seccomp_mode {
                            0 => "0 (no filter)".to_string(),
                            2 => "2 (filter)".to_string(),
                            m => m.to_string(),
                        }
                    ),
                    Err(why) => writeln!(o, "{name:<36} | {why}"),
                };
            }
            let get = |i: usize| sb.rows.get(i).and_then(|(_, r)| r.as_ref().ok());
            if let (Some(with), Some(without)) = (get(1), get(2)) {
                let _ = writeln!(
                    o,
                    "seccomp filter cost per allowed syscall: {:+.2} ns (stockade default − stockade --no-seccomp)",
                    with.median - without.median
                );
                if with.seccomp_mode != 2 {
                    let _ = writeln!(
                        o,
                        "WARNING: no seccomp filter was installed in the default jail (Seccomp: {}), so this measures nothing",
                        with.seccomp_mode
                    );
                }
            }
        }
    }
    o
}

fn render_verdict(o: &mut String, cases: &[Case], group: Group) {
    let (Some(bare), Some(st)) = (
        find(cases, group, Kind::Bare),
        find(cases, group, Kind::Stockade),
    ) else {
        return;
    };
    let st_cost = st.median - bare.median;
    let _ = write!(o, "jail cost (median − bare): stockade {st_cost:.3} ms");
    match find(cases, group, Kind::Bwrap) {
        Some(bw) => {
            let bw_cost = bw.median - bare.median;
            if bw_cost <= 0.0 {
                let _ = writeln!(
                    o,
                    ", bwrap {bw_cost:.3} ms → no ratio (bwrap not slower than bare: too noisy, rerun with more --runs)"
                );
                return;
            }
            let r = st_cost / bw_cost;
            let _ = writeln!(
                o,
                ", bwrap {bw_cost:.3} ms → stockade/bwrap {r:.2} (target ≤ 0.50: {})",
                if r <= 0.5 { "met" } else { "NOT met" }
            );
            // The same costs from the rounds (each case once per round,
            // back to back): less sensitive to load that drifts, which
            // matters when the command itself is long (python3).
            let paired =
                |k: Kind| paired_delta(case(cases, group, k)?, case(cases, group, Kind::Bare)?);
            if let (Some(sp), Some(bp)) = (paired(Kind::Stockade), paired(Kind::Bwrap)) {
                if bp > 0.0 {
                    let r = sp / bp;
                    let _ = writeln!(
                        o,
                        "jail cost (median of per-round differences − bare): stockade {sp:.3} ms, bwrap {bp:.3} ms → stockade/bwrap {r:.2} (target ≤ 0.50: {})",
                        if r <= 0.5 { "met" } else { "NOT met" }
                    );
                }
            }
        }
        None => {
            let _ = writeln!(o, " (no bwrap to compare)");
        }
    }
    render_variants(o, cases, group, bare);
}

/// `--profile python` finding python3 on PATH against naming it with
/// --python: what finding it costs per run.
fn render_profile(o: &mut String, cases: &[Case], group: Group) {
    let (Some(found), Some(real)) = (
        case(cases, group, Kind::ProfileFound),
        case(cases, group, Kind::ProfileReal),
    ) else {
        return;
    };
    let (Some(fs), Some(rs)) = (stats(&found.samples), stats(&real.samples)) else {
        return;
    };
    let Some(d) = paired_delta(found, real) else {
        return;
    };
    let _ = writeln!(
        o,
        "python profile, python3 from PATH − --python REAL: {:+.3} ms (difference of the medians) | {d:+.3} ms (median of per-round differences) (goal ≤ 5 ms: {})",
        fs.median - rs.median,
        if d <= 5.0 { "met" } else { "NOT met" }
    );
}

/// One line per other stockade binary: its jail cost, and how it compares
/// with the shipped binary round by round.
fn render_variants(o: &mut String, cases: &[Case], group: Group, bare: Stats) {
    let Some(shipped) = cases
        .iter()
        .find(|c| c.group == group && c.kind == Kind::Stockade)
    else {
        return;
    };
    for v in cases
        .iter()
        .filter(|c| c.group == group && c.kind == Kind::Variant)
    {
        let Some(s) = stats(&v.samples) else { continue };
        let paired = paired_delta(v, shipped)
            .map(|d| format!("{d:+.3} ms"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "  {}: jail cost {:.3} ms; minus `stockade` (median of per-round differences) {paired}",
            v.name,
            s.median - bare.median
        );
    }
}

/// Median of the per-round differences a − b (ms): both ran in the same
/// round, back to back, so load that drifts over the bench cancels out.
fn paired_delta(a: &Case, b: &Case) -> Option<f64> {
    let mut d: Vec<f64> = a
        .by_round
        .iter()
        .zip(&b.by_round)
        .filter_map(|(x, y)| Some((x.as_ref()?.as_secs_f64() - y.as_ref()?.as_secs_f64()) * 1e3))
        .collect();
    if d.is_empty() {
        return None;
    }
    d.sort_by(f64::total_cmp);
    Some(percentile(&d, 50.0))
}

fn render_layer_deltas(o: &mut String, cases: &[Case]) {
    let name = |n: &str| {
        cases
            .iter()
            .find(|c| c.name.starts_with(n) && c.skipped.is_none())
    };
    let def = name("stockade run -- /bin/true");
    let no_sc = name("stockade --no-seccomp --");
    let no_ll = name("stockade --no-landlock --");
    let none = name("stockade --no-seccomp --no-landlock");
    let bare = name("/bin/true (bare)");
    let _ = writeln!(
        o,
        "deltas: difference of the medians | median of the per-round differences"
    );
    let mut line = |what: &str, a: Option<&Case>, b: Option<&Case>| {
        if let (Some(a), Some(b)) = (a, b) {
            if let (Some(sa), Some(sb)) = (stats(&a.samples), stats(&b.samples)) {
                let paired = paired_delta(a, b)
                    .map(|d| format!("{d:>+8.3} ms"))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    o,
                    "  {what:<52} {:>+8.3} ms | {paired}",
                    sa.median - sb.median
                );
            }
        }
    };
    line("seccomp (default − --no-seccomp)", def, no_sc);
    line("landlock (default − --no-landlock)", def, no_ll);
    line("seccomp + landlock (default − both off)", def, none);
    line(
        "namespaces, mounts, supervisor (both off − bare)",
        none,
        bare,
    );
}

/// A warning when the host is already busy: the numbers will be noisy.
pub(crate) fn busy_host() -> Option<String> {
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let cpus = std::thread::available_parallelism().ok()?.get() as f64;
    (load > cpus * 0.5).then(|| {
        format!("host busy at start (1-min load {load:.2} on {cpus} CPUs): expect noise, compare ratios and paired deltas rather than absolute times")
    })
}

pub(crate) fn host_line() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("Linux {kernel}, {cpus} CPUs")
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

fn to_json(cases: &[Case], sb: &SyscallBench, opts: &Options, notes: &[String]) -> String {
    let mut o = String::from("{\n");
    let _ = writeln!(o, "  \"schema\": 1,");
    let _ = writeln!(o, "  \"host\": {},", json_str(&host_line()));
    let _ = writeln!(o, "  \"runs\": {},", opts.runs);
    let _ = writeln!(
        o,
        "  \"user\": {},",
        opts.user
            .map(|(u, g)| format!("{{\"uid\": {u}, \"gid\": {g}}}"))
            .unwrap_or_else(|| "null".into())
    );
    let notes: Vec<String> = notes.iter().map(|n| json_str(n)).collect();
    let _ = writeln!(o, "  \"notes\": [{}],", notes.join(", "));
    let _ = writeln!(o, "  \"startup\": [");
    let n = cases.len();
    for (i, c) in cases.iter().enumerate() {
        let bare = find(cases, c.group.reference(), Kind::Bare);
        let bw = find(cases, c.group.reference(), Kind::Bwrap);
        let argv: Vec<String> = c
            .argv
            .iter()
            .map(|a| json_str(&a.to_string_lossy()))
            .collect();
        let _ = write!(
            o,
            "    {{\"group\": {}, \"name\": {}, \"argv\": [{}], ",
            json_str(c.group.key()),
            json_str(&c.name),
            argv.join(", ")
        );
        match (&c.skipped, stats(&c.samples)) {
            (Some(why), _) => {
                let _ = write!(o, "\"status\": \"skipped\", \"reason\": {}", json_str(why));
            }
            (None, None) => {
                let _ = write!(o, "\"status\": \"failed\", \"failures\": {}", c.failures);
            }
            (None, Some(s)) => {
                let rel = |b: Option<Stats>| {
                    b.map(|b| json_num(s.median / b.median))
                        .unwrap_or_else(|| "null".into())
                };
                let _ = write!(
                    o,
                    "\"status\": \"ok\", \"samples\": {}, \"failures\": {}, \"median_ms\": {}, \"p90_ms\": {}, \"min_ms\": {}, \"mean_ms\": {}, \"x_bare\": {}, \"x_bwrap\": {}",
                    c.samples.len(),
                    c.failures,
                    json_num(s.median),
                    json_num(s.p90),
                    json_num(s.min),
                    json_num(s.mean),
                    rel(bare),
                    rel(bw)
                );
            }
        }
        let _ = writeln!(o, "}}{}", if i + 1 < n { "," } else { "" });
    }
    let _ = writeln!(o, "  ],");
    let _ = write!(
        o,
        "  \"syscall\": {{\"calls\": {}, \"reps\": {}, ",
        opts.syscalls, opts.syscall_reps
    );
    match &sb.skipped {
        Some(why) => {
            let _ = write!(o, "\"status\": \"skipped\", \"reason\": {}", json_str(why));
        }
        None => {
            let _ = write!(
                o,
                "\"status\": \"ok\", \"build\": {}, \"rows\": [",
                json_str(&sb.build)
            );
            let rows: Vec<String> = sb
                .rows
                .iter()
                .map(|(name, r)| match r {
                    Ok(p) => format!(
                        "{{\"name\": {}, \"median_ns_per_call\": {}, \"seccomp_mode\": {}, \"all\": [{}]}}",
                        json_str(name),
                        json_num(p.median),
                        p.seccomp_mode,
                        p.all
                            .iter()
                            .map(|x| json_num(*x))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Err(why) => format!(
                        "{{\"name\": {}, \"status\": \"skipped\", \"reason\": {}}}",
                        json_str(name),
                        json_str(why)
                    ),
                })
                .collect();
            let _ = write!(o, "{}]", rows.join(", "));
        }
    }
    let _ = writeln!(o, "}}\n}}");
    o
}

/// A private temp directory, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new() -> Result<Scratch, String> {
        let p = std::env::temp_dir().join(format!("stockade-bench-{}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
        // World-readable so --user can run the probe binary from it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
        Ok(Scratch(p))
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 90.0), 9.0);
        assert_eq!(percentile(&v, 100.0), 10.0);
        assert_eq!(percentile(&[3.0], 90.0), 3.0);
    }

    #[test]
    fn bad_arguments_are_refused_with_the_flag_named() {
        let a = |v: &[&str]| parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(a(&["--runs", "0"]).err().unwrap().contains("--runs"));
        assert!(a(&["--runs"])
            .err()
            .unwrap()
            .contains("--runs needs a value"));
        assert!(a(&["--user", "x"]).err().unwrap().contains("--user"));
        assert!(a(&["--frobnicate"]).err().unwrap().contains("--frobnicate"));
        let o = a(&["--runs=7", "--user", "65534", "--json", "f.json"]).unwrap();
        assert_eq!(
            (o.runs, o.user, o.json),
            (7, Some((65534, 65534)), Some("f.json".into()))
        );
        let o = a(&["--no-build", "--also", "/x/stockade", "--also=y"]).unwrap();
        assert!(!o.build);
        assert_eq!(o.also, vec![PathBuf::from("/x/stockade"), "y".into()]);
        assert!(a(&["--also"])
            .err()
            .unwrap()
            .contains("--also needs a value"));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
