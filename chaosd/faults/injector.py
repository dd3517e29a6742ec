"""The fault injector: applies catalogue actions as values with a TTL, watches their recovery, keeps us safe.

Safety: a cap on concurrent faults; a lever that reverts every fault and refuses new ones until
released; stop conditions that pull it. Recovery is observed on what users feel: a fault's
*mechanism* recovered when the runtime's own healing did its job (its action says when), and its
*service* recovered when goodput, error rate, p95 sojourn and queue depth stayed within tolerance of
the steady-state baseline (or within the configured SLO) for the confirmation window, a stretch that
reaches past the mechanism's recovery; its start is dated back to where the trailing window's figures came
back (see :meth:`~chaosd.faults.recovery.Recoveries.came_back`), and each recovery's phases and fluid-model
prediction are kept in its :class:`~chaosd.faults.record.Trace`. The baseline is fed only while no fault is active or
recovering (nor while the collapse detector says failing: failures are no steady state), and counts only
once it covers ``recovery.baseline_min``; a fault with neither a baseline
nor an SLO to judge against is ``unmeasured``, never recovered. Two clocks: faults a mechanism heals
are timed from injection (time to heal); faults nothing heals, from the moment they are lifted (time
to restore), with the seconds out of tolerance while active reported beside it (``impact_s``). Not
recovered within ``limit`` of the fault's end: a failed recovery.

Incidents nobody injected: with no fault in play, a service out of tolerance of its baseline (or SLO) on
every judged tick for ``unplanned_after`` seconds opens an incident with no faults, timed from its first
tick out, its cause read from the stages' failed attempts since (see
:class:`~chaosd.faults.unplanned.UnplannedWatch`). Goodput is
judged against the baseline's scaled to the load offered now (less load, less goodput: no outage). Only a
service seen within tolerance since the last verdict can open one (one deviation, one incident: a failed
recovery that lingers is not a new incident), and a tick the host perturbed never counts towards one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from chaosd.config.settings import FaultsConfig, RecoveryConfig, SloConfig
from chaosd.core.errors import Conflict, NotFound
from chaosd.core.history import Kept, Sum
from chaosd.events.log import EventLog
from chaosd.faults.active import ActiveFaults
from chaosd.faults.host import HostWatch
from chaosd.faults.incident_registry import IncidentRegistry
from chaosd.faults.incidents import Incident, IncidentBook
from chaosd.faults.record import IMPACT_KINDS, Baseline, FaultRecord, check_labels, matches
from chaosd.faults.recovery import Recoveries, TickSeen
from chaosd.faults.runtime import Runtime
from chaosd.faults.safety import FaultGate, StopConditions
from chaosd.faults.steady import ServiceView, SteadyState
from chaosd.faults.unplanned import UnplannedWatch
from chaosd.views.wire import RevertCause, Verdict

# Baseline, FaultRecord, check_labels and matches live in chaosd.faults.record, ServiceView in chaosd.faults.steady;
# imported from here too.
__all__ = [
    "Baseline",
    "FaultRecord",
    "Injector",
    "ServiceView",
    "check_labels",
    "matches",
]

_NOTHING_SEEN = TickSeen()  # what a tick with nothing in play shows: never added to (see Injector.on_tick)


class Injector:
    """Owns every fault of one runtime; ``on_tick`` drives TTLs, recovery and stop conditions.

    Its parts: the gate a fault passes (:class:`FaultGate`), the faults in play (:class:`ActiveFaults`), the steady
    state (:class:`SteadyState`) and the host's perturbations (:class:`HostWatch`) they are judged by, their
    recoveries (:class:`Recoveries`), the incidents (:class:`IncidentRegistry`), those nobody injected
    (:class:`UnplannedWatch`), and the stop conditions (:class:`StopConditions`).
    """

    def __init__(
        self,
        cfg: FaultsConfig,
        recovery: RecoveryConfig,
        slo: SloConfig,
        runtime: Runtime,
        rng: random.Random,
        events: EventLog,
        tick: float,
        keep: int = 1000,
        *,
        stall: float = float("inf"),
        window: float = 1.0,
        unplanned_after: float | None = None,
    ) -> None:
        """``stall``: a tick this late means the process was paused; ``window``: how long the telemetry's
        figures (its p95, its rates) still show such a pause; ``unplanned_after``: seconds out of tolerance
        with no fault in play before an incident nobody injected opens (``math.inf``: never; None:
        ``recovery.unplanned_after``, where 0 is never too)."""
        self.cfg = cfg
        self.recovery = recovery
        self.slo = slo
        self._tick = tick
        self.rt = runtime
        self._events = events
        # The newest ``keep`` faults and incidents; older ones are in storage (the daemon), and in the totals.
        self.faults: Kept[FaultRecord] = Kept(keep)
        self._registry = IncidentRegistry(runtime, events, keep)
        self.incidents: Kept[Incident] = self._registry.incidents
        self.book: IncidentBook = self._registry.book  # every incident
        self.books: list[IncidentBook] = self._registry.books  # those of the open plans and windows
        self._gate = FaultGate(cfg, runtime, rng)
        self._active = ActiveFaults(runtime, self._registry, events)
        self._steady = SteadyState(recovery, slo, tick, runtime)
        self._host = HostWatch(tick, recovery.cpu_wait, stall=stall, window=window)
        self._recoveries = Recoveries(recovery, runtime, self._steady, self._host, self._registry, events, tick)
        # Totals over every fault ever: what the score, the report's summary and the metrics read, in O(1).
        self.outcomes: dict[Verdict, int] = self._recoveries.outcomes
        self.recovery_by_action: dict[str, Sum] = self._recoveries.recovery_by_action
        self._unplanned = UnplannedWatch(
            recovery,
            runtime,
            self._steady,
            self._registry,
            events,
            tick,
            self._recoveries.came_back,
            unplanned_after,
        )
        self._stops = StopConditions(cfg.stop_conditions, self._steady)

    # --- what it holds ----------------------------------------------------------------------------

    def active(self) -> list[FaultRecord]:
        return self._active.active()

    @property
    def in_play(self) -> Sequence[FaultRecord]:
        """Faults still active or without a verdict: what each tick works through (read-only)."""
        return self._active.in_play

    @property
    def mean_recovery_s(self) -> float | None:
        """The mean of every fault's own recovery time (faults in shared incidents have none)."""
        return self._recoveries.mean_recovery_s

    @property
    def unplanned_open(self) -> bool:
        """An incident nobody injected is open (its own verdict or a fault that joined it pending)."""
        return self._unplanned.open

    @property
    def injected(self) -> int:
        """Faults injected so far (ids count from 1: the newest id)."""
        return self.faults.total

    @property
    def lever(self) -> str | None:
        """Why the safety lever is pulled, or None."""
        return self._gate.lever

    @lever.setter
    def lever(self, reason: str | None) -> None:
        """Pulled again as it was (the daemon restoring it), without reverting anything; None releases it."""
        if reason is None:
            self._gate.release()
        else:
            self._gate.pull(reason)

    @property
    def dated(self) -> bool:
        """Recoveries dated back to where their windowed figures came back (see :meth:`Recoveries.came_back`)."""
        return self._recoveries.dated

    @dated.setter
    def dated(self, on: bool) -> None:
        self._recoveries.dated = on

    def baseline(self) -> Baseline | None:
        """The fault-free steady state, or None until it covers ``recovery.baseline_min``."""
        return self._steady.baseline()

    def get(self, fault_id: int) -> FaultRecord:
        """A fault by id: ids count from 1 in injection order, so it is found by index, not by a search."""
        record = self.faults.get(fault_id)
        if record is not None:
            return record
        if 0 < fault_id <= self.faults.total:
            kept = self.faults.limit
            raise NotFound("id", f"fault {fault_id} is older than the {kept} kept in memory (history.faults)")
        raise NotFound("id", f"no fault {fault_id}")

    # --- commands -----------------------------------------------------------------------------

    def inject(
        self,
        action: str,
        target: str | None = None,
        params: dict[str, object] | None = None,
        ttl: float | None = None,
        labels: dict[str, str] | None = None,
        owner: object | None = None,
    ) -> FaultRecord:
        """Apply one fault, or raise :class:`FaultError` naming the field, having changed nothing."""
        let = self._gate.admit(action, target, params, ttl, labels, self.active())
        now = self.rt.elapsed()
        baseline, heals, tally = self.baseline(), let.spec.heals(self.rt, let.targets), self._registry.tally()
        memo = let.spec.apply(self.rt, let.targets, let.params)
        record = FaultRecord(
            id=self.faults.total + 1,
            action=action,
            target=let.target,
            targets=let.targets,
            params=let.params,
            ttl=let.ttl,
            injected_at=now,
            baseline=baseline,
            memo=memo,
            heals=heals,
            tally_from=tally,
            impact_tasks=dict.fromkeys(IMPACT_KINDS, 0),
            labels=let.labels,
            owner=owner,
        )
        self.faults.append(record)
        self._active.add(record)
        self._registry.join(record)
        self._events.record(
            now, "fault", about=record, id=record.id, action=action, state="injected", targets=list(let.targets)
        )
        return record

    def revert(self, fault_id: int, why: RevertCause = "revert") -> FaultRecord:
        record = self.get(fault_id)
        if not record.active:
            raise Conflict("id", f"fault {fault_id} already ended ({record.reverted_by})")
        self._active.revert(record, why)
        return record

    def revert_matching(
        self, labels: dict[str, str], actions: frozenset[str] = frozenset(), states: frozenset[str] = frozenset()
    ) -> list[FaultRecord]:
        """Revert the active faults a selector picks (labels, actions): exactly those, and say which."""
        picked = [f for f in self.active() if matches(f, labels, actions, states)]
        for record in picked:
            self._active.revert(record, "revert")
        return picked

    def revert_all(self, why: RevertCause = "revert") -> int:
        active = self.active()
        for record in active:
            self._active.revert(record, why)
        return len(active)

    def pull_lever(self, reason: str) -> int:
        self._gate.pull(reason)
        reverted = self.revert_all("lever")
        self._events.record(self.rt.elapsed(), "lever", state="pulled", reason=reason, reverted=reverted)
        return reverted

    def close(self, why: str) -> None:
        """Accept no fault from now on, whoever asks (the API, a scenario, survival)."""
        self._gate.close(why)

    def release_lever(self) -> None:
        self._gate.release()
        self._events.record(self.rt.elapsed(), "lever", state="released")

    # --- observation --------------------------------------------------------------------------

    def on_tick(self, s: ServiceView, steady: bool = True) -> None:
        """One telemetry tick. ``steady`` False (the detector says failing) keeps the tick out of the baseline."""
        dt, perturbed = self._host.see(s)  # a tick the host perturbed judges no recovery (see Recoveries.observe)
        active = self._active
        if active.in_play:
            active.expire(s.t)
            seen = self._recoveries.tick(active.in_play, s, dt, perturbed)
            active.prune()
            quiet = active.quiet()
        else:  # nothing in play (most ticks of most runs): nothing to expire, judge or let go of
            seen, quiet = _NOTHING_SEEN, True
        # Incidents nobody injected: the open one judged, or the service watched while nothing is in play.
        incident, out = self._unplanned.tick(s, dt, perturbed, quiet)
        if incident is not None:
            if seen is _NOTHING_SEEN:
                seen = TickSeen()  # its own, to add to
            if perturbed:
                seen.stalled.add(incident.id)
            if out:
                seen.felt.add(incident.id)
        if seen.felt:
            self._registry.felt(seen.felt, self._tick)
        if seen.stalled:
            self._registry.stalled(seen.stalled, dt)
        # The baseline takes host-perturbed ticks too: on a host that stays busy, its steady state is a busy one.
        if not seen.unsettled and not self._unplanned.open:
            if steady:
                self._steady.feed(s)
            else:  # a tick an unplanned candidate counted, which the baseline did not take
                self._unplanned.unfed(perturbed)
        if self._gate.lever is None and (reason := self._stops.breached(s)) is not None:
            self.pull_lever(reason)
