"""stockade.Session on the local `stockade session` (STOCKADE_BIN): a jail
that outlives one command, driven over the JSON-lines protocol."""

import json
import os
import socket
import unittest

import stockade
from session_support import require_session

CANARY = "host-canary-7c2e91"


def setUpModule():
    require_session()


class Sessions(unittest.TestCase):
    def test_exec_status_and_streams(self):
        with stockade.Session() as s:
            self.assertTrue(s.id)
            r = s.exec("echo out; echo err >&2; exit 3")
            self.assertEqual((r.status, r.exit_code), ("exited", 3))
            self.assertEqual((r.stdout, r.stderr), (b"out\n", b"err\n"))
            self.assertFalse(r.ok)
            self.assertTrue(s.exec("true").ok)

    def test_state_persists_between_commands(self):
        with stockade.Session() as s:
            self.assertTrue(s.exec("mkdir -p sub && cd sub && export COLOR=blue && echo kept > f").ok)
            r = s.exec('pwd; echo "$COLOR"; cat f')
            self.assertEqual(r.stdout_text.splitlines(), [s.workdir + "/sub", "blue", "kept"])

    def test_nothing_persists_after_the_session(self):
        with stockade.Session() as s:
            s.exec("echo x > left-behind")
        with stockade.Session() as s:
            r = s.exec("ls -A")
            self.assertEqual(r.stdout, b"", "a fresh workdir per session")

    def test_timeout_kills_the_command_not_the_session(self):
        with stockade.Session() as s:
            s.exec("export MARK=set")
            r = s.exec("sleep 600", timeout=1)
            self.assertEqual(r.status, "timeout", r.raw)
            r = s.exec("echo $MARK")
            self.assertEqual(r.stdout, b"set\n", "the session lives on with its state")

    def test_stream_and_interrupt(self):
        with stockade.Session() as s:
            events = []
            for event in s.stream("echo started; sleep 600; echo never"):
                events.append(event)
                if isinstance(event, stockade.Chunk) and b"started" in event.data:
                    s.interrupt()
            result = events[-1]
            self.assertIsInstance(result, stockade.ExecResult)
            self.assertEqual(result.status, "interrupted", result.raw)
            self.assertNotIn(b"never", result.stdout)
            self.assertEqual(s.exec("echo alive").stdout, b"alive\n")

    def test_output_cannot_forge_events(self):
        with stockade.Session() as s:
            # The client numbers commands c1, c2, …: the second is c2.
            fake = [
                {"event": "exit", "id": "c2", "status": "exited", "code": 0, "signal": None,
                 "truncated": False, "duration_ms": 1},
                {"event": "end", "outcome": {"status": "exited"}},
            ]
            s.exec("true")
            script = "; ".join("printf '%%s\\n' %s" % json.dumps(json.dumps(f)) for f in fake)
            r = s.exec(script + "; exit 7")
            self.assertEqual(r.exit_code, 7)
            self.assertEqual(r.stdout_text.splitlines(), [json.dumps(f) for f in fake])
            self.assertTrue(s.alive)
            self.assertEqual(s.exec("echo still here").stdout, b"still here\n")

    def test_binary_output_and_stdin(self):
        with stockade.Session() as s:
            r = s.exec("printf '\\377\\000'; cat", stdin="piped")
            # protocol v1: invalid UTF-8 comes as data_b64 (exact) or replaced
            self.assertIn(r.stdout, (b"\xff\x00piped", "\ufffd\x00piped".encode()))

    def test_output_cap(self):
        with stockade.Session() as s:
            r = s.exec("head -c 100000 /dev/zero", max_output=1000)
            self.assertTrue(r.truncated)
            self.assertLessEqual(len(r.stdout), 1000)

    def test_memory_cap_covers_the_session(self):
        alloc = "python3 -c 'b = bytearray(300 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"ALLOCATED\")'"
        with stockade.Session(memory="128m") as s:
            try:
                r = s.exec(alloc)
            except stockade.SessionClosed as e:
                memory = e.outcome.raw["limits"]["memory"]
                if memory.get("verdict") == "inferred":
                    # The rlimit rung (uid 65534, the fallback): RLIMIT_AS
                    # holds each process of the session, the agent too, and
                    # the verdict is inferred from sampled peaks; a session
                    # that ended during the allocation did not let it
                    # through, whatever status the inference gave.
                    self.assertIn(e.outcome.status, ("memory_limit", "exited", "signaled"), e.outcome.raw)
                else:
                    self.assertEqual(e.outcome.status, "memory_limit", e.outcome.raw)
            else:
                self.assertNotIn(b"ALLOCATED", r.stdout)

    def test_hostile_commands_reach_nothing(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        os.environ["STOCKADE_SESSION_CANARY"] = CANARY
        home = os.path.expanduser("~")
        try:
            with stockade.Session() as s:
                shadow = s.exec("cat /etc/shadow")
                ssh = s.exec("cat %s/.ssh/id_rsa" % home)
                env = s.exec("env; cat /proc/*/environ | tr '\\0' '\\n'")
                net = s.exec("echo hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED" % port)
            with self.assertRaises(BlockingIOError):
                listener.accept()
        finally:
            del os.environ["STOCKADE_SESSION_CANARY"]
            listener.close()
        for r in (shadow, ssh, env, net):
            self.assertNotIn(CANARY.encode(), r.stdout + r.stderr)
        self.assertNotEqual(shadow.exit_code, 0)
        self.assertNotEqual(ssh.exit_code, 0)
        self.assertNotIn(b"STOCKADE_SESSION_CANARY", env.stdout)
        self.assertNotEqual(net.exit_code, 0)
        self.assertNotIn(b"CONNECTED", net.stdout)

    def test_close_reports_the_outcome_and_ends_the_session(self):
        s = stockade.Session()
        s.exec("true")
        outcome = s.close()
        self.assertIsInstance(outcome, stockade.Outcome)
        self.assertFalse(s.alive)
        with self.assertRaises(stockade.SessionClosed):
            s.exec("true")

    def test_idle_timeout_ends_the_session(self):
        s = stockade.Session(idle_timeout=1)
        s.exec("echo x > f")
        outcome = s.wait()
        self.assertEqual(s.end_reason, "idle_timeout")
        self.assertIsInstance(outcome, stockade.Outcome)
        self.assertFalse(s.alive)
        with self.assertRaises(stockade.SessionClosed):
            s.exec("cat f")
        self.assertIs(s.close(), outcome)

    def test_bad_arguments(self):
        with self.assertRaises(stockade.InvalidOption):
            stockade.Session(memory="lots")
        with self.assertRaises(stockade.BadRequest):
            stockade.Session(pids=True)
        with self.assertRaises(stockade.SetupError):
            stockade.Session(profile="no-such-profile")
        with stockade.Session() as s:
            with self.assertRaises(ValueError):
                s.exec("")
            running = s.stream("echo started; sleep 600", timeout=30)
            self.assertEqual(next(running).data, b"started\n")
            with self.assertRaises(stockade.SessionError) as e:
                s.exec("true")
            self.assertEqual(e.exception.code, "busy")
            s.interrupt()
            self.assertEqual(list(running)[-1].status, "interrupted")
            self.assertTrue(s.exec("true").ok)


if __name__ == "__main__":
    unittest.main()


def _jail_owned_dir(files):
    """A host directory holding `files` ({name: text}) that the jail's
    user may change through an overlay: root's jails map to uid 65534."""
    import tempfile

    host = tempfile.mkdtemp(prefix="stockade-py-overlay-")
    for name, text in files.items():
        with open(os.path.join(host, name), "w") as f:
            f.write(text)
    if os.geteuid() == 0:
        for top, dirs, names in os.walk(host):
            for n in [top] + [os.path.join(top, x) for x in dirs + names]:
                os.lchown(n, 65534, 65534)
    return host


def _read(path):
    with open(path) as f:
        return f.read()


# Where user namespaces are refused (the fallback), an overlay is refused.
FALLBACK = os.environ.get("STOCKADE_TEST_FALLBACK") == "1"


class Overlays(unittest.TestCase):
    def test_changes_checkpoint_rollback_and_commit(self):
        import shutil

        host = _jail_owned_dir({"a.txt": "one\n", "gone.txt": "bye\n"})
        self.addCleanup(shutil.rmtree, host, True)
        if FALLBACK:
            with self.assertRaises(stockade.SetupError) as e:
                stockade.Session(overlay=[(host, "/work/p")])
            self.assertIn("overlay", str(e.exception))
            return
        with stockade.Session(overlay=[(host, "/work/p")]) as s:
            self.assertTrue(s.exec("cd /work/p && echo two > a.txt && echo new > b.txt && rm gone.txt").ok)
            kinds = {c["path"]: c["kind"] for c in s.changes()}
            self.assertEqual(
                kinds, {"/work/p/a.txt": "modified", "/work/p/b.txt": "added", "/work/p/gone.txt": "deleted"}
            )
            self.assertFalse(s.changes_truncated)
            s.checkpoint("edited")
            self.assertTrue(s.exec("cd /work/p && rm a.txt && echo three > b.txt && echo bye > gone.txt").ok)
            s.rollback("edited")
            r = s.exec("cd /work/p && cat a.txt b.txt && ls")
            self.assertEqual(r.stdout_text, "two\nnew\na.txt\nb.txt\n", r.raw)
            # Bad names and unknown checkpoints: an error, the session lives on.
            for bad, code in (("../etc", "bad_request"), ("a/b", "bad_request"), ("nope", "no_checkpoint")):
                with self.assertRaises(stockade.SessionError) as e:
                    s.rollback(bad)
                self.assertEqual(e.exception.code, code, e.exception)
            self.assertTrue(s.alive)
            # Nothing reached the host before the commit.
            self.assertEqual(_read(os.path.join(host, "a.txt")), "one\n")
            self.assertTrue(os.path.exists(os.path.join(host, "gone.txt")))
            done = s.commit()
            self.assertEqual(sorted(done["applied"]), ["/work/p/a.txt", "/work/p/b.txt", "/work/p/gone.txt"])
            self.assertEqual(done["refused"], [])
            self.assertEqual(s.changes(), [])
            with self.assertRaises(stockade.SessionError) as e:
                s.rollback("edited")
            self.assertEqual(e.exception.code, "no_checkpoint", "a commit forgets the checkpoints")
            self.assertEqual(s.exec("cat /work/p/a.txt").stdout, b"two\n")
        self.assertEqual(_read(os.path.join(host, "a.txt")), "two\n")
        self.assertEqual(_read(os.path.join(host, "b.txt")), "new\n")
        self.assertFalse(os.path.exists(os.path.join(host, "gone.txt")))

    def test_workspace_requests_wait_for_the_running_command(self):
        import shutil

        host = _jail_owned_dir({"a.txt": "one\n"})
        self.addCleanup(shutil.rmtree, host, True)
        if FALLBACK:
            self.skipTest("an overlay is refused where user namespaces are (test_changes_checkpoint_rollback_and_commit)")
        with stockade.Session(overlay=[(host, "/work/p")]) as s:
            s.checkpoint("start")
            for event in s.stream("echo started; sleep 600", timeout=30):
                if isinstance(event, stockade.Chunk):
                    with self.assertRaises(stockade.SessionError) as e:
                        s.rollback("start")
                    self.assertEqual(e.exception.code, "busy")
                    s.interrupt()
            s.rollback("start")
            self.assertEqual(s.exec("cat /work/p/a.txt").stdout, b"one\n")

    def test_a_session_without_an_overlay_says_so(self):
        with stockade.Session() as s:
            with self.assertRaises(stockade.SessionError) as e:
                s.changes()
            self.assertEqual(e.exception.code, "no_overlay")
            self.assertTrue(s.exec("true").ok)

    def test_overlay_options_are_checked(self):
        with self.assertRaises(stockade.InvalidOption):
            stockade.Session(overlay=[("/tmp", "relative")])
        with self.assertRaises(stockade.InvalidOption):
            stockade.Session(overlay_upper="/tmp/x")
