//! Where user namespaces are refused (a container runtime's seccomp filter,
//! simulated by tests/payloads/chk_nouserns.c), stockade still runs the
//! payload behind Landlock, seccomp, rlimits and a process-tree kill, and
//! says so; `--require userns` fails closed.

mod common;

use common::{stderr, stdout, Scratch, Who};

/// `chk_nouserns stockade run FLAGS -- CMD` as `who`.
fn run_refused(who: Who, flags: &[&str], cmd: &[&str]) -> std::process::Output {
    run_wrapped("chk_nouserns", who, flags, cmd)
}

/// `WRAPPER stockade run FLAGS -- CMD` as `who`.
fn run_wrapped(wrapper: &str, who: Who, flags: &[&str], cmd: &[&str]) -> std::process::Output {
    common::wrapped(&[wrapper], who, flags, cmd)
        .output()
        .expect("start wrapper")
}

fn report(o: &std::process::Output) -> serde_json::Value {
    common::last_json(o)
}

#[test]
fn refused_userns_still_confines_the_payload_and_says_so() {
    let canary = Scratch::new("fb-canary");
    std::fs::write(canary.join("secret"), "fb-canary-7781").unwrap();
    std::fs::set_permissions(
        canary.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let secret = canary.join("secret");
    let script = format!(
        "cat {} ; echo rc-read=$?; \
         echo x > /usr/stockade-fb-probe 2>/dev/null; echo rc-usr=$?; \
         echo y > \"$HOME/ok\" && echo rc-home=0; \
         python3 -c 'import socket\ntry:\n s=socket.socket()\n s.connect((\"127.0.0.1\", 9))\nexcept OSError as e: print(\"connect\", e.errno)\ntry:\n u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n u.sendto(b\"x\", (\"127.0.0.1\", 9))\n print(\"udp sent\")\nexcept OSError as e: print(\"udp\", e.errno)'; \
         id -u",
        secret.display()
    );
    for who in common::users("refused_userns_still_confines_the_payload_and_says_so") {
        let o = run_refused(who, &["--report", "-"], &["/bin/sh", "-c", &script]);
        let r = report(&o);
        let out = r["stdout"]["data"].as_str().unwrap_or("").to_string();
        let err = stderr(&o);
        assert_eq!(r["status"], "exited", "{who:?}: {r}\n{err}");
        assert!(
            !out.contains("fb-canary-7781"),
            "{who:?}: canary leaked: {out}"
        );
        assert!(out.contains("rc-read=1"), "{who:?}: {out}");
        assert!(
            out.contains("rc-usr=") && !out.contains("rc-usr=0"),
            "{who:?}: {out}"
        );
        assert!(
            out.contains("rc-home=0"),
            "{who:?}: private run dir not writable: {out}\n{err}"
        );
        // No inet socket at all without a network namespace (seccomp, EPERM);
        // Landlock would also refuse the TCP connect (EACCES).
        assert!(
            out.contains("connect 1\n") || out.contains("connect 13\n"),
            "{who:?}: {out}"
        );
        assert!(
            out.contains("udp 1\n") && !out.contains("udp sent"),
            "{who:?}: UDP must not leave: {out}"
        );
        // Started by root, the payload is never root: it runs as a host uid
        // leased from --uid-range (default 2147418112:65536); started by
        // 65534, as 65534.
        let uid: u64 = out
            .trim_end()
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{who:?}: no uid printed: {out}"));
        match who {
            Who::Root => assert!(
                (2147418112..2147418112 + 65536).contains(&uid),
                "{who:?}: payload uid {uid} not in the default --uid-range: {out}"
            ),
            Who::Nobody => assert_eq!(uid, 65534, "{who:?}: {out}"),
        }
        assert!(!std::path::Path::new("/usr/stockade-fb-probe").exists());
        for l in [
            "user_namespace",
            "mount_namespace",
            "pid_namespace",
            "net_namespace",
        ] {
            assert_eq!(r["layers"][l]["state"], "unavailable", "{who:?}: {l}: {r}");
        }
        for l in [
            "landlock",
            "seccomp",
            "process_tree",
            "rlimits",
            "capabilities",
        ] {
            assert_eq!(r["layers"][l]["state"], "applied", "{who:?}: {l}: {r}");
        }
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with("stockade: warning: user namespaces refused"))
                .count(),
            1,
            "{err}"
        );
        // The private run directory is gone afterwards.
        let run_dir = r["layers"]["process_tree"]["detail"]["run_dir"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            !std::path::Path::new(&run_dir).exists(),
            "{run_dir} left behind"
        );
    }
}

#[test]
fn require_userns_fails_closed_naming_the_setting() {
    for who in common::users("require_userns_fails_closed_naming_the_setting") {
        let o = run_refused(
            who,
            &["--require", "userns"],
            &["/bin/sh", "-c", "echo ran"],
        );
        common::expect_code(&o, 125, "require userns");
        assert!(!stdout(&o).contains("ran"));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("stockade: create namespaces: "), "{err}");
        assert!(err.contains("seccomp"), "{err}");
    }
}

#[test]
fn refused_userns_still_kills_the_whole_process_tree() {
    for who in common::users("refused_userns_still_kills_the_whole_process_tree") {
        let tag = format!(
            "{}",
            900000 + std::process::id() % 90000 + if who == Who::Root { 1 } else { 2 }
        );
        let script = format!(
            "setsid sh -c 'exec sleep {tag}' </dev/null >/dev/null 2>&1 & sleep 0.3; echo started"
        );
        let o = run_refused(who, &[], &["/bin/sh", "-c", &script]);
        common::expect_code(&o, 0, "daemonizing payload");
        assert!(stdout(&o).contains("started"));
        let mut left = true;
        for _ in 0..40 {
            left = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&tag))
                    .unwrap_or(false)
            });
            if !left {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!left, "{who:?}: `sleep {tag}` survived the jail");
    }
}

#[test]
fn refused_pivot_root_still_gives_the_minimal_root() {
    let canary = Scratch::new("fb-pivot");
    std::fs::write(canary.join("secret"), "pivot-canary-5521").unwrap();
    let script = format!(
        "ls -A /; cat {}/secret; echo rc=$?",
        canary.path().display()
    );
    for who in common::users("refused_pivot_root_still_gives_the_minimal_root") {
        let o = run_wrapped(
            "fb_nopivot",
            who,
            &["--report", "-"],
            &["/bin/sh", "-c", &script],
        );
        let r = report(&o);
        assert_eq!(r["status"], "exited", "{who:?}: {r}");
        let out = r["stdout"]["data"].as_str().unwrap_or("");
        assert!(
            !out.contains("pivot-canary-5521") && out.contains("rc=1"),
            "{who:?}: {out}"
        );
        assert!(
            out.contains("proc")
                && out.contains("usr")
                && !out.contains("root\n")
                && !out.contains("home"),
            "{who:?}: {out}"
        );
        assert_eq!(
            r["layers"]["rootfs"]["detail"]["chroot"], true,
            "{who:?}: {r}"
        );
        assert_eq!(
            r["layers"]["user_namespace"]["state"], "applied",
            "{who:?}: {r}"
        );
    }
}

/// Set in the copy of this test binary started under chk_nouserns.
const LIBRARY_CHILD: &str = "STOCKADE_FALLBACK_TEST_LIBRARY_CHILD";

/// stockade's own warnings (here: user namespaces refused; `--cpus` not
/// enforced where the host has no cpu controller) reach a library caller in
/// `outcome.warnings` only, never in the payload's captured stderr; the CLI
/// still prints each one on its own stderr, once.
#[test]
fn warnings_go_to_the_outcome_not_the_payloads_stderr() {
    if std::env::var_os(LIBRARY_CHILD).is_some() {
        // The copy under chk_nouserns: a library capture through the
        // spawner (this process has threads), its result on one line.
        let out = stockade::Jail::profile("shell")
            .unwrap()
            .args(["/bin/sh", "-c", "echo payload-out; echo payload-err >&2"])
            .cpus(0.5)
            .output()
            .unwrap();
        let line = serde_json::json!({
            "outcome": serde_json::to_value(&out.outcome).unwrap(),
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        });
        println!("LIBRARY-RESULT {line}");
        return;
    }
    let o = std::process::Command::new(common::c_payload("sig_default"))
        .arg(common::c_payload("chk_nouserns"))
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "warnings_go_to_the_outcome_not_the_payloads_stderr",
            "--nocapture",
        ])
        .env(LIBRARY_CHILD, "1")
        .env("STOCKADE_BIN", common::binary())
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&o);
    let r: serde_json::Value = text
        .lines()
        .find_map(|l| l.strip_prefix("LIBRARY-RESULT "))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no result from the copy:\n{text}\n{}", stderr(&o)));
    let outcome = &r["outcome"];
    assert_eq!(outcome["status"], "exited", "{r}");
    assert_eq!(r["stdout"], "payload-out\n", "{r}");
    assert_eq!(
        r["stderr"], "payload-err\n",
        "stockade wrote into the payload's stderr: {r}"
    );
    let warnings: Vec<&str> = outcome["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings in the outcome: {r}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings[0].starts_with("user namespaces refused ("),
        "{warnings:?}"
    );
    let cpus_unenforced = outcome["limits"]["cpus"]["enforced_by"] == "none";
    assert_eq!(
        warnings.iter().any(|w| w.starts_with("--cpus")),
        cpus_unenforced,
        "{r}"
    );
    // The CLI: the same warnings on its stderr (once each), and in the
    // outcome.
    for who in common::users("warnings_go_to_the_outcome_not_the_payloads_stderr") {
        let o = run_refused(who, &["--report", "-", "--cpus", "0.5"], &["/bin/true"]);
        let rep = report(&o);
        let err = stderr(&o);
        let ws = rep["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{rep}"));
        assert!(!ws.is_empty(), "{rep}");
        for w in ws {
            let line = format!("stockade: warning: {}", w.as_str().unwrap());
            assert_eq!(
                err.lines().filter(|l| *l == line).count(),
                1,
                "{who:?}: {line}\n{err}"
            );
        }
    }
}
