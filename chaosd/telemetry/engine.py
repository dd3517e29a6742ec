"""The telemetry engine: every tick, readings of the pipeline become a windowed :class:`Snapshot`."""

from __future__ import annotations

import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chaosd.config.settings import TelemetryConfig
from chaosd.core.histogram import cumulative_percentile
from chaosd.pipeline import Pipeline
from chaosd.telemetry.snapshot import Snapshot, TickSnapshot
from chaosd.views import RefuseReason

__all__ = ["SHED", "Telemetry"]

# Refusals that mean "more offered than served": over the admission limit or a full queue (not aimd's factor,
# which refuses by choice, nor a partition).
SHED: tuple[RefuseReason, ...] = ("shed", "queue_full", "dropped")
# Refusals that are no choice and no congestion: the offer could not reach the queue. Users failed.
_UNSERVED: tuple[RefuseReason, ...] = ("partitioned", "unavailable")
_TWO_ZEROS = (0, 0)
_ZEROS = (0, 0, 0)


@dataclass(slots=True)  # not frozen: a frozen dataclass's constructor sets each field through a call, every tick
class _Reading:
    t: float
    offered: int
    accepted: int
    ended: int
    failed: int
    good: int
    retries: int
    shed: int
    unserved: int
    busy_area: float
    depth: int
    head_age: float
    sojourn: npt.NDArray[np.int64]  # cumulative bucket counts (LogHistogram.cumulative): a window is one subtraction
    retried: int
    abandoned: int
    wasted: int


DRAIN_EVERY = 10.0  # clock seconds between drains of the stage histograms nobody reads until the run's end


class Telemetry:
    """Takes a reading per tick and computes window rates, percentiles and dQ/dt from the ring."""

    def __init__(self, cfg: TelemetryConfig, pipeline: Pipeline, slope_window: float) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.window_ticks = max(1, round(cfg.window / cfg.tick))
        self.slope_ticks = max(2, round(slope_window / cfg.tick))
        self._ring: deque[_Reading] = deque(maxlen=self.window_ticks + 1)
        # The slope's points kept as they come, so a tick reads them without walking the readings.
        self._ts: deque[float] = deque(maxlen=self.slope_ticks + 1)
        self._depths: deque[int] = deque(maxlen=self.slope_ticks + 1)
        # The waits each tick of the window cut (LogHistogram.cut): most windows' wait percentiles are never read,
        # so they are not binned per tick. The samples before the first reading are in no window.
        self._waits: deque[array.array[float]] = deque(maxlen=self.window_ticks)
        pipeline.wait.cut()
        self.latest: Snapshot | None = None
        self._listeners: list[Callable[[Snapshot], None]] = []
        self._keep(self._read())
        # Stage histograms are read at a run's end only: drained every DRAIN_EVERY seconds instead of being held
        # until then, in batches large enough to bin in numpy (each tick's few samples would cost a Python loop).
        self._drain_every = max(1, round(DRAIN_EVERY / cfg.tick))
        self._ticks = 0

    def listen(self, callback: Callable[[Snapshot], None], name: str | None = None) -> None:
        """Call ``callback`` with every snapshot; one that raises is logged and counted (as ``name``), never fatal."""
        self._listeners.append(self.pipeline.events.observers.guard(callback, name))

    def _read(self) -> _Reading:
        p = self.pipeline
        now = p.clock.now()
        total = p.ledger.total
        return _Reading(
            t=now - p.t0,
            offered=total.offered,
            accepted=total.accepted,
            ended=total.completed + total.failed,
            failed=total.failed,
            good=p.ledger.good,
            retries=p.ledger.retries,
            shed=sum(map(total.rejected_by.get, SHED, _ZEROS)),
            unserved=sum(map(total.rejected_by.get, _UNSERVED, _TWO_ZEROS)),
            busy_area=p.busy.area_at(now),
            depth=p.queue.depth,
            head_age=p.queue.head_age(now),
            sojourn=p.sojourn.cumulative(),
            retried=total.retried,
            abandoned=total.abandoned,
            wasted=total.wasted,
        )

    def _drain_stages(self) -> None:
        self._ticks += 1
        if self._ticks % self._drain_every == 0:
            for stage in self.pipeline.stages.values():
                stage.stats.latency.drain()
            self.pipeline.wait.drain()  # its cut samples, binned in one batch

    def tick(self, lateness: float = 0.0, cpu_wait: float = 0.0) -> Snapshot:
        """The snapshot of now; ``lateness`` is how late the tick's timer fired (clock seconds), ``cpu_wait`` how
        long the loop's thread waited for a CPU since the previous tick (seconds)."""
        new = self._read()
        self._waits.append(self.pipeline.wait.cut())
        self._drain_stages()
        self._keep(new)
        old = self._ring[0]  # the ring holds the window's ticks and one more: its oldest is the window's start
        dt = new.t - old.t or 1e-12
        ended = new.ended - old.ended
        busy = new.busy_area - old.busy_area
        pool = self.pipeline.workers
        workers = len(pool)
        mean_service = self._mean_service(ended, busy)
        able = sum(1 for w in pool if w.agent.gate_open)
        window = None if new.sojourn is old.sojourn else new.sojourn - old.sojourn  # None: no sample in the window
        sojourn_p95 = 0.0 if window is None else cumulative_percentile(window, 0.95)
        capacity = self.pipeline.queue.capacity
        snap = TickSnapshot(
            t=new.t,
            queue_depth=new.depth,
            capacity=capacity,
            queue_fill=new.depth / capacity,
            utilisation=min(1.0, busy / (dt * workers)),
            busy_share=self.pipeline.busy.busy / workers,
            queue_slope=self._slope(self._ts, self._depths),
            arrival_rate=(new.offered - old.offered) / dt,
            admitted_rate=(new.accepted - old.accepted) / dt,
            throughput=ended / dt,
            service_rate=workers / mean_service if mean_service > 0 else 0.0,
            goodput=(new.good - old.good) / dt,
            error_rate=(new.failed - old.failed) / ended if ended else 0.0,
            retry_rate=(new.retries - old.retries) / dt,
            wait_p50=0.0,  # emptied below, worked out when read
            wait_p95=0.0,
            wait_p99=0.0,
            sojourn_p50=0.0,  # emptied below, worked out when read
            sojourn_p95=sojourn_p95,
            sojourn_p99=0.0,
            head_age=new.head_age,
            mean_service=mean_service,
            capacity_rate=able / mean_service if mean_service > 0 else 0.0,  # 0: nothing to measure it by
            shed_rate=(new.shed - old.shed) / dt,
            unserved_rate=(new.unserved - old.unserved) / dt,
            lateness=lateness,
            cpu_wait=cpu_wait,
            # The callers' side over the window: attempts (first and retries), retries, abandoned, wasted.
            attempt_rate=(new.offered + new.retried - old.offered - old.retried) / dt,
            caller_retry_rate=(new.retried - old.retried) / dt,
            abandon_rate=(new.abandoned - old.abandoned) / dt,
            waste_rate=(new.wasted - old.wasted) / dt,
        )
        snap.defer(self.pipeline.wait, tuple(self._waits), window)
        self.latest = snap
        for listener in self._listeners:
            listener(snap)
        return snap

    def _mean_service(self, ended: int, busy: float) -> float:
        """Busy seconds per task ending in the window."""
        if ended:
            return busy / ended
        if busy > 0:
            return max(busy, self.pipeline.mean_service)  # nothing ended: as if one task were ending now
        return self.pipeline.mean_service

    def _keep(self, reading: _Reading) -> None:
        self._ring.append(reading)
        self._ts.append(reading.t)
        self._depths.append(reading.depth)

    @staticmethod
    def _slope(ts: deque[float], depths: deque[int]) -> float:
        """Least-squares dQ/dt over the points (a dozen: plain Python beats numpy's per-call cost)."""
        n = len(ts)
        if n < 2:
            return 0.0
        mean_t = sum(ts) / n
        mean_d = sum(depths) / n
        sxx = sxy = 0.0
        for t, depth in zip(ts, depths, strict=True):
            dx = t - mean_t
            sxx += dx * dx
            sxy += dx * (depth - mean_d)
        return sxy / sxx if sxx > 0 else 0.0
