//! Copy-on-write workspaces (`--overlay HOST_DIR:INNER`): the jail edits,
//! deletes, renames, chmods, symlinks and hard-links inside its overlay
//! while the host directory stays as it was; the outcome lists the changes
//! (whiteouts and opaque directories read right, hashes those of the
//! files); `--commit` applies them (only after exit 0 unless `always`),
//! `--changes-diff` writes their diff; a kept upper layer
//! (`--overlay-upper`) is committed later by `stockade overlay commit`,
//! which refuses paths that cross a symlink planted on the host (outside,
//! into `..`, at /proc) and undoes what lands in a directory renamed out
//! of the host directory meanwhile, or swapped for a symlink; hard links
//! are listed as the files they name and committed as copies (never a
//! link out of the host directory); ownership cannot change inside the
//! jail and a commit keeps the host's owners; `--deny` holds inside an
//! overlay; the fallback without user namespaces refuses one. As root and
//! as uid 65534.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{stderr, stdout, Scratch, Who, NOBODY};

/// A project the jail's user owns (uid 65534: what the jail's ids map to
/// for root's runs and for 65534's): `a.txt`, `b.txt`, `keep.txt`,
/// `same.txt`, `mode.sh`, `d/x`, `d/y`, `gone/z`, `link` -> `a.txt`.
fn project(s: &Scratch) -> PathBuf {
    let p = s.join("host");
    std::fs::create_dir_all(p.join("d")).unwrap();
    std::fs::create_dir_all(p.join("gone")).unwrap();
    for (f, text) in [
        ("a.txt", "alpha\n"),
        ("b.txt", "bravo\n"),
        ("keep.txt", "kept\n"),
        ("same.txt", "same\n"),
        ("mode.sh", "#!/bin/sh\n"),
        ("d/x", "x\n"),
        ("d/y", "y\n"),
        ("gone/z", "z\n"),
    ] {
        std::fs::write(p.join(f), text).unwrap();
    }
    std::os::unix::fs::symlink("a.txt", p.join("link")).unwrap();
    give_to_nobody(s.path());
    p
}

/// `dir` and all beneath it owned by uid 65534 (symlinks themselves).
fn give_to_nobody(dir: &Path) {
    common::host_sh_ok(&format!("chown -hR {NOBODY}:{NOBODY} '{}'", dir.display()));
}

/// Everything beneath `dir`: path → (type, mode, content or target).
fn snapshot(dir: &Path) -> BTreeMap<String, (char, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let (t, data) = if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                ('l', t.into_os_string().into_encoded_bytes())
            } else if m.is_dir() {
                todo.push(p.clone());
                ('d', Vec::new())
            } else {
                ('f', std::fs::read(&p).unwrap())
            };
            out.insert(rel, (t, m.mode() & 0o7777, data));
        }
    }
    out
}

/// The edits every run makes in `/work/p`, then the hashes of what it
/// wrote, as `sha256sum` prints them.
const EDITS: &str = "set -e; cd /work/p
echo more >> a.txt
rm b.txt
mv keep.txt renamed.txt
chmod 755 mode.sh
ln -s a.txt sym
ln -sfn b.txt link
ln a.txt hard
rm -r gone
rm -r d; mkdir d; echo new > d/new
touch same.txt; chmod 644 same.txt
mkdir locked; echo l > locked/f; chmod 000 locked
sha256sum a.txt renamed.txt hard d/new";

/// The changes `EDITS` makes: (path, kind, type).
const EXPECTED: &[(&str, &str, &str)] = &[
    ("/work/p/a.txt", "modified", "file"),
    ("/work/p/b.txt", "deleted", "file"),
    ("/work/p/d/new", "added", "file"),
    ("/work/p/d/x", "deleted", "file"),
    ("/work/p/d/y", "deleted", "file"),
    ("/work/p/gone", "deleted", "dir"),
    ("/work/p/hard", "added", "file"),
    ("/work/p/keep.txt", "deleted", "file"),
    ("/work/p/link", "modified", "symlink"),
    ("/work/p/locked", "added", "dir"),
    ("/work/p/locked/f", "added", "file"),
    ("/work/p/mode.sh", "mode_changed", "file"),
    ("/work/p/renamed.txt", "added", "file"),
    ("/work/p/sym", "added", "symlink"),
];

fn overlay_flag(host: &Path) -> String {
    format!("{}:/work/p", host.display())
}

/// `stockade run --report - FLAGS -- sh -c SCRIPT` as `who`.
fn run_sh(who: Who, flags: &[&str], script: &str) -> std::process::Output {
    let mut f = vec!["--report", "-"];
    f.extend_from_slice(flags);
    common::run(who, &f, &["/bin/sh", "-c", script])
}

/// A change as (path, kind, type).
type Kind = (String, String, String);

/// The outcome's changes as (path, kind, type), and the entries by path.
fn changes(r: &serde_json::Value) -> (Vec<Kind>, BTreeMap<String, serde_json::Value>) {
    let list = r["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {r}"));
    let mut by = BTreeMap::new();
    let kinds = list
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            by.insert(s("path"), c.clone());
            (s("path"), s("kind"), s("type"))
        })
        .collect();
    (kinds, by)
}

fn expected() -> Vec<Kind> {
    EXPECTED
        .iter()
        .map(|(p, k, t)| (p.to_string(), k.to_string(), t.to_string()))
        .collect()
}

/// Each `HASH  NAME` line of `text`: name → hash.
fn sums(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(h, n)| (n.to_string(), h.to_string()))
        .collect()
}

/// The SHA-256 of a host file, by `sha256sum`.
fn host_sha256(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    stdout(&o).split_whitespace().next().unwrap().to_string()
}

#[test]
fn an_overlay_takes_every_edit_and_the_host_directory_stays_as_it_was() {
    for who in common::users("overlay edits") {
        let s = Scratch::new("ov-edits");
        let host = project(&s);
        let before = snapshot(&host);
        let o = run_sh(who, &["--overlay", &overlay_flag(&host)], EDITS);
        let r = common::last_valid_json(&o);
        assert_eq!(r["status"], "exited", "{who:?}: {r}\n{}", stderr(&o));
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}");
        assert_eq!(
            snapshot(&host),
            before,
            "{who:?}: the host directory changed"
        );
        let (kinds, by) = changes(&r);
        assert_eq!(kinds, expected(), "{who:?}");
        assert!(r.get("changes_truncated").is_none(), "{r}");
        assert!(r.get("commit").is_none(), "{r}");
        // The hashes are those of the files the jail wrote.
        let printed = sums(r["stdout"]["data"].as_str().unwrap_or_default());
        assert_eq!(printed.len(), 4, "{r}");
        for (name, hash) in &printed {
            let c = &by[&format!("/work/p/{name}")];
            assert_eq!(c["sha256"], hash.as_str(), "{who:?}: {name}");
        }
        assert_eq!(by["/work/p/a.txt"]["size"], 11);
        assert_eq!(by["/work/p/mode.sh"]["mode"], "0755");
        assert_eq!(by["/work/p/link"]["target"], "b.txt");
        assert_eq!(by["/work/p/sym"]["target"], "a.txt");
        assert!(by["/work/p/link"].get("mode").is_none());
        assert!(by["/work/p/gone"].get("sha256").is_none());
    }
}

#[test]
fn root_s_overlay_of_a_directory_it_owns_is_the_jail_user_s_to_change() {
    if !common::is_root() {
        common::skip("overlay root-owned", "not root");
        return;
    }
    let s = Scratch::new("ov-rootown");
    let host = s.join("host");
    std::fs::create_dir_all(host.join("sub")).unwrap();
    std::fs::write(host.join("a"), "root\n").unwrap();
    std::fs::set_permissions(host.join("a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = "cd /work/p && stat -c '%U %a' a && echo more >> a && echo n > sub/n";
    let o = run_sh(
        Who::Root,
        &["--overlay", &overlay_flag(&host), "--commit"],
        script,
    );
    let r = common::last_valid_json(&o);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["stdout"]["data"], "sandbox 600\n", "{r}");
    assert_eq!(r["commit"]["applied_count"], 2, "{r}");
    assert_eq!(std::fs::read(host.join("a")).unwrap(), b"root\nmore\n");
    for f in ["a", "sub/n"] {
        let m = std::fs::metadata(host.join(f)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (0, 0),
            "{f} keeps (or takes) root's ownership"
        );
    }
}

#[test]
fn commit_applies_every_change_and_only_after_exit_0_unless_always() {
    for who in common::users("overlay commit") {
        let s = Scratch::new("ov-commit");
        let host = project(&s);
        let before = snapshot(&host);
        let flag = overlay_flag(&host);
        // Exit 1: nothing committed, and the outcome says why.
        let o = run_sh(
            who,
            &["--overlay", &flag, "--commit"],
            &format!("{EDITS}; exit 1"),
        );
        let r = common::last_valid_json(&o);
        assert_eq!(r["exit_code"], 1, "{r}");
        let skipped = r["commit"]["skipped"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        assert!(skipped.contains("did not exit 0"), "{skipped}");
        assert_eq!(r["commit"]["applied_count"], 0);
        assert_eq!(snapshot(&host), before, "{who:?}: committed after exit 1");
        // `always`: committed whatever the end.
        let o = run_sh(
            who,
            &["--overlay", &flag, "--commit=always"],
            &format!("{EDITS}; exit 3"),
        );
        let r = common::last_valid_json(&o);
        assert_eq!(r["exit_code"], 3, "{r}");
        let (kinds, by) = changes(&r);
        assert_eq!(kinds, expected(), "{who:?}");
        assert_eq!(
            r["commit"]["refused"],
            serde_json::json!([]),
            "{who:?}: {r}"
        );
        assert_eq!(r["commit"]["applied_count"], EXPECTED.len(), "{r}");
        let now = snapshot(&host);
        let names: Vec<&str> = now.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "a.txt",
                "d",
                "d/new",
                "hard",
                "link",
                "locked",
                "locked/f",
                "mode.sh",
                "renamed.txt",
                "same.txt",
                "sym"
            ],
            "{who:?}"
        );
        assert_eq!(now["a.txt"].2, b"alpha\nmore\n");
        assert_eq!(now["hard"].2, b"alpha\nmore\n");
        assert_eq!(now["renamed.txt"].2, b"kept\n");
        assert_eq!(now["mode.sh"].1, 0o755);
        assert_eq!((now["locked"].1, &now["locked/f"].2[..]), (0, &b"l\n"[..]));
        assert_eq!(now["link"], ('l', 0o777, b"b.txt".to_vec()));
        assert_eq!(now["sym"], ('l', 0o777, b"a.txt".to_vec()));
        for f in ["a.txt", "hard", "renamed.txt", "d/new"] {
            let c = &by[&format!("/work/p/{f}")];
            assert_eq!(c["sha256"], host_sha256(&host.join(f)).as_str(), "{f}");
        }
        // What was made has its directory's owner, when root committed.
        for f in ["renamed.txt", "d/new", "sym"] {
            let m = std::fs::symlink_metadata(host.join(f)).unwrap();
            assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "{who:?}: {f}");
        }
    }
}

#[test]
fn the_changes_diff_is_git_s_format_and_applies() {
    for who in common::users("overlay diff") {
        let s = Scratch::new("ov-diff");
        let host = project(&s);
        std::fs::write(host.join("bin.dat"), b"\0\x01\x02").unwrap();
        give_to_nobody(s.path());
        let out = s.join("out");
        std::fs::create_dir(&out).unwrap();
        give_to_nobody(&out);
        let diff = out.join("changes.diff");
        let d = diff.display().to_string();
        let script = format!("{EDITS}; printf '\\001\\002' > bin.dat");
        let o = run_sh(
            who,
            &["--overlay", &overlay_flag(&host), "--changes-diff", &d],
            &script,
        );
        let r = common::last_valid_json(&o);
        assert_eq!(r["exit_code"], 0, "{r}");
        let text = std::fs::read_to_string(&diff).unwrap();
        for want in [
            "diff --git a/work/p/a.txt b/work/p/a.txt\n--- a/work/p/a.txt\n+++ b/work/p/a.txt\n@@ -1 +1,2 @@\n alpha\n+more\n",
            "diff --git a/work/p/b.txt b/work/p/b.txt\ndeleted file mode 100644\n--- a/work/p/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bravo\n",
            "diff --git a/work/p/mode.sh b/work/p/mode.sh\nold mode 100644\nnew mode 100755\n",
            "diff --git a/work/p/sym b/work/p/sym\nnew file mode 120000\n--- /dev/null\n+++ b/work/p/sym\n@@ -0,0 +1 @@\n+a.txt\n\\ No newline at end of file\n",
            "diff --git a/work/p/gone/z b/work/p/gone/z\ndeleted file mode 100644\n",
            "Binary files a/work/p/bin.dat and b/work/p/bin.dat differ\n",
        ] {
            assert!(text.contains(want), "{who:?}: no {want:?} in:\n{text}");
        }
        // git applies it (the text part) to a copy of the host directory.
        let copy = s.join("copy");
        common::host_sh_ok(&format!(
            "mkdir -p '{c}/work' && cp -a '{h}' '{c}/work/p' && rm '{c}/work/p/bin.dat'",
            c = copy.display(),
            h = host.display()
        ));
        let text_only: String = text
            .split("diff --git ")
            .filter(|c| !c.is_empty() && !c.contains("Binary files"))
            .map(|c| format!("diff --git {c}"))
            .collect();
        std::fs::write(s.join("text.diff"), text_only).unwrap();
        let o = Command::new("git")
            .args(["apply", "--unsafe-paths", "-p1", "--directory=."])
            .arg(s.join("text.diff"))
            .current_dir(&copy)
            .output()
            .unwrap();
        assert!(o.status.success(), "git apply: {}\n{text}", stderr(&o));
        assert_eq!(
            std::fs::read(copy.join("work/p/a.txt")).unwrap(),
            b"alpha\nmore\n"
        );
        assert!(!copy.join("work/p/gone").join("z").exists());
    }
}

/// A kept upper layer of `EDITS`-like changes beneath `sub/` and at the
/// top, in `s/keep` (as `who`).
fn kept(who: Who, s: &Scratch, host: &Path, script: &str) -> PathBuf {
    let keep = s.join("keep");
    let k = keep.display().to_string();
    let o = run_sh(
        who,
        &["--overlay", &overlay_flag(host), "--overlay-upper", &k],
        script,
    );
    let r = common::last_valid_json(&o);
    assert_eq!(r["exit_code"], 0, "{who:?}: {r}\n{}", stderr(&o));
    assert!(keep.join("stockade-overlay.json").is_file());
    keep
}

/// `stockade overlay SUB DIR` as `who`.
fn overlay_cmd(who: Who, sub: &str, dir: &Path) -> std::process::Output {
    let mut c = common::stockade(who);
    c.args(["overlay", sub]).arg(dir);
    c.output().unwrap()
}

/// What the host changed after the overlay was mounted is the host's: a
/// commit neither overwrites nor deletes it, nor removes a directory
/// that gained a file meanwhile; what the host left alone is committed.
#[test]
fn a_commit_leaves_what_the_host_changed_after_the_overlay_was_mounted() {
    for who in common::users("overlay host changes kept") {
        let s = Scratch::new("ov-conflict");
        let host = project(&s);
        give_to_nobody(s.path());
        let script =
            "cd /work/p && echo jail > a.txt && echo jail > b.txt && rm keep.txt && rm -r d gone";
        let keep = kept(who, &s, &host, script);
        // Since the run, the host edited b.txt and keep.txt and put a new
        // file in d/ (touching nothing else there): its own work.
        std::fs::write(host.join("b.txt"), "host edit\n").unwrap();
        std::fs::write(host.join("keep.txt"), "host edit\n").unwrap();
        std::fs::write(host.join("d/new"), "host's\n").unwrap();
        let o = overlay_cmd(who, "commit", &keep);
        let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let mut refused: Vec<(&str, bool)> = c["commit"]["refused"]
            .as_array()
            .unwrap_or_else(|| panic!("{who:?}: {}\n{}", stdout(&o), stderr(&o)))
            .iter()
            .map(|r| {
                let why = r["reason"].as_str().unwrap_or_default();
                (
                    r["path"].as_str().unwrap(),
                    why.contains("changed on the host"),
                )
            })
            .collect();
        refused.sort();
        assert_eq!(
            refused,
            [
                ("/work/p/b.txt", true),
                ("/work/p/d", true),
                ("/work/p/keep.txt", true)
            ],
            "{who:?}: {c}"
        );
        let mut applied: Vec<&str> = c["commit"]["applied"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        applied.sort();
        assert_eq!(applied, ["/work/p/a.txt", "/work/p/gone"], "{who:?}: {c}");
        let read = |p: &str| std::fs::read_to_string(host.join(p)).unwrap();
        assert_eq!(read("a.txt"), "jail\n");
        assert_eq!(read("b.txt"), "host edit\n");
        assert_eq!(read("keep.txt"), "host edit\n");
        assert_eq!(
            (read("d/new"), read("d/x")),
            ("host's\n".into(), "x\n".into())
        );
        assert!(!host.join("gone").exists());
        let _ = overlay_cmd(who, "discard", &keep);
    }
}

#[test]
fn a_later_commit_refuses_symlinks_planted_on_the_host_path() {
    for who in common::users("overlay planted") {
        let s = Scratch::new("ov-planted");
        let host = project(&s);
        for d in ["out", "up", "pr", "ok"] {
            std::fs::create_dir(host.join(d)).unwrap();
        }
        let outside = s.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), "outside\n").unwrap();
        give_to_nobody(s.path());
        let script =
            "cd /work/p && for d in out up pr ok; do echo new > $d/f; echo new > $d/g; done";
        let keep = kept(who, &s, &host, script);
        // Planted on the host since the run: each directory on the path
        // replaced by a symlink (outside, into `..`, at /proc).
        for (d, target) in [
            ("out", outside.display().to_string()),
            ("up", "..".to_string()),
            ("pr", "/proc/self/cwd".to_string()),
        ] {
            std::fs::remove_dir(host.join(d)).unwrap();
            std::os::unix::fs::symlink(&target, host.join(d)).unwrap();
        }
        let outside_before = snapshot(&outside);
        let o = overlay_cmd(who, "commit", &keep);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{who:?}: {}\n{}",
            stdout(&o),
            stderr(&o)
        );
        let r: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let refused: BTreeMap<String, String> = r["commit"]["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["path"].as_str().unwrap().into(),
                    x["reason"].as_str().unwrap().into(),
                )
            })
            .collect();
        for d in ["out", "up", "pr"] {
            for f in ["f", "g"] {
                let why = &refused[&format!("/work/p/{d}/{f}")];
                assert!(why.contains("a symlink on the host path"), "{who:?}: {why}");
            }
        }
        assert_eq!(refused.len(), 6, "{refused:?}");
        assert_eq!(std::fs::read(host.join("ok/f")).unwrap(), b"new\n");
        assert_eq!(
            snapshot(&outside),
            outside_before,
            "{who:?}: written outside"
        );
        assert!(!s.path().join("f").exists() && !s.path().join("g").exists());
        // Refused: the layers stay, until discarded.
        assert!(keep.join("stockade-overlay.json").is_file());
        let o = overlay_cmd(who, "discard", &keep);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(std::fs::read_dir(&keep).unwrap().count(), 0);
    }
}

#[test]
fn symlinks_the_payload_made_are_committed_as_data_never_followed() {
    for who in common::users("overlay payload symlinks") {
        let s = Scratch::new("ov-symdata");
        let host = project(&s);
        let outside = s.join("outside");
        std::fs::create_dir_all(outside.join("d")).unwrap();
        std::fs::write(outside.join("target"), "orig\n").unwrap();
        // The host has symlinks where the payload puts a file and a
        // directory of its own.
        std::os::unix::fs::symlink(outside.join("target"), host.join("f")).unwrap();
        std::os::unix::fs::symlink(outside.join("d"), host.join("dir")).unwrap();
        give_to_nobody(s.path());
        let before = snapshot(&outside);
        let script = "cd /work/p && rm f dir && echo mine > f && mkdir dir && echo x > dir/a \
                      && ln -s /etc/shadow shadow && ln -s .. up && ln -s /proc/self/root pr";
        let o = run_sh(
            who,
            &["--overlay", &overlay_flag(&host), "--commit"],
            script,
        );
        let r = common::last_valid_json(&o);
        assert_eq!(
            r["commit"]["refused"],
            serde_json::json!([]),
            "{who:?}: {r}"
        );
        let (kinds, _) = changes(&r);
        assert!(kinds.contains(&("/work/p/f".into(), "type_changed".into(), "file".into())));
        assert!(kinds.contains(&("/work/p/dir".into(), "type_changed".into(), "dir".into())));
        assert_eq!(
            snapshot(&outside),
            before,
            "{who:?}: written through a symlink"
        );
        let now = snapshot(&host);
        assert_eq!(now["f"].0, 'f');
        assert_eq!(now["dir"].0, 'd');
        assert_eq!(now["dir/a"].2, b"x\n");
        assert_eq!(now["shadow"], ('l', 0o777, b"/etc/shadow".to_vec()));
        assert_eq!(now["up"], ('l', 0o777, b"..".to_vec()));
        assert_eq!(now["pr"], ('l', 0o777, b"/proc/self/root".to_vec()));
    }
}

#[test]
fn a_directory_renamed_out_during_a_commit_gets_nothing_written_there() {
    const FILES: usize = 3000;
    for who in common::users("overlay racing rename") {
        let s = Scratch::new("ov-race");
        let host = project(&s);
        std::fs::create_dir(host.join("sub")).unwrap();
        std::fs::write(host.join("sub/old"), "old\n").unwrap();
        let out = s.join("out");
        std::fs::create_dir(&out).unwrap();
        give_to_nobody(s.path());
        let script = format!(
            "cd /work/p/sub && i=0; while [ $i -lt {FILES} ]; do echo $i > f$(printf %05d $i); i=$((i+1)); done"
        );
        let keep = kept(who, &s, &host, &script);
        let mut c = common::stockade(who);
        c.args(["overlay", "commit"]).arg(&keep);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().unwrap();
        // Once the commit is under way in sub/, move sub/ out of the host
        // directory (and never back).
        let first = host.join("sub/f00100");
        let t0 = std::time::Instant::now();
        while !first.exists() && t0.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::yield_now();
        }
        std::fs::rename(host.join("sub"), out.join("sub")).unwrap();
        let moved = std::time::SystemTime::now();
        let o = child.wait_with_output().unwrap();
        let r: serde_json::Value = serde_json::from_str(stdout(&o).trim())
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
        // Nothing in the moved directory was made after it left.
        let mut late = Vec::new();
        for e in std::fs::read_dir(out.join("sub")).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let ctime = std::time::UNIX_EPOCH
                + std::time::Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
            if ctime > moved {
                late.push(e.file_name());
            }
        }
        assert!(
            late.is_empty(),
            "{who:?}: written outside after the move: {late:?}"
        );
        // Those after the move were refused, as moved out or missing.
        let refused = r["commit"]["refused"].as_array().unwrap();
        let n = std::fs::read_dir(out.join("sub")).unwrap().count() - 1;
        assert!(
            n < FILES,
            "{who:?}: the commit was over before the move ({n} files)"
        );
        assert!(!refused.is_empty(), "{who:?}: {r}");
        for x in refused {
            let why = x["reason"].as_str().unwrap();
            assert!(
                why.contains("moved out of the host directory")
                    || why.contains("missing on the host"),
                "{who:?}: {why}"
            );
        }
        assert_eq!(o.status.code(), Some(1));
        let _ = overlay_cmd(who, "discard", &keep);
    }
}

#[test]
fn deny_holds_inside_an_overlay() {
    for who in common::users("overlay deny") {
        let s = Scratch::new("ov-deny");
        let host = project(&s);
        std::fs::write(host.join(".env"), "SECRET\n").unwrap();
        std::fs::create_dir(host.join("secrets")).unwrap();
        std::fs::write(host.join("secrets/key"), "SECRET-KEY\n").unwrap();
        give_to_nobody(s.path());
        let deny = host.join("secrets").display().to_string();
        let script = "cd /work/p; cat .env secrets/key 2>&1; echo x > .env 2>&1; rm -f .env 2>&1; \
                      rm -rf secrets 2>&1; mv secrets s2 2>&1; ls secrets; echo done";
        let o = run_sh(
            who,
            &[
                "--overlay",
                &overlay_flag(&host),
                "--deny-glob",
                "**/.env",
                "--deny",
                &deny,
                "--commit",
            ],
            script,
        );
        let r = common::last_valid_json(&o);
        let out = stdout(&o);
        assert!(!out.contains("SECRET"), "{who:?}: {out}");
        assert!(out.contains("done"), "{out}");
        let mut masked: Vec<&str> = r["masked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap())
            .collect();
        masked.sort();
        assert_eq!(masked, ["/work/p/.env", "/work/p/secrets"], "{r}");
        let (kinds, _) = changes(&r);
        assert!(
            kinds
                .iter()
                .all(|(p, _, _)| !p.contains(".env") && !p.contains("secrets")),
            "{who:?}: {kinds:?}"
        );
        assert_eq!(std::fs::read(host.join(".env")).unwrap(), b"SECRET\n");
        assert_eq!(
            std::fs::read(host.join("secrets/key")).unwrap(),
            b"SECRET-KEY\n"
        );
    }
}

#[test]
fn the_fallback_refuses_an_overlay_saying_why() {
    for who in common::users("overlay fallback") {
        let s = Scratch::new("ov-fallback");
        let host = project(&s);
        let before = snapshot(&host);
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--overlay", &overlay_flag(&host)],
            &["/bin/sh", "-c", "echo x > /work/p/a.txt"],
        )
        .output()
        .unwrap();
        common::expect_code(&o, 125, "overlay in the fallback");
        let err = stderr(&o);
        let line = err
            .lines()
            .find(|l| l.contains("--overlay"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.contains("user namespaces are refused here")
                && line.contains("rather than bind the directory writable"),
            "{line}"
        );
        assert_eq!(snapshot(&host), before);
    }
}

#[test]
fn the_overlay_s_tmpfs_is_capped_as_the_workdir_s() {
    for who in common::users("overlay size") {
        let s = Scratch::new("ov-size");
        let host = project(&s);
        let prof = s.join("small.toml");
        std::fs::write(&prof, "extends = \"shell\"\n[workdir]\nsize = \"2m\"\n").unwrap();
        std::fs::set_permissions(&prof, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = prof.display().to_string();
        let script = "head -c 4194304 /dev/zero > /work/p/big; echo rc=$?";
        let o = run_sh(
            who,
            &["--profile", &p, "--overlay", &overlay_flag(&host)],
            script,
        );
        let r = common::last_valid_json(&o);
        assert!(stdout(&o).contains("rc=1"), "{who:?}: {}", stdout(&o));
        let (_, by) = changes(&r);
        let size = by["/work/p/big"]["size"].as_u64().unwrap();
        assert!(size <= 2 << 20, "{size}");
    }
}

#[test]
fn bad_overlay_flags_are_refused_in_one_line() {
    let s = Scratch::new("ov-flags");
    let host = project(&s);
    let h = host.display().to_string();
    let ov = overlay_flag(&host);
    let inside = format!("{h}/keep");
    for (flags, want) in [
        (
            vec!["--overlay", "/nonexistent-ov"],
            "stockade: --overlay: /nonexistent-ov: expected HOST_DIR:INNER",
        ),
        (
            vec!["--overlay", "/nonexistent-ov:/w"],
            "stockade: --overlay: /nonexistent-ov: no such directory",
        ),
        (
            vec!["--overlay", &format!("{h}:rel")],
            "stockade: --overlay: rel: path inside the jail must be absolute",
        ),
        (
            vec!["--overlay", &format!("{h}:/")],
            "stockade: --overlay: ",
        ),
        (
            vec!["--overlay", &ov, "--overlay", &ov],
            "stockade: --overlay: /work/p is given twice",
        ),
        (
            vec!["--commit"],
            "stockade: --commit: needs an --overlay HOST_DIR:INNER",
        ),
        (
            vec!["--changes-diff", "/tmp/x.diff"],
            "stockade: --changes-diff: needs an --overlay",
        ),
        (
            vec!["--overlay-upper", "/tmp/k"],
            "stockade: --overlay-upper: needs an --overlay",
        ),
        (
            vec!["--overlay", &ov, "--commit=sometimes"],
            "stockade: invalid value 'sometimes' for '--commit",
        ),
        (
            vec!["--overlay", &ov, "--overlay-upper", &inside],
            "stockade: --overlay-upper: ",
        ),
        (
            vec!["--overlay", &ov, "--overlay-upper", &h],
            "stockade: --overlay-upper: ",
        ),
        (
            vec!["--overlay", &ov, "--changes-diff", "/nonexistent-ov/x"],
            "stockade: --changes-diff: /nonexistent-ov: no such directory",
        ),
    ] {
        let o = common::run(Who::Root, &flags, &["true"]);
        common::expect_code(&o, 125, &format!("{flags:?}"));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.starts_with(want), "{flags:?}: {err}");
    }
    // `stockade overlay` on a directory that holds no kept layer.
    let o = overlay_cmd(Who::Root, "commit", &host);
    common::expect_code(&o, 125, "overlay commit of a plain directory");
    assert!(
        stderr(&o).contains("stockade-overlay.json"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1);
}

#[test]
fn the_library_s_jail_takes_an_overlay_and_commits_it() {
    use stockade::outcome::ChangeKind;
    // This process has threads: its jails start from the binary.
    std::env::set_var("STOCKADE_BIN", common::binary());
    let s = Scratch::new("ov-lib");
    let host = project(&s);
    let out = stockade::Jail::profile("shell")
        .unwrap()
        .overlay(&host, "/work/p")
        .commit(stockade::policy::Commit::Success)
        .args([
            "/bin/sh",
            "-c",
            "echo lib >> /work/p/a.txt && rm /work/p/b.txt",
        ])
        .stdout(stockade::Stdio::piped())
        .output()
        .unwrap();
    let o = out.outcome;
    assert_eq!(o.status, stockade::Status::Exited, "{o:?}");
    let changes = o.changes.clone().unwrap();
    let kinds: Vec<(&str, ChangeKind)> =
        changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("/work/p/a.txt", ChangeKind::Modified),
            ("/work/p/b.txt", ChangeKind::Deleted)
        ]
    );
    let commit = o.commit.unwrap();
    assert_eq!(commit.applied, ["/work/p/a.txt", "/work/p/b.txt"]);
    assert_eq!(std::fs::read(host.join("a.txt")).unwrap(), b"alpha\nlib\n");
    assert!(!host.join("b.txt").exists());
    // A bad overlay is the builder's error when the jail starts.
    let e = stockade::Jail::profile("shell")
        .unwrap()
        .overlay("/nonexistent-ov", "/work/p")
        .arg("true")
        .output()
        .unwrap_err();
    assert_eq!(e.to_string(), "overlay: /nonexistent-ov: no such directory");
}

#[test]
fn hard_links_are_listed_as_the_files_they_are_and_committed_as_copies() {
    for who in common::users("overlay hard links") {
        let s = Scratch::new("ov-hard");
        let host = project(&s);
        let a_ino = std::fs::metadata(host.join("a.txt")).unwrap().ino();
        let keep = s.join("keep");
        let k = keep.display().to_string();
        // A link to a host file (overlayfs copies it up first), links
        // among new files, and a link to a file of the jail's outside
        // the overlay (refused: another mount).
        let script = "cd /work/p && ln a.txt hard && echo n > new && ln new new2 && ln d/x d/x2 \
                      && if ln /etc/hostname outside 2>/dev/null; then echo linked-outside; fi";
        let o = run_sh(
            who,
            &[
                "--overlay",
                &overlay_flag(&host),
                "--overlay-upper",
                &k,
                "--commit",
            ],
            script,
        );
        let r = common::last_valid_json(&o);
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}\n{}", stderr(&o));
        assert_eq!(
            r["stdout"]["data"], "",
            "{who:?}: a link out of the overlay was made"
        );
        let (kinds, by) = changes(&r);
        // Each name a link made is a file of its own in the listing; the
        // linked-to file, copied up unchanged, is no change.
        let want: Vec<Kind> = ["d/x2", "hard", "new", "new2"]
            .iter()
            .map(|p| (format!("/work/p/{p}"), "added".into(), "file".into()))
            .collect();
        assert_eq!(kinds, want, "{who:?}");
        assert_eq!(
            by["/work/p/hard"]["sha256"],
            host_sha256(&host.join("a.txt"))
        );
        assert_eq!(
            r["commit"]["refused"],
            serde_json::json!([]),
            "{who:?}: {r}"
        );
        // Committed as copies: no committed file is a link to the upper
        // layer (outside HOST_DIR), to another, or to the file it named.
        let upper = keep.join("0/upper");
        let mut inodes = std::collections::BTreeSet::new();
        for p in ["d/x2", "hard", "new", "new2"] {
            let m = std::fs::symlink_metadata(host.join(p)).unwrap();
            assert_eq!(m.nlink(), 1, "{who:?}: {p} is a link");
            assert!(inodes.insert(m.ino()), "{who:?}: {p} shares an inode");
            let u = std::fs::symlink_metadata(upper.join(p)).unwrap();
            assert_ne!((u.dev(), u.ino()), (m.dev(), m.ino()), "{who:?}: {p}");
        }
        assert_eq!(std::fs::metadata(host.join("a.txt")).unwrap().ino(), a_ino);
        assert_eq!(std::fs::metadata(host.join("a.txt")).unwrap().nlink(), 1);
        assert_eq!(std::fs::read(host.join("hard")).unwrap(), b"alpha\n");
        assert!(!host.join("outside").exists());
        let _ = overlay_cmd(who, "discard", &keep);
    }
}

#[test]
fn ownership_cannot_change_inside_the_jail_and_a_commit_keeps_the_host_s_owners() {
    if !common::is_root() {
        common::skip("overlay ownership", "not root");
        return;
    }
    let s = Scratch::new("ov-owner");
    let host = project(&s);
    std::fs::write(host.join("theirs.txt"), "theirs\n").unwrap();
    common::host_sh_ok(&format!(
        "chown 12345:12345 '{0}/theirs.txt' && chmod 666 '{0}/theirs.txt'",
        host.display()
    ));
    let keep = s.join("keep");
    let k = keep.display().to_string();
    // Only the jail's own ids are mapped: giving a file away, or taking
    // one, is refused; a file of an unmapped owner cannot be copied up.
    let script =
        "cd /work/p; for t in 0 12345 65534; do chown $t a.txt 2>/dev/null && echo gave-$t; done; \
                  chown 0:0 d 2>/dev/null && echo gave-d; \
                  echo more >> theirs.txt 2>/dev/null && echo wrote-theirs; \
                  echo more >> a.txt; echo mine > mine.txt; echo ok";
    let o = run_sh(
        Who::Root,
        &["--overlay", &overlay_flag(&host), "--overlay-upper", &k],
        script,
    );
    let r = common::last_valid_json(&o);
    assert_eq!(r["stdout"]["data"], "ok\n", "{r}\n{}", stderr(&o));
    let (kinds, _) = changes(&r);
    assert_eq!(
        kinds,
        [
            ("/work/p/a.txt".into(), "modified".into(), "file".into()),
            ("/work/p/mine.txt".into(), "added".into(), "file".into()),
        ],
        "{r}"
    );
    // The host gives a.txt to another user before the commit: a change of
    // the host's since the overlay was mounted, which the commit leaves
    // as it is (content and owner); what is made takes its directory's
    // owner.
    common::host_sh_ok(&format!("chown 4242:4242 '{}/a.txt'", host.display()));
    let o = overlay_cmd(Who::Root, "commit", &keep);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(
        c["commit"]["applied"],
        serde_json::json!(["/work/p/mine.txt"]),
        "{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(c["commit"]["refused"][0]["path"], "/work/p/a.txt", "{c}");
    assert!(
        c["commit"]["refused"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("changed on the host"),
        "{c}"
    );
    let owner = |p: &str| {
        let m = std::fs::metadata(host.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner("a.txt"), (4242, 4242));
    assert_eq!(std::fs::read(host.join("a.txt")).unwrap(), b"alpha\n");
    assert_eq!(owner("mine.txt"), (NOBODY, NOBODY));
    assert_eq!(owner("theirs.txt"), (12345, 12345));
    assert_eq!(owner("d"), (NOBODY, NOBODY));
    assert_eq!(std::fs::read(host.join("theirs.txt")).unwrap(), b"theirs\n");
}

#[test]
fn a_directory_swapped_for_a_symlink_during_a_commit_gets_nothing_written_through_it() {
    const FILES: usize = 3000;
    for who in common::users("overlay racing symlink swap") {
        let s = Scratch::new("ov-swap");
        let host = project(&s);
        std::fs::create_dir(host.join("sub")).unwrap();
        let (out, elsewhere) = (s.join("out"), s.join("elsewhere"));
        std::fs::create_dir(&out).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        give_to_nobody(s.path());
        let script = format!(
            "cd /work/p/sub && i=0; while [ $i -lt {FILES} ]; do echo $i > f$(printf %05d $i); i=$((i+1)); done"
        );
        let keep = kept(who, &s, &host, &script);
        let mut c = common::stockade(who);
        c.args(["overlay", "commit"]).arg(&keep);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().unwrap();
        // Once the commit is under way in sub/: sub/ moved out, and a
        // symlink out of the host directory put in its place.
        let first = host.join("sub/f00100");
        let t0 = std::time::Instant::now();
        while !first.exists() && t0.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::yield_now();
        }
        std::fs::rename(host.join("sub"), out.join("sub")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, host.join("sub")).unwrap();
        let swapped = std::time::SystemTime::now();
        let o = child.wait_with_output().unwrap();
        let r: serde_json::Value = serde_json::from_str(stdout(&o).trim())
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
        assert_eq!(
            std::fs::read_dir(&elsewhere).unwrap().count(),
            0,
            "{who:?}: written through the swapped-in symlink"
        );
        let late: Vec<_> = std::fs::read_dir(out.join("sub"))
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                let ctime = std::time::UNIX_EPOCH
                    + std::time::Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
                (ctime > swapped).then(|| e.file_name())
            })
            .collect();
        assert!(
            late.is_empty(),
            "{who:?}: written outside after the swap: {late:?}"
        );
        let refused = r["commit"]["refused"].as_array().unwrap();
        assert!(
            !refused.is_empty(),
            "{who:?}: the commit was over before the swap: {r}"
        );
        for x in refused {
            let why = x["reason"].as_str().unwrap();
            assert!(
                why.contains("moved out of the host directory")
                    || why.contains("a symlink on the host path"),
                "{who:?}: {why}"
            );
        }
        assert_eq!(o.status.code(), Some(1));
        let _ = overlay_cmd(who, "discard", &keep);
    }
}
