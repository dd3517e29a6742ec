"""A breaker opens on failed attempts *in a row*: every success resets the streak, including the usual one the walk
books itself without calling the stage (while the stage has no failure since its breaker last closed)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.pipeline.stages import StageRunner
from chaosd.telemetry.snapshot import Snapshot

THRESHOLD = 3
# A tool whose exponential 10 ms calls are cut at 12 ms: about 30 % of its attempts time out, at random, and with no
# retry each one is booked as a failure while the next task's call is the walk's usual attempt.
TOOL: dict[str, Any] = {
    "seed": 11,
    "load": {"rate": 90.0, "producers": 1, "arrival": "poisson"},
    "workers": {"count": 2},
    "detector": {"enabled": False},
    "throttle": {"enabled": False},
    "stages": [
        {
            "name": "search",
            "kind": "tool",
            "service": {"distribution": "exponential", "mean": 0.010},
            "timeout": 0.012,
            "retries": 0,
            "breaker_threshold": THRESHOLD,
            "breaker_reset": 0.001,  # open for a moment: trips are not held back by the time spent open
        }
    ],
}


def _run(seconds: float) -> tuple[StageRunner, int, list[bool]]:
    """The stage after the run, its attempts, and at each tick whether ``clean`` said what the breaker's state does."""
    loop = new_event_loop(virtual=True)
    exp = Experiment(load_settings(None, TOOL), LoopClock(loop), warmup=0.0, virtual=True)
    stage = exp.pipeline.stages["search"]
    agreed: list[bool] = []

    def tick(snap: Snapshot) -> None:
        agreed.append(stage.clean == (stage._fail_streak == 0 and not stage._tripped))

    exp.telemetry.listen(tick)
    try:
        loop.run_until_complete(exp.run(seconds))
    finally:
        loop.close()
    return stage, stage.stats.attempts, agreed


def _expected_trips(attempts: int, p: float) -> float:
    """Trips over ``attempts`` i.i.d. attempts failing with probability ``p``, the streak reset by a success or a trip:
    the mean wait for THRESHOLD failures in a row is (1 - p^k) / ((1 - p) p^k) attempts."""
    k = THRESHOLD
    return attempts * (1 - p) * p**k / (1 - p**k)


def test_only_failures_in_a_row_open_the_breaker() -> None:
    stage, attempts, agreed = _run(40.0)
    failed = sum(stage.stats.failures.values())
    p = failed / attempts
    assert attempts > 3000
    assert p == pytest.approx(math.exp(-1.2), abs=0.03)  # the timeout's share of exponential calls
    expected = _expected_trips(attempts, p)
    assert expected > 40
    assert stage.trips == pytest.approx(expected, rel=0.3), (stage.trips, expected)
    # The flag the walk reads agrees with the breaker's own state at every tick.
    assert len(agreed) >= 399 and all(agreed)


def test_a_success_the_walk_books_itself_still_resets_the_streak(monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: a failure that leaves the stage "clean" lets the walk's successes skip the reset, and failures
    # far apart add up to trips.
    def failed_attempt(self: StageRunner) -> None:
        self._fail_streak += 1
        if self._fail_streak >= THRESHOLD and not self.is_open(self._now()):
            self._open(self._now())
            self.clean = True

    monkeypatch.setattr(StageRunner, "_failed_attempt", failed_attempt)
    stage, attempts, agreed = _run(40.0)
    p = sum(stage.stats.failures.values()) / attempts
    assert stage.trips > 3 * _expected_trips(attempts, p), stage.trips
    assert not all(agreed)
