//! The proxy's way out, from the host's network namespace: resolve an
//! allowed name, keep the addresses the classifier allows, connect
//! (directly, or by CONNECT through the caller's upstream proxy), and
//! relay bytes both ways.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::allow::{self, Route};
use super::parse;
use crate::plan::egress::{Egress, Upstream};

/// How long a connect (or the upstream's answer to CONNECT) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why no connection was made.
#[derive(Debug)]
pub enum Failure {
    /// Policy: the name resolves only to refused addresses (a denial).
    Refused(String),
    /// The network: no address, no answer, the upstream said no.
    Unreachable(String),
}

/// A connection to `route`'s `port`.
pub async fn connect(e: &Egress, route: &Route, port: u16) -> Result<TcpStream, Failure> {
    let shown = match route {
        Route::Listed(ip) => ip.to_string(),
        Route::Name(n) => n.clone(),
    };
    if let Some(up) = e.upstream.as_ref().filter(|u| !u.bypassed(&shown)) {
        return via_upstream(up, route, port).await;
    }
    let addrs = match route {
        Route::Listed(ip) => vec![*ip],
        Route::Name(name) => {
            let found = resolve(name, port).await.map_err(Failure::Unreachable)?;
            allow::usable(&e.allow, name, port, &found).map_err(Failure::Refused)?
        }
    };
    let mut last = String::new();
    for ip in addrs {
        match direct(SocketAddr::new(ip, port)).await {
            Ok(s) => return Ok(s),
            Err(why) => last = why,
        }
    }
    Err(Failure::Unreachable(last))
}

/// The addresses of `name`, by the host's resolver.
async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let found = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name, port)))
        .await
        .map_err(|_| format!("{name}: no answer from the resolver"))?
        .map_err(|e| format!("{name}: cannot resolve: {e}"))?;
    Ok(found.map(|a| a.ip()).collect())
}

/// A plain connect, bounded by [`CONNECT_TIMEOUT`].
async fn direct(at: SocketAddr) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(at)).await {
        Ok(Ok(s)) => {
            // As the jail's side (see crate::egress's accept loop).
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(format!("{at}: {e}")),
        Err(_) => Err(format!("{at}: no answer")),
    }
}

/// A tunnel through the upstream proxy: CONNECT, then its 200.
async fn via_upstream(up: &Upstream, route: &Route, port: u16) -> Result<TcpStream, Failure> {
    let target = match route {
        Route::Listed(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        Route::Listed(ip) => format!("{ip}:{port}"),
        Route::Name(n) => format!("{n}:{port}"),
    };
    let fail = |why: String| {
        Failure::Unreachable(format!(
            "upstream proxy {} ({}): {why}",
            up.authority, up.var
        ))
    };
    let mut s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(up.authority.as_str()))
        .await
        .map_err(|_| fail("no answer".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let _ = s.set_nodelay(true);
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let head = tokio::time::timeout(CONNECT_TIMEOUT, read_head(&mut s))
        .await
        .map_err(|_| fail("no answer to CONNECT".into()))?
        .map_err(fail)?;
    let status = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let status = String::from_utf8_lossy(status);
    let code = status.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(fail(format!("CONNECT {target}: {status}")));
    }
    Ok(s)
}

/// Read an HTTP head (through its blank line) and nothing after it: one
/// byte at a time, since the bytes after it are the tunnel's.
pub async fn read_head(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut head = Vec::with_capacity(256);
    let mut b = [0u8; 1];
    while parse::head_end(&head).is_none() {
        if head.len() >= parse::MAX_HEAD {
            return Err(format!("head larger than {} bytes", parse::MAX_HEAD));
        }
        match s.read(&mut b).await {
            Ok(0) => return Err("closed before the end of the head".into()),
            Ok(_) => head.push(b[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(head)
}

/// The bytes a connection carried so far, each way: read when the run
/// ends with the connection still open.
#[derive(Debug, Default)]
pub struct Live {
    pub sent: AtomicU64,
    pub received: AtomicU64,
}

impl Live {
    /// (sent, received) so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }
}

/// Copy both ways until both sides are done, the bytes written to the
/// host `b` and read from it counted into `live` as they pass.
pub async fn relay(mut a: TcpStream, b: TcpStream, live: Arc<Live>) {
    let mut b = Counted { io: b, live };
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

/// The host's side of a connection, its bytes counted into a [`Live`]:
/// those written as sent, those read as received.
pub struct Counted<T> {
    pub io: T,
    pub live: Arc<Live>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let got = (buf.filled().len() - before) as u64;
        self.live.received.fetch_add(got, Ordering::Relaxed);
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.live.sent.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
