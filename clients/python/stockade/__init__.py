"""Client for `stockade serve`: every run in its own fresh jail."""

from .client import Chunk, Client, Outcome
from .errors import (
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    ShuttingDown,
    StockadeConnectionError,
    StockadeError,
    Unauthorized,
    UnknownProfile,
)

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
    "ShuttingDown",
    "StockadeConnectionError",
    "StockadeError",
    "Unauthorized",
    "UnknownProfile",
]
