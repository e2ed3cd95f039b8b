"""Run in a jail with the local `stockade` binary, no server: the same
request shape as `Client.run` (argv or code, profile, stdin, files, env,
limits), turned into `stockade run` flags."""

import json
import os
import shutil
import subprocess
import tempfile

from .client import Outcome
from .errors import BadRequest, SetupError, StockadeNotFound

# limits key -> `stockade run` flag (the keys of `stockade serve`'s limits).
LIMIT_FLAGS = {
    "memory": "--memory",
    "cpus": "--cpus",
    "pids": "--pids-limit",
    "timeout": "--timeout",
    "max_output": "--max-output",
}


def find_binary(binary=None):
    """The stockade binary: `binary`, else $STOCKADE_BIN, else on PATH."""
    path = binary or os.environ.get("STOCKADE_BIN") or shutil.which("stockade")
    if not path or not os.access(path, os.X_OK):
        raise StockadeNotFound(
            "stockade binary not found (%s): give binary=, set STOCKADE_BIN or put it on PATH"
            % (path or "not on PATH")
        )
    return path


def limit_flags(limits):
    """`limits` (memory, cpus, pids, timeout, max_output) as flags; a
    number for timeout is seconds, for memory/max_output bytes."""
    flags = []
    for key, value in (limits or {}).items():
        if value is None:
            continue
        if key not in LIMIT_FLAGS:
            raise BadRequest(0, "bad_request", "unknown limit (%s)" % ", ".join(LIMIT_FLAGS), "limits." + key)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadRequest(0, "bad_request", "must be a number or a string", "limits." + key)
        text = str(value)
        if key == "timeout" and not isinstance(value, str):
            text += "s"
        flags += [LIMIT_FLAGS[key], text]
    return flags


def env_flags(env):
    flags = []
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise BadRequest(0, "bad_request", "not a variable name: %r" % (name,), "env")
        if not isinstance(value, str) or "\0" in value:
            raise BadRequest(0, "bad_request", "must be a string without NUL", "env.%s" % name)
        flags += ["--setenv", "%s=%s" % (name, value)]
    return flags


def _check_path(path):
    field = "files[%s]" % json.dumps(path)
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        raise BadRequest(0, "bad_request", "must be a relative path", field)
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise BadRequest(0, "bad_request", "plain relative components only (no '', '.', '..')", field)


def write_files(root, files):
    """Write `files` ({relative path: str|bytes}) under `root`, open to
    every uid (the jail's user may be 65534 or a leased uid)."""
    for path, content in (files or {}).items():
        _check_path(path)
        if isinstance(content, str):
            content = content.encode("utf-8")
        if not isinstance(content, (bytes, bytearray)):
            raise BadRequest(0, "bad_request", "must be str or bytes", "files[%s]" % json.dumps(path))
        d = root
        for part in path.split("/")[:-1]:
            d = os.path.join(d, part)
            if not os.path.isdir(d):
                os.mkdir(d)
                os.chmod(d, 0o777)
        target = os.path.join(root, path)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.chmod(target, 0o666)


def scratch_dir(tag):
    """A fresh host directory the jail's user can write (0777 inside a
    0711 parent made by tempfile: entered by its random name only)."""
    top = tempfile.mkdtemp(prefix="stockade-%s-" % tag)
    os.chmod(top, 0o711)
    work = os.path.join(top, "work")
    os.mkdir(work)
    os.chmod(work, 0o777)
    return top, work


def _stdin_bytes(stdin):
    if stdin is None:
        return None
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray)):
        return bytes(stdin)
    raise BadRequest(0, "bad_request", "must be str or bytes", "stdin")


def _read_outcome(path, proc):
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
    except (OSError, ValueError):
        raw = None
    err = proc.stderr.decode("utf-8", "replace").strip()
    if raw is None:
        raise SetupError("stockade run exited %d without an outcome: %s" % (proc.returncode, err[-2000:]))
    outcome = Outcome(raw)
    if outcome.status == "setup_error" and proc.returncode == 125:
        raise SetupError(outcome.error or err.splitlines()[-1:] or "setup error", outcome)
    return outcome


def run(argv=None, *, code=None, profile=None, stdin=None, files=None, limits=None, env=None,
        binary=None, flags=()):
    """Run `argv` (or Python `code` under the `python` profile) in a fresh
    jail of the local `stockade`, with `files` in its workdir; return the
    Outcome (stdout/stderr captured). `flags` are more `stockade run`
    flags (e.g. ["--network", "host"]). Raises BadRequest for a bad
    argument, SetupError when the jail could not be set up,
    StockadeNotFound without a binary."""
    if (argv is None) == (code is None):
        raise ValueError("give argv or code=, not both")
    if code is not None:
        argv = ["python3", "-c", code]
        profile = profile or "python"
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise BadRequest(0, "bad_request", "must be a non-empty list of strings", "argv")
    exe = find_binary(binary)
    cmd = [exe, "run"] + (["--profile", profile] if profile else [])
    cmd += limit_flags(limits) + env_flags(env) + list(flags)
    data = _stdin_bytes(stdin)
    top, work = scratch_dir("run")
    try:
        write_files(work, files)
        report = os.path.join(top, "outcome.json")
        cmd += ["--workdir", work, "--capture", "--report", report, "--"] + argv
        proc = subprocess.run(
            cmd,
            input=data,
            stdin=subprocess.DEVNULL if data is None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return _read_outcome(report, proc)
    finally:
        shutil.rmtree(top, ignore_errors=True)
