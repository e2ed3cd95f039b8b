//! For the `stockade serve` tests: start the real server (as root or as
//! uid 65534) on a unix socket in a scratch directory, and a small
//! blocking HTTP/1.1 client over a unix or TCP stream.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{self, Scratch, Who};

/// How long a test waits for an event that must come.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub struct Server {
    child: Child,
    pub sock: PathBuf,
    /// The server's TMPDIR, where its fallback runs make their run
    /// directories (workdirs are in the jails): empty whenever no run is
    /// on.
    pub runs: PathBuf,
    /// TCP address when listening on TCP.
    pub tcp: Option<String>,
    lines: mpsc::Receiver<String>,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    pub scratch: Scratch,
}

impl Server {
    /// `stockade serve --listen unix:SCRATCH/s.sock ARGS…` as `who`, with
    /// TMPDIR=SCRATCH/runs, once it says it listens.
    pub fn start(who: Who, args: &[&str]) -> Server {
        Server::start_wrapped(&[], who, args)
    }

    /// [`Server::start`] under `wrappers` (programs of tests/payloads that
    /// exec the rest of the command line under a restriction, e.g.
    /// `chk_nouserns`: user namespaces refused).
    pub fn start_wrapped(wrappers: &[&str], who: Who, args: &[&str]) -> Server {
        Server::start_wrapped_in(wrappers, who, args, None)
    }

    /// [`Server::start_wrapped`] with the TMPDIR `runs` (another
    /// server's, which must outlive this one) instead of a fresh one.
    pub fn start_wrapped_in(
        wrappers: &[&str],
        who: Who,
        args: &[&str],
        runs: impl Into<Option<PathBuf>>,
    ) -> Server {
        let scratch = Scratch::new("serve").world_writable();
        let sock = scratch.join("s.sock");
        let runs = runs.into().unwrap_or_else(|| {
            let runs = scratch.join("runs");
            std::fs::create_dir(&runs).unwrap();
            std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
            runs
        });
        let mut c = common::stockade(who);
        if !wrappers.is_empty() {
            // common::stockade is `sig_default BINARY`: the wrappers go
            // between the two.
            let mut argv: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_owned()).collect();
            let bin = argv.pop().expect("the binary");
            argv.extend(
                wrappers
                    .iter()
                    .map(|w| common::c_payload(w).into_os_string()),
            );
            argv.push(bin);
            let prog = c.get_program().to_owned();
            let mut w = std::process::Command::new(prog);
            w.args(argv)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("LANG", "C.UTF-8")
                .current_dir("/")
                .stdin(Stdio::null());
            if who == Who::Nobody && common::is_root() {
                use std::os::unix::process::CommandExt;
                w.uid(common::NOBODY).gid(common::NOBODY);
            }
            c = w;
        }
        c.env("TMPDIR", &runs)
            .arg("serve")
            .args(["--profiles", "shell,python"]);
        if !args.contains(&"--listen") {
            c.arg("--listen").arg(format!("unix:{}", sock.display()));
        }
        c.args(args).stderr(Stdio::piped()).stdout(Stdio::null());
        let mut child = c.spawn().expect("start stockade serve");
        let (tx, lines) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = log.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{l}\n"));
                let _ = tx.send(l);
            }
        });
        let mut s = Server {
            child,
            sock,
            runs,
            tcp: None,
            lines,
            log,
            scratch,
        };
        let l = s.wait_line("listening on");
        if let Some(addr) = l.split("listening on ").nth(1) {
            if !addr.starts_with("unix:") {
                s.tcp = Some(addr.to_string());
            }
        }
        s
    }

    /// Wait for a stderr line holding `needle`; the line.
    pub fn wait_line(&self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(e) => panic!(
                    "no stderr line with {needle:?} ({e}); stderr so far:\n{}",
                    self.log.lock().unwrap()
                ),
            }
        }
    }

    pub fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.sock).expect("connect to the server's socket")
    }

    /// One request on a fresh connection; the whole answer.
    pub fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        send(self.connect(), method, path, headers, body)
    }

    /// `POST /v1/runs` with a JSON body.
    pub fn run(&self, body: &serde_json::Value) -> Resp {
        self.call("POST", "/v1/runs", &[], body.to_string().as_bytes())
    }

    /// Send SIGTERM.
    pub fn term(&self) {
        // SAFETY-free: the kill(1) command, not libc.
        let st = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// The server's pid (the wrappers exec it in place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Poll /readyz until it says 200 (the pools were full once); until
    /// then it must say 503.
    pub fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let r = self.call("GET", "/readyz", &[], b"");
            if r.status == 200 {
                assert_eq!(r.json()["pools_warm"], true);
                return;
            }
            assert_eq!(r.status, 503, "{}", r.text());
            assert!(
                std::time::Instant::now() < deadline,
                "the pool never got warm; stderr:\n{}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the server (alone) and reap it.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }

    /// What is left in the server's TMPDIR (the fallback's run
    /// directories).
    pub fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.runs)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn write_request(
    s: &mut impl Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: stockade\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        && !body.is_empty()
    {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading a large body.
    let _ = s.write_all(body);
}

fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').expect("header line");
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// One request and its whole answer (chunked bodies decoded).
pub fn send<S: Read + Write>(
    mut s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    write_request(&mut s, method, path, headers, body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(&mut r) {
            body.extend_from_slice(&c);
        }
    } else {
        // A server that answered before reading a whole body (413) may
        // reset the connection after its answer: keep what came.
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut c = vec![0u8; n + 2];
    r.read_exact(&mut c).ok()?;
    c.truncate(n);
    (n > 0).then_some(c)
}

/// A streaming (`Accept: application/x-ndjson`) answer read line by line.
pub struct Lines<S: Read> {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    r: BufReader<S>,
    buf: Vec<u8>,
}

impl<S: Read + Write> Lines<S> {
    pub fn open(s: S, body: &serde_json::Value) -> Lines<S> {
        Lines::open_with(s, body, &[])
    }

    /// [`Lines::open`] with more headers.
    pub fn open_with(mut s: S, body: &serde_json::Value, headers: &[(&str, &str)]) -> Lines<S> {
        let mut h = vec![("Accept", "application/x-ndjson")];
        h.extend_from_slice(headers);
        write_request(&mut s, "POST", "/v1/runs", &h, body.to_string().as_bytes());
        Lines::from_stream(s)
    }

    /// Read the answer's head from a stream the request was written on.
    pub fn from_stream(s: S) -> Lines<S> {
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r);
        Lines {
            status,
            headers,
            r,
            buf: Vec::new(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl<S: Read> Lines<S> {
    /// The next ndjson line, or `None` at the end.
    pub fn next_line(&mut self) -> Option<serde_json::Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).expect("an ndjson line"));
            }
            let c = read_chunk(&mut self.r)?;
            self.buf.extend_from_slice(&c);
        }
    }

    /// Read lines until one has `key`; that line.
    pub fn until(&mut self, key: &str) -> serde_json::Value {
        loop {
            let l = self
                .next_line()
                .unwrap_or_else(|| panic!("the stream ended before a line with {key:?}"));
            if l.get(key).is_some() {
                return l;
            }
        }
    }

    /// The stdout and stderr chunks (text) until the outcome line, and
    /// that line.
    pub fn output_then_outcome(&mut self) -> (String, String, serde_json::Value) {
        let (mut out, mut err) = (String::new(), String::new());
        loop {
            let v = self.next_line().expect("a line before the outcome");
            if v.get("status").is_some() {
                return (out, err, v);
            }
            out += v["stdout"].as_str().unwrap_or_default();
            err += v["stderr"].as_str().unwrap_or_default();
        }
    }

    pub fn into_inner(self) -> S {
        self.r.into_inner()
    }
}

/// Decode standard padded base64 (the stream's non-UTF-8 chunks).
pub fn b64(s: &str) -> Vec<u8> {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut n, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        n = n << 6 | T.iter().position(|t| *t == c).expect("base64") as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
        }
    }
    out
}

/// How the tests name `who` in their messages.
pub fn who_name(who: Who) -> &'static str {
    match who {
        Who::Root => "root",
        Who::Nobody => "uid 65534",
    }
}

/// The value of `s`'s metric line that starts with `name` (0 when
/// absent).
pub fn metric(s: &Server, name: &str) -> u64 {
    let m = s.call("GET", "/metrics", &[], b"").text();
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// `profile`'s pool misses, every reason together.
pub fn misses(s: &Server, profile: &str) -> u64 {
    let m = s.call("GET", "/metrics", &[], b"").text();
    let head = format!("stockade_pool_misses_total{{profile=\"{profile}\",");
    m.lines()
        .filter(|l| l.starts_with(&head))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `profile`'s pool misses for `reason`.
pub fn misses_for(s: &Server, profile: &str, reason: &str) -> u64 {
    metric(
        s,
        &format!("stockade_pool_misses_total{{profile=\"{profile}\",reason=\"{reason}\"}}"),
    )
}

/// The answer's `applied.pool`: Ok for a hit, else the miss's reason.
pub fn pool_use(v: &serde_json::Value) -> Result<(), String> {
    let p = &v["applied"]["pool"];
    match p["hit"].as_bool() {
        Some(true) => Ok(()),
        Some(false) => Err(p["reason"].as_str().unwrap_or_default().to_string()),
        None => panic!("no applied.pool in {v}"),
    }
}

/// [`py`] as a cold run beside a warm pool (a miss, `argv`): `python3 -B
/// -c CODE`, no argv a warm jail takes, and nothing the programs of these
/// tests see differs (they write no bytecode).
pub fn py_cold(code: &str) -> serde_json::Value {
    serde_json::json!({"profile": "python", "argv": ["python3", "-B", "-c", code]})
}

/// A python run given the file `a.txt` ("given") and stdin ("in"); it
/// prints both: `given in`.
pub fn files_and_stdin() -> serde_json::Value {
    serde_json::json!({
        "profile": "python",
        "argv": ["python3", "-c", "import sys; print(open('a.txt').read(), sys.stdin.read())"],
        "stdin": "in",
        "files": {"a.txt": "given"},
    })
}

/// A run request: `python3 -c CODE` under the python profile.
pub fn py(code: &str) -> serde_json::Value {
    serde_json::json!({"profile": "python", "argv": ["python3", "-c", code]})
}

/// Every process under `pid` (by parent, from /proc).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(pp) = ppid {
            parent.push((p, pp));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let me = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == me).map(|(p, _)| *p));
        i += 1;
    }
    out.remove(0);
    out
}

/// Create the empty file `name` in the working directory of the process
/// under the server `server` whose command line holds `marker` (waiting
/// until there is one): a way into a jail's own workdir, a tmpfs of the
/// jail's, reached through /proc and written as the jail's own host user
/// (no other id is mapped on that tmpfs).
pub fn touch_in_jail_cwd(server: u32, marker: &str, name: &str) {
    let pid = process_with(server, marker);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let id = |key: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .unwrap()
            .to_string()
    };
    let path = format!("/proc/{pid}/cwd/{name}");
    if !common::is_root() {
        std::fs::write(&path, "").unwrap();
        return;
    }
    // As the jail's host user, keeping CAP_SYS_PTRACE: the jail's
    // processes are not dumpable to that user (their binaries' owner is
    // not mapped in their user namespace), so /proc/PID/cwd needs it.
    let (uid, gid) = (id("Uid:"), id("Gid:"));
    let o = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "--inh-caps=+sys_ptrace",
            "--ambient-caps=+sys_ptrace",
            "--",
            "sh",
            "-c",
            ": > \"$0\"",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A process under the server `server` whose command line holds `marker`;
/// waits until there is one.
pub fn process_with(server: u32, marker: &str) -> u32 {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let found = descendants(server).into_iter().find(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).contains(marker)
        });
        if let Some(p) = found {
            return p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no process under {server} with {marker:?}"
        );
        std::thread::yield_now();
    }
}
