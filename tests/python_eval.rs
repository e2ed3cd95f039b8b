//! The `python` profile: evaluator code runs with JSON in and out, and the
//! escapes language-level sandboxes try to stop are contained by the jail —
//! the code runs, the effect fails.

mod common;

use common::{expect_code, report, run_stdin, run_stdin_env, stderr, stdout, Scratch, Who};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Run a Python program under the python profile (plus `flags`).
fn py(who: Who, flags: &[&str], prog: &str, env: &[(&str, &str)]) -> Output {
    let s = Scratch::new("pyprog");
    let f = s.join("prog.py");
    std::fs::write(&f, prog).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bind = format!("{}:/opt/prog.py", f.display());
    let mut all = vec!["--profile", "python", "--ro-bind", &bind];
    all.extend_from_slice(flags);
    run_stdin_env(who, &all, &["python3", "/opt/prog.py"], b"", env)
}

#[test]
fn evaluator_corpus_passes_under_python_and_strict_profiles() {
    let (expected, input) = common::evaluator_cases();
    for who in common::users("evaluator_corpus_passes_under_python_and_strict_profiles") {
        let s = Scratch::new("corpus");
        let d = s.join("eval");
        common::copy_evaluators(&d);
        let bind = format!("{}:/eval", d.display());
        for profile in ["python", "strict"] {
            for (name, score) in expected.as_object().unwrap() {
                let prog = format!("/eval/{name}.py");
                let o = run_stdin(
                    who,
                    &["--profile", profile, "--report", "-", "--ro-bind", &bind],
                    &["python3", &prog],
                    &input,
                );
                let what = format!("{profile}/{name} as {who:?}");
                expect_code(&o, 0, &what);
                let (r, v) = common::evaluator_result(&o, &what);
                assert_eq!(v["evaluator"], name.as_str(), "{what}: {v}");
                assert_eq!(v["score"], *score, "{what}: {v}");
                assert_eq!(r["layers"]["seccomp"]["state"], "applied", "{what}");
                assert_eq!(r["layers"]["landlock"]["state"], "applied", "{what}");
            }
        }
    }
}

#[test]
fn python_profile_has_no_network_no_host_home_and_writes_only_to_work_and_tmp() {
    let prog = r#"
import os
def w(p):
    try:
        open(p, "w").write("x"); return "ok"
    except OSError as e:
        return type(e).__name__
print("work", w("/work/f"), "tmp", w("/tmp/f"), "root", w("/f"), "usr", w("/usr/f"), "etc", w("/etc/f"))
print("home", os.environ.get("HOME"), "rootdir", sorted(os.listdir("/root")) if os.path.isdir("/root") else "absent")
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/self/net/dev").readlines()[2:]))
"#;
    for who in
        common::users("python_profile_has_no_network_no_host_home_and_writes_only_to_work_and_tmp")
    {
        let o = py(who, &[], prog, &[]);
        expect_code(&o, 0, "probe");
        let out = stdout(&o);
        assert!(out.starts_with("work ok tmp ok root "), "{out}");
        for l in out.lines().filter(|l| l.starts_with("work ")) {
            for part in ["root", "usr", "etc"] {
                let v = l
                    .split(&format!("{part} "))
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap();
                assert_ne!(v, "ok", "{part} was writable: {l}");
            }
        }
        assert!(out.contains("home /work rootdir absent"), "{out}");
        assert!(out.contains("ifaces ['lo']"), "{out}");
    }
}

#[test]
fn os_system_cannot_read_etc_shadow() {
    let prog = r#"
import os
rc = os.system("cat /etc/shadow")
print("rc", rc)
"#;
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let first = shadow.lines().next().unwrap_or("root:").to_string();
    for who in common::users("os_system_cannot_read_etc_shadow") {
        let o = py(who, &[], prog, &[]);
        expect_code(&o, 0, "os.system");
        let out = stdout(&o);
        let rc: i32 = out
            .lines()
            .find_map(|l| l.strip_prefix("rc "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_ne!(rc, 0, "cat /etc/shadow succeeded: {out}");
        assert!(
            !out.contains(&first) && !out.contains("root:"),
            "shadow content leaked: {out}"
        );
        assert!(stderr(&o).contains("/etc/shadow"), "{}", stderr(&o));
    }
}

#[test]
fn open_etc_shadow_fails() {
    let prog = r#"
try:
    print("read", open("/etc/shadow").read())
except OSError as e:
    print("error", type(e).__name__, e.errno)
"#;
    for who in common::users("open_etc_shadow_fails") {
        let o = py(who, &[], prog, &[]);
        expect_code(&o, 0, "open");
        let out = stdout(&o);
        assert!(out.starts_with("error FileNotFoundError 2"), "{out}");
    }
}

#[test]
fn subprocess_cannot_write_to_usr() {
    let prog = r#"
import subprocess
r = subprocess.run(["sh", "-c", "echo pwned > /usr/stockade-pwned; echo pwned > /usr/lib/stockade-pwned"], capture_output=True, text=True)
print("rc", r.returncode)
print("err", r.stderr.strip().replace("\n", " | "))
"#;
    for who in common::users("subprocess_cannot_write_to_usr") {
        let o = py(who, &[], prog, &[]);
        expect_code(&o, 0, "subprocess");
        let out = stdout(&o);
        assert!(out.contains("rc 2") || out.contains("rc 1"), "{out}");
        assert!(
            out.contains("Read-only file system") || out.contains("Permission denied"),
            "{out}"
        );
        assert!(!Path::new("/usr/stockade-pwned").exists());
        assert!(!Path::new("/usr/lib/stockade-pwned").exists());
    }
}

#[test]
fn socket_connect_to_host_listener_fails() {
    for who in common::users("socket_connect_to_host_listener_fails") {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let prog = format!(
            r#"
import socket
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", {port}))
    print("connected")
except OSError as e:
    print("refused", type(e).__name__, e.errno)
"#
        );
        let o = py(who, &[], &prog, &[]);
        expect_code(&o, 0, "connect");
        let out = stdout(&o);
        assert!(out.starts_with("refused"), "{out}");
        match l.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the host listener saw a connection: {other:?}"),
        }
    }
}

#[test]
fn ctypes_mount_ptrace_unshare_get_eperm() {
    let prog = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *a):
    ctypes.set_errno(0)
    r = getattr(libc, name)(*a)
    print(name, r, ctypes.get_errno())
call("mount", b"none", b"/tmp", b"tmpfs", 0, None)
call("unshare", 0x10000000 | 0x00020000)
call("ptrace", 16, 1, None, None)
"#;
    for who in common::users("ctypes_mount_ptrace_unshare_get_eperm") {
        let o = py(who, &[], prog, &[]);
        expect_code(&o, 0, "ctypes");
        let out = stdout(&o);
        for name in ["mount", "unshare", "ptrace"] {
            assert!(
                out.contains(&format!("{name} -1 1\n")),
                "{name} did not fail with EPERM: {out}"
            );
        }
    }
}

#[test]
fn secrets_in_stockades_environment_do_not_reach_the_code() {
    let prog = r#"
import os
print("env", "SECRET" in os.environ, any("canary-5af2" in v for v in os.environ.values()))
for p in ("/proc/self/environ", "/proc/1/environ"):
    try:
        print(p, b"canary-5af2" in open(p, "rb").read())
    except OSError as e:
        print(p, type(e).__name__)
"#;
    for who in common::users("secrets_in_stockades_environment_do_not_reach_the_code") {
        let o = py(who, &[], prog, &[("SECRET", "canary-5af2")]);
        expect_code(&o, 0, "environ");
        let out = stdout(&o);
        assert!(out.contains("env False False"), "{out}");
        assert!(out.contains("/proc/self/environ False"), "{out}");
        assert!(
            out.contains("/proc/1/environ False")
                || out.contains("/proc/1/environ PermissionError"),
            "{out}"
        );
        assert!(!out.contains("True"), "{out}");
    }
}

#[test]
fn subclasses_gadget_runs_but_cannot_read_the_canary() {
    for who in common::users("subclasses_gadget_runs_but_cannot_read_the_canary") {
        let s = Scratch::new("canary");
        let canary = s.join("canary.txt");
        std::fs::write(&canary, "canary-91c3\n").unwrap();
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o644)).unwrap();
        let prog = format!(
            r#"
found = []
for c in ().__class__.__bases__[0].__subclasses__():
    if c.__name__ == "_wrap_close":
        system = c.__init__.__globals__["system"]
        found.append("os._wrap_close")
        print("system rc", system("cat {path}"))
    if c.__name__ == "Popen" and c.__module__ == "subprocess":
        found.append("subprocess.Popen")
if not any(c.__name__ == "Popen" for c in ().__class__.__bases__[0].__subclasses__()):
    import subprocess
for c in ().__class__.__bases__[0].__subclasses__():
    if c.__name__ == "Popen" and c.__module__ == "subprocess":
        p = c(["cat", "{path}"], stdout=-1, stderr=-1)
        out, err = p.communicate()
        print("popen rc", p.returncode, out)
print("found", found)
"#,
            path = canary.display()
        );
        let o = py(who, &[], &prog, &[]);
        expect_code(&o, 0, "gadget");
        let out = stdout(&o);
        assert!(
            out.contains("found ['os._wrap_close'"),
            "gadget did not reach os: {out}"
        );
        assert!(out.contains("popen rc 1 b''"), "{out}");
        let rc: i32 = out
            .lines()
            .find_map(|l| l.strip_prefix("system rc "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_ne!(rc, 0, "{out}");
        assert!(
            !out.contains("canary-91c3") && !stderr(&o).contains("canary-91c3"),
            "{out}"
        );
    }
}

/// A local package: src layout (a .pth path) when `finder` is false, a
/// renamed package directory (an `__editable___*_finder` MAPPING) when true.
fn write_project(dir: &Path, name: &str, finder: bool) {
    let pkg_dir = if finder {
        dir.join("code").join("impl_dir")
    } else {
        dir.join("src").join(name)
    };
    std::fs::create_dir_all(&pkg_dir).unwrap();
    std::fs::write(
        pkg_dir.join("__init__.py"),
        format!("def hello():\n    return '{name} says hi'\n"),
    )
    .unwrap();
    let pkg_map = if finder {
        format!("package-dir = {{ \"{name}\" = \"code/impl_dir\" }}\npackages = [\"{name}\"]\n")
    } else {
        "package-dir = { \"\" = \"src\" }\n".to_string()
    };
    std::fs::write(
        dir.join("pyproject.toml"),
        format!(
            "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1\"\n\n[tool.setuptools]\n{pkg_map}"
        ),
    )
    .unwrap();
}

#[test]
fn venv_with_editable_and_regular_installs_works() {
    let s = Scratch::new("venv");
    let venv = s.join("venv");
    for (name, finder) in [
        ("evalsrc", false),
        ("evalfinder", true),
        ("evalplain", false),
    ] {
        write_project(&s.join(name), name, finder);
    }
    common::host_sh_ok(&format!(
        "cd {d} && /usr/bin/python3 -m venv --system-site-packages venv && \
         venv/bin/pip install -q --no-index --no-build-isolation -e ./evalsrc -e ./evalfinder ./evalplain && \
         chmod -R a+rX {d}",
        d = s.path().display()
    ));
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    let finders: Vec<_> = std::fs::read_dir(&site)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("__editable___") && n.ends_with("_finder.py"))
        .collect();
    assert!(
        !finders.is_empty(),
        "setuptools made no editable finder in {}",
        site.display()
    );
    let prog = r#"
import sys, evalsrc, evalfinder, evalplain
print(evalsrc.hello(), "|", evalfinder.hello(), "|", evalplain.hello())
print("prefix", sys.prefix, sys.prefix != sys.base_prefix)
print("files", evalsrc.__file__, evalfinder.__file__)
"#;
    let py_path = venv.join("bin/python3");
    for who in common::users("venv_with_editable_and_regular_installs_works") {
        let o = py(who, &["--python", py_path.to_str().unwrap()], prog, &[]);
        expect_code(&o, 0, "venv");
        let out = stdout(&o);
        assert!(
            out.contains("evalsrc says hi | evalfinder says hi | evalplain says hi"),
            "{out}"
        );
        assert!(
            out.contains(&format!("prefix {} True", venv.display())),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "{}/evalfinder/code/impl_dir/__init__.py",
                s.path().display()
            )),
            "{out}"
        );
        // The project directories are bound read-only: the code cannot
        // change the package it was given.
        let o = py(
            who,
            &["--python", py_path.to_str().unwrap()],
            &format!(
                "try:\n    open('{}/evalsrc/src/evalsrc/__init__.py', 'a').write('x')\n    print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)\n",
                s.path().display()
            ),
            &[],
        );
        expect_code(&o, 0, "write editable");
        let out = stdout(&o);
        assert!(
            out.starts_with("refused 30") || out.starts_with("refused 13"),
            "{out}"
        );
        let src = std::fs::read_to_string(s.join("evalsrc/src/evalsrc/__init__.py")).unwrap();
        assert!(!src.ends_with('x'), "the package was modified");
    }
    // Also through the venv's bin on PATH, without --python.
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        venv.join("bin").display()
    );
    for who in common::users("venv_with_editable_and_regular_installs_works") {
        let o = py(
            who,
            &[],
            "import evalfinder; print(evalfinder.hello())",
            &[("PATH", &path)],
        );
        expect_code(&o, 0, "venv via PATH");
        assert_eq!(stdout(&o), "evalfinder says hi\n");
    }
}

#[test]
fn debian_system_python_works() {
    for who in common::users("debian_system_python_works") {
        let o = py(
            who,
            &["--python", "/usr/bin/python3", "--report", "-"],
            "import sys, json; print(json.dumps({'exe': sys.executable, 'prefix': sys.prefix}))",
            &[],
        );
        expect_code(&o, 0, "debian python");
        let r = report(&o);
        let out: serde_json::Value =
            serde_json::from_str(r["stdout"]["data"].as_str().unwrap().trim()).unwrap();
        assert_eq!(out["prefix"], "/usr", "{out}");
        assert!(
            out["exe"].as_str().unwrap().starts_with("/usr/bin/python3"),
            "{out}"
        );
    }
}

const PYENV: &str = "/root/.pyenv/versions/3.12.1/bin/python3";

#[test]
fn pyenv_interpreter_under_private_home_runs_for_root_and_is_a_clear_error_rootless() {
    if !Path::new("/root/.pyenv/versions/3.12.1").exists() && !common::is_root() {
        common::skip(
            "pyenv_interpreter_under_private_home_is_a_clear_error",
            "no pyenv 3.12.1 visible here",
        );
        return;
    }
    if !common::is_root() {
        common::skip(
            "pyenv_interpreter_under_private_home_is_a_clear_error",
            "needs root to see /root/.pyenv",
        );
        return;
    }
    let mode = std::fs::metadata("/root").unwrap().permissions().mode() & 0o777;
    if mode & 0o001 != 0 {
        common::skip(
            "pyenv_interpreter_under_private_home_is_a_clear_error",
            "/root is searchable by others here",
        );
        return;
    }
    for who in common::users("pyenv_interpreter_under_private_home_is_a_clear_error") {
        let o = py(who, &["--python", PYENV], "print('ran')", &[]);
        if who == Who::Root {
            // Root opens the binds before the jail drops to uid 65534; what
            // is bound (the version directory) is world-readable.
            expect_code(&o, 0, "pyenv under /root, started by root");
            assert!(stdout(&o).contains("ran"), "{}", stderr(&o));
            continue;
        }
        expect_code(&o, 125, "pyenv under /root, rootless");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.starts_with("stockade: --python: "), "{e}");
        assert!(
            e.contains("/root (mode 0700, owner uid 0) is not searchable by uid 65534"),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
        assert!(!stdout(&o).contains("ran"));
    }
}

#[test]
fn pyenv_shim_and_interpreter_work_when_reachable() {
    if !common::is_root() {
        common::skip(
            "pyenv_shim_and_interpreter_work_when_reachable",
            "needs root for a private mount namespace",
        );
        return;
    }
    if !Path::new(PYENV).exists() || !Path::new("/root/.pyenv/shims/python3").exists() {
        common::skip(
            "pyenv_shim_and_interpreter_work_when_reachable",
            "no pyenv 3.12.1 and shims on this host",
        );
        return;
    }
    // The real pyenv tree, unchanged and at its real path, in a mount
    // namespace where /root is searchable (as a home that is not 0700, or
    // a PYENV_ROOT outside /root, would be).
    let bin = common::binary();
    let script = format!(
        "mount --make-rprivate / && hold=$(mktemp -d) && mount --bind /root/.pyenv \"$hold\" && \
         mount -t tmpfs -o mode=0755 none /root && mkdir /root/.pyenv && mount --move \"$hold\" /root/.pyenv && \
         echo '{{\"n\": 3}}' | PYENV_VERSION=3.12.1 PATH=/root/.pyenv/shims:/usr/bin:/bin {bin} run --profile python --report - -- \
           python3 -c 'import sys, json; print(sys.version.split()[0], sys.executable, json.load(sys.stdin)[\"n\"] * 2)' && \
         echo '{{\"n\": 4}}' | setpriv --reuid 65534 --regid 65534 --clear-groups env PATH=/usr/bin:/bin {bin} run --profile python --python {PYENV} -- \
           python3 -c 'import sys, json; print(sys.version.split()[0], sys.executable, json.load(sys.stdin)[\"n\"] * 2)'",
        bin = bin.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    expect_code(&o, 0, "pyenv in a private mount namespace");
    let out = stdout(&o);
    let mut parts = out.splitn(2, '\n');
    let report: serde_json::Value = serde_json::from_str(parts.next().unwrap()).unwrap();
    assert_eq!(
        report["stdout"]["data"],
        format!("3.12.1 {PYENV} 6\n"),
        "the shim did not resolve to the pyenv interpreter: {report}"
    );
    assert_eq!(
        parts.next().unwrap(),
        format!("3.12.1 {PYENV} 8\n"),
        "rootless: {out}"
    );
}

#[test]
fn profile_show_python_lists_the_interpreters_binds() {
    let s = Scratch::new("venvshow");
    common::host_sh_ok(&format!(
        "cd {} && /usr/bin/python3 -m venv --without-pip v && chmod -R a+rX .",
        s.path().display()
    ));
    let v = s.join("v");
    let o = common::stockade(Who::Root)
        .args(["profile", "show", "python", "--python"])
        .arg(v.join("bin/python3"))
        .output()
        .unwrap();
    expect_code(&o, 0, "profile show python");
    let out = stdout(&o);
    assert!(
        out.contains(&format!("python: {}/bin/python3", v.display())),
        "{out}"
    );
    assert!(out.contains(", venv)"), "{out}");
    assert!(
        out.contains(&format!("  ro {:<32} <- {}", v.display(), v.display())),
        "{out}"
    );
    assert!(out.contains(&format!("PATH={}/bin:", v.display())), "{out}");
}
