"""One tick's view of the pipeline over its sliding windows: a frozen value."""

from __future__ import annotations

import array
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from chaosd.core.histogram import LogHistogram, cumulative_percentiles
from chaosd.views import SnapshotView

__all__ = ["Snapshot", "TickSnapshot"]

_QS = (0.5, 0.95, 0.99)
_NOTHING = (0.0, 0.0, 0.0)  # percentiles(zeros, _QS)
_WAIT_FIELDS = frozenset({"wait_p50", "wait_p95", "wait_p99"})
_SOJOURN_FIELDS = frozenset({"sojourn_p50", "sojourn_p99"})
_TAILS = (0.5, 0.99)


# Not frozen: a frozen dataclass's constructor sets each of these fields through a call, and the telemetry makes one
# every tick. Nobody assigns to one: readers take it as a value.
@dataclass(slots=True)
class Snapshot:
    t: float  # seconds since the run started
    queue_depth: int  # tasks waiting, not in service
    capacity: int
    queue_fill: float  # queue_depth / capacity
    utilisation: float  # busy share of the workers over the window
    busy_share: float  # share of workers busy right now
    queue_slope: float  # dQ/dt, least-squares over the detector's slope window, tasks/s
    arrival_rate: float  # offered tasks/s (λ)
    admitted_rate: float  # accepted tasks/s
    throughput: float  # tasks ending (completed or failed) per second
    service_rate: float  # μ: what the workers could serve per second if all were busy
    goodput: float  # completions within the deadline per second
    error_rate: float  # failed share of tasks ending in the window
    retry_rate: float  # stage retries per second
    wait_p50: float
    wait_p95: float
    wait_p99: float
    sojourn_p50: float
    sojourn_p95: float
    sojourn_p99: float
    head_age: float  # age of the oldest waiting task now (0 when none waits)
    mean_service: float  # busy seconds per task ending, over the window
    capacity_rate: float = 0.0  # tasks/s the workers able to work can serve: able / mean_service (0: no service time)
    shed_rate: float = 0.0  # refused by admission or a full queue (not partitions), tasks/s over the window
    unserved_rate: float = 0.0  # refused for a partition or an unavailable backend: users failed, tasks/s
    lateness: float = 0.0  # how late this tick ran: the loop's own lateness (a paused process shows here)
    cpu_wait: float = 0.0  # seconds since the previous tick the loop waited for a CPU (a busy host shows here)
    # The callers' side (arrival_rate counts callers: first attempts).
    attempt_rate: float = 0.0  # attempts offered per second, first and retries, refused ones included
    caller_retry_rate: float = 0.0  # callers' retries offered per second
    abandon_rate: float = 0.0  # attempts per second whose caller stopped waiting (timeout or patience)
    waste_rate: float = 0.0  # completions per second for callers that had stopped waiting

    @property
    def saturation(self) -> float:
        """What the collapse detector compares with ``detector.saturation``: the fuller of queue and workers."""
        return max(self.queue_fill, self.utilisation, self.busy_share)

    def as_dict(self) -> SnapshotView:
        view = cast(SnapshotView, asdict(self))
        view["saturation"] = self.saturation
        return view


class TickSnapshot(Snapshot):
    """A tick's snapshot whose wait percentiles, and sojourn p50 and p99, are worked out when first read: the
    collapse detector, the throttle and the injector read the sojourn p95 alone (the status, the metrics and the live
    views read the rest), and working them out is a good part of a tick's cost. Until then their slots are empty;
    ``_wait`` holds the wait histogram and the window's samples, as it cut them tick by tick (binned only if somebody
    asks), and ``_sojourn`` the window's cumulative sojourn counts (None: no sample in the window)."""

    __slots__ = ("_sojourn", "_wait")
    _wait: tuple[LogHistogram, tuple[array.array[float], ...]]
    _sojourn: npt.NDArray[np.int64] | None

    def defer(
        self, wait: LogHistogram, chunks: tuple[array.array[float], ...], sojourn: npt.NDArray[np.int64] | None
    ) -> None:
        """Empty the deferred slots, and keep what works them out: the wait histogram and its window's cut samples,
        the sojourn's window of cumulative counts."""
        del self.wait_p50, self.wait_p95, self.wait_p99, self.sojourn_p50, self.sojourn_p99
        self._wait = (wait, chunks)
        self._sojourn = sojourn

    def __getattr__(self, name: str) -> float:  # only for an attribute not found: one of those empty slots
        if name in _SOJOURN_FIELDS:
            cum = self._sojourn
            self.sojourn_p50, self.sojourn_p99 = (0.0, 0.0) if cum is None else cumulative_percentiles(cum, _TAILS)
            return float(getattr(self, name))
        if name not in _WAIT_FIELDS:
            raise AttributeError(name)
        histogram, chunks = self._wait
        cum = histogram.window(chunks)
        wait = _NOTHING if cum is None else cumulative_percentiles(cum, _QS)  # the percentiles of nothing are 0
        self.wait_p50, self.wait_p95, self.wait_p99 = wait
        return float(getattr(self, name))
