"""Run in a jail with the local `stockade` binary, no server: the same
request shape as `Client.run` (argv or code, profile, stdin, files, env,
limits), turned into `stockade run` flags."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from . import _binary, _options
from ._options import Content, StrPath
from ._results import Outcome
from .errors import SetupError, StockadeNotFound

# limits key -> `stockade run` flag (the keys of `stockade serve`'s limits).
LIMIT_FLAGS = {
    "memory": "--memory",
    "cpus": "--cpus",
    "pids": "--pids-limit",
    "timeout": "--timeout",
    "max_output": "--max-output",
}


def find_binary(binary: Optional[StrPath] = None) -> str:
    """The stockade binary: `binary`, else $STOCKADE_BIN, else the one
    installed with the package (its wheel's), else on PATH."""
    path = _binary.locate(binary)
    if not path or not os.access(path, os.X_OK):
        raise StockadeNotFound(
            "stockade binary not found (%s): give binary=, set STOCKADE_BIN or put it on PATH"
            % (path or "not on PATH")
        )
    return path


def flag(name: str, value: object) -> str:
    """`--name=value`: one argument, so a value that starts with `-` is
    still the flag's value."""
    return "%s=%s" % (name, value)


def limit_flags(limits: Optional[Mapping[str, Any]], keys: tuple[str, ...] = tuple(LIMIT_FLAGS), field: str = "limits") -> list[str]:
    """`limits` (memory, cpus, pids, timeout, max_output) as flags; a
    number for timeout is seconds, for memory/max_output bytes. Checked
    as `stockade run` reads them (InvalidOption naming `limits.KEY`)."""
    checked = _options.limits(field, limits, keys)
    return [flag(LIMIT_FLAGS[key], text) for key, text in checked.items()]


def env_flags(env: Optional[Mapping[str, str]], field: str = "env") -> list[str]:
    return [flag("--setenv", "%s=%s" % kv) for kv in _options.env(field, env).items()]


def egress_flags(
    allow_hosts: Any,
    secrets: Any,
    secret_files: Any,
    network: Optional[str] = None,
    env: Optional[Mapping[str, Any]] = None,
) -> list[str]:
    """`allow_hosts=` (`--allow-host`), `secrets=` (`--secret`) and
    `secret_files=` (`--secret-file`) as flags, checked (InvalidOption
    naming the keyword): secrets need an allowlist, which needs the
    network "none" (the default); each value is this process's
    environment variable of the secret's name unless `secret_files` names
    its file, and `env` may not set that variable in the jail."""
    hosts = _options.allow_hosts("allow_hosts", allow_hosts)
    bound = _options.secrets("secrets", secrets)
    files = _options.secret_files("secret_files", secret_files, bound)
    if hosts and network not in (None, "none"):
        raise _options.bad(
            "allow_hosts",
            "an egress allowlist needs network \"none\" (the proxy is the jail's one way out), not %r" % (network,),
        )
    if bound and not hosts:
        raise _options.bad("secrets", "needs allow_hosts= naming the secrets' hosts (the jail's egress allowlist)")
    for name in bound:
        if name not in files and name not in os.environ:
            raise _options.bad(
                "secrets", "%s: not set in this process's environment (or give secret_files={%r: PATH})" % (name, name)
            )
        if env and name in env:
            raise _options.bad("secrets", "%s: also set by env=; the jail gets a placeholder, never the value" % name)
    out = [flag("--allow-host", h) for h in hosts]
    out += [flag("--secret", "%s:%s" % (n, ",".join(hs))) for n, hs in bound.items()]
    out += [flag("--secret-file", "%s=%s" % (n, p)) for n, p in files.items()]
    return out


def write_files(root: str, files: Optional[Mapping[str, Content]]) -> None:
    """Write `files` ({relative path: str|bytes}) under `root`, open to
    every uid (the jail's user may be 65534 or a leased uid)."""
    for path, content in _options.files("files", files).items():
        if isinstance(content, str):
            content = content.encode("utf-8")
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


def scratch_dir(tag: str) -> tuple[str, str]:
    """A fresh host directory the jail's user can write (0777 inside a
    0711 parent made by tempfile: entered by its random name only)."""
    top = tempfile.mkdtemp(prefix="stockade-%s-" % tag)
    os.chmod(top, 0o711)
    work = os.path.join(top, "work")
    os.mkdir(work)
    os.chmod(work, 0o777)
    return top, work


def _stdin_bytes(stdin: Optional[Content]) -> Optional[bytes]:
    stdin = _options.content("stdin", stdin)
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    return None if stdin is None else bytes(stdin)


def overlay_flags(overlay: Any, commit: Any, diff: Optional[str]) -> list[str]:
    """`overlay=` pairs, `commit=` and the diff file as flags (checked:
    InvalidOption naming `overlay[i]` or `commit`)."""
    pairs = _options.overlays("overlay", overlay)
    when = _options.commit("commit", commit)
    if not pairs and (when != "never" or diff is not None):
        raise _options.bad("commit" if when != "never" else "diff", "needs an overlay=")
    out = [flag("--overlay", "%s:%s" % p) for p in pairs]
    if when != "never":
        out.append(flag("--commit", when))
    if diff is not None:
        out.append(flag("--changes-diff", diff))
    return out


def _read_diff(path: Optional[str]) -> Optional[str]:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _read_outcome(path: str, proc: subprocess.CompletedProcess[bytes], diff: Optional[str] = None) -> Outcome:
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
    except (OSError, ValueError):
        raw = None
    err = proc.stderr.decode("utf-8", "replace").strip()
    if raw is None:
        raise SetupError("stockade run exited %d without an outcome: %s" % (proc.returncode, err[-2000:]))
    outcome = Outcome(raw, _read_diff(diff))
    if outcome.status == "setup_error" and proc.returncode == 125:
        raise SetupError(outcome.error or (err.splitlines() or ["setup error"])[-1], outcome)
    return outcome


def command(argv: Any, code: Any, profile: Any, server: bool = False) -> tuple[list[str], Optional[str]]:
    """(argv, profile) of a run given `argv` or Python `code` (the
    `python` profile unless `profile` says another)."""
    if (argv is None) == (code is None):
        raise _options.bad("argv", "give argv or code=, not both")
    profile = _options.profile("profile", profile, local=not server)
    if code is not None:
        code = _options.utf8_text("code", code, empty=True) if server else _options.text("code", code, empty=True)
        return ["python3", "-c", code], "python" if profile is None else profile
    return _options.argv("argv", argv, server=server), profile


def run(
    argv: Optional[Sequence[str]] = None,
    *,
    code: Optional[str] = None,
    profile: Optional[StrPath] = None,
    stdin: Optional[Content] = None,
    files: Optional[Mapping[str, Content]] = None,
    limits: Optional[Mapping[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
    binary: Optional[StrPath] = None,
    flags: Sequence[str] = (),
    overlay: Optional[Sequence[tuple[StrPath, str]]] = None,
    commit: Optional[str] = None,
    diff: bool = False,
    allow_hosts: Optional[Sequence[str]] = None,
    secrets: Optional[Mapping[str, Union[str, Sequence[str]]]] = None,
    secret_files: Optional[Mapping[str, StrPath]] = None,
) -> Outcome:
    """Run `argv` (or Python `code` under the `python` profile) in a fresh
    jail of the local `stockade`, with `files` in its workdir; return the
    Outcome (stdout/stderr captured). `flags` are more `stockade run`
    flags (e.g. ["--network", "host"]). `overlay` is a list of (host
    directory, path in the jail) pairs, each a copy-on-write view
    (`--overlay`): the host directory is untouched, the Outcome's
    `changes` lists what the run changed, `diff=True` adds their unified
    diff (`Outcome.diff`), and `commit` ("success" or "always") applies
    them to the host directory after the run. `allow_hosts` is the jail's
    egress allowlist (`--allow-host` entries); `secrets` maps a variable
    name to the hosts its value may go to (`--secret`): the jail's
    variable holds a placeholder, and stockade's proxy puts the value
    (this process's environment variable, or the file `secret_files`
    names) into the requests sent to those hosts only. Raises InvalidOption for a
    bad argument, SetupError when the jail could not be set up,
    StockadeNotFound without a binary (each a LocalError)."""
    argv, profile = command(argv, code, profile)
    _options.boolean("diff", diff)
    cmd = ["run"] + ([flag("--profile", profile)] if profile is not None else [])
    cmd += limit_flags(limits) + env_flags(env)
    cmd += egress_flags(allow_hosts, secrets, secret_files, env=env) + _options.flags("flags", flags)
    data = _stdin_bytes(stdin)
    _options.files("files", files)
    cmd = [find_binary(binary)] + cmd
    overlay_flags(overlay, commit, None)
    top, work = scratch_dir("run")
    try:
        write_files(work, files)
        report = os.path.join(top, "outcome.json")
        diff_file = os.path.join(top, "changes.diff") if diff else None
        cmd += overlay_flags(overlay, commit, diff_file)
        cmd += ["--workdir", work, "--capture", "--report", report, "--"] + argv
        proc = subprocess.run(
            cmd,
            input=data,
            stdin=subprocess.DEVNULL if data is None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return _read_outcome(report, proc, diff_file)
    finally:
        shutil.rmtree(top, ignore_errors=True)
