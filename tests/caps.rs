//! The payload holds no capability in any set, cannot regain one
//! (no_new_privs), and runs inside a Landlock domain: even as uid 0 of the
//! jail, with DAC on its side, it cannot do what capabilities or the ruleset
//! withhold. Each test runs as root and as uid 65534, with a control.

mod common;

use std::path::Path;

use common::{expect_code, stderr, stdout, Scratch};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The `Name:\tvalue` lines of /proc/self/status we care about.
fn status_fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.starts_with("Cap") || *k == "NoNewPrivs")
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn assert_no_caps(who: common::Who, what: &str, text: &str) {
    let f = status_fields(text);
    for want in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let v = f.iter().find(|(k, _)| k == want);
        assert_eq!(
            v.map(|(_, v)| v.as_str()),
            Some("0000000000000000"),
            "{who:?} {what}: {want}\n{text}"
        );
    }
    let nnp = f.iter().find(|(k, _)| k == "NoNewPrivs");
    assert_eq!(
        nnp.map(|(_, v)| v.as_str()),
        Some("1"),
        "{who:?} {what}: NoNewPrivs\n{text}"
    );
}

#[test]
fn payload_has_no_capabilities_and_no_new_privs() {
    for who in common::users("payload_has_no_capabilities_and_no_new_privs") {
        for (what, flags) in [
            ("default", &[][..]),
            ("uid 0 in the jail", &["--uid", "0", "--gid", "0"][..]),
        ] {
            let o = common::run(who, flags, &["cat", "/proc/self/status"]);
            expect_code(&o, 0, &format!("{who:?} {what}"));
            assert_no_caps(who, what, &stdout(&o));
        }
        // What the payload executes inherits the state (no file caps, no
        // setuid can bring anything back under no_new_privs).
        let o = common::run(
            who,
            &["--uid", "0", "--gid", "0"],
            &[
                "/bin/sh",
                "-c",
                "exec python3 -c 'print(open(\"/proc/self/status\").read())'",
            ],
        );
        expect_code(&o, 0, &format!("{who:?}: after two execs"));
        assert_no_caps(who, "after two execs", &stdout(&o));
    }
}

#[test]
fn uid_0_in_the_jail_cannot_use_capabilities() {
    // seccomp and Landlock off: only the empty capability sets stand in the way.
    let probe = r#"
import errno, os, socket
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
print("uid", os.getuid())
try:
    socket.sethostname("pwned"); print("sethostname ok")
except OSError as e:
    print("sethostname", name(e))
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print("raw ok")
except OSError as e:
    print("raw", name(e))
"#;
    for who in common::users("uid_0_in_the_jail_cannot_use_capabilities") {
        let o = common::run(
            who,
            &["--uid", "0", "--gid", "0", "--no-seccomp", "--no-landlock"],
            &[
                "/bin/sh",
                "-c",
                &format!("python3 -c '{}'; hostname", probe.replace('\'', "'\\''")),
            ],
        );
        expect_code(&o, 0, &format!("{who:?}: probe"));
        let out = stdout(&o);
        assert!(out.contains("uid 0\n"), "{who:?}: {out}{}", stderr(&o));
        assert!(
            out.contains("sethostname EPERM\n"),
            "{who:?}: {out}{}",
            stderr(&o)
        );
        assert!(out.contains("raw EPERM\n"), "{who:?}: {out}{}", stderr(&o));
        assert!(!out.contains("pwned"), "{who:?}: hostname changed: {out}");
    }
}

#[test]
fn payload_runs_inside_a_landlock_domain() {
    for who in common::users("payload_runs_inside_a_landlock_domain") {
        // A writable bind that DAC lets everyone write (0777), left out of
        // the ruleset: only Landlock can refuse the write.
        let d = Scratch::new("caps-ll").world_writable();
        let bind = format!("{}:/out", s(d.path()));
        let script = "echo written > /out/f; echo rc=$?";

        let o = common::run(
            who,
            &["--bind", &bind, "--landlock-exclude", "/out"],
            &["/bin/sh", "-c", script],
        );
        expect_code(&o, 0, &format!("{who:?}: write attempt"));
        assert!(
            stdout(&o).contains("rc=") && !stdout(&o).contains("rc=0"),
            "{who:?}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("/out/f: Permission denied"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(!d.join("f").exists(), "{who:?}: the file reached the host");

        // Control: same flags without Landlock, the write lands.
        let o = common::run(
            who,
            &[
                "--bind",
                &bind,
                "--landlock-exclude",
                "/out",
                "--no-landlock",
            ],
            &["/bin/sh", "-c", script],
        );
        expect_code(&o, 0, &format!("{who:?}: control"));
        assert!(stdout(&o).contains("rc=0"), "{who:?}: {}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(d.join("f")).unwrap(),
            "written\n",
            "{who:?}"
        );
    }
}
