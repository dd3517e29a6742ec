"""The fault injector: applies catalogue actions as values with a TTL, watches their recovery, keeps us safe.

Safety: a cap on concurrent faults; a lever that reverts every fault and refuses new ones until
released; stop conditions that pull it. Recovery is observed on what users feel: a fault's
*mechanism* recovered when the runtime's own healing did its job (its action says when), and its
*service* recovered when goodput, error rate, p95 sojourn and queue depth stayed within tolerance of
the steady-state baseline (or within the configured SLO) for the confirmation window, a stretch that
reaches past the mechanism's recovery; its start is dated back to where the trailing window's figures came
back (see :meth:`Injector._came_back`), and each recovery's phases and fluid-model prediction are kept in its
:class:`~chaosd.faults.record.Trace`. The baseline is fed only while no fault is active or
recovering (nor while the collapse detector says failing: failures are no steady state), and counts only
once it covers ``recovery.baseline_min``; a fault with neither a baseline
nor an SLO to judge against is ``unmeasured``, never recovered. Two clocks: faults a mechanism heals
are timed from injection (time to heal); faults nothing heals, from the moment they are lifted (time
to restore), with the seconds out of tolerance while active reported beside it (``impact_s``). Not
recovered within ``limit`` of the fault's end: a failed recovery.

Incidents nobody injected: with no fault in play, a service out of tolerance of its baseline (or SLO) on
every judged tick for ``unplanned_after`` seconds opens an incident with no faults, timed from its first
tick out, its cause read from the stages' failed attempts since (see :meth:`Injector._watch`). Goodput is
judged against the baseline's scaled to the load offered now (less load, less goodput: no outage). Only a
service seen within tolerance since the last verdict can open one (one deviation, one incident: a failed
recovery that lingers is not a new incident), and a tick the host perturbed never counts towards one.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chaosd.config.settings import FaultsConfig, RecoveryConfig, SloConfig
from chaosd.core.errors import Conflict, FaultError, NotFound, Unavailable
from chaosd.core.history import Kept, Sum
from chaosd.events.log import EventLog
from chaosd.faults.catalogue import CATALOGUE
from chaosd.faults.incidents import Incident, IncidentBook, Unplanned
from chaosd.faults.record import (
    IMPACT_KINDS,
    Baseline,
    FaultRecord,
    Trace,
    check_labels,
    impact_between,
    matches,
)
from chaosd.faults.runtime import Runtime
from chaosd.views import FailReason, IncidentCause, ServiceSignal
from chaosd.views.wire import PENDING, TERMINAL, RevertCause, Verdict

# Baseline, FaultRecord, check_labels and matches live in chaosd.faults.record; imported from here too.
__all__ = [
    "Baseline",
    "FaultRecord",
    "Injector",
    "ServiceView",
    "check_labels",
    "matches",
]

_ERROR_SLACK = 0.05  # the error rate may exceed the baseline's by 5 points (noise of a 1 s window)


class ServiceView(Protocol):
    """What the injector reads from each telemetry snapshot."""

    @property
    def t(self) -> float: ...
    @property
    def throughput(self) -> float: ...
    @property
    def goodput(self) -> float: ...
    @property
    def arrival_rate(self) -> float: ...
    @property
    def error_rate(self) -> float: ...
    @property
    def sojourn_p95(self) -> float: ...
    @property
    def queue_depth(self) -> int: ...
    @property
    def lateness(self) -> float: ...
    @property
    def cpu_wait(self) -> float: ...
    @property
    def mean_service(self) -> float: ...
    @property
    def capacity_rate(self) -> float: ...
    @property
    def admitted_rate(self) -> float: ...


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


class Injector:
    """Owns every fault of one runtime; ``on_tick`` drives TTLs, recovery and stop conditions."""

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
        self._min_baseline = max(1, round(recovery.baseline_min / tick))
        self.rt = runtime
        self._rng = rng
        self._events = events
        # The newest ``keep`` faults and incidents; older ones are in storage (the daemon), and in the totals.
        self.faults: Kept[FaultRecord] = Kept(keep)
        # Not reverted yet, or without a verdict yet (a fault may recover while still active): a tick's work.
        self._pending: list[FaultRecord] = []
        self.incidents: Kept[Incident] = Kept(keep)
        # Totals over every fault ever: what the score, the report's summary and the metrics read, in O(1).
        self.outcomes: dict[Verdict, int] = dict.fromkeys(TERMINAL, 0)
        self.recovery_by_action: dict[str, Sum] = {}
        self.book = IncidentBook()  # every incident
        self.books: list[IncidentBook] = []  # those of the open plans and windows
        self.lever: str | None = None  # why the safety lever is pulled, or None
        self.closed: str | None = None  # why no fault is accepted any more (shutdown), or None
        self._window: deque[ServiceView] = deque(maxlen=max(1, round(recovery.baseline_window / tick)))
        self._stop_since: dict[int, float] = {}
        self._now = 0.0
        self._stall = stall
        self._stall_window = window
        self._perturbed_until = float("-inf")
        self._last_perturbed = float("-inf")  # the newest tick the host perturbed
        # Date a recovery back to where its windowed figures came back (see _came_back); False: at the first tick
        # judged within tolerance, the window's resolution (a control for tests and benchmarks).
        self.dated = True
        self._waits: deque[float] = deque(maxlen=max(1, round(window / tick)))  # cpu_wait per tick, over a window
        self._wait_limit = recovery.cpu_wait * window
        if unplanned_after is None:
            unplanned_after = recovery.unplanned_after or math.inf
        self._open_after = math.inf if math.isinf(unplanned_after) else max(1, round(unplanned_after / tick))
        self._armed = False  # seen within tolerance, nothing in play, since the last verdict: may open one
        self._candidate: _Candidate | None = None
        self._before: _Reading = ((), {}, {})  # the counts at the last tick within tolerance
        self._unplanned: Incident | None = None  # the newest unplanned incident, until it closes

    # --- commands -----------------------------------------------------------------------------

    def active(self) -> list[FaultRecord]:
        return [f for f in self._pending if f.active]

    @property
    def in_play(self) -> Sequence[FaultRecord]:
        """Faults still active or without a verdict: what each tick works through (read-only)."""
        return self._pending

    @property
    def mean_recovery_s(self) -> float | None:
        """The mean of every fault's own recovery time (faults in shared incidents have none)."""
        count = sum(s.count for s in self.recovery_by_action.values())
        return sum(s.value for s in self.recovery_by_action.values()) / count if count else None

    @property
    def unplanned_open(self) -> bool:
        """An incident nobody injected is open (its own verdict or a fault that joined it pending)."""
        return self._unplanned is not None and self._unplanned.open

    @property
    def injected(self) -> int:
        """Faults injected so far (ids count from 1: the newest id)."""
        return self.faults.total

    def get(self, fault_id: int) -> FaultRecord:
        """A fault by id: ids count from 1 in injection order, so it is found by index, not by a search."""
        record = self.faults.get(fault_id)
        if record is not None:
            return record
        if 0 < fault_id <= self.faults.total:
            kept = self.faults.limit
            raise NotFound("id", f"fault {fault_id} is older than the {kept} kept in memory (history.faults)")
        raise NotFound("id", f"no fault {fault_id}")

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
        if self.closed is not None:
            raise Unavailable("action", self.closed)
        if self.lever is not None:
            raise Conflict("action", f"the safety lever is pulled ({self.lever}); release it first")
        spec = CATALOGUE.get(action)
        if spec is None:
            raise FaultError("action", f"unknown action {action!r} (valid: {', '.join(sorted(CATALOGUE))})")
        ttl = self.cfg.default_ttl if ttl is None else ttl
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or ttl <= 0:
            raise FaultError("ttl", f"must be a positive number of seconds (got {ttl!r})")
        if ttl > self.cfg.max_ttl:
            raise FaultError("ttl", f"{ttl:g} s exceeds the maximum of {self.cfg.max_ttl:g} s")
        checked = spec.check_params(params or {})
        tags = check_labels(labels or {})
        active = self.active()
        blocking = [f for f in active if f.action != "resume_agent"]  # a resume is instantaneous
        if action != "resume_agent" and len(blocking) >= self.cfg.max_concurrent:
            raise Conflict("action", f"{len(blocking)} faults are active, the cap is {self.cfg.max_concurrent}")
        target = target or spec.default_target
        targets = spec.resolve(self.rt, target, self._rng)
        busy = {(CATALOGUE[f.action].group, t) for f in active for t in f.targets}
        conflict = spec.conflict(self.rt, targets, busy)
        if conflict is not None:
            raise Conflict("target", conflict)
        now = self.rt.elapsed()
        record = FaultRecord(
            id=self.faults.total + 1,
            action=action,
            target=target,
            targets=targets,
            params=checked,
            ttl=float(ttl),
            injected_at=now,
            baseline=self.baseline(),
            heals=spec.heals(self.rt, targets),
            tally_from=self.tally(),
            labels=tags,
            owner=owner,
        )
        record.impact_tasks = dict.fromkeys(IMPACT_KINDS, 0)
        record.memo = spec.apply(self.rt, targets, checked)
        self.faults.append(record)
        self._pending.append(record)
        self._join_incident(record)
        self._events.record(
            now, "fault", about=record, id=record.id, action=action, state="injected", targets=list(targets)
        )
        return record

    def _join_incident(self, record: FaultRecord) -> None:
        """Injected while another fault is still active or recovering: one incident, judged together."""
        last = self.incidents.last()
        if record.action == "resume_agent":  # an instantaneous remedy, not a blow of its own
            record.incident = self.incidents.total
            return
        if last is not None and last.open:
            incident = last
            incident.members.append(record)
            for member in incident.members:
                member.shared = True
        else:
            incident = Incident(self.incidents.total + 1, [record], tally_from=record.tally_from)
            incident.tasks = dict(record.impact_tasks)
            self.incidents.append(incident)
        record.incident = incident.id

    def revert(self, fault_id: int, why: RevertCause = "revert") -> FaultRecord:
        record = self.get(fault_id)
        if not record.active:
            raise Conflict("id", f"fault {fault_id} already ended ({record.reverted_by})")
        self._revert(record, why)
        return record

    def revert_matching(
        self, labels: dict[str, str], actions: frozenset[str] = frozenset(), states: frozenset[str] = frozenset()
    ) -> list[FaultRecord]:
        """Revert the active faults a selector picks (labels, actions): exactly those, and say which."""
        picked = [f for f in self.active() if matches(f, labels, actions, states)]
        for record in picked:
            self._revert(record, "revert")
        return picked

    def revert_all(self, why: RevertCause = "revert") -> int:
        active = self.active()
        for record in active:
            self._revert(record, why)
        return len(active)

    def pull_lever(self, reason: str) -> int:
        self.lever = reason
        reverted = self.revert_all("lever")
        self._events.record(self.rt.elapsed(), "lever", state="pulled", reason=reason, reverted=reverted)
        return reverted

    def close(self, why: str) -> None:
        """Accept no fault from now on, whoever asks (the API, a scenario, survival)."""
        self.closed = why

    def release_lever(self) -> None:
        self.lever = None
        self._events.record(self.rt.elapsed(), "lever", state="released")

    def tally(self) -> tuple[int, ...]:
        """Counts so far by kind (see ``IMPACT_KINDS``): a fault's impact is the difference of two tallies."""
        total = self.rt.ledger.total
        corrupted = sum(store.undetected_reads for store in self.rt.memory.values())
        return total.late, total.failed, total.rejected, total.degraded, self.rt.audit.total.count, corrupted

    def _count_impact(self, record: FaultRecord, tally: tuple[int, ...]) -> None:
        """What users felt so far: the fault's own while it is active, its incident's until the verdict."""
        if record.active:
            record.impact_tasks = impact_between(record.tally_from, tally)
        if record.incident and record.action != "resume_agent":
            incident = self.incidents.get(record.incident)
            if incident is not None:
                incident.tasks = impact_between(incident.tally_from, tally)

    def _revert(self, record: FaultRecord, why: RevertCause) -> None:
        CATALOGUE[record.action].revert(self.rt, record.targets, record.params, record.memo)
        self._count_impact(record, self.tally())
        record.reverted_at = self.rt.elapsed()
        record.reverted_by = why
        if record.outcome == "active":
            record.outcome = "recovering"
        self._events.record(
            record.reverted_at, "fault", about=record, id=record.id, action=record.action, state="reverted", by=why
        )

    # --- observation --------------------------------------------------------------------------

    def baseline(self) -> Baseline | None:
        """The fault-free steady state, or None until it covers ``recovery.baseline_min``."""
        window = self._window
        n = len(window)
        if n < self._min_baseline:
            return None
        return Baseline(
            goodput=sum(s.goodput for s in window) / n,
            error_rate=sum(s.error_rate for s in window) / n,
            sojourn_p95=sorted(s.sojourn_p95 for s in window)[n // 2],
            queue_depth=sum(s.queue_depth for s in window) / n,
            seconds=n * self._tick,
        )

    def _within(self, s: ServiceView, b: Baseline | None) -> bool | None:
        """Whether the service is as good as its steady state (or its SLO); None with nothing to judge by."""
        outside = self._outside(s, b)
        return None if outside is None else not outside

    def _outside(self, s: ServiceView, b: Baseline | None, offered: float = 0.0) -> list[ServiceSignal] | None:
        """The figures out of tolerance of the steady state (or the SLO), none when it is as good; None with
        nothing to judge by. ``offered``: the baseline's offered rate, to scale its goodput to less load."""
        slo = self.slo
        if b is None and slo.availability is None and slo.p95 is None:
            return None
        tol = self.recovery.tolerance
        out: list[ServiceSignal] = []
        if slo.availability is not None:  # goodput over offered: refusals and failures both count
            if s.arrival_rate > 0 and s.goodput / s.arrival_rate < slo.availability:
                out.append("availability")
        elif b is not None:
            load = s.arrival_rate / offered if 0 < s.arrival_rate < offered else 1.0
            if s.goodput < (1 - tol) * b.goodput * load:
                out.append("goodput")
            if s.error_rate > b.error_rate + _ERROR_SLACK:
                out.append("error_rate")
        slack = 4 * s.mean_service  # tiny baselines (an idle queue) need an absolute margin
        if slo.p95 is not None:
            if s.sojourn_p95 > slo.p95:
                out.append("p95")
        elif b is not None and s.sojourn_p95 > (1 + tol) * b.sojourn_p95 + slack:
            out.append("p95")
        if b is not None and s.queue_depth > (1 + tol) * b.queue_depth + len(self.rt.workers):
            out.append("queue")
        return out

    def on_tick(self, s: ServiceView, steady: bool = True) -> None:
        """One telemetry tick. ``steady`` False (the detector says failing) keeps the tick out of the baseline."""
        dt = s.t - self._now
        self._now = s.t
        # A paused process (a stalled host) delays every task in flight: for a window its figures are the
        # host's, not the pipeline's. Such ticks judge no recovery (see _observe).
        # Likewise a window in which the process mostly waited for a CPU (a busy host: timers fire nearly on time,
        # but nothing is served meanwhile).
        self._waits.append(s.cpu_wait)
        if s.lateness >= self._stall or sum(self._waits) >= self._wait_limit:
            self._perturbed_until = s.t + self._stall_window
        perturbed = s.t < self._perturbed_until
        if perturbed:
            self._last_perturbed = s.t
        # Work per tick follows the faults still in play, not every fault the daemon ever injected.
        pending = self._pending
        for record in pending:
            if record.active and s.t >= record.injected_at + record.ttl:
                self._revert(record, "ttl")
        unsettled = False
        felt: set[int] = set()  # incidents out of tolerance this tick: counted once however many faults
        stalled: set[int] = set()  # incidents open through a perturbed tick: counted once likewise
        tally = self.tally() if pending else ()
        for record in pending:
            if record.outcome not in PENDING:  # judged already, kept until its TTL reverts it
                continue
            self._count_impact(record, tally)
            if perturbed:
                record.stalled_s += dt
                stalled.add(record.incident)
            if self._observe(record, s, dt if perturbed else 0.0):
                felt.add(record.incident)
            # A resume is instantaneous; anything else still in play keeps the baseline unfed.
            unsettled = unsettled or (record.outcome in PENDING and record.action != "resume_agent")
        self._pending = [r for r in pending if r.active or r.outcome in PENDING]
        # Incidents nobody injected: the open one judged, or the service watched while nothing is in play.
        unplanned = self._unplanned
        if unplanned is not None and unplanned.unplanned is not None and unplanned.unplanned.outcome in PENDING:
            if perturbed:
                unplanned.unplanned.stalled_s += dt
                stalled.add(unplanned.id)
            unplanned.tasks = impact_between(unplanned.tally_from, tally or self.tally())
            if self._observe_unplanned(unplanned, s, dt if perturbed else 0.0):
                felt.add(unplanned.id)
        elif all(r.action == "resume_agent" for r in self._pending) and not self.unplanned_open:
            self._watch(s, perturbed)
        else:  # a fault in play: its own verdict judges the service; a new deviation starts after it
            self._armed = False
            self._candidate = None
        for number in felt:
            if (incident := self.incidents.get(number)) is not None:  # 0: a resume with no incident before it
                incident.impact_s += self._tick
        for number in stalled:
            if (incident := self.incidents.get(number)) is not None:
                incident.stalled_s += dt
        # The baseline takes host-perturbed ticks too: on a host that stays busy, its steady state is a busy one.
        if not unsettled and not self.unplanned_open:
            if steady:
                self._window.append(s)
            elif self._candidate is not None and not perturbed:  # a tick it counted, which the baseline did not take
                self._candidate.unfed += 1
        self._check_stop_conditions(s)

    # --- incidents nobody injected --------------------------------------------------------------

    def _watch(self, s: ServiceView, perturbed: bool) -> None:
        """No fault in play: open an unplanned incident once the service stays out of tolerance long enough.

        Its clock starts at the first tick out; the ticks that led to it leave the baseline (they were the
        incident's, not the steady state's). A tick the host perturbed neither counts towards the run nor breaks
        it, as in a recovery's confirming stretch: a stall mid-outage delays the opening, and does not hide it.
        """
        if perturbed:
            return
        base = self.baseline()
        offered = self._offered()
        outside = self._outside(s, base, offered)
        if outside is None:
            return
        if not outside:
            self._armed = True
            self._candidate = None
            # Where a deviation's counts start: the last tick within tolerance (its first tick out shows its
            # window's failures already).
            self._before = (self.tally(), self._failures(), self._handler_errors())
            return
        if not self._armed:
            return
        if outside == ["queue"]:  # a queue alone is no outage users feel (a busy queue's excursions): not yet
            self._candidate = None
            return
        candidate = self._candidate
        if candidate is None:
            candidate = self._candidate = _Candidate(s.t, base, offered, outside, *self._before)
        else:  # every figure that left tolerance on the way to it, in the order they first did
            candidate.signals += [signal for signal in outside if signal not in candidate.signals]
        candidate.ticks += 1
        if candidate.ticks >= self._open_after:
            for _ in range(min(candidate.ticks - 1 - candidate.unfed, len(self._window))):
                self._window.pop()
            self._open_unplanned(candidate, s.t)

    def _offered(self) -> float:
        window = self._window
        return sum(s.arrival_rate for s in window) / len(window) if window else 0.0

    def _failures(self) -> dict[tuple[str, FailReason], int]:
        return {(name, why): n for name, stage in self.rt.stages.items() for why, n in stage.failures.items()}

    def _handler_errors(self) -> dict[tuple[str, str], int]:
        return {(name, kind): n for name, stage in self.rt.stages.items() for kind, n in stage.handler_errors.items()}

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

    def _open_unplanned(self, c: _Candidate, now: float) -> None:
        cause: IncidentCause = {"stage": None, "reason": None, "failed": 0, "error": None, "signals": list(c.signals)}
        own = Unplanned(c.started_at, c.baseline, c.offered, cause, c.failures, c.errors)
        own.cause = self._cause(own)
        incident = Incident(self.incidents.total + 1, tally_from=c.tally, unplanned=own)
        incident.tasks = impact_between(c.tally, self.tally())
        incident.impact_s = c.ticks * self._tick  # the ticks that led to it were out of tolerance too
        self.incidents.append(incident)
        self._unplanned = incident
        self._candidate = None
        self._armed = False
        self._events.record(
            now, "incident", about=incident, id=incident.id, state="opened", started_at=c.started_at, cause=own.cause
        )

    def _observe_unplanned(self, incident: Incident, s: ServiceView, perturbed: float) -> bool:
        """Advance an unplanned incident's own verdict as :meth:`_observe` does a fault's whose mechanism
        recovered at its start; True when the service was out of tolerance (judged)."""
        own = incident.unplanned
        assert own is not None
        own.cause = self._cause(own)
        outside = self._outside(s, own.baseline, own.offered)
        limit = own.started_at + self.recovery.limit
        if outside is None:
            if s.t > limit:
                self._settle_unplanned(incident, "unmeasured", s.t)
            return False
        within = not outside
        felt = False
        base = own.baseline
        depth = s.queue_depth - (base.queue_depth if base is not None else 0.0)
        own.trace.see(s.t, outside, within or not perturbed, own.started_at, depth, s.admitted_rate, s.capacity_rate)
        if not within and perturbed:  # the host's lateness: neither breaks the streak nor counts towards it
            if own.streak_from is not None:
                own.streak_paused += perturbed
        else:
            felt = not within
            was_out = own.last_judged_within is False
            own.last_judged_within, own.last_judged_at = within, s.t
            if not within:
                own.streak_from = None
                own.streak_paused = 0.0
            elif own.streak_from is None:
                own.streak_from = s.t
                own.back_from = self._came_back(own.trace, s.t, was_out, own.started_at)
            if own.streak_from is not None and s.t - own.streak_from - own.streak_paused >= self.recovery.confirm:
                own.back = own.back_from if own.back_from is not None else own.streak_from
                own.trace.confirm(s.t)
                self._settle_unplanned(incident, "recovered", s.t)
                return felt
        if s.t > limit:
            seen_out = own.last_judged_within is False
            held_up = own.streak_paused > 0 or own.streak_from is None
            unjudged = own.stalled_s > 0 and held_up and not seen_out
            self._settle_unplanned(incident, "unmeasured" if unjudged else "failed", s.t)
        return felt

    def _settle_unplanned(self, incident: Incident, outcome: Verdict, now: float) -> None:
        own = incident.unplanned
        assert own is not None
        own.outcome = outcome
        self._armed = outcome == "recovered"  # a failed one lingers: the next incident starts once it is over
        if not incident.open:
            self._closed(incident, now)

    def _closed(self, incident: Incident, now: float) -> None:
        """An incident's last verdict: counted in the books; an unplanned one's told as an event."""
        for book in (self.book, *self.books):
            book.add(incident)
        if (own := incident.unplanned) is None:
            return
        outcome = incident.outcome
        if outcome == "recovered":
            phases, predicted = incident.explained()
            self._events.record(
                now,
                "incident",
                about=incident,
                id=incident.id,
                state="recovered",
                recovery_s=incident.recovery_s,
                cause=own.cause,
                phases=phases,
                prediction=predicted,
            )
        elif outcome != "recovering":
            self._events.record(now, "incident", about=incident, id=incident.id, state=outcome, cause=own.cause)

    def _observe(self, record: FaultRecord, s: ServiceView, perturbed: float = 0.0) -> bool:
        """Advance one fault's verdict; True when the service was out of tolerance while it was active.

        ``perturbed``: this tick's seconds, when a stall of the daemon's own process still shows in the
        figures (else 0). Out of tolerance then, the tick neither breaks a streak nor counts towards its
        hold, and is not impact: the lateness is the host's. Within tolerance despite the host, it counts as
        any tick does. At ``recovery.limit`` a fault whose last judged tick was within tolerance (or that had
        none) is unmeasured, not failed: the host kept it from being judged.
        """
        spec = CATALOGUE[record.action]
        lifting = record.active and record.lifted_at is None and not record.heals
        if lifting and spec.lifted(self.rt, record.targets, record.memo):
            record.lifted_at = s.t
        if record.mechanism_recovered_at is None:
            healed = record.heals and spec.healed(self.rt, record.targets, record.memo)
            lifted = not record.active or record.lifted_at is not None
            if healed or (lifted and spec.restored(self.rt, record.targets, record.memo)):
                record.mechanism_recovered_at = s.t
                self._events.record(
                    s.t, "fault", about=record, id=record.id, action=record.action, state="mechanism_recovered"
                )
        base = record.baseline
        outside = self._outside(s, base)
        end = record.reverted_at if record.reverted_at is not None else record.injected_at + record.ttl
        if outside is None:
            if not record.active and (record.mechanism_recovered_at is not None or s.t > end + self.recovery.limit):
                self._settle(record, "unmeasured", s.t)  # nothing to judge the service against: no verdict, no time
            return False
        within = not outside
        judged = within or not perturbed
        healed_at = record.mechanism_recovered_at
        depth = s.queue_depth - (base.queue_depth if base is not None else 0.0)
        record.trace.see(s.t, outside, judged, healed_at, depth, s.admitted_rate, s.capacity_rate)
        was_out = record._last_judged_within is False
        if not judged:
            if record._streak_from is not None:
                record._streak_paused += perturbed
            felt = False
        else:
            felt = record.active and not within
            record._last_judged_within, record._last_judged_at = within, s.t
            if felt:
                record.impact_s += self._tick
            if not within:
                record._streak_from = None
                record._streak_paused = 0.0
            elif record._streak_from is None:
                record._streak_from = s.t
                record._back_from = self._came_back(record.trace, s.t, was_out, healed_at)
        if (
            judged
            and record.mechanism_recovered_at is not None
            and record._streak_from is not None
            and s.t - record._streak_from - record._streak_paused >= self.recovery.confirm
            and s.t >= record.mechanism_recovered_at
        ):
            back = record._back_from if record._back_from is not None else record._streak_from
            record.service_recovered_at = max(back, record.injected_at)
            record.trace.confirm(s.t)
            self._settle(record, "recovered", s.t)
            return felt
        if s.t > end + self.recovery.limit:
            record.service_recovered_at = None
            # The host's stalls kept the service from being judged since the fault's end (or its mechanism's
            # recovery), or cut short a stretch within tolerance: no verdict is made up.
            since = max(end, record.mechanism_recovered_at or end)
            seen_out = record._last_judged_within is False and record._last_judged_at >= since
            held_up = record._streak_paused > 0 or record._streak_from is None
            unjudged = record.stalled_s > 0 and held_up and not seen_out
            self._settle(record, "unmeasured" if unjudged and record.mechanism_recovered_at else "failed", s.t)
        return felt

    def _came_back(self, trace: Trace, t: float, was_out: bool, healed: float | None) -> float:
        """Where the service came back, for a stretch within tolerance starting at ``t``.

        Right after a judged tick out, the trailing window's figures lag: dated back to the window's start, or
        the queue's first tick back within tolerance, whichever is later (:meth:`Trace.dated_back`), and
        never before the heal or a tick the host perturbed. Otherwise (the fault's first judged tick) at ``t``.
        """
        if not (self.dated and was_out):
            return t
        not_before = max(self._last_perturbed, healed if healed is not None and healed <= t else float("-inf"))
        return trace.dated_back(t, self._stall_window, not_before)

    def _settle(self, record: FaultRecord, outcome: Verdict, now: float) -> None:
        """The fault's verdict: counted in the totals, its incident judged once its last member has one."""
        record.outcome = outcome
        self.outcomes[outcome] += 1
        if outcome == "recovered":
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
            self._events.record(now, "fault", about=record, id=record.id, action=record.action, state=outcome)
        incident = self.incidents.get(record.incident) if record.action != "resume_agent" else None
        if incident is not None and record in incident.members and not incident.open:
            self._closed(incident, now)

    def _check_stop_conditions(self, s: ServiceView) -> None:
        if self.lever is not None:
            return
        for i, cond in enumerate(self.cfg.stop_conditions):
            value = self._metric(cond.metric, s)
            breached = (cond.below is not None and value < cond.below) or (
                cond.above is not None and value > cond.above
            )
            if not breached:
                self._stop_since.pop(i, None)
                continue
            since = self._stop_since.setdefault(i, s.t)
            if s.t - since >= cond.for_s:
                bound = f"below {cond.below:g}" if cond.below is not None else f"above {cond.above:g}"
                self.pull_lever(f"stop condition: {cond.metric} {bound} for {cond.for_s:g} s")
                self._stop_since.clear()
                return

    def _metric(self, metric: str, s: ServiceView) -> float:
        if metric == "availability":
            return s.goodput / s.arrival_rate if s.arrival_rate > 0 else 1.0
        if metric == "error_rate":
            return s.error_rate
        base = self.baseline()
        return s.goodput / base.goodput if base is not None and base.goodput > 0 else 1.0
