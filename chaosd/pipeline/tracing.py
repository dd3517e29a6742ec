"""The seam for task tracing: the pipeline calls these hooks for sampled tasks; exporters implement them."""

from __future__ import annotations

from typing import Any, Protocol

from chaosd.pipeline.task import Task

__all__ = ["TaskTracer"]


class TaskTracer(Protocol):
    """Hooks for sampled tasks only; the pipeline decides sampling by task id before calling anything."""

    every: int  # trace one task in this many (by id)

    def produced(self, task: Task, producer: str, at: float) -> Any: ...

    def started(self, task: Task, worker: str, at: float) -> Any: ...

    def stage(self, handle: Any, name: str, kind: str, start: float, end: float, reason: str | None) -> None: ...

    def ended(self, handle: Any, at: float, outcome: str) -> None: ...
