//! Connections, accepted by the server's own loop so that none can hold
//! the server without showing a token:
//!
//! - connections are capped in total (`--max-connections`) and, on TCP,
//!   per client address (`--max-connections-per-client`; IPv6 by its
//!   /64, IPv4-mapped addresses as IPv4): one past a cap is closed at
//!   accept, before anything of it is read;
//! - a request's head must arrive within `--header-timeout`, and an idle
//!   keep-alive connection is closed after as long (hyper starts the same
//!   timer while it waits for the next head);
//! - the bearer token is checked from the head alone, before any body is
//!   read (`http::router`'s authorization layer).
//!
//! A thousand half-open connections from one address hold at most
//! `--max-connections-per-client` places, for at most `--header-timeout`.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub total: usize,
    pub per_client: usize,
    pub head: Duration,
}

/// `--max-connections`'s default: a quarter of the open-file limit (the
/// rest is for runs: pipes, pidfds, sockets), between 16 and 8192.
pub fn default_total() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(s, _)| s)
        .unwrap_or(1024);
    (soft / 4).clamp(16, 8192) as usize
}

/// A bound listener.
pub enum Listener {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
}

/// Who a connection counts against: `None` for a unix socket's peers
/// (the total cap only).
type Client = Option<IpAddr>;

fn client_of(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

#[derive(Default)]
struct Counts {
    total: usize,
    per: HashMap<IpAddr, usize>,
}

/// A connection's place; given back when dropped.
struct Place {
    counts: Arc<Mutex<Counts>>,
    client: Client,
}

impl Place {
    fn take(counts: &Arc<Mutex<Counts>>, client: Client, l: &Limits) -> Option<Place> {
        let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
        if c.total >= l.total {
            return None;
        }
        if let Some(ip) = client {
            let n = c.per.entry(ip).or_insert(0);
            if *n >= l.per_client {
                return None;
            }
            *n += 1;
        }
        c.total += 1;
        Some(Place {
            counts: counts.clone(),
            client,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.total -= 1;
        if let Some(ip) = self.client {
            if let Some(n) = c.per.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    c.per.remove(&ip);
                }
            }
        }
    }
}

/// Serve `app` on `l` until `stop` resolves; then stop accepting and let
/// the open connections finish what they carry.
pub async fn serve(l: Listener, app: Router, limits: Limits, stop: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let counts = Arc::new(Mutex::new(Counts::default()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.head)
        .keep_alive(true);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            a = accept(&l) => a,
        };
        let (io, client) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of fds (EMFILE, ENFILE), or a connection reset
                // before it was taken: wait a moment rather than spin.
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
        };
        let Some(place) = Place::take(&counts, client, &limits) else {
            // Over a cap: closed before anything is read.
            drop(io);
            continue;
        };
        match io {
            Io::Unix(s) => spawn(&http, &graceful, &app, s, place),
            Io::Tcp(s) => spawn(&http, &graceful, &app, s, place),
        }
    }
    drop(l);
    graceful.shutdown().await;
}

enum Io {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(l: &Listener) -> std::io::Result<(Io, Client)> {
    match l {
        Listener::Unix(l) => l.accept().await.map(|(s, _)| (Io::Unix(s), None)),
        Listener::Tcp(l) => {
            let (s, a) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Ok((Io::Tcp(s), Some(client_of(a.ip()))))
        }
    }
}

fn spawn<S>(
    http: &hyper::server::conn::http1::Builder,
    graceful: &GracefulShutdown,
    app: &Router,
    s: S,
    place: Place,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = http.serve_connection(TokioIo::new(s), TowerToHyperService::new(app.clone()));
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        // A client that went away, or a head too slow: nothing to tell.
        let _ = conn.await;
        drop(place);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_capped_per_client_and_in_total() {
        let counts = Arc::new(Mutex::new(Counts::default()));
        let l = Limits {
            total: 3,
            per_client: 2,
            head: Duration::from_secs(1),
        };
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        let p1 = Place::take(&counts, Some(a), &l).unwrap();
        let _p2 = Place::take(&counts, Some(a), &l).unwrap();
        assert!(Place::take(&counts, Some(a), &l).is_none());
        let _p3 = Place::take(&counts, Some(b), &l).unwrap();
        assert!(Place::take(&counts, None, &l).is_none());
        drop(p1);
        assert!(Place::take(&counts, Some(a), &l).is_some());
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let x = client_of("2001:db8:1:2:3:4:5:6".parse().unwrap());
        let y = client_of("2001:db8:1:2:ffff::1".parse().unwrap());
        assert_eq!(x, y);
        assert_eq!(
            client_of("::ffff:127.0.0.1".parse().unwrap()),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
