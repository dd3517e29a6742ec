"""Each fault's recovery watched against the steady state, tick by tick, to its verdict; the verdicts' totals.

A fault's *mechanism* recovered when the runtime's own healing did its job (its action says when); its *service*
recovered when the figures stayed within tolerance of the baseline (or the SLO) for ``recovery.confirm``, a
stretch that reaches past the mechanism's recovery, dated back to where the trailing window's figures came back
(see :meth:`Recoveries.came_back`). Not recovered within ``recovery.limit`` of the fault's end: failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from chaosd.config.settings import RecoveryConfig
from chaosd.core.history import Sum
from chaosd.events.log import EventLog
from chaosd.faults.catalogue import CATALOGUE, is_remedy
from chaosd.faults.host import HostWatch
from chaosd.faults.incident_registry import IncidentRegistry
from chaosd.faults.record import CameBack, FaultRecord, Trace
from chaosd.faults.runtime import Runtime
from chaosd.faults.steady import ServiceView, SteadyState
from chaosd.views.wire import PENDING, TERMINAL, Verdict

__all__ = ["Recoveries", "TickSeen"]


@dataclass(slots=True)
class TickSeen:
    """What one tick showed of the faults in play, by incident: out of tolerance, open through a perturbed tick."""

    felt: set[int] = field(default_factory=set)  # counted once however many faults
    stalled: set[int] = field(default_factory=set)
    unsettled: bool = False  # a fault (not a resume) still without a verdict: the baseline stays unfed


class Recoveries:
    """Judges the faults in play each tick and counts their verdicts (what the score, the report's summary and the
    metrics read, in O(1) however many faults there were)."""

    def __init__(
        self,
        recovery: RecoveryConfig,
        runtime: Runtime,
        steady: SteadyState,
        host: HostWatch,
        registry: IncidentRegistry,
        events: EventLog,
        tick: float,
    ) -> None:
        self._recovery = recovery
        self._rt = runtime
        self._steady = steady
        self._host = host
        self._registry = registry
        self._events = events
        self._tick = tick
        self.outcomes: dict[Verdict, int] = dict.fromkeys(TERMINAL, 0)
        self.recovery_by_action: dict[str, Sum] = {}
        # Date a recovery back to where its windowed figures came back (see came_back); False: at the first tick
        # judged within tolerance, the window's resolution (a control for tests and benchmarks).
        self.dated = True

    @property
    def mean_recovery_s(self) -> float | None:
        """The mean of every fault's own recovery time (faults in shared incidents have none)."""
        count = sum(s.count for s in self.recovery_by_action.values())
        return sum(s.value for s in self.recovery_by_action.values()) / count if count else None

    def tick(self, records: Sequence[FaultRecord], s: ServiceView, dt: float, perturbed: bool) -> TickSeen:
        """One telemetry tick for the faults in play; ``perturbed``: the host's figures (see :class:`HostWatch`)."""
        seen = TickSeen()
        tally = self._registry.tally() if records else ()
        for record in records:
            if record.outcome not in PENDING:  # judged already, kept until its TTL reverts it
                continue
            self._registry.count_impact(record, tally)
            if perturbed:
                record.stall(dt)
                seen.stalled.add(record.incident)
            if self.observe(record, s, dt if perturbed else 0.0):
                seen.felt.add(record.incident)
            # A remedy is instantaneous; anything else still in play keeps the baseline unfed.
            seen.unsettled = seen.unsettled or (record.outcome in PENDING and not is_remedy(record.action))
        return seen

    def observe(self, record: FaultRecord, s: ServiceView, perturbed: float = 0.0) -> bool:
        """Advance one fault's verdict; True when the service was out of tolerance while it was active.

        ``perturbed``: this tick's seconds, when a stall of the daemon's own process still shows in the
        figures (else 0). Out of tolerance then, the tick neither breaks a streak nor counts towards its
        hold, and is not impact: the lateness is the host's. Within tolerance despite the host, it counts as
        any tick does. At ``recovery.limit`` a fault whose last judged tick was within tolerance (or that had
        none) is unmeasured, not failed: the host kept it from being judged.
        """
        self._mechanism(record, s.t)
        base = record.baseline
        outside = self._steady.outside(s, base)
        end = record.reverted_at if record.reverted_at is not None else record.injected_at + record.ttl
        if outside is None:
            if not record.active and (record.mechanism_recovered_at is not None or s.t > end + self._recovery.limit):
                self._settle(record, "unmeasured", s.t)  # nothing to judge the service against: no verdict, no time
            return False
        healed_at = record.mechanism_recovered_at
        depth = s.queue_depth - (base.queue_depth if base is not None else 0.0)
        record.see(s.t, outside, perturbed, depth, s.admitted_rate, s.capacity_rate)
        felt = record.judge(s.t, not outside, perturbed, self.came_back(record.trace, healed_at), self._tick)
        judged = not outside or not perturbed
        if judged and healed_at is not None and record.streak.held(s.t, self._recovery.confirm) and s.t >= healed_at:
            self._settle(record, "recovered", s.t)
        elif s.t > end + self._recovery.limit:
            # The host's stalls kept the service from being judged since the fault's end (or its mechanism's
            # recovery), or cut short a stretch within tolerance: no verdict is made up.
            seen_out = record.streak.seen_out(max(end, healed_at or end))
            unjudged = record.stalled_s > 0 and record.streak.held_up and not seen_out
            self._settle(record, "unmeasured" if unjudged and healed_at else "failed", s.t)
        return felt

    def _mechanism(self, record: FaultRecord, t: float) -> None:
        """Whether something lifted the fault, or its mechanism recovered, by ``t`` (told as an event)."""
        spec = CATALOGUE[record.action]
        lifting = record.active and record.lifted_at is None and not record.heals
        if lifting and spec.lifted(self._rt, record.targets, record.memo):
            record.lift(t)
        if record.mechanism_recovered_at is None:
            healed = record.heals and spec.healed(self._rt, record.targets, record.memo)
            lifted = not record.active or record.lifted_at is not None
            if healed or (lifted and spec.restored(self._rt, record.targets, record.memo)):
                record.heal(t)
                self._events.record(
                    t, "fault", about=record, id=record.id, action=record.action, state="mechanism_recovered"
                )

    def came_back(self, trace: Trace, healed: float | None) -> CameBack:
        """Where the service came back, for a stretch within tolerance starting at a tick ``t``.

        Right after a judged tick out, the trailing window's figures lag: dated back to the window's start, or
        the queue's first tick back within tolerance, whichever is later (:meth:`Trace.dated_back`), and
        never before the heal or a tick the host perturbed. Otherwise (the fault's first judged tick) at ``t``.
        """

        def dated(t: float, was_out: bool) -> float:
            if not (self.dated and was_out):
                return t
            not_before = max(self._host.last_perturbed, healed if healed is not None and healed <= t else -math.inf)
            return trace.dated_back(t, self._host.window, not_before)

        return dated

    def _settle(self, record: FaultRecord, outcome: Verdict, now: float) -> None:
        """The fault's verdict: counted in the totals, its incident judged once its last member has one."""
        self.outcomes[outcome] += 1
        if outcome == "recovered":
            record.recover(now)
            # Shared incidents are judged as one (see the incident): the fault has no time of its own then.
            if (seconds := record.recovery_s) is not None:
                self.recovery_by_action.setdefault(record.action, Sum()).add(seconds)
            view = record.as_dict()
            self._events.record(
                now,
                "fault",
                about=record,
                id=record.id,
                action=record.action,
                state=outcome,
                recovery_s=seconds,
                phases=view["phases"],
                prediction=view["prediction"],
            )
        else:
            record.settle(outcome)
            self._events.record(now, "fault", about=record, id=record.id, action=record.action, state=outcome)
        self._registry.settled(record, now)
