"""Incidents: faults whose effects overlap, judged together.

A fault injected while another is still active or recovering joins that fault's incident. The
service comes back once for all of them, so the incident carries the recovery: its clock starts at
the last blow (the latest injection of a fault a mechanism heals, or the latest lifting of one that
nothing heals) and stops when the service is back. A fault in a shared incident carries no recovery
time of its own: no fault borrows another's recovery.

An incident nobody injected (``unplanned``) opens when the service leaves its steady state with no fault in
play; it is judged as a fault a mechanism healed at once would be (see :class:`Unplanned`). A fault injected
while it is open joins it, as a fault joins any open incident: the service will come back once for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from chaosd.core.history import Sum
from chaosd.faults.record import (
    IMPACT_KINDS,
    Baseline,
    CameBack,
    FaultRecord,
    Streak,
    TaskImpact,
    Trace,
    impact_between,
    phases,
    prediction,
)
from chaosd.views import FailReason, IncidentCause, IncidentView, PhasesView, PredictionView, ServiceSignal
from chaosd.views.wire import PENDING, FaultState, IncidentOutcome, Verdict

# IMPACT_KINDS, TaskImpact and impact_between live in chaosd.faults.record; imported from here too.
__all__ = ["IMPACT_KINDS", "Incident", "IncidentBook", "TaskImpact", "Unplanned", "impact_between"]


@dataclass(slots=True)
class Unplanned:
    """The service out of its steady state with no fault in play: an incident's own verdict, without members.

    Judged like a fault whose mechanism recovered at once: recovered once the service stays within tolerance
    of ``baseline`` (or the SLO) for ``recovery.confirm``, ``back`` being where that stretch began; failed if
    not recovered within ``recovery.limit`` of ``started_at`` (there is no fault's end to count from).
    """

    started_at: float  # its first tick out of tolerance
    baseline: Baseline | None  # the steady state before it (None: judged against the SLO alone)
    offered: float  # the baseline's mean offered rate: less goodput for less load is no outage
    cause: IncidentCause
    failures_from: dict[tuple[str, FailReason], int] = field(default_factory=dict)  # (stage, reason): failed attempts
    errors_from: dict[tuple[str, str], int] = field(default_factory=dict)  # (stage, exception type): handler errors
    outcome: FaultState = "recovering"
    back: float | None = None  # the service's recovery: the start of the confirming stretch
    stalled_s: float = 0.0
    streak: Streak = field(default_factory=Streak)  # the stretch within tolerance its verdict waits on
    trace: Trace = field(default_factory=Trace)  # its phases, from its first tick out (judged as healed then)

    def blame(self, cause: IncidentCause) -> None:
        """What it is put down to now (the stage failing most since it began)."""
        self.cause = cause

    def stall(self, seconds: float) -> None:
        self.stalled_s += seconds

    def see(
        self, t: float, outside: list[ServiceSignal], perturbed: float, depth: float, arrival: float, capacity: float
    ) -> None:
        """A tick's figures for its trace (``depth``: the queue's above the baseline's), as healed at its start."""
        self.trace.see(t, outside, not outside or not perturbed, self.started_at, depth, arrival, capacity)

    def judge(self, t: float, within: bool, perturbed: float, came_back: CameBack) -> bool:
        """A tick judged against the steady state before it; True when the service was out of tolerance."""
        return self.streak.see(t, within, perturbed, came_back) and not within

    def recover(self, t: float) -> None:
        """Recovered: the service came back where its confirming stretch began."""
        self.back = self.streak.start
        self.trace.confirm(t)
        self.outcome = "recovered"

    def settle(self, outcome: Verdict) -> None:
        """A verdict other than recovered: failed, or unmeasured."""
        self.outcome = outcome


@dataclass(slots=True)
class Incident:
    id: int
    members: list[FaultRecord] = field(default_factory=list)
    impact_s: float = 0.0  # seconds out of tolerance while any member was active (overlaps counted once)
    tasks: TaskImpact = field(default_factory=dict)  # tasks by kind from its first injection until its verdict
    tally_from: tuple[int, ...] = ()  # the task tally when it began
    stalled_s: float = 0.0  # seconds, while open, that the daemon's own process was paused (the host's)
    unplanned: Unplanned | None = None  # opened with no fault in play: its own verdict beside its members'

    def join(self, record: FaultRecord) -> None:
        """A fault injected while it is open: every member's recovery is the incident's from now on."""
        self.members.append(record)
        for member in self.members:
            member.share()

    def count_impact(self, tally: tuple[int, ...]) -> None:
        """What users felt from its start to ``tally``."""
        self.tasks = impact_between(self.tally_from, tally)

    def felt(self, seconds: float) -> None:
        """Seconds out of tolerance while open (overlapping members counted once)."""
        self.impact_s += seconds

    def stall(self, seconds: float) -> None:
        self.stalled_s += seconds

    @property
    def consistent(self) -> bool:
        """No effect was applied twice or read corrupted while it lasted."""
        return not (self.tasks.get("duplicated", 0) or self.tasks.get("corrupted", 0))

    @property
    def open(self) -> bool:
        own = self.unplanned is not None and self.unplanned.outcome in PENDING
        return own or any(m.outcome in PENDING for m in self.members)

    @property
    def outcome(self) -> IncidentOutcome:
        """pending while any member is; failed if any failed; unmeasured if none could be judged; else recovered.

        An unplanned incident's own verdict counts as a member's would."""
        outcomes = {m.outcome for m in self.members}
        if self.unplanned is not None:
            outcomes.add(self.unplanned.outcome)
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
        backs = [m.service_recovered_at for m in self.members if m.outcome == "recovered"]
        starts = [m.clock_start for m in self.members]
        if (own := self.unplanned) is not None:  # a blow of its own, at its start
            backs.append(own.back)
            starts.append(own.started_at)
        judged = [t for t in backs if t is not None]
        if not judged:
            return None
        return max(0.0, max(judged) - max(starts))

    @property
    def clock_start(self) -> float:
        """Where its clock starts: its last blow (see the module), or its own first tick out (unplanned)."""
        starts = [m.clock_start for m in self.members]
        if self.unplanned is not None:
            starts.append(self.unplanned.started_at)
        return max(starts) if starts else 0.0

    def explained(self) -> tuple[PhasesView, PredictionView | None]:
        """Its recovery's phases and prediction, from its clock start: those of the member (or its own verdict,
        unplanned) that came back last, since that is when the service was back for all of them."""
        start, seconds = self.clock_start, self.recovery_s
        back = [m for m in self.members if m.service_recovered_at is not None]
        member = max(back, key=lambda m: (m.service_recovered_at or 0.0, m.id), default=None)
        own = self.unplanned
        if own is not None and (member is None or (own.back or 0.0) >= (member.service_recovered_at or 0.0)):
            # Nothing chaosd did healed it: it showed at its first tick out (its start), and whatever failed it
            # stopped when the service came back, so the outage itself is its heal span.
            seen = replace(own.trace, detected_at=own.started_at)
            return phases(seen, start, own.back, own.back, seconds), None
        if member is None:  # none came back (yet): the last blow's member tells what is known
            member = max(self.members, key=lambda m: (m.clock_start, m.id), default=None)
        if member is None:
            return phases(Trace(), start, None, None, None), None
        healed = member.mechanism_recovered_at
        return (
            phases(member.trace, start, healed, member.service_recovered_at, seconds),
            prediction(member.trace, start, healed),
        )

    @property
    def started_at(self) -> float:
        """Its first fault's injection, or its first tick out of tolerance (unplanned)."""
        own = [self.unplanned.started_at] if self.unplanned is not None else []
        return min([m.injected_at for m in self.members] + own)

    def as_dict(self) -> IncidentView:
        explained = self.explained()
        return {
            "id": self.id,
            "faults": [m.id for m in self.members],
            "actions": [m.action for m in self.members],
            "started_at": self.started_at,
            "outcome": self.outcome,
            "recovery_s": self.recovery_s,
            "impact_s": self.impact_s,
            "impact_tasks": dict(self.tasks),
            "consistent": self.consistent,
            "stalled_s": self.stalled_s,
            "unplanned": self.unplanned is not None,
            "cause": _copied(self.unplanned.cause) if self.unplanned is not None else None,
            "phases": explained[0],
            "prediction": explained[1],
        }


def _copied(cause: IncidentCause) -> IncidentCause:
    return {**cause, "signals": list(cause["signals"])}


class IncidentBook:
    """Running totals of judged incidents, what the score needs: O(1) however many incidents there were.

    ``owns`` picks the faults whose incidents count (every fault, a plan's, a window's): an incident counts
    once, when it closes, if it holds one of them. An unplanned incident holds none of a plan's (unless one of
    its faults joined it), so it counts in the run's book (no ``owns``) and not in a plan's or a window's.
    ``unplanned`` counts the unplanned incidents among those it counted, by outcome.
    """

    def __init__(self, owns: Callable[[FaultRecord], bool] | None = None) -> None:
        self.owns = owns
        self.outcomes: dict[IncidentOutcome, int] = {"recovered": 0, "failed": 0, "unmeasured": 0}
        self.judged = 0  # recovered or failed (not unmeasured)
        self.recovered = 0  # recovered with a time (what the speed averages)
        self.recovery = Sum()
        self.inconsistent = 0  # judged ones during which an effect was duplicated or corrupted
        self.unplanned: dict[IncidentOutcome, int] = {"recovered": 0, "failed": 0, "unmeasured": 0}

    def add(self, incident: Incident) -> None:
        if self.owns is not None and not any(self.owns(m) for m in incident.members):
            return
        outcome = incident.outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if incident.unplanned is not None:
            self.unplanned[outcome] = self.unplanned.get(outcome, 0) + 1
        if outcome not in ("recovered", "failed"):
            return
        self.judged += 1
        if not incident.consistent:
            self.inconsistent += 1
        if outcome == "recovered" and (seconds := incident.recovery_s) is not None:
            self.recovered += 1
            self.recovery.add(seconds)
