//! An intercepted connection (`--secret`) that speaks HTTP/1.1 (see
//! `tunnel` for the handshakes): requests read one by one, each head
//! checked (`Interceptor::refusal`: a placeholder whose value may not go
//! to this host, `--allow-http` rules; refused and recorded), each bound
//! placeholder in a header replaced by its value, the body passed on as
//! framed (`Content-Length` or chunked), or read whole and substituted
//! (`body`). Responses flow back untouched. After an `Upgrade` request
//! (a websocket) the rest flows both ways untouched.

use std::sync::Arc;

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadHalf,
    WriteHalf,
};
use tokio::sync::Mutex;
use zeroize::Zeroizing;

use super::allow::Route;
use super::body::{self, replace_into};
use super::intercept::{Interceptor, Swap};
use super::parse::{self, Target};
use super::tunnel::{ClientTls, HostTls};
use super::Shared;
use crate::policy::egress::is_tchar;

/// A request's body, as its head frames it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

/// A request head ready for the real host.
#[derive(Debug)]
pub struct Head {
    /// The head with the values in it: wiped when dropped.
    pub bytes: Zeroizing<Vec<u8>>,
    pub body: Body,
    /// `Upgrade` (a websocket, …) or CONNECT: what follows is not HTTP.
    pub raw_after: bool,
    /// The body's media type (`Content-Type`'s, lower case).
    pub media: Option<String>,
    /// `Content-Encoding`'s value.
    pub encoding: Option<Vec<u8>>,
    /// `Expect: 100-continue`: the client waits for a 100 before its body.
    pub expects: bool,
}

/// Rewrite one request head (through its blank line): each placeholder
/// of `swaps` in a header line replaced by its value. Err: the 400's
/// reason.
pub fn rewrite(head: &[u8], swaps: &[Swap<'_>]) -> Result<Head, String> {
    let text = head
        .strip_suffix(b"\r\n")
        .filter(|t| t.ends_with(b"\r\n"))
        .ok_or("a request head ends with a blank line")?;
    let text = &text[..text.len() - 1];
    let mut lines = text.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    if !first.ends_with(b"\r") {
        return Err("the request line ends with CRLF".into());
    }
    let method = first.split(|b| *b == b' ').next().unwrap_or_default();
    let mut out = Zeroizing::new(Vec::with_capacity(
        head.len() + swaps.iter().map(|s| s.value.len() * 4).sum::<usize>(),
    ));
    out.extend_from_slice(first);
    out.push(b'\n');
    let (mut length, mut chunked, mut raw_after) = (None, false, method == b"CONNECT");
    let (mut media, mut encoding, mut expects) = (None, None, false);
    for line in lines {
        let l = line
            .strip_suffix(b"\r")
            .ok_or("a header line ends with CRLF")?;
        if l.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err("folded header lines are not accepted".into());
        }
        let colon = l
            .iter()
            .position(|b| *b == b':')
            .ok_or("a header line without `:`")?;
        let (name, value) = (&l[..colon], trim(&l[colon + 1..]));
        // A name the host could read otherwise ("Content-Length :") is
        // refused, as RFC 9112 asks of servers and proxies.
        if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) {
            return Err("a header name that is not a token".into());
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("a Content-Length that is not a number")?;
            if length.is_some_and(|l| l != n) {
                return Err("two different Content-Lengths".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = value
                .rsplit(|b| *b == b',')
                .next()
                .is_some_and(|c| trim(c).eq_ignore_ascii_case(b"chunked"));
            if !chunked {
                return Err("a Transfer-Encoding other than chunked last".into());
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            raw_after = true;
        } else if name.eq_ignore_ascii_case(b"content-type") {
            media = Some(body::media_type(value));
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            encoding = Some(value.to_vec());
        } else if name.eq_ignore_ascii_case(b"expect") {
            expects = value.eq_ignore_ascii_case(b"100-continue");
        }
        out.extend_from_slice(&l[..colon + 1]);
        replace_into(&mut out, &l[colon + 1..], swaps);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    // Both framings: the host might read the other one, and the rest of
    // the body as a request nobody checked (RFC 9112 6.3).
    let body = match (chunked, length) {
        (true, Some(_)) => return Err("both Content-Length and Transfer-Encoding".into()),
        (true, None) => Body::Chunked,
        (false, Some(n)) => Body::Length(n),
        (false, None) => Body::None,
    };
    Ok(Head {
        bytes: out,
        body,
        raw_after,
        media,
        encoding,
        expects,
    })
}

/// A rewritten head framing a body of `n` bytes by `Content-Length`
/// alone (its `Transfer-Encoding` and `Expect` lines left out).
pub fn relength(head: &[u8], n: usize) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(head.len() + 24));
    let mut lines = head.split_inclusive(|b| *b == b'\n');
    out.extend_from_slice(lines.next().unwrap_or_default());
    for l in lines.filter(|l| *l != b"\r\n") {
        let name = l.split(|b| *b == b':').next().unwrap_or_default();
        if [&b"content-length"[..], b"transfer-encoding", b"expect"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
        {
            continue;
        }
        out.extend_from_slice(l);
    }
    out.extend_from_slice(format!("Content-Length: {n}\r\n\r\n").as_bytes());
    out
}

pub fn trim(v: &[u8]) -> &[u8] {
    let s = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let e = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &v[s..e]
}

/// Serve the HTTP/1.1 requests of one intercepted tunnel to
/// `route`:`port` (the client asked for `t`). Bytes each way are counted.
pub async fn serve(
    c: ClientTls,
    up: HostTls,
    t: &Target,
    route: &Route,
    ic: &Interceptor,
    s: &Shared,
) -> (u64, u64) {
    let (cr, cw) = tokio::io::split(c);
    let (ur, uw) = tokio::io::split(up);
    let cw = Arc::new(Mutex::new(cw));
    let back = tokio::spawn(responses(ur, cw.clone()));
    let sent = requests(BufReader::new(cr), uw, cw.clone(), t, route, ic, s).await;
    let received = match sent.1 {
        // Refused: what the host still sends is not wanted.
        true => {
            back.abort();
            0
        }
        false => back.await.unwrap_or(0),
    };
    let _ = cw.lock().await.shutdown().await;
    (sent.0, received)
}

/// The host's bytes back to the client, as they come: how many.
async fn responses(mut ur: ReadHalf<HostTls>, cw: Arc<Mutex<WriteHalf<ClientTls>>>) -> u64 {
    let mut buf = vec![0u8; 16 * 1024];
    let mut n = 0u64;
    loop {
        let got = match ur.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(got) => got,
        };
        let mut w = cw.lock().await;
        if w.write_all(&buf[..got]).await.is_err() || w.flush().await.is_err() {
            break;
        }
        n += got as u64;
    }
    let _ = cw.lock().await.shutdown().await;
    n
}

/// The client's requests to the host, until either side ends (or one is
/// refused: true). Bytes sent to the host.
async fn requests(
    mut cr: BufReader<ReadHalf<ClientTls>>,
    mut uw: WriteHalf<HostTls>,
    cw: Arc<Mutex<WriteHalf<ClientTls>>>,
    t: &Target,
    route: &Route,
    ic: &Interceptor,
    s: &Shared,
) -> (u64, bool) {
    let swaps = ic.swaps(route, t.port);
    let mut sent = 0u64;
    loop {
        let head = match read_head(&mut cr).await {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(why) => {
                refuse(&cw, 400, "Bad Request", &why).await;
                return (sent, true);
            }
        };
        let mut words = head.split(|b| *b == b' ');
        let method = String::from_utf8_lossy(words.next().unwrap_or_default()).into_owned();
        let target = String::from_utf8_lossy(words.next().unwrap_or_default()).into_owned();
        if let Some(why) = ic.refusal(route, t.port, &method, &target, &head) {
            s.deny(t, why.clone());
            refuse(&cw, 403, "Forbidden", &why).await;
            return (sent, true);
        }
        let h = match rewrite(&head, &swaps) {
            Ok(h) => h,
            Err(why) => {
                refuse(&cw, 400, "Bad Request", &why).await;
                return (sent, true);
            }
        };
        // What follows an upgrade is not read request by request.
        if h.raw_after && ic.has_rules(route, t.port) {
            let why = "an upgrade (or CONNECT) to a host with --allow-http rules: what follows could not be checked";
            s.deny(t, why.to_string());
            refuse(&cw, 403, "Forbidden", why).await;
            return (sent, true);
        }
        let media = h
            .media
            .as_deref()
            .filter(|_| body::identity(h.encoding.as_deref()));
        let into_body = match (media, h.body) {
            (Some(m), Body::Length(_) | Body::Chunked) if !h.raw_after => {
                ic.body_swaps(route, t.port, m)
            }
            _ => Vec::new(),
        };
        if !into_body.is_empty() {
            let _turn = ic.budget.turn().await;
            match whole(&mut cr, &cw, &h, &into_body).await {
                Ok(bytes) => match ic.foreign(&bytes, Some((route, t.port))) {
                    None => match uw.write_all(&bytes).await {
                        Ok(()) => sent += bytes.len() as u64,
                        Err(_) => break,
                    },
                    Some(name) => {
                        let why = format!("the request's body carries the placeholder of secret {name}, which is not bound to this host");
                        s.deny(t, why.clone());
                        refuse(&cw, 403, "Forbidden", &why).await;
                        return (sent, true);
                    }
                },
                Err((code, phrase, why, denied)) => {
                    if denied {
                        s.deny(t, why.clone());
                    }
                    refuse(&cw, code, phrase, &why).await;
                    return (sent, true);
                }
            }
            if uw.flush().await.is_err() {
                break;
            }
            continue;
        }
        if uw.write_all(&h.bytes).await.is_err() {
            break;
        }
        sent += h.bytes.len() as u64;
        let body = match h.body {
            Body::None => Ok(0),
            Body::Length(n) => copy_n(&mut cr, &mut uw, n).await,
            Body::Chunked => chunked(&mut cr, &mut uw).await,
        };
        match body {
            Ok(n) => sent += n,
            Err(_) => break,
        }
        if uw.flush().await.is_err() {
            break;
        }
        if h.raw_after {
            sent += tokio::io::copy_buf(&mut cr, &mut uw).await.unwrap_or(0);
            break;
        }
    }
    let _ = uw.shutdown().await;
    (sent, false)
}

/// A refusal: its status, phrase and reason, and whether it is recorded.
type Refused = (u16, &'static str, String, bool);

/// The request `h`'s body read whole (a 100 sent first when the client
/// waits for one) and each placeholder of `swaps` replaced: the head and
/// body to send. A body over [`body::MAX_BODY`] is refused.
async fn whole(
    cr: &mut BufReader<ReadHalf<ClientTls>>,
    cw: &Mutex<WriteHalf<ClientTls>>,
    h: &Head,
    swaps: &[Swap<'_>],
) -> Result<Zeroizing<Vec<u8>>, Refused> {
    let media = h.media.as_deref().unwrap_or_default();
    let large = || (413, "Content Too Large", body::too_large(media), true);
    if matches!(h.body, Body::Length(n) if n > body::MAX_BODY as u64) {
        return Err(large());
    }
    if h.expects {
        let mut w = cw.lock().await;
        let sent = w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
        if sent.and(w.flush().await).is_err() {
            return Err((400, "Bad Request", "the client is gone".into(), false));
        }
    }
    let bad = |e: std::io::Error| {
        (
            400,
            "Bad Request",
            format!("the request's body: {e}"),
            false,
        )
    };
    let read = match h.body {
        Body::Length(n) => {
            let mut b = Zeroizing::new(vec![0u8; n as usize]);
            cr.read_exact(&mut b).await.map(|_| b).map_err(bad)?
        }
        Body::Chunked => dechunk(cr).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => large(),
            _ => bad(e),
        })?,
        Body::None => Zeroizing::new(Vec::new()),
    };
    let b = body::substitute(&read, swaps);
    let mut out = relength(&h.bytes, b.len());
    out.extend_from_slice(&b);
    Ok(out)
}

/// A chunked body's data, read whole (at most [`body::MAX_BODY`] bytes:
/// else `FileTooLarge`); one with trailers is refused (they would be
/// dropped).
async fn dechunk<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut out = Zeroizing::new(Vec::new());
    loop {
        let size = chunk_size(&read_line(r).await?)?;
        if size == 0 {
            if read_line(r).await? != b"\r\n" {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "trailers after a body a secret's value goes into",
                ));
            }
            return Ok(out);
        }
        if out.len() as u64 + size > body::MAX_BODY as u64 {
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        let at = out.len();
        out.resize(at + size as usize, 0);
        r.read_exact(&mut out[at..]).await?;
        if read_line(r).await? != b"\r\n" {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "bad chunk",
            ));
        }
    }
}

/// A chunk's size line's size: hex digits only (no sign, no space), as
/// strict as any host.
fn chunk_size(line: &[u8]) -> std::io::Result<u64> {
    line.split(|b| *b == b';' || *b == b'\r')
        .next()
        .filter(|h| !h.is_empty() && h.len() <= 16 && h.iter().all(u8::is_ascii_hexdigit))
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk"))
}

/// An error answered to the client, and its end.
async fn refuse(cw: &Mutex<WriteHalf<ClientTls>>, code: u16, phrase: &str, why: &str) {
    let mut w = cw.lock().await;
    let _ = w.write_all(&parse::http_error(code, phrase, why)).await;
    let _ = w.shutdown().await;
}

/// One request head, through its blank line; None at a clean end.
async fn read_head<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> Result<Option<Vec<u8>>, String> {
    let mut head = Vec::with_capacity(512);
    loop {
        let before = head.len();
        let n = (&mut *r)
            .take((parse::MAX_HEAD - before) as u64 + 1)
            .read_until(b'\n', &mut head)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return match head.is_empty() {
                true => Ok(None),
                false => Err("the connection ended inside a request head".into()),
            };
        }
        if head.len() > parse::MAX_HEAD {
            return Err(format!(
                "a request head larger than {} bytes",
                parse::MAX_HEAD
            ));
        }
        // Blank lines before a request are allowed (RFC 9112 2.2).
        if head == b"\r\n" {
            head.clear();
            continue;
        }
        if head.ends_with(b"\r\n\r\n") {
            return Ok(Some(head));
        }
    }
}

/// `n` bytes from `r` to `w`.
async fn copy_n<R, W>(r: &mut BufReader<R>, w: &mut W, n: u64) -> std::io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let got = tokio::io::copy_buf(&mut r.take(n), w).await?;
    if got < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(got)
}

/// A chunked body (its chunks, the last one, its trailers) from `r` to
/// `w`, as it is.
async fn chunked<R, W>(r: &mut BufReader<R>, w: &mut W) -> std::io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk");
    let mut n = 0u64;
    loop {
        let line = read_line(r).await?;
        let size = chunk_size(&line)?;
        w.write_all(&line).await?;
        n += line.len() as u64;
        if size == 0 {
            loop {
                let t = read_line(r).await?;
                w.write_all(&t).await?;
                n += t.len() as u64;
                if t == b"\r\n" {
                    return Ok(n);
                }
            }
        }
        n += copy_n(r, w, size).await?;
        let end = read_line(r).await?;
        if end != b"\r\n" {
            return Err(bad());
        }
        w.write_all(&end).await?;
        n += 2;
    }
}

/// One line (through `\n`), at most 4 KiB.
async fn read_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    (&mut *r).take(4096).read_until(b'\n', &mut line).await?;
    if !line.ends_with(b"\n") {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line)
}

/// Whether a plain-HTTP request head carries any secret's placeholder
/// (a value never goes out in plain text): that secret's name.
pub fn plain_carries<'a>(ic: &'a Interceptor, head: &[u8]) -> Option<&'a str> {
    ic.foreign(head, None)
}

#[cfg(test)]
mod tests {
    use super::super::intercept::contains;
    use super::*;

    #[test]
    fn a_substituted_body_is_framed_by_its_new_length() {
        let h = rewrite(
            b"POST /v1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json; charset=utf-8\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nX-K: v\r\n\r\n",
            &[],
        )
        .unwrap();
        assert_eq!(h.media.as_deref(), Some("application/json"));
        assert!(h.expects && h.body == Body::Chunked);
        assert_eq!(
            String::from_utf8(relength(&h.bytes, 12).to_vec()).unwrap(),
            "POST /v1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json; charset=utf-8\r\nX-K: v\r\nContent-Length: 12\r\n\r\n"
        );
    }

    fn swaps() -> Vec<Swap<'static>> {
        vec![Swap {
            placeholder: b"sk-PLACEHOLDERxxxxxxxx",
            value: b"sk-realvalue",
        }]
    }

    #[test]
    fn bound_placeholders_in_headers_become_values() {
        let h = rewrite(
            b"POST /v1?k=sk-PLACEHOLDERxxxxxxxx HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer sk-PLACEHOLDERxxxxxxxx\r\nx-api-key:sk-PLACEHOLDERxxxxxxxx\r\nContent-Length: 5\r\n\r\n",
            &swaps(),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(h.bytes.to_vec()).unwrap(),
            "POST /v1?k=sk-PLACEHOLDERxxxxxxxx HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer sk-realvalue\r\nx-api-key:sk-realvalue\r\nContent-Length: 5\r\n\r\n"
        );
        assert_eq!(h.body, Body::Length(5));
        assert!(!h.raw_after);
    }

    #[test]
    fn bodies_are_framed_and_odd_heads_refused() {
        let h = rewrite(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            &[],
        )
        .unwrap();
        assert_eq!(h.body, Body::Chunked);
        let h = rewrite(
            b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            &[],
        )
        .unwrap();
        assert!(h.raw_after && h.body == Body::None);
        for bad in [
            &b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\nA: b\n\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
        ] {
            assert!(
                rewrite(bad, &[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(contains(b"abc sk-P def", b"sk-P") && !contains(b"abc", b""));
    }
}
