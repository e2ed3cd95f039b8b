//! TLS interception for the hosts a secret is bound to (`--secret`): the
//! per-run certificate authority, made here in the supervisor after clone
//! (its key never enters the jail; its certificate is appended to the
//! jail's trust file, which the plan bound over the system bundle), the
//! certificates it issues per host, the connection to the real host
//! verified against the host's trust store and `--egress-ca`, and the
//! values, read from the fds the plan took (`plan::secrets`), kept in
//! memory that is wiped when dropped.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use zeroize::Zeroizing;

use super::allow::Route;
use super::body::Budget;
use crate::plan::secrets::{read_value, Held, Interception, TrustFile};
use crate::plan::SetupError;
use crate::policy::egress::{AllowHost, HostPattern, HttpRule};

/// One secret as the proxy holds it.
struct Bound {
    name: String,
    hosts: Vec<AllowHost>,
    placeholder: String,
    value: Zeroizing<Vec<u8>>,
    /// The media types of the bodies it goes into too.
    body: Vec<String>,
}

impl Bound {
    fn binds(&self, route: &Route, port: u16) -> bool {
        self.hosts.iter().any(|h| host_is(h, route, port))
    }
}

/// Whether the entry `h` names `route` on `port`.
fn host_is(h: &AllowHost, route: &Route, port: u16) -> bool {
    match route {
        Route::Name(n) => h.allows_name(n, port),
        Route::Listed(ip) => h.allows_ip(*ip, port),
    }
}

/// The secrets, the authority and the TLS settings of one run's proxy.
pub struct Interceptor {
    bound: Vec<Bound>,
    ca: CertifiedIssuer<'static, KeyPair>,
    /// One key for every host's certificate.
    leaf: KeyPair,
    /// By host and protocol (HTTP/2 or not).
    servers: Mutex<HashMap<(String, bool), Arc<ServerConfig>>>,
    /// Made on first use, on the proxy's thread (reading the host's
    /// trust store takes milliseconds): offering HTTP/1.1 alone, and
    /// HTTP/2 first.
    client: OnceLock<Result<[Arc<ClientConfig>; 2], String>>,
    cas: Vec<std::path::PathBuf>,
    http: Vec<HttpRule>,
    /// Bodies read whole at once (`--secret-body`).
    pub budget: Budget,
    /// Removed when the proxy is done with it.
    _trust: TrustFile,
}

/// A secret's value and what replaces it in the jail, for one request.
pub struct Swap<'a> {
    pub placeholder: &'a [u8],
    pub value: &'a [u8],
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Interceptor {
    /// Read the values, make the authority and append its certificate to
    /// the jail's trust file. After clone and before GO, in the
    /// supervisor: the jail reads the file only once it runs.
    pub fn prepare(i: &Interception, held: Held) -> Result<Interceptor, SetupError> {
        let fail = |why: String| SetupError::new("network", "--secret", why);
        let mut bound = Vec::new();
        for (s, fd) in i.secrets.iter().zip(&held.values) {
            let value = read_value(fd).map_err(|e| fail(format!("{}: {e}", s.name)))?;
            bound.push(Bound {
                name: s.name.clone(),
                hosts: s.hosts.clone(),
                placeholder: s.placeholder.clone(),
                value,
                body: s.body.clone(),
            });
        }
        drop(held.values);
        let ca =
            authority(&bound, &i.http).map_err(|e| fail(format!("certificate authority: {e}")))?;
        let leaf = KeyPair::generate().map_err(|e| fail(format!("key: {e}")))?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&i.trust)
            .map_err(|e| SetupError::io("network", i.trust.display().to_string(), &e))?;
        f.write_all(ca.pem().as_bytes())
            .map_err(|e| SetupError::io("network", i.trust.display().to_string(), &e))?;
        Ok(Interceptor {
            bound,
            ca,
            leaf,
            servers: Mutex::new(HashMap::new()),
            client: OnceLock::new(),
            cas: i.cas.clone(),
            http: i.http.clone(),
            budget: Budget::default(),
            _trust: held.trust,
        })
    }

    /// Whether a connection to `route`:`port` is intercepted: a secret's
    /// host, or one with `--allow-http` rules.
    pub fn intercepts(&self, route: &Route, port: u16) -> bool {
        self.bound.iter().any(|b| b.binds(route, port)) || self.has_rules(route, port)
    }

    /// Whether `route`:`port` has `--allow-http` rules.
    pub fn has_rules(&self, route: &Route, port: u16) -> bool {
        self.http.iter().any(|r| host_is(&r.host, route, port))
    }

    /// Why a request may not go to `route`:`port` (a 403, recorded), or
    /// None: the one decision for HTTP/1.1 and HTTP/2. `head` is the
    /// request as written (its line or pseudo-headers, and its headers):
    /// refused when it carries the placeholder of a secret not bound
    /// there, or when `--allow-http` rules name the host and none allows
    /// `method` on `target`.
    pub fn refusal(
        &self,
        route: &Route,
        port: u16,
        method: &str,
        target: &str,
        head: &[u8],
    ) -> Option<String> {
        if let Some(name) = self.foreign(head, Some((route, port))) {
            return Some(format!(
                "the request carries the placeholder of secret {name}, which is not bound to this host"
            ));
        }
        self.http_refusal(route, port, method, target)
    }

    /// Why the request `method` `target` may not go to `route`:`port`
    /// (None: it may: no rule names the host, or one allows it).
    fn http_refusal(&self, route: &Route, port: u16, method: &str, target: &str) -> Option<String> {
        let rules: Vec<&HttpRule> = self
            .http
            .iter()
            .filter(|r| host_is(&r.host, route, port))
            .collect();
        if rules.is_empty() || rules.iter().any(|r| r.allows(method, target)) {
            return None;
        }
        let shown: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        Some(format!(
            "{method} {} is not allowed here (--allow-http {})",
            target.split('?').next().unwrap_or_default(),
            shown.join(", ")
        ))
    }

    /// The values that go to `route`:`port`.
    pub fn swaps(&self, route: &Route, port: u16) -> Vec<Swap<'_>> {
        self.bound
            .iter()
            .filter(|b| b.binds(route, port))
            .map(|b| Swap {
                placeholder: b.placeholder.as_bytes(),
                value: &b.value,
            })
            .collect()
    }

    /// The values that go into a body of the media type `media`
    /// (`type/subtype`, lower case) to `route`:`port` (`--secret-body`).
    pub fn body_swaps(&self, route: &Route, port: u16, media: &str) -> Vec<Swap<'_>> {
        self.bound
            .iter()
            .filter(|b| b.binds(route, port) && b.body.iter().any(|t| t == media))
            .map(|b| Swap {
                placeholder: b.placeholder.as_bytes(),
                value: &b.value,
            })
            .collect()
    }

    /// The name of a secret whose placeholder `bytes` carries and whose
    /// value may not go to `route`:`port` (None: any secret's).
    pub fn foreign(&self, bytes: &[u8], to: Option<(&Route, u16)>) -> Option<&str> {
        self.bound
            .iter()
            .filter(|b| to.is_none_or(|(r, p)| !b.binds(r, p)))
            .find(|b| contains(bytes, b.placeholder.as_bytes()))
            .map(|b| b.name.as_str())
    }

    /// The TLS settings the jail's client meets for `host` (as it named
    /// it): a certificate for it from the run's authority; HTTP/2 (`h2`)
    /// or HTTP/1.1 alone, as the real host chose.
    pub fn server(&self, host: &str, h2: bool) -> Result<Arc<ServerConfig>, String> {
        let mut m = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = m.get(&(host.to_string(), h2)) {
            return Ok(c.clone());
        }
        let mut p = CertificateParams::new(vec![host.to_string()]).map_err(|e| e.to_string())?;
        p.distinguished_name.push(DnType::CommonName, host);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p
            .signed_by(&self.leaf, &self.ca)
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::Pkcs8(self.leaf.serialize_der().into());
        let mut c = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| e.to_string())?;
        c.alpn_protocols = vec![match h2 {
            true => b"h2".to_vec(),
            false => b"http/1.1".to_vec(),
        }];
        let c = Arc::new(c);
        m.insert((host.to_string(), h2), c.clone());
        Ok(c)
    }

    /// The TLS settings toward the real hosts: the host's trust store and
    /// `--egress-ca`'s anchors; offering HTTP/2 first (`h2`), or
    /// HTTP/1.1 alone.
    pub fn client(&self, h2: bool) -> Result<Arc<ClientConfig>, String> {
        let both = self.client.get_or_init(|| client_config(&self.cas));
        both.as_ref()
            .map(|c| c[usize::from(h2)].clone())
            .map_err(|e| e.clone())
    }
}

/// The name the real host's certificate must carry.
pub fn server_name(route: &Route) -> Result<ServerName<'static>, String> {
    match route {
        Route::Name(n) => ServerName::try_from(n.clone()).map_err(|e| format!("{n}: {e}")),
        Route::Listed(ip) => Ok(ServerName::IpAddress((*ip).into())),
    }
}

fn client_config(cas: &[std::path::PathBuf]) -> Result<[Arc<ClientConfig>; 2], String> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let _ = roots.add_parsable_certificates(native.certs);
    for f in cas {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(f)
            .and_then(|i| i.collect::<Result<_, _>>())
            .map_err(|e| format!("--egress-ca {}: {e}", f.display()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("--egress-ca {}: no certificate in it", f.display()));
        }
    }
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut h2 = c.clone();
    h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok([Arc::new(c), Arc::new(h2)])
}

/// The run's authority: a CA for servers only, path length 0, limited
/// (name constraints) to the secrets' hosts.
fn authority(
    bound: &[Bound],
    http: &[HttpRule],
) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.distinguished_name
        .push(DnType::CommonName, "stockade per-run CA (this jail only)");
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut permitted = Vec::new();
    for h in bound
        .iter()
        .flat_map(|b| &b.hosts)
        .chain(http.iter().map(|r| &r.host))
    {
        permitted.push(match &h.host {
            HostPattern::Name(n) | HostPattern::Below(n) => GeneralSubtree::DnsName(n.clone()),
            HostPattern::Ip(ip) => GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(
                *ip,
                if ip.is_ipv4() { 32 } else { 128 },
            )),
            HostPattern::Net(ip, n) => {
                GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(*ip, *n))
            }
        });
    }
    p.name_constraints = Some(NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: Vec::new(),
    });
    CertifiedIssuer::self_signed(p, KeyPair::generate()?)
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}
