"""Deep Agents: `StockadeSandbox`, a sandbox backend (`BaseSandbox`) on a
`stockade.Session`: `execute` runs in the session's jail (cwd and
environment persist), files move in and out through the session. Needs
the `deepagents` extra:

    pip install './clients/python[deepagents]'

    from deepagents import create_deep_agent
    from stockade.deepagents import StockadeSandbox

    with StockadeSandbox(memory="1g") as sandbox:
        agent = create_deep_agent(model=..., backend=sandbox)
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import subprocess
import threading
from typing import Any, Literal, Optional, Union, cast

from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from . import _options
from ._results import Outcome
from .errors import InvalidOption, SessionError
from .local import find_binary
from .remote_session import RemoteSession
from .session import ExecResult, Session

DEFAULT_TIMEOUT = 120
MAX_OUTPUT = 1 << 20
# A downloaded file travels base64 on stdout: up to 48 MiB.
MAX_DOWNLOAD = 64 << 20
# The host uid a jail started by root maps to.
NOBODY = 65534

_ERRORS = (
    ("No such file", "file_not_found"),
    ("nonexistent", "file_not_found"),
    ("Not a directory", "file_not_found"),
    ("Permission denied", "permission_denied"),
    ("Read-only file system", "permission_denied"),
    ("Is a directory", "is_directory"),
)


def _file_error(text: str) -> str:
    for needle, code in _ERRORS:
        if needle in text:
            return code
    return text.strip()[-300:] or "failed"


def _valid(path: object) -> object:
    return isinstance(path, str) and path and "\0" not in path and "\n" not in path


def _output(r: ExecResult, timeout: object) -> str:
    """What Deep Agents reads of a command: its stdout, then its stderr
    as `[stderr]` lines (as LocalShellBackend gives them). Empty output
    stays empty and the exit code and truncation are left to
    `exit_code` and `truncated`: BaseSandbox parses this text (grep,
    glob, ls, read, edit) and the execute tool adds its own
    `[Command failed with exit code N]` and truncation lines. Only what
    no field carries is said here: a timeout, an interrupt."""
    output = r.stdout_text
    if r.stderr:
        if output and not output.endswith("\n"):
            output += "\n"
        output += "".join("[stderr] %s\n" % line for line in r.stderr_text.rstrip("\n").split("\n"))
    if r.status == "timeout":
        output += "%sError: Command timed out after %s seconds." % ("\n" if output else "", timeout)
    elif r.status == "interrupted":
        output += "%sInterrupted." % ("\n" if output else "")
    return output


def _exit_code(r: ExecResult) -> Optional[int]:
    """The command's exit code; 124 for a timeout, 128+N for signal N."""
    if r.status == "timeout":
        return 124
    if r.exit_code is not None:
        return r.exit_code
    return 128 + r.signal if r.signal else None


def _userns_available(binary: str) -> bool:
    """Whether this host lets stockade make user namespaces (`stockade
    check --json`); without them each jail runs as a leased uid."""
    probe = subprocess.run([binary, "check", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        return bool(json.loads(probe.stdout)["layers"]["userns"]["available"])
    except (ValueError, KeyError, TypeError):
        return True


def _hand_to_jail(workdir: str, binary: str) -> None:
    """Make a root caller's `workdir` tree writable by the jail's user,
    which is never host root: handed to uid 65534 (the user a root
    caller's jail maps to), or, where user namespaces are refused and
    each jail runs as a leased uid, opened to every uid (dirs 0777,
    files +rw for all). Symlinks are left as they are and not followed.
    A tree that cannot be handed over raises OSError (never a silently
    read-only workdir)."""
    if os.geteuid() != 0:
        return
    userns = _userns_available(binary)

    def hand(path: str, is_dir: bool) -> None:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return
        if userns:
            os.lchown(path, NOBODY, NOBODY)
        else:
            mode = stat.S_IMODE(st.st_mode)
            os.chmod(path, 0o777 if is_dir else mode | 0o666)

    hand(workdir, True)
    for top, dirs, files in os.walk(workdir):
        for name in dirs:
            hand(os.path.join(top, name), True)
        for name in files:
            hand(os.path.join(top, name), False)


class StockadeSandbox(BaseSandbox):
    """A Deep Agents sandbox in one stockade jail. Give a running
    `session`, or the `stockade.Session` arguments (profile, memory,
    cpus, pids, network, workdir, binds, env, binary, `allow_hosts`,
    `secrets`, `secret_files`, …) to start one (with `secrets`, the
    agent's commands see placeholders and only the secrets' hosts get the
    values; on a server: `StockadeSandbox(client.session(secrets=[NAME]))`);
    `timeout` is execute's default, `max_output` the bytes of output
    kept per command. Calls are serialised (a session runs one command
    at a time). `close()` ends a session this sandbox started. With
    `overlay=[(host_dir, inner)]` the agent works on a copy-on-write view
    of host_dir: `changes()` lists what it did, `commit()` applies it,
    `checkpoint(name)` / `rollback(name)` undo.

    Started by root, a `workdir=` tree is handed to the jail's user so
    that the jail can write it (chowned to uid 65534; where user
    namespaces are refused, opened to every uid, as each jail runs as a
    leased uid): the jail never runs as host root."""

    def __init__(
        self,
        session: Union[Session, RemoteSession, None] = None,
        *,
        timeout: Union[int, float] = DEFAULT_TIMEOUT,
        max_output: int = MAX_OUTPUT,
        **session_args: Any,
    ) -> None:
        if session is not None and session_args:
            raise _options.bad("session", "give a session or Session arguments, not both")
        if session is not None and not isinstance(session, (Session, RemoteSession)):
            raise _options.bad_type("session", "a stockade.Session or RemoteSession", session)
        self._most_timeout = None if isinstance(session, RemoteSession) else _options.MAX_EXEC_TIMEOUT
        # Checked as the session's exec reads them, before a session starts.
        self._timeout = _options.seconds("timeout", timeout, most=self._most_timeout)
        self._max_output = _options.byte_count("max_output", max_output)
        self._own = session is None
        if session is None and session_args.get("workdir") is not None:
            # Checked as Session checks it, then handed to the jail's user.
            workdir = _options.path("workdir", session_args["workdir"])
            host = workdir if os.path.exists(workdir) else workdir.split(":", 1)[0]
            if os.path.isdir(host):
                _hand_to_jail(host, find_binary(session_args.get("binary")))
        self._session: Union[Session, RemoteSession] = session if session is not None else Session(**session_args)
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return cast(str, self._session.id)

    @property
    def session(self) -> Union[Session, RemoteSession]:
        return self._session

    def _run(
        self,
        command: str,
        timeout: Union[int, float, None] = None,
        max_output: Optional[int] = None,
        stdin: Optional[str] = None,
    ) -> ExecResult:
        timeout = self._timeout if timeout is None else timeout
        max_output = self._max_output if max_output is None else max_output
        with self._lock:
            return self._session.exec(command, timeout=timeout, max_output=max_output, stdin=stdin)

    def execute(self, command: str, *, timeout: "int | None" = None) -> ExecuteResponse:
        if not command or not isinstance(command, str):
            return ExecuteResponse(output="Error: Command must be a non-empty string.", exit_code=1)
        try:
            _options.utf8_text("command", command)
        except InvalidOption as e:
            return ExecuteResponse(output="Error: %s" % e.message, exit_code=1)
        if timeout is not None:
            _options.seconds("timeout", timeout, most=self._most_timeout)
        try:
            r = self._run(command, timeout=timeout)
        except SessionError as e:
            return ExecuteResponse(output="Error: %s" % e.message, exit_code=1)
        return ExecuteResponse(output=_output(r, self._timeout if timeout is None else timeout),
                               exit_code=_exit_code(r), truncated=r.truncated)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, content in files:
            if not _valid(path):
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            q = shlex.quote(path)
            script = 'mkdir -p -- "$(dirname -- %s)" && base64 -d > %s' % (q, q)
            try:
                r = self._run(script, stdin=base64.b64encode(bytes(content)).decode("ascii"))
            except SessionError as e:
                responses.append(FileUploadResponse(path=path, error=e.message))
                continue
            responses.append(FileUploadResponse(path=path, error=None if r.ok else _file_error(r.stderr_text)))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            if not _valid(path):
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            q = shlex.quote(path)
            script = "if [ -d %s ]; then echo 'Is a directory' >&2; exit 1; fi; base64 -w0 < %s" % (q, q)
            try:
                r = self._run(script, max_output=MAX_DOWNLOAD)
            except SessionError as e:
                responses.append(FileDownloadResponse(path=path, error=e.message))
                continue
            if not r.ok:
                responses.append(FileDownloadResponse(path=path, error=_file_error(r.stderr_text)))
            elif r.truncated:
                responses.append(FileDownloadResponse(path=path, error="file too large to download"))
            else:
                responses.append(FileDownloadResponse(path=path, content=base64.b64decode(r.stdout)))
        return responses

    def changes(self) -> list[dict[str, Any]]:
        """The session's overlay changes so far (`Session(overlay=…)`, or a
        RemoteSession's workspace): a person reviews them, then `commit()`
        or `rollback()`."""
        with self._lock:
            return self._session.changes()

    def checkpoint(self, name: str) -> None:
        """Name a snapshot of the overlay (see `Session.checkpoint`)."""
        with self._lock:
            self._session.checkpoint(name)

    def rollback(self, name: str) -> None:
        """Back to checkpoint `name` (the jail starts afresh)."""
        with self._lock:
            self._session.rollback(name)

    def commit(self) -> dict[str, Any]:
        """Apply the overlay's changes to the host directory."""
        with self._lock:
            return self._session.commit()

    def close(self) -> Optional[Outcome]:
        """End the session if this sandbox started it; return its Outcome."""
        if self._own:
            return self._session.close()
        return None

    def __enter__(self) -> StockadeSandbox:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False


__all__ = ["StockadeSandbox"]
