//! `--help`: bwrap's usage line and its options, described in stockade's
//! words (and which of them stockade refuses).

/// The help text for a program called `argv0`.
pub(super) fn usage(argv0: &str) -> String {
    let mut s = format!("usage: {argv0} [OPTIONS...] [--] COMMAND [ARGS...]\n\n");
    for (opt, what) in LINES {
        s.push_str(&format!("    {opt:<28} {what}\n"));
    }
    s
}

/// Each option and what it does here; "(refused)" marks those stockade
/// does not honour (the SELinux labels: it sets none).
const LINES: &[(&str, &str)] = &[
    ("--help", "Show this text"),
    ("--version", "Show the bubblewrap version implemented"),
    ("--args FD", "Read more NUL-separated arguments from FD"),
    ("--argv0 VALUE", "Pass VALUE as the command's argv[0]"),
    ("--level-prefix", "Prefix messages with a log level"),
    (
        "--not-a-security-boundary",
        "Accepted; every setup failure stays fatal",
    ),
    (
        "--unshare-all",
        "New namespaces of every kind (network too)",
    ),
    (
        "--share-net",
        "Keep the host's network (after --unshare-all)",
    ),
    ("--unshare-user", "New user namespace (always, here)"),
    ("--unshare-user-try", "New user namespace if possible"),
    ("--unshare-ipc", "New ipc namespace (always, here)"),
    ("--unshare-pid", "New pid namespace (always, here)"),
    ("--unshare-net", "New network namespace with only lo"),
    ("--unshare-uts", "New uts namespace (always, here)"),
    ("--unshare-cgroup", "New cgroup namespace (always, here)"),
    ("--unshare-cgroup-try", "New cgroup namespace if possible"),
    (
        "--userns FD",
        "Use the user namespace FD instead of a new one",
    ),
    ("--userns2 FD", "Switch to user namespace FD after setup"),
    ("--disable-userns", "No user namespaces inside"),
    (
        "--assert-userns-disabled",
        "Check that user namespaces are off",
    ),
    (
        "--pidns FD",
        "Use the pid namespace FD (parent of the new one with --unshare-pid)",
    ),
    ("--uid UID", "The uid inside (with --unshare-user)"),
    ("--gid GID", "The gid inside (with --unshare-user)"),
    (
        "--hostname NAME",
        "The hostname inside (with --unshare-uts)",
    ),
    ("--chdir DIR", "Start the command in DIR"),
    ("--clearenv", "Start from an empty environment"),
    ("--setenv VAR VALUE", "Set VAR to VALUE"),
    ("--unsetenv VAR", "Remove VAR"),
    ("--lock-file DEST", "Hold a lock on DEST while running"),
    ("--sync-fd FD", "Hold FD open while running"),
    ("--bind SRC DEST", "Bind the host's SRC on DEST, writable"),
    (
        "--bind-try SRC DEST",
        "The same, skipped when SRC is missing",
    ),
    (
        "--dev-bind SRC DEST",
        "Bind SRC on DEST, writable, devices usable",
    ),
    (
        "--dev-bind-try SRC DEST",
        "The same, skipped when SRC is missing",
    ),
    (
        "--ro-bind SRC DEST",
        "Bind the host's SRC on DEST, read-only",
    ),
    (
        "--ro-bind-try SRC DEST",
        "The same, skipped when SRC is missing",
    ),
    ("--bind-fd FD DEST", "Bind the directory open as FD"),
    ("--ro-bind-fd FD DEST", "The same, read-only"),
    ("--remount-ro DEST", "Make the mount at DEST read-only"),
    ("--exec-label LABEL", "SELinux exec label (refused)"),
    ("--file-label LABEL", "SELinux file label (refused)"),
    ("--proc DEST", "A fresh /proc on DEST"),
    ("--dev DEST", "A minimal /dev on DEST"),
    ("--tmpfs DEST", "A fresh tmpfs on DEST"),
    ("--mqueue DEST", "An mqueue on DEST"),
    ("--dir DEST", "An empty directory at DEST"),
    ("--file FD DEST", "A file at DEST with FD's content"),
    ("--bind-data FD DEST", "The same, bound"),
    ("--ro-bind-data FD DEST", "The same, read-only"),
    (
        "--symlink TARGET DEST",
        "A symlink at DEST pointing to TARGET",
    ),
    ("--chmod OCTAL PATH", "Change PATH's mode"),
    (
        "--perms OCTAL",
        "The mode of the next --tmpfs, --dir or file",
    ),
    ("--size BYTES", "The size of the next --tmpfs"),
    (
        "--overlay-src SRC",
        "A lower layer of the next overlay (later ones on top)",
    ),
    (
        "--overlay RWSRC WORKDIR DEST",
        "Overlayfs on DEST, written to RWSRC (WORKDIR: empty, beside it)",
    ),
    (
        "--tmp-overlay DEST",
        "Overlayfs on DEST, written to a hidden tmpfs",
    ),
    (
        "--ro-overlay DEST",
        "Overlayfs on DEST, read-only (two --overlay-src at least)",
    ),
    ("--seccomp FD", "Load a seccomp program from FD"),
    ("--add-seccomp-fd FD", "The same, repeatable"),
    ("--block-fd FD", "Wait for data on FD before running"),
    (
        "--userns-block-fd FD",
        "Wait on FD while the caller writes the id maps",
    ),
    ("--info-fd FD", "Write the child's pid as JSON to FD"),
    ("--json-status-fd FD", "Write JSON status to FD"),
    ("--new-session", "A new session (always, here)"),
    ("--die-with-parent", "Die (SIGKILL) when the caller dies"),
    ("--as-pid-1", "Run the command as pid 1"),
    (
        "--cap-add CAP",
        "Add a capability (in the sandbox's user namespace)",
    ),
    ("--cap-drop CAP", "Drop a capability"),
];
