"""Resilience end to end in virtual time: survival mode, the score from measurements, the ARES scenarios."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import settings

from chaosd.cli.main import main
from chaosd.config.settings import Settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.plans import scenario_plan, survival_plan
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.experiment.scenario import load_scenario, settings_for
from chaosd.faults import CATALOGUE

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

ROOT = Path(__file__).resolve().parents[3]


def _survive(s: Settings, duration: float, interval: float) -> dict[str, Any]:
    ttl = 2 * interval  # as `chaosd run --survival` does: consecutive faults overlap
    plan = survival_plan(interval, tuple(sorted(CATALOGUE)), s.seed, ttl=ttl, last_at=duration - ttl)
    return run_offline(s, duration=duration, warmup=0.0, plan=plan)


@pytest.mark.slow
def test_an_hour_of_stacked_survival_with_every_action_loses_nothing_and_is_reproducible() -> None:
    s = settings({"load": {"rate": 100.0}, "faults": {"max_concurrent": 5}})
    first = _survive(s, 3600.0, 10.0)
    t = first["tasks"]
    assert t["lost"] == 0 and t["duplicated"] == 0 and t["lost_all_cohorts"] == 0
    assert t["accepted"] == t["completed"] + t["failed"] + t["in_flight"] + t["lost"]
    taken = [a for a in first["actions"] if a.get("ok")]
    assert len(first["faults"]) == len(taken) >= 300  # one every 10 s, less what could not apply
    # Every action but a python stage's dependency faults: virtual time has no python stage to call anything.
    assert {f["action"] for f in first["faults"]} == {a for a in CATALOGUE if not a.startswith("dependency_")}
    assert all(f["reverted_by"] == "ttl" for f in first["faults"])
    assert all(f["reverted_at"] == pytest.approx(f["injected_at"] + f["ttl"], abs=0.11) for f in first["faults"])
    assert first["runtime"]["elections"] > 0 and first["runtime"]["restarts"] > 0
    # The same seed gives the same bytes: checked on ten minutes with every action, run twice (the hour
    # twice would cost the suite a minute; `chaosd run` itself is checked byte for byte in tests/unit/cli/test_cli.py).
    again = [_survive(s, 600.0, 10.0) for _ in range(2)]
    assert json.dumps(again[0], sort_keys=True) == json.dumps(again[1], sort_keys=True)
    assert len(again[0]["faults"]) >= 50


def test_a_fault_free_run_scores_every_dimension_from_measurements() -> None:
    report = run_offline(settings({"load": {"rate": 200.0, "deadline": 0.02}}), duration=60.0, warmup=6.0)
    t = report["tasks"]
    score = report["score"]
    ended = t["accepted"] - t["in_flight"]
    offered = t["offered"] - t["in_flight"]
    # A tight deadline makes some completions late: availability is measured over offered work.
    assert t["late"] > 0
    assert score["availability"] == pytest.approx(100 * (t["completed"] - t["late"]) / offered, abs=1e-3)
    assert 50 < score["availability"] < 100
    assert score["consistency"] == pytest.approx(100 * (ended - t["lost"] - t["duplicated"]) / ended, abs=1e-3)
    # No fault, nothing to recover from: recovery is not measured, and the total is the mean of the rest.
    assert report["faults_summary"]["injected"] == 0 and score["recovery"] is None
    expected = (0.4 * score["availability"] + 0.3 * score["consistency"]) / 0.7
    assert score["total"] == pytest.approx(expected, abs=2e-3)
    assert score["version"] == "2"
    assert {d["cause"] for d in report["diagnostics"]} >= {"late"}


def _kill_workers(broken_supervisor: bool) -> dict[str, Any]:
    s = settings(
        {"load": {"rate": 150.0}, "supervisor": {"enabled": not broken_supervisor}, "faults": {"max_concurrent": 5}}
    )

    async def plan(exp: Experiment) -> None:
        for k, at in enumerate((15.0, 30.0, 45.0)):
            await exp.clock.sleep_until(exp.pipeline.t0 + at)
            exp.injector.inject("kill_agent", f"worker-{k}", ttl=5.0)

    return run_offline(s, duration=120.0, warmup=5.0, plan=plan)


def test_a_broken_mechanism_scores_lower_and_the_diagnostics_say_why() -> None:
    healthy = _kill_workers(broken_supervisor=False)
    broken = _kill_workers(broken_supervisor=True)
    assert all(f["recovered"] for f in healthy["faults"])
    assert healthy["runtime"]["restarts"] == 3
    assert broken["runtime"]["restarts"] == 0
    assert not any(f["recovered"] for f in broken["faults"])
    assert broken["score"]["total"] < healthy["score"]["total"] - 10
    assert broken["score"]["recovery"] < healthy["score"]["recovery"]
    causes = {d["cause"]: d["count"] for d in broken["diagnostics"]}
    assert causes.get("faults_failed") == 3
    assert broken["tasks"]["lost"] == 0  # dead workers' tasks still come back through their leases


@pytest.mark.parametrize("name", ["leader_assassination", "cascading_storm"])
def test_ares_scenarios_meet_their_own_expectations(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "r.json"
    code = main(["run", str(ROOT / "scenarios" / f"{name}.yaml"), "--report", str(report_path)])
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert code == 0, out
    assert report["expectations"] and all(e["passed"] for e in report["expectations"])
    assert len(report["faults"]) == sum(1 for a in report["actions"] if a.get("fault"))
    assert report["tasks"]["lost"] == 0 and report["tasks"]["duplicated"] == 0


def test_leader_assassination_elects_a_standby_that_rebuilds_and_redispatches() -> None:
    report_path = ROOT / "scenarios" / "leader_assassination.yaml"
    scenario = load_scenario(report_path)
    s = settings_for(scenario, report_path, None)
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)
        exp = Experiment(s, clock, warmup=10.0)
        report = loop.run_until_complete(exp.run(scenario.duration, plan=scenario_plan(scenario.actions)))
    finally:
        loop.close()
    kill = report["faults"][0]
    assert kill["action"] == "kill_leader"
    window = s.orchestrator.lease_ttl + s.orchestrator.renew_interval
    assert kill["mechanism_recovered_at"] - kill["injected_at"] <= window + 1e-9
    elected = [e for e in exp.events.events("leader") if e.data["state"] == "elected"]
    assert elected and elected[0].data["replica"] != kill["targets"][0]
    assert report["runtime"]["redispatched"] > 0 and report["runtime"]["deduplicated"] > 0
    assert report["actions"][1] == pytest.approx(report["actions"][1]) and report["actions"][1]["ok"]


def _kill_the_leader_once(idempotent: bool) -> dict[str, Any]:
    s = settings({"load": {"rate": 150.0}, "sink": {"idempotent": idempotent}})

    async def plan(exp: Experiment) -> None:
        await exp.clock.sleep_until(exp.pipeline.t0 + 15.0)
        exp.injector.inject("kill_leader", ttl=5.0)  # acks lost with the leader: the new one re-dispatches

    return run_offline(s, duration=60.0, warmup=5.0, plan=plan)


def test_without_an_idempotent_sink_redelivery_duplicates_effects_and_consistency_drops() -> None:
    safe = _kill_the_leader_once(idempotent=True)
    unsafe = _kill_the_leader_once(idempotent=False)
    assert safe["tasks"]["duplicated"] == 0 and safe["runtime"]["deduplicated"] > 0
    assert safe["score"]["consistency"] == 100.0
    assert unsafe["tasks"]["duplicated"] > 0 and unsafe["runtime"]["deduplicated"] == 0
    assert unsafe["score"]["consistency"] < 100.0
    assert any(d["cause"] == "duplicated" for d in unsafe["diagnostics"])
