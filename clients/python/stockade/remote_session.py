"""A session on `stockade serve` (`POST /v1/sessions`, `POST
/v1/sessions/{id}/exec`, `DELETE /v1/sessions/{id}`): the HTTP twin of
`stockade.Session`, made by `Client.session(...)`."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from . import _options
from ._results import ExecResult, Outcome, _content, _Gather
from .errors import StockadeConnectionError, from_answer

if TYPE_CHECKING:
    from ._options import Content
    from ._results import Chunk
    from .client import Client


class RemoteSession:
    """One session on the server: `exec`, `stream`, `close` (also as a
    context manager). Closing a `stream` iterator early interrupts its
    command. `info` is the server's answer to the creation (profile,
    limits in force, idle_timeout, …)."""

    def __init__(self, client: Client, info: dict[str, Any]) -> None:
        self._client = client
        self.info = info
        self.id: str = info["id"]
        self.workdir: Optional[str] = info.get("workdir")
        self.outcome: Optional[Outcome] = None
        self.end_reason: Optional[str] = None
        # Whether the last changes() listed fewer than were made.
        self.changes_truncated = False

    def _path(self, tail: str = "") -> str:
        return "/v1/sessions/%s%s" % (self.id, tail)

    @staticmethod
    def _exec_body(command: Any, timeout: Any, max_output: Any, stdin: Any) -> dict[str, Any]:
        # Read as the server reads them; it cuts them to its own maximum.
        return _options.exec_options(command, timeout, max_output, stdin, server=True)

    def exec(
        self,
        command: str,
        *,
        timeout: Union[int, float, str, None] = None,
        max_output: Union[int, str, None] = None,
        stdin: Optional[str] = None,
    ) -> ExecResult:
        """Run `command`; return its ExecResult once it ended."""
        body = self._exec_body(command, timeout, max_output, stdin)
        raw = self._client._json("POST", self._path("/exec"), body)
        out, err = raw.get("stdout", "").encode("utf-8"), raw.get("stderr", "").encode("utf-8")
        return ExecResult(raw, out, err, (out + err).decode("utf-8", "replace"))

    def stream(
        self,
        command: str,
        *,
        timeout: Union[int, float, str, None] = None,
        max_output: Union[int, str, None] = None,
        stdin: Optional[str] = None,
    ) -> Iterator[Union[Chunk, ExecResult]]:
        """Yield Chunk objects as `command` writes, then its ExecResult."""
        body = self._exec_body(command, timeout, max_output, stdin)
        conn, resp = self._client._request("POST", self._path("/exec"), body, accept="application/x-ndjson")
        gather = _Gather()
        try:
            for line in resp:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("event")
                if kind == "output":
                    yield gather.output(event)
                elif kind == "exit":
                    yield gather.result(event)
                    return
                elif kind == "end" or "error" in event:
                    status = 410 if kind == "end" else 500
                    raise from_answer(status, event if "error" in event else {"error": {
                        "code": "session_ended", "message": "the session ended: %s" % event.get("reason")}})
        except (OSError, http.client.HTTPException) as e:
            raise StockadeConnectionError("%s: %s" % (self._client.address, e)) from e
        finally:
            conn.close()

    def changes(self) -> list[dict[str, Any]]:
        """The workspace's changes so far (`POST .../changes`), as an
        Outcome's `changes` lists them; `changes_truncated` says whether
        more were made."""
        v = self._client._json("POST", self._path("/changes"), {})
        self.changes_truncated = bool(v.get("truncated"))
        return list(v.get("changes") or [])

    def checkpoint(self, name: str) -> None:
        """Name a snapshot of the workspace's upper layer."""
        self._client._json("POST", self._path("/checkpoint"), {"name": _options.text("name", name)})

    def rollback(self, name: str) -> None:
        """Make the workspace checkpoint `name`'s again (the session's
        jail starts afresh)."""
        self._client._json("POST", self._path("/rollback"), {"name": _options.text("name", name)})

    def commit(self) -> dict[str, Any]:
        """Apply the changes to the base directory, where the operator
        allows it (`--workspace-base NAME=DIR:commit`); what was applied."""
        return dict(self._client._json("POST", self._path("/commit"), {}).get("commit") or {})

    def close(self) -> Outcome:
        """End the session; return its Outcome (`end_reason` says why)."""
        if self.outcome is None:
            end = self._client._json("DELETE", self._path())
            self.end_reason = end.get("reason")
            self.outcome = Outcome(end.get("outcome") or {})
        return self.outcome

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "RemoteSession(id=%r)" % self.id


def create_body(
    profile: Optional[str],
    env: Optional[Mapping[str, str]],
    files: Optional[Mapping[str, Content]],
    limits: Optional[Mapping[str, Any]],
    idle_timeout: Union[int, float, str, None],
    workspace: Optional[dict[str, Any]] = None,
    secrets: Any = None,
) -> dict[str, Any]:
    """`POST /v1/sessions`'s body, each field checked as the server reads
    it: `limits` memory, cpus, pids; `idle_timeout` seconds above 0 (the
    server cuts it to its own)."""
    body: dict[str, Any] = {}
    profile = _options.profile("profile", profile, local=False)
    if profile is not None:
        body["profile"] = profile
    env = _options.env("env", env, server=True)
    if env:
        body["env"] = env
    files = _options.files("files", files)
    if files:
        body["files"] = {p: _content(c) for p, c in files.items()}
    limits = _options.limits("limits", limits, _options.SESSION_LIMITS, server=True)
    if limits:
        body["limits"] = limits
    if idle_timeout is not None:
        body["idle_timeout"] = _options.server_duration("idle_timeout", idle_timeout)
    if workspace is not None:
        body["workspace"] = workspace
    names = _options.secret_names("secrets", secrets)
    if names:
        body["secrets"] = names
    return body
