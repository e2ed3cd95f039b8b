//! Where the server listens (a unix socket, mode 0660, or TCP with a
//! mandatory bearer token), and its lifetime: serve until SIGTERM or
//! SIGINT, then drain.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::accept::Listener;
use super::State;

/// A bound socket, before the runtime exists.
pub enum Bound {
    Unix(std::os::unix::net::UnixListener, PathBuf),
    Tcp(std::net::TcpListener),
}

/// The token clients must send, from `--token-file` (surrounding
/// whitespace dropped).
pub fn read_token(file: Option<&Path>) -> Result<Option<Vec<u8>>, String> {
    let Some(f) = file else { return Ok(None) };
    let text = std::fs::read(f).map_err(|e| format!("--token-file: {}: {e}", f.display()))?;
    let token = text.trim_ascii().to_vec();
    if token.is_empty() {
        return Err(format!("--token-file: {}: empty", f.display()));
    }
    if token.len() < 16 {
        return Err(format!(
            "--token-file: {}: a token needs at least 16 bytes",
            f.display()
        ));
    }
    Ok(Some(token))
}

/// Bind `--listen`: `unix:/PATH` or `HOST:PORT` (which needs a token).
pub fn bind(spec: &str, group: Option<&str>, has_token: bool) -> Result<Bound, String> {
    if let Some(path) = spec.strip_prefix("unix:") {
        return bind_unix(Path::new(path), group).map(|l| Bound::Unix(l, path.into()));
    }
    if group.is_some() {
        return Err("--socket-group: only for a unix socket (--listen unix:PATH)".into());
    }
    if !has_token {
        return Err(format!(
            "--listen {spec}: TCP needs a bearer token (--token-file FILE); without one, listen on a unix socket"
        ));
    }
    std::net::TcpListener::bind(spec)
        .map(Bound::Tcp)
        .map_err(|e| format!("--listen {spec}: {e}"))
}

fn bind_unix(path: &Path, group: Option<&str>) -> Result<std::os::unix::net::UnixListener, String> {
    let shown = || format!("--listen unix:{}", path.display());
    if !path.is_absolute() {
        return Err(format!("{}: the path must be absolute", shown()));
    }
    let gid = group.map(resolve_group).transpose()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", shown()))?;
    }
    // A socket left by an earlier server is replaced; anything else is not.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !m.file_type().is_socket() {
            return Err(format!("{}: exists and is not a socket", shown()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{}: a server already listens there", shown()));
        }
        let _ = std::fs::remove_file(path);
    }
    let l =
        std::os::unix::net::UnixListener::bind(path).map_err(|e| format!("{}: {e}", shown()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| format!("{}: {e}", shown()))?;
    if let Some(g) = gid {
        std::os::unix::fs::chown(path, None, Some(g))
            .map_err(|e| format!("--socket-group: {}: {e}", path.display()))?;
    }
    Ok(l)
}

fn resolve_group(g: &str) -> Result<u32, String> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(g) {
        Ok(Some(gr)) => Ok(gr.gid.as_raw()),
        Ok(None) => Err(format!("--socket-group: {g}: no such group")),
        Err(e) => Err(format!("--socket-group: {g}: {e}")),
    }
}

/// Serve until SIGTERM/SIGINT, then drain: new runs get 503 (and /readyz
/// says not ready) while the runs in flight get `drain` to finish; then
/// every jail left is killed; once no run is left the listener closes and
/// the server exits 0.
pub async fn serve(bound: Bound, state: Arc<State>, drain: Duration) -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => return super::fail(format_args!("signals: {e}")),
    };
    let st = state.clone();
    // The pool's shutdown (its zygotes and the children forked ahead,
    // their cgroups handed to the janitor), awaited before this process
    // ends.
    let shutting: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
    let shut = shutting.clone();
    let stop = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("stockade: serve: draining (up to {drain:?})");
        st.draining.store(true, Ordering::SeqCst);
        // No run will take a warm member now: stop building them, and let
        // the idle ones go.
        let pool = st.clone();
        let h = tokio::task::spawn_blocking(move || pool.pool.shutdown());
        *shut.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        let killer = st.clone();
        tokio::spawn(async move {
            tokio::time::sleep(drain).await;
            eprintln!("stockade: serve: drain timeout: killing the runs left");
            killer.kill_all();
            // The killed runs answer at once; a server still not done by
            // now never will be.
            tokio::time::sleep(Duration::from_secs(10)).await;
            std::process::exit(0);
        });
        st.idle().await;
    };
    let limits = state.max.connections;
    let app = super::http::router(state);
    let l = match bound {
        Bound::Unix(l, path) => l
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixListener::from_std(l))
            .map(|l| {
                (
                    Listener::Unix(l),
                    format!("unix:{}", path.display()),
                    Some(path),
                )
            }),
        Bound::Tcp(l) => l
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(l))
            .map(|l| {
                let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
                (Listener::Tcp(l), addr, None)
            }),
    };
    let (l, shown, path) = match l {
        Ok(l) => l,
        Err(e) => return super::fail(format_args!("listen: {e}")),
    };
    eprintln!("stockade: serve: listening on {shown}");
    super::accept::serve(l, app, limits, stop).await;
    if let Some(path) = path {
        let _ = std::fs::remove_file(&path);
    }
    let h = shutting.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = h {
        let _ = tokio::time::timeout(Duration::from_secs(15), h).await;
    }
    // The last runs' cgroups, removed off their requests' path: before
    // this process (and the janitor thread) is gone.
    crate::cgroup::settle(Duration::from_secs(5));
    eprintln!("stockade: serve: stopped");
    0
}
