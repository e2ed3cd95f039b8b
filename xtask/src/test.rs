//! `cargo xtask test`: every test the project has, in one command, one line
//! per step on the terminal, and one closing line `N passed, N failed, N
//! skipped` (the last line printed; CI reads it).
//!
//! 1. `cargo fmt --check` and `cargo clippy -- -D warnings`;
//! 2. `cargo xtask wheel` (the Python package's wheel with the static
//!    binary, which `tests/python_wheel.rs` installs), then
//!    `cargo test --workspace --no-fail-fast` (the integration tests start
//!    real jails as root and as uid 65534 themselves), counted against the
//!    list of tests of every test binary;
//!    (the Python client's tests run inside `tests/serve_python.rs`, against
//!    a real server);
//! 3. bubblewrap's own test suite against `target/debug/stockade`
//!    (`cargo xtask bwrap-test`'s, as root and as uid 65534), each test
//!    counted against the real bwrap 0.12 on the same host (see
//!    `bwrap_test::verdict`);
//! 4. the static binary (what ships) run on this host as root and as uid
//!    65534 (`static_smoke`), then `cargo xtask vm-test` (cgroup v2, then
//!    cgroup v1 limits inside a small VM);
//!    then `cargo xtask vm-systemd-test` (the systemd rung against a real
//!    `systemd --user`, inside a small VM with systemd as PID 1);
//! 5. `cargo xtask docker-test` (inside a real Docker engine).
//!
//! Each step's full output goes to `target/xtask-logs/<step>.log`, package
//! installs to `apt.log`, the VM's console to `vm-console.log`. A test that
//! cannot run here says `SKIPPED: <test>: <reason>`; skips are counted apart
//! and never as passed.

use crate::json;
use crate::logs::{self, Step};
use crate::tally::{self, Binary, Tally};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The most lines of one failed test's output shown on the terminal.
const FAILURE_LINES: usize = 40;

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Installs what the tests need when it is missing (Debian packages as
/// root, in one apt-get call; rustup components).
fn prepare(only_cargo: bool) {
    let want = [
        ("cc", "gcc libc6-dev"),
        ("python3", "python3"),
        ("tmux", "tmux"),
        ("setpriv", "util-linux"),
        ("bwrap", "bubblewrap"),
        ("busybox", "busybox-static"),
        ("/usr/share/doc/python3-jsonschema", "python3-jsonschema"),
        // tests/egress.rs: curl and pip through the egress proxy.
        ("curl", "curl"),
        ("/usr/share/doc/python3-pip", "python3-pip"),
        // The evaluator suite imports numpy in a jail (python_integrations.rs).
        ("/usr/share/doc/python3-numpy", "python3-numpy"),
        // tests/cgroup_systemd.rs: a user bus without systemd on it.
        ("dbus-daemon", "dbus-daemon"),
    ];
    let mut missing: Vec<&str> = want
        .iter()
        .filter(|(c, _)| !logs::have(c))
        .flat_map(|(_, p)| p.split(' '))
        .collect();
    if !only_cargo {
        // The Docker suite's sidecar checks (docker_compose.rs).
        if !logs::have("docker-compose") {
            missing.push("docker-compose");
        }
        for p in crate::vm_systemd::missing_packages() {
            if !missing.contains(&p) {
                missing.push(p);
            }
        }
    }
    if !missing.is_empty() {
        if is_root() {
            if let Err(e) = logs::apt_install(&missing) {
                eprintln!("xtask: {e}");
            }
        } else {
            eprintln!(
                "xtask: missing Debian packages (not root, not installing): {}",
                missing.join(" ")
            );
        }
    }
    // tests/bwrap.rs compares `stockade bwrap` with bubblewrap 0.12, built
    // from Debian's source package (the host's bwrap may be older).
    if is_root() {
        if let Err(e) = crate::bwrap_test::reference() {
            eprintln!("xtask: the reference bwrap 0.12 could not be built: {e}");
        }
    }
    for (comp, sub) in [("rustfmt", "fmt"), ("clippy", "clippy")] {
        if !cargo()
            .args([sub, "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!("xtask: rustup component add {comp}");
            let _ = logs::run_to(
                "rustup.log",
                true,
                Command::new("rustup").args(["component", "add", comp]),
            );
        }
    }
}

/// A step that is one check: one passed or one failed.
fn check_step(t: &mut Tally, label: &str, log: &str, cmd: &mut Command) {
    let step = Step::start(label);
    let ok = logs::run_to(log, false, cmd).unwrap_or_else(|e| {
        logs::note(log, &e);
        false
    });
    step.end(ok, "", &logs::shown(log));
    if ok {
        t.pass();
    } else {
        t.fail(label.to_string());
    }
}

/// Builds the test targets and lists each test binary's tests. A build
/// that fails is one failure; what did build is still returned, with
/// whether the build succeeded.
fn build_tests(root: &Path, t: &mut Tally) -> (Vec<Binary>, bool) {
    const LOG: &str = "cargo-build.log";
    let step = Step::start("cargo test --no-run (build the tests)");
    let ok = logs::run_to(
        LOG,
        false,
        cargo().current_dir(root).args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ]),
    )
    .unwrap_or(false);
    let mut bins: Vec<Binary> = logs::read(LOG)
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| test_binary(root, l))
        .collect();
    bins.sort_by(|a, b| a.label.cmp(&b.label));
    let what = format!("{} test binaries", bins.len());
    step.end(ok, &what, &logs::shown(LOG));
    if !ok {
        t.fail("cargo test --no-run: the test targets did not build".into());
        print_build_errors(&logs::read(LOG));
    }
    (bins, ok)
}

/// The first compiler errors and where they are, from a build log.
fn print_build_errors(log: &str) {
    let mut lines = log.lines().peekable();
    let mut shown = 0;
    while let Some(l) = lines.next() {
        if !l.starts_with("error") || shown >= 10 {
            continue;
        }
        println!("    {l}");
        shown += 1;
        if let Some(at) = lines.next_if(|n| n.trim_start().starts_with("--> ")) {
            println!("    {at}");
        }
    }
}

/// A test executable from one of cargo's JSON messages, with its tests.
fn test_binary(root: &Path, msg: &str) -> Option<Binary> {
    let v = json::parse(msg).ok()?;
    if v.get("reason")?.as_str()? != "compiler-artifact"
        || v.at(&["profile", "test"]) != Some(&json::Value::Bool(true))
    {
        return None;
    }
    let exe = PathBuf::from(v.get("executable")?.as_str()?);
    let src = Path::new(v.at(&["target", "src_path"])?.as_str()?);
    let label = src.strip_prefix(root).unwrap_or(src).display().to_string();
    let dir = Path::new(v.get("manifest_path")?.as_str()?).parent()?;
    let listed = Command::new(&exe)
        .args(["--list", "--format", "terse"])
        .current_dir(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| tally::listed_tests(&String::from_utf8_lossy(&o.stdout)));
    Some(Binary {
        label,
        file: exe.file_name()?.to_string_lossy().into_owned(),
        tests: listed,
    })
}

/// `cargo test --workspace --no-fail-fast`, every test counted.
fn cargo_tests(root: &Path, t: &mut Tally) {
    let (bins, built) = build_tests(root, t);
    const LOG: &str = "cargo-test.log";
    let skip_log = root.join("target/stockade-skipped.log");
    let _ = std::fs::remove_file(&skip_log);
    let step = Step::start("cargo test --workspace");
    let ok = logs::run_to(
        LOG,
        false,
        cargo()
            .current_dir(root)
            .env("STOCKADE_SKIP_LOG", &skip_log)
            .args(["test", "--workspace", "--no-fail-fast"])
            .args(["--", "--test-threads", "4"]),
    )
    .unwrap_or(false);
    let skips = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let (failed0, n0, names0) = (t.failed, t.passed + t.failed + t.skipped, t.failures.len());
    let blocks = tally::cargo_tests(&bins, &logs::read(LOG), &skips, t);
    let failed = t.failed - failed0;
    let n = t.passed + t.failed + t.skipped - n0;
    if failed == 0 {
        step.end(ok, &format!("{n} tests"), &logs::shown(LOG));
    } else {
        step.end(
            false,
            &format!("{failed} of {n} tests failed"),
            &logs::shown(LOG),
        );
    }
    if !ok && failed == 0 && built {
        t.fail("cargo test: failed with no failed test (see its log)".into());
    }
    print_blocks(&blocks);
    if failed > 0 {
        println!();
        for f in &t.failures[names0..] {
            println!("    {f}");
        }
    }
}

/// The failed tests' own output, without backtraces or trailing blank
/// lines, each block cut at FAILURE_LINES lines.
fn print_blocks(lines: &[String]) {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    for l in lines {
        if l.starts_with("---- ") || blocks.is_empty() {
            blocks.push(Vec::new());
        }
        blocks.last_mut().into_iter().for_each(|b| b.push(l));
    }
    for mut b in blocks {
        if let Some(i) = b.iter().position(|l| *l == "stack backtrace:") {
            b.truncate(i);
            b.push("[backtrace in the log]");
        }
        while b.last().is_some_and(|l| l.trim().is_empty()) {
            b.pop();
        }
        let cut = b.len().saturating_sub(FAILURE_LINES);
        for l in &b[..b.len() - cut] {
            println!("    {l}");
        }
        if cut > 0 {
            println!("    [{cut} more lines in the log]");
        }
    }
}

/// bubblewrap's own tests (step 3), each counted into `t` (one step line
/// per script and user, then the counts); the table goes to its log.
fn bwrap_suite(t: &mut Tally) {
    let (p0, f0, s0) = (t.passed, t.failed, t.skipped);
    crate::bwrap_test::into_tally(t);
    let (p, f, s) = (t.passed - p0, t.failed - f0, t.skipped - s0);
    println!(
        "==> bubblewrap's test suite under stockade, judged against the real bwrap: {p} passed, {f} failed, {s} skipped (table: {})",
        logs::shown(crate::bwrap_test::TABLE_LOG)
    );
}

/// A sub-suite that prints `<TAG> PASS|FAIL|SKIPPED` lines: `cargo xtask
/// <task>`.
fn suite(root: &Path, t: &mut Tally, task: &str, tag: &str, extra_log: Option<&str>) {
    let log = format!("{task}.log");
    let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask"));
    let step = Step::start(&format!("cargo xtask {task}"));
    let ok =
        logs::run_to(&log, false, Command::new(&me).current_dir(root).arg(task)).unwrap_or(false);
    let (failed0, n0) = (t.failed, t.passed + t.failed + t.skipped);
    tally::tagged(tag, ok, &logs::read(&log), t);
    let n = t.passed + t.failed + t.skipped - n0;
    let mut shown = logs::shown(&log);
    if let Some(x) = extra_log {
        shown = format!("{shown} (and {})", logs::shown(x));
    }
    step.end(t.failed == failed0, &format!("{n} tests"), &shown);
}

/// `cargo xtask wheel`, before the cargo tests: `tests/python_wheel.rs`
/// installs the wheel it writes (and skips without it), so the static
/// binary is built once per run.
fn wheel_step(t: &mut Tally) {
    const LOG: &str = "wheel.log";
    let step = Step::start("cargo xtask wheel");
    let ok = match std::env::current_exe() {
        Ok(me) => logs::run_to(LOG, false, Command::new(me).arg("wheel")).unwrap_or(false),
        Err(e) => {
            logs::note(LOG, &format!("cannot find the xtask binary: {e}"));
            false
        }
    };
    step.end(ok, "", &logs::shown(LOG));
    if ok {
        t.pass();
    } else {
        t.fail("cargo xtask wheel".into());
    }
}

/// The shipped static binary on this host, as root and as uid 65534: the
/// cargo tests run the debug build, and the VM and Docker suites run the
/// static one where some of the host's layers are absent (a static musl
/// build once crashed on every root run here, where the kernel's audit
/// socket can be read). Each run is a test.
fn static_smoke(root: &Path, t: &mut Tally) {
    let step = logs::Step::start("static binary on this host");
    let log = "static-smoke.log";
    let _ = logs::fresh(log);
    let bin = match crate::binaries::build_static(root) {
        Ok(b) => b,
        Err(e) => {
            t.fail(format!("static binary: {e}"));
            step.end(false, "not built", "");
            return;
        }
    };
    // Where uid 65534 can run it (the checkout may be under a 0700 home).
    let dir = PathBuf::from(format!(
        "/var/tmp/stockade-static-smoke-{}",
        std::process::id()
    ));
    let copy = dir.join("stockade");
    let staged = std::fs::create_dir_all(&dir)
        .and_then(|_| {
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        })
        .and_then(|_| std::fs::copy(&bin, &copy).map(|_| ()));
    if let Err(e) = staged {
        t.fail(format!("static binary: staging in {}: {e}", dir.display()));
        step.end(false, "not staged", "");
        return;
    }
    let runs: [(&str, &[&str], &str); 2] = [
        ("run -- true", &["run", "--", "true"], ""),
        (
            "run --profile python",
            &[
                "run",
                "--profile",
                "python",
                "--",
                "python3",
                "-c",
                "print(6 * 7)",
            ],
            "42\n",
        ),
    ];
    let whos: &[&str] = match is_root() {
        true => &["root", "nobody"],
        false => &["user"],
    };
    let failed0 = t.failed;
    for who in whos {
        for (name, args, want) in &runs {
            let mut c = match *who {
                "nobody" => {
                    let mut c = Command::new("setpriv");
                    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                        .arg(&copy);
                    c
                }
                _ => Command::new(&copy),
            };
            c.args(*args).current_dir("/");
            let out = c.output();
            let label = format!("static binary [{who}] {name}");
            match out {
                Ok(o) if o.status.success() && o.stdout == want.as_bytes() => t.pass(),
                Ok(o) => {
                    logs::note(
                        log,
                        &format!(
                            "{label}: {}\n{}",
                            o.status,
                            String::from_utf8_lossy(&o.stderr)
                        ),
                    );
                    t.fail(format!("{label}: {}", o.status));
                }
                Err(e) => t.fail(format!("{label}: {e}")),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    step.end(
        t.failed == failed0,
        &format!("{} runs", whos.len() * runs.len()),
        &logs::shown(log),
    );
}

/// The release profile's link-time work for the suite's own builds (the
/// static binary the wheel, the VMs and Docker run, and the confinement
/// library): thin LTO over 16 codegen units instead of the shipped
/// binary's fat LTO over one, the same code built in about half the time
/// on two CPUs. `cargo xtask bench` builds what ships, with Cargo.toml's
/// profile.
const SUITE_RELEASE: [(&str, &str); 2] = [
    ("CARGO_PROFILE_RELEASE_LTO", "thin"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
];

pub fn main(args: &[String]) -> i32 {
    let only_cargo = args.iter().any(|a| a == "--cargo-only");
    let root = logs::root();
    // Before any thread: every cargo the suite starts inherits them.
    for (k, v) in SUITE_RELEASE {
        std::env::set_var(k, v);
    }
    prepare(only_cargo);
    let mut t = Tally::default();
    check_step(
        &mut t,
        "cargo fmt --check",
        "fmt.log",
        cargo()
            .current_dir(&root)
            .args(["fmt", "--all", "--", "--check"]),
    );
    check_step(
        &mut t,
        "cargo clippy -D warnings",
        "clippy.log",
        cargo().current_dir(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    );
    if !only_cargo {
        wheel_step(&mut t);
    }
    cargo_tests(&root, &mut t);
    if !only_cargo {
        bwrap_suite(&mut t);
        static_smoke(&root, &mut t);
        suite(
            &root,
            &mut t,
            "vm-test",
            "VMTEST",
            Some(crate::vm::CONSOLE_LOG),
        );
        suite(
            &root,
            &mut t,
            "vm-systemd-test",
            "VMTEST",
            Some(crate::vm_systemd::CONSOLE_LOG),
        );
        suite(&root, &mut t, "docker-test", "DOCKERTEST", None);
    }
    closing(&t);
    i32::from(t.failed > 0)
}

/// The closing lines: skips, where the logs are, failures again, and the
/// summary line last.
fn closing(t: &Tally) {
    if !t.skips.is_empty() {
        println!("\nSkipped:");
        for s in &t.skips {
            println!("  {s}");
        }
    }
    println!("\nLogs: {}/", logs::DIR);
    if !t.failures.is_empty() {
        println!("Failed:");
        for f in &t.failures {
            println!("  {f}");
        }
    }
    println!("{}", t.line());
}
