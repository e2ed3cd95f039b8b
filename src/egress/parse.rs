//! The proxy's wire formats, pure: an HTTP/1 request head (CONNECT, or a
//! request in absolute form), SOCKS5's greeting and CONNECT request, and
//! the replies.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The largest request head read (bytes up to and including the blank line).
pub const MAX_HEAD: usize = 8192;

/// Where the client wants to go: a name (as given) or an address literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A request's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// An HTTP request head, as far as the proxy reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub target: Target,
    /// `CONNECT`: a tunnel. Otherwise the head to send the origin server:
    /// the request line in origin form, then the other lines unchanged
    /// but the `Proxy-*` ones.
    pub forward: Option<Vec<u8>>,
}

/// The end of an HTTP head in `buf` (the index after `\r\n\r\n`), if
/// there is one.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Parse a complete request head (through its blank line).
pub fn http_request(head: &[u8]) -> Result<HttpRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(uri), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {first:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported protocol {version:?}"));
    }
    if method == "CONNECT" {
        let target = authority(uri, None)?;
        return Ok(HttpRequest {
            target,
            forward: None,
        });
    }
    let rest = uri.strip_prefix("http://").ok_or_else(|| {
        format!("{uri:?}: a proxy request names an http:// URL (use CONNECT for https)")
    })?;
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let target = authority(auth, Some(80))?;
    let mut out = format!("{method} {path} {version}\r\n");
    for l in lines.filter(|l| !l.is_empty()) {
        if !l.to_ascii_lowercase().starts_with("proxy-") {
            out.push_str(l);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    Ok(HttpRequest {
        target,
        forward: Some(out.into_bytes()),
    })
}

/// `host:port` or `[v6]:port` (the port may be left out when `default`
/// is given).
pub fn authority(s: &str, default: Option<u16>) -> Result<Target, String> {
    let bad = || format!("{s:?}: expected HOST:PORT");
    if s.contains('@') {
        return Err(format!(
            "{s:?}: credentials in the target are not supported"
        ));
    }
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, rest) = v6.split_once(']').ok_or_else(bad)?;
        let ip: Ipv6Addr = h.parse().map_err(|_| bad())?;
        (Host::Ip(IpAddr::V6(ip)), rest.strip_prefix(':'))
    } else {
        let (h, p) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        (host_of(h).ok_or_else(bad)?, p)
    };
    let port = match (port, default) {
        (Some(p), _) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        (None, Some(d)) => d,
        (None, None) => return Err(bad()),
    };
    Ok(Target { host, port })
}

/// A host as a client names it: an IPv4 literal, or a name of the
/// characters DNS names use.
fn host_of(h: &str) -> Option<Host> {
    if let Ok(ip) = h.parse::<Ipv4Addr>() {
        return Some(Host::Ip(IpAddr::V4(ip)));
    }
    let labels = h.strip_suffix('.').unwrap_or(h);
    let ok = h.len() <= 254
        && labels.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then(|| Host::Name(h.to_string()))
}

/// An HTTP error response that names stockade and the reason.
pub fn http_error(code: u16, phrase: &str, msg: &str) -> Vec<u8> {
    let body = format!("stockade egress proxy: {msg}\n");
    format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\nX-Stockade-Denied: {}\r\n\r\n{body}",
        body.len(),
        msg.replace(['\r', '\n'], " ")
    )
    .into_bytes()
}

/// The tunnel is open.
pub const HTTP_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// SOCKS5's greeting (`05 n methods…`): whether "no authentication" is
/// offered. Needs exactly the greeting's bytes: `buf.len() == 2 + n`.
pub fn socks_greeting(buf: &[u8]) -> Result<bool, String> {
    match buf {
        [5, n, methods @ ..] if methods.len() == *n as usize => Ok(methods.contains(&0)),
        [5, ..] => Err("truncated SOCKS5 greeting".into()),
        _ => Err("not SOCKS version 5".into()),
    }
}

/// How many bytes SOCKS5's CONNECT request needs, from its first five
/// (`05 cmd 00 atyp x`): None when the address type is unknown.
pub fn socks_request_len(first5: &[u8; 5]) -> Option<usize> {
    match first5[3] {
        1 => Some(4 + 4 + 2),
        3 => Some(4 + 1 + first5[4] as usize + 2),
        4 => Some(4 + 16 + 2),
        _ => None,
    }
}

/// Why a SOCKS5 request is refused, as its reply code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocksRefusal {
    /// 0x07: only CONNECT (no BIND, no UDP ASSOCIATE).
    Command = 7,
    /// 0x08.
    AddressType = 8,
    /// 0x01.
    General = 1,
}

/// SOCKS5's request (`05 01 00 atyp addr port`), whole.
pub fn socks_request(buf: &[u8]) -> Result<Target, SocksRefusal> {
    if buf.len() < 5 || buf[0] != 5 || buf[2] != 0 {
        return Err(SocksRefusal::General);
    }
    if buf[1] != 1 {
        return Err(SocksRefusal::Command);
    }
    let (host, rest) = match buf[3] {
        1 if buf.len() == 10 => {
            let a: [u8; 4] = buf[4..8].try_into().map_err(|_| SocksRefusal::General)?;
            (Host::Ip(IpAddr::from(a)), &buf[8..])
        }
        4 if buf.len() == 22 => {
            let a: [u8; 16] = buf[4..20].try_into().map_err(|_| SocksRefusal::General)?;
            (Host::Ip(IpAddr::from(a)), &buf[20..])
        }
        3 if buf.len() == 7 + buf[4] as usize => {
            let name = std::str::from_utf8(&buf[5..5 + buf[4] as usize])
                .map_err(|_| SocksRefusal::General)?;
            (
                host_of(name).ok_or(SocksRefusal::General)?,
                &buf[5 + buf[4] as usize..],
            )
        }
        1 | 3 | 4 => return Err(SocksRefusal::General),
        _ => return Err(SocksRefusal::AddressType),
    };
    let port = u16::from_be_bytes([rest[0], rest[1]]);
    if port == 0 {
        return Err(SocksRefusal::General);
    }
    Ok(Target { host, port })
}

/// A SOCKS5 reply with code `rep` (0: succeeded; 2: not allowed by the
/// ruleset; 4: host unreachable; 5: refused), bound address 0.0.0.0:0.
pub fn socks_reply(rep: u8) -> [u8; 10] {
    [5, rep, 0, 1, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str, port: u16) -> Target {
        Target {
            host: Host::Name(n.into()),
            port,
        }
    }

    #[test]
    fn connect_lines_give_their_target() {
        let r =
            http_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!(
            r,
            HttpRequest {
                target: name("pypi.org", 443),
                forward: None
            }
        );
        let r = http_request(b"CONNECT [::1]:22 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.target.host, Host::Ip("::1".parse().unwrap()));
        let r = http_request(b"CONNECT 10.0.0.1:8080 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.target.host, Host::Ip("10.0.0.1".parse().unwrap()));
        for bad in [
            &b"CONNECT pypi.org HTTP/1.1\r\n\r\n"[..],
            b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n",
            b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT user@pypi.org:443 HTTP/1.1\r\n\r\n",
            b"CONNECT  pypi.org:443 HTTP/1.1\r\n\r\n",
            b"CONNECT pypi.org:443 SPDY/3\r\n\r\n",
            b"CONNECT py\xffpi.org:443 HTTP/1.1\r\n\r\n",
            b"CONNECT [::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT ..pythonhosted.org:443 HTTP/1.1\r\n\r\n",
            b"CONNECT .:443 HTTP/1.1\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
            b"GET /simple/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                http_request(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn absolute_form_requests_are_rewritten_to_origin_form() {
        let r = http_request(
            b"GET http://deb.debian.org/debian/ HTTP/1.1\r\nHost: deb.debian.org\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.target, name("deb.debian.org", 80));
        assert_eq!(
            String::from_utf8(r.forward.unwrap()).unwrap(),
            "GET /debian/ HTTP/1.1\r\nHost: deb.debian.org\r\nAccept: */*\r\n\r\n"
        );
        let r = http_request(b"HEAD http://x.org:8080?q=1 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.target, name("x.org", 8080));
        assert!(r.forward.unwrap().starts_with(b"HEAD /?q=1 HTTP/1.0\r\n"));
    }

    #[test]
    fn heads_end_at_the_blank_line() {
        assert_eq!(head_end(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"CONNECT a:1 HTTP/1.1\r\n"), None);
    }

    #[test]
    fn socks5_greetings_and_requests() {
        assert_eq!(socks_greeting(&[5, 1, 0]), Ok(true));
        assert_eq!(socks_greeting(&[5, 2, 1, 2]), Ok(false));
        assert!(socks_greeting(&[4, 1, 0]).is_err());
        assert!(socks_greeting(&[5, 2, 0]).is_err());
        let mut req = vec![5, 1, 0, 3, 8];
        req.extend_from_slice(b"pypi.org");
        req.extend_from_slice(&443u16.to_be_bytes());
        assert_eq!(
            socks_request_len(&req[..5].try_into().unwrap()),
            Some(req.len())
        );
        assert_eq!(socks_request(&req), Ok(name("pypi.org", 443)));
        let v4 = [5, 1, 0, 1, 169, 254, 169, 254, 0, 80];
        assert_eq!(socks_request_len(&v4[..5].try_into().unwrap()), Some(10));
        assert_eq!(
            socks_request(&v4),
            Ok(Target {
                host: Host::Ip("169.254.169.254".parse().unwrap()),
                port: 80
            })
        );
        let mut v6 = vec![5, 1, 0, 4];
        v6.extend_from_slice(&"::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0, 22]);
        assert_eq!(
            socks_request(&v6).unwrap().host,
            Host::Ip("::1".parse().unwrap())
        );
        // UDP ASSOCIATE and BIND are refused; unknown address types too.
        assert_eq!(
            socks_request(&[5, 3, 0, 1, 8, 8, 8, 8, 0, 53]),
            Err(SocksRefusal::Command)
        );
        assert_eq!(
            socks_request(&[5, 2, 0, 1, 8, 8, 8, 8, 0, 53]),
            Err(SocksRefusal::Command)
        );
        assert_eq!(
            socks_request(&[5, 1, 0, 9, 0]),
            Err(SocksRefusal::AddressType)
        );
        assert_eq!(socks_request_len(&[5, 1, 0, 9, 0]), None);
        assert_eq!(
            socks_request(&[5, 1, 0, 1, 1, 2, 3, 4, 0, 0]),
            Err(SocksRefusal::General)
        );
        assert_eq!(
            socks_request(&[5, 1, 0, 3, 3, b'a', b' ', b'b', 0, 80]),
            Err(SocksRefusal::General)
        );
        assert_eq!(socks_reply(2)[1], 2);
    }
}
