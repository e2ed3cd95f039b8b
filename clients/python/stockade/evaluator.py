"""Custom-code evaluators in a jail: a drop-in for RestrictedPython
runners (Agenta-style `evaluate(app_params, inputs, output,
correct_answer) -> float`).

The evaluator is plain Python: it may import whatever the interpreter has
(numpy, if installed) and use any language feature; the jail (the
`python` profile: no network, no host files but the interpreter's, a
fresh environment) is what keeps it from the host, with a timeout and a
memory cap.

    from stockade import evaluator
    score = evaluator.evaluate(source, app_params={}, inputs={"q": "2+2"},
                               output="4", correct_answer="4")
"""

import json
import math

from . import _options, local
from .errors import StockadeError

# Runs in the jail. The result goes on the last line of the real stdout;
# the evaluator's own prints go to stderr.
HARNESS = r"""
import json, os, sys, traceback, types
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
def answer(v):
    out.write("\n" + json.dumps(v) + "\n")
    out.flush()
    sys.exit(0)
try:
    data = json.load(open("input.json"))
    module = types.ModuleType("evaluator")
    module.__file__ = "evaluator.py"
    sys.modules["evaluator"] = module
    exec(compile(open("evaluator.py").read(), "evaluator.py", "exec"), module.__dict__)
    fn = getattr(module, "evaluate", None)
    if not callable(fn):
        answer({"error": "NameError", "message": "the evaluator defines no evaluate() function", "traceback": ""})
    score = fn(data["app_params"], data["inputs"], data["output"], data["correct_answer"])
    try:
        answer({"score": float(score)})
    except (TypeError, ValueError):
        answer({"error": "TypeError", "message": "evaluate() returned %r, not a number" % (score,), "traceback": ""})
except MemoryError:
    answer({"memory": True})
except SystemExit:
    raise
except BaseException as e:
    answer({"error": type(e).__name__, "message": str(e), "traceback": traceback.format_exc(),
            "permission": isinstance(e, PermissionError)})
"""


class EvaluatorError(StockadeError):
    """The evaluator gave no score. `outcome` is the jail's Outcome."""

    def __init__(self, message, outcome=None, code="evaluator_error"):
        super().__init__(0, code, message)
        self.outcome = outcome


class Timeout(EvaluatorError):
    """The evaluator ran past its timeout (the jail was killed)."""


class MemoryLimit(EvaluatorError):
    """The evaluator went over its memory cap."""


class EvaluatorException(EvaluatorError):
    """evaluate() raised (or returned no number): `exception` is the
    exception's type name, `traceback` its traceback text."""

    def __init__(self, message, outcome=None, exception=None, traceback=""):
        super().__init__(message, outcome, "evaluator_exception")
        self.exception = exception
        self.traceback = traceback


class Forbidden(EvaluatorException):
    """The evaluator tried something the jail refuses (PermissionError
    from an EPERM/EACCES, or a syscall the jail kills for)."""


def _result(out):
    """The harness's answer: the last stdout line as JSON, or None."""
    lines = out.stdout_text.strip().splitlines()
    if not lines:
        return None
    try:
        v = json.loads(lines[-1])
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _verdict(out, timeout, memory):
    """The score of an Outcome, or raise the typed error."""
    if out.status == "timeout":
        raise Timeout("the evaluator ran past its timeout (%ss)" % timeout, out, "timeout")
    res = _result(out)
    if out.status == "memory_limit" or (res or {}).get("memory"):
        raise MemoryLimit("the evaluator went over its memory cap (%s)" % memory, out, "memory_limit")
    if out.status == "seccomp_violation":
        raise Forbidden("the evaluator made a forbidden system call: %s" % (out.raw.get("seccomp_violation"),), out)
    if res is None or out.status != "exited":
        raise EvaluatorError(
            "the evaluator's jail ended with %s (exit %s) and no result: %s"
            % (out.status, out.exit_code, (out.error or out.stderr_text)[-2000:]),
            out,
        )
    if "score" in res and isinstance(res["score"], (int, float)) and math.isfinite(res["score"]):
        return float(res["score"])
    cls = Forbidden if res.get("permission") else EvaluatorException
    message = "%s: %s" % (res.get("error", "Error"), res.get("message", ""))
    raise cls(message, out, res.get("error"), res.get("traceback", ""))


def evaluate(source, app_params=None, inputs=None, output=None, correct_answer=None, *,
             timeout=10, memory="256m", pids=64, binary=None, profile="python", flags=()):
    """Run `source`'s `evaluate(app_params, inputs, output, correct_answer)`
    in a fresh jail; return its score as a float. Raises Timeout,
    MemoryLimit, EvaluatorException (with `.traceback`), Forbidden, or
    EvaluatorError; a non-finite or non-numeric score is an
    EvaluatorException. The inputs travel as JSON."""
    _options.text("source", source, empty=True)
    # The evaluator always runs with a timeout, a memory cap and a pids
    # cap, under a named profile: None is refused, never "no limit".
    for name, value in (("timeout", timeout), ("memory", memory), ("pids", pids), ("profile", profile)):
        if value is None:
            raise _options.bad(name, "the evaluator always runs with one (None would drop it)")
    limits = {"timeout": timeout, "memory": memory, "pids": pids}
    for name, value in limits.items():
        _options.RUN_LIMITS[name](name, value)
    _options.profile("profile", profile)
    data = {
        "app_params": app_params if app_params is not None else {},
        "inputs": inputs if inputs is not None else {},
        "output": output,
        "correct_answer": correct_answer,
    }
    out = local.run(
        ["python3", "-I", "harness.py"],
        profile=profile,
        files={"harness.py": HARNESS, "evaluator.py": source, "input.json": json.dumps(data)},
        limits=limits,
        binary=binary,
        flags=flags,
    )
    return _verdict(out, timeout, memory)
