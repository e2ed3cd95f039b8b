//! `stockade check`: what this host can enforce, and why not — on this host,
//! under a seccomp filter that refuses namespaces (as a container runtime's
//! default profile does), and with /proc masked (as inside a container).

mod common;

use common::{expect_code, stderr, stdout, Who};
use std::process::{Command, Output};

fn check_json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// Run `stockade check ARGS` as `who`, through `wrapper` (a path and its
/// leading args) when given.
fn check(who: Who, wrapper: &[&str], args: &[&str]) -> Output {
    let bin = common::binary().display().to_string();
    let mut c = if wrapper.is_empty() {
        common::stockade(who)
    } else {
        let mut c = common::stockade(who);
        // Re-point the harness command at the wrapper, keeping its env/uid.
        let mut w = Command::new(wrapper[0]);
        w.args(&wrapper[1..]).arg(&bin);
        w.env_clear().env("PATH", "/usr/bin:/bin").current_dir("/");
        if who == Who::Nobody && common::is_root() {
            use std::os::unix::process::CommandExt;
            w.uid(common::NOBODY).gid(common::NOBODY);
        }
        std::mem::swap(&mut c, &mut w);
        c
    };
    c.arg("check").args(args).output().unwrap()
}

#[test]
fn check_reports_every_layer_on_this_host() {
    for who in common::users("check_reports_every_layer_on_this_host") {
        let o = check(who, &[], &["--json"]);
        expect_code(&o, 0, "check");
        let v = check_json(&o);
        for l in [
            "userns", "proc", "landlock", "seccomp", "cgroup", "pidfd", "clone3",
        ] {
            assert!(v["layers"][l]["available"].is_boolean(), "{l}: {v}");
            assert!(
                !v["layers"][l]["reason"].as_str().unwrap().is_empty(),
                "{l}: {v}"
            );
        }
        // This host runs jails: what check says must agree with a real run.
        let run = common::run(who, &["--report", "-", "--no-seccomp"], &["true"]);
        let r: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        let userns_applied = r["layers"]["user_namespace"]["state"] == "applied";
        assert_eq!(
            v["layers"]["userns"]["available"], userns_applied,
            "{v}\n{r}"
        );
        let ll = r["layers"]["landlock"]["state"] == "applied";
        assert_eq!(v["layers"]["landlock"]["available"], ll, "{v}\n{r}");
        if ll {
            let abi = r["layers"]["landlock"]["detail"]["abi"].to_string();
            assert_eq!(v["layers"]["landlock"]["facts"]["abi"], abi.as_str(), "{v}");
        }
        assert_eq!(v["layers"]["seccomp"]["available"], true, "{v}");
        // Text form: one line per layer, exit 0 for a profile without requirements.
        let o = check(who, &[], &[]);
        expect_code(&o, 0, "check text");
        let t = stdout(&o);
        assert!(
            t.starts_with("stockade check: profile shell requires no layer\n"),
            "{t}"
        );
        assert!(
            t.lines().any(|l| l.trim_start().starts_with("landlock ")),
            "{t}"
        );
    }
}

#[test]
fn check_exit_code_follows_the_profiles_required_layers() {
    let s = common::Scratch::new("chkreq");
    let p = s.join("needs-cgroup.toml");
    std::fs::write(&p, "require = [\"cgroup\"]\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    for who in common::users("check_exit_code_follows_the_profiles_required_layers") {
        let o = check(who, &[], &["--json", "--profile", p.to_str().unwrap()]);
        let v = check_json(&o);
        let avail = v["layers"]["cgroup"]["available"].as_bool().unwrap();
        expect_code(&o, if avail { 0 } else { 1 }, "needs cgroup");
        assert_eq!(v["ok"], avail, "{v}");
        assert_eq!(v["required"], serde_json::json!(["cgroup"]));
        let o = check(who, &[], &["--profile", "nosuch"]);
        expect_code(&o, 125, "bad profile");
        assert!(stderr(&o).starts_with("stockade: --profile: \"nosuch\": no such profile"));
    }
}

#[test]
fn check_under_a_filter_that_refuses_namespaces_says_why() {
    let wrapper = common::c_payload("chk_nouserns");
    let w = wrapper.to_str().unwrap();
    for who in common::users("check_under_a_filter_that_refuses_namespaces_says_why") {
        let o = check(who, &[w], &["--json", "--profile", "strict"]);
        expect_code(&o, 1, "strict under filter");
        let v = check_json(&o);
        let u = &v["layers"]["userns"];
        assert_eq!(u["available"], false, "{v}");
        let why = u["reason"].as_str().unwrap();
        assert!(
            why.starts_with("clone(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID): EPERM"),
            "{why}"
        );
        assert!(
            why.contains("a seccomp filter is installed on this process"),
            "{why}"
        );
        assert_eq!(u["facts"]["no_new_privs"], "1", "{v}");
        assert_eq!(u["facts"]["seccomp_mode"], "2", "{v}");
        assert_eq!(
            v["layers"]["proc"]["reason"],
            "not tried: needs a user namespace"
        );
        assert_eq!(v["layers"]["clone3"]["available"], false, "{v}");
        assert!(
            v["layers"]["clone3"]["reason"]
                .as_str()
                .unwrap()
                .contains("seccomp filter"),
            "{v}"
        );
        assert_eq!(v["missing"], serde_json::json!(["userns"]));
        // Layers the filter does not touch stay available.
        assert_eq!(v["layers"]["landlock"]["available"], true, "{v}");
        assert_eq!(v["layers"]["seccomp"]["available"], true, "{v}");
        // The text form names the missing layer and exits 1 too.
        let o = check(who, &[w], &["--profile", "strict"]);
        expect_code(&o, 1, "text");
        assert!(
            stdout(&o).ends_with("not ok: required but unavailable: userns\n"),
            "{}",
            stdout(&o)
        );
    }
}

#[test]
fn check_with_proc_masked_says_proc_cannot_be_mounted() {
    if !common::is_root() {
        common::skip(
            "check_with_proc_masked_says_proc_cannot_be_mounted",
            "needs root for a private mount namespace",
        );
        return;
    }
    // A container runtime masks /proc entries by mounting over them; the
    // kernel then refuses a new proc mount from a user namespace
    // (mnt_already_visible). Do the same in a private mount namespace.
    let bin = common::binary().display().to_string();
    for (who, prefix) in [
        (Who::Root, String::new()),
        (
            Who::Nobody,
            "setpriv --reuid 65534 --regid 65534 --clear-groups ".to_string(),
        ),
    ] {
        let script = format!(
            "mount --make-rprivate / && mount -t tmpfs -o size=4k none /proc/sys && \
             mount --bind /dev/null /proc/timer_list && exec {prefix}{bin} check --json --profile strict"
        );
        let o = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .output()
            .unwrap();
        expect_code(&o, 1, &format!("masked proc as {who:?}"));
        let v = check_json(&o);
        assert_eq!(v["layers"]["userns"]["available"], true, "{v}");
        let p = &v["layers"]["proc"];
        assert_eq!(p["available"], false, "{v}");
        let why = p["reason"].as_str().unwrap();
        assert!(why.starts_with("mount(/proc): EPERM"), "{why}");
        assert!(
            why.contains(
                "/proc is masked here (/proc/sys, /proc/timer_list mounted over entries of it)"
            ),
            "{why}"
        );
        assert_eq!(v["missing"], serde_json::json!(["userns"]), "{v}");
    }
}

#[test]
fn check_names_the_rung_each_limit_takes_as_a_run_does() {
    for who in common::users("check_names_the_rung_each_limit_takes_as_a_run_does") {
        let o = check(who, &[], &["--json"]);
        expect_code(&o, 0, "check");
        let v = check_json(&o);
        let run = common::run(
            who,
            &[
                "--report",
                "-",
                "--memory",
                "1g",
                "--memory-high",
                "1g",
                "--cpus",
                "1",
                "--pids-limit",
                "1024",
            ],
            &["true"],
        );
        let r = common::last_json(&run);
        for l in ["memory", "memory_high", "cpus", "pids"] {
            let said = &v["limits"][l];
            assert_eq!(
                said["enforced_by"], r["limits"][l]["enforced_by"],
                "{l}: {said}\n{r}"
            );
            // Below the top rung, check says why the higher ones are not there.
            if said["enforced_by"] != "cgroup" {
                assert!(
                    said["why"].as_str().is_some_and(|w| w.len() > 10),
                    "{l}: {said}"
                );
            }
        }
        // --require cgroup is met by any real cgroup rung.
        let held = ["memory", "cpus", "pids"].iter().any(|l| {
            v["limits"][l]["enforced_by"]
                .as_str()
                .unwrap()
                .starts_with("cgroup")
        });
        if held {
            assert_eq!(v["layers"]["cgroup"]["available"], true, "{v}");
        }
    }
}

/// The cgroup layer's `favordynmods` fact agrees with the host's cgroup2
/// mount: whether each move between cgroups (one per forked run) may wait
/// for an RCU grace period.
#[test]
fn check_says_whether_a_move_between_cgroups_waits() {
    let name = "check_says_whether_a_move_between_cgroups_waits";
    for who in common::users(name) {
        let v = check_json(&check(who, &[], &["--json"]));
        let facts = &v["layers"]["cgroup"]["facts"];
        let Some(mount) = facts["mount"].as_str() else {
            common::skip(name, &format!("no cgroup v2 hierarchy on this host ({v})"));
            return;
        };
        let mounts = common::cgroup2_mounts();
        let superopts = mounts
            .iter()
            .find(|(m, _)| m == mount)
            .map(|(_, o)| o)
            .unwrap_or_else(|| panic!("no cgroup2 mount at {mount}: {mounts:?}"));
        let favor = superopts.split(',').any(|o| o == "favordynmods");
        let fact = facts["favordynmods"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        let want = if favor { "yes: " } else { "no: " };
        assert!(fact.starts_with(want), "{superopts}: {fact}");
        if !favor {
            assert!(
                fact.contains(&format!("remount,favordynmods {mount}")),
                "{fact}"
            );
        }
    }
}
