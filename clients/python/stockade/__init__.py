"""stockade from Python: `Client` for `stockade serve`, `run` (and the
`evaluator` module) on the local binary; every run in its own fresh jail.
The core is stdlib only; `stockade.langchain` and `stockade.deepagents`
need their extras."""

from . import evaluator
from .client import Chunk, Client, Outcome
from .errors import (
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    SetupError,
    ShuttingDown,
    StockadeConnectionError,
    StockadeError,
    StockadeNotFound,
    Unauthorized,
    UnknownProfile,
)
from .local import run

__all__ = [
    "BadRequest",
    "Chunk",
    "Client",
    "InternalError",
    "MethodNotAllowed",
    "NotFound",
    "Outcome",
    "PayloadTooLarge",
    "QueueFull",
    "SetupError",
    "ShuttingDown",
    "StockadeConnectionError",
    "StockadeError",
    "StockadeNotFound",
    "Unauthorized",
    "UnknownProfile",
    "evaluator",
    "run",
]
