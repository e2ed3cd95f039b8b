//! How a run ended, what it used, and which layers were applied: the JSON
//! outcome (schema in src/outcome.schema.json).

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::plan::SetupError;

/// A name from one of the outcome's fixed vocabularies.
pub type Name = &'static str;

/// The one `&'static str` for `s`: the outcome's names and vocabularies
/// (layer and limit names, `enforced_by`, encodings) are a small fixed set,
/// so each distinct string is kept once, however many outcomes are read.
fn intern(s: String) -> &'static str {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = seen.iter().find(|k| **k == s) {
        return k;
    }
    let k: &'static str = Box::leak(s.into_boxed_str());
    seen.push(k);
    k
}

fn static_str<'de, D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
    String::deserialize(d).map(intern)
}

fn static_keys<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<BTreeMap<Name, T>, D::Error> {
    let m = BTreeMap::<String, T>::deserialize(d)?;
    Ok(m.into_iter().map(|(k, v)| (intern(k), v)).collect())
}

/// Version of the JSON outcome; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The payload exited on its own; `exit_code` is its code.
    Exited,
    /// The payload was killed by a signal nobody in stockade sent.
    Signaled,
    /// The wall-clock deadline (--timeout) passed.
    Timeout,
    /// The memory limit was hit (cgroup OOM kill, or the rlimit fallback).
    MemoryLimit,
    /// The CPU-time limit was hit (SIGXCPU / SIGKILL from RLIMIT_CPU).
    CpuLimit,
    /// The process-count limit was reached.
    PidsLimit,
    /// stdout + stderr reached --max-output; the jail was killed.
    OutputLimit,
    /// Without a tmpfs of its own (the fallback), the run directory held
    /// more than --tmp-size, or a file reached it (SIGXFSZ): the jail was
    /// killed.
    DiskLimit,
    /// A denied syscall killed the payload (seccomp action kill).
    SeccompViolation,
    /// The jail could not be set up, or the command could not be executed.
    SetupError,
}

/// The namespace layers, in the order the outcome documents them.
pub const NAMESPACE_LAYERS: [&str; 7] = [
    "user_namespace",
    "mount_namespace",
    "pid_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "cgroup_namespace",
];

/// Whether a layer is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerState {
    Applied,
    Unavailable,
    Skipped,
}

/// One layer's state with detail (kernel's reason when unavailable).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerReport {
    pub state: LayerState,
    #[serde(skip_serializing_if = "serde_json::Value::is_null", default)]
    pub detail: serde_json::Value,
}

impl LayerReport {
    pub fn applied(detail: serde_json::Value) -> Self {
        LayerReport {
            state: LayerState::Applied,
            detail,
        }
    }
    pub fn unavailable(why: impl Into<String>) -> Self {
        LayerReport {
            state: LayerState::Unavailable,
            detail: serde_json::json!({ "why": why.into() }),
        }
    }
    pub fn skipped(why: impl Into<String>) -> Self {
        LayerReport {
            state: LayerState::Skipped,
            detail: serde_json::json!({ "why": why.into() }),
        }
    }
}

/// One limit in force and how it was enforced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LimitReport {
    /// Bytes, seconds, CPUs or a count, as the limit's unit.
    pub limit: serde_json::Value,
    /// `cgroup` (v2), `cgroup_v1`, `cgroup_systemd` (a scope the user's
    /// systemd delegated), `rlimit_as`, `rlimit_cpu`, `rlimit_nproc`,
    /// `rlimit_fsize`, `rlimit_nofile`, `rlimit_core`, `tmpfs`,
    /// `rlimit_fsize+supervisor` (the fallback's metered run directory),
    /// `supervisor`, or `none`.
    #[serde(deserialize_with = "static_str")]
    pub enforced_by: Name,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// memory and pids: whether the limit was reached, where that can be
    /// known (a controller's counters; absent when nothing can tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit: Option<bool>,
    /// memory and pids: how the verdict was reached, `counted` (from the
    /// controller's own counters) or `inferred` (the rlimit rung: from a
    /// sampled peak and an abnormal end).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_static_str"
    )]
    pub verdict: Option<Name>,
    /// memory, under a controller: what the kernel's OOM killer killed at
    /// this limit; absent when it killed nothing (or nothing counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_killed: Option<OomKilled>,
}

/// What the kernel's OOM killer killed at the run's memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKilled {
    /// How many processes of the run it killed: the memory controller's
    /// own count (cgroup v2 `memory.events` `oom_kill`, v1
    /// `memory.oom_control` `oom_kill`), at least 1.
    pub processes: u64,
    /// Whether the payload itself was among them: it ended by SIGKILL
    /// (with `memory.oom.group`, every process of the run is killed at
    /// once). False: only other processes were (a child the payload
    /// started), and the payload ended as it did after them.
    pub payload: bool,
}

fn opt_static_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Name>, D::Error> {
    Option::<String>::deserialize(d).map(|o| o.map(intern))
}

/// Captured output of one stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Captured {
    /// `utf-8` or `base64`.
    #[serde(deserialize_with = "static_str")]
    pub encoding: Name,
    pub data: String,
    /// True when more was written than kept.
    pub truncated: bool,
}

/// Resource usage of the whole jail.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Usage {
    pub wall_time_ms: u64,
    pub user_time_ms: u64,
    pub system_time_ms: u64,
    /// cgroup memory.peak, else the largest resident set of one process.
    pub peak_memory_bytes: u64,
    /// Where peak_memory_bytes comes from: `cgroup` or `rusage`.
    #[serde(deserialize_with = "static_str")]
    pub peak_memory_source: Name,
    /// Most tasks alive at once (cgroup pids.peak, else sampled by init).
    pub peak_pids: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// The syscall that killed the payload, when it can be known.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Violation {
    pub syscall_nr: Option<i64>,
    pub syscall_name: Option<String>,
}

/// One thing stockade refused the payload while it ran, as
/// `{"kind": "network", …}`. Each is one record per distinct refusal
/// (per syscall and thread, per host, port and reason, per access and
/// path) with how many times it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Denial {
    /// A connection the egress proxy refused (`--allow-host`): the host
    /// (a name or an address) and port asked for, why, and how many
    /// times.
    Network {
        host: String,
        port: u16,
        reason: String,
        #[serde(default = "one")]
        count: u64,
    },
    /// A syscall the seccomp allowlist refused with an errno (errno
    /// mode): its name, the thread that made it (its id in the jail's pid
    /// namespace; None when it was gone before it could be read) and how
    /// many times that thread made it.
    Seccomp {
        syscall: String,
        thread: Option<i64>,
        count: u64,
    },
    /// An access Landlock refused, as the kernel's audit record of this
    /// run's domain says it: `access` the rights missing, in the kernel's
    /// names (`fs.read_file`, `fs.make_reg`, `net.connect_tcp`,
    /// `scope.signal`; several joined by `,`); `path` the file or
    /// directory as the payload named it from its root (absent when the
    /// access is not to a path); `detail` the rest of the record when it
    /// is not a path (`daddr=… dest=…`, `opid=… ocomm=…`); and how many
    /// times.
    Landlock {
        access: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        count: u64,
    },
    /// An access to a masked path (`--deny`, `--deny-glob`) that could be
    /// seen: `path` the jail path covered, `access` `open` (the cover, an
    /// empty file or directory, was opened: to be read or listed), and
    /// how many times (at least: see `observe::masks`). What touches a
    /// cover without opening it (a stat, an open for writing the
    /// read-only cover refuses first) is not seen.
    Mask {
        path: String,
        access: String,
        count: u64,
    },
}

fn one() -> u64 {
    1
}

impl Denial {
    /// The kind, as the JSON names it (`network`, `seccomp`, `landlock`,
    /// `mask`).
    pub fn kind(&self) -> &'static str {
        match self {
            Denial::Network { .. } => "network",
            Denial::Seccomp { .. } => "seccomp",
            Denial::Landlock { .. } => "landlock",
            Denial::Mask { .. } => "mask",
        }
    }
}

/// What a learning run (`--learn`) heard besides the syscalls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// Each path the command named to a path-taking syscall, absolute as
    /// the jail saw it, with the strongest access seen.
    pub paths: Vec<LearnedPath>,
    /// Paths beyond the most kept.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub more_paths: u64,
    /// Each `HOST:PORT` reached through the egress proxy, in the order
    /// first asked for.
    pub hosts: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One path a learning run used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedPath {
    pub path: std::path::PathBuf,
    /// `look` (stat, access, readlink), `read` (open for reading, exec),
    /// `write` (open for writing, truncate, chmod, chown, utimes) or
    /// `entry` (created, removed or renamed: its directory changes).
    pub access: String,
}

/// One path an overlay's payload changed (`--overlay`), as its upper
/// layer says after the run, compared with the host directory under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The path inside the jail (names that are not UTF-8 are shown with
    /// U+FFFD; the commit works on the real bytes).
    pub path: String,
    pub kind: ChangeKind,
    /// What is there now (`file`, `dir`, `symlink`, `fifo`, `socket`,
    /// `device`); for a deletion, what was there.
    #[serde(rename = "type", deserialize_with = "static_str")]
    pub file_type: Name,
    /// A file's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A file's new content's SHA-256 (hex); absent for a file larger
    /// than the cap (`Workspaces::max_file`) or one stockade could not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target, as data (never followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The permission bits now (`0644`), but for symlinks and deletions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Not in the host directory; new (a directory's content is listed
    /// beneath it).
    Added,
    /// A file's content or a symlink's target changed (its mode may have
    /// too).
    Modified,
    /// Gone (a directory with everything beneath it).
    Deleted,
    /// Something of another type in its place (a file where a directory
    /// was: the directory is gone with its content).
    TypeChanged,
    /// Only the permission bits changed.
    ModeChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::TypeChanged => "type_changed",
            ChangeKind::ModeChanged => "mode_changed",
        }
    }
}

/// What a commit of the overlays' changes to their host directories did
/// (`--commit`, `stockade overlay commit`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The jail paths applied, in the order applied (at most the outcome's
    /// cap on changes; `applied_count` counts them all).
    pub applied: Vec<String>,
    pub applied_count: u64,
    /// Those not applied, each with why (a symlink or a non-directory on
    /// the host path, a file the host has since, one too large, …).
    pub refused: Vec<RefusedChange>,
    /// Why nothing was committed, when nothing was (the payload's exit,
    /// an upper layer not seen whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One change a commit did not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedChange {
    pub path: String,
    pub reason: String,
}

/// A step that failed to set the jail up or start the command, in parts
/// (the outcome's `error` is its text): a front end words it from these
/// (the bwrap front end, as bubblewrap does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupFailure {
    /// The step (`bind`, `chdir`, `execve`, `create namespaces`, …).
    pub step: String,
    /// What it worked on; absent when nothing.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub path: String,
    /// The errno (its number) a system call gave, or that names what the
    /// step refused.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub errno: Option<i32>,
    /// What else the step names: a symlink's existing target, an
    /// overlay's options, the id switched to.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub value: Option<String>,
}

impl From<&SetupError> for SetupFailure {
    fn from(e: &SetupError) -> Self {
        SetupFailure {
            step: e.step().to_string(),
            path: e.path().to_string(),
            errno: e.errno(),
            value: e.value().map(str::to_string),
        }
    }
}

/// The whole outcome of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub schema_version: u32,
    pub status: Status,
    /// What stockade exits with: the payload's code, 128+N for signal N,
    /// 125 setup error, 126 not executable, 127 not found.
    pub exit_code: i32,
    /// The signal that ended the payload, if one did.
    pub signal: Option<i32>,
    /// One line, `<step>: <path>: <reason>`, when the jail could not be set up
    /// or the command could not be executed.
    pub error: Option<String>,
    /// That failed step in parts, where stockade knows them (absent for a
    /// refusal before the jail, such as an invalid policy).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub setup: Option<SetupFailure>,
    pub usage: Usage,
    #[serde(deserialize_with = "static_keys")]
    pub limits: BTreeMap<Name, LimitReport>,
    #[serde(deserialize_with = "static_keys")]
    pub layers: BTreeMap<Name, LayerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_violation: Option<Violation>,
    /// Learning mode: syscalls used outside the allowlist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_learned: Option<Vec<String>>,
    /// `--learn`: the paths the command used and the hosts it reached
    /// through the recording proxy.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub learned: Option<Learned>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Captured>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Captured>,
    /// Why the run ended as it did, in one line, where stockade knows
    /// more than the status says: the syscall that got a kill-mode jail
    /// killed, how full the run directory was when the meter stopped it.
    /// The CLI prints it as `stockade: DETAIL` (see [`crate::run`]); it is
    /// never written to the payload's stderr; absent when there is nothing
    /// to add.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    /// What stockade refused the payload while it ran (at most
    /// [`MAX_DENIALS`] of each kind; `denials_more` counts the rest);
    /// absent when empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub denials: Vec<Denial>,
    /// The kinds of refusal this run could not record, each with why
    /// (`landlock`: the kernel's audit records cannot be read here, or
    /// audit is off; `seccomp`: another filter holds the one listener);
    /// absent when every kind in force is recorded.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub denials_unrecorded: BTreeMap<String, String>,
    /// Refusals counted but not listed in `denials`, per kind: those
    /// beyond [`MAX_DENIALS`] records of a kind, and (landlock) those the
    /// kernel counted in the domain whose records were lost on the way;
    /// absent when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub denials_more: BTreeMap<String, u64>,
    /// `--denials-fd` lines not written: the reader did not take them
    /// without making stockade wait (each record is in `denials` all the
    /// same); absent when none.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub denial_lines_dropped: u64,
    /// stockade's own warnings about this run (a limit nothing enforces,
    /// user namespaces refused, a cgroup or tmpfs left behind), each one
    /// line without the `stockade: warning: ` prefix, in the order they
    /// arose. They are never written to the payload's stderr: the CLI
    /// prints them on its own (see [`crate::run`]); absent when empty.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
    /// The denied paths hidden, and how (see [`crate::plan::Masked`]);
    /// absent when nothing was denied.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub masked: Vec<crate::plan::Masked>,
    /// What the payload changed in its overlays (`--overlay`), path by
    /// path, sorted; absent without overlays, or when the upper layers
    /// could not be read (a warning says why).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub changes: Option<Vec<Change>>,
    /// More changes than `changes` lists (`Workspaces::max_changes`), or an
    /// upper layer not read whole (too many entries, too deep).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub changes_truncated: bool,
    /// The commit of those changes to the host directories (`--commit`);
    /// absent when none was asked.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub commit: Option<Committed>,
}

/// The most denial records an outcome keeps of each kind.
pub const MAX_DENIALS: usize = 256;

impl Outcome {
    /// An outcome with nothing run yet.
    pub fn new() -> Outcome {
        Outcome {
            schema_version: SCHEMA_VERSION,
            status: Status::Exited,
            exit_code: 0,
            signal: None,
            error: None,
            setup: None,
            usage: Usage {
                peak_memory_source: "rusage",
                ..Default::default()
            },
            limits: BTreeMap::new(),
            layers: BTreeMap::new(),
            seccomp_violation: None,
            seccomp_learned: None,
            learned: None,
            stdout: None,
            stderr: None,
            detail: None,
            denials: Vec::new(),
            denials_unrecorded: BTreeMap::new(),
            denials_more: BTreeMap::new(),
            denial_lines_dropped: 0,
            warnings: Vec::new(),
            masked: Vec::new(),
            changes: None,
            changes_truncated: false,
            commit: None,
        }
    }

    pub fn setup_error(e: &SetupError) -> Outcome {
        let mut o = Outcome::new();
        o.set_setup_error(e);
        o
    }

    pub fn set_setup_error(&mut self, e: &SetupError) {
        self.status = Status::SetupError;
        self.exit_code = 125;
        self.signal = None;
        self.error = Some(e.to_string());
        self.setup = Some(e.into());
    }

    /// Compact, one-line JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"schema_version\":{SCHEMA_VERSION},\"status\":\"setup_error\",\"exit_code\":125,\"error\":\"cannot serialize outcome: {e}\"}}"))
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome::new()
    }
}

/// Keep `data` as UTF-8 when it is, else base64.
pub fn capture(data: &[u8], truncated: bool) -> Captured {
    match std::str::from_utf8(data) {
        Ok(s) => Captured {
            encoding: "utf-8",
            data: s.to_string(),
            truncated,
        },
        Err(_) => Captured {
            encoding: "base64",
            data: base64(data),
            truncated,
        },
    }
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn capture_picks_encoding() {
        assert_eq!(capture(b"hi\n", false).encoding, "utf-8");
        let c = capture(&[0xff, 0x00], true);
        assert_eq!(
            (c.encoding, c.data.as_str(), c.truncated),
            ("base64", "/wA=", true)
        );
    }

    #[test]
    fn json_has_schema_version_and_snake_case_status() {
        let mut o = Outcome::new();
        o.status = Status::MemoryLimit;
        let j = o.to_json();
        assert!(j.contains("\"schema_version\":1"), "{j}");
        assert!(j.contains("\"status\":\"memory_limit\""), "{j}");
    }

    #[test]
    fn warnings_are_left_out_when_none_and_read_back() {
        let mut o = Outcome::new();
        assert!(!o.to_json().contains("warnings"));
        o.warnings.push("--cpus 0.5 not enforced".into());
        let j = o.to_json();
        assert!(
            j.contains("\"warnings\":[\"--cpus 0.5 not enforced\"]"),
            "{j}"
        );
        let back: Outcome = serde_json::from_str(&j).unwrap();
        assert_eq!(back.warnings, o.warnings);
    }
}
