"""Admission control: what producers may submit, by one of three policies.

- ``capacity`` (the default) bounds the tasks allowed to wait by the service capacity it measures (able
  workers over busy seconds per task, Little's law): never more than ``max_wait`` of the deadline's worth
  (a task behind more would end late), and only ``target``'s worth once a queue has stood above the target
  for ``standing`` seconds (CoDel's test: a standing queue, not a burst, is cut). The bound moves with the
  measured capacity every tick, so admission comes back the moment capacity does; a stall lifts it unless it
  was binding.
- ``aimd``: the factor producers obey is halved on an alarm and raised by a step while healthy (kept for
  comparison: it idles workers while it refuses, and gives admission back on a ramp).

Failing (tasks failing with a short queue) never cuts admission under any policy: failures are not congestion,
and refusing work would only turn failed tasks into refused ones. aimd raises its factor then as while healthy.
- ``none``: everything offered is submitted; only the queue's own capacity refuses.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from chaosd.admission.detector import ALARMS, DetectorState
from chaosd.config.settings import ThrottleConfig
from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import ThrottleMove

__all__ = ["Throttle", "ThrottleAction"]

_GIVES_BACK = frozenset({DetectorState.HEALTHY, DetectorState.FAILING})  # aimd: states that raise its factor


@dataclass(frozen=True, slots=True)
class ThrottleAction:
    at: float
    action: ThrottleMove  # decrease | increase (aimd's factor); standing | bound (capacity: the short limit on, off)
    factor: float
    limit: int


class Throttle:
    """The admission factor producers obey (1 = everything offered is submitted) and the queue's admission limit
    (tasks allowed to wait; the queue's capacity = no limit of its own)."""

    def __init__(
        self,
        cfg: ThrottleConfig,
        keep: int = 1000,
        *,
        tick: float = 0.1,
        capacity: int = 1 << 62,
        deadline: float = 0.0,
    ) -> None:
        self.cfg = cfg
        self.policy = cfg.active
        self.factor = 1.0
        self.queue_capacity = capacity
        self.limit = capacity
        self.capacity_rate = 0.0  # the measured capacity the limit was last set from, tasks/s
        self.deadline = deadline
        self.set_horizon(deadline)
        self.standing = False  # capacity: the queue stood above target, and is kept to target's worth
        self._binding = False  # capacity: the bound refused, or the queue reached it, on the last tick judged
        self._ages: deque[float] = deque(maxlen=max(1, round(cfg.standing / tick)))  # head ages, newest last
        self._last = float("-inf")
        self.actions: deque[ThrottleAction] = deque(maxlen=keep)  # the newest; the counts below are of all
        self.decreases = 0
        self.increases = 0
        self.changes = 0  # capacity: mode changes
        self.lowest_factor = 1.0
        self.lowest_limit = capacity

    def set_horizon(self, deadline: float, caller_timeout: float = 0.0) -> None:
        """What the admitted wait is a share of: the deadline, or the callers' timeout where it is shorter (work
        that would wait past it is refused at once, where a refusal is cheap, instead of served for nobody)."""
        horizons = [h for h in (deadline, caller_timeout) if h > 0]
        horizon = min(horizons) if horizons else 1.0
        cfg = self.cfg
        self.max_wait = cfg.max_wait * horizon  # the longest wait admitted: a task behind more ends late
        self.target = min(self.max_wait, cfg.target if cfg.target > 0 else horizon / 4)

    def update(self, state: DetectorState, snap: Snapshot) -> ThrottleAction | None:
        """One tick: the detector's state now and the snapshot it judged."""
        if self.policy == "aimd":
            return self._aimd(state, snap.t)
        if self.policy == "capacity":
            return self._capacity(state, snap)
        return None

    # --- capacity ----------------------------------------------------------------------------------------

    def _capacity(self, state: DetectorState, s: Snapshot) -> ThrottleAction | None:
        if state is DetectorState.STALL:
            # The pause is the host's, not the pipeline's, and the window's rates are its artefact. If the bound
            # was not binding before it, admit all the queue holds: what the pause leaves beyond the bound drains
            # after it, refusing only while it does. If it was (an overload the pause interrupts), keep it: lifted,
            # the queue would fill past the deadline and the overload would become a collapse.
            # The pause's head ages are its artefact too: left out, not counted, so the standing queue's clock
            # is not reset by a host that keeps pausing the process.
            if not self._binding:
                self.limit = self.queue_capacity
            return None
        self._binding = s.shed_rate > 0 or s.queue_depth >= self.limit
        ages = self._ages
        ages.append(s.head_age)
        if s.mean_service <= 0:
            self.limit = self.queue_capacity  # nothing takes time: no capacity to keep to
            return None
        if s.capacity_rate <= 0:
            return None  # no worker able to work: what the queue may hold at the last capacity waits for them
        rate = self.capacity_rate = s.capacity_rate
        standing = len(ages) == ages.maxlen and min(ages) > self.target
        # Once standing, the short queue is kept while the offered load is still refused (above capacity).
        short = standing or (self.standing and s.shed_rate > 0)
        delay = self.target if short else max(self.target, self.max_wait - s.mean_service)
        # At least one task per able worker may wait, so a burst at low load is never refused.
        self.limit = min(self.queue_capacity, max(math.ceil(rate * delay), math.ceil(rate * s.mean_service), 1))
        self.lowest_limit = min(self.lowest_limit, self.limit)
        if short == self.standing:
            return None
        self.standing = short
        self.changes += 1
        taken = ThrottleAction(at=s.t, action="standing" if short else "bound", factor=self.factor, limit=self.limit)
        self.actions.append(taken)
        return taken

    # --- aimd --------------------------------------------------------------------------------------------

    def _aimd(self, state: DetectorState, t: float) -> ThrottleAction | None:
        cfg = self.cfg
        if t - self._last < cfg.interval:
            return None
        action: ThrottleMove
        if state in ALARMS and self.factor > cfg.min_factor:
            self.factor = max(cfg.min_factor, self.factor * cfg.decrease)
            action = "decrease"
        elif state in _GIVES_BACK and self.factor < 1.0:
            self.factor = min(1.0, self.factor + cfg.increase)
            action = "increase"
        else:
            return None
        self._last = t
        taken = ThrottleAction(at=t, action=action, factor=self.factor, limit=self.limit)
        self.actions.append(taken)
        if action == "decrease":
            self.decreases += 1
        else:
            self.increases += 1
        self.lowest_factor = min(self.lowest_factor, self.factor)
        return taken
