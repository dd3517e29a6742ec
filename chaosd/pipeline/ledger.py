"""The sink's ledger: every accepted task ends once; lost ones are found here, duplicated effects by the audit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chaosd.pipeline.audit import Audit
from chaosd.pipeline.task import Task
from chaosd.views import AbandonReason, FailReason, RefuseReason

__all__ = ["Counts", "Ledger"]


@dataclass(slots=True)
class Counts:
    """Task counts for one cohort (all tasks, or those offered after the warm-up)."""

    offered: int = 0
    accepted: int = 0
    completed: int = 0
    late: int = 0
    degraded: int = 0  # completed in time but degraded (late ones count as late): not good either
    failed: int = 0
    rejected: int = 0
    rejected_by: dict[RefuseReason, int] = field(default_factory=dict)
    failed_by: dict[FailReason, int] = field(default_factory=dict)
    # The callers' side (offered counts first attempts): attempts = offered + retried = accepted + rejected.
    retried: int = 0
    abandoned: int = 0  # attempts whose caller stopped waiting (its timeout, or its patience in the queue)
    abandoned_by: dict[AbandonReason, int] = field(default_factory=dict)
    wasted: int = 0  # completions for a caller that had stopped waiting
    gave_up: int = 0  # callers out of retries (or budget), or whose patience ran out


class Ledger:
    """Counts offers, refusals and outcomes; tracks in-flight tasks by id to find loss and second outcomes.

    It is also the sink: it applies each outcome's effect, and tells ``audit`` of every effect it applies.
    Duplicated effects are the audit's to count, not the ledger's: ``in_flight`` is the idempotent sink's own
    memory, so it cannot be the proof that the sink works.
    """

    def __init__(self, deadline: float, idempotent: bool = True, audit: Audit | None = None) -> None:
        self.deadline = deadline
        self.idempotent = idempotent
        self.audit = audit if audit is not None else Audit()
        self.total = Counts()
        self.measured = Counts()
        self.in_flight: dict[int, Task] = {}
        self.retries = 0
        # Second outcomes for a task that already ended (at-least-once delivery), suppressed by the
        # idempotent sink: no effect is applied, so the audit hears nothing of them.
        self.deduplicated = 0

    @property
    def good(self) -> int:
        """Completions for a caller still waiting, within the deadline (all of them when there is no deadline) and
        not degraded: goodput. Each completion is exactly one of good, wasted, late and degraded, so the good ones
        need no count of their own."""
        total = self.total
        return total.completed - total.late - total.degraded - total.wasted

    def offer(self, task: Task) -> None:
        self.total.offered += 1
        if task.measured:
            self.measured.offered += 1

    def admit(self, task: Task) -> None:
        """Offered and accepted at once (the in-memory queue answers an offer on the spot): one call per task."""
        self.in_flight[task.id] = task
        self.audit.owe(task.id)
        total = self.total
        total.offered += 1
        total.accepted += 1
        if task.measured:
            measured = self.measured
            measured.offered += 1
            measured.accepted += 1

    def accept(self, task: Task) -> None:
        self.in_flight[task.id] = task
        self.audit.owe(task.id)
        self.total.accepted += 1
        if task.measured:
            self.measured.accepted += 1

    def retry(self, task: Task) -> None:
        """A caller's retry offered (its first attempt was counted as offered)."""
        for counts in (self.total, self.measured) if task.measured else (self.total,):
            counts.retried += 1

    def abandon(self, measured: bool, reason: AbandonReason) -> None:
        for counts in (self.total, self.measured) if measured else (self.total,):
            counts.abandoned += 1
            counts.abandoned_by[reason] = counts.abandoned_by.get(reason, 0) + 1

    def give_up(self, measured: bool) -> None:
        for counts in (self.total, self.measured) if measured else (self.total,):
            counts.gave_up += 1

    def refuse(self, task: Task, reason: RefuseReason) -> None:
        for counts in (self.total, self.measured) if task.measured else (self.total,):
            counts.rejected += 1
            counts.rejected_by[reason] = counts.rejected_by.get(reason, 0) + 1

    def turn_away(self, measured: bool, reason: RefuseReason) -> None:
        """A task offered and refused at once (``offer`` then ``refuse``; ``measured``: of the measured cohort): one
        call per task turned away, most of an overloaded pipeline's arrivals."""
        total = self.total
        total.offered += 1
        total.rejected += 1
        total.rejected_by[reason] = total.rejected_by.get(reason, 0) + 1
        if measured:
            cohort = self.measured
            cohort.offered += 1
            cohort.rejected += 1
            cohort.rejected_by[reason] = cohort.rejected_by.get(reason, 0) + 1

    def complete(self, task: Task, now: float, degraded: bool = False) -> bool:
        """A completion; good when within the deadline and not degraded (a stage skipped or given up on).

        True when it is the task's first outcome; False for a second one (at-least-once delivery).
        """
        if self.in_flight.pop(task.id, None) is None:
            self._again(task)
            return False
        # audit.effect(task), written out: once per task, and settling is a C call.
        try:
            self.audit.settle(task.id)
        except KeyError:
            self.audit.duplicate(task)
        self.total.completed += 1
        if task.measured:
            self.measured.completed += 1
        caller = task.caller
        if caller is not None:  # Callers.completed, written out: once per attempt with a caller behind it
            if caller.current is not task:  # its caller had stopped waiting: work done for nobody
                for counts in (self.total, self.measured) if task.measured else (self.total,):
                    counts.wasted += 1
                return True
            caller.current = None
        deadline = self.deadline
        if deadline > 0 and now - task.accepted_at > deadline:
            for counts in (self.total, self.measured) if task.measured else (self.total,):
                counts.late += 1
        elif degraded:
            for counts in (self.total, self.measured) if task.measured else (self.total,):
                counts.degraded += 1
        return True

    def fail(self, task: Task, reason: FailReason) -> None:
        if self.in_flight.pop(task.id, None) is None:
            self._again(task)
            return
        self.audit.effect(task)
        for counts in (self.total, self.measured) if task.measured else (self.total,):
            counts.failed += 1
            counts.failed_by[reason] = counts.failed_by.get(reason, 0) + 1
        if task.caller is not None:
            task.caller.owner.failed(task)

    def _again(self, task: Task) -> None:
        """A second outcome for a task that already ended."""
        if self.idempotent:
            self.deduplicated += 1
            return
        # A sink without idempotence applies the effect again; the audit, owed nothing more, counts it.
        self.audit.effect(task)

    def unaccounted(self, holders: Iterable[Task]) -> tuple[int, int, int]:
        """(lost among all tasks, lost among measured ones, measured still held).

        Lost: not ended, yet nobody holds it — not the queue, the dispatch state or a worker.
        """
        held = {task.id for task in holders}
        missing = [t for tid, t in self.in_flight.items() if tid not in held]
        still = sum(1 for tid, t in self.in_flight.items() if tid in held and t.measured)
        return len(missing), sum(1 for t in missing if t.measured), still
