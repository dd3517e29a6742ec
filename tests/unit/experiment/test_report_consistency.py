"""A report agrees with itself: peak load, queue depth, latency coverage and collapse time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import mmc, settings

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.humanize import fixes, percent, seconds, value
from chaosd.experiment.report import render_summary
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.experiment.scenario import find_scenario, load_scenario, settings_for

ROOT = Path(__file__).resolve().parents[3]


def _run(
    overlay: dict[str, Any], duration: float, warmup: float, fault: tuple[float, str, dict[str, Any]] | None
) -> dict[str, Any]:
    """Run ``overlay`` in virtual time; ``fault`` is (at, action, inject keywords)."""
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)

        async def plan(exp: Experiment) -> None:
            if fault is not None:
                at, action, kwargs = fault
                await exp.clock.sleep_until(exp.pipeline.t0 + at)
                exp.injector.inject(action, **kwargs)

        async def main() -> dict[str, Any]:
            exp = Experiment(settings(overlay), clock, warmup=warmup)
            return await exp.run(duration, plan=plan)

        return loop.run_until_complete(main())
    finally:
        loop.close()


def _scenario(name: str, duration: float | None = None, *, throttle: bool = True) -> dict[str, Any]:
    path = find_scenario(str(ROOT / "scenarios" / f"{name}.yaml"))
    scenario = load_scenario(path)
    cfg = settings_for(scenario, path, None)
    if not throttle:
        cfg = cfg.model_copy(update={"throttle": cfg.throttle.model_copy(update={"enabled": False})})
    warmup = scenario.warmup if scenario.warmup is not None else cfg.run.duration / 10
    return run_offline(cfg, duration=duration or cfg.run.duration, warmup=warmup, scenario=scenario.name)


# --- the peak offered rate ------------------------------------------------------------------------


def test_peak_rate_counts_spike_phases_and_load_spike_surges_within_the_measured_window() -> None:
    phases = [
        {"type": "spike", "at": 1.0, "rate": 900.0, "duration": 1.0},  # during the warm-up: not measured
        {"type": "spike", "at": 6.0, "rate": 400.0, "duration": 2.0},
        {"type": "spike", "at": 60.0, "rate": 2000.0, "duration": 1.0},  # after the run ends
    ]
    overlay = mmc(100.0, 2, load={"phases": phases})
    report = _run(overlay, duration=15.0, warmup=3.0, fault=None)
    load = report["load"]
    assert load["peak_rate"] == 400.0
    assert load["peak_rho"] == pytest.approx(400.0 * load["mean_service_s"] / load["workers"])
    assert "400 peak (ρ 2.000)" in render_summary(report)

    # A load_spike multiplies what producers offer while it lasts: 100 tasks/s × 5.
    surged = _run(overlay, duration=15.0, warmup=3.0, fault=(10.0, "load_spike", {"params": {"factor": 5}, "ttl": 2}))
    assert surged["load"]["peak_rate"] == 500.0
    assert surged["load"]["peak_rho"] == pytest.approx(500.0 * load["mean_service_s"] / load["workers"])


# --- queue depth ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["reject", "block"])
def test_max_depth_stays_within_capacity_and_the_overflow_is_reported_apart(policy: str) -> None:
    # ρ = 1.5 keeps the queue full; killing the leader sends the tasks in service back to it.
    overlay = mmc(600.0, 4, queue={"capacity": 20, "when_full": policy})
    report = _run(overlay, duration=30.0, warmup=2.0, fault=(10.0, "kill_leader", {}))
    q = report["queue"]
    assert q["max_depth"] == q["capacity"] == 20
    assert 0 < q["max_over_capacity"] <= report["load"]["workers"]  # the re-dispatched ones
    summary = render_summary(report)
    assert f"max 20 of 20 (+{q['max_over_capacity']} over capacity)" in summary
    if policy == "block":
        assert 0 < q["max_blocked"] <= report["load"]["producers"]
        assert f"up to {q['max_blocked']} producer(s) blocked" in summary
    else:
        assert q["max_blocked"] == 0
        assert "blocked" not in summary


# --- latency coverage -----------------------------------------------------------------------------


def test_wait_covers_tasks_started_and_sojourn_tasks_completed_in_the_measured_window() -> None:
    workers = 2
    report = _run(mmc(100.0, workers), duration=20.0, warmup=3.0, fault=None)
    w, s = report["latency"]["wait"], report["latency"]["sojourn"]
    span = report["duration_s"] - report["warmup_s"]
    assert report["tasks"]["failed"] == 0
    assert s["count"] == round(report["throughput"]["completed_per_s"] * span)
    # Without failures or re-dispatch, every task started is completed, but for those in service at either edge.
    assert abs(w["count"] - s["count"]) <= workers
    assert s["count"] > 1000
    summary = render_summary(report)
    assert f"over {w['count']} started after warm-up" in summary
    assert f"over {s['count']} completed after warm-up" in summary


# --- collapse time --------------------------------------------------------------------------------


@pytest.mark.parametrize(("duration", "cleared"), [(None, True), (100.0, False)])
def test_time_collapsed_is_the_sum_of_the_episodes(duration: float | None, cleared: bool) -> None:
    report = _scenario("overload", duration, throttle=False)  # admission control would prevent the collapse
    c = report["collapse"]
    assert c["alarms"] == len(c["episodes"]) >= 1
    assert c["count"] == sum(1 for e in c["episodes"] if e["kind"] == "collapse") >= 1
    last = c["episodes"][-1]
    assert (last["cleared_at"] is not None) is cleared
    for e in c["episodes"]:
        end = e["cleared_at"] if e["cleared_at"] is not None else report["duration_s"]
        assert math.isclose(e["duration_s"], end - e["detected_at"], abs_tol=1e-6)
    assert math.isclose(c["time_alarmed_s"], sum(e["duration_s"] for e in c["episodes"]), abs_tol=1e-6)
    # Seconds in each alarm state are within the alarms' time (which also holds their recovering seconds).
    assert c["time_collapsed_s"] > 0 and c["time_collapsed_s"] + c["time_overloaded_s"] <= c["time_alarmed_s"] + 0.1
    summary = render_summary(report)
    assert f"{seconds(c['time_collapsed_s'])} collapsed" in summary
    assert f"{seconds(c['time_overloaded_s'])} overloaded" in summary
    assert f"{'cleared at' if cleared else 'not cleared by the end'}" in summary
    assert f"· {seconds(last['duration_s'])}" in summary
    # The diagnostics' collapsed_s is seconds: printed as a time, never as a share of the counted problems.
    assert f"time collapsed {round(c['time_collapsed_s'])} s" in summary
    assert "collapsed_s" not in summary


# --- the rounding policy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "shown"),
    [(3.11697, "3.1 s"), (0.015033, "0.015 s"), (0.25, "0.25 s"), (0.0, "0 s"), (207.0, "207.0 s"), (1.0, "1.0 s")],
)
def test_seconds_are_shown_to_a_tenth_or_three_significant_digits_below_one(x: float, shown: str) -> None:
    assert seconds(x) == shown


def test_values_booleans_and_shares_read_as_text() -> None:
    assert (value(True), value(False), value(None), value(1.23456), value(3)) == ("yes", "no", "-", "1.23", "3")
    assert percent(0.922218) == "92.2%"


def test_what_to_fix_names_its_evidence_and_is_empty_when_nothing_stands_out() -> None:
    quiet: dict[str, Any] = {"diagnostics": [{"cause": "late", "count": 1}], "queue": {"mean_depth": 0.2}}
    assert fixes(quiet) == []
    loud: dict[str, Any] = {
        "diagnostics": [
            {"cause": "agents_dead", "count": 2, "agents": ["worker-1", "worker-2"]},
            {"cause": "refused:queue_full", "count": 50},
            {"cause": "failed:no_route", "count": 7},
            {"cause": "late", "count": 30},
            {"cause": "duplicated", "count": 3, "examples": [11, 12, 13]},
            {"cause": "lost", "count": 1},
        ],
        "runtime": {"restarts": 0, "gave_up": []},
        "throttle": {"policy": "none"},
        "queue": {"mean_depth": 40.0, "capacity": 100},
        "tasks": {"lost": 1},
    }
    found = fixes(loud)
    assert len(found) == 6
    assert "agents_dead: worker-1, worker-2" in found[0] and "supervisor.enabled = true" in found[0]
    assert "refused:queue_full 50; throttle.policy none" in found[1]
    assert "failed:no_route 7" in found[2] and "alternate" in found[2]
    assert "late 30; queue.mean_depth 40 of 100" in found[3]
    assert "duplicated 3; first task ids 11, 12, 13" in found[4] and "idempotent" in found[4]
    assert found[5].startswith("lost tasks (lost 1)")
    supervised = {**loud, "runtime": {"restarts": 5, "gave_up": ["worker-2"]}}
    assert "gave up on worker-2" in fixes(supervised)[0]


def test_the_summary_s_recovery_rate_is_the_score_s_and_each_action_has_its_row() -> None:
    report = _run(mmc(200.0, 4), duration=40.0, warmup=2.0, fault=(10.0, "kill_leader", {}))
    fs, score = report["faults_summary"], report["score"]
    assert fs["injected"] == 1 and fs["pending"] == 0
    summary = render_summary(report)
    judged = fs["recovered"] + fs["failed"]
    assert f"recovered {fs['recovered']} of {judged} judged, {score['recovery_rate']:.1f}%" in summary
    row = next(line.split() for line in summary.splitlines() if line.strip().startswith("kill_leader"))
    assert row[:3] == ["kill_leader", "1", str(fs["recovered"])]
