//! The named groups a seccomp policy is made of (`@default`, `@basic-io`,
//! …), the syscalls no group ever contains, the ones only ever allowed with
//! an argument filter, and each group as a set of numbers, computed when
//! stockade is built.
//!
//! Group lists name syscalls of every supported architecture; a name the
//! target does not have (`open` on aarch64) is skipped when a group is
//! resolved.

use super::BY_NAME;

/// Syscalls no shipped group contains, ever: they reach kernel attack
/// surface a jailed program has no business with (BPF, perf, io_uring,
/// keyrings, modules, kexec), inspect or modify other processes (ptrace,
/// process_vm_*, kcmp, pidfd_getfd), change the mount or namespace layout,
/// escape via file handles, or change host-wide state (clock, swap,
/// accounting, quotas, reboot). A policy may still name one of them
/// explicitly in `allow`. `personality` is in `@process`, but only with the
/// argument filter that admits PER_LINUX, PER_LINUX32 and the query.
pub const NEVER: &[&str] = &[
    "_sysctl",
    "acct",
    "add_key",
    "adjtimex",
    "afs_syscall",
    "bpf",
    "chroot",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "epoll_ctl_old",
    "epoll_wait_old",
    "fanotify_init",
    "fanotify_mark",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "getpmsg",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "listmount",
    "lookup_dcookie",
    "lsm_set_self_attr",
    "memfd_secret",
    "migrate_pages",
    "modify_ldt",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "open_tree_attr",
    "perf_event_open",
    "pidfd_getfd",
    "pivot_root",
    "process_madvise",
    "process_mrelease",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "putpmsg",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "security",
    "setdomainname",
    "sethostname",
    "setns",
    "settimeofday",
    "statmount",
    "swapoff",
    "swapon",
    "sysfs",
    "syslog",
    "tuxcall",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vhangup",
    "vserver",
];

/// Syscalls that are only ever allowed with an argument filter (see
/// `seccomp/rules.rs`): clone (no namespace flags), socket and socketpair (by
/// family and type), ioctl (not TIOCSTI, TIOCLINUX), personality (harmless
/// personas only).
pub const FILTERED: &[&str] = &["clone", "ioctl", "personality", "socket", "socketpair"];

/// Read, write and manage file descriptors; getrandom.
pub const BASIC_IO: &[&str] = &[
    "close",
    "close_range",
    "copy_file_range",
    "dup",
    "dup2",
    "dup3",
    "getrandom",
    "ioctl",
    "lseek",
    "pread64",
    "preadv",
    "preadv2",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readv",
    "sendfile",
    "splice",
    "tee",
    "vmsplice",
    "write",
    "writev",
];

/// Paths, metadata, directories, links, permissions, xattrs, inotify.
pub const FILE_SYSTEM: &[&str] = &[
    "access",
    "cachestat",
    "chdir",
    "chmod",
    "chown",
    "creat",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fallocate",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchownat",
    "fcntl",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstatfs",
    "ftruncate",
    "futimesat",
    "getcwd",
    "getdents",
    "getdents64",
    "getxattr",
    "getxattrat",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "lchown",
    "lgetxattr",
    "link",
    "linkat",
    "listxattr",
    "listxattrat",
    "llistxattr",
    "lremovexattr",
    "lsetxattr",
    "lstat",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "readahead",
    "readlink",
    "readlinkat",
    "removexattr",
    "removexattrat",
    "rename",
    "renameat",
    "renameat2",
    "rmdir",
    "setxattr",
    "setxattrat",
    "stat",
    "statfs",
    "statx",
    "symlink",
    "symlinkat",
    "truncate",
    "umask",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimes",
];

/// Create, run, wait for and end processes and threads; futexes.
pub const PROCESS: &[&str] = &[
    "arch_prctl",
    "clone",
    "clone3",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "fork",
    "futex",
    "futex_requeue",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "get_robust_list",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getrusage",
    "getsid",
    "gettid",
    "personality",
    "pidfd_open",
    "pidfd_send_signal",
    "prctl",
    "rseq",
    "sched_yield",
    "set_robust_list",
    "set_tid_address",
    "setpgid",
    "setsid",
    "times",
    "vfork",
    "wait4",
    "waitid",
];

/// Signal handling and sending (to processes of the jail).
pub const SIGNAL: &[&str] = &[
    "kill",
    "pause",
    "restart_syscall",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "tgkill",
    "tkill",
];

/// Map, protect and advise memory.
pub const MEMORY: &[&str] = &[
    "brk",
    "get_mempolicy",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "mincore",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mprotect",
    "mremap",
    "mseal",
    "munlock",
    "munlockall",
    "munmap",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
];

/// Sockets (families AF_UNIX, AF_INET, AF_INET6; no raw sockets).
pub const NETWORK_IO: &[&str] = &[
    "accept",
    "accept4",
    "bind",
    "connect",
    "getpeername",
    "getsockname",
    "getsockopt",
    "listen",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setsockopt",
    "shutdown",
    "socket",
    "socketpair",
];

/// Read clocks, sleep, timers (never set the clock).
pub const TIME: &[&str] = &[
    "alarm",
    "clock_getres",
    "clock_gettime",
    "clock_nanosleep",
    "getitimer",
    "gettimeofday",
    "nanosleep",
    "setitimer",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_settime",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_settime",
];

/// Pipes, SysV IPC and POSIX message queues (of the jail's IPC namespace).
pub const IPC: &[&str] = &[
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedsend",
    "mq_unlink",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "pipe",
    "pipe2",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
];

/// Wait for events on fds: poll, select, epoll, eventfd.
pub const IO_EVENT: &[&str] = &[
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd",
    "eventfd2",
    "poll",
    "ppoll",
    "pselect6",
    "select",
];

/// Flush files to storage.
pub const SYNC: &[&str] = &[
    "fdatasync",
    "fsync",
    "msync",
    "sync",
    "sync_file_range",
    "syncfs",
];

/// Read-only facts about the system.
pub const SYSTEM_INFO: &[&str] = &[
    "getcpu",
    "lsm_get_self_attr",
    "lsm_list_modules",
    "sysinfo",
    "uname",
];

/// Read-only identity calls.
pub const CREDENTIALS: &[&str] = &[
    "capget",
    "getegid",
    "geteuid",
    "getgid",
    "getgroups",
    "getresgid",
    "getresuid",
    "getuid",
];

/// Resource limits, priorities, CPU affinity and scheduling of own processes.
pub const RESOURCES: &[&str] = &[
    "getpriority",
    "getrlimit",
    "ioprio_get",
    "ioprio_set",
    "prlimit64",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "setpriority",
    "setrlimit",
];

/// Let the program restrict itself further (its own seccomp filter,
/// Landlock).
pub const SANDBOX: &[&str] = &[
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "seccomp",
];

/// Linux AIO (io_submit and friends); not in `@default`.
pub const AIO: &[&str] = &[
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_setup",
    "io_submit",
];

/// Change uids, gids and capabilities (within the jail's single mapped id
/// this can only drop); not in `@default`.
pub const SETUID: &[&str] = &[
    "capset",
    "setfsgid",
    "setfsuid",
    "setgid",
    "setgroups",
    "setregid",
    "setresgid",
    "setresuid",
    "setreuid",
    "setuid",
];

/// NUMA memory policy of the calling process; not in `@default`.
pub const NUMA: &[&str] = &["mbind", "set_mempolicy", "set_mempolicy_home_node"];

/// The groups `@default` is the union of.
pub const DEFAULT: &[&str] = &[
    "@basic-io",
    "@file-system",
    "@process",
    "@signal",
    "@memory",
    "@network-io",
    "@time",
    "@ipc",
    "@io-event",
    "@sync",
    "@system-info",
    "@credentials",
    "@resources",
    "@sandbox",
];

/// Every group by name, `@default` last.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("@basic-io", BASIC_IO),
    ("@file-system", FILE_SYSTEM),
    ("@process", PROCESS),
    ("@signal", SIGNAL),
    ("@memory", MEMORY),
    ("@network-io", NETWORK_IO),
    ("@time", TIME),
    ("@ipc", IPC),
    ("@io-event", IO_EVENT),
    ("@sync", SYNC),
    ("@system-info", SYSTEM_INFO),
    ("@credentials", CREDENTIALS),
    ("@resources", RESOURCES),
    ("@sandbox", SANDBOX),
    ("@aio", AIO),
    ("@setuid", SETUID),
    ("@numa", NUMA),
    ("@default", DEFAULT),
];

/// Syscall numbers of this architecture are below `64 * WORDS`.
pub const WORDS: usize = 8;

/// A set of syscall numbers.
pub type Bits = [u64; WORDS];

/// `a` before, equal to or after `b`, bytewise (-1, 0, 1), in a const fn.
const fn cmp_str(a: &str, b: &str) -> i32 {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut i = 0;
    while i < a.len() && i < b.len() {
        if a[i] != b[i] {
            return if a[i] < b[i] { -1 } else { 1 };
        }
        i += 1;
    }
    if a.len() == b.len() {
        0
    } else if a.len() < b.len() {
        -1
    } else {
        1
    }
}

/// [`number`](super::number) at compile time.
const fn const_number(name: &str) -> Option<u32> {
    let (mut lo, mut hi) = (0, BY_NAME.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp_str(BY_NAME[mid].0, name) {
            0 => return Some(BY_NAME[mid].1),
            c if c < 0 => lo = mid + 1,
            _ => hi = mid,
        }
    }
    None
}

/// The numbers of `members` (nested groups expanded; names this
/// architecture lacks skipped), at compile time.
const fn bits_of(members: &[&str]) -> Bits {
    let mut out = [0u64; WORDS];
    let mut i = 0;
    while i < members.len() {
        let m = members[i];
        if !m.is_empty() && m.as_bytes()[0] == b'@' {
            let mut g = 0;
            while g < GROUPS.len() {
                if cmp_str(GROUPS[g].0, m) == 0 {
                    let sub = bits_of(GROUPS[g].1);
                    let mut w = 0;
                    while w < WORDS {
                        out[w] |= sub[w];
                        w += 1;
                    }
                }
                g += 1;
            }
        } else if let Some(nr) = const_number(m) {
            out[nr as usize / 64] |= 1 << (nr % 64);
        }
        i += 1;
    }
    out
}

/// Each group of [`GROUPS`] as a set of numbers, computed when stockade is
/// built, so a policy resolves without a lookup per member.
const GROUP_BITS: [Bits; GROUPS.len()] = {
    let mut out = [[0u64; WORDS]; GROUPS.len()];
    let mut g = 0;
    while g < GROUPS.len() {
        out[g] = bits_of(GROUPS[g].1);
        g += 1;
    }
    out
};

/// The numbers of group `g`, or None if there is no such group.
pub fn group_bits(g: &str) -> Option<&'static Bits> {
    GROUPS
        .iter()
        .position(|(n, _)| *n == g)
        .map(|i| &GROUP_BITS[i])
}

/// The members of group `g` (`@default` expanded), or None if there is no
/// such group.
pub fn group(g: &str) -> Option<Vec<&'static str>> {
    let (_, members) = GROUPS.iter().find(|(n, _)| *n == g)?;
    let mut out = Vec::new();
    for m in members.iter() {
        if m.starts_with('@') {
            out.extend(group(m)?);
        } else {
            out.push(*m);
        }
    }
    Some(out)
}
