//! One `stockade serve` under measurement: started on a unix socket in the
//! bench's scratch directory, waited for, timed one request at a time,
//! loaded by concurrent clients, stopped with SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::client;
use super::leaks::{Report, Snapshot};
use super::Load;

pub struct Server {
    pub name: String,
    /// The command line after the binary.
    pub flags: Vec<String>,
    child: Child,
    sock: PathBuf,
    workdirs: PathBuf,
    log: PathBuf,
    /// The evaluator request with the limits a service sends (what every
    /// row times and loads unless it says otherwise), and without.
    body: String,
    plain: String,
    start: Snapshot,
    /// Its cgroup v1 cpuacct group (root only), holding the server and
    /// everything it starts: the CPU time of the whole tree.
    cpuacct: Option<PathBuf>,
}

/// The cgroup v1 cpuacct hierarchy, when this host has one and we may
/// make groups in it.
fn cpuacct_root() -> Option<PathBuf> {
    let p = PathBuf::from("/sys/fs/cgroup/cpuacct");
    (p.join("cpuacct.usage").exists() && is_root()).then_some(p)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Remove a cgroup and the groups under it, deepest first (cgroupfs
/// removes a group with rmdir once it has no process and no child).
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

/// The fork server's flags, when this binary's `serve` takes them.
/// `zygotes`: the fork server's zygotes (`--warm python=N`), each forking
/// in turn.
pub fn fork_flags(stockade: &Path, zygotes: usize) -> Result<Vec<String>, String> {
    let mut f = warm_flags(stockade)?;
    let out = Command::new(stockade)
        .args(["serve", "--help"])
        .output()
        .map_err(|e| e.to_string())?;
    if !String::from_utf8_lossy(&out.stdout).contains("--warm-fork") {
        return Err("this binary's `serve` has no --warm-fork flag".into());
    }
    f[1] = format!("python={zygotes}");
    f.push("--warm-fork".into());
    // A forked run waits more than it computes (on the zygote, on
    // wakeups between server, zygote and child): with one run per CPU
    // (serve's default) the CPUs idle about a third of the time. Four per
    // CPU is what measured best here (2, 4, 6, 8, 16 and 32 on 2 CPUs).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    f.extend(["--max-concurrent".into(), (4 * cpus).to_string()]);
    Ok(f)
}

/// The pool's flags, when this binary's `serve` takes them; else why not.
pub fn warm_flags(stockade: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(stockade)
        .args(["serve", "--help"])
        .output()
        .map_err(|e| format!("cannot run {} serve --help: {e}", stockade.display()))?;
    let help = String::from_utf8_lossy(&out.stdout);
    if !help.contains("--warm ") || !help.contains("--warm-import") {
        return Err("this binary's `serve` has no --warm / --warm-import flag yet".into());
    }
    Ok([
        "--warm",
        "python=8",
        "--warm-import",
        "json,re,math,difflib",
    ]
    .map(String::from)
    .to_vec())
}

impl Server {
    /// Start it and wait until it is healthy (and, with a pool, ready)
    /// and scores the evaluator.
    pub fn start(
        stockade: &Path,
        scratch: &Path,
        name: &str,
        warm: Option<Vec<String>>,
        clients: usize,
    ) -> Result<Server, String> {
        let sock = scratch.join(format!("{name}.sock"));
        let workdirs = scratch.join(format!("runs-{name}"));
        let log = scratch.join(format!("{name}.log"));
        let mut flags: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            format!("unix:{}", sock.display()),
            "--profiles".into(),
            "python".into(),
            "--workdir-root".into(),
            workdirs.display().to_string(),
            // Every client's request may wait for a run slot: no 429.
            "--max-queue".into(),
            (2 * clients).to_string(),
        ];
        let pooled = warm.is_some();
        let forking = warm
            .as_ref()
            .is_some_and(|w| w.iter().any(|f| f == "--warm-fork"));
        flags.extend(warm.unwrap_or_default());
        let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // The server enters its cpuacct group before it execs, so that
        // its spawner and every jail are in it too.
        let cpuacct = cpuacct_root().and_then(|r| {
            let g = r.join(format!("xtask-bench-{}-{name}", std::process::id()));
            std::fs::create_dir(&g).ok().map(|()| g)
        });
        let mut cmd = match &cpuacct {
            Some(g) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
                    .arg(g)
                    .arg(stockade);
                c
            }
            None => Command::new(stockade),
        };
        let child = cmd
            .args(&flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {} serve: {e}", stockade.display()))?;
        let mut s = Server {
            name: format!(
                "serve ({})",
                if forking {
                    "fork server"
                } else if pooled {
                    "pool"
                } else {
                    "no pool"
                }
            ),
            flags,
            child,
            sock,
            workdirs,
            log,
            body: client::run_body(true),
            plain: client::run_body(false),
            start: Snapshot::default(),
            cpuacct,
        };
        s.wait_until("/healthz", Duration::from_secs(30))?;
        if pooled {
            s.wait_until("/readyz", Duration::from_secs(180))?;
            // Every member (every zygote) up: what the load leaves is
            // then compared with a full pool.
            s.wait_full(Duration::from_secs(180));
        }
        s.time_one().map_err(|e| s.failed(&e))?;
        s.start = s.snapshot();
        Ok(s)
    }

    fn failed(&self, what: &str) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        format!("{}: {what}; its stderr: {}", self.name, log.trim())
    }

    fn wait_until(&mut self, path: &str, limit: Duration) -> Result<(), String> {
        let t = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(self.failed(&format!("exited ({st})")));
            }
            match client::request(&self.sock, "GET", path, None) {
                Ok((200, _)) => return Ok(()),
                r if t.elapsed() > limit => {
                    return Err(self.failed(&format!("GET {path} after {limit:?}: {r:?}")))
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Wait until the pool holds its target (`stockade_pool_size` and
    /// `stockade_pool_target` of /metrics), at most `limit`.
    fn wait_full(&self, limit: Duration) {
        let t = Instant::now();
        let read = |text: &str, name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        };
        while t.elapsed() < limit {
            if let Ok((200, m)) = client::request(&self.sock, "GET", "/metrics", None) {
                let size = read(&m, "stockade_pool_size{");
                if size.is_some() && size == read(&m, "stockade_pool_target{") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot::take(self.child.id(), &self.workdirs)
    }

    /// One evaluator request with limits, answered with a score: its
    /// latency.
    pub fn time_one(&self) -> Result<Duration, String> {
        self.time(&self.body, false)
    }

    /// The same without limits (serve's defaults).
    pub fn time_plain(&self) -> Result<Duration, String> {
        self.time(&self.plain, false)
    }

    /// The request with limits, answered as ndjson lines.
    pub fn time_streamed(&self) -> Result<Duration, String> {
        self.time(&self.body, true)
    }

    fn time(&self, body: &str, streamed: bool) -> Result<Duration, String> {
        let t = Instant::now();
        let accept = match streamed {
            true => "application/x-ndjson",
            false => "application/json",
        };
        let (status, answer) =
            client::request_accepting(&self.sock, "POST", "/v1/runs", Some(body), accept)?;
        let d = t.elapsed();
        let why = match streamed {
            true => client::not_scored_streamed(status, &answer),
            false => client::not_scored(status, &answer),
        };
        match why {
            None => Ok(d),
            Some(why) => Err(why),
        }
    }

    /// Each stage's seconds and runs so far (`stockade_stage_*_total`).
    pub fn stages(&self) -> Vec<(String, f64, u64)> {
        let Ok((200, text)) = client::request(&self.sock, "GET", "/metrics", None) else {
            return Vec::new();
        };
        let value = |name: &str, stage: &str| {
            let head = format!("{name}{{stage=\"{stage}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&head)?.trim().parse::<f64>().ok())
        };
        text.lines()
            .filter_map(|l| l.strip_prefix("stockade_stage_runs_total{stage=\""))
            .filter_map(|l| l.split_once('"').map(|(s, _)| s.to_string()))
            .map(|stage| {
                let secs = value("stockade_stage_seconds_total", &stage).unwrap_or(0.0);
                let runs = value("stockade_stage_runs_total", &stage).unwrap_or(0.0) as u64;
                (stage, secs, runs)
            })
            .collect()
    }

    /// The pool's hits and misses so far, as `/metrics` counts them (its
    /// `stockade_pool_hits_total` and `stockade_pool_misses_total` lines).
    pub fn pool_counts(&self) -> Vec<String> {
        match client::request(&self.sock, "GET", "/metrics", None) {
            Ok((200, text)) => text
                .lines()
                .filter(|l| {
                    l.starts_with("stockade_pool_hits_total")
                        || l.starts_with("stockade_pool_misses_total")
                })
                .map(String::from)
                .collect(),
            r => vec![format!("GET /metrics: {r:?}")],
        }
    }

    /// `runs` requests from `clients` threads; then what is left.
    pub fn load(&self, runs: usize, clients: usize) -> Load {
        let before = self.snapshot();
        let next = AtomicUsize::new(0);
        let ok = AtomicUsize::new(0);
        let queue_full = AtomicUsize::new(0);
        let first: Mutex<Option<String>> = Mutex::new(None);
        let cpu0 = self.cpu_ns();
        let stages0 = self.stages();
        let host0 = host_busy_ms();
        let t = Instant::now();
        std::thread::scope(|sc| {
            for _ in 0..clients {
                sc.spawn(|| {
                    while next.fetch_add(1, Ordering::SeqCst) < runs {
                        let why =
                            match client::request(&self.sock, "POST", "/v1/runs", Some(&self.body))
                            {
                                Ok((status, body)) => {
                                    if status == 429 {
                                        queue_full.fetch_add(1, Ordering::SeqCst);
                                    }
                                    client::not_scored(status, &body)
                                }
                                Err(e) => Some(e),
                            };
                        match why {
                            None => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Some(w) => {
                                first.lock().unwrap().get_or_insert(w);
                            }
                        }
                    }
                });
            }
        });
        let wall = t.elapsed();
        let stages = delta(&stages0, &self.stages());
        let host = match (host0, host_busy_ms()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let cpu = match (cpu0, self.cpu_ns()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        Load {
            stages,
            cpu_ns: cpu,
            host_cpu_ms: host,
            name: self.name.clone(),
            runs,
            ok: ok.into_inner(),
            queue_full: queue_full.into_inner(),
            first_failure: first.into_inner().unwrap(),
            wall,
            leaks: Report {
                start_rss_kb: self.start.rss_kb,
                before: self.start.clone(),
                after: self.settled(&before),
            },
        }
    }

    /// CPU time of the server's whole tree so far (its cpuacct group).
    /// (See [`host_busy_ms`] for the whole host's.)
    fn cpu_ns(&self) -> Option<u64> {
        let g = self.cpuacct.as_ref()?;
        std::fs::read_to_string(g.join("cpuacct.usage"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The counts once the last jails are gone and the server has let go
    /// of the memory the load took (its idle threads end after a few
    /// seconds), up to 15 s.
    fn settled(&self, before: &Snapshot) -> Snapshot {
        let t = Instant::now();
        let rss_back = |s: &Snapshot| s.rss_kb * 10 <= self.start.rss_kb * 11;
        loop {
            let s = self.snapshot();
            let counts = s.same_counts(&self.start) || s.same_counts(before);
            if (counts && rss_back(&s)) || t.elapsed() > Duration::from_secs(15) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    /// SIGTERM (the drain), then SIGKILL after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.forget_cgroup();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.forget_cgroup();
    }
}

impl Server {
    /// Remove the cpuacct group once the server is gone, with the empty
    /// groups stockade made in it (its `stockade` parent of run groups);
    /// the last processes of the tree may take a moment to leave.
    pub fn forget_cgroup(&self) {
        let Some(g) = &self.cpuacct else { return };
        let t = Instant::now();
        while remove_tree(g).is_err() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The stages' seconds and runs from `before` to `after`, those that ran.
pub fn delta(
    before: &[(String, f64, u64)],
    after: &[(String, f64, u64)],
) -> Vec<(String, f64, u64)> {
    after
        .iter()
        .map(|(name, secs, runs)| {
            let (s0, r0) = before
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or((0.0, 0), |(_, s, r)| (*s, *r));
            (name.clone(), secs - s0, runs.saturating_sub(r0))
        })
        .filter(|(_, _, runs)| *runs > 0)
        .collect()
}

/// CPU time the whole host has used since boot, every CPU, ms: /proc/stat's
/// first line less idle and iowait, in USER_HZ (100 on Linux).
pub fn host_busy_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let busy: u64 = v.iter().sum::<u64>() - v.get(3)? - v.get(4)?;
    Some(busy as f64 * 10.0)
}
