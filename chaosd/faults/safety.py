"""What keeps fault injection safe: a gate each fault passes (the lever, a close, its TTL and parameters, the cap on
concurrent faults, targets already faulted), and the stop conditions that pull the lever."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from chaosd.config.settings import FaultsConfig, StopCondition
from chaosd.core.errors import Conflict, FaultError, Unavailable
from chaosd.faults.catalogue import CATALOGUE, Action, is_remedy
from chaosd.faults.record import FaultRecord, check_labels
from chaosd.faults.runtime import Runtime
from chaosd.faults.steady import ServiceView, SteadyState

__all__ = ["Admitted", "FaultGate", "StopConditions"]


@dataclass(frozen=True, slots=True)
class Admitted:
    """A fault the gate let in: its action, its targets resolved, its parameters, TTL and labels checked."""

    spec: Action
    target: str
    targets: tuple[str, ...]
    params: dict[str, float]
    ttl: float
    labels: dict[str, str]


class FaultGate:
    """Admits a fault or raises :class:`FaultError` naming the field, having changed nothing.

    ``lever``: why the safety lever is pulled (no fault gets in until it is released), or None; ``closed``: why no
    fault is accepted any more (shutdown), or None.
    """

    def __init__(self, cfg: FaultsConfig, runtime: Runtime, rng: random.Random) -> None:
        self._cfg = cfg
        self._rt = runtime
        self._rng = rng
        self.lever: str | None = None
        self.closed: str | None = None

    def pull(self, reason: str) -> None:
        self.lever = reason

    def release(self) -> None:
        self.lever = None

    def close(self, why: str) -> None:
        """Accept no fault from now on, whoever asks (the API, a scenario, survival)."""
        self.closed = why

    def admit(
        self,
        action: str,
        target: str | None,
        params: dict[str, object] | None,
        ttl: float | None,
        labels: dict[str, str] | None,
        active: Sequence[FaultRecord],
    ) -> Admitted:
        """Check a fault against the faults ``active`` now; its targets are drawn last (a refusal draws none)."""
        cfg = self._cfg
        if self.closed is not None:
            raise Unavailable("action", self.closed)
        if self.lever is not None:
            raise Conflict("action", f"the safety lever is pulled ({self.lever}); release it first")
        spec = CATALOGUE.get(action)
        if spec is None:
            raise FaultError("action", f"unknown action {action!r} (valid: {', '.join(sorted(CATALOGUE))})")
        ttl = cfg.default_ttl if ttl is None else ttl
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or ttl <= 0:
            raise FaultError("ttl", f"must be a positive number of seconds (got {ttl!r})")
        if ttl > cfg.max_ttl:
            raise FaultError("ttl", f"{ttl:g} s exceeds the maximum of {cfg.max_ttl:g} s")
        checked = spec.check_params(params or {})
        tags = check_labels(labels or {})
        blocking = [f for f in active if not is_remedy(f.action)]  # a remedy is instantaneous
        if not is_remedy(action) and len(blocking) >= cfg.max_concurrent:
            raise Conflict("action", f"{len(blocking)} faults are active, the cap is {cfg.max_concurrent}")
        target = target or spec.default_target
        targets = spec.resolve(self._rt, target, self._rng)
        busy = {(CATALOGUE[f.action].group, t) for f in active for t in f.targets}
        conflict = spec.conflict(self._rt, targets, busy)
        if conflict is not None:
            raise Conflict("target", conflict)
        return Admitted(spec, target, targets, checked, float(ttl), tags)


class StopConditions:
    """The configured stop conditions: a metric past its bound for ``for`` seconds says why to pull the lever."""

    def __init__(self, conditions: Sequence[StopCondition], steady: SteadyState) -> None:
        self._conditions = conditions
        self._steady = steady
        self._since: dict[int, float] = {}  # by condition: the first tick of its current breach

    def breached(self, s: ServiceView) -> str | None:
        """Why the lever must be pulled now, or None; a breach that pulls it starts every count over."""
        for i, cond in enumerate(self._conditions):
            value = self._metric(cond.metric, s)
            breached = (cond.below is not None and value < cond.below) or (
                cond.above is not None and value > cond.above
            )
            if not breached:
                self._since.pop(i, None)
                continue
            since = self._since.setdefault(i, s.t)
            if s.t - since >= cond.for_s:
                self._since.clear()
                bound = f"below {cond.below:g}" if cond.below is not None else f"above {cond.above:g}"
                return f"stop condition: {cond.metric} {bound} for {cond.for_s:g} s"
        return None

    def _metric(self, metric: str, s: ServiceView) -> float:
        if metric == "availability":
            return s.goodput / s.arrival_rate if s.arrival_rate > 0 else 1.0
        if metric == "error_rate":
            return s.error_rate
        base = self._steady.baseline()
        return s.goodput / base.goodput if base is not None and base.goodput > 0 else 1.0
