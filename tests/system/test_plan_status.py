"""A plan's status scores the plan's own window, not the daemon's lifetime; the lifetime is ``daemon_score``.

On a real daemon whose lifetime starts with an outage, a scenario and a survival run in a calm period score
what happened in their windows; in virtual time, the cheap window the status computes is the same as the one
built from the whole report, and a scenario's ``max_recovery_s`` judges its incidents.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from conftest import live
from daemon_harness import TOKEN, Daemon, wait_for

from chaosd.cli.client import add_client_commands, run_client_command
from chaosd.cli.exits import EXIT_OK
from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock
from chaosd.daemon.control import Controller, PlanRun
from chaosd.experiment.plans import window_report
from chaosd.experiment.report import rounded
from chaosd.experiment.scenario import parse_scenario
from chaosd.experiment.score import ScoreWeights

TERMINAL = ("recovered", "failed", "unmeasured")
SCORE_KEYS = {"total", "grade", "availability", "recovery", "recovery_rate", "recovery_speed", "consistency", "version"}
NO_SCORE = dict.fromkeys(SCORE_KEYS - {"version"}) | {"version": "2"}

CALM = b"""\
name: calm_window
duration: 4s
actions:
  - {delay: 1s, action: {type: verify_leader}}
expect: {min_availability: 95, min_score: 90, checks_pass: true}
"""


def _cli(*argv: str) -> tuple[int, list[str], list[str]]:
    parser = argparse.ArgumentParser(prog="chaosd")
    add_client_commands(parser.add_subparsers(dest="command"))
    out: list[str] = []
    err: list[str] = []
    return run_client_command(parser.parse_args(list(argv)), out.append, err.append), out, err


def _outage(daemon: Daemon) -> dict[str, Any]:
    """Every worker out of service for 4 s at the daemon's start: the lifetime score is ruined by it."""
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "pool_exhaustion", "target": "100%", "ttl": 4})
    assert code == 201
    wait_for(lambda: daemon.get(f"/api/v1/faults/{fault['id']}")[1]["outcome"] in TERMINAL, 30, "the outage's end")
    # The backlog the outage left has drained (a queue of 50 refuses the rest): the calm period starts.
    wait_for(lambda: daemon.get("/api/v1/status")[1]["queue"]["depth"] <= 5, 30, "the queue to drain")
    lifetime = daemon.get("/api/v1/score")[1]
    assert lifetime["availability"] < 50, lifetime  # 4 s of refusals in the daemon's first 5 s or so
    return dict(lifetime)


def _uptime(daemon: Daemon) -> float:
    return float(daemon.get("/api/v1/status")[1]["uptime_s"])


@pytest.mark.slow  # tens of seconds of real time
def test_a_plans_status_scores_its_own_window_not_the_outage_before_it(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, env={"CHAOSD_QUEUE__CAPACITY": "50"})
    try:
        before = _outage(daemon)

        # --- a scenario in the calm period -----------------------------------------------------------
        code, started = daemon.request(
            "POST", "/api/v1/scenarios/run", raw=CALM, headers={"Content-Type": "application/yaml"}
        )
        assert code == 201 and started["state"] == "running"
        # Its window has just opened: nothing in it has settled, so it has no score yet; the lifetime has one.
        assert started["score"] == NO_SCORE
        assert started["window"]["start_at"] == started["started_at"]
        assert 0 <= started["window"]["end_at"] - started["started_at"] < 1.0
        assert set(started["daemon_score"]) == SCORE_KEYS
        assert started["daemon_score"]["availability"] < 50

        wait_for(lambda: daemon.get("/api/v1/scenarios/current")[1]["state"] == "finished", 30, "the scenario's end")
        done = daemon.get("/api/v1/scenarios/current")[1]
        score, lifetime = done["score"], done["daemon_score"]
        assert set(score) == SCORE_KEYS and done["passed"] is True
        # The window: from its start to its end, and only what settled in it — the calm period.
        assert done["window"] == {"start_at": done["started_at"], "end_at": done["ended_at"]}
        assert done["ended_at"] - done["started_at"] == pytest.approx(4.0, abs=0.5)
        assert score["availability"] >= 99 and score["consistency"] == 100 and score["total"] >= 99
        assert score["grade"] == "A+" and score["recovery"] is None  # no fault of its own to recover from
        # The lifetime still carries the outage (and has recovered a little since: calm time went by).
        assert before["availability"] < lifetime["availability"] < 80
        assert score["availability"] - lifetime["availability"] > 20
        # It is the very window the expectations judged, number for number.
        measured = {e["check"]: e["measured"] for e in done["expectations"]}
        assert measured["min_availability"] == score["availability"]
        assert measured["min_score"] == score["total"]

        # Once ended, its score no longer moves; the lifetime's does.
        wait_for(lambda: _uptime(daemon) > done["ended_at"] + 1.0, 10, "a second after the scenario's end")
        later = daemon.get("/api/v1/scenarios/current")[1]
        assert later["score"] == score and later["window"] == done["window"]
        assert later["daemon_score"]["availability"] > lifetime["availability"]

        # --- a survival, through the client: its live line and its last line show the survival's window -----
        code, out, err = _cli(
            "survival", "--addr", daemon.base, "--token", TOKEN,
            "--duration", "6s", "--interval", "5s", "--actions", "slow_agent",
        )  # fmt: skip
        assert (code, err) == (EXIT_OK, [])
        status = daemon.get("/api/v1/survival")[1]
        assert status["state"] == "finished" and status["actions"] == 1  # one slow_agent, at 5 s
        assert status["window"] == {"start_at": status["started_at"], "end_at": status["ended_at"]}
        assert status["window"]["start_at"] >= done["ended_at"]
        score, lifetime = status["score"], status["daemon_score"]
        assert score["availability"] >= 99 and score["total"] >= 99
        assert lifetime["availability"] < 90 and score["availability"] - lifetime["availability"] > 9
        assert out[0] == "survival running: elapsed 0:00:00 · actions 0 · score -"  # nothing settled yet
        assert out[-1] == f"survival finished: elapsed 0:00:06 · actions 1 · score {score['total']:.1f} (A+)"
    finally:
        daemon.kill()


# --- in virtual time: the status's window is the report's window, computed cheaply ---------------------------


def _live(script: Any, rate: float = 50.0) -> dict[str, Any]:
    base = load_settings(None)
    return live(script, base.model_copy(update={"load": base.load.model_copy(update={"rate": rate})}))


def _from_report(ctl: Controller, run: PlanRun) -> dict[str, Any]:
    """The window computed the expensive way: from the whole live report."""
    weights = ScoreWeights.from_config(ctl.exp.settings.score)
    assert run.before is not None
    # From the report's incidents, not the plan's running book: the two must agree.
    ids = {f.id for f in ctl.exp.injector.faults if run.owns(f)}
    result: dict[str, Any] = rounded(window_report(run.before, ctl.exp.report(), ids, weights))
    return result


def test_the_status_window_is_the_one_the_whole_report_gives_at_every_instant() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(5)
        ctl.faults.inject("network_partition", "50%", {}, 5.0)  # lost tasks and an incident before the plan
        await clock.sleep(15)
        run = ctl.plans.start_survival(6.0, 90.0, None)  # every action, one at a time: incidents are judged
        out["run"], out["checks"] = run, []
        await clock.sleep(1)
        while run.state == "running":  # the same instant for all three: nothing awaits between them
            out["checks"].append((ctl.plans.report(run), _from_report(ctl, run), ctl.plans.status(run)))
            await clock.sleep(7)
        assert run.task is not None
        await run.task
        out["final"] = (ctl.plans.status(run), ctl.plans.report(run))
        await clock.sleep(10)
        out["later"] = ctl.plans.status(run)

    out = _live(script)
    assert len(out["checks"]) >= 10
    for mine, whole, status in out["checks"]:
        assert mine["tasks"] == whole["tasks"]
        assert mine["faults"] == whole["faults"]
        assert mine["score"] == pytest.approx(whole["score"], abs=1e-5)
        assert status["score"] == mine["score"]
    assert any(whole["score"]["recovery"] is not None for _, whole, _ in out["checks"])  # incidents were judged
    assert out["run"].before.offered > 0  # the survival's window does not start at the daemon's start
    final_status, final_report = out["final"]
    assert final_status["score"] == final_report["score"] and final_status["window"] == final_report["window"]
    assert out["later"]["score"] == final_status["score"]  # ended: frozen
    assert out["later"]["daemon_score"] != final_status["daemon_score"]  # the lifetime goes on


SLOW_RESTORE = """\
name: slow_restore
duration: 40s
actions:
  - {delay: 5s, action: {type: pool_exhaustion, target_id: 100%, metadata: {duration: 5s}}}
expect: {max_recovery_s: 0.5s}
"""


def test_max_recovery_s_judges_the_incidents_of_the_scenarios_faults() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        await clock.sleep(20)  # a baseline to judge recovery against
        run = ctl.plans.start_scenario(parse_scenario(SLOW_RESTORE, "slow_restore"), 1.0, "slow_restore")
        assert run.task is not None
        await run.task
        out["status"], out["report"] = ctl.plans.status(run), ctl.exp.report()

    out = _live(script, rate=200.0)
    [incident] = [i for i in out["report"]["incidents"] if i["faults"] == [1]]
    assert incident["outcome"] == "recovered" and incident["recovery_s"] > 0.5  # the backlog took time to drain
    [check] = out["status"]["expectations"]
    assert check["check"] == "max_recovery_s" and check["measured"] == incident["recovery_s"]
    assert check["passed"] is False and out["status"]["passed"] is False
