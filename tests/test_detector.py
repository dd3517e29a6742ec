"""The collapse detector on the running pipeline (virtual time), and its state machine on synthetic input."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import mmc, run

from chaosd.config import DetectorConfig
from chaosd.telemetry.detector import CollapseDetector, DetectorState
from chaosd.telemetry.snapshot import Snapshot

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

MU = 400.0  # 4 workers × 100/s


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_step_to_overload_is_flagged_within_2_5_s(seed: int) -> None:
    step_at = 30.0
    overlay = mmc(0.7 * MU, 4, seed=seed)
    overlay["load"]["phases"] = [{"type": "step", "at": step_at, "rate": 1.2 * MU}]
    report = run(overlay, duration=45.0)
    episodes = report["collapse"]["episodes"]
    assert episodes, "a step to ρ = 1.2 was never flagged"
    assert episodes[0]["detected_at"] >= step_at, f"false alarm before the step: {episodes[0]}"
    delay = episodes[0]["detected_at"] - step_at
    assert delay <= 2.5, f"flagged {delay:.2f} s after the step"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ten_minutes_at_rho_0_8_raise_no_alarm(seed: int) -> None:
    report = run(mmc(0.8 * MU, 4, seed=seed), duration=600.0)
    assert report["collapse"]["episodes"] == []
    assert report["utilisation"] == pytest.approx(0.8, abs=0.02)  # the load really was ρ 0.8


def test_quarter_second_burst_at_twice_capacity_raises_no_alarm() -> None:
    overlay = mmc(0.7 * MU, 4)
    overlay["load"]["phases"] = [{"type": "spike", "at": 20.0, "rate": 2 * MU, "duration": 0.25}]
    report = run(overlay, duration=40.0)
    assert report["queue"]["max_depth"] >= 50  # the burst did pile up work
    assert report["collapse"]["episodes"] == []


def test_alarm_stays_up_for_the_whole_overload_and_clears_after() -> None:
    overlay = mmc(0.7 * MU, 4, telemetry={"tick": 0.1}, run={"timeline": 1.0})
    overlay["load"]["phases"] = [
        {"type": "step", "at": 20.0, "rate": 1.2 * MU},
        {"type": "step", "at": 80.0, "rate": 0.6 * MU},
    ]
    report = run(overlay, duration=200.0)
    episodes = report["collapse"]["episodes"]
    assert len(episodes) == 1, episodes
    episode = episodes[0]
    assert 20.0 <= episode["detected_at"] <= 22.5
    # Still up when the overload ends; the backlog (≈ 60 s × 80/s) drains at 160/s afterwards.
    assert episode["cleared_at"] is not None and episode["cleared_at"] > 80.0
    alarmed = [p for p in report["timeline"] if p["state"] in ("overload", "collapsed")]
    assert min(p["t"] for p in alarmed) <= 23 and max(p["t"] for p in alarmed) >= 80
    overload = [p for p in report["timeline"] if 23 <= p["t"] <= 80]
    assert all(p["state"] in ("overload", "collapsed") for p in overload), [p["state"] for p in overload]
    # With nothing admitting at capacity the backlog outgrows the deadline (1 s of work after ~5 s here): from
    # then on every completion is late while the workers stay busy, which is a collapse, not only an overload.
    assert [p["state"] for p in overload][:3] == ["overload"] * 3
    assert any(p["state"] == "collapsed" for p in overload)
    assert report["collapse"]["count"] == 1 and episode["kind"] == "collapse"
    assert report["collapse"]["final_state"] == "healthy"


def _snap(t: float, **kw: float) -> Snapshot:
    base = Snapshot(
        t=t,
        queue_depth=0,
        capacity=1000,
        queue_fill=0.0,
        utilisation=0.5,
        busy_share=0.5,
        queue_slope=0.0,
        arrival_rate=50.0,
        admitted_rate=50.0,
        throughput=50.0,
        service_rate=100.0,
        goodput=50.0,
        error_rate=0.0,
        retry_rate=0.0,
        wait_p50=0.0,
        wait_p95=0.01,
        wait_p99=0.02,
        sojourn_p50=0.01,
        sojourn_p95=0.03,
        sojourn_p99=0.05,
        head_age=0.0,
        mean_service=0.01,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _overloaded(t: float) -> Snapshot:
    return _snap(
        t,
        queue_depth=100,
        queue_fill=0.1,
        utilisation=1.0,
        busy_share=1.0,
        queue_slope=50.0,
        head_age=0.5,
        sojourn_p95=0.6,
    )


def test_state_machine_warning_overload_recovering_healthy() -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1)
    t = 0.0
    for _ in range(400):  # 40 s healthy: a baseline forms
        t += 0.1
        assert det.update(_snap(t)) is None
    assert det.baseline_p95 == pytest.approx(0.03)
    states = []
    for _ in range(30):
        t += 0.1
        det.update(_overloaded(t))
        states.append(det.state)
    assert states[0] is DetectorState.WARNING  # one bad tick is a warning, not an alarm
    assert DetectorState.OVERLOAD in states
    first_alarm = states.index(DetectorState.OVERLOAD)
    assert 14 <= first_alarm <= 20  # held for 70 % of the 2 s hold
    # The baseline is frozen while the alarm is up.
    assert det.baseline_p95 == pytest.approx(0.03)
    calm_states = []
    for _ in range(150):
        t += 0.1
        det.update(_snap(t))
        calm_states.append(det.state)
    recovering = calm_states.index(DetectorState.RECOVERING) / 10
    healthy = calm_states.index(DetectorState.HEALTHY) / 10
    # Hysteresis: the alarm outlasts the overload by clear_hold (2 s) of calm, after the last
    # 2 s no longer show the overload on half their ticks; then recover_hold (5 s) more.
    assert 2.0 <= recovering <= 3.5
    assert healthy - recovering == pytest.approx(5.0, abs=0.15)
    assert all(st is DetectorState.OVERLOAD for st in calm_states[: int(recovering * 10) - 1])
    assert len(det.episodes) == 1 and det.episodes[0].cleared_at is not None


def test_overload_during_recovery_continues_the_same_episode() -> None:
    det = CollapseDetector(DetectorConfig(clear_hold=0.5, recover_hold=5.0), tick=0.1)
    t = 0.0
    for _ in range(40):
        t += 0.1
        det.update(_overloaded(t))
    assert det.state is DetectorState.OVERLOAD
    for _ in range(10):
        t += 0.1
        det.update(_snap(t))
    assert det.state is DetectorState.RECOVERING
    for _ in range(10):
        t += 0.1
        det.update(_overloaded(t))
    assert det.state is DetectorState.OVERLOAD
    assert len(det.episodes) == 1 and det.episodes[0].cleared_at is None


def _full(t: float, goodput: float) -> Snapshot:
    """A queue at capacity: it cannot grow, so dQ/dt is 0; the head has waited past the deadline."""
    return _snap(
        t,
        queue_depth=1000,
        queue_fill=1.0,
        utilisation=1.0,
        busy_share=1.0,
        head_age=2.5,
        sojourn_p95=2.5,
        arrival_rate=200.0,
        throughput=100.0,
        goodput=goodput,
        capacity_rate=100.0,
        shed_rate=100.0,
    )


@pytest.mark.parametrize(("goodput", "state"), [(95.0, DetectorState.OVERLOAD), (0.0, DetectorState.COLLAPSED)])
def test_a_full_queue_is_overload_whatever_the_slope_and_collapse_once_goodput_falls(
    goodput: float, state: DetectorState
) -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1, deadline=1.0)
    t = 0.0
    for _ in range(30):
        t += 0.1
        det.update(_full(t, goodput))
    assert det.state is state
    assert det.episode_count == 1 and det.collapse_count == (state is DetectorState.COLLAPSED)
    assert det.episodes[0].kind == ("collapse" if state is DetectorState.COLLAPSED else "overload")


def test_the_baseline_does_not_learn_while_anything_is_wrong() -> None:
    det = CollapseDetector(DetectorConfig(baseline_window=1.0), tick=0.1, deadline=1.0)
    t = 0.0
    for _ in range(20):
        t += 0.1
        det.update(_snap(t))
    assert det.baseline_p95 == pytest.approx(0.03)
    # One signal at a time, each short of the hold (a warning): a head past the deadline, refusals, a slow p95.
    for kw in ({"head_age": 1.5}, {"shed_rate": 10.0}, {"sojourn_p95": 0.09}):
        for _ in range(5):
            t += 0.1
            det.update(_snap(t, **kw))
            assert det.state is DetectorState.WARNING, kw
        assert det.baseline_p95 == pytest.approx(0.03), kw
    # Negative control: a higher p95 with nothing wrong is learnt.
    for _ in range(20):
        t += 0.1
        det.update(_snap(t, sojourn_p95=0.05))
    assert det.baseline_p95 == pytest.approx(0.05)
