"""Incidents: faults whose effects overlap, judged together.

A fault injected while another is still active or recovering joins that fault's incident. The
service comes back once for all of them, so the incident carries the recovery: its clock starts at
the last blow (the latest injection of a fault a mechanism heals, or the latest lifting of one that
nothing heals) and stops when the service is back. A fault in a shared incident carries no recovery
time of its own: no fault borrows another's recovery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chaosd.faults.record import IMPACT_KINDS, FaultRecord, TaskImpact, impact_between
from chaosd.history import Sum
from chaosd.views import IncidentView
from chaosd.wire import PENDING, IncidentOutcome

# IMPACT_KINDS, TaskImpact and impact_between live in chaosd.faults.record; imported from here too.
__all__ = ["IMPACT_KINDS", "Incident", "IncidentBook", "TaskImpact", "impact_between"]


@dataclass(slots=True)
class Incident:
    id: int
    members: list[FaultRecord] = field(default_factory=list)
    impact_s: float = 0.0  # seconds out of tolerance while any member was active (overlaps counted once)
    tasks: TaskImpact = field(default_factory=dict)  # tasks by kind from its first injection until its verdict
    tally_from: tuple[int, ...] = ()  # the task tally when it began
    stalled_s: float = 0.0  # seconds, while open, that the daemon's own process was paused (the host's)

    @property
    def consistent(self) -> bool:
        """No effect was applied twice or read corrupted while it lasted."""
        return not (self.tasks.get("duplicated", 0) or self.tasks.get("corrupted", 0))

    @property
    def open(self) -> bool:
        return any(m.outcome in PENDING for m in self.members)

    @property
    def outcome(self) -> IncidentOutcome:
        """pending while any member is; failed if any failed; unmeasured if none could be judged; else recovered."""
        outcomes = {m.outcome for m in self.members}
        if outcomes & set(PENDING):
            return "recovering"
        if "failed" in outcomes:
            return "failed"
        if outcomes == {"unmeasured"}:
            return "unmeasured"
        return "recovered"

    @property
    def recovery_s(self) -> float | None:
        if self.outcome != "recovered":
            return None
        judged = [m for m in self.members if m.outcome == "recovered" and m.service_recovered_at is not None]
        if not judged:
            return None
        start = max(m.clock_start for m in self.members)
        back = max(m.service_recovered_at for m in judged if m.service_recovered_at is not None)
        return max(0.0, back - start)

    def as_dict(self) -> IncidentView:
        return {
            "id": self.id,
            "faults": [m.id for m in self.members],
            "actions": [m.action for m in self.members],
            "started_at": min(m.injected_at for m in self.members),
            "outcome": self.outcome,
            "recovery_s": self.recovery_s,
            "impact_s": self.impact_s,
            "impact_tasks": dict(self.tasks),
            "consistent": self.consistent,
            "stalled_s": self.stalled_s,
        }


class IncidentBook:
    """Running totals of judged incidents, what the score needs: O(1) however many incidents there were.

    ``owns`` picks the faults whose incidents count (every fault, a plan's, a window's): an incident counts
    once, when it closes, if it holds one of them.
    """

    def __init__(self, owns: Callable[[FaultRecord], bool] | None = None) -> None:
        self.owns = owns
        self.outcomes: dict[IncidentOutcome, int] = {"recovered": 0, "failed": 0, "unmeasured": 0}
        self.judged = 0  # recovered or failed (not unmeasured)
        self.recovered = 0  # recovered with a time (what the speed averages)
        self.recovery = Sum()
        self.inconsistent = 0  # judged ones during which an effect was duplicated or corrupted

    def add(self, incident: Incident) -> None:
        if self.owns is not None and not any(self.owns(m) for m in incident.members):
            return
        outcome = incident.outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome not in ("recovered", "failed"):
            return
        self.judged += 1
        if not incident.consistent:
            self.inconsistent += 1
        if outcome == "recovered" and (seconds := incident.recovery_s) is not None:
            self.recovered += 1
            self.recovery.add(seconds)
