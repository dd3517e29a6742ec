"""Whether the daemon still takes new work: open until shutdown begins, then closed for good."""

from __future__ import annotations

from chaosd.core.errors import Unavailable

__all__ = ["Gate"]


class Gate:
    """Closed once the daemon starts shutting down; what would start new work checks it first."""

    REFUSAL = "the daemon is shutting down and accepts no new faults"

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def check(self) -> None:
        """Refuse (503) once closed."""
        if self.closed:
            raise Unavailable("action", self.REFUSAL)
