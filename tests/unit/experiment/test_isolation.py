"""Experiments that do not contaminate each other.

A plan started while an incident is open (a fault active or still recovering) waits, bounded, for its verdict
before its first fault, and its window opens in steady state: its faults never join the incident before it.
A sped-up scenario never merges faults that do not overlap at speed 1: it waits for the earlier one's verdict.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import live

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock
from chaosd.daemon.control import Controller
from chaosd.experiment.scenario import SHIPPED, load_scenario, parse_scenario

pytestmark = pytest.mark.cpu  # virtual time: CPU only

TERMINAL = ("recovered", "failed", "unmeasured")

SHORT = """\
name: short_kill
duration: 20s
actions:
  - {delay: 2s, action: {type: kill_agent, target_id: random, metadata: {duration: 3s}}}
expect: {max_recovery_s: 30s, all_recovered: true}
"""


def _live(script: Any, rate: float = 100.0) -> dict[str, Any]:
    base = load_settings(None)
    return live(script, base.model_copy(update={"load": base.load.model_copy(update={"rate": rate})}))


def _incidents(ctl: Controller) -> list[dict[str, Any]]:
    return [dict(i.as_dict()) for i in ctl.exp.injector.incidents]


def test_a_scenario_started_during_a_survivals_open_incident_waits_for_it_and_judges_only_its_own() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(20)  # a baseline
        survival = ctl.plans.start_survival(6.0, 30.0, ("kill_agent", "slow_agent"))
        assert survival.task is not None
        await survival.task
        open_now = ctl.plans._open_incident()
        if open_now is None:  # the survival's last fault may have its verdict already: open one like it
            ctl.faults.inject("slow_agent", "worker", {}, 2.0)
            open_now = ctl.plans._open_incident()
        assert open_now is not None
        out["open"] = (open_now[0], [m.id for m in open_now[1]])
        run = ctl.plans.start_scenario(parse_scenario(SHORT, "short"), 1.0, "short")
        await clock.sleep(0.1)
        out["waiting"] = ctl.plans.status(run)
        assert run.task is not None
        await run.task
        out["status"], out["report"], out["incidents"] = ctl.plans.status(run), ctl.plans.report(run), _incidents(ctl)
        out["steady_at"] = max(
            f.service_recovered_at or f.reverted_at or 0.0 for f in ctl.exp.injector.faults if f.id in out["open"][1]
        )

    out = _live(script)
    number, members = out["open"]
    waiting = out["waiting"]
    assert waiting["state"] == "running" and waiting["actions"] == 0
    assert waiting["reason"].startswith(f"waiting for steady state: incident {number} (faults ")
    assert all(str(m) in waiting["reason"] for m in members)
    status, report = out["status"], out["report"]
    assert status["state"] == "finished" and status["reason"] is None
    [fault] = report["faults"]
    assert fault["action"] == "kill_agent" and fault["incident"] != number  # an incident of its own
    [own] = [i for i in out["incidents"] if fault["id"] in i["faults"]]
    assert own["faults"] == [fault["id"]]
    assert status["window"]["start_at"] >= out["steady_at"]  # its window opened once the incident was over
    checks = {e["check"]: e for e in status["expectations"]}
    assert checks["max_recovery_s"]["measured"] == fault["recovery_s"] == pytest.approx(own["recovery_s"], abs=1e-6)
    assert checks["max_recovery_s"]["incident"]["id"] == own["id"]
    assert checks["all_recovered"]["passed"] is True
    waits = [e for e in status["log"] if e["action"] == "wait"]
    assert [w["state"] for w in waits] == ["waiting", "done"] and waits[1]["waited_s"] > 0


def test_a_survival_started_during_a_scenarios_open_incident_waits_for_it() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(20)
        scenario = ctl.plans.start_scenario(parse_scenario(SHORT, "short"), 1.0, "short")
        await clock.sleep(3)  # its kill_agent is active
        found = ctl.plans._open_incident()
        assert found is not None
        out["open"] = (found[0], [m.id for m in found[1]], [m.owner is scenario for m in found[1]])
        survival = ctl.plans.start_survival(6.0, 24.0, ("slow_agent",))
        await clock.sleep(0.1)
        out["waiting"] = ctl.plans.status(survival)
        assert scenario.task is not None and survival.task is not None
        await scenario.task
        await survival.task
        out["scenario"], out["survival"] = ctl.plans.report(scenario), ctl.plans.report(survival)
        out["survival_status"] = ctl.plans.status(survival)

    out = _live(script)
    number, members, by_scenario = out["open"]
    assert all(by_scenario)
    assert f"incident {number} (faults {members[0]} kill_agent)" in out["waiting"]["reason"]
    scenario, survival = out["scenario"], out["survival"]
    assert [i["id"] for i in scenario["incidents"]] == [number]
    assert survival["faults"] and all(f["incident"] != number for f in survival["faults"])
    assert not {f["id"] for f in scenario["faults"]} & {f for i in survival["incidents"] for f in i["faults"]}
    assert out["survival_status"]["state"] == "finished"


def test_leader_assassination_at_speed_10_keeps_its_faults_in_incidents_of_their_own() -> None:
    storm = load_scenario(SHIPPED / "leader_assassination.yaml")

    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(20)
        run = ctl.plans.start_scenario(storm, 10.0, storm.name)
        out["planned"] = run.duration
        assert run.task is not None
        await run.task
        out["status"], out["report"] = ctl.plans.status(run), ctl.plans.report(run)
        out["leader"] = next(f.as_dict() for f in ctl.exp.injector.faults if f.action == "kill_leader")

    out = _live(script, rate=200.0)
    status, report = out["status"], out["report"]
    faults = report["faults"]
    assert [f["action"] for f in faults] == ["kill_leader", "kill_agent", "slow_agent"]
    assert all(f["outcome"] == "recovered" for f in faults)
    # No merged incidents: one each, so each fault has its own recovery time.
    assert [i["faults"] for i in report["incidents"]] == [[f["id"]] for f in faults]
    leader = out["leader"]
    assert leader["recovery_s"] is not None and leader["recovery_s"] > 0.3  # the lease ran out: a real hand-over
    checks = {e["check"]: e for e in status["expectations"]}
    recovery = checks["max_recovery_s"]
    assert recovery["measured"] == max(f["recovery_s"] for f in faults) > 0
    assert recovery["incident"]["faults"] == [next(f["id"] for f in faults if f["recovery_s"] == recovery["measured"])]
    # The waits that kept them apart are logged, and stretched the run by as much.
    waits = [e for e in status["log"] if e["action"] == "wait"]
    assert waits and all(w["state"] == "done" for w in waits)
    assert status["duration_s"] == pytest.approx(out["planned"] + sum(w["waited_s"] for w in waits), abs=1e-3)
    assert checks["checks_pass"]["passed"] is True
    # The hand-over is the slowest recovery: what max_recovery_s reads, not the 0.0 of a merged incident.
    assert recovery["measured"] == leader["recovery_s"] and recovery["incident"]["faults"] == [leader["id"]]
    assert [w["for"] for w in waits] == [[faults[0]["id"]], [faults[1]["id"]]]


def test_a_plan_that_never_sees_steady_state_fails_naming_the_incident_having_injected_nothing() -> None:
    base = load_settings(None)
    s = base.model_copy(
        update={
            "load": base.load.model_copy(update={"rate": 100.0}),
            "recovery": base.recovery.model_copy(update={"limit": 2.0}),
        }
    )

    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(20)
        first = ctl.faults.inject("slow_agent", "worker-0", {}, 3.0)
        run = ctl.plans.start_scenario(parse_scenario(SHORT, "short"), 1.0, "short")
        for k in range(1, 10):  # a fault every 2 s, each overlapping the last: the incident never closes
            await clock.sleep(2)
            ctl.faults.inject("slow_agent", f"worker-{k % 2}", {}, 3.0)
        assert run.task is not None
        await run.task
        out["first"], out["status"], out["report"] = first.incident, ctl.plans.status(run), ctl.plans.report(run)

    out = live(script, s)
    status = out["status"]
    # The bound: the open fault's 3 s TTL + recovery.limit 2 s + recovery.confirm 3 s + 1 s = 9 s.
    assert status["state"] == "failed"
    assert status["reason"].startswith(f"incident {out['first']} (faults 1 slow_agent, 2 slow_agent, ")
    assert status["reason"].endswith(
        "was still open after 9 s: the plan did not start, so its faults would not join it"
    )
    assert status["ended_at"] - status["started_at"] == pytest.approx(9.0, abs=0.2)
    assert status["actions"] == 0 and out["report"]["faults"] == []
