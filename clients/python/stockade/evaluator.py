"""Custom-code evaluators in a jail: a drop-in for RestrictedPython
runners, with both of Agenta's interfaces:

    v1: evaluate(app_params, inputs, output, correct_answer) -> float
    v2: evaluate(inputs, outputs, trace) -> float   (Agenta's default now)

The evaluator is plain Python: it may import whatever its interpreter has
(by default the caller's own, `sys.executable`, venv included: numpy, if
installed there) and use any language feature; the jail (the `python`
profile: no network, no host files but the interpreter's, a fresh
environment) is what keeps it from the host, with a timeout and a memory
cap.

    from stockade import evaluator
    score = evaluator.evaluate(source, app_params={}, inputs={"q": "2+2"},
                               output="4", correct_answer="4")
    score = evaluator.evaluate(source, inputs={"q": "2+2"}, outputs="4", trace={})

`StockadeRunner` has the shape of Agenta's code runners (`run(code,
app_params, inputs, output, correct_answer, runtime=None, templates=None,
*, version="1", trace=None)`), for a deployment that picks its runner.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

from . import _options, local
from ._options import StrPath
from ._results import Outcome
from .errors import LocalError

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
V1 = ("app_params", "inputs", "output", "correct_answer")
V2 = ("inputs", "outputs", "trace")
def params(fn):
    # (name, kind) of fn's parameters; a plain function's from its code
    # object (importing inspect would cost every run ~9 ms), others' (a
    # decorated function, a callable object) from inspect.
    if isinstance(fn, types.FunctionType) and not hasattr(fn, "__wrapped__"):
        c = fn.__code__
        n, posonly, kwonly = c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount
        names = c.co_varnames
        out = [(v, "posonly" if i < posonly else "pos") for i, v in enumerate(names[:n])]
        out += [(v, "kw") for v in names[n:n + kwonly]]
        if c.co_flags & 0x04:
            out.append(("*", "varpos"))
        if c.co_flags & 0x08:
            out.append(("**", "varkw"))
        return out
    import inspect
    P = inspect.Parameter
    kinds = {P.POSITIONAL_ONLY: "posonly", P.POSITIONAL_OR_KEYWORD: "pos", P.KEYWORD_ONLY: "kw",
             P.VAR_POSITIONAL: "varpos", P.VAR_KEYWORD: "varkw"}
    try:
        return [(p.name, kinds[p.kind]) for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return [("*", "varpos")]
def call(fn, data):
    # Which of Agenta's interfaces fn declares: its parameter names decide
    # (then called by keyword); names of neither, its positional arity (4:
    # v1, 3: v2, called positionally); else the caller's version.
    ps = params(fn)
    kinds = {k for _, k in ps}
    named = {n for n, k in ps if k in ("pos", "kw")}
    v1, v2 = named & set(V1) - {"inputs"}, named & set(V2) - {"inputs"}
    if v1 and not v2 or v2 and not v1:
        names = V1 if v1 else V2
        return fn(**{n: data[n] for n in names if n in named or "varkw" in kinds})
    arity = None if "varpos" in kinds else len([n for n, k in ps if k in ("posonly", "pos")])
    names = {4: V1, 3: V2}.get(arity) or (V2 if data["version"] == "2" else V1)
    return fn(*[data[n] for n in names])
try:
    data = json.load(open("input.json"))
    module = types.ModuleType("evaluator")
    module.__file__ = "evaluator.py"
    sys.modules["evaluator"] = module
    exec(compile(open("evaluator.py").read(), "evaluator.py", "exec"), module.__dict__)
    fn = getattr(module, "evaluate", None)
    if not callable(fn):
        answer({"error": "NameError", "message": "the evaluator defines no evaluate() function", "traceback": ""})
    score = call(fn, data)
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


class EvaluatorError(LocalError):
    """The evaluator gave no score. `outcome` is the jail's Outcome."""

    def __init__(self, message: str, outcome: Optional[Outcome] = None, code: str = "evaluator_error") -> None:
        super().__init__(code, message)
        self.outcome = outcome


class Timeout(EvaluatorError):
    """The evaluator ran past its timeout (the jail was killed)."""


class MemoryLimit(EvaluatorError):
    """The evaluator went over its memory cap."""


class EvaluatorException(EvaluatorError):
    """evaluate() raised (or returned no number): `exception` is the
    exception's type name, `traceback` its traceback text."""

    def __init__(
        self, message: str, outcome: Optional[Outcome] = None, exception: Optional[str] = None, traceback: str = ""
    ) -> None:
        super().__init__(message, outcome, "evaluator_exception")
        self.exception = exception
        self.traceback = traceback


class Forbidden(EvaluatorException):
    """The evaluator tried something the jail refuses (PermissionError
    from an EPERM/EACCES, or a syscall the jail kills for)."""


def _result(out: Outcome) -> Optional[dict[str, Any]]:
    """The harness's answer: the last stdout line as JSON, or None."""
    lines = out.stdout_text.strip().splitlines()
    if not lines:
        return None
    try:
        v = json.loads(lines[-1])
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _verdict(out: Outcome, timeout: object, memory: object) -> float:
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


_CALLER = object()


def evaluate(
    source: str,
    app_params: Any = None,
    inputs: Any = None,
    output: Any = None,
    correct_answer: Any = None,
    *,
    outputs: Any = None,
    trace: Any = None,
    version: Optional[str] = None,
    python: Any = _CALLER,
    timeout: Union[int, float, str] = 10,
    memory: Union[int, str] = "256m",
    pids: Union[int, str] = 64,
    binary: Optional[StrPath] = None,
    profile: StrPath = "python",
    flags: Sequence[str] = (),
) -> float:
    """Run `source`'s `evaluate` in a fresh jail with whichever of Agenta's
    interfaces it declares: `(app_params, inputs, output, correct_answer)`
    or `(inputs, outputs, trace)` (its parameter names decide; unknown
    names: 4 parameters are v1, 3 are v2, else `version`, "1" or "2",
    default "2" when `outputs` or `trace` is given). `output` and
    `outputs` are one value under two names: give either. Return the
    score as a float.

    `python`: the interpreter the jail runs (its prefix and site-packages
    bound read-only, so a venv's packages import); default the caller's
    own, `sys.executable`; None: the first `python3` on PATH.

    Raises Timeout, MemoryLimit, EvaluatorException (with `.traceback`),
    Forbidden, or EvaluatorError; a non-finite or non-numeric score is an
    EvaluatorException. The inputs travel as JSON."""
    _options.text("source", source, empty=True)
    if python is _CALLER:
        python = sys.executable or None
    python = _options.optional_path("python", python)
    if version is not None and version not in ("1", "2"):
        raise _options.bad("version", 'Agenta\'s evaluator interface, "1" or "2" (got %r)' % (version,))
    if version is None:
        version = "2" if outputs is not None or trace is not None else "1"
    if output is None:
        output = outputs
    elif outputs is None:
        outputs = output
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
        "outputs": outputs,
        "trace": trace if trace is not None else {},
        "version": version,
    }
    # With --python the interpreter's directory is first on the jail's
    # PATH: `python3` there is that interpreter.
    flags = ([local.flag("--python", python)] if python is not None else []) + _options.flags("flags", flags)
    out = local.run(
        ["python3", "-I", "harness.py"],
        profile=profile,
        files={"harness.py": HARNESS, "evaluator.py": source, "input.json": json.dumps(data)},
        limits=limits,
        binary=binary,
        flags=flags,
    )
    return _verdict(out, timeout, memory)


class StockadeRunner:
    """A code runner with the shape of Agenta's (`CodeRunner.run`): each
    `run` scores `code` in a fresh jail through `evaluate`. The
    keywords given here (timeout, memory, pids, python, binary, profile,
    flags) apply to every run.

        runner = StockadeRunner(timeout=5, memory="256m")
        runner.run(code, {}, inputs, output, None, version="2", trace=trace)

    Errors are raised, as Agenta's own runners raise them: the typed
    errors of this module (all `StockadeError`s)."""

    def __init__(self, **options: Any) -> None:
        bad = set(options) - {"timeout", "memory", "pids", "python", "binary", "profile", "flags"}
        if bad:
            raise TypeError("StockadeRunner: unknown option(s) %s" % ", ".join(sorted(bad)))
        self.options = options

    def run(
        self,
        code: str,
        app_params: Any,
        inputs: Any,
        output: Any,
        correct_answer: Any,
        runtime: Optional[str] = None,
        templates: Any = None,
        *,
        version: Union[str, int, None] = "1",
        trace: Any = None,
    ) -> float:
        """The score of `code`'s `evaluate` (v1 or v2, whichever it
        declares; `version` decides only when its signature does not).
        `runtime` must be "python" (or None); `templates` is unused: the
        jail's harness wraps the code."""
        if runtime not in (None, "python"):
            raise _options.bad("runtime", "the stockade runner runs Python only (got %r)" % (runtime,))
        version = None if version is None else str(version)
        return evaluate(code, app_params, inputs, output, correct_answer, trace=trace, version=version,
                        **self.options)
