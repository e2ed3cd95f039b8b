"""Every keyword option of the package accepts exactly what `stockade`
accepts for it, with the same meaning, and refuses anything else before a
process starts or a request is sent (issue 26, point 8).

- A table: every keyword of every entry point × wrong types and
  look-alike values (bools where numbers go, "None", "false", "Host",
  NaN, huge numbers, NUL, one string where a list goes) → InvalidOption
  (a ValueError; InvalidOptionType, a TypeError, for a wrong type)
  naming the keyword, with no process started and no request sent.
- The valid values become exactly the CLI's flags, and the texts the
  package accepts are exactly those the binary accepts (each candidate
  given to `stockade run` too).
- In real jails: `network="none"` and `"loopback"` cannot reach a TCP
  listener of the host on 127.0.0.1 and have their own network
  namespace (with only `lo`); `"loopback"` lets the jail's processes
  talk to each other over it, `"none"` does not; `"host"` (the control)
  reaches the listener.
"""

import os
import socket
import subprocess
import sys
import unittest
from pathlib import Path
from unittest import mock

import stockade
from stockade import evaluator
from stockade.remote_session import RemoteSession

BIN = os.environ.get("STOCKADE_BIN")
FALLBACK = os.environ.get("STOCKADE_TEST_FALLBACK") == "1"
# An executable that is never run (Popen is refused in the table tests).
FAKE_BIN = sys.executable
NAN, INF = float("nan"), float("inf")
HUGE = 1 << 2000

# Wrong values by kind. Each list holds wrong types and look-alikes.
NETWORK_BAD = [True, False, 1, 0, 1.0, "None", "NONE", "none ", " none", "Host", "HOST", "Loopback",
               "false", "true", "0", "1", "off", "", "host\0", b"host", ["example.com"], ("example.com",),
               {"host"}, object()]
SIZE_BAD = [True, False, 0, -1, 1.5, 1024.0, NAN, INF, 1 << 64, HUGE, "", "0", "0m", "-1m", "lots", "1_000",
            "\u0663", "64\u212a", "1e3", "99999999999t", "64m\0", "nan", "inf", b"64m", [64], {"m": 64}]
COUNT_BAD = [True, False, 0, -1, 1.5, 10.0, NAN, INF, 1 << 64, HUGE, "", "0", "-1", "1.5", "1e2", "ten", "1_0",
             "\u0663", "\x1c5", "5\0", b"5", [5]]
CPUS_BAD = [True, False, 0, 0.0, -0.5, NAN, INF, -INF, 4097, 4096.5, HUGE, "", "0", "-1", "nan", "inf",
            "infinity", "1_0", "x", "5000", "\x1c1", "1\0", b"1", [1]]
DURATION_BAD = [True, False, 0, 0.0, -1, NAN, INF, 1e10, HUGE, 1e-12, "", "0", "0s", "-1s", "soon", "1_0s",
                "nan", "infs", "1e10s", "10\0", b"10", [10]]
IDLE_BAD = [True, False, -1, -0.5, NAN, INF, 1e10, HUGE, 1e-12, "", "-1s", "soon", "never", "none", "10\0",
            b"10", [1]]
TEXT_BAD = [True, False, 0, 1, "", "x\0", b"shell", ["shell"], object()]
LIST_BAD = ["/data", b"/data", True, 1, {"/data"}, [True], [""], ["a\0"], [b"/x"], [None]]
ENV_BAD = [True, "A=1", ["A=1"], [("A", "1")], {"": "x"}, {"A=B": "x"}, {"A\0": "x"}, {"A": 1}, {"A": True},
           {"A": None}, {"A": "x\0"}, {1: "x"}, {"A": b"x"}]
FILES_BAD = [True, "a", ["a"], {"": "x"}, {"/etc/x": "x"}, {"../x": "x"}, {"a/./b": "x"}, {"a//b": "x"},
             {"a/": "x"}, {"a\0": "x"}, {"a": 1}, {"a": None}, {"a" * 256: "x"}, {"/".join(["a"] * 600): "x"},
             {1: "x"}]
STDIN_BAD = [True, 1, ["x"], {"x": 1}]
ARGV_BAD = ["true", b"true", [], [""], ["a", 1], ["a\0"], [True], ("",), {"true"}]
CODE_BAD = [True, 1, b"print(1)", ["print(1)"], "print(1)\0"]
LIMITS_BAD = ([True, "memory=1g", ["memory"], {"disk": 1}, {"Memory": "1g"}]
              + [{"memory": v} for v in SIZE_BAD] + [{"max_output": v} for v in SIZE_BAD]
              + [{"pids": v} for v in COUNT_BAD] + [{"cpus": v} for v in CPUS_BAD]
              + [{"timeout": v} for v in DURATION_BAD])
SESSION_LIMITS_BAD = ([{"timeout": 10}, {"max_output": 100}, True, ["memory"]]
                      + [{"memory": v} for v in SIZE_BAD] + [{"pids": v} for v in COUNT_BAD]
                      + [{"cpus": v} for v in CPUS_BAD])
EXEC_TIMEOUT_BAD = [True, False, 0, 0.0, -1, NAN, INF, HUGE, "10", "10s", b"1", [1]]
MAX_OUTPUT_BAD = [True, False, -1, 1.5, NAN, 1 << 64, "100", b"1", [1]]
EXEC_STDIN_BAD = [True, 1, b"bytes", ["x"], "\udcff"]
COMMAND_BAD = [True, 1, "", b"true", ["true"], "true\0", "\ud800"]
SECONDS_BAD = [True, False, 0, -1, NAN, INF, HUGE, "10", b"1", [1]]


def _refuse_processes():
    """Popen refused: a table case that got as far as a process fails."""
    return mock.patch("subprocess.Popen", side_effect=AssertionError("a process was started"))


class _NoServer:
    """A client whose every request fails the test."""

    address = "unix:/nonexistent"

    def _request(self, *a, **k):
        raise AssertionError("a request was sent")

    _json = _request


def _offline_session():
    """A Session object whose sends fail the test (no process behind it)."""
    s = stockade.Session.__new__(stockade.Session)
    s._running = None
    s._ids = iter(range(1, 1 << 30))
    s._send = mock.Mock(side_effect=AssertionError("a request was sent"))
    return s


def _client():
    c = stockade.Client("unix:/nonexistent/stockade.sock")
    c._connection = mock.Mock(side_effect=AssertionError("a request was sent"))
    return c


class Refusals(unittest.TestCase):
    """Every keyword × its wrong values: refused, naming the keyword, with
    nothing started or sent."""

    def refused(self, label, keyword, call, value):
        with self.subTest(call=label, keyword=keyword, value=value):
            with _refuse_processes():
                with self.assertRaises(stockade.InvalidOption) as cm:
                    call(value)
            e = cm.exception
            self.assertIsInstance(e, ValueError)
            self.assertIsInstance(e, stockade.BadRequest)
            if isinstance(e, stockade.InvalidOptionType):
                self.assertIsInstance(e, TypeError)
            self.assertTrue(
                e.field == keyword or e.field.startswith((keyword + ".", keyword + "[")),
                "%s=%r: the error names %r, not the keyword %r" % (keyword, value, e.field, keyword),
            )
            self.assertIn(e.field, str(e))

    def table(self, label, call, rows):
        """`rows`: (keyword, wrong values); `call(keyword, value)`."""
        for keyword, values in rows:
            for value in values:
                self.refused(label, keyword, lambda v, k=keyword: call(k, v), value)

    def test_run(self):
        def call(k, v):
            kwargs = {"binary": FAKE_BIN}
            if k == "argv":
                return stockade.run(v, **kwargs)
            if k == "code":
                return stockade.run(code=v, **kwargs)
            kwargs[k] = v
            return stockade.run(["true"], **kwargs)

        self.table("run", call, [
            ("argv", ARGV_BAD), ("code", CODE_BAD), ("profile", TEXT_BAD), ("stdin", STDIN_BAD),
            ("files", FILES_BAD), ("limits", LIMITS_BAD), ("env", ENV_BAD), ("flags", LIST_BAD),
            ("binary", TEXT_BAD),
        ])
        self.refused("run", "argv", lambda v: stockade.run(["true"], code=v, binary=FAKE_BIN), "print(1)")

    def test_session(self):
        def call(k, v):
            kwargs = {"binary": FAKE_BIN}
            kwargs[k] = v
            return stockade.Session(**kwargs)

        self.table("Session", call, [
            ("network", NETWORK_BAD), ("profile", TEXT_BAD), ("memory", SIZE_BAD), ("cpus", CPUS_BAD),
            ("pids", COUNT_BAD), ("workdir", TEXT_BAD), ("binds", LIST_BAD), ("ro_binds", LIST_BAD),
            ("env", ENV_BAD), ("idle_timeout", IDLE_BAD), ("flags", LIST_BAD), ("binary", TEXT_BAD),
        ])

    def test_session_exec(self):
        for label, session in (("Session", _offline_session()), ("RemoteSession", RemoteSession(_NoServer(), {"id": "x"}))):
            for method in ("exec", "stream"):
                def call(k, v, method=method, session=session):
                    if k == "command":
                        return list(getattr(session, method)(v)) if method == "stream" else session.exec(v)
                    result = getattr(session, method)("true", **{k: v})
                    return list(result) if method == "stream" else result

                if label == "Session":
                    timeouts, outputs = EXEC_TIMEOUT_BAD + [86401], MAX_OUTPUT_BAD
                else:
                    # Through serve: read as every number of a request is
                    # (text with a unit too), above 0.
                    timeouts = [v for v in EXEC_TIMEOUT_BAD if not isinstance(v, str)] + [1e10, "0s", "soon"]
                    outputs = [v for v in MAX_OUTPUT_BAD if not isinstance(v, str)] + [0, "0", "-1", "lots"]
                self.table("%s.%s" % (label, method), call, [
                    ("command", COMMAND_BAD), ("timeout", timeouts), ("max_output", outputs),
                    ("stdin", EXEC_STDIN_BAD),
                ])

    def test_client(self):
        def make(k, v):
            kwargs = {"address": "unix:/nonexistent.sock"}
            kwargs[k] = v
            return stockade.Client(**kwargs)

        self.table("Client", make, [
            ("address", TEXT_BAD + ["/run/stockade.sock", "unix:", "https://h:1", "http://", "http://h:99999",
                                    "http://h:x", "http://h/path", "tcp://h:1"]),
            ("token", TEXT_BAD + ["a b", "tok\r\nX-Evil: 1", "t\u00e9"]),
            ("timeout", SECONDS_BAD),
        ])
        client = _client()
        for method in ("run", "stream"):
            def call(k, v, method=method):
                run = getattr(client, method)
                if k == "argv":
                    return list(run(v)) if method == "stream" else run(v)
                if k == "code":
                    return list(run(code=v)) if method == "stream" else run(code=v)
                r = run(["true"], **{k: v})
                return list(r) if method == "stream" else r

            self.table("Client.%s" % method, call, [
                ("argv", ARGV_BAD + [["x"] * 4097, ["\ud800"]]), ("code", CODE_BAD + ["\ud800"]),
                ("profile", TEXT_BAD + [Path("shell")]), ("stdin", STDIN_BAD + ["\ud800"]),
                ("files", FILES_BAD), ("limits", LIMITS_BAD), ("env", ENV_BAD + [{"A": "\ud800"}]),
            ])
        self.table("Client.session", lambda k, v: client.session(**{k: v}), [
            ("profile", TEXT_BAD), ("env", ENV_BAD), ("files", FILES_BAD), ("limits", SESSION_LIMITS_BAD),
            # Read as serve reads every number of a request (text with a
            # unit too), above 0 and at most 1e9 seconds.
            ("idle_timeout", [v for v in SECONDS_BAD if not isinstance(v, str)] + [1e10, "0s", "soon"]),
        ])

    def test_evaluator(self):
        source = "def evaluate(a, i, o, c):\n    return 1\n"

        def call(k, v):
            if k == "source":
                return evaluator.evaluate(v, binary=FAKE_BIN)
            return evaluator.evaluate(source, **dict({"binary": FAKE_BIN}, **{k: v}))

        self.table("evaluator.evaluate", call, [
            ("source", [None, b"x", 1, True, "x\0"]),
            # None would drop the limit (or fall back to the shell profile).
            ("timeout", DURATION_BAD + [None]), ("memory", SIZE_BAD + [None]), ("pids", COUNT_BAD + [None]),
            ("profile", TEXT_BAD + [None]), ("binary", TEXT_BAD), ("flags", LIST_BAD),
        ])

    def test_deepagents(self):
        try:
            from stockade.deepagents import StockadeSandbox
        except ImportError as e:
            self.skipTest("deepagents is not installed: %s" % e)

        def call(k, v):
            return StockadeSandbox(binary=FAKE_BIN, **{k: v})

        self.table("StockadeSandbox", call, [
            ("network", NETWORK_BAD), ("memory", SIZE_BAD), ("cpus", CPUS_BAD), ("pids", COUNT_BAD),
            ("timeout", EXEC_TIMEOUT_BAD + [86401]), ("max_output", MAX_OUTPUT_BAD),
            ("binds", LIST_BAD), ("env", ENV_BAD), ("idle_timeout", IDLE_BAD),
        ])
        self.table("StockadeSandbox", lambda k, v: StockadeSandbox(v), [("session", [True, "s", object()])])
        box = StockadeSandbox(RemoteSession(_NoServer(), {"id": "x"}))
        self.table("StockadeSandbox.execute", lambda k, v: box.execute("true", timeout=v), [
            ("timeout", EXEC_TIMEOUT_BAD),
        ])

    def test_langchain(self):
        try:
            from stockade.langchain import StockadeExecutionPolicy
        except ImportError as e:
            self.skipTest("langchain is not installed: %s" % e)

        def call(k, v):
            return StockadeExecutionPolicy(**dict({"binary": FAKE_BIN}, **{k: v}))

        self.table("StockadeExecutionPolicy", call, [
            ("network_enabled", [1, 0, "true", "false", "False", "host", None, "none"]),
            ("memory_bytes", [v for v in SIZE_BAD if not isinstance(v, str)] + ["64m", "1g"]),
            ("cpus", [v for v in CPUS_BAD if not isinstance(v, str)] + ["0.5", "1"]),
            ("pids", COUNT_BAD + ["64"]), ("profile", TEXT_BAD + [None]), ("binary", TEXT_BAD),
            ("extra_flags", LIST_BAD),
            ("command_timeout", SECONDS_BAD + [None]), ("startup_timeout", SECONDS_BAD + [None]),
            ("termination_timeout", SECONDS_BAD + [None]),
            ("max_output_lines", [True, 0, -1, 1.5, NAN, "100", None]),
            ("max_output_bytes", [True, 0, -1, 1.5, NAN, "100"]),
        ])


class Flags(unittest.TestCase):
    """Valid values become exactly the CLI's flags, with their meaning."""

    def session_argv(self, **kwargs):
        with mock.patch("subprocess.Popen", side_effect=AssertionError("started")) as popen:
            with self.assertRaises(AssertionError):
                stockade.Session(binary=FAKE_BIN, **kwargs)
        return popen.call_args[0][0][2:]

    def test_network_is_passed_as_given(self):
        self.assertNotIn("network", " ".join(self.session_argv()), "default: the profile's network")
        for net in ("none", "loopback", "host"):
            self.assertEqual(self.session_argv(network=net), ["--network=" + net])

    def test_session_options(self):
        self.assertEqual(
            self.session_argv(profile="shell", memory=64 << 20, cpus=0.5, pids=32, workdir=Path("/tmp"),
                              binds=[Path("/a")], ro_binds=("-odd:/x",), env={"A": "1"}, idle_timeout=0),
            ["--profile=shell", "--memory=67108864", "--cpus=0.5", "--pids-limit=32", "--workdir=/tmp",
             "--bind=/a", "--ro-bind=-odd:/x", "--setenv=A=1", "--idle-timeout=0"],
        )
        self.assertEqual(self.session_argv(memory="64m", cpus="2", pids="8", idle_timeout=1.5),
                         ["--memory=64m", "--cpus=2", "--pids-limit=8", "--idle-timeout=1.5"])

    def test_langchain_network(self):
        try:
            from stockade.langchain import StockadeExecutionPolicy
        except ImportError as e:
            self.skipTest("langchain is not installed: %s" % e)
        ws = os.path.realpath(os.getcwd())
        for enabled, net in ((False, "none"), (True, "host")):
            p = StockadeExecutionPolicy(binary=FAKE_BIN, network_enabled=enabled)
            with mock.patch("stockade.langchain.owner_flags", return_value=[]):
                argv = p.build_command(ws, {}, ["sh"])
            self.assertIn("--network=" + net, argv)
        # A field set after construction is checked again before a shell starts.
        p = StockadeExecutionPolicy(binary=FAKE_BIN)
        p.network_enabled = "false"
        with self.assertRaises(stockade.InvalidOptionType):
            p.build_command(ws, {}, ["sh"])


def _cli_refuses(flag, value):
    """Whether `stockade run` refuses `--flag=value` (exit 125 naming it)."""
    p = subprocess.run([BIN, "run", "%s=%s" % (flag, value), "--", "true"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p.returncode == 125 and flag.encode() in p.stderr, p


class SameAsTheCli(unittest.TestCase):
    """The texts the package accepts for a limit are exactly the ones the
    binary accepts: each candidate is given to both."""

    CANDIDATES = {
        ("memory", "--memory"): ["64m", " 64M ", "+64m", "64MiB", "64mb", "67108864", "64 m", "0", "0m", "-1m",
                                 "lots", "1_0m", "1e3", "\u0663m", "64\u212a", "\x1c64m", "99999999999t"],
        ("pids", "--pids-limit"): ["64", "+64", " 64 ", "0", "-1", "1.5", "1e2", "1_0", "\x1c5"],
        ("cpus", "--cpus"): ["0.5", "+1", "1e0", ".5", "2.", " 1 ", "0", "-1", "nan", "inf", "5000", "1_0", "\x1c1"],
        ("timeout", "--timeout"): ["10s", "1.5", "500ms", "1E1S", "+1s", ".5s", "2m", "0s", "-1s", "soon", "nans",
                                   "infs", "1_0s", "1e10s"],
        ("max_output", "--max-output"): ["1k", "1KiB", "0", "-1", "1.5k"],
    }

    def setUp(self):
        if not BIN:
            self.skipTest("STOCKADE_BIN is not set: no local stockade binary to compare with")

    def test_limit_texts(self):
        from stockade import _options

        for (key, flag), values in self.CANDIDATES.items():
            for value in values:
                with self.subTest(key=key, value=value):
                    try:
                        _options.RUN_LIMITS[key](key, value)
                        package_refuses = False
                    except stockade.InvalidOption:
                        package_refuses = True
                    cli_refuses, p = _cli_refuses(flag, value)
                    self.assertEqual(package_refuses, cli_refuses, (key, value, p.stderr[-500:]))


class LimitsMeaning(unittest.TestCase):
    """In real jails: each accepted form of a limit (an int, the CLI's
    text) is the limit the jail's outcome records."""

    def setUp(self):
        if not BIN:
            self.skipTest("STOCKADE_BIN is not set: no local stockade binary to test")

    def test_session_limits(self):
        # Roomy values: in the fallback started by 65534, RLIMIT_NPROC counts
        # every process of that uid on the host (the suite's own too), and
        # the agent's address space sits under RLIMIT_AS.
        for memory, pids, cpus in ((256 << 20, 4096, 0.5), ("256m", "4096", "0.5"), (" 256MiB", "+4096", ".5")):
            with self.subTest(memory=memory, pids=pids, cpus=cpus):
                with stockade.Session(memory=memory, pids=pids, cpus=cpus) as s:
                    self.assertTrue(s.exec("true").ok)
                limits = s.outcome.raw["limits"]
                self.assertEqual(limits["memory"]["limit"], 256 << 20, limits)
                self.assertEqual(limits["pids"]["limit"], 4096, limits)
                self.assertEqual(limits["cpus"]["limit"], 0.5, limits)

    def test_run_limits(self):
        for timeout, max_output, memory in ((1.5, 1024, 128 << 20), ("1.5s", "1k", "128m"), ("1500ms", "1KiB", "131072k")):
            with self.subTest(timeout=timeout, max_output=max_output, memory=memory):
                out = stockade.run(["true"], limits={"timeout": timeout, "max_output": max_output, "memory": memory})
                self.assertTrue(out.ok, out.raw)
                self.assertEqual(out.raw["limits"]["timeout"]["limit"], 1.5, out.raw["limits"])
                self.assertEqual(out.raw["limits"]["max_output"]["limit"], 1024, out.raw["limits"])
                self.assertEqual(out.raw["limits"]["memory"]["limit"], 128 << 20, out.raw["limits"])

    def test_evaluator_always_has_its_limits(self):
        out = {}

        def record(argv, **kwargs):
            out.update(kwargs)
            return stockade.run(argv, **kwargs)

        with mock.patch("stockade.local.run", side_effect=record):
            evaluator.evaluate("def evaluate(a, i, o, c):\n    return 1\n")
        self.assertEqual(out["limits"], {"timeout": 10, "memory": "256m", "pids": 64})
        self.assertEqual(out["profile"], "python")


def _listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    s.setblocking(False)
    return s


CONNECT = ("python3 -c \"import socket; socket.create_connection(('127.0.0.1', %d), timeout=5); "
           "print('CONNECTED')\"")
# A server and a client inside the jail, over its loopback.
INSIDE = ("python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
          "c = socket.create_connection(s.getsockname(), timeout=5); a, _ = s.accept(); c.sendall(b'x'); "
          "print('TALKED' if a.recv(1) == b'x' else 'NO')\"")


class NetworkMeaning(unittest.TestCase):
    """The network a Session asks for is the network its jail has."""

    def setUp(self):
        if not BIN:
            self.skipTest("STOCKADE_BIN is not set: no local stockade binary to test")
        self.host_netns = os.readlink("/proc/self/ns/net")

    def probe(self, network):
        """(netns of the jail, its interfaces, reached the host listener,
        talked over its own loopback)."""
        listener = _listener()
        try:
            with stockade.Session(network=network) as s:
                # The connect first: where user namespaces are refused and
                # stockade is root, a session's later commands are refused
                # TCP even on the host's network (a narrowing in `stockade
                # session`'s fallback, not in this package).
                out = s.exec(CONNECT % listener.getsockname()[1])
                ns = s.exec("readlink /proc/self/ns/net").stdout_text.strip()
                ifaces = [l.split(":")[0].strip() for l in s.exec("cat /proc/net/dev").stdout_text.splitlines()[2:]]
                inside = s.exec(INSIDE)
            try:
                listener.accept()[0].close()
                accepted = True
            except BlockingIOError:
                accepted = False
        finally:
            listener.close()
        self.assertEqual(accepted, "CONNECTED" in out.stdout_text, (out.stdout_text, out.stderr_text))
        return ns, ifaces, accepted, "TALKED" in inside.stdout_text

    def test_host_is_the_control(self):
        ns, _, reached, _ = self.probe("host")
        self.assertEqual(ns, self.host_netns)
        self.assertTrue(reached, "the host's network reaches the host's listener (the probe works)")

    def test_none_reaches_nothing(self):
        ns, ifaces, reached, talked = self.probe("none")
        self.assertFalse(reached, "network='none' reached a listener of the host")
        self.assertFalse(talked, "network='none': TCP is denied, even over the jail's own lo")
        if FALLBACK and ns == self.host_netns:
            return  # no network namespace without user namespaces: Landlock and seccomp hold TCP
        self.assertNotEqual(ns, self.host_netns)
        self.assertEqual(ifaces, ["lo"])

    def test_loopback_is_its_own(self):
        try:
            probe = self.probe("loopback")
        except stockade.SetupError as e:
            # Refused where user namespaces are refused: never widened to the host's.
            if FALLBACK:
                self.assertIn("loopback", str(e))
                return
            raise
        ns, ifaces, reached, talked = probe
        self.assertFalse(reached, "network='loopback' reached a listener of the host")
        self.assertNotEqual(ns, self.host_netns, "loopback is the jail's own")
        self.assertEqual(ifaces, ["lo"])
        self.assertTrue(talked, "network='loopback': the jail's processes talk over its lo")

    def test_deepagents_sandbox_network(self):
        try:
            from stockade.deepagents import StockadeSandbox
        except ImportError as e:
            self.skipTest("deepagents is not installed: %s" % e)
        for network in ("none", "loopback"):
            listener = _listener()
            try:
                try:
                    box = StockadeSandbox(network=network)
                except stockade.SetupError:
                    if FALLBACK and network == "loopback":
                        continue
                    raise
                with box:
                    r = box.execute(CONNECT % listener.getsockname()[1])
                    ns = box.execute("readlink /proc/self/ns/net").output.strip()
                with self.assertRaises(BlockingIOError):
                    listener.accept()
            finally:
                listener.close()
            self.assertNotIn("CONNECTED", r.output)
            self.assertNotEqual(r.exit_code, 0)
            if not FALLBACK:
                self.assertNotEqual(ns, self.host_netns)


if __name__ == "__main__":
    unittest.main()
