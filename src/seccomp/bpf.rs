//! The classic-BPF code generator: the ABI guard at the head, a binary
//! search over runs of syscall numbers, and the argument blocks
//! seccompiler compiles, joined into one program.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction as Act, SeccompFilter, SeccompRule, TargetArch};

use super::SeccompError;

/// SECCOMP_RET_TRACE data used as a placeholder for the mismatch action
/// while compiling; replaced before install.
pub(super) const MARK: u32 = 0x5ecc;
/// The allocation meter's placeholder for user-notify (see
/// [`meter_block`]); replaced before install.
pub(super) const METER_MARK: u32 = 0x5ecd;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// What the allowlist does with one range of syscall numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Leaf {
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
pub(super) fn assemble(
    leaves: &[(u32, Leaf)],
    blocks: Vec<Vec<libc::sock_filter>>,
) -> Vec<libc::sock_filter> {
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
pub(super) fn arg_block(
    nr: u32,
    rules: Vec<SeccompRule>,
) -> Result<Vec<libc::sock_filter>, SeccompError> {
    let filter = SeccompFilter::new(
        BTreeMap::from([(i64::from(nr), rules)]),
        Act::Trace(MARK),
        Act::Allow,
        ARCH,
    )
    .map_err(SeccompError::Build)?;
    let prog: BpfProgram = filter.try_into().map_err(SeccompError::Compile)?;
    Ok(sock_filters(&prog))
}

/// The allocation meter's block: argument `arg` (a length, 64 bits) at
/// `threshold` or more returns the METER_MARK placeholder (the listener),
/// anything less is allowed. Little-endian: the high word is the second.
pub(super) fn meter_block(arg: u8, threshold: u64) -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let lo_at = 16 + 8 * u32::from(arg); // offsetof(struct seccomp_data, args[arg])
    let (hi, lo) = ((threshold >> 32) as u32, threshold as u32);
    vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, lo_at + 4),
        jump(BPF_JMP | BPF_JGT | BPF_K, hi, 3, 0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, hi, 0, 3),
        stmt(BPF_LD | BPF_W | BPF_ABS, lo_at),
        jump(BPF_JMP | BPF_JGE | BPF_K, lo, 0, 1),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_TRACE | METER_MARK),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// seccompiler's program as the kernel's `sock_filter` instructions.
pub(crate) fn sock_filters(prog: &BpfProgram) -> Vec<libc::sock_filter> {
    prog.iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
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

pub(super) fn stmt(code: u32, k: u32) -> libc::sock_filter {
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
