//! `cargo xtask bench serve`: a small Python evaluator (JSON on stdin,
//! scored with difflib, JSON out) run bare, by `stockade run`, and through
//! `stockade serve` without and with a warm pool and with a fork server
//! (`--warm-fork`), side by side in one run:
//! p50 / p99 latency (rounds interleaved, one request at a time), then
//! throughput from concurrent clients, then what the load left behind
//! (processes, cgroups, mounts, temp dirs) and the server's RSS.
//!
//! The client is blocking HTTP/1.1 over a `UnixStream`, one connection per
//! request (`Connection: close`), in plain std. The bench only prints;
//! nothing here asserts a timing.

mod client;
mod floor;
mod leaks;
mod server;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{bench, binaries};
use server::Server;

const USAGE: &str = "usage: cargo xtask bench serve [--runs N] [--latency-runs N] [--clients N] [--load WHICH] [--no-build] [--binary PATH]
  --runs N          throughput: runs in all, from --clients clients (default 10000)
  --load WHICH      throughput of these servers only, comma-separated: cold, pool, fork (default all)
  --latency-runs N  latency: rounds, each case once per round, interleaved (default 200)
  --clients N       throughput: concurrent clients (default 32)
  --zygotes N       the fork server's zygotes, each forking in turn (default: one per 2 CPUs)
  --no-build        measure the static binary as it is, without building it
  --binary PATH     measure this stockade binary instead of the static build
The pool row runs when the binary's `serve` accepts --warm (PROFILE=N,
--warm-import MODS), the fork server's when it accepts --warm-fork; else
each says `not available` and why.";

/// The evaluator: reads `{answer, reference}`, prints `{score}`.
pub(crate) const EVALUATOR: &str = "import json, sys, difflib\nd = json.load(sys.stdin)\nr = difflib.SequenceMatcher(None, d['answer'], d['reference']).ratio()\nprint(json.dumps({'score': round(r, 4)}))\n";
/// Its input.
pub(crate) const INPUT: &str = r#"{"answer": "The capital of France is Paris.", "reference": "Paris is the capital of France."}"#;
/// What it prints for [`INPUT`].
const EXPECTED: &str = "\"score\": ";

struct Options {
    runs: usize,
    latency: usize,
    clients: usize,
    build: bool,
    binary: Option<PathBuf>,
    /// Servers whose throughput is measured (`cold`, `pool`, `fork`).
    load: Vec<String>,
    zygotes: usize,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        runs: 10_000,
        latency: 200,
        clients: 32,
        build: true,
        binary: None,
        load: vec!["cold".into(), "pool".into(), "fork".into()],
        zygotes: (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag}: needs a value"))
        };
        match a.as_str() {
            "--runs" => o.runs = positive(&value("--runs")?, "--runs")?,
            "--latency-runs" => o.latency = positive(&value(a)?, a)?,
            "--clients" => o.clients = positive(&value(a)?, a)?,
            "--zygotes" => o.zygotes = positive(&value(a)?, a)?,
            "--no-build" => o.build = false,
            "--load" => {
                o.load = value(a)?.split(',').map(String::from).collect();
                if let Some(bad) = o
                    .load
                    .iter()
                    .find(|w| !["cold", "pool", "fork"].contains(&w.as_str()))
                {
                    return Err(format!("--load: {bad:?}: one of cold, pool, fork"));
                }
            }
            "--binary" => o.binary = Some(PathBuf::from(value(a)?)),
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

pub(crate) fn positive(s: &str, flag: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag}: a positive number, not {s:?}")),
    }
}

pub fn main(args: &[String]) -> i32 {
    bench::main_with(args, USAGE, "bench serve", parse_args, run)
}

/// One latency row: its samples, or why it did not run.
struct Row {
    name: String,
    samples: Vec<Duration>,
    failures: usize,
    skipped: Option<String>,
}

/// One throughput row.
struct Load {
    name: String,
    runs: usize,
    ok: usize,
    /// Refused with 429 (counted among the failed too).
    queue_full: usize,
    first_failure: Option<String>,
    wall: Duration,
    /// CPU time of the server's whole tree during the load (root: its
    /// cpuacct group), ns.
    cpu_ns: Option<u64>,
    /// CPU time of the whole host during the load (/proc/stat), ms.
    host_cpu_ms: Option<f64>,
    /// The server's stages during the load: name, seconds, runs.
    stages: Vec<(String, f64, u64)>,
    leaks: leaks::Report,
}

impl Load {
    /// A row that holds only stages.
    fn stages_only(name: &str, stages: Vec<(String, f64, u64)>) -> Load {
        Load {
            name: name.into(),
            runs: 0,
            ok: 0,
            queue_full: 0,
            first_failure: None,
            wall: Duration::ZERO,
            cpu_ns: None,
            host_cpu_ms: None,
            stages,
            leaks: leaks::Report::default(),
        }
    }

    /// Host CPU per run, ms.
    fn host_ms(&self) -> Option<f64> {
        self.host_cpu_ms
            .filter(|_| self.runs > 0)
            .map(|ms| ms / self.runs as f64)
    }
}

fn stockade_binary(opts: &Options, root: &Path) -> Result<PathBuf, String> {
    let bin = match (&opts.binary, opts.build) {
        (Some(p), _) => p.clone(),
        (None, true) => binaries::build_static(root)?,
        (None, false) => binaries::static_path(root),
    };
    // Absolute: the measured commands run in the scratch directory.
    std::fs::canonicalize(&bin).map_err(|e| format!("{}: {e}", bin.display()))
}

fn run(opts: &Options) -> Result<(), String> {
    let root = bench::workspace_root()?;
    let stockade = stockade_binary(opts, &root)?;
    // The interpreter the python profile runs (a pyenv shim resolved).
    let python = real_python()?;
    let scratch = bench::Scratch::new()?;
    let mut notes = vec![
        format!("stockade binary: {}", stockade.display()),
        format!(
            "bare rows run {} (python3 on PATH, resolved)",
            python.display()
        ),
    ];
    if let Some(n) = bench::busy_host() {
        notes.push(n);
    }
    let run_argv = run_argv(&stockade);
    check_run(&run_argv, scratch.path())?;

    let cold = Server::start(&stockade, scratch.path(), "cold", None, opts.clients)?;
    let warm = match server::warm_flags(&stockade) {
        Ok(flags) => Server::start(&stockade, scratch.path(), "pool", Some(flags), opts.clients),
        Err(why) => Err(why),
    };
    if let Err(why) = &warm {
        notes.push(format!("pool: not available: {why}"));
    }
    let fork = match server::fork_flags(&stockade, opts.zygotes) {
        Ok(flags) => Server::start(&stockade, scratch.path(), "fork", Some(flags), opts.clients),
        Err(why) => Err(why),
    };
    if let Err(why) = &fork {
        notes.push(format!("fork server: not available: {why}"));
    }
    for s in std::iter::once(&cold)
        .chain(warm.as_ref().ok())
        .chain(fork.as_ref().ok())
    {
        notes.push(format!("{}: stockade {}", s.name, s.flags.join(" ")));
    }

    // Every stockade row but the one that says otherwise sends the limits
    // an evaluator service sends (client::LIMITS).
    let mut rows = vec![
        Row::new("python3 -c pass (bare)"),
        Row::new("python3 evaluator (bare, no jail)"),
        Row::new("stockade run --profile python"),
        Row::new("stockade serve (no pool)"),
        Row::new("stockade serve (pool: --warm python=8)"),
        Row::new("stockade serve (fork server: --warm-fork)"),
        Row::new("  the same, no limits in the request"),
        Row::new("  the same, streamed (ndjson)"),
    ];
    if let Err(why) = &warm {
        rows[4].skipped = Some(format!("not available: {why}"));
    }
    if let Err(why) = &fork {
        for r in &mut rows[5..] {
            r.skipped = Some(format!("not available: {why}"));
        }
    }
    let fork_ref = fork.as_ref().ok();
    let bare: Vec<OsString> = vec![python.clone().into(), "-c".into(), "pass".into()];
    let bare_eval: Vec<OsString> = vec![python.clone().into(), "-c".into(), EVALUATOR.into()];
    eprintln!(
        "xtask bench serve: latency, {} rounds of {} cases",
        opts.latency,
        rows.len()
    );
    let warm_ref = warm.as_ref().ok();
    let warm_servers = || [warm_ref, fork_ref].into_iter().flatten();
    let before: Vec<Vec<(String, f64, u64)>> = warm_servers().map(|s| s.stages()).collect();
    for round in 0..opts.latency {
        for k in 0..rows.len() {
            // Rotate the starting case each round: drift lands on all alike.
            let i = (k + round) % rows.len();
            let t = match i {
                0 => time_cmd(&bare, None, scratch.path()),
                1 => time_cmd(&bare_eval, Some(INPUT), scratch.path()),
                2 => time_cmd(&run_argv, Some(INPUT), scratch.path()),
                3 => cold.time_one(),
                4 => match warm_ref {
                    Some(w) => w.time_one(),
                    None => continue,
                },
                5 => match fork_ref {
                    Some(w) => w.time_one(),
                    None => continue,
                },
                6 => match fork_ref {
                    Some(w) => w.time_plain(),
                    None => continue,
                },
                _ => match fork_ref {
                    Some(w) => w.time_streamed(),
                    None => continue,
                },
            };
            rows[i].record(t);
        }
    }

    // The warm servers' stages while one request ran at a time.
    let sequential: Vec<Load> = warm_servers()
        .zip(&before)
        .map(|(s, b)| Load::stages_only(&s.name, server::delta(b, &s.stages())))
        .collect();
    let mut loads = Vec::new();
    let which = [
        ("cold", Some(&cold)),
        ("pool", warm_ref),
        ("fork", fork_ref),
    ];
    for s in which
        .iter()
        .filter(|(w, _)| opts.load.iter().any(|l| l == w))
        .filter_map(|(_, s)| *s)
    {
        eprintln!(
            "xtask bench serve: throughput of {}: {} runs from {} clients",
            s.name, opts.runs, opts.clients
        );
        loads.push(s.load(opts.runs, opts.clients));
    }
    // Hits and misses of the whole run (latency rounds and loads).
    let counts: Vec<(String, Vec<String>)> = [warm_ref, fork_ref]
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.pool_counts()))
        .collect();
    drop(fork);
    drop(warm);
    drop(cold);
    eprintln!("xtask bench serve: the floor, {FLOOR_RUNS} forks each");
    let floors = ["eval", "jail"].map(|mode| {
        let dir = scratch.path().join(format!("floor-{mode}"));
        floor::measure(&python, FLOOR_MODULES, FLOOR_RUNS, mode, &dir)
    });
    let mut out = render(opts, &notes, &rows, &loads);
    render_stages(
        &mut out,
        &sequential,
        "the latency rounds, one request at a time",
    );
    render_counts(&mut out, &counts);
    render_floor(&mut out, &floors, &loads);
    print!("{out}");
    Ok(())
}

/// Each warm server's stages during its load: wall ms per run, and the
/// runs/s a stage that runs in turn (one zygote's fork) would cap
/// throughput at, per instance of it.
fn render_stages(o: &mut String, loads: &[Load], during: &str) {
    let with: Vec<&Load> = loads.iter().filter(|l| !l.stages.is_empty()).collect();
    if with.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n## stages of the warm runs during {during} (the server's /metrics: wall time per run)"
    );
    for l in with {
        let _ = writeln!(o, "{}:", l.name);
        for (name, secs, runs) in &l.stages {
            let ms = secs * 1e3 / *runs as f64;
            let _ = writeln!(
                o,
                "  {name:<18} {ms:>8.3} ms/run over {runs} runs (in turn, one instance caps at {:.0}/s)",
                1e3 / ms.max(1e-9)
            );
        }
    }
}

fn render_counts(o: &mut String, counts: &[(String, Vec<String>)]) {
    let _ = writeln!(
        o,
        "\n## warm hits and misses (the server's /metrics, latency rounds and loads together)"
    );
    for (name, lines) in counts {
        let _ = writeln!(o, "{name}:");
        for l in lines {
            let _ = writeln!(o, "  {l}");
        }
    }
}

/// Children forked per floor row.
const FLOOR_RUNS: usize = 500;
/// What the fork server's zygote imports (server::warm_flags).
const FLOOR_MODULES: &str = "json,re,math,difflib";

fn render_floor(o: &mut String, floors: &[Result<floor::Floor, String>; 2], loads: &[Load]) {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let header = format!(
        "{:<66} | {:>10} | {:>12} | {:>11} | {:>8} | {:>12}",
        "without stockade", "CPU ms/run", "CPU-bound/s", "host ms/run", "wall ms", "faults/child"
    );
    let _ = writeln!(
        o,
        "\n## the floor: what this host charges for the parts of a forked run no design leaves out\n{header}\n{}",
        "-".repeat(header.chars().count())
    );
    let names = [
        "fork(2) of the zygote's interpreter, the evaluator, exit",
        "+ its namespaces (by clone), mounts, lo up, 3 cgroups with limits",
    ];
    for (name, f) in names.iter().zip(floors) {
        let _ = match f {
            Ok(f) => writeln!(
                o,
                "{name:<66} | {:>10.2} | {:>12.0} | {:>11.2} | {:>8.2} | {:>12.0}",
                f.cpu_ms,
                ncpu * 1000.0 / f.cpu_ms.max(1e-9),
                f.host_ms,
                f.wall_ms,
                f.faults
            ),
            Err(why) => writeln!(o, "{name:<66} | not measured: {why}"),
        };
    }
    for l in loads.iter().filter(|l| l.name.contains("fork")) {
        if let (Some(ns), Ok(f)) = (l.cpu_ns, &floors[1]) {
            let ms = ns as f64 / 1e6 / l.runs.max(1) as f64;
            let _ = writeln!(
                o,
                "{}: {ms:.2} CPU ms/run, {:.2} above the floor (the floor is {:.0}% of it)",
                l.name,
                ms - f.cpu_ms,
                100.0 * f.cpu_ms / ms
            );
        }
    }
    let _ = writeln!(
        o,
        "CPU ms/run: the forking process and its children (rusage), as the server's cpuacct group counts it; host ms/run: every CPU (/proc/stat), kernel workers included, less the idle host's (meaningful on an idle host only); 300 runs/s on {ncpu:.0} CPUs leaves {:.2} ms per run",
        ncpu * 1000.0 / 300.0
    );
}

impl Row {
    fn new(name: &str) -> Row {
        Row {
            name: name.into(),
            samples: Vec::new(),
            failures: 0,
            skipped: None,
        }
    }

    fn record(&mut self, t: Result<Duration, String>) {
        match t {
            Ok(d) => self.samples.push(d),
            Err(e) => {
                if self.failures == 0 {
                    eprintln!("xtask bench serve: {}: {e}", self.name);
                }
                self.failures += 1;
            }
        }
    }

    /// (p50, p99) in ms.
    fn percentiles(&self) -> Option<(f64, f64)> {
        if self.skipped.is_some() || self.samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Some((bench::percentile(&ms, 50.0), bench::percentile(&ms, 99.0)))
    }
}

/// `sys.executable` of `python3` on PATH.
fn real_python() -> Result<PathBuf, String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !p.starts_with('/') {
        return Err(format!("python3 did not say where it is: {p}"));
    }
    Ok(PathBuf::from(p))
}

/// `stockade run` of the evaluator, with the limits the requests send
/// (client::LIMITS) and the outcome on stdout, as serve answers.
fn run_argv(stockade: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![stockade.into()];
    for a in [
        "run",
        "--profile",
        "python",
        "--report",
        "-",
        "--memory",
        "128m",
        "--cpus",
        "1",
        "--pids-limit",
        "64",
        "--timeout",
        "10s",
        "--max-output",
        "64k",
        "--",
        "python3",
        "-c",
        EVALUATOR,
    ] {
        v.push(a.into());
    }
    v
}

/// The evaluator scores under `stockade run` before anything is timed.
fn check_run(argv: &[OsString], cwd: &Path) -> Result<(), String> {
    let out = spawn(argv, Some(INPUT), cwd, true)
        .and_then(|c| c.wait_with_output().map_err(|e| e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || client::not_scored(200, text.trim()).is_some() {
        return Err(format!(
            "stockade run of the evaluator did not score ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn spawn(
    argv: &[OsString],
    stdin: Option<&str>,
    cwd: &Path,
    capture: bool,
) -> Result<std::process::Child, String> {
    let out = || {
        if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let mut c = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(out())
        .stderr(out())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0].to_string_lossy()))?;
    if let (Some(data), Some(mut w)) = (stdin, c.stdin.take()) {
        let _ = w.write_all(data.as_bytes());
    }
    Ok(c)
}

/// Spawn to reap, stdin written and closed, output discarded.
fn time_cmd(argv: &[OsString], stdin: Option<&str>, cwd: &Path) -> Result<Duration, String> {
    let t = Instant::now();
    let st = spawn(argv, stdin, cwd, false)?
        .wait()
        .map_err(|e| e.to_string())?;
    let d = t.elapsed();
    if st.success() {
        Ok(d)
    } else {
        Err(format!("exited with {st}"))
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

fn render(opts: &Options, notes: &[String], rows: &[Row], loads: &[Load]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nstockade bench serve: {}; latency: {} interleaved rounds, one request at a time; throughput: {} runs from {} clients",
        bench::host_line(),
        opts.latency,
        opts.runs,
        opts.clients
    );
    for n in notes {
        let _ = writeln!(o, "note: {n}");
    }
    render_latency(&mut o, rows);
    render_load(&mut o, loads);
    o
}

fn render_latency(o: &mut String, rows: &[Row]) {
    let p50 = |i: usize| rows[i].percentiles().map(|p| p.0);
    let (bare, run, cold, pool, fork) = (p50(0), p50(2), p50(3), p50(4), p50(5));
    let header = format!(
        "{:<40} | {:>8} | {:>8} | {:>11} | {:>14}",
        "name", "p50 ms", "p99 ms", "× bare pass", "× stockade run"
    );
    let _ = writeln!(
        o,
        "\n## latency: a Python evaluator (JSON on stdin, difflib, JSON out)\n{header}\n{}",
        "-".repeat(header.chars().count())
    );
    for r in rows {
        let _ = match (&r.skipped, r.percentiles()) {
            (Some(why), _) => writeln!(o, "{:<40} | {why}", r.name),
            (None, None) => writeln!(o, "{:<40} | did not run: every run failed", r.name),
            (None, Some((p50, p99))) => writeln!(
                o,
                "{:<40} | {p50:>8.2} | {p99:>8.2} | {:>11} | {:>14}{}",
                r.name,
                ratio(Some(p50), bare),
                ratio(Some(p50), run),
                if r.failures > 0 {
                    format!("  ({} runs failed)", r.failures)
                } else {
                    String::new()
                }
            ),
        };
    }
    let _ = writeln!(
        o,
        "goal: pool p50 < 0.5 × bare `python3 -c pass` p50: {}",
        match (pool, bare) {
            (Some(p), Some(b)) => format!(
                "{:.2} × ({})",
                p / b,
                if p < 0.5 * b { "met" } else { "not met" }
            ),
            _ => "no figure (pool not measured)".into(),
        }
    );
    let _ = writeln!(
        o,
        "goal: fork server p50 (a request with limits) < 0.25 × bare `python3 -c pass` p50: {}",
        match (fork, bare) {
            (Some(p), Some(b)) => format!(
                "{:.2} × ({})",
                p / b,
                if p < 0.25 * b { "met" } else { "not met" }
            ),
            _ => "no figure (fork server not measured)".into(),
        }
    );
    let _ = writeln!(
        o,
        "goal: serve without a pool p50 ≤ 1.3 × `stockade run` p50: {}",
        match (cold, run) {
            (Some(c), Some(r)) => format!(
                "{:.2} × ({})",
                c / r,
                if c <= 1.3 * r { "met" } else { "not met" }
            ),
            _ => "no figure".into(),
        }
    );
}

fn render_load(o: &mut String, loads: &[Load]) {
    let header = format!(
        "{:<26} | {:>7} | {:>7} | {:>6} | {:>6} | {:>8} | {:>10} | {:>12} | {:>11}",
        "server",
        "runs/s",
        "wall s",
        "failed",
        "429",
        "runs",
        "CPU ms/run",
        "CPU-bound/s",
        "host ms/run"
    );
    let _ = writeln!(
        o,
        "\n## throughput: the same evaluator, concurrent clients\n{header}\n{}",
        "-".repeat(header.chars().count())
    );
    for l in loads {
        let secs = l.wall.as_secs_f64();
        // CPU per run of the server's whole tree, and the runs per
        // second that would give on every CPU of this host, idle.
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let (per_run, bound) = match l.cpu_ns {
            Some(ns) if l.runs > 0 && ns > 0 => {
                let ms = ns as f64 / 1e6 / l.runs as f64;
                (format!("{ms:.2}"), format!("{:.0}", ncpu * 1000.0 / ms))
            }
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            o,
            "{:<26} | {:>7.1} | {:>7.1} | {:>6} | {:>6} | {:>8} | {:>10} | {:>12} | {:>11}",
            l.name,
            l.ok as f64 / secs.max(1e-9),
            secs,
            l.runs - l.ok,
            l.queue_full,
            l.runs,
            per_run,
            bound,
            l.host_ms().map_or("-".into(), |h| format!("{h:.2}"))
        );
        if let Some(f) = &l.first_failure {
            let _ = writeln!(o, "  first failure: {f}");
        }
    }
    let _ = writeln!(o, "goal: ≥ 300 runs/s, 0 failed");
    let rate = |which: &str| {
        loads
            .iter()
            .find(|l| l.name.contains(which))
            .map(|l| l.ok as f64 / l.wall.as_secs_f64().max(1e-9))
    };
    let _ = writeln!(
        o,
        "goal: the fork server ≥ 5 × the runs/s of cold jails (same requests, same clients): {}",
        match (rate("fork"), rate("no pool")) {
            (Some(f), Some(c)) if c > 0.0 => format!(
                "{:.2} × ({})",
                f / c,
                if f >= 5.0 * c { "met" } else { "not met" }
            ),
            _ => "no figure (both loads are needed)".into(),
        }
    );
    let _ = writeln!(
        o,
        "CPU ms/run: the server's whole tree (server, spawner, jails, zygote, children) in its cgroup v1 cpuacct group (root only), kernel work in kworkers (e.g. network namespace teardown) not counted; CPU-bound/s: the CPUs of this host divided by it"
    );
    render_stages(o, loads, "the loads, requests overlapping");
    let _ = writeln!(o, "\n## after the load (before → after)");
    for l in loads {
        let _ = writeln!(o, "{}: {}", l.name, l.leaks.line());
    }
}
