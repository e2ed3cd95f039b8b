//! The egress allowlist's plan: the proxy's port inside the jail, the
//! payload's proxy variables, the upstream proxy taken from the caller's
//! environment, and the refusal where no network namespace can enforce it.
//! The proxy that enforces it is `crate::egress`.

use std::ffi::OsString;

use super::mode::Kind;
use super::secrets::Interception;
use super::SetupError;
use crate::policy::egress::AllowHost;
use crate::policy::{Network, Policy};

/// The port the proxy listens on, on 127.0.0.1 in the jail's own network
/// namespace (which has nothing else: any port is free there).
pub const PROXY_PORT: u16 = 3128;

/// Everything the supervisor's proxy needs, decided before clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub port: u16,
    pub allow: Vec<AllowHost>,
    /// The caller's upstream proxy (`HTTPS_PROXY`, …): the proxy reaches
    /// allowed hosts through it, by CONNECT.
    pub upstream: Option<Upstream>,
    /// Record mode (`--learn`): a target off the allowlist is reached
    /// too, and each one reached is recorded for the learned profile.
    pub record: bool,
    /// The secrets' hosts, whose TLS the proxy intercepts (`--secret`).
    pub intercept: Option<Interception>,
}

/// An HTTP proxy the caller's environment names, and the names that
/// bypass it (`NO_PROXY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `HOST:PORT` to connect to.
    pub authority: String,
    /// The variable it came from, for messages.
    pub var: &'static str,
    /// `NO_PROXY` entries, lower case, without a leading `.` or `*.`;
    /// `*` alone is every host.
    pub bypass: Vec<String>,
}

impl Upstream {
    /// Whether `host` (a normalized name or an address) goes direct.
    pub fn bypassed(&self, host: &str) -> bool {
        self.bypass.iter().any(|b| {
            b == "*"
                || host == b
                || host
                    .strip_suffix(b.as_str())
                    .is_some_and(|h| h.ends_with('.'))
        })
    }
}

/// The variables the payload gets, upper and lower case.
const VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"];

/// Where to read the caller's upstream proxy, in order.
const UPSTREAM_VARS: [&str; 6] = [
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "http_proxy",
    "HTTP_PROXY",
];

/// The plan of the allowlist, or None without one. `env` gets the proxy
/// variables. In the fallback (no namespaces) the run is refused: there
/// the payload shares the host's network namespace, and no mechanism of
/// stockade's holds its TCP connects to the proxy alone and its UDP and
/// raw sockets off exactly.
pub fn plan(
    p: &Policy,
    kind: Kind,
    env: &mut Vec<(OsString, OsString)>,
    intercept: Option<Interception>,
) -> Result<Option<Egress>, SetupError> {
    if p.allow_hosts.is_empty() && !p.egress_record {
        return Ok(None);
    }
    if p.network != Network::None {
        // Policy::validate refuses it first; never a proxy beside open TCP.
        return Err(SetupError::new(
            "network",
            "--allow-host",
            format!(
                "an egress allowlist needs --network none, not --network {}",
                p.network.as_str()
            ),
        ));
    }
    if kind == Kind::Fallback {
        return Err(SetupError::new(
            "network",
            "--allow-host",
            "an egress allowlist needs a network namespace of the jail's own, and user namespaces are refused here; \
             stockade refuses the run rather than let the payload reach the host's network",
        ));
    }
    let upstream = upstream_from(|k| std::env::var(k).ok())?;
    for (k, v) in proxy_vars(PROXY_PORT) {
        crate::policy::set_env(env, k.into(), v.into());
    }
    Ok(Some(Egress {
        port: PROXY_PORT,
        allow: p.allow_hosts.clone(),
        upstream,
        record: p.egress_record,
        intercept,
    }))
}

/// The payload's proxy variables for a proxy on 127.0.0.1:`port`.
fn proxy_vars(port: u16) -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let values = [
        http.clone(),
        http,
        format!("socks5h://127.0.0.1:{port}"),
        "localhost,127.0.0.1,::1".to_string(),
    ];
    let mut out = Vec::new();
    for (k, v) in VARS.iter().zip(values) {
        out.push((k.to_string(), v.clone()));
        out.push((k.to_ascii_lowercase(), v));
    }
    out
}

/// The caller's upstream proxy, from the first of [`UPSTREAM_VARS`] that is
/// set and not empty. Only `http://HOST:PORT` (a trailing `/` allowed) is
/// understood; anything else refuses the run, naming the variable.
fn upstream_from(get: impl Fn(&str) -> Option<String>) -> Result<Option<Upstream>, SetupError> {
    let Some((var, url)) = UPSTREAM_VARS
        .iter()
        .find_map(|k| get(k).filter(|v| !v.is_empty()).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    let bad = |why: &str| {
        SetupError::new(
            "network",
            var,
            format!("{url:?}: {why} (the egress proxy forwards through an upstream given as http://HOST:PORT)"),
        )
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("not an http:// proxy"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['@', '/', '?', '#']) || authority.is_empty() {
        return Err(bad("credentials or a path are not supported"));
    }
    let authority = match authority.rsplit_once(':') {
        Some((_, port)) if !authority.ends_with(']') => {
            port.parse::<u16>().map_err(|_| bad("not a port"))?;
            authority.to_string()
        }
        _ => format!("{authority}:80"),
    };
    let bypass = ["no_proxy", "NO_PROXY"]
        .iter()
        .find_map(|k| get(k))
        .unwrap_or_default()
        .split(',')
        .map(|b| {
            b.trim()
                .trim_start_matches('*')
                .trim_start_matches('.')
                .to_ascii_lowercase()
        })
        .filter(|b| !b.is_empty())
        .collect();
    Ok(Some(Upstream {
        authority,
        var,
        bypass,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(vars: &[(&str, &str)]) -> Result<Option<Upstream>, SetupError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        upstream_from(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn upstream_comes_from_the_first_proxy_variable_set() {
        assert_eq!(up(&[]).unwrap(), None);
        let u = up(&[
            ("HTTP_PROXY", "http://a:1"),
            ("https_proxy", "http://proxy.corp:3128/"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (u.authority.as_str(), u.var),
            ("proxy.corp:3128", "https_proxy")
        );
        let u = up(&[
            ("ALL_PROXY", "http://p"),
            ("NO_PROXY", "*.internal, .corp,pypi.org"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(u.authority, "p:80");
        assert!(u.bypassed("a.internal") && u.bypassed("corp") && u.bypassed("x.corp"));
        assert!(u.bypassed("pypi.org") && !u.bypassed("files.pythonhosted.org"));
        assert!(!u.bypassed("notcorp"));
    }

    #[test]
    fn upstream_it_cannot_use_refuses_the_run_naming_the_variable() {
        for v in [
            "socks5://p:1",
            "http://u:pw@p:1",
            "http://p:x",
            "http://p:1/path",
        ] {
            let e = up(&[("HTTPS_PROXY", v)]).unwrap_err().to_string();
            assert!(e.contains("HTTPS_PROXY"), "{v}: {e}");
        }
    }

    #[test]
    fn payload_gets_both_cases_of_each_variable() {
        let v = proxy_vars(3128);
        assert_eq!(v.len(), 8);
        assert!(v.contains(&("https_proxy".into(), "http://127.0.0.1:3128".into())));
        assert!(v.contains(&("ALL_PROXY".into(), "socks5h://127.0.0.1:3128".into())));
    }
}
