//! A fork server's zygote (`Exec::zygote`): the payload's steps up to
//! execve with three capabilities kept, and what its children apply handed
//! over instead of enforced. Each child confines itself with stockade-sys's
//! `forked` steps, loaded into the zygote's interpreter as a shared library
//! ([`LIBRARY`]); see `src/zygote.rs` for the server's side.

#![deny(unsafe_code)]

use std::os::fd::AsRawFd;

use super::error::{JailError, Step};
use super::proto::{self, Enforced, LayerRecord, OrFail, Report, Reporter};
use super::{filter, landlock, payload};
use crate::plan::Plan;
use crate::policy::Layer;
use crate::sys::{self, forked};

/// A fork server's zygote keeps these capabilities in the jail's user
/// namespace (bits: `CAP_SETPCAP`, `CAP_NET_ADMIN`, `CAP_SYS_ADMIN`):
/// each child it forks makes its own namespaces and mounts, brings its
/// `lo` up and empties its bounding set with them, then drops them all.
pub const ZYGOTE_CAPS: u64 = (1 << 8) | (1 << 12) | (1 << 21);

/// The variable that tells the zygote the number of the hand-off fd, a
/// pipe holding its children's [`forked::Recipe`], which it reads once
/// (`stockade_zygote_prepare`).
pub const ZYGOTE_ENV: &str = "STOCKADE_ZYGOTE_FD";

/// The variable that tells the zygote the number of a memfd holding
/// [`LIBRARY`], which it loads (`/proc/self/fd/N`) and closes.
pub const LIBRARY_ENV: &str = "STOCKADE_ZYGOTE_LIB";

/// The confinement library (`src/confine`: stockade-sys's `forked` steps
/// behind a C ABI), built by build.rs for the glibc flavour of the target.
pub const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libstockade_confine.so"));

/// The zygote's last steps: the caller's filters and block fd refused, every
/// capability dropped but [`ZYGOTE_CAPS`], no_new_privs, its children's
/// recipe (the Landlock ruleset as the kernel takes it, checked here;
/// stockade's seccomp program; the layers' records) written into the
/// hand-off pipe and [`LIBRARY`] into a memfd; no other fd but 0, 1, 2,
/// the kept ones and those two survives execve. Never returns.
pub fn handoff(plan: &Plan, envp: &[std::ffi::CString], hello: Option<i32>, report: Reporter) -> ! {
    if !plan.layers.bpf_filters.is_empty() || plan.channels.block_fd.is_some() {
        report.fail(refused(
            "a zygote takes no filter or block fd of the caller's".into(),
        ));
    }
    let caps = payload::drop_capabilities_but(ZYGOTE_CAPS, false, None).or_fail(report);
    sys::set_no_new_privs()
        .step("no_new_privs", "")
        .or_fail(report);
    let learning = plan
        .layers
        .seccomp
        .as_ref()
        .is_some_and(|f| f.action == crate::policy::SeccompAction::Learn);
    let egress = plan.mode.namespaces().is_some_and(|ns| ns.egress.is_some());
    if egress || learning {
        report.fail(refused(
            "a zygote's children have no egress proxy and do not learn syscalls".into(),
        ));
    }
    let recipe = recipe(plan, report).encode();
    // Written whole before anyone reads it: within a pipe's buffer.
    if recipe.len() > forked::HANDOFF_MAX {
        report.fail(refused(format!(
            "the hand-off is {} bytes, more than {}",
            recipe.len(),
            forked::HANDOFF_MAX
        )));
    }
    let (r, w) = sys::pipe().step("zygote", "").or_fail(report);
    sys::write_all(w.as_raw_fd(), &recipe)
        .step("zygote", "")
        .or_fail(report);
    drop(w);
    let lib = sys::memfd_with("stockade-confine", LIBRARY)
        .step("zygote", "confinement library")
        .or_fail(report);
    let mut keep = plan.channels.keep_fds.clone();
    keep.extend([r.as_raw_fd(), lib.as_raw_fd()]);
    // The hand-off and the library stay open across execve; the command
    // learns their numbers from the environment.
    sys::cloexec_all_but(&keep)
        .and_then(|_| sys::set_cloexec(r.as_raw_fd(), false))
        .and_then(|_| sys::set_cloexec(lib.as_raw_fd(), false))
        .step("close fds", "")
        .or_fail(report);
    let mut envp = envp.to_vec();
    for (name, fd) in [(ZYGOTE_ENV, r.as_raw_fd()), (LIBRARY_ENV, lib.as_raw_fd())] {
        envp.extend(std::ffi::CString::new(format!("{name}={fd}")));
    }
    report.send(&caps);
    payload::say_hello(hello, report);
    payload::exec(plan, &envp, report)
}

/// What each child applies, as this jail decided it.
fn recipe(plan: &Plan, report: Reporter) -> forked::Recipe {
    let mut layers = Vec::new();
    let mut ruleset = None;
    if let Some(l) = &plan.layers.landlock {
        let mounts = Some(plan.root.mount_points.as_slice());
        let required = plan.layers.require.contains(&Layer::Landlock);
        let record = match landlock::prepare(&l.rules, l.deny_tcp, mounts) {
            Ok((rules, r)) if !required || r.status == Enforced::Fully => {
                ruleset = rules;
                LayerRecord::Landlock(r)
            }
            Ok((_, r)) => report.fail(JailError::LandlockWeak(Box::new(r))),
            Err(e) if required => report.fail(e),
            Err(e) => LayerRecord::LandlockUnavailable { why: e.to_string() },
        };
        layers.extend(proto::encode(&Report::Layer(record)));
    }
    if let Some(f) = &plan.layers.seccomp {
        layers.extend(proto::encode(&Report::Layer(filter::record(f))));
    }
    forked::Recipe {
        tmp_size: plan.limits.tmp_size,
        uid: plan.identity.uid,
        gid: plan.identity.gid,
        workdir: plan.exec.cwd.clone(),
        landlock: ruleset,
        seccomp: plan
            .layers
            .seccomp
            .as_ref()
            .map(|f| f.program(false))
            .unwrap_or_default(),
        seccomp_notify: plan
            .layers
            .seccomp
            .as_ref()
            .filter(|f| forked_listener(f))
            .map(|f| f.program(true))
            .unwrap_or_default(),
        layers,
    }
}

/// Whether a forked child passes its seccomp listener to the server: for
/// errno mode's records and kill mode's verdict, as a cold payload does;
/// not for the allocation meter (a round trip per `mmap`) or a mediated
/// syscall (the fallback's, where no zygote runs).
pub fn forked_listener(f: &crate::seccomp::Compiled) -> bool {
    f.wants_listener() && f.meter.is_none() && f.mediated.is_none()
}

fn refused(why: String) -> JailError {
    JailError::Refused {
        step: "zygote",
        path: String::new(),
        why,
    }
}
