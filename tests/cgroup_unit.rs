//! The cgroup module against this host's real cgroupfs (the pure logic is
//! unit-tested against a fake one inside src/cgroup.rs; the limits
//! themselves are tested in the VM: `cargo xtask vm-test`).

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use stockade::testing::cgroup::{self, Enforced, Request};

mod common;

fn controllers(dir: &Path) -> String {
    fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default()
}

#[test]
fn run_cgroup_holds_a_process_is_killed_and_removed() {
    let req = Request {
        memory: Some(64 << 20),
        memory_high: None,
        cpus: Some(0.5),
        pids: Some(32),
    };
    let setup = cgroup::prepare(&req);
    let Some(run) = setup.cgroup else {
        let why = setup.why.expect("no cgroup and no why");
        // Every limit says the same reason.
        for e in [&setup.memory, &setup.cpu, &setup.pids] {
            assert_eq!(e, &Enforced::Unavailable(why.clone()));
        }
        common::skip("run_cgroup_holds_a_process_is_killed_and_removed", &why);
        return;
    };
    assert!(setup.why.is_none());
    let path = run.path().to_path_buf();
    let parent = path.parent().unwrap();
    assert_eq!(parent.file_name().unwrap(), "stockade");
    let name = path.file_name().unwrap().to_str().unwrap();
    let (pid, _) = cgroup::parse_run_name(name).expect("run name encodes the owner");
    assert_eq!(pid as u32, std::process::id());

    // Each controller is either enforced (its file holds the limit) or
    // unavailable with a reason naming where it is missing.
    let have = controllers(parent);
    for (ctrl, e, file, want, v1_file, v1_want) in [
        (
            "memory",
            &setup.memory,
            "memory.max",
            "67108864",
            "memory.limit_in_bytes",
            "67108864",
        ),
        (
            "cpu",
            &setup.cpu,
            "cpu.max",
            "50000 100000",
            "cpu.cfs_quota_us",
            "50000",
        ),
        ("pids", &setup.pids, "pids.max", "32", "pids.max", "32"),
    ] {
        match e {
            Enforced::CgroupV1 => {
                let g = run
                    .v1_groups()
                    .iter()
                    .find(|g| g.controllers.iter().any(|c| c == ctrl))
                    .expect("a v1 group for the controller");
                assert_eq!(g.path.file_name(), path.file_name(), "one run name");
                let got = fs::read_to_string(g.path.join(v1_file)).unwrap();
                assert_eq!(got.trim(), v1_want);
            }
            Enforced::Cgroup | Enforced::CgroupSystemd => {
                assert!(have.split_whitespace().any(|w| w == ctrl), "{have}");
                assert_eq!(fs::read_to_string(path.join(file)).unwrap().trim(), want);
            }
            Enforced::Unavailable(why) => {
                assert!(why.contains(ctrl), "{why}");
                assert!(!path.join(file).exists(), "{file} exists but {why}");
            }
            Enforced::NotRequested => panic!("{ctrl} was requested"),
        }
    }

    let mut run = run;
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    run.add_pid(child.id() as i32).unwrap();
    run.place_v1(child.id() as i32).unwrap();
    let dirs = std::iter::once(path.clone()).chain(run.v1_groups().iter().map(|g| g.path.clone()));
    for d in dirs {
        let procs = fs::read_to_string(d.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|l| l == child.id().to_string()),
            "{}: {procs}",
            d.display()
        );
    }
    assert!(run.populated());
    run.kill();
    let st = child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    let stats = run.stats();
    assert!(stats.cpu.is_some(), "cpu.stat is in every v2 cgroup");
    assert!(!stats.oom_killed());
    let v1: Vec<_> = run.v1_groups().iter().map(|g| g.path.clone()).collect();
    run.remove().unwrap();
    assert!(!path.exists(), "{} left behind", path.display());
    for p in v1 {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}

#[test]
fn stale_run_cgroup_of_a_dead_owner_is_removed_and_a_live_one_kept() {
    let setup = cgroup::prepare(&Request::default());
    let Some(live) = setup.cgroup else {
        common::skip(
            "stale_run_cgroup_of_a_dead_owner_is_removed_and_a_live_one_kept",
            setup.why.as_deref().unwrap_or("no cgroup"),
        );
        return;
    };
    let parent = live.path().parent().unwrap().to_path_buf();
    // A pid above the kernel's maximum (4194304) never runs.
    let stale = parent.join(cgroup::run_name(9_999_999, 1, 0));
    fs::create_dir(&stale).unwrap();
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    fs::write(stale.join("cgroup.procs"), victim.id().to_string()).unwrap();
    // At a run's start the process left in it is killed, not leaked (and
    // not waited for there)...
    let mut removed = cgroup::cleanup_stale();
    assert_eq!(victim.wait().unwrap().signal(), Some(libc::SIGKILL));
    // ...and the cgroup removed by the run's end at the latest.
    removed.extend(cgroup::cleanup_stale_pending(Duration::from_secs(10)));
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!stale.exists());
    assert!(live.path().exists(), "a live owner's cgroup was removed");
    live.remove().unwrap();
}
