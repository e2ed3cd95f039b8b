//! pid 2: the last steps before execve, in the order that matters:
//! setsid → rlimits → drop capabilities → no_new_privs → Landlock →
//! close stray fds → hello (the supervisor tells our pid) → seccomp
//! (last) → execve.

#![deny(unsafe_code)]

use std::os::fd::AsRawFd;

use super::error::{JailError, Step};
use super::proto::{CapsLeft, Enforced, LayerRecord, OrFail, Report, Reporter};
use super::{caps, filter, landlock, rlimits, unix_agent};
use crate::plan::{Landlock, Plan};
use crate::policy::Layer;
use crate::sys::{self, Errno};

/// Never returns: execs the command or exits 125/126/127. Runs in init's
/// memory until execve (see `sys::spawn_vfork`): it may allocate, but must
/// not change or drop anything of init's; `report` is its copy of init's
/// report pipe. A failed step ends it where it failed ([`OrFail`]).
/// `host_proc`: the host's /proc, open, when the plan disables user
/// namespaces (see [`nest_userns`]). `hello`: the socket to say hello on
/// before execve, when the supervisor tells our pid ([`say_hello`]).
/// `lock`: what init has for Landlock ([`FromInit`]).
pub fn main(
    plan: &Plan,
    report: Reporter,
    host_proc: Option<i32>,
    lock: FromInit,
    hello: Option<i32>,
) -> std::convert::Infallible {
    sys::reset_signals().step("signals", "").or_fail(report);
    // A new session: no controlling terminal, so no TIOCSTI into the host's.
    sys::setsid().step("setsid", "").or_fail(report);
    let envp = enter_cwd(plan).or_fail(report);
    // Fallback started by root: nothing of the payload stays root.
    if let Some(ids) = plan.mode.fallback().and_then(|f| f.ids) {
        leave_root(ids).or_fail(report);
    }
    // As the payload's own user, before its rlimits (the workdir's size
    // bounds them).
    if let Some((dir, files)) = &plan.exec.seed {
        super::seed::write(dir, files).or_fail(report);
    }
    rlimits::apply(&plan.limits.rlimits)
        .step("rlimits", "")
        .or_fail(report);
    if let Some(proc) = host_proc {
        nest_userns(plan, proc).or_fail(report);
    }
    if plan.layers.assert_userns_disabled {
        assert_userns_disabled().or_fail(report);
    }
    if plan.exec.zygote {
        super::zygote::handoff(plan, envp, hello, report)
    }
    // The layers' records, written in one go before seccomp.
    let mut layers = vec![drop_capabilities(plan).or_fail(report)];
    sys::set_no_new_privs()
        .step("no_new_privs", "")
        .or_fail(report);
    if let Some(l) = &plan.layers.landlock {
        layers.push(apply_landlock(plan, l, lock).or_fail(report));
    }
    start_connect_agent(plan).or_fail(report);
    // Only 0, 1, 2 and the kept fds survive execve; the report pipe is
    // close-on-exec and still usable until then.
    sys::cloexec_all_but(&plan.channels.keep_fds)
        .step("close fds", "")
        .or_fail(report);
    // seccomp last: nothing after it but execve (and nothing is freed:
    // `layers` lives on, unused, until then).
    if let Some(f) = &plan.layers.seccomp {
        layers.push(Report::Layer(filter::record(f)));
    }
    report.send_all(&layers);
    // Before seccomp (a caller's filter may refuse the socket calls), and
    // before --block-fd, as bwrap tells the pid before its child waits.
    say_hello(hello, report);
    // bwrap's --block-fd: the command waits for data (or EOF) on the fd.
    if let Some(fd) = plan.channels.block_fd {
        sys::read(fd, &mut [0u8; 1])
            .step("block fd", "")
            .or_fail(report);
    }
    if let Some(f) = &plan.layers.seccomp {
        // In learning and kill mode this also sends the listener to the
        // supervisor over plan.channels.seccomp.
        filter::install_with(f, plan.channels.seccomp)
            .step("seccomp", "")
            .or_fail(report);
    }
    // The caller's own programs (bwrap's --seccomp), after stockade's.
    // With prctl, as bwrap: an earlier program may allow prctl only.
    for prog in &plan.layers.bpf_filters {
        sys::seccomp::install_prctl(prog)
            .step("seccomp", "")
            .or_fail(report);
    }
    exec(plan, envp, report)
}

/// What init hands the payload for Landlock.
#[derive(Clone, Copy)]
pub struct FromInit<'a> {
    /// The supervisor's verdict: the payload asks for its denials to be
    /// logged (`Landlock::log_tag`).
    pub log: bool,
    /// Init's detached mount of the IPC namespace's mqueue, for the rule
    /// on it (`Landlock::mqueue`), or why there is none.
    pub mqueue: Option<landlock::MqueueRoot<'a>>,
}

/// Tell the supervisor our pid, and wait until it has told it where the
/// policy asks (`supervise::childpid`): one byte written on `hello` (the
/// kernel attaches our pid, in the supervisor's numbering), one read back,
/// so the pid is out before the command starts. The socket is
/// close-on-exec. No answer: the supervisor is gone, so is the run.
pub(super) fn say_hello(hello: Option<i32>, report: Reporter) {
    let Some(fd) = hello else { return };
    let mut b = [0u8; 1];
    let answered = sys::write_all(fd, b"P").and_then(|_| sys::read(fd, &mut b));
    if !matches!(answered, Ok(1)) {
        report.fail(JailError::Silent("no answer to the hello"));
    }
}

/// chdir to the plan's directory, else to the first of its fallbacks that
/// can be entered; the environment execve gets there. The error is the
/// first directory's.
fn enter_cwd(plan: &Plan) -> Result<&[std::ffi::CString], JailError> {
    let x = &plan.exec;
    let first = sys::chdir(&x.cwd).step(crate::plan::step::CHDIR, &x.cwd);
    let Err(e) = first else {
        return Ok(&x.envp);
    };
    for (dir, envp) in &x.cwd_fallbacks {
        if sys::chdir(dir).is_ok() {
            return Ok(envp);
        }
    }
    Err(e)
}

/// The last user namespace the jail's limit allows (bwrap's
/// `--disable-userns`): the payload's own, its ids mapped to themselves,
/// so that no capability it keeps reaches the jail's sysctl.
/// Our /proc files are ours to write only while we are dumpable: dumpable
/// for those writes, then not again (the memory is still init's, which no
/// one in the jail may read; no other process is in the jail yet).
fn nest_userns(plan: &Plan, proc: i32) -> Result<(), JailError> {
    let (uid, gid) = (plan.identity.uid, plan.identity.gid);
    let written = sys::unshare_userns()
        .and_then(|_| sys::set_dumpable(true))
        .and_then(|_| sys::write_beneath(proc, "self/setgroups", b"deny"))
        .and_then(|_| sys::write_beneath(proc, "self/uid_map", format!("{uid} {uid} 1").as_bytes()))
        .and_then(|_| {
            sys::write_beneath(proc, "self/gid_map", format!("{gid} {gid} 1").as_bytes())
        });
    let undumpable = sys::set_dumpable(false);
    written.and(undumpable).step("disable userns", "")
}

/// Creating a user namespace must be refused here (bwrap's check; should
/// it succeed, the payload dies in that namespace without running).
fn assert_userns_disabled() -> Result<(), JailError> {
    match sys::unshare_userns() {
        Err(_) => Ok(()),
        Ok(()) => Err(JailError::Refused {
            step: crate::plan::step::ASSERT_USERNS_DISABLED,
            path: String::new(),
            why: "a new user namespace could still be created".into(),
        }),
    }
}

/// The fallback started by root: the leased uid and gid, with an empty
/// bounding set.
fn leave_root((uid, gid): (u32, u32)) -> Result<(), JailError> {
    sys::drop_bounding_caps()
        .and_then(|_| sys::setresgid(gid))
        .and_then(|_| sys::setresuid(uid))
        .step("switch to unprivileged user", "")
}

/// Empty every capability set but the plan's kept ones (bwrap's
/// `--cap-add`); the record says what is left.
fn drop_capabilities(plan: &Plan) -> Result<Report, JailError> {
    let id = &plan.identity;
    drop_capabilities_but(id.keep_caps, id.caps_as_root, id.bounding_caps)
}

/// Every capability but `keep` (kept as uid 0 keeps them with `as_root`),
/// the bounding set `bounding` (else `keep`), and its record.
pub(super) fn drop_capabilities_but(
    keep: u64,
    as_root: bool,
    bounding: Option<u64>,
) -> Result<Report, JailError> {
    let bounding = match (keep, bounding) {
        (0, None) => caps::drop_all(),
        (keep, bounding) => caps::keep_only(keep, as_root, bounding.unwrap_or(keep)),
    }
    .step("drop capabilities", "")?;
    let [effective, permitted, inheritable, bounding, ambient] = sys::caps_left(bounding);
    Ok(Report::Layer(LayerRecord::Capabilities(CapsLeft {
        effective,
        permitted,
        inheritable,
        bounding,
        ambient,
    })))
}

/// Landlock, and its record. Less than full enforcement (or none) is a
/// failure when the policy requires the layer.
/// With `log`, the payload's denials are logged for the supervisor (see
/// `Landlock::log_tag`).
fn apply_landlock(plan: &Plan, l: &Landlock, lock: FromInit) -> Result<Report, JailError> {
    let required = plan.layers.require.contains(&Layer::Landlock);
    let ns = plan.mode.namespaces();
    let mounts = ns.is_some().then_some(plan.root.mount_points.as_slice());
    let proxy = ns.and_then(|ns| ns.egress.as_ref()).map(|e| e.port);
    let tag = l.log_tag.as_deref().filter(|_| lock.log);
    let record = match landlock::apply(&l.rules, l.deny_tcp, proxy, mounts, tag, lock.mqueue) {
        Ok(r) if required && r.status != Enforced::Fully => {
            return Err(JailError::LandlockWeak(Box::new(r)))
        }
        Ok(r) => LayerRecord::Landlock(r),
        Err(e) if required => return Err(e),
        Err(e) => LayerRecord::LandlockUnavailable { why: e.to_string() },
    };
    Ok(Report::Layer(record))
}

/// Fallback: start the connect agent (see unix_agent) in the payload's
/// Landlock domain, before seccomp; the supervisor gets its socket.
fn start_connect_agent(plan: &Plan) -> Result<(), JailError> {
    let Some(fallback) = plan.mode.fallback() else {
        return Ok(());
    };
    let (Some(f), Some(ch)) = (&plan.layers.seccomp, plan.channels.seccomp) else {
        return Ok(());
    };
    if f.mediated.is_none() {
        return Ok(());
    }
    sys::fdpass::socketpair(libc::SOCK_SEQPACKET)
        .and_then(|(ours, theirs)| {
            unix_agent::start(theirs.as_raw_fd(), &fallback.unix_roots)?;
            sys::fdpass::send_fd_with(ch, ours.as_raw_fd(), b"U")
        })
        .step("unix socket agent", "")
}

/// execve each candidate in turn; when none runs, report the first error
/// that is not "not there" and exit 126 (127 when nothing was found).
pub(super) fn exec(plan: &Plan, envp: &[std::ffi::CString], report: Reporter) -> ! {
    let mut first_err: Option<(Errno, &std::ffi::CStr)> = None;
    for cand in &plan.exec.candidates {
        let e = sys::execve(cand, &plan.exec.argv, envp);
        match e {
            Errno::ENOENT | Errno::ENOTDIR => {}
            _ => {
                if first_err.is_none() {
                    first_err = Some((e, cand));
                }
            }
        }
    }
    let (errno, path) = match first_err {
        Some((e, p)) => (e, p.to_string_lossy().into_owned()),
        None => (Errno::ENOENT, plan.exec.command.clone()),
    };
    report.send(&Report::Exec {
        errno: errno as i32,
        path,
    });
    sys::exit_now(if errno == Errno::ENOENT { 127 } else { 126 })
}
