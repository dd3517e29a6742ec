"""The collapse detector: queue growth near saturation, and p95 growth against a frozen baseline.

Rule 1 (queue growth): saturation — the larger of queue fill and worker utilisation — is at or
above the threshold while dQ/dt > 0, on at least ``hold_fraction`` of the ticks of the last
``hold`` seconds and on this one (a momentary dip in a noisy slope does not reset the clock).
Rule 2 (latency growth): window p95 sojourn is at least ``1 + latency_growth`` times the baseline
(the median window p95 over ``baseline_window`` of healthy time, frozen while not healthy),
confirmed by a growing standing queue (the oldest waiting task never younger than
``standing_queue`` mean service times over ``standing_window``), held for ``latency_hold``.
A p95 jump alone is only a warning.

While collapsed the alarm stays up as long as the overload persists: a standing queue, a p95 still
above the frozen threshold, or queue fill above the threshold. It clears after ``clear_hold`` calm
seconds (→ recovering) and is healthy after ``recover_hold`` more; an overload in recovery
re-raises the same episode.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass

from chaosd.config import DetectorConfig
from chaosd.telemetry.snapshot import Snapshot

__all__ = ["CollapseDetector", "DetectorState", "Episode", "Transition"]


class DetectorState(enum.Enum):
    HEALTHY = "healthy"
    WARNING = "warning"
    COLLAPSED = "collapsed"
    RECOVERING = "recovering"


@dataclass(frozen=True, slots=True)
class Transition:
    t: float
    old: DetectorState
    new: DetectorState
    reason: str


@dataclass(slots=True)
class Episode:
    detected_at: float
    reason: str
    cleared_at: float | None = None


class CollapseDetector:
    """Feeds on snapshots, one per tick; reports state transitions and collapse episodes."""

    def __init__(self, cfg: DetectorConfig, tick: float, keep: int = 1000) -> None:
        self.cfg = cfg
        self.state = DetectorState.HEALTHY
        hold_ticks = max(1, round(cfg.hold / tick))
        self._growth: deque[bool] = deque(maxlen=hold_ticks)
        self._latency: deque[bool] = deque(maxlen=max(1, round(cfg.latency_hold / tick)))
        self._baseline: deque[float] = deque(maxlen=max(1, round(cfg.baseline_window / tick)))
        self._min_baseline_ticks = self._baseline.maxlen or 1
        self._ordered: list[float] = []  # the same values, sorted: the median is read off, not computed per tick
        self._persist: deque[bool] = deque(maxlen=max(1, round(cfg.clear_hold / tick)))
        self._ages: deque[float] = deque(maxlen=max(1, round(cfg.standing_window / tick)))
        self._calm_since: float | None = None
        self.episodes: deque[Episode] = deque(maxlen=keep)  # the newest; the totals below are of all
        self.episode_count = 0
        self.closed_s = 0.0  # time collapsed in the episodes that cleared, each rounded to 6 decimals
        self.baseline_p95 = 0.0

    def _held(self, history: deque[bool]) -> bool:
        size = history.maxlen or 1
        return len(history) == size and history[-1] and sum(history) >= self.cfg.hold_fraction * size

    def update(self, s: Snapshot) -> Transition | None:
        cfg = self.cfg
        saturated = s.saturation >= cfg.saturation
        self._ages.append(s.head_age)
        standing = min(self._ages) > cfg.standing_queue * s.mean_service
        growing = saturated and standing and s.queue_slope > max(0.0, cfg.min_growth * s.service_rate)
        if self.state in (DetectorState.HEALTHY, DetectorState.WARNING) and s.sojourn_p95 > 0:
            baseline, ordered = self._baseline, self._ordered
            if len(baseline) == baseline.maxlen:
                del ordered[bisect_left(ordered, baseline[0])]  # the value the append pushes out
            baseline.append(s.sojourn_p95)
            insort(ordered, s.sojourn_p95)
            n = len(ordered)
            if n >= self._min_baseline_ticks:
                mid = n // 2
                self.baseline_p95 = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        slow = self.baseline_p95 > 0 and s.sojourn_p95 >= (1 + cfg.latency_growth) * self.baseline_p95
        self._growth.append(growing)
        self._latency.append(slow and standing and saturated and s.queue_slope > 0)
        rule1 = self._held(self._growth)
        rule2 = self._held(self._latency)
        raised = "queue_growth" if rule1 else "latency_growth" if rule2 else None
        state = self.state

        if state in (DetectorState.HEALTHY, DetectorState.WARNING):
            if raised is not None:
                self._persist.clear()
                self.episodes.append(Episode(detected_at=s.t, reason=raised))
                self.episode_count += 1
                return self._go(s.t, DetectorState.COLLAPSED, raised)
            if growing or slow:
                return self._go(s.t, DetectorState.WARNING, "queue_growth" if growing else "latency_growth")
            return self._go(s.t, DetectorState.HEALTHY, "calm")

        self._persist.append(standing or slow or s.queue_fill >= cfg.saturation)
        # Hysteresis: the alarm holds while the overload shows on at least half of recent ticks.
        overloaded = raised is not None or 2 * sum(self._persist) >= len(self._persist)
        if overloaded:
            self._calm_since = None
            return self._go(s.t, DetectorState.COLLAPSED, raised or "overload persists")
        if self._calm_since is None:
            self._calm_since = s.t
        calm_for = s.t - self._calm_since
        if state is DetectorState.COLLAPSED and calm_for >= cfg.clear_hold:
            return self._go(s.t, DetectorState.RECOVERING, "overload cleared")
        if state is DetectorState.RECOVERING and calm_for >= cfg.clear_hold + cfg.recover_hold:
            episode = self.episodes[-1]
            episode.cleared_at = s.t
            self.closed_s += round(s.t - episode.detected_at, 6)
            self._growth.clear()
            self._latency.clear()
            self._persist.clear()
            return self._go(s.t, DetectorState.HEALTHY, "recovered")
        return None

    def _go(self, t: float, new: DetectorState, reason: str) -> Transition | None:
        old = self.state
        if new is old:
            return None
        self.state = new
        if new is not DetectorState.RECOVERING:
            self._calm_since = None
        return Transition(t=t, old=old, new=new, reason=reason)
