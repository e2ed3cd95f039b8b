//! The cargo tests' binaries, run by the suite itself rather than one
//! `cargo test` after the other: two at a time, most of them, since a test
//! binary spends most of its time waiting on its jails (deadlines, sleeps
//! in payloads, a server's answer) rather than on the CPUs; then, one at a
//! time and with nothing beside them, the binaries that change what every
//! jail on the host sees ([`ALONE`]). Each binary's output goes into one
//! log in the form `cargo test` gives it (a `Running` line, its output, and
//! cargo's line for a binary that did not exit successfully), which
//! `tally::cargo_tests` reads.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// Test binaries that change what every jail on the host sees, run alone:
/// the kernel's audit setting (tests/denials.rs sets it per test), the pid
/// space (tests/fallback_tree.rs floods it with orphans) and the host's
/// jails, mounts and cgroups by the thousand (tests/leftovers.rs).
pub const ALONE: [&str; 3] = [
    "tests/denials.rs",
    "tests/fallback_tree.rs",
    "tests/leftovers.rs",
];

/// How many binaries run at once outside [`ALONE`].
pub const LANES: usize = 2;

/// The binaries that took longest (seconds, on a quiet 2-core host),
/// started first so that the two lanes end together. Only an order: a
/// binary not named here counts as short, and a stale entry costs balance,
/// never a test.
const LONG: [(&str, u32); 10] = [
    ("tests/overlay.rs", 47),
    ("tests/cgroup_v1.rs", 38),
    ("tests/python_eval.rs", 36),
    ("tests/launchers.rs", 27),
    ("tests/lifecycle.rs", 23),
    ("tests/outcome.rs", 17),
    ("tests/egress_secrets.rs", 17),
    ("tests/fallback_fs.rs", 14),
    ("tests/learn.rs", 10),
    ("tests/egress.rs", 8),
];

/// One test binary to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// As cargo names it: `tests/fallback.rs`, `src/lib.rs`.
    pub label: String,
    pub exe: PathBuf,
    /// Its package's directory, where cargo runs it.
    pub dir: PathBuf,
}

/// Runs `jobs` (LANES at a time, then the ALONE ones one by one) with
/// `args` and `env`, appending each one's output to `log` as it ends;
/// whether every binary exited successfully.
pub fn run(
    jobs: Vec<Job>,
    args: &[&str],
    env: &[(String, String)],
    log: &mut std::fs::File,
) -> bool {
    let (alone, mut shared): (Vec<Job>, Vec<Job>) = jobs
        .into_iter()
        .partition(|j| ALONE.contains(&j.label.as_str()));
    shared.sort_by_key(|j| std::cmp::Reverse(expected(&j.label)));
    let queue = Arc::new(Mutex::new(VecDeque::from(shared)));
    let (tx, rx) = std::sync::mpsc::channel::<(String, bool)>();
    for _ in 0..LANES {
        let (queue, tx) = (queue.clone(), tx.clone());
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env = env.to_vec();
        std::thread::spawn(move || loop {
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            let Some(job) = next else { break };
            if tx.send(one(&job, &args, &env)).is_err() {
                break;
            }
        });
    }
    drop(tx);
    let mut all_ok = true;
    let mut write = |(text, ok): (String, bool)| {
        all_ok &= ok;
        let _ = log.write_all(text.as_bytes());
    };
    // Each written as it ends, until every lane has ended (its sender gone).
    rx.into_iter().for_each(&mut write);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for job in &alone {
        write(one(job, &args, env));
    }
    all_ok
}

fn expected(label: &str) -> u32 {
    LONG.iter()
        .find(|(l, _)| *l == label)
        .map_or(0, |(_, s)| *s)
}

/// Runs one binary; its section of the log, and whether it succeeded.
fn one(job: &Job, args: &[String], env: &[(String, String)]) -> (String, bool) {
    let mut text = format!("     Running {} ({})\n", job.label, job.exe.display());
    let (r, w) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            text.push_str(&failed(job, &format!("could not make a pipe: {e}")));
            return (text, false);
        }
    };
    let spawned = w.try_clone().and_then(|w2| {
        Command::new(&job.exe)
            .args(args)
            .current_dir(&job.dir)
            .env("CARGO_MANIFEST_DIR", &job.dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(w)
            .stderr(w2)
            .spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            text.push_str(&failed(job, &format!("could not start: {e}")));
            return (text, false);
        }
    };
    let mut output = String::new();
    let mut r = r;
    let _ = std::io::Read::read_to_string(&mut r, &mut output);
    text.push_str(&output);
    match child.wait() {
        Ok(st) if st.success() => (text, true),
        Ok(st) => {
            let why = match (
                st.code(),
                std::os::unix::process::ExitStatusExt::signal(&st),
            ) {
                (Some(c), _) => format!("exit status: {c}"),
                (None, Some(s)) => format!("signal: {s}"),
                (None, None) => format!("{st}"),
            };
            text.push_str(&failed(job, &why));
            (text, false)
        }
        Err(e) => {
            text.push_str(&failed(job, &format!("could not wait: {e}")));
            (text, false)
        }
    }
}

/// cargo's words for a test binary that did not exit successfully, which
/// `tally::exit_error` reads.
fn failed(job: &Job, why: &str) -> String {
    format!(
        "error: test failed\n\nCaused by:\n  process didn't exit successfully: `{}` ({why})\n",
        job.exe.display()
    )
}
