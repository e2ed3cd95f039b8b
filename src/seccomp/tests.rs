use std::collections::BTreeMap;

use super::bpf::{assemble, stmt, Leaf, AUDIT_ARCH, MARK, X32_SYSCALL_BIT};
use super::compile::{numbers, set_bit, ALWAYS, WITH_LISTENER};
use super::rules::{TIOCLINUX, TIOCSTI};
use super::*;

/// The policy's syscall numbers with their names.
fn resolve(p: &SeccompPolicy) -> Result<BTreeMap<u32, &'static str>, SeccompError> {
    Ok(numbers(&resolve_bits(p)?)
        .map(|nr| (nr, syscalls::name(nr).unwrap_or("?")))
        .collect())
}

fn policy(groups: &[&str], allow: &[&str], action: SeccompAction) -> SeccompPolicy {
    SeccompPolicy {
        enabled: true,
        groups: groups.iter().map(|s| s.to_string()).collect(),
        allow: allow.iter().map(|s| s.to_string()).collect(),
        action,
        unix_sockets_only: false,
        mediate_unix: false,
        host_ipc: false,
        learn_paths: false,
    }
}

#[test]
fn no_group_contains_a_never_allowed_syscall() {
    for (g, _) in syscalls::GROUPS {
        for m in syscalls::group(g).unwrap() {
            assert!(
                !syscalls::NEVER.contains(&m),
                "{g} contains never-allowed {m}"
            );
        }
    }
    // The list, spelled out so a shortened NEVER cannot pass.
    let required = [
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "keyctl",
        "add_key",
        "request_key",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "unshare",
        "setns",
        "open_by_handle_at",
        "name_to_handle_at",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "quotactl",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "syslog",
        "lookup_dcookie",
        "iopl",
        "ioperm",
        "fanotify_init",
        "mount_setattr",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "kcmp",
        "vhangup",
        "nfsservctl",
    ];
    for r in required {
        assert!(syscalls::NEVER.contains(&r), "{r} missing from NEVER");
        assert!(
            syscalls::number(r).is_some() || cfg!(not(target_arch = "x86_64")),
            "{r} not in the table"
        );
    }
    // personality only ever with its argument filter.
    assert!(syscalls::FILTERED.contains(&"personality"));
}

#[test]
fn default_allowlist_leaves_out_every_never_allowed_syscall() {
    let c = policy(&["@default"], &[], SeccompAction::Errno);
    let set = resolve(&c).unwrap();
    for n in syscalls::NEVER {
        if let Some(nr) = syscalls::number(n) {
            assert!(!set.contains_key(&nr), "{n} resolved into @default");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn every_group_member_is_a_real_x86_64_syscall() {
    for (g, members) in syscalls::GROUPS {
        for m in members.iter() {
            if m.starts_with('@') {
                assert!(syscalls::group(m).is_some(), "{g}: {m}");
            } else {
                assert!(syscalls::number(m).is_some(), "{g}: unknown {m}");
            }
        }
    }
    for n in syscalls::NEVER.iter().chain(syscalls::FILTERED) {
        assert!(syscalls::number(n).is_some(), "unknown {n}");
    }
}

#[test]
fn table_is_sorted_and_consistent() {
    for w in syscalls::BY_NR.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    for w in syscalls::BY_NAME.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    assert_eq!(syscalls::BY_NR.len(), syscalls::BY_NAME.len());
    for (nr, n) in syscalls::BY_NR {
        assert_eq!(syscalls::number(n), Some(*nr));
        assert_eq!(syscalls::name(*nr), Some(*n));
    }
    assert_eq!(syscalls::number("read"), Some(libc::SYS_read as u32));
    assert_eq!(syscalls::number("openat"), Some(libc::SYS_openat as u32));
    assert_eq!(syscalls::number("clone3"), Some(libc::SYS_clone3 as u32));
    assert_eq!(syscalls::display(99999), "syscall_99999");
}

#[test]
fn unknown_names_are_clear_errors() {
    let e = compile(&policy(&["@default", "@bogus"], &[], SeccompAction::Errno))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown syscall group \"@bogus\""), "{e}");
    let e = compile(&policy(
        &["@default"],
        &["frobnicate"],
        SeccompAction::Errno,
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown syscall \"frobnicate\""), "{e}");
    let e = compile(&policy(&["basic-io"], &[], SeccompAction::Errno))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"basic-io\""), "{e}");
}

/// The typed errors say what the strings they replaced said, byte for
/// byte, and a caller can tell them apart.
#[test]
fn error_kinds_keep_their_text() {
    let e = resolve_bits(&policy(&["@bogus"], &[], SeccompAction::Errno)).unwrap_err();
    let known: Vec<&str> = syscalls::GROUPS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        e.to_string(),
        format!(
            "unknown syscall group \"@bogus\" (known: {})",
            known.join(", ")
        )
    );
    assert!(matches!(e, SeccompError::UnknownGroup { ref group } if group == "@bogus"));
    let e = resolve_bits(&policy(&[], &["frobnicate"], SeccompAction::Errno)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "unknown syscall \"frobnicate\" (not in the {} syscall table)",
            std::env::consts::ARCH
        )
    );
    assert!(matches!(e, SeccompError::UnknownSyscall { .. }));
    assert_eq!(
        SeccompError::TooLong { instructions: 5000 }.to_string(),
        "the filter has 5000 instructions, more than the kernel accepts"
    );
    assert_eq!(
        String::from(e),
        format!(
            "unknown syscall \"frobnicate\" (not in the {} syscall table)",
            std::env::consts::ARCH
        )
    );
}

#[test]
fn default_compiles_and_counts() {
    let c = compile(&policy(&["@default"], &[], SeccompAction::Errno)).unwrap();
    assert!(c.allowed > 250, "{}", c.allowed);
    assert!(c.len() < 4096, "{}", c.len());
    assert!(!c.mismatch_at.is_empty());
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    for &i in &c.mismatch_at {
        assert_eq!(c.allowlist[i].k, eperm);
    }
    assert_eq!(action_name(c.action), "errno");
    let k = compile(&policy(&["@default"], &[], SeccompAction::Kill)).unwrap();
    for &i in &k.mismatch_at {
        assert_eq!(k.allowlist[i].k, libc::SECCOMP_RET_KILL_PROCESS);
    }
    let l = compile(&policy(&["@default"], &[], SeccompAction::Learn)).unwrap();
    for &i in &l.mismatch_at {
        assert_eq!(l.allowlist[i].k, libc::SECCOMP_RET_USER_NOTIF);
    }
    assert!(l.wants_listener() && k.wants_listener() && c.wants_listener());
    // With a listener, errno and kill mode send each mismatch to the
    // supervisor; without one, the kernel judges alone.
    for x in [&c, &k] {
        let (with, without) = (x.program(true), x.program(false));
        for &i in &x.mismatch_at {
            assert_eq!(with[i].k, libc::SECCOMP_RET_USER_NOTIF);
            assert_eq!(without[i].k, x.allowlist[i].k);
        }
    }
}

#[test]
fn single_names_add_to_the_groups() {
    let base = resolve(&policy(&["@basic-io"], &[], SeccompAction::Errno)).unwrap();
    let more = resolve(&policy(&["@basic-io"], &["uname"], SeccompAction::Errno)).unwrap();
    assert_eq!(more.len(), base.len() + 1);
    assert!(more.contains_key(&(libc::SYS_uname as u32)));
}

/// Run the classic-BPF program on a seccomp_data, the way the kernel
/// does, to check the argument filters without installing anything.
fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    let mut data = [0u32; 16];
    data[0] = nr;
    data[1] = arch;
    for (i, a) in args.iter().enumerate() {
        data[4 + 2 * i] = *a as u32;
        data[5 + 2 * i] = (*a >> 32) as u32;
    }
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    loop {
        let i = prog[pc];
        let code = i.code as u32;
        match code & 0x07 {
            0x00 => {
                acc = data[(i.k / 4) as usize];
                pc += 1;
            }
            0x04 => {
                assert_eq!(code, libc::BPF_ALU | libc::BPF_AND | libc::BPF_K);
                acc &= i.k;
                pc += 1;
            }
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
            }
            0x06 => return i.k,
            c => panic!("class {c:#x}"),
        }
    }
}

fn verdict(c: &Compiled, arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    run(&c.allowlist, arch, nr, args)
}

#[test]
fn argument_filters_decide_as_intended() {
    let c = compile(&policy(&["@default"], &[], SeccompAction::Errno)).unwrap();
    let allow = libc::SECCOMP_RET_ALLOW;
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    let a = AUDIT_ARCH;
    let nr = |n: &str| syscalls::number(n).unwrap();
    let ioctl = nr("ioctl");
    assert_eq!(verdict(&c, a, ioctl, [0, 0x5401, 0, 0, 0, 0]), allow);
    assert_eq!(
        verdict(&c, a, ioctl, [0, TIOCSTI as u64, 0, 0, 0, 0]),
        eperm
    );
    assert_eq!(
        verdict(&c, a, ioctl, [0, TIOCSTI as u64 | 1 << 32, 0, 0, 0, 0]),
        eperm
    );
    assert_eq!(
        verdict(
            &c,
            a,
            ioctl,
            [0, TIOCLINUX as u64 | 0xdead << 32, 0, 0, 0, 0]
        ),
        eperm
    );
    let clone = nr("clone");
    assert_eq!(verdict(&c, a, clone, [0x01200011, 0, 0, 0, 0, 0]), allow);
    for f in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
        0x80,
    ] {
        assert_eq!(
            verdict(&c, a, clone, [f as u64 | 0x11, 0, 0, 0, 0, 0]),
            eperm
        );
    }
    assert_eq!(
        verdict(&c, a, nr("clone3"), [0; 6]),
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    );
    let sock = nr("socket");
    let s = |f: i32, t: i32| verdict(&c, a, sock, [f as u64, t as u64, 0, 0, 0, 0]);
    assert_eq!(
        s(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC),
        allow
    );
    assert_eq!(s(libc::AF_INET, libc::SOCK_DGRAM), allow);
    assert_eq!(
        s(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_NONBLOCK),
        allow
    );
    assert_eq!(s(libc::AF_INET, libc::SOCK_RAW), eperm);
    assert_eq!(s(libc::AF_PACKET, libc::SOCK_RAW), eperm);
    assert_eq!(s(libc::AF_PACKET, libc::SOCK_DGRAM), eperm);
    assert_eq!(s(libc::AF_NETLINK, libc::SOCK_DGRAM), eperm);
    let pers = nr("personality");
    for (v, want) in [
        (0u64, allow),
        (8, allow),
        (0xffff_ffff, allow),
        (0x0040000, eperm),
        (0x0400000, eperm),
    ] {
        assert_eq!(verdict(&c, a, pers, [v, 0, 0, 0, 0, 0]), want, "{v:#x}");
    }
    // Foreign ABIs die whatever the action.
    assert_eq!(verdict(&c, 0x4000_0003, 20, [0; 6]), kill); // i386
    assert_eq!(verdict(&c, a, X32_SYSCALL_BIT | 39, [0; 6]), kill);
    assert_eq!(verdict(&c, a, nr("bpf"), [0; 6]), eperm);
    assert_eq!(verdict(&c, a, nr("read"), [0; 6]), allow);
}

/// What the ABI guard at the head decides before the search: x32
/// numbers die, clone3 gets ENOSYS; else the search's `want`.
fn guarded(nr: u32, want: u32) -> u32 {
    if nr >= X32_SYSCALL_BIT {
        libc::SECCOMP_RET_KILL_PROCESS
    } else if nr == libc::SYS_clone3 as u32 {
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    } else {
        want
    }
}

/// Every number, and the edges of the 32-bit space, gets the verdict
/// the resolved set says, for several policies.
#[test]
fn search_tree_gives_each_number_its_verdict() {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    for (groups, allow) in [
        (&["@default"][..], &[][..]),
        (&["@basic-io"][..], &["uname", "getpid"][..]),
        (&[][..], &[][..]),
        (
            &["@default", "@network-io", "@process", "@file-system"][..],
            &[][..],
        ),
    ] {
        let p = policy(groups, allow, SeccompAction::Errno);
        let c = compile(&p).unwrap();
        let set = resolve(&p).unwrap();
        let mut probe: Vec<u32> = (0..1200).collect();
        probe.extend([0x3fff_ffff, 0x4000_0000, 0x4000_0027, 0x8000_0000, u32::MAX]);
        for nr in probe {
            let name = syscalls::name(nr).unwrap_or("");
            if syscalls::FILTERED.contains(&name) {
                continue; // argument_filters_decide_as_intended
            }
            let want = guarded(
                nr,
                if set.contains_key(&nr) || ALWAYS.contains(&name) || WITH_LISTENER.contains(&name)
                {
                    libc::SECCOMP_RET_ALLOW
                } else {
                    eperm
                },
            );
            assert_eq!(
                run(&c.allowlist, AUDIT_ARCH, nr, [0; 6]),
                want,
                "{groups:?} {allow:?}: {nr} {name}"
            );
        }
        assert!(
            c.allowlist.len() < 400,
            "{} instructions",
            c.allowlist.len()
        );
    }
}

/// A set with hundreds of runs makes subtrees longer than a conditional
/// jump reaches; the BPF_JA trampolines must land right.
#[test]
fn long_subtrees_jump_over_with_ja() {
    let mut leaves = Vec::new();
    for nr in (0..3000u32).step_by(2) {
        leaves.push((nr, Leaf::Allow));
    }
    leaves.push((3001, Leaf::Block(0)));
    let block = vec![stmt(libc::BPF_RET | libc::BPF_K, 0x1234)];
    let prog = assemble(&leaves, vec![block]);
    assert!(prog
        .iter()
        .any(|i| i.code == (libc::BPF_JMP | libc::BPF_JA) as u16 && i.k > 255));
    for nr in 0..3100u32 {
        let want = guarded(
            nr,
            if nr == 3001 {
                0x1234
            } else if nr < 3000 && nr % 2 == 0 {
                libc::SECCOMP_RET_ALLOW
            } else {
                libc::SECCOMP_RET_TRACE | MARK
            },
        );
        assert_eq!(run(&prog, AUDIT_ARCH, nr, [0; 6]), want, "{nr}");
    }
    assert_eq!(
        run(&prog, AUDIT_ARCH, u32::MAX, [0; 6]),
        libc::SECCOMP_RET_KILL_PROCESS
    );
    assert_eq!(
        run(&prog, 0x4000_0003, 2, [0; 6]),
        libc::SECCOMP_RET_KILL_PROCESS
    );
}

/// The group sets computed when stockade is built are the groups'
/// members looked up one by one.
#[test]
fn group_bits_match_the_member_lists() {
    for (g, _) in syscalls::GROUPS {
        let mut want = [0u64; syscalls::WORDS];
        for m in syscalls::group(g).unwrap() {
            if let Some(nr) = syscalls::number(m) {
                set_bit(&mut want, nr);
            }
        }
        assert_eq!(syscalls::group_bits(g), Some(&want), "{g}");
        assert!(want.iter().any(|w| *w != 0), "{g} is empty");
    }
    let top = syscalls::BY_NAME.iter().map(|(_, nr)| *nr).max().unwrap();
    assert!((top as usize) < 64 * syscalls::WORDS, "{top}");
}
