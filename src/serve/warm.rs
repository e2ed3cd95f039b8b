//! One warm pool member: an ordinary, fresh jail of a profile, started
//! through the library ([`Jail::spawn`], the policy a cold request with
//! default limits gets, its workdir a tmpfs of its own) with its clock
//! held, whose payload is a bootstrap
//! (`warm.py`): the profile's `python3` imports the `--warm-import`
//! modules, says it is ready, and waits for its one program.
//!
//! A member serves exactly one request and ends with it; a used jail is
//! never reused. Each member is its own process tree in its own
//! namespaces, started as a separate interpreter, not forked from a
//! common one: its hash seed and its `random` seed come from the kernel
//! when it starts, like any `python3`'s, so no run can predict another's.
//! What a pooled run shares with the others is only what every cold run
//! shares too (the profile's read-only files); what differs from a cold
//! `python3` is that the warm imports are already in `sys.modules`, the
//! CPU time and memory of the start-up and imports count in the outcome's
//! usage, and `sys._getframe()` sees the bootstrap's two frames below the
//! program's.
//!
//! The hand-over: the clock is started (the deadline counts
//! from here, as does the outcome's `wall_time_ms`; the payload's output
//! is captured into the outcome, or for an ndjson request streamed to the
//! pipes the member was spawned with), then a header goes to
//! the payload's stdin (the program's argv and its environment
//! additions) and the request's files, which the bootstrap writes into
//! its workdir (so they are the jail's, on its own tmpfs, as a cold
//! run's are); the request's stdin follows, left unread by the
//! bootstrap.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::error::ApiError;
use super::request::FileSpec;
use crate::policy::Policy;
use crate::{Child, Jail, Stdio};

/// The bootstrap, run as `python3 -c BOOTSTRAP READY_FD MODULES`.
const BOOTSTRAP: &str = include_str!("warm.py");

/// The fork server's program: the bootstrap's definitions, then the
/// zygote (`zygote.py`).
pub fn fork_bootstrap() -> String {
    let defs = BOOTSTRAP
        .strip_suffix("_boot(_sys, _os)\n")
        .unwrap_or(BOOTSTRAP);
    format!("{defs}{}", include_str!("zygote.py"))
}

/// What a forked child reads on its stdin before the program's own
/// stdin: the [`header`], then the files (a count, then each path,
/// content and mode; see `zygote.py`'s `_files`).
pub fn fork_input(argv: &[OsString], env: &[(OsString, OsString)], files: &[FileSpec]) -> Vec<u8> {
    let mut out = header(argv, env);
    out.extend(format!("{:08x}", files.len()).into_bytes());
    for f in files {
        out.extend(format!("{:08x}", f.path.len()).into_bytes());
        out.extend(f.path.as_bytes());
        out.extend(format!("{:08x}", f.content.len()).into_bytes());
        out.extend(&f.content);
        out.push(if f.executable { b'x' } else { b'-' });
    }
    out
}

/// How long a member may take to become ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Environment variables a pooled run may not set: they change how the
/// interpreter starts (or which one), which a warm member has done
/// already.
fn starts_interpreter(name: &[u8]) -> bool {
    [b"PYTHON".as_slice(), b"LC_", b"LD_", b"MALLOC_"]
        .iter()
        .any(|p| name.starts_with(p))
        || [
            b"LANG".as_slice(),
            b"LANGUAGE",
            b"TZ",
            b"PATH",
            b"HOME",
            b"GLIBC_TUNABLES",
        ]
        .contains(&name)
}

/// Whether `argv` is `python3 -c CODE [ARGS]` or `python3 FILE [ARGS]`,
/// the two ways of running a program a member can take.
pub fn servable_argv(argv: &[OsString]) -> bool {
    if argv.first().is_none_or(|a| a != "python3") {
        return false;
    }
    match argv.get(1).map(|a| a.as_bytes()) {
        Some(b"-c") => argv.len() >= 3,
        Some(f) => !f.is_empty() && !f.starts_with(b"-"),
        None => false,
    }
}

/// The variables `policy` sets beyond (or otherwise than) `template`, or
/// None when one of them is not for a warm member.
pub fn env_additions(policy: &Policy, template: &Policy) -> Option<Vec<(OsString, OsString)>> {
    let mut extra = Vec::new();
    for (k, v) in &policy.env {
        if template.env.iter().any(|(tk, tv)| tk == k && tv == v) {
            continue;
        }
        if starts_interpreter(k.as_bytes()) {
            return None;
        }
        extra.push((k.clone(), v.clone()));
    }
    Some(extra)
}

/// Why a member did not become ready (the pool logs it and tries again).
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("pipe: {0}")]
    Pipe(nix::Error),
    #[error("starting the jail: {0}")]
    Spawn(crate::Error),
    /// It ended, or said nothing in time, before it was ready; how the
    /// jail ended.
    #[error("{why}: status {status}, exit code {exit_code}: {stderr}")]
    NotReady {
        why: &'static str,
        status: String,
        exit_code: i32,
        stderr: String,
    },
    /// Not ready, and its outcome could not be read.
    #[error("{why}; {source}")]
    Lost {
        why: &'static str,
        source: Box<crate::Error>,
    },
}

/// A member, ready: its interpreter waits for the header.
pub struct Member {
    child: Child,
}

/// Start one member of `template`, importing `modules`
/// (comma-separated); wait until it is ready.
pub fn build(template: &Policy, modules: &str) -> Result<Member, WarmError> {
    let (ready_r, ready_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(WarmError::Pipe)?;
    let mut p = template.clone();
    p.argv = ["python3", "-c", BOOTSTRAP]
        .iter()
        .map(OsString::from)
        .chain([
            OsString::from(ready_w.as_raw_fd().to_string()),
            OsString::from(modules),
        ])
        .collect();
    p.keep_fds = vec![ready_w.as_raw_fd()];
    let child = Jail::new(p)
        .hold_clock()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(WarmError::Spawn)?;
    drop(ready_w);
    let mut m = Member { child };
    let Err(why) = wait_ready(ready_r) else {
        return Ok(m);
    };
    let _ = m.child.kill();
    let o = m.child.wait().map_err(|source| WarmError::Lost {
        why,
        source: Box::new(source),
    })?;
    let stderr = o
        .stderr
        .as_ref()
        .map(|s| s.data.as_str())
        .unwrap_or_default();
    Err(WarmError::NotReady {
        why,
        status: serde_json::to_value(o.status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        exit_code: o.exit_code,
        stderr: stderr.trim_end().to_string(),
    })
}

/// The bootstrap's `r` on the ready pipe; else why not.
fn wait_ready(r: OwnedFd) -> Result<(), &'static str> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(&r), PollFlags::POLLIN)];
    let ms = PollTimeout::try_from(READY_WITHIN.as_millis() as i32).unwrap_or(PollTimeout::NONE);
    loop {
        match poll(&mut fds, ms) {
            Ok(0) => return Err("not ready in time"),
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Err("waiting for it failed"),
        }
    }
    let mut b = [0u8; 1];
    match std::fs::File::from(r).read(&mut b) {
        Ok(1) if b[0] == b'r' => Ok(()),
        _ => Err("the bootstrap ended before it was ready"),
    }
}

impl Member {
    /// Whether it ended while parked (killed from outside): not to be
    /// handed a program.
    pub fn ended(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Kill it and wait for its end.
    pub fn discard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Hand the member its program: `policy` (the request's, argv, env and
    /// limits checked by the pool) and `files`; with `limits`, the run's
    /// cgroup limits first, into the member's run cgroup. The started
    /// child (its stdin taken when `stdin`, else closed); None when its
    /// run cgroup could not take the limits (the member is killed; no
    /// program was handed over).
    pub fn hand_over(
        self,
        policy: &Policy,
        env: &[(OsString, OsString)],
        files: &[FileSpec],
        stdin: bool,
        stream: bool,
        limits: bool,
    ) -> Result<Option<Child>, ApiError> {
        let Member { mut child } = self;
        let clock = |e: crate::Error| ApiError::internal(format!("starting the clock: {e}"));
        if limits {
            let t = std::time::Instant::now();
            let set = child
                .start_clock_limits(&policy.limits, stream)
                .map_err(clock)?;
            crate::stages::lap(crate::stages::Stage::MemberLimits, t);
            if !set {
                Member { child }.discard();
                return Ok(None);
            }
        } else {
            child
                .start_clock_output(policy.limits.timeout, policy.limits.max_output, stream)
                .map_err(clock)?;
        }
        let head = fork_input(&policy.argv, env, files);
        let mut pipe = child.stdin.take();
        if let Some(p) = pipe.as_mut() {
            // A member that died meanwhile: EPIPE; its outcome says why.
            let _ = p.write_all(&head);
        }
        if stdin {
            child.stdin = pipe;
        }
        if !stream {
            // Captured: the supervisor writes nothing to these.
            child.stdout = None;
            child.stderr = None;
        }
        Ok(Some(child))
    }
}

/// The header the bootstrap reads: the body's length as 8 hex digits,
/// then the argv count, argv, and `NAME=value` for each variable,
/// separated by NUL (none of them holds one: the request was checked).
/// No cwd: the member's payload started where a cold run starts (the
/// policy's chdir, the workdir, or in the fallback its host path).
pub fn header(argv: &[OsString], env: &[(OsString, OsString)]) -> Vec<u8> {
    let mut fields: Vec<Vec<u8>> = vec![argv.len().to_string().into()];
    fields.extend(argv.iter().map(|a| a.as_bytes().to_vec()));
    fields.extend(
        env.iter()
            .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat()),
    );
    let body = fields.join(&0u8);
    let mut out = format!("{:08x}", body.len()).into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn which_argv_a_member_serves() {
        assert!(servable_argv(&v(&["python3", "-c", "pass"])));
        assert!(servable_argv(&v(&["python3", "-c", "pass", "x"])));
        assert!(servable_argv(&v(&["python3", "a.py", "-v"])));
        assert!(!servable_argv(&v(&["python3", "-c"])));
        assert!(!servable_argv(&v(&["python3"])));
        assert!(!servable_argv(&v(&["python3", "-I", "a.py"])));
        assert!(!servable_argv(&v(&["python3", "-"])));
        assert!(!servable_argv(&v(&["python", "-c", "pass"])));
        assert!(!servable_argv(&v(&["sh", "-c", "pass"])));
    }

    #[test]
    fn variables_that_start_the_interpreter_are_refused() {
        for n in [
            "PYTHONHASHSEED",
            "PYTHONPATH",
            "LC_ALL",
            "LANG",
            "PATH",
            "LD_PRELOAD",
        ] {
            assert!(starts_interpreter(n.as_bytes()), "{n}");
        }
        for n in ["FOO", "ANSWER", "PYTHO"] {
            assert!(!starts_interpreter(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn header_layout() {
        let h = header(&v(&["python3", "-c", "pass"]), &[("K".into(), "v".into())]);
        let body = b"3\x00python3\x00-c\x00pass\x00K=v";
        assert_eq!(&h[..8], format!("{:08x}", body.len()).as_bytes());
        assert_eq!(&h[8..], body);
    }
}
