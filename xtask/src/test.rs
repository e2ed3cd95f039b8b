//! `cargo xtask test`: every test the project has, in one command, one line
//! per step on the terminal, and one closing line `N passed, N failed, N
//! skipped` (the last line printed; CI reads it).
//!
//! 1. `cargo fmt --check`;
//! 2. `cargo xtask wheel` (the Python package's wheel with the static
//!    binary, which `tests/python_wheel.rs` installs); then, once the
//!    tests are built (step 3), in the background (see `VmSuites`), with
//!    that static binary, `cargo xtask vm-systemd-test` (the systemd rung
//!    against a real `systemd --user`,
//!    inside a small VM with systemd as PID 1) and `cargo xtask vm-test`
//!    (cgroup v2, then cgroup v1 limits inside a small VM), counted at the
//!    end;
//! 3. `cargo test --workspace --no-fail-fast` (the integration tests start
//!    real jails as root and as uid 65534 themselves), counted against the
//!    list of tests of every test binary; built with clippy's lints
//!    (`clippy_driver`): a warning of the workspace's fails the clippy
//!    check, as `cargo clippy --all-targets -- -D warnings` would;
//!    (the Python client's tests run inside `tests/serve_python.rs`, against
//!    a real server);
//! 4. bubblewrap's own test suite against `target/debug/stockade`
//!    (`cargo xtask bwrap-test`'s, as root and as uid 65534), each test
//!    counted against the real bwrap 0.12 on the same host (see
//!    `bwrap_test::verdict`);
//! 5. the static binary (what ships) run on this host as root and as uid
//!    65534 (`static_smoke`);
//! 6. `cargo xtask docker-test` (inside a real Docker engine: the host's
//!    kernel and uid 65534, so after the host's other jails, never beside
//!    them: RLIMIT_NPROC counts per uid across the host);
//! 7. the VM suites' counts, once they are done.
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

/// clippy-driver, which `cargo clippy` itself puts in rustc's place for
/// the workspace's crates: named by RUSTC_WORKSPACE_WRAPPER (part of
/// cargo's fingerprint) for every cargo the suite starts, the test build
/// runs clippy's lints while it compiles, so the workspace is compiled
/// once, not once for clippy's check and again for the tests.
fn clippy_driver() -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let driver = Path::new(&sysroot).join("bin/clippy-driver");
    driver.is_file().then_some(driver)
}

/// What the test build gave: the test binaries, whether it succeeded, and
/// the workspace's own warnings and errors (rustc's and clippy's), each once.
struct Built {
    bins: Vec<Binary>,
    ok: bool,
    diagnostics: Vec<Diagnostic>,
}

struct Diagnostic {
    error: bool,
    rendered: String,
}

/// Builds the test targets (with clippy's lints where `linted`) and lists
/// each test binary's tests. A build that fails is one failure; what did
/// build is still returned.
fn build_tests(root: &Path, t: &mut Tally, linted: bool) -> Built {
    const LOG: &str = "cargo-build.log";
    let label = match linted {
        true => "cargo test --no-run (build the tests, with clippy's lints)",
        false => "cargo test --no-run (build the tests)",
    };
    let step = Step::start(label);
    let ok = logs::run_to(
        LOG,
        false,
        cargo().current_dir(root).args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json",
        ]),
    )
    .unwrap_or(false);
    let log = logs::read(LOG);
    let messages: Vec<json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| json::parse(l).ok())
        .collect();
    let mut bins: Vec<Binary> = messages
        .iter()
        .filter_map(|v| test_binary(root, v))
        .collect();
    bins.sort_by(|a, b| a.label.cmp(&b.label));
    let mut diagnostics: Vec<Diagnostic> = Vec::new();
    for d in messages.iter().filter_map(|v| diagnostic(root, v)) {
        if !diagnostics.iter().any(|x| x.rendered == d.rendered) {
            diagnostics.push(d);
        }
    }
    let what = format!("{} test binaries", bins.len());
    step.end(ok, &what, &logs::shown(LOG));
    if !ok {
        t.fail("cargo test --no-run: the test targets did not build".into());
        print_build_errors(&diagnostics);
    }
    Built {
        bins,
        ok,
        diagnostics,
    }
}

/// A warning or error of one of the workspace's crates, from one of
/// cargo's JSON messages (a dependency's are capped by cargo and never
/// reach here but as `--cap-lints` allows).
fn diagnostic(root: &Path, v: &json::Value) -> Option<Diagnostic> {
    if v.get("reason")?.as_str()? != "compiler-message" {
        return None;
    }
    let manifest = Path::new(v.get("manifest_path")?.as_str()?);
    if !manifest.starts_with(root) {
        return None;
    }
    let level = v.at(&["message", "level"])?.as_str()?;
    let error = level == "error";
    if !error && level != "warning" {
        return None;
    }
    let rendered = v.at(&["message", "rendered"])?.as_str()?.to_string();
    Some(Diagnostic { error, rendered })
}

/// The clippy check: the workspace's warnings from the linted test build,
/// as `cargo clippy -- -D warnings` would refuse them, written to
/// `clippy.log`; one passed or one failed.
fn clippy_verdict(t: &mut Tally, built: &Built, linted: bool) {
    const LOG: &str = "clippy.log";
    let warnings: Vec<&Diagnostic> = built.diagnostics.iter().filter(|d| !d.error).collect();
    let mut text: String = warnings.iter().map(|d| d.rendered.as_str()).collect();
    let why = if !linted {
        Some("clippy-driver not found (rustup component add clippy)".to_string())
    } else if !built.ok {
        Some("the build failed before every crate was linted".to_string())
    } else if !warnings.is_empty() {
        Some(format!("{} warnings", warnings.len()))
    } else {
        None
    };
    if let Some(w) = &why {
        text.push_str(w);
        text.push('\n');
    }
    let _ = logs::fresh(LOG).and_then(|mut f| {
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| e.to_string())
    });
    let what = why.clone().unwrap_or_else(|| "no warnings".into());
    Step::ran(
        "clippy -D warnings (in the test build)",
        why.is_none(),
        &what,
        &logs::shown(LOG),
        0,
    );
    match why {
        None => t.pass(),
        Some(w) => {
            t.fail(format!("clippy -D warnings: {w}"));
            for d in warnings.iter().take(5) {
                for l in d.rendered.lines().take(FAILURE_LINES / 4) {
                    println!("    {l}");
                }
            }
        }
    }
}

/// The first compiler errors and where they are.
fn print_build_errors(diagnostics: &[Diagnostic]) {
    for d in diagnostics.iter().filter(|d| d.error).take(10) {
        let mut lines = d.rendered.lines();
        if let Some(l) = lines.next() {
            println!("    {l}");
        }
        if let Some(at) = lines.find(|n| n.trim_start().starts_with("--> ")) {
            println!("    {at}");
        }
    }
}

/// A test executable from one of cargo's JSON messages, with its tests.
fn test_binary(root: &Path, v: &json::Value) -> Option<Binary> {
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

/// `cargo test --workspace --no-fail-fast`, every test counted. The
/// binaries run one after the other: many tests run jails as uid 65534
/// under a pids limit that RLIMIT_NPROC holds (counted over every process
/// of that uid on the host), so binaries side by side would refuse each
/// other's forks.
fn cargo_tests(root: &Path, t: &mut Tally, b: Built) {
    let (bins, built) = (b.bins, b.ok);
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
    let step = Step::start(&format!("cargo xtask {task}"));
    let ok = run_suite(root, task, &[], false);
    let (n, all_passed) = tally_suite(t, task, tag, ok);
    step.end(
        all_passed,
        &format!("{n} tests"),
        &suite_logs(task, extra_log),
    );
}

/// Runs `cargo xtask <task> <args>` (at nice VM_NICE when `niced`), its output
/// into `<task>.log`; whether it succeeded.
fn run_suite(root: &Path, task: &str, args: &[String], niced: bool) -> bool {
    let log = format!("{task}.log");
    let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xtask"));
    let mut cmd = match niced {
        true => {
            let mut c = Command::new("nice");
            c.args(["-n", VM_NICE]).arg(&me);
            c
        }
        false => Command::new(&me),
    };
    cmd.current_dir(root).arg(task).args(args);
    logs::run_to(&log, false, &mut cmd).unwrap_or_else(|e| {
        logs::note(&log, &e);
        false
    })
}

/// Counts what `<task>.log` says into `t`; how many tests it held, and
/// whether none failed.
fn tally_suite(t: &mut Tally, task: &str, tag: &str, ok: bool) -> (u64, bool) {
    let (failed0, n0) = (t.failed, t.passed + t.failed + t.skipped);
    tally::tagged(tag, ok, &logs::read(&format!("{task}.log")), t);
    (t.passed + t.failed + t.skipped - n0, t.failed == failed0)
}

fn suite_logs(task: &str, extra_log: Option<&str>) -> String {
    let shown = logs::shown(&format!("{task}.log"));
    match extra_log {
        Some(x) => format!("{shown} (and {})", logs::shown(x)),
        None => shown,
    }
}

/// A VM suite: (task, the tag of its lines, its console's log).
type VmSuite = (&'static str, &'static str, &'static str);

/// The VM suite that runs beside the cargo tests: the cgroup v2 and v1
/// boots (about 140 s alone).
const VM_BESIDE_TESTS: &[VmSuite] = &[("vm-test", "VMTEST", crate::vm::CONSOLE_LOG)];

/// The one that runs after them, beside the light steps that follow
/// (bubblewrap's suite, the static binary, Docker): the systemd VM, whose
/// guest once stopped making progress for good (both vCPUs busy, no
/// console line for 15 minutes, not even its tests' own `timeout`s
/// firing) when it booted beside the cargo tests; alone, and beside three
/// CPU hogs, it passed. About 35 s alone, building its root file system
/// first on a fresh machine (mmdebstrap).
const VM_AFTER_TESTS: &[VmSuite] = &[("vm-systemd-test", "VMTEST", crate::vm_systemd::CONSOLE_LOG)];

/// The VM suites' niceness beside the host's steps: weight 110 against a
/// host thread's 1024, so a host test that wants a CPU gets about 90 % of
/// it, and a VM is not stopped outright while the host is busy (at nice 19
/// a VM got about 1.5 %: on a loaded host its clock ran on while it did
/// not, and a deadline of stockade's inside it ran out).
const VM_NICE: &str = "10";

/// Each VM's time limit per boot when it runs beside the host's steps
/// (alone: 240 s for vm-test's, 300 s for vm-systemd-test's). At nice 10 a
/// VM gets only the CPU the host's tests leave, so its boots take longer
/// than alone; the limit only stops a hung VM, and no test inside a VM
/// depends on it.
const VM_OVERLAP_TIMEOUT_S: u64 = 900;

/// The VM suites, running one after the other in a thread while the
/// host's steps go on: each VM has its own kernel, so no uid, cgroup or
/// RLIMIT_NPROC count is shared with the host's jails. They run at nice
/// VM_NICE, so that a test on the host with a deadline (a payload's 3 s
/// timeout) gets the CPU first; the VMs take what the host's tests leave
/// (they mostly wait on jails). Each suite's (whether it succeeded, its
/// seconds).
struct VmSuites(
    &'static [VmSuite],
    std::thread::JoinHandle<Vec<(bool, u64)>>,
);

impl VmSuites {
    /// Starts them with the static binary the wheel step built (`None`: each
    /// suite builds its own).
    fn start(root: &Path, stockade: Option<PathBuf>, suites: &'static [VmSuite]) -> VmSuites {
        let mut args = vec!["--timeout".to_string(), VM_OVERLAP_TIMEOUT_S.to_string()];
        if let Some(s) = stockade {
            args.push("--stockade".into());
            args.push(s.display().to_string());
        }
        let root = root.to_path_buf();
        println!(
            "==> {} started in the background (nice {VM_NICE}, counted at the end)",
            suites
                .iter()
                .map(|(task, _, _)| format!("cargo xtask {task}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        VmSuites(
            suites,
            std::thread::spawn(move || {
                suites
                    .iter()
                    .map(|(task, _, _)| {
                        let t0 = std::time::Instant::now();
                        let ok = run_suite(&root, task, &args, true);
                        (ok, t0.elapsed().as_secs())
                    })
                    .collect()
            }),
        )
    }

    /// Waits for them and counts each into `t`, a step line each.
    fn finish(self, t: &mut Tally) {
        let t0 = std::time::Instant::now();
        let ran = self.1.join().unwrap_or_default();
        let waited = t0.elapsed().as_secs();
        for (i, (task, tag, console)) in self.0.iter().enumerate() {
            let Some(&(ok, secs)) = ran.get(i) else {
                t.fail(format!(
                    "cargo xtask {task}: its thread ended before it ran"
                ));
                continue;
            };
            let (n, all_passed) = tally_suite(t, task, tag, ok);
            Step::ran(
                &format!("cargo xtask {task} (in the background)"),
                all_passed,
                &format!("{n} tests"),
                &suite_logs(task, Some(console)),
                secs,
            );
        }
        println!("    (waited {waited} s for the VM suites after the host's steps)");
    }
}

/// The Python suites' venvs (`clients/python/tests/suite_venv.py`),
/// made in a thread from the start: pip mostly waits on PyPI while the
/// builds use the CPUs, and `tests/python_integrations.rs` then finds
/// them made (its own call of the script only reinstalls the package).
/// Joined before the cargo tests start, so the two never write the venv
/// at once. Its failure is only said: the test makes the venvs again and
/// reports what fails.
struct PythonVenvs(std::thread::JoinHandle<(bool, u64)>);

impl PythonVenvs {
    const LOG: &'static str = "python-venvs.log";

    fn start(root: &Path) -> PythonVenvs {
        let target = crate::binaries::target_dir(root);
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(root.join("clients/python/tests/suite_venv.py"))
            .arg(target.join("tmp/python-integrations/venv"))
            .current_dir(root);
        println!("==> the Python suites' venvs started in the background (clients/python/tests/suite_venv.py)");
        PythonVenvs(std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let ok = logs::run_to(Self::LOG, false, &mut cmd).unwrap_or_else(|e| {
                logs::note(Self::LOG, &e);
                false
            });
            (ok, t0.elapsed().as_secs())
        }))
    }

    fn finish(self) {
        let t0 = std::time::Instant::now();
        let (ok, secs) = self.0.join().unwrap_or((false, 0));
        let what = format!("{secs} s, waited {} s for it", t0.elapsed().as_secs());
        match ok {
            true => println!("==> the Python suites' venvs ... ok ({what})"),
            false => println!(
                "==> the Python suites' venvs ... not made ({what}), log: {}; python_integrations makes them itself",
                logs::shown(Self::LOG)
            ),
        }
    }
}

/// `cargo xtask wheel`, before the cargo tests: `tests/python_wheel.rs`
/// installs the wheel it writes (and skips without it), so the static
/// binary is built once per run.
fn wheel_step(t: &mut Tally) -> bool {
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
    ok
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

/// The release profile for the suite's own static build (the binary the
/// wheel, the VMs and Docker run, and the confinement library): no LTO
/// and opt-level 1 over 16 codegen units instead of the shipped binary's
/// fat LTO at opt-level 3 over one. Measured from a clean target dir on
/// two CPUs: 459 CPU-seconds against 656 for thin LTO at opt-level 3 (the
/// largest single cost of a fresh run); the suites test what it does, not
/// its speed. Not opt-level 0 (190 CPU-seconds): in the emulated systemd
/// VM, beside a busy host, the unoptimised binary's D-Bus helper left
/// systemd's answer past its 15 s deadline (batch_16_runs_leave_nothing
/// failed once). `cargo xtask bench` builds what ships, with Cargo.toml's
/// profile.
const SUITE_RELEASE: [(&str, &str); 3] = [
    ("CARGO_PROFILE_RELEASE_LTO", "off"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
    ("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1"),
];

pub fn main(args: &[String]) -> i32 {
    let only_cargo = args.iter().any(|a| a == "--cargo-only");
    let root = logs::root();
    // Before any thread: every cargo the suite starts inherits them.
    for (k, v) in SUITE_RELEASE {
        std::env::set_var(k, v);
    }
    prepare(only_cargo);
    // After prepare (which adds clippy), before any thread.
    let driver = clippy_driver();
    if let Some(d) = &driver {
        std::env::set_var("RUSTC_WORKSPACE_WRAPPER", d);
    }
    let linted = driver.is_some();
    let mut t = Tally::default();
    let venvs = PythonVenvs::start(&root);
    check_step(
        &mut t,
        "cargo fmt --check",
        "fmt.log",
        cargo()
            .current_dir(&root)
            .args(["fmt", "--all", "--", "--check"]),
    );
    let wheel = (!only_cargo).then(|| wheel_step(&mut t));
    let b = build_tests(&root, &mut t, linted);
    clippy_verdict(&mut t, &b, linted);
    // The VM suites run in the background with the static binary the
    // wheel step built: after the tests' build, which takes both CPUs for
    // minutes (a VM at nice 10 beside it crawled, and the systemd VM's
    // answers ran out of time); vm-test beside the cargo tests, the
    // systemd VM after them (VM_AFTER_TESTS).
    let stockade = wheel.map(|built| {
        let stockade = crate::binaries::static_path(&root);
        (built && stockade.is_file()).then_some(stockade)
    });
    let vms = stockade
        .clone()
        .map(|s| VmSuites::start(&root, s, VM_BESIDE_TESTS));
    venvs.finish();
    cargo_tests(&root, &mut t, b);
    if let (Some(vms), Some(stockade)) = (vms, stockade) {
        let late = VmSuites::start(&root, stockade, VM_AFTER_TESTS);
        bwrap_suite(&mut t);
        static_smoke(&root, &mut t);
        // The host's kernel and uid 65534, as the cargo tests: after them.
        suite(&root, &mut t, "docker-test", "DOCKERTEST", None);
        vms.finish(&mut t);
        late.finish(&mut t);
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
