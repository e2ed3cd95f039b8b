//! From a policy to the filter: resolve the groups and names to a set of
//! numbers, give each number its verdict (allow, notify, an argument
//! block), lay out the program and fill in the policy's action.

use super::bpf::{arg_block, assemble, Leaf, MARK};
use super::rules::arg_rules;
use super::{syscalls, Compiled, SeccompAction, SeccompPolicy};

/// Always in the allowlist: without them the jail cannot start the command
/// or end.
pub(super) const ALWAYS: &[&str] = &["execve", "exit", "exit_group", "clone3"];
/// Also allowed when a listener is handed to the supervisor: the payload
/// sends it with sendmsg after the filter is in force.
const WITH_LISTENER: &[&str] = &["sendmsg"];

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
