//! Making the run cgroup `<base>/stockade/run-<pid>-<starttime>-<seq>`:
//! enabling the controllers down the path and writing the limits.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::error::{CgroupError, FileOp};
use super::files::{words, write_file};
use super::{
    Controller, Enforced, Hierarchies, Host, Placement, Request, RunCgroup, Setup, V2Dir,
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
        memory: e(req.memory.is_some()),
        memory_high: e(req.memory_high.is_some()),
        cpu: e(req.cpus.is_some()),
        pids: e(req.pids.is_some()),
        why: Some(why.to_string()),
        climbed: Vec::new(),
    }
}

/// [`prepare`](fn@super::prepare) once the base is chosen: which controllers reach the run
/// cgroup, `stockade/` under the base, the run cgroup in it, the limits.
pub fn prepare_at(host: &dyn Host, place: &Placement, h: &Hierarchies, req: &Request) -> Setup {
    let parent = place.base.join(PARENT_NAME);
    let mut ctrls = Controllers::probe(place, h);
    let made =
        make_parent(host, &parent, &mut ctrls).and_then(|()| make_run(host, &parent, &mut ctrls));
    let run = match made {
        Ok(run) => run,
        Err(e) => return unavailable_everywhere(req, &e.to_string()),
    };
    let got = write_limits(run.path(), &ctrls, req);
    Setup::made(run, got)
}

impl Setup {
    /// The run cgroup `run` and what each limit got there
    /// ([`write_limits`]'s answer).
    pub(super) fn made(run: RunCgroup, got: [Enforced; 4]) -> Setup {
        let [memory, memory_high, cpu, pids] = got;
        Setup {
            cgroup: Some(run),
            memory,
            memory_high,
            cpu,
            pids,
            why: None,
            climbed: Vec::new(),
        }
    }
}

/// Whether each controller can be enabled down to the run cgroup, and why
/// not; indexed by [`Controllers::slot`].
pub(super) struct Controllers([Result<(), CgroupError>; 3]);

impl Controllers {
    /// Those `on` (the words of `dir`'s cgroup.subtree_control: a nest's,
    /// whose controllers were enabled once): each other one not delegated
    /// there.
    pub(super) fn enabled_in(dir: &Path, on: &[String]) -> Controllers {
        Controllers(
            Controller::ALL.map(|c| match on.iter().any(|w| w == c.name()) {
                true => Ok(()),
                false => Err(CgroupError::NotDelegated {
                    controller: c.name(),
                    base: dir.to_path_buf(),
                }),
            }),
        )
    }

    /// Which controllers the hierarchy has and the base may use, enabled
    /// in the base's cgroup.subtree_control.
    fn probe(place: &Placement, h: &Hierarchies) -> Controllers {
        let (top, base) = (&place.hierarchy, &place.base);
        let in_hierarchy = words(&top.join("cgroup.controllers"));
        let in_base = words(&base.join("cgroup.controllers"));
        Controllers(Controller::ALL.map(|c| {
            let name = c.name();
            if !in_hierarchy.iter().any(|w| w == name) {
                Err(CgroupError::NoController {
                    controller: name,
                    hierarchy: top.clone(),
                    v1: h.v1_for(name).map(|m| m.mountpoint.clone()),
                })
            } else if !in_base.iter().any(|w| w == name) {
                Err(CgroupError::NotDelegated {
                    controller: name,
                    base: base.clone(),
                })
            } else {
                enable(base, name)
            }
        }))
    }

    fn slot(c: Controller) -> usize {
        match c {
            Controller::Memory => 0,
            Controller::Cpu => 1,
            Controller::Pids => 2,
        }
    }

    fn get(&self, c: Controller) -> Result<(), &CgroupError> {
        self.0[Self::slot(c)].as_ref().map(|_| ())
    }

    /// Enable every controller still usable in `dir`'s subtree_control.
    fn enable_in(&mut self, dir: &Path) {
        for c in Controller::ALL {
            let st = &mut self.0[Self::slot(c)];
            if st.is_ok() {
                *st = enable(dir, c.name());
            }
        }
    }
}

/// `<base>/stockade`, made unless it exists, with the controllers enabled.
fn make_parent(host: &dyn Host, parent: &Path, ctrls: &mut Controllers) -> Result<(), CgroupError> {
    if let Err(e) = host.mkdir(parent) {
        if e.kind() != ErrorKind::AlreadyExists {
            return Err(CgroupError::File {
                op: FileOp::Mkdir,
                path: parent.to_path_buf(),
                source: e,
            });
        }
    }
    ctrls.enable_in(parent);
    Ok(())
}

/// This process's pid and start time, read once per process (a server
/// names a run cgroup per run).
fn own_pid_and_start() -> (i32, u64) {
    static OWN: Mutex<Option<(i32, u64)>> = Mutex::new(None);
    let pid = sys::getpid();
    let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
    match *own {
        Some((p, start)) if p == pid => (p, start),
        _ => {
            let start = proc_starttime(pid).unwrap_or(0);
            *own = Some((pid, start));
            (pid, start)
        }
    }
}

/// A fresh `run-<pid>-<starttime>-<seq>` name for this process.
pub(super) fn next_run_name() -> String {
    let (pid, start) = own_pid_and_start();
    run_name(pid, start, SEQ.fetch_add(1, Ordering::Relaxed))
}

/// `run-<pid>-<starttime>-<seq>` under `parent`, made and opened.
fn make_run(
    host: &dyn Host,
    parent: &Path,
    ctrls: &mut Controllers,
) -> Result<RunCgroup, CgroupError> {
    let (pid, start) = own_pid_and_start();
    let mut tries = 0;
    let path = loop {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(run_name(pid, start, seq));
        match host.mkdir(&path) {
            Ok(()) => break path,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            // A concurrent cleanup may have removed an empty parent between
            // our mkdir calls: recreate it once.
            Err(e) if e.kind() == ErrorKind::NotFound && tries < 100 => {
                tries += 1;
                let _ = host.mkdir(parent);
                ctrls.enable_in(parent);
            }
            Err(e) => {
                return Err(CgroupError::File {
                    op: FileOp::Mkdir,
                    path,
                    source: e,
                })
            }
        }
    };
    let dir = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            let _ = fs::remove_dir(&path);
            return Err(CgroupError::File {
                op: FileOp::Open,
                path,
                source: e,
            });
        }
    };
    Ok(RunCgroup {
        v2: Some(V2Dir { path, dir }),
        v1: Vec::new(),
        systemd: None,
        owner: pid,
        removed: false,
    })
}

/// Write each requested limit into the cgroup `p`: memory, memory_high,
/// cpu, pids.
pub(super) fn write_limits(p: &Path, ctrls: &Controllers, req: &Request) -> [Enforced; 4] {
    let mem_writes = match req.memory {
        Some(m) => vec![
            ("memory.max", m.to_string(), true),
            ("memory.swap.max", "0".to_string(), false),
            ("memory.oom.group", "1".to_string(), false),
        ],
        None => Vec::new(),
    };
    let high = req
        .memory_high
        .map(|m| ("memory.high", m.to_string(), true));
    let mem = ctrls.get(Controller::Memory);
    let memory = apply(p, mem, req.memory.is_some(), &mem_writes);
    let memory_high = apply(p, mem, high.is_some(), high.as_slice());
    let cpu = match req.cpus.map(cpu_max) {
        Some(None) => Enforced::Unavailable(format!(
            "cpus {:?}: not a positive number",
            req.cpus.unwrap_or_default()
        )),
        Some(Some(v)) => apply(p, ctrls.get(Controller::Cpu), true, &[("cpu.max", v, true)]),
        None => Enforced::NotRequested,
    };
    let pids = match req.pids {
        Some(n) => apply(
            p,
            ctrls.get(Controller::Pids),
            true,
            &[("pids.max", n.to_string(), true)],
        ),
        None => Enforced::NotRequested,
    };
    [memory, memory_high, cpu, pids]
}

/// One controller's limit files `(file, value, required)` written in
/// `dir`, when it was asked for and the controller is usable.
fn apply(
    dir: &Path,
    state: Result<(), &CgroupError>,
    asked: bool,
    writes: &[(&str, String, bool)],
) -> Enforced {
    if !asked {
        return Enforced::NotRequested;
    }
    if let Err(why) = state {
        return Enforced::Unavailable(why.to_string());
    }
    for (file, value, required) in writes {
        match write_file(dir, file, value) {
            Ok(()) => {}
            // memory.swap.max is missing without swap accounting: with
            // no swap there is nothing to limit.
            Err(_) if !required && !dir.join(file).exists() => {}
            Err(why) => return Enforced::Unavailable(why.to_string()),
        }
    }
    Enforced::Cgroup
}

/// Add `+name` to `dir/cgroup.subtree_control` unless it is already there.
pub(super) fn enable(dir: &Path, name: &str) -> Result<(), CgroupError> {
    let f = dir.join("cgroup.subtree_control");
    if words(&f).iter().any(|w| w == name) {
        return Ok(());
    }
    write_file(dir, "cgroup.subtree_control", &format!("+{name}")).map_err(|e| {
        if e.errno() == Some(sys::Errno::EBUSY) {
            CgroupError::InternalProcesses {
                dir: dir.to_path_buf(),
                source: Box::new(e),
            }
        } else {
            e
        }
    })
}
