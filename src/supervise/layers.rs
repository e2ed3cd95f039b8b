//! The outcome's layers: what the plan says of each layer, and what the
//! jail reported it applied.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};

use serde_json::json;

use crate::jail::landlock::MQUEUE_RULE;
use crate::jail::proto::{self, Enforced, LayerRecord};
use crate::outcome::{self, LayerReport, LayerState, Outcome};
use crate::plan::{Fallback, Mode, Namespaces, Plan, SetupError};
use crate::policy::Network;
use crate::{seccomp, sys};

/// Every layer of the run into the outcome: what the plan decided, then
/// what init and the payload reported (which replaces the plan's word on
/// capabilities, Landlock, seccomp, /proc and the root), then the
/// fallback's /proc.
pub(super) fn record_layers(
    plan: &Plan,
    o: &mut Outcome,
    via: sys::CloneVia,
    payload: Vec<LayerRecord>,
) {
    match &plan.mode {
        Mode::Fallback(f) => fallback_layers(f, o),
        Mode::Namespaced(ns) => namespace_layers(plan, ns, o, via),
    }
    planned_layers(plan, o);
    for record in payload {
        record_payload_layer(o, record);
    }
    if let Mode::Fallback(_) = plan.mode {
        let proc = fallback_proc(plan, o);
        o.layers.insert("proc", proc);
    }
}

/// The layers a namespaced jail of `plan` has before its payload's own
/// records: what a fork server's children share with their zygote's jail.
pub(crate) fn planned(plan: &Plan) -> std::collections::BTreeMap<outcome::Name, LayerReport> {
    let mut o = Outcome::new();
    if let Mode::Namespaced(ns) = &plan.mode {
        namespace_layers(plan, ns, &mut o, sys::CloneVia::Clone3);
    }
    planned_layers(plan, &mut o);
    o.layers
}

/// The fallback: no namespaces (the caller, lib::run, fills them with the
/// kernel's reason), no root of its own, a process tree init kills.
fn fallback_layers(f: &Fallback, o: &mut Outcome) {
    o.layers.insert(
        "rootfs",
        LayerReport::unavailable(
            "no mount namespace: the payload sees the host's file system, confined by Landlock to the binds and its private run directory",
        ),
    );
    o.layers.insert(
        "process_tree",
        LayerReport::applied(json!({
            "kill": "every descendant of a subreaper init", "setsid": true, "run_dir": f.run_dir
        })),
    );
}

/// The full jail: every namespace, and the root on a tmpfs.
fn namespace_layers(plan: &Plan, ns: &Namespaces, o: &mut Outcome, via: sys::CloneVia) {
    let entry = match via {
        sys::CloneVia::Clone3 => "clone3",
        sys::CloneVia::Clone3IntoCgroup => "clone3+CLONE_INTO_CGROUP",
        sys::CloneVia::Clone => "clone",
    };
    let user = match (ns.join_userns, ns.userns_block_fd) {
        // The caller's: its maps are its own.
        (Some(fd), _) => json!({ "joined": format!("the caller's fd {fd}") }),
        (None, Some(_)) => json!({ "id_maps": "written by the caller", "created_by": entry }),
        (None, None) => json!({
            "uid_map": plan.identity.uid_map.trim(), "gid_map": plan.identity.gid_map.trim(),
            "setgroups": "deny", "created_by": entry
        }),
    };
    o.layers
        .insert("user_namespace", LayerReport::applied(user));
    // user, pid and net have their own detail (above and below).
    for name in outcome::NAMESPACE_LAYERS
        .into_iter()
        .filter(|n| !matches!(*n, "user_namespace" | "net_namespace"))
    {
        let detail = match (name, ns.join_pidns) {
            ("pid_namespace", Some(fd)) if ns.own_pidns => {
                json!({ "under": format!("the caller's fd {fd}") })
            }
            ("pid_namespace", Some(fd)) => json!({ "joined": format!("the caller's fd {fd}") }),
            _ => serde_json::Value::Null,
        };
        o.layers.insert(name, LayerReport::applied(detail));
    }
    o.layers.insert(
        "net_namespace",
        match plan.layers.network {
            Network::None => match &ns.egress {
                None => LayerReport::applied(json!({ "network": "none", "interfaces": ["lo"] })),
                Some(e) => LayerReport::applied(egress_detail(e)),
            },
            Network::Loopback => {
                LayerReport::applied(json!({ "network": "loopback", "interfaces": ["lo"] }))
            }
            Network::Host => {
                LayerReport::skipped("--network host: the host's network namespace is shared")
            }
        },
    );
    o.layers.insert(
        "rootfs",
        LayerReport::applied(
            json!({ "root": "tmpfs", "pivot_root": true, "entries": plan.root.steps.len() }),
        ),
    );
}

/// The allowlist's network: only `lo`, the proxy on it, what it allows
/// (`record`: `--learn`'s proxy, which reaches any public host).
fn egress_detail(e: &crate::plan::egress::Egress) -> serde_json::Value {
    let allow: Vec<String> = e.allow.iter().map(|a| a.to_string()).collect();
    let mut d = json!({
        "network": if e.record { "record" } else { "allowlist" },
        "interfaces": ["lo"],
        "proxy": format!("127.0.0.1:{}", e.port),
        "allow": allow,
        "upstream": e.upstream.as_ref().map(|u| format!("{} ({})", u.authority, u.var)),
    });
    // The secrets by name and host (`--secret`), never a value.
    if let (Some(i), Some(m)) = (&e.intercept, d.as_object_mut()) {
        let s: Vec<_> = i
            .secrets
            .iter()
            .map(|s| json!({"name": s.name, "hosts": s.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()}))
            .collect();
        m.insert("secrets".into(), s.into());
        let h: Vec<String> = i.http.iter().map(|r| r.to_string()).collect();
        m.insert("allow_http".into(), h.into());
    }
    d
}

/// The layers every run has, as the plan says (the payload's records
/// replace capabilities, Landlock and seccomp when it applied them).
fn planned_layers(plan: &Plan, o: &mut Outcome) {
    o.layers.insert(
        "capabilities",
        LayerReport::applied(json!({ "effective": 0, "permitted": 0, "inheritable": 0, "bounding": 0, "ambient": 0 })),
    );
    o.layers.insert(
        "no_new_privs",
        LayerReport::applied(serde_json::Value::Null),
    );
    let rl: serde_json::Map<String, serde_json::Value> = plan
        .limits
        .rlimits
        .iter()
        .map(|r| (r.name.to_string(), json!(r.soft)))
        .collect();
    o.layers.insert(
        "rlimits",
        LayerReport::applied(serde_json::Value::Object(rl)),
    );
    if plan.layers.landlock.is_none() {
        o.layers.insert(
            "landlock",
            LayerReport::skipped("disabled by the policy (--no-landlock)"),
        );
    }
    if plan.layers.seccomp.is_none() {
        o.layers.insert(
            "seccomp",
            LayerReport::skipped("disabled by the policy (--no-seccomp)"),
        );
    }
}

/// The fallback's `proc` layer: there is no /proc of the jail's own, and
/// the host's is out of the payload's reach unless Landlock is not in force
/// or a bind grants it.
fn fallback_proc(plan: &Plan, o: &Outcome) -> LayerReport {
    let landlock_on = o
        .layers
        .get("landlock")
        .is_some_and(|l| l.state == outcome::LayerState::Applied);
    let proc = std::path::Path::new("/proc");
    let granted = (plan.layers.landlock.iter())
        .flat_map(|l| &l.rules)
        .find(|(p, _)| proc.starts_with(p) || p.starts_with(proc));
    let (why, readable) = match granted {
        _ if !landlock_on => (
            "no pid namespace, and Landlock is not in force: the host's /proc (every host process, its command line included) is readable".to_string(),
            true,
        ),
        Some((p, _)) => (
            format!("no pid namespace, and a bind ({}) grants the host's /proc (every host process, its command line included)", p.display()),
            true,
        ),
        None => (
            "no pid namespace: the host's /proc would show every host process; /proc is outside the Landlock ruleset, so the payload cannot read it".to_string(),
            false,
        ),
    };
    LayerReport {
        state: outcome::LayerState::Unavailable,
        detail: json!({ "why": why, "host_proc_readable": readable }),
    }
}

/// What init or the payload reported of a layer, into the outcome.
pub(crate) fn record_payload_layer(o: &mut Outcome, record: LayerRecord) {
    let unavailable = |detail| LayerReport {
        state: LayerState::Unavailable,
        detail,
    };
    match record {
        LayerRecord::Capabilities(c) => {
            o.layers
                .insert("capabilities", LayerReport::applied(detail(&c)));
        }
        LayerRecord::Landlock(l) => {
            let mqueue = l.skipped.iter().find(|s| s.path == MQUEUE_RULE);
            if let (Some(s), true) = (mqueue, l.status != Enforced::Not) {
                o.warnings.push(format!(
                    "POSIX message queues are refused by Landlock (EACCES): no rule on the IPC namespace's mqueue filesystem ({})",
                    s.why
                ));
            }
            let report = if l.status == Enforced::Not {
                unavailable(detail(&l))
            } else {
                LayerReport::applied(detail(&l))
            };
            o.layers.insert("landlock", report);
        }
        LayerRecord::LandlockUnavailable { why } => {
            let report = unavailable(json!({ "status": "unavailable", "why": why }));
            o.layers.insert("landlock", report);
        }
        LayerRecord::Seccomp(s) => {
            let report = LayerReport::applied(json!({
                "action": seccomp::action_name(s.action), "allowed": s.allowed,
                "groups": s.groups, "instructions": s.instructions
            }));
            o.layers.insert("seccomp", report);
        }
        LayerRecord::Chroot => {
            if let Some(r) = o.layers.get_mut("rootfs") {
                r.detail["pivot_root"] = json!(false);
                r.detail["chroot"] = json!(true);
                r.detail["why"] = json!(CHROOT_WHY);
            }
        }
        LayerRecord::ProcUnavailable { why } => {
            let report = unavailable(json!({ "status": "unavailable", "why": why }));
            o.layers.insert("proc", report);
        }
        LayerRecord::IpcUnbounded { why } => {
            let line = format!(
                "the jail's SysV IPC and POSIX message queues are not bounded ({why}): they do not count against --memory"
            );
            if let Some(r) = o.limits.get_mut("memory") {
                r.why = Some(match r.why.take() {
                    Some(w) => format!("{w}; {line}"),
                    None => line.clone(),
                });
            }
            if let Some(l) = o.layers.get_mut("ipc_namespace") {
                if !l.detail.is_object() {
                    l.detail = json!({});
                }
                l.detail["bounded"] = json!(false);
                l.detail["why"] = json!(why);
            }
            o.warnings.push(line);
        }
    }
}

/// Why the root was chrooted into (the jail chroots only when the kernel
/// refuses pivot_root).
const CHROOT_WHY: &str =
    "pivot_root refused (EPERM): the new root was moved over / and chrooted into";

/// A record's detail for the outcome: the record's own fields.
fn detail(record: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(record).unwrap_or_default()
}

/// The child is killed and reaped after a step of ours failed; if it had
/// failed first (init opens the bind sources before it waits for the go),
/// its own error is the one to report.
pub(super) fn failed_first(pidfd: &OwnedFd, pid: i32, rep: &OwnedFd) -> Option<SetupError> {
    let _ = sys::pidfd_send_signal(pidfd, libc::SIGKILL);
    let _ = sys::wait4(pid);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = sys::read(rep.as_raw_fd(), &mut chunk) {
        buf.extend_from_slice(&chunk[..n]);
    }
    proto::decode(&buf).into_iter().find_map(|r| match r {
        proto::Report::Setup(e) => Some(e),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jail::proto::{CapsLeft, LandlockApplied, SeccompApplied, Skipped, Tcp};
    use crate::seccomp::SeccompAction;

    /// `records` sent over the report pipe and recorded; `name`'s layer as
    /// the outcome's JSON shows it.
    fn recorded(records: Vec<LayerRecord>, name: &str) -> String {
        let mut o = Outcome::new();
        o.layers.insert(
            "rootfs",
            LayerReport::applied(json!({ "root": "tmpfs", "pivot_root": true, "entries": 3 })),
        );
        let bytes: Vec<u8> = records
            .into_iter()
            .flat_map(|r| proto::encode(&proto::Report::Layer(r)))
            .collect();
        for r in proto::decode(&bytes) {
            let proto::Report::Layer(l) = r else {
                panic!("not a layer: {r:?}")
            };
            record_payload_layer(&mut o, l);
        }
        serde_json::to_string(&o.layers[name]).unwrap()
    }

    #[test]
    fn capabilities_and_seccomp_records_are_applied_layers() {
        let caps = CapsLeft {
            effective: 0,
            permitted: 0,
            inheritable: 0,
            bounding: 2,
            ambient: 0,
        };
        assert_eq!(
            recorded(vec![LayerRecord::Capabilities(caps)], "capabilities"),
            r#"{"state":"applied","detail":{"ambient":0,"bounding":2,"effective":0,"inheritable":0,"permitted":0}}"#
        );
        let filter = SeccompApplied {
            action: SeccompAction::Kill,
            allowed: 3,
            groups: vec!["@default".into()],
            instructions: 9,
        };
        assert_eq!(
            recorded(vec![LayerRecord::Seccomp(filter)], "seccomp"),
            r#"{"state":"applied","detail":{"action":"kill","allowed":3,"groups":["@default"],"instructions":9}}"#
        );
    }

    #[test]
    fn landlock_not_enforced_or_refused_is_unavailable() {
        let mut l = LandlockApplied {
            status: Enforced::Not,
            abi: 0,
            fs_rules: 0,
            tcp: Tcp::Unavailable,
            scopes: vec![],
            missing: vec!["fs:execute".into()],
            root_listable: false,
            skipped: vec![Skipped {
                path: "/x\ty".into(),
                why: "gone".into(),
            }],
            why: Some("ENOSYS".into()),
        };
        assert_eq!(
            recorded(vec![LayerRecord::Landlock(l.clone())], "landlock"),
            r#"{"state":"unavailable","detail":{"abi":0,"fs_rules":0,"missing":["fs:execute"],"root_listable":false,"scopes":[],"skipped":[{"path":"/x\ty","why":"gone"}],"status":"not_enforced","tcp":"unavailable","why":"ENOSYS"}}"#
        );
        l.status = Enforced::Partially;
        l.why = None;
        assert!(recorded(vec![LayerRecord::Landlock(l)], "landlock")
            .starts_with(r#"{"state":"applied","detail":{"abi":0,"#));
        let refused = LayerRecord::LandlockUnavailable {
            why: "landlock_create_ruleset: x".into(),
        };
        assert_eq!(
            recorded(vec![refused], "landlock"),
            r#"{"state":"unavailable","detail":{"status":"unavailable","why":"landlock_create_ruleset: x"}}"#
        );
    }

    #[test]
    fn an_mqueue_rule_left_out_is_a_warning() {
        let l = LandlockApplied {
            status: Enforced::Fully,
            abi: 7,
            fs_rules: 3,
            tcp: Tcp::Denied,
            scopes: vec![],
            missing: vec![],
            root_listable: false,
            skipped: vec![Skipped {
                path: MQUEUE_RULE.into(),
                why: "no detached mount of it: fsopen(mqueue) => ENOSYS".into(),
            }],
            why: None,
        };
        let mut o = Outcome::new();
        record_payload_layer(&mut o, LayerRecord::Landlock(l.clone()));
        assert_eq!(o.layers["landlock"].state, LayerState::Applied);
        assert_eq!(
            o.warnings,
            ["POSIX message queues are refused by Landlock (EACCES): no rule on the IPC namespace's mqueue filesystem (no detached mount of it: fsopen(mqueue) => ENOSYS)"]
        );
        let mut o = Outcome::new();
        record_payload_layer(
            &mut o,
            LayerRecord::Landlock(LandlockApplied {
                skipped: vec![],
                ..l
            }),
        );
        assert!(o.warnings.is_empty());
    }

    #[test]
    fn chroot_and_missing_proc_amend_the_root() {
        assert_eq!(
            recorded(vec![LayerRecord::Chroot], "rootfs"),
            r#"{"state":"applied","detail":{"chroot":true,"entries":3,"pivot_root":false,"root":"tmpfs","why":"pivot_root refused (EPERM): the new root was moved over / and chrooted into"}}"#
        );
        let proc = LayerRecord::ProcUnavailable {
            why: "EPERM\nmasked".into(),
        };
        assert_eq!(
            recorded(vec![proc], "proc"),
            r#"{"state":"unavailable","detail":{"status":"unavailable","why":"EPERM\nmasked"}}"#
        );
    }
}
