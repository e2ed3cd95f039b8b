//! The systemd rung of the limit ladder (a transient scope with
//! `Delegate=yes` asked of the user's systemd over D-Bus) as far as this
//! host can take it: an unprivileged caller with a user bus on which no
//! systemd answers gets the next rung, and the outcome says what the bus
//! said; the D-Bus helper process is gone after the run.
//!
//! A real `systemd --user` granting the scope (this host's PID 1 is not
//! systemd, and its controllers sit on cgroup v1) is tested by `cargo xtask
//! vm-systemd-test`: tests/vm-systemd/tests.sh, in a VM that boots systemd.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use common::Who;

mod common;

/// A session bus of uid 65534 with no service to activate: its address.
struct Bus {
    child: Child,
    _dir: common::Scratch,
    address: String,
}

impl Bus {
    fn start(test: &str) -> Option<Bus> {
        if !common::is_root() {
            common::skip(test, "not root: cannot start the bus as uid 65534");
            return None;
        }
        if !std::path::Path::new("/usr/bin/dbus-daemon").exists() {
            common::skip(
                test,
                "no /usr/bin/dbus-daemon (cargo xtask test installs it)",
            );
            return None;
        }
        let dir = common::Scratch::new("bus").world_writable();
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                "<busconfig><type>session</type><listen>unix:path={}</listen>\
                 <auth>EXTERNAL</auth><policy context=\"default\">\
                 <allow send_destination=\"*\" eavesdrop=\"true\"/><allow eavesdrop=\"true\"/>\
                 <allow own=\"*\"/></policy></busconfig>",
                dir.join("sock").display()
            ),
        )
        .unwrap();
        let mut child = Command::new("/usr/bin/dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--print-address=1"])
            .uid(common::NOBODY)
            .gid(common::NOBODY)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start dbus-daemon");
        // The address is printed once the bus listens.
        let mut address = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        Some(Bus {
            child,
            _dir: dir,
            address: address.trim().to_string(),
        })
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes of uid 65534 whose parent is `ppid`.
fn children_of(ppid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if after.split_whitespace().nth(1) == Some(&ppid.to_string()) {
            out.push(stat);
        }
    }
    out
}

#[test]
fn a_user_bus_without_systemd_gives_the_next_rung_and_says_why() {
    let test = "a_user_bus_without_systemd_gives_the_next_rung_and_says_why";
    let Some(bus) = Bus::start(test) else {
        return;
    };
    let mut c = common::stockade(Who::Nobody);
    c.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args([
            "run",
            "--report",
            "-",
            "--memory",
            "64m",
            "--pids-limit",
            "20",
        ])
        .args(["--", "/bin/true"]);
    let child = c.stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let v = common::last_json(&o);
    let m = &v["limits"]["memory"];
    if m["enforced_by"] != "rlimit_as" {
        common::skip(
            test,
            &format!("uid 65534 has a cgroup rung on this host: {m}"),
        );
        return;
    }
    assert_eq!(v["status"], "exited", "{v}");
    let why = m["why"].as_str().unwrap();
    // The helper reached the bus and asked for systemd: the bus's answer.
    assert!(why.contains("; systemd: systemd "), "{why}");
    assert!(why.contains("org.freedesktop.systemd1"), "{why}");
    assert_eq!(v["limits"]["pids"]["enforced_by"], "rlimit_nproc", "{v}");
    // The D-Bus helper is gone with the run (stockade has exited and
    // reaped it: nothing of it is left as a child of that pid).
    assert!(children_of(pid).is_empty(), "{:?}", children_of(pid));
}
