//! Resolving a pyenv shim without running it.
//!
//! A shim (`$PYENV_ROOT/shims/python3`) is a bash script that runs
//! `pyenv exec python3`: more bash, several forks, about half a second.
//! [`resolve`] applies the same rules itself — `PYENV_VERSION`, else the
//! first `.python-version` up from the working directory, else
//! `$PYENV_ROOT/version`; each selected version's `bin/`, then `system`
//! (the next match on PATH once the shims directory is taken out) — and
//! answers `None`, so that the shim is run as before, whenever it meets
//! something it does not model: a shim it does not recognise line by line,
//! hook scripts other than pyenv's and pyenv-virtualenv's stock ones, a
//! version pyenv would complete by prefix (`3.12` for `3.12.1`), a path in
//! a version name, relative PATH entries, or a command pyenv would not find.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The interpreter the pyenv shim `found` would run, if that can be told
/// without running it.
pub fn resolve(found: &Path) -> Option<PathBuf> {
    let program = found.file_name()?;
    let shim = parse_shim(found)?;
    // The shim exports _PYENV_SHIM_PATH when started from another directory
    // (a symlinked shims dir); `which` then treats that path specially.
    let shims = shim.root.join("shims");
    if found.parent()?.as_os_str() != shims.as_os_str() {
        return None;
    }
    if std::env::vars_os().any(|(k, _)| k.as_bytes().starts_with(b"_PYENV_SHIM_PATHS_")) {
        return None;
    }
    if std::env::var_os("PYENV_DIR").is_some_and(|d| !d.is_empty()) {
        return None;
    }
    if !stock_hooks_only(&shim, program) {
        return None;
    }
    let spec = match std::env::var_os("PYENV_VERSION").filter(|v| !v.is_empty()) {
        Some(v) => v.into_string().ok()?,
        None => read_version_file(&version_file(&shim.root)?)?,
    };
    for v in version_names(&shim.root, &spec)? {
        let cand = match v.as_str() {
            "system" => system_command(&shim.root, program)?,
            _ => shim
                .root
                .join("versions")
                .join(&v)
                .join("bin")
                .join(program),
        };
        // Never a shim again (a PATH entry spelled `shims/` stays on it).
        if cand.parent() == Some(shims.as_path()) {
            return None;
        }
        if executable(&cand) {
            return Some(cand);
        }
    }
    None
}

struct Shim {
    /// `PYENV_ROOT` as the shim exports it, without a trailing `/`.
    root: PathBuf,
    /// The `pyenv` script the shim runs (`$prefix/libexec/pyenv`).
    pyenv: PathBuf,
}

/// The shim's PYENV_ROOT and pyenv script, if every line of it is one that
/// `pyenv rehash` writes (pyenv 1.x and 2.x).
fn parse_shim(found: &Path) -> Option<Shim> {
    let meta = std::fs::metadata(found).ok()?;
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let text = std::fs::read_to_string(found).ok()?;
    if !text.starts_with("#!") {
        return None;
    }
    let quoted = |s: &str| -> Option<String> {
        let s = s.strip_prefix('"')?.strip_suffix('"')?;
        (!s.contains(['"', '$', '`', '\\'])).then(|| s.to_string())
    };
    let (mut root, mut pyenv, mut program) = (None, None, false);
    for line in text.lines().skip(1).map(str::trim) {
        match line {
            ""
            | "set -e"
            | "[ -n \"$PYENV_DEBUG\" ] && set -x"
            | "SHIM_PATH=${0%/*}"
            | "export _PYENV_SHIM_PATH=\"$SHIM_PATH\""
            | "fi" => {}
            "program=\"${0##*/}\"" => program = true,
            l if l.starts_with("export PYENV_ROOT=") => {
                root = Some(quoted(&l["export PYENV_ROOT=".len()..])?)
            }
            l if l.starts_with("if [[ $SHIM_PATH != ") && l.ends_with(" ]]; then") => {}
            l if l.starts_with("exec ") && l.ends_with(" exec \"$program\" \"$@\"") => {
                let p = &l["exec ".len()..l.len() - " exec \"$program\" \"$@\"".len()];
                pyenv = Some(quoted(p)?)
            }
            _ => return None,
        }
    }
    let root = root?;
    let root = root.trim_end_matches('/');
    if !program || !root.starts_with('/') {
        return None;
    }
    Some(Shim {
        root: PathBuf::from(root),
        pyenv: PathBuf::from(pyenv?),
    })
}

/// Does any hook that `pyenv exec` would source for `program` change what
/// it runs? Only the stock hooks are known not to: pyenv's pip-rehash
/// (pip and easy_install only) and pyenv-virtualenv's `which` hooks (they
/// act only when the command was not found).
fn stock_hooks_only(shim: &Shim, program: &OsStr) -> bool {
    let mut paths: Vec<PathBuf> = std::env::var_os("PYENV_HOOK_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    paths.push(shim.root.join("pyenv.d"));
    // `$prefix/libexec/pyenv` -> `$prefix`, where pyenv itself is installed.
    if let Some(prefix) = std::fs::canonicalize(&shim.pyenv)
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
    {
        if prefix != shim.root {
            paths.push(prefix.join("pyenv.d"));
        }
    }
    for p in [
        "/usr/etc/pyenv.d",
        "/usr/local/etc/pyenv.d",
        "/etc/pyenv.d",
        "/usr/lib/pyenv/hooks",
    ] {
        paths.push(p.into());
    }
    if let Ok(rd) = std::fs::read_dir(shim.root.join("plugins")) {
        for e in rd.flatten() {
            paths.push(e.path().join("etc/pyenv.d"));
        }
    }
    for dir in paths.iter().filter(|p| !p.as_os_str().is_empty()) {
        for cmd in ["exec", "which", "version-name"] {
            let Ok(rd) = std::fs::read_dir(dir.join(cmd)) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name();
                if !name.as_bytes().ends_with(b".bash") {
                    continue;
                }
                if !stock_hook(cmd, &e.path(), program) {
                    return false;
                }
            }
        }
    }
    true
}

fn stock_hook(cmd: &str, path: &Path, program: &OsStr) -> bool {
    let name = path.file_name().unwrap_or_default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    match (cmd, name.as_bytes()) {
        // It swaps in `pyenv.d/exec/pip-rehash/<command>` when that exists
        // (pip, easy_install) or when the arguments hold ` -m pip `, which
        // the probe's never do.
        ("exec", b"pip-rehash.bash") => {
            text.contains("PYENV_PIP_REHASH_ROOT=\"${BASH_SOURCE[0]%/*}/pip-rehash\"")
                && !path.with_file_name("pip-rehash").join(program).exists()
        }
        ("which", b"conda.bash" | b"python-config.bash" | b"system-site-packages.bash") => text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .is_some_and(|l| l.starts_with("if [ ! -x \"${PYENV_COMMAND_PATH}\" ]")),
        _ => false,
    }
}

/// The working directory as bash sees it: `$PWD` when it names the current
/// directory, else the physical path.
fn logical_cwd() -> Option<PathBuf> {
    let here = std::fs::metadata(".").ok()?;
    if let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from) {
        use std::os::unix::fs::MetadataExt;
        let clean = pwd.is_absolute()
            && pwd.components().all(|c| {
                !matches!(
                    c,
                    std::path::Component::CurDir | std::path::Component::ParentDir
                )
            });
        if clean {
            if let Ok(m) = std::fs::metadata(&pwd) {
                if (m.dev(), m.ino()) == (here.dev(), here.ino()) {
                    return Some(pwd);
                }
            }
        }
    }
    std::env::current_dir().ok()
}

/// `pyenv version-file`: the nearest `.python-version` at or above the
/// working directory, else `$PYENV_ROOT/version`.
fn version_file(root: &Path) -> Option<PathBuf> {
    let cwd = logical_cwd()?;
    if cwd.as_os_str().as_bytes().starts_with(b"//") {
        return None;
    }
    for d in cwd.ancestors() {
        let f = d.join(".python-version");
        if f.is_file() {
            return Some(f);
        }
    }
    Some(root.join("version"))
}

/// `pyenv version-file-read`: the first word of each line, comments and
/// blank lines skipped, joined with `:`; empty when the file is missing or
/// empty (which means `system`).
fn read_version_file(f: &Path) -> Option<String> {
    match std::fs::metadata(f) {
        Ok(m) if m.len() > 0 => {}
        _ => return Some(String::new()),
    }
    let text = std::fs::read(f).ok()?;
    let text = String::from_utf8(text).ok()?;
    let mut out: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        if line.len() > 1000 {
            return None;
        }
        let Some(word) = line.split([' ', '\t', '\r']).find(|w| !w.is_empty()) else {
            continue;
        };
        if word.starts_with('#') {
            continue;
        }
        if word == ".." || word.contains('/') {
            // pyenv resolves these with `cd`; leave that to pyenv.
            return None;
        }
        out.push(word);
    }
    Some(out.join(":"))
}

/// `pyenv version-name`: the selected versions, each installed or
/// `system`, followed (as `pyenv which` does) by `system`.
fn version_names(root: &Path, spec: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    if !spec.is_empty() && spec != "system" {
        let spec = spec.strip_suffix(':').unwrap_or(spec);
        for v in spec.split(':') {
            if v.is_empty() || v == "." || v == ".." || v.contains('/') {
                return None;
            }
            let installed = |v: &str| root.join("versions").join(v).is_dir();
            if v == "system" || installed(v) {
                out.push(v.to_string());
            } else if let Some(n) = v.strip_prefix("python-").filter(|n| installed(n)) {
                out.push(n.to_string());
            } else {
                // A prefix `pyenv latest` would complete, or not installed.
                return None;
            }
        }
    }
    out.push("system".into());
    Some(out)
}

/// `command -v program` on PATH without `$PYENV_ROOT/shims`.
fn system_command(root: &Path, program: &OsStr) -> Option<PathBuf> {
    let shims = root.join("shims");
    let path = std::env::var_os("PATH")?;
    let home = std::env::var_os("HOME").unwrap_or_default();
    for d in path.as_bytes().split(|&b| b == b':') {
        // pyenv expands `~` in PATH before it takes the shims out.
        let d: PathBuf = if d.contains(&b'~') {
            let mut v = Vec::new();
            for (i, part) in d.split(|&b| b == b'~').enumerate() {
                if i > 0 {
                    v.extend_from_slice(home.as_bytes());
                }
                v.extend_from_slice(part);
            }
            PathBuf::from(OsStr::from_bytes(&v))
        } else {
            PathBuf::from(OsStr::from_bytes(d))
        };
        if d.as_os_str() == shims.as_os_str() {
            continue;
        }
        if !d.is_absolute() {
            // The working directory (an empty entry) or a relative one.
            return None;
        }
        let c = d.join(program);
        if c.is_file() && executable(&c) {
            return Some(c);
        }
    }
    // Not found: pyenv prints its own advice; let it.
    None
}

/// `[ -x path ]`.
fn executable(p: &Path) -> bool {
    nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_file_words_are_read_like_pyenv() {
        let d = std::env::temp_dir().join(format!("stockade-pyenv-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("v");
        std::fs::write(&f, "# comment\n\n 3.12.1 extra\r\n3.11.7\n").unwrap();
        assert_eq!(read_version_file(&f).as_deref(), Some("3.12.1:3.11.7"));
        std::fs::write(&f, "").unwrap();
        assert_eq!(read_version_file(&f).as_deref(), Some(""));
        std::fs::write(&f, "../../etc\n").unwrap();
        assert_eq!(read_version_file(&f), None);
        assert_eq!(read_version_file(&d.join("missing")).as_deref(), Some(""));
        std::fs::create_dir_all(d.join("versions/3.12.1")).unwrap();
        let names = |s: &str| version_names(&d, s);
        assert_eq!(names("").unwrap(), vec!["system"]);
        assert_eq!(names("3.12.1").unwrap(), vec!["3.12.1", "system"]);
        assert_eq!(names("python-3.12.1").unwrap(), vec!["3.12.1", "system"]);
        assert_eq!(
            names("system:3.12.1").unwrap(),
            vec!["system", "3.12.1", "system"]
        );
        assert_eq!(names("3.12"), None, "a prefix is left to pyenv latest");
        assert_eq!(names("3.12.1::system"), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn only_stock_shims_are_parsed() {
        let d = std::env::temp_dir().join(format!("stockade-shim-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("python3");
        let stock = "#!/usr/bin/env bash\nset -e\n[ -n \"$PYENV_DEBUG\" ] && set -x\n\nprogram=\"${0##*/}\"\n\nexport PYENV_ROOT=\"/opt/pyenv/\"\nSHIM_PATH=${0%/*}\nif [[ $SHIM_PATH != \"/opt/pyenv/shims\" ]]; then\n  export _PYENV_SHIM_PATH=\"$SHIM_PATH\"\nfi\nexec \"/opt/pyenv/libexec/pyenv\" exec \"$program\" \"$@\"\n";
        std::fs::write(&f, stock).unwrap();
        let s = parse_shim(&f).unwrap();
        assert_eq!(s.root, Path::new("/opt/pyenv"));
        assert_eq!(s.pyenv, Path::new("/opt/pyenv/libexec/pyenv"));
        std::fs::write(
            &f,
            stock.replace("set -e\n", "set -e\nexport PYENV_VERSION=3.8\n"),
        )
        .unwrap();
        assert!(
            parse_shim(&f).is_none(),
            "an extra line is not a stock shim"
        );
        std::fs::write(&f, stock.replace("/opt/pyenv/\"", "$HOME/.pyenv\"")).unwrap();
        assert!(parse_shim(&f).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
