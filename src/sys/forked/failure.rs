//! A forked child's failed step, as it says it on the setup pipe before
//! it ends (125), and as the server reads it back.

use crate::{Errno, SysError};

/// A failed step's record on the setup pipe, one line (init's record may
/// follow it): `e`, the call, a tab, what it was called on, a tab, the
/// errno's number. [`failure_of`] reads it back.
pub(super) fn failure(e: &SysError) -> Vec<u8> {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    format!(
        "e{}\t{}\t{}\n",
        clean(e.call),
        clean(&e.arg),
        e.errno as i32
    )
    .into_bytes()
}

/// [`failure`]'s record read back: the call, what it was called on, the
/// errno.
pub fn failure_of(rec: &[u8]) -> Option<(String, String, Errno)> {
    let line = rec.strip_prefix(b"e")?.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut f = line.splitn(3, '\t');
    let (call, arg, errno) = (f.next()?, f.next()?, f.next()?);
    Some((
        call.into(),
        arg.into(),
        Errno::from_raw(errno.parse().ok()?),
    ))
}

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
        let e = bad("a\tb\nc");
        let (call, arg, errno) = failure_of(&failure(&e)).expect("read back");
        assert_eq!(
            (call.as_str(), arg.as_str(), errno),
            ("zygote", "a b c", Errno::EINVAL)
        );
    }
}
