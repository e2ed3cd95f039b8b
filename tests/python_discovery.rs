//! How the `python` profile finds its interpreter: a pyenv shim is resolved
//! the way pyenv would without running pyenv, the interpreter's answer is
//! cached and the cache never outlives a change to the venv, and a venv whose
//! base interpreter the jail's user cannot reach is one clear line.

mod common;

use common::{expect_code, stderr, stdout, Scratch, Who, NOBODY};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn uid_of(who: Who) -> u32 {
    match who {
        Who::Root => 0,
        Who::Nobody => NOBODY,
    }
}

/// `stockade ARGS` as `who` with `env` added to the clean environment.
fn stockade(who: Who, args: &[&str], env: &[(&str, &Path)], cwd: Option<&Path>) -> Output {
    let mut c = common::stockade(who);
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.args(args).output().unwrap()
}

/// The `python:` line of `stockade profile show python`, and the read-only
/// bind sources it lists.
fn show(
    who: Who,
    extra: &[&str],
    env: &[(&str, &Path)],
    cwd: Option<&Path>,
) -> (String, Vec<String>) {
    let mut args = vec!["profile", "show", "python"];
    args.extend_from_slice(extra);
    let o = stockade(who, &args, env, cwd);
    expect_code(&o, 0, "profile show python");
    let out = stdout(&o);
    let py = out
        .lines()
        .find_map(|l| l.strip_prefix("python: "))
        .unwrap_or_else(|| panic!("no python line: {out}"))
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let binds = out
        .lines()
        .filter_map(|l| l.strip_prefix("  ro "))
        .filter_map(|l| l.split(" <- ").nth(1))
        .map(|s| s.trim().to_string())
        .collect();
    (py, binds)
}

/// Set every mtime under `d` (and `d`) to 2020, so that a run right after
/// building the fixture does not count as racing with its creation.
fn backdate(d: &Path) {
    common::host_sh_ok(&format!(
        "find {} -exec touch -h -d @1600000000 {{}} +",
        d.display()
    ));
}

fn site_packages(venv: &Path) -> PathBuf {
    std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .unwrap()
        .path()
        .join("site-packages")
}

/// The one cache file in `cache/stockade`.
fn cache_file(cache: &Path) -> PathBuf {
    let d = cache.join("stockade");
    let files: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// Rewrite the cached answer so that it also binds `marker`, keeping the
/// file's owner and mode: a run that binds `marker` used the cache.
fn poison(file: &Path, marker: &Path) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    v["interpreter"]["editable"]
        .as_array_mut()
        .unwrap()
        .push(marker.to_str().unwrap().into());
    std::fs::write(file, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// A scratch venv (from /usr/bin/python3) and a cache directory `who` owns.
fn venv_fixture(who: Who, tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let s = Scratch::new(tag);
    common::host_sh_ok(&format!(
        "cd {} && /usr/bin/python3 -m venv --without-pip v && mkdir cache marker extra && chmod -R a+rX .",
        s.path().display()
    ));
    let cache = s.join("cache");
    std::os::unix::fs::chown(&cache, Some(uid_of(who)), Some(uid_of(who))).unwrap();
    backdate(s.path());
    let venv = s.join("v");
    (s, venv, cache)
}

fn needs_root(test: &str) -> bool {
    if !common::is_root() {
        common::skip(test, "the fixture needs root (files owned by another user)");
        return false;
    }
    true
}

#[test]
fn discovery_cache_is_used_only_while_the_venv_is_unchanged() {
    let t = "discovery_cache_is_used_only_while_the_venv_is_unchanged";
    if !needs_root(t) {
        return;
    }
    for who in common::users(t) {
        let (s, venv, cache) = venv_fixture(who, "pycache");
        let py = venv.join("bin/python3");
        let py = py.to_str().unwrap();
        let env = [("XDG_CACHE_HOME", cache.as_path())];
        let marker = s.join("marker");
        let extra = s.join("extra");
        let site = site_packages(&venv);
        let show = || show(who, &["--python", py], &env, None).1;
        let has = |b: &[String], p: &Path| b.iter().any(|x| Path::new(x) == p);

        // First run: discovered, and stored private to the caller.
        let b = show();
        assert!(has(&b, &venv), "{b:?}");
        let f = cache_file(&cache);
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!(m.uid(), uid_of(who), "{who:?}");
        assert_eq!(m.mode() & 0o777, 0o600, "{who:?}");
        // The cache is what the next run uses (the poisoned answer shows).
        poison(&f, &marker);
        assert!(has(&show(), &marker), "{who:?}: the cache was not used");

        // A .pth file naming a new directory (what an editable install of a
        // src layout writes): the next run binds it, from a fresh discovery.
        std::fs::write(s.join("extra/extramod.py"), "X = 'from extra'\n").unwrap();
        chmod(&s.join("extra/extramod.py"), 0o644);
        std::fs::write(site.join("extra.pth"), format!("{}\n", extra.display())).unwrap();
        let b = show();
        assert!(has(&b, &extra), "{who:?}: .pth target not bound: {b:?}");
        assert!(
            !has(&b, &marker),
            "{who:?}: stale cache after a .pth: {b:?}"
        );
        let o = stockade(
            who,
            &[
                "run",
                "--profile",
                "python",
                "--python",
                py,
                "--",
                "python3",
                "-c",
                "import extramod; print(extramod.X)",
            ],
            &env,
            None,
        );
        expect_code(&o, 0, "import from the .pth directory");
        assert_eq!(stdout(&o), "from extra\n");

        // An editable finder (what setuptools writes for a renamed package).
        backdate(s.path());
        show();
        poison(&cache_file(&cache), &marker);
        assert!(has(&show(), &marker), "{who:?}: the cache was not used");
        let target = s.join("proj/impl");
        std::fs::create_dir_all(&target).unwrap();
        chmod(&s.join("proj"), 0o755);
        chmod(&target, 0o755);
        std::fs::write(
            site.join("__editable___proj_0_1_finder.py"),
            format!("MAPPING = {{'proj': '{}'}}\n", target.display()),
        )
        .unwrap();
        let b = show();
        assert!(has(&b, &target), "{who:?}: finder target not bound: {b:?}");
        assert!(
            !has(&b, &marker),
            "{who:?}: stale cache after a finder: {b:?}"
        );

        // pyvenv.cfg edited.
        backdate(s.path());
        show();
        poison(&cache_file(&cache), &marker);
        assert!(has(&show(), &marker), "{who:?}: the cache was not used");
        let cfg = venv.join("pyvenv.cfg");
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            text.replace(
                "include-system-site-packages = false",
                "include-system-site-packages = true",
            ),
        )
        .unwrap();
        let b = show();
        assert!(
            !has(&b, &marker),
            "{who:?}: stale cache after pyvenv.cfg: {b:?}"
        );

        // A package installed (a new directory in site-packages) and the
        // .pth removed: the directory it named is no longer bound.
        backdate(s.path());
        show();
        poison(&cache_file(&cache), &marker);
        assert!(has(&show(), &marker), "{who:?}: the cache was not used");
        std::fs::create_dir(site.join("newpkg")).unwrap();
        std::fs::remove_file(site.join("extra.pth")).unwrap();
        let b = show();
        assert!(
            !has(&b, &marker),
            "{who:?}: stale cache after install: {b:?}"
        );
        assert!(!has(&b, &extra), "{who:?}: removed .pth still bound: {b:?}");
    }
}

#[test]
fn discovery_cache_not_owned_by_the_caller_or_corrupt_is_ignored() {
    let t = "discovery_cache_not_owned_by_the_caller_or_corrupt_is_ignored";
    if !needs_root(t) {
        return;
    }
    for who in common::users(t) {
        let (s, venv, cache) = venv_fixture(who, "pycacheown");
        let py = venv.join("bin/python3");
        let py = py.to_str().unwrap();
        let env = [("XDG_CACHE_HOME", cache.as_path())];
        let marker = s.join("marker");
        let show = || show(who, &["--python", py], &env, None).1;
        let has = |b: &[String]| b.iter().any(|x| Path::new(x) == marker);

        show();
        let f = cache_file(&cache);
        // Each time: the poisoned cache is used, then not once spoilt (a
        // fresh discovery replaces it).
        let used = || {
            poison(&f, &marker);
            assert!(has(&show()), "{who:?}: the cache was not used");
        };
        // The same file owned by someone else.
        used();
        let other = if who == Who::Root { NOBODY } else { 0 };
        std::os::unix::fs::chown(&f, Some(other), Some(other)).unwrap();
        assert!(
            !has(&show()),
            "{who:?}: a cache owned by uid {other} was used"
        );
        assert_eq!(std::fs::metadata(&f).unwrap().uid(), uid_of(who));
        // Owned by the caller but writable by its group.
        used();
        chmod(&f, 0o620);
        assert!(!has(&show()), "{who:?}: a group-writable cache was used");
        // A cache directory others can write to.
        used();
        chmod(&cache.join("stockade"), 0o777);
        assert!(
            !has(&show()),
            "{who:?}: a cache in a 0777 directory was used"
        );
        chmod(&cache.join("stockade"), 0o700);
        assert!(
            has(&show()),
            "{who:?}: the cache was written in a 0777 directory"
        );
        // A symlink in place of the file.
        let real = s.join("real.json");
        std::fs::rename(&f, &real).unwrap();
        std::os::unix::fs::chown(&real, Some(uid_of(who)), Some(uid_of(who))).unwrap();
        std::os::unix::fs::symlink(&real, &f).unwrap();
        assert!(!has(&show()), "{who:?}: a symlinked cache was used");
        std::fs::remove_file(&f).unwrap();
        // Corrupt: ignored, and replaced by a good answer.
        std::fs::write(&f, b"{\"key\": [tr").unwrap();
        std::os::unix::fs::chown(&f, Some(uid_of(who)), Some(uid_of(who))).unwrap();
        chmod(&f, 0o600);
        let b = show();
        assert!(b.iter().any(|x| Path::new(x) == venv), "{who:?}: {b:?}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap())
            .unwrap_or_else(|e| panic!("{who:?}: the corrupt cache was not rewritten: {e}"));
        assert_eq!(v["key"]["run"], py, "{who:?}");
    }
}

/// A pyenv root in `s/pyenv` with two "versions" (venvs of /usr/bin/python3)
/// and a stand-in `libexec/pyenv` that records that it ran, then runs
/// /usr/bin/python3 as the real one would for `system`.
fn fake_pyenv(s: &Scratch) -> PathBuf {
    let root = s.join("pyenv");
    common::host_sh_ok(&format!(
        "mkdir -p {r}/shims {r}/libexec {r}/versions {r}/log && \
         /usr/bin/python3 -m venv --without-pip {r}/versions/3.99.1 && \
         /usr/bin/python3 -m venv --without-pip {r}/versions/3.98.0 && \
         echo 3.99.1 > {r}/version && chmod -R a+rX {r} && chmod 0777 {r}/log",
        r = root.display()
    ));
    let r = root.display();
    std::fs::write(
        root.join("shims/python3"),
        format!(
            "#!/usr/bin/env bash\nset -e\n[ -n \"$PYENV_DEBUG\" ] && set -x\n\nprogram=\"${{0##*/}}\"\n\n\
             export PYENV_ROOT=\"{r}\"\nSHIM_PATH=${{0%/*}}\nif [[ $SHIM_PATH != \"{r}/shims\" ]]; then\n  \
             export _PYENV_SHIM_PATH=\"$SHIM_PATH\"\nfi\nexec \"{r}/libexec/pyenv\" exec \"$program\" \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("libexec/pyenv"),
        format!("#!/bin/sh\necho \"$*\" >> {r}/log/ran\nshift 2\nexec /usr/bin/python3 \"$@\"\n"),
    )
    .unwrap();
    chmod(&root.join("shims/python3"), 0o755);
    chmod(&root.join("libexec/pyenv"), 0o755);
    root
}

#[test]
fn pyenv_shim_resolves_like_pyenv_without_running_it() {
    let t = "pyenv_shim_resolves_like_pyenv_without_running_it";
    for who in common::users(t) {
        let s = Scratch::new("fakepyenv");
        let root = fake_pyenv(&s);
        let proj = s.join("proj/sub");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(s.join("proj/.python-version"), "# pinned\n3.98.0\n").unwrap();
        common::host_sh_ok(&format!("chmod -R a+rX {}", s.path().display()));
        let path = PathBuf::from(format!("{}/shims:/usr/bin:/bin", root.display()));
        let ran = root.join("log/ran");
        let v = |n: &str| root.join("versions").join(n).join("bin/python3");
        // (what, PYENV_VERSION, working directory, expected, pyenv runs)
        type Case<'a> = (&'a str, Option<&'a str>, Option<&'a Path>, PathBuf, bool);
        let cases: Vec<Case> = vec![
            ("global version file", None, None, v("3.99.1"), false),
            ("PYENV_VERSION", Some("3.98.0"), None, v("3.98.0"), false),
            (
                ".python-version above cwd",
                None,
                Some(proj.as_path()),
                v("3.98.0"),
                false,
            ),
            (
                "PYENV_VERSION over .python-version",
                Some("3.99.1"),
                Some(proj.as_path()),
                v("3.99.1"),
                false,
            ),
            (
                "system",
                Some("system"),
                None,
                "/usr/bin/python3".into(),
                false,
            ),
            (
                "python- prefix",
                Some("python-3.98.0"),
                None,
                v("3.98.0"),
                false,
            ),
            // A prefix pyenv would complete: left to pyenv, which runs.
            (
                "prefix",
                Some("3.99"),
                None,
                "/usr/bin/python3".into(),
                true,
            ),
        ];
        for (what, version, cwd, want, runs) in cases {
            let _ = std::fs::remove_file(&ran);
            let mut env: Vec<(&str, &Path)> = vec![("PATH", &path)];
            if let Some(ver) = version {
                env.push(("PYENV_VERSION", Path::new(ver)));
            }
            let (py, _) = show(who, &[], &env, cwd);
            assert_eq!(Path::new(&py), want, "{what} as {who:?}");
            assert_eq!(ran.exists(), runs, "{what} as {who:?}: pyenv ran: {}", runs);
        }
        // An unknown exec hook might change anything: pyenv runs.
        let hook = root.join("pyenv.d/exec");
        std::fs::create_dir_all(&hook).unwrap();
        std::fs::write(
            hook.join("mine.bash"),
            "PYENV_COMMAND_PATH=/usr/bin/python3\n",
        )
        .unwrap();
        common::host_sh_ok(&format!("chmod -R a+rX {}", root.display()));
        let _ = std::fs::remove_file(&ran);
        show(who, &[], &[("PATH", &path)], None);
        assert!(
            ran.exists(),
            "as {who:?}: an unknown hook did not make pyenv run"
        );
        std::fs::remove_dir_all(root.join("pyenv.d")).unwrap();
        // And the jail runs the resolved interpreter.
        let _ = std::fs::remove_file(&ran);
        let o = stockade(
            who,
            &[
                "run",
                "--profile",
                "python",
                "--",
                "python3",
                "-c",
                "import sys; print(sys.prefix)",
            ],
            &[("PATH", &path)],
            None,
        );
        expect_code(&o, 0, "run through the shim");
        assert_eq!(
            stdout(&o),
            format!("{}\n", root.join("versions/3.99.1").display())
        );
        assert!(!ran.exists(), "as {who:?}: pyenv ran");
    }
}

#[test]
fn pyenv_shim_resolves_to_what_the_real_pyenv_runs() {
    let t = "pyenv_shim_resolves_to_what_the_real_pyenv_runs";
    let shim = Path::new("/root/.pyenv/shims/python3");
    if !common::is_root() || !shim.exists() {
        common::skip(t, "no pyenv at /root/.pyenv visible here");
        return;
    }
    let versions: Vec<String> = std::fs::read_dir("/root/.pyenv/versions")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('3'))
        .collect();
    let path = PathBuf::from("/root/.pyenv/shims:/usr/bin:/bin");
    let mut specs: Vec<Option<String>> = vec![None, Some("system".into())];
    specs.extend(versions.into_iter().take(2).map(Some));
    for spec in specs {
        let mut env: Vec<(&str, &Path)> = vec![("PATH", &path)];
        if let Some(v) = &spec {
            env.push(("PYENV_VERSION", Path::new(v)));
        }
        let (py, _) = show(Who::Root, &[], &env, None);
        let mut c = Command::new(shim);
        c.env_clear().current_dir("/").env("PATH", &path);
        if let Some(v) = &spec {
            c.env("PYENV_VERSION", v);
        }
        let o = c
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap();
        expect_code(&o, 0, "the real shim");
        assert_eq!(format!("{py}\n"), stdout(&o), "PYENV_VERSION={spec:?}");
    }
}

/// A venv in `s/v` whose base interpreter is `s/base/python3`.
fn venv_from(s: &Scratch, base: &Path) -> PathBuf {
    let v = s.join("v");
    std::fs::create_dir_all(v.join("bin")).unwrap();
    std::fs::write(
        v.join("pyvenv.cfg"),
        format!(
            "home = {}\ninclude-system-site-packages = false\n",
            base.parent().unwrap().display()
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(base, v.join("bin/python3")).unwrap();
    common::host_sh_ok(&format!("chmod -R a+rX {}", v.display()));
    v.join("bin/python3")
}

#[test]
fn venv_whose_base_interpreter_the_jail_cannot_run_is_one_clear_line() {
    let t = "venv_whose_base_interpreter_the_jail_cannot_run_is_one_clear_line";
    if !needs_root(t) {
        return;
    }
    let real = std::fs::canonicalize("/usr/bin/python3").unwrap();
    for who in common::users(t) {
        // The base interpreter in a directory uid 65534 cannot search, then
        // a base interpreter file it cannot execute.
        for private_dir in [true, false] {
            let s = Scratch::new("venvbase");
            let base_dir = s.join("base");
            std::fs::create_dir(&base_dir).unwrap();
            let base = base_dir.join("python3");
            if private_dir {
                std::os::unix::fs::symlink(&real, &base).unwrap();
            } else {
                common::copy_executable(&real, &base);
            }
            let py = venv_from(&s, &base);
            let py = py.to_str().unwrap();
            let args = [
                "run",
                "--profile",
                "python",
                "--python",
                py,
                "--",
                "python3",
                "-c",
                "import sys; print('ran', sys.prefix)",
            ];
            // Reachable: the venv works (the fixture is a real venv).
            chmod(&base_dir, 0o755);
            if !private_dir {
                chmod(&base, 0o755);
            }
            let o = stockade(who, &args, &[], None);
            expect_code(&o, 0, "venv with a reachable base");
            assert_eq!(stdout(&o), format!("ran {}\n", s.join("v").display()));

            let (at, why) = if private_dir {
                chmod(&base_dir, 0o700);
                (
                    base_dir.clone(),
                    "(mode 0700, owner uid 0) is not searchable by uid 65534",
                )
            } else {
                chmod(&base, 0o700);
                (
                    base.clone(),
                    "(mode 0700, owner uid 0) is not executable by uid 65534",
                )
            };
            let o = stockade(who, &args, &[], None);
            let what = format!(
                "private {} as {who:?}",
                if private_dir { "dir" } else { "file" }
            );
            expect_code(&o, 125, &what);
            let e = stderr(&o);
            assert_eq!(e.lines().count(), 1, "{what}: {e}");
            assert!(
                e.starts_with(&format!("stockade: --python: {py}: ")),
                "{what}: {e}"
            );
            assert!(
                e.contains(&format!("{} {why}", at.display())),
                "{what}: {e}"
            );
            assert!(
                e.contains("the base interpreter of the venv")
                    && e.contains("must be readable by the jail's user (uid 65534)"),
                "{what}: {e}"
            );
            assert!(!stdout(&o).contains("ran"), "{what}");
        }
    }
}
