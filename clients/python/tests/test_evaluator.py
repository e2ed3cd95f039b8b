"""stockade.evaluator: custom-code evaluators in real jails (STOCKADE_BIN).
The gadget escapes that broke RestrictedPython runners all *run* here —
there is no language-level sandbox to escape — and reach nothing of the
host: the evaluators report what they found, and the test checks it."""

import json
import os
import socket
import tempfile
import unittest

import stockade
from stockade import evaluator as ev

BIN = os.environ.get("STOCKADE_BIN")
# tests/python_integrations.rs also runs the suites where user namespaces
# are refused (the fallback: jails as leased uids on the host's tree).
FALLBACK = os.environ.get("STOCKADE_TEST_FALLBACK") == "1"
CANARY = "host-canary-7c2e91"
# tests/python_integrations.rs puts the canary in a fresh $HOME/.ssh/id_rsa.
HOST_SSH = os.path.join(os.path.expanduser("~"), ".ssh", "id_rsa")


def setUpModule():
    if not BIN:
        raise unittest.SkipTest("STOCKADE_BIN is not set: no local stockade binary to test")


# What a gadget does once it holds `os` (or `__import__`): try everything
# an escaped evaluator wants, and raise the findings as JSON.
PROBE = """
def probe(os, extra):
    found = {"extra": extra}
    for path in ("/etc/shadow", HOST_SSH, SECRET_FILE):
        try:
            found[path] = open(path).read()
        except OSError as e:
            found[path] = "refused: %s" % type(e).__name__
    found["environ"] = dict(os.environ)
    found["popen"] = os.popen("id -u; cat /etc/shadow 2>&1; ls /root 2>&1").read()
    raise RuntimeError("FOUND" + __import__("json").dumps(found, default=str))
"""


def findings(test, source):
    """Run `source` (ending in a probe) and return what it found."""
    with test.assertRaises(ev.EvaluatorException) as e:
        ev.evaluate(source, output="x", correct_answer="x", timeout=20)
    msg = e.exception.message
    test.assertIn("FOUND", msg, e.exception.traceback)
    return json.loads(msg.split("FOUND", 1)[1])


class Evaluators(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["STOCKADE_EVAL_CANARY"] = CANARY
        cls.dir = tempfile.mkdtemp()
        os.chmod(cls.dir, 0o755)
        cls.secret_file = os.path.join(cls.dir, "secret.txt")
        with open(cls.secret_file, "w") as f:
            f.write(CANARY)
        os.chmod(cls.secret_file, 0o644)

    @classmethod
    def tearDownClass(cls):
        del os.environ["STOCKADE_EVAL_CANARY"]
        os.unlink(cls.secret_file)
        os.rmdir(cls.dir)

    def probe_src(self):
        return "SECRET_FILE = %r\nHOST_SSH = %r\n" % (self.secret_file, HOST_SSH) + PROBE

    def assert_host_unreached(self, found):
        text = json.dumps(found)
        self.assertNotIn(CANARY, text, "the host's environment or files were reached")
        self.assertNotIn("STOCKADE_EVAL_CANARY", text)
        self.assertTrue(found["/etc/shadow"].startswith("refused"), found["/etc/shadow"])
        self.assertTrue(found[self.secret_file].startswith("refused"), found[self.secret_file])
        self.assertTrue(found[HOST_SSH].startswith("refused"), found[HOST_SSH])
        uid = found["popen"].split("\n")[0]
        self.assertNotEqual(uid, "0", found["popen"])
        if not FALLBACK:
            self.assertEqual(uid, "1000", found["popen"])
        # /etc/shadow is not in the jail (the fallback: Landlock refuses it)
        self.assertRegex(found["popen"], "No such file|Permission denied")
        try:
            with open("/etc/shadow") as f:
                shadow = f.read()
        except OSError:
            shadow = None
        if shadow:
            self.assertNotIn(shadow.splitlines()[0], text)

    def test_scores(self):
        src = (
            "def evaluate(app_params, inputs, output, correct_answer):\n"
            "    print('chatter on stdout does not disturb the result')\n"
            "    base = float(app_params.get('weight', 1))\n"
            "    return base * (output.strip().lower() == correct_answer.lower())\n"
        )
        self.assertEqual(ev.evaluate(src, {"weight": 0.5}, {"q": "capital?"}, " Paris ", "paris"), 0.5)
        self.assertEqual(ev.evaluate(src, {}, {}, "Lyon", "paris"), 0.0)
        struct = "def evaluate(a, i, o, c):\n    return len(o['items']) / i['n']\n"
        self.assertEqual(ev.evaluate(struct, {}, {"n": 4}, {"items": [1, 2, 3]}, None), 0.75)

    def test_a_real_module(self):
        src = (
            "from __future__ import annotations\n"
            "import dataclasses\n"
            "@dataclasses.dataclass\n"
            "class Weights:\n"
            "    exact: float = 1.0\n"
            "def evaluate(a, i, o, c):\n"
            "    return Weights(**a).exact * (o == c)\n"
        )
        self.assertEqual(ev.evaluate(src, {"exact": 0.25}, {}, "x", "x"), 0.25)

    def test_loops_forever(self):
        with self.assertRaises(ev.Timeout) as e:
            ev.evaluate("def evaluate(a, i, o, c):\n    while True:\n        pass\n", timeout=1)
        self.assertEqual(e.exception.outcome.status, "timeout")

    def test_allocates_without_bound(self):
        src = "def evaluate(a, i, o, c):\n    x = []\n    while True:\n        x.append(bytearray(1 << 20))\n"
        with self.assertRaises(ev.MemoryLimit):
            ev.evaluate(src, memory="64m", timeout=60)

    def test_raises_with_traceback(self):
        src = "def helper(o):\n    return 1 / len(o)\n\ndef evaluate(a, i, o, c):\n    return helper(o)\n"
        with self.assertRaises(ev.EvaluatorException) as e:
            ev.evaluate(src, output="")
        self.assertEqual(e.exception.exception, "ZeroDivisionError")
        self.assertIn('File "evaluator.py", line 2, in helper', e.exception.traceback)
        self.assertNotIsInstance(e.exception, ev.Forbidden)

    def test_no_evaluate_and_bad_score(self):
        with self.assertRaises(ev.EvaluatorException):
            ev.evaluate("x = 1\n")
        with self.assertRaises(ev.EvaluatorException) as e:
            ev.evaluate("def evaluate(a, i, o, c):\n    return 'high'\n")
        self.assertIn("not a number", e.exception.message)
        with self.assertRaises(ev.EvaluatorException):
            ev.evaluate("def evaluate(a, i, o, c):\n    return float('nan')\n")
        with self.assertRaises(ev.EvaluatorException) as e:
            ev.evaluate("def evaluate(:\n")
        self.assertEqual(e.exception.exception, "SyntaxError")

    def test_imports_numpy_when_the_host_has_it(self):
        probe = stockade.run(code="import numpy")
        if not probe.ok:
            raise unittest.SkipTest("the host's python3 has no numpy (python3-numpy)")
        src = "import numpy as np\ndef evaluate(a, i, o, c):\n    return float(np.mean(np.array(o) == np.array(c)))\n"
        self.assertEqual(ev.evaluate(src, output=[1, 2, 3, 4], correct_answer=[1, 2, 0, 4]), 0.75)

    def test_network_to_a_host_port_is_forbidden(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        src = (
            "import socket\n"
            "def evaluate(a, i, o, c):\n"
            "    socket.create_connection(('127.0.0.1', %d))\n"
            "    return 1.0\n" % port
        )
        try:
            with self.assertRaises(ev.EvaluatorException) as e:
                ev.evaluate(src)
            self.assertIsInstance(e.exception, ev.Forbidden, e.exception.traceback)
            with self.assertRaises(BlockingIOError):
                listener.accept()
        finally:
            listener.close()

    def test_a_killed_syscall_is_forbidden(self):
        src = (
            "import ctypes\n"
            "def evaluate(a, i, o, c):\n"
            "    ctypes.CDLL(None).syscall(101, 0, 0, 0, 0)  # ptrace(PTRACE_TRACEME)\n"
            "    return 1.0\n"
        )
        with self.assertRaises(ev.Forbidden) as e:
            ev.evaluate(src, flags=["--seccomp-action", "kill"])
        self.assertEqual(e.exception.outcome.status, "seccomp_violation")
        self.assertEqual(ev.evaluate(src), 1.0, "with the default action ptrace fails with EPERM instead")

    def test_direct_reads_reach_nothing(self):
        src = self.probe_src() + "import os\ndef evaluate(a, i, o, c):\n    probe(os, None)\n"
        self.assert_host_unreached(findings(self, src))

    def test_subclasses_gadget(self):
        src = self.probe_src() + (
            "def evaluate(a, i, o, c):\n"
            "    for cls in ().__class__.__base__.__subclasses__():\n"
            "        if cls.__name__ == '_wrap_close':\n"
            "            g = cls.__init__.__globals__\n"
            "            return probe(g['sys'].modules['os'], cls.__module__)\n"
            "    raise AssertionError('no _wrap_close among the subclasses')\n"
        )
        found = findings(self, src)
        self.assertEqual(found["extra"], "os", "the gadget reached os")
        self.assert_host_unreached(found)

    def test_gi_frame_f_back_gadget(self):
        src = self.probe_src() + (
            "def gen():\n"
            "    yield g.gi_frame.f_back\n"
            "g = gen()\n"
            "def evaluate(a, i, o, c):\n"
            "    f = next(g)\n"
            "    names = []\n"
            "    while f is not None:\n"
            "        names.append(f.f_code.co_name)\n"
            "        top = f\n"
            "        f = f.f_back\n"
            "    imp = top.f_globals['__builtins__'].__dict__['__import__']\n"
            "    return probe(imp('os'), names)\n"
        )
        found = findings(self, src)
        self.assertEqual(found["extra"][-1], "<module>", "the walk reached the outermost frame")
        self.assert_host_unreached(found)

    def test_format_string_attribute_walk(self):
        src = self.probe_src() + (
            "import os\n"
            "def evaluate(a, i, o, c):\n"
            "    leak = '{0.__init__.__globals__[environ]}'.format(os._wrap_close)\n"
            "    walk = '{0.__globals__[__builtins__][__import__]}'.format(evaluate)\n"
            "    return probe(os, [leak, walk])\n"
        )
        found = findings(self, src)
        leak, walk = found["extra"]
        self.assertTrue(leak.startswith("environ("), leak)
        self.assertIn("built-in function __import__", walk)
        self.assert_host_unreached(found)


if __name__ == "__main__":
    unittest.main()
