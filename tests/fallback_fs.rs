//! What the payload can write and what of the host's /proc it can read,
//! where user namespaces are refused (tests/payloads/chk_nouserns.c) and,
//! where the same mechanism exists, in the namespaced jail:
//!
//! * `--tmp-size` holds: a tmpfs on the run directory when stockade can
//!   mount one (root with CAP_SYS_ADMIN), else RLIMIT_FSIZE and the
//!   supervisor's meter, which kills the jail (`disk_limit`); the outcome's
//!   `limits.tmp_size.enforced_by` names the one that held it.
//! * the host's processes are not visible: a secret on a host command line
//!   cannot be read, and `layers.proc` says why.

mod common;

use common::{stderr, Who};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// How stockade is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Namespaces allowed: the full jail.
    Jail,
    /// Under chk_nouserns: the fallback.
    Refused,
    /// Under fb_nosysadmin and chk_nouserns: the fallback started by a root
    /// without CAP_SYS_ADMIN (a default Docker container), which cannot
    /// mount.
    RefusedNoSysAdmin,
}

const MODES: [Mode; 3] = [Mode::Jail, Mode::Refused, Mode::RefusedNoSysAdmin];

/// `[WRAPPERS…] stockade run FLAGS -- CMD` as `who` (run_refused of
/// tests/fallback.rs, with a chain of wrappers).
fn run_as(mode: Mode, who: Who, flags: &[&str], cmd: &[&str]) -> std::process::Output {
    let wrappers: &[&str] = match mode {
        Mode::Jail => &[],
        Mode::Refused => &["chk_nouserns"],
        Mode::RefusedNoSysAdmin => &["fb_nosysadmin", "chk_nouserns"],
    };
    common::wrapped(wrappers, who, flags, cmd)
        .output()
        .expect("start stockade")
}

fn out(r: &serde_json::Value) -> String {
    r["stdout"]["data"].as_str().unwrap_or("").to_string()
}

/// The mechanism that must hold --tmp-size for `who` in `mode`.
fn expected_cap(mode: Mode, who: Who) -> &'static str {
    match (mode, who) {
        (Mode::Jail, _) | (Mode::Refused, Who::Root) => "tmpfs",
        _ => "rlimit_fsize+supervisor",
    }
}

/// `key=N` from the payload's output.
fn num(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn one_big_file_stops_at_tmp_size() {
    // The program, with /tmp where the jail has no $TMPDIR.
    let script = "T=${TMPDIR:-/tmp}; dd if=/dev/zero of=$T/big bs=1M count=40; \
                  echo size=$(stat -c %s $T/big); echo kib=$(du -sk $T | cut -f1)";
    for who in common::users("one_big_file_stops_at_tmp_size") {
        for mode in MODES {
            let o = run_as(
                mode,
                who,
                &["--tmp-size", "8m", "--report", "-"],
                &["/bin/sh", "-c", script],
            );
            let r = common::last_valid_json(&o);
            let text = out(&r);
            let what = format!("{who:?} {mode:?}: {r}\n{}", stderr(&o));
            assert_eq!(
                r["limits"]["tmp_size"]["enforced_by"],
                expected_cap(mode, who),
                "{what}"
            );
            assert_eq!(r["limits"]["tmp_size"]["limit"], 8 * MIB, "{what}");
            let size = num(&text, "size").unwrap_or_else(|| panic!("no size: {what}"));
            assert!((MIB..=8 * MIB).contains(&size), "{what}");
            let kib = num(&text, "kib").unwrap_or_else(|| panic!("no du: {what}"));
            assert!(kib <= 8 * 1024 + 64, "{what}");
            // The cap held without killing anything but dd (ENOSPC, or
            // SIGXFSZ at the file limit).
            assert_eq!(r["status"], "exited", "{what}");
        }
    }
}

#[test]
fn many_small_files_stop_at_tmp_size() {
    // RLIMIT_FSIZE does not stop this; the tmpfs or the meter must.
    let script = "T=${TMPDIR:-/tmp}; i=0; while [ $i -lt 40 ]; do \
                  dd if=/dev/zero of=$T/f$i bs=1M count=1 2>/dev/null || echo refused=$i; \
                  i=$((i+1)); done; echo kib=$(du -sk $T | cut -f1); echo wrote-all";
    for who in common::users("many_small_files_stop_at_tmp_size") {
        for mode in MODES {
            let o = run_as(
                mode,
                who,
                &["--tmp-size", "8m", "--report", "-"],
                &["/bin/sh", "-c", script],
            );
            let r = common::last_valid_json(&o);
            let text = out(&r);
            let what = format!("{who:?} {mode:?}: {r}\n{}", stderr(&o));
            let cap = expected_cap(mode, who);
            assert_eq!(r["limits"]["tmp_size"]["enforced_by"], cap, "{what}");
            if cap == "tmpfs" {
                // The kernel refused the ninth MiB on.
                assert_eq!(r["status"], "exited", "{what}");
                assert!(num(&text, "refused").is_some(), "{what}");
                assert!(
                    num(&text, "kib").is_some_and(|k| k <= 8 * 1024 + 64),
                    "{what}"
                );
            } else {
                // Killed by the meter while it wrote, or found past the cap
                // by the meter's last walk: never an `exited` with 40 MiB.
                assert_eq!(r["status"], "disk_limit", "{what}");
                assert!(
                    stderr(&o)
                        .lines()
                        .any(|l| l.starts_with("stockade: the run directory reached --tmp-size")),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn a_writer_that_never_stops_is_killed_at_tmp_size() {
    // Files of 256 KiB forever, with a child that outlives the writer: only
    // the cap ends it (the deadline is a backstop: `timeout` would fail).
    let script = "T=${TMPDIR:-/tmp}; (sleep 600; echo late) & i=0; while :; do \
                  dd if=/dev/zero of=$T/f$i bs=256k count=1 2>/dev/null || { echo refused; break; }; \
                  i=$((i+1)); done; wait";
    for who in common::users("a_writer_that_never_stops_is_killed_at_tmp_size") {
        for mode in [Mode::Refused, Mode::RefusedNoSysAdmin] {
            if expected_cap(mode, who) == "tmpfs" {
                continue;
            }
            let o = run_as(
                mode,
                who,
                &["--tmp-size", "4m", "--timeout", "60s", "--report", "-"],
                &["/bin/sh", "-c", script],
            );
            let r = common::last_valid_json(&o);
            let what = format!("{who:?} {mode:?}: {r}\n{}", stderr(&o));
            assert_eq!(r["status"], "disk_limit", "{what}");
            assert_eq!(r["signal"], 9, "{what}");
            assert!(!out(&r).contains("late"), "{what}");
            // The whole tree went with it: the run directory is gone, and
            // nothing was left running in it.
            let dir = r["layers"]["process_tree"]["detail"]["run_dir"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(!dir.is_empty(), "{what}");
            assert!(!std::path::Path::new(&dir).exists(), "{what}");
            let left = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
                std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(&dir))
            });
            assert!(!left, "{what}: a process still runs in {dir}");
        }
    }
}

#[test]
fn a_stale_run_directory_tmpfs_is_detached_by_the_next_run() {
    if !common::is_root() {
        common::skip(
            "a_stale_run_directory_tmpfs_is_detached_by_the_next_run",
            "not running as root: cannot mount the stale tmpfs",
        );
        return;
    }
    // A stockade that was killed: its pid is gone, its tmpfs is mounted.
    let mut gone = Command::new("/bin/true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    let dir = format!("/tmp/stockade-run-{pid}-stale{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", &dir])
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs on {dir}");
    let mounted = |d: &str| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(d))
    };
    assert!(mounted(&dir));
    let o = run_as(Mode::Refused, Who::Root, &["--report", "-"], &["/bin/true"]);
    let r = common::last_valid_json(&o);
    assert_eq!(r["status"], "exited", "{r}");
    let still = mounted(&dir);
    if still {
        let _ = Command::new("umount").args(["-l", &dir]).status();
    }
    let _ = std::fs::remove_dir(&dir);
    assert!(!still, "{dir} is still mounted");
    // And the run's own tmpfs is gone too.
    let own = r["layers"]["process_tree"]["detail"]["run_dir"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !mounted(&own) && !std::path::Path::new(&own).exists(),
        "{own}"
    );
}

/// A root process on the host with a secret on its command line.
struct Secret {
    child: std::process::Child,
    marker: String,
}

impl Secret {
    fn start(tag: &str) -> Secret {
        let marker = format!("RTSECRET-{}-{tag}", std::process::id());
        // `; :` keeps sh from exec'ing sleep: sh's argv stays.
        let child = Command::new("/bin/sh")
            .args(["-c", "sleep 60; :", &marker])
            .spawn()
            .unwrap();
        let s = Secret { child, marker };
        // The control: outside the jail the secret is readable (once sh has
        // replaced the forked test process).
        let readable = || {
            std::fs::read(format!("/proc/{}/cmdline", s.pid()))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&s.marker))
        };
        let t0 = std::time::Instant::now();
        while !readable() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert!(
            readable(),
            "control: {} not in /proc/{}/cmdline",
            s.marker,
            s.pid()
        );
        s
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn host_command_lines_are_out_of_reach() {
    let secret = Secret::start("proc");
    let pid = secret.pid();
    let script = format!(
        "cat /proc/{pid}/cmdline; echo rc-cat=$?; \
         for f in /proc/[0-9]*/cmdline; do cat \"$f\"; echo; done 2>/dev/null; \
         python3 -c 'import os\ntry: print(open(\"/proc/{pid}/cmdline\",\"rb\").read())\nexcept OSError as e: print(\"py\", e.errno)\ntry: print(len(os.listdir(\"/proc\")), \"entries\")\nexcept OSError as e: print(\"pyls\", e.errno)'; \
         ls /dev/fd/ >/dev/null 2>&1; echo rc-devfd=$?; echo done"
    );
    for who in common::users("host_command_lines_are_out_of_reach") {
        for mode in MODES {
            let o = run_as(mode, who, &["--report", "-"], &["/bin/sh", "-c", &script]);
            let r = common::last_valid_json(&o);
            let text = out(&r);
            let what = format!("{who:?} {mode:?}: {r}\n{}", stderr(&o));
            assert_eq!(r["status"], "exited", "{what}");
            assert!(text.contains("done"), "{what}");
            assert!(!text.contains(&secret.marker), "{what}: the secret leaked");
            assert!(!text.contains("rc-cat=0"), "{what}");
            if mode == Mode::Jail {
                // The jail's own /proc: its own processes only.
                assert!(text.contains(" entries"), "{what}");
            } else {
                // No /proc at all: Landlock refuses (EACCES), also by way
                // of /dev/fd.
                assert!(text.contains("py 13") && text.contains("pyls 13"), "{what}");
                assert!(!text.contains("rc-devfd=0"), "{what}");
                assert_eq!(r["layers"]["proc"]["state"], "unavailable", "{what}");
                assert_eq!(
                    r["layers"]["proc"]["detail"]["host_proc_readable"], false,
                    "{what}"
                );
                assert!(
                    r["layers"]["proc"]["detail"]["why"]
                        .as_str()
                        .is_some_and(|w| w.contains("outside the Landlock ruleset")),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn where_the_host_proc_is_readable_the_outcome_says_so() {
    for who in common::users("where_the_host_proc_is_readable_the_outcome_says_so") {
        for flags in [&["--no-landlock"][..], &["--ro-bind", "/proc:/proc"][..]] {
            let mut f = flags.to_vec();
            f.extend(["--report", "-"]);
            let o = run_as(
                Mode::Refused,
                who,
                &f,
                &["/bin/sh", "-c", "head -c 0 /proc/1/status && echo readable"],
            );
            let r = common::last_valid_json(&o);
            let what = format!("{who:?} {flags:?}: {r}\n{}", stderr(&o));
            assert!(out(&r).contains("readable"), "{what}");
            assert_eq!(r["layers"]["proc"]["state"], "unavailable", "{what}");
            assert_eq!(
                r["layers"]["proc"]["detail"]["host_proc_readable"], true,
                "{what}"
            );
        }
    }
}
