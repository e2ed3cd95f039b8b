"""The client against a real `stockade serve`: STOCKADE_ADDRESS (and
STOCKADE_TOKEN) name it; tests/serve_python.rs starts one and runs these."""

import importlib.util
import json
import os
import threading
import unittest
import urllib.request

import stockade

ADDRESS = os.environ.get("STOCKADE_ADDRESS")
TOKEN = os.environ.get("STOCKADE_TOKEN")


def setUpModule():
    if not ADDRESS:
        raise unittest.SkipTest("STOCKADE_ADDRESS is not set: no server to test against")


def client():
    return stockade.Client(ADDRESS, token=TOKEN, timeout=120)


# NAME=DIR of the server's read-only --workspace-base (tests/serve_python.rs).
WORKSPACE = os.environ.get("STOCKADE_WORKSPACE_BASE")


class Workspace(unittest.TestCase):
    def test_overlay_lists_changes_and_leaves_the_base_untouched(self):
        if not WORKSPACE:
            self.skipTest("STOCKADE_WORKSPACE_BASE is not set")
        name, base = WORKSPACE.split("=", 1)
        with open(os.path.join(base, "a.txt")) as f:
            before = f.read()
        script = "cd /work/project && echo changed > a.txt && echo new > n.txt"
        out = client().run(["sh", "-c", script], profile="shell", overlay=name, diff=True)
        self.assertEqual((out.status, out.exit_code), ("exited", 0), out.raw)
        changes = sorted((c["path"].rsplit("/", 1)[-1], c["kind"]) for c in out.changes or [])
        self.assertEqual(changes, [("a.txt", "modified"), ("n.txt", "added")], out.raw)
        self.assertIn("+changed", out.diff or "", out.raw)
        self.assertIsNone(out.commit)
        with open(os.path.join(base, "a.txt")) as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(base, "n.txt")))
        out = client().run(["cat", "/w/a.txt"], profile="shell", overlay=(name, "/w"))
        self.assertEqual(out.stdout_text, before, out.raw)
        # A commit the operator did not allow: 400 naming the field.
        with self.assertRaises(stockade.BadRequest) as e:
            client().run(["true"], profile="shell", overlay=name, commit="success")
        self.assertEqual(e.exception.field, "workspace.commit")
        with self.assertRaises(stockade.BadRequest) as e:
            client().run(["true"], profile="shell", overlay="no-such-base")
        self.assertEqual(e.exception.field, "workspace.base")


class WorkspaceSession(unittest.TestCase):
    def test_a_session_on_a_base_lists_checkpoints_and_rolls_back_but_may_not_commit(self):
        if not WORKSPACE:
            self.skipTest("STOCKADE_WORKSPACE_BASE is not set")
        name, base = WORKSPACE.split("=", 1)
        with open(os.path.join(base, "a.txt")) as f:
            before = f.read()
        with client().session(profile="shell", overlay=(name, "/work/p")) as s:
            self.assertEqual(s.info["workspace"], {"base": name, "at": "/work/p"})
            self.assertTrue(s.exec("echo changed > /work/p/a.txt").ok)
            self.assertEqual([(c["path"], c["kind"]) for c in s.changes()], [("/work/p/a.txt", "modified")])
            self.assertFalse(s.changes_truncated)
            s.checkpoint("changed")
            self.assertTrue(s.exec("rm /work/p/a.txt").ok)
            s.rollback("changed")
            self.assertEqual(s.exec("cat /work/p/a.txt").stdout, b"changed\n")
            with self.assertRaises(stockade.StockadeError) as e:
                s.rollback("no-such")
            self.assertEqual((e.exception.status, e.exception.code), (404, "no_checkpoint"))
            with self.assertRaises(stockade.BadRequest) as e:
                s.checkpoint("../x")
            self.assertEqual(e.exception.field, "name")
            # The operator's base is read-only here.
            with self.assertRaises(stockade.StockadeError) as e:
                s.commit()
            self.assertEqual((e.exception.status, e.exception.code), (403, "commit_refused"))
        with open(os.path.join(base, "a.txt")) as f:
            self.assertEqual(f.read(), before)


class Runs(unittest.TestCase):
    def test_argv_stdin_files_env(self):
        out = client().run(
            ["sh", "-c", "cat data/in.txt; cat; echo $GREETING; cat bin.dat | od -An -tx1"],
            profile="shell",
            stdin="from stdin\n",
            files={"data/in.txt": "a file\n", "bin.dat": b"\x00\xff"},
            env={"GREETING": "hello"},
        )
        self.assertTrue(out.ok, out.raw)
        self.assertEqual(out.stdout_text.split("\n")[:3], ["a file", "from stdin", "hello"])
        self.assertIn("00 ff", out.stdout_text)
        self.assertEqual(out.applied["profile"], "shell")

    def test_code_runs_under_python(self):
        out = client().run(code="import sys; print(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3")
        self.assertEqual((out.status, out.exit_code, out.stdout), ("exited", 0, b"6\n"), out.raw)
        self.assertEqual(out.applied["profile"], "python")

    def test_limits_applied_and_timeout(self):
        out = client().run(["sleep", "600"], profile="shell", limits={"timeout": "1s", "memory": "64g"})
        self.assertEqual(out.status, "timeout", out.raw)
        self.assertFalse(out.ok)
        self.assertIn("memory", out.applied["clamped"])

    def test_binary_output(self):
        out = client().run(["printf", "\\377\\000"], profile="shell")
        self.assertEqual(out.stdout, b"\xff\x00")

    def test_stream_yields_chunks_then_outcome(self):
        events = list(client().stream(["sh", "-c", "echo one; echo two >&2; exit 7"], profile="shell"))
        self.assertIsInstance(events[-1], stockade.Outcome)
        self.assertEqual(events[-1].exit_code, 7)
        chunks = [e for e in events[:-1]]
        self.assertTrue(all(isinstance(c, stockade.Chunk) for c in chunks))
        self.assertEqual(b"".join(c.data for c in chunks if c.stream == "stdout"), b"one\n")
        self.assertIn(b"two\n", b"".join(c.data for c in chunks if c.stream == "stderr"))


class Errors(unittest.TestCase):
    def test_bad_request_names_the_field(self):
        # Refused by the client before it sends anything (a LocalError: no
        # HTTP status), as the server refuses it (400), both naming the field.
        with self.assertRaises(stockade.InvalidOption) as cm:
            client().run(["true"], profile="shell", files={"../escape": "x"})
        self.assertIsInstance(cm.exception, stockade.LocalError)
        self.assertEqual((cm.exception.status, cm.exception.field), (None, 'files["../escape"]'))
        with self.assertRaises(stockade.BadRequest) as cm:
            client()._json("POST", "/v1/runs", {"argv": ["true"], "files": {"../escape": "x"}})
        self.assertEqual((cm.exception.status, cm.exception.field), (400, 'files["../escape"]'))
        with self.assertRaises(stockade.BadRequest) as cm:
            client().run(["true"], profile="shell", limits={"memory": "lots"})
        self.assertEqual(cm.exception.field, "limits.memory")

    def test_unknown_profile(self):
        with self.assertRaises(stockade.UnknownProfile) as cm:
            client().run(["true"], profile="no-such-profile")
        self.assertIsInstance(cm.exception, stockade.NotFound)

    def test_unauthorized(self):
        if not TOKEN:
            self.skipTest("the server has no token")
        with self.assertRaises(stockade.Unauthorized):
            stockade.Client(ADDRESS, token="wrong-token-wrong-token").run(["true"], profile="shell")

    def test_too_large(self):
        with self.assertRaises(stockade.PayloadTooLarge):
            client().run(["true"], profile="shell", stdin="x" * (9 << 20))

    def test_connection_error(self):
        with self.assertRaises(stockade.StockadeConnectionError):
            stockade.Client("unix:/nonexistent/stockade.sock").run(["true"])

    def test_health_and_ready(self):
        h = client().health()
        self.assertEqual(h["status"], "ok")
        self.assertTrue(h["confinement"]["confined"], h)
        self.assertTrue(client().ready())
        self.assertIn("stockade_runs_total", client().metrics())


class Sessions(unittest.TestCase):
    def test_state_output_and_close(self):
        with client().session(profile="shell", env={"GREETING": "hi"}, files={"in.txt": "a file\n"},
                              limits={"memory": "256m"}) as s:
            self.assertTrue(s.id)
            self.assertTrue(s.exec("mkdir -p sub && cd sub && export COLOR=blue").ok)
            r = s.exec('pwd; echo "$COLOR $GREETING"; cat ../in.txt; echo oops >&2; exit 3')
            self.assertEqual((r.status, r.exit_code), ("exited", 3), r.raw)
            self.assertEqual(r.stdout_text.splitlines(), [s.workdir + "/sub", "blue hi", "a file"])
            self.assertEqual(r.stderr, b"oops\n")
            self.assertEqual(s.exec("sleep 600", timeout=1).status, "timeout")
            self.assertEqual(s.exec("echo $COLOR").stdout, b"blue\n", "the session lives on")
        self.assertIsInstance(s.outcome, stockade.Outcome)
        self.assertEqual(s.end_reason, "closed")
        with self.assertRaises(stockade.NotFound):
            s.exec("true")

    def test_stream_and_busy(self):
        with client().session(profile="shell") as s:
            running = s.stream("echo started; sleep 600", timeout=2)
            self.assertEqual(next(running).data, b"started\n")
            with self.assertRaises(stockade.Busy) as cm:
                s.exec("true")
            self.assertEqual(cm.exception.status, 409)
            last = list(running)[-1]
            self.assertIsInstance(last, stockade.ExecResult)
            self.assertEqual(last.status, "timeout", last.raw)
            self.assertTrue(s.exec("true").ok)

    def test_hostile_commands_stay_inside(self):
        with client().session(profile="shell") as s:
            r = s.exec("cat /etc/shadow")
            self.assertNotEqual(r.exit_code, 0)
            self.assertIn("No such file", r.stderr_text)
            r = s.exec("env")
            self.assertTrue(r.ok)
            self.assertNotIn("STOCKADE_TOKEN", r.stdout_text)
            self.assertNotIn(TOKEN or "no token", r.stdout_text)

    def test_bad_session_requests(self):
        with self.assertRaises(stockade.BadRequest) as cm:
            client().session(profile="shell", limits={"disk": 1})
        self.assertEqual(cm.exception.field, "limits.disk")
        with self.assertRaises(stockade.NotFound):
            stockade.RemoteSession(client(), {"id": "0000000000000000"}).exec("true")


# A secret the server declares (tests/serve_python.rs): API_KEY, bound to a
# TLS server of the test's own, and a profile whose allowlist holds it.
SECRET_PROFILE = os.environ.get("STOCKADE_SECRET_PROFILE")
SECRET_HOST = os.environ.get("STOCKADE_SECRET_HOST")
SECRET_VALUE = os.environ.get("STOCKADE_SECRET_VALUE")
SECRET_PROBE = (
    "import os, urllib.request; k = os.environ['API_KEY']; print('placeholder', k); "
    "r = urllib.request.urlopen(urllib.request.Request('https://%s%s', headers={'Authorization': 'Bearer ' + k}), timeout=60); "
    "print('bound', r.status, r.read().decode().strip())"
)


class Secrets(unittest.TestCase):
    def setUp(self):
        if not (SECRET_PROFILE and SECRET_HOST and SECRET_VALUE):
            self.skipTest("STOCKADE_SECRET_PROFILE, _HOST and _VALUE are not set")

    def test_a_run_names_a_secret_and_sees_only_a_placeholder(self):
        out = client().run(
            ["python3", "-c", SECRET_PROBE % (SECRET_HOST, "/client-run")], profile=SECRET_PROFILE, secrets=["API_KEY"]
        )
        self.assertEqual((out.status, out.exit_code), ("exited", 0), out.raw)
        self.assertIn("bound 200 ok", out.stdout_text)
        self.assertNotIn(SECRET_VALUE, json.dumps(out.raw))
        self.assertIn("placeholder sk-test-", out.stdout_text)
        self.assertEqual(out.applied["secrets"], [{"name": "API_KEY", "hosts": [SECRET_HOST]}])
        self.assertEqual(out.applied["pool"], {"hit": False, "reason": "no_pool"})

    def test_a_session_names_a_secret(self):
        with client().session(profile=SECRET_PROFILE, secrets=["API_KEY"]) as s:
            self.assertEqual(s.info["secrets"][0]["name"], "API_KEY")
            r = s.exec("python3 -c \"%s\"" % (SECRET_PROBE % (SECRET_HOST, "/client-session")))
            self.assertTrue(r.ok, r.raw)
            self.assertIn("bound 200 ok", r.stdout_text)
            self.assertNotIn(SECRET_VALUE, json.dumps(r.raw))

    def test_a_secret_the_server_does_not_declare_or_the_profile_does_not_allow(self):
        with self.assertRaises(stockade.BadRequest) as e:
            client().run(["true"], profile=SECRET_PROFILE, secrets=["NO_SUCH_SECRET"])
        self.assertEqual(e.exception.field, "secrets[0]")
        with self.assertRaises(stockade.BadRequest) as e:
            client().run(["true"], profile="shell", secrets=["API_KEY"])
        self.assertEqual(e.exception.field, "secrets[0]")
        self.assertIn("does not allow", str(e.exception))
        with self.assertRaises(stockade.BadRequest) as e:
            client().session(profile="shell", secrets=["API_KEY"])
        self.assertEqual(e.exception.field, "secrets[0]")


def _verdicts(test, label, candidates, check, send, field, server_field=True):
    """For each candidate: the client refuses it (InvalidOption naming
    `field`, from `check`) exactly when the server refuses it (400 naming
    `field`, or `server_field` where given, to `send`, which bypasses the
    client's checks)."""
    server_field = field if server_field is True else server_field
    for value in candidates:
        with test.subTest(option=label, value=value):
            try:
                check(value)
                client_refuses = False
            except stockade.InvalidOption as e:
                test.assertEqual(e.field, field)
                client_refuses = True
            try:
                send(value)
                server_refuses = False
            except stockade.BadRequest as e:
                test.assertEqual(e.field, server_field, e.message)
                server_refuses = True
            test.assertEqual(client_refuses, server_refuses, "client and server disagree on %s=%r" % (label, value))


class SameAsTheServer(unittest.TestCase):
    """What the client accepts is what the server accepts (each candidate
    given to both; NaN and infinities have no JSON, the client's table in
    test_options covers them)."""

    LIMITS = {
        "memory": [64 << 20, "64m", " 64M ", "+64m", "64g", 0, -1, 1.5, 1024.0, True, "0", "lots", "1_0m", "1e3",
                   "\u0663m", 1 << 64],
        "max_output": [1024, "1k", 0, 1.5, "-1", True],
        "pids": [10, "10", " +10 ", 0, -1, 1.5, 10.0, "1e1", "1_0", True, 1 << 64],
        "cpus": [0.5, 2, "0.5", ".5", 0, -1, 5000, "nan", "inf", "1_0", True],
        "timeout": [2, 0.5, "2s", "500ms", "1E1S", 0, -1, 1e10, "0s", "soon", "1e10s", True],
    }

    def test_run_limits(self):
        from stockade.client import Client

        c = client()
        for key, values in self.LIMITS.items():
            _verdicts(
                self, "limits." + key, values,
                lambda v, key=key: Client._body(["true"], None, None, None, None, {key: v}, "shell"),
                lambda v, key=key: c._json("POST", "/v1/runs", {"argv": ["true"], "profile": "shell", "limits": {key: v}}),
                "limits." + key,
            )

    def test_session_options(self):
        from stockade.remote_session import RemoteSession, create_body

        c = client()

        def open_and_close(body):
            RemoteSession(c, c._json("POST", "/v1/sessions", body)).close()

        _verdicts(self, "idle_timeout", [10, 0.5, 1e12, 0, -1, "10", "10s", True],
                  lambda v: create_body("shell", None, None, None, v),
                  lambda v: open_and_close({"profile": "shell", "idle_timeout": v}), "idle_timeout")
        _verdicts(self, "limits.timeout", [10], lambda v: create_body("shell", None, None, {"timeout": v}, None),
                  lambda v: open_and_close({"profile": "shell", "limits": {"timeout": v}}), "limits.timeout")
        with c.session(profile="shell") as s:
            for key, values in (("timeout", [1, 0.5, 86401, 1e10, 0, -1, "1", "1s", "0s", "soon", True]),
                                ("max_output", [0, 10, -1, 1.5, "10", "1k", "-1", True])):
                _verdicts(self, key, values,
                          lambda v, key=key: RemoteSession._exec_body("true", **dict({"timeout": None, "max_output": None, "stdin": None}, **{key: v})),
                          lambda v, key=key: c._json("POST", s._path("/exec"), {"command": "true", key: v}), key)


def load_evaluator():
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "evaluator.py")
    spec = importlib.util.spec_from_file_location("evaluator", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DIFFLIB_SCORER = """
import difflib
def score(answer, reference):
    return difflib.SequenceMatcher(None, answer, reference).ratio()
"""


class Evaluator(unittest.TestCase):
    def test_scores(self):
        ev = load_evaluator()
        r = ev.evaluate(client(), "the cat sat", "the cat sat", DIFFLIB_SCORER)
        self.assertEqual(r, {"status": "scored", "score": 1.0})
        r = ev.evaluate(client(), "abcd", "abce", DIFFLIB_SCORER)
        self.assertAlmostEqual(r["score"], 0.75)

    def test_hostile_scorers_are_contained(self):
        ev = load_evaluator()
        r = ev.evaluate(client(), "a", "b", "def score(a, r):\n    while True: pass\n", timeout="1s")
        self.assertEqual(r["status"], "timeout", r)
        peek = "def score(a, r):\n    return len(open('/etc/shadow').read())\n"
        r = ev.evaluate(client(), "a", "b", peek)
        self.assertEqual(r["status"], "scorer_failed", r)
        self.assertIn("shadow", r["error"])

    def test_the_service(self):
        ev = load_evaluator()
        srv = ev.ThreadingHTTPServer(("127.0.0.1", 0), ev.make_handler(client()))
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            body = json.dumps({"answer": "Paris", "reference": "paris",
                               "scorer": "def score(a, r):\n    return float(a.lower() == r.lower())\n"})
            req = urllib.request.Request("http://127.0.0.1:%d/score" % srv.server_address[1], data=body.encode())
            with urllib.request.urlopen(req, timeout=120) as resp:
                self.assertEqual(json.loads(resp.read()), {"status": "scored", "score": 1.0})
        finally:
            srv.shutdown()
            srv.server_close()


if __name__ == "__main__":
    unittest.main()
