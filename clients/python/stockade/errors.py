"""One exception per error code of `stockade serve`; `LocalError` and its
subclasses for what the package itself or the local `stockade` refuses
(no server, so no HTTP status). All are `StockadeError`s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ._results import Outcome


class StockadeError(Exception):
    """An error answer: `status` (HTTP; None for a `LocalError`), `code`,
    `message`, and `field` (the request field at fault, for 400)."""

    def __init__(
        self, status: Optional[int], code: str, message: str, field: Optional[str] = None, retry_after: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return "%s(%r, field=%r)" % (type(self).__name__, self.message, self.field)


class BadRequest(StockadeError):
    """400: a bad request field; `field` names it."""


class LocalError(StockadeError):
    """Raised here, not answered by a server: by the package before it
    starts a jail or sends a request, or by the local `stockade` binary.
    `status` is None (there is no HTTP answer); `code` says what
    happened."""

    def __init__(self, code: str, message: str, field: Optional[str] = None) -> None:
        super().__init__(None, code, message, field)


class InvalidOption(LocalError, BadRequest, ValueError):
    """A keyword option the package refuses before it starts a jail or
    sends a request: a value `stockade` would not take, or not with the
    same meaning. `field` names it (`network`, `limits.memory`, `env.X`).
    A `LocalError` (`status` None, `code` "bad_request"), and still a
    `BadRequest` for callers that catch that."""


class InvalidOptionType(InvalidOption, TypeError):
    """An option of the wrong type (a bool for a number, one string for a
    list, …); also an `InvalidOption`."""


class Unauthorized(StockadeError):
    """401: no valid bearer token."""


class NotFound(StockadeError):
    """404: no such path."""


class UnknownProfile(NotFound):
    """404: the profile is not among the server's --profiles."""


class MethodNotAllowed(StockadeError):
    """405."""


class PayloadTooLarge(StockadeError):
    """413: the request body or its file count is over the server's bound."""


class QueueFull(StockadeError):
    """429: every run slot is busy and the queue is full; `retry_after`."""


class ShuttingDown(StockadeError):
    """503: the server is draining; `retry_after`."""


class Busy(StockadeError):
    """409: the session runs a command; commands run one at a time."""


class SessionEnded(StockadeError):
    """410: the session ended while (or before) the command ran."""


class TooManySessions(StockadeError):
    """429: the server's --max-sessions are open."""


class InternalError(StockadeError):
    """500: the server could not start the jail."""


class StockadeConnectionError(StockadeError, ConnectionError):
    """The server could not be reached, or the connection broke."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "connection", message)


_BY_CODE: dict[str, type[StockadeError]] = {
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "unknown_profile": UnknownProfile,
    "method_not_allowed": MethodNotAllowed,
    "payload_too_large": PayloadTooLarge,
    "queue_full": QueueFull,
    "shutting_down": ShuttingDown,
    "internal": InternalError,
    "busy": Busy,
    "session_ended": SessionEnded,
    "too_many_sessions": TooManySessions,
}


def from_answer(status: int, body: Any, retry_after: Optional[int] = None) -> StockadeError:
    """The exception for an error answer (`body` parsed, or None)."""
    err = (body or {}).get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return StockadeError(status, "http_%d" % status, "HTTP %d" % status)
    code = err.get("code", "http_%d" % status)
    cls = _BY_CODE.get(code, StockadeError)
    return cls(status, code, err.get("message", ""), err.get("field"), retry_after)


class StockadeNotFound(LocalError):
    """The local `stockade` binary is not there (give `binary=`, set
    STOCKADE_BIN, or put it on PATH)."""

    def __init__(self, message: str) -> None:
        super().__init__("not_found", message)


class SetupError(LocalError):
    """The local `stockade` could not set the jail up (exit 125): a bad
    flag, profile or limit, or a layer the host lacks. `outcome` is the
    run's Outcome when stockade wrote one."""

    def __init__(self, message: str, outcome: Optional[Outcome] = None) -> None:
        super().__init__("setup_error", message)
        self.outcome = outcome


class SessionError(LocalError):
    """A `stockade session` answered an error event (`code`: busy,
    bad_request, …), or the session is gone."""

    def __init__(self, code: str, message: str, outcome: Optional[Outcome] = None) -> None:
        super().__init__(code, message)
        self.outcome = outcome


class SessionClosed(SessionError):
    """The session ended (closed, idle timeout, or a limit ended it);
    `outcome` is the session's Outcome when it said one."""

    def __init__(self, message: str, outcome: Optional[Outcome] = None) -> None:
        super().__init__("session_closed", message, outcome)
