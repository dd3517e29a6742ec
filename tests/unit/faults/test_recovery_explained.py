"""A recovery explained: its phases, the fluid model's prediction, and a measurement that resolves the drain.

The pipeline is an M/M/4 queue at 10 ms mean service (cμ = 400/s), throttle off. A capacity fault leaves c′
workers for its TTL: the backlog grows at λ − c′μ and, once lifted, drains at cμ − λ, so the fluid model's
time to restore is (λ − c′μ)·TTL / (cμ − λ). The measured restore must be that drain to within 10 % when it
lasts 5 s or more (shorter drains are not held to it: a tick and the queue's tolerance are a larger share of
them). The controls break the resolution (the recovery dated at the window's resolution again) and move the
lease's TTL.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import mmc, settings

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.report import render_summary, rounded
from chaosd.experiment.runner import Experiment
from chaosd.faults.record import Trace, prediction

INJECT_AT = 15.05  # after the 10 s baseline window has filled
WORKERS, MU = 4, 100.0  # 10 ms mean service: 100/s per worker


def _run(
    action: str, target: str | None, ttl: float, rate: float, *, dated: bool = True, extra: dict[str, Any] | None = None
) -> tuple[Experiment, dict[str, Any]]:
    loop = new_event_loop(virtual=True)
    clock = LoopClock(loop)

    async def main() -> tuple[Experiment, dict[str, Any]]:
        exp = Experiment(settings(mmc(rate, WORKERS, **(extra or {}))), clock, warmup=0.0)

        async def plan(e: Experiment) -> None:
            e.injector.dated = dated
            await e.clock.sleep_until(e.pipeline.t0 + INJECT_AT)
            e.injector.inject(action, target, ttl=ttl)

        return exp, await exp.run(INJECT_AT + ttl + 25.0, plan=plan)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


# (action, target, TTL, λ, workers left while it lasts): drains of 5 to 10 s at ρ 0.45 and 0.5.
CAPACITY_FAULTS = [
    ("pool_exhaustion", "75%", 10.0, 200.0, 1),
    ("pool_exhaustion", "75%", 20.0, 200.0, 1),
    ("pool_exhaustion", "75%", 20.0, 180.0, 1),
    ("pause_agent", "75%", 12.0, 200.0, 1),
]


@pytest.mark.parametrize(("action", "target", "ttl", "rate", "left"), CAPACITY_FAULTS)
def test_a_capacity_faults_restore_is_its_fluid_drain(
    action: str, target: str, ttl: float, rate: float, left: int
) -> None:
    fluid_backlog = (rate - left * MU) * ttl
    fluid_drain = fluid_backlog / (WORKERS * MU - rate)
    _, report = _run(action, target, ttl, rate)
    fault = report["faults"][0]
    p, ph = fault["prediction"], fault["phases"]
    assert fault["outcome"] == "recovered" and fault["clock"] == "restore"
    # The model's inputs, measured, are the textbook's: the backlog built while capacity was cut, cμ restored.
    assert p["backlog"] == pytest.approx(fluid_backlog, rel=0.1)
    assert p["capacity_rate"] == pytest.approx(WORKERS * MU, rel=0.05)
    assert p["arrival_rate"] == pytest.approx(rate, rel=0.1)
    assert p["drain_s"] == pytest.approx(p["backlog"] / (p["capacity_rate"] - p["arrival_rate"]))
    assert p["heal_s"] == 0.0 and p["predicted_s"] == p["drain_s"] and p["drains"]
    assert p["drain_s"] >= 5.0 and p["drain_s"] == pytest.approx(fluid_drain, rel=0.1)
    # The measured restore is the drain, to within 10 %, and the drain is what took its time.
    assert fault["recovery_s"] == pytest.approx(p["drain_s"], rel=0.1)
    assert fault["recovery_s"] == pytest.approx(fluid_drain, rel=0.1)
    assert ph["dominant"] == "drain" and ph["spans"]["drain"] >= 0.9 * fault["recovery_s"]

    # The control: dated at the window's resolution, the restore carries the trailing window's lag.
    _, undated = _run(action, target, ttl, rate, dated=False)
    late = undated["faults"][0]
    assert late["recovery_s"] - fault["recovery_s"] >= 0.5  # the 1 s window, less a tick or two of noise
    assert abs(late["recovery_s"] - p["drain_s"]) > 0.1 * p["drain_s"]  # outside the 10 %


def test_a_longer_window_lags_the_window_dated_restore_not_the_tick_dated_one() -> None:
    """A 2 s telemetry window: the restore dated at the window's resolution lags by about that much more."""
    extra = {"telemetry": {"window": 2.0}}
    _, report = _run("pool_exhaustion", "75%", 10.0, 200.0, extra=extra)
    _, undated = _run("pool_exhaustion", "75%", 10.0, 200.0, dated=False, extra=extra)
    fault, late = report["faults"][0], undated["faults"][0]
    drain = fault["prediction"]["drain_s"]
    assert fault["recovery_s"] == pytest.approx(drain, rel=0.1)
    assert late["recovery_s"] - fault["recovery_s"] >= 1.5  # the 2 s window's lag
    assert late["recovery_s"] > 1.25 * drain


def _heal_expected(kill_at: float, lease_ttl: float, renew: float, tick: float) -> float:
    """The lease was last renewed at the heartbeat before the kill; the standby is elected at the first
    heartbeat once it ran out, and the telemetry sees it at the next tick."""
    renewed = (kill_at // renew) * renew
    elected = -(-(renewed + lease_ttl) // renew) * renew
    seen = -(-round(elected, 9) // tick) * tick
    return seen - kill_at


@pytest.mark.parametrize("lease_ttl", [0.5, 1.0])
def test_a_killed_leaders_heal_phase_is_its_lease_running_out(lease_ttl: float) -> None:
    renew, tick = 0.125, 0.1
    exp, report = _run("kill_leader", None, 10.0, 200.0, extra={"orchestrator": {"lease_ttl": lease_ttl}})
    fault = report["faults"][0]
    ph, p = fault["phases"], fault["prediction"]
    assert fault["clock"] == "heal" and fault["outcome"] == "recovered"
    healed = ph["healed"]
    # Within a telemetry tick of the failover bound (lease TTL + renew interval), and exactly where the lease ran out.
    assert lease_ttl - renew <= healed <= lease_ttl + renew + tick
    assert healed == pytest.approx(_heal_expected(INJECT_AT, lease_ttl, renew, tick), abs=1e-6)
    assert ph["detected"] == pytest.approx(tick - INJECT_AT % tick, abs=1e-6)  # the queue shows at the next tick
    # Heal clock: the prediction is the heal plus the drain of what piled up meanwhile (λ per second unserved).
    assert p["heal_s"] == pytest.approx(healed)
    assert p["backlog"] == pytest.approx(200.0 * healed, rel=0.25)
    assert p["predicted_s"] == pytest.approx(healed + p["drain_s"])
    assert fault["recovery_s"] == pytest.approx(p["predicted_s"], abs=0.3)  # a drain of a second: a few ticks
    assert exp.settings.orchestrator.lease_ttl == lease_ttl  # the control moved what it says it moved


def test_the_heal_moves_with_the_lease_ttl() -> None:
    """The negative control: half a second more lease, half a second more heal (and about as much more drain)."""
    _, short = _run("kill_leader", None, 10.0, 200.0, extra={"orchestrator": {"lease_ttl": 0.5}})
    _, long = _run("kill_leader", None, 10.0, 200.0, extra={"orchestrator": {"lease_ttl": 1.0}})
    a, b = short["faults"][0], long["faults"][0]
    assert b["phases"]["healed"] - a["phases"]["healed"] == pytest.approx(0.5, abs=1e-6)
    assert b["prediction"]["backlog"] > 1.5 * a["prediction"]["backlog"]
    # The drain grows too: 0.5 s more of λ unserved, drained at cμ − λ.
    assert b["recovery_s"] - a["recovery_s"] == pytest.approx(0.5 * (1 + 200 / (400 - 200)), abs=0.3)


def test_the_phases_are_ordered_and_the_dominant_one_is_named() -> None:
    exp, report = _run("pool_exhaustion", "75%", 20.0, 200.0)
    fault = report["faults"][0]
    ph = fault["phases"]
    moments = [ph["detected"], ph["healed"], ph["drained"], ph["recovered"], ph["confirmed"]]
    assert None not in moments and moments == sorted(moments)
    assert ph["detected"] < 0.0  # a restore clock starts at the lift: the fault was felt while it lasted
    assert ph["recovered"] == pytest.approx(fault["recovery_s"])
    assert ph["confirmed"] - ph["recovered"] >= exp.settings.recovery.confirm  # the hold still applies
    assert sum(ph["spans"].values()) == pytest.approx(fault["recovery_s"])
    # The incident, the verdict's event and the report say the same.
    incident = report["incidents"][0]
    assert incident["phases"] == ph and incident["prediction"] == fault["prediction"]
    event = next(e for e in exp.events.events("fault") if e.data.get("state") == "recovered")
    assert rounded(event.data["phases"]) == ph and rounded(event.data["prediction"]) == fault["prediction"]
    summary = render_summary(report)
    backlog = f"{fault['prediction']['backlog']:,}"
    line = next(line for line in summary.splitlines() if line.startswith("    #1 pool_exhaustion"))
    assert f"draining {backlog} tasks" in line and "more workers would shorten it" in line
    assert line.split()[2] == f"{fault['recovery_s']:.1f}"


def test_a_backlog_that_cannot_drain_says_so() -> None:
    trace = Trace(backlog=500, arrivals=2 * 410.0, capacity=2 * 400.0, ticks=2)
    p = prediction(trace, start=10.0, healed_at=12.5)
    assert p is not None
    assert not p["drains"] and p["drain_s"] is None and p["predicted_s"] is None
    assert p["heal_s"] == 2.5 and p["arrival_rate"] == 410.0 and p["capacity_rate"] == 400.0
    # The control: 20/s of spare capacity drains it in 25 s.
    p = prediction(Trace(backlog=500, arrivals=380.0, capacity=400.0, ticks=1), start=10.0, healed_at=12.5)
    assert p is not None and p["drains"] and p["drain_s"] == 25.0 and p["predicted_s"] == 27.5
