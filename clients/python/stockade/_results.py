"""What runs and session commands give back (`Outcome`, `Chunk`,
`ExecResult`) and the wire helpers they share, in a module of their own:
`client`, `local`, `session` and `remote_session` all import it, and it
imports none of them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Optional, Union


def _bytes(captured: Any) -> bytes:
    """Bytes of a captured stream (`{"encoding", "data"}`) or b""."""
    if not captured:
        return b""
    if captured.get("encoding") == "base64":
        return base64.b64decode(captured["data"])
    data: str = captured.get("data", "")
    return data.encode("utf-8")


def _content(value: object) -> Union[str, dict[str, str]]:
    """str -> text; bytes -> {"base64": …}."""
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, str):
        return value
    raise TypeError("expected str or bytes, got %s" % type(value).__name__)


class _Ended:
    """What an ended run and an ended command both answer."""

    status: Optional[str]
    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        """Exited on its own with code 0."""
        return self.status == "exited" and self.exit_code == 0

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@dataclass(frozen=True, eq=False)
class Outcome(_Ended):
    """How a run ended: the outcome JSON of `stockade run`, with captured
    output as bytes. `raw` is the whole answer; the other fields are read
    from it. Frozen: a result is what the jail reported, not a record to
    edit (compared by identity: `raw` is a dict)."""

    raw: dict[str, Any]
    status: Optional[str] = field(init=False)
    exit_code: Optional[int] = field(init=False)
    signal: Optional[int] = field(init=False)
    error: Optional[str] = field(init=False)
    # The failed setup step in parts ({"step", "path", "errno", "value"},
    # each where stockade knows it), beside `error`'s one line; None when
    # no step failed or the run was refused before the jail.
    setup: Optional[dict[str, Any]] = field(init=False)
    usage: dict[str, Any] = field(init=False)
    limits: dict[str, Any] = field(init=False)
    layers: dict[str, Any] = field(init=False)
    applied: dict[str, Any] = field(init=False)
    stdout: bytes = field(init=False)
    stderr: bytes = field(init=False)
    truncated: bool = field(init=False)
    # What was refused ({"kind": "network" | "seccomp" | "landlock" |
    # "mask", ..., "count": N}), the kinds that could not be recorded
    # ({kind: why}) and the refusals counted but not listed ({kind: N}).
    denials: list[Any] = field(init=False)
    denials_unrecorded: dict[str, Any] = field(init=False)
    denials_more: dict[str, Any] = field(init=False)
    # An overlay's changes ([{"path", "kind", "type", "size", "sha256",
    # "target", "mode"}]; None without an overlay), whether more were made
    # than listed, and what a commit applied ({"applied", "refused", ...};
    # None when none was asked).
    changes: Optional[list[dict[str, Any]]] = field(init=False)
    changes_truncated: bool = field(init=False)
    commit: Optional[dict[str, Any]] = field(init=False)
    # The changes' unified diff when asked (diff=True), else None.
    diff: Optional[str] = None

    def __post_init__(self) -> None:
        raw = self.raw
        _set(self, "status", raw.get("status"))
        _set(self, "exit_code", raw.get("exit_code"))
        _set(self, "signal", raw.get("signal"))
        _set(self, "error", raw.get("error"))
        _set(self, "setup", raw.get("setup"))
        _set(self, "usage", raw.get("usage", {}))
        _set(self, "limits", raw.get("limits", {}))
        _set(self, "layers", raw.get("layers", {}))
        _set(self, "applied", raw.get("applied", {}))
        _set(self, "stdout", _bytes(raw.get("stdout")))
        _set(self, "stderr", _bytes(raw.get("stderr")))
        _set(
            self,
            "truncated",
            bool((raw.get("stdout") or {}).get("truncated") or (raw.get("stderr") or {}).get("truncated")),
        )
        _set(self, "denials", raw.get("denials", []))
        _set(self, "denials_unrecorded", raw.get("denials_unrecorded", {}))
        _set(self, "denials_more", raw.get("denials_more", {}))
        _set(self, "changes", raw.get("changes"))
        _set(self, "changes_truncated", bool(raw.get("changes_truncated", False)))
        _set(self, "commit", raw.get("commit"))
        if self.diff is None:
            _set(self, "diff", (raw.get("workspace") or {}).get("diff"))

    def __repr__(self) -> str:
        return "Outcome(status=%r, exit_code=%r)" % (self.status, self.exit_code)


@dataclass(frozen=True)
class Chunk:
    """A piece of output as the payload wrote it (streaming)."""

    stream: Optional[str]
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return "Chunk(%s, %r)" % (self.stream, self.data)


@dataclass(frozen=True, eq=False)
class ExecResult(_Ended):
    """How one command ended: `status` (exited, signaled, timeout,
    interrupted), `exit_code`, `signal`, `stdout`/`stderr` (bytes),
    `output` (both, in the order written, as text), `truncated`,
    `duration_ms`; `raw` is the exit event. Frozen, as `Outcome` is."""

    raw: dict[str, Any]
    stdout: bytes
    stderr: bytes
    output: str
    id: Optional[str] = field(init=False)
    status: Optional[str] = field(init=False)
    exit_code: Optional[int] = field(init=False)
    signal: Optional[int] = field(init=False)
    truncated: bool = field(init=False)
    duration_ms: Optional[int] = field(init=False)

    def __post_init__(self) -> None:
        raw = self.raw
        _set(self, "id", raw.get("id"))
        _set(self, "status", raw.get("status"))
        _set(self, "exit_code", raw.get("code"))
        _set(self, "signal", raw.get("signal"))
        _set(self, "truncated", bool(raw.get("truncated")))
        _set(self, "duration_ms", raw.get("duration_ms"))

    def __repr__(self) -> str:
        return "ExecResult(status=%r, exit_code=%r)" % (self.status, self.exit_code)


def _set(obj: object, name: str, value: object) -> None:
    """A derived field of a frozen result, set once while it is made."""
    object.__setattr__(obj, name, value)


class _Gather:
    """One command's events as the caller sees them: each `output` event
    as a Chunk (its bytes kept per stream and in order), the `exit` event
    as the ExecResult of all of them. Shared with `RemoteSession`."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.both: list[bytes] = []

    def output(self, event: dict[str, Any]) -> Chunk:
        data = event.get("data")
        raw = base64.b64decode(event["data_b64"]) if data is None else data.encode("utf-8")
        (self.out if event.get("stream") == "stdout" else self.err).append(raw)
        self.both.append(raw)
        return Chunk(event.get("stream"), raw)

    def result(self, event: dict[str, Any]) -> ExecResult:
        text = b"".join(self.both).decode("utf-8", "replace")
        return ExecResult(event, b"".join(self.out), b"".join(self.err), text)
