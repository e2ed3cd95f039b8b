//! How a run ended, what it used, and which layers were applied.

#![deny(unsafe_code)]

use serde::Serialize;

use crate::plan::SetupError;

/// Version of the JSON outcome; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Exited,
    Signaled,
    Timeout,
    MemoryLimit,
    CpuLimit,
    PidsLimit,
    OutputLimit,
    SeccompViolation,
    SetupError,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub schema_version: u32,
    pub status: Status,
    /// What stockade exits with: the payload's code, 128+N for signal N,
    /// 125 setup, 126 not executable, 127 not found.
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// One line, `<step>: <path>: <reason>`, when the jail could not be set up
    /// or the command could not be executed.
    pub error: Option<String>,
    pub wall_time_ms: u64,
    pub user_time_ms: u64,
    pub system_time_ms: u64,
    pub max_rss_bytes: u64,
}

impl Outcome {
    pub fn setup_error(e: &SetupError) -> Outcome {
        Outcome {
            schema_version: SCHEMA_VERSION,
            status: Status::SetupError,
            exit_code: 125,
            signal: None,
            error: Some(e.to_string()),
            wall_time_ms: 0,
            user_time_ms: 0,
            system_time_ms: 0,
            max_rss_bytes: 0,
        }
    }
}
