"""The real clock agrees with virtual time for the same seed: M/M/2 at ρ 0.7, default telemetry, detector, throttle.

Both runs draw the same arrivals and services (same seed, same streams), so their difference is what the real
clock adds, not sampling noise. A sleep on the real loop wakes a fraction of a millisecond late; timed from each
wake-up, every service would carry that lateness into the next one, and at ρ 0.7 the mean wait moves about five
times as much as the service does (bench/realtime_breakdown.py shows where the time goes).
"""

from __future__ import annotations

from typing import Any

import pytest

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import CATCH_UP, LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.views import ReportView

pytestmark = pytest.mark.solo

OVERLAY: dict[str, Any] = {
    "seed": 1,
    "load": {"arrival": "poisson", "rate": 140.0},
    "workers": {"count": 2},
    "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": 0.01}}],
}
WARMUP_SHARE = 0.1
# 30 s on the real clock (about 3,800 tasks measured). With the same draws, what remains is one wake-up's lateness
# per task (each task ends, and a queued one starts, a sleep's lateness after the model's time): about 0.1 ms. Eight
# 30 s runs on this 2-core host, with other work beside them (the loop waited 0.08-0.37 s for a CPU per run),
# measured +0.44 to +1.08 % on mean sojourn, +0.70 to +1.68 % on mean wait and 0 to +0.60 % on p95 sojourn, the
# largest with the longest wait for a CPU; so the tolerances hold about twice the worst seen. Longer waits for a CPU
# than catch-up's 2 ms push the figures up, which is why this test runs alone. The failure message says how long
# the loop waited for a CPU.
DURATION = 30.0
TOLERANCE = {"mean sojourn": 0.02, "mean wait": 0.04, "p95 sojourn": 0.03}
# The negative control runs shorter, with and without catch-up side by side, since the tolerances above are set for
# a loaded host, not for telling the two apart. Four pairs of 10 s runs on a quiet host: without catch-up the error
# was +3.7 to +5.2 % on the mean wait and +2.5 to +3.4 % on the mean sojourn, with it +0.55 to +0.75 % and +0.35 to
# +0.48 %, five to eight times less; the test asks for three.
CONTROL_DURATION = 10.0
CONTROL_RATIO = 3.0


def _measures(report: ReportView) -> dict[str, float]:
    latency = report["latency"]
    return {
        "mean sojourn": latency["sojourn"]["mean"],
        "mean wait": latency["wait"]["mean"],
        "p95 sojourn": latency["sojourn"]["p95"],
    }


def _real(settings: Settings, duration: float, catch_up: float) -> ReportView:
    """A real-clock run as ``run_offline`` makes one, with the clock's catch-up set to ``catch_up``."""
    loop = new_event_loop(virtual=False)
    clock = LoopClock(loop)
    clock.catch_up = catch_up

    async def main() -> ReportView:
        return await Experiment(settings, clock, warmup=WARMUP_SHARE * duration, virtual=False).run(duration)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _errors(settings: Settings, duration: float, real: ReportView) -> dict[str, float]:
    virtual = run_offline(settings, duration=duration, warmup=WARMUP_SHARE * duration, virtual=True)
    assert real["tasks"]["completed"] == pytest.approx(virtual["tasks"]["completed"], abs=2)  # the same tasks
    v = _measures(virtual)
    return {name: value / v[name] - 1 for name, value in _measures(real).items()}


def test_real_time_reports_what_virtual_time_reports_for_the_same_seed() -> None:
    settings = load_settings(None, OVERLAY)
    cpu_wait: list[float] = []
    real = run_offline(
        settings,
        duration=DURATION,
        warmup=WARMUP_SHARE * DURATION,
        virtual=False,
        on_tick=lambda snap: cpu_wait.append(snap.cpu_wait),
    )
    errors = _errors(settings, DURATION, real)
    outside = {name: f"{e:+.2%}" for name, e in errors.items() if abs(e) > TOLERANCE[name]}
    assert not outside, (
        f"real vs virtual beyond {TOLERANCE}: {outside} (all: {errors});"
        f" the loop waited {sum(cpu_wait):.2f} s of {DURATION:g} s for a CPU"
    )


def test_without_catch_up_the_lateness_accumulates_into_the_wait() -> None:
    # Negative control: each service timed from the worker's wake-up, as before services kept to the schedule.
    settings = load_settings(None, OVERLAY)
    assert CATCH_UP > 0.0
    kept = _errors(settings, CONTROL_DURATION, _real(settings, CONTROL_DURATION, CATCH_UP))
    lost = _errors(settings, CONTROL_DURATION, _real(settings, CONTROL_DURATION, 0.0))
    for name in ("mean wait", "mean sojourn"):
        assert lost[name] > 0.01, (name, lost)
        assert lost[name] > CONTROL_RATIO * max(kept[name], 0.0), (name, {"catch-up": kept, "none": lost})


# The stall: the loop held for 200 ms, 1.5 s into a 4 s run. The arrivals it holds back land together when it ends
# (their accepted_at is when they landed), so what the stall costs the mean wait is that backlog's: about 30 tasks,
# which take half a second to clear. The detector and throttle are off: their response to a stall is not at issue.
STALL_AT, STALL, STALL_RUN = 1.5, 0.2, 4.0
STALL_OVERLAY: dict[str, Any] = OVERLAY | {"detector": {"enabled": False}, "throttle": {"policy": "none"}}


def _stalled(settings: Settings, catch_up: float, stall: float) -> float:
    """Mean wait of a real-clock run whose loop a plan holds for ``stall`` seconds, with the given catch-up."""
    loop = new_event_loop(virtual=False)
    clock = LoopClock(loop)
    clock.catch_up = catch_up

    async def hold(exp: Experiment) -> None:
        await clock.sleep_until(exp.pipeline.t0 + STALL_AT)
        end = clock.now() + stall
        while clock.now() < end:  # a callback that blocks the loop, as a blocking call would
            pass

    async def main() -> ReportView:
        return await Experiment(settings, clock, warmup=0.0, virtual=False).run(STALL_RUN, plan=hold)

    try:
        return _measures(loop.run_until_complete(main()))["mean wait"]
    finally:
        loop.close()


def test_catch_up_does_not_hide_a_stall() -> None:
    # What the stall adds to the mean wait is the same with catch-up as without: at most 2 ms of it per worker is
    # made up. Without the stall the same run adds next to nothing, so the figure is the stall's.
    settings = load_settings(None, STALL_OVERLAY)
    virtual = _measures(run_offline(settings, duration=STALL_RUN, warmup=0.0, virtual=True))["mean wait"]
    shown = _stalled(settings, CATCH_UP, STALL) - virtual
    unpaced = _stalled(settings, 0.0, STALL) - virtual
    calm = _stalled(settings, CATCH_UP, 0.0) - virtual
    assert shown > 0.005, (shown, virtual)
    assert shown == pytest.approx(unpaced, rel=0.25), (shown, unpaced)
    assert abs(calm) < 0.15 * shown, (calm, shown)
