//! Landlock: a second wall derived from the same mount list that builds the
//! root. Applied in the payload after pivot_root.

#![deny(unsafe_code)]

use std::path::PathBuf;

use crate::plan::Access;

/// What the kernel enforced.
#[derive(Debug, Clone)]
pub struct Report {
    /// "fully_enforced", "partially_enforced" or "not_enforced".
    pub status: String,
    /// One line of JSON for the outcome.
    pub detail: String,
}

/// Restrict the calling thread (placeholder until the ruleset lands).
pub fn apply(_rules: &[(PathBuf, Access)], _deny_tcp: bool) -> Result<Report, String> {
    Ok(Report {
        status: "not_enforced".into(),
        detail: "{\"status\":\"not_enforced\"}".into(),
    })
}
