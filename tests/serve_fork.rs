//! `stockade serve --warm-fork`, the real binary: one fork server per
//! pool, a zygote interpreter that forks a child per request. As root
//! (cgroup v1 here holds each run's memory and pids): forked runs answer
//! as cold ones do, each child is confined as a cold payload is, and a
//! hostile request reaches neither the zygote nor a sibling nor what an
//! earlier request left (signals, /proc, abstract sockets, shared files,
//! fds, the zygote's memory); its limits hold per run; nothing is left
//! behind. As uid 65534 (no cgroup for a run's limits) the server says so
//! and serves its pools as members.

mod common;
mod serve_util;

use std::time::{Duration, Instant};

use common::Who;
use serde_json::{json, Value};
use serve_util::{
    descendants, files_and_stdin, metric, misses, misses_for, pool_use, py, py_cold, Lines, Server,
    PATIENCE,
};

const HITS: &str = "stockade_pool_hits_total{profile=\"python\"}";

fn forking(who: Who, more: &[&str]) -> Server {
    forking_with(who, "json,re,math,difflib", more)
}

/// [`forking`] with the zygote importing `modules`.
fn forking_with(who: Who, modules: &str, more: &[&str]) -> Server {
    let mut args = vec![
        "--warm",
        "python=1",
        "--warm-import",
        modules,
        "--warm-fork",
    ];
    args.extend_from_slice(more);
    let s = Server::start(who, &args);
    s.wait_ready();
    s
}

/// Root only (a run's cgroup); else a SKIPPED line and false.
fn as_root(test: &str) -> bool {
    if !common::is_root() {
        common::skip(test, "not root: no cgroup holds a forked run's limits");
        return false;
    }
    true
}

/// Whether `s`'s zygote forks each child into its run cgroup (cgroup v2
/// with the controllers: the zygote's jail in the leaf `zygote` of its
/// cgroup, each child's run cgroup beside it), as its processes' cgroups
/// show; else the server moves each child (here: cgroup v1 holds them).
fn nests(s: &Server) -> bool {
    descendants(s.pid()).iter().any(|p| {
        std::fs::read_to_string(format!("/proc/{p}/cgroup"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("0::/") && l.ends_with("/zygote"))
    })
}

/// The processes a /proc listing shows (its numeric entries).
fn pids(listing: &Value) -> Vec<&str> {
    listing
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str())
        .filter(|e| e.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

fn stdout(v: &Value) -> &str {
    v["stdout"]["data"].as_str().unwrap_or_default()
}

/// `body` run on `s` from a thread of its own (its answer when joined).
fn run_aside(s: &Server, body: Value) -> std::thread::JoinHandle<serve_util::Resp> {
    let sock = s.sock.clone();
    std::thread::spawn(move || {
        let c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        serve_util::send(
            c,
            "POST",
            "/v1/runs",
            &[],
            &serde_json::to_vec(&body).unwrap(),
        )
    })
}

#[test]
fn forked_runs_answer_as_cold_runs_do() {
    if !as_root("forked_runs_answer_as_cold_runs_do") {
        return;
    }
    let s = forking(Who::Root, &[]);
    let v = s
        .run(&json!({
            "profile": "python",
            "argv": ["python3", "-c", "import sys, os, json\nd = json.load(sys.stdin)\nprint(sys.argv, open('in/a.txt').read(), os.environ['ANSWER'], d['x'], os.access('in/run.sh', os.X_OK))\nprint('err', file=sys.stderr)\nsys.exit(3)", "arg"],
            "stdin": "{\"x\": 42}",
            "files": {"in/a.txt": "a file", "in/run.sh": {"text": "#!/bin/sh\n", "executable": true}},
            "env": {"ANSWER": "yes"},
        }))
        .json();
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(stdout(&v), "['-c', 'arg'] a file yes 42 True\n", "{v}");
    assert_eq!(v["stderr"]["data"], "err\n", "{v}");
    assert_eq!(metric(&s, HITS), 1);
    let v = s
        .run(&json!({
            "profile": "python",
            "argv": ["python3", "main.py", "-v"],
            "files": {"main.py": "import sys, os\nprint(sys.argv, sys.path[0] == os.getcwd(), __name__)\n"},
        }))
        .json();
    assert_eq!(stdout(&v), "['main.py', '-v'] True __main__\n", "{v}");
    // The same stderr and exit code as a cold jail's (a miss: its argv).
    for code in [
        "def f():\n    1/0\nf()",
        "x(",
        "import sys; sys.exit('bye')",
        "import atexit, threading, time\natexit.register(lambda: print('atexit'))\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
        // lo is up: a datagram to itself arrives.
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('127.0.0.1', 0))\ns.sendto(b'lo', s.getsockname())\nprint(s.recv(2))",
    ] {
        let fork = s.run(&py(code)).json();
        let cold = s.run(&py_cold(code)).json();
        assert_eq!(pool_use(&cold), Err("argv".into()), "{cold}");
        for k in ["status", "exit_code", "stdout", "stderr"] {
            assert_eq!(fork[k], cold[k], "{code:?}: {k}: {fork} vs {cold}");
        }
    }
    assert_eq!(metric(&s, HITS), 7);
    // The outcome's shape is a cold run's: the same keys, limits and
    // layers named alike.
    let fork = s.run(&py("pass")).json();
    let cold = s.run(&py_cold("pass")).json();
    let keys = |v: &Value, k: &str| -> Vec<String> {
        let mut ks: Vec<String> = v[k].as_object().unwrap().keys().cloned().collect();
        ks.sort();
        ks
    };
    assert_eq!(keys(&fork, "limits"), keys(&cold, "limits"));
    for l in [
        "landlock",
        "seccomp",
        "capabilities",
        "pid_namespace",
        "net_namespace",
    ] {
        assert_eq!(fork["layers"][l]["state"], "applied", "{l}: {fork}");
    }
    assert_eq!(fork["layers"]["seccomp"], cold["layers"]["seccomp"]);
    assert_eq!(
        fork["layers"]["landlock"]["detail"]["status"],
        "fully_enforced"
    );
    assert_eq!(fork["limits"]["memory"]["enforced_by"], "cgroup_v1");
    // A child passes its seccomp listener on, as a cold payload does: a
    // refused syscall gets its errno and is recorded alike.
    let refused = "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n\
        print(l.syscall(248, 0, 0, 0, 0), ctypes.get_errno())";
    let fork = s.run(&py(refused)).json();
    let cold = s.run(&py_cold(refused)).json();
    assert_eq!(fork["applied"]["pool"]["hit"], true, "{fork}");
    assert_eq!(cold["applied"]["pool"]["hit"], false, "{cold}");
    for v in [&fork, &cold] {
        assert_eq!(stdout(v), format!("-1 {}\n", libc::EPERM), "{v}");
        assert_eq!(
            v["denials"],
            json!([{"kind": "seccomp", "syscall": "add_key", "thread": 2, "count": 1}]),
            "{v}"
        );
        assert!(v["denials_unrecorded"].get("seccomp").is_none(), "{v}");
        assert!(!v["warnings"].to_string().contains("not recorded"), "{v}");
    }
    assert_eq!(fork["limits"]["pids"]["enforced_by"], "cgroup_v1");
}

/// What a child holds after its confinement, as the child sees it.
#[test]
fn a_forked_child_is_confined_as_a_cold_payload() {
    if !as_root("a_forked_child_is_confined_as_a_cold_payload") {
        return;
    }
    let s = forking(Who::Root, &[]);
    let code = "import os, json, socket\n\
        st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n\
        fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n\
        def can(f):\n    try:\n        f(); return True\n    except OSError:\n        return False\n\
        print(json.dumps({'caps': [st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],\n\
          'nnp': st['NoNewPrivs'].strip(), 'seccomp': st['Seccomp'].strip(), 'pid': os.getpid(),\n\
          'fds': fds, 'proc': sorted(os.listdir('/proc')), 'uid': os.getuid(),\n\
          'write_usr': can(lambda: open('/usr/x', 'w')), 'write_tmp': can(lambda: open('/tmp/x', 'w')),\n\
          'tcp': can(lambda: socket.create_connection(('127.0.0.1', 1), 1)),\n\
          'mount': __import__('ctypes').CDLL(None, use_errno=True).mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0}))";
    let v = s.run(&py(code)).json();
    assert_eq!(v["exit_code"], 0, "{v}");
    let c: Value = serde_json::from_str(stdout(&v)).unwrap();
    assert_eq!(c["caps"], json!(vec!["0000000000000000"; 5]), "{c}");
    assert_eq!(c["nnp"], "1", "{c}");
    assert_eq!(c["seccomp"], "2", "{c}");
    // pid 2 of its own pid namespace, under its init: as a cold payload.
    assert_eq!(c["pid"], 2, "{c}");
    // 0, 1, 2 and the listing's own fd: nothing of the zygote's.
    assert_eq!(c["fds"], json!([0, 1, 2, 3]), "{c}");
    assert_eq!(pids(&c["proc"]), ["1", "2"], "{c}");
    assert_eq!(c["uid"], 1000, "{c}");
    assert_eq!(c["write_usr"], false, "{c}");
    assert_eq!(c["write_tmp"], true, "{c}");
    assert_eq!(c["tcp"], false, "{c}");
    assert_eq!(c["mount"], false, "{c}");
}

/// A hostile request tries to reach the zygote and a sibling run that is
/// still going: signals to every pid, /proc, an abstract socket, the
/// sibling's /tmp, workdir, /dev/shm and pty. It reaches nothing; the
/// sibling ends as it would have, and the fork server serves on.
#[test]
fn a_forked_run_reaches_neither_the_zygote_nor_a_sibling() {
    if !as_root("a_forked_run_reaches_neither_the_zygote_nor_a_sibling") {
        return;
    }
    let s = forking(Who::Root, &[]);
    // The sibling: leaves a mark everywhere it can write, listens on an
    // abstract socket, opens a pty, and waits until the hostile run has
    // finished (it says so by the file it waits for never appearing: the
    // sibling just sleeps), then says it is whole.
    let sibling = "import os, socket, time, pty\n\
        for d in ('/tmp', '.', '/dev/shm'):\n    open(d + '/sibling-mark', 'w').write('secret-of-the-sibling')\n\
        l = socket.socket(socket.AF_UNIX); l.bind('\\0stockade-sibling'); l.listen()\n\
        import ctypes; rt = ctypes.CDLL('librt.so.1', use_errno=True)\n\
        assert rt.mq_open(b'/sibling-q', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0\n\
        m, sl = pty.openpty()\n\
        print('ready', flush=True)\n\
        time.sleep(3)\n\
        print('whole')";
    let mut sib_req = py(sibling);
    sib_req["limits"] = json!({"timeout": "30s"});
    let sib = run_aside(&s, sib_req);
    // Give the sibling time to be running (what the hostile run checks
    // does not depend on it: it finds nothing either way, and the
    // sibling's own answer proves it was running meanwhile).
    std::thread::sleep(Duration::from_millis(800));
    let hostile = "import os, signal, socket, json, glob, ctypes\n\
        r = {}\n\
        def t(name, f):\n    try:\n        r[name] = f()\n    except Exception as e:\n        r[name] = 'refused: ' + type(e).__name__\n\
        t('kill_all', lambda: os.kill(-1, signal.SIGKILL))\n\
        killed = []\n\
        for p in range(3, 4096):\n    try:\n        os.kill(p, signal.SIGKILL); killed.append(p)\n    except OSError:\n        pass\n\
        r['killed'] = killed\n\
        r['proc'] = sorted(os.listdir('/proc'))\n\
        t('abstract', lambda: socket.socket(socket.AF_UNIX).connect('\\0stockade-sibling'))\n\
        r['marks'] = [p for d in ('/tmp', '.', '/dev/shm') for p in glob.glob(d + '/sibling-mark')]\n\
        r['pts'] = sorted(os.listdir('/dev/pts'))\n\
        r['mqueue'] = sorted(os.listdir('/dev/mqueue'))\n\
        rt = ctypes.CDLL('librt.so.1', use_errno=True)\n\
        q = rt.mq_open(b'/own-q', os.O_CREAT | os.O_RDWR, 0o600, None)\n\
        r['mq_own'] = q >= 0 and rt.mq_send(q, b'x', 1, 0) == 0 and rt.mq_unlink(b'/own-q') == 0\n\
        t('ppid', lambda: os.getppid())\n\
        t('pidfd', lambda: os.pidfd_open(3))\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        r['keyring'] = libc.syscall(248, b'user', b'stockade-fork-test', b'x', 1, -4)\n\
        r['userns'] = libc.unshare(0x10000000)\n\
        print(json.dumps(r))";
    let v = s.run(&py(hostile)).json();
    assert_eq!(v["exit_code"], 0, "{v}");
    let r: Value = serde_json::from_str(stdout(&v)).unwrap();
    // kill(-1): no other process in its pid namespace to signal (its
    // init aside, as in a cold jail); no pid past its own.
    assert_eq!(r["kill_all"], "refused: ProcessLookupError", "{r}");
    assert_eq!(r["killed"], json!([]), "{r}");
    assert_eq!(pids(&r["proc"]), ["1", "2"], "{r}");
    assert!(
        r["abstract"].as_str().unwrap().starts_with("refused"),
        "{r}"
    );
    assert_eq!(r["marks"], json!([]), "{r}");
    assert_eq!(r["pts"], json!(["ptmx"]), "{r}");
    // POSIX message queues work, and the sibling's is not seen.
    assert_eq!(r["mqueue"], json!([]), "{r}");
    assert_eq!(r["mq_own"], true, "{r}");
    assert_eq!(
        r["ppid"], 1,
        "its parent is its init; the zygote is outside its pid namespace: {r}"
    );
    assert!(r["pidfd"].as_str().unwrap().starts_with("refused"), "{r}");
    // The user keyring is shared by every process of one uid in one user
    // namespace: the seccomp filter refuses it, as a cold run's does.
    assert_eq!(r["keyring"], -1, "{r}");
    assert_eq!(r["userns"], -1, "{r}");
    let sib = sib.join().unwrap().json();
    assert_eq!(sib["status"], "exited", "{sib}");
    assert_eq!(stdout(&sib), "ready\nwhole\n", "{sib}");
    // The zygote lives on.
    let v = s.run(&py("print('after')")).json();
    assert_eq!(stdout(&v), "after\n", "{v}");
    assert!(metric(&s, HITS) >= 3);
}

/// A request's program, stdin and files never pass through the zygote:
/// the next request, a fork of the same zygote, finds none of them in its
/// own memory, /tmp or workdir. `random` is seeded anew in each child;
/// the hash seed is the zygote's (shared, as documented).
#[test]
fn a_forked_run_finds_nothing_of_the_previous_one() {
    if !as_root("a_forked_run_finds_nothing_of_the_previous_one") {
        return;
    }
    // `random` imported in the zygote: each child must seed it anew.
    let s = forking_with(Who::Root, "json,re,random,threading", &[]);
    let token = format!("tok{:x}", std::process::id() as u64 * 7919 + 17);
    let first = json!({
        "profile": "python",
        "argv": ["python3", "-c", format!("import sys, random, json\nkeep = sys.stdin.read() + open('f.txt').read() + '{token}-code'\nopen('/tmp/left', 'w').write(keep)\nopen('left', 'w').write(keep)\nimport threading\nt = threading.Thread(target=lambda: None); t.start(); t.join()\nprint(json.dumps({{'random': random.random(), 'hash': hash('stockade'), 'main': threading.current_thread() is threading.main_thread() and len(threading.enumerate()) == 1}}))")],
        "stdin": format!("{token}-stdin"),
        "files": {"f.txt": format!("{token}-file")},
    });
    let a = s.run(&first).json();
    assert_eq!(a["exit_code"], 0, "{a}");
    // The token spelled backwards in the program and searched for as a
    // pattern of one-character classes: the search itself never puts the
    // token's bytes in memory, so it finds only what was there before.
    let rev: String = token.chars().rev().collect();
    let scan = format!(
        "import os, json, random, re, sys\n\
        mine = sys.stdin.read()\n\
        pat = ''.join('[%s]' % c for c in reversed('{rev}'))\n\
        pats = {{s: re.compile(pat.encode() + b''.join(b'[%c]' % c for c in s.encode())) for s in ('-code', '-stdin', '-file', '-mine')}}\n\
        found = []\n\
        with open('/proc/self/maps') as m, open('/proc/self/mem', 'rb', 0) as mem:\n    for line in m:\n        a, perms = line.split()[:2]\n        if 'r' not in perms or '[vvar' in line or '[vsyscall' in line:\n            continue\n        lo, hi = (int(x, 16) for x in a.split('-'))\n        try:\n            mem.seek(lo); chunk = mem.read(hi - lo)\n        except OSError:\n            continue\n        for s, p in pats.items():\n            if p.search(chunk) is not None:\n                found.append(s)\n        del chunk\n\
        print(json.dumps({{'found': sorted(set(found)), 'tmp': os.listdir('/tmp'), 'work': os.listdir('.'), 'random': random.random(), 'hash': hash('stockade')}}))"
    );
    // Its own stdin holds the token too (a control: the search finds what
    // is there).
    let mut req = py(&scan);
    req["stdin"] = json!(format!("{token}-mine"));
    let b = s.run(&req).json();
    assert_eq!(b["exit_code"], 0, "{b}");
    let b: Value = serde_json::from_str(stdout(&b)).unwrap();
    let a: Value = serde_json::from_str(stdout(&a)).unwrap();
    assert_eq!(b["found"], json!(["-mine"]), "{b}");
    assert_eq!(b["tmp"], json!([]), "{b}");
    assert_eq!(b["work"], json!([]), "{b}");
    assert_ne!(a["random"], b["random"], "random seeded alike");
    assert_eq!(a["main"], true, "threading's view of the child: {a}");
    // Documented: the hash seed is the zygote's, shared by its children.
    assert_eq!(a["hash"], b["hash"]);
    assert_eq!(metric(&s, HITS), 2);
}

/// Each run's deadline, output cap, memory and pids limits hold for it
/// alone: a fork bomb and a memory hog end as such while a sibling run
/// started beside them passes.
#[test]
fn a_forked_runs_limits_are_its_own() {
    if !as_root("a_forked_runs_limits_are_its_own") {
        return;
    }
    let s = forking(Who::Root, &["--max-memory", "128m", "--max-pids", "32"]);
    let mut r = py("import time\ntime.sleep(600)");
    r["limits"] = json!({"timeout": "1s"});
    let v = s.run(&r).json();
    assert_eq!(v["status"], "timeout", "{v}");
    let mut r = py("print('x' * 5000)");
    r["limits"] = json!({"max_output": 1000});
    let v = s.run(&r).json();
    assert_eq!(v["status"], "output_limit", "{v}");
    assert_eq!(v["stdout"]["truncated"], true, "{v}");
    let sibling = run_aside(
        &s,
        py("import time, os\ntime.sleep(2)\npid = os.fork()\nos._exit(0) if pid == 0 else os.waitpid(pid, 0)\nprint('fine')"),
    );
    let bomb = "import os, time\nn = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)\nraise SystemExit(1)";
    let v = s.run(&py(bomb)).json();
    assert_eq!(v["status"], "pids_limit", "{v}");
    assert_eq!(v["limits"]["pids"]["hit"], true, "{v}");
    let hog = "b = []\nwhile True:\n    b.append(bytearray(8 << 20))";
    let v = s.run(&py(hog)).json();
    assert_eq!(v["status"], "memory_limit", "{v}");
    assert_eq!(v["limits"]["memory"]["hit"], true, "{v}");
    let sib = sibling.join().unwrap().json();
    assert_eq!(sib["status"], "exited", "{sib}");
    assert_eq!(stdout(&sib), "fine\n", "{sib}");
    assert_eq!(metric(&s, HITS), 5);
}

/// A request's own limits below the pool's are a hit: the child's run
/// cgroup is made from them, and they hold (a memory hog ends
/// `memory_limit` at 128 MiB, a fork bomb `pids_limit` at 16, each
/// reported with the request's limit), and its /tmp and workdir are of
/// its own size. A variable the interpreter starts with: a miss, with
/// its reason in /metrics and the answer.
#[test]
fn a_forked_run_takes_the_requests_own_limits() {
    if !as_root("a_forked_run_takes_the_requests_own_limits") {
        return;
    }
    let s = forking(Who::Root, &[]);
    let mut hog = py("b = []\nwhile True:\n    b.append(bytearray(8 << 20))");
    hog["limits"] = json!({"memory": "128m", "pids": 16});
    let v = s.run(&hog).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(v["status"], "memory_limit", "{v}");
    assert_eq!(v["limits"]["memory"]["limit"], 128u64 << 20, "{v}");
    assert_eq!(v["limits"]["memory"]["hit"], true, "{v}");
    assert_eq!(v["limits"]["pids"]["limit"], 16, "{v}");
    // Under the pool's limit (the server's 512 MiB), over the run's.
    let peak = v["usage"]["peak_memory_bytes"].as_u64().unwrap();
    assert!(peak <= 128 << 20, "{v}");
    let bomb = "import os, time\nn = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)\nraise SystemExit(1)";
    let mut r = py(bomb);
    r["limits"] = json!({"pids": 16});
    let v = s.run(&r).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(v["status"], "pids_limit", "{v}");
    assert_eq!(v["limits"]["pids"]["limit"], 16, "{v}");
    // Its payload and init count: at most 14 more.
    let forked: u64 = stdout(&v).trim().parse().unwrap();
    assert!(forked <= 14, "{v}");
    // The next child's limit is its own again: 64 lets it fork more.
    let mut r = py(bomb.replace("30", "1").as_str());
    r["limits"] = json!({"pids": 64, "timeout": "20s"});
    let v = s.run(&r).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    let forked: u64 = stdout(&v).trim().parse().unwrap();
    assert!(forked > 16, "{v}");
    assert_eq!(metric(&s, HITS), 3);
    assert_eq!(misses(&s, "python"), 0);
    // Under /tmp's 128 MiB: the child mounts its /tmp and workdir at the
    // run's own sizes (the lesser of the profile's and the workdir's,
    // which follows the memory limit).
    let mut r = py("import os\nfor d in ('/tmp', '.'):\n    st = os.statvfs(d)\n    print(st.f_blocks * st.f_frsize)");
    r["limits"] = json!({"memory": "100m"});
    let v = s.run(&r).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(stdout(&v), format!("{0}\n{0}\n", 100u64 << 20), "{v}");
    let mut r = py("print('cold')");
    r["env"] = json!({"PYTHONHASHSEED": "0"});
    let v = s.run(&r).json();
    assert_eq!(pool_use(&v), Err("env".into()), "{v}");
    assert_eq!(misses_for(&s, "python", "limits"), 0);
    assert_eq!(misses_for(&s, "python", "env"), 1);
    assert_eq!(metric(&s, HITS), 4);
    // Each forked run was run and concluded once (the bench divides the
    // stages' time by the runs), the cold one not.
    // Each child was forked ahead of its request, or then (when the
    // request came first, or the one ahead could not take its limits).
    let stage = |name: &str| {
        metric(
            &s,
            &format!("stockade_stage_runs_total{{stage=\"{name}\"}}"),
        )
    };
    for name in ["fork_run", "fork_conclude"] {
        assert_eq!(stage(name), 4, "{name}");
    }
    for name in ["fork_cgroup_make", "fork_zygote"] {
        assert!(stage(name) >= 4, "{name}: {}", stage(name));
    }
    // Moved into its run cgroup, or born there (none moved).
    match nests(&s) {
        true => assert_eq!(stage("fork_cgroup_move"), 0),
        false => assert!(stage("fork_cgroup_move") >= 4),
    }
}

/// A forked run that fills its workdir (the child's own tmpfs, of
/// `--max-workdir`) ends as `disk_limit`, as a cold run does: killed when
/// its init finds it full, or found full when the payload ended on its
/// own (ENOSPC); the next run's workdir is empty and its own.
#[test]
fn a_forked_run_that_fills_its_workdir_ends_as_disk_limit() {
    if !as_root("a_forked_run_that_fills_its_workdir_ends_as_disk_limit") {
        return;
    }
    let s = forking(Who::Root, &["--max-workdir", "8m", "--max-timeout", "20s"]);
    let fill = "import time\ntry:\n    with open('big', 'wb') as f:\n        for i in range(64):\n            f.write(bytes(1 << 20))\n            f.flush()\nexcept OSError:\n    pass\n";
    // Writes past the cap and stays: killed once init finds it full.
    let v = s.run(&py(&format!("{fill}time.sleep(30)"))).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(v["status"], "disk_limit", "{v}");
    assert_eq!(v["signal"], 9, "{v}");
    // Ends on its own with the workdir full.
    let v = s.run(&py(&format!("{fill}print('done')"))).json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(v["status"], "disk_limit", "{v}");
    assert_eq!(stdout(&v), "done\n", "{v}");
    // A run that writes less is not.
    let v = s
        .run(&py(
            "import os\nprint(os.listdir('.'))\nopen('small', 'wb').write(bytes(1 << 20))",
        ))
        .json();
    assert_eq!(pool_use(&v), Ok(()), "{v}");
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(stdout(&v), "[]\n", "{v}");
}

/// A streamed (ndjson) request is forked too: its output comes as lines
/// while it runs, capped by its own max_output, and its outcome (no
/// captured output) says it was a hit.
#[test]
fn a_streamed_request_is_forked_and_streams() {
    if !as_root("a_streamed_request_is_forked_and_streams") {
        return;
    }
    let s = forking(Who::Root, &[]);
    let code = "import sys, time\nprint('out', flush=True)\ntime.sleep(0.2)\nprint('err', file=sys.stderr)";
    let mut r = py(code);
    r["limits"] = json!({"memory": "128m"});
    let mut l = Lines::open(s.connect(), &r);
    // The first line comes while the run still sleeps.
    let first = l.next_line().expect("a line");
    assert!(first["stdout"].is_string(), "{first}");
    let (rest, err, o) = l.output_then_outcome();
    let out = format!("{}{rest}", first["stdout"].as_str().unwrap());
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"), "{o}");
    assert_eq!(o["exit_code"], 0, "{o}");
    assert!(
        o.get("stdout").is_none() && o.get("stderr").is_none(),
        "{o}"
    );
    assert_eq!(o["usage"]["stdout_bytes"], 4, "{o}");
    assert_eq!(o["usage"]["stderr_bytes"], 4, "{o}");
    assert_eq!(o["applied"]["pool"], json!({"hit": true}), "{o}");
    assert_eq!(o["limits"]["memory"]["limit"], 128u64 << 20, "{o}");
    // Its own output cap.
    let mut r = py("print('x' * 5000)");
    r["limits"] = json!({"max_output": 1000});
    let mut l = Lines::open(s.connect(), &r);
    let mut got = 0;
    let o = loop {
        let v = l.next_line().expect("a line before the outcome");
        if v.get("status").is_some() {
            break v;
        }
        got += v["stdout"].as_str().unwrap_or_default().len();
    };
    assert_eq!(o["status"], "output_limit", "{o}");
    assert_eq!(got, 1000, "{o}");
    assert_eq!(metric(&s, HITS), 2);
    assert_eq!(misses(&s, "python"), 0);
}

/// A forked run's verdicts are a cold run's (supervise::classify): a
/// child of the run OOM-killed under a payload that then exits 0 leaves
/// `exited` 0 with the limit's report saying what was killed; the payload
/// OOM-killed itself is `memory_limit` with signal 9.
#[test]
fn a_forked_runs_verdicts_never_contradict_its_end() {
    if !as_root("a_forked_runs_verdicts_never_contradict_its_end") {
        return;
    }
    let s = forking(Who::Root, &["--max-memory", "128m"]);
    let child = "import os
pid = os.fork()
if pid == 0:
    x = b'x' * (1 << 30)
    os._exit(3)
_, st = os.waitpid(pid, 0)
print('child', os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))";
    let v = s.run(&py(child)).json();
    let m = &v["limits"]["memory"];
    assert_eq!(m["hit"], true, "{v}");
    if m["oom_killed"]["payload"] == true {
        // cgroup v2's memory.oom.group: the whole run went at once.
        assert_eq!(v["status"], "memory_limit", "{v}");
        assert_eq!(v["signal"], 9, "{v}");
    } else {
        assert_eq!(stdout(&v), "child 9\n", "{v}");
        assert_eq!(v["status"], "exited", "{v}");
        assert_eq!(v["exit_code"], 0, "{v}");
        assert!(m["oom_killed"]["processes"].as_u64() >= Some(1), "{v}");
        assert!(
            v["detail"]
                .as_str()
                .is_some_and(|d| d.contains("not the payload")),
            "{v}"
        );
    }
    let v = s.run(&py("x = b'x' * (1 << 30)")).json();
    assert_eq!(v["status"], "memory_limit", "{v}");
    assert_eq!(
        (&v["signal"], &v["exit_code"]),
        (&json!(9), &json!(137)),
        "{v}"
    );
    assert_eq!(v["limits"]["memory"]["oom_killed"]["payload"], true, "{v}");
}

/// A client that goes away mid-run gets its child killed (its whole pid
/// namespace); SIGTERM ends the zygote; no process, run cgroup or
/// workdir is left.
#[test]
fn forked_runs_leave_nothing_behind() {
    if !as_root("forked_runs_leave_nothing_behind") {
        return;
    }
    let mut s = forking(Who::Root, &[]);
    let mut c = std::os::unix::net::UnixStream::connect(&s.sock).unwrap();
    let body = serde_json::to_vec(&py(
        "import os, time\nif os.fork() == 0:\n    time.sleep(600)\ntime.sleep(600)",
    ))
    .unwrap();
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    std::io::Write::write_all(&mut c, head.as_bytes()).unwrap();
    std::io::Write::write_all(&mut c, &body).unwrap();
    // Wait until the run is in flight, then hang up.
    let deadline = Instant::now() + PATIENCE;
    while metric(&s, "stockade_runs_in_flight") == 0 {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(c);
    while metric(&s, "stockade_runs_in_flight") != 0 {
        assert!(Instant::now() < deadline, "the run was not killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = s.run(&py("print('next')")).json();
    assert_eq!(stdout(&v), "next\n", "{v}");
    let pids = descendants(s.pid());
    s.term();
    assert_eq!(s.wait().code(), Some(0), "{}", s.log.lock().unwrap());
    for p in &pids {
        while std::path::Path::new(&format!("/proc/{p}")).exists() {
            let st = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            if st.contains(") Z ") {
                break;
            }
            assert!(Instant::now() < deadline, "process {p} is still alive");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    // No v1 run group of this server's left (they are named after it).
    let me = format!("run-{}-", s.pid());
    for ctrl in ["memory", "pids", "cpu"] {
        let base = std::path::PathBuf::from(format!("/sys/fs/cgroup/{ctrl}"));
        let left: Vec<_> = walk(&base, 6)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&me))
            })
            .collect();
        assert!(left.is_empty(), "{ctrl}: {left:?}");
    }
}

/// The zygote killed from outside: the run in flight ends with a setup
/// error that says why (or, if it had ended, as it did), the next
/// request is answered right (a cold jail while there is no fork
/// server), and the pool starts another zygote.
#[test]
fn a_killed_zygote_is_replaced_and_runs_stay_right() {
    if !as_root("a_killed_zygote_is_replaced_and_runs_stay_right") {
        return;
    }
    let s = forking(Who::Root, &[]);
    let zygote = || {
        descendants(s.pid()).into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("_zygote(_sys, _os)"))
        })
    };
    let first = zygote().expect("a zygote");
    let v = s.run(&py("print('before')")).json();
    assert_eq!(stdout(&v), "before\n", "{v}");
    let hits = metric(&s, HITS);
    assert!(hits >= 1);
    kill_process(first);
    // Until a new zygote is up, runs are cold and right.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = s.run(&py("print('during')")).json();
        assert_eq!(stdout(&v), "during\n", "{v}");
        match zygote() {
            Some(z) if z != first => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no new zygote: {}",
            s.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + PATIENCE;
    let before = metric(&s, HITS);
    loop {
        let v = s.run(&py("import os; print(os.getpid())")).json();
        assert_eq!(v["exit_code"], 0, "{v}");
        if metric(&s, HITS) > before {
            assert_eq!(stdout(&v), "2\n", "a forked child again: {v}");
            break;
        }
        assert!(Instant::now() < deadline, "never forked again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The parent of `pid` (its /proc stat's fourth field).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn kill_process(pid: u32) {
    let st = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    // kill(1) returns once the signal is sent: until the process is dead,
    // a request may still be handed to it (and end with it, as a run in
    // flight does). Dead: a zombie, or reaped.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(st) if !st.contains(") Z ") => {}
            _ => return,
        }
        assert!(Instant::now() < deadline, "process {pid} outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Without a cgroup for each run's memory and pids (uid 65534 here), the
/// server says so and serves its pool as members, each run right.
#[test]
fn without_a_run_cgroup_the_pool_serves_members() {
    let s = forking(Who::Nobody, &[]);
    let v = s.run(&py("import os; print(os.getpid())")).json();
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_ne!(
        stdout(&v),
        "1\n",
        "a member's payload is pid 2 under init: {v}"
    );
    assert!(
        s.log
            .lock()
            .unwrap()
            .contains("--warm-fork: no cgroup holds"),
        "{}",
        s.log.lock().unwrap()
    );
}

/// Where user namespaces are refused no zygote can start (its child
/// cannot make its namespaces): after three tries the server says so and
/// serves its pools as members, each run right.
#[test]
fn in_the_fallback_the_pool_serves_members() {
    for who in common::users("in_the_fallback_the_pool_serves_members") {
        let s = Server::start_wrapped(
            &["chk_nouserns"],
            who,
            &["--warm", "python=1", "--warm-import", "json", "--warm-fork"],
        );
        s.wait_ready();
        let v = s.run(&files_and_stdin()).json();
        assert_eq!(v["status"], "exited", "{v}");
        assert_eq!(v["layers"]["user_namespace"]["state"], "unavailable", "{v}");
        assert_eq!(stdout(&v), "given in\n", "{v}");
        assert_eq!(metric(&s, HITS), 1);
        let log = s.log.lock().unwrap().clone();
        assert!(
            log.contains("--warm-fork: no fork server could start")
                || log.contains("--warm-fork: no cgroup holds"),
            "{log}"
        );
    }
}

fn walk(dir: &std::path::Path, depth: usize) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(e.path());
            out.extend(walk(&e.path(), depth - 1));
        }
    }
    out
}

/// `--warm python=2 --warm-fork` on a host of two CPUs or more: two
/// zygotes, taken in turn (no one zygote's forks serialise every run);
/// with one of them killed, the other serves warm until it is replaced.
#[test]
fn a_pool_of_two_fork_servers_takes_them_in_turn() {
    if !as_root("a_pool_of_two_fork_servers_takes_them_in_turn") {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        common::skip(
            "a_pool_of_two_fork_servers_takes_them_in_turn",
            "one CPU: a pool gets one fork server",
        );
        return;
    }
    let s = Server::start(
        Who::Root,
        &["--warm", "python=2", "--warm-import", "json", "--warm-fork"],
    );
    s.wait_ready();
    // The zygotes: interpreters running the zygote's code whose parent
    // is not one (a zygote's children, forked ahead or running, are
    // copies of it).
    let zygotes = || -> Vec<u32> {
        let copies: Vec<u32> = descendants(s.pid())
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("_zygote(_sys, _os)"))
            })
            .collect();
        copies
            .iter()
            .copied()
            .filter(|p| !parent(*p).is_some_and(|pp| copies.contains(&pp)))
            .collect()
    };
    // Both fork servers up (the pool's size in fork mode).
    let deadline = Instant::now() + PATIENCE;
    while metric(&s, "stockade_pool_size{profile=\"python\"}") < 2 {
        assert!(
            Instant::now() < deadline,
            "no second fork server: {}",
            s.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(zygotes().len(), 2);
    // Two runs at once: one child under each zygote.
    let runs: Vec<_> = (0..2)
        .map(|_| run_aside(&s, py("import time\ntime.sleep(2)\nprint('slept')")))
        .collect();
    // Each zygote seen with a run (each sleeps 2 s; not necessarily both
    // at the same moment): a child that forked its init and payload. The
    // child forked ahead, waiting for its go, is one process alone.
    let both = zygotes();
    let mut seen = [false, false];
    let deadline = Instant::now() + PATIENCE;
    while !seen.iter().all(|s| *s) {
        for (z, s) in both.iter().zip(seen.iter_mut()) {
            *s |= descendants(*z).len() >= 2;
        }
        assert!(
            Instant::now() < deadline,
            "not a child under each zygote: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in runs {
        let v = r.join().unwrap().json();
        assert_eq!(stdout(&v), "slept\n", "{v}");
        assert_eq!(pool_use(&v), Ok(()), "{v}");
    }
    assert_eq!(metric(&s, HITS), 2);
    let before = zygotes();
    kill_process(before[0]);
    // The other one serves, warm, meanwhile.
    for _ in 0..3 {
        let v = s.run(&py("print('on')")).json();
        assert_eq!(stdout(&v), "on\n", "{v}");
        assert_eq!(pool_use(&v), Ok(()), "{v}");
    }
}

/// A host whose cgroup2 mount lacks `favordynmods` (each move into a
/// cgroup may wait for an RCU grace period) is told so when a fork server
/// that moves its children starts; one with it is not, nor a server whose
/// pools do not fork (uid 65534 here: no cgroup holds a run), nor one
/// whose children are born in their cgroups (cgroup v2).
#[test]
fn a_fork_server_says_when_each_move_waits_for_a_grace_period() {
    let name = "a_fork_server_says_when_each_move_waits_for_a_grace_period";
    let unified = common::cgroup2_mounts();
    let Some((at, superopts)) = unified
        .iter()
        .find(|(m, _)| m == "/sys/fs/cgroup")
        .or_else(|| unified.iter().find(|(m, _)| m == "/sys/fs/cgroup/unified"))
        .or(unified.first())
    else {
        common::skip(name, "no cgroup2 mount on this host");
        return;
    };
    let lacks = !superopts.split(',').any(|o| o == "favordynmods");
    for who in common::users(name) {
        let s = forking(who, &[]);
        let log = s.log.lock().unwrap().clone();
        // A pool that does not fork says why, on a line with this prefix.
        let forks = !log.contains("--warm-fork:");
        let moves = forks && !nests(&s);
        let said = log.contains(&format!("the cgroup2 mount {at} lacks favordynmods"));
        assert_eq!(said, lacks && moves, "{who:?} {at} {superopts}:\n{log}");
    }
}
