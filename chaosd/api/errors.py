"""The HTTP error: a request the protocol refuses (its size, type, deadline, query or path), apart from the
domain errors (``chaosd.core.errors``) a valid request may still meet."""

from __future__ import annotations

from chaosd.core.errors import ChaosdError

__all__ = ["HttpError"]


class HttpError(ChaosdError):
    """Answered as ``{"error": {"status", "field", "message"}}`` with ``status``; nothing was changed."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        self.status = status
        self.field = field
        self.message = message
        super().__init__(f"{status} {field}: {message}" if field else f"{status}: {message}")
