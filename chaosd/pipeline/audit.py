"""The effect audit: every accepted task owes one effect at the sink; any effect beyond it is a duplicate.

It keeps its own books, apart from the sink it audits: the ledger's ``in_flight`` dict is also the idempotent
sink's memory of which tasks already ended, so a duplicate the sink lets through would go unseen there. The
audit is told of each acceptance and of each effect the sink applies, and counts an effect it was not owed.

Memory is bounded by the tasks still owed an effect (in flight, or lost), plus a few example ids: an id is
forgotten once its effect is settled, and a duplicate is counted, never stored, beyond ``examples``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chaosd.pipeline.task import Task

__all__ = ["EXAMPLES", "Audit", "Duplicates"]

EXAMPLES = 5  # duplicated task ids kept per cohort to name in diagnostics


@dataclass(slots=True)
class Duplicates:
    """Duplicated effects for one cohort (all tasks, or those offered after the warm-up)."""

    count: int = 0
    examples: list[int] = field(default_factory=list)  # the first few distinct task ids, at most ``EXAMPLES``


class Audit:
    """Owes one effect per accepted task; counts every effect it was not owed as a duplicate."""

    __slots__ = ("_limit", "_owed", "measured", "owe", "settle", "total")

    def __init__(self, examples: int = EXAMPLES) -> None:
        self._owed: set[int] = set()
        # owe(task_id): the task was accepted, so the sink owes it exactly one effect. The set's own ``add``: the
        # ledger calls it once per task, and a C method costs no Python frame.
        self.owe: Callable[[int], None] = self._owed.add
        # settle(task_id): the sink applied the effect it owed. The set's own ``remove`` again: it raises KeyError
        # when nothing was owed, and the caller then counts a ``duplicate``. ``effect`` does both.
        self.settle: Callable[[int], None] = self._owed.remove
        self._limit = examples
        self.total = Duplicates()
        self.measured = Duplicates()

    def effect(self, task: Task) -> None:
        """The sink applied an effect for the task: settle what it owed, or count a duplicate."""
        try:
            self.settle(task.id)
        except KeyError:
            self.duplicate(task)

    def duplicate(self, task: Task) -> None:
        """An effect the task was not owed."""
        for dup in (self.total, self.measured) if task.measured else (self.total,):
            dup.count += 1
            if len(dup.examples) < self._limit and task.id not in dup.examples:
                dup.examples.append(task.id)

    @property
    def owing(self) -> int:
        """Tasks still owed an effect (in flight, or lost): the audit's whole per-task state."""
        return len(self._owed)
