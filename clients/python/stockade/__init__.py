"""stockade from Python: `Client` for `stockade serve`; `run`, `Session`
(and the `evaluator` module) on the local binary; every run in its own fresh jail.
The core is stdlib only; `stockade.langchain` and `stockade.deepagents`
need their extras."""

from . import evaluator
from .client import Chunk, Client, Outcome
from .errors import (
    BadRequest,
    Busy,
    InternalError,
    InvalidOption,
    InvalidOptionType,
    LocalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    SessionClosed,
    SessionEnded,
    SessionError,
    SetupError,
    ShuttingDown,
    StockadeConnectionError,
    StockadeError,
    StockadeNotFound,
    TooManySessions,
    Unauthorized,
    UnknownProfile,
)
from .local import run
from .remote_session import RemoteSession
from .session import ExecResult, Session

__all__ = [
    "BadRequest",
    "Busy",
    "Chunk",
    "Client",
    "ExecResult",
    "InternalError",
    "InvalidOption",
    "InvalidOptionType",
    "LocalError",
    "MethodNotAllowed",
    "NotFound",
    "Outcome",
    "PayloadTooLarge",
    "QueueFull",
    "RemoteSession",
    "Session",
    "SessionClosed",
    "SessionEnded",
    "SessionError",
    "SetupError",
    "ShuttingDown",
    "StockadeConnectionError",
    "StockadeError",
    "StockadeNotFound",
    "TooManySessions",
    "Unauthorized",
    "UnknownProfile",
    "evaluator",
    "run",
]
