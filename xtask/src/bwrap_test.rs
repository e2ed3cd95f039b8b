//! `cargo xtask bwrap-test`: bubblewrap's own test suite (Debian trixie's
//! source package) run twice, against the host's real bwrap (the reference)
//! and against a `bwrap` symlink to `target/release/stockade` (to
//! `target/debug/stockade`, as `cargo test` built it, under `cargo xtask
//! test`), as this user and, when that is root, as uid 65534 too, with a
//! per-test table. Each test is judged against the real bwrap on the same
//! host ([`verdict`]): it fails when it fails, is not reached, or is
//! skipped under stockade where the real bwrap ran it; it is a skip (with
//! its reason) only where the real bwrap skips or fails it too. Exits
//! non-zero when any test fails.
//!
//! The source goes to `target/bwrap-test/` (kept: fetched once); every
//! run's output to `target/xtask-logs/bwrap-test-<bwrap>-<script>.log`.

use crate::logs;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The deb-src entry the task adds while it fetches (and removes after).
const SOURCES: &str = "/etc/apt/sources.list.d/stockade-bwrap-test-src.sources";
const SOURCES_TEXT: &str = "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
const LOG: &str = "bwrap-test.log";
/// Debian's python3 (where python3-seccomp and python3-tap go), not
/// whatever python3 comes first on the PATH.
const PYTHON: &str = "/usr/bin/python3";

/// The scripts run, in order, with their interpreter and how many seconds
/// each may take. The two `test-specifying-*` scripts wait (`sleep 1` in a
/// loop) for a first sandbox to write a file, forever when it cannot:
/// under the real bwrap they take a second, so 30 s is ample.
const SCRIPTS: &[(&str, &str, u32)] = &[
    ("test-run.sh", "bash", 600),
    ("test-specifying-userns.sh", "bash", 30),
    ("test-specifying-pidns.sh", "bash", 30),
    ("test-seccomp.py", PYTHON, 600),
    ("test-sandbox.py", PYTHON, 600),
];

/// One test's result in one run.
#[derive(Clone, Debug, PartialEq)]
enum Res {
    Ok,
    Fail,
    Skip,
    /// The script stopped before reaching it.
    Missing,
}

impl Res {
    fn word(&self) -> &'static str {
        match self {
            Res::Ok => "ok",
            Res::Fail => "FAIL",
            Res::Skip => "skip",
            Res::Missing => "not run",
        }
    }
}

/// One TAP result: number, description, result, the first error line seen
/// since the previous result (for a failure).
#[derive(Clone, Debug)]
struct Tap {
    n: u32,
    desc: String,
    res: Res,
    err: String,
}

/// Whether `line` says something went wrong.
fn looks_like_error(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "bwrap:",
        "error",
        "fail",
        "assert",
        "expected",
        "unexpected",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// The line that best says why a test failed, from the output printed
/// before its result line and the `# ` diagnostics after it: a `bwrap:`
/// message first, then Python's `SomeError: …`, then any error-looking line.
fn best_error(lines: &[&str]) -> String {
    let lines: Vec<&str> = lines
        .iter()
        .map(|l| l.trim().trim_start_matches('#').trim())
        // `+ …` is bash's trace (test-run.sh runs with set -x).
        .filter(|l| !l.is_empty() && !l.starts_with('+') && !l.starts_with("Traceback"))
        .collect();
    let py_error = |l: &&&str| {
        l.split_once(": ").is_some_and(|(head, _)| {
            !head.contains(' ') && (head.ends_with("Error") || head.ends_with("Exception"))
        })
    };
    lines
        .iter()
        .find(|l| l.starts_with("bwrap:"))
        .or_else(|| lines.iter().find(py_error))
        .or_else(|| lines.iter().find(|l| looks_like_error(l)))
        .map(|l| l.to_string())
        .unwrap_or_default()
}

/// A TAP result line: number (TAP allows none), description, directive
/// (after ` # `), and whether it is `not ok`.
fn tap_line(line: &str) -> Option<(Option<u32>, String, String, bool)> {
    let (bad, rest) = if let Some(r) = line.strip_prefix("not ok ") {
        (true, r)
    } else {
        (false, line.strip_prefix("ok ")?)
    };
    let num: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let n = num.parse::<u32>().ok();
    let rest = rest[num.len()..].trim_start();
    let rest = rest.strip_prefix("- ").unwrap_or(rest);
    let (desc, directive) = if let Some(d) = rest.strip_prefix("# ") {
        ("", d)
    } else {
        match rest.find(" # ") {
            Some(i) => (&rest[..i], rest[i + 3..].trim()),
            None => (rest, ""),
        }
    };
    Some((n, desc.trim().to_string(), directive.to_string(), bad))
}

/// Parses a run's output (TAP lines among other output). Returns the
/// results and why the script stopped (the error after the last result).
fn parse_tap(out: &str) -> (Vec<Tap>, String) {
    let lines: Vec<&str> = out.lines().collect();
    let mut taps = Vec::new();
    let mut since = 0;
    let mut i = 0;
    while i < lines.len() {
        let Some((n, desc, directive, bad)) = tap_line(lines[i]) else {
            i += 1;
            continue;
        };
        let n = n.unwrap_or_else(|| taps.last().map_or(1, |t: &Tap| t.n + 1));
        let before = since;
        let mut end = i + 1;
        while end < lines.len() && lines[end].starts_with('#') && tap_line(lines[end]).is_none() {
            end += 1;
        }
        let skip = directive.to_ascii_uppercase().starts_with("SKIP");
        let res = match (skip, bad) {
            (true, _) => Res::Skip,
            (false, true) => Res::Fail,
            (false, false) => Res::Ok,
        };
        let err = if res == Res::Fail {
            let mut around: Vec<&str> = lines[before..i].to_vec();
            around.extend(&lines[i + 1..end]);
            best_error(&around)
        } else {
            String::new()
        };
        let desc = match (skip, desc.is_empty()) {
            (true, true) => directive,
            (true, false) => format!("{desc} ({directive})"),
            _ => desc,
        };
        taps.push(Tap { n, desc, res, err });
        since = end;
        i = end;
    }
    (taps, best_error(&lines[since.min(lines.len())..]))
}

/// The extracted source directory under `dir`, if there is one.
fn source_dir(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("tests/test-run.sh").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// `apt-get source bubblewrap` from trixie into `dir`, through a deb-src
/// entry added for the time of the fetch. Falls back to unpacking the
/// upstream tarball when apt-get cannot unpack (no .dsc, no dpkg-source).
fn fetch(dir: &Path) -> Result<PathBuf, String> {
    if let Some(src) = source_dir(dir) {
        return Ok(src);
    }
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::write(SOURCES, SOURCES_TEXT).map_err(|e| format!("{SOURCES}: {e}"))?;
    eprintln!(
        "xtask: fetching bubblewrap's source (Debian trixie) into {}",
        dir.display()
    );
    let only_this = [
        "-o",
        &format!("Dir::Etc::sourcelist={SOURCES}"),
        "-o",
        "Dir::Etc::sourceparts=-",
        "-o",
        "APT::Get::List-Cleanup=0",
    ]
    .map(String::from);
    let updated = logs::run_to(
        LOG,
        false,
        Command::new("apt-get")
            .args(["update", "-q"])
            .args(&only_this),
    );
    let got = updated.and_then(|ok| {
        if !ok {
            return Err(format!(
                "apt-get update (trixie deb-src) failed, log: {}",
                logs::shown(LOG)
            ));
        }
        logs::run_to(
            LOG,
            true,
            Command::new("apt-get")
                .args(["source", "-q", "bubblewrap/trixie"])
                .args(&only_this)
                .current_dir(dir),
        )
    });
    let _ = fs::remove_file(SOURCES);
    got?;
    if source_dir(dir).is_none() {
        let tarball = fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains(".orig.tar."))
            .ok_or_else(|| {
                format!(
                    "apt-get source bubblewrap fetched no tarball, log: {}",
                    logs::shown(LOG)
                )
            })?;
        let how = "apt-get source did not unpack it (its .dsc is missing here?)";
        eprintln!("xtask: {how}; unpacking {}", tarball.display());
        logs::note(LOG, &format!("{how}; unpacking {}", tarball.display()));
        if !logs::run_to(
            LOG,
            true,
            Command::new("tar").arg("xf").arg(&tarball).current_dir(dir),
        )? {
            return Err(format!(
                "tar xf {} failed, log: {}",
                tarball.display(),
                logs::shown(LOG)
            ));
        }
    }
    source_dir(dir).ok_or_else(|| format!("no bubblewrap source under {}", dir.display()))
}

/// The packages the run needs: a C compiler, meson, ninja, libcap's headers,
/// python3 with seccomp and tap.
fn prepare() -> Result<(), String> {
    let mut missing = Vec::new();
    for (cmd, pkg) in [
        ("gcc", "gcc"),
        ("meson", "meson"),
        ("ninja", "ninja-build"),
        ("pkg-config", "pkg-config"),
    ] {
        if !logs::have(cmd) {
            missing.push(pkg);
        }
    }
    if !Path::new("/usr/include/sys/capability.h").is_file() {
        missing.push("libcap-dev");
    }
    for (module, pkg) in [("seccomp", "python3-seccomp"), ("tap", "python3-tap")] {
        let ok = Command::new(PYTHON)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            missing.push(pkg);
        }
    }
    logs::apt_install(&missing)
}

/// Which stockade binary the suite runs.
#[derive(Clone, Copy, PartialEq)]
enum Profile {
    /// `cargo build --release` first.
    Release,
    /// `target/debug/stockade`, already built (by `cargo test`).
    Debug,
}

/// Builds real bwrap 0.12 and the helpers the tests use (`try-syscall`,
/// `test-utils`) with meson into `build`, stockade (in release mode, or
/// the debug build already there), and the `bwrap` symlink to it. Returns
/// the symlink.
fn build(root: &Path, src: &Path, build: &Path, profile: Profile) -> Result<PathBuf, String> {
    meson(src, build)?;
    let bin_path = match profile {
        Profile::Release => {
            let step = logs::Step::start("cargo build --release");
            let ok = logs::run_to(
                LOG,
                true,
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                    .args(["build", "--release", "-p", "stockade"])
                    .current_dir(root),
            )?;
            step.end(ok, "", &logs::shown(LOG));
            if !ok {
                return Err("cargo build --release failed".into());
            }
            root.join("target/release/stockade")
        }
        Profile::Debug => root.join("target/debug/stockade"),
    };
    if !bin_path.is_file() {
        return Err(format!("no stockade binary at {}", bin_path.display()));
    }
    let bin = build.with_file_name("bin");
    fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let link = bin.join("bwrap");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&bin_path, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    Ok(link)
}

/// Real bwrap 0.12 and the tests' helpers, built with meson from `src`
/// into `build`.
fn meson(src: &Path, build: &Path) -> Result<(), String> {
    if !build.join("build.ninja").is_file() {
        let ok = logs::run_to(
            LOG,
            true,
            Command::new("meson")
                .arg("setup")
                .arg(build)
                .args([
                    "-Dman=disabled",
                    "-Dselinux=disabled",
                    "-Dbash_completion=disabled",
                    "-Dzsh_completion=disabled",
                ])
                .arg(format!("-Dpython={PYTHON}"))
                .current_dir(src),
        )?;
        if !ok {
            return Err(format!("meson setup failed, log: {}", logs::shown(LOG)));
        }
    }
    if !logs::run_to(LOG, true, Command::new("ninja").arg("-C").arg(build))? {
        return Err(format!(
            "ninja (bwrap 0.12) failed, log: {}",
            logs::shown(LOG)
        ));
    }
    Ok(())
}

/// The reference bwrap 0.12 that `tests/bwrap.rs` compares `stockade
/// bwrap` with (`target/bwrap-test/meson/bwrap`): fetched from Debian's
/// source package and built, once (for `cargo xtask test`'s preparation).
pub fn reference() -> Result<PathBuf, String> {
    let dir = logs::root().join("target/bwrap-test");
    let built = dir.join("meson/bwrap");
    if built.is_file() {
        return Ok(built);
    }
    let src = fetch(&dir)?;
    prepare()?;
    meson(&src, &dir.join("meson"))?;
    Ok(built)
}

/// Who a pass runs as: this user, or uid 65534 (when this is root).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Me,
    Nobody,
}

impl Who {
    fn tag(self) -> &'static str {
        match (self, is_root()) {
            (Who::Nobody, _) => "nobody",
            (Who::Me, true) => "root",
            (Who::Me, false) => "user",
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Runs every script with `BWRAP=bwrap` as `who`; results keyed by script.
fn run_all(tag: &str, who: Who, bwrap: &Path, src: &Path, build: &Path) -> Results {
    let mut all = Results::new();
    for (script, interp, secs) in SCRIPTS {
        let log = format!("bwrap-test-{tag}-{}-{script}.log", who.tag());
        let what = format!("{script} against {tag} as {}", who.tag());
        let step = logs::Step::start(&format!("{what} ({})", bwrap.display()));
        let mut cmd = Command::new("timeout");
        if who == Who::Nobody {
            cmd = Command::new("setpriv");
            cmd.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "timeout",
            ]);
            cmd.env("HOME", "/nonexistent");
        }
        let ran = logs::run_to(
            &log,
            false,
            cmd.arg(secs.to_string())
                .arg(interp)
                .arg(src.join("tests").join(script))
                .env("BWRAP", bwrap)
                .env("G_TEST_SRCDIR", src)
                .env("G_TEST_BUILDDIR", build)
                .current_dir(src.join("tests")),
        );
        // A script stopped by its time limit leaves its sandboxes behind
        // (test-specifying-*'s first sandbox waits on a pipe forever).
        let killed = kill_orphans(bwrap);
        if killed > 0 {
            logs::note(
                &log,
                &format!("xtask: killed {killed} orphaned {}", bwrap.display()),
            );
        }
        let (taps, stopped) = parse_tap(&logs::read(&log));
        let ok = ran.unwrap_or(false) && !taps.is_empty();
        let n_ok = taps.iter().filter(|t| t.res == Res::Ok).count();
        step.end(ok, &format!("{n_ok}/{} ok", taps.len()), &logs::shown(&log));
        all.insert(script.to_string(), (taps, stopped));
    }
    all
}

/// Kills every orphaned process (its parent is init) running the binary
/// `bwrap` resolves to: what a script left when its time ran out. Only
/// this run's binaries are matched (the real bwrap it built, the stockade
/// build the link points at), and the scripts run one at a time. Returns
/// how many were signalled.
fn kill_orphans(bwrap: &Path) -> usize {
    let Ok(exe) = fs::canonicalize(bwrap) else {
        return 0;
    };
    let Ok(rd) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut pids = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: state, ppid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid == Some("1") && fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe) {
            pids.push(pid.to_string());
        }
    }
    if !pids.is_empty() {
        let _ = Command::new("kill").arg("-KILL").args(&pids).status();
    }
    pids.len()
}

type Results = BTreeMap<String, (Vec<Tap>, String)>;

/// One table row: script, number, description, real result, stockade
/// result, the stockade error line.
struct Row {
    script: String,
    n: u32,
    desc: String,
    real: Res,
    ours: Res,
    err: String,
}

/// How a test counts: stockade's result judged against the real bwrap's
/// on the same host.
#[derive(Debug, PartialEq)]
enum Verdict {
    Pass,
    /// Why (the error line, or the skip where the real bwrap ran it).
    Fail(String),
    /// Why: skipped or failed under the real bwrap too.
    Skip(String),
}

/// Passed under stockade: a pass. Failed, or not reached (the script
/// stopped before it): a failure, whatever the real bwrap did. Skipped
/// where the real bwrap skipped it too, or where the real bwrap fails it
/// as well: a skip that says so. Skipped where the real bwrap ran it: a
/// failure.
fn verdict(r: &Row) -> Verdict {
    match (&r.ours, &r.real) {
        (Res::Ok, _) => Verdict::Pass,
        (Res::Skip, Res::Skip) => {
            Verdict::Skip(format!("skipped as under the real bwrap: {}", r.desc))
        }
        (Res::Skip, Res::Fail) => Verdict::Skip("skipped; fails under the real bwrap".into()),
        (Res::Skip, _) => Verdict::Fail("skipped, where the real bwrap runs it".into()),
        (Res::Fail, Res::Fail) => Verdict::Skip(format!(
            "fails under the real bwrap 0.12 too (here: {})",
            r.err
        )),
        (Res::Fail, _) => Verdict::Fail(r.err.clone()),
        (Res::Missing, _) => Verdict::Fail(format!("not reached: {}", r.err)),
    }
}

fn rows(real: &Results, ours: &Results) -> Vec<Row> {
    let mut out = Vec::new();
    for (script, ..) in SCRIPTS {
        let empty = (Vec::new(), String::new());
        let r = real.get(*script).unwrap_or(&empty);
        let o = ours.get(*script).unwrap_or(&empty);
        let mut nums: Vec<u32> = r.0.iter().chain(&o.0).map(|t| t.n).collect();
        nums.sort_unstable();
        nums.dedup();
        for n in nums {
            let rt = r.0.iter().find(|t| t.n == n);
            let ot = o.0.iter().find(|t| t.n == n);
            let desc = ot.or(rt).map(|t| t.desc.clone()).unwrap_or_default();
            let ours = ot.map_or(Res::Missing, |t| t.res.clone());
            let err = match ot {
                Some(t) => t.err.clone(),
                None => o.1.clone(),
            };
            out.push(Row {
                script: script.to_string(),
                n,
                desc,
                real: rt.map_or(Res::Missing, |t| t.res.clone()),
                ours,
                err,
            });
        }
    }
    out
}

fn print_table(who: &str, rows: &[Row]) {
    println!(
        "\n[{who}] {:<28} {:>3}  {:<8} {:<8} test",
        "script", "n", "bwrap", "stockade"
    );
    // Why a script stopped is said once, on its first test not run.
    let mut said_stop = String::new();
    for r in rows {
        let mut desc: String = r.desc.chars().take(70).collect();
        let first_missing = r.ours == Res::Missing && said_stop != r.script;
        if r.ours == Res::Missing {
            said_stop.clone_from(&r.script);
        }
        if (r.ours == Res::Fail || first_missing) && !r.err.is_empty() {
            let err: String = r.err.chars().take(120).collect();
            desc = format!("{desc}\n{:>58}{err}", "");
        }
        println!(
            "[{who}] {:<28} {:>3}  {:<8} {:<8} {desc}",
            r.script,
            r.n,
            r.real.word(),
            r.ours.word()
        );
    }
}

/// Counts of one column: passed, failed (or not run), skipped.
fn counts(rows: &[Row], res: impl Fn(&Row) -> &Res) -> (usize, usize, usize) {
    let n = |want: &[Res]| rows.iter().filter(|r| want.contains(res(r))).count();
    (
        n(&[Res::Ok]),
        n(&[Res::Fail, Res::Missing]),
        n(&[Res::Skip]),
    )
}

/// The summary lines of one pass; true when no test failed.
fn summary(who: &str, rows: &[Row]) -> bool {
    let (rp, rf, rs) = counts(rows, |r| &r.real);
    let (op, of, os) = counts(rows, |r| &r.ours);
    let v: Vec<Verdict> = rows.iter().map(verdict).collect();
    let failed = v.iter().filter(|v| matches!(v, Verdict::Fail(_))).count();
    let skipped = v.iter().filter(|v| matches!(v, Verdict::Skip(_))).count();
    println!("bwrap-test [{who}]: real bwrap 0.12: {rp} passed, {rf} failed, {rs} skipped");
    println!("bwrap-test [{who}]: stockade:       {op} passed, {of} failed, {os} skipped");
    println!(
        "bwrap-test [{who}]: against the real bwrap: {} passed, {failed} failed, {skipped} skipped (skipped or failed under the real bwrap too)",
        v.len() - failed - skipped
    );
    failed == 0
}

/// Every pass's rows, the stockade binary built (or, `Debug`, taken as
/// built) and bubblewrap fetched and built first: as this user, and as uid
/// 65534 too when this is root.
fn suite(profile: Profile) -> Result<Vec<(&'static str, Vec<Row>)>, String> {
    let root = logs::root();
    let dir = root.join("target/bwrap-test");
    let src = fetch(&dir)?;
    println!("bwrap-test: source {}", src.display());
    let build_dir = dir.join("meson");
    prepare()?;
    let link = build(&root, &src, &build_dir, profile)?;
    // The reference: bwrap 0.12 as just built
    // (BWRAP_TEST_REFERENCE=/usr/bin/bwrap for the host's own).
    let real_bwrap = std::env::var_os("BWRAP_TEST_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| build_dir.join("bwrap"));
    let whos: &[Who] = match is_root() {
        true => &[Who::Me, Who::Nobody],
        false => &[Who::Me],
    };
    let stage = Stage::new(&src, &build_dir, &real_bwrap, &link)?;
    let mut passes = Vec::new();
    for &who in whos {
        let real = run_all("real", who, &stage.real, &stage.src, &stage.build);
        let ours = run_all("stockade", who, &stage.ours, &stage.src, &stage.build);
        passes.push((who.tag(), rows(&real, &ours)));
    }
    Ok(passes)
}

/// The suite's files, copied where every test can reach them: under
/// /var/tmp (libtest.sh's own scratch place), in world-readable
/// directories. A checkout may sit under /tmp, which `RUN`'s `--tmpfs
/// /tmp` hides from the sandbox (test-sandbox.py runs a helper script from
/// the source tree inside it), or under a 0700 home, which uid 65534
/// cannot enter. Removed when dropped.
struct Stage {
    dir: PathBuf,
    src: PathBuf,
    build: PathBuf,
    real: PathBuf,
    ours: PathBuf,
}

impl Stage {
    fn new(src: &Path, build: &Path, real: &Path, link: &Path) -> Result<Stage, String> {
        use std::os::unix::fs::PermissionsExt;
        let dir = PathBuf::from(format!(
            "/var/tmp/stockade-bwrap-test-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).map_err(|e| format!("{}: {e}", dir.display()))?;
        for d in [dir.clone(), dir.join("bin")] {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let copy = |from: &Path, to: &Path| -> Result<(), String> {
            let ok = Command::new("cp")
                .arg("-a")
                .arg(from)
                .arg(to)
                .status()
                .is_ok_and(|s| s.success());
            match ok {
                true => Ok(()),
                false => Err(format!("cp -a {} {}: failed", from.display(), to.display())),
            }
        };
        let s = Stage {
            src: dir.join("src"),
            build: dir.join("meson"),
            real: dir.join("real-bwrap"),
            ours: dir.join("bin/bwrap"),
            dir,
        };
        copy(src, &s.src)?;
        copy(build, &s.build)?;
        copy(real, &s.real)?;
        // stockade itself (the link's target), and a `bwrap` link to it.
        let bin = fs::canonicalize(link).map_err(|e| format!("{}: {e}", link.display()))?;
        let stockade = s.dir.join("stockade");
        copy(&bin, &stockade)?;
        std::os::unix::fs::symlink(&stockade, &s.ours)
            .map_err(|e| format!("{}: {e}", s.ours.display()))?;
        Ok(s)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The table of every pass into `TABLE_LOG` (for `cargo xtask test`, which
/// prints only the counts).
pub const TABLE_LOG: &str = "bwrap-test-table.log";

/// For `cargo xtask test`: the whole run against `target/debug/stockade`,
/// each test counted into `t` by its [`verdict`], named
/// `bwrap-test [root|nobody] SCRIPT N DESCRIPTION`. A suite that cannot
/// run at all is one failure.
pub fn into_tally(t: &mut crate::tally::Tally) {
    let passes = match suite(Profile::Debug) {
        Ok(p) => p,
        Err(e) => {
            t.fail(format!("bwrap-test: {e}"));
            return;
        }
    };
    let mut table = String::new();
    for (who, rows) in &passes {
        for r in rows {
            let name = format!("bwrap-test [{who}] {} {} {}", r.script, r.n, r.desc);
            table.push_str(&format!(
                "[{who}] {:<28} {:>3}  {:<8} {:<8} {}\n",
                r.script,
                r.n,
                r.real.word(),
                r.ours.word(),
                r.desc
            ));
            match verdict(r) {
                Verdict::Pass => t.pass(),
                Verdict::Fail(why) => t.fail(format!("{name}: {why}")),
                Verdict::Skip(why) => t.skip(format!("{name}: {why}")),
            }
        }
    }
    if let Ok(mut f) = logs::fresh(TABLE_LOG) {
        use std::io::Write;
        let _ = f.write_all(table.as_bytes());
    }
}

pub fn main(_args: &[String]) -> i32 {
    let started = std::time::Instant::now();
    let passes = match suite(Profile::Release) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: {e}");
            return 1;
        }
    };
    let mut clean = true;
    for (who, rows) in &passes {
        print_table(who, rows);
    }
    println!();
    for (who, rows) in &passes {
        clean &= summary(who, rows);
    }
    println!("bwrap-test: {} s", started.elapsed().as_secs());
    match clean {
        true => 0,
        false => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tap_lines() {
        let out = "1..3\nok 1 - first\n+ trace fail\nbwrap: Can't mount proc\nnot ok 2 - second\nok 3 # SKIP no caps\nok 4 - x # skip why\nnot ok 5 y\n# Traceback (most recent call last):\n#   File \"t.py\", line 1\n# AssertionError: 1 != 111\nok - z\nbwrap: Can't chdir\n";
        let (t, _) = parse_tap(out);
        assert_eq!(t.len(), 6);
        assert_eq!((t[5].n, t[5].desc.as_str()), (6, "z"));
        assert_eq!(t[0].res, Res::Ok);
        assert_eq!(t[1].res, Res::Fail);
        assert_eq!(t[1].err, "bwrap: Can't mount proc");
        assert_eq!(t[2].res, Res::Skip);
        assert_eq!(t[3].res, Res::Skip);
        assert_eq!(t[2].desc, "SKIP no caps");
        assert_eq!(t[3].desc, "x (skip why)");
        assert_eq!(t[4].err, "AssertionError: 1 != 111");
        assert_eq!(parse_tap(out).1, "bwrap: Can't chdir");
    }

    fn row(n: u32, real: Res, ours: Res) -> Row {
        Row {
            script: "t.sh".into(),
            n,
            desc: "d".into(),
            real,
            ours,
            err: "e".into(),
        }
    }

    #[test]
    fn each_test_is_judged_against_the_real_bwrap() {
        use Res::*;
        let v = |real, ours| verdict(&row(1, real, ours));
        assert_eq!(v(Ok, Ok), Verdict::Pass);
        assert_eq!(v(Fail, Ok), Verdict::Pass);
        assert_eq!(v(Ok, Fail), Verdict::Fail("e".into()));
        assert_eq!(v(Missing, Fail), Verdict::Fail("e".into()));
        assert!(matches!(v(Ok, Missing), Verdict::Fail(_)));
        assert!(matches!(v(Skip, Missing), Verdict::Fail(_)));
        // A skip the real bwrap does not make is a failure.
        assert!(matches!(v(Ok, Skip), Verdict::Fail(_)));
        assert!(matches!(v(Skip, Skip), Verdict::Skip(_)));
        // Failing where the reference fails too says so, as a skip.
        assert!(matches!(v(Fail, Fail), Verdict::Skip(_)));
    }
}
