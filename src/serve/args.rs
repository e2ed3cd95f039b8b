//! `stockade serve`'s command line.

use std::path::PathBuf;

/// Serve runs over HTTP/JSON: each request in its own fresh jail.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen: `unix:/PATH` (mode 0660) or `HOST:PORT` (TCP; needs --token-file)
    #[arg(
        long,
        value_name = "unix:PATH|HOST:PORT",
        default_value = "unix:/run/stockade/stockade.sock"
    )]
    pub listen: String,
    /// Group that owns the unix socket (name or gid), so its members may connect
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// File holding the bearer token clients must send (required for TCP)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Profiles requests may name, comma-separated; the first is the default
    #[arg(
        long,
        value_name = "NAME,…",
        default_value = "python,shell",
        value_delimiter = ','
    )]
    pub profiles: Vec<String>,
    /// Most runs at once [default: the number of CPUs]
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<usize>,
    /// Most requests waiting for a run slot; more get 429 [default: 4 × --max-concurrent]
    #[arg(long, value_name = "N")]
    pub max_queue: Option<usize>,
    /// Largest request body
    #[arg(long, value_name = "SIZE", default_value = "8m", value_parser = size)]
    pub max_body: u64,
    /// Most files one request may write into its workdir
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_files: usize,
    /// Memory limit ceiling per run (requests are clamped to it; also the default)
    #[arg(long, value_name = "SIZE", default_value = "512m", value_parser = size)]
    pub max_memory: u64,
    /// Wall-clock timeout ceiling per run (also the default)
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    pub max_timeout: std::time::Duration,
    /// Process/thread count ceiling per run (also the default)
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_pids: u64,
    /// CPU ceiling per run (also the default)
    #[arg(long, value_name = "CPUS", default_value_t = 1.0)]
    pub max_cpus: f64,
    /// stdout+stderr ceiling per run (also the default)
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = size)]
    pub max_output: u64,
    /// Size of each run's and session's workdir, a tmpfs in the jail charged to its memory (the request's files count against it; writes past it fail with ENOSPC and end the run as disk_limit) [default: the run's memory limit]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_workdir: Option<u64>,
    /// Most sessions open at once (`POST /v1/sessions`); more get 429
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_sessions: usize,
    /// A session without a command running ends after this long (the default, and the most a request may ask for)
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    pub session_idle_timeout: std::time::Duration,
    /// A session ends after this long in all
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
    pub max_session_lifetime: std::time::Duration,
    /// On SIGTERM: how long in-flight runs may finish before they are killed
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub drain_timeout: std::time::Duration,
    /// No longer used: each workdir is a tmpfs inside its own jail (see
    /// --max-workdir). Accepted, with a warning, so that existing
    /// manifests still start.
    #[arg(long, value_name = "DIR", hide = true)]
    pub workdir_root: Option<PathBuf>,
    /// Most connections open at once; one past it is closed at accept [default: a quarter of the open-file limit, 16 to 8192]
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Most connections open at once from one TCP client address (IPv6: one /64); behind a proxy, raise it to --max-connections
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections_per_client: usize,
    /// A request's head must arrive within this long, and an idle keep-alive connection is closed after it
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub header_timeout: std::time::Duration,
    /// A host directory runs may ask for as a copy-on-write workspace (`"workspace": {"base": NAME}`; repeatable); each run changes its own upper layer, DIR is never written unless `:commit` lets runs that ask commit their changes to it
    #[arg(long, value_name = "NAME=DIR[:commit]")]
    pub workspace_base: Vec<String>,
    /// A secret requests may name (`"secrets": ["NAME"]`) and their jails never hold: the jail's variable NAME holds a placeholder, and the run's proxy puts the value (from --secret-file) into the request headers sent to these hosts only, which the request's profile must allow (network.allow); repeat for more
    #[arg(long, value_name = "NAME:HOST[,HOST…]")]
    pub secret: Vec<String>,
    /// The file holding --secret NAME's value (one trailing newline dropped); checked at start, read again by each run that names it (the server holds no value)
    #[arg(long, value_name = "NAME=PATH")]
    pub secret_file: Vec<String>,
    /// Trust these certificate authorities (PEM) too when a run's proxy reaches a secret's hosts, beside the host's trust store
    #[arg(long, value_name = "FILE")]
    pub egress_ca: Vec<PathBuf>,
    /// Do not confine the server process itself (no_new_privs + seccomp)
    #[arg(long)]
    pub no_confine: bool,
    #[command(flatten)]
    pub warm: Box<WarmArgs>,
}

/// Warm pools (boxed: `stockade`'s subcommand enum stays small).
#[derive(clap::Args, Debug, Clone)]
pub struct WarmArgs {
    /// Keep N warm jails of PROFILE (repeatable; e.g. python=8): each
    /// one fresh, its interpreter started, serving one request
    #[arg(long, value_name = "PROFILE=N", value_parser = warm)]
    pub warm: Vec<(String, usize)>,
    /// Modules every warm jail's interpreter imports before it waits, comma-separated
    #[arg(long, value_name = "MODULE,…", value_delimiter = ',')]
    pub warm_import: Vec<String>,
    /// Warm jails built at once, over every pool [default: half the CPUs, at least 1]
    #[arg(long, value_name = "N")]
    pub warm_builders: Option<usize>,
    /// Serve each warm pool from a fork server: one interpreter per profile that has imported --warm-import, forking a child per request into namespaces, a root, Landlock and seccomp of its own (PROFILE=N's N is then the number of fork servers, at most one per CPU, taken in turn)
    #[arg(long)]
    pub warm_fork: bool,
}

fn warm(s: &str) -> Result<(String, usize), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected PROFILE=N"))?;
    let n = n
        .parse::<usize>()
        .map_err(|_| format!("{s:?}: N must be a whole number"))?;
    if name.is_empty() {
        return Err(format!("{s:?}: expected PROFILE=N"));
    }
    Ok((name.to_string(), n))
}

fn size(s: &str) -> Result<u64, String> {
    crate::policy::units::parse_limit_size(s).map_err(|e| e.to_string())
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    crate::policy::units::parse_limit_duration(s).map_err(|e| e.to_string())
}
