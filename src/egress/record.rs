//! What the proxy records of each connection the jail asked for: the host
//! and port asked, the address connected to, the bytes each way, whether
//! it was allowed, refused or failed, and the rule that decided (the
//! allowlist's entry, or the reason). Written into the outcome (the
//! network layer's detail) and, as each connection ends or is refused, as
//! a line on `--denials-fd` (`"kind": "connection"`).

use crate::outcome::Denial;

/// The most connections recorded; more are counted.
pub const MAX_RECORDED: usize = 1024;

/// One connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Connection {
    /// Always `connection` (a line's kind on `--denials-fd`).
    pub kind: &'static str,
    /// As the jail named it.
    pub host: String,
    pub port: u16,
    /// The address connected to (the upstream proxy's when it was used);
    /// absent when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub verdict: Verdict,
    /// Allowed: the allowlist entry (and, for an address of a refused
    /// kind, the entry listing it); else why not.
    pub rule: String,
    /// Bytes from the jail to the host (the requests as sent, values in
    /// them), and back.
    pub sent: u64,
    pub received: u64,
    /// TLS ended and begun again by the proxy (a secret's host).
    pub intercepted: bool,
    /// Still open when the run ended (a relayed one's bytes are those
    /// carried so far; an intercepted one's none).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allowed,
    Refused,
    /// Allowed, but the host could not be reached.
    Failed,
}

/// A record told as it is made.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub enum Record<'a> {
    Denial(&'a Denial),
    Connection(&'a Connection),
}

impl Connection {
    /// A connection that never opened: refused, or failed.
    pub fn not_made(host: String, port: u16, verdict: Verdict, why: &str) -> Connection {
        Connection {
            kind: "connection",
            host,
            port,
            address: None,
            verdict,
            rule: why.to_string(),
            sent: 0,
            received: 0,
            intercepted: false,
            open: false,
        }
    }
}
