"""The app container of the Docker Compose sidecar test: it reaches the
stockade sidecar only through the unix socket on the shared volume, with
the Python client of clients/python (copied in as /app/stockade), and
prints `key=value` lines that xtask/src/docker_compose.rs checks."""

import json
import os
import stat
import sys
import threading
import time

sys.path.insert(0, "/app")
import stockade  # noqa: E402

SOCK = "/run/stockade/stockade.sock"
EVALUATOR = (
    "import json, sys, difflib\n"
    "d = json.load(sys.stdin)\n"
    "r = difflib.SequenceMatcher(None, d['answer'], d['reference']).ratio()\n"
    "print(json.dumps({'score': round(r, 4)}))\n"
)
HOSTILE = (
    "import os, socket\n"
    "def t(f):\n"
    "    try:\n"
    "        f(); return 'allowed'\n"
    "    except OSError as e:\n"
    "        return 'refused'\n"
    "print('write_usr=' + t(lambda: open('/usr/stockade-probe', 'w')))\n"
    "print('tcp=' + t(lambda: socket.create_connection(('10.0.0.1', 80), timeout=2)))\n"
    "print('sock_write=' + t(lambda: open('/sock/planted', 'w')))\n"
    "print('uid=%d' % os.getuid())\n"
    "open('left.txt', 'w').write('x')\n"
    "print('workdir_write=allowed')\n"
)


def say(k, v):
    print("%s=%s" % (k, v), flush=True)


def wait_for_socket(c):
    deadline = time.time() + 60
    while True:
        try:
            return c.health()
        except stockade.StockadeConnectionError as e:
            if time.time() > deadline:
                raise SystemExit("no server on %s: %s" % (SOCK, e))
            time.sleep(0.2)


def main():
    c = stockade.Client("unix:" + SOCK, timeout=120)
    health = wait_for_socket(c)
    st = os.stat(SOCK)
    say("socket_mode", oct(stat.S_IMODE(st.st_mode)))
    say("socket_gid", st.st_gid)
    say("app_ids", "%d:%d" % (os.getuid(), os.getgid()))
    say("server_confined", json.dumps(health.get("confinement", {}).get("confined")))

    case = {"answer": "The capital of France is Paris.", "reference": "Paris is the capital of France."}
    out = c.run(code=EVALUATOR, stdin=json.dumps(case), limits={"timeout": "20s", "memory": "256m"})
    say("eval_status", "%s/%s" % (out.status, out.exit_code))
    say("eval_stdout", out.stdout_text.strip())
    say("eval_stderr", json.dumps(out.stderr_text))
    for layer in ("user_namespace", "landlock", "seccomp", "process_tree"):
        say("layer_" + layer, out.layers.get(layer, {}).get("state"))
    say("warnings", json.dumps(out.raw.get("warnings", [])))

    out = c.run(["python3", "main.py"], files={"main.py": "print(open('data/in.txt').read().upper())", "data/in.txt": "from a file"})
    say("files_stdout", out.stdout_text.strip())

    out = c.run(code=HOSTILE)
    say("hostile_status", "%s/%s" % (out.status, out.exit_code))
    for line in out.stdout_text.splitlines():
        say("hostile_" + line.split("=", 1)[0], line.split("=", 1)[1])

    try:
        c.run(["python3", "-c", "pass"], files={"../escape": "x"})
        say("bad_request", "accepted")
    except stockade.BadRequest as e:
        say("bad_request", "BadRequest:%s" % e.field)
    try:
        c.run(["true"], profile="no-such-profile")
        say("unknown_profile", "accepted")
    except stockade.UnknownProfile:
        say("unknown_profile", "UnknownProfile")

    events = list(c.stream(["sh", "-c", "echo one; sleep 0.3; echo two >&2; echo three"], profile="shell"))
    chunks = "".join("%s:%s" % (e.stream, e.text) for e in events[:-1])
    say("stream_chunks", json.dumps(chunks))
    say("stream_last", "%s/%s" % (events[-1].status, events[-1].exit_code))

    results = []

    def one(i):
        o = c.run(code="import sys; print(int(sys.stdin.read()) * 2)", stdin=str(i))
        results.append(o.ok and o.stdout_text.strip() == str(2 * i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    say("parallel_ok", "%d/8" % sum(results))
    say("done", 1)


main()
