use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::files::{words, write_file};
use super::prepare::{parse_starttime, SEQ};
use super::*;
use crate::sys;
use std::cell::RefCell;
use std::collections::HashSet;

const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

#[test]
fn mountinfo_hybrid_finds_unified_and_v1_controllers() {
    let h = parse_mountinfo(HYBRID);
    let u = h.unified().expect("cgroup2 mount");
    assert_eq!(u.mountpoint, Path::new("/sys/fs/cgroup/unified"));
    assert_eq!(u.root, "/");
    assert_eq!(
        h.v1_for("memory").map(|m| m.mountpoint.clone()),
        Some(PathBuf::from("/sys/fs/cgroup/memory"))
    );
    assert_eq!(
        h.v1_for("pids").map(|m| m.mountpoint.clone()),
        Some(PathBuf::from("/sys/fs/cgroup/pids"))
    );
    // name=systemd and xattr are not controllers.
    assert!(h.v1_for("systemd").is_none());
    assert!(h.v1_for("xattr").is_none());
}

#[test]
fn mountinfo_prefers_sys_fs_cgroup_and_unescapes() {
    let text = "\
50 1 0:40 / /mnt/with\\040space rw - cgroup2 cgroup2 rw
51 1 0:41 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
";
    let h = parse_mountinfo(text);
    assert_eq!(h.v2.len(), 2);
    assert_eq!(h.v2[0].mountpoint, Path::new("/mnt/with space"));
    assert_eq!(h.unified().unwrap().mountpoint, Path::new("/sys/fs/cgroup"));
    assert!(h.v1.is_empty());
    assert!(parse_mountinfo("garbage line\n\n").unified().is_none());
}

#[test]
fn favordynmods_is_read_from_the_cgroup2_mount_asked_about() {
    let text = "\
50 1 0:40 / /mnt/with\\040space rw - cgroup2 cgroup2 rw,favordynmods
51 1 0:41 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
52 1 0:42 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory,favordynmods
";
    assert_eq!(
        favors_dynmods(text, Path::new("/mnt/with space")),
        Some(true)
    );
    assert_eq!(
        favors_dynmods(text, Path::new("/sys/fs/cgroup")),
        Some(false)
    );
    // Not a cgroup2 mount, or none there.
    assert_eq!(
        favors_dynmods(text, Path::new("/sys/fs/cgroup/memory")),
        None
    );
    assert_eq!(favors_dynmods(text, Path::new("/nowhere")), None);
    assert_eq!(favors_dynmods("- - -\n", Path::new("/")), None);
}

#[test]
fn proc_cgroup_and_mount_root() {
    let pc = "12:memory:/x\n0::/user.slice/user-1000.slice/session-2.scope\n";
    let cg = parse_proc_cgroup(pc).unwrap();
    assert_eq!(cg, "/user.slice/user-1000.slice/session-2.scope");
    let m = Mount {
        root: "/".into(),
        mountpoint: "/sys/fs/cgroup".into(),
        controllers: vec![],
    };
    assert_eq!(
        cgroup_dir(&m, &cg).unwrap(),
        Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope")
    );
    assert_eq!(cgroup_dir(&m, "/").unwrap(), Path::new("/sys/fs/cgroup"));
    // Outside our cgroup namespace, or escaping it.
    assert!(cgroup_dir(&m, "/../other").is_none());
    assert!(cgroup_dir(&m, "/a/../../b").is_none());
    // A mount of a subtree.
    let sub = Mount {
        root: "/user.slice".into(),
        mountpoint: "/c".into(),
        controllers: vec![],
    };
    assert_eq!(
        cgroup_dir(&sub, "/user.slice/u/s").unwrap(),
        Path::new("/c/u/s")
    );
    assert_eq!(cgroup_dir(&sub, "/user.slice").unwrap(), Path::new("/c"));
    assert!(cgroup_dir(&sub, "/system.slice/x").is_none());
    assert!(cgroup_dir(&sub, "/user.slicex/y").is_none());
    assert!(parse_proc_cgroup("1:cpu:/\n").is_none());
}

#[test]
fn run_names_round_trip_and_reject_strangers() {
    let n = run_name(1234, 99887766, 3);
    assert_eq!(n, "run-1234-99887766-3");
    assert_eq!(parse_run_name(&n), Some((1234, 99887766)));
    for bad in [
        "run-1-2",
        "run-x-2-3",
        "run-1-2-3-4",
        "other",
        "run--2-3",
        "run-1-2-x",
    ] {
        assert_eq!(parse_run_name(bad), None, "{bad}");
    }
}

#[test]
fn starttime_survives_odd_comm() {
    let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 555666 1000 10";
    assert_eq!(parse_starttime(stat), Some(555666));
    let me = proc_starttime(sys::getpid());
    assert!(me.is_some_and(|t| t > 0), "{me:?}");
}

#[test]
fn cpu_max_values() {
    assert_eq!(cpu_max(0.5).as_deref(), Some("50000 100000"));
    assert_eq!(cpu_max(2.0).as_deref(), Some("200000 100000"));
    assert_eq!(cpu_max(0.001).as_deref(), Some("1000 100000"));
    assert_eq!(cpu_max(0.0), None);
    assert_eq!(cpu_max(-1.0), None);
    assert_eq!(cpu_max(f64::NAN), None);
    assert_eq!(cpu_max(f64::INFINITY), None);
}

/// A fake cgroupfs: directories with the control files the kernel would
/// create. Non-root cgroups get `cgroup.type` (the real root has none).
struct FakeFs {
    dir: PathBuf,
}

impl FakeFs {
    fn new(tag: &str) -> FakeFs {
        let dir = std::env::temp_dir().join(format!(
            "stockade-cg-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        FakeFs { dir }
    }
    fn cg(&self, rel: &str, controllers: &str, procs: &str) -> PathBuf {
        let d = if rel.is_empty() {
            self.dir.clone()
        } else {
            self.dir.join(rel)
        };
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("cgroup.controllers"), controllers).unwrap();
        fs::write(d.join("cgroup.subtree_control"), "").unwrap();
        fs::write(d.join("cgroup.procs"), procs).unwrap();
        if !rel.is_empty() {
            fs::write(d.join("cgroup.type"), "domain\n").unwrap();
        }
        d
    }
    fn hier(&self) -> Hierarchies {
        Hierarchies {
            v2: vec![Mount {
                root: "/".into(),
                mountpoint: self.dir.clone(),
                controllers: vec![],
            }],
            v1: vec![Mount {
                root: "/".into(),
                mountpoint: "/sys/fs/cgroup/memory".into(),
                controllers: vec!["memory".into()],
            }],
        }
    }
}

impl Drop for FakeFs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// cgroupfs removes control files with the directory; a temp dir does not.
fn discard(run: RunCgroup) {
    for e in fs::read_dir(run.path()).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    let path = run.path().to_path_buf();
    run.remove().unwrap();
    assert!(!path.exists());
}

struct FakeHost {
    euid: u32,
    /// Paths that are NOT writable.
    locked: RefCell<HashSet<PathBuf>>,
}

impl FakeHost {
    fn new(euid: u32, locked: &[PathBuf]) -> FakeHost {
        FakeHost {
            euid,
            locked: RefCell::new(locked.iter().cloned().collect()),
        }
    }
}

impl Host for FakeHost {
    fn euid(&self) -> u32 {
        self.euid
    }
    /// Like cgroupfs: the new directory comes with its control files,
    /// and with a controller's files when the parent lists it.
    fn mkdir(&self, p: &Path) -> io::Result<()> {
        fs::create_dir(p)?;
        let ctrls = words(&p.parent().unwrap().join("cgroup.controllers")).join(" ");
        for (f, v) in [
            ("cgroup.controllers", ctrls.as_str()),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", ""),
            ("cgroup.type", "domain\n"),
            ("cgroup.events", "populated 0\nfrozen 0\n"),
        ] {
            fs::write(p.join(f), v)?;
        }
        let files: &[(&str, &[&str])] = &[
            (
                "memory",
                &[
                    "memory.max",
                    "memory.high",
                    "memory.swap.max",
                    "memory.oom.group",
                ],
            ),
            ("cpu", &["cpu.max"]),
            ("pids", &["pids.max"]),
        ];
        for (c, fl) in files {
            if ctrls.split(' ').any(|w| w == *c) {
                for f in fl.iter() {
                    fs::write(p.join(f), "")?;
                }
            }
        }
        Ok(())
    }
    fn writable(&self, p: &Path) -> bool {
        !self.locked.borrow().contains(p)
    }
}

fn locked_tree(paths: &[&Path]) -> Vec<PathBuf> {
    paths
        .iter()
        .flat_map(|p| [p.to_path_buf(), p.join("cgroup.procs")])
        .collect()
}

#[test]
fn root_uses_the_hierarchy_root_even_from_a_busy_session() {
    let fs_ = FakeFs::new("root");
    let top = fs_.cg("", "cpu memory pids io", "1\n");
    fs_.cg("user.slice", "cpu memory pids", "");
    fs_.cg("user.slice/session-1.scope", "", "100\n200\n");
    let host = FakeHost::new(0, &[]);
    let p = choose(&host, &fs_.hier(), "0::/user.slice/session-1.scope\n").unwrap();
    assert_eq!(p.base, top);
    assert_eq!(p.hierarchy, top);
}

#[test]
fn user_gets_nearest_delegated_ancestor_without_processes() {
    let fs_ = FakeFs::new("user");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let slice = fs_.cg("user.slice", "cpu memory pids", "");
    let svc = fs_.cg("user.slice/user@1000.service", "cpu memory pids", "");
    fs_.cg(
        "user.slice/user@1000.service/app.slice",
        "cpu memory pids",
        "",
    );
    let scope = fs_.cg(
        "user.slice/user@1000.service/app.slice/run-x.scope",
        "",
        "4242\n",
    );
    let host = FakeHost::new(1000, &locked_tree(&[&top, &slice]));
    let p = choose(
        &host,
        &fs_.hier(),
        "0::/user.slice/user@1000.service/app.slice/run-x.scope\n",
    )
    .unwrap();
    // Not the scope itself (it holds us), but its parent.
    assert_eq!(p.base, svc.join("app.slice"));
    assert!(p.base != scope);
}

#[test]
fn user_skips_ancestor_that_holds_processes_or_whose_procs_is_not_ours() {
    let fs_ = FakeFs::new("skip");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let deleg = fs_.cg("deleg", "cpu memory pids", "");
    let mid = fs_.cg("deleg/mid", "cpu memory pids", "77\n");
    let odd = fs_.cg("deleg/mid/odd", "cpu memory pids", "");
    fs_.cg("deleg/mid/odd/shell", "", "500\n");
    // odd/ is writable but its cgroup.procs is not: the kernel would
    // refuse the migration (common-ancestor rule).
    let mut locked = locked_tree(&[&top]);
    locked.push(odd.join("cgroup.procs"));
    let host = FakeHost::new(1000, &locked);
    let p = choose(&host, &fs_.hier(), "0::/deleg/mid/odd/shell\n").unwrap();
    assert_eq!(p.base, deleg);
    let _ = mid;
}

#[test]
fn user_without_delegation_gets_a_precise_why() {
    let fs_ = FakeFs::new("nodeleg");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let slice = fs_.cg("user.slice", "cpu memory pids", "");
    let sess = fs_.cg("user.slice/session-3.scope", "", "300\n");
    let host = FakeHost::new(65534, &locked_tree(&[&top, &slice, &sess]));
    let why = choose(&host, &fs_.hier(), "0::/user.slice/session-3.scope\n")
        .unwrap_err()
        .to_string();
    assert!(
        why.starts_with("no cgroup usable by uid 65534 (tried "),
        "{why}"
    );
    assert!(why.contains("our own cgroup, holds our processes"), "{why}");
    assert!(why.contains("uid 65534"), "{why}");
    assert!(
        why.contains(&format!("{}: directory not writable", slice.display())),
        "{why}"
    );
    // Flat hierarchy (like this host's hybrid unified mount): own = root.
    let fs2 = FakeFs::new("flat");
    let top2 = fs2.cg("", "hugetlb", "1\n2\n");
    let host2 = FakeHost::new(65534, &locked_tree(&[&top2]));
    let why2 = choose(&host2, &fs2.hier(), "0::/\n")
        .unwrap_err()
        .to_string();
    assert!(why2.contains("directory not writable"), "{why2}");
    let none = choose(&host2, &Hierarchies::default(), "0::/\n")
        .unwrap_err()
        .to_string();
    assert!(none.starts_with("no cgroup v2 hierarchy mounted"), "{none}");
}

#[test]
fn limits_are_written_and_controllers_enabled_down_the_path() {
    let fs_ = FakeFs::new("limits");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let place = Placement {
        hierarchy: top.clone(),
        base: top.clone(),
    };
    // What mkdir would create in a real cgroupfs.
    let req = Request {
        memory: Some(64 << 20),
        memory_high: Some(48 << 20),
        cpus: Some(0.5),
        pids: Some(32),
    };
    let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
    assert!(setup.why.is_none(), "{:?}", setup.why);
    assert_eq!(setup.memory, Enforced::Cgroup);
    assert_eq!(setup.cpu, Enforced::Cgroup);
    assert_eq!(setup.pids, Enforced::Cgroup);
    let run = setup.cgroup.expect("run cgroup");
    let rd = |f: &str| fs::read_to_string(run.path().join(f)).unwrap();
    assert_eq!(rd("memory.max"), (64u64 << 20).to_string());
    assert_eq!(rd("memory.high"), (48u64 << 20).to_string());
    assert_eq!(rd("memory.swap.max"), "0");
    assert_eq!(rd("memory.oom.group"), "1");
    assert_eq!(rd("cpu.max"), "50000 100000");
    assert_eq!(rd("pids.max"), "32");
    let parent = top.join(PARENT_NAME);
    assert_eq!(run.path().parent().unwrap(), parent);
    let name = run
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        parse_run_name(&name),
        Some((sys::getpid(), proc_starttime(sys::getpid()).unwrap()))
    );
    // The fake file keeps only the last "+x" written: the parent got one
    // write per controller, the last being pids.
    assert_eq!(
        fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap(),
        "+pids"
    );
    assert!(run.dir_fd().is_some_and(|fd| fd >= 0));
    discard(run);
}

#[test]
fn missing_controllers_are_unavailable_with_the_reason() {
    let fs_ = FakeFs::new("missing");
    let top = fs_.cg("", "hugetlb", "1\n");
    let place = Placement {
        hierarchy: top.clone(),
        base: top.clone(),
    };
    let req = Request {
        memory: Some(1 << 20),
        memory_high: None,
        cpus: None,
        pids: Some(8),
    };
    let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
    let Enforced::Unavailable(why) = &setup.memory else {
        panic!("{:?}", setup.memory)
    };
    assert_eq!(
        why,
        &format!(
            "no memory controller in the cgroup v2 hierarchy at {} (it is bound to the \
             cgroup v1 hierarchy at /sys/fs/cgroup/memory)",
            top.display()
        )
    );
    let Enforced::Unavailable(why) = &setup.pids else {
        panic!("{:?}", setup.pids)
    };
    assert_eq!(
        why,
        &format!(
            "no pids controller in the cgroup v2 hierarchy at {}",
            top.display()
        )
    );
    assert_eq!(setup.cpu, Enforced::NotRequested);
    let run = setup.cgroup.expect("a cgroup still tracks the run");
    assert!(!run.path().join("memory.max").exists());
    assert!(!run.path().join("pids.max").exists());
    discard(run);
    // Nothing was enabled that the hierarchy does not have.
    assert_eq!(
        fs::read_to_string(top.join("cgroup.subtree_control")).unwrap(),
        ""
    );
}

#[test]
fn undelegated_and_refused_controllers_say_which_file() {
    let fs_ = FakeFs::new("undeleg");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let base = fs_.cg("deleg", "memory pids", "");
    // A directory where a file should be: every write to it fails.
    fs::remove_file(base.join("cgroup.subtree_control")).unwrap();
    fs::create_dir(base.join("cgroup.subtree_control")).unwrap();
    let place = Placement {
        hierarchy: top.clone(),
        base: base.clone(),
    };
    let req = Request {
        memory: Some(1 << 20),
        memory_high: None,
        cpus: Some(1.0),
        pids: None,
    };
    let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
    let Enforced::Unavailable(cpu) = &setup.cpu else {
        panic!("{:?}", setup.cpu)
    };
    assert!(
        cpu.starts_with("the cpu controller is not delegated to"),
        "{cpu}"
    );
    let Enforced::Unavailable(mem) = &setup.memory else {
        panic!("{:?}", setup.memory)
    };
    assert!(
        mem.contains(&format!(
            "{}",
            base.join("cgroup.subtree_control").display()
        )),
        "{mem}"
    );
    assert_eq!(setup.pids, Enforced::NotRequested);
    discard(setup.cgroup.expect("run cgroup"));
}

#[test]
fn stats_are_parsed_and_classify_limits() {
    let fs_ = FakeFs::new("stats");
    let d = fs_.cg("run", "", "");
    fs::write(d.join("memory.peak"), "67108864\n").unwrap();
    fs::write(d.join("memory.current"), "0\n").unwrap();
    fs::write(
        d.join("memory.events"),
        "low 0\nhigh 3\nmax 120\noom 1\noom_kill 1\noom_group_kill 1\n",
    )
    .unwrap();
    fs::write(
        d.join("cpu.stat"),
        "usage_usec 1000500\nuser_usec 990000\nsystem_usec 10500\nnr_periods 20\nnr_throttled 19\nthrottled_usec 950000\nnr_bursts 0\n",
    )
    .unwrap();
    fs::write(d.join("pids.events"), "max 7\n").unwrap();
    fs::write(d.join("pids.peak"), "32\n").unwrap();
    let s = read_stats(&d);
    assert_eq!(s.memory_peak, Some(64 << 20));
    assert!(s.oom_killed());
    assert_eq!(s.memory_events.as_ref().unwrap().max, 120);
    assert_eq!(s.cpu_usage_usec(), Some(1000500));
    assert_eq!(s.cpu.as_ref().unwrap().nr_throttled, 19);
    assert!(s.pids_limit_hit());
    assert_eq!(s.pids_peak, Some(32));
    assert_eq!(s.pids_current, None);
    let empty = read_stats(&fs_.cg("none", "", ""));
    assert_eq!(empty, Stats::default());
    assert!(!empty.oom_killed());
    assert!(!empty.pids_limit_hit());
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"oom_kill\":1"), "{json}");
}

#[test]
fn stale_cleanup_spares_live_owners_and_strangers() {
    let fs_ = FakeFs::new("stale");
    let parent = fs_.dir.join(PARENT_NAME);
    fs::create_dir(&parent).unwrap();
    for n in ["run-10-100-0", "run-11-200-3", "unrelated", "run-12-300-1"] {
        fs::create_dir(parent.join(n)).unwrap();
    }
    let removed = cleanup_stale_in(&parent, |pid, st| pid == 11 && st == 200);
    let mut names: Vec<String> = removed
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["run-10-100-0", "run-12-300-1"]);
    assert!(parent.join("run-11-200-3").exists());
    assert!(parent.join("unrelated").exists());
    assert!(!parent.join("run-10-100-0").exists());
}

/// The typed errors say exactly what the strings they replaced said, and
/// carry what a caller matches on.
#[test]
fn errors_keep_their_text_and_kind() {
    let fs_ = FakeFs::new("errtext");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let slice = fs_.cg("user.slice", "cpu memory pids", "");
    let sess = fs_.cg("user.slice/session-3.scope", "", "300\n");
    let host = FakeHost::new(65534, &locked_tree(&[&top, &slice, &sess]));
    let e = choose(&host, &fs_.hier(), "0::/user.slice/session-3.scope\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no cgroup usable by uid 65534 (tried {}: our own cgroup, holds our processes; \
             {}: directory not writable; {}: directory not writable); delegate one (systemd \
             Delegate=yes, or chown a cgroup and its cgroup.procs, cgroup.subtree_control, \
             cgroup.threads) and run stockade in a child of it",
            sess.display(),
            slice.display(),
            top.display()
        )
    );
    assert!(matches!(e, CgroupError::NoUsableBase { euid: 65534, .. }));
    let m = &fs_.hier().v2[0];
    let e = choose(&host, &fs_.hier(), "0::/../elsewhere\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "our cgroup /../elsewhere is not visible under the cgroup2 mount at {} (mount root /)",
            m.mountpoint.display()
        )
    );
    let e = choose(&host, &fs_.hier(), "1:cpu:/\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no unified-hierarchy (0::) line in /proc/self/cgroup"
    );
    let missing = fs_.dir.join("nope");
    let e = write_file(&missing, "cgroup.procs", "1").unwrap_err();
    assert_eq!(e.errno(), Some(sys::Errno::ENOENT));
    assert_eq!(
        e.to_string(),
        format!(
            "open {}: {}",
            missing.join("cgroup.procs").display(),
            sys::errno_text(sys::Errno::ENOENT)
        )
    );
    let busy = CgroupError::InternalProcesses {
        dir: top.clone(),
        source: Box::new(CgroupError::Write {
            path: top.join("cgroup.subtree_control"),
            value: "+cpu".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        }),
    };
    assert_eq!(busy.errno(), Some(sys::Errno::EBUSY));
    assert_eq!(
        busy.to_string(),
        format!(
            "write \"+cpu\" to {}: {} (no-internal-processes rule: {} holds processes)",
            top.join("cgroup.subtree_control").display(),
            sys::errno_text(sys::Errno::EBUSY),
            top.display()
        )
    );
}

/// A host whose v1 hierarchies are directories of a temp dir: mkdir makes
/// the control files the v1 kernel would.
struct FakeV1Host {
    euid: u32,
    locked: Vec<PathBuf>,
}

impl Host for FakeV1Host {
    fn euid(&self) -> u32 {
        self.euid
    }
    fn mkdir(&self, p: &Path) -> io::Result<()> {
        fs::create_dir(p)?;
        for f in [
            "cgroup.procs",
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.oom_control",
            "pids.max",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
        ] {
            fs::write(p.join(f), "")?;
        }
        Ok(())
    }
    fn writable(&self, p: &Path) -> bool {
        !self.locked.iter().any(|l| p.starts_with(l))
    }
}

fn fake_v1(fs_: &FakeFs) -> Hierarchies {
    let m = |name: &str, ctrls: &[&str]| {
        let d = fs_.dir.join(name);
        fs::create_dir_all(&d).unwrap();
        Mount {
            root: "/".into(),
            mountpoint: d,
            controllers: ctrls.iter().map(|c| c.to_string()).collect(),
        }
    };
    fs::create_dir_all(fs_.dir.join("memory/box")).unwrap();
    Hierarchies {
        v2: vec![],
        v1: vec![
            m("memory", &["memory"]),
            m("cpu", &["cpu", "cpuacct"]),
            m("pids", &["pids"]),
        ],
    }
}

const V1_PROC_CGROUP: &str = "8:pids:/\n4:memory:/box\n2:cpu,cpuacct:/\n0::/\n";

#[test]
fn v1_rung_writes_each_limit_under_our_own_v1_cgroup() {
    let fs_ = FakeFs::new("v1");
    let h = fake_v1(&fs_);
    let req = Request {
        memory: Some(64 << 20),
        memory_high: Some(32 << 20),
        cpus: Some(0.5),
        pids: Some(20),
    };
    let mut setup = unavailable_everywhere(&req, "no cgroup v2 hierarchy mounted");
    let host = FakeV1Host {
        euid: 0,
        locked: vec![],
    };
    v1::climb(&host, &h, V1_PROC_CGROUP, &req, &mut setup, true);
    assert_eq!(
        (&setup.memory, &setup.cpu, &setup.pids),
        (
            &Enforced::CgroupV1,
            &Enforced::CgroupV1,
            &Enforced::CgroupV1
        )
    );
    let Enforced::Unavailable(why) = &setup.memory_high else {
        panic!("{:?}", setup.memory_high)
    };
    assert!(why.ends_with("; cgroup v1 has no memory.high"), "{why}");
    assert!(setup.why.is_none());
    let run = setup.cgroup.take().expect("a v1-only run cgroup");
    assert!(!run.has_v2() && run.dir_fd().is_none());
    // One group per hierarchy (cpu and cpuacct share one), one name.
    let groups = run.v1_groups().to_vec();
    assert_eq!(groups.len(), 3, "{groups:?}");
    let read = |g: &V1Group, f: &str| fs::read_to_string(g.path.join(f)).unwrap();
    let mem = &groups[0];
    assert!(
        mem.path.starts_with(fs_.dir.join("memory/box/stockade")),
        "{mem:?}"
    );
    assert_eq!(read(mem, "memory.limit_in_bytes"), "67108864");
    assert_eq!(read(mem, "memory.memsw.limit_in_bytes"), "67108864");
    assert_eq!(read(mem, "memory.oom_control"), "0");
    assert_eq!(read(&groups[1], "cpu.cfs_quota_us"), "50000");
    assert_eq!(read(&groups[1], "cpu.cfs_period_us"), "100000");
    assert_eq!(read(&groups[2], "pids.max"), "20");
    assert!(groups
        .iter()
        .all(|g| g.path.file_name() == mem.path.file_name()));
    for g in &groups {
        for e in fs::read_dir(&g.path).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
    }
    run.remove().unwrap();
    assert!(groups.iter().all(|g| !g.path.exists()));
}

#[test]
fn v1_rung_refused_keeps_the_v2_reason_and_adds_its_own() {
    let fs_ = FakeFs::new("v1locked");
    let h = fake_v1(&fs_);
    let req = Request {
        pids: Some(20),
        ..Request::default()
    };
    let mut setup = unavailable_everywhere(&req, "no cgroup usable by uid 65534");
    let host = FakeV1Host {
        euid: 65534,
        locked: vec![fs_.dir.clone()],
    };
    v1::climb(&host, &h, V1_PROC_CGROUP, &req, &mut setup, true);
    let Enforced::Unavailable(why) = &setup.pids else {
        panic!("{:?}", setup.pids)
    };
    assert_eq!(
        why,
        &format!(
            "no cgroup usable by uid 65534; cgroup v1: {}: not writable by uid 65534 (the v1 \
             hierarchies are root's unless a directory is delegated)",
            fs_.dir.join("pids").display()
        )
    );
    assert!(setup.cgroup.is_none() && setup.why.is_some());
    assert_eq!(own_v1_path(V1_PROC_CGROUP, "cpuacct").as_deref(), Some("/"));
    assert_eq!(
        own_v1_path(V1_PROC_CGROUP, "memory").as_deref(),
        Some("/box")
    );
    assert_eq!(own_v1_path(V1_PROC_CGROUP, "blkio"), None);
}

#[test]
fn a_run_cgroup_made_earlier_takes_new_limits_where_it_holds_them() {
    // The unified hierarchy holds every controller.
    let fs_ = FakeFs::new("relimit");
    let top = fs_.cg("", "cpu memory pids", "1\n");
    let place = Placement {
        hierarchy: top.clone(),
        base: top,
    };
    let made = Request {
        memory: Some(512 << 20),
        memory_high: None,
        cpus: Some(1.0),
        pids: Some(64),
    };
    let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &made);
    let run = setup.cgroup.expect("run cgroup");
    let run_req = Request {
        memory: Some(128 << 20),
        memory_high: Some(96 << 20),
        cpus: Some(0.25),
        pids: Some(16),
    };
    run.set_limits(&run_req).unwrap();
    let rd = |f: &str| fs::read_to_string(run.path().join(f)).unwrap();
    assert_eq!(rd("memory.max"), (128u64 << 20).to_string());
    assert_eq!(rd("memory.high"), (96u64 << 20).to_string());
    assert_eq!(rd("cpu.max"), "25000 100000");
    assert_eq!(rd("pids.max"), "16");
    // What a request does not ask stays as made.
    run.set_limits(&Request {
        pids: Some(8),
        ..Request::default()
    })
    .unwrap();
    assert_eq!(rd("memory.max"), (128u64 << 20).to_string());
    assert_eq!(rd("pids.max"), "8");
    discard(run);

    // cgroup v1 only: each limit in its controller's group; memory.high
    // has no v1 file.
    let fs_ = FakeFs::new("relimit-v1");
    let h = fake_v1(&fs_);
    let mut setup = unavailable_everywhere(&made, "no cgroup v2 hierarchy mounted");
    let host = FakeV1Host {
        euid: 0,
        locked: vec![],
    };
    v1::climb(&host, &h, V1_PROC_CGROUP, &made, &mut setup, true);
    let run = setup.cgroup.take().expect("a v1-only run cgroup");
    run.set_limits(&Request {
        memory_high: None,
        ..run_req
    })
    .unwrap();
    let groups = run.v1_groups().to_vec();
    let read = |g: &V1Group, f: &str| fs::read_to_string(g.path.join(f)).unwrap();
    assert_eq!(read(&groups[0], "memory.limit_in_bytes"), "134217728");
    assert_eq!(read(&groups[0], "memory.memsw.limit_in_bytes"), "134217728");
    assert_eq!(read(&groups[1], "cpu.cfs_quota_us"), "25000");
    assert_eq!(read(&groups[2], "pids.max"), "16");
    let refused = run.set_limits(&run_req).unwrap_err();
    assert!(
        matches!(
            refused,
            CgroupError::NotHeld {
                limit: "memory_high",
                ..
            }
        ),
        "{refused}"
    );
    for g in &groups {
        for e in fs::read_dir(&g.path).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
    }
    run.remove().unwrap();
}
