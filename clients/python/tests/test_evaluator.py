"""stockade.evaluator: custom-code evaluators in real jails (STOCKADE_BIN).
The gadget escapes that broke RestrictedPython runners all *run* here —
there is no language-level sandbox to escape — and reach nothing of the
host: the evaluators report what they found, and the test checks it."""

import json
import os
import shutil
import socket
import subprocess
import sys
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


def interpreter_with_numpy():
    """The first of the caller's interpreter, python3 on PATH and
    /usr/bin/python3 that imports numpy, or None."""
    for py in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if py and os.access(py, os.X_OK):
            if subprocess.run([py, "-I", "-c", "import numpy"], capture_output=True).returncode == 0:
                return py
    return None


def findings(test, source, run=None):
    """Run `source` (ending in a probe) and return what it found."""
    with test.assertRaises(ev.EvaluatorException) as e:
        if run is None:
            ev.evaluate(source, output="x", correct_answer="x", timeout=20)
        else:
            run(source)
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
        py = interpreter_with_numpy()
        if py is None:
            raise unittest.SkipTest("no numpy in %s, python3 on PATH or /usr/bin/python3" % sys.executable)
        src = "import numpy as np\ndef evaluate(a, i, o, c):\n    return float(np.mean(np.array(o) == np.array(c)))\n"
        self.assertEqual(ev.evaluate(src, output=[1, 2, 3, 4], correct_answer=[1, 2, 0, 4], python=py), 0.75)

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


V1 = "def evaluate(app_params, inputs, output, correct_answer):\n    return app_params['w'] * (output == correct_answer)\n"
V2 = (
    "def evaluate(inputs, outputs, trace):\n"
    "    spans = trace.get('spans', [])\n"
    "    return (outputs == inputs['correct_answer']) * 0.5 + 0.25 * len(spans)\n"
)


class AgentaRunner(unittest.TestCase):
    """StockadeRunner, as an Agenta deployment calls its code runner:
    run(code, app_params, inputs, output, correct_answer, runtime,
    templates, version=, trace=)."""

    def runner(self, **options):
        return ev.StockadeRunner(timeout=20, **options)

    def test_v1_and_v2_evaluators_score(self):
        r = self.runner()
        self.assertEqual(r.run(V1, {"w": 0.5}, {}, "x", "x"), 0.5)
        self.assertEqual(r.run(V1, {"w": 0.5}, {}, "x", "y", version="2"), 0.0, "the signature outranks version")
        trace = {"spans": [{"name": "llm"}]}
        self.assertEqual(r.run(V2, {}, {"correct_answer": "x"}, "x", None, version="2", trace=trace), 0.75)
        self.assertEqual(r.run(V2, {}, {"correct_answer": "x"}, "y", None, "python", None, trace=trace), 0.25)
        # Names of neither interface: the arity decides, then version.
        self.assertEqual(r.run("def evaluate(i, o, t):\n    return o == i['a']\n", {}, {"a": 1}, 1, None), 1.0)
        varargs = "def evaluate(*args):\n    return len(args)\n"
        self.assertEqual(r.run(varargs, {}, {}, "x", None), 4.0)
        self.assertEqual(r.run(varargs, {}, {}, "x", None, version="2"), 3.0)
        kw_only = "def evaluate(*, outputs, **rest):\n    return len(rest) + (outputs == 'x')\n"
        self.assertEqual(r.run(kw_only, {}, {}, "x", None, version="2", trace={}), 3.0, "inputs and trace as **rest")
        decorated = (
            "import functools\n"
            "def logged(f):\n"
            "    @functools.wraps(f)\n"
            "    def wrapper(*args, **kwargs):\n"
            "        return f(*args, **kwargs)\n"
            "    return wrapper\n"
            "@logged\n" + V2
        )
        self.assertEqual(r.run(decorated, {}, {"correct_answer": "x"}, "x", None, trace=trace), 0.75)
        callable_object = (
            "class Scorer:\n"
            "    def __call__(self, inputs, outputs, trace):\n"
            "        return 0.125 * (outputs == 'x')\n"
            "evaluate = Scorer()\n"
        )
        self.assertEqual(r.run(callable_object, {}, {}, "x", None), 0.125)
        # The module function takes v2 by its own names.
        self.assertEqual(ev.evaluate(V2, inputs={"correct_answer": "x"}, outputs="x", trace={}, timeout=20), 0.5)
        self.assertEqual(ev.evaluate(V2, inputs={"correct_answer": "x"}, output="x", timeout=20), 0.5)
        # Called as v1 callers always called it (a TypeError in the jail before).
        self.assertEqual(ev.evaluate(V2, {}, {"correct_answer": "x"}, "x", None, timeout=20), 0.5)

    def test_a_v2_evaluator_that_raises_is_an_evaluator_exception(self):
        with self.assertRaises(ev.EvaluatorException) as e:
            self.runner().run(V2, {}, {}, "x", None, version="2", trace={})
        self.assertEqual(e.exception.exception, "KeyError", e.exception.traceback)

    def test_only_python_and_known_options(self):
        with self.assertRaises(stockade.BadRequest) as e:
            self.runner().run(V1, {"w": 1}, {}, "x", "x", runtime="javascript")
        self.assertEqual(e.exception.field, "runtime")
        with self.assertRaises(stockade.BadRequest) as e:
            self.runner().run(V1, {"w": 1}, {}, "x", "x", version="3")
        self.assertEqual(e.exception.field, "version")
        with self.assertRaises(TypeError):
            ev.StockadeRunner(network="host")
        for value, error in ((1, stockade.InvalidOptionType), (b"/usr/bin/python3", stockade.InvalidOptionType),
                             ("", stockade.InvalidOption), ("python3\0", stockade.InvalidOption)):
            with self.subTest(python=value), self.assertRaises(error) as e:
                ev.evaluate(V1, python=value)
            self.assertEqual(e.exception.field, "python")
        with self.assertRaises(stockade.SetupError) as e:
            ev.evaluate(V1, python="/nonexistent/bin/python3")
        self.assertIn("/nonexistent/bin/python3", str(e.exception))

    def test_allowlisted_imports(self):
        src = (
            "import json, math, re\n"
            "def evaluate(inputs, outputs, trace):\n"
            "    words = re.findall(r'[a-z]+', outputs.lower())\n"
            "    want = json.loads(inputs['expected'])\n"
            "    return math.sqrt(len(set(words) & set(want)) / len(want))\n"
        )
        score = self.runner().run(src, {}, {"expected": '["paris", "lyon", "nice", "lille"]'}, "Paris, Lyon!", None,
                                  version="2", trace={})
        self.assertAlmostEqual(score, math_sqrt_half())

    def test_numpy_where_present(self):
        py = interpreter_with_numpy()
        if py is None:
            raise unittest.SkipTest("no numpy in %s, python3 on PATH or /usr/bin/python3" % sys.executable)
        src = (
            "import numpy as np\n"
            "def evaluate(inputs, outputs, trace):\n"
            "    return float(np.mean(np.array(outputs) == np.array(inputs['expected'])))\n"
        )
        r = self.runner(python=py)
        self.assertEqual(r.run(src, {}, {"expected": [1, 2, 0, 4]}, [1, 2, 3, 4], None, version="2", trace={}), 0.75)

    def test_import_os_works_and_is_contained(self):
        secret_dir = tempfile.mkdtemp()
        os.chmod(secret_dir, 0o755)
        secret = os.path.join(secret_dir, "secret.txt")
        with open(secret, "w") as f:
            f.write(CANARY)
        os.chmod(secret, 0o644)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        src = (
            "import json, os, socket\n"
            "def evaluate(inputs, outputs, trace):\n"
            "    found = {'cwd': os.getcwd(), 'listdir': sorted(os.listdir('.')), 'pid': os.getpid()}\n"
            "    for path in %r:\n"
            "        try:\n"
            "            found[path] = open(path).read()\n"
            "        except OSError as e:\n"
            "            found[path] = 'refused: %%s' %% type(e).__name__\n"
            "    found['environ'] = dict(os.environ)\n"
            "    for host in ('127.0.0.1', '1.1.1.1'):\n"
            "        try:\n"
            "            socket.create_connection((host, %d), timeout=3).close()\n"
            "            found[host] = 'connected'\n"
            "        except OSError as e:\n"
            "            found[host] = 'refused: %%s' %% type(e).__name__\n"
            "    raise RuntimeError('FOUND' + json.dumps(found))\n"
        ) % ([secret, HOST_SSH, "/etc/shadow"], port)
        try:
            found = findings(self, src, lambda s: self.runner().run(s, {}, {}, "x", None, version="2", trace={}))
            with self.assertRaises(BlockingIOError):
                listener.accept()
        finally:
            listener.close()
            os.unlink(secret)
            os.rmdir(secret_dir)
        self.assertIn("harness.py", found["listdir"], "os works: the jail's workdir is listed")
        text = json.dumps(found)
        self.assertNotIn(CANARY, text, "the host's environment or files were reached")
        self.assertNotIn("STOCKADE_EVAL_CANARY", text)
        for path in (secret, HOST_SSH, "/etc/shadow"):
            self.assertTrue(found[path].startswith("refused"), (path, found[path]))
        for host in ("127.0.0.1", "1.1.1.1"):
            self.assertTrue(found[host].startswith("refused"), (host, found[host]))


def math_sqrt_half():
    return 0.5 ** 0.5


def make_venv(test):
    """A fresh venv (never activated) with a package of its own,
    `venv_only_pkg`, readable by every uid; (its python, its top)."""
    top = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, top, True)
    venv = os.path.join(top, "venv")
    o = subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], capture_output=True, text=True)
    if o.returncode != 0:
        raise unittest.SkipTest("%s -m venv failed: %s" % (sys.executable, o.stderr.strip()[-300:]))
    py = os.path.join(venv, "bin", "python")
    site = subprocess.run([py, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pkg = os.path.join(site, "venv_only_pkg")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write("WEIGHT = 0.625\n")
    for d, dirs, files in os.walk(top):
        os.chmod(d, 0o755)
        for name in files:
            if not os.path.islink(os.path.join(d, name)):
                os.chmod(os.path.join(d, name), 0o666 if not d.endswith("/bin") else 0o755)
    return py, top


VENV_SRC = "import venv_only_pkg\ndef evaluate(app_params, inputs, output, correct_answer):\n    return venv_only_pkg.WEIGHT\n"


class Interpreter(unittest.TestCase):
    """python=: the jail runs the caller's interpreter (or the one named),
    with its packages, not the first python3 on PATH."""

    def test_a_named_venv_s_packages_import(self):
        py, _ = make_venv(self)
        self.assertEqual(ev.evaluate(VENV_SRC, output="x", python=py, timeout=20), 0.625)
        with self.assertRaises(ev.EvaluatorException) as e:
            ev.evaluate(VENV_SRC, output="x", python=None, timeout=20)
        self.assertEqual(e.exception.exception, "ModuleNotFoundError", "python3 on PATH has no venv_only_pkg")

    def test_the_caller_s_non_activated_venv_is_the_default(self):
        py, top = make_venv(self)
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(ev.__file__)))
        code = (
            "import sys\n"
            "from stockade import evaluator\n"
            "print(evaluator.evaluate(sys.argv[1], {}, {}, 'x', 'x', timeout=20))\n"
        )
        env = dict(os.environ, PYTHONPATH=pkg_root)
        env.pop("VIRTUAL_ENV", None)
        o = subprocess.run([py, "-c", code, VENV_SRC], capture_output=True, text=True, env=env, cwd=top)
        self.assertEqual(o.returncode, 0, o.stderr)
        self.assertEqual(o.stdout.strip(), "0.625")

    def test_the_venv_is_read_only_in_the_jail(self):
        py, top = make_venv(self)
        src = (
            "import venv_only_pkg\n"
            "def evaluate(inputs, outputs, trace):\n"
            "    open(venv_only_pkg.__file__, 'a').write('x = 1\\n')\n"
            "    return 1.0\n"
        )
        with self.assertRaises(ev.EvaluatorException) as e:
            ev.evaluate(src, outputs="x", python=py, timeout=20)
        self.assertIn(e.exception.exception, ("OSError", "PermissionError"), e.exception.traceback)
        with open(os.path.join(os.path.dirname(subprocess.run(
                [py, "-I", "-c", "import venv_only_pkg; print(venv_only_pkg.__file__)"],
                capture_output=True, text=True, check=True).stdout.strip()), "__init__.py")) as f:
            self.assertEqual(f.read(), "WEIGHT = 0.625\n")


if __name__ == "__main__":
    unittest.main()
