//! seccomp-bpf allowlist: compiled before clone (parent side, pure), and
//! installed last in the payload, right before execve (`jail::filter`).
//!
//! One filter, read top to bottom:
//!
//! 1. the *ABI guard*: kill the process for a foreign architecture (the
//!    i386 `int 0x80` entry included) and for x32 syscall numbers
//!    (`nr | 0x40000000`), whatever the policy's action; answer `clone3`
//!    with ENOSYS: its flags live in memory a filter cannot read, and
//!    ENOSYS makes libc fall back to `clone`, whose flags are checked;
//! 2. the *allowlist*: the syscalls of the policy's groups and single
//!    names, some with argument filters; anything else gets the policy's
//!    action: EPERM, kill, or (learning mode) a user notification the
//!    supervisor answers with "continue". It is a binary search over runs
//!    of syscall numbers (about eight comparisons for any number), so the
//!    kernel's per-syscall verdict cache is filled quickly when the filter
//!    is attached; a linear chain of one comparison per syscall made that
//!    cost a millisecond and more. The few argument-checked syscalls jump
//!    to a block compiled by seccompiler.
//!
//! One filter rather than two: the kernel translates and JIT-compiles each
//! filter when it is attached, a fixed cost of about 100 µs a filter here.

#![deny(unsafe_code)]

pub mod syscalls;

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction as Act, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

/// `TIOCSTI`: push a byte into a terminal's input queue.
pub const TIOCSTI: u32 = 0x5412;
/// `TIOCLINUX`: console tricks, including selection paste.
pub const TIOCLINUX: u32 = 0x541C;

/// Namespace flags `clone` may not carry.
pub const CLONE_NS_FLAGS: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u64
    | 0x80; // CLONE_NEWTIME

/// personality(2) values allowed: PER_LINUX, PER_LINUX32, and the query.
pub const PERSONAS: &[u64] = &[0x0000, 0x0008, 0xffff_ffff];

/// Always in the allowlist: without them the jail cannot start the command
/// or end.
const ALWAYS: &[&str] = &["execve", "exit", "exit_group", "clone3"];
/// Also allowed when a listener is handed to the supervisor: the payload
/// sends it with sendmsg after the filter is in force.
const WITH_LISTENER: &[&str] = &["sendmsg"];

/// SECCOMP_RET_TRACE data used as a placeholder for the mismatch action
/// while compiling; replaced before install.
const MARK: u32 = 0x5ecc;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// What a syscall outside the allowlist gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SeccompAction {
    /// Fail with EPERM (programs fail cleanly: Python raises PermissionError).
    Errno,
    /// Kill the process; reported as `seccomp_violation`.
    Kill,
    /// Allow, but tell the supervisor (learning mode).
    Learn,
}

/// The seccomp layer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeccompPolicy {
    pub enabled: bool,
    /// Named groups (`@default`, `@basic-io`, …).
    pub groups: Vec<String>,
    /// Single syscalls allowed on top of the groups.
    pub allow: Vec<String>,
    pub action: SeccompAction,
    /// socket() only for AF_UNIX: set for the fallback without a network
    /// namespace, where Landlock can deny TCP but not UDP.
    pub unix_sockets_only: bool,
    /// The fallback's unix-socket mediation (see supervise::unix): connect()
    /// goes to the supervisor, and AF_UNIX datagram sockets are refused.
    pub mediate_unix: bool,
}

impl Default for SeccompPolicy {
    fn default() -> Self {
        SeccompPolicy {
            enabled: true,
            groups: vec!["@default".into()],
            allow: Vec::new(),
            action: SeccompAction::Errno,
            unix_sockets_only: false,
            mediate_unix: false,
        }
    }
}

/// A compiled policy, ready to install.
#[derive(Clone)]
pub struct Compiled {
    pub action: SeccompAction,
    /// Number of syscalls the allowlist names.
    pub allowed: usize,
    /// The groups the policy named, for the outcome.
    pub groups: Vec<String>,
    /// The allowlist, with the mismatch action filled in for an install
    /// without a supervisor channel (EPERM, kill, or user-notif for Learn).
    allowlist: Vec<libc::sock_filter>,
    /// Indices of the mismatch returns in `allowlist`.
    mismatch_at: Vec<usize>,
    /// The syscall number the filter sends to the supervisor's listener
    /// although the allowlist allows it (`connect` in the fallback: see
    /// supervise::unix).
    pub mediated: Option<i32>,
}

impl Compiled {
    /// The program to install. With a listener in kill mode, every
    /// mismatch goes to the supervisor (which kills the jail and names the
    /// syscall) instead of killing in the kernel.
    pub fn program(&self, listener: bool) -> Vec<libc::sock_filter> {
        let mut prog = self.allowlist.clone();
        if listener && self.action == SeccompAction::Kill {
            for &i in &self.mismatch_at {
                prog[i].k = libc::SECCOMP_RET_USER_NOTIF;
            }
        }
        prog
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("action", &self.action)
            .field("allowed", &self.allowed)
            .field("groups", &self.groups)
            .field("instructions", &self.allowlist.len())
            .finish()
    }
}

impl Compiled {
    /// The payload should hand a user-notification listener to the
    /// supervisor: always in learning mode; in kill mode so the supervisor
    /// learns which syscall was refused (without a channel, kill mode
    /// falls back to SECCOMP_RET_KILL_PROCESS).
    pub fn wants_listener(&self) -> bool {
        matches!(self.action, SeccompAction::Learn | SeccompAction::Kill) || self.mediated.is_some()
    }

    /// Instructions in the filter.
    pub fn len(&self) -> usize {
        self.allowlist.len()
    }
}

/// The action's name in the outcome's seccomp layer.
pub fn action_name(a: SeccompAction) -> &'static str {
    match a {
        SeccompAction::Errno => "errno",
        SeccompAction::Kill => "kill",
        SeccompAction::Learn => "learn",
    }
}

fn cond(arg: u8, len: Len, op: Op, v: u64) -> Result<Cond, String> {
    Cond::new(arg, len, op, v).map_err(|e| format!("argument filter: {e}"))
}

fn rule(c: Vec<Cond>) -> Result<SeccompRule, String> {
    SeccompRule::new(c).map_err(|e| format!("argument filter: {e}"))
}

/// The argument filter for a syscall that is only ever allowed with one.
fn arg_rules(name: &str, p: &SeccompPolicy) -> Result<Vec<SeccompRule>, String> {
    let unix_only = p.unix_sockets_only;
    // Without a mount namespace a unix datagram socket can send to any
    // pathname socket on the host (sendto, sendmsg: the address is behind a
    // pointer no filter can read): none in the fallback. Stream and
    // seqpacket sockets ignore or refuse a destination address, so their
    // only way out is connect(), which the supervisor mediates.
    let unix_types: &[i32] = if p.mediate_unix {
        &[libc::SOCK_STREAM, libc::SOCK_SEQPACKET]
    } else {
        &[libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_SEQPACKET]
    };
    let mut r = Vec::new();
    match name {
        // No namespace flags (clone uses the low 32 bits of its flags).
        "clone" => r.push(rule(vec![cond(
            0,
            Len::Dword,
            Op::MaskedEq(CLONE_NS_FLAGS),
            0,
        )?])?),
        // Only the ordinary families, no raw or packet sockets (the type
        // argument carries SOCK_NONBLOCK/SOCK_CLOEXEC above bit 3).
        "socket" => {
            let families: &[i32] = if unix_only {
                &[libc::AF_UNIX]
            } else {
                &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6]
            };
            for &fam in families {
                let types: &[i32] = if fam == libc::AF_UNIX {
                    unix_types
                } else {
                    &[libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_SEQPACKET]
                };
                for &ty in types {
                    r.push(rule(vec![
                        cond(0, Len::Dword, Op::Eq, fam as u64)?,
                        cond(1, Len::Dword, Op::MaskedEq(0xf), ty as u64)?,
                    ])?);
                }
            }
        }
        "socketpair" => {
            for &ty in unix_types {
                r.push(rule(vec![
                    cond(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)?,
                    cond(1, Len::Dword, Op::MaskedEq(0xf), ty as u64)?,
                ])?);
            }
        }
        // The kernel truncates the command to 32 bits, so compare only the
        // low 32 bits (Dword): TIOCSTI | 1 << 32 is TIOCSTI.
        "ioctl" => r.push(rule(vec![
            cond(1, Len::Dword, Op::Ne, TIOCSTI as u64)?,
            cond(1, Len::Dword, Op::Ne, TIOCLINUX as u64)?,
        ])?),
        "personality" => {
            for p in PERSONAS {
                r.push(rule(vec![cond(0, Len::Dword, Op::Eq, *p)?])?);
            }
        }
        _ => {}
    }
    Ok(r)
}

/// The set of syscall numbers the policy's groups and single names allow.
/// Errors are one line naming the bad group or syscall.
pub fn resolve_bits(p: &SeccompPolicy) -> Result<syscalls::Bits, String> {
    let mut bits = [0u64; syscalls::WORDS];
    for g in &p.groups {
        let Some(members) = syscalls::group_bits(g) else {
            let known: Vec<&str> = syscalls::GROUPS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown syscall group {g:?} (known: {})",
                known.join(", ")
            ));
        };
        for (w, m) in bits.iter_mut().zip(members) {
            *w |= m;
        }
    }
    for n in &p.allow {
        let Some(nr) = syscalls::number(n) else {
            return Err(format!(
                "unknown syscall {n:?} (not in the {} syscall table)",
                std::env::consts::ARCH
            ));
        };
        set_bit(&mut bits, nr);
    }
    Ok(bits)
}

fn set_bit(bits: &mut syscalls::Bits, nr: u32) {
    bits[nr as usize / 64] |= 1 << (nr % 64);
}

/// The numbers in `bits`, ascending.
fn numbers(bits: &syscalls::Bits) -> impl Iterator<Item = u32> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        (0..64u32)
            .filter(move |b| word & (1 << b) != 0)
            .map(move |b| w as u32 * 64 + b)
    })
}

/// Compile `p` into the filter. Errors are one line naming the bad group
/// or syscall.
pub fn compile(p: &SeccompPolicy) -> Result<Compiled, String> {
    let mut bits = resolve_bits(p)?;
    let mut extra: Vec<&str> = ALWAYS.to_vec();
    if matches!(p.action, SeccompAction::Learn | SeccompAction::Kill) || p.mediate_unix {
        extra.extend_from_slice(WITH_LISTENER);
    }
    for n in extra {
        if let Some(nr) = syscalls::number(n) {
            set_bit(&mut bits, nr);
        }
    }
    let filtered: Vec<(u32, &str)> = syscalls::FILTERED
        .iter()
        .filter_map(|n| Some((syscalls::number(n)?, *n)))
        .collect();
    let mut leaves: Vec<(u32, Leaf)> = Vec::with_capacity(512);
    let mut blocks: Vec<Vec<libc::sock_filter>> = Vec::new();
    let mut allowed = 0;
    let connect = syscalls::number("connect");
    let mut mediated = None;
    for nr in numbers(&bits) {
        allowed += 1;
        let rules = match filtered.iter().find(|(f, _)| *f == nr) {
            Some((_, name)) => arg_rules(name, p)?,
            None => Vec::new(),
        };
        let leaf = if p.mediate_unix && Some(nr) == connect {
            mediated = Some(nr as i32);
            Leaf::Notify
        } else if rules.is_empty() {
            Leaf::Allow
        } else {
            blocks.push(arg_block(nr, rules)?);
            Leaf::Block(blocks.len() - 1)
        };
        leaves.push((nr, leaf));
    }
    let mut allowlist = assemble(&leaves, blocks);

    let marker = libc::SECCOMP_RET_TRACE | MARK;
    let ret_k = (libc::BPF_RET | libc::BPF_K) as u16;
    let mismatch_at: Vec<usize> = allowlist
        .iter()
        .enumerate()
        .filter(|(_, i)| i.code == ret_k && i.k == marker)
        .map(|(n, _)| n)
        .collect();
    let ret = match p.action {
        SeccompAction::Errno => libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        SeccompAction::Kill => libc::SECCOMP_RET_KILL_PROCESS,
        SeccompAction::Learn => libc::SECCOMP_RET_USER_NOTIF,
    };
    for &i in &mismatch_at {
        allowlist[i].k = ret;
    }
    if allowlist.len() > 4096 {
        return Err(format!(
            "the filter has {} instructions, more than the kernel accepts",
            allowlist.len()
        ));
    }
    Ok(Compiled {
        action: p.action,
        allowed,
        groups: p.groups.clone(),
        allowlist,
        mismatch_at,
        mediated,
    })
}

/// What the allowlist does with one range of syscall numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leaf {
    Allow,
    /// The policy's action (compiled as the MARK placeholder).
    Refuse,
    /// Allowed, through the supervisor's listener.
    Notify,
    /// Jump to argument-check block `n`.
    Block(usize),
}

/// Numbers `lo..=hi` share one verdict.
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: u32,
    hi: u32,
    leaf: Leaf,
}

/// Cover all of `0..=u32::MAX` with spans: runs of allowed numbers, one
/// span per argument-checked number, refusal in the gaps.
fn spans(set: &[(u32, Leaf)]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(2 * set.len() + 1);
    let mut next: u64 = 0; // first number not yet covered
    for &(nr, leaf) in set {
        if u64::from(nr) > next {
            out.push(Span {
                lo: next as u32,
                hi: nr - 1,
                leaf: Leaf::Refuse,
            });
        }
        match out.last_mut() {
            Some(s)
                if leaf == Leaf::Allow
                    && s.leaf == Leaf::Allow
                    && u64::from(s.hi) + 1 == u64::from(nr) =>
            {
                s.hi = nr
            }
            _ => out.push(Span {
                lo: nr,
                hi: nr,
                leaf,
            }),
        }
        next = u64::from(nr) + 1;
    }
    if next <= u64::from(u32::MAX) {
        out.push(Span {
            lo: next as u32,
            hi: u32::MAX,
            leaf: Leaf::Refuse,
        });
    }
    out
}

/// Instructions [`search`] emits for `spans`.
fn search_len(spans: &[Span]) -> usize {
    if spans.len() == 1 {
        return 1;
    }
    let mid = spans.len() / 2;
    let left = search_len(&spans[..mid]);
    let jump = if left <= u8::MAX as usize { 1 } else { 2 };
    jump + left + search_len(&spans[mid..])
}

/// Append a binary search over `spans` on the syscall number in the
/// accumulator to `out`. Jumps to argument blocks are left as `BPF_JA`
/// with the block's index in `fixups` (position in `out`, block number),
/// patched once the blocks are laid out after the tree.
fn search(spans: &[Span], out: &mut Vec<libc::sock_filter>, fixups: &mut Vec<(usize, usize)>) {
    use libc::{BPF_JA, BPF_JGE, BPF_JMP, BPF_K, BPF_RET, SECCOMP_RET_ALLOW, SECCOMP_RET_TRACE};
    if let [only] = spans {
        out.push(match only.leaf {
            Leaf::Allow => stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            Leaf::Refuse => stmt(BPF_RET | BPF_K, SECCOMP_RET_TRACE | MARK),
            Leaf::Notify => stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF),
            Leaf::Block(n) => {
                fixups.push((out.len(), n));
                stmt(BPF_JMP | BPF_JA, 0)
            }
        });
        return;
    }
    let mid = spans.len() / 2;
    let key = spans[mid].lo;
    // Conditional jumps reach 255 instructions; a longer left side is
    // jumped over with an unconditional BPF_JA (32-bit offset).
    let left = search_len(&spans[..mid]);
    match u8::try_from(left) {
        Ok(n) => out.push(jump(BPF_JMP | BPF_JGE | BPF_K, key, n, 0)),
        Err(_) => {
            out.push(jump(BPF_JMP | BPF_JGE | BPF_K, key, 0, 1));
            out.push(stmt(BPF_JMP | BPF_JA, left as u32));
        }
    }
    search(&spans[..mid], out, fixups);
    search(&spans[mid..], out, fixups);
}

/// The whole allowlist: head, search tree, then the argument blocks.
fn assemble(leaves: &[(u32, Leaf)], blocks: Vec<Vec<libc::sock_filter>>) -> Vec<libc::sock_filter> {
    let mut fixups = Vec::new();
    let spans = spans(leaves);
    let mut prog = head();
    prog.reserve(search_len(&spans) + blocks.iter().map(Vec::len).sum::<usize>());
    search(&spans, &mut prog, &mut fixups);
    let mut starts = Vec::with_capacity(blocks.len());
    for b in blocks {
        starts.push(prog.len());
        prog.extend(b);
    }
    for (pos, n) in fixups {
        prog[pos].k = (starts[n] - pos - 1) as u32;
    }
    prog
}

/// The argument checks of one syscall, compiled by seccompiler as a
/// stand-alone program (arch check, number check, the allow rules, then the
/// MARK placeholder); the search tree jumps to its first instruction.
fn arg_block(nr: u32, rules: Vec<SeccompRule>) -> Result<Vec<libc::sock_filter>, String> {
    let filter = SeccompFilter::new(
        BTreeMap::from([(i64::from(nr), rules)]),
        Act::Trace(MARK),
        Act::Allow,
        ARCH,
    )
    .map_err(|e| format!("building the filter: {e}"))?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("compiling the filter: {e}"))?;
    Ok(prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// The filter's first instructions, the ABI guard: a foreign architecture
/// or an x32 number is killed and clone3 gets ENOSYS, whatever the policy's
/// action; then the syscall number is in the accumulator for the search.
fn head() -> Vec<libc::sock_filter> {
    use libc::{
        BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, SECCOMP_RET_ERRNO,
        SECCOMP_RET_KILL_PROCESS,
    };
    const NR: u32 = 0; // offsetof(struct seccomp_data, nr)
    const ARCH_OFF: u32 = 4; // offsetof(struct seccomp_data, arch)
    vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, ARCH_OFF),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD | BPF_W | BPF_ABS, NR),
        jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_clone3 as u32, 0, 1),
        stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy's syscall numbers with their names.
    fn resolve(p: &SeccompPolicy) -> Result<BTreeMap<u32, &'static str>, String> {
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
        let e = compile(&policy(&["@default", "@bogus"], &[], SeccompAction::Errno)).unwrap_err();
        assert!(e.contains("unknown syscall group \"@bogus\""), "{e}");
        let e = compile(&policy(
            &["@default"],
            &["frobnicate"],
            SeccompAction::Errno,
        ))
        .unwrap_err();
        assert!(e.contains("unknown syscall \"frobnicate\""), "{e}");
        let e = compile(&policy(&["basic-io"], &[], SeccompAction::Errno)).unwrap_err();
        assert!(e.contains("\"basic-io\""), "{e}");
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
        assert!(l.wants_listener() && k.wants_listener() && !c.wants_listener());
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
                    if set.contains_key(&nr) || ALWAYS.contains(&name) {
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
}

#[cfg(test)]
mod mediate_tests {
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
        assert!(!plain.wants_listener());
        assert_eq!(
            tests_run(&plain.allowlist, nr("connect"), [3, 0, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
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
}
