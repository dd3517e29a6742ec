"""The fault injector: applies catalogue actions as values with a TTL, watches their recovery, keeps us safe.

Safety: a cap on concurrent faults; a lever that reverts every fault and refuses new ones until
released; stop conditions that pull it. Recovery is observed: a fault's *mechanism* recovered when
the runtime's own healing did its job (its action says when), and its *service* recovered when
throughput, p95 sojourn and queue depth stayed within tolerance of the pre-fault baseline for the
confirmation window, a stretch that reaches past the mechanism's recovery (a service that never
left tolerance recovered at injection: it did not notice). Not recovered within ``limit`` of the
fault's end: a failed recovery.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaosd.config import FaultsConfig, RecoveryConfig
from chaosd.errors import FaultError
from chaosd.events import EventLog
from chaosd.faults.catalogue import CATALOGUE
from chaosd.pipeline import Pipeline

__all__ = ["FaultRecord", "Injector", "ServiceView"]


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
    def mean_service(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Baseline:
    throughput: float
    sojourn_p95: float
    queue_depth: float
    goodput: float


@dataclass(slots=True)
class FaultRecord:
    id: int
    action: str
    target: str
    targets: tuple[str, ...]
    params: dict[str, float]
    ttl: float
    injected_at: float
    baseline: Baseline | None
    memo: dict[str, Any] = field(default_factory=dict)
    reverted_at: float | None = None
    reverted_by: str | None = None  # "ttl" | "revert" | "lever" | "shutdown"
    mechanism_recovered_at: float | None = None
    service_recovered_at: float | None = None
    outcome: str = "active"  # active → recovering → recovered | failed
    _streak_from: float | None = None

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "target": self.target,
            "targets": list(self.targets),
            "params": dict(sorted(self.params.items())),
            "ttl": self.ttl,
            "injected_at": self.injected_at,
            "reverted_at": self.reverted_at,
            "reverted_by": self.reverted_by,
            "mechanism_recovered_at": self.mechanism_recovered_at,
            "service_recovered_at": self.service_recovered_at,
            "recovery_s": (None if self.service_recovered_at is None else self.service_recovered_at - self.injected_at),
            "recovered": self.outcome == "recovered",
            "outcome": self.outcome,
        }


class Injector:
    """Owns every fault of one runtime; ``on_tick`` drives TTLs, recovery and stop conditions."""

    def __init__(
        self,
        cfg: FaultsConfig,
        recovery: RecoveryConfig,
        runtime: Pipeline,
        rng: random.Random,
        events: EventLog,
        tick: float,
    ) -> None:
        self.cfg = cfg
        self.recovery = recovery
        self.rt = runtime
        self._rng = rng
        self._events = events
        self.faults: list[FaultRecord] = []
        self.lever: str | None = None  # why the safety lever is pulled, or None
        self.closed: str | None = None  # why no fault is accepted any more (shutdown), or None
        self._window: deque[ServiceView] = deque(maxlen=max(1, round(recovery.baseline_window / tick)))
        self._stop_since: dict[int, float] = {}
        self._now = 0.0

    # --- commands -----------------------------------------------------------------------------

    def active(self) -> list[FaultRecord]:
        return [f for f in self.faults if f.active]

    def get(self, fault_id: int) -> FaultRecord:
        for f in self.faults:
            if f.id == fault_id:
                return f
        raise FaultError("id", f"no fault {fault_id}", status=404)

    def inject(
        self,
        action: str,
        target: str | None = None,
        params: dict[str, object] | None = None,
        ttl: float | None = None,
    ) -> FaultRecord:
        """Apply one fault, or raise :class:`FaultError` naming the field, having changed nothing."""
        if self.closed is not None:
            raise FaultError("action", self.closed, status=503)
        if self.lever is not None:
            raise FaultError("action", f"the safety lever is pulled ({self.lever}); release it first", status=409)
        spec = CATALOGUE.get(action)
        if spec is None:
            raise FaultError("action", f"unknown action {action!r} (valid: {', '.join(sorted(CATALOGUE))})")
        ttl = self.cfg.default_ttl if ttl is None else ttl
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or ttl <= 0:
            raise FaultError("ttl", f"must be a positive number of seconds (got {ttl!r})")
        if ttl > self.cfg.max_ttl:
            raise FaultError("ttl", f"{ttl:g} s exceeds the maximum of {self.cfg.max_ttl:g} s")
        checked = spec.check_params(params or {})
        active = self.active()
        blocking = [f for f in active if f.action != "resume_agent"]  # a resume is instantaneous
        if action != "resume_agent" and len(blocking) >= self.cfg.max_concurrent:
            raise FaultError(
                "action", f"{len(blocking)} faults are active, the cap is {self.cfg.max_concurrent}", status=409
            )
        target = target or spec.default_target
        targets = spec.resolve(self.rt, target, self._rng)
        busy = {(CATALOGUE[f.action].group, t) for f in active for t in f.targets}
        conflict = spec.conflict(self.rt, targets, busy)
        if conflict is not None:
            raise FaultError("target", conflict, status=409)
        now = self.rt.elapsed()
        record = FaultRecord(
            id=len(self.faults) + 1,
            action=action,
            target=target,
            targets=targets,
            params=checked,
            ttl=float(ttl),
            injected_at=now,
            baseline=self._baseline(),
        )
        record.memo = spec.apply(self.rt, targets, checked)
        self.faults.append(record)
        self._events.record(now, "fault", id=record.id, action=action, state="injected", targets=list(targets))
        return record

    def revert(self, fault_id: int) -> FaultRecord:
        record = self.get(fault_id)
        if not record.active:
            raise FaultError("id", f"fault {fault_id} already ended ({record.reverted_by})", status=409)
        self._revert(record, "revert")
        return record

    def revert_all(self, why: str = "revert") -> int:
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

    def _revert(self, record: FaultRecord, why: str) -> None:
        CATALOGUE[record.action].revert(self.rt, record.targets, record.params, record.memo)
        record.reverted_at = self.rt.elapsed()
        record.reverted_by = why
        if record.outcome == "active":
            record.outcome = "recovering"
        self._events.record(record.reverted_at, "fault", id=record.id, action=record.action, state="reverted", by=why)

    # --- observation --------------------------------------------------------------------------

    def _baseline(self) -> Baseline | None:
        window = list(self._window)
        if not window:
            return None
        n = len(window)
        return Baseline(
            throughput=sum(s.throughput for s in window) / n,
            sojourn_p95=sorted(s.sojourn_p95 for s in window)[n // 2],
            queue_depth=sum(s.queue_depth for s in window) / n,
            goodput=sum(s.goodput for s in window) / n,
        )

    def _within(self, s: ServiceView, b: Baseline) -> bool:
        tol = self.recovery.tolerance
        slack = 4 * s.mean_service  # tiny baselines (an idle queue) need an absolute margin
        return (
            s.throughput >= (1 - tol) * b.throughput
            and s.sojourn_p95 <= (1 + tol) * b.sojourn_p95 + slack
            and s.queue_depth <= (1 + tol) * b.queue_depth + len(self.rt.workers)
        )

    def on_tick(self, s: ServiceView) -> None:
        self._now = s.t
        for record in self.faults:
            if record.active and s.t >= record.injected_at + record.ttl:
                self._revert(record, "ttl")
        for record in self.faults:
            if record.outcome in ("active", "recovering"):
                self._observe(record, s)
        if all(f.action == "resume_agent" for f in self.active()):
            self._window.append(s)
        self._check_stop_conditions(s)

    def _observe(self, record: FaultRecord, s: ServiceView) -> None:
        spec = CATALOGUE[record.action]
        if record.mechanism_recovered_at is None:
            healed = spec.heals_itself and spec.healed(self.rt, record.targets, record.memo)
            if healed or (not record.active and spec.restored(self.rt, record.targets, record.memo)):
                record.mechanism_recovered_at = s.t
                self._events.record(s.t, "fault", id=record.id, action=record.action, state="mechanism_recovered")
        baseline = record.baseline
        within = baseline is None or self._within(s, baseline)
        if not within:
            record._streak_from = None
        elif record._streak_from is None:
            record._streak_from = s.t
        if (
            record.mechanism_recovered_at is not None
            and record._streak_from is not None
            and s.t - record._streak_from >= self.recovery.confirm
            and s.t >= record.mechanism_recovered_at
        ):
            record.service_recovered_at = max(record._streak_from, record.injected_at)
            if True:
                record.outcome = "recovered"
                self._events.record(
                    s.t,
                    "fault",
                    id=record.id,
                    action=record.action,
                    state="recovered",
                    recovery_s=record.service_recovered_at - record.injected_at,
                )
            return
        end = record.reverted_at if record.reverted_at is not None else record.injected_at + record.ttl
        if s.t > end + self.recovery.limit:
            record.outcome = "failed"
            record.service_recovered_at = None
            self._events.record(s.t, "fault", id=record.id, action=record.action, state="failed")

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
        base = self._baseline()
        return s.goodput / base.goodput if base is not None and base.goodput > 0 else 1.0
