"""The arena's memory of the live run: a bounded telemetry series."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import SeriesPoint

__all__ = ["Series"]

WINDOW_S = 600.0  # the charts' last ten minutes
MAX_POINTS = 600


@dataclass(frozen=True, slots=True)
class _Point:
    bucket: int
    t: float
    queue_depth: int
    queue_slope: float
    sojourn_p95: float
    throughput: float
    arrival_rate: float
    admitted_rate: float
    goodput: float
    throttle_factor: float
    detector: str

    def as_dict(self) -> SeriesPoint:
        return {
            "t": self.t,
            "queue_depth": self.queue_depth,
            "queue_slope": self.queue_slope,
            "sojourn_p95": self.sojourn_p95,
            "throughput": self.throughput,
            "arrival_rate": self.arrival_rate,
            "admitted_rate": self.admitted_rate,
            "goodput": self.goodput,
            "throttle_factor": self.throttle_factor,
            "detector": self.detector,
        }


class Series:
    """The last ``window_s`` of telemetry, one point per ``step_s`` (the newest tick of each step).

    At most ``max_points`` points are ever held, however long the daemon runs: the deque drops the oldest.
    """

    def __init__(self, tick_s: float, window_s: float = WINDOW_S, max_points: int = MAX_POINTS) -> None:
        self.step_s = max(tick_s, window_s / max_points)
        self.window_s = window_s
        self._points: deque[_Point] = deque(maxlen=max_points)

    def add(self, snap: Snapshot, throttle_factor: float, detector: str) -> None:
        bucket = math.floor(snap.t / self.step_s)
        point = _Point(
            bucket,
            snap.t,
            snap.queue_depth,
            snap.queue_slope,
            snap.sojourn_p95,
            snap.throughput,
            snap.arrival_rate,
            snap.admitted_rate,
            snap.goodput,
            throttle_factor,
            detector,
        )
        if self._points and self._points[-1].bucket == bucket:
            self._points[-1] = point  # the newest tick of a step stands for it: the chart's edge stays live
        else:
            self._points.append(point)

    def __len__(self) -> int:
        return len(self._points)

    def points(self) -> list[SeriesPoint]:
        return [p.as_dict() for p in self._points]
