//! The sidecar pattern under Docker Compose (issue 14 point 6): two images
//! built from local files only (no registry), the sidecar `FROM scratch`
//! with the static stockade and, for its payloads, Debian's python3.11 and
//! busybox (docker.rs's base layer); the app `FROM scratch` with the same
//! python3.11 and the Python client of clients/python. tests/docker/
//! compose.yaml runs `stockade serve` in one and tests/docker/
//! compose_app.py in the other, the two sharing the socket through a
//! volume; the app's `key=value` lines are checked here, then the sidecar
//! is stopped (SIGTERM: the drain) and must exit 0.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::docker::{self, Summary};

/// The images (built here, never pulled).
const SIDECAR: &str = "stockade-compose-sidecar:latest";
const APP: &str = "stockade-compose-app:latest";
/// The longest the app may take, compose's start-up included.
const DEADLINE_SECS: &str = "240";

pub(crate) const CHECKS: &[&str] = &[
    "docker/compose: sidecar and app images build from local files",
    "docker/compose: the app reaches the sidecar through the shared socket (0660, the app's group)",
    "docker/compose: an evaluator run scores, its stderr free of stockade's warnings",
    "docker/compose: each run is confined and the outcome says how",
    "docker/compose: files, streaming and concurrent runs",
    "docker/compose: errors are typed exceptions",
    "docker/compose: SIGTERM drains the sidecar, which exits 0",
];

pub(crate) fn skip_all(s: &mut Summary, why: &str) {
    for n in CHECKS {
        s.skip(n, why);
    }
}

/// Build the images (in `dir`/compose, from `dir`/ctx/base and `bin`), run
/// the pattern, report each check.
pub(crate) fn run(s: &mut Summary, root: &Path, dir: &Path, bin: &Path) {
    match docker::output(
        Command::new("docker-compose").arg("version"),
        "docker-compose",
    ) {
        Ok(o) if o.status.success() => {}
        _ => {
            return skip_all(
                s,
                "docker-compose is not installed (apt-get install docker-compose)",
            )
        }
    }
    if !s.check(CHECKS[0], build_images(root, dir, bin)) {
        for n in &CHECKS[1..] {
            s.fail(n, "no images");
        }
        return;
    }
    let r = run_pattern(root);
    if r.kv.get("done").map(String::as_str) != Some("1") {
        for n in &CHECKS[1..6] {
            s.fail(n, &format!("the app did not finish\n{}", r.text));
        }
    } else {
        judge(s, &r.kv, &r.text);
    }
    s.check(
        CHECKS[6],
        match (&r.stopped, r.exit.as_str()) {
            (Ok(st), "0") if st.success() => Ok(()),
            _ => Err(format!(
                "docker-compose stop: {:?}; sidecar exit code {:?}\n--- sidecar log\n{}",
                r.stopped, r.exit, r.logs
            )),
        },
    );
}

/// What one run of the pattern showed.
struct Ran {
    /// The app's `key=value` lines.
    kv: BTreeMap<String, String>,
    /// Everything, for a failure's report.
    text: String,
    /// `docker-compose stop stockade` (SIGTERM, then 20 s).
    stopped: Result<std::process::ExitStatus, String>,
    /// The sidecar's exit code after it.
    exit: String,
    logs: String,
}

/// `docker-compose run app` (which starts the sidecar), then stop the
/// sidecar, read its log and exit code, and take everything down.
fn run_pattern(root: &Path) -> Ran {
    let project = format!("stockade-compose-{}", std::process::id());
    let file = root.join("tests/docker/compose.yaml");
    let compose = |args: &[&str]| {
        let mut c = Command::new("docker-compose");
        c.arg("-p").arg(&project).arg("-f").arg(&file).args(args);
        c
    };
    let ran = docker::output(
        Command::new("timeout")
            .arg(DEADLINE_SECS)
            .arg("docker-compose")
            .arg("-p")
            .arg(&project)
            .arg("-f")
            .arg(&file)
            .args(["run", "--rm", "-T", "app"]),
        "docker-compose run app",
    );
    let sidecar = docker::output(&mut compose(&["ps", "-q", "stockade"]), "docker-compose ps")
        .map(|o| docker::first_line(&o.stdout))
        .unwrap_or_default();
    let stopped =
        docker::output(&mut compose(&["stop", "-t", "20", "stockade"]), "stop").map(|o| o.status);
    let logs = docker::output(&mut compose(&["logs", "--no-color", "stockade"]), "logs")
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let exit = docker::output(
        Command::new("docker").args(["inspect", "-f", "{{.State.ExitCode}}", &sidecar]),
        "docker inspect",
    )
    .map(|o| docker::first_line(&o.stdout))
    .unwrap_or_default();
    let _ = docker::output(&mut compose(&["down", "-v", "--remove-orphans"]), "down");
    let (kv, text) = match ran {
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            let text = format!(
                "docker-compose run app: {}\n--- app stdout\n{out}--- app stderr\n{}--- sidecar log\n{logs}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            (key_values(&out), text)
        }
        Err(e) => (BTreeMap::new(), e),
    };
    Ran {
        kv,
        text,
        stopped,
        exit,
        logs,
    }
}

fn key_values(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One check per group of the app's lines.
fn judge(s: &mut Summary, kv: &BTreeMap<String, String>, text: &str) {
    let get = |k: &str| kv.get(k).map(String::as_str).unwrap_or("(missing)");
    let expect = |pairs: &[(&str, &str)]| -> Result<(), String> {
        let bad: Vec<String> = pairs
            .iter()
            .filter(|(k, v)| get(k) != *v)
            .map(|(k, v)| format!("{k}={} (want {v})", get(k)))
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("{}\n{text}", bad.join(", ")))
        }
    };
    show(kv);
    s.check(
        CHECKS[1],
        expect(&[
            ("socket_mode", "0o660"),
            ("socket_gid", "10001"),
            ("app_ids", "10001:10001"),
        ]),
    );
    let scored = expect(&[("eval_status", "exited/0"), ("eval_stderr", "\"\"")]).and_then(|()| {
        if get("eval_stdout").starts_with("{\"score\": ") {
            Ok(())
        } else {
            Err(format!("eval_stdout={}\n{text}", get("eval_stdout")))
        }
    });
    s.check(CHECKS[2], scored);
    // Docker's default seccomp profile refuses user namespaces: the
    // fallback, said in the layers and in the outcome's warnings.
    let confined = expect(&[
        ("layer_user_namespace", "unavailable"),
        ("layer_landlock", "applied"),
        ("layer_seccomp", "applied"),
        ("layer_process_tree", "applied"),
        ("hostile_status", "exited/0"),
        ("hostile_write_usr", "refused"),
        ("hostile_tcp", "refused"),
        ("hostile_sock_write", "refused"),
        ("hostile_workdir_write", "allowed"),
    ])
    .and_then(|()| {
        if get("warnings").contains("user namespaces refused") {
            Ok(())
        } else {
            Err(format!("warnings={}\n{text}", get("warnings")))
        }
    });
    s.check(CHECKS[3], confined);
    let chunks = get("stream_chunks");
    let streamed = expect(&[
        ("files_stdout", "FROM A FILE"),
        ("stream_last", "exited/0"),
        ("parallel_ok", "8/8"),
    ])
    .and_then(|()| {
        if ["stdout:one", "stderr:two", "stdout:three"]
            .iter()
            .all(|c| chunks.contains(c))
        {
            Ok(())
        } else {
            Err(format!("stream_chunks={chunks}\n{text}"))
        }
    });
    s.check(CHECKS[4], streamed);
    s.check(
        CHECKS[5],
        expect(&[
            ("bad_request", "BadRequest:files[\"../escape\"]"),
            ("unknown_profile", "UnknownProfile"),
        ]),
    );
}

/// What the app saw, on one line.
fn show(kv: &BTreeMap<String, String>) {
    let get = |k: &str| kv.get(k).map(String::as_str).unwrap_or("(missing)");
    println!(
        "    compose: socket {} gid {}, app {}, eval {} {}, layers user_namespace={} landlock={} seccomp={}, warnings {}",
        get("socket_mode"),
        get("socket_gid"),
        get("app_ids"),
        get("eval_status"),
        get("eval_stdout"),
        get("layer_user_namespace"),
        get("layer_landlock"),
        get("layer_seccomp"),
        get("warnings")
    );
}

/// compose/: base/ (docker.rs's), sidecar/ (the binary, /tmp, the workdir
/// root, the socket's directory), app/ (the app and the client package),
/// one Dockerfile each.
fn build_images(root: &Path, dir: &Path, bin: &Path) -> Result<(), String> {
    let base = dir.join("ctx/base");
    docker::build_base(&base)?;
    let ctx = dir.join("compose");
    let _ = std::fs::remove_dir_all(&ctx);
    docker::mkdir_mode(&ctx, 0o755)?;
    let st = Command::new("cp")
        .arg("-a")
        .arg(&base)
        .arg(ctx.join("base"))
        .status()
        .map_err(|e| format!("cp: {e}"))?;
    if !st.success() {
        return Err(format!("cp -a {}: {st}", base.display()));
    }
    let sidecar = ctx.join("sidecar");
    docker::copy_file(bin, &sidecar.join("stockade"), 0o755)?;
    docker::mkdir_mode(&sidecar.join("tmp"), 0o1777)?;
    docker::mkdir_mode(&sidecar.join("var/lib/stockade"), 0o755)?;
    docker::mkdir_mode(&sidecar.join("sock"), 0o755)?;
    let app = ctx.join("app/app");
    docker::copy_file(
        &root.join("tests/docker/compose_app.py"),
        &app.join("app.py"),
        0o644,
    )?;
    // The whole package, as `pip install ./clients/python` would put it.
    let pkg = root.join("clients/python/stockade");
    let files = std::fs::read_dir(&pkg).map_err(|e| format!("{}: {e}", pkg.display()))?;
    for f in files.flatten() {
        let name = f.file_name();
        if std::path::Path::new(&name).extension() == Some("py".as_ref()) {
            docker::copy_file(&f.path(), &app.join("stockade").join(&name), 0o644)?;
        }
    }
    write(
        &ctx.join("Dockerfile.sidecar"),
        "FROM scratch\nCOPY base/ /\nCOPY sidecar/ /\nENV PATH=/usr/bin:/bin\nENTRYPOINT [\"/stockade\"]\nCMD [\"serve\"]\n",
    )?;
    write(
        &ctx.join("Dockerfile.app"),
        "FROM scratch\nCOPY base/ /\nCOPY app/ /\nENV PATH=/usr/bin:/bin\nCMD [\"/usr/bin/python3\", \"/app/app.py\"]\n",
    )?;
    docker::docker_build_file(&ctx, "Dockerfile.sidecar", SIDECAR)?;
    docker::docker_build_file(&ctx, "Dockerfile.app", APP)
}

fn write(p: &Path, text: &str) -> Result<(), String> {
    std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))
}
