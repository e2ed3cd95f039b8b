use super::bpf::AUDIT_ARCH;
use super::*;

/// The fallback's filter: connect goes to the listener, unix datagram
/// sockets are refused (socket and socketpair), the rest as before.
#[test]
fn fallback_mediates_connect_and_refuses_unix_datagrams() {
    let p = SeccompPolicy {
        mediate_unix: true,
        ..SeccompPolicy::default()
    };
    let c = compile(&p).unwrap();
    let nr = |n: &str| syscalls::number(n).unwrap();
    assert_eq!(c.mediated, Some(nr("connect") as i32));
    assert!(c.wants_listener());
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let v = |n: &str, a0: i32, a1: i32| {
        tests_run(&c.allowlist, nr(n), [a0 as u64, a1 as u64, 0, 0, 0, 0])
    };
    assert_eq!(v("connect", 3, 0), libc::SECCOMP_RET_USER_NOTIF);
    assert_eq!(v("sendmsg", 3, 0), libc::SECCOMP_RET_ALLOW);
    for f in ["socket", "socketpair"] {
        assert_eq!(
            v(f, libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC),
            libc::SECCOMP_RET_ALLOW,
            "{f}"
        );
        assert_eq!(
            v(f, libc::AF_UNIX, libc::SOCK_SEQPACKET),
            libc::SECCOMP_RET_ALLOW,
            "{f}"
        );
        assert_eq!(v(f, libc::AF_UNIX, libc::SOCK_DGRAM), eperm, "{f}");
        assert_eq!(
            v(f, libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK),
            eperm,
            "{f}"
        );
    }
    assert_eq!(
        v("socket", libc::AF_INET, libc::SOCK_DGRAM),
        libc::SECCOMP_RET_ALLOW
    );
    // Without the fallback, nothing changes.
    let plain = compile(&SeccompPolicy::default()).unwrap();
    assert_eq!(plain.mediated, None);
    assert_eq!(
        tests_run(&plain.allowlist, nr("connect"), [3, 0, 0, 0, 0, 0]),
        libc::SECCOMP_RET_ALLOW
    );
}

/// The POSIX message queue syscalls are in the default allowlist (the
/// jail's IPC namespace holds its queues); with the host's IPC namespace
/// (the fallback) the two that name a queue are refused, even when asked
/// for by name, and the rest stay.
#[test]
fn message_queues_are_allowed_but_not_named_in_the_hosts_ipc_namespace() {
    let nr = |n: &str| syscalls::number(n).unwrap();
    let all = [
        "mq_open",
        "mq_unlink",
        "mq_timedsend",
        "mq_timedreceive",
        "mq_notify",
        "mq_getsetattr",
    ];
    let plain = compile(&SeccompPolicy::default()).unwrap();
    for n in all {
        assert_eq!(
            tests_run(&plain.allowlist, nr(n), [0; 6]),
            libc::SECCOMP_RET_ALLOW,
            "{n}"
        );
    }
    let host = compile(&SeccompPolicy {
        host_ipc: true,
        allow: vec!["mq_open".into()],
        ..SeccompPolicy::default()
    })
    .unwrap();
    assert_eq!(host.allowed + 2, plain.allowed);
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    for n in all {
        let want = match n {
            "mq_open" | "mq_unlink" => eperm,
            _ => libc::SECCOMP_RET_ALLOW,
        };
        assert_eq!(tests_run(&host.allowlist, nr(n), [0; 6]), want, "{n}");
    }
}

/// A classic-BPF interpreter for the instructions the compiler emits.
fn tests_run(prog: &[libc::sock_filter], nr: u32, args: [u64; 6]) -> u32 {
    let mut data = [0u32; 16];
    data[0] = nr;
    data[1] = AUDIT_ARCH;
    for (i, a) in args.iter().enumerate() {
        data[4 + 2 * i] = *a as u32;
        data[5 + 2 * i] = (*a >> 32) as u32;
    }
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = prog[pc];
        let code = i.code as u32;
        match code & 0x07 {
            0x00 => acc = data[(i.k / 4) as usize],
            0x04 => acc &= i.k,
            0x05 => {
                let op = code & 0xf0;
                if op == libc::BPF_JA {
                    pc += 1 + i.k as usize;
                    continue;
                }
                let t = match op {
                    libc::BPF_JEQ => acc == i.k,
                    libc::BPF_JGT => acc > i.k,
                    libc::BPF_JGE => acc >= i.k,
                    libc::BPF_JSET => acc & i.k != 0,
                    _ => panic!("op {op:#x}"),
                };
                pc += 1 + if t { i.jt as usize } else { i.jf as usize };
                continue;
            }
            0x06 => return i.k,
            c => panic!("class {c:#x}"),
        }
        pc += 1;
    }
}

/// Learning paths: the path-taking syscalls the allowlist allows go to the
/// listener (and say so in `watched`); the others keep their verdict; in
/// any other mode the flag changes nothing.
#[test]
fn learning_paths_sends_path_syscalls_to_the_listener() {
    let nr = |n: &str| syscalls::number(n).unwrap();
    let p = SeccompPolicy {
        action: SeccompAction::Learn,
        learn_paths: true,
        ..SeccompPolicy::default()
    };
    let c = compile(&p).unwrap();
    let v = |n: &str| tests_run(&c.allowlist, nr(n), [0; 6]);
    assert_eq!(v("openat"), libc::SECCOMP_RET_USER_NOTIF);
    assert_eq!(v("execve"), libc::SECCOMP_RET_USER_NOTIF);
    assert_eq!(v("read"), libc::SECCOMP_RET_ALLOW);
    assert!(c.watched.contains(&(nr("openat") as i32)));
    assert!(!c.watched.contains(&(nr("read") as i32)));
    let errno = compile(&SeccompPolicy {
        learn_paths: true,
        ..SeccompPolicy::default()
    })
    .unwrap();
    assert!(errno.watched.is_empty());
    assert_eq!(
        tests_run(&errno.allowlist, nr("openat"), [0; 6]),
        libc::SECCOMP_RET_ALLOW
    );
}

/// The rlimit rung's allocation meter: an `mmap` of `meter_threshold` (a
/// tenth of RLIMIT_AS, 1 MiB at most) or more (its length, all 64 bits of it) and an `mremap` to such a new
/// length go to the listener; smaller ones, and everything without the
/// meter or without a listener, are allowed as before.
#[test]
fn the_allocation_meter_sends_large_mappings_to_the_listener_only() {
    let nr = |n: &str| syscalls::number(n).unwrap();
    let limit = 100 << 20;
    let t = meter_threshold(limit);
    assert_eq!(t, 1 << 20, "a tenth of 100 MiB is past the 1 MiB cap");
    assert_eq!(meter_threshold(5 << 20), (5 << 20) / 10);
    let c = compile_metered(&SeccompPolicy::default(), Some(limit)).unwrap();
    assert_eq!(c.meter, Some(limit));
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let allow = libc::SECCOMP_RET_ALLOW;
    let with = c.program(true);
    let mmap = |prog: &[libc::sock_filter], len: u64| {
        tests_run(prog, nr("mmap"), [0, len, 3, 0x22, u64::MAX, 0])
    };
    for (len, want) in [
        (0, allow),
        (4096, allow),
        (t - 1, allow),
        (t, notify),
        (t + 1, notify),
        (1 << 32, notify),
        ((1 << 32) | 1, notify),
        (u64::MAX, notify),
        (1_000_000_000, notify),
    ] {
        assert_eq!(mmap(&with, len), want, "mmap of {len}");
    }
    assert_eq!(
        tests_run(&with, nr("mremap"), [0, 4096, t, 1, 0, 0]),
        notify
    );
    assert_eq!(
        tests_run(&with, nr("mremap"), [0, 4096, 8192, 1, 0, 0]),
        allow
    );
    // Without a listener the meter is not there.
    let without = c.program(false);
    assert_eq!(mmap(&without, u64::MAX), allow);
    // Without the meter, the same filter as ever.
    let plain = compile(&SeccompPolicy::default()).unwrap();
    assert_eq!(plain.meter, None);
    assert_eq!(mmap(&plain.program(true), u64::MAX), allow);
    assert_eq!(
        compile_metered(&SeccompPolicy::default(), None)
            .unwrap()
            .program(true)
            .len(),
        plain.program(true).len()
    );
}
