//! `POST /v1/runs`: the request body, checked field by field. Every refusal
//! names the field (`argv[2]`, `files["../x"]`, `limits.memory`).

use std::time::Duration;

use serde_json::{Map, Value};

use super::error::ApiError;

/// One file to write into the run's workdir.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSpec {
    /// The path relative to the workdir, checked: plain components only.
    pub path: String,
    pub content: Vec<u8>,
    pub executable: bool,
}

/// The limits a request asks for (before clamping).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requested {
    pub memory: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub timeout: Option<Duration>,
    pub max_output: Option<u64>,
}

/// A checked run request.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub profile: Option<String>,
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub files: Vec<FileSpec>,
    pub env: Vec<(String, String)>,
    pub limits: Requested,
    /// An overlay of an operator's base directory (`workspace`).
    pub workspace: Option<super::workspace::Ask>,
    /// The operator's secrets the run's jail may use, by name.
    pub secrets: Vec<String>,
}

/// Most arguments and environment variables one request may give.
const MAX_ARGS: usize = 4096;
/// Longest file path (bytes) and path component.
const MAX_PATH: usize = 1024;
const MAX_NAME: usize = 255;

/// Parse and check a request body. `max_files` bounds the file count (413).
pub fn parse(body: &[u8], max_files: usize) -> Result<RunRequest, ApiError> {
    let v = super::body::json(body)?;
    let Value::Object(obj) = v else {
        return Err(ApiError::field("body", "must be a JSON object"));
    };
    for k in obj.keys() {
        if ![
            "profile",
            "argv",
            "stdin",
            "files",
            "env",
            "limits",
            "workspace",
            "secrets",
        ]
        .contains(&k.as_str())
        {
            return Err(ApiError::field(k.clone(), "unknown field"));
        }
    }
    let profile = match obj.get("profile") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ApiError::field("profile", "must be a string")),
    };
    Ok(RunRequest {
        profile,
        argv: argv(obj.get("argv"))?,
        stdin: match obj.get("stdin") {
            None | Some(Value::Null) => None,
            Some(v) => Some(content("stdin", v)?),
        },
        files: files(obj.get("files"), max_files)?,
        env: env(obj.get("env"))?,
        limits: limits(obj.get("limits"))?,
        workspace: super::workspace::parse_ask(obj.get("workspace"))?,
        secrets: super::secrets::parse(obj.get("secrets"))?,
    })
}

fn argv(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let Some(Value::Array(a)) = v else {
        return Err(ApiError::field(
            "argv",
            "required: a non-empty array of strings",
        ));
    };
    if a.is_empty() {
        return Err(ApiError::field("argv", "must not be empty"));
    }
    if a.len() > MAX_ARGS {
        return Err(ApiError::field(
            "argv",
            format!("at most {MAX_ARGS} entries"),
        ));
    }
    a.iter()
        .enumerate()
        .map(|(i, x)| match x {
            Value::String(s) if s.contains('\0') => {
                Err(ApiError::field(format!("argv[{i}]"), "contains a NUL byte"))
            }
            Value::String(s) if i == 0 && s.is_empty() => {
                Err(ApiError::field("argv[0]", "must not be empty"))
            }
            Value::String(s) => Ok(s.clone()),
            _ => Err(ApiError::field(format!("argv[{i}]"), "must be a string")),
        })
        .collect()
}

/// Bytes given as a string (UTF-8 text) or `{"base64": "…"}`.
fn content(field: &str, v: &Value) -> Result<Vec<u8>, ApiError> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(o) if o.len() == 1 && o.contains_key("base64") => match &o["base64"] {
            Value::String(s) => super::b64::decode(s)
                .ok_or_else(|| ApiError::field(format!("{field}.base64"), "not valid base64")),
            _ => Err(ApiError::field(
                format!("{field}.base64"),
                "must be a string",
            )),
        },
        _ => Err(ApiError::field(
            field,
            "must be a string or {\"base64\": \"…\"}",
        )),
    }
}

fn files(v: Option<&Value>, max_files: usize) -> Result<Vec<FileSpec>, ApiError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(ApiError::field(
                "files",
                "must be an object {relative path: content}",
            ))
        }
    };
    if obj.len() > max_files {
        return Err(ApiError::too_large(format!(
            "files: {} files; at most {max_files} per request",
            obj.len()
        )));
    }
    let mut out = Vec::with_capacity(obj.len());
    for (path, val) in obj {
        let field = format!("files[{}]", Value::String(path.clone()));
        check_path(&field, path)?;
        let (content, executable) = file_value(&field, val)?;
        out.push(FileSpec {
            path: path.clone(),
            content,
            executable,
        });
    }
    // Parents before children; a file that is also a parent is refused
    // when written.
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A workdir-relative path: plain components only.
pub fn check_path(field: &str, path: &str) -> Result<(), ApiError> {
    if path.is_empty() {
        return Err(ApiError::field(field, "empty path"));
    }
    if path.contains('\0') {
        return Err(ApiError::field(field, "contains a NUL byte"));
    }
    if path.starts_with('/') {
        return Err(ApiError::field(
            field,
            "absolute path: paths are relative to the workdir",
        ));
    }
    if path.len() > MAX_PATH {
        return Err(ApiError::field(
            field,
            format!("longer than {MAX_PATH} bytes"),
        ));
    }
    for c in path.split('/') {
        match c {
            ".." => return Err(ApiError::field(field, "`..` is not allowed")),
            "." | "" => {
                return Err(ApiError::field(
                    field,
                    "empty or `.` component: write the path plainly (a/b.txt)",
                ))
            }
            c if c.len() > MAX_NAME => {
                return Err(ApiError::field(
                    field,
                    format!("a component is longer than {MAX_NAME} bytes"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A file's value: content (see [`content`]), or an object with `text` or
/// `base64` and an optional `executable`. A `symlink` is refused.
fn file_value(field: &str, v: &Value) -> Result<(Vec<u8>, bool), ApiError> {
    let Value::Object(o) = v else {
        return Ok((content(field, v)?, false));
    };
    if o.contains_key("symlink") {
        return Err(ApiError::field(
            field,
            "symlinks are not allowed: only regular files are written",
        ));
    }
    for k in o.keys() {
        if !["text", "base64", "executable"].contains(&k.as_str()) {
            return Err(ApiError::field(format!("{field}.{k}"), "unknown field"));
        }
    }
    let executable = match o.get("executable") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::field(
                format!("{field}.executable"),
                "must be a boolean",
            ))
        }
    };
    let bytes = match (o.get("text"), o.get("base64")) {
        (Some(Value::String(t)), None) => t.as_bytes().to_vec(),
        (Some(_), None) => {
            return Err(ApiError::field(format!("{field}.text"), "must be a string"))
        }
        (None, Some(b)) => content(field, &serde_json::json!({ "base64": b }))?,
        _ => {
            return Err(ApiError::field(
                field,
                "give exactly one of \"text\" and \"base64\"",
            ))
        }
    };
    Ok((bytes, executable))
}

fn env(v: Option<&Value>) -> Result<Vec<(String, String)>, ApiError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(ApiError::field("env", "must be an object {NAME: value}")),
    };
    if obj.len() > MAX_ARGS {
        return Err(ApiError::field(
            "env",
            format!("at most {MAX_ARGS} variables"),
        ));
    }
    obj.iter()
        .map(|(k, v)| {
            let field = format!("env.{k}");
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ApiError::field(
                    field,
                    "a name must be non-empty, without `=` or NUL",
                ));
            }
            match v {
                Value::String(s) if s.contains('\0') => {
                    Err(ApiError::field(field, "contains a NUL byte"))
                }
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(ApiError::field(field, "must be a string")),
            }
        })
        .collect()
}

fn limits(v: Option<&Value>) -> Result<Requested, ApiError> {
    use super::clamp::{read, COUNT, CPUS, DURATION, SIZE};
    let obj: &Map<String, Value> = match v {
        None | Some(Value::Null) => return Ok(Requested::default()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(ApiError::field("limits", "must be an object")),
    };
    if let Some(k) = obj.keys().find(|k| !LIMITS.contains(&k.as_str())) {
        return Err(ApiError::field(
            format!("limits.{k}"),
            "unknown limit (memory, cpus, pids, timeout, max_output)",
        ));
    }
    let field = |k: &str| format!("limits.{k}");
    Ok(Requested {
        memory: read(&field("memory"), SIZE, obj.get("memory"))?,
        cpus: read(&field("cpus"), CPUS, obj.get("cpus"))?,
        pids: read(&field("pids"), COUNT, obj.get("pids"))?,
        timeout: read(&field("timeout"), DURATION, obj.get("timeout"))?,
        max_output: read(&field("max_output"), SIZE, obj.get("max_output"))?,
    })
}

/// The limits a run request may name.
pub const LIMITS: [&str; 5] = ["memory", "cpus", "pids", "timeout", "max_output"];

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> String {
        let e = parse(body.as_bytes(), 10).expect_err(body);
        e.field.unwrap_or_else(|| e.message.clone())
    }

    #[test]
    fn good_request() {
        let r = parse(
            br#"{"profile":"shell","argv":["sh","-c","cat a/b"],"stdin":"hi",
                "files":{"a/b":"x","run.sh":{"text":"echo","executable":true},"bin":{"base64":"AAE="}},
                "env":{"K":"v"},"limits":{"memory":"64m","timeout":2.5,"pids":10}}"#,
            10,
        )
        .unwrap();
        assert_eq!(r.argv, ["sh", "-c", "cat a/b"]);
        assert_eq!(r.stdin.as_deref(), Some(&b"hi"[..]));
        assert_eq!(r.files.len(), 3);
        assert_eq!(r.files[1].content, [0, 1]);
        assert!(r.files[2].executable);
        assert_eq!(r.limits.memory, Some(64 << 20));
        assert_eq!(r.limits.timeout, Some(Duration::from_millis(2500)));
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(field_of(r#"{"argv":[]}"#), "argv");
        assert_eq!(field_of(r#"{"argv":["a",1]}"#), "argv[1]");
        assert_eq!(field_of(r#"{"argv":["a"],"x":1}"#), "x");
        assert_eq!(
            field_of(r#"{"argv":["a"],"files":{"../x":""}}"#),
            r#"files["../x"]"#
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"files":{"/etc/x":""}}"#),
            r#"files["/etc/x"]"#
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"files":{"a/./b":""}}"#),
            r#"files["a/./b"]"#
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"files":{"a\u0000b":""}}"#),
            r#"files["a\u0000b"]"#
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"files":{"l":{"symlink":"/etc"}}}"#),
            r#"files["l"]"#
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"limits":{"memory":0}}"#),
            "limits.memory"
        );
        assert_eq!(
            field_of(r#"{"argv":["a"],"limits":{"disk":1}}"#),
            "limits.disk"
        );
        assert_eq!(field_of(r#"{"argv":["a"],"env":{"A=B":"x"}}"#), "env.A=B");
        assert_eq!(
            field_of(r#"{"argv":["a"],"stdin":{"base64":"%%"}}"#),
            "stdin.base64"
        );
    }

    #[test]
    fn too_many_files_is_413() {
        let e = parse(br#"{"argv":["a"],"files":{"a":"","b":""}}"#, 1).unwrap_err();
        assert_eq!(e.status, 413);
    }
}
