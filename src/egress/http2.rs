//! An intercepted connection that speaks HTTP/2 on both sides (see
//! `tunnel`; the jail's client and the real host both chose it): hyper
//! serves the jail and holds one HTTP/2 connection to the host, and each
//! stream is forwarded on its own, decided as HTTP/1.1's requests are
//! (`Interceptor::refusal`: refused streams get a 403 and a record, the
//! connection's other streams go on), each bound placeholder in a header
//! replaced by its value, the body streamed, or read whole and
//! substituted (`body`). Responses stream back untouched. CONNECT (an
//! extended CONNECT's websocket too) is refused: what follows it could
//! not be checked.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::header::{HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use zeroize::Zeroizing;

use super::allow::Route;
use super::body::{self, replace_into};
use super::intercept::contains;
use super::parse::Target;
use super::relay::{Counted, Live};
use super::tunnel::{ClientTls, HostTls};
use super::Shared;

type Sent = BoxBody<Bytes, hyper::Error>;

/// Serve the HTTP/2 streams of one intercepted tunnel to `route`:`port`
/// (the client asked for `t`) until either side's connection ends. The
/// bytes each way are the HTTP/2 frames' to and from the host.
pub async fn serve(
    c: ClientTls,
    up: HostTls,
    t: &Target,
    route: &Route,
    s: &Arc<Shared>,
) -> (u64, u64) {
    let live = Arc::new(Live::default());
    let up = Counted {
        io: up,
        live: live.clone(),
    };
    let client = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(up))
        .await;
    let Ok((send, conn)) = client else {
        return (0, 0);
    };
    let mut host = tokio::spawn(conn);
    let f = Arc::new(Forward {
        s: s.clone(),
        t: t.clone(),
        route: route.clone(),
        send,
    });
    let service = hyper::service::service_fn(move |req| {
        let f = f.clone();
        async move { Ok::<_, Infallible>(f.forward(req).await) }
    });
    let jail = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(c), service);
    tokio::select! {
        _ = jail => {}
        _ = &mut host => {}
    }
    host.abort();
    live.counts()
}

/// What each stream is forwarded with.
struct Forward {
    s: Arc<Shared>,
    t: Target,
    route: Route,
    send: SendRequest<Sent>,
}

impl Forward {
    /// One stream: refused, or sent on to the host and its response
    /// given back.
    async fn forward(self: Arc<Self>, req: Request<Incoming>) -> Response<Sent> {
        let Some(ic) = self.s.intercept.as_ref() else {
            return answer(StatusCode::BAD_GATEWAY, "no interception");
        };
        let (t, route, port) = (&self.t, &self.route, self.t.port);
        let (mut parts, body) = req.into_parts();
        if parts.method == Method::CONNECT {
            return self.refuse(
                StatusCode::FORBIDDEN,
                "CONNECT inside an intercepted HTTP/2 connection: what follows could not be checked",
            );
        }
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let target = target.to_string();
        let mut head = format!("{} {target} HTTP/2\r\n", parts.method).into_bytes();
        for (n, v) in &parts.headers {
            head.extend_from_slice(n.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(v.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        if let Some(why) = ic.refusal(route, port, parts.method.as_str(), &target, &head) {
            return self.refuse(StatusCode::FORBIDDEN, &why);
        }
        let swaps = ic.swaps(route, port);
        for v in parts.headers.values_mut() {
            if !swaps.iter().any(|s| contains(v.as_bytes(), s.placeholder)) {
                continue;
            }
            let mut out = Zeroizing::new(Vec::with_capacity(v.len() + 64));
            replace_into(&mut out, v.as_bytes(), &swaps);
            // The value holds no CR, LF or NUL (`plan::secrets`).
            let Ok(mut nv) = HeaderValue::from_bytes(&out) else {
                return answer(StatusCode::BAD_REQUEST, "a header the value cannot go into");
            };
            // Never put in the HPACK table the host keeps.
            nv.set_sensitive(true);
            *v = nv;
        }
        let media = parts
            .headers
            .get(CONTENT_TYPE)
            .map(|v| body::media_type(v.as_bytes()));
        let identity = body::identity(parts.headers.get(CONTENT_ENCODING).map(|v| v.as_bytes()));
        let into_body = match &media {
            Some(m) if identity => ic.body_swaps(route, port, m),
            _ => Vec::new(),
        };
        let body = match into_body.is_empty() {
            true => body.boxed(),
            false => {
                let _turn = ic.budget.turn().await;
                let read = match whole(body).await {
                    Ok(b) => b,
                    Err(None) => {
                        let why = body::too_large(media.as_deref().unwrap_or_default());
                        return self.refuse(StatusCode::PAYLOAD_TOO_LARGE, &why);
                    }
                    Err(Some(e)) => {
                        let why = format!("the request's body: {e}");
                        return answer(StatusCode::BAD_REQUEST, &why);
                    }
                };
                if let Some(name) = ic.foreign(&read, Some((route, port))) {
                    let why = format!("the request's body carries the placeholder of secret {name}, which is not bound to this host");
                    return self.refuse(StatusCode::FORBIDDEN, &why);
                }
                let b = body::substitute(&read, &into_body);
                parts
                    .headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(b.len()));
                let b = Bytes::from(b.to_vec());
                Full::new(b).map_err(|never| match never {}).boxed()
            }
        };
        let mut send = self.send.clone();
        match send.send_request(Request::from_parts(parts, body)).await {
            Ok(r) => r.map(BodyExt::boxed),
            Err(e) => answer(StatusCode::BAD_GATEWAY, &format!("{}:{port}: {e}", t.host)),
        }
    }

    /// A refusal, recorded, as the stream's answer.
    fn refuse(&self, code: StatusCode, why: &str) -> Response<Sent> {
        self.s.deny(&self.t, why.to_string());
        answer(code, why)
    }
}

/// A body read whole: Err(None) past [`body::MAX_BODY`] bytes (the rest
/// is read and dropped in the background, for a while, so that the
/// client reads the refusal rather than a reset stream).
async fn whole(mut b: Incoming) -> Result<Vec<u8>, Option<hyper::Error>> {
    let mut out = Vec::new();
    while let Some(f) = b.frame().await {
        let Ok(data) = f.map_err(Some)?.into_data() else {
            continue;
        };
        if out.len() + data.len() > body::MAX_BODY {
            tokio::spawn(tokio::time::timeout(Duration::from_secs(30), async move {
                while let Some(Ok(_)) = b.frame().await {}
            }));
            return Err(None);
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}

/// The proxy's own answer, as `parse::http_error` words it.
fn answer(code: StatusCode, why: &str) -> Response<Sent> {
    let body = format!("stockade egress proxy: {why}\n");
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if let Ok(v) = HeaderValue::from_str(&why.replace(['\r', '\n'], " ")) {
        h.insert("x-stockade-denied", v);
    }
    r
}
