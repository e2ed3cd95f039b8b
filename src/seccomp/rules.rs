//! The argument filters of the few syscalls that are only ever allowed
//! with one (`syscalls::FILTERED`): which flags, families, types, ioctl
//! commands and personas pass.

use seccompiler::{
    SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompRule,
};

use super::{SeccompError, SeccompPolicy};

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

fn cond(arg: u8, len: Len, op: Op, v: u64) -> Result<Cond, SeccompError> {
    Cond::new(arg, len, op, v).map_err(SeccompError::ArgumentFilter)
}

fn rule(c: Vec<Cond>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(c).map_err(SeccompError::ArgumentFilter)
}

/// The argument filter for a syscall that is only ever allowed with one.
pub(super) fn arg_rules(name: &str, p: &SeccompPolicy) -> Result<Vec<SeccompRule>, SeccompError> {
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
