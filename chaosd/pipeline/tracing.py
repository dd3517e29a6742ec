"""The seam for task tracing: the pipeline calls these hooks for sampled tasks; exporters implement them."""

from __future__ import annotations

from typing import Literal, Protocol

from chaosd.config import StageKind
from chaosd.pipeline.stages import Degraded
from chaosd.pipeline.task import Task
from chaosd.views import FailReason

__all__ = ["TaskEnd", "TaskTracer"]

# How a traced task's processing ended: completed, failed (why), or its outcome cut off by a partition.
TaskEnd = Literal["completed", "lost_to_partition", FailReason]


class TaskTracer(Protocol):
    """Hooks for sampled tasks only; the pipeline decides sampling by task id before calling anything."""

    every: int  # trace one task in this many (by id)

    # What the hooks hand back is the tracer's own (a span's context, a span): the pipeline only keeps it and
    # passes it back, so to the pipeline it is opaque, and an implementation narrows it where it reads it.

    def produced(self, task: Task, producer: str, at: float) -> object:
        """The produced task's trace context; the pipeline keeps it as ``task.trace``."""
        ...

    def started(self, task: Task, worker: str, at: float) -> object:
        """The handle of the task's processing, handed back to :meth:`stage` and :meth:`ended`."""
        ...

    def stage(
        self, handle: object, name: str, kind: StageKind, start: float, end: float, reason: FailReason | Degraded | None
    ) -> None: ...

    def ended(self, handle: object, at: float, outcome: TaskEnd) -> None: ...
