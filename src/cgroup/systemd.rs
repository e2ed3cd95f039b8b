//! The systemd rung: for an unprivileged caller with no delegated cgroup of
//! its own, a transient scope with `Delegate=yes` asked of the user's
//! systemd over D-Bus (as rootless podman does), the run cgroup made inside
//! it, and the jail's child moved into it by systemd.
//!
//! Why a helper process: zbus runs its connection on threads, and a process
//! with threads can no longer create a user namespace (nor may a forked
//! child of it do more than async-signal-safe calls). So the supervisor
//! forks a *holder* while it is still single-threaded; only the holder
//! talks D-Bus. The holder asks systemd for the scope with itself as the
//! scope's one process, moves itself into `<scope>/hold` (the scope is
//! delegated to us: its files are ours) and says where the scope is; the
//! supervisor makes `<scope>/stockade/run-…` with the limits as on any
//! delegated subtree. After clone, the supervisor cannot move the jail's
//! child there itself (the common ancestor of its own cgroup and the scope
//! is not ours), so the holder asks systemd to (`AttachProcessesToUnit`,
//! which the user manager forwards to the system manager for a process of
//! the same user). The holder lives until the run's cgroup is removed and
//! then exits: the scope is empty and systemd collects it (the supervisor
//! waits, briefly, until its cgroup is gone).
//!
//! Protocol, one line each way: `ok <scope dir>` / `err <why>` when the
//! scope is made; then per request `attach <subcgroup> <pid>` answered by
//! `ok` / `err <why>`; the end of the request pipe ends the holder.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::write_file;
use super::{cgroup_dir, parse_proc_cgroup, Hierarchies};
use crate::sys;

/// How long the user's systemd may take to answer.
const ANSWER_MS: i32 = 15_000;

/// How long to wait for systemd to collect the emptied scope.
const COLLECT_WAIT: Duration = Duration::from_secs(2);

/// The process that holds the scope and talks D-Bus for the run.
#[derive(Debug)]
pub struct Holder {
    pid: i32,
    /// Requests to the holder (closing it ends the holder).
    to: Option<OwnedFd>,
    /// Its answers.
    from: OwnedFd,
    /// The scope's unit name.
    pub unit: String,
    /// The process that forked it (the only one that waits for it).
    owner: i32,
    /// The scope's cgroup directory, once made.
    scope: Option<PathBuf>,
}

/// The user bus's address: `DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus`, else `/run/user/<uid>/bus`, when there.
fn bus_address() -> Result<String, String> {
    if let Some(a) = std::env::var_os("DBUS_SESSION_BUS_ADDRESS") {
        return Ok(a.to_string_lossy().into_owned());
    }
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", sys::getuid())));
    let bus = dir.join("bus");
    if bus.exists() {
        Ok(format!("unix:path={}", bus.display()))
    } else {
        Err(format!(
            "no user D-Bus to ask systemd for a delegated scope (DBUS_SESSION_BUS_ADDRESS unset, no {})",
            bus.display()
        ))
    }
}

/// Ask the user's systemd for the scope `unit`; the holder and the
/// scope's cgroup directory. The caller must be single-threaded.
pub(super) fn scope(h: &Hierarchies, unit: &str) -> Result<(Holder, PathBuf), String> {
    let addr = bus_address()?;
    let m = h
        .unified()
        .ok_or("no cgroup v2 hierarchy mounted (systemd delegates only on cgroup v2)")?
        .clone();
    let (req_r, req_w) = sys::pipe().map_err(|e| e.to_string())?;
    let (ans_r, ans_w) = sys::pipe().map_err(|e| e.to_string())?;
    // The supervisor runs before any thread exists, the spawner is a
    // single-threaded process; a threaded caller gets EBUSY (and rlimits).
    let forked =
        sys::fork_single_threaded().map_err(|e| format!("cannot fork the D-Bus helper: {e}"))?;
    let Some(pid) = forked else {
        drop((req_w, ans_r));
        let code = holder_main(req_r, ans_w, &addr, unit, &m);
        sys::exit_now(code)
    };
    drop((req_r, ans_w));
    let mut holder = Holder {
        pid,
        to: Some(req_w),
        from: ans_r,
        unit: unit.to_string(),
        owner: sys::getpid(),
        scope: None,
    };
    let line = holder.answer()?;
    match line.strip_prefix("ok ") {
        Some(dir) => {
            holder.scope = Some(PathBuf::from(dir));
            Ok((holder, PathBuf::from(dir)))
        }
        None => Err(line.strip_prefix("err ").unwrap_or(&line).to_string()),
    }
}

impl Holder {
    /// Have systemd move `pid` into `<scope><subcgroup>`.
    pub fn attach(&mut self, subcgroup: &str, pid: i32) -> Result<(), String> {
        let to = self.to.as_ref().ok_or("the D-Bus helper is gone")?;
        sys::write_all(
            to.as_raw_fd(),
            format!("attach {subcgroup} {pid}\n").as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let line = self.answer()?;
        match line.as_str() {
            "ok" => Ok(()),
            l => Err(l.strip_prefix("err ").unwrap_or(l).to_string()),
        }
    }

    /// One answer line, within [`ANSWER_MS`].
    fn answer(&mut self) -> Result<String, String> {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        loop {
            let mut p = [libc::pollfd {
                fd: self.from.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            match sys::poll(&mut p, ANSWER_MS) {
                Ok(0) => {
                    return Err(format!(
                        "the user's systemd did not answer within {} s",
                        ANSWER_MS / 1000
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
            match sys::read(self.from.as_raw_fd(), &mut b) {
                Ok(0) => return Err("the D-Bus helper exited without an answer".into()),
                Ok(_) if b[0] == b'\n' => return Ok(String::from_utf8_lossy(&out).into_owned()),
                Ok(_) => out.push(b[0]),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // Only the process that forked it: a jail child unwinding never
        // touches it.
        if let Some(to) = self.to.take() {
            drop(to);
            if sys::getpid() == self.owner {
                // Its work is done (or it did not answer in time): it
                // must not outlive the run, however it is stuck.
                let _ = sys::kill(self.pid, libc::SIGKILL);
                let _ = sys::waitpid(self.pid, false);
                // The scope is empty now, and systemd stops it and removes
                // its cgroup on its own time: wait for that (briefly), so
                // nothing of the run is left when stockade returns.
                if let Some(dir) = &self.scope {
                    let deadline = Instant::now() + COLLECT_WAIT;
                    let mut pause = Duration::from_micros(200);
                    while dir.exists() && Instant::now() < deadline {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(20));
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------ the holder

fn holder_main(req: OwnedFd, ans: OwnedFd, addr: &str, unit: &str, m: &super::Mount) -> i32 {
    let mut ans = File::from(ans);
    let bus = match Bus::connect(addr) {
        Ok(b) => b,
        Err(why) => return say(&mut ans, &format!("err {why}"), 1),
    };
    match bus.start_scope(unit).and_then(|()| hold(m)) {
        Ok(dir) => {
            if writeln!(ans, "ok {}", dir.display()).is_err() {
                return 1;
            }
        }
        Err(why) => return say(&mut ans, &format!("err {why}"), 1),
    }
    for line in BufReader::new(File::from(req)).lines() {
        let Ok(line) = line else { break };
        let mut it = line.split(' ');
        let reply = match (
            it.next(),
            it.next(),
            it.next().and_then(|p| p.parse::<u32>().ok()),
        ) {
            (Some("attach"), Some(sub), Some(pid)) => match bus.attach(unit, sub, pid) {
                Ok(()) => "ok".to_string(),
                Err(why) => format!("err {why}"),
            },
            _ => format!("err bad request {line:?}"),
        };
        if writeln!(ans, "{reply}").is_err() {
            break;
        }
    }
    0
}

fn say(ans: &mut File, line: &str, code: i32) -> i32 {
    let _ = writeln!(ans, "{}", line.replace('\n', " "));
    code
}

/// Move ourselves (the scope's one process) into `<scope>/hold`, so the
/// scope holds no process and may enable controllers for its children.
fn hold(m: &super::Mount) -> Result<PathBuf, String> {
    let pc = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let cg = parse_proc_cgroup(&pc).ok_or("no 0:: line in /proc/self/cgroup")?;
    let dir = cgroup_dir(m, &cg).ok_or_else(|| format!("the scope {cg} is not visible"))?;
    let hold = dir.join("hold");
    std::fs::create_dir(&hold).map_err(|e| format!("mkdir {}: {e}", hold.display()))?;
    write_file(&hold, "cgroup.procs", &sys::getpid().to_string()).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The user's systemd on D-Bus.
struct Bus {
    _conn: zbus::blocking::Connection,
    mgr: zbus::blocking::Proxy<'static>,
}

impl Bus {
    fn connect(addr: &str) -> Result<Bus, String> {
        let e = |e: zbus::Error| format!("D-Bus {addr}: {e}");
        let conn = zbus::blocking::connection::Builder::address(addr)
            .and_then(|b| b.build())
            .map_err(e)?;
        let mgr = zbus::blocking::Proxy::new(
            &conn,
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
        )
        .map_err(e)?;
        Ok(Bus { _conn: conn, mgr })
    }

    /// StartTransientUnit(unit, "fail", [PIDs=[us], Delegate=yes, …]) and
    /// its job's end.
    fn start_scope(&self, unit: &str) -> Result<(), String> {
        use zbus::zvariant::{OwnedObjectPath, Value};
        let e = |what: &str, err: zbus::Error| format!("systemd {what}: {err}");
        self.mgr
            .call_method("Subscribe", &())
            .map_err(|err| e("Subscribe", err))?;
        let removed = self
            .mgr
            .receive_signal("JobRemoved")
            .map_err(|err| e("JobRemoved", err))?;
        let props: Vec<(&str, Value)> = vec![
            ("PIDs", Value::from(vec![sys::getpid() as u32])),
            ("Delegate", Value::from(true)),
            // Collected even if it ends failed: nothing of a run lingers.
            ("CollectMode", Value::from("inactive-or-failed")),
            ("Description", Value::from("stockade run")),
        ];
        let aux: Vec<(&str, Vec<(&str, Value)>)> = Vec::new();
        let job: OwnedObjectPath = self
            .mgr
            .call("StartTransientUnit", &(unit, "fail", props, aux))
            .map_err(|err| e("StartTransientUnit", err))?;
        for msg in removed {
            let body = msg.body();
            let Ok((_, path, _, result)) =
                body.deserialize::<(u32, OwnedObjectPath, String, String)>()
            else {
                continue;
            };
            if path == job {
                return match result.as_str() {
                    "done" => Ok(()),
                    r => Err(format!("systemd could not start {unit}: job {r}")),
                };
            }
        }
        Err("the D-Bus connection closed before the scope's job ended".into())
    }

    /// AttachProcessesToUnit(unit, subcgroup, [pid]).
    fn attach(&self, unit: &str, sub: &str, pid: u32) -> Result<(), String> {
        self.mgr
            .call_method("AttachProcessesToUnit", &(unit, sub, vec![pid]))
            .map(drop)
            .map_err(|e| format!("systemd AttachProcessesToUnit {unit} {sub} {pid}: {e}"))
    }
}

/// Whether `dir` is inside the scope `scope` (for the run cgroup's
/// subcgroup path, as systemd names it: `/stockade/run-…`).
pub(super) fn subcgroup(scope: &Path, dir: &Path) -> Option<String> {
    let rel = dir.strip_prefix(scope).ok()?;
    Some(format!("/{}", rel.display()))
}
