"""The sink's ledger: every accepted task ends exactly once, and the ledger can prove it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chaosd.pipeline.task import Task

__all__ = ["Counts", "Ledger"]


@dataclass(slots=True)
class Counts:
    """Task counts for one cohort (all tasks, or those offered after the warm-up)."""

    offered: int = 0
    accepted: int = 0
    completed: int = 0
    late: int = 0
    failed: int = 0
    rejected: int = 0
    duplicated: int = 0
    rejected_by: dict[str, int] = field(default_factory=dict)
    failed_by: dict[str, int] = field(default_factory=dict)


class Ledger:
    """Counts offers, refusals and outcomes; tracks in-flight tasks by id to find loss and duplicates."""

    def __init__(self, deadline: float, idempotent: bool = True) -> None:
        self.deadline = deadline
        self.idempotent = idempotent
        self.total = Counts()
        self.measured = Counts()
        self.in_flight: dict[int, Task] = {}
        self.retries = 0
        # Second outcomes for a task that already ended (at-least-once delivery), suppressed by the
        # idempotent sink. ``duplicated`` counts duplicate *effects*, which idempotence prevents.
        self.deduplicated = 0
        # Completions within the deadline (all of them when there is no deadline): goodput.
        self.good = 0

    def offer(self, task: Task) -> None:
        self.total.offered += 1
        if task.measured:
            self.measured.offered += 1

    def accept(self, task: Task) -> None:
        self.in_flight[task.id] = task
        self.total.accepted += 1
        if task.measured:
            self.measured.accepted += 1

    def refuse(self, task: Task, reason: str) -> None:
        for counts in (self.total, self.measured) if task.measured else (self.total,):
            counts.rejected += 1
            counts.rejected_by[reason] = counts.rejected_by.get(reason, 0) + 1

    def complete(self, task: Task, now: float) -> None:
        if self.in_flight.pop(task.id, None) is None:
            self._duplicate(task)
            return
        late = self.deadline > 0 and now - task.accepted_at > self.deadline
        if not late:
            self.good += 1
        total = self.total
        total.completed += 1
        if late:
            total.late += 1
        if task.measured:
            measured = self.measured
            measured.completed += 1
            if late:
                measured.late += 1

    def fail(self, task: Task, reason: str) -> None:
        if self.in_flight.pop(task.id, None) is None:
            self._duplicate(task)
            return
        for counts in (self.total, self.measured) if task.measured else (self.total,):
            counts.failed += 1
            counts.failed_by[reason] = counts.failed_by.get(reason, 0) + 1

    def _duplicate(self, task: Task) -> None:
        if self.idempotent:
            self.deduplicated += 1
            return
        # A sink without idempotence applies the effect again: a duplicate the ledger must own up to.
        self.total.duplicated += 1
        if task.measured:
            self.measured.duplicated += 1

    def unaccounted(self, holders: Iterable[Task]) -> tuple[int, int, int]:
        """(lost among all tasks, lost among measured ones, measured still held).

        Lost: not ended, yet nobody holds it — not the queue, the dispatch state or a worker.
        """
        held = {task.id for task in holders}
        missing = [t for tid, t in self.in_flight.items() if tid not in held]
        still = sum(1 for tid, t in self.in_flight.items() if tid in held and t.measured)
        return len(missing), sum(1 for t in missing if t.measured), still
