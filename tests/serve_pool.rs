//! `stockade serve --warm`, the real binary, as root and as uid 65534:
//! pooled runs answer as cold ones do (stdout, exit code, files, stdin,
//! tracebacks, the deadline), each in a jail no other run touched (its
//! own namespaces, /tmp, workdir and random seed); a run's own limits
//! below the pool's are a hit where the member's run cgroup holds them,
//! and hold; requests a member cannot run exactly are misses, with their
//! reason in /metrics and the answer, that still answer right; /readyz
//! waits for the pools; SIGTERM leaves nothing behind.

mod common;
mod serve_util;

use std::time::{Duration, Instant};

use common::Who;
use serde_json::{json, Value};
use serve_util::{
    descendants, files_and_stdin, metric, misses, misses_for, pool_use, py, py_cold, who_name,
    Lines, Server, PATIENCE,
};

/// A server with a warm python pool of `n`.
fn pooled(who: Who, n: usize, more: &[&str]) -> Server {
    let warm = format!("python={n}");
    let mut args = vec![
        "--warm",
        warm.as_str(),
        "--warm-import",
        "json,re,math,difflib",
    ];
    args.extend_from_slice(more);
    Server::start(who, &args)
}

/// Poll /metrics until the pool holds `n` members again (refilled).
fn wait_full(s: &Server, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    while metric(s, SIZE) < n {
        assert!(
            Instant::now() < deadline,
            "the pool was not refilled; stderr:\n{}",
            s.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const HITS: &str = "stockade_pool_hits_total{profile=\"python\"}";
const SIZE: &str = "stockade_pool_size{profile=\"python\"}";

#[test]
fn pooled_runs_answer_as_cold_runs_do() {
    for who in common::users("pooled_runs_answer_as_cold_runs_do") {
        let w = who_name(who);
        let s = pooled(who, 2, &[]);
        s.wait_ready();
        let v = s
            .run(&json!({
                "profile": "python",
                "argv": ["python3", "-c", "import sys, os, json\nd = json.load(sys.stdin)\nprint(sys.argv, open('in/a.txt').read(), os.environ['ANSWER'], d['x'])\nprint('err', file=sys.stderr)\nsys.exit(3)", "arg"],
                "stdin": "{\"x\": 42}",
                "files": {"in/a.txt": "a file"},
                "env": {"ANSWER": "yes"},
            }))
            .json();
        assert_eq!(v["status"], "exited", "{w}: {v}");
        assert_eq!(v["exit_code"], 3, "{w}: {v}");
        assert_eq!(
            v["stdout"]["data"], "['-c', 'arg'] a file yes 42\n",
            "{w}: {v}"
        );
        assert_eq!(v["stderr"]["data"], "err\n", "{w}: {v}");
        assert_eq!(metric(&s, HITS), 1, "{w}");
        wait_full(&s, 2);
        // A script file, its arguments and its sys.path[0].
        let v = s
            .run(&json!({
                "profile": "python",
                "argv": ["python3", "main.py", "-v"],
                "files": {"main.py": "import sys, os\nprint(sys.argv, sys.path[0] == os.getcwd(), __name__)\n"},
            }))
            .json();
        assert_eq!(
            v["stdout"]["data"], "['main.py', '-v'] True __main__\n",
            "{w}: {v}"
        );
        assert_eq!(metric(&s, HITS), 2, "{w}");
        // An uncaught exception and a syntax error: the same stderr and
        // exit code as in a cold jail (a miss: its argv).
        for code in [
            "def f():\n    1/0\nf()",
            "x(",
            "import sys; sys.exit('bye')",
        ] {
            wait_full(&s, 2);
            let warm = s.run(&py(code)).json();
            let cold = s.run(&py_cold(code)).json();
            assert_eq!(pool_use(&warm), Ok(()), "{w}: {warm}");
            assert_eq!(pool_use(&cold), Err("argv".into()), "{w}: {cold}");
            for k in ["status", "exit_code", "stdout", "stderr"] {
                assert_eq!(warm[k], cold[k], "{w}: {code:?}: {k}: {warm} vs {cold}");
            }
        }
        assert_eq!(metric(&s, HITS), 5, "{w}");
        assert_eq!(misses_for(&s, "python", "argv"), 3, "{w}");
    }
}

#[test]
fn pooled_runs_do_not_see_each_other() {
    for who in common::users("pooled_runs_do_not_see_each_other") {
        let w = who_name(who);
        let s = pooled(who, 2, &[]);
        s.wait_ready();
        let code = "import os, random, json\n\
            ns = {n: os.readlink('/proc/self/ns/' + n) for n in ['pid', 'mnt', 'net', 'ipc', 'uts']}\n\
            seen = sorted(os.listdir('/tmp')) + sorted(os.listdir('.'))\n\
            open('/tmp/left', 'w').write('x'); open('left', 'w').write('x')\n\
            print(json.dumps({'ns': ns, 'seen': seen, 'random': random.random(), 'hash': hash('stockade')}))";
        let runs: Vec<Value> = (0..2)
            .map(|_| {
                let v = s.run(&py(code)).json();
                assert_eq!(v["exit_code"], 0, "{w}: {v}");
                serde_json::from_str(v["stdout"]["data"].as_str().unwrap()).unwrap()
            })
            .collect();
        assert_eq!(metric(&s, HITS), 2, "{w}: both pooled");
        let (a, b) = (&runs[0], &runs[1]);
        for n in ["pid", "mnt", "net", "ipc", "uts"] {
            assert_ne!(a["ns"][n], b["ns"][n], "{w}: {n} namespace shared");
        }
        assert_eq!(b["seen"], json!([]), "{w}: the first run's files seen");
        assert_ne!(a["random"], b["random"], "{w}: random seeded alike");
        assert_ne!(a["hash"], b["hash"], "{w}: hash seed shared");
    }
}

#[test]
fn a_pooled_run_times_out_from_its_hand_over() {
    for who in common::users("a_pooled_run_times_out_from_its_hand_over") {
        let w = who_name(who);
        let s = pooled(who, 1, &[]);
        s.wait_ready();
        let mut r = py("import time\ntime.sleep(600)");
        r["limits"] = json!({"timeout": "1s", "max_output": 1000});
        let v = s.run(&r).json();
        assert_eq!(v["status"], "timeout", "{w}: {v}");
        assert_eq!(v["limits"]["timeout"]["limit"], 1.0, "{w}: {v}");
        assert_eq!(v["limits"]["max_output"]["limit"], 1000, "{w}: {v}");
        assert_eq!(metric(&s, HITS), 1, "{w}");
        // The request's output cap holds too.
        wait_full(&s, 1);
        let mut r = py("print('x' * 5000)");
        r["limits"] = json!({"max_output": 1000});
        let v = s.run(&r).json();
        assert_eq!(v["status"], "output_limit", "{w}: {v}");
        assert_eq!(metric(&s, HITS), 2, "{w}");
    }
}

#[test]
fn what_a_member_cannot_run_exactly_is_a_miss_and_still_right() {
    for who in common::users("what_a_member_cannot_run_exactly_is_a_miss_and_still_right") {
        let w = who_name(who);
        let s = pooled(who, 1, &[]);
        s.wait_ready();
        // A memory limit under /tmp's 128 MiB: /tmp (the lesser of the
        // profile's size and the workdir's, which follows the memory
        // limit) is a tmpfs the member mounted at its start.
        let mut other_tmp = py("print('small')");
        other_tmp["limits"] = json!({"memory": "100m"});
        let mut hash_seed = py("print(hash('a'))");
        hash_seed["env"] = json!({"PYTHONHASHSEED": "0"});
        let other_argv =
            json!({"profile": "python", "argv": ["python3", "-I", "-c", "print('isolated')"]});
        let shell = json!({"profile": "shell", "argv": ["echo", "shell"]});
        let want = [
            ("small\n", "python", "limits"),
            ("", "python", "env"),
            ("isolated\n", "python", "argv"),
            ("shell\n", "shell", "no_pool"),
        ];
        for (req, (out, profile, reason)) in
            [other_tmp, hash_seed, other_argv, shell].iter().zip(want)
        {
            let v = s.run(req).json();
            assert_eq!(v["exit_code"], 0, "{w}: {v}");
            if !out.is_empty() {
                assert_eq!(v["stdout"]["data"], out, "{w}: {v}");
            }
            assert_eq!(pool_use(&v), Err(reason.into()), "{w}: {v}");
            assert_eq!(misses_for(&s, profile, reason), 1, "{w}: {req}");
        }
        assert_eq!(misses(&s, "python"), 3, "{w}: misses by profile");
        assert_eq!(metric(&s, HITS), 0, "{w}");
        assert_eq!(metric(&s, SIZE), 1, "{w}: the member is still there");
    }
}

/// A run's own limits below the pool's. Where the member's run cgroup
/// holds them (root here), a hit, and they hold for that run alone: a
/// memory hog ends `memory_limit` at the run's 128 MiB, a fork bomb
/// `pids_limit` at its 16, and the next member has the pool's limits.
/// Where it cannot (uid 65534 without a delegated cgroup), a miss for
/// `limits`, run cold with them. A limit the member's cgroup refuses (a
/// memory limit under what the member already uses, on cgroup v1) is a
/// miss for `limits` too, and the member is not kept.
#[test]
fn a_member_takes_a_runs_own_limits_and_they_hold() {
    for who in common::users("a_member_takes_a_runs_own_limits_and_they_hold") {
        let w = who_name(who);
        // A workdir of its own size: /tmp's does not follow the memory
        // limit.
        let s = pooled(who, 1, &["--max-workdir", "64m"]);
        s.wait_ready();
        let served = |v: &Value| {
            let got = pool_use(v);
            if who == Who::Root {
                assert_eq!(got, Ok(()), "{w}: {v}");
            } else {
                assert!(got == Ok(()) || got == Err("limits".into()), "{w}: {v}");
            }
        };
        let mut hog = py("b = []\nwhile True:\n    b.append(bytearray(8 << 20))");
        hog["limits"] = json!({"memory": "128m", "pids": 16});
        let v = s.run(&hog).json();
        served(&v);
        assert_eq!(v["status"], "memory_limit", "{w}: {v}");
        assert_eq!(v["limits"]["memory"]["limit"], 128u64 << 20, "{w}: {v}");
        assert_eq!(v["limits"]["pids"]["limit"], 16, "{w}: {v}");
        wait_full(&s, 1);
        let mut bomb = py("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(30); os._exit(0)");
        bomb["limits"] = json!({"pids": 16, "timeout": "20s"});
        let v = s.run(&bomb).json();
        served(&v);
        assert_eq!(v["status"], "pids_limit", "{w}: {v}");
        wait_full(&s, 1);
        // The pool's limits again, for a run that asks none.
        let v = s
            .run(&py("b = bytearray(200 << 20)\nprint(len(b) >> 20)"))
            .json();
        assert_eq!(pool_use(&v), Ok(()), "{w}: {v}");
        assert_eq!(v["stdout"]["data"], "200\n", "{w}: {v}");
        assert_eq!(
            v["limits"]["memory"]["limit"], v["applied"]["limits"]["memory"],
            "{w}: {v}"
        );
        if who != Who::Root {
            continue;
        }
        assert_eq!(metric(&s, HITS), 3, "{w}");
        assert_eq!(misses(&s, "python"), 0, "{w}");
        // Less memory than the member holds already: cgroup v1 refuses
        // the cut (v2 reclaims, then OOM-kills the run: memory_limit).
        wait_full(&s, 1);
        let mut tiny = py("print('tiny')");
        tiny["limits"] = json!({"memory": "4m"});
        let v = s.run(&tiny).json();
        match pool_use(&v) {
            Ok(()) => assert_eq!(v["status"], "memory_limit", "{w}: {v}"),
            Err(why) => {
                assert_eq!(why, "limits", "{w}: {v}");
                assert_eq!(misses_for(&s, "python", "limits"), 1, "{w}");
                s.wait_line("could not take the run's limits");
            }
        }
        wait_full(&s, 1);
        let v = s.run(&py("print('next')")).json();
        assert_eq!(pool_use(&v), Ok(()), "{w}: {v}");
        assert_eq!(v["stdout"]["data"], "next\n", "{w}: {v}");
    }
}

#[test]
fn a_member_serves_a_streamed_request_and_streams() {
    for who in common::users("a_member_serves_a_streamed_request_and_streams") {
        let w = who_name(who);
        let s = pooled(who, 1, &[]);
        wait_full(&s, 1);
        let code = "import sys; print('out', flush=True); print('err', file=sys.stderr)";
        let mut l = Lines::open(s.connect(), &py(code));
        let (out, err, o) = l.output_then_outcome();
        assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"), "{w}: {o}");
        assert_eq!(o["exit_code"], 0, "{w}: {o}");
        // As a cold streamed run: the output went to the stream, not
        // into the outcome.
        assert!(
            o.get("stdout").is_none() && o.get("stderr").is_none(),
            "{w}: {o}"
        );
        assert_eq!(o["usage"]["stdout_bytes"], 4, "{w}: {o}");
        assert_eq!(metric(&s, HITS), 1, "{w}");
        assert_eq!(misses(&s, "python"), 0, "{w}");
        assert_eq!(o["applied"]["pool"], json!({"hit": true}), "{w}: {o}");
        // The next member, taken by a captured request, captures and
        // streams nothing.
        wait_full(&s, 1);
        let v = s.run(&py(code)).json();
        assert_eq!(v["stdout"]["data"], "out\n", "{w}: {v}");
        assert_eq!(v["stderr"]["data"], "err\n", "{w}: {v}");
        assert_eq!(metric(&s, HITS), 2, "{w}");
    }
}

#[test]
fn readyz_waits_for_the_pools() {
    let w = "root";
    // A pool whose members never get ready: 503, and the log says why.
    let s = Server::start(
        Who::Root,
        &[
            "--warm",
            "python=1",
            "--warm-import",
            "no_such_module_at_all",
        ],
    );
    assert_eq!(s.call("GET", "/readyz", &[], b"").status, 503, "{w}");
    s.wait_line("warm pool python: a member did not start");
    assert_eq!(s.call("GET", "/readyz", &[], b"").status, 503, "{w}");
    // Runs still answer (cold).
    let v = s.run(&py("print(1)")).json();
    assert_eq!(v["stdout"]["data"], "1\n", "{v}");
    // A good pool: 200 once full.
    let s = pooled(Who::Root, 3, &[]);
    s.wait_ready();
    assert_eq!(metric(&s, SIZE), 3);
}

/// The cgroup v2 directories of `pids` under a `stockade/` base.
fn run_cgroups(pids: &[u32]) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for p in pids {
        let cg = std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
        for l in cg.lines() {
            if let Some(path) = l.strip_prefix("0::") {
                if path.contains("/stockade/run-") {
                    for base in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                        let d = std::path::PathBuf::from(format!("{base}{path}"));
                        if d.is_dir() && !out.contains(&d) {
                            out.push(d);
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn sigterm_leaves_no_member_behind() {
    for who in common::users("sigterm_leaves_no_member_behind") {
        let w = who_name(who);
        let mut s = pooled(who, 2, &[]);
        s.wait_ready();
        let v = s.run(&py("print('one')")).json();
        assert_eq!(v["stdout"]["data"], "one\n", "{w}: {v}");
        wait_full(&s, 2);
        let procs = descendants(s.pid());
        let cgroups = run_cgroups(&procs);
        assert!(procs.len() >= 3, "{w}: spawner and members: {procs:?}");
        s.term();
        assert_eq!(s.wait().code(), Some(0), "{w}: {}", s.log.lock().unwrap());
        let deadline = Instant::now() + PATIENCE;
        for p in &procs {
            while std::path::Path::new(&format!("/proc/{p}")).exists() {
                let state = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                if state.contains(") Z ") {
                    break; // a zombie of a reaper that is not ours
                }
                assert!(Instant::now() < deadline, "{w}: process {p} is still alive");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for d in &cgroups {
            assert!(!d.exists(), "{w}: cgroup {} left", d.display());
        }
        assert!(s.leftovers().is_empty(), "{w}: {:?}", s.leftovers());
    }
}

/// While the server drains (a run still in flight), no run can take a
/// warm member: the pool stops building and lets its idle members go.
#[test]
fn draining_lets_the_idle_members_go() {
    let mut s = pooled(Who::Root, 2, &["--profiles", "python,shell"]);
    s.wait_ready();
    let mut a = serve_util::Lines::open(
        s.connect(),
        &serde_json::json!({"profile": "shell", "argv": ["sh", "-c", "echo started; sleep 600"], "limits": {"timeout": "60s"}}),
    );
    a.until("stdout");
    s.term();
    s.wait_line("draining");
    let deadline = Instant::now() + PATIENCE;
    while metric(&s, SIZE) > 0 {
        assert!(
            Instant::now() < deadline,
            "idle members kept while draining; stderr:\n{}",
            s.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(a);
    assert_eq!(s.wait().code(), Some(0), "{}", s.log.lock().unwrap());
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

/// A parked member that died (killed from outside) is not handed a
/// program: the request gets a live member or a cold jail, and answers.
#[test]
fn a_member_that_died_while_parked_is_not_used() {
    let s = pooled(Who::Root, 1, &[]);
    s.wait_ready();
    let procs = descendants(s.pid());
    let boot = procs
        .iter()
        .copied()
        .find(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).contains("warm-pool bootstrap")
        })
        .expect("the member's interpreter");
    // Its supervisor: the interpreter's parent is the jail's init, whose
    // parent is the supervisor.
    let parent = |p: u32| -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
        let rest = stat.rsplit_once(") ").unwrap().1;
        rest.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let supervisor = parent(parent(boot));
    let st = std::process::Command::new("kill")
        .args(["-KILL", &boot.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    // The supervisor has written the outcome once it is gone (or a zombie).
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{supervisor}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member's supervisor lives on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = s.run(&py("print('alive')")).json();
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(v["stdout"]["data"], "alive\n", "{v}");
    s.wait_line("a parked member had ended");
}

/// The library under the pools: a jail spawned with its clock held has no
/// deadline until `start_clock`, then the one it is given.
#[test]
fn a_held_clock_starts_when_the_caller_says() {
    use std::io::{BufRead, Write};
    // This process has threads: the spawner is the stockade binary. (The
    // other tests here read the environment only through std, which
    // takes the lock set_var takes.)
    std::env::set_var("STOCKADE_BIN", common::binary());
    // A 1 ms timeout would end the jail before it could say "ready", were
    // the clock running: held, it never starts.
    let (mut c, mut out) = held_shell(
        "echo ready; read x; echo got $x",
        Duration::from_millis(1),
        true,
    );
    c.stdin.take().unwrap().write_all(b"x\n").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "got x\n");
    let o = c.wait().unwrap();
    assert_eq!(o.exit_code, 0, "{}", o.to_json());
    // Started with its own timeout: that one, from then.
    let (mut c, _out) = held_shell(
        "echo ready; exec sleep 600",
        Duration::from_secs(600),
        false,
    );
    c.start_clock(Some(Duration::from_millis(200)), None)
        .unwrap();
    let o = c.wait().unwrap();
    let v: Value = serde_json::from_str(&o.to_json()).unwrap();
    assert_eq!(v["status"], "timeout", "{v}");
    assert_eq!(v["limits"]["timeout"]["limit"], 0.2, "{v}");
}

/// A shell jail (stdin piped too, with `stdin`) running `script`, which
/// says "ready" first, with `timeout` and its clock held; once it said so,
/// with the rest of its stdout.
fn held_shell(
    script: &str,
    timeout: Duration,
    stdin: bool,
) -> (stockade::Child, std::io::BufReader<std::fs::File>) {
    use std::io::BufRead;
    use stockade::{Jail, Stdio};
    let mut j = Jail::profile("shell").unwrap();
    j.args(["sh", "-c", script])
        .timeout(timeout)
        .hold_clock()
        .stdout(Stdio::piped());
    if stdin {
        j.stdin(Stdio::piped());
    }
    let mut c = j.spawn().unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (c, out)
}

/// Where user namespaces are refused, members take the fallback like cold
/// runs do, and a pooled run still gets its files, stdin and deadline.
#[test]
fn pooled_runs_in_the_fallback() {
    for who in common::users("pooled_runs_in_the_fallback") {
        let w = who_name(who);
        let s = Server::start_wrapped(
            &["chk_nouserns"],
            who,
            &["--warm", "python=1", "--warm-import", "json"],
        );
        s.wait_ready();
        let v = s.run(&files_and_stdin()).json();
        assert_eq!(v["status"], "exited", "{w}: {v}");
        assert_eq!(
            v["layers"]["user_namespace"]["state"], "unavailable",
            "{w}: {v}"
        );
        assert_eq!(v["stdout"]["data"], "given in\n", "{w}: {v}");
        assert_eq!(metric(&s, HITS), 1, "{w}");
        wait_full(&s, 1);
        let mut r = py("import time\ntime.sleep(600)");
        r["limits"] = json!({"timeout": "1s"});
        let v = s.run(&r).json();
        assert_eq!(v["status"], "timeout", "{w}: {v}");
        assert_eq!(metric(&s, HITS), 2, "{w}");
    }
}
