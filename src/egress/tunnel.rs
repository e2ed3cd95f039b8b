//! An intercepted tunnel (a secret's host, or one with `--allow-http`
//! rules): the jail's ClientHello read first, for the protocols its
//! client offers (ALPN); TLS begun with the real host (verified),
//! offering HTTP/2 first when the jail's client offered it, else
//! HTTP/1.1 alone; the jail's handshake finished (a certificate from the
//! run's authority) with the protocol the host chose; then the requests,
//! by `http2` or `http1`. The proxy never translates between the two.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use super::allow::Route;
use super::intercept::{server_name, Interceptor};
use super::parse::{self, Target};
use super::{http1, http2, Shared};

/// How long either TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(30);

pub type ClientTls = tokio_rustls::server::TlsStream<TcpStream>;
pub type HostTls = tokio_rustls::client::TlsStream<TcpStream>;

/// Serve one intercepted tunnel to `route`:`port` (the client asked for
/// `t`): the handshakes, then the requests. Bytes each way are counted.
pub async fn serve(
    c: TcpStream,
    up: TcpStream,
    t: &Target,
    route: &Route,
    ic: &Interceptor,
    s: &Arc<Shared>,
) -> (u64, u64) {
    let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), c);
    let Ok(Ok(start)) = tokio::time::timeout(HANDSHAKE, hello).await else {
        return (0, 0);
    };
    let h2 = start
        .client_hello()
        .alpn()
        .is_some_and(|mut offered| offered.any(|p| p == b"h2"));
    let up = connect(up, route, ic, h2).await;
    let chose_h2 = matches!(&up, Ok(u) if u.get_ref().1.alpn_protocol() == Some(b"h2"));
    let host = t.host.to_string();
    let Ok(config) = ic.server(&host, chose_h2) else {
        return (0, 0);
    };
    let accepted = tokio::time::timeout(HANDSHAKE, start.into_stream(config)).await;
    let Ok(Ok(mut c)) = accepted else {
        return (0, 0);
    };
    match up {
        Ok(up) if chose_h2 => http2::serve(c, up, t, route, s).await,
        Ok(up) => http1::serve(c, up, t, route, ic, s).await,
        Err(why) => {
            let msg = format!("{host}:{} unreachable: {why}", t.port);
            let _ = c
                .write_all(&parse::http_error(502, "Bad Gateway", &msg))
                .await;
            let _ = c.shutdown().await;
            (0, 0)
        }
    }
}

/// TLS to the real host, verified; offering HTTP/2 first when `h2`.
async fn connect(
    up: TcpStream,
    route: &Route,
    ic: &Interceptor,
    h2: bool,
) -> Result<HostTls, String> {
    let config = ic.client(h2)?;
    let name = server_name(route)?;
    match tokio::time::timeout(HANDSHAKE, TlsConnector::from(config).connect(name, up)).await {
        Ok(Ok(u)) => Ok(u),
        Ok(Err(e)) => Err(format!("TLS: {e}")),
        Err(_) => Err("TLS: no answer".into()),
    }
}
