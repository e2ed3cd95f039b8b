//! deploy/kubernetes: every manifest validates (strictly: no unknown
//! field) with `kubernetes-validate` from PyPI, installed into a venv
//! under the target directory when missing; and every `stockade serve`
//! flag the manifests pass is one the binary knows.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifests() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    assert!(v.len() >= 2, "manifests in {}", dir.display());
    v
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `kubernetes-validate`, installed when missing; `None` (after a SKIPPED
/// line) only when PyPI cannot be reached.
fn validator(test: &str) -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-validate-venv");
    let exe = venv.join("bin/kubernetes-validate");
    if exe.exists() {
        return Some(exe);
    }
    let o = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(o.status.success(), "python3 -m venv: {}", text(&o));
    let o = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "kubernetes-validate",
        ])
        .output()
        .unwrap();
    if !o.status.success() {
        let t = text(&o);
        let offline = [
            "NewConnectionError",
            "Temporary failure in name resolution",
            "Network is unreachable",
            "Connection refused",
            "ConnectTimeoutError",
            "No matching distribution found",
        ];
        if offline.iter().any(|m| t.contains(m)) {
            let _ = std::fs::remove_dir_all(&venv);
            common::skip(
                test,
                "PyPI is unreachable: cannot install kubernetes-validate",
            );
            return None;
        }
        panic!("pip install kubernetes-validate: {t}");
    }
    Some(exe)
}

#[test]
fn manifests_validate_with_kubernetes_validate() {
    let test = "manifests_validate_with_kubernetes_validate";
    let Some(kv) = validator(test) else { return };
    let files = manifests();
    let o = Command::new(&kv)
        .arg("--strict")
        .args(&files)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "kubernetes-validate --strict: {t}");
    for kind in [
        "pod/evaluator",
        "deployment/stockade",
        "service/stockade",
        "horizontalpodautoscaler/stockade",
    ] {
        assert!(
            t.contains(&format!("passed for resource {kind}")),
            "{kind} not validated:\n{t}"
        );
    }
    assert!(!t.contains("WARN") && !t.contains("ERROR"), "{t}");
    // The validator does reject a wrong field (so a pass means something).
    let scratch = common::Scratch::new("k8s");
    let bad = scratch.join("bad.yaml");
    let sidecar =
        std::fs::read_to_string(files.iter().find(|f| f.ends_with("sidecar.yaml")).unwrap())
            .unwrap();
    std::fs::write(
        &bad,
        sidecar.replace(
            "procMount: Unmasked",
            "procMount: Unmasked\n        procMounts: Unmasked",
        ),
    )
    .unwrap();
    let o = Command::new(&kv)
        .arg("--strict")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "a misspelt field passed: {}", text(&o));
}

#[test]
fn manifests_pass_only_flags_serve_knows() {
    let help = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = text(&help);
    let mut n = 0;
    for f in manifests() {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let Some(flag) = line.trim().strip_prefix("- --") else {
                continue;
            };
            let name = flag.split('=').next().unwrap();
            assert!(
                help.contains(&format!("--{name}")),
                "{}: --{name} is not a serve flag",
                f.display()
            );
            n += 1;
        }
    }
    assert!(n > 10, "found {n} flags");
}
