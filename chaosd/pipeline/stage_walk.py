"""What a task's walk along the route is made of: the route as walked, how a walk ends, and what a walker reads of
its worker. Both backends' workers walk with :class:`~chaosd.pipeline.callback_walk.CallbackWalk`; they differ only
in how a task reaches them and how its outcome leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from chaosd.pipeline.stages import DEGRADED, Degraded, StageRunner
from chaosd.pipeline.task import Task
from chaosd.views import FailReason

__all__ = ["Claims", "Walk", "WalkOutcome", "WorkerFlags"]

# How a walk ended: None when the task got through every stage, DEGRADED when it went on without a stage's result.
WalkOutcome = FailReason | Degraded | None


@dataclass(frozen=True, slots=True)
class Walk:
    """The route as workers walk it: the stages to run, and the optional ones skipped, which make it degraded."""

    stages: tuple[StageRunner, ...]
    bypassed: tuple[StageRunner, ...] = ()
    # The route's one stage, when it has one and skips none: a worker may then serve it without a walk, while the
    # stage is simple (that can change at any time: read it per task).
    lone: StageRunner | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lone = self.stages[0] if len(self.stages) == 1 and not self.bypassed else None
        object.__setattr__(self, "lone", lone)

    def count_bypassed(self) -> Degraded:
        """A task got through without the skipped stages' results: degraded, like a tool given up on."""
        for skipped in self.bypassed:
            skipped.degraded += 1
        return DEGRADED


class WorkerFlags(Protocol):
    """What faults set on a worker that its walks read: its service-time factor, and whether it is cut off."""

    @property
    def slow(self) -> float: ...

    @property
    def partitioned(self) -> bool: ...


class Claims(Protocol):
    """The dispatch state: which worker holds a task, recorded before the walk first lets others run."""

    def assign(self, task: Task, worker: str, now: float) -> None: ...
