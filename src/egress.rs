//! The egress allowlist's proxy (`--allow-host`): HTTP CONNECT (and plain
//! HTTP requests in absolute form) and SOCKS5 on one port, first byte
//! deciding. Its listening socket was made inside the jail's network
//! namespace (see `sys::netns::create_in`), so the payload reaches it on
//! 127.0.0.1 there; the proxy itself runs here, in the supervisor, after
//! clone (threads are allowed from then on), and connects out from the
//! host's network namespace. It resolves names itself, allows only the
//! listed names and ports (`allow`), refuses loopback, private,
//! link-local, CGNAT, multicast and metadata addresses unless listed
//! explicitly, and records each refusal for the outcome. What it
//! enforces was decided before clone: the entries are `policy::egress`'s,
//! the port and the upstream proxy `plan::egress`'s.
//!
//! One thread runs a single-threaded tokio runtime (names are resolved
//! on its blocking pool); [`Proxy::finish`] (or drop) stops it and joins
//! it before the run returns, so the caller is single-threaded again
//! (whatever lookup is still in the host's resolver is given 2 s).

mod allow;
mod body;
mod http1;
mod http2;
mod intercept;
mod parse;
mod record;
mod relay;
mod tunnel;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};

use crate::outcome::{Denial, MAX_DENIALS};
use crate::plan::egress::Egress;
pub use intercept::Interceptor;
use parse::{SocksRefusal, Target};
pub use record::{Connection, Record, Verdict};
use relay::Failure;

/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;

/// How long a client has to say where it goes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The refusals recorded: the first [`MAX_DENIALS`], and how many more.
#[derive(Debug, Default)]
pub struct Denials {
    pub list: Vec<Denial>,
    pub more: u64,
    /// Record mode (`--learn`): each `HOST:PORT` connected to, in the
    /// order first reached (at most [`MAX_CONTACTED`]).
    pub contacted: Vec<String>,
    /// Every connection asked for, in order (at most
    /// [`record::MAX_RECORDED`]), and how many more.
    pub connections: Vec<Connection>,
    pub connections_more: u64,
}

/// The most distinct hosts record mode keeps.
pub const MAX_CONTACTED: usize = 1024;

/// A running proxy. Stopped and joined by [`Proxy::finish`] or on drop.
pub struct Proxy {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
}

struct Shared {
    egress: Egress,
    /// The secrets' hosts' TLS, intercepted (`--secret`).
    intercept: Option<Interceptor>,
    denials: Mutex<Denials>,
    /// The relayed connections still open, by their index in
    /// `denials.connections`, with their bytes so far.
    live: Mutex<Vec<(usize, Arc<relay::Live>)>>,
    /// Told each new refusal and each connection ended or refused (the
    /// supervisor's `--denials-fd` lines).
    tell: Box<dyn Fn(&Record) + Send + Sync>,
}

impl Shared {
    /// Record a refusal: a repeat of one recorded (same host, port and
    /// reason) only counts; a new one is recorded and sent as a line
    /// while fewer than [`MAX_DENIALS`] are, else counted in `more`.
    fn deny(&self, t: &Target, reason: String) {
        let host = t.host.to_string();
        let mut d = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        let known = d.list.iter_mut().find_map(|x| match x {
            Denial::Network {
                host: h,
                port,
                reason: r,
                count,
            } if *h == host && *port == t.port && *r == reason => Some(count),
            _ => None,
        });
        if let Some(count) = known {
            *count += 1;
            return;
        }
        if d.list.len() >= MAX_DENIALS {
            d.more += 1;
            return;
        }
        let denial = Denial::Network {
            host,
            port: t.port,
            reason,
            count: 1,
        };
        (self.tell)(&Record::Denial(&denial));
        d.list.push(denial);
    }

    /// Record a connection: its index, to add its bytes when it ends
    /// (None: not kept, only counted). One not made is told now.
    fn connection(&self, c: Connection) -> Option<usize> {
        let mut d = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        if c.verdict != Verdict::Allowed {
            (self.tell)(&Record::Connection(&c));
        }
        if d.connections.len() >= record::MAX_RECORDED {
            d.connections_more += 1;
            return None;
        }
        d.connections.push(c);
        Some(d.connections.len() - 1)
    }

    /// A connection recorded at `at` ended: its bytes, and its line.
    fn ended(&self, at: Option<usize>, sent: u64, received: u64) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(i, _)| Some(*i) != at);
        let mut d = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = at.and_then(|i| d.connections.get_mut(i)) {
            c.sent = sent;
            c.received = received;
            c.open = false;
            (self.tell)(&Record::Connection(c));
        }
    }

    /// A refusal, recorded as a denial and as a connection not made.
    fn refuse(&self, t: &Target, why: &str) {
        self.deny(t, why.to_string());
        self.connection(Connection::not_made(
            t.host.to_string(),
            t.port,
            Verdict::Refused,
            why,
        ));
    }
}

impl Shared {
    /// Record mode: `route`:`port` was reached.
    fn contacted(&self, route: &allow::Route, port: u16) {
        let host = match route {
            allow::Route::Name(n) => format!("{n}:{port}"),
            allow::Route::Listed(std::net::IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
            allow::Route::Listed(ip) => format!("{ip}:{port}"),
        };
        let mut d = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        if !d.contacted.contains(&host) && d.contacted.len() < MAX_CONTACTED {
            d.contacted.push(host);
        }
    }
}

impl Proxy {
    /// Serve on `listener` (bound and listening) by `egress`'s rules.
    /// Each new refusal is also given to `tell`, on the proxy's thread.
    pub fn start(
        listener: OwnedFd,
        egress: Egress,
        intercept: Option<Interceptor>,
        tell: impl Fn(&Record) + Send + Sync + 'static,
    ) -> std::io::Result<Proxy> {
        let l = std::net::TcpListener::from(listener);
        l.set_nonblocking(true)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(4)
            .build()?;
        let shared = Arc::new(Shared {
            egress,
            intercept,
            denials: Mutex::new(Denials::default()),
            live: Mutex::new(Vec::new()),
            tell: Box::new(tell),
        });
        let (tx, rx) = oneshot::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("egress-proxy".into())
            .spawn(move || {
                rt.block_on(serve(l, s, rx));
                rt.shutdown_timeout(Duration::from_secs(2));
            })?;
        Ok(Proxy {
            stop: Some(tx),
            thread: Some(thread),
            shared,
        })
    }

    /// Stop serving (open connections are closed) and give the refusals.
    pub fn finish(mut self) -> Denials {
        self.halt();
        let mut d = self
            .shared
            .denials
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A relayed connection still open: its bytes so far (every byte
        // its client was sent was read from the host first).
        let live = self.shared.live.lock().unwrap_or_else(|e| e.into_inner());
        for (i, l) in live.iter() {
            if let Some(c) = d.connections.get_mut(*i) {
                let (sent, received) = l.counts();
                c.sent += sent;
                c.received = received;
            }
        }
        drop(live);
        // Each connection has its line: one still open, now.
        for c in d.connections.iter().filter(|c| c.open) {
            (self.shared.tell)(&Record::Connection(c));
        }
        std::mem::take(&mut *d)
    }

    fn halt(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Accept until told to stop; each connection its own task.
async fn serve(l: std::net::TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    let Ok(l) = TcpListener::from_std(l) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = &mut stop => return,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let conn = tokio::select! {
            _ = &mut stop => return,
            c = l.accept() => c,
        };
        let Ok((conn, _)) = conn else { continue };
        // Each write relayed at once: with Nagle's algorithm a second
        // small write (a response's body after its head) waits for the
        // first one's delayed ACK, some 40 ms.
        let _ = conn.set_nodelay(true);
        let s = shared.clone();
        tokio::spawn(async move {
            handle(conn, &s).await;
            drop(permit);
        });
    }
}

/// A tunnel or a forwarded request, open to its host.
struct Opened {
    up: TcpStream,
    target: Target,
    route: allow::Route,
    /// CONNECT or SOCKS5 (a forwarded plain-HTTP request is not).
    tunnel: bool,
    /// Bytes of a forwarded request's head, sent already.
    head: u64,
}

/// One client: SOCKS5 when its first byte is 5, else HTTP. A tunnel to a
/// host a secret is bound to is intercepted; any other is relayed.
async fn handle(mut c: TcpStream, s: &Arc<Shared>) {
    let mut first = [0u8; 1];
    let Ok(Ok(1)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, c.peek(&mut first)).await else {
        return;
    };
    let out = if first[0] == 5 {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, socks(&mut c, s)).await
    } else {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, http(&mut c, s)).await
    };
    let Ok(Some(o)) = out else { return };
    let intercepted = o.tunnel
        && s.intercept
            .as_ref()
            .is_some_and(|ic| ic.intercepts(&o.route, o.target.port));
    let at = s.connection(Connection {
        kind: "connection",
        host: o.target.host.to_string(),
        port: o.target.port,
        address: o.up.peer_addr().ok().map(|a| a.to_string()),
        verdict: Verdict::Allowed,
        rule: allow::rule(&s.egress, &o.route, &o.up, o.target.port),
        sent: o.head,
        received: 0,
        intercepted,
        open: true,
    });
    let (sent, received) = match &s.intercept {
        Some(ic) if intercepted => tunnel::serve(c, o.up, &o.target, &o.route, ic, s).await,
        _ => {
            let live = Arc::new(relay::Live::default());
            if let Some(i) = at {
                let mut l = s.live.lock().unwrap_or_else(|e| e.into_inner());
                l.push((i, live.clone()));
            }
            relay::relay(c, o.up, live.clone()).await;
            live.counts()
        }
    };
    s.ended(at, o.head + sent, received);
}

/// Check `t` and connect: the upstream stream, or the refusal (recorded)
/// or the failure, as text. In record mode a target off the allowlist is
/// let through (a name, or an address of no refused kind) and each one
/// connected to is recorded.
async fn open(s: &Shared, t: &Target) -> Result<(TcpStream, allow::Route), Failure> {
    let checked = match allow::check(&s.egress.allow, t) {
        Err(_) if s.egress.record => allow::record_route(t),
        c => c,
    };
    let route = match checked {
        Ok(r) => r,
        Err(why) => {
            s.refuse(t, &why);
            return Err(Failure::Refused(why));
        }
    };
    let r = relay::connect(&s.egress, &route, t.port).await;
    match &r {
        Err(Failure::Refused(why)) => s.refuse(t, why),
        Err(Failure::Unreachable(why)) => {
            let c = Connection::not_made(t.host.to_string(), t.port, Verdict::Failed, why);
            s.connection(c);
        }
        Ok(_) if s.egress.record => s.contacted(&route, t.port),
        _ => {}
    }
    r.map(|up| (up, route))
}

/// An HTTP client: CONNECT opens a tunnel; a request in absolute form
/// goes to its origin server, rewritten. Errors are answered in HTTP.
async fn http(c: &mut TcpStream, s: &Shared) -> Option<Opened> {
    let head = relay::read_head(c).await.ok()?;
    let req = match parse::http_request(&head) {
        Ok(r) => r,
        Err(why) => {
            let _ = c
                .write_all(&parse::http_error(400, "Bad Request", &why))
                .await;
            return None;
        }
    };
    let t = &req.target;
    let carried = match (&req.forward, &s.intercept) {
        (Some(h), Some(ic)) => http1::plain_carries(ic, h),
        _ => None,
    };
    if let Some(name) = carried {
        let why = format!(
            "the request carries the placeholder of secret {name}; a value goes only to its hosts, over TLS"
        );
        s.refuse(t, &why);
        let _ = c
            .write_all(&parse::http_error(403, "Forbidden", &why))
            .await;
        return None;
    }
    let (mut up, route) = match open(s, t).await {
        Ok(up) => up,
        Err(Failure::Refused(why)) => {
            let msg = format!("{}:{} refused: {why}", t.host, t.port);
            let _ = c
                .write_all(&parse::http_error(403, "Forbidden", &msg))
                .await;
            return None;
        }
        Err(Failure::Unreachable(why)) => {
            let msg = format!("{}:{} unreachable: {why}", t.host, t.port);
            let _ = c
                .write_all(&parse::http_error(502, "Bad Gateway", &msg))
                .await;
            return None;
        }
    };
    if req.forward.is_some()
        && s.intercept
            .as_ref()
            .is_some_and(|i| i.has_rules(&route, t.port))
    {
        let why = "a host with --allow-http rules is reached over HTTPS only (CONNECT), where each request is checked";
        s.deny(t, why.to_string());
        let _ = c.write_all(&parse::http_error(403, "Forbidden", why)).await;
        return None;
    }
    match &req.forward {
        None => c.write_all(parse::HTTP_ESTABLISHED).await.ok()?,
        Some(h) => up.write_all(h).await.ok()?,
    }
    Some(Opened {
        up,
        head: req.forward.as_ref().map_or(0, |h| h.len() as u64),
        target: req.target,
        route,
        tunnel: req.forward.is_none(),
    })
}

/// A SOCKS5 client: no authentication, CONNECT only.
async fn socks(c: &mut TcpStream, s: &Shared) -> Option<Opened> {
    let mut hdr = [0u8; 2];
    c.read_exact(&mut hdr).await.ok()?;
    let mut greeting = hdr.to_vec();
    greeting.resize(2 + hdr[1] as usize, 0);
    c.read_exact(&mut greeting[2..]).await.ok()?;
    if parse::socks_greeting(&greeting) != Ok(true) {
        let _ = c.write_all(&[5, 0xff]).await;
        return None;
    }
    c.write_all(&[5, 0]).await.ok()?;
    let mut first5 = [0u8; 5];
    c.read_exact(&mut first5).await.ok()?;
    let Some(len) = parse::socks_request_len(&first5) else {
        let _ = c
            .write_all(&parse::socks_reply(SocksRefusal::AddressType as u8))
            .await;
        return None;
    };
    let mut req = first5.to_vec();
    req.resize(len, 0);
    c.read_exact(&mut req[5..]).await.ok()?;
    let t = match parse::socks_request(&req) {
        Ok(t) => t,
        Err(r) => {
            let mut as_connect = req.clone();
            as_connect[1] = 1;
            if let (SocksRefusal::Command, Ok(t)) = (r, parse::socks_request(&as_connect)) {
                let why = format!(
                    "SOCKS5 command {} refused: only CONNECT (no BIND, no UDP)",
                    req[1]
                );
                s.refuse(&t, &why);
            }
            let _ = c.write_all(&parse::socks_reply(r as u8)).await;
            return None;
        }
    };
    let (up, route) = match open(s, &t).await {
        Ok(o) => o,
        Err(f) => {
            let rep = if matches!(f, Failure::Refused(_)) {
                2
            } else {
                4
            };
            let _ = c.write_all(&parse::socks_reply(rep)).await;
            return None;
        }
    };
    c.write_all(&parse::socks_reply(0)).await.ok()?;
    Some(Opened {
        up,
        target: t,
        route,
        tunnel: true,
        head: 0,
    })
}
