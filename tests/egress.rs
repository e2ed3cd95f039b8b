//! The egress allowlist (`--allow-host`): inside the jail only `lo` and
//! stockade's proxy on 127.0.0.1:3128; the proxy reaches the listed hosts
//! and ports and nothing else, refuses loopback and metadata addresses a
//! listed name resolves to, and records each refusal in the outcome.
//!
//! This machine reaches PyPI (pypi.org, files.pythonhosted.org) and
//! deb.debian.org; the tests allow only PyPI's two hosts.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Output;

use common::{stderr, Who};

const PYPI: [&str; 4] = [
    "--allow-host",
    "pypi.org",
    "--allow-host",
    "*.pythonhosted.org",
];

/// A Python probe run in the jail: `python3 -c PROBE MODE ARGS…`. Each
/// mode prints one line saying what happened.
const PROBE: &str = r#"
import socket, sys
mode, args = sys.argv[1], sys.argv[2:]
def proxy():
    return socket.create_connection(("127.0.0.1", 3128))
try:
    if mode == "connect":
        s = proxy()
        s.sendall(f"CONNECT {args[0]}:{args[1]} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = s.recv(1)
            if not b: break
            head += b
        line = head.split(b"\r\n")[0].decode()
        extra = s.recv(100).decode().strip() if " 200 " in line else ""
        print("connect", args[0], args[1], line, extra)
    elif mode == "socks":
        s = proxy()
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        name = args[0].encode()
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + int(args[1]).to_bytes(2, "big"))
        print("socks", args[0], args[1], "rep", s.recv(10)[1])
    elif mode == "udp-assoc":
        s = proxy()
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(b"\x05\x03\x00\x01\x08\x08\x08\x08\x00\x35")
        print("udp-assoc rep", s.recv(10)[1])
    elif mode == "direct":
        socket.create_connection((args[0], int(args[1])), timeout=20)
        print("direct connected")
    elif mode == "udp":
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"\0" * 12, ("8.8.8.8", 53))
        print("udp sent")
    elif mode == "raw":
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        print("raw opened")
    elif mode == "dns":
        print("dns resolved", socket.getaddrinfo(args[0], 443)[0][4][0])
except OSError as e:
    print(mode, "failed errno", e.errno, e)
except Exception as e:
    print(mode, "failed", type(e).__name__, e)
"#;

/// `stockade run --report - FLAGS -- sh -c SCRIPT` as `who`; the outcome.
fn run(who: Who, flags: &[&str], script: &str) -> (serde_json::Value, Output) {
    let mut all = vec!["--report", "-"];
    all.extend_from_slice(flags);
    let o = common::run(who, &all, &["/bin/sh", "-c", script]);
    (common::last_json(&o), o)
}

/// The jail's stdout, from the outcome.
fn out(r: &serde_json::Value) -> String {
    r["stdout"]["data"].as_str().unwrap_or("").to_string()
}

/// The outcome's network denials as (host, port, reason).
fn denials(r: &serde_json::Value) -> Vec<(String, u64, String)> {
    // One record per host, port and reason, with a count: one entry here
    // per refusal.
    r["denials"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|d| d["kind"] == "network")
        .flat_map(|d| {
            let one = (
                d["host"].as_str().unwrap_or("").to_string(),
                d["port"].as_u64().unwrap_or(0),
                d["reason"].as_str().unwrap_or("").to_string(),
            );
            std::iter::repeat_n(one, d["count"].as_u64().unwrap_or(0) as usize)
        })
        .collect()
}

/// `python3 -c PROBE ARGS…` as a shell word list.
fn probe(args: &str) -> String {
    format!(
        "/usr/bin/python3 -c '{}' {args}",
        PROBE.replace('\'', "'\\''")
    )
}

/// A listener on the host's 127.0.0.1 that greets every connection with
/// `hello`, served by a thread for the rest of the test process.
fn host_listener(hello: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            let _ = c.write_all(hello.as_bytes());
        }
    });
    port
}

#[test]
fn pip_download_works_with_only_pypi_allowed() {
    for who in common::users("pip_download_works_with_only_pypi_allowed") {
        let (r, o) = run(
            who,
            &PYPI,
            "cd /tmp && /usr/bin/python3 -m pip download --no-cache-dir -q six -d /tmp/dl && ls /tmp/dl",
        );
        assert_eq!(r["exit_code"], 0, "{who:?}: {r}\n{}", stderr(&o));
        assert!(out(&r).contains("six-"), "{who:?}: {}", out(&r));
        assert_eq!(
            r["layers"]["net_namespace"]["detail"]["network"],
            "allowlist"
        );
        assert!(denials(&r).is_empty(), "{who:?}: {:?}", denials(&r));
    }
}

#[test]
fn unlisted_host_fails_with_a_proxy_error_and_is_recorded() {
    for who in common::users("unlisted_host_fails_with_a_proxy_error_and_is_recorded") {
        let (r, o) = run(
            who,
            &PYPI,
            "curl -sS -o /dev/null https://deb.debian.org/; echo rc=$?; \
             curl -sS -o /dev/null -w 'code=%{http_code}\\n' http://deb.debian.org/",
        );
        let text = out(&r);
        assert!(text.contains("rc=56"), "{who:?}: {text}\n{}", stderr(&o));
        assert!(
            stderr(&o).contains("CONNECT tunnel failed, response 403"),
            "{who:?}: {}",
            stderr(&o)
        );
        assert!(text.contains("code=403"), "{who:?}: {text}");
        let d = denials(&r);
        for port in [443, 80] {
            assert!(
                d.iter().any(|(h, p, why)| h == "deb.debian.org"
                    && *p == port
                    && why == "deb.debian.org is not on the allowlist"),
                "{who:?}: {d:?}"
            );
        }
    }
}

#[test]
fn names_resolve_only_through_the_proxy() {
    for who in common::users("names_resolve_only_through_the_proxy") {
        let script = format!("{}; {}", probe("dns deb.debian.org"), probe("dns pypi.org"));
        let (r, _) = run(who, &PYPI, &script);
        let text = out(&r);
        assert_eq!(text.matches("dns failed").count(), 2, "{who:?}: {text}");
        assert!(!text.contains("dns resolved"), "{who:?}: {text}");
    }
}

#[test]
fn only_the_proxy_is_reachable_no_direct_tcp_udp_or_raw() {
    // The address PyPI has from the host, where it is reachable.
    let ip = std::net::ToSocketAddrs::to_socket_addrs(&("pypi.org", 443))
        .expect("resolve pypi.org on the host")
        .next()
        .expect("an address of pypi.org")
        .ip();
    TcpStream::connect((ip, 443)).expect("pypi.org reachable from the host");
    for who in common::users("only_the_proxy_is_reachable_no_direct_tcp_udp_or_raw") {
        let script = format!(
            "{}; {}; {}; {}",
            probe(&format!("direct {ip} 443")),
            probe("direct 127.0.0.1 22"),
            probe("udp"),
            probe("raw")
        );
        let (r, _) = run(who, &PYPI, &script);
        let text = out(&r);
        assert_eq!(
            text.matches("direct failed errno").count(),
            2,
            "{who:?}: {text}"
        );
        assert!(text.contains("udp failed errno"), "{who:?}: {text}");
        assert!(text.contains("raw failed errno"), "{who:?}: {text}");
        assert!(!text.contains("connected") && !text.contains("sent") && !text.contains("opened"));
        // Landlock allows TCP connect only to the proxy's port.
        let tcp = &r["layers"]["landlock"]["detail"]["tcp"];
        assert!(
            tcp == "proxy_only" || tcp == "unavailable",
            "{who:?}: {tcp}"
        );
        if tcp == "proxy_only" {
            // Refused by Landlock (EACCES) before the empty namespace
            // would say ENETUNREACH or ECONNREFUSED.
            let eacces = text.matches("direct failed errno 13").count();
            assert_eq!(eacces, 2, "{who:?}: {text}");
        }
    }
}

#[test]
fn socks5_clients_reach_allowed_hosts_only() {
    for who in common::users("socks5_clients_reach_allowed_hosts_only") {
        let script = format!(
            "curl -sS -o /dev/null -w 'code=%{{http_code}}\\n' -x socks5h://127.0.0.1:3128 https://pypi.org/simple/six/; \
             curl -sS -o /dev/null -x socks5h://127.0.0.1:3128 https://deb.debian.org/; echo rc=$?; {}",
            probe("udp-assoc")
        );
        let (r, o) = run(who, &PYPI, &script);
        let text = out(&r);
        assert!(text.contains("code=200"), "{who:?}: {text}\n{}", stderr(&o));
        assert!(text.contains("rc=97"), "{who:?}: {text}");
        assert!(text.contains("udp-assoc rep 7"), "{who:?}: {text}");
        let d = denials(&r);
        assert!(
            d.iter().any(|(h, p, _)| h == "deb.debian.org" && *p == 443),
            "{who:?}: {d:?}"
        );
        assert!(
            d.iter()
                .any(|(h, p, why)| h == "8.8.8.8" && *p == 53 && why.contains("only CONNECT")),
            "{who:?}: {d:?}"
        );
    }
}

#[test]
fn loopback_and_metadata_are_refused_unless_listed_as_addresses() {
    let named = host_listener("hello-named\n");
    let listed = host_listener("hello-listed\n");
    let allow_named = format!("localhost:{named}");
    let allow_listed = format!("127.0.0.1:{listed}");
    for who in common::users("loopback_and_metadata_are_refused_unless_listed_as_addresses") {
        let script = [
            format!("connect localhost {named}"),
            format!("socks localhost {named}"),
            format!("connect 127.0.0.1 {named}"),
            format!("connect 127.0.0.1 {listed}"),
            "connect 169.254.169.254 80".to_string(),
            "socks 169.254.169.254 80".to_string(),
        ]
        .iter()
        .map(|a| probe(a))
        .collect::<Vec<_>>()
        .join("; ");
        let flags = ["--allow-host", &allow_named, "--allow-host", &allow_listed];
        let (r, o) = run(who, &flags, &script);
        let text = out(&r);
        let line = |start: &str| {
            text.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("{who:?}: no {start:?} in {text}\n{}", stderr(&o)))
                .to_string()
        };
        // A listed name resolving to loopback is refused.
        assert!(
            line(&format!("connect localhost {named} ")).contains(" 403 "),
            "{text}"
        );
        assert!(
            line(&format!("socks localhost {named} ")).ends_with("rep 2"),
            "{text}"
        );
        assert!(
            line(&format!("connect 127.0.0.1 {named} ")).contains(" 403 "),
            "{text}"
        );
        // An address listed as an address is reached.
        let ok = line(&format!("connect 127.0.0.1 {listed} "));
        assert!(
            ok.contains(" 200 ") && ok.contains("hello-listed"),
            "{who:?}: {ok}"
        );
        assert!(
            line("connect 169.254.169.254 80 ").contains(" 403 "),
            "{text}"
        );
        assert!(
            line("socks 169.254.169.254 80 ").ends_with("rep 2"),
            "{text}"
        );
        let d = denials(&r);
        let loopback = d
            .iter()
            .filter(|(h, p, why)| {
                h == "localhost" && *p == named as u64 && why.contains("(loopback)")
            })
            .count();
        assert_eq!(loopback, 2, "{who:?}: {d:?}");
        assert_eq!(
            d.iter()
                .filter(|(h, p, _)| h == "169.254.169.254" && *p == 80)
                .count(),
            2,
            "{who:?}: {d:?}"
        );
        assert_eq!(d.len(), 5, "{who:?}: {d:?}");
    }
}

/// An upstream HTTP proxy on the host's 127.0.0.1 that tunnels CONNECT
/// and records each request line; served by threads for the rest of the
/// test process.
fn upstream_proxy() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || tunnel(c, &log));
        }
    });
    (port, seen)
}

fn tunnel(mut c: TcpStream, log: &std::sync::Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b).unwrap_or(0) == 0 {
            return;
        }
        head.push(b[0]);
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    log.lock().unwrap().push(line.clone());
    let target = line.split(' ').nth(1).unwrap_or("").to_string();
    let Ok(up) = TcpStream::connect(target) else {
        let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        return;
    };
    let _ = c.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
    let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
    let mut up = up;
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up2, &mut c2);
        let _ = c2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut c, &mut up);
    let _ = up.shutdown(std::net::Shutdown::Write);
    let _ = t.join();
}

#[test]
fn upstream_proxy_from_the_callers_environment_is_used() {
    let (port, seen) = upstream_proxy();
    let upstream = format!("http://127.0.0.1:{port}");
    for who in common::users("upstream_proxy_from_the_callers_environment_is_used") {
        seen.lock().unwrap().clear();
        let mut c = common::stockade(who);
        c.env("HTTPS_PROXY", &upstream);
        c.args(["run", "--report", "-"]).args(PYPI).args([
            "--",
            "/bin/sh",
            "-c",
            "curl -sS -o /dev/null -w 'code=%{http_code}\\n' https://pypi.org/simple/six/",
        ]);
        let o = c.output().expect("start stockade");
        let r = common::last_json(&o);
        assert!(out(&r).contains("code=200"), "{who:?}: {r}\n{}", stderr(&o));
        let lines = seen.lock().unwrap().clone();
        assert_eq!(
            lines,
            vec!["CONNECT pypi.org:443 HTTP/1.1".to_string()],
            "{who:?}"
        );
        let up = &r["layers"]["net_namespace"]["detail"]["upstream"];
        assert_eq!(up, &format!("127.0.0.1:{port} (HTTPS_PROXY)"), "{who:?}");
    }
}

#[test]
fn allowlist_is_refused_where_no_network_namespace_can_hold_it() {
    for who in common::users("allowlist_is_refused_where_no_network_namespace_can_hold_it") {
        let o = common::wrapped(
            &["chk_nouserns"],
            who,
            &["--report", "-", "--allow-host", "pypi.org"],
            &["/bin/true"],
        )
        .output()
        .expect("start wrapper");
        let r = common::last_json(&o);
        assert_eq!(o.status.code(), Some(125), "{who:?}: {r}");
        assert_eq!(r["status"], "setup_error", "{who:?}: {r}");
        let e = r["error"].as_str().unwrap_or("");
        assert!(
            e.contains("--allow-host") && e.contains("user namespaces are refused"),
            "{who:?}: {e}"
        );
    }
}

#[test]
fn bad_allow_host_values_are_one_line_errors_naming_the_flag() {
    let who = Who::Nobody;
    for (flags, want) in [
        (
            vec!["--allow-host", "exa mple.com"],
            "--allow-host: \"exa mple.com\": not a host name",
        ),
        (
            vec!["--allow-host", "pypi.org:0"],
            "--allow-host: \"pypi.org:0\": \"0\" is not a port",
        ),
        (
            vec!["--allow-host", "pypi.org", "--network", "host"],
            "--allow-host: needs the jail's own network",
        ),
    ] {
        let o = common::run(who, &flags, &["/bin/true"]);
        assert_ne!(o.status.code(), Some(0), "{flags:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

#[test]
fn a_profiles_network_allow_is_the_same_allowlist() {
    let dir = common::Scratch::new("egress-profile");
    let path = dir.join("egress.toml");
    std::fs::write(
        &path,
        "extends = \"shell\"\n[network]\nallow = [\"pypi.org\"]\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let profile = path.to_str().unwrap();
    for who in common::users("a_profiles_network_allow_is_the_same_allowlist") {
        let (r, o) = run(
            who,
            &["--profile", profile],
            "curl -sS -o /dev/null -w 'code=%{http_code}\\n' https://pypi.org/simple/six/; \
             curl -sS -o /dev/null https://files.pythonhosted.org/; echo rc=$?",
        );
        let text = out(&r);
        assert!(
            text.contains("code=200") && text.contains("rc=56"),
            "{who:?}: {text}\n{}",
            stderr(&o)
        );
        let d = denials(&r);
        assert_eq!(d.len(), 1, "{who:?}: {d:?}");
        assert_eq!(d[0].0, "files.pythonhosted.org", "{who:?}: {d:?}");
    }
}

/// Set in the copies of this test that run the library scenario.
const LIBRARY_CHILD: &str = "STOCKADE_EGRESS_LIBRARY_CHILD";

/// Through the library's spawner (as `stockade serve` and threaded Rust
/// callers run jails), from a thread: the proxy runs in the per-run
/// supervisor all the same. The scenario runs in a copy of this test
/// process started with `STOCKADE_BIN` set (a process with threads finds
/// the spawner's binary there; setting it here would race the other
/// tests' threads), as root and as uid 65534.
#[test]
fn library_callers_get_the_same_allowlist() {
    if std::env::var_os(LIBRARY_CHILD).is_some() {
        library_scenario();
        return;
    }
    let me = std::env::current_exe().unwrap();
    let copy = common::binary().parent().unwrap().join("egress-test");
    if !copy.exists() {
        common::copy_executable(&me, &copy);
    }
    for who in common::users("library_callers_get_the_same_allowlist") {
        let mut c = std::process::Command::new(&copy);
        c.args([
            "--exact",
            "library_callers_get_the_same_allowlist",
            "--nocapture",
        ])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("STOCKADE_BIN", common::binary())
        .env(LIBRARY_CHILD, "1")
        .current_dir("/");
        if who == Who::Nobody && common::is_root() {
            std::os::unix::process::CommandExt::uid(&mut c, common::NOBODY);
            std::os::unix::process::CommandExt::gid(&mut c, common::NOBODY);
        }
        let o = c.output().unwrap();
        assert!(
            o.status.success() && common::stdout(&o).contains("1 passed"),
            "{who:?}: {}\n{}",
            common::stdout(&o),
            stderr(&o)
        );
    }
}

fn library_scenario() {
    use stockade::{Jail, Stdio};
    let t = std::thread::spawn(|| {
        let o = Jail::profile("shell")
            .unwrap()
            .allow_host("pypi.org")
            .args([
                "/bin/sh",
                "-c",
                "curl -sS -o /dev/null -w 'code=%{http_code}\\n' https://pypi.org/simple/six/; \
                 curl -sS -o /dev/null https://deb.debian.org/ 2>/dev/null; echo rc=$?",
            ])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), o.outcome)
    });
    let (text, outcome) = t.join().unwrap();
    assert!(
        text.contains("code=200") && text.contains("rc=56"),
        "{text}"
    );
    assert!(
        matches!(&outcome.denials[..], [stockade::outcome::Denial::Network { host, port: 443, .. }] if host == "deb.debian.org"),
        "{:?}",
        outcome.denials
    );
    let e = Jail::profile("shell")
        .unwrap()
        .allow_host("bad name")
        .arg("/bin/true")
        .status()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "allow_host: \"bad name\": not a host name (letters, digits, `-`, `_` and dots)"
    );
}

#[test]
fn a_flood_of_refusals_is_capped_and_counted() {
    let flood = r#"
import socket
for i in range(300):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT h{i}.example:443 HTTP/1.1\r\n\r\n".encode())
    assert b" 403 " in s.recv(200)
    s.close()
print("flooded")
"#;
    for who in common::users("a_flood_of_refusals_is_capped_and_counted") {
        let script = format!("/usr/bin/python3 -c '{flood}'");
        let (r, o) = run(who, &PYPI, &script);
        assert!(out(&r).contains("flooded"), "{who:?}: {r}\n{}", stderr(&o));
        let d = denials(&r);
        assert_eq!(d.len(), 256, "{who:?}");
        assert_eq!(d[0].0, "h0.example", "{who:?}");
        assert_eq!(d[255].0, "h255.example", "{who:?}");
        let w = r["warnings"].to_string();
        assert!(
            w.contains("44 more network denials not recorded"),
            "{who:?}: {w}"
        );
    }
}

/// `--denials-fd N`: each refusal of the proxy is written to fd N as a JSON
/// line while the run goes on (here a file the host shell opened as fd 3).
#[test]
fn proxy_refusals_are_written_to_the_denials_fd() {
    for who in common::users("proxy_refusals_are_written_to_the_denials_fd") {
        let dir = common::Scratch::new("egress-denials-fd").world_writable();
        let file = dir.join("denials.jsonl");
        let script = format!(
            "exec 3>'{}' && exec '{}' run --denials-fd 3 {} -- sh -c \"$0\"",
            file.display(),
            common::binary().display(),
            PYPI.join(" ")
        );
        let mut c = std::process::Command::new("/bin/sh");
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .args([
                "-c",
                &script,
                "curl -sS -o /dev/null https://deb.debian.org/; echo rc=$?",
            ]);
        if who == Who::Nobody && common::is_root() {
            use std::os::unix::process::CommandExt;
            c.uid(common::NOBODY).gid(common::NOBODY);
        }
        let o = c.output().unwrap();
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("rc=56"),
            "{who:?}: {}",
            stderr(&o)
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The refusal, and the connection it refused (every connection
        // asked for is a line of its own: see tests/egress_records.rs).
        assert_eq!(lines.len(), 2, "{who:?}: {text}");
        let l = &lines[0];
        assert_eq!(
            (&l["kind"], &l["host"], &l["port"]),
            (&"network".into(), &"deb.debian.org".into(), &443.into()),
            "{who:?}: {text}"
        );
        assert_eq!(
            (&lines[1]["kind"], &lines[1]["verdict"]),
            (&"connection".into(), &"refused".into()),
            "{who:?}: {text}"
        );
    }
}
