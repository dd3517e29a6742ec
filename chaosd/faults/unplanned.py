"""Incidents nobody injected: opened when the service leaves its steady state with no fault in play, and judged.

With no fault in play, a service out of tolerance of its baseline (or SLO) on every judged tick for
``unplanned_after`` seconds opens an incident with no faults, timed from its first tick out, its cause read from
the stages' failed attempts since. Goodput is judged against the baseline's scaled to the load offered now (less
load, less goodput: no outage). Only a service seen within tolerance since the last verdict can open one (one
deviation, one incident: a failed recovery that lingers is not a new incident), and a tick the host perturbed
never counts towards one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from chaosd.config.settings import RecoveryConfig
from chaosd.events.log import EventLog
from chaosd.faults.incident_registry import IncidentRegistry
from chaosd.faults.incidents import Incident, Unplanned
from chaosd.faults.record import Baseline, CameBack, Trace
from chaosd.faults.runtime import Readings
from chaosd.faults.steady import ServiceView, SteadyState
from chaosd.views import FailReason, IncidentCause, ServiceSignal
from chaosd.views.wire import PENDING, Verdict

__all__ = ["UnplannedWatch"]

# The task tally, the stages' failed attempts by (stage, reason), their handlers' errors by (stage, exception).
_Reading = tuple[tuple[int, ...], dict[tuple[str, FailReason], int], dict[tuple[str, str], int]]


@dataclass(slots=True)
class _Candidate:
    """Ticks out of tolerance with no fault in play, not yet long enough to open an incident."""

    started_at: float
    baseline: Baseline | None
    offered: float
    signals: list[ServiceSignal]
    tally: tuple[int, ...]
    failures: dict[tuple[str, FailReason], int]
    errors: dict[tuple[str, str], int]
    ticks: int = 0
    unfed: int = 0  # of those, the ticks the baseline did not take (the detector called them failing)

    def see(self, outside: list[ServiceSignal]) -> None:
        """One more tick out: every figure that left tolerance on the way, in the order they first did."""
        self.signals += [signal for signal in outside if signal not in self.signals]
        self.ticks += 1

    def skip(self) -> None:
        """A tick it counted which the baseline did not take."""
        self.unfed += 1


class UnplannedWatch:
    """Watches the service while nothing is in play, opens an unplanned incident, and judges its own verdict."""

    def __init__(
        self,
        recovery: RecoveryConfig,
        runtime: Readings,
        steady: SteadyState,
        registry: IncidentRegistry,
        events: EventLog,
        tick: float,
        came_back: Callable[[Trace, float | None], CameBack],
        unplanned_after: float | None = None,
    ) -> None:
        """``unplanned_after``: seconds out of tolerance with no fault in play before one opens (``math.inf``:
        never; None: ``recovery.unplanned_after``, where 0 is never too); ``came_back`` dates a recovery back."""
        self._recovery = recovery
        self._rt = runtime
        self._steady = steady
        self._registry = registry
        self._events = events
        self._tick = tick
        self._came_back = came_back
        if unplanned_after is None:
            unplanned_after = recovery.unplanned_after or math.inf
        self._open_after = math.inf if math.isinf(unplanned_after) else max(1, round(unplanned_after / tick))
        self._armed = False  # seen within tolerance, nothing in play, since the last verdict: may open one
        self._candidate: _Candidate | None = None
        self._before: _Reading = ((), {}, {})  # the counts at the last tick within tolerance
        self._current: Incident | None = None  # the newest unplanned incident, until it closes

    @property
    def open(self) -> bool:
        """An incident nobody injected is open (its own verdict or a fault that joined it pending)."""
        return self._current is not None and self._current.open

    def tick(self, s: ServiceView, dt: float, perturbed: bool, quiet: bool) -> tuple[Incident | None, bool]:
        """One tick: the unplanned incident whose own verdict is pending, judged (returned, with whether the service
        was out of tolerance); else, with nothing in play (``quiet``), the service watched for one to open."""
        incident = self._current
        own = incident.unplanned if incident is not None else None
        if incident is not None and own is not None and own.outcome in PENDING:
            if perturbed:
                own.stall(dt)
            incident.count_impact(self._registry.tally())
            return incident, self._observe(incident, own, s, dt if perturbed else 0.0)
        if quiet and not self.open:
            self._watch(s, perturbed)
        else:  # a fault in play: its own verdict judges the service; a new deviation starts after it
            self._armed = False
            self._candidate = None
        return None, False

    def unfed(self, perturbed: bool) -> None:
        """A tick the baseline did not take (the detector called it failing): it still counts towards a candidate,
        which gives it back to the baseline only if it was fed (see :meth:`_watch`)."""
        if self._candidate is not None and not perturbed:
            self._candidate.skip()

    def _watch(self, s: ServiceView, perturbed: bool) -> None:
        """No fault in play: open an unplanned incident once the service stays out of tolerance long enough.

        Its clock starts at the first tick out; the ticks that led to it leave the baseline (they were the
        incident's, not the steady state's). A tick the host perturbed neither counts towards the run nor breaks
        it, as in a recovery's confirming stretch: a stall mid-outage delays the opening, and does not hide it.
        """
        if perturbed:
            return
        steady = self._steady
        base = steady.baseline()
        offered = steady.offered()
        outside = steady.outside(s, base, offered)
        if outside is None:
            return
        if not outside:
            self._armed = True
            self._candidate = None
            # Where a deviation's counts start: the last tick within tolerance (its first tick out shows its
            # window's failures already).
            self._before = (self._registry.tally(), self._failures(), self._handler_errors())
            return
        if not self._armed:
            return
        if outside == ["queue"]:  # a queue alone is no outage users feel (a busy queue's excursions): not yet
            self._candidate = None
            return
        candidate = self._candidate
        if candidate is None:
            candidate = self._candidate = _Candidate(s.t, base, offered, [], *self._before)
        candidate.see(outside)
        if candidate.ticks >= self._open_after:
            steady.forget(min(candidate.ticks - 1 - candidate.unfed, len(steady)))
            self._open(candidate, s.t)

    def _failures(self) -> dict[tuple[str, FailReason], int]:
        return {(name, why): n for name, stage in self._rt.stages.items() for why, n in stage.failures.items()}

    def _handler_errors(self) -> dict[tuple[str, str], int]:
        return {(name, kind): n for name, stage in self._rt.stages.items() for kind, n in stage.handler_errors.items()}

    def _cause(self, own: Unplanned) -> IncidentCause:
        """The stage and reason with the most failed attempts since the incident began (names break ties), and
        for a python stage the exception its handler raised most; no stage when none failed."""
        grown = {key: n - own.failures_from.get(key, 0) for key, n in self._failures().items()}
        failing = sorted((key for key, n in grown.items() if n > 0), key=lambda key: (-grown[key], key))
        if not failing:
            return {**own.cause, "stage": None, "reason": None, "failed": 0, "error": None}
        stage, reason = failing[0]
        raised = {
            kind: n - own.errors_from.get((name, kind), 0)
            for (name, kind), n in self._handler_errors().items()
            if name == stage
        }
        top = min((k for k, n in raised.items() if n > 0), key=lambda k: (-raised[k], k), default=None)
        return {**own.cause, "stage": stage, "reason": reason, "failed": grown[failing[0]], "error": top}

    def _open(self, c: _Candidate, now: float) -> None:
        cause: IncidentCause = {"stage": None, "reason": None, "failed": 0, "error": None, "signals": list(c.signals)}
        own = Unplanned(c.started_at, c.baseline, c.offered, cause, c.failures, c.errors)
        own.blame(self._cause(own))
        # The ticks that led to it were out of tolerance too.
        incident = self._registry.open_unplanned(own, c.tally, c.ticks * self._tick)
        self._current = incident
        self._candidate = None
        self._armed = False
        self._events.record(
            now, "incident", about=incident, id=incident.id, state="opened", started_at=c.started_at, cause=own.cause
        )

    def _observe(self, incident: Incident, own: Unplanned, s: ServiceView, perturbed: float) -> bool:
        """Advance an unplanned incident's own verdict as a fault's is advanced whose mechanism recovered at its
        start; True when the service was out of tolerance (judged)."""
        own.blame(self._cause(own))
        outside = self._steady.outside(s, own.baseline, own.offered)
        limit = own.started_at + self._recovery.limit
        if outside is None:
            if s.t > limit:
                self._settle(incident, own, "unmeasured", s.t)
            return False
        base = own.baseline
        depth = s.queue_depth - (base.queue_depth if base is not None else 0.0)
        own.see(s.t, outside, perturbed, depth, s.admitted_rate, s.capacity_rate)
        felt = own.judge(s.t, not outside, perturbed, self._came_back(own.trace, own.started_at))
        judged = not outside or not perturbed
        if judged and own.streak.held(s.t, self._recovery.confirm):
            self._settle(incident, own, "recovered", s.t)
        elif s.t > limit:
            unjudged = own.stalled_s > 0 and own.streak.held_up and not own.streak.seen_out()
            self._settle(incident, own, "unmeasured" if unjudged else "failed", s.t)
        return felt

    def _settle(self, incident: Incident, own: Unplanned, outcome: Verdict, now: float) -> None:
        if outcome == "recovered":
            own.recover(now)
        else:
            own.settle(outcome)
        self._armed = outcome == "recovered"  # a failed one lingers: the next incident starts once it is over
        if not incident.open:
            self._registry.close(incident, now)
