"""The client: HTTP/1.1 over a unix socket or TCP, stdlib only."""

from __future__ import annotations

import base64
import http.client
import json
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from . import _options
from ._options import Content
from ._results import Chunk as Chunk
from ._results import Outcome as Outcome
from ._results import _bytes as _bytes
from ._results import _content as _content
from .errors import StockadeConnectionError, StockadeError, from_answer
from .local import command
from .remote_session import RemoteSession, create_body


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                s.settimeout(self.timeout)
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """A `stockade serve` server: `"unix:/path/to.sock"` or
    `"http://host:port"`; `token` for its bearer token."""

    def __init__(
        self,
        address: str = "unix:/run/stockade/stockade.sock",
        token: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        _options.text("address", address)
        if token is not None:
            _options.text("token", token)
            if not all(" " < c <= "~" for c in token):
                raise _options.bad("token", "a bearer token is printable ASCII without spaces")
        if timeout is not None:
            _options.seconds("timeout", timeout)
        self.address = address
        self.token = token
        self.timeout = timeout
        if address.startswith("unix:") and len(address) > len("unix:"):
            self._unix: Optional[str] = address[len("unix:"):]
        else:
            try:
                u = urlsplit(address)
                port = u.port
            except ValueError:
                u, port = None, None
            if u is None or u.scheme != "http" or not u.hostname or u.path not in ("", "/") or u.query or u.fragment:
                raise _options.bad("address", "expected unix:/PATH or http://HOST:PORT, got %r" % address)
            self._unix = None
            self._host, self._port = u.hostname, port or 80

    def _connection(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout=self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _request(
        self, method: str, path: str, body: Any = None, accept: str = "application/json"
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send; return (connection, response) for a 2xx, else raise."""
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        try:
            try:
                conn.request(method, path, body=data, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (413) before reading a large body
                # and close: its answer is still there to read.
                pass
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise StockadeConnectionError("%s: %s" % (self.address, e)) from e
        if resp.status >= 400:
            text = resp.read()
            conn.close()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            retry = resp.getheader("Retry-After")
            raise from_answer(resp.status, parsed, int(retry) if retry and retry.isdigit() else None)
        return conn, resp

    @staticmethod
    def _workspace(overlay: Any, commit: Any, diff: Any) -> Optional[dict[str, Any]]:
        """The request's `workspace`: `overlay` is the name of one of the
        server's --workspace-base, or a (name, path in the jail) pair."""
        when = _options.commit("commit", commit)
        diff = _options.boolean("diff", diff)
        if overlay is None:
            if when != "never" or diff:
                raise _options.bad("commit" if when != "never" else "diff", "needs an overlay=")
            return None
        if isinstance(overlay, (list, tuple)) and len(overlay) == 2:
            ws: dict[str, Any] = {
                "base": _options.text("overlay[0]", overlay[0]),
                "at": _options.text("overlay[1]", overlay[1]),
            }
        elif isinstance(overlay, str):
            ws = {"base": _options.text("overlay", overlay)}
        else:
            raise _options.bad_type("overlay", "a workspace base's name or a (name, inner) pair", overlay)
        if when != "never":
            ws["commit"] = when
        if diff:
            ws["diff"] = True
        return ws

    @staticmethod
    def _body(
        argv: Any, code: Any, stdin: Any, files: Any, env: Any, limits: Any, profile: Any, secrets: Any = None
    ) -> dict[str, Any]:
        """The run request, each field checked as the server reads it."""
        argv, profile = command(argv, code, profile, server=True)
        body: dict[str, Any] = {"argv": argv}
        if profile is not None:
            body["profile"] = profile
        stdin = _options.content("stdin", stdin)
        if stdin is not None:
            body["stdin"] = _content(stdin)
        files = _options.files("files", files)
        if files:
            body["files"] = {p: _content(c) for p, c in files.items()}
        env = _options.env("env", env, server=True)
        if env:
            body["env"] = env
        limits = _options.limits("limits", limits, server=True)
        if limits:
            body["limits"] = limits
        names = _options.secret_names("secrets", secrets)
        if names:
            body["secrets"] = names
        return body

    def run(
        self,
        argv: Optional[Sequence[str]] = None,
        *,
        code: Optional[str] = None,
        stdin: Optional[Content] = None,
        files: Optional[Mapping[str, Content]] = None,
        env: Optional[Mapping[str, str]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        profile: Optional[str] = None,
        overlay: Union[str, tuple[str, str], None] = None,
        commit: Optional[str] = None,
        diff: bool = False,
        secrets: Optional[Sequence[str]] = None,
    ) -> Outcome:
        """Run `argv` (or Python `code` under the `python` profile) in a
        fresh jail; return its Outcome once it ended. `overlay` names one
        of the server's workspace bases (`--workspace-base NAME=DIR`), or
        is a (name, path in the jail) pair (default path /work/project): a
        copy-on-write view whose changes the Outcome lists (`changes`;
        `diff=True` adds `Outcome.diff`); `commit` ("success", "always")
        applies them to DIR where the operator allows it. `secrets` names
        secrets the operator declared (`stockade serve --secret NAME:HOST
        --secret-file NAME=PATH`): the jail's variable NAME holds a
        placeholder, and the value goes into the requests sent to the
        secret's hosts only (the Outcome's `applied["secrets"]` lists
        them); a request never carries a value."""
        body = self._body(argv, code, stdin, files, env, limits, profile, secrets)
        ws = self._workspace(overlay, commit, diff)
        if ws is not None:
            body["workspace"] = ws
        conn, resp = self._request("POST", "/v1/runs", body)
        try:
            return Outcome(json.loads(resp.read()))
        except (OSError, http.client.HTTPException) as e:
            raise StockadeConnectionError("%s: %s" % (self.address, e)) from e
        finally:
            conn.close()

    def stream(
        self,
        argv: Optional[Sequence[str]] = None,
        *,
        code: Optional[str] = None,
        stdin: Optional[Content] = None,
        files: Optional[Mapping[str, Content]] = None,
        env: Optional[Mapping[str, str]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        profile: Optional[str] = None,
        overlay: Union[str, tuple[str, str], None] = None,
        commit: Optional[str] = None,
        diff: bool = False,
        secrets: Optional[Sequence[str]] = None,
    ) -> Iterator[Union[Chunk, Outcome]]:
        """Like run(), but yield Chunk objects as the payload writes, then
        the Outcome last. Closing the iterator early kills the jail."""
        body = self._body(argv, code, stdin, files, env, limits, profile, secrets)
        ws = self._workspace(overlay, commit, diff)
        if ws is not None:
            body["workspace"] = ws
        conn, resp = self._request("POST", "/v1/runs", body, accept="application/x-ndjson")
        try:
            for line in resp:
                if not line.strip():
                    continue
                v = json.loads(line)
                for name in ("stdout", "stderr"):
                    if name in v and "status" not in v:
                        data = v[name]
                        raw = base64.b64decode(data) if v.get("encoding") == "base64" else data.encode("utf-8")
                        yield Chunk(name, raw)
                        break
                else:
                    if "error" in v and "status" not in v:
                        raise from_answer(500, v)
                    yield Outcome(v)
        except (OSError, http.client.HTTPException) as e:
            raise StockadeConnectionError("%s: %s" % (self.address, e)) from e
        finally:
            conn.close()

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        conn, resp = self._request(method, path, body)
        try:
            return json.loads(resp.read())
        except (OSError, http.client.HTTPException) as e:
            raise StockadeConnectionError("%s: %s" % (self.address, e)) from e
        finally:
            conn.close()

    def session(
        self,
        *,
        profile: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        files: Optional[Mapping[str, Content]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        idle_timeout: Union[int, float, str, None] = None,
        overlay: Union[str, tuple[str, str], None] = None,
        secrets: Optional[Sequence[str]] = None,
    ) -> RemoteSession:
        """Open a session on the server (one jail for many commands):
        `limits` {"memory", "cpus", "pids"}; `overlay` a workspace base's
        name, or a (name, path in the jail) pair (the session's
        `changes()`, `checkpoint()`, `rollback()`, `commit()`); `secrets`
        the names of secrets the operator declared, as for run(); returns
        a RemoteSession (its `info["secrets"]` lists those bound)."""
        ws = self._workspace(overlay, None, False)
        body = create_body(profile, env, files, limits, idle_timeout, ws, secrets)
        return RemoteSession(self, self._json("POST", "/v1/sessions", body))

    def health(self) -> Any:
        conn, resp = self._request("GET", "/healthz")
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    def ready(self) -> bool:
        """True when the server takes runs (pools warm)."""
        try:
            conn, resp = self._request("GET", "/readyz")
        except StockadeError:
            return False
        conn.close()
        return True

    def metrics(self) -> str:
        conn, resp = self._request("GET", "/metrics", accept="text/plain")
        try:
            return resp.read().decode("utf-8")
        finally:
            conn.close()
