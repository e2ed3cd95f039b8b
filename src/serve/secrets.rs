//! The secrets an operator declares (`stockade serve --secret NAME:HOST…
//! --secret-file NAME=PATH --egress-ca FILE`) and a request's `secrets`,
//! which names them: a request never carries a value.
//!
//! The server never holds a value. Each file is read once at start, to
//! refuse a value that cannot go into a header (empty, a line break, over
//! 64 KiB) before any request, the bytes wiped at once; then each run's
//! supervisor (a child of the spawner) opens the file again, as `stockade
//! run --secret-file` does, and moves the value into its proxy. So no
//! value lies in this process's memory, environment or fds for a hostile
//! request (or a core dump) to find, and a file replaced on disk (a
//! rotated key) holds from the next run on. A file gone meanwhile fails
//! that run's setup, naming the path.
//!
//! A run naming a secret runs under its profile's egress allowlist
//! (`network.allow`), unchanged: each of the secret's hosts must be
//! allowed there (else 400), so a request never widens what the
//! operator's profile lets a jail reach.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::error::ApiError;
use crate::policy::egress::{is_env_name, Secret};
use crate::policy::{self, BaseRoot, Policy};

/// Most names one request may give.
pub const MAX_NAMES: usize = 64;
/// Longest secret name a request may give.
const MAX_NAME: usize = 128;

/// The operator's secrets, each with its file, and the anchors the proxy
/// trusts beside the host's for their hosts.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    pub secrets: Vec<Secret>,
    pub cas: Vec<PathBuf>,
}

impl Declared {
    /// From `--secret`, `--secret-file` and `--egress-ca`, checked
    /// against the served `profiles`: every secret has a file holding a
    /// value that fits a header, and some profile's allowlist allows all
    /// of its hosts. The error names the flag.
    pub fn from_args(
        secret: &[String],
        files: &[String],
        cas: &[PathBuf],
        profiles: &[(String, Policy)],
    ) -> Result<Declared, String> {
        let mut secrets: Vec<Secret> = Vec::new();
        for s in secret {
            let s = Secret::parse(s).map_err(|why| format!("--secret: {why}"))?;
            if secrets.iter().any(|o| o.name == s.name) {
                return Err(format!("--secret: {}: named twice", s.name));
            }
            secrets.push(s);
        }
        for f in files {
            let (name, path) = f
                .split_once('=')
                .ok_or_else(|| format!("--secret-file: {f:?}: expected NAME=PATH"))?;
            let s = secrets.iter_mut().find(|s| s.name == name).ok_or_else(|| {
                format!("--secret-file: {name}: no --secret {name}:HOST names its hosts")
            })?;
            let path = policy::host_path("--secret-file", std::path::Path::new(path))
                .map_err(|e| e.to_string())?;
            check_value(name, &path)?;
            s.file = Some(path);
        }
        for s in &secrets {
            if s.file.is_none() {
                return Err(format!(
                    "--secret: {}: stockade serve reads a value from a file only (--secret-file {}=PATH); it keeps none in its environment",
                    s.name, s.name
                ));
            }
            let usable = profiles
                .iter()
                .any(|(_, p)| uncovered(s, p).is_none() && p.base == BaseRoot::System);
            if !usable {
                return Err(format!(
                    "--secret: {}: no profile of --profiles allows all of its hosts in its egress allowlist (network.allow) on the system root; a request naming it runs under its profile's allowlist",
                    s.name
                ));
            }
        }
        let mut checked = Vec::new();
        for c in cas {
            let c = policy::host_path("--egress-ca", c).map_err(|e| e.to_string())?;
            policy::host_exists(&c, false)
                .map_err(|e| policy::PolicyError::value("--egress-ca", e).to_string())?;
            checked.push(c);
        }
        if !checked.is_empty() && secrets.is_empty() {
            return Err(
                "--egress-ca: only a secret's hosts are intercepted: give --secret too".into(),
            );
        }
        Ok(Declared {
            secrets,
            cas: checked,
        })
    }

    /// Bind the secrets `names` (a request's `secrets`, checked by
    /// [`parse`]) to `p`, the policy of profile `profile`: each one
    /// declared, every host of its allowed by the profile's allowlist, and
    /// its variable set by nothing else. The secrets bound (never a value).
    pub fn bind(
        &self,
        names: &[String],
        profile: &str,
        p: &mut Policy,
    ) -> Result<Vec<Secret>, ApiError> {
        let mut bound = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let field = format!("secrets[{i}]");
            let s = self
                .secrets
                .iter()
                .find(|s| s.name == *name)
                .ok_or_else(|| {
                    ApiError::field(
                        &field,
                        format!("{name} is not a secret this server declares"),
                    )
                })?;
            if p.base != BaseRoot::System {
                return Err(ApiError::field(
                    &field,
                    format!("profile {profile} has no system root (/etc/ssl) for the run's certificate authority"),
                ));
            }
            if let Some(h) = uncovered(s, p) {
                return Err(ApiError::field(
                    &field,
                    format!("{name} goes to {h}, which profile {profile}'s egress allowlist (network.allow) does not allow"),
                ));
            }
            if p.env
                .iter()
                .any(|(k, _)| k.as_encoded_bytes() == name.as_bytes())
            {
                return Err(ApiError::field(
                    &field,
                    format!("{name} is also set by the request's env or the profile's; the jail gets a placeholder, never the value"),
                ));
            }
            bound.push(s.clone());
        }
        if !bound.is_empty() {
            p.secrets.extend(bound.iter().cloned());
            p.egress_cas.extend(self.cas.iter().cloned());
        }
        Ok(bound
            .into_iter()
            .map(|mut s| {
                s.file = None;
                s
            })
            .collect())
    }
}

/// The first host of `s` that `p`'s allowlist does not allow in full.
fn uncovered<'a>(s: &'a Secret, p: &Policy) -> Option<&'a policy::egress::AllowHost> {
    s.hosts
        .iter()
        .find(|h| !p.allow_hosts.iter().any(|a| a.covers(h)))
}

/// The value in `path` read once (and wiped): one a header can carry.
fn check_value(name: &str, path: &std::path::Path) -> Result<(), String> {
    let bad = |why: String| format!("--secret-file: {name}={}: {why}", path.display());
    let f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let v = crate::plan::secrets::read_value(&std::os::fd::OwnedFd::from(f))
        .map_err(|e| bad(e.to_string()))?;
    if v.is_empty() {
        return Err(bad("the value is empty".into()));
    }
    if v.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(bad(
            "the value holds a line break or NUL, and can only go into a header line".into(),
        ));
    }
    Ok(())
}

/// A request's `secrets`: absent, null, or an array of at most
/// [`MAX_NAMES`] distinct names (letters, digits and `_`, not first a
/// digit). Each refusal names the field (`secrets`, `secrets[2]`).
pub fn parse(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let a = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::field(
                "secrets",
                "must be an array of secret names",
            ))
        }
    };
    if a.len() > MAX_NAMES {
        return Err(ApiError::field(
            "secrets",
            format!("at most {MAX_NAMES} names"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(a.len());
    for (i, x) in a.iter().enumerate() {
        let field = format!("secrets[{i}]");
        let Value::String(s) = x else {
            return Err(ApiError::field(field, "must be a string (a secret's name)"));
        };
        if s.len() > MAX_NAME || !is_env_name(s) {
            return Err(ApiError::field(
                field,
                "not a secret name (letters, digits and `_`, not first a digit)",
            ));
        }
        if out.contains(s) {
            return Err(ApiError::field(field, format!("{s} is named twice")));
        }
        out.push(s.clone());
    }
    Ok(out)
}

/// The answer's `secrets`: each bound secret's name and hosts.
pub fn to_json(bound: &[Secret]) -> Value {
    bound
        .iter()
        .map(|s| {
            let hosts: Vec<String> = s.hosts.iter().map(|h| h.to_string()).collect();
            json!({ "name": s.name, "hosts": hosts })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(v: Value) -> String {
        parse(Some(&v)).unwrap_err().field.unwrap_or_default()
    }

    #[test]
    fn names_are_checked_one_by_one() {
        assert_eq!(parse(None).unwrap(), Vec::<String>::new());
        assert_eq!(parse(Some(&Value::Null)).unwrap(), Vec::<String>::new());
        assert_eq!(parse(Some(&json!(["A_1", "b"]))).unwrap(), ["A_1", "b"]);
        assert_eq!(field_of(json!("A")), "secrets");
        assert_eq!(field_of(json!({"A": 1})), "secrets");
        assert_eq!(field_of(json!(["A", null])), "secrets[1]");
        assert_eq!(field_of(json!([1])), "secrets[0]");
        assert_eq!(field_of(json!([["A"]])), "secrets[0]");
        assert_eq!(field_of(json!(["A", "A"])), "secrets[1]");
        for odd in ["", "1A", "A-B", "A B", "A=B", "../x", "A\u{0}", "é", "A\n"] {
            assert_eq!(field_of(json!([odd])), "secrets[0]", "{odd:?}");
        }
        assert_eq!(field_of(json!(["A".repeat(129)])), "secrets[0]");
        let many: Vec<String> = (0..65).map(|i| format!("K{i}")).collect();
        assert_eq!(field_of(json!(many)), "secrets");
    }

    fn secret(name: &str, hosts: &str) -> Secret {
        let mut s = Secret::parse(&format!("{name}:{hosts}")).unwrap();
        s.file = Some("/run/k".into());
        s
    }

    fn profile(allow: &[&str]) -> Policy {
        let mut p = Policy::with_defaults(vec!["true".into()]);
        p.allow_hosts = allow
            .iter()
            .map(|a| policy::egress::AllowHost::parse(a).unwrap())
            .collect();
        p
    }

    #[test]
    fn a_request_binds_only_what_its_profile_allows() {
        let d = Declared {
            secrets: vec![
                secret("API_KEY", "api.example.com"),
                secret("OTHER", "other.example.com:8443"),
            ],
            cas: vec!["/etc/ca.pem".into()],
        };
        let mut p = profile(&["*.example.com"]);
        let bound = d.bind(&["API_KEY".into()], "agent", &mut p).unwrap();
        assert_eq!(bound.len(), 1);
        assert_eq!(bound[0].file, None);
        assert_eq!(p.secrets.len(), 1);
        assert_eq!(p.secrets[0].file.as_deref(), Some("/run/k".as_ref()));
        assert_eq!(p.egress_cas.len(), 1);
        assert_eq!(p.allow_hosts.len(), 1, "the allowlist is the profile's");
        assert_eq!(
            to_json(&bound),
            json!([{"name": "API_KEY", "hosts": ["api.example.com"]}])
        );
        // Its port is not allowed: refused, naming the field.
        let e = d
            .bind(
                &["API_KEY".into(), "OTHER".into()],
                "agent",
                &mut profile(&["*.example.com"]),
            )
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("secrets[1]"));
        assert!(
            e.message.contains("other.example.com:8443"),
            "{}",
            e.message
        );
        let e = d
            .bind(&["NOPE".into()], "agent", &mut profile(&["*.example.com"]))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("secrets[0]"));
        let e = d
            .bind(&["API_KEY".into()], "shell", &mut profile(&[]))
            .unwrap_err();
        assert!(e.message.contains("does not allow"), "{}", e.message);
        let mut p = profile(&["api.example.com"]);
        policy::set_env(&mut p.env, "API_KEY".into(), "x".into());
        let e = d.bind(&["API_KEY".into()], "agent", &mut p).unwrap_err();
        assert!(e.message.contains("placeholder"), "{}", e.message);
        // No name: nothing bound, no anchors added.
        let mut p = profile(&["api.example.com"]);
        assert!(d.bind(&[], "agent", &mut p).unwrap().is_empty());
        assert!(p.egress_cas.is_empty() && p.secrets.is_empty());
    }
}
