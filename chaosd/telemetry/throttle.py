"""Backpressure: cut producers' admitted share on collapse, give it back gradually once healthy (AIMD)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from chaosd.config import ThrottleConfig
from chaosd.telemetry.detector import DetectorState

__all__ = ["Throttle", "ThrottleAction"]


@dataclass(frozen=True, slots=True)
class ThrottleAction:
    at: float
    action: str  # "decrease" | "increase"
    factor: float


class Throttle:
    """The admission factor producers obey (1 = everything offered is submitted)."""

    def __init__(self, cfg: ThrottleConfig, keep: int = 1000) -> None:
        self.cfg = cfg
        self.factor = 1.0
        self._last = float("-inf")
        self.actions: deque[ThrottleAction] = deque(maxlen=keep)  # the newest; the counts below are of all
        self.decreases = 0
        self.increases = 0
        self.lowest_factor = 1.0

    def update(self, state: DetectorState, t: float) -> ThrottleAction | None:
        cfg = self.cfg
        if not cfg.enabled or t - self._last < cfg.interval:
            return None
        if state is DetectorState.COLLAPSED and self.factor > cfg.min_factor:
            self.factor = max(cfg.min_factor, self.factor * cfg.decrease)
            action = "decrease"
        elif state is DetectorState.HEALTHY and self.factor < 1.0:
            self.factor = min(1.0, self.factor + cfg.increase)
            action = "increase"
        else:
            return None
        self._last = t
        taken = ThrottleAction(at=t, action=action, factor=self.factor)
        self.actions.append(taken)
        if action == "decrease":
            self.decreases += 1
        else:
            self.increases += 1
        self.lowest_factor = min(self.lowest_factor, self.factor)
        return taken
