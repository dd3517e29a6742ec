"""The steady state a service is judged against: a window of fault-free ticks, and which figures of a tick are out
of tolerance of it (or of the SLO)."""

from __future__ import annotations

import bisect
from collections import deque
from typing import Protocol

from chaosd.config.settings import RecoveryConfig, SloConfig
from chaosd.faults.record import Baseline
from chaosd.faults.runtime import Readings
from chaosd.views import ServiceSignal

__all__ = ["ServiceView", "SteadyState"]

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


class SteadyState:
    """The fault-free ticks of the last ``recovery.baseline_window`` (fed only while nothing is in play), their
    baseline once they cover ``recovery.baseline_min``, and the tolerance a tick is judged with."""

    def __init__(self, recovery: RecoveryConfig, slo: SloConfig, tick: float, runtime: Readings) -> None:
        self._recovery = recovery
        self._slo = slo
        self._tick = tick
        self._rt = runtime
        self._min = max(1, round(recovery.baseline_min / tick))
        size = max(1, round(recovery.baseline_window / tick))
        self._size = size
        # The window kept as the figures the baseline reads, oldest first, so a tick sums plain floats in C (in the
        # same order, so to the same bits, as summing the snapshots would) and the p95s stay sorted as they come
        # and go: no tick re-reads a snapshot or re-sorts the window.
        self._goodput: deque[float] = deque(maxlen=size)
        self._error_rate: deque[float] = deque(maxlen=size)
        self._depth: deque[int] = deque(maxlen=size)
        self._depth_sum = 0  # of whole numbers, kept as they come and go: exact, unlike a running sum of floats
        self._offered: deque[float] = deque(maxlen=size)
        self._p95: deque[float] = deque(maxlen=size)
        self._p95_sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._p95)

    def feed(self, s: ServiceView) -> None:
        if len(self._p95) == self._size:  # the oldest leaves as this one comes in
            self._unsort(self._p95[0])
            self._depth_sum -= self._depth[0]
        self._depth_sum += s.queue_depth
        self._goodput.append(s.goodput)
        self._error_rate.append(s.error_rate)
        self._depth.append(s.queue_depth)
        self._offered.append(s.arrival_rate)
        self._p95.append(s.sojourn_p95)
        bisect.insort(self._p95_sorted, s.sojourn_p95)

    def forget(self, ticks: int) -> None:
        """Take the newest ``ticks`` back out: they were an incident's, not the steady state's."""
        for _ in range(ticks):
            self._goodput.pop()
            self._error_rate.pop()
            self._depth_sum -= self._depth.pop()
            self._offered.pop()
            self._unsort(self._p95.pop())

    def _unsort(self, value: float) -> None:
        del self._p95_sorted[bisect.bisect_left(self._p95_sorted, value)]

    def baseline(self) -> Baseline | None:
        """The fault-free steady state, or None until it covers ``recovery.baseline_min``."""
        n = len(self._p95)
        if n < self._min:
            return None
        return Baseline(
            goodput=sum(self._goodput) / n,
            error_rate=sum(self._error_rate) / n,
            sojourn_p95=self._p95_sorted[n // 2],
            queue_depth=self._depth_sum / n,
            seconds=n * self._tick,
        )

    def offered(self) -> float:
        """The window's mean offered rate (0 when empty)."""
        offered = self._offered
        return sum(offered) / len(offered) if offered else 0.0

    def outside(self, s: ServiceView, b: Baseline | None, offered: float = 0.0) -> list[ServiceSignal] | None:
        """The figures out of tolerance of the steady state (or the SLO), none when it is as good; None with
        nothing to judge by. ``offered``: the baseline's offered rate, to scale its goodput to less load."""
        slo = self._slo
        if b is None and slo.availability is None and slo.p95 is None:
            return None
        tol = self._recovery.tolerance
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
        if b is not None and s.queue_depth > (1 + tol) * b.queue_depth + len(self._rt.workers):
            out.append("queue")
        return out
