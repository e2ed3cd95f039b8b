//! The proxy's decisions, pure: whether a target is on the allowlist, and
//! which of a name's resolved addresses it may connect to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::parse::{Host, Target};
use crate::plan::egress::Egress;
use crate::policy::egress::{normalize_name, AllowHost};

/// How an allowed target is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// An address listed explicitly: connect to it as it is.
    Listed(IpAddr),
    /// A listed name (normalized): resolve it, keep the addresses
    /// [`usable`] allows.
    Name(String),
}

/// Whether `t` is on the allowlist, and how to reach it; else why not.
pub fn check(allow: &[AllowHost], t: &Target) -> Result<Route, String> {
    match &t.host {
        Host::Ip(ip) => {
            let ip = canonical(*ip);
            if allow.iter().any(|a| a.allows_ip(ip, t.port)) {
                Ok(Route::Listed(ip))
            } else {
                Err(format!("{ip} port {} is not on the allowlist", t.port))
            }
        }
        Host::Name(n) => {
            let name = normalize_name(n);
            if let Ok(ip) = name.parse::<IpAddr>() {
                return check(
                    allow,
                    &Target {
                        host: Host::Ip(ip),
                        port: t.port,
                    },
                );
            }
            if allow.iter().any(|a| a.allows_name(&name, t.port)) {
                Ok(Route::Name(name))
            } else if allow.iter().any(|a| names_host(a, &name)) {
                Err(format!("port {} of {name} is not on the allowlist", t.port))
            } else {
                Err(format!("{name} is not on the allowlist"))
            }
        }
    }
}

/// Record mode (`--learn`): how to reach a target that is not on the
/// allowlist: a name is resolved as a listed one would be (its addresses
/// still pass [`usable`]); an address only when it is of no refused kind.
pub fn record_route(t: &Target) -> Result<Route, String> {
    let ip = match &t.host {
        Host::Ip(ip) => *ip,
        Host::Name(n) => {
            let name = normalize_name(n);
            match name.parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => return Ok(Route::Name(name)),
            }
        }
    };
    let ip = canonical(ip);
    match refused_kind(ip) {
        None => Ok(Route::Listed(ip)),
        Some(kind) => Err(format!("{ip} is a {kind} address")),
    }
}

/// The rule that let a connection to `route`:`port` through, connected
/// as `up`: the allowlist's entry for it, and for an address of a refused
/// kind the entry listing that address; through an upstream proxy, said.
pub fn rule(e: &Egress, route: &Route, up: &tokio::net::TcpStream, port: u16) -> String {
    let entry =
        |f: &dyn Fn(&AllowHost) -> bool| e.allow.iter().find(|a| f(a)).map(|a| a.to_string());
    let shown = match route {
        Route::Listed(ip) => ip.to_string(),
        Route::Name(n) => n.clone(),
    };
    if let Some(u) = e.upstream.as_ref().filter(|u| !u.bypassed(&shown)) {
        let by = match route {
            Route::Listed(ip) => entry(&|a| a.allows_ip(*ip, port)),
            Route::Name(n) => entry(&|a| a.allows_name(n, port)),
        };
        let by = by.unwrap_or_else(|| "record mode (--learn)".into());
        return format!(
            "{by} (through the upstream proxy {}, {})",
            u.authority, u.var
        );
    }
    let ip = up.peer_addr().ok().map(|a| canonical(a.ip()));
    let by_ip = ip.and_then(|ip| entry(&|a| a.allows_ip(ip, port)));
    let by = match route {
        Route::Listed(_) => by_ip.clone(),
        Route::Name(n) => match (
            entry(&|a| a.allows_name(n, port)),
            ip.and_then(refused_kind),
        ) {
            (Some(by), Some(_)) => Some(format!("{by} and {}", by_ip.clone().unwrap_or_default())),
            (by, _) => by,
        },
    };
    by.unwrap_or_else(|| "record mode (--learn)".into())
}

/// Whether `a` names the host `name` on some port (for the message only).
fn names_host(a: &AllowHost, name: &str) -> bool {
    a.allows_name(name, a.port.unwrap_or(443))
}

/// The addresses of a listed name the proxy may connect to: those of no
/// refused kind ([`refused_kind`]), and those listed explicitly on this
/// port. Err says why none is left.
pub fn usable(
    allow: &[AllowHost],
    name: &str,
    port: u16,
    addrs: &[IpAddr],
) -> Result<Vec<IpAddr>, String> {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for ip in addrs.iter().map(|ip| canonical(*ip)) {
        match refused_kind(ip) {
            Some(kind) if !allow.iter().any(|a| a.allows_ip(ip, port)) => {
                refused.push(format!("{ip} ({kind})"))
            }
            _ if !ok.contains(&ip) => ok.push(ip),
            _ => {}
        }
    }
    if !ok.is_empty() {
        return Ok(ok);
    }
    if refused.is_empty() {
        return Err(format!("{name} has no address"));
    }
    Err(format!(
        "{name} resolves only to refused addresses: {}",
        refused.join(", ")
    ))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// The kind of address the proxy never connects to unless it is listed
/// explicitly, or None for one it may: a public unicast address, or one
/// of the documentation and benchmarking ranges (192.0.2/24, 198.18/15,
/// 198.51.100/24, 203.0.113/24, 2001:db8::/32), which reach nothing of
/// the host's and which some egress gateways and fake-IP resolvers hand
/// out for every name (this project's own test machine answers
/// 203.0.113.80 for PyPI).
pub fn refused_kind(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) => refused_v4(a),
        IpAddr::V6(a) => refused_v6(a),
    }
}

fn refused_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    Some(match o {
        [169, 254, 169, 254] => "metadata",
        [127, ..] => "loopback",
        [0, ..] => "unspecified",
        [10, ..] | [192, 168, ..] => "private",
        [172, b, ..] if (16..32).contains(&b) => "private",
        [169, 254, ..] => "link-local",
        [100, b, ..] if (64..128).contains(&b) => "carrier-grade NAT",
        [192, 0, 0, _] => "IETF protocol assignments",
        [224..=239, ..] => "multicast",
        [240..=255, ..] => "reserved or broadcast",
        _ => return None,
    })
}

fn refused_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    Some(match s {
        _ if a.is_loopback() => "loopback",
        _ if a.is_unspecified() => "unspecified",
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] => "metadata",
        [x, ..] if x & 0xfe00 == 0xfc00 => "private (unique local)",
        [x, ..] if x & 0xffc0 == 0xfe80 => "link-local",
        [x, ..] if x & 0xffc0 == 0xfec0 => "site-local",
        [x, ..] if x & 0xff00 == 0xff00 => "multicast",
        [0x64, 0xff9b, 1, ..] => "local NAT64",
        // NAT64 of a refused IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => {
            let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
            return refused_v4(v4);
        }
        // 6to4 of a refused IPv4 address.
        [0x2002, hi, lo, ..] => {
            let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
            return refused_v4(v4);
        }
        // IPv4-compatible (deprecated) and the rest of ::/96.
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(list: &[&str]) -> Vec<AllowHost> {
        list.iter().map(|s| AllowHost::parse(s).unwrap()).collect()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn name(n: &str, port: u16) -> Target {
        Target {
            host: Host::Name(n.into()),
            port,
        }
    }

    #[test]
    fn classifier_knows_every_refused_kind() {
        for (a, kind) in [
            ("169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "metadata"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("fd12::1", "private (unique local)"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("224.0.0.251", "multicast"),
            ("ff02::fb", "multicast"),
            ("255.255.255.255", "reserved or broadcast"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:a00:1::1", "private"),
            ("::127.0.0.1", "IPv4-compatible"),
        ] {
            assert_eq!(refused_kind(a.parse().unwrap()), Some(kind), "{a}");
        }
        for a in [
            "151.101.0.223",
            "172.15.0.1",
            "172.32.0.1",
            "100.63.0.1",
            "100.128.0.1",
            "8.8.8.8",
            "2a04:4e42::223",
            "64:ff9b::808:808",
            "203.0.113.80",
            "198.18.0.1",
            "2001:db8::1",
        ] {
            assert_eq!(refused_kind(a.parse().unwrap()), None, "{a}");
        }
    }

    #[test]
    fn only_listed_names_and_ports_pass() {
        let a = allow(&["pypi.org", "*.pythonhosted.org", "api.example.com:8443"]);
        assert_eq!(
            check(&a, &name("PyPI.org.", 443)),
            Ok(Route::Name("pypi.org".into()))
        );
        assert_eq!(
            check(&a, &name("files.pythonhosted.org", 443)),
            Ok(Route::Name("files.pythonhosted.org".into()))
        );
        let e = check(&a, &name("deb.debian.org", 443)).unwrap_err();
        assert_eq!(e, "deb.debian.org is not on the allowlist");
        let e = check(&a, &name("pypi.org", 22)).unwrap_err();
        assert_eq!(e, "port 22 of pypi.org is not on the allowlist");
        let e = check(&a, &name("api.example.com", 443)).unwrap_err();
        assert_eq!(e, "port 443 of api.example.com is not on the allowlist");
        assert!(check(&a, &name("api.example.com", 8443)).is_ok());
    }

    #[test]
    fn addresses_pass_only_when_listed_as_addresses() {
        let a = allow(&["pypi.org", "127.0.0.1:8080", "[::1]"]);
        let t = |h: &str, port| Target {
            host: Host::Ip(h.parse().unwrap()),
            port,
        };
        assert!(check(&a, &t("151.101.0.223", 443)).is_err());
        assert_eq!(
            check(&a, &t("127.0.0.1", 8080)),
            Ok(Route::Listed("127.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            check(&a, &t("::ffff:127.0.0.1", 8080)),
            Ok(Route::Listed("127.0.0.1".parse().unwrap()))
        );
        assert!(check(&a, &t("127.0.0.1", 8081)).is_err());
        assert!(check(&a, &t("::1", 443)).is_ok());
        // An address written as a name is still an address.
        assert!(check(&a, &name("127.0.0.1", 8080)).is_ok());
        assert!(check(&a, &name("127.0.0.1", 443)).is_err());
    }

    #[test]
    fn listed_names_resolving_to_refused_addresses_are_refused() {
        let a = allow(&["metadata.example", "local.example", "mixed.example"]);
        let e = usable(&a, "metadata.example", 80, &ips(&["169.254.169.254"])).unwrap_err();
        assert_eq!(
            e,
            "metadata.example resolves only to refused addresses: 169.254.169.254 (metadata)"
        );
        let e = usable(&a, "local.example", 443, &ips(&["127.0.0.1", "::1"])).unwrap_err();
        assert!(e.contains("127.0.0.1 (loopback), ::1 (loopback)"), "{e}");
        let ok = usable(
            &a,
            "mixed.example",
            443,
            &ips(&["10.0.0.1", "151.101.0.223", "151.101.0.223"]),
        );
        assert_eq!(ok, Ok(ips(&["151.101.0.223"])));
        assert!(usable(&a, "mixed.example", 443, &[])
            .unwrap_err()
            .contains("no address"));
        // Listed explicitly (on that port), a refused kind is allowed.
        let a = allow(&["local.example", "127.0.0.1:443"]);
        assert_eq!(
            usable(&a, "local.example", 443, &ips(&["127.0.0.1"])),
            Ok(ips(&["127.0.0.1"]))
        );
        assert!(usable(&a, "local.example", 80, &ips(&["127.0.0.1"])).is_err());
    }
}
