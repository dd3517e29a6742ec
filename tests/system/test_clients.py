"""Callers that time out, retry and leave ([clients]), on the virtual clock: Erlang A, the second model's verdicts,
the ways out of a storm, the detector's name for it, the conservation laws and bad input."""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from queueing_theory import erlang_a
from simpy_callers import simulate, verdict

from chaosd.cli.main import main
from chaosd.config.settings import deep_merge, load_settings
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.views import ReportView, TimelinePoint

pytestmark = pytest.mark.cpu

SERVERS, MEAN = 4, 0.01
CAPACITY = SERVERS / MEAN  # 400 completions per second
SEEDS = range(1, 6)


def _settings(overlay: dict[str, Any]) -> Any:
    base: dict[str, Any] = {
        "workers": {"count": SERVERS},
        "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": MEAN}}],
        "throttle": {"enabled": False},
        "load": {"deadline": 0},
        "run": {"timeline": 1.0},
    }
    return load_settings(overlay=deep_merge(base, overlay))


# --- Erlang A: M/M/n+M -------------------------------------------------------------------------------------------

THETA = 50.0  # abandonment rate: a mean patience of two mean service times


def _reneging(rho: float, seed: int, distribution: str = "exponential") -> tuple[float, float]:
    """chaosd's abandoned share and goodput for Poisson callers at ρ who wait forever, never retry and leave the
    queue after an exponential patience of mean 1/θ."""
    lam = rho * CAPACITY
    report = run_offline(
        _settings(
            {
                "seed": seed,
                "load": {"rate": lam},
                "queue": {"capacity": 100_000},
                "detector": {"enabled": False},
                "clients": {"patience": {"distribution": distribution, "mean": 1 / THETA}},
            }
        ),
        duration=320.0,
        warmup=20.0,
    )
    tasks = report["tasks"]
    assert tasks["abandoned"] == tasks["abandoned_by"]["patience"] == tasks["failed_by"].get("abandoned", 0)
    assert tasks["retried"] == 0 and tasks["wasted"] == 0  # no timeout, no retry: leaving is the only way out
    return tasks["abandoned"] / tasks["offered"], report["throughput"]["goodput_per_s"]


@pytest.mark.parametrize("rho", [0.9, 1.2])
def test_abandoned_share_and_goodput_agree_with_erlang_a(rho: float) -> None:
    theory = erlang_a(SERVERS, rho * CAPACITY, 1 / MEAN, THETA)
    runs = [_reneging(rho, seed) for seed in (1, 2)]
    share = statistics.fmean(r[0] for r in runs)
    goodput = statistics.fmean(r[1] for r in runs)
    assert share == pytest.approx(theory["p_abandon"], rel=0.03), (share, theory)
    assert goodput == pytest.approx(theory["goodput"], rel=0.03), (goodput, theory)


def test_a_constant_patience_is_not_erlang_a() -> None:
    """Negative control: the same mean patience, constant instead of exponential (M/M/n+D), abandons a share the
    Erlang A forms do not give: the agreement above is the mechanism's, not a tolerance wide enough for anything."""
    theory = erlang_a(SERVERS, 1.2 * CAPACITY, 1 / MEAN, THETA)
    share, _ = _reneging(1.2, 1, distribution="constant")
    assert abs(share / theory["p_abandon"] - 1) > 0.1, (share, theory)


# --- the storm, against the second model ---------------------------------------------------------------------------
# Retries 3 and a 1 s timeout: the predicted threshold is CAPACITY / 4 = 100 callers per second. The queue holds
# 5 s of work (more than the timeout, so a storm can hold) and drains within the run below the threshold.
STORM: dict[str, Any] = {"queue": {"capacity": 2000}, "clients": {"timeout": 1.0, "retries": 3}}
SPIKE = {"type": "spike", "at": 5.0, "rate": 2 * CAPACITY, "duration": 10.0}
TRIGGER_END = 15.0
AFTER = TRIGGER_END + 20.0  # judged from 20 s after the trigger ended to the run's end
DURATION = 60.0
HIGH, LOW = 0.5 * CAPACITY, 0.15 * CAPACITY
WAYS_OUT: dict[str, dict[str, Any]] = {
    "drop_expired": {"clients": {"drop_expired": True}},
    "budget 0.1": {"clients": {"budget": {"ratio": 0.1}}},
    "admission": {"throttle": {"enabled": True, "policy": "capacity"}},
}


async def _outage(exp: Experiment) -> None:
    """A capacity loss: every worker paused for 10 s from 5 s."""
    await exp.clock.sleep_until(exp.pipeline.t0 + 5.0)
    exp.injector.inject("pause_agent", "100%", ttl=10.0)


@functools.cache
def _storm(lam: float, seed: int, trigger: str = "spike", way_out: str | None = None) -> ReportView:
    overlay = deep_merge(STORM, {"seed": seed, "load": {"rate": lam}})
    if trigger == "spike":
        overlay = deep_merge(overlay, {"load": {"phases": [SPIKE]}})
    overlay = deep_merge(overlay, WAYS_OUT.get(way_out or "", {}))
    plan = _outage if trigger == "outage" else None
    return run_offline(_settings(overlay), duration=DURATION, warmup=0.0, plan=plan)


def _after(report: ReportView, key: str, start: float = AFTER) -> float:
    """The mean of a timeline rate over (start, end]: each point covers the second before it."""
    points: list[TimelinePoint] = report["timeline"]
    return statistics.fmean(float(p[key]) for p in points if p["t"] > start + 1e-9)  # type: ignore[literal-required]


def _chaosd_verdict(report: ReportView, lam: float) -> str:
    return "recovers" if _after(report, "goodput_per_s") >= 0.9 * lam else "storm"


@pytest.mark.parametrize("trigger", ["spike", "outage"])
@pytest.mark.parametrize("seed", SEEDS)
def test_the_verdict_matches_the_second_model_below_and_above_the_threshold(seed: int, trigger: str) -> None:
    simpy_trigger = {"spike": {"spike": (2 * CAPACITY, 5.0, 10.0)}, "outage": {"loss": (0, 5.0, 10.0)}}[trigger]
    for lam, expected in ((LOW, "recovers"), (HIGH, "storm")):
        ours = _storm(lam, seed, trigger)
        theirs = simulate(
            seed=seed,
            lam=lam,
            c=SERVERS,
            mean_service=MEAN,
            capacity=2000,
            timeout=1.0,
            retries=3,
            duration=DURATION,
            **simpy_trigger,
        )
        assert _chaosd_verdict(ours, lam) == verdict(theirs, after=AFTER, lam=lam) == expected, (lam, trigger)
        if expected == "storm":
            # Inside the storm: goodput near 0, attempts ≈ (retries + 1) × callers, wasted ≈ capacity, as the
            # second model shows.
            attempts = _after(ours, "attempts_per_s") / _after(ours, "offered_per_s")
            their_attempts = theirs.rate("attempts", AFTER) / theirs.rate("callers", AFTER)
            assert _after(ours, "goodput_per_s") < 0.02 * lam
            assert attempts == pytest.approx(their_attempts, rel=0.05) and attempts == pytest.approx(4.0, rel=0.05)
            assert _after(ours, "wasted_per_s") == pytest.approx(theirs.rate("wasted", AFTER), rel=0.05)
            assert _after(ours, "wasted_per_s") == pytest.approx(CAPACITY, rel=0.06)


# --- the ways out -------------------------------------------------------------------------------------------------


def _back_at(report: ReportView, lam: float, smooth: int = 5) -> float | None:
    """When goodput is back to ≥ 90 % of the callers after the trigger ended and stays there (every 5 s mean from
    then on, so one second's Poisson dip is not read as a storm): seconds after the trigger's end."""
    rates = [float(p["goodput_per_s"]) for p in report["timeline"] if p["t"] > TRIGGER_END + 1e-9]
    means = [statistics.fmean(rates[i : i + smooth]) for i in range(len(rates) - smooth + 1)]
    for i in range(len(means)):
        if min(means[i:]) >= 0.9 * lam:
            return float(i + 1)
    return None


@pytest.mark.parametrize("way_out", WAYS_OUT)
def test_each_way_out_ends_the_storm_within_20_s_of_its_trigger(way_out: str) -> None:
    for seed in SEEDS:
        back = _back_at(_storm(HIGH, seed, way_out=way_out), HIGH)
        assert back is not None and back <= 20.0, (way_out, seed, back)


def test_with_no_way_out_the_same_storm_never_ends() -> None:
    for seed in SEEDS:
        report = _storm(HIGH, seed)
        assert _back_at(report, HIGH) is None
        assert _after(report, "goodput_per_s", TRIGGER_END) < 0.05 * HIGH


NO_RETRY = {"retries": 0}


# --- the detector -------------------------------------------------------------------------------------------------


def test_the_detector_names_the_storm_and_not_a_plain_overload() -> None:
    for seed in SEEDS:
        storm = [p["state"] for p in _storm(HIGH, seed)["timeline"] if p["t"] > TRIGGER_END + 1e-9]
        assert storm.count("metastable") >= 0.9 * len(storm), (seed, storm)
    # The same load and spike with callers that never retry: an overload that drains, never a storm.
    for seed in SEEDS:
        report = run_offline(
            _settings(
                deep_merge(STORM, {"seed": seed, "load": {"rate": HIGH, "phases": [SPIKE]}, "clients": {"retries": 0}})
            ),
            duration=DURATION,
            warmup=0.0,
        )
        states = [p["state"] for p in report["timeline"]]
        assert "metastable" not in states and report["collapse"]["time_metastable_s"] == 0.0
        assert {"overload", "collapsed"} & set(states)  # the spike was seen: the control is not a calm run


# --- accounting ---------------------------------------------------------------------------------------------------


def test_attempts_and_callers_are_conserved_under_every_mechanism_at_once() -> None:
    report = run_offline(
        _settings(
            {
                "seed": 3,
                "load": {"rate": 150.0, "phases": [{"type": "spike", "at": 5.0, "rate": 700.0, "duration": 5.0}]},
                "queue": {"capacity": 500},  # 1.25 s of work: more than the timeout
                "clients": {
                    "timeout": 0.5,
                    "retries": 2,
                    "retry_on": ["timeout", "refused", "failed"],
                    "backoff": {"base": 0.05, "factor": 2.0, "max": 0.5, "jitter": 0.5},
                    "budget": {"ratio": 0.5},
                    "patience": {"distribution": "exponential", "mean": 2.0},
                },
            }
        ),
        duration=30.0,
        warmup=0.0,
    )
    t = report["tasks"]
    assert t["offered"] + t["retried"] == t["accepted"] + t["rejected"]  # attempts = accepted + refused
    assert t["accepted"] == t["completed"] + t["failed"] + t["in_flight"] + t["lost"]
    assert t["abandoned"] == sum(t["abandoned_by"].values())
    # Every caller out of patience takes its attempt out of the queue; so does one whose caller had timed out before.
    assert t["failed_by"]["abandoned"] >= t["abandoned_by"]["patience"] > 0
    good = t["completed"] - t["late"] - t["degraded"] - t["wasted"]
    assert good + t["gave_up"] <= t["offered"]  # each caller ends once: served or gave up (some still waiting)
    assert t["offered"] - good - t["gave_up"] < 0.02 * t["offered"]
    for name in ("retried", "wasted", "gave_up", "rejected", "abandoned"):
        assert t[name] > 0, (name, t)  # every term of the laws at work in this run


# --- bad input ----------------------------------------------------------------------------------------------------

BAD = [
    ("timeout = -1", "clients.timeout"),
    ("retries = -2", "clients.retries"),
    ("backoff = { jitter = 1.5 }", "clients.backoff.jitter"),
    ("backoff = { factor = 0.5 }", "clients.backoff.factor"),
    ('retry_on = ["timeout", "nope"]', "clients.retry_on.1"),
    ("budget = { ratio = -0.1 }", "clients.budget.ratio"),
    ('patience = { distribution = "pareto", mean = 1.0 }', "clients.patience.distribution"),
    ("wait = 3", "clients.wait"),
]


def _yaml_value(toml_line: str) -> str:
    key, value = toml_line.split(" = ", 1)
    return f"{key}: {value.replace(' = ', ': ')}"


@pytest.mark.parametrize(("line", "key"), BAD)
def test_every_invalid_clients_value_exits_2_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, key: str
) -> None:
    # The CLI's own entry point, in this process (a chaosd process each would start sixteen interpreters).
    toml = tmp_path / "bad.toml"
    toml.write_text(f"[clients]\n{line}\n")
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(f"name: bad\ndescription: d\nduration: 5s\nconfig:\n  clients:\n    {_yaml_value(line)}\n")
    report = tmp_path / "r.json"
    for args in (["--config", str(toml)], [str(scenario)]):
        code = main(["run", *args, "--duration", "5s", "--quiet", "--report", str(report)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert key in err, err
        assert not report.exists()  # nothing ran, nothing written


def test_the_environment_sets_the_callers_and_is_checked_as_the_file_is(tmp_path: Path) -> None:
    def chaosd(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chaosd", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, **env},
        )

    done = chaosd("predict", "pressure_storm", "--json", CHAOSD_CLIENTS__TIMEOUT="0.5", CHAOSD_CLIENTS__RETRIES="2")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert (view["timeout_s"], view["attempts_per_caller"]) == (0.5, 3.0)
    bad = chaosd("predict", "pressure_storm", CHAOSD_CLIENTS__BACKOFF__JITTER="2")
    assert bad.returncode == 2 and "CHAOSD_CLIENTS__BACKOFF__JITTER: clients.backoff.jitter" in bad.stderr
