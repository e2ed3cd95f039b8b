//! The floor: what this host charges for the parts of a forked run that
//! no design can leave out, measured without stockade, each done the
//! cheapest way: a fork (clone(2) itself, without the interpreter's
//! at-fork handlers; `random` seeded anew) of the interpreter with the
//! warm modules imported that runs the evaluator and exits, then the same
//! with what each run must have of its own (new pid, mount, net, ipc, uts
//! and cgroup namespaces, made by the clone, the mounts a child makes,
//! `lo` up, and one cgroup per limited controller with its limit
//! written). The fork server's cost per run is read against it: what is
//! above the floor is stockade's (HTTP, the server, the hand-offs,
//! Landlock, seccomp, capabilities), the floor itself is the host's.
//!
//! CPU is counted twice: the forking process's and its children's
//! (rusage; as the server's cpuacct group counts it, kernel workers left
//! out), and the whole host's (/proc/stat, every CPU, kernel workers such
//! as the network namespace teardown included, less what the host used
//! in a second measured just before: meaningful on an idle host only).

use std::path::Path;
use std::process::Command;

/// Forks `N` children from an interpreter with `MODULES` imported, each
/// running `EVALUATOR` on `INPUT` (stdout to /dev/null), in `MODE`:
/// `eval` (nothing else) or `jail` (root: the namespaces, mounts, `lo`
/// and cgroups of a run; `SCRATCH` holds the mount points). Prints one
/// JSON line per run: CPU ms of the forking process and its children
/// (rusage), host CPU ms, wall ms; page faults per child.
const SCRIPT: &str = r#"
import ctypes, gc, io, json, os, resource, struct, sys, time
mods, n, mode, ev, inp, scratch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
for m in filter(None, mods.split(",")):
    __import__(m)
import fcntl, socket
libc = ctypes.CDLL(None, use_errno=True)
def check(what, r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))
def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]
NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWPID, NEWNET = 0x20000, 0x2000000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
jail = mode == "jail"
groups = []
if jail:
    mnt = {d: os.path.join(scratch, d) for d in ("tmp", "work", "shm", "pts", "mq")}
    for d in mnt.values():
        os.makedirs(d, exist_ok=True)
    v1 = {"memory": ("memory.limit_in_bytes", "536870912"), "pids": ("pids.max", "64"), "cpu": ("cpu.cfs_quota_us", "100000")}
    if all(os.path.isdir("/sys/fs/cgroup/" + c) for c in v1):
        groups = [("/sys/fs/cgroup/" + c, f, v) for c, (f, v) in v1.items()]
    elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        groups = [("/sys/fs/cgroup", "memory.max", "536870912")]
    lo_up = struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40)
def child():
    # What os.fork() would do that a run needs: random seeded anew.
    if "random" in sys.modules:
        sys.modules["random"].seed()
    if jail:
        def mount(src, dst, fs, flags, data):
            check("mount " + dst, libc.mount(src and src.encode(), dst.encode(), fs and fs.encode(), flags, data and data.encode()))
        mount(None, "/", None, 16384 | (1 << 18), None)
        mount("proc", "/proc", "proc", 14, "subset=pid")
        for d in ("tmp", "work", "shm"):
            mount("tmpfs", mnt[d], "tmpfs", 6, "size=64m")
        mount("devpts", mnt["pts"], "devpts", 10, "newinstance,ptmxmode=0666")
        mount("mqueue", mnt["mq"], "mqueue", 14, None)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        fcntl.ioctl(s, 0x8914, lo_up)
        s.close()
    sys.stdin = io.StringIO(inp)
    os.dup2(null, 1)
    exec(compile(ev, "<string>", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()
# The cheapest fork there is: clone(2) itself, the run's namespaces made
# by it (no unshare, no setns back), none of the interpreter's at-fork
# handlers (PyDLL: the child has the GIL, the one thread's).
raw = ctypes.PyDLL(None, use_errno=True).syscall
raw.restype = ctypes.c_long
SYS_clone = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
flags = 17 | (NEWPID | NEWNS | NEWNET | NEWIPC | NEWUTS | NEWCGROUP if jail else 0)  # SIGCHLD
null = os.open(os.devnull, os.O_WRONLY)
gc.collect()
gc.freeze()
b = busy(); time.sleep(1.0); idle = busy() - b
faults = 0
def cpu():
    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
c0, b0, t0 = cpu(), busy(), time.monotonic()
for i in range(n):
    made = []
    for root, f, v in groups:
        d = "%s/stockade-floor-%d-%d" % (root, os.getpid(), i)
        os.mkdir(d)
        made.append(d)
        with open(d + "/" + f, "w") as fh:
            fh.write(v)
    pid = raw(SYS_clone, flags, 0, 0, 0, 0)
    check("clone", pid)
    if pid == 0:
        code = 0
        try:
            child()
        except BaseException as e:
            sys.stderr.write("floor: %s\n" % e)
            code = 1
        os._exit(code)
    for d in made:
        try:
            with open(d + "/cgroup.procs", "w") as fh:
                fh.write(str(pid))
        except OSError:
            pass  # the child may be gone already: its cgroup was made
    _, status, ru = os.wait4(pid, 0)
    if status != 0:
        sys.exit("floor: a child failed (status %d)" % status)
    faults += ru.ru_minflt
    for d in made:
        os.rmdir(d)
wall = time.monotonic() - t0
c1 = cpu()
time.sleep(1.0)
used = busy() - b0 - idle * (wall + 1.0)
hz = os.sysconf("SC_CLK_TCK")
print(json.dumps({"cpu_ms": (c1 - c0) * 1000.0 / n, "host_ms": used * 1000.0 / hz / n, "wall_ms": wall * 1000.0 / n, "faults": faults / n}))
"#;

/// One floor row: CPU (the forking process and its children), host CPU
/// and wall per run, page faults per child.
pub struct Floor {
    pub cpu_ms: f64,
    pub host_ms: f64,
    pub wall_ms: f64,
    pub faults: f64,
}

/// Runs [`SCRIPT`] in `mode` with `python`; `Err` says why there is no
/// figure (not root for `jail`, or the run failed).
pub fn measure(
    python: &Path,
    modules: &str,
    runs: usize,
    mode: &str,
    scratch: &Path,
) -> Result<Floor, String> {
    if mode == "jail" && crate::bench::effective_uid() != Some(0) {
        return Err("needs root (namespaces, mounts, cgroups)".into());
    }
    let out = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .args([modules, &runs.to_string(), mode])
        .args([super::EVALUATOR, super::INPUT])
        .arg(scratch)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "failed: {}",
            err.lines().last().unwrap_or("no message")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let v = crate::json::parse(text.trim())?;
    let num = |k: &str| {
        v.get(k)
            .and_then(crate::json::Value::as_f64)
            .ok_or(format!("no {k} in {text}"))
    };
    Ok(Floor {
        cpu_ms: num("cpu_ms")?,
        host_ms: num("host_ms")?,
        wall_ms: num("wall_ms")?,
        faults: num("faults")?,
    })
}
