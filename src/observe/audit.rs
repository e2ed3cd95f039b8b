//! Landlock's denials, from the kernel's audit records (Linux 6.15+,
//! Landlock ABI 7): read on the audit read-log multicast group (a socket
//! the plan opened before clone, `plan::Resources::audit`), kept only for
//! this run's domain.
//!
//! Which domain is this run's: the kernel logs a domain's creation
//! details (`AUDIT_LANDLOCK_DOMAIN status=allocated … pid= exe= comm=`)
//! with its first logged denial, the name (`comm`) being the one its
//! creator had when it called `landlock_restrict_self`. The payload takes
//! a random name of the plan's (`Landlock::log_tag`) just before it
//! does, so a creation record with that name is this run's domain and no
//! other: the other jails on the host, their nested domains and the
//! payload's own nested domains each have another id. Each denial record
//! (`AUDIT_LANDLOCK_ACCESS domain= blockers= path=…`) names the domain
//! that refused; the first one of a domain comes before its creation
//! record, so the few records of domains not yet known wait in a short
//! queue. When the domain ends (the jail is gone), the kernel logs how
//! many denials it counted in all (`status=deallocated denials=N`), lost
//! records included: the run's count comes from it where it arrives in
//! time.
//!
//! Bounded: one record per distinct access and path (a repeat only
//! counts), at most [`MAX_DENIALS`]; the rest counted. A flood costs the
//! supervisor a parse per record the kernel delivers; what the kernel's
//! backlog or the socket's buffer drops is lost, and counted by the
//! domain's final record.

#![deny(unsafe_code)]

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::lines::Lines;
use crate::outcome::{Denial, MAX_DENIALS};
use crate::sys::{self, audit};

/// Denial records of domains not yet known, kept until their creation
/// record says whose they are.
const PENDING: usize = 64;
/// Records read per wake-up: the supervisor has other things to watch.
const BATCH: usize = 256;
/// The longest `detail` kept.
const DETAIL_MAX: usize = 256;
/// How long the end of a run waits for the domain's final record.
const FINAL_WAIT_MS: i32 = 500;

/// One refusal, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    access: String,
    path: Option<String>,
    detail: Option<String>,
}

/// What the reader heard, for the outcome.
#[derive(Debug, Default)]
pub struct Heard {
    pub denials: Vec<Denial>,
    /// Refusals counted and not listed.
    pub more: u64,
    /// Records were dropped on the way and nothing counted them.
    pub lost: bool,
}

/// The supervisor's reader of this run's Landlock records.
#[derive(Debug)]
pub struct AuditLog {
    fd: Option<OwnedFd>,
    tag: String,
    domain: Option<u64>,
    pending: VecDeque<(u64, Key)>,
    records: Vec<(Key, u64)>,
    /// Refusals beyond MAX_DENIALS records.
    more: u64,
    /// The socket said records were dropped (ENOBUFS).
    dropped: bool,
    /// The domain's own count (its final record).
    total: Option<u64>,
    lines: Lines,
    buf: Vec<u8>,
}

impl AuditLog {
    /// Read `fd` (bound to the read-log group) for the domain whose
    /// creator was named `tag`.
    pub fn new(fd: OwnedFd, tag: &std::ffi::CStr, lines: Lines) -> AuditLog {
        AuditLog {
            fd: Some(fd),
            tag: tag.to_string_lossy().into_owned(),
            domain: None,
            pending: VecDeque::new(),
            records: Vec::new(),
            more: 0,
            dropped: false,
            total: None,
            lines,
            buf: vec![0u8; 16 * 1024],
        }
    }

    /// The fd to poll for POLLIN.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Read what is pending (at most a batch). Never blocks.
    pub fn on_ready(&mut self) {
        for _ in 0..BATCH {
            let Some(fd) = self.fd() else { return };
            match audit::recv_record(fd, &mut self.buf) {
                Ok(None) => return,
                // Every audit record of the host comes here: only
                // Landlock's are read further.
                Ok(Some((typ, _, _)))
                    if typ != audit::AUDIT_LANDLOCK_ACCESS
                        && typ != audit::AUDIT_LANDLOCK_DOMAIN => {}
                Ok(Some((typ, from, to))) => {
                    let text = String::from_utf8_lossy(&self.buf[from..to]).into_owned();
                    self.on_record(typ, &text);
                }
                Err(e) if e.errno == sys::Errno::ENOBUFS => self.dropped = true,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            }
        }
    }

    fn on_record(&mut self, typ: u16, text: &str) {
        let fields = fields(body(text));
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        };
        let Some(domain) = get("domain").and_then(|d| u64::from_str_radix(d, 16).ok()) else {
            return;
        };
        match typ {
            audit::AUDIT_LANDLOCK_ACCESS => {
                let key = access_key(&fields);
                if self.domain == Some(domain) {
                    self.record(key);
                } else if self.domain.is_none() {
                    if self.pending.len() == PENDING {
                        self.pending.pop_front();
                    }
                    self.pending.push_back((domain, key));
                }
            }
            audit::AUDIT_LANDLOCK_DOMAIN => match get("status") {
                Some("allocated") if self.domain.is_none() && get("comm") == Some(&self.tag) => {
                    self.domain = Some(domain);
                    let mine: Vec<Key> = self
                        .pending
                        .iter()
                        .filter(|(d, _)| *d == domain)
                        .map(|(_, k)| k.clone())
                        .collect();
                    self.pending.clear();
                    for k in mine {
                        self.record(k);
                    }
                }
                Some("deallocated") if self.domain == Some(domain) => {
                    self.total = get("denials").and_then(|n| n.parse().ok());
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn record(&mut self, key: Key) {
        if let Some((_, n)) = self.records.iter_mut().find(|(k, _)| *k == key) {
            *n += 1;
            return;
        }
        if self.records.len() >= MAX_DENIALS {
            self.more += 1;
            return;
        }
        self.lines.send(&denial(&key, 1));
        self.records.push((key, 1));
    }

    /// The jail is gone: wait a little for the domain's final record
    /// (only when the domain showed: else there is none to come), then
    /// say what was heard.
    pub fn finish(mut self) -> Heard {
        self.on_ready();
        let mut waited = 0;
        while self.domain.is_some() && self.total.is_none() && waited < FINAL_WAIT_MS {
            let Some(fd) = self.fd() else { break };
            let mut p = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }];
            let _ = sys::poll(&mut p, 50);
            waited += 50;
            self.on_ready();
        }
        let listed: u64 = self.records.iter().map(|(_, n)| n).sum();
        let (more, lost) = match self.total {
            Some(t) => (t.saturating_sub(listed), false),
            None => (self.more, self.dropped),
        };
        Heard {
            denials: self.records.iter().map(|(k, n)| denial(k, *n)).collect(),
            more,
            lost,
        }
    }
}

fn denial(k: &Key, count: u64) -> Denial {
    Denial::Landlock {
        access: k.access.clone(),
        path: k.path.clone(),
        detail: k.detail.clone(),
        count,
    }
}

/// A denial record's access, path (`path=`, or a dentry's `name=`) and
/// the rest when it is not a path (`dev` and `ino` left out).
fn access_key(fields: &[(&str, String)]) -> Key {
    let mut key = Key {
        access: String::new(),
        path: None,
        detail: None,
    };
    let mut detail = String::new();
    for (k, v) in fields {
        match *k {
            "domain" | "dev" | "ino" => {}
            "blockers" => key.access = v.clone(),
            "path" | "name" if key.path.is_none() => key.path = Some(v.clone()),
            _ => {
                if detail.len() + k.len() + v.len() + 2 <= DETAIL_MAX {
                    if !detail.is_empty() {
                        detail.push(' ');
                    }
                    detail.push_str(k);
                    detail.push('=');
                    detail.push_str(v);
                }
            }
        }
    }
    if !detail.is_empty() {
        key.detail = Some(detail);
    }
    key
}

/// The record's text after `audit(TIME:SERIAL): `.
fn body(text: &str) -> &str {
    let text = text.trim_end_matches('\0');
    match text.find("): ") {
        Some(i) if text.starts_with("audit(") => &text[i + 3..],
        _ => text,
    }
}

/// `key=value` pairs; a value is a quoted string, a hex-encoded one (how
/// audit writes an untrusted string with spaces, quotes or control
/// characters: decoded where the key is one that holds such strings), or
/// a word.
fn fields(body: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut rest = body.trim_start();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_string(), &q[end + 1..]),
                None => (q.to_string(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let word = &after[..end];
            let v = match key {
                "path" | "name" | "comm" | "exe" | "ocomm" => unhex(word).unwrap_or(word.into()),
                _ => word.to_string(),
            };
            (v, &after[end..])
        };
        out.push((key, value));
        rest = next.trim_start();
    }
    out
}

/// An even run of upper-case hex digits, decoded.
fn unhex(s: &str) -> Option<String> {
    if s.is_empty() || s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    Some(String::from_utf8_lossy(&bytes?).into_owned())
}

/// As the watch's observer: the audit socket's records, read as they come.
impl super::Observer for AuditLog {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.fd().unwrap_or(-1), -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, _asks: &mut Vec<super::Ask>) {
        AuditLog::on_ready(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(tag: &str) -> AuditLog {
        let (a, _b) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET).unwrap();
        AuditLog::new(a, &std::ffi::CString::new(tag).unwrap(), Lines::default())
    }

    #[test]
    fn records_of_this_runs_domain_only_with_pending_first() {
        let mut l = log("sk0123456789ab");
        // The first denial of a domain comes before its creation record.
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            r#"audit(1.2:3): domain=1a2b blockers=fs.read_file path="/secret/.env" dev="vda" ino=12"#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            r#"audit(1.2:4): domain=ffff blockers=fs.read_file path="/other" dev="vda" ino=13"#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_DOMAIN,
            r#"audit(1.2:5): domain=ffff status=allocated mode=enforcing pid=9 uid=0 exe="/x" comm="sk999999999999""#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_DOMAIN,
            r#"audit(1.2:6): domain=1a2b status=allocated mode=enforcing pid=10 uid=0 exe="/x" comm="sk0123456789ab""#,
        );
        // Spaces make audit write the path in hex.
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            "audit(1.2:7): domain=1a2b blockers=fs.write_file,fs.truncate path=2F6120622F63 dev=\"vda\" ino=14",
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            r#"audit(1.2:8): domain=1a2b blockers=fs.read_file path="/secret/.env" dev="vda" ino=12"#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            r#"audit(1.2:9): domain=1a2b blockers=net.connect_tcp daddr=10.0.0.1 dest=80"#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_ACCESS,
            r#"audit(1.2:9): domain=ffff blockers=fs.read_file path="/other2""#,
        );
        l.on_record(
            audit::AUDIT_LANDLOCK_DOMAIN,
            "audit(1.2:10): domain=1a2b status=deallocated denials=9",
        );
        let h = l.finish();
        assert_eq!(
            h.denials,
            vec![
                Denial::Landlock {
                    access: "fs.read_file".into(),
                    path: Some("/secret/.env".into()),
                    detail: None,
                    count: 2
                },
                Denial::Landlock {
                    access: "fs.write_file,fs.truncate".into(),
                    path: Some("/a b/c".into()),
                    detail: None,
                    count: 1
                },
                Denial::Landlock {
                    access: "net.connect_tcp".into(),
                    path: None,
                    detail: Some("daddr=10.0.0.1 dest=80".into()),
                    count: 1
                },
            ]
        );
        // The domain counted 9; 4 are listed.
        assert_eq!((h.more, h.lost), (5, false));
    }

    #[test]
    fn records_are_bounded_and_counted() {
        let mut l = log("sk0123456789ab");
        l.on_record(
            audit::AUDIT_LANDLOCK_DOMAIN,
            r#"audit(1.2:6): domain=1 status=allocated mode=enforcing pid=10 uid=0 exe="/x" comm="sk0123456789ab""#,
        );
        for i in 0..(MAX_DENIALS + 100) {
            l.on_record(
                audit::AUDIT_LANDLOCK_ACCESS,
                &format!(r#"audit(1.2:7): domain=1 blockers=fs.read_file path="/f{i}""#),
            );
        }
        let h = l.finish();
        assert_eq!(h.denials.len(), MAX_DENIALS);
        assert_eq!(h.more, 100);
    }
}
