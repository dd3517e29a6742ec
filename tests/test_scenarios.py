"""The shipped scenarios run as users run them, and show what they claim to show."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosd.config import ThrottleConfig, load_settings
from chaosd.runner import run_offline
from chaosd.scenario import find_scenario, load_scenario, settings_for

ROOT = Path(__file__).resolve().parent.parent


def _scenario(name: str, **overlay: object) -> dict:
    path = find_scenario(str(ROOT / "scenarios" / f"{name}.yaml"))
    scenario = load_scenario(path)
    settings = settings_for(scenario, path, None)
    if overlay:
        settings = settings.model_copy(update=overlay)
    duration = settings.run.duration  # the scenario's, as settings_for gives it
    warmup = scenario.warmup if scenario.warmup is not None else duration / 10
    return run_offline(settings, duration=duration, warmup=warmup, scenario=scenario.name)


def test_every_shipped_scenario_loads() -> None:
    names = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
    assert {"baseline", "saturation", "overload", "retry_storm"} <= set(names)
    for name in names:
        path = ROOT / "scenarios" / f"{name}.yaml"
        scenario = load_scenario(path)
        assert scenario.name == name and scenario.description
        assert settings_for(scenario, path, None).run.duration == scenario.duration


def test_retry_storm_without_throttle_stays_collapsed_after_the_spike() -> None:
    report = _scenario("retry_storm")
    spike_end = 35.0
    after = [p for p in report["timeline"] if p["t"] >= spike_end + 30]
    assert after and all(p["state"] == "collapsed" for p in after)
    # The trigger is long gone, yet goodput stays a fraction of the offered load.
    assert all(p["goodput_per_s"] < 0.2 * p["offered_per_s"] for p in after)
    assert report["collapse"]["final_state"] == "collapsed"
    assert report["queue"]["max_depth"] == report["queue"]["capacity"]
    assert report["tasks"]["lost"] == 0 and report["tasks"]["duplicated"] == 0
    # Shedding nine tasks in ten is not availability: the score is below C, and says why.
    score = report["score"]
    assert score["total"] < 70 and score["grade"] in ("D", "F")
    t = report["tasks"]
    assert score["availability"] < 20 and t["rejected_by"]["queue_full"] > 0.8 * t["offered"]
    causes = {d["cause"]: d for d in report["diagnostics"]}
    assert report["diagnostics"][0]["cause"] == "refused:queue_full"
    collapsed = causes["collapsed_s"]
    assert collapsed["final_state"] == "collapsed" and collapsed["episodes"] == 1
    assert collapsed["count"] >= scenario_duration("retry_storm") - spike_end - 10


def scenario_duration(name: str) -> float:
    return load_scenario(ROOT / "scenarios" / f"{name}.yaml").duration


def test_retry_storm_with_throttle_drains_and_returns_to_healthy() -> None:
    path = ROOT / "scenarios" / "retry_storm.yaml"
    scenario = load_scenario(path)
    settings = settings_for(scenario, path, None)
    settings = settings.model_copy(update={"throttle": settings.throttle.model_copy(update={"enabled": True})})
    report = run_offline(settings, duration=scenario.duration, warmup=10.0, scenario=scenario.name)
    episodes = report["collapse"]["episodes"]
    assert len(episodes) >= 1 and all(e["cleared_at"] is not None for e in episodes)
    assert report["collapse"]["final_state"] == "healthy"
    # Admission control (the capacity policy by default) keeps the queue to what can end in time, so the
    # pressure failures never start and the spike's excess is shed, not retried into a storm.
    throttle = report["throttle"]
    assert throttle["policy"] == "capacity" and throttle["refused"] > 0
    tail = [p for p in report["timeline"] if p["t"] >= scenario.duration - 60]
    assert all(p["queue_depth"] < 50 for p in tail)
    assert all(p["goodput_per_s"] > 0.8 * p["offered_per_s"] for p in tail)
    # Shed work is unavailable service, and availability counts it: what the spike brought above capacity.
    causes = {d["cause"]: d for d in report["diagnostics"]}
    assert causes["refused:shed"]["count"] == throttle["refused"]
    assert report["score"]["availability"] < 100
    # Nobody injected the spike: it is an incident of its own, and the throttle has it recovered within seconds
    # of the spike's end (the recovery counts in the score as an injected fault's would).
    [incident] = [i for i in report["incidents"] if i["unplanned"]]
    assert incident["outcome"] == "recovered" and incident["recovery_s"] is not None and incident["recovery_s"] < 15
    assert report["score"]["recovery"] is not None and report["score"]["total"] >= 85


def test_the_throttle_is_on_by_default_and_a_scenario_can_turn_it_off() -> None:
    assert load_settings().throttle.enabled is True
    path = ROOT / "scenarios" / "retry_storm.yaml"
    assert settings_for(load_scenario(path), path, None).throttle.enabled is False


def test_overload_is_detected_during_the_ramp_throttled_and_cleared_after() -> None:
    report = _scenario("overload")
    episodes = report["collapse"]["episodes"]
    assert len(episodes) >= 1
    # Capacity (400/s) is crossed at t ≈ 67.5 s on the ramp; the load drops at 120 s.
    assert 67.5 <= episodes[0]["detected_at"] <= 75
    assert all(e["cleared_at"] is not None for e in episodes)
    assert report["collapse"]["final_state"] == "healthy"
    # Admission control (on by default) shed what the workers could not serve in time, and never collapsed.
    throttle = report["throttle"]
    assert throttle["enabled"] and throttle["policy"] == "capacity" and throttle["refused"] > 0
    assert report["collapse"]["count"] == 0 and episodes[0]["kind"] == "overload"
    # The queue was cut to the target (a quarter of the 1 s deadline) while the overload stood, and given its
    # deadline's worth back after: 0.8 s of 400/s, less one task's service.
    assert throttle["lowest_limit"] <= 0.25 * 400 * 1.1
    assert throttle["limit"] == pytest.approx(0.79 * throttle["capacity_per_s"], rel=0.05)


def test_overload_without_the_throttle_stays_collapsed_until_the_load_drops() -> None:
    report = _scenario("overload", throttle=ThrottleConfig(enabled=False))
    episodes = report["collapse"]["episodes"]
    assert len(episodes) == 1
    assert 67.5 <= episodes[0]["detected_at"] <= 75
    assert episodes[0]["cleared_at"] is not None and episodes[0]["cleared_at"] > 120


def test_baseline_raises_no_alarm() -> None:
    report = _scenario("baseline")
    assert report["collapse"]["episodes"] == []
    assert report["tasks"]["rejected"] == 0 and report["tasks"]["lost"] == 0


def test_saturation_is_stable_and_alarms_at_most_rarely() -> None:
    report = _scenario("saturation")
    assert report["utilisation"] == pytest.approx(0.9, abs=0.01)
    assert report["tasks"]["rejected"] == 0 and report["tasks"]["lost"] == 0
    # ρ 0.9 is stable but noisy: queue excursions may trip a short alarm now and then
    # (≈ 0.5 per 10 min across seeds); never a lasting one.
    # An episode lasts from detection until the detector is healthy again, its recovery hold (5 s)
    # included, and the time collapsed is exactly their sum.
    collapse = report["collapse"]
    assert collapse["alarms"] <= 2 and collapse["count"] == 0
    assert collapse["time_alarmed_s"] == pytest.approx(sum(e["duration_s"] for e in collapse["episodes"]))
    assert collapse["time_alarmed_s"] < 0.06 * report["duration_s"]
    assert all(e["duration_s"] < 30 for e in collapse["episodes"])
