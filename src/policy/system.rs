//! The host's part of the default filesystem and environment: the system
//! binds (/usr and the host's /bin /sbin /lib* layout), the few /etc files
//! programs need to start, and the default environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::MountSpec;

/// What readlink(2) says of a host path.
enum Link {
    /// A symlink, and where it points.
    Symlink(PathBuf),
    /// It exists and is not a symlink (EINVAL).
    Other,
    /// Missing, or not reachable.
    Absent,
}

fn read_link(p: &str) -> Link {
    match std::fs::read_link(p) {
        Ok(t) => Link::Symlink(t),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Link::Other,
        Err(_) => Link::Absent,
    }
}

/// The default filesystem: /usr and the host's /bin /sbin /lib* layout, the
/// few /etc files programs need to start, /proc, /dev and /tmp.
pub fn default_mounts(
    uid: u32,
    gid: u32,
    hostname: &str,
    workdir: &Path,
    tmp_size: u64,
) -> Vec<MountSpec> {
    let mut m = system_mounts();
    m.extend(generated_etc(uid, gid, hostname, workdir));
    m.push(MountSpec::Proc {
        dst: "/proc".into(),
    });
    m.push(MountSpec::Dev { dst: "/dev".into() });
    m.push(MountSpec::Tmpfs {
        dst: "/tmp".into(),
        size: tmp_size,
        mode: 0o1777,
    });
    m
}

/// The host's /usr, its /bin /sbin /lib* layout (symlinks kept as
/// symlinks) and the /etc files programs need to start, read-only.
fn system_mounts() -> Vec<MountSpec> {
    let mut m = vec![MountSpec::Bind {
        src: "/usr".into(),
        dst: "/usr".into(),
        writable: false,
        optional: false,
    }];
    // readlink first: one call answers for a symlink (a merged /usr) and for
    // a missing path; only a real directory needs a stat as well.
    for d in ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"] {
        match read_link(d) {
            Link::Symlink(t) => m.push(MountSpec::Symlink {
                target: t,
                link: d.into(),
            }),
            Link::Other if std::fs::symlink_metadata(d).is_ok_and(|md| md.is_dir()) => {
                m.push(MountSpec::Bind {
                    src: d.into(),
                    dst: d.into(),
                    writable: false,
                    optional: true,
                })
            }
            _ => {}
        }
    }
    for f in [
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/nsswitch.conf",
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/alternatives",
        "/etc/mime.types",
    ] {
        m.push(MountSpec::Bind {
            src: f.into(),
            dst: f.into(),
            writable: false,
            optional: true,
        });
    }
    // localtime is usually a symlink into /usr/share/zoneinfo: keep it so.
    match read_link("/etc/localtime") {
        Link::Symlink(t) => m.push(MountSpec::Symlink {
            target: t,
            link: "/etc/localtime".into(),
        }),
        Link::Other => m.push(MountSpec::Bind {
            src: "/etc/localtime".into(),
            dst: "/etc/localtime".into(),
            writable: false,
            optional: true,
        }),
        Link::Absent => {}
    }
    m
}

/// /etc/passwd, group, hosts and hostname, written for the jail's ids and
/// hostname.
fn generated_etc(uid: u32, gid: u32, hostname: &str, workdir: &Path) -> Vec<MountSpec> {
    let mut m = Vec::new();
    let home = workdir.display();
    let passwd = if uid == 0 {
        format!("root:x:0:{gid}:root:{home}:/bin/sh\n")
    } else {
        format!("root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:stockade jail user:{home}:/bin/sh\n")
    };
    m.push(MountSpec::File {
        dst: "/etc/passwd".into(),
        content: (passwd + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
            .into_bytes(),
        mode: 0o644,
    });
    m.push(MountSpec::File {
        dst: "/etc/group".into(),
        content: if gid == 0 {
            "root:x:0:\nnogroup:x:65534:\n".to_string()
        } else {
            format!("root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n")
        }
        .into_bytes(),
        mode: 0o644,
    });
    m.push(MountSpec::File {
        dst: "/etc/hosts".into(),
        content: format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n")
            .into_bytes(),
        mode: 0o644,
    });
    m.push(MountSpec::File {
        dst: "/etc/hostname".into(),
        content: format!("{hostname}\n").into_bytes(),
        mode: 0o644,
    });
    m
}

/// The default environment: PATH, LANG, LC_ALL, TERM from the caller (PATH
/// defaults to the usual directories), HOME = the workdir.
pub fn default_env(workdir: &Path) -> Vec<(OsString, OsString)> {
    let mut env = Vec::new();
    let path = std::env::var_os("PATH")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.push(("PATH".into(), path));
    for k in ["LANG", "LC_ALL", "TERM"] {
        if let Some(v) = std::env::var_os(k) {
            env.push((k.into(), v));
        }
    }
    env.push(("HOME".into(), workdir.as_os_str().to_owned()));
    env
}

/// Set `k` to `v`, replacing an earlier value.
pub fn set_env(env: &mut Vec<(OsString, OsString)>, k: OsString, v: OsString) {
    env.retain(|(ek, _)| *ek != k);
    env.push((k, v));
}
