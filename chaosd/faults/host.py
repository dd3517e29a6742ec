"""Ticks whose figures are the host's, not the pipeline's: a paused process, or one that mostly waited for a CPU."""

from __future__ import annotations

import math
from collections import deque

from chaosd.faults.steady import ServiceView

__all__ = ["HostWatch"]


class HostWatch:
    """Tells, tick by tick, whether the host perturbed the figures, and when it last did.

    A paused process (a stalled host) delays every task in flight: for a window its figures are the host's, not
    the pipeline's. Likewise a window in which the process mostly waited for a CPU (a busy host: timers fire nearly
    on time, but nothing is served meanwhile). Such ticks judge no recovery.
    """

    def __init__(self, tick: float, cpu_wait: float, *, stall: float, window: float) -> None:
        """``stall``: a tick this late means the process was paused; ``window``: how long the telemetry's figures
        (its p95, its rates) still show such a pause; ``cpu_wait``: the share of a window spent waiting for a CPU
        that perturbs it."""
        self.window = window
        self.last_perturbed = -math.inf  # the newest tick the host perturbed
        self._now = 0.0
        self._stall = stall
        self._until = -math.inf
        self._waits: deque[float] = deque(maxlen=max(1, round(window / tick)))  # cpu_wait per tick, over a window
        self._wait_limit = cpu_wait * window

    def see(self, s: ServiceView) -> tuple[float, bool]:
        """One tick: the seconds since the last, and whether the host perturbed its figures."""
        dt = s.t - self._now
        self._now = s.t
        self._waits.append(s.cpu_wait)
        if s.lateness >= self._stall or sum(self._waits) >= self._wait_limit:
            self._until = s.t + self.window
        perturbed = s.t < self._until
        if perturbed:
            self.last_perturbed = s.t
        return dt, perturbed
