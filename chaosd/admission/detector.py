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
- **metastable** (a retry storm): goodput below ``collapse_goodput`` of the callers offered while attempts exceed
  ``storm_attempts`` per caller and more than ``storm_waste`` of the completions are for callers that had stopped
  waiting: work that nobody waits for keeps the servers busy and the callers retrying, which holds the state after
  whatever triggered it has ended. Without callers' retries attempts equal callers, so a plain overload never
  shows it.
- **failing**: the queue is short (none of the above, no standing queue) yet the tasks with an outcome are not
  good (failed, late or degraded, or refused because the queue could not be reached: a partition, a backend
  down): the good share of them is below ``failing_goodput`` of its baseline (of all of them before a baseline
  is learnt), with at least ``failing_min_tasks`` not good. At low load the evidence reaches back over earlier
  windows, up to ``_EVIDENCE_WINDOWS``, until that many outcomes are in it: a task a second that always fails is
  failing too. Users fail while nothing is congested; admission control is not cut for it (failures are not
  congestion).

Each is raised when its signal shows on ``hold_fraction`` of the ticks of the last ``hold`` seconds and on
this one. While raised, the alarm holds as long as the overload persists (a standing queue, a slow p95, a
full queue, refusals) on half of recent ticks; it clears after ``clear_hold`` calm seconds (→ recovering)
and is healthy after ``recover_hold`` more. A failing alarm holds while tasks keep failing (or any of the
above shows). The baselines (p95, the good share of tasks ending) learn only on healthy ticks with no signal.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass

from chaosd.config.settings import DetectorConfig
from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import AlarmKind, DetectorStateName

__all__ = ["ALARMED", "ALARMS", "CollapseDetector", "DetectorState", "Episode", "Transition"]


class DetectorState(enum.Enum):
    _value_: DetectorStateName  # what reports, events and the status line carry

    HEALTHY = "healthy"
    WARNING = "warning"
    OVERLOAD = "overload"
    COLLAPSED = "collapsed"
    METASTABLE = "metastable"
    FAILING = "failing"
    STALL = "stall"
    RECOVERING = "recovering"


# The congestion alarms: what admission control answers. Failing is an alarm too, but not congestion.
ALARMS = frozenset({DetectorState.OVERLOAD, DetectorState.COLLAPSED, DetectorState.METASTABLE})
ALARMED = ALARMS | {DetectorState.FAILING}  # every state an episode is raised in
# An episode's kind is the worst it got: an overload that failed is failing, one that collapsed a collapse.
_WORSE: dict[DetectorState, AlarmKind] = {
    DetectorState.FAILING: "failing",
    DetectorState.COLLAPSED: "collapse",
    DetectorState.METASTABLE: "collapse",  # a storm is a collapse that sustains itself
}
_RANK: dict[AlarmKind, int] = {"overload": 0, "failing": 1, "collapse": 2}
_RAISES = {  # else overload
    "retry_storm": DetectorState.METASTABLE,
    "goodput_collapse": DetectorState.COLLAPSED,
    "tasks_failing": DetectorState.FAILING,
}
_DRAIN_WINDOWS = 5  # the longest a stall's backlog is taken for the pause's, in telemetry windows
_EVIDENCE_WINDOWS = 10  # failing: how many telemetry windows back the outcomes are gathered from at low load


@dataclass(frozen=True, slots=True)
class Transition:
    t: float
    old: DetectorState
    new: DetectorState
    reason: str


@dataclass(slots=True)
class Episode:
    """One alarm, from raised to healthy; ``kind`` is ``collapse`` once it collapsed, else ``failing`` once it
    failed, else ``overload``."""

    detected_at: float
    reason: str
    kind: AlarmKind = "overload"
    cleared_at: float | None = None


@dataclass(slots=True)  # not frozen: made every tick, and a frozen one's constructor sets each field through a call
class _Signals:
    """What one snapshot shows, before any hold: each alarm's signal, and what keeps a raised alarm up."""

    standing: bool  # the queue's head has been old for the whole standing window
    growing: bool  # rule 1, outside a stall's drain
    full: bool
    expired: bool
    shedding: bool
    draining: bool  # a stall's backlog, still the pause's
    overloaded: bool
    collapsing: bool
    storming: bool  # callers retrying, their attempts mostly wasted, goodput far below them
    slow: bool  # p95 grown against the baseline
    failing: bool
    latency_growing: bool  # rule 2: slow with a growing standing queue

    @property
    def quiet(self) -> bool:
        """No signal at all: what a baseline may learn from."""
        return not (self.overloaded or self.collapsing or self.storming or self.slow or self.draining or self.failing)


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
        self._storm: deque[bool] = deque(maxlen=hold_ticks)
        self._latency: deque[bool] = deque(maxlen=max(1, round(cfg.latency_hold / tick)))
        self._baseline: deque[float] = deque(maxlen=max(1, round(cfg.baseline_window / tick)))
        self._min_baseline_ticks = self._baseline.maxlen or 1
        self._ordered: list[float] = []  # the same values, sorted: the median is read off, not computed per tick
        self._failing: deque[bool] = deque(maxlen=hold_ticks)
        # Each tick's window counts (outcomes, good, refused unserved): the evidence for failing, non-overlapping
        # windows apart, as far back as low load needs.
        self._window_ticks = max(1, round(window / tick))
        self._outcomes: deque[tuple[float, float, float]] = deque(maxlen=_EVIDENCE_WINDOWS * self._window_ticks)
        # The good share of tasks ending, learnt as the p95 baseline is: (good, ended) rates per healthy tick.
        self._shares: deque[tuple[float, float]] = deque(maxlen=self._baseline.maxlen)
        self._good_sum = self._ended_sum = 0.0
        self.baseline_good_share = 1.0  # of tasks ending, good; 1 until learnt (then the learnt share)
        self._persist: deque[bool] = deque(maxlen=max(1, round(cfg.clear_hold / tick)))
        self._ages: deque[float] = deque(maxlen=max(1, round(cfg.standing_window / tick)))
        self._calm_since: float | None = None
        self._stalled_until = float("-inf")
        self._resume = DetectorState.HEALTHY  # the state a stall interrupted
        self._alarm = DetectorState.OVERLOAD  # the alarm the episode is in, or was in before recovering
        self._episode_failed = False  # whether the newest episode was ever failing
        self._drain_until = float("-inf")  # after a stall: until when its backlog may still be draining
        self._drained_at: float | None = None
        self._last_t: float | None = None
        self.episodes: deque[Episode] = deque(maxlen=keep)  # the newest; the totals below are of all
        self.episode_count = 0  # alarms raised (overload, collapse or failing)
        self.collapse_count = 0  # alarms that collapsed
        self.failing_count = 0  # alarms that failed (tasks failing with a short queue)
        self.stall_count = 0
        self.seconds = dict.fromkeys(DetectorState, 0.0)  # clock time spent in each state
        self.closed_s = 0.0  # time alarmed in the episodes that cleared, each rounded to 6 decimals
        self.baseline_p95 = 0.0

    def _held(self, history: deque[bool]) -> bool:
        size = history.maxlen or 1
        return len(history) == size and history[-1] and sum(history) >= self.cfg.hold_fraction * size

    def _clear(self) -> None:
        for history in (
            self._growth,
            self._over,
            self._collapse,
            self._storm,
            self._failing,
            self._outcomes,
            self._latency,
            self._persist,
            self._ages,
        ):
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
        sig = self._read(s)
        if self.state is DetectorState.HEALTHY and sig.quiet:
            if s.sojourn_p95 > 0:
                self._learn(s.sojourn_p95)
            if s.throughput + s.unserved_rate > 0:
                self._learn_share(s.goodput, s.throughput + s.unserved_rate)
        raised = self._raised(sig)
        if self.state in (DetectorState.HEALTHY, DetectorState.WARNING):
            if raised is not None:
                self._persist.clear()
                self.episodes.append(Episode(detected_at=s.t, reason=raised))
                self.episode_count += 1
                self._episode_failed = False
                return self._go(s.t, _RAISES.get(raised, DetectorState.OVERLOAD), raised)
            if sig.overloaded or sig.collapsing or sig.storming or sig.slow or sig.failing:
                return self._go(
                    s.t, DetectorState.WARNING, _signal(sig.overloaded, sig.collapsing or sig.storming, sig.failing)
                )
            return self._go(s.t, DetectorState.HEALTHY, "calm")
        return self._hold_or_clear(s, sig, raised)

    def _read(self, s: Snapshot) -> _Signals:
        """This tick's signals; a stall's draining backlog masks the ones that are the pause's."""
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
        overloaded = (growing and not draining) or full or expired or shedding
        could_be_good = min(s.arrival_rate, s.capacity_rate) if s.capacity_rate > 0 else s.arrival_rate
        collapsing = (
            not draining and saturated and s.arrival_rate > 0 and s.goodput < cfg.collapse_goodput * could_be_good
        )
        storming = (
            not draining
            and s.arrival_rate > 0
            and s.attempt_rate > cfg.storm_attempts * s.arrival_rate
            and s.waste_rate > cfg.storm_waste * s.throughput
            and s.goodput < cfg.collapse_goodput * s.arrival_rate
        )
        slow = not draining and self.baseline_p95 > 0 and s.sojourn_p95 >= (1 + cfg.latency_growth) * self.baseline_p95
        failing = self._failing_now(s, draining or standing or overloaded or collapsing)
        return _Signals(
            standing=standing,
            growing=growing and not draining,
            full=full,
            expired=expired,
            shedding=shedding,
            draining=draining,
            overloaded=overloaded,
            collapsing=collapsing,
            storming=storming,
            slow=slow,
            failing=failing,
            latency_growing=slow and standing and saturated and s.queue_slope > 0,
        )

    def _raised(self, sig: _Signals) -> str | None:
        """Record this tick's signals; the alarm whose signal has held long enough, if any (the gravest first)."""
        self._growth.append(sig.growing)
        self._over.append(sig.overloaded)
        self._collapse.append(sig.collapsing)
        self._storm.append(sig.storming)
        self._failing.append(sig.failing)
        self._latency.append(sig.latency_growing)
        if self._held(self._storm):
            return "retry_storm"
        if self._held(self._collapse):
            return "goodput_collapse"
        if self._held(self._growth):
            return "queue_growth"
        if self._held(self._latency):
            return "latency_growth"
        if self._held(self._over):
            return (
                "shedding"
                if sig.shedding
                else "queue_full"
                if sig.full
                else "queue_expired"
                if sig.expired
                else "overload"
            )
        if self._held(self._failing):
            return "tasks_failing"
        return None

    def _hold_or_clear(self, s: Snapshot, sig: _Signals, raised: str | None) -> Transition | None:
        """While alarmed or recovering: the alarm holds while what raised it persists, else it clears in two steps."""
        cfg = self.cfg
        state = self.state
        congested = (
            sig.standing or sig.slow or sig.full or sig.shedding or sig.expired or sig.collapsing or sig.storming
        )
        was_failing = self._alarm is DetectorState.FAILING
        self._persist.append(congested or (sig.failing and was_failing))
        # Hysteresis: the alarm holds while what raised it shows on at least half of recent ticks.
        if raised is not None or 2 * sum(self._persist) >= len(self._persist):
            self._calm_since = None
            if raised is not None:
                new = _RAISES.get(raised, DetectorState.OVERLOAD)
                if state is DetectorState.METASTABLE and 2 * sum(self._storm) >= len(self._storm):
                    # Hysteresis for the storm too: at a low rate of callers its signal is noisy, and a tick or two
                    # without it must not rename a storm that is still on half of recent ticks a mere overload.
                    new, raised = state, "retry_storm"
            elif state in ALARMED:
                new = state
            else:  # recovering: back to the alarm that persists
                new = DetectorState.FAILING if was_failing and not congested else DetectorState.OVERLOAD
            persists = "failing persists" if new is DetectorState.FAILING else "overload persists"
            return self._go(s.t, new, raised or persists)
        if self._calm_since is None:
            self._calm_since = s.t
        calm_for = s.t - self._calm_since
        if state in ALARMED and calm_for >= cfg.clear_hold:
            cleared = "failing cleared" if state is DetectorState.FAILING else "overload cleared"
            return self._go(s.t, DetectorState.RECOVERING, cleared)
        if state is DetectorState.RECOVERING and calm_for >= cfg.clear_hold + cfg.recover_hold:
            episode = self.episodes[-1]
            episode.cleared_at = s.t
            self.closed_s += round(s.t - episode.detected_at, 6)
            self._clear()
            return self._go(s.t, DetectorState.HEALTHY, "recovered")
        return None

    def _failing_now(self, s: Snapshot, congested: bool) -> bool:
        """Tasks with an outcome not good (failed, late, degraded, refused unserved) with nothing congested: their
        good share below ``failing_goodput`` of the baseline's, with at least ``failing_min_tasks`` not good in the
        evidence: this window, and earlier ones (a window apart) while it holds fewer outcomes than that."""
        window = min(self.window, s.t)  # the telemetry window is shorter until the run has lasted one
        outcomes = self._outcomes
        outcomes.append((s.throughput * window, s.goodput * window, s.unserved_rate * window))
        if congested:
            return False
        cfg = self.cfg
        ended = good = unserved = 0.0
        for back in range(len(outcomes) - 1, -1, -self._window_ticks):
            e, g, u = outcomes[back]
            ended += e
            good += g
            unserved += u
            if ended + unserved >= cfg.failing_min_tasks - 1e-6:
                break
        judged = ended + unserved
        not_good = judged - good
        return (
            judged > 0.0
            and not_good >= cfg.failing_min_tasks - 1e-6
            and good < cfg.failing_goodput * self.baseline_good_share * judged
        )

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

    def _learn_share(self, good: float, ended: float) -> None:
        shares = self._shares
        if len(shares) == shares.maxlen:
            old_good, old_ended = shares[0]  # the rates the append pushes out
            self._good_sum -= old_good
            self._ended_sum -= old_ended
        shares.append((good, ended))
        self._good_sum += good
        self._ended_sum += ended
        if len(shares) >= self._min_baseline_ticks and self._ended_sum > 0:
            self.baseline_good_share = min(1.0, max(0.0, self._good_sum / self._ended_sum))

    def _go(self, t: float, new: DetectorState, reason: str) -> Transition | None:
        old = self.state
        if new is old:
            return None
        self.state = new
        if new in ALARMED:
            self._alarm = new
        if new in _WORSE and self.episodes:
            episode = self.episodes[-1]
            if new is DetectorState.FAILING and not self._episode_failed:
                self._episode_failed = True
                self.failing_count += 1
            kind = _WORSE[new]
            if _RANK[kind] > _RANK[episode.kind]:
                if kind == "collapse":
                    self.collapse_count += 1
                episode.kind = kind
        if new is not DetectorState.RECOVERING:
            self._calm_since = None
        return Transition(t=t, old=old, new=new, reason=reason)


def _signal(overloaded: bool, collapsing: bool, failing: bool) -> str:
    if collapsing:
        return "goodput_falling"
    return "overload" if overloaded else "tasks_failing" if failing else "latency_growth"
