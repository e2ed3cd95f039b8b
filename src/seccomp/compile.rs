//! From a policy to the filter: resolve the groups and names to a set of
//! numbers, give each number its verdict (allow, notify, an argument
//! block), lay out the program and fill in the policy's action.

use super::bpf::{arg_block, assemble, meter_block, Leaf, MARK, METER_MARK};
use super::rules::arg_rules;
use super::{syscalls, Compiled, SeccompAction, SeccompError, SeccompPolicy};

/// Always in the allowlist: without them the jail cannot start the command
/// or end.
pub(super) const ALWAYS: &[&str] = &["execve", "exit", "exit_group", "clone3"];
/// Also allowed when a listener is handed to the supervisor: the payload
/// sends it with sendmsg after the filter is in force.
pub(super) const WITH_LISTENER: &[&str] = &["sendmsg"];

/// Left out with `SeccompPolicy::host_ipc`: a POSIX message queue is named
/// in the IPC namespace's mqueue filesystem, the host's without a namespace
/// of the jail's own, where a queue made would outlive the run and be
/// seen by the host (Landlock refuses the open, not the creation), and
/// `mq_unlink` could remove the caller's. The others act on a queue
/// already open only.
pub(super) const HOST_QUEUE_NAMES: &[&str] = &["mq_open", "mq_unlink"];

/// The set of syscall numbers the policy's groups and single names allow.
/// Errors are one line naming the bad group or syscall.
pub fn resolve_bits(p: &SeccompPolicy) -> Result<syscalls::Bits, SeccompError> {
    let mut bits = [0u64; syscalls::WORDS];
    for g in &p.groups {
        let Some(members) = syscalls::group_bits(g) else {
            return Err(SeccompError::UnknownGroup { group: g.clone() });
        };
        for (w, m) in bits.iter_mut().zip(members) {
            *w |= m;
        }
    }
    for n in &p.allow {
        let Some(nr) = syscalls::number(n) else {
            return Err(SeccompError::UnknownSyscall { name: n.clone() });
        };
        set_bit(&mut bits, nr);
    }
    Ok(bits)
}

pub(super) fn set_bit(bits: &mut syscalls::Bits, nr: u32) {
    bits[nr as usize / 64] |= 1 << (nr % 64);
}

/// The numbers in `bits`, ascending.
pub(super) fn numbers(bits: &syscalls::Bits) -> impl Iterator<Item = u32> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        (0..64u32)
            .filter(move |b| word & (1 << b) != 0)
            .map(move |b| w as u32 * 64 + b)
    })
}

/// Compile `p` into the filter. Errors are one line naming the bad group
/// or syscall.
pub fn compile(p: &SeccompPolicy) -> Result<Compiled, SeccompError> {
    compile_metered(p, None)
}

/// [`compile`], with the allocation meter of the rlimit rung when
/// `rlimit_as` is given: an `mmap` or `mremap` asking for
/// [`meter_threshold`] or more goes to the supervisor's listener, which tells
/// whether it was more than the limit had left and lets it continue
/// (the kernel then refuses it, or not). Smaller ones never fail unless
/// the process is already past nine tenths of the limit, which the
/// sampled peak tells (see `supervise::classify`).
pub fn compile_metered(
    p: &SeccompPolicy,
    rlimit_as: Option<u64>,
) -> Result<Compiled, SeccompError> {
    let bits = allowed_bits(p)?;
    let verdicts = verdicts(p, &bits, rlimit_as.map(meter_threshold))?;
    let mut allowlist = assemble(&verdicts.leaves, verdicts.blocks);
    let mismatch_at = fill_action(&mut allowlist, p.action);
    let metered_at = fill_meter(&mut allowlist);
    if allowlist.len() > 4096 {
        return Err(SeccompError::TooLong {
            instructions: allowlist.len(),
        });
    }
    Ok(Compiled {
        action: p.action,
        allowed: verdicts.allowed,
        groups: p.groups.clone(),
        allowlist,
        mismatch_at,
        mediated: verdicts.mediated,
        watched: verdicts.watched,
        meter: rlimit_as.filter(|_| !metered_at.is_empty()),
        metered_at,
    })
}

/// The smallest allocation the meter hears of: a tenth of RLIMIT_AS, and
/// never more than 1 MiB (one page at least). The allocation that fails
/// at the limit is often a small one (glibc asks the kernel for 1 MiB
/// and more at a time, an interpreter's arenas are 1 MiB); hearing those
/// makes the verdict a record, not a guess from sampled peaks.
pub fn meter_threshold(rlimit_as: u64) -> u64 {
    (rlimit_as / 10).clamp(4096, 1 << 20)
}

/// The syscalls the meter hears of, with the argument that says how much
/// address space they ask for (`mmap`'s length, `mremap`'s new length).
pub const METERED: &[(&str, u8)] = &[("mmap", 1), ("mremap", 2)];

/// Replace the meter's placeholders with user-notify; returns where they
/// are (an install without a listener allows them instead).
fn fill_meter(allowlist: &mut [libc::sock_filter]) -> Vec<usize> {
    let marker = libc::SECCOMP_RET_TRACE | METER_MARK;
    let ret_k = (libc::BPF_RET | libc::BPF_K) as u16;
    let at: Vec<usize> = allowlist
        .iter()
        .enumerate()
        .filter(|(_, i)| i.code == ret_k && i.k == marker)
        .map(|(n, _)| n)
        .collect();
    for &i in &at {
        allowlist[i].k = libc::SECCOMP_RET_USER_NOTIF;
    }
    at
}

/// The policy's numbers, with the ones the jail always needs.
fn allowed_bits(p: &SeccompPolicy) -> Result<syscalls::Bits, SeccompError> {
    let mut bits = resolve_bits(p)?;
    if p.host_ipc {
        for nr in HOST_QUEUE_NAMES.iter().filter_map(|n| syscalls::number(n)) {
            bits[nr as usize / 64] &= !(1 << (nr % 64));
        }
    }
    // Every mode hands a listener to the supervisor (Compiled::wants_listener).
    for n in ALWAYS.iter().chain(WITH_LISTENER) {
        if let Some(nr) = syscalls::number(n) {
            set_bit(&mut bits, nr);
        }
    }
    Ok(bits)
}

/// What each allowed number gets, in ascending order.
struct Verdicts {
    leaves: Vec<(u32, Leaf)>,
    /// The argument blocks `Leaf::Block` points into.
    blocks: Vec<Vec<libc::sock_filter>>,
    /// How many numbers are allowed.
    allowed: usize,
    /// The number sent to the supervisor's listener (`connect`).
    mediated: Option<i32>,
    /// The path-taking numbers sent to it in learning mode.
    watched: Vec<i32>,
}

/// Give each number of `bits` its verdict: allowed, through the listener
/// (the fallback's `connect`), or after its argument block (the allocation
/// meter's among them, at `meter` bytes).
fn verdicts(
    p: &SeccompPolicy,
    bits: &syscalls::Bits,
    meter: Option<u64>,
) -> Result<Verdicts, SeccompError> {
    let metered: Vec<(u32, u8)> = METERED
        .iter()
        .filter_map(|(n, arg)| Some((syscalls::number(n)?, *arg)))
        .collect();
    let filtered: Vec<(u32, &str)> = syscalls::FILTERED
        .iter()
        .filter_map(|n| Some((syscalls::number(n)?, *n)))
        .collect();
    let mut leaves: Vec<(u32, Leaf)> = Vec::with_capacity(512);
    let mut blocks: Vec<Vec<libc::sock_filter>> = Vec::new();
    let mut allowed = 0;
    let connect = syscalls::number("connect");
    let mut mediated = None;
    let mut watched = Vec::new();
    let paths: Vec<u32> = match p.learn_paths && p.action == SeccompAction::Learn {
        true => super::paths::path_numbers().collect(),
        false => Vec::new(),
    };
    for nr in numbers(bits) {
        allowed += 1;
        let rules = match filtered.iter().find(|(f, _)| *f == nr) {
            Some((_, name)) => arg_rules(name, p)?,
            None => Vec::new(),
        };
        let leaf = if p.mediate_unix && Some(nr) == connect {
            mediated = Some(nr as i32);
            Leaf::Notify
        } else if paths.contains(&nr) {
            // Learning mode reads the path and lets it continue: the
            // argument filters are not learned from.
            watched.push(nr as i32);
            Leaf::Notify
        } else if let (Some(t), Some((_, arg)), true) = (
            meter,
            metered.iter().find(|(m, _)| *m == nr),
            rules.is_empty(),
        ) {
            blocks.push(meter_block(*arg, t));
            Leaf::Block(blocks.len() - 1)
        } else if rules.is_empty() {
            Leaf::Allow
        } else {
            blocks.push(arg_block(nr, rules)?);
            Leaf::Block(blocks.len() - 1)
        };
        leaves.push((nr, leaf));
    }
    Ok(Verdicts {
        leaves,
        blocks,
        allowed,
        mediated,
        watched,
    })
}

/// Replace the MARK placeholders with the policy's action; returns where
/// they are (kill mode with a listener rewrites them again).
fn fill_action(allowlist: &mut [libc::sock_filter], action: SeccompAction) -> Vec<usize> {
    let marker = libc::SECCOMP_RET_TRACE | MARK;
    let ret_k = (libc::BPF_RET | libc::BPF_K) as u16;
    let mismatch_at: Vec<usize> = allowlist
        .iter()
        .enumerate()
        .filter(|(_, i)| i.code == ret_k && i.k == marker)
        .map(|(n, _)| n)
        .collect();
    let ret = match action {
        SeccompAction::Errno => libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        SeccompAction::Kill => libc::SECCOMP_RET_KILL_PROCESS,
        SeccompAction::Learn => libc::SECCOMP_RET_USER_NOTIF,
    };
    for &i in &mismatch_at {
        allowlist[i].k = ret;
    }
    mismatch_at
}
