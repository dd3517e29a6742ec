"""The steady state keeps its window as running figures: its baseline is, to the bit, what the window's snapshots
give when summed and sorted afresh (the old way, kept here as the model), through any feeds and forgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chaosd.config.settings import RecoveryConfig, SloConfig
from chaosd.faults.steady import SteadyState

TICK = 0.1


@dataclass(frozen=True)
class _Tick:
    goodput: float
    error_rate: float
    sojourn_p95: float
    queue_depth: int
    arrival_rate: float


def _model(window: list[_Tick]) -> tuple[float, float, float, float, float] | None:
    n = len(window)
    if n < 20:  # baseline_min 2 s at 0.1 s ticks
        return None
    return (
        sum(s.goodput for s in window) / n,
        sum(s.error_rate for s in window) / n,
        sorted(s.sojourn_p95 for s in window)[n // 2],
        sum(s.queue_depth for s in window) / n,
        sum(s.arrival_rate for s in window) / n,
    )


_floats = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)
_ticks = st.builds(
    _Tick, _floats, st.floats(0.0, 1.0), st.sampled_from([0.0, 0.01, 0.02, 0.5]), st.integers(0, 500), _floats
)
_steps = st.lists(st.one_of(_ticks, st.integers(1, 5)), min_size=1, max_size=300)


def _steady() -> SteadyState:
    return SteadyState(RecoveryConfig(baseline_min=2.0, baseline_window=5.0), SloConfig(), TICK, runtime=None)  # type: ignore[arg-type]


def test_a_full_window_has_its_baseline_and_forgetting_an_incident_takes_it_back() -> None:
    steady = _steady()
    window = [_Tick(100.0 + i, 0.01 * (i % 3), 0.01 * (i % 7), i, 120.0) for i in range(60)]
    for tick in window:
        steady.feed(tick)  # type: ignore[arg-type]
    b = steady.baseline()
    assert b is not None
    assert (b.goodput, b.error_rate, b.sojourn_p95, b.queue_depth, steady.offered()) == _model(window[-50:])
    assert b.goodput == sum(range(110, 160)) / 50 and b.seconds == 5.0
    steady.forget(35)  # 15 ticks left: under baseline_min's 20
    assert steady.baseline() is None and len(steady) == 15


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_the_running_window_gives_the_model_s_baseline(steps: list[Any]) -> None:
    steady = _steady()
    window: list[_Tick] = []
    for step in steps:
        if isinstance(step, _Tick):
            steady.feed(step)  # type: ignore[arg-type]
            window = [*window, step][-50:]
        else:
            ticks = min(step, len(window))
            steady.forget(ticks)
            window = window[: len(window) - ticks]
        b = steady.baseline()
        got = None if b is None else (b.goodput, b.error_rate, b.sojourn_p95, b.queue_depth, steady.offered())
        assert got == _model(window)
        assert len(steady) == len(window)
