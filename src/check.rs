//! `stockade check`: which layers this host can enforce, and the precise
//! reason when one cannot be.
//!
//! Namespaces, the /proc mount and seccomp are probed by trying them in a
//! child process (the CLI is single-threaded here, so clone and fork are
//! safe); the rest is read from /proc and /sys.
//!
//! This file is the report (and its text and JSON); `namespaces` probes
//! user, mount and pid namespaces and /proc, `layers` the rest.

#![deny(unsafe_code)]

mod error;
mod layers;
mod namespaces;

use std::collections::BTreeMap;

use serde_json::json;

use crate::policy::Layer;
pub use error::ProbeError;
use layers::{probe_cgroup, probe_clone3_pidfd, probe_landlock, probe_seccomp};
use namespaces::probe_userns_and_proc;

/// One probed layer or kernel feature.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: &'static str,
    pub available: bool,
    /// What was found: the reason when unavailable, a summary otherwise.
    pub reason: String,
    /// Facts behind the verdict (sysctls, status fields, versions).
    pub facts: BTreeMap<&'static str, String>,
}

/// Everything `stockade check` found.
#[derive(Debug, Clone)]
pub struct Report {
    pub probes: Vec<Probe>,
    /// The rung each cgroup limit takes on this host for this user:
    /// (limit, enforced_by, why the higher rungs are not available).
    pub limits: Vec<(&'static str, &'static str, Option<String>)>,
}

impl Report {
    pub fn get(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }

    /// Can `layer` be applied on this host?
    pub fn layer_available(&self, layer: Layer) -> bool {
        let ok = |n: &str| self.get(n).map(|p| p.available).unwrap_or(false);
        match layer {
            Layer::Userns => ok("userns") && ok("proc"),
            Layer::Landlock => ok("landlock"),
            Layer::Seccomp => ok("seccomp"),
            Layer::Cgroup => ok("cgroup"),
        }
    }
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A `Name:\tvalue` field of /proc/self/status.
fn status_field(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Probe every layer. Must be called while the process is single-threaded.
pub fn probe_all() -> Report {
    let (u, p) = probe_userns_and_proc();
    let (c3, pidfd) = probe_clone3_pidfd();
    // Every cgroup limit tried as a run would (the trial's groups are
    // removed when it is dropped).
    let trial = crate::cgroup::prepare(&crate::cgroup::Request {
        memory: Some(1 << 30),
        memory_high: Some(1 << 30),
        cpus: Some(1.0),
        pids: Some(1024),
    });
    let cg = probe_cgroup(&trial);
    let limits = crate::plan::limits::rungs(&trial);
    if let Some(c) = trial.cgroup {
        let _ = c.remove();
    }
    Report {
        probes: vec![u, p, probe_landlock(), probe_seccomp(), cg, pidfd, c3],
        limits,
    }
}

/// 0 when every layer in `require` is available, else 1.
pub fn exit_code(r: &Report, require: &[Layer]) -> i32 {
    if require.iter().all(|l| r.layer_available(*l)) {
        0
    } else {
        1
    }
}

fn missing(r: &Report, require: &[Layer]) -> Vec<&'static str> {
    require
        .iter()
        .filter(|l| !r.layer_available(**l))
        .map(|l| l.name())
        .collect()
}

/// The report for a person.
pub fn to_text(r: &Report, profile: &str, require: &[Layer]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let req: Vec<&str> = require.iter().map(|l| l.name()).collect();
    let _ = writeln!(
        o,
        "stockade check: profile {profile} requires {}",
        if req.is_empty() {
            "no layer".to_string()
        } else {
            req.join(", ")
        }
    );
    for p in &r.probes {
        let _ = writeln!(
            o,
            "  {:<9} {:<12} {}",
            p.name,
            if p.available {
                "available"
            } else {
                "unavailable"
            },
            p.reason
        );
    }
    let _ = writeln!(
        o,
        "  limits (the rung each takes for uid {}):",
        crate::sys::geteuid()
    );
    for (name, by, why) in &r.limits {
        let _ = writeln!(
            o,
            "    {name:<12} {by:<13} {}",
            why.as_deref().unwrap_or("")
        );
    }
    let miss = missing(r, require);
    if miss.is_empty() {
        let _ = writeln!(o, "ok: every layer the profile requires is available");
    } else {
        let _ = writeln!(o, "not ok: required but unavailable: {}", miss.join(", "));
    }
    o
}

/// The report as one JSON document.
pub fn to_json(r: &Report, profile: &str, require: &[Layer]) -> String {
    let mut layers = serde_json::Map::new();
    for p in &r.probes {
        layers.insert(
            p.name.to_string(),
            json!({ "available": p.available, "reason": p.reason, "facts": p.facts }),
        );
    }
    let limits: serde_json::Map<String, serde_json::Value> = r
        .limits
        .iter()
        .map(|(n, by, why)| {
            let v = match why {
                Some(w) => json!({ "enforced_by": by, "why": w }),
                None => json!({ "enforced_by": by }),
            };
            (n.to_string(), v)
        })
        .collect();
    let v = json!({
        "schema_version": 1,
        "limits": limits,
        "profile": profile,
        "required": require.iter().map(|l| l.name()).collect::<Vec<_>>(),
        "missing": missing(r, require),
        "ok": exit_code(r, require) == 0,
        "layers": layers,
    });
    v.to_string() + "\n"
}
