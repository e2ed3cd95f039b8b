//! `Compat::join_userns` through the library from a caller with threads:
//! the namespace's fd travels with the run to the spawner's supervisor,
//! which joins it before clone.

mod common;

use std::process::Command;
use std::time::Duration;

use stockade::{Jail, Status};

/// A user namespace made by util-linux's unshare (no maps yet), its holder
/// SIGKILLed when dropped; `map` is written as its uid_map and gid_map.
struct Holder(std::process::Child, u32);

impl Holder {
    fn new(map: &str) -> Holder {
        use std::io::BufRead;
        let mut c = Command::new("unshare");
        c.args([
            "-U",
            "--kill-child",
            "sh",
            "-c",
            "echo ready; exec sleep 600",
        ]);
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = c.spawn().expect("unshare");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        let pid = child.id();
        for f in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{f}"), map).unwrap();
        }
        Holder(child, pid)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `Compat::join_userns` from a caller with threads: the fd travels to the
/// spawner's supervisor, which joins before clone; the jail (with a network
/// namespace of its own, made in the joined one) runs as the policy's uid
/// as that namespace maps it, never as host root.
#[test]
fn a_spawned_jail_joins_the_callers_user_namespace() {
    if !common::is_root() {
        common::skip(
            "library_join_userns",
            "needs root to write the holder's maps",
        );
        return;
    }
    // The only test of this binary: no other thread reads the environment
    // while it is set. The spawner is the stockade binary (we have threads).
    std::env::set_var("STOCKADE_BIN", common::binary());
    let h = Holder::new("1000 100000 1\n");
    let ns = std::fs::File::open(format!("/proc/{}/ns/user", h.1)).unwrap();
    let link = std::fs::read_link(format!("/proc/{}/ns/user", h.1)).unwrap();
    let mut policy = Jail::profile("shell").unwrap().policy().clone();
    policy.compat.join_userns = Some(std::os::fd::AsRawFd::as_raw_fd(&ns));
    let script = "readlink /proc/self/ns/user; id -u; cat /proc/self/uid_map; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";
    let out = std::thread::spawn(move || {
        Jail::new(policy)
            .args(["/bin/sh", "-c", script])
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap()
    })
    .join()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.outcome.status,
        Status::Exited,
        "{text}{:?}",
        out.outcome
    );
    assert_eq!(
        text,
        format!(
            "{}\n1000\n{:>10} {:>10} {:>10}\nlo\n",
            link.display(),
            1000,
            100000,
            1
        )
    );
    // The outcome says whose namespace it was, not maps stockade wrote.
    let user = &out.outcome.layers["user_namespace"].detail;
    assert!(user["joined"].as_str().is_some(), "{user}");
    assert!(user.get("uid_map").is_none(), "{user}");
    drop(ns);
}
