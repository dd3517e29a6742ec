"""The seam for task tracing: the pipeline calls these hooks for sampled tasks; exporters implement them."""

from __future__ import annotations

import re
from typing import Literal, Protocol

from chaosd.config.settings import StageKind
from chaosd.pipeline.stages import Degraded
from chaosd.pipeline.task import Task
from chaosd.views import FailReason

__all__ = ["CarriedTracer", "TaskEnd", "TaskTracer", "parse_traceparent", "traceparent"]

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

    def retried(self, task: Task, first: object, attempt: int, at: float) -> object:
        """A retry of a caller whose first attempt was sampled (``first``: that attempt's ``task.trace``): the
        retry's own trace context, linked to the first; the pipeline keeps it as the retry's ``task.trace``."""
        ...

    def started(self, task: Task, worker: str, at: float) -> object:
        """The handle of the task's processing, handed back to :meth:`stage` and :meth:`ended`."""
        ...

    def stage(
        self, handle: object, name: str, kind: StageKind, start: float, end: float, reason: FailReason | Degraded | None
    ) -> None: ...

    def ended(self, handle: object, at: float, outcome: TaskEnd) -> None: ...


class CarriedTracer(TaskTracer, Protocol):
    """A tracer whose tasks cross a process boundary (the Redis stream) with their trace context."""

    def continued(self, header: str) -> object | None:
        """The trace context a W3C ``traceparent`` header carries, as ``task.trace`` for :meth:`started` (whose
        span is then a child in that trace); None when the header is not a sampled one."""
        ...

    def close(self, timeout: float | None = None) -> bool:
        """Export what is queued, within ``timeout`` seconds; False when that did not finish."""
        ...


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def traceparent(trace: object) -> str | None:
    """The W3C ``traceparent`` header of a task's trace context (an OpenTelemetry ``SpanContext``, as
    ``produced`` gives it), to carry in the stream entry; None when it has no valid ids."""
    trace_id, span_id = getattr(trace, "trace_id", 0), getattr(trace, "span_id", 0)
    flags = getattr(trace, "trace_flags", 1)
    if not (isinstance(trace_id, int) and isinstance(span_id, int) and isinstance(flags, int) and trace_id and span_id):
        return None
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def parse_traceparent(header: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a version-00 ``traceparent``; None when malformed or all zeros."""
    match = _TRACEPARENT.fullmatch(header)
    if match is None:
        return None
    trace_id, span_id, flags = (int(g, 16) for g in match.groups())
    return (trace_id, span_id, flags) if trace_id and span_id else None
