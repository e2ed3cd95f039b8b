//! Blocking HTTP/1.1 over a unix socket, one connection per request
//! (`Connection: close`): just enough for `stockade serve`'s answers.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::json;

/// `METHOD PATH` with an optional JSON body: the status and the body.
pub fn request(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    request_accepting(sock, method, path, body, "application/json")
}

/// [`request`] with an `Accept` header (`application/x-ndjson`: the
/// streamed answer).
pub fn request_accepting(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    accept: &str,
) -> Result<(u16, String), String> {
    let mut s =
        UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(180)))
        .map_err(|e| e.to_string())?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: stockade\r\nContent-Type: application/json\r\nAccept: {accept}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .map_err(|e| format!("receive: {e}"))?;
    parse(&buf)
}

/// The status code and the (de-chunked) body of a whole response.
fn parse(buf: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {:?}", short(&text)))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {:?}", short(head)))?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").ok_or("bad chunk")?;
        let n = usize::from_str_radix(size.trim(), 16).map_err(|e| format!("chunk size: {e}"))?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..n).ok_or("short chunk")?);
        s = rest.get(n + 2..).ok_or("short chunk")?;
    }
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}

/// The limits an evaluator service sends with each request (below
/// serve's ceilings, none of them its defaults): `stockade run`'s row uses
/// the same as flags (`super::run_argv`).
pub const LIMITS: &str =
    r#"{"memory":"128m","pids":64,"cpus":1,"timeout":"10s","max_output":"64k"}"#;

/// The body of `POST /v1/runs` for the evaluator, with [`LIMITS`] or
/// with none (serve's defaults).
pub fn run_body(limits: bool) -> String {
    format!(
        "{{\"profile\":\"python\",\"argv\":[\"python3\",\"-c\",{}],\"stdin\":{}{}}}",
        quote(super::EVALUATOR),
        quote(super::INPUT),
        if limits {
            format!(",\"limits\":{LIMITS}")
        } else {
            String::new()
        }
    )
}

fn quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Why an answer is not the evaluator's score (None: it is).
pub fn not_scored(status: u16, body: &str) -> Option<String> {
    if status != 200 {
        return Some(format!("HTTP {status}: {}", short(body)));
    }
    let v = match json::parse(body) {
        Ok(v) => v,
        Err(e) => return Some(format!("not JSON ({e}): {}", short(body))),
    };
    let out = v
        .at(&["stdout", "data"])
        .and_then(|d| d.as_str())
        .unwrap_or("");
    scored(&v, out, body)
}

/// Why a streamed (ndjson) answer is not the evaluator's score: its
/// `{"stdout": …}` lines hold it, its last line is the outcome.
pub fn not_scored_streamed(status: u16, body: &str) -> Option<String> {
    if status != 200 {
        return Some(format!("HTTP {status}: {}", short(body)));
    }
    let mut out = String::new();
    let mut last = None;
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let v = match json::parse(line) {
            Ok(v) => v,
            Err(e) => return Some(format!("a line not JSON ({e}): {}", short(line))),
        };
        match v.get("stdout").and_then(|d| d.as_str()) {
            Some(d) => out.push_str(d),
            None => last = Some(v),
        }
    }
    match last {
        Some(v) => scored(&v, &out, body),
        None => Some(format!("no outcome line: {}", short(body))),
    }
}

fn scored(outcome: &json::Value, out: &str, body: &str) -> Option<String> {
    let exited = outcome.get("status").and_then(|s| s.as_str()) == Some("exited");
    let code = outcome.get("exit_code").and_then(|c| c.as_f64());
    if exited && code == Some(0.0) && out.contains(super::EXPECTED) {
        None
    } else {
        Some(format!("not scored: {}", short(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_answers() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse(plain).unwrap(), (200, "{}".to_string()));
        let chunked =
            b"HTTP/1.1 429 Too Many Requests\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap(), (429, "abcde".to_string()));
    }

    #[test]
    fn the_body_is_json_with_the_program_and_input() {
        let v = json::parse(&run_body(false)).unwrap();
        assert_eq!(v.get("profile").and_then(|p| p.as_str()), Some("python"));
        assert_eq!(
            v.get("stdin").and_then(|p| p.as_str()),
            Some(super::super::INPUT)
        );
        assert!(v.get("limits").is_none());
        let v = json::parse(&run_body(true)).unwrap();
        let limits = v.get("limits").expect("the limits a service sends");
        assert_eq!(limits.get("memory").and_then(|m| m.as_str()), Some("128m"));
    }

    #[test]
    fn a_streamed_answer_is_scored_from_its_lines() {
        let lines =
            "{\"stdout\":\"{\\\"score\\\": 0.5}\\n\"}\n{\"status\":\"exited\",\"exit_code\":0}\n";
        assert_eq!(not_scored_streamed(200, lines), None);
        let failed = "{\"stdout\":\"\"}\n{\"status\":\"exited\",\"exit_code\":1}\n";
        assert!(not_scored_streamed(200, failed).is_some());
        assert!(not_scored_streamed(200, "{\"stdout\":\"x\"}\n").is_some());
    }
}
