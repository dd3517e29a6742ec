"""A unit of work flowing through the pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chaosd.pipeline.callers import Caller

__all__ = ["Task"]


class Task:
    """One task; times are clock seconds. Mutable: it moves through the pipeline."""

    __slots__ = ("accepted_at", "attempts", "caller", "id", "measured", "offered_at", "trace")

    def __init__(self, task_id: int, offered_at: float, measured: bool) -> None:
        self.id = task_id
        self.offered_at = offered_at
        self.accepted_at = offered_at
        self.measured = measured
        self.attempts = 0
        self.trace: object | None = None  # the producer span's context, for sampled tasks
        self.caller: Caller | None = None  # who waits for this attempt, when callers have a policy
