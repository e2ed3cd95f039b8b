//! The egress allowlist (`--allow-host`, `network.allow`): which hosts and
//! ports the jail's proxy may connect to. Pure: parsing and matching only.
//!
//! An entry is `NAME[:PORT]`, `*.SUFFIX[:PORT]`, `IPV4[:PORT]`,
//! `[IPV6][:PORT]`, or a range: `IPV4/N[:PORT]`, `[IPV6/N][:PORT]`. Without a port, 80 and 443 are allowed. `*.example.com`
//! matches every name below `example.com` (at any depth), never
//! `example.com` itself. Names are compared in lower case, without a
//! trailing dot. An address (or range) listed as an IP literal is the one
//! way to allow a loopback, private, link-local or metadata address.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use super::{Policy, PolicyError};

/// The ports an entry without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllowHost {
    pub host: HostPattern,
    /// None: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

/// What an entry's host part matches.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HostPattern {
    /// One name, lower case, no trailing dot.
    Name(String),
    /// Every name ending in `.SUFFIX` (the suffix without its dot).
    Below(String),
    /// One address, listed explicitly.
    Ip(IpAddr),
    /// A range of addresses (CIDR), listed explicitly: the address with
    /// its host bits zero, and the prefix length.
    Net(IpAddr, u8),
}

impl AllowHost {
    /// Parse one entry; the error says why, without the flag or field
    /// (the caller names it).
    pub fn parse(s: &str) -> Result<AllowHost, String> {
        let (host, port) = split_port(s)?;
        let host = if let Some(v6) = host.strip_prefix('[') {
            let v6 = v6
                .strip_suffix(']')
                .ok_or_else(|| format!("{s:?}: an IPv6 address is written [ADDR]"))?;
            let (a, prefix) = match v6.split_once('/') {
                Some((a, n)) => (a, Some(n)),
                None => (v6, None),
            };
            let ip = a
                .parse::<std::net::Ipv6Addr>()
                .map_err(|_| format!("{s:?}: {a:?} is not an IPv6 address"))?;
            net(s, IpAddr::V6(ip), prefix)?
        } else if let Some((a, n)) = host.split_once('/') {
            let ip = a.parse::<std::net::Ipv4Addr>().map_err(|_| {
                format!("{s:?}: {a:?} is not an IPv4 address (a range is A.B.C.D/N or [ADDR/N])")
            })?;
            net(s, IpAddr::V4(ip), Some(n))?
        } else if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
            HostPattern::Ip(IpAddr::V4(ip))
        } else if let Some(suffix) = host.strip_prefix("*.") {
            HostPattern::Below(check_name(s, suffix)?)
        } else {
            HostPattern::Name(check_name(s, host)?)
        };
        Ok(AllowHost { host, port })
    }

    /// Whether this entry allows `port`.
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether this entry allows the name `name` (normalized by
    /// [`normalize_name`]) on `port`.
    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        let host = match &self.host {
            HostPattern::Name(n) => n == name,
            HostPattern::Below(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostPattern::Ip(_) | HostPattern::Net(..) => false,
        };
        host && self.allows_port(port)
    }

    /// Whether this entry lists the address `ip` explicitly (or a range
    /// holding it), for `port`.
    pub fn allows_ip(&self, ip: IpAddr, port: u16) -> bool {
        let listed = match self.host {
            HostPattern::Ip(a) => a == ip,
            HostPattern::Net(a, n) => masked(ip, n) == Some(a),
            _ => false,
        };
        listed && self.allows_port(port)
    }
}

impl AllowHost {
    /// Whether this entry allows everything `other` names: each of its
    /// ports, and its host (the same name, or one below this entry's
    /// `*.SUFFIX`; the same address, or one in this entry's range). A
    /// secret's host entry must be covered by some entry of the
    /// allowlist it runs under (`stockade serve`).
    pub fn covers(&self, other: &AllowHost) -> bool {
        let ports = match other.port {
            Some(p) => self.allows_port(p),
            None => DEFAULT_PORTS.iter().all(|p| self.allows_port(*p)),
        };
        let below = |name: &str, suffix: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        };
        let host = match (&self.host, &other.host) {
            (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
            (HostPattern::Below(s), HostPattern::Name(b)) => below(b, s),
            (HostPattern::Below(s), HostPattern::Below(t)) => s == t || below(t, s),
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            (HostPattern::Net(a, n), HostPattern::Ip(b)) => masked(*b, *n) == Some(*a),
            (HostPattern::Net(a, n), HostPattern::Net(b, m)) => {
                n <= m && masked(*b, *n) == Some(*a)
            }
            _ => false,
        };
        ports && host
    }
}

/// `ip` with all but its first `prefix` bits zero (None: another family,
/// or a prefix longer than its bits).
fn masked(ip: IpAddr, prefix: u8) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) if prefix <= 32 => {
            let m = u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0);
            Some(IpAddr::V4((u32::from(a) & m).into()))
        }
        IpAddr::V6(a) if prefix <= 128 => {
            let m = u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0);
            Some(IpAddr::V6((u128::from(a) & m).into()))
        }
        _ => None,
    }
}

/// An address, or a range when a prefix length is given: its host bits
/// must be zero.
fn net(whole: &str, ip: IpAddr, prefix: Option<&str>) -> Result<HostPattern, String> {
    let Some(n) = prefix else {
        return Ok(HostPattern::Ip(ip));
    };
    let bits = if ip.is_ipv4() { 32 } else { 128 };
    let n = n
        .parse::<u8>()
        .ok()
        .filter(|n| *n <= bits)
        .ok_or_else(|| format!("{whole:?}: {n:?} is not a prefix length (0 to {bits})"))?;
    match masked(ip, n) {
        Some(m) if m == ip => Ok(HostPattern::Net(ip, n)),
        Some(m) => Err(format!(
            "{whole:?}: {ip} has bits set past /{n} (the range is {m}/{n})"
        )),
        None => Err(format!("{whole:?}: not a range")),
    }
}

impl fmt::Display for AllowHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(n) => write!(f, "{n}")?,
            HostPattern::Below(s) => write!(f, "*.{s}")?,
            HostPattern::Ip(IpAddr::V4(a)) => write!(f, "{a}")?,
            HostPattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            HostPattern::Net(IpAddr::V4(a), n) => write!(f, "{a}/{n}")?,
            HostPattern::Net(IpAddr::V6(a), n) => write!(f, "[{a}/{n}]")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// A secret bound to hosts (`--secret NAME:HOST[,HOST…]`): the jail's
/// variable NAME holds a placeholder, and the proxy replaces it by the value
/// in the request headers it sends the hosts named (entries as
/// [`AllowHost`]'s, over TLS only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Secret {
    /// The variable's name, in the caller's environment and the jail's.
    pub name: String,
    pub hosts: Vec<AllowHost>,
    /// Where the value is read (`--secret-file NAME=PATH`); None: the
    /// caller's environment variable NAME.
    #[serde(default)]
    pub file: Option<PathBuf>,
}

impl Secret {
    /// Parse `NAME:HOST[,HOST…]`; the error says why, without the flag.
    pub fn parse(s: &str) -> Result<Secret, String> {
        let (name, hosts) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected NAME:HOST[,HOST…]"))?;
        if !is_env_name(name) {
            return Err(format!(
                "{s:?}: {name:?} is not a variable name (letters, digits and `_`, not first a digit)"
            ));
        }
        let hosts = hosts
            .split(',')
            .map(AllowHost::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Secret {
            name: name.to_string(),
            hosts,
            file: None,
        })
    }

    /// Whether the value may go to the name `name` (normalized) on `port`.
    pub fn binds_name(&self, name: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.allows_name(name, port))
    }

    /// Whether the value may go to the address `ip` on `port`.
    pub fn binds_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.hosts.iter().any(|h| h.allows_ip(ip, port))
    }
}

/// A rule for the requests to an intercepted host (`--allow-http
/// 'GET,POST api.example.com/v1/*'`): once a host has one, only the
/// requests some rule of its allows go there, and the proxy intercepts its
/// TLS to see them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpRule {
    /// Upper case; empty: any method.
    pub methods: Vec<String>,
    pub host: AllowHost,
    /// The path (before any `?`) it allows; `*` stands for any run of
    /// characters, `/` included.
    pub path: String,
}

impl HttpRule {
    /// Parse `METHODS HOST[:PORT]/PATH` (`*` for any method); the error
    /// says why, without the flag.
    pub fn parse(s: &str) -> Result<HttpRule, String> {
        let bad = |why: &str| format!("{s:?}: {why} (expected 'GET,POST HOST[:PORT]/PATH')");
        let (methods, rest) = s
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad("no method list"))?;
        let methods = match methods {
            "*" => Vec::new(),
            m => m
                .split(',')
                .map(|m| {
                    let ok = !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic());
                    ok.then(|| m.to_ascii_uppercase())
                        .ok_or_else(|| bad(&format!("{m:?} is not a method")))
                })
                .collect::<Result<_, _>>()?,
        };
        let rest = rest.trim();
        let slash = rest.find('/').ok_or_else(|| bad("no /PATH"))?;
        let host = AllowHost::parse(&rest[..slash])?;
        let path = rest[slash..].to_string();
        if path.contains(char::is_whitespace) || path.contains('?') {
            return Err(bad("a path without spaces or `?`"));
        }
        Ok(HttpRule {
            methods,
            host,
            path,
        })
    }

    /// Whether it allows `method` on `path` (its `?…` left out).
    pub fn allows(&self, method: &str, path: &str) -> bool {
        let path = path.split('?').next().unwrap_or_default();
        (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && glob(self.path.as_bytes(), path.as_bytes())
    }
}

impl fmt::Display for HttpRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.methods.is_empty() {
            true => write!(f, "* {}{}", self.host, self.path),
            false => write!(f, "{} {}{}", self.methods.join(","), self.host, self.path),
        }
    }
}

/// Whether `s` matches `pat`, where `*` is any run of bytes.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// A variable name: ASCII letters, digits and `_`, not first a digit.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The policy's secrets: each named once, under an allowlist, and not set
/// in the jail's environment by anything else (`--keep-env` would copy the
/// value itself).
pub fn check_secrets(p: &Policy) -> Result<(), PolicyError> {
    for (i, s) in p.secrets.iter().enumerate() {
        let err = |why: String| PolicyError::new("--secret", format!("{}: {why}", s.name));
        if !is_env_name(&s.name) {
            return Err(err("not a variable name".into()));
        }
        if s.hosts.is_empty() {
            return Err(err("names no host".into()));
        }
        if p.secrets[..i].iter().any(|o| o.name == s.name) {
            return Err(err("named twice".into()));
        }
        if p.env
            .iter()
            .any(|(k, _)| k.as_encoded_bytes() == s.name.as_bytes())
        {
            return Err(err(
                "also set in the jail's environment (--keep-env, --setenv or a profile); \
                 the jail gets a placeholder, never the value"
                    .into(),
            ));
        }
        if p.allow_hosts.is_empty() {
            return Err(err(
                "needs an egress allowlist (--allow-host) naming its hosts".into(),
            ));
        }
    }
    if !p.http_rules.is_empty() && p.allow_hosts.is_empty() {
        return Err(PolicyError::new(
            "--allow-http",
            "needs an egress allowlist (--allow-host) naming its hosts",
        ));
    }
    if !p.egress_cas.is_empty() && p.secrets.is_empty() && p.http_rules.is_empty() {
        return Err(PolicyError::new(
            "--egress-ca",
            "only the hosts of a secret or an --allow-http rule are intercepted: give one of them too",
        ));
    }
    Ok(())
}

/// A host name as the proxy compares it: lower case, no trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// `HOST` and its port, when one is given after the last `:` (outside
/// brackets).
fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
    let colon = match s.rfind(':') {
        Some(i) if !s[i..].contains(']') => i,
        _ => return Ok((s, None)),
    };
    let (host, port) = (&s[..colon], &s[colon + 1..]);
    if host.contains(':') && !host.starts_with('[') {
        return Err(format!("{s:?}: an IPv6 address is written [ADDR]:PORT"));
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{s:?}: {port:?} is not a port (1 to 65535)"))?;
    Ok((host, Some(port)))
}

/// A DNS name: labels of letters, digits, `-` and `_`, 1 to 63 bytes each,
/// 253 in all; lower-cased, without a trailing dot.
fn check_name(whole: &str, name: &str) -> Result<String, String> {
    let n = normalize_name(name);
    let bad = |why: &str| Err(format!("{whole:?}: {why}"));
    if n.is_empty() {
        return bad("no host name");
    }
    if n.len() > 253 {
        return bad("a host name is at most 253 bytes");
    }
    for label in n.split('.') {
        if label.is_empty() || label.len() > 63 {
            return bad("each part of a host name is 1 to 63 bytes");
        }
        if label == "*" {
            return bad("`*` only as the whole first part (*.example.com)");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || label.starts_with('-')
        {
            return bad("not a host name (letters, digits, `-`, `_` and dots)");
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> AllowHost {
        AllowHost::parse(s).unwrap()
    }

    #[test]
    fn entries_parse_with_and_without_ports() {
        assert_eq!(
            p("PyPI.org."),
            AllowHost {
                host: HostPattern::Name("pypi.org".into()),
                port: None
            }
        );
        assert_eq!(p("api.example.com:443").port, Some(443));
        assert_eq!(
            p("*.pythonhosted.org").host,
            HostPattern::Below("pythonhosted.org".into())
        );
        assert_eq!(
            p("10.1.2.3:8080").host,
            HostPattern::Ip("10.1.2.3".parse().unwrap())
        );
        assert_eq!(
            p("[::1]:22"),
            AllowHost {
                host: HostPattern::Ip("::1".parse().unwrap()),
                port: Some(22)
            }
        );
        assert_eq!(p("[fe80::1]").port, None);
        assert_eq!(
            p("10.0.0.0/8:5432").host,
            HostPattern::Net("10.0.0.0".parse().unwrap(), 8)
        );
        assert_eq!(
            p("[fd00::/8]").host,
            HostPattern::Net("fd00::".parse().unwrap(), 8)
        );
        for s in [
            "pypi.org",
            "*.x.org:8443",
            "[::1]:22",
            "1.2.3.4",
            "127.0.0.0/8:80",
            "[fd00::/8]:443",
        ] {
            assert_eq!(p(s).to_string(), s);
        }
    }

    #[test]
    fn bad_entries_say_why() {
        for (s, why) in [
            ("", "no host name"),
            ("pypi.org:0", "not a port"),
            ("pypi.org:70000", "not a port"),
            ("pypi.org:", "not a port"),
            ("::1", "[ADDR]"),
            ("[::1", "[ADDR]"),
            ("[nope]:1", "not an IPv6 address"),
            ("a..b", "1 to 63 bytes"),
            ("*", "only as the whole first part"),
            ("a.*.b", "only as the whole first part"),
            ("**.b", "not a host name"),
            ("exa mple.com", "not a host name"),
            ("-a.com", "not a host name"),
            ("http://x.org", "not a port"),
            ("10.0.0.1/8", "bits set past /8 (the range is 10.0.0.0/8)"),
            ("10.0.0.0/33", "not a prefix length"),
            ("x.org/8", "not an IPv4 address"),
            ("[fd00::/129]", "not a prefix length"),
        ] {
            let e = AllowHost::parse(s).unwrap_err();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn http_rules_name_methods_hosts_and_paths() {
        let r = HttpRule::parse("get,POST api.example.com/v1/*").unwrap();
        assert_eq!(r.methods, ["GET", "POST"]);
        assert!(r.host.allows_name("api.example.com", 443));
        assert!(r.allows("GET", "/v1/models?x=1") && r.allows("POST", "/v1/a/b"));
        assert!(
            !r.allows("DELETE", "/v1/a") && !r.allows("GET", "/v2/a") && !r.allows("GET", "/v1")
        );
        assert_eq!(r.to_string(), "GET,POST api.example.com/v1/*");
        let any = HttpRule::parse("* 10.0.0.1:8080/*/status").unwrap();
        assert!(any.allows("PATCH", "/x/y/status") && !any.allows("GET", "/x/status/"));
        for bad in [
            "GET",
            "GET api.example.com",
            "G3T a.org/",
            "GET a.org/x?y",
            "GET a b.org/",
        ] {
            assert!(HttpRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_entry_covers_what_it_allows_in_full() {
        for (a, b) in [
            ("api.example.com", "api.example.com"),
            ("api.example.com", "api.example.com:443"),
            ("*.example.com", "api.example.com:80"),
            ("*.example.com", "*.api.example.com"),
            ("*.example.com", "*.example.com"),
            ("127.0.0.2:9", "127.0.0.2:9"),
            ("127.0.0.0/8:9", "127.0.0.2:9"),
            ("127.0.0.0/8", "127.0.0.0/16"),
            ("[::/0]", "[::1]"),
        ] {
            assert!(p(a).covers(&p(b)), "{a} should cover {b}");
        }
        for (a, b) in [
            ("api.example.com:443", "api.example.com"),
            ("api.example.com", "api.example.com:8443"),
            ("*.example.com", "example.com"),
            ("api.example.com", "*.example.com"),
            ("*.api.example.com", "*.example.com"),
            ("127.0.0.2:9", "127.0.0.3:9"),
            ("127.0.0.0/16", "127.0.0.0/8"),
            ("127.0.0.0/8", "[::1]"),
            ("127.0.0.1", "localhost"),
            ("localhost", "127.0.0.1"),
        ] {
            assert!(!p(a).covers(&p(b)), "{a} should not cover {b}");
        }
    }

    #[test]
    fn names_match_exactly_or_strictly_below() {
        let w = p("*.pythonhosted.org");
        assert!(w.allows_name("files.pythonhosted.org", 443));
        assert!(w.allows_name("a.b.pythonhosted.org", 80));
        assert!(!w.allows_name("pythonhosted.org", 443));
        assert!(!w.allows_name("evilpythonhosted.org", 443));
        assert!(!w.allows_name("files.pythonhosted.org", 8443));
        let n = p("pypi.org");
        assert!(n.allows_name("pypi.org", 443) && n.allows_name("pypi.org", 80));
        assert!(!n.allows_name("www.pypi.org", 443));
        assert!(!n.allows_name("pypi.org.evil.com", 443));
        let port = p("api.example.com:8443");
        assert!(port.allows_name("api.example.com", 8443));
        assert!(!port.allows_name("api.example.com", 443));
        assert!(!n.allows_ip("151.101.0.223".parse().unwrap(), 443));
        assert!(p("127.0.0.1:9").allows_ip("127.0.0.1".parse().unwrap(), 9));
        let r = p("127.0.0.0/8:9");
        assert!(r.allows_ip("127.0.0.2".parse().unwrap(), 9));
        assert!(!r.allows_ip("127.0.0.2".parse().unwrap(), 10));
        assert!(!r.allows_ip("128.0.0.1".parse().unwrap(), 9));
        assert!(!r.allows_ip("::1".parse().unwrap(), 9));
        let all = p("[::/0]");
        assert!(all.allows_ip("fe80::1".parse().unwrap(), 443));
        assert!(p("0.0.0.0/0").allows_ip("169.254.169.254".parse().unwrap(), 80));
        assert_eq!(normalize_name("PyPI.Org."), "pypi.org");
    }
}
