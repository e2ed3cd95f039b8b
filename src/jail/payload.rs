//! pid 2: the last steps before execve, in the order that matters:
//! setsid → rlimits → drop capabilities → no_new_privs → Landlock →
//! close stray fds → seccomp (last) → execve.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};

use super::proto::{self, Report};
use super::{caps, filter, landlock, rlimits, unix_agent};
use crate::plan::Plan;
use crate::policy::Layer;
use crate::sys::{self, Errno};

fn fail(fd: RawFd, step: &str, path: &str, reason: &str) -> ! {
    let _ = sys::write_all(
        fd,
        &proto::encode(&Report::Setup {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
        }),
    );
    sys::exit_now(125)
}

/// Add a layer's report to `out`, written in one go before seccomp.
fn layer(out: &mut Vec<u8>, name: &str, detail: &str) {
    out.extend(proto::encode(&Report::Layer {
        name: name.into(),
        detail: detail.into(),
    }));
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Never returns: execs the command or exits 125/126/127. Runs in init's
/// memory until execve (see `sys::spawn_vfork`): it may allocate, but must
/// not change or drop anything of init's; `rep_fd` is its copy of init's
/// report pipe.
pub fn main(plan: &Plan, rep_fd: RawFd) -> std::convert::Infallible {
    if let Err(e) = sys::reset_signals() {
        fail(rep_fd, "signals", "", &e.to_string());
    }
    // A new session: no controlling terminal, so no TIOCSTI into the host's.
    if let Err(e) = sys::setsid() {
        fail(rep_fd, "setsid", "", &e.to_string());
    }
    if let Err(e) = sys::chdir(&plan.cwd) {
        fail(
            rep_fd,
            "chdir",
            &plan.cwd.display().to_string(),
            &e.to_string(),
        );
    }
    // Fallback started by root: nothing of the payload stays root.
    if let Some((uid, gid)) = plan.fallback_ids {
        if let Err(e) = sys::drop_bounding_caps()
            .and_then(|_| sys::setresgid(gid))
            .and_then(|_| sys::setresuid(uid))
        {
            fail(rep_fd, "switch to unprivileged user", "", &e.to_string());
        }
    }
    if let Err(e) = rlimits::apply(&plan.rlimits) {
        fail(rep_fd, "rlimits", "", &e.to_string());
    }
    let bounding = match caps::drop_all() {
        Ok(b) => b,
        Err(e) => fail(rep_fd, "drop capabilities", "", &e.to_string()),
    };
    let [eff, prm, inh, bnd, amb] = sys::caps_left(bounding);
    let mut layers = Vec::new();
    layer(
        &mut layers,
        "capabilities",
        &serde_json::json!({ "effective": eff, "permitted": prm, "inheritable": inh, "bounding": bnd, "ambient": amb }).to_string(),
    );
    if let Err(e) = sys::set_no_new_privs() {
        fail(rep_fd, "no_new_privs", "", &e.to_string());
    }
    if plan.landlock {
        match landlock::apply(
            &plan.landlock_rules,
            plan.landlock_deny_tcp,
            (!plan.fallback).then_some(plan.mount_points.as_slice()),
        ) {
            Ok(r) => {
                if r.status != "fully_enforced" && plan.require.contains(&Layer::Landlock) {
                    fail(
                        rep_fd,
                        "landlock",
                        "",
                        &format!("required but {}: {}", r.status, r.detail),
                    );
                }
                layer(&mut layers, "landlock", &r.detail);
            }
            Err(e) => {
                if plan.require.contains(&Layer::Landlock) {
                    fail(rep_fd, "landlock", "", &e);
                }
                layer(
                    &mut layers,
                    "landlock",
                    &format!("{{\"status\":\"unavailable\",\"why\":{}}}", json_str(&e)),
                );
            }
        }
    }
    // Fallback: start the connect agent (see unix_agent) in the payload's
    // Landlock domain, before seccomp; the supervisor gets its socket.
    if let (Some(f), Some(ch)) = (&plan.seccomp, plan.seccomp_channel) {
        if f.mediated.is_some() {
            let started =
                sys::fdpass::socketpair(libc::SOCK_SEQPACKET).and_then(|(ours, theirs)| {
                    unix_agent::start(theirs.as_raw_fd(), &plan.unix_roots)?;
                    sys::fdpass::send_fd_with(ch, ours.as_raw_fd(), b"U")
                });
            if let Err(e) = started {
                fail(rep_fd, "unix socket agent", "", &e.to_string());
            }
        }
    }
    // Only 0, 1, 2 and the kept fds survive execve; the report pipe is
    // close-on-exec and still usable until then.
    if let Err(e) = sys::cloexec_all_but(&plan.keep_fds) {
        fail(rep_fd, "close fds", "", &e.to_string());
    }
    // seccomp last: nothing after it but execve.
    if let Some(f) = &plan.seccomp {
        layer(&mut layers, "seccomp", &crate::seccomp::detail_json(f));
    }
    let _ = sys::write_all(rep_fd, &layers);
    if let Some(f) = &plan.seccomp {
        // In learning and kill mode this also sends the listener to the
        // supervisor over plan.seccomp_channel.
        if let Err(e) = filter::install_with(f, plan.seccomp_channel) {
            fail(rep_fd, "seccomp", "", &e.to_string());
        }
    }

    let mut first_err: Option<(Errno, &std::ffi::CStr)> = None;
    for cand in &plan.exec_candidates {
        let e = sys::execve(cand, &plan.argv, &plan.envp);
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
        None => (Errno::ENOENT, plan.command.clone()),
    };
    let _ = sys::write_all(
        rep_fd,
        &proto::encode(&Report::Exec {
            errno: errno as i32,
            path,
        }),
    );
    sys::exit_now(if errno == Errno::ENOENT { 127 } else { 126 })
}
