"""The detector: names what the pipeline is going through, one snapshot per tick.

- **stall**: the tick ran ``stall`` seconds late or more. The process (or its host) was paused, and every
  window rate that spans the pause is its artefact, so nothing is judged, learned or cut until a whole
  telemetry window has passed since the last late tick. The backlog the pause left then ends late while it
  drains (its head older than the deadline or arrivals refused over the admission bound, and one window
  more): that is the pause's too, not a collapse or an overload, for at most five windows; only a full queue
  is judged meanwhile.
- **overload**: more is offered than is served. At least one of: refusals (admission control's or a full queue's)
  above ``shed_share`` of the offered load, queue fill at ``saturation``, a queue head older than the
  deadline, or the queue growing near saturation (rule 1: dQ/dt > 0 with a standing queue) or p95
  doubling against the baseline with a growing standing queue (rule 2). A full queue has dQ/dt = 0, so
  rule 1 alone never sees one.
- **collapse**: the workers are saturated and goodput is below ``collapse_goodput`` of what could be good
  (the smaller of the offered load and the measured capacity): work is done that nobody can use, the
  metastable signature.

Each is raised when its signal shows on ``hold_fraction`` of the ticks of the last ``hold`` seconds and on
this one. While raised, the alarm holds as long as the overload persists (a standing queue, a slow p95, a
full queue, refusals) on half of recent ticks; it clears after ``clear_hold`` calm seconds (→ recovering)
and is healthy after ``recover_hold`` more. The p95 baseline learns only on healthy ticks with no signal.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass

from chaosd.config import DetectorConfig
from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import AlarmKind, DetectorStateName

__all__ = ["ALARMS", "CollapseDetector", "DetectorState", "Episode", "Transition"]


class DetectorState(enum.Enum):
    _value_: DetectorStateName  # what reports, events and the status line carry

    HEALTHY = "healthy"
    WARNING = "warning"
    OVERLOAD = "overload"
    COLLAPSED = "collapsed"
    STALL = "stall"
    RECOVERING = "recovering"


ALARMS = frozenset({DetectorState.OVERLOAD, DetectorState.COLLAPSED})
_DRAIN_WINDOWS = 5  # the longest a stall's backlog is taken for the pause's, in telemetry windows


@dataclass(frozen=True, slots=True)
class Transition:
    t: float
    old: DetectorState
    new: DetectorState
    reason: str


@dataclass(slots=True)
class Episode:
    """One alarm, from raised to healthy; ``kind`` is ``collapse`` once it collapsed, else ``overload``."""

    detected_at: float
    reason: str
    kind: AlarmKind = "overload"
    cleared_at: float | None = None


class CollapseDetector:
    """Feeds on snapshots, one per tick; reports state transitions and alarm episodes."""

    def __init__(
        self, cfg: DetectorConfig, tick: float, keep: int = 1000, *, deadline: float = 0.0, window: float = 1.0
    ) -> None:
        self.cfg = cfg
        self.deadline = deadline
        self.window = window
        self.state = DetectorState.HEALTHY
        hold_ticks = max(1, round(cfg.hold / tick))
        self._growth: deque[bool] = deque(maxlen=hold_ticks)
        self._over: deque[bool] = deque(maxlen=hold_ticks)
        self._collapse: deque[bool] = deque(maxlen=hold_ticks)
        self._latency: deque[bool] = deque(maxlen=max(1, round(cfg.latency_hold / tick)))
        self._baseline: deque[float] = deque(maxlen=max(1, round(cfg.baseline_window / tick)))
        self._min_baseline_ticks = self._baseline.maxlen or 1
        self._ordered: list[float] = []  # the same values, sorted: the median is read off, not computed per tick
        self._persist: deque[bool] = deque(maxlen=max(1, round(cfg.clear_hold / tick)))
        self._ages: deque[float] = deque(maxlen=max(1, round(cfg.standing_window / tick)))
        self._calm_since: float | None = None
        self._stalled_until = float("-inf")
        self._resume = DetectorState.HEALTHY  # the state a stall interrupted
        self._drain_until = float("-inf")  # after a stall: until when its backlog may still be draining
        self._drained_at: float | None = None
        self._last_t: float | None = None
        self.episodes: deque[Episode] = deque(maxlen=keep)  # the newest; the totals below are of all
        self.episode_count = 0  # alarms raised (overload or collapse)
        self.collapse_count = 0  # alarms that collapsed
        self.stall_count = 0
        self.seconds = dict.fromkeys(DetectorState, 0.0)  # clock time spent in each state
        self.closed_s = 0.0  # time alarmed in the episodes that cleared, each rounded to 6 decimals
        self.baseline_p95 = 0.0

    def _held(self, history: deque[bool]) -> bool:
        size = history.maxlen or 1
        return len(history) == size and history[-1] and sum(history) >= self.cfg.hold_fraction * size

    def _clear(self) -> None:
        for history in (self._growth, self._over, self._collapse, self._latency, self._persist, self._ages):
            history.clear()

    def update(self, s: Snapshot) -> Transition | None:
        if self._last_t is not None:
            self.seconds[self.state] += s.t - self._last_t
        self._last_t = s.t
        cfg = self.cfg
        if s.lateness >= cfg.stall:
            self._stalled_until = s.t + self.window
        if s.t < self._stalled_until:
            if self.state is DetectorState.STALL:
                return None
            self._resume = self.state
            self.stall_count += 1
            self._clear()
            return self._go(s.t, DetectorState.STALL, f"tick {s.lateness * 1000:.0f} ms late")
        if self.state is DetectorState.STALL:
            # The backlog the pause left ends late while it drains: that lateness is the pause's, not a collapse.
            self._drain_until = s.t + _DRAIN_WINDOWS * self.window
            self._drained_at = None
            self.state = self._resume  # what the stall interrupted goes on, judged afresh
            if self.state is DetectorState.WARNING:
                self.state = DetectorState.HEALTHY
            return Transition(t=s.t, old=DetectorState.STALL, new=self.state, reason="stall over")
        return self._judge(s)

    def _judge(self, s: Snapshot) -> Transition | None:
        cfg = self.cfg
        saturated = s.saturation >= cfg.saturation
        self._ages.append(s.head_age)
        standing = min(self._ages) > cfg.standing_queue * s.mean_service
        growing = saturated and standing and s.queue_slope > max(0.0, cfg.min_growth * s.service_rate)
        full = s.queue_fill >= cfg.saturation
        expired = self.deadline > 0 and s.head_age > self.deadline
        shedding = s.shed_rate > cfg.shed_share * s.arrival_rate
        draining = self._draining(s.t, expired or shedding)
        if draining:
            expired = shedding = False  # the arrivals refused while the pause's backlog drains are the pause's
        overloaded_now = (growing and not draining) or full or expired or shedding
        could_be_good = min(s.arrival_rate, s.capacity_rate) if s.capacity_rate > 0 else s.arrival_rate
        collapsing = (
            not draining and saturated and s.arrival_rate > 0 and s.goodput < cfg.collapse_goodput * could_be_good
        )
        slow = not draining and self.baseline_p95 > 0 and s.sojourn_p95 >= (1 + cfg.latency_growth) * self.baseline_p95
        quiet = not (overloaded_now or collapsing or slow or draining)
        if self.state is DetectorState.HEALTHY and quiet and s.sojourn_p95 > 0:
            self._learn(s.sojourn_p95)
        self._growth.append(growing and not draining)
        self._over.append(overloaded_now)
        self._collapse.append(collapsing)
        self._latency.append(slow and standing and saturated and s.queue_slope > 0)
        if self._held(self._collapse):
            raised: str | None = "goodput_collapse"
        elif self._held(self._growth):
            raised = "queue_growth"
        elif self._held(self._latency):
            raised = "latency_growth"
        elif self._held(self._over):
            raised = "shedding" if shedding else "queue_full" if full else "queue_expired" if expired else "overload"
        else:
            raised = None
        new = DetectorState.COLLAPSED if raised == "goodput_collapse" else DetectorState.OVERLOAD
        state = self.state

        if state in (DetectorState.HEALTHY, DetectorState.WARNING):
            if raised is not None:
                self._persist.clear()
                self.episodes.append(Episode(detected_at=s.t, reason=raised))
                self.episode_count += 1
                return self._go(s.t, new, raised)
            if overloaded_now or collapsing or slow:
                return self._go(s.t, DetectorState.WARNING, _signal(overloaded_now, collapsing))
            return self._go(s.t, DetectorState.HEALTHY, "calm")

        self._persist.append(standing or slow or full or shedding or expired or collapsing)
        # Hysteresis: the alarm holds while the overload shows on at least half of recent ticks.
        if raised is not None or 2 * sum(self._persist) >= len(self._persist):
            self._calm_since = None
            if raised is None:
                new = state if state in ALARMS else DetectorState.OVERLOAD
            return self._go(s.t, new, raised or "overload persists")
        if self._calm_since is None:
            self._calm_since = s.t
        calm_for = s.t - self._calm_since
        if state in ALARMS and calm_for >= cfg.clear_hold:
            return self._go(s.t, DetectorState.RECOVERING, "overload cleared")
        if state is DetectorState.RECOVERING and calm_for >= cfg.clear_hold + cfg.recover_hold:
            episode = self.episodes[-1]
            episode.cleared_at = s.t
            self.closed_s += round(s.t - episode.detected_at, 6)
            self._clear()
            return self._go(s.t, DetectorState.HEALTHY, "recovered")
        return None

    def _draining(self, t: float, behind: bool) -> bool:
        """Whether the backlog a stall left is still draining (``behind``: its head older than the deadline, or
        arrivals refused over the admission bound), and then one window more while those late tasks end; never
        longer than ``_DRAIN_WINDOWS`` windows after the stall."""
        if t >= self._drain_until:
            return False
        if behind:
            self._drained_at = None
            return True
        if self._drained_at is None:
            self._drained_at = t
        if t - self._drained_at >= self.window:
            self._drain_until = t  # drained: judged as usual from here on
            return False
        return True

    def _learn(self, p95: float) -> None:
        baseline, ordered = self._baseline, self._ordered
        if len(baseline) == baseline.maxlen:
            del ordered[bisect_left(ordered, baseline[0])]  # the value the append pushes out
        baseline.append(p95)
        insort(ordered, p95)
        n = len(ordered)
        if n >= self._min_baseline_ticks:
            mid = n // 2
            self.baseline_p95 = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    def _go(self, t: float, new: DetectorState, reason: str) -> Transition | None:
        old = self.state
        if new is old:
            return None
        self.state = new
        if new is DetectorState.COLLAPSED and self.episodes and self.episodes[-1].kind != "collapse":
            self.episodes[-1].kind = "collapse"
            self.collapse_count += 1
        if new is not DetectorState.RECOVERING:
            self._calm_since = None
        return Transition(t=t, old=old, new=new, reason=reason)


def _signal(overloaded: bool, collapsing: bool) -> str:
    return "goodput_falling" if collapsing else "overload" if overloaded else "latency_growth"
