"""Per-stage figures as differences of two readings of the stages' growing counters (``StageRunner.stats``).

Nothing here runs per task: a reading copies a handful of counters and the latency histogram's bucket vector, and
is taken only when someone asks (a report, a status request), never per attempt.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from chaosd.core.histogram import percentiles
from chaosd.pipeline.stages import StageRunner
from chaosd.views import FailReason, StageNowView, StageReportView

__all__ = ["StageReading", "StageWindow", "read_stages", "stage_table"]

K = TypeVar("K", bound=str)
_QS = (0.5, 0.95, 0.99)
_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class StageReading:
    """One stage's cumulative figures at one instant (``t``: run-clock seconds)."""

    t: float
    attempts: int
    failures: Mapping[FailReason, int]
    retries: int
    opened: int
    closed: int
    latency: npt.NDArray[np.int64]  # bucket counts of LogHistogram: read-only, shared while nothing changed
    latency_sum: float
    handler_errors: Mapping[str, int]

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def read_stage(stage: StageRunner, t: float) -> StageReading:
    stats = stage.stats
    latency = stats.latency
    return StageReading(
        t=t,
        attempts=latency.count,
        failures=dict(stats.failures),
        retries=stats.retries,
        opened=stats.breaker_opened,
        closed=stats.breaker_closed,
        latency=latency.snapshot(),
        latency_sum=latency.sum,
        handler_errors=dict(stage.handler_errors) if stage.handler_errors else _EMPTY,
    )


def read_stages(stages: Mapping[str, StageRunner], t: float) -> dict[str, StageReading]:
    """A reading of every stage, in the configuration's order."""
    return {name: read_stage(stage, t) for name, stage in stages.items()}


def _zero(t: float) -> StageReading:
    zeros = np.zeros(1, dtype=np.int64)
    return StageReading(t, 0, {}, 0, 0, 0, zeros, 0.0, _EMPTY)


def _minus(new: Mapping[K, int], old: Mapping[K, int]) -> dict[K, int]:
    return {k: n - old.get(k, 0) for k, n in sorted(new.items()) if n - old.get(k, 0)}


def _bins(new: StageReading, old: StageReading) -> npt.NDArray[np.int64]:
    if len(old.latency) != len(new.latency):  # the zero reading of a stage seen for the first time
        return new.latency
    return new.latency - old.latency


def stage_table(
    stages: Mapping[str, StageRunner], start: Mapping[str, StageReading], end: Mapping[str, StageReading], now: float
) -> dict[str, StageReportView]:
    """The report's per-stage table from ``start`` to ``end`` (a stage missing from ``start`` counts from 0);
    the breaker's state is the one at ``now`` (clock time)."""
    table: dict[str, StageReportView] = {}
    for name, new in end.items():
        stage = stages[name]
        old = start.get(name) or _zero(new.t)
        attempts = new.attempts - old.attempts
        failures = _minus(new.failures, old.failures)
        bins = _bins(new, old)
        p50, p95, p99 = percentiles(bins, _QS) if attempts else (0.0, 0.0, 0.0)
        table[name] = {
            "kind": stage.kind,
            "attempts": attempts,
            "succeeded": attempts - sum(failures.values()),
            "failures": failures,
            "retries": new.retries - old.retries,
            "mean_s": (new.latency_sum - old.latency_sum) / attempts if attempts else 0.0,
            "p50_s": p50,
            "p95_s": p95,
            "p99_s": p99,
            "breaker": {
                "state": stage.breaker(now),
                "opened": new.opened - old.opened,
                "closed": new.closed - old.closed,
            },
            "handler_errors": _minus(new.handler_errors, old.handler_errors),
        }
    return table


class StageWindow:
    """Attempts per second, p95 and error share per stage over about ``window`` seconds, read on demand.

    Each call takes a reading and compares it with the newest kept one at least ``window`` old (or the oldest kept,
    early on). Readings are kept at most one per ``window / 4``, and none older than the one compared with: at most
    six per stage, however often or rarely the figures are asked for.
    """

    def __init__(
        self, stages: Callable[[], Mapping[str, StageRunner]], now: Callable[[], float], window: float
    ) -> None:
        self._stages = stages
        self._now = now
        self.window = window
        self._ring: deque[dict[str, StageReading]] = deque([read_stages(stages(), now())])

    def figures(self) -> dict[str, StageNowView]:
        stages = self._stages()
        now = self._now()
        new = read_stages(stages, now)
        ring = self._ring
        while len(ring) > 1 and _t(ring[1]) <= now - self.window:
            ring.popleft()  # a newer one is old enough: this one will never be compared with again
        old = ring[0]
        if now - _t(ring[-1]) >= self.window / 4:
            ring.append(new)
        out: dict[str, StageNowView] = {}
        for name, reading in new.items():
            before = old.get(name) or _zero(_t(old))
            dt = reading.t - before.t
            attempts = reading.attempts - before.attempts
            failed = reading.failed - before.failed
            p95 = percentiles(_bins(reading, before), (0.95,))[0] if attempts else 0.0
            out[name] = {
                "kind": stages[name].kind,
                "attempts_per_s": attempts / dt if dt > 0 else 0.0,
                "retries_per_s": (reading.retries - before.retries) / dt if dt > 0 else 0.0,
                "p95_s": p95,
                "error_share": failed / attempts if attempts else 0.0,
                "breaker": stages[name].breaker(now),
                "window_s": max(0.0, dt),
            }
        return out


def _t(readings: Mapping[str, StageReading]) -> float:
    return next(iter(readings.values())).t if readings else float("-inf")
