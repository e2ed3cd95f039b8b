//! bubblewrap's words for a run that failed: the core's typed failure
//! (`outcome::SetupFailure`: the step, its path, the errno, what else the
//! step names; the steps in `plan::step`) said as bubblewrap 0.12 says it,
//! where it has words for it; else the core's own line. Nothing here reads
//! the core's text back.

use std::path::{Path, PathBuf};

use crate::outcome::SetupFailure;
use crate::plan::step;
use crate::sys::Errno;

/// What the words need of the run's policy.
pub(super) struct Context<'a> {
    /// The command, as execvp was asked for it.
    pub argv0: &'a str,
    /// The working directory asked for.
    pub cwd: &'a Path,
    /// Each `--chmod`: its destination and mode.
    pub chmods: &'a [(PathBuf, u32)],
}

/// bwrap's words for namespaces the kernel refused (bubblewrap.c, after
/// its clone).
pub(super) fn namespace_refused(errno: Errno) -> String {
    match errno {
        Errno::EINVAL => "Creating new namespace failed, likely because the kernel does not support user namespaces.".into(),
        Errno::EPERM => "No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.".into(),
        Errno::ENOSPC => "Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)".into(),
        e => format!(
            "Creating new namespace failed: {}",
            crate::sys::strerror(&std::io::Error::from(e))
        ),
    }
}

/// The lines bwrap writes for the failed step `f`, or `None` where it
/// has no words of its own for it.
pub(super) fn setup_failure(f: &SetupFailure, cx: &Context) -> Option<Vec<String>> {
    let path = &f.path;
    let errno = f.errno.map(Errno::from_raw);
    let value = f.value.as_deref();
    // The errno as C's strerror says it, and as stockade's errno texts do
    // (the same words for most; each message keeps the one it has had).
    let strerror = || errno.map(|e| crate::sys::strerror(&std::io::Error::from(e)));
    let desc = || errno.map(Errno::desc);
    let line = match f.step.as_str() {
        step::CREATE_NAMESPACES => namespace_refused(errno?),
        step::JOIN_USERNS => match errno? {
            Errno::EINVAL => "Joining the specified user namespace failed, it might not be a descendant of the current user namespace.".into(),
            _ => format!("Joining specified user namespace failed: {}", strerror()?),
        },
        // bwrap's monitor then misses the pid its child was to send, and
        // says so too.
        step::JOIN_PIDNS => {
            return Some(vec![
                format!("Setting pidns failed: {}", strerror()?),
                "Unexpected short read from pid socket".into(),
            ])
        }
        step::JOIN_INNER_USERNS => format!("Setting userns2 failed: {}", strerror()?),
        step::SWITCH_USER => format!("unable to switch to {}: {}", value?, strerror()?),
        step::OPEN_USERNS_LIMIT => format!("cannot open {path}: {}", strerror()?),
        step::SET_USERNS_LIMIT => format!(
            "sysctl user.max_user_namespaces = {}: {}",
            value?,
            strerror()?
        ),
        step::MOUNT_POINT => match errno? {
            Errno::ELOOP => format!("Can't mount on symlink destination {path}"),
            Errno::EISDIR => format!("Destination is not a file {path}"),
            Errno::ENOTDIR => format!("Destination is not a directory {path}"),
            _ => return None,
        },
        step::SYMLINK_EXISTS => match value {
            Some(there) => format!("Can't make symlink at {path}: existing destination is {there}"),
            None => format!("Can't make symlink at {path}: destination exists and is not a symlink"),
        },
        step::CHMOD_OPEN => format!("Can't open {path}: {}", desc()?),
        step::CHMOD => {
            let (dst, mode) = cx.chmods.iter().find(|(d, _)| d.as_os_str() == path.as_str())?;
            // C's %#o: a leading 0 unless the mode is 0.
            let m = match mode {
                0 => "0".into(),
                m => format!("0{m:o}"),
            };
            format!("Can't chmod {m} {}: {}", dst.display(), desc()?)
        }
        step::OVERLAY_SOURCE => format!("Can't open overlay source {path}: {}", desc()?),
        step::OVERLAY_WORKDIR => format!("Can't open overlay workdir {path}: {}", desc()?),
        // bwrap 0.12 names the destination "(null)" here (its op pointer
        // has moved on to the last source) and its own fds in the
        // options; this names the destination and ours.
        step::OVERLAY_MOUNT => format!(
            "Can't make overlay mount on {path} with options {}: {}",
            value?,
            match errno? {
                // ELOOP's own words would not help (bwrap's comment).
                Errno::ELOOP => "Overlay directories may not overlap",
                e => e.desc(),
            }
        ),
        step::OPEN_LOCK_FILE => format!("Unable to open lock file {path}: {}", strerror()?),
        step::LOCK_FILE => format!("Unable to lock file {path}: {}", desc()?),
        step::ASSERT_USERNS_DISABLED => {
            "creation of new user namespaces was not disabled as requested".into()
        }
        step::CHDIR => format!("Can't chdir to {}: {}", cx.cwd.display(), desc()?),
        step::EXECVE => format!(
            "execvp {}: {}",
            cx.argv0,
            match errno? {
                Errno::ENOENT => "No such file or directory",
                _ => "Permission denied",
            }
        ),
        _ => return None,
    };
    Some(vec![line])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(step: &str, path: &str, errno: Option<Errno>, value: Option<&str>) -> SetupFailure {
        SetupFailure {
            step: step.into(),
            path: path.into(),
            errno: errno.map(|e| e as i32),
            value: value.map(str::to_string),
        }
    }

    #[test]
    fn typed_failures_in_bubblewraps_words() {
        let chmods = [(PathBuf::from("/x"), 0o755)];
        let cx = Context {
            argv0: "/nope",
            cwd: Path::new("/etc"),
            chmods: &chmods,
        };
        let say = |f: SetupFailure| setup_failure(&f, &cx).map(|l| l.join("\n"));
        let cases = [
            (
                failed(step::MOUNT_POINT, "/tmp/l", Some(Errno::ELOOP), None),
                "Can't mount on symlink destination /tmp/l",
            ),
            (
                failed(step::MOUNT_POINT, "/tmp/d", Some(Errno::EISDIR), None),
                "Destination is not a file /tmp/d",
            ),
            (
                failed(
                    step::SYMLINK_EXISTS,
                    "/tmp/l",
                    Some(Errno::EEXIST),
                    Some("/usr"),
                ),
                "Can't make symlink at /tmp/l: existing destination is /usr",
            ),
            (
                failed(step::CHDIR, "/etc", Some(Errno::ENOENT), None),
                "Can't chdir to /etc: No such file or directory",
            ),
            (
                failed(step::CHMOD, "/x", Some(Errno::EPERM), None),
                "Can't chmod 0755 /x: Operation not permitted",
            ),
            (
                failed(step::JOIN_PIDNS, "", Some(Errno::EBADF), None),
                "Setting pidns failed: Bad file descriptor\nUnexpected short read from pid socket",
            ),
            (
                failed(step::SWITCH_USER, "", Some(Errno::EINVAL), Some("gid 0")),
                "unable to switch to gid 0: Invalid argument",
            ),
            (
                failed(step::EXECVE, "/nope", Some(Errno::ENOENT), None),
                "execvp /nope: No such file or directory",
            ),
            (
                failed(step::OVERLAY_WORKDIR, "/w", Some(Errno::ENOENT), None),
                "Can't open overlay workdir /w: No such file or directory",
            ),
            (
                failed(step::OVERLAY_MOUNT, "/o", Some(Errno::EINVAL), Some("lowerdir=/l")),
                "Can't make overlay mount on /o with options lowerdir=/l: Invalid argument",
            ),
            (
                failed(step::OVERLAY_MOUNT, "/o", Some(Errno::ELOOP), Some("lowerdir=/l")),
                "Can't make overlay mount on /o with options lowerdir=/l: Overlay directories may not overlap",
            ),
            (
                failed(step::OPEN_LOCK_FILE, "/nonexistent", Some(Errno::ENOENT), None),
                "Unable to open lock file /nonexistent: No such file or directory",
            ),
            (
                failed(step::SET_USERNS_LIMIT, "/proc/sys/user/max_user_namespaces", Some(Errno::EPERM), Some("1")),
                "sysctl user.max_user_namespaces = 1: Operation not permitted",
            ),
            (
                failed(step::JOIN_USERNS, "", Some(Errno::EINVAL), None),
                "Joining the specified user namespace failed, it might not be a descendant of the current user namespace.",
            ),
            (
                failed(step::JOIN_INNER_USERNS, "", Some(Errno::EPERM), None),
                "Setting userns2 failed: Operation not permitted",
            ),
            (
                failed(step::ASSERT_USERNS_DISABLED, "", None, None),
                "creation of new user namespaces was not disabled as requested",
            ),
            (
                failed(step::CREATE_NAMESPACES, "", Some(Errno::ENOMEM), None),
                "Creating new namespace failed: Cannot allocate memory",
            ),
        ];
        for (f, words) in cases {
            assert_eq!(say(f).as_deref(), Some(words));
        }
        // No words of bwrap's: the core's line is said instead.
        for f in [
            failed("bind", "/x", Some(Errno::ENOENT), None),
            failed(step::MOUNT_POINT, "/x", Some(Errno::EPERM), None),
            failed(step::CHMOD, "/elsewhere", Some(Errno::EPERM), None),
            failed(step::CHDIR, "/etc", None, None),
        ] {
            assert_eq!(say(f), None);
        }
    }
}
