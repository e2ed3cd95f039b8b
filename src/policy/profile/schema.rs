//! The profile file's schema: what serde reads from the TOML, every value
//! with its place in the file (for errors).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::policy::{Network, SeccompAction};

/// The values `network` takes.
pub(super) const NETWORKS: &[(&str, Network)] = &[
    ("none", Network::None),
    ("loopback", Network::Loopback),
    ("host", Network::Host),
];

/// The values `seccomp.action` takes.
pub(super) const SECCOMP_ACTIONS: &[(&str, SeccompAction)] = &[
    ("errno", SeccompAction::Errno),
    ("kill", SeccompAction::Kill),
];

/// The value named `name` in `table`.
pub(super) fn value_of<T: Copy>(table: &[(&str, T)], name: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// The name of `v` in `table`.
pub(super) fn name_of<T: PartialEq>(table: &[(&'static str, T)], v: T) -> Option<&'static str> {
    table.iter().find(|(_, t)| *t == v).map(|(n, _)| *n)
}

/// `"a" or "b"`: what a value named in `table` may be.
pub(super) fn expected<T>(table: &[(&str, T)]) -> String {
    let names: Vec<String> = table.iter().map(|(n, _)| format!("{n:?}")).collect();
    names.join(" or ")
}

pub(super) type S<T> = Spanned<T>;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct Raw {
    pub(super) extends: Option<S<String>>,
    pub(super) description: Option<S<String>>,
    pub(super) require: Option<Vec<S<String>>>,
    pub(super) uid: Option<S<u32>>,
    pub(super) gid: Option<S<u32>>,
    pub(super) host_uid: Option<S<u32>>,
    pub(super) host_gid: Option<S<u32>>,
    pub(super) hostname: Option<S<String>>,
    pub(super) network: Option<S<RawNetwork>>,
    pub(super) chdir: Option<S<String>>,
    pub(super) workdir: Option<RawWorkdir>,
    pub(super) filesystem: Option<RawFs>,
    pub(super) environment: Option<RawEnv>,
    pub(super) limits: Option<RawLimits>,
    pub(super) seccomp: Option<RawSeccomp>,
    pub(super) landlock: Option<RawLandlock>,
    pub(super) namespaces: Option<RawNamespaces>,
    pub(super) python: Option<RawPython>,
}

/// `network = "none"`, or the table `[network]` with `mode` and `allow`.
#[derive(Debug)]
pub(super) enum RawNetwork {
    Mode(String),
    Table(RawNetTable),
}

impl RawNetwork {
    /// The mode it names, if any.
    pub(super) fn mode(&self) -> Option<&str> {
        match self {
            RawNetwork::Mode(m) => Some(m),
            RawNetwork::Table(t) => t.mode.as_ref().map(|m| m.get_ref().as_str()),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawNetTable {
    pub(super) mode: Option<S<String>>,
    pub(super) allow: Option<Vec<S<String>>>,
}

impl<'de> Deserialize<'de> for RawNetwork {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawNetwork;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"none\", \"host\" or a table with `mode` and `allow`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawNetwork, E> {
                Ok(RawNetwork::Mode(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<RawNetwork, A::Error> {
                let d = serde::de::value::MapAccessDeserializer::new(m);
                RawNetTable::deserialize(d).map(RawNetwork::Table)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawWorkdir {
    pub(super) host: Option<S<String>>,
    pub(super) path: Option<S<String>>,
    pub(super) size: Option<S<Scalar>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawFs {
    pub(super) system: Option<S<bool>>,
    pub(super) ro: Option<Vec<S<String>>>,
    pub(super) rw: Option<Vec<S<String>>>,
    pub(super) bind: Option<Vec<RawBind>>,
    pub(super) tmpfs: Option<Vec<RawTmpfs>>,
    pub(super) symlink: Option<Vec<RawSymlink>>,
    pub(super) file: Option<Vec<RawFile>>,
    pub(super) dir: Option<Vec<S<String>>>,
    pub(super) deny: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawBind {
    pub(super) src: S<String>,
    pub(super) dst: Option<S<String>>,
    pub(super) writable: Option<S<bool>>,
    pub(super) optional: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawTmpfs {
    pub(super) path: S<String>,
    pub(super) size: Option<S<Scalar>>,
    pub(super) mode: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawSymlink {
    pub(super) target: S<String>,
    pub(super) link: S<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawFile {
    pub(super) path: S<String>,
    pub(super) content: S<String>,
    pub(super) mode: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawEnv {
    pub(super) clear: Option<S<bool>>,
    pub(super) set: Option<BTreeMap<String, S<String>>>,
    pub(super) keep: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawLimits {
    pub(super) memory: Option<S<Scalar>>,
    pub(super) memory_high: Option<S<Scalar>>,
    pub(super) cpus: Option<S<Scalar>>,
    pub(super) pids: Option<S<Scalar>>,
    pub(super) cpu_time: Option<S<Scalar>>,
    pub(super) timeout: Option<S<Scalar>>,
    pub(super) grace: Option<S<Scalar>>,
    pub(super) max_output: Option<S<Scalar>>,
    pub(super) max_file_size: Option<S<Scalar>>,
    pub(super) max_open_files: Option<S<Scalar>>,
    pub(super) tmp_size: Option<S<Scalar>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawSeccomp {
    pub(super) enabled: Option<S<bool>>,
    pub(super) groups: Option<Vec<S<String>>>,
    pub(super) allow: Option<Vec<S<String>>>,
    pub(super) action: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawLandlock {
    pub(super) enabled: Option<S<bool>>,
    pub(super) exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawNamespaces {
    pub(super) user: Option<S<bool>>,
    pub(super) mount: Option<S<bool>>,
    pub(super) pid: Option<S<bool>>,
    pub(super) ipc: Option<S<bool>>,
    pub(super) uts: Option<S<bool>>,
    pub(super) cgroup: Option<S<bool>>,
    pub(super) net: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawPython {
    pub(super) enabled: Option<S<bool>>,
    pub(super) interpreter: Option<S<String>>,
}

/// A limit value: `"64m"`, `4096`, `0.5`, `"10s"`.
#[derive(Deserialize, Debug, Clone)]
#[serde(
    untagged,
    expecting = "expected a number or a string (a size such as \"64m\", a duration such as \"10s\")"
)]
pub(super) enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    pub(super) fn shown(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => format!("{s:?}"),
        }
    }
}

/// Tables a profile has once (`[limits]`), not as arrays (`[[limits]]`).
pub(super) const TABLES: &[&str] = &[
    "workdir",
    "filesystem",
    "environment",
    "limits",
    "seccomp",
    "landlock",
    "namespaces",
    "python",
];
