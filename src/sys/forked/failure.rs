//! A forked child's failed step, as it says it on the setup pipe before
//! it ends (125), and as the server reads it back.
//!
//! Each step is named as a cold jail names the same failure (the step
//! and path of `plan::step` and `jail::error`: `start payload`, `tmpfs`
//! on `tmp`, `create namespaces`, …), so that the outcome's `setup` is the
//! same whichever launcher started the run; the call that failed, what it
//! was called on and the errno travel with it as the detail.

use std::fmt::Display;

use crate::{errno_text, Errno, SysError, SysResult};

/// A step of a forked child that failed: the cold jail's name for it and
/// the path it worked on (in the cold jail's form: a jail path without its
/// leading `/` for the root's mounts; "" when none), and the failed call.
#[derive(Debug)]
pub(super) struct Failed {
    pub step: &'static str,
    pub path: String,
    pub err: SysError,
}

/// Name the step (and the path it worked on) of a failed call, as the cold
/// jail's `jail::error::Step` does. The path is formatted only when the
/// call failed.
pub(super) trait Step<T> {
    fn step(self, step: &'static str, path: impl Display) -> Result<T, Failed>;
}

impl<T> Step<T> for SysResult<T> {
    fn step(self, step: &'static str, path: impl Display) -> Result<T, Failed> {
        self.map_err(|err| Failed {
            step,
            path: path.to_string(),
            err,
        })
    }
}

/// A failed step's record on the setup pipe, one line (init's record may
/// follow it): `e`, the step, the path, the errno's number, the call, what
/// it was called on, tab-separated. [`failure_of`] reads it back.
pub(super) fn failure(f: &Failed) -> Vec<u8> {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    format!(
        "e{}\t{}\t{}\t{}\t{}\n",
        clean(f.step),
        clean(&f.path),
        f.err.errno as i32,
        clean(f.err.call),
        clean(&f.err.arg),
    )
    .into_bytes()
}

/// A forked child's failed step, read back from its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The step, as a cold jail names the same failure.
    pub step: String,
    /// What it worked on, as a cold jail shows it; "" when nothing.
    pub path: String,
    /// What the kernel answered (or what names the refusal).
    pub errno: Errno,
    /// The call that failed, and what it was called on: the detail.
    pub call: String,
    pub arg: String,
}

impl Failure {
    /// Why it failed, as a cold jail's setup error says it: the call, its
    /// argument and the errno, as [`SysError`] shows them.
    pub fn reason(&self) -> String {
        format!("{}({}): {}", self.call, self.arg, errno_text(self.errno))
    }
}

/// [`failure`]'s record read back.
pub fn failure_of(rec: &[u8]) -> Option<Failure> {
    let line = rec.strip_prefix(b"e")?.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut f = line.splitn(5, '\t');
    let (step, path, errno) = (f.next()?, f.next()?, f.next()?);
    let (call, arg) = (f.next()?, f.next()?);
    Some(Failure {
        step: step.into(),
        path: path.into(),
        errno: Errno::from_raw(errno.parse().ok()?),
        call: call.into(),
        arg: arg.into(),
    })
}

/// What the zygote or its child found wrong that no call refused (EINVAL).
pub(super) fn bad(why: &str) -> SysError {
    SysError {
        call: "zygote",
        arg: why.into(),
        errno: Errno::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_back_as_it_was_written() {
        let e: SysResult<()> = Err(bad("a\tb\nc"));
        let f = e.step("tmpfs", "w\tork").unwrap_err();
        let text = f.err.to_string();
        let back = failure_of(&failure(&f)).expect("read back");
        assert_eq!(
            back,
            Failure {
                step: "tmpfs".into(),
                path: "w ork".into(),
                errno: Errno::EINVAL,
                call: "zygote".into(),
                arg: "a b c".into(),
            }
        );
        assert_eq!(back.reason(), text.replace(['\t', '\n'], " "));
        // Init's record may follow the line.
        let mut more = failure(&f);
        more.extend_from_slice(b"x\x01\x02");
        assert_eq!(failure_of(&more), Some(back));
        assert_eq!(failure_of(b"ezygote\tno go\t22\n"), None);
    }
}
