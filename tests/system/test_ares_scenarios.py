"""Seed scenarios run as written: the ARES form verbatim (no duration), shipped ones by file name, JSON profiles,
expectations judged on the scenario's own window on the daemon, and speeds too fast to judge refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import live
from daemon_harness import Daemon

from chaosd.api.app import status_of
from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock
from chaosd.core.errors import FaultError, ScenarioError
from chaosd.daemon.control import Controller, PlanRun
from chaosd.experiment.plans import check_speed
from chaosd.experiment.scenario import SETTLE_S, SHIPPED, find_scenario, load_scenario, parse_scenario, settings_for

ROOT = Path(__file__).resolve().parents[2]

# An ARES Arena scenario as ARES writes it: a name and actions, nothing of chaosd's own.
ARES = {
    "name": "ares_trio",
    "actions": [
        {"delay": "10s", "action": {"type": "kill_leader", "target_id": "leader", "metadata": {"duration": "20s"}}},
        {
            "delay": "10s",
            "action": {"type": "latency_jitter", "target_id": "all", "metadata": {"duration": "5s", "jitter": "5ms"}},
        },
        {"delay": "15s", "action": {"type": "remove_node", "target_id": "search"}},
    ],
}
ARES_YAML = """\
name: ares_trio
actions:
  - delay: 10s
    action: {type: kill_leader, target_id: leader, metadata: {duration: 20s}}
  - delay: 10s
    action: {type: latency_jitter, target_id: all, metadata: {duration: 5s, jitter: 5ms}}
  - delay: 15s
    action: {type: remove_node, target_id: search}
"""


def _chaosd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "chaosd", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- the ARES form verbatim ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_an_ares_scenario_without_duration_runs_until_its_last_fault_ends_plus_the_settle_time(
    tmp_path: Path, form: str
) -> None:
    scenario = tmp_path / f"ares_trio.{form}"
    scenario.write_text(ARES_YAML if form == "yaml" else json.dumps(ARES, indent=2))
    config = tmp_path / "chaosd.toml"
    config.write_text("[faults]\ndefault_ttl = 20\n")  # remove_node gives no duration: it lasts this long
    report_path = tmp_path / "report.json"
    done = _chaosd("run", scenario.name, "--config", str(config), "--report", str(report_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text())
    # Actions at 10, 20 and 35 s; the faults end at 30, 25 and 35 + 20 (the configured default TTL).
    assert report["duration_s"] == 55 + SETTLE_S == 85
    assert report["warmup_s"] == 8.5  # a tenth of it, as for any run without a warm-up
    assert [(a["action"], a["target"], a["ok"]) for a in report["actions"]] == [
        ("kill_leader", "leader", True),
        ("latency_jitter", "all", True),
        ("remove_node", "search", True),
    ]
    faults = [(f["action"], f["targets"], f["ttl"], f["injected_at"], f["reverted_by"]) for f in report["faults"]]
    assert faults == [
        ("kill_leader", ["orchestrator-0"], 20, 10, "ttl"),
        ("latency_jitter", faults[1][1], 5, 20, "ttl"),
        ("remove_node", ["search"], 20, 35, "ttl"),
    ]
    assert "search" in faults[1][1]


def test_the_derived_duration_follows_the_fault_that_ends_last_and_the_configured_ttl(tmp_path: Path) -> None:
    text = ARES_YAML.replace("duration: 20s}", "duration: 50s}")  # kill_leader now outlasts the last action's fault
    scenario = parse_scenario(text, "s.yaml")
    assert scenario.duration is None
    assert scenario.run_duration(default_ttl=10) == 10 + 50 + SETTLE_S
    assert scenario.run_duration(default_ttl=40) == 35 + 40 + SETTLE_S
    # A check has no TTL: the run lasts until it has run, plus the settle time.
    checked = parse_scenario(text + "  - delay: 60s\n    action: {type: verify_leader}\n", "s.yaml")
    assert checked.run_duration(default_ttl=10) == 95 + SETTLE_S
    # An explicit duration is kept as written, and settings_for gives the run the derived one.
    assert parse_scenario(text + "duration: 2m\n", "s.yaml").run_duration(default_ttl=10) == 120
    path = tmp_path / "s.yaml"
    assert settings_for(scenario, path, None).run.duration == 90
    assert settings_for(scenario, path, None, {"faults": {"default_ttl": 40}}).run.duration == 105


def test_ares_metadata_keys_are_accepted_and_anything_else_is_named() -> None:
    meta = 'description: d\nversion: "1.2"\nauthor: ops team\ntags: [leader, dag]\n'
    scenario = parse_scenario(ARES_YAML + meta, "s.yaml")
    assert (scenario.version, scenario.author, scenario.tags) == ("1.2", "ops team", ("leader", "dag"))
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(ARES_YAML + "blast_radius: 3\n", "s.yaml")
    assert caught.value.lines() == ["s.yaml: blast_radius: unknown key"]
    with pytest.raises(ScenarioError) as caught:
        parse_scenario("name: idle\n", "s.yaml")
    assert caught.value.lines() == [
        "s.yaml: duration: Field required when the scenario has no actions (otherwise it is derived from them)"
    ]


def test_a_json_profile_is_the_same_scenario_as_its_yaml(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ARES_YAML)
    (tmp_path / "a.json").write_text(json.dumps(ARES))
    assert load_scenario(tmp_path / "a.json") == load_scenario(tmp_path / "a.yaml")


# --- finding a scenario by file name ---------------------------------------------------------------------


def test_run_finds_a_shipped_scenario_by_its_file_name_from_any_directory(tmp_path: Path) -> None:
    # The first 15 s of it, before its first fault: the file is found and read, the run is short.
    done = _chaosd("run", "cascading_storm.yaml", "--duration", "15", "--report", "r.json", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["scenario"] == "cascading_storm" and report["seed"] == 11
    missing = _chaosd("run", "no_such_storm.yaml", "--report", "r2.json", cwd=tmp_path)
    assert missing.returncode == 2 and "no_such_storm.yaml: file not found" in missing.stderr


def test_find_scenario_looks_in_the_working_directory_then_scenarios_then_the_shipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_scenario("cascading_storm.yaml") == SHIPPED / "cascading_storm.yaml"
    assert find_scenario("cascading_storm") == SHIPPED / "cascading_storm.yaml"
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "cascading_storm.yaml").write_text(ARES_YAML)
    (tmp_path / "scenarios" / "profile.json").write_text(json.dumps(ARES))
    assert find_scenario("cascading_storm.yaml") == Path("scenarios/cascading_storm.yaml")
    assert find_scenario("profile") == Path("scenarios/profile.json")
    assert find_scenario("profile.json") == Path("scenarios/profile.json")
    (tmp_path / "cascading_storm.yaml").write_text(ARES_YAML)
    assert find_scenario("cascading_storm.yaml") == Path("cascading_storm.yaml")  # a file here comes first
    assert find_scenario("elsewhere/cascading_storm.yaml") == Path("elsewhere/cascading_storm.yaml")


# --- on the daemon: the scenario's own window, and speeds too fast to judge ---------------------------------


CALM = """\
name: calm
duration: 30s
actions:
  - {delay: 10s, action: {type: slow_agent, target_id: worker-0, metadata: {duration: 5s, factor: 2}}}
expect: {min_availability: 99, min_grade: A, all_recovered: true, lost_tasks: 0}
"""
HARSH = """\
name: harsh
duration: 40s
actions:
  - {delay: 10s, action: {type: pool_exhaustion, target_id: 100%, metadata: {duration: 15s}}}
expect: {min_availability: 99, lost_tasks: 0}
"""


def _live(script: Any) -> dict[str, Any]:
    return live(script, load_settings(None))


def test_expectations_judge_the_scenarios_window_not_what_came_before() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(15)
        ctl.faults.inject("pool_exhaustion", "100%", {}, 20.0)  # an outage before the scenario: not its doing
        await clock.sleep(40)
        for name, text in (("calm", CALM), ("harsh", HARSH)):
            run: PlanRun = ctl.plans.start_scenario(parse_scenario(text, name), 1.0, name)
            assert run.task is not None
            await run.task
            out[name] = ctl.plans.status(run)

    out = _live(script)
    assert out["lifetime"]["score"]["availability"] < 90  # the daemon's whole life includes the outage
    calm = {e["check"]: e for e in out["calm"]["expectations"]}
    assert out["calm"]["passed"] is True
    assert calm["min_availability"]["measured"] >= 99 and calm["min_grade"]["measured"] in ("A", "A+")
    assert calm["all_recovered"]["measured"] is True  # only its own fault counts, and it recovered
    # A scenario that hurts its own window fails, and says what was measured.
    assert out["harsh"]["passed"] is False
    failed = [e for e in out["harsh"]["expectations"] if not e["passed"]]
    assert [e["check"] for e in failed] == ["min_availability"]
    assert failed[0]["expected"] == 99 and failed[0]["measured"] < 90
    assert {"check", "expected", "measured", "passed"} <= set(failed[0])


def test_a_speed_that_leaves_no_time_to_confirm_recovery_is_refused_naming_the_largest_that_works() -> None:
    storm = load_scenario(SHIPPED / "leader_assassination.yaml")
    # Its last fault ends at 68 s of 120: 52 s to spare, and recovery.confirm takes 3 s → 52 / 3 = 17.33.
    check_speed(storm, 17.33, default_ttl=10, confirm=3)
    with pytest.raises(FaultError) as caught:
        check_speed(storm, 20, default_ttl=10, confirm=3)
    assert caught.value.field == "speed" and status_of(caught.value) == 422
    assert caught.value.message == (
        "20 is too fast: actions.3 (slow_agent) would end 2.60 s before the scenario does, less than "
        "recovery.confirm (3 s), the time a recovery takes to confirm; the largest speed that leaves enough is 17.33"
    )
    # Without a duration the settle time (30 s) is what is left: 10 s at most.
    ares = parse_scenario(ARES_YAML, "s.yaml")
    check_speed(ares, 10, default_ttl=10, confirm=3)
    with pytest.raises(FaultError, match=r"largest speed that leaves enough is 10$"):
        check_speed(ares, 11, default_ttl=10, confirm=3)
    # A fault that outlasts the scenario is not made worse by speed 1, which stays allowed.
    short = parse_scenario(ARES_YAML + "duration: 40s\n", "s.yaml")
    check_speed(short, 1, default_ttl=10, confirm=3)
    with pytest.raises(FaultError, match="even at speed 1 it leaves 0 s: run it at speed 1"):
        check_speed(short, 2, default_ttl=10, confirm=3)


def test_the_daemon_refuses_too_fast_a_scenario_with_a_422_on_speed(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        code, body = daemon.request("POST", "/api/v1/scenarios/run", {"name": "leader_assassination", "speed": 20})
        assert code == 422 and body["error"]["field"] == "speed"
        assert "largest speed that leaves enough is 17.33" in body["error"]["message"]
        assert daemon.get("/api/v1/scenarios/current")[1]["state"] == "idle"  # nothing started
        code, upload = daemon.request(
            "POST",
            "/api/v1/scenarios/run?speed=11",
            raw=json.dumps(ARES).encode(),
            headers={"Content-Type": "application/yaml"},
        )
        assert code == 422 and "largest speed that leaves enough is 10" in upload["error"]["message"]
        code, run = daemon.request(
            "POST",
            "/api/v1/scenarios/run?speed=10",
            raw=json.dumps(ARES).encode(),
            headers={"Content-Type": "application/yaml"},
        )
        assert code == 201 and run["name"] == "ares_trio" and run["duration_s"] == 7.5  # (45 + 30) / 10
        assert daemon.request("DELETE", "/api/v1/scenarios/current")[1]["state"] == "stopped"
    finally:
        daemon.kill()
