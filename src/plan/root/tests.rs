//! The root's steps and rules, tested.
use super::*;

fn bind(dst: &str, writable: bool) -> RootStep {
    RootStep::Bind {
        src: PathBuf::from("/x"),
        dst: PathBuf::from(dst),
        writable,
        optional: false,
        devices: false,
    }
}

fn ro(p: &str) -> (PathBuf, Access) {
    (PathBuf::from(p), Access::ReadExec)
}

#[test]
fn read_only_rules_under_a_created_directory_become_one() {
    let steps = vec![
        bind("usr", false),
        bind("etc/ld.so.cache", false),
        bind("etc/ssl", false),
        RootStep::File {
            dst: PathBuf::from("etc/passwd"),
            content: Vec::new(),
            mode: 0o644,
            bound: None,
        },
        RootStep::Symlink {
            target: PathBuf::from("/usr/share/zoneinfo/UTC"),
            link: PathBuf::from("etc/localtime"),
        },
        RootStep::Tmpfs {
            dst: PathBuf::from("tmp"),
            data: String::new(),
        },
    ];
    let rules = vec![
        ro("/usr"),
        ro("/etc/ld.so.cache"),
        ro("/etc/ssl"),
        ro("/etc/passwd"),
        (PathBuf::from("/tmp"), Access::ReadWrite),
    ];
    let mut got = coalesce_rules(rules.clone(), &steps, &[]);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ro("/etc"),
            (PathBuf::from("/tmp"), Access::ReadWrite),
            ro("/usr")
        ]
    );
    // An exclusion beneath /etc, or at or above it, keeps the rules apart.
    for x in ["/etc/ssl", "/etc", "/"] {
        let kept: Vec<_> = rules
            .iter()
            .filter(|(p, _)| !p.starts_with(x))
            .cloned()
            .collect();
        assert_eq!(
            coalesce_rules(kept.clone(), &steps, &[PathBuf::from(x)]),
            kept,
            "{x}"
        );
    }
    // Something writable (or a mount of its own) beneath /etc, too.
    for extra in [
        bind("etc/rw", true),
        RootStep::Tmpfs {
            dst: PathBuf::from("etc/t"),
            data: String::new(),
        },
        RootStep::Dev {
            dst: PathBuf::from("etc/dev"),
            shm: String::new(),
            mqueue: true,
        },
    ] {
        let mut st = steps.clone();
        st.push(extra);
        assert_eq!(coalesce_rules(rules.clone(), &st, &[]), rules);
    }
}

#[test]
fn only_a_root_without_mqueue_asks_for_the_ipc_namespaces() {
    let dev = |mqueue| RootStep::Dev {
        dst: PathBuf::from("dev"),
        shm: String::new(),
        mqueue,
    };
    // bwrap's --dev: no /dev/mqueue, nor anything else of mqueue.
    assert!(!mounts_mqueue(&[bind("usr", false), dev(false)]));
    // stockade's own /dev, or bwrap's --mqueue.
    assert!(mounts_mqueue(&[bind("usr", false), dev(true)]));
    let mq = RootStep::Mqueue {
        dst: PathBuf::from("dev/mqueue"),
    };
    assert!(mounts_mqueue(&[dev(false), mq]));
}

#[test]
fn sources_resolve_as_canonicalize_does() {
    let root = std::env::temp_dir().join(format!("stockade-plan-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("real/sub")).unwrap();
    std::fs::write(root.join("real/f"), b"x").unwrap();
    std::fs::write(root.join("real/sub/g"), b"x").unwrap();
    let link = |t: &str, l: &str| std::os::unix::fs::symlink(t, root.join(l)).unwrap();
    link("real", "dirlink");
    link(&root.join("real/f").display().to_string(), "abslink");
    link("real/sub/../f", "rellink");
    link("missing", "dangling");
    link("loop", "loop");
    let r = root.display().to_string();
    let mut names: Vec<String> = [
        "",
        "/real",
        "/real/f",
        "/real/sub/g",
        "/dirlink",
        "/dirlink/f",
        "/dirlink/sub/g",
        "/abslink",
        "/rellink",
        "/dangling",
        "/loop",
        "/missing",
        "/missing/x",
        "/real/f/x",
        "/real/",
        "/real//f",
        "/real/./f",
        "/real/sub/../f",
        "/dirlink/../real/f",
        "/real/sub/",
        "/real/f/",
    ]
    .iter()
    .map(|n| format!("{r}{n}"))
    .collect();
    names.extend(["/", "/usr", "/etc/hostname", "/proc/self", "/nonexistent"].map(String::from));
    let mut sources = Sources::default();
    for pass in 0..2 {
        for n in &names {
            let p = Path::new(n);
            let want = std::fs::canonicalize(p).map_err(|e| e.raw_os_error());
            let got = sources.canonicalize(p).map_err(|e| e.raw_os_error());
            assert_eq!(got, want, "{n} (pass {pass})");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn plain_split_takes_only_plain_paths() {
    let s = |p: &str| {
        plain_split(Path::new(p)).map(|(a, b)| (a.display().to_string(), b.to_os_string()))
    };
    assert_eq!(s("/usr"), Some(("/".into(), "usr".into())));
    assert_eq!(s("/etc/ssl"), Some(("/etc".into(), "ssl".into())));
    for p in [
        "/",
        "",
        "etc",
        "/etc/",
        "/etc//ssl",
        "/etc/./ssl",
        "/etc/..",
        "/a/../b",
    ] {
        assert_eq!(s(p), None, "{p}");
    }
}
