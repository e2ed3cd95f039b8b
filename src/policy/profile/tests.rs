//! Unit tests of profile parsing, application and resolution.

use std::path::PathBuf;

use super::apply::apply;
use super::defaults::{default_lines, defaults_only, resolve_defaults_only};
use super::source::{line_col, parse};
use super::*;
use crate::policy::python::PythonError;
use crate::policy::{Layer, MountSpec, Network, SeccompAction};

fn src(text: &str) -> Source {
    Source {
        shown: "profiles/x.toml".into(),
        text: text.into(),
        dir: Some("/tmp".into()),
    }
}

/// For profiles that discover no interpreter: never called.
fn no_python(p: &std::path::Path) -> Result<Interpreter, PythonError> {
    panic!("{}: no interpreter should be discovered", p.display())
}

fn apply_text(text: &str) -> Result<Policy, PolicyError> {
    let s = src(text);
    let raw = parse(&s)?;
    let vars = Vars {
        workdir: "/work".into(),
        profile_dir: s.dir.clone(),
        python: None,
    };
    let mut p = Policy::with_defaults(Vec::new());
    let mut m = Vec::new();
    let mut sys = true;
    apply(
        &Ctx {
            src: &s,
            vars: &vars,
        },
        &raw,
        &mut p,
        &mut m,
        &mut sys,
    )?;
    p.mounts = m;
    Ok(p)
}

#[test]
fn bad_size_names_file_line_column_and_field() {
    let e = apply_text("hostname = \"h\"\n\n[limits]\n  memory = \"12q\"\n").unwrap_err();
    assert_eq!(e.to_string(), "profiles/x.toml:4:12: limits.memory: \"12q\" is not a size (examples: 4096, 512k, 64m, 1g)");
}

#[test]
fn zero_and_negative_limits_name_file_line_column_and_field() {
    for (line, field, shown) in [
        ("memory = 0", "limits.memory", "0"),
        ("memory = \"0m\"", "limits.memory", "\"0m\""),
        ("memory_high = 0", "limits.memory_high", "0"),
        ("timeout = \"0s\"", "limits.timeout", "\"0s\""),
        ("timeout = 0", "limits.timeout", "0"),
        ("cpu_time = 0.0", "limits.cpu_time", "0"),
        ("pids = 0", "limits.pids", "0"),
        ("max_open_files = 0", "limits.max_open_files", "0"),
        ("max_output = 0", "limits.max_output", "0"),
        ("max_file_size = \"0k\"", "limits.max_file_size", "\"0k\""),
    ] {
        let e = apply_text(&format!("[limits]\n{line}\n"))
            .unwrap_err()
            .to_string();
        let col = line.find('=').unwrap() + 3;
        assert_eq!(
            e,
            format!("profiles/x.toml:2:{col}: {field}: {shown}: must be greater than 0 (leave the limit out for none)"),
            "{line}"
        );
    }
    for line in [
        "memory = -5",
        "memory = \"-5m\"",
        "timeout = -1",
        "pids = -1",
        "cpus = -1",
        "cpus = 0",
    ] {
        let e = apply_text(&format!("[limits]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("profiles/x.toml:2:"), "{line}: {e}");
        assert!(e.contains(" is not a "), "{line}: {e}");
    }
    let e = apply_text("[limits]\ntmp_size = 0\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "profiles/x.toml:2:12: limits.tmp_size: 0: must be greater than 0"
    );
    // 0 is meaningful for grace: SIGKILL right at the deadline.
    let p = apply_text("[limits]\ngrace = 0\n").unwrap();
    assert_eq!(p.limits.grace, std::time::Duration::ZERO);
}

#[test]
fn wrong_types_are_named_in_the_profile_words_without_rust_types() {
    for (text, want) in [
        (
            "\n\nlimits = 5\n",
            "profiles/x.toml:3:10: limits: expected a table, got an integer (5)",
        ),
        (
            "limits = \"x\"\n",
            "profiles/x.toml:1:10: limits: expected a table, got a string (\"x\")",
        ),
        (
            "filesystem = []\n",
            "profiles/x.toml:1:14: filesystem: expected a table, got an array",
        ),
        (
            "[[limits]]\nmemory = 1\n",
            "profiles/x.toml:1:1: limits: expected a table ([limits]), got an array of tables ([[limits]])",
        ),
        (
            "uid = -1\n",
            "profiles/x.toml:1:7: uid: expected a whole number from 0 to 4294967295, got an integer (-1)",
        ),
        (
            "uid = 1.5\n",
            "profiles/x.toml:1:7: uid: expected a whole number from 0 to 4294967295, got a float (1.5)",
        ),
        (
            "require = \"seccomp\"\n",
            "profiles/x.toml:1:11: require: expected an array, got a string (\"seccomp\")",
        ),
        (
            "[filesystem]\nbind = [1]\n",
            "profiles/x.toml:2:9: filesystem.bind: expected a table, got an integer (1)",
        ),
        (
            "[seccomp]\nenabled = \"yes\"\n",
            "profiles/x.toml:2:11: seccomp.enabled: expected true or false, got a string (\"yes\")",
        ),
        (
            "[environment]\nset = 5\n",
            "profiles/x.toml:2:7: environment.set: expected a table, got an integer (5)",
        ),
        (
            "[limits]\nmemory = true\n",
            "profiles/x.toml:2:10: limits.memory: expected a number or a string (a size such as \"64m\", a duration such as \"10s\")",
        ),
    ] {
        let e = apply_text(text).unwrap_err().to_string();
        assert_eq!(e, want, "{text:?}");
    }
    for text in [
        "python = 1\n",
        "namespaces = 1\n",
        "workdir = 1\n",
        "landlock = []\n",
        "[workdir]\nsize = {}\n",
        "[filesystem]\ntmpfs = [{ path = \"/x\", size = true }]\n",
        "[filesystem]\nsymlink = [\"x\"]\n",
        "[filesystem]\nfile = [[]]\n",
        "host_uid = \"x\"\n",
    ] {
        let e = apply_text(text).unwrap_err().to_string();
        for leak in ["Raw", "Scalar", "struct", "u32", "untagged", "\n"] {
            assert!(!e.contains(leak), "{text:?}: {e}");
        }
    }
}

#[test]
fn unknown_field_is_an_error_with_its_place() {
    let e = apply_text("[limits]\nmemry = \"1g\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("profiles/x.toml:2:1: limits.memry: unknown field `memry`"),
        "{e}"
    );
    let e = apply_text("[limitz]\n").unwrap_err().to_string();
    assert!(
        e.starts_with("profiles/x.toml:1:2: limitz: unknown field `limitz`"),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

#[test]
fn variables_expand_and_unknown_ones_fail() {
    let p = apply_text("[filesystem]\nro = [\"${PROFILE_DIR}:${WORKDIR}/data\"]\n").unwrap();
    assert_eq!(
        p.mounts,
        vec![MountSpec::Bind {
            src: "/tmp".into(),
            dst: "/work/data".into(),
            writable: false,
            optional: false
        }]
    );
    let e = apply_text("[environment]\nset = { A = \"${NOPE}\" }\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "profiles/x.toml:2:13: environment.set.A: \"${NOPE}\": ${NOPE}: unknown variable"
        ),
        "{e}"
    );
}

#[test]
fn every_section_applies() {
    let p = apply_text(
        r#"
uid = 0
hostname = "box"
network = "host"
require = ["landlock", "seccomp"]
[filesystem]
rw = ["/tmp:/out"]
tmpfs = [{ path = "/scratch", size = "8m", mode = "0700" }]
symlink = [{ target = "/usr/bin/python3", link = "/bin/py" }]
file = [{ path = "/etc/app.conf", content = "a=1\n" }]
[environment]
set = { LANG = "C.UTF-8" }
[limits]
memory = "256m"
cpus = 1
pids = 64
timeout = "10s"
cpu_time = 5
tmp_size = "16m"
[seccomp]
groups = ["@default", "@network-io"]
allow = ["ptrace"]
action = "kill"
[landlock]
exclude = ["/out/secret"]
"#,
    )
    .unwrap();
    assert_eq!(p.uid, 0);
    assert_eq!(p.hostname, "box");
    assert_eq!(p.network, Network::Host);
    assert_eq!(p.require, vec![Layer::Landlock, Layer::Seccomp]);
    assert_eq!(p.mounts.len(), 4);
    assert_eq!(
        p.mounts[1],
        MountSpec::Tmpfs {
            dst: "/scratch".into(),
            size: 8 << 20,
            mode: 0o700
        }
    );
    assert_eq!(p.limits.memory, Some(256 << 20));
    assert_eq!(p.limits.cpus, Some(1.0));
    assert_eq!(p.limits.pids, Some(64));
    assert_eq!(p.limits.timeout, Some(std::time::Duration::from_secs(10)));
    assert_eq!(p.limits.cpu_time, Some(std::time::Duration::from_secs(5)));
    assert_eq!(p.tmp_size, 16 << 20);
    assert_eq!(p.seccomp.groups, vec!["@default", "@network-io"]);
    assert_eq!(p.seccomp.allow, vec!["ptrace"]);
    assert_eq!(p.seccomp.action, SeccompAction::Kill);
    assert_eq!(p.landlock.exclude, vec![PathBuf::from("/out/secret")]);
    assert!(p.env.iter().any(|(k, v)| k == "LANG" && v == "C.UTF-8"));
}

#[test]
fn builtins_parse() {
    for (name, text) in BUILTIN {
        let s = Source {
            shown: format!("profiles/{name}.toml"),
            text: text.to_string(),
            dir: None,
        };
        parse(&s).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// [`defaults_only`] with the lines of today's defaults.
fn only(text: &str) -> Option<&str> {
    defaults_only(text, &default_lines(&Policy::with_defaults(Vec::new())))
}

#[test]
fn default_profile_skips_the_parser_and_resolves_the_same() {
    let shell = builtin(DEFAULT_PROFILE).unwrap();
    assert!(
        only(shell).is_some(),
        "profiles/{DEFAULT_PROFILE}.toml no longer only restates the defaults: \
         teach default_lines the new line or accept the parser's cost"
    );
    for opts in [
        Options::default(),
        Options {
            python: None,
            workdir_inner: Some("/home/agent".into()),
        },
    ] {
        let fast = resolve_defaults_only(DEFAULT_PROFILE, &opts).unwrap();
        assert_eq!(
            format!("{fast:?}"),
            format!(
                "{:?}",
                resolve_parsed(DEFAULT_PROFILE, "--profile", &opts, &no_python).unwrap()
            )
        );
    }
    let with_python = Options {
        python: Some("python3".into()),
        workdir_inner: None,
    };
    assert!(resolve_defaults_only(DEFAULT_PROFILE, &with_python).is_none());
    for (name, text) in BUILTIN {
        if only(text).is_some() {
            let fast = resolve_defaults_only(name, &Options::default()).unwrap();
            let slow = resolve_parsed(name, "--profile", &Options::default(), &no_python).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{name}");
        }
    }
}

#[test]
fn every_default_line_is_the_default() {
    let base = apply_text("").unwrap();
    for (table, line) in default_lines(&Policy::with_defaults(Vec::new())) {
        let text = if table.is_empty() {
            format!("{line}\n")
        } else {
            format!("[{table}]\n{line}\n")
        };
        assert!(only(&format!("description = \"d\"\n{text}")).is_some());
        let p = apply_text(&text).unwrap();
        assert_eq!(format!("{p:?}"), format!("{base:?}"), "{text}");
    }
}

#[test]
fn anything_else_takes_the_parser() {
    for text in [
        "description = \"d\"\nnetwork = \"host\"\n",
        "description = \"d\"\nsystem = true\n",
        "description = \"d\"\n[filesystem]\nsystem = false\n",
        "description = \"d\"\n[seccomp]\n[seccomp]\n",
        "description = \"d\"\nnetwork = \"none\"\nnetwork = \"none\"\n",
        "description = \"a\\\"b\"\n",
        "description = \"d\" # x\n",
        "description = \"\"\"\nd\n\"\"\"\n",
        "[limits]\ndescription = \"d\"\n",
        "network = \"none\"\n",
        "extends = \"shell\"\ndescription = \"d\"\n",
    ] {
        assert!(only(text).is_none(), "{text:?}");
    }
}

#[test]
fn line_col_counts_from_one() {
    assert_eq!(line_col("a\nbc", 0), (1, 1));
    assert_eq!(line_col("a\nbc", 3), (2, 2));
}

#[test]
fn errors_say_their_kind_and_keep_their_text() {
    use crate::policy::units::UnitError;
    use crate::policy::{PathError, PolicyError, Reason};
    let e = apply_text("[limits]\nmemory = \"12q\"\n").unwrap_err();
    assert!(
        matches!(&e, PolicyError::Field { at, field, .. } if at == "profiles/x.toml:2:10" && field == "limits.memory"),
        "{e:?}"
    );
    let e = resolve("nope", "--profile", &Options::default(), &no_python).unwrap_err();
    assert_eq!(
        e.reason(),
        &Reason::UnknownProfile {
            name: "nope".into()
        }
    );
    assert_eq!(e.origin(), "--profile");
    assert_eq!(
        e.to_string(),
        "--profile: \"nope\": no such profile (built-in: minimal, shell, python, strict; or give a path to a .toml file)"
    );
    let e = resolve(
        "/nonexistent/x.toml",
        "--profile",
        &Options::default(),
        &no_python,
    )
    .unwrap_err();
    assert!(
        matches!(e.reason(), Reason::ProfileUnreadable { kind, .. } if *kind == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "--profile: /nonexistent/x.toml: cannot read profile: no such file"
    );
    let e = crate::policy::jail_path("--chdir", std::path::Path::new("rel")).unwrap_err();
    assert_eq!(
        e.reason(),
        &Reason::Path(PathError::NotAbsolute("rel".into()))
    );
    assert_eq!(
        e.to_string(),
        "--chdir: rel: path inside the jail must be absolute"
    );
    let e = PolicyError::value("--memory", UnitError::Zero("0".into()));
    assert_eq!(
        e.to_string(),
        "--memory: \"0\": must be greater than 0 (leave the limit out for none)"
    );
}

#[test]
fn network_table_gives_the_allowlist() {
    use crate::policy::egress::AllowHost;
    let p = apply_text(
        "[network]\nallow = [\"pypi.org\", \"*.pythonhosted.org\", \"api.example.com:443\"]\n",
    )
    .unwrap();
    assert_eq!(p.network, Network::None);
    let shown: Vec<String> = p.allow_hosts.iter().map(AllowHost::to_string).collect();
    assert_eq!(
        shown,
        ["pypi.org", "*.pythonhosted.org", "api.example.com:443"]
    );
    let p = apply_text("network = { mode = \"none\", allow = [\"10.0.0.1:8080\"] }\n").unwrap();
    assert_eq!(p.allow_hosts.len(), 1);
    let p = apply_text("network = \"host\"\n").unwrap();
    assert!(p.allow_hosts.is_empty() && p.network == Network::Host);
}

#[test]
fn network_table_errors_name_the_field_where_it_stands() {
    for (text, want) in [
        (
            "[network]\nallow = [\"pypi.org\", \"bad name\"]\n",
            "profiles/x.toml:2:22: network.allow: \"bad name\": not a host name",
        ),
        (
            "[network]\nmode = \"host\"\nallow = [\"pypi.org\"]\n",
            "profiles/x.toml:2:8: network.mode: an egress allowlist (network.allow) needs the jail's own network",
        ),
        (
            "[network]\nmode = \"wide\"\n",
            "profiles/x.toml:2:8: network.mode: \"wide\": expected \"none\" or \"loopback\" or \"host\"",
        ),
        ("[network]\nallowed = []\n", "profiles/x.toml:2:1: "),
        ("network = 3\n", "profiles/x.toml:1:11: "),
    ] {
        let e = apply_text(text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{text:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn network_loopback_is_a_mode_of_its_own() {
    let p = apply_text("network = \"loopback\"\n").unwrap();
    assert_eq!(p.network, Network::Loopback);
    assert!(p.allow_hosts.is_empty());
    // namespaces.net = true says what loopback has: a namespace of its own.
    let p = apply_text("network = \"loopback\"\n[namespaces]\nnet = true\n").unwrap();
    assert_eq!(p.network, Network::Loopback);
    let e = apply_text("network = \"loopback\"\n[namespaces]\nnet = false\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("profiles/x.toml:3:7: namespaces.net: contradicts network = \"loopback\""),
        "{e}"
    );
    for (text, want) in [
        (
            "network = \"lo\"\n",
            "profiles/x.toml:1:11: network: \"lo\": expected \"none\" or \"loopback\" or \"host\"",
        ),
        (
            "[network]\nmode = \"loopback\"\nallow = [\"pypi.org\"]\n",
            "profiles/x.toml:2:8: network.mode: an egress allowlist (network.allow) holds TCP to its proxy alone: not with \"loopback\"",
        ),
    ] {
        let e = apply_text(text).unwrap_err().to_string();
        assert_eq!(e, want, "{text:?}");
    }
}

#[test]
fn discovery_is_the_callers_and_said_where_it_was_asked() {
    let found = |p: &std::path::Path| -> Result<Interpreter, PythonError> {
        Ok(Interpreter {
            asked: p.to_path_buf(),
            executable: "/opt/py/bin/python3".into(),
            version: "3.12.1".into(),
            prefix: "/opt/py".into(),
            base_prefix: "/opt/py".into(),
            exec_prefix: "/opt/py".into(),
            base_exec_prefix: "/opt/py".into(),
            path: vec![],
            editable: vec![],
            libs: vec![],
        })
    };
    let r = resolve("python", "--profile", &Options::default(), &found).unwrap();
    let i = r.python.as_ref().unwrap();
    assert_eq!(i.asked, PathBuf::from("python3"));
    let path = r.policy.env.iter().find(|(k, _)| k == "PATH").unwrap();
    assert!(
        path.1.to_string_lossy().starts_with("/opt/py/bin:"),
        "{path:?}"
    );
    let missing = |p: &std::path::Path| -> Result<Interpreter, PythonError> {
        Err(PythonError::NoSuchFile {
            asked: p.to_path_buf(),
        })
    };
    let e = resolve("python", "--profile", &Options::default(), &missing).unwrap_err();
    assert_eq!(e.to_string(), "python: python3: no such file");
    let opts = Options {
        python: Some("/x/python3".into()),
        workdir_inner: None,
    };
    let e = resolve(DEFAULT_PROFILE, "--profile", &opts, &missing).unwrap_err();
    assert_eq!(e.to_string(), "--python: /x/python3: no such file");
}
