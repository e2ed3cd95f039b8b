//! pid 1 of the jail: builds the root, forks the payload (pid 2), then reaps
//! orphans, forwards signals, and exits after the payload with every other
//! process in the jail killed.

#![deny(unsafe_code)]

mod reap;
mod tree;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::signal::Signal;

use self::reap::Waiter;
use self::tree::Tree;
use super::proto::{self, Report};
use super::{caps, payload, rootfs};
use crate::plan::Plan;
use crate::sys;

/// The fallback's parent death signal (see `main`): our parent, the
/// supervisor, is gone.
const SUPERVISOR_GONE: Signal = Signal::SIGUSR1;

fn report(fd: RawFd, r: &Report) {
    let _ = sys::write_all(fd, &proto::encode(r));
}

fn fail(fd: RawFd, step: &str, path: &str, reason: &str) -> ! {
    report(
        fd,
        &Report::Setup {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
        },
    );
    sys::exit_now(125)
}

/// Entry point of the cloned child. Never returns. `stdio`, when given,
/// replaces stdout and stderr (the supervisor's capped pipes).
pub fn main(plan: &Plan, ctl: OwnedFd, rep: OwnedFd, stdio: Option<(OwnedFd, OwnedFd)>) -> ! {
    let rep_fd = rep.as_raw_fd();
    sys::scrub_cmdline(b"stockade-init");
    if let Some((out, err)) = stdio {
        #[allow(unsafe_code)]
        // SAFETY: fds 1 and 2 are owned by no value of init (the inherited
        // stdout and stderr are only ever used by number).
        let moved = unsafe { sys::dup2(out.as_raw_fd(), 1).and(sys::dup2(err.as_raw_fd(), 2)) };
        if moved.is_err() {
            sys::exit_now(125);
        }
    }

    // Open the bind sources while the supervisor writes the id maps: the
    // host checks them against our unchanged host credentials either way.
    let mut sources = None;
    if !plan.fallback {
        match rootfs::open_sources(plan) {
            Ok(s) => sources = Some(s),
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
    }
    // Wait until the supervisor has written the id maps.
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::GO => {}
        Ok(1) if b[0] == proto::GO_REROOT_CGROUP => {
            if let Err(e) = sys::unshare_cgroupns() {
                fail(rep_fd, "cgroup namespace", "", &e.to_string());
            }
        }
        _ => sys::exit_now(125),
    }

    if !plan.fallback {
        if let Err(e) = caps::become_jail_user(plan.inner_uid, plan.inner_gid) {
            fail(rep_fd, "switch to jail user", "", &e.to_string());
        }
    }
    // After the credential change (which clears it): die with the
    // supervisor. In a pid namespace our death is the jail's: the kernel
    // kills every process in it. Without one, our children would outlive
    // us under the host's init, so the signal is one we catch (blocked
    // here, read from the signalfd): we kill the whole tree, then exit.
    let pdeathsig = if plan.fallback {
        if let Err(e) = sys::block_signals(&[SUPERVISOR_GONE]) {
            fail(rep_fd, "parent death signal", "", &e.to_string());
        }
        SUPERVISOR_GONE as i32
    } else {
        libc::SIGKILL
    };
    if let Err(e) = sys::set_pdeathsig(pdeathsig) {
        fail(rep_fd, "parent death signal", "", &e.to_string());
    }
    // The supervisor may have died before the line above.
    let mut pf = [libc::pollfd {
        fd: ctl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if sys::poll(&mut pf, 0).is_ok() && pf[0].revents & libc::POLLHUP != 0 {
        sys::exit_now(125);
    }

    let mut held = None;
    if plan.fallback {
        // No pid namespace: orphans of the payload must still come back to
        // us so the whole tree can be found and killed.
        if let Err(e) = sys::set_child_subreaper() {
            fail(rep_fd, "child subreaper", "", &e.to_string());
        }
    } else {
        let sources = sources.take().expect("opened above");
        match rootfs::build(plan, sources) {
            Ok((notes, h)) => {
                held = Some(h);
                if notes.chrooted {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "pivot".into(),
                            detail: serde_json::json!({ "status": "chroot", "why": "pivot_root refused (EPERM): the new root was moved over / and chrooted into" }).to_string(),
                        },
                    );
                }
                if let Some(why) = notes.proc_unavailable {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "proc".into(),
                            detail: serde_json::json!({ "status": "unavailable", "why": why })
                                .to_string(),
                        },
                    );
                }
            }
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
        if let Err(e) = sys::sethostname(&plan.hostname) {
            fail(rep_fd, "hostname", &plan.hostname, &e.to_string());
        }
        if plan.new_netns {
            // The supervisor made it while we built the root.
            match sys::fdpass::recv_fd(ctl.as_raw_fd()) {
                Ok(Some(ns)) => {
                    if let Err(e) = sys::enter_netns(&ns) {
                        fail(rep_fd, "network", "lo", &e.to_string());
                    }
                }
                // The supervisor is gone (or failed and says why).
                _ => sys::exit_now(125),
            }
        }
    }
    // No one in the jail may ptrace init or read its memory.
    if let Err(e) = sys::set_dumpable(false) {
        fail(rep_fd, "dumpable", "", &e.to_string());
    }

    let mut sigs = vec![
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];
    if plan.fallback {
        sigs.push(SUPERVISOR_GONE);
    }
    let sfd = match sys::signalfd_for(&sigs) {
        Ok(s) => s,
        Err(e) => fail(rep_fd, "signalfd", "", &e.to_string()),
    };

    let (sfd_raw, ctl_raw) = (sfd.as_raw_fd(), ctl.as_raw_fd());
    let mut start_payload = || {
        #[allow(unsafe_code)]
        // SAFETY: the payload's own copies of the numbers: the values that
        // own them in init (`sfd`, `ctl`) stay with init, and the fd table
        // is not shared.
        unsafe {
            sys::close_raw(sfd_raw);
            sys::close_raw(ctl_raw);
        }
        payload::main(plan, rep_fd)
    };
    #[allow(unsafe_code)]
    // SAFETY: init is single-threaded, and the payload closes only its own
    // copies of init's fds (above) and ends in execve or exit_now.
    let spawned = unsafe { sys::spawn_vfork(&mut start_payload) };
    let child = match spawned {
        Ok(pid) => pid,
        Err(e) => fail(rep_fd, "start payload", "", &e.to_string()),
    };

    drop(held);
    // The payload leads a session of its own (setsid, done before the
    // spawn returned): its process group, unless something left it.
    let group = (plan.fallback && sys::getpgid(child) == Ok(child)).then_some(child);
    let own_uid = plan.uid_lease.as_ref().map(|l| l.id);
    let tree = Tree::new(!plan.fallback, own_uid, group);
    let mut waiter = Waiter::new(child, &sfd, ctl.as_raw_fd(), plan.sample_ms, &tree);
    let status = waiter.run();
    // The payload is gone, or the supervisor is: nothing else in the jail
    // outlives it.
    tree.end();
    let peak = waiter.peak;
    let Some(status) = status else {
        // No one is left to read a report or to remove the run directory
        // (and detach its tmpfs, which is on the host's mount table).
        if let Some(d) = &plan.run_dir {
            if plan.run_dir_tmpfs {
                let _ = sys::umount_detach(d);
            }
            let _ = std::fs::remove_dir_all(d);
        }
        sys::exit_now(125)
    };
    // The jail is empty. Let go of the output pipes so the supervisor sees
    // their end now, then send the last records in one write: the
    // supervisor may finish on them without waiting for this process's
    // exit (unmapping its memory, tearing down the namespaces).
    #[allow(unsafe_code)]
    // SAFETY: no value of init owns its stdout and stderr (used by number).
    unsafe {
        sys::close_raw(1);
        sys::close_raw(2);
    }
    let mut last = proto::encode(&children_usage());
    last.extend(proto::encode(&Report::Peak {
        tasks: peak.tasks,
        vm_bytes: peak.vm_bytes,
    }));
    last.extend(proto::encode(&Report::Status(status)));
    let _ = sys::write_all(rep_fd, &last);
    sys::exit_now(0)
}

/// What every reaped process of the jail used.
fn children_usage() -> Report {
    use nix::sys::resource::{getrusage, UsageWho};
    let us = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1_000_000 + t.tv_usec() as u64;
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(r) => Report::Usage {
            user_us: us(r.user_time()),
            system_us: us(r.system_time()),
            maxrss_kb: r.max_rss().max(0) as u64,
        },
        Err(_) => Report::Usage {
            user_us: 0,
            system_us: 0,
            maxrss_kb: 0,
        },
    }
}
