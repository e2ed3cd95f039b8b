//! Making the run cgroup `<base>/stockade/run-<pid>-<starttime>-<seq>`:
//! enabling the controllers down the path and writing the limits.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::files::{short_err, words, write_file};
use super::{
    Controller, Enforced, Hierarchies, Host, Placement, Request, RunCgroup, Setup,
    CPU_MIN_QUOTA_US, CPU_PERIOD_US, PARENT_NAME, RUN_PREFIX,
};
use crate::sys;

pub(super) static SEQ: AtomicU64 = AtomicU64::new(0);

/// Start time of a process in clock ticks after boot (field 22 of
/// /proc/PID/stat); None when it does not exist.
pub fn proc_starttime(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_starttime(&s)
}

pub(super) fn parse_starttime(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `run-<pid>-<starttime>-<seq>`.
pub fn run_name(pid: i32, starttime: u64, seq: u64) -> String {
    format!("{RUN_PREFIX}{pid}-{starttime}-{seq}")
}

/// (pid, starttime) of the stockade that created a run cgroup.
pub fn parse_run_name(name: &str) -> Option<(i32, u64)> {
    let mut it = name.strip_prefix(RUN_PREFIX)?.split('-');
    let pid = it.next()?.parse().ok()?;
    let st = it.next()?.parse().ok()?;
    it.next()?.parse::<u64>().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((pid, st))
}

/// `cpus` as a cpu.max value.
pub fn cpu_max(cpus: f64) -> Option<String> {
    if !cpus.is_finite() || cpus <= 0.0 {
        return None;
    }
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    if quota > u64::MAX as f64 / 2.0 {
        return None;
    }
    let quota = (quota as u64).max(CPU_MIN_QUOTA_US);
    Some(format!("{quota} {CPU_PERIOD_US}"))
}

pub(super) fn unavailable_everywhere(req: &Request, why: &str) -> Setup {
    let e = |asked: bool| {
        if asked {
            Enforced::Unavailable(why.to_string())
        } else {
            Enforced::NotRequested
        }
    };
    Setup {
        cgroup: None,
        memory: e(req.memory.is_some() || req.memory_high.is_some()),
        cpu: e(req.cpus.is_some()),
        pids: e(req.pids.is_some()),
        why: Some(why.to_string()),
    }
}

/// [`prepare`] once the base is chosen.
pub fn prepare_at(host: &dyn Host, place: &Placement, h: &Hierarchies, req: &Request) -> Setup {
    let top = &place.hierarchy;
    let base = &place.base;
    let parent = base.join(PARENT_NAME);

    // Which controllers can be enabled down to the run cgroup.
    let in_hierarchy = words(&top.join("cgroup.controllers"));
    let in_base = words(&base.join("cgroup.controllers"));
    let mut ctrl_state: Vec<(Controller, Result<(), String>)> = Vec::new();
    for c in Controller::ALL {
        let name = c.name();
        let st = if !in_hierarchy.iter().any(|w| w == name) {
            let v1 = match h.v1_for(name) {
                Some(m) => format!(
                    " (it is bound to the cgroup v1 hierarchy at {})",
                    m.mountpoint.display()
                ),
                None => String::new(),
            };
            Err(format!(
                "no {name} controller in the cgroup v2 hierarchy at {}{v1}",
                top.display()
            ))
        } else if !in_base.iter().any(|w| w == name) {
            Err(format!(
                "the {name} controller is not delegated to {}: missing from its \
                 cgroup.controllers (enable it in the parent's cgroup.subtree_control)",
                base.display()
            ))
        } else {
            enable(base, name)
        };
        ctrl_state.push((c, st));
    }

    if let Err(e) = host.mkdir(&parent) {
        if e.kind() != ErrorKind::AlreadyExists {
            return unavailable_everywhere(
                req,
                &format!("mkdir {}: {}", parent.display(), short_err(&e)),
            );
        }
    }
    for (c, st) in ctrl_state.iter_mut() {
        if st.is_ok() {
            *st = enable(&parent, c.name());
        }
    }

    let pid = sys::getpid();
    let start = proc_starttime(pid).unwrap_or(0);
    let mut path;
    let mut tries = 0;
    loop {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        path = parent.join(run_name(pid, start, seq));
        match host.mkdir(&path) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            // A concurrent cleanup may have removed an empty parent between
            // our mkdir calls: recreate it once.
            Err(e) if e.kind() == ErrorKind::NotFound && tries < 100 => {
                tries += 1;
                let _ = host.mkdir(&parent);
                for (c, st) in ctrl_state.iter_mut() {
                    if st.is_ok() {
                        *st = enable(&parent, c.name());
                    }
                }
            }
            Err(e) => {
                return unavailable_everywhere(
                    req,
                    &format!("mkdir {}: {}", path.display(), short_err(&e)),
                )
            }
        }
    }
    let dir = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            let _ = fs::remove_dir(&path);
            return unavailable_everywhere(
                req,
                &format!("open {}: {}", path.display(), short_err(&e)),
            );
        }
    };
    let run = RunCgroup {
        path,
        dir,
        owner: pid,
        removed: false,
    };

    let state = |c: Controller| -> Result<(), String> {
        ctrl_state
            .iter()
            .find(|(x, _)| *x == c)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| Err("unknown controller".into()))
    };
    let p = run.path.clone();
    let apply = |c: Controller, asked: bool, writes: &[(&str, String, bool)]| -> Enforced {
        if !asked {
            return Enforced::NotRequested;
        }
        if let Err(why) = state(c) {
            return Enforced::Unavailable(why);
        }
        for (file, value, required) in writes {
            match write_file(&p, file, value) {
                Ok(()) => {}
                // memory.swap.max is missing without swap accounting: with
                // no swap there is nothing to limit.
                Err(_) if !required && !p.join(file).exists() => {}
                Err(why) => return Enforced::Unavailable(why),
            }
        }
        Enforced::Cgroup
    };

    let mut mem_writes = Vec::new();
    if let Some(m) = req.memory {
        mem_writes.push(("memory.max", m.to_string(), true));
        mem_writes.push(("memory.swap.max", "0".to_string(), false));
        mem_writes.push(("memory.oom.group", "1".to_string(), false));
    }
    if let Some(m) = req.memory_high {
        mem_writes.push(("memory.high", m.to_string(), true));
    }
    let memory = apply(
        Controller::Memory,
        req.memory.is_some() || req.memory_high.is_some(),
        &mem_writes,
    );
    let cpu = match req.cpus.map(cpu_max) {
        Some(None) => Enforced::Unavailable(format!(
            "cpus {:?}: not a positive number",
            req.cpus.unwrap_or_default()
        )),
        Some(Some(v)) => apply(Controller::Cpu, true, &[("cpu.max", v, true)]),
        None => Enforced::NotRequested,
    };
    let pids = match req.pids {
        Some(n) => apply(Controller::Pids, true, &[("pids.max", n.to_string(), true)]),
        None => Enforced::NotRequested,
    };
    Setup {
        cgroup: Some(run),
        memory,
        cpu,
        pids,
        why: None,
    }
}

/// Add `+name` to `dir/cgroup.subtree_control` unless it is already there.
fn enable(dir: &Path, name: &str) -> Result<(), String> {
    let f = dir.join("cgroup.subtree_control");
    if words(&f).iter().any(|w| w == name) {
        return Ok(());
    }
    write_file(dir, "cgroup.subtree_control", &format!("+{name}")).map_err(|e| {
        if e.ends_with(&sys::errno_text(sys::Errno::EBUSY)) {
            format!(
                "{e} (no-internal-processes rule: {} holds processes)",
                dir.display()
            )
        } else {
            e
        }
    })
}
