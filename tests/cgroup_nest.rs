//! A fork server's nest (`cgroup::Nest`) against this host's real
//! unified hierarchy, as root: what is in the zygote's cgroup moves into
//! its leaf, the limits go with it, and a process of the jail's uid in
//! the leaf may fork a child straight into a run cgroup of the nest
//! (clone3 `CLONE_INTO_CGROUP`, the kernel's own permission check) but
//! not into a cgroup of the nest it was not handed, nor into one outside
//! the nest. The whole fork server on cgroup v2 is tested in the VM
//! (`cargo xtask vm-test`: tests/vm/tests.sh, `fork_*`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use stockade::testing::cgroup::{self, Request};

mod common;

/// Run by root, then as uid 65534: into the leaf (argv 1), then a child
/// cloned into each other cgroup named; per cgroup a line, `exit 0` (the
/// child found itself there) or `errno N` (clone3 refused it).
const CLONER: &str = r#"
import ctypes, os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for d in sys.argv[2:]:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    # struct clone_args: flags CLONE_INTO_CGROUP, exit_signal SIGCHLD, cgroup fd
    args = (ctypes.c_uint64 * 11)(0x200000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, fd)
    pid = libc.syscall(435, ctypes.byref(args), 88)
    if pid == 0:
        with open("/proc/self/cgroup") as f:
            here = f.read().strip().endswith("/" + os.path.basename(d))
        os._exit(0 if here else 3)
    os.close(fd)
    if pid < 0:
        print("errno", ctypes.get_errno())
    else:
        print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"#;

fn owner(p: &Path) -> u32 {
    fs::metadata(p).unwrap().uid()
}

#[test]
fn a_nest_holds_its_zygote_and_lets_it_clone_into_its_runs_only() {
    let name = "a_nest_holds_its_zygote_and_lets_it_clone_into_its_runs_only";
    if !common::is_root() {
        common::skip(name, "not root: a nest hands files to another uid");
        return;
    }
    let setup = cgroup::prepare(&Request::default());
    let Some(z) = setup.cgroup.filter(|c| c.has_v2()) else {
        common::skip(name, "no run cgroup on the unified hierarchy");
        return;
    };
    let zp = z.path().to_path_buf();
    // The zygote's jail stands in: a process in Z before the nest.
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    fs::write(zp.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    // The template's limits where Z can give its children the
    // controllers (cgroup v2 with them), else none (a hybrid host's
    // unified hierarchy holds none).
    let offered = fs::read_to_string(zp.join("cgroup.controllers")).unwrap_or_default();
    let limits = ["memory", "pids"]
        .iter()
        .all(|c| offered.split_whitespace().any(|w| w == *c));
    let req = match limits {
        true => Request {
            memory: Some(64 << 20),
            pids: Some(32),
            ..Request::default()
        },
        false => Request::default(),
    };
    let nest = cgroup::Nest::make(&zp, &req, 65534).unwrap();
    assert_eq!(nest.path(), zp);
    let leaf = zp.join(cgroup::NEST_LEAF);
    let cg = fs::read_to_string(format!("/proc/{}/cgroup", sleeper.id())).unwrap();
    assert!(cg.trim_end().ends_with("/zygote"), "{cg}");
    assert_eq!(fs::read_to_string(zp.join("cgroup.procs")).unwrap(), "");
    assert_eq!(owner(&zp.join("cgroup.procs")), 65534);
    if limits {
        let read = |d: &Path, f: &str| fs::read_to_string(d.join(f)).unwrap().trim().to_string();
        assert_eq!(read(&leaf, "memory.max"), (64u64 << 20).to_string());
        assert_eq!(read(&leaf, "pids.max"), "32");
        assert_eq!(read(&zp, "memory.max"), "max");
        assert_eq!(read(&zp, "pids.max"), "max");
        assert_eq!(read(&zp, "memory.oom.group"), "0");
    }
    // A run of the nest, handed to the jail's uid; one of the nest not
    // handed (made by hand, root's); one outside the nest, handed.
    let run = nest.prepare(&req).expect("a run cgroup in the nest");
    let rp = run.cgroup.as_ref().unwrap().path().to_path_buf();
    assert_eq!(rp.parent(), Some(zp.as_path()));
    assert_eq!(owner(&rp.join("cgroup.procs")), 65534);
    let unhanded = zp.join(cgroup::run_name(std::process::id() as i32, 1, 999_999));
    fs::create_dir(&unhanded).unwrap();
    let outside = cgroup::prepare(&Request::default()).cgroup.unwrap();
    std::os::unix::fs::chown(outside.path().join("cgroup.procs"), Some(65534), None).unwrap();
    let out = Command::new("python3")
        .args(["-c", CLONER])
        .args([&leaf, &rp, &unhanded, outside.path()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let eacces = format!("errno {}", libc::EACCES);
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        ["exit 0", eacces.as_str(), eacces.as_str()],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{out:?}");
    drop(run);
    let _ = fs::remove_dir(&unhanded);
    outside.remove().unwrap();
    // The nest goes with its cgroup, the leaf's process killed.
    z.remove().unwrap();
    assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(!zp.exists());
}
