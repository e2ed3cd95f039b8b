//! Profiles: the TOML format, `extends`, variables, one-line errors with
//! file:line:column and field, CLI overrides, and the shipped profiles.

mod common;

use common::{expect_code, stderr, stdout, Scratch, Who};
use std::os::unix::fs::PermissionsExt;

fn write(s: &Scratch, name: &str, text: &str) -> String {
    let p = s.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p.display().to_string()
}

fn profile_cmd(who: Who, args: &[&str]) -> std::process::Output {
    common::stockade(who)
        .arg("profile")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bad_profile_values_fail_with_file_line_column_and_field() {
    let s = Scratch::new("badprof");
    let cases = [
        (
            "size.toml",
            "hostname = \"x\"\n\n[limits]\n  memory = \"12q\"\n",
            ":4:12: limits.memory: \"12q\" is not a size",
        ),
        (
            "unknown.toml",
            "[limits]\nmemry = \"1g\"\n",
            ":2:1: limits.memry: unknown field `memry`",
        ),
        (
            "section.toml",
            "[limitz]\nx = 1\n",
            ":1:2: limitz: unknown field `limitz`",
        ),
        (
            "net.toml",
            "network = \"bridge\"\n",
            ":1:11: network: \"bridge\": expected \"none\" or \"loopback\" or \"host\"",
        ),
        (
            "var.toml",
            "[filesystem]\nro = [\"${NOPE}/x\"]\n",
            ":2:7: filesystem.ro: \"${NOPE}/x\": ${NOPE}: unknown variable",
        ),
        (
            "ext.toml",
            "extends = \"nosuch\"\n",
            ":1:11: extends: \"nosuch\": no such profile",
        ),
        (
            "req.toml",
            "require = [\"apparmor\"]\n",
            ":1:12: require: \"apparmor\": unknown layer",
        ),
        (
            "ns.toml",
            "[namespaces]\npid = false\n",
            ":2:7: namespaces.pid: stockade always creates a new pid namespace",
        ),
        (
            "type.toml",
            "uid = \"abc\"\n",
            ":1:7: uid: expected a whole number from 0 to 4294967295, got a string (\"abc\")",
        ),
    ];
    for who in common::users("bad_profile_values_fail_with_file_line_column_and_field") {
        for (name, text, want) in cases {
            let path = write(&s, name, text);
            for args in [
                vec!["profile", "check", &path],
                vec!["run", "--profile", &path, "--", "true"],
            ] {
                let o = common::stockade(who).args(&args).output().unwrap();
                expect_code(&o, 125, name);
                let e = stderr(&o);
                assert_eq!(e.lines().count(), 1, "{name}: not one line: {e}");
                let want = format!("stockade: {path}{want}");
                assert!(e.starts_with(&want), "{name}:\n got: {e}\nwant: {want}");
            }
        }
    }
}

#[test]
fn extends_loop_and_unknown_or_unreadable_profile_are_one_line_errors() {
    let s = Scratch::new("loop");
    let a = write(&s, "a.toml", "extends = \"b.toml\"\n");
    write(&s, "b.toml", "extends = \"a.toml\"\n");
    let o = common::stockade(Who::Root)
        .args(["profile", "check", &a])
        .output()
        .unwrap();
    expect_code(&o, 125, "loop");
    assert!(stderr(&o).contains("makes a loop"), "{}", stderr(&o));
    for who in common::users("extends_loop_and_unknown_or_unreadable_profile_are_one_line_errors") {
        let o = common::run(who, &["--profile", "nosuch"], &["true"]);
        expect_code(&o, 125, "unknown name");
        assert_eq!(
            stderr(&o),
            "stockade: --profile: \"nosuch\": no such profile (built-in: minimal, shell, python, strict; or give a path to a .toml file)\n"
        );
        let o = common::run(who, &["--profile", "/nonexistent/p.toml"], &["true"]);
        expect_code(&o, 125, "missing file");
        assert_eq!(
            stderr(&o),
            "stockade: --profile: /nonexistent/p.toml: cannot read profile: no such file\n"
        );
    }
    let secret = write(&s, "secret.toml", "");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = common::run(Who::Nobody, &["--profile", &secret], &["true"]);
    if common::is_root() {
        expect_code(&o, 125, "unreadable file");
        assert_eq!(
            stderr(&o),
            format!("stockade: --profile: {secret}: cannot read profile: permission denied\n")
        );
    }
}

#[test]
fn profile_file_sets_every_kind_of_field_and_extends_a_builtin() {
    let s = Scratch::new("fullprof");
    let data = s.join("data.txt");
    std::fs::write(&data, "from the host\n").unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).unwrap();
    let prof = write(
        &s,
        "svc.toml",
        r#"
extends = "shell"
hostname = "svcbox"
uid = 2000
gid = 2001

[filesystem]
ro = ["${PROFILE_DIR}/data.txt:/srv/data.txt"]
tmpfs = [{ path = "/scratch", size = "1m", mode = "0700" }]
symlink = [{ target = "/srv/data.txt", link = "/etc/data-link" }]
file = [{ path = "/etc/app.conf", content = "level = 3\n", mode = "0640" }]

[environment]
set = { APP_MODE = "batch", APP_HOME = "${WORKDIR}/app" }

[limits]
max_open_files = 77
max_file_size = "1m"
"#,
    );
    let script = "hostname; id -u; id -g; cat /srv/data.txt /etc/data-link /etc/app.conf; \
                  stat -c '%a' /etc/app.conf; df -k /scratch | tail -1 | awk '{print $2}'; \
                  echo $APP_MODE $APP_HOME; ulimit -n; ulimit -f";
    for who in common::users("profile_file_sets_every_kind_of_field_and_extends_a_builtin") {
        let o = common::run(who, &["--profile", &prof], &["sh", "-c", script]);
        expect_code(&o, 0, "full profile");
        assert_eq!(
            stdout(&o),
            "svcbox\n2000\n2001\nfrom the host\nfrom the host\nlevel = 3\n640\n1024\nbatch /work/app\n77\n2048\n"
        );
    }
}

#[test]
fn cli_flags_override_profile_fields() {
    let s = Scratch::new("override");
    let prof = write(
        &s,
        "p.toml",
        "hostname = \"fromprofile\"\nnetwork = \"host\"\n[limits]\nmax_open_files = 50\n[environment]\nset = { WHO = \"profile\" }\n",
    );
    for who in common::users("cli_flags_override_profile_fields") {
        let o = common::run(
            who,
            &["--profile", &prof, "--hostname", "fromcli", "--network", "none", "--max-open-files", "60", "--setenv", "WHO=cli"],
            &["sh", "-c", "hostname; ulimit -n; echo $WHO; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"],
        );
        expect_code(&o, 0, "override");
        assert_eq!(stdout(&o), "fromcli\n60\ncli\nlo\n");
        let o = common::run(
            who,
            &["--profile", &prof],
            &["sh", "-c", "hostname; ulimit -n; echo $WHO"],
        );
        expect_code(&o, 0, "profile values");
        assert_eq!(stdout(&o), "fromprofile\n50\nprofile\n");
    }
}

#[test]
fn profile_list_and_show_and_check() {
    let o = profile_cmd(Who::Root, &["list"]);
    expect_code(&o, 0, "list");
    let names: Vec<String> = stdout(&o)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(names, ["minimal", "shell", "python", "strict"]);
    assert!(stdout(&o).lines().nth(1).unwrap().ends_with("(default)"));

    let o = profile_cmd(
        Who::Root,
        &["show", "strict", "--python", "/usr/bin/python3"],
    );
    expect_code(&o, 0, "show strict");
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "# profile: profiles/shell.toml <- profiles/python.toml <- profiles/strict.toml\n"
        ),
        "{out}"
    );
    assert!(out.contains("python: /usr/bin/python3"), "{out}");
    assert!(
        out.contains("  ro /usr                             <- /usr\n"),
        "{out}"
    );
    assert!(out.contains("  action: kill\n"), "{out}");
    let n: usize = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("syscalls allowed: "))
        .expect("syscall count")
        .parse()
        .unwrap();
    assert!(n > 50, "{out}");
    assert!(out.contains("require: userns landlock seccomp\n"), "{out}");
    assert!(out.contains("max_open_files: 1024"), "{out}");

    for name in ["minimal", "shell", "python", "strict"] {
        let o = profile_cmd(Who::Root, &["show", name, "--python", "/usr/bin/python3"]);
        expect_code(&o, 0, name);
    }
    let s = Scratch::new("chk");
    let good = write(
        &s,
        "good.toml",
        "extends = \"python\"\n[limits]\ntimeout = \"5s\"\n",
    );
    let o = profile_cmd(Who::Nobody, &["check", &good]);
    expect_code(&o, 0, "check good");
    assert_eq!(
        stdout(&o),
        format!("{good}: ok (profiles/shell.toml <- profiles/python.toml <- {good})\n")
    );
}

#[test]
fn run_help_states_the_default_profile() {
    let o = common::stockade(Who::Root)
        .args(["run", "--help"])
        .output()
        .unwrap();
    expect_code(&o, 0, "help");
    let out = stdout(&o);
    assert!(
        out.contains("Without --profile the `shell` profile is used"),
        "{out}"
    );
    assert!(out.contains("--profile <NAME|FILE>"), "{out}");
}

#[test]
fn minimal_profile_runs_a_static_binary_and_nothing_else() {
    let bin = common::c_payload("prof_static");
    for who in common::users("minimal_profile_runs_a_static_binary_and_nothing_else") {
        let bind = format!("{}:/tool", bin.display());
        let o = common::run(
            who,
            &["--profile", "minimal", "--ro-bind", &bind],
            &["/tool"],
        );
        expect_code(&o, 0, "minimal");
        assert_eq!(
            stdout(&o),
            "usr:ENOENT bin:ENOENT lib:ENOENT sh:ENOENT passwd:ok\n"
        );
        // And a dynamic program cannot start there.
        let o = common::run(who, &["--profile", "minimal"], &["/bin/sh", "-c", "true"]);
        assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    }
}
