"""The shipped scenarios run as users run them, and show what they claim to show.

retry_storm and overload, which show admission control, are judged in ``test_admission.py``, beside the same
scenarios under other policies: one run serves every test that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosd.config.settings import load_settings
from chaosd.experiment.runner import run_offline
from chaosd.experiment.scenario import find_scenario, load_scenario, settings_for

ROOT = Path(__file__).resolve().parents[3]


def _scenario(name: str) -> dict:
    path = find_scenario(str(ROOT / "scenarios" / f"{name}.yaml"))
    scenario = load_scenario(path)
    settings = settings_for(scenario, path, None)
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


def test_the_throttle_is_on_by_default_and_a_scenario_can_turn_it_off() -> None:
    assert load_settings().throttle.enabled is True
    path = ROOT / "scenarios" / "retry_storm.yaml"
    assert settings_for(load_scenario(path), path, None).throttle.enabled is False


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
