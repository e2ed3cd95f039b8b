//! Shared by the integration tests: start the real stockade binary as root
//! and as an unprivileged user (uid 65534), and record skips.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const NOBODY: u32 = 65534;

/// Who starts stockade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The test process's own user (root in CI).
    Root,
    /// uid/gid 65534, the rootless case.
    Nobody,
}

pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Lanes for running a test's cases side by side: each of root's cases
/// on a lane of its own, every other case on one shared lane, one after
/// the other. A non-root user's jails (uid 65534's, or the caller's) are
/// held to their pids limit by RLIMIT_NPROC, which counts every process of
/// that uid on the host (its user namespaces' too), so two of its cases at
/// once beside the other tests' jails can refuse each other's forks. Root's
/// jails are never counted there: a user namespace's processes are charged
/// to the uid that made it, and the root fallback's run as leased uids.
pub fn lanes<T>(cases: Vec<T>, root: impl Fn(&T) -> bool) -> Vec<Vec<T>> {
    let (mine, others): (Vec<T>, Vec<T>) = cases.into_iter().partition(|c| root(c));
    let mut lanes: Vec<Vec<T>> = mine.into_iter().map(|c| vec![c]).collect();
    if !others.is_empty() {
        lanes.push(others);
    }
    lanes
}

/// The users to test as: both when the suite runs as root, else only the
/// current user (and a SKIPPED line for the other).
pub fn users(test: &str) -> Vec<Who> {
    if is_root() {
        vec![Who::Root, Who::Nobody]
    } else {
        skip(
            test,
            "not running as root: cannot also start stockade as uid 65534 and as root",
        );
        vec![Who::Nobody]
    }
}

/// A copy of the stockade binary that every user can execute (the build
/// directory may sit under a 0700 home).
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        remove_stale_test_dirs();
        let src = PathBuf::from(env!("CARGO_BIN_EXE_stockade"));
        let dir = PathBuf::from(format!("/tmp/stockade-test-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dst = dir.join("stockade");
        copy_executable(&src, &dst);
        dst
    })
}

/// `src` copied to `dst` with mode 0755, the copy written by `cp`, never
/// open for writing in this process: a test process has threads that
/// fork, a child forked while a write fd of the copy is open holds it
/// until its execve, and an execve of the copy meanwhile fails with
/// ETXTBSY. `dst` appears whole (renamed into place).
pub fn copy_executable(src: &Path, dst: &Path) {
    let mut name = dst.file_name().unwrap().to_os_string();
    name.push(".copying");
    let tmp = dst.with_file_name(name);
    match Command::new("cp").arg("--").arg(src).arg(&tmp).status() {
        Ok(st) => assert!(st.success(), "cp {} {}: {st}", src.display(), tmp.display()),
        // SIGCHLD ignored (a caller's `trap '' CHLD`): the kernel reaped
        // cp once it ended; the copy's length says whether it is whole.
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {}
        Err(e) => panic!("cp {} {}: {e}", src.display(), tmp.display()),
    }
    assert_eq!(
        std::fs::metadata(&tmp).unwrap().len(),
        std::fs::metadata(src).unwrap().len(),
        "cp left {} incomplete",
        tmp.display()
    );
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

/// Remove the binary directories of earlier test processes that are gone
/// (a directory is named after its process; a live one is never touched).
fn remove_stale_test_dirs() {
    let Ok(rd) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("stockade-test-bin-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `stockade ARGS…` started as `who`, with a clean environment.
///
/// stockade starts with the default disposition of the signals tests send
/// (through tests/payloads/sig_default.c), however the test run itself was
/// started (a background job ignores SIGINT and SIGQUIT, nohup SIGHUP).
pub fn stockade(who: Who) -> Command {
    stockade_under(&[], who)
}

/// `stockade`, started through `wrappers` (programs of tests/payloads
/// that exec the rest of the command line under a restriction, as in
/// [`wrapped`]), with no subcommand yet.
pub fn stockade_under(wrappers: &[&str], who: Who) -> Command {
    let mut c = host_command(who, c_payload("sig_default"));
    for w in wrappers {
        c.arg(c_payload(w));
    }
    c.arg(binary());
    c
}

/// `c` to start as uid/gid 65534 when `who` is [`Who::Nobody`] and this
/// process is root (else as this process's user).
pub fn start_as(c: &mut Command, who: Who) -> &mut Command {
    if who == Who::Nobody && is_root() {
        c.uid(NOBODY).gid(NOBODY);
    }
    c
}

/// `program` to start on the host as `who`, as stockade is started: a
/// clean environment (PATH and LANG only), in /, stdin from /dev/null.
pub fn host_command(who: Who, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_clear();
    c.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    c.env("LANG", "C.UTF-8");
    c.current_dir("/");
    start_as(&mut c, who);
    c.stdin(Stdio::null());
    c
}

/// Run the shell `script` on the host as this process; panic, with its
/// output, unless it succeeds.
pub fn host_sh_ok(script: &str) {
    let o = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(
        o.status.success(),
        "{script}\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
}

/// Run `stockade run [flags…] -- cmd…` as `who` and collect its output.
pub fn run(who: Who, flags: &[&str], cmd: &[&str]) -> Output {
    let mut c = stockade(who);
    c.arg("run").args(flags).arg("--").args(cmd);
    c.output().expect("start stockade")
}

/// Run a shell snippet inside a default jail.
pub fn sh(who: Who, script: &str) -> Output {
    run(who, &[], &["/bin/sh", "-c", script])
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Panic with everything useful when `o` did not exit with `code`.
pub fn expect_code(o: &Output, code: i32, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{what}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// A fresh directory under /tmp that uid 65534 can enter (mode 0755), removed
/// when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = PathBuf::from(format!(
            "/tmp/stockade-test-{}-{}-{}",
            tag,
            std::process::id(),
            n
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(p)
    }

    /// Make the directory writable by everyone (for writable binds as 65534).
    pub fn world_writable(self) -> Scratch {
        std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        self
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    /// `p` inside it, as a command-line argument.
    pub fn arg(&self, p: &str) -> String {
        self.0.join(p).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The cgroup2 mounts of this mount namespace, read from
/// /proc/self/mountinfo on their own (not through stockade's parser): the
/// mount point and the super options of each.
pub fn cgroup2_mounts() -> Vec<(String, String)> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mi.lines()
        .filter_map(|l| l.split_once(" - "))
        .filter(|(_, b)| b.starts_with("cgroup2 "))
        .filter_map(|(a, b)| Some((a.split(' ').nth(4)?.into(), b.split(' ').nth(2)?.into())))
        .collect()
}

/// Record that `test` was skipped and why: printed now (visible with
/// --nocapture) and appended to the skip log that `cargo xtask test`
/// counts in its summary.
pub fn skip(test: &str, reason: &str) {
    let line = format!("SKIPPED: {test}: {reason}");
    eprintln!("{line}");
    let log = std::env::var_os("STOCKADE_SKIP_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skipped.log"));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Compile a C program from tests/payloads/NAME.c (static, so it needs
/// nothing from the jail), once per test process, into this process's own
/// directory (beside the binary copy), readable by every user; returns the
/// binary's path. Bind it into the jail to run it. No other process writes
/// there, and a built payload is never replaced while a test may bind it.
pub fn c_payload(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/payloads")
        .join(format!("{name}.c"));
    let dir = binary().parent().expect("binary dir").join("payloads");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let st = Command::new("cc")
        .args(["-O1", "-static", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {}", src.display());
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
    built.push((name.to_string(), out.clone()));
    out
}

/// `[WRAPPERS…] stockade run FLAGS -- CMD` as `who`, with a clean
/// environment and stdin from /dev/null. Each wrapper is a program of
/// tests/payloads that execs the rest of the command line under a
/// restriction (`chk_nouserns`: user namespaces refused, as a container
/// runtime's seccomp profile does; `fb_nosysadmin`: no CAP_SYS_ADMIN).
pub fn wrapped(wrappers: &[&str], who: Who, flags: &[&str], cmd: &[&str]) -> Command {
    // sig_default first: see `stockade`.
    let mut argv: Vec<std::ffi::OsString> = std::iter::once("sig_default")
        .chain(wrappers.iter().copied())
        .map(|w| c_payload(w).into_os_string())
        .collect();
    argv.push(binary().into());
    let mut w = Command::new(&argv[0]);
    w.args(&argv[1..])
        .arg("run")
        .args(flags)
        .arg("--")
        .args(cmd);
    w.env_clear();
    w.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    w.current_dir("/");
    w.stdin(Stdio::null());
    start_as(&mut w, who);
    w
}

/// The JSON outcome on the last line of `o`'s stdout (`--report -`).
pub fn last_json(o: &Output) -> serde_json::Value {
    let text = stdout(o);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no JSON report ({e}):\n{text}\n--- stderr\n{}", stderr(o)))
}

/// The whole of `o`'s stdout as the JSON report (`--report -` with
/// nothing else on stdout).
pub fn report(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "report is not JSON ({e})\n--- stdout\n{}\n--- stderr\n{}",
            stdout(o),
            stderr(o)
        )
    })
}

/// `stockade run FLAGS -- CMD` as `who` with `input` on stdin.
pub fn run_stdin(who: Who, flags: &[&str], cmd: &[&str], input: &[u8]) -> Output {
    run_stdin_env(who, flags, cmd, input, &[])
}

/// `run_stdin`, with `env` added to stockade's own environment.
pub fn run_stdin_env(
    who: Who,
    flags: &[&str],
    cmd: &[&str],
    input: &[u8],
    env: &[(&str, &str)],
) -> Output {
    let mut c = stockade(who);
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg("run").args(flags).arg("--").args(cmd);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("start stockade");
    let mut si = child.stdin.take().unwrap();
    let _ = si.write_all(input);
    drop(si);
    child.wait_with_output().unwrap()
}

/// tests/evaluators: the evaluator corpus, its input.json and its
/// expected.json (each evaluator's score).
pub fn evaluators() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/evaluators")
}

/// The corpus's expected scores (by evaluator name) and its input.
pub fn evaluator_cases() -> (serde_json::Value, Vec<u8>) {
    let expected =
        serde_json::from_slice(&std::fs::read(evaluators().join("expected.json")).unwrap())
            .unwrap();
    (
        expected,
        std::fs::read(evaluators().join("input.json")).unwrap(),
    )
}

/// The corpus copied into the new directory `to`, where every user can
/// read it.
pub fn copy_evaluators(to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(evaluators()).unwrap() {
        let e = e.unwrap();
        let f = to.join(e.file_name());
        std::fs::copy(e.path(), &f).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An evaluator's run (`--report -`), which must have exited: its report,
/// and the JSON the evaluator printed. `what` leads the messages.
pub fn evaluator_result(o: &Output, what: &str) -> (serde_json::Value, serde_json::Value) {
    let r = report(o);
    assert_eq!(r["status"], "exited", "{what}: {r}");
    let out = r["stdout"]["data"].as_str().unwrap_or_default();
    let v = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}): {out:?}"));
    (r, v)
}

/// Panic unless `json` (one outcome) validates against
/// src/outcome.schema.json, by Debian's python3-jsonschema (installed by
/// `cargo xtask test`).
pub fn validate_outcome(json: &str) {
    let dir = Scratch::new("schema");
    let f = dir.join("outcome.json");
    std::fs::write(&f, json).unwrap();
    let o = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import json,sys,jsonschema\njsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), format_checker=None)\nprint('valid')")
        .arg(&f)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/outcome.schema.json"))
        .output()
        .expect("run python3");
    assert!(
        o.status.success() && stdout(&o).contains("valid"),
        "outcome does not validate against the schema:\n{json}\n{}",
        stderr(&o)
    );
}

/// `last_json`, validated (`validate_outcome`).
pub fn last_valid_json(o: &Output) -> serde_json::Value {
    let v = last_json(o);
    validate_outcome(stdout(o).lines().last().unwrap_or(""));
    v
}

/// The host's Landlock ABI, from the kernel's own version query
/// (landlock_create_ruleset with LANDLOCK_CREATE_RULESET_VERSION); 0 when
/// it has none.
pub fn landlock_abi() -> i32 {
    let o = Command::new("python3")
        .args([
            "-c",
            "import ctypes; l = ctypes.CDLL(None, use_errno=True); \
             print(max(0, l.syscall(444, None, 0, 1)))",
        ])
        .output()
        .expect("run python3");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}
