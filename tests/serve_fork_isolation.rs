//! A forked run learns nothing of other runs (`stockade serve
//! --warm-fork`, the real binary): after an earlier run with distinctive
//! argv, stdin, environment, files and exit code, and beside a run still
//! in flight, a hostile child of the same zygote looks as hard as it can
//! (tests/payloads/look_for_other_runs.py: the frames below its own,
//! every object the collector knows of, the frozen ones too, and all they
//! refer to; modules, threads, environment, fds, its readable memory) and
//! finds nothing of them nor of the zygote's bookkeeping: no frame of the
//! zygote's, no exit status, CPU time or peak memory of an earlier run, no
//! run in flight, no request number, no other child's pid (not even in
//! memory the zygote freed), none of the server's fds. As root the pool is a fork server; as
//! uid 65534 (no cgroup for a run's limits) it is members, held to the
//! same.

mod common;
mod serve_util;

use std::io::Write;
use std::time::{Duration, Instant};

use common::Who;
use serde_json::{json, Value};
use serve_util::{descendants, metric, Server, PATIENCE};

const HITS: &str = "stockade_pool_hits_total{profile=\"python\"}";
const SIZE: &str = "stockade_pool_size{profile=\"python\"}";
const IN_FLIGHT: &str = "stockade_runs_in_flight";
const LOOK: &str = include_str!("payloads/look_for_other_runs.py");

/// Poll /metrics until `name` says `n`.
fn wait_metric(s: &Server, name: &str, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    while metric(s, name) != n {
        assert!(Instant::now() < deadline, "{name} never {n}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_forked_child_finds_nothing_of_other_runs() {
    for who in common::users("a_forked_child_finds_nothing_of_other_runs") {
        looks_and_finds_nothing(who);
    }
}

fn looks_and_finds_nothing(who: Who) {
    let s = Server::start(
        who,
        &[
            "--warm",
            "python=1",
            "--warm-import",
            "json,re,random,threading",
            "--warm-fork",
            "--max-concurrent",
            "4",
        ],
    );
    s.wait_ready();
    // As root the pool forks; as uid 65534 the server says why not.
    let forks = !s.log.lock().unwrap().contains("--warm-fork:");
    assert_eq!(forks, who == Who::Root, "{}", s.log.lock().unwrap());
    let token = format!("lk{:x}q", std::process::id() as u64 * 7919 + 23);
    // An earlier run: its argv, stdin, environment and files hold the
    // token; it spends CPU, takes memory, forks 300 processes (each a pid
    // of the zygote's namespace too: the next child's pid there is more
    // than 256, an int object of its own in the zygote) and exits 37.
    let first = json!({
        "profile": "python",
        "argv": ["python3", "-c", "import os, sys\nkeep = [sys.stdin.read(), open('f.txt').read(), os.environ['MARK'], sys.argv[1]]\nblock = bytearray(32 << 20)\nn = 0\nfor i in range(300000):\n    n += i * i\nfor i in range(300):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\nsys.exit(37)", format!("{token}-argv")],
        "stdin": format!("{token}-stdin"),
        "env": {"MARK": format!("{token}-env")},
        "files": {"f.txt": format!("{token}-file")},
    });
    let a = s.run(&first).json();
    assert_eq!(a["exit_code"], 37, "{a}");
    wait_metric(&s, SIZE, 1);
    // A fork server forks each child ahead of its request: the one made
    // as the first run was taken may predate its 300 forks. One more run
    // takes it; the next one ahead is made after them.
    let b = s
        .run(&json!({"profile": "python", "argv": ["python3", "-c", "pass"]}))
        .json();
    assert_eq!(b["exit_code"], 0, "{b}");
    wait_metric(&s, SIZE, 1);
    // Members: the next one is ready (a fork server: always).
    wait_metric(&s, SIZE, 1);
    // A run in flight: asleep until its connection goes.
    let flight = json!({
        "profile": "python",
        "argv": ["python3", "-c", "import sys, time\nsys.stdin.read()\ntime.sleep(600)", format!("{token}-flight")],
        "stdin": format!("{token}-flightin"),
        "limits": {"timeout": 600},
    })
    .to_string();
    let mut flying = s.connect();
    write!(
        flying,
        "POST /v1/runs HTTP/1.1\r\nHost: stockade\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{flight}",
        flight.len()
    )
    .unwrap();
    wait_metric(&s, IN_FLIGHT, 1);
    wait_metric(&s, SIZE, 1);
    // The run in flight's pid in the zygote's namespace (a fork server's
    // child only: pid 1 of its own namespace under the zygote's, with its
    // payload under it; the child forked ahead for the next request is
    // alone until its go).
    let pids: Vec<u32> = descendants(s.pid())
        .into_iter()
        .filter(|p| !descendants(*p).is_empty())
        .filter_map(|p| {
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let ns: Vec<u32> = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            (ns.len() >= 3 && ns[ns.len() - 1] == 1).then(|| ns[ns.len() - 2])
        })
        .collect();
    if who == Who::Root {
        assert_eq!(pids.len(), 1, "the run in flight: {pids:?}");
        assert!(pids[0] > 256, "{pids:?}");
    }
    // The one that looks.
    let rev: String = token.chars().rev().collect();
    let look = json!({
        "profile": "python",
        "argv": ["python3", "-c", LOOK, format!("{token}-mine")],
        "stdin": json!({"token": rev, "status": 37, "pids": pids}).to_string(),
        "limits": {"timeout": 120},
    });
    let v = s.run(&look).json();
    assert_eq!(v["exit_code"], 0, "{v}");
    // The run in flight was still on while it looked.
    assert_eq!(metric(&s, IN_FLIGHT), 1);
    drop(flying);
    wait_metric(&s, IN_FLIGHT, 0);
    let out: Value = serde_json::from_str(v["stdout"]["data"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(out["findings"], json!([]), "{who:?}: {out}");
    // The search finds what is there: its own marker, in its argv and
    // its memory.
    assert_eq!(out["control"], json!(["memory", "argv"]), "{out}");
    assert_eq!(metric(&s, HITS), 4, "every run warm");
}
