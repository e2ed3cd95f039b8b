//! The secrets' plan (`--secret`, `--secret-file`), before clone: each
//! value moved out of the environment into a memfd (or its file opened),
//! never left in this process's memory, so that the jail's init (a clone
//! of it) holds none; a placeholder of the value's shape for the jail's
//! variable; and the jail's trust store made ready for the per-run
//! certificate authority: a host file holding the host's bundle, bound
//! over it, to which the supervisor appends the authority it makes after
//! clone (`crate::egress::Interceptor::prepare`), so that its key never
//! enters the jail either.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use zeroize::Zeroizing;

use super::root::{Access, RootStep};
use super::SetupError;
use crate::policy::egress::{AllowHost, HttpRule};
use crate::policy::{BaseRoot, Policy};
use crate::sys;

/// The system bundles a jail may read, bound over where the host has them
/// as regular files; the first is the one the variables name.
const BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/certs/ca-bundle.crt",
];

/// The variables that name the jail's bundle.
pub const CA_VARS: [&str; 4] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
];

/// The shortest placeholder's random part.
const MIN_RANDOM: usize = 16;

/// The largest value read.
const MAX_VALUE: u64 = 64 * 1024;

/// One secret as the proxy knows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub name: String,
    pub hosts: Vec<AllowHost>,
    /// What the jail's variable holds instead of the value.
    pub placeholder: String,
    /// The media types of the request bodies the value goes into too.
    pub body: Vec<String>,
}

/// What the proxy intercepts and with what, decided before clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interception {
    pub secrets: Vec<Planned>,
    /// The host file bound over the jail's system bundle.
    pub trust: PathBuf,
    /// More anchors for the hosts (`--egress-ca`).
    pub cas: Vec<PathBuf>,
    /// The requests allowed to the hosts that have rules (`--allow-http`).
    pub http: Vec<HttpRule>,
}

/// What the plan holds for the supervisor: the values' fds (in the order
/// of [`Interception::secrets`]) and the trust file, removed on drop by
/// the process that made it. Dropped in the jail's init before anything
/// else (`supervise::spawn`).
#[derive(Debug)]
pub struct Held {
    pub values: Vec<OwnedFd>,
    pub trust: TrustFile,
}

/// A host file removed when dropped in the process that made it.
#[derive(Debug)]
pub struct TrustFile {
    pub path: PathBuf,
    owner: i32,
}

impl Drop for TrustFile {
    fn drop(&mut self) {
        if sys::getpid() == self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The secrets' plan, or None without any. `held`: where to put what is
/// acquired (None: only checks, as `Plan::validate` asks; nothing is
/// taken from the environment). The trust store's binds go into `steps`
/// and `rules`; the variables (placeholders, bundle) into `env`.
pub fn plan(
    p: &Policy,
    steps: &mut Vec<RootStep>,
    rules: &mut Vec<(PathBuf, Access)>,
    env: &mut Vec<(OsString, OsString)>,
    held: Option<&mut Option<Held>>,
) -> Result<Option<Interception>, SetupError> {
    if p.secrets.is_empty() && p.http_rules.is_empty() {
        return Ok(None);
    }
    let flag = match p.secrets.is_empty() {
        true => "--allow-http",
        false => "--secret",
    };
    let fail = |why: String| SetupError::new("network", flag, why);
    if p.base != BaseRoot::System {
        return Err(fail(
            "interception needs the host's /etc/ssl in the jail (the default root) to add its certificate authority to"
                .into(),
        ));
    }
    let bundles: Vec<&str> = BUNDLES
        .into_iter()
        .filter(|b| std::fs::symlink_metadata(b).is_ok_and(|m| m.is_file()))
        .collect();
    let Some(first) = bundles.first() else {
        return Err(fail(format!(
            "no system certificate bundle on this host to add the jail's certificate authority to (looked for {})",
            BUNDLES.join(", ")
        )));
    };
    let Some(held) = held else {
        return Ok(Some(Interception {
            secrets: Vec::new(),
            trust: PathBuf::new(),
            cas: p.egress_cas.clone(),
            http: p.http_rules.clone(),
        }));
    };
    let mut values = Vec::new();
    let mut secrets = Vec::new();
    for s in &p.secrets {
        let fd = take(s)?;
        let placeholder = placeholder_of(&s.name, &fd)?;
        crate::policy::set_env(env, s.name.clone().into(), placeholder.clone().into());
        values.push(fd);
        secrets.push(Planned {
            name: s.name.clone(),
            hosts: s.hosts.clone(),
            placeholder,
            body: s.body.clone(),
        });
    }
    let trust = trust_file(first)?;
    for b in &bundles {
        let dst = PathBuf::from(b);
        rules.push((dst.clone(), Access::ReadExec));
        // Writable, so never copied into the root (a copy would miss what
        // is appended after clone), then made read-only.
        let rel = dst.strip_prefix("/").unwrap_or(&dst).to_path_buf();
        steps.push(RootStep::Bind {
            src: trust.path.clone(),
            dst: rel.clone(),
            writable: true,
            optional: false,
            devices: false,
        });
        steps.push(RootStep::RemountRo { dst: rel });
    }
    for v in CA_VARS {
        crate::policy::set_env(env, v.into(), first.into());
    }
    let path = trust.path.clone();
    *held = Some(Held { values, trust });
    Ok(Some(Interception {
        secrets,
        trust: path,
        cas: p.egress_cas.clone(),
        http: p.http_rules.clone(),
    }))
}

/// The value's fd: the caller's variable moved into a memfd, or the file.
fn take(s: &crate::policy::egress::Secret) -> Result<OwnedFd, SetupError> {
    match &s.file {
        Some(f) => std::fs::File::open(f)
            .map(OwnedFd::from)
            .map_err(|e| SetupError::io("network", f.display().to_string(), &e)),
        // SAFETY: the plan is made before clone in the run's
        // single-threaded process (the CLI's, or a supervisor the spawner
        // forked); no other thread reads the environment.
        #[allow(unsafe_code)]
        None => match unsafe { sys::secret::take_env(&s.name) } {
            Ok(Some(fd)) => Ok(fd),
            Ok(None) => Err(SetupError::new(
                "network",
                "--secret",
                format!(
                    "{}: not set in the environment (or give --secret-file {}=PATH)",
                    s.name, s.name
                ),
            )),
            Err(e) => Err(SetupError::sys("network", "--secret", &e)),
        },
    }
}

/// A value read from its fd into memory that is wiped when dropped; one
/// trailing newline left out.
pub fn read_value(fd: &OwnedFd) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let f = std::fs::File::from(fd.try_clone()?);
    let len = f.metadata()?.len();
    if len > MAX_VALUE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_VALUE} bytes"
        )));
    }
    let mut v = Zeroizing::new(vec![0u8; len as usize]);
    f.read_exact_at(&mut v, 0)?;
    let keep = v
        .strip_suffix(b"\r\n")
        .or_else(|| v.strip_suffix(b"\n"))
        .map_or(v.len(), |s| s.len());
    v[keep..].iter_mut().for_each(|b| *b = 0);
    v.truncate(keep);
    Ok(v)
}

/// The placeholder of the value behind `fd`, read (and wiped) here.
fn placeholder_of(name: &str, fd: &OwnedFd) -> Result<String, SetupError> {
    let fail = |why: String| SetupError::new("network", "--secret", format!("{name}: {why}"));
    let v = read_value(fd).map_err(|e| fail(format!("cannot read the value: {e}")))?;
    if v.is_empty() {
        return Err(fail("the value is empty".into()));
    }
    if v.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(fail(
            "the value holds a line break or NUL, and can only go into a header line".into(),
        ));
    }
    let mut random = |buf: &mut [u8]| {
        use rustls::crypto::ring::default_provider;
        default_provider()
            .secure_random
            .fill(buf)
            .map_err(|_| fail("no randomness from the kernel".into()))
    };
    placeholder(&v, &mut random)
}

/// A placeholder of the value's shape: its vendor prefix (letters, then
/// `-` or `_`, at most three such parts, as in `sk-proj-` or `ghp_`),
/// then random characters of the rest's alphabet (hex, digits, letters and
/// digits, base64 or base64url, else letters and digits), as many as the
/// rest has (at least [`MIN_RANDOM`]), a base64 value's `=` padding kept.
pub fn placeholder<E>(
    value: &[u8],
    random: &mut impl FnMut(&mut [u8]) -> Result<(), E>,
) -> Result<String, E> {
    let prefix = prefix_len(value);
    let rest = &value[prefix..];
    let pad = rest.iter().rev().take_while(|b| **b == b'=').count().min(2);
    let body = &rest[..rest.len() - pad];
    let alphabet = alphabet_of(body);
    let n = body.len().max(MIN_RANDOM);
    let mut out = String::from_utf8_lossy(&value[..prefix]).into_owned();
    let mut bytes = vec![0u8; n * 2];
    random(&mut bytes)?;
    // Two bytes a character: the bias of 65536 mod 64 at most is nil.
    for pair in bytes.chunks(2) {
        let r = u16::from_le_bytes([pair[0], pair[1]]) as usize;
        out.push(alphabet[r % alphabet.len()] as char);
    }
    out.extend(std::iter::repeat_n('=', pad));
    Ok(out)
}

/// The vendor prefix's length: up to three parts of 1 to 8 letters each
/// followed by `-` or `_`, when at least [`MIN_RANDOM`] bytes follow.
fn prefix_len(v: &[u8]) -> usize {
    let mut at = 0;
    for _ in 0..3 {
        let letters = v[at..]
            .iter()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        let sep = v
            .get(at + letters)
            .is_some_and(|b| matches!(b, b'-' | b'_'));
        if !(1..=8).contains(&letters) || !sep || v.len() - (at + letters + 1) < MIN_RANDOM {
            break;
        }
        at += letters + 1;
    }
    at
}

const DIGITS: &[u8] = b"0123456789";
const HEX_LOWER: &[u8] = b"0123456789abcdef";
const HEX_UPPER: &[u8] = b"0123456789ABCDEF";
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The smallest of the alphabets above that holds every byte of `v`.
fn alphabet_of(v: &[u8]) -> &'static [u8] {
    [DIGITS, HEX_LOWER, HEX_UPPER, ALNUM, B64URL, B64]
        .into_iter()
        .find(|a| v.iter().all(|b| a.contains(b)))
        .unwrap_or(ALNUM)
}

/// A new host file holding the bundle at `from` (its CA is appended after
/// clone), readable by the jail's user.
fn trust_file(from: &str) -> Result<TrustFile, SetupError> {
    let bundle = std::fs::read(from).map_err(|e| SetupError::io("network", from, &e))?;
    let mut r = [0u8; 8];
    let _ = rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut r);
    let name = format!(
        "stockade-ca-{}-{:016x}.pem",
        sys::getpid(),
        u64::from_le_bytes(r)
    );
    let path = std::env::temp_dir().join(name);
    let made = TrustFile {
        path: path.clone(),
        owner: sys::getpid(),
    };
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        f.write_all(&bundle)?;
        if !bundle.ends_with(b"\n") {
            f.write_all(b"\n")?;
        }
        Ok(())
    };
    write().map_err(|e| SetupError::io("network", path.display().to_string(), &e))?;
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ph(v: &str) -> String {
        let mut n = 7u8;
        placeholder::<()>(v.as_bytes(), &mut |b: &mut [u8]| {
            for x in b.iter_mut() {
                n = n.wrapping_mul(31).wrapping_add(17);
                *x = n;
            }
            Ok(())
        })
        .unwrap()
    }

    #[test]
    fn placeholders_keep_the_shape_and_nothing_else() {
        let v = "sk-proj-Abcdefghijklmnop0123456789XYZ";
        let p = ph(v);
        assert!(
            p.starts_with("sk-proj-") && p.len() == v.len() && p != v,
            "{p}"
        );
        assert!(p[8..].bytes().all(|b| ALNUM.contains(&b)), "{p}");
        let p = ph("ghp_0123456789abcdefABCDEF0123456789abcd");
        assert!(p.starts_with("ghp_") && p.len() == 40, "{p}");
        let hex = "0123456789abcdef0123456789abcdef";
        let p = ph(hex);
        assert!(
            p.len() == 32 && p.bytes().all(|b| HEX_LOWER.contains(&b)),
            "{p}"
        );
        let p = ph("QUJDREVGR0hJSktMTU5PUFFSU1RVVg+/==");
        assert!(p.ends_with("==") && p.len() == 34, "{p}");
        // Short values still get a long random part; odd bytes give letters
        // and digits.
        let p = ph("hunter2");
        assert_eq!(p.len(), MIN_RANDOM, "{p}");
        let p = ph("pä ss wörd with spaces and more");
        assert!(p.bytes().all(|b| ALNUM.contains(&b)), "{p}");
        // A prefix is kept only when enough follows it.
        assert_eq!(prefix_len(b"sk-short"), 0);
        assert_eq!(prefix_len(b"xoxb-123-abcdefghijklmnopqrs"), 5);
    }
}
