"""`stockade.Session`: one jail that outlives one command, over the local
`stockade session` (JSON lines on its stdin/stdout, protocol v1).

    with stockade.Session(profile="shell", memory="512m") as s:
        s.exec("cd /tmp && export X=1")
        r = s.exec("pwd; echo $X", timeout=10)
        print(r.exit_code, r.stdout_text)          # 0 "/tmp\\n1\\n"
        for event in s.stream("make test"):
            print(event)                           # Chunk(stdout, …) … then the ExecResult

Commands run one at a time with /bin/sh semantics; cwd and exported
variables carry over. The framing is the session agent's, so nothing a
command prints can forge the end of its output.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, Literal, Optional, Union, cast

from . import _options, local
from ._options import StrPath
from ._results import Chunk, Outcome
from ._results import ExecResult as ExecResult
from ._results import _Gather as _Gather
from .errors import SessionClosed, SessionError, SetupError


def session_flags(
    profile: Any,
    memory: Any,
    cpus: Any,
    pids: Any,
    network: Any,
    workdir: Any,
    binds: Any,
    ro_binds: Any,
    env: Any,
    idle_timeout: Any,
    overlay: Any = None,
    overlay_upper: Any = None,
    allow_hosts: Any = None,
    secrets: Any = None,
    secret_files: Any = None,
) -> list[str]:
    """`stockade session`'s flags for these options, each checked as the
    CLI reads it (InvalidOption / InvalidOptionType naming the keyword):
    nothing is passed on that the CLI would read another way."""
    profile = _options.profile("profile", profile)
    flags = [local.flag("--profile", profile)] if profile is not None else []
    for key, value in (("memory", memory), ("cpus", cpus), ("pids", pids)):
        if value is not None:
            flags += [local.flag(local.LIMIT_FLAGS[key], _options.RUN_LIMITS[key](key, value))]
    network = _options.network("network", network)
    if network is not None:
        flags += [local.flag("--network", network)]
    workdir = _options.optional_path("workdir", workdir)
    if workdir is not None:
        flags += [local.flag("--workdir", workdir)]
    for b in _options.strings("binds", binds, _options.path):
        flags += [local.flag("--bind", b)]
    for b in _options.strings("ro_binds", ro_binds, _options.path):
        flags += [local.flag("--ro-bind", b)]
    flags += local.env_flags(env)
    flags += local.egress_flags(allow_hosts, secrets, secret_files, network, env)
    if idle_timeout is not None:
        flags += [local.flag("--idle-timeout", _options.duration("idle_timeout", idle_timeout, zero=True, unit=""))]
    pairs = _options.overlays("overlay", overlay)
    flags += [local.flag("--overlay", "%s:%s" % p) for p in pairs]
    upper = _options.optional_path("overlay_upper", overlay_upper)
    if upper is not None:
        if not pairs:
            raise _options.bad("overlay_upper", "needs an overlay=")
        flags += [local.flag("--overlay-upper", upper)]
    return flags


def _pipe(f: Optional[IO[bytes]]) -> IO[bytes]:
    """One of the session process's pipes (all three are made PIPE)."""
    assert f is not None
    return f


class Session:
    """A `stockade session`: started here, ready when the constructor
    returns. Limits (`memory`, `cpus`, `pids`) cover the whole session;
    `workdir` is a host directory bound read-write as the jail's workdir
    (default: a fresh tmpfs); `binds`/`ro_binds` are `SRC[:DST]`; `env`
    the session's environment; `network` is `--network`'s "none",
    "loopback" or "host" (default: the profile's, none); `idle_timeout`
    seconds or a duration ("10m"; 0: never); `overlay` a list of (host
    directory, path in the jail) pairs shown copy-on-write (`changes()`,
    `checkpoint()`, `rollback()`, `commit()`), their upper layers kept in
    `overlay_upper` when given; `allow_hosts` the jail's egress allowlist
    (`--allow-host` entries); `secrets` {NAME: host or [hosts]}: every
    command sees a placeholder in $NAME, and stockade's proxy puts the
    value (this process's environment variable NAME, or the file
    `secret_files` names) into the requests sent to those hosts only;
    `flags` more `stockade session` flags (e.g. ["--egress-ca", FILE]).
    Each option is checked as `stockade session` reads
    it, before anything starts: InvalidOption (a ValueError) or
    InvalidOptionType (a TypeError) names the one at fault."""

    def __init__(
        self,
        *,
        profile: Optional[StrPath] = None,
        memory: Union[int, str, None] = None,
        cpus: Union[int, float, str, None] = None,
        pids: Union[int, str, None] = None,
        network: Optional[str] = None,
        workdir: Optional[StrPath] = None,
        binds: Sequence[StrPath] = (),
        ro_binds: Sequence[StrPath] = (),
        env: Optional[Mapping[str, str]] = None,
        idle_timeout: Union[int, float, str, None] = None,
        overlay: Optional[Sequence[tuple[StrPath, str]]] = None,
        overlay_upper: Optional[StrPath] = None,
        binary: Optional[StrPath] = None,
        flags: Sequence[str] = (),
        allow_hosts: Optional[Sequence[str]] = None,
        secrets: Optional[Mapping[str, Union[str, Sequence[str]]]] = None,
        secret_files: Optional[Mapping[str, StrPath]] = None,
    ) -> None:
        argv = session_flags(
            profile, memory, cpus, pids, network, workdir, binds, ro_binds, env, idle_timeout, overlay, overlay_upper,
            allow_hosts, secrets, secret_files,
        )
        argv += _options.flags("flags", flags)
        argv = [local.find_binary(binary), "session"] + argv
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        self._stderr: list[bytes] = []
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._running: Optional[str] = None
        self.outcome: Optional[Outcome] = None
        self.end_reason: Optional[str] = None
        # Whether the last changes() listed fewer than were made.
        self.changes_truncated = False
        ready = self._next_event()
        if ready is None or ready.get("event") != "ready":
            self._proc.kill()
            self._proc.wait()
            self._stderr_thread.join()
            raise SetupError("stockade session did not start: %s" % self._stderr_text()[-2000:])
        self.id: Optional[str] = ready.get("session")
        self.workdir: Optional[str] = ready.get("workdir")

    def _drain_stderr(self) -> None:
        for line in _pipe(self._proc.stderr):
            self._stderr.append(line)

    def _stderr_text(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace").strip()

    def _next_event(self) -> Optional[dict[str, Any]]:
        """The next event, or None at EOF (the session is gone)."""
        line = _pipe(self._proc.stdout).readline()
        if not line:
            return None
        try:
            event: dict[str, Any] = json.loads(line)
            return event
        except ValueError:
            raise SessionError("protocol", "not a JSON event: %r" % line[:200])

    def _send(self, request: dict[str, Any]) -> None:
        data = (json.dumps(request) + "\n").encode("utf-8")
        with self._write_lock:
            try:
                stdin = _pipe(self._proc.stdin)
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                raise self._gone()

    def _gone(self) -> SessionClosed:
        """The session ended: read what is left (the end event) and say so."""
        while self.outcome is None:
            try:
                event = self._next_event()
            except (SessionError, ValueError, OSError):
                break
            if event is None:
                break
            if event.get("event") == "end":
                self._ended(event)
        why = self.outcome.status if self.outcome else self._stderr_text()[-500:] or "stdout closed"
        return SessionClosed("the session has ended (%s)" % why, self.outcome)

    def _ended(self, event: dict[str, Any]) -> Outcome:
        self.outcome = outcome = Outcome(event.get("outcome") or {})
        self.end_reason = event.get("reason")
        return outcome

    def wait(self) -> Optional[Outcome]:
        """Block until the session ends by itself (idle timeout, a limit)
        and return its Outcome; `end_reason` says why."""
        if self._running is not None:
            raise SessionError("busy", "command %s is still running" % self._running)
        self._gone()
        return self.outcome

    def stream(
        self,
        command: str,
        *,
        timeout: Union[int, float, None] = None,
        max_output: Optional[int] = None,
        stdin: Optional[str] = None,
    ) -> Iterator[Union[Chunk, ExecResult]]:
        """Run `command`; yield Chunk objects as it writes, then its
        ExecResult last."""
        fields = _options.exec_options(command, timeout, max_output, stdin)
        if self._running is not None:
            raise SessionError("busy", "command %s is still running" % self._running)
        cid = "c%d" % next(self._ids)
        request = dict({"op": "exec", "id": cid}, **fields)
        self._running = cid
        try:
            self._send(request)
            yield from self._events(cid)
        finally:
            self._running = None

    def _events(self, cid: str) -> Iterator[Union[Chunk, ExecResult]]:
        gather = _Gather()
        while True:
            event = self._next_event()
            if event is None:
                raise self._gone()
            kind = event.get("event")
            if kind == "end":
                outcome = self._ended(event)
                raise SessionClosed("the session ended during the command (%s)" % outcome.status, outcome)
            if event.get("id") != cid and not (kind == "error" and event.get("id") is None):
                continue
            if kind == "output":
                yield gather.output(event)
            elif kind == "exit":
                yield gather.result(event)
                return
            elif kind == "error":
                e = event.get("error") or {}
                raise SessionError(e.get("code", "error"), e.get("message", ""))

    def exec(
        self,
        command: str,
        *,
        timeout: Union[int, float, None] = None,
        max_output: Optional[int] = None,
        stdin: Optional[str] = None,
    ) -> ExecResult:
        """Run `command` (shell syntax) in the session; return its
        ExecResult once it ended. `timeout` seconds (the session's default
        60), `max_output` bytes kept, `stdin` text."""
        result = None
        for event in self.stream(command, timeout=timeout, max_output=max_output, stdin=stdin):
            result = event
        # The last event is the ExecResult (or stream raised).
        return cast(ExecResult, result)

    def _workspace(self, op: str, **fields: Any) -> dict[str, Any]:
        """A workspace request answered by the front end; its event."""
        if self._running is not None:
            raise SessionError("busy", "command %s is still running" % self._running)
        wid = "w%d" % next(self._ids)
        self._send(dict({"op": op, "id": wid}, **fields))
        while True:
            event = self._next_event()
            if event is None:
                raise self._gone()
            kind = event.get("event")
            if kind == "end":
                outcome = self._ended(event)
                raise SessionClosed("the session ended during %s (%s)" % (op, outcome.status), outcome)
            if event.get("id") != wid:
                continue
            if kind == "error":
                e = event.get("error") or {}
                raise SessionError(e.get("code", "error"), e.get("message", ""))
            return event

    def changes(self) -> list[dict[str, Any]]:
        """The overlays' changes so far, as an Outcome's `changes` lists
        them ({"path", "kind", "type", "size", "sha256", "target",
        "mode"}); `changes_truncated` says whether more were made."""
        event = self._workspace("changes")
        self.changes_truncated = bool(event.get("truncated"))
        return list(event.get("changes") or [])

    def checkpoint(self, name: str) -> None:
        """Name a snapshot of the overlays' upper layers (the same name
        again replaces it)."""
        self._workspace("checkpoint", name=_options.text("name", name))

    def rollback(self, name: str) -> None:
        """Make the overlays checkpoint `name`'s again. The session's jail
        starts afresh (its processes, cwd, environment, /tmp and workdir);
        the overlays hold the checkpoint's changes."""
        self._workspace("rollback", name=_options.text("name", name))

    def commit(self) -> dict[str, Any]:
        """Apply the changes to the host directories (each file replaced
        atomically, nothing written through a symlink or outside them);
        return what was applied ({"applied", "applied_count", "refused"}).
        The jail starts afresh, and the checkpoints are forgotten."""
        return dict(self._workspace("commit").get("commit") or {})

    def interrupt(self) -> None:
        """SIGINT to the running command's process group (SIGKILL after a
        grace); the session lives on. Safe from another thread."""
        cid = self._running
        if cid is not None:
            self._send({"op": "interrupt", "id": cid})

    def close(self) -> Optional[Outcome]:
        """End the session (a running command is killed); return its
        Outcome."""
        if self._proc.poll() is None and self.outcome is None:
            try:
                self._send({"op": "close"})
                _pipe(self._proc.stdin).close()
            except SessionClosed:
                pass
            self._gone()
        self._proc.wait()
        self._stderr_thread.join()
        for f in (self._proc.stdout, self._proc.stderr):
            _pipe(f).close()
        return self.outcome

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None and self.outcome is None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "Session(id=%r, workdir=%r)" % (self.id, self.workdir)
