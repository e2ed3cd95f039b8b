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

import base64
import shlex
import threading

from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from . import _options
from .errors import InvalidOption, SessionError
from .remote_session import RemoteSession
from .session import Session

DEFAULT_TIMEOUT = 120
MAX_OUTPUT = 1 << 20
# A downloaded file travels base64 on stdout: up to 48 MiB.
MAX_DOWNLOAD = 64 << 20

_ERRORS = (
    ("No such file", "file_not_found"),
    ("nonexistent", "file_not_found"),
    ("Not a directory", "file_not_found"),
    ("Permission denied", "permission_denied"),
    ("Read-only file system", "permission_denied"),
    ("Is a directory", "is_directory"),
)


def _file_error(text):
    for needle, code in _ERRORS:
        if needle in text:
            return code
    return text.strip()[-300:] or "failed"


def _valid(path):
    return isinstance(path, str) and path and "\0" not in path and "\n" not in path


class StockadeSandbox(BaseSandbox):
    """A Deep Agents sandbox in one stockade jail. Give a running
    `session`, or the `stockade.Session` arguments (profile, memory,
    cpus, pids, network, workdir, binds, env, binary, …) to start one;
    `timeout` is execute's default, `max_output` the bytes of output
    kept per command. Calls are serialised (a session runs one command
    at a time). `close()` ends a session this sandbox started."""

    def __init__(self, session=None, *, timeout=DEFAULT_TIMEOUT, max_output=MAX_OUTPUT, **session_args):
        if session is not None and session_args:
            raise _options.bad("session", "give a session or Session arguments, not both")
        if session is not None and not isinstance(session, (Session, RemoteSession)):
            raise _options.bad_type("session", "a stockade.Session or RemoteSession", session)
        self._most_timeout = None if isinstance(session, RemoteSession) else _options.MAX_EXEC_TIMEOUT
        # Checked as the session's exec reads them, before a session starts.
        self._timeout = _options.seconds("timeout", timeout, most=self._most_timeout)
        self._max_output = _options.byte_count("max_output", max_output)
        self._own = session is None
        self._session = session if session is not None else Session(**session_args)
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def session(self):
        return self._session

    def _run(self, command, timeout=None, max_output=None, stdin=None):
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
        output = r.stdout_text
        if r.stderr:
            output += "".join("[stderr] %s\n" % line for line in r.stderr_text.rstrip("\n").split("\n"))
        output = output or "<no output>"
        if r.truncated:
            output = "%s\n\n... Output truncated at %d bytes." % (output.rstrip(), self._max_output)
        if r.status == "timeout":
            limit = self._timeout if timeout is None else timeout
            return ExecuteResponse(
                output="%s\n\nError: Command timed out after %s seconds." % (output.rstrip(), limit),
                exit_code=124,
                truncated=r.truncated,
            )
        if r.status == "interrupted":
            output = "%s\n\nInterrupted." % output.rstrip()
        code = r.exit_code if r.exit_code is not None else (128 + r.signal if r.signal else None)
        if code not in (0, None):
            output = "%s\n\nExit code: %s" % (output.rstrip(), code)
        return ExecuteResponse(output=output, exit_code=code, truncated=r.truncated)

    def upload_files(self, files):
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

    def download_files(self, paths):
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

    def close(self):
        """End the session if this sandbox started it; return its Outcome."""
        if self._own:
            return self._session.close()
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["StockadeSandbox"]
