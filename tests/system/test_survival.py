"""Survival mode that can be read: one fault at a time, its recovery seen before the next, stopping reverts."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Daemon, wait_for
from test_client import FakeDaemon, _cli, daemon  # noqa: F401 - the fake daemon fixture

from chaosd.api.app import status_of
from chaosd.cli import plan_watch
from chaosd.cli.main import main
from chaosd.core.errors import FaultError
from chaosd.experiment.plans import SURVIVAL_MARGIN, SURVIVAL_MIN_TTL, survival_timing

TERMINAL = ("recovered", "failed", "unmeasured")
SKIPPED = "skipped: previous fault still recovering"


def _survive(tmp: Path, *extra: str, config: str = "[load]\nrate = 50.0\n", code: int = 0) -> dict[str, Any]:
    """``chaosd run --survival`` as a user types it, in virtual time; its report (``code``: the exit code)."""
    cfg, report = tmp / "chaosd.toml", tmp / "report.json"
    cfg.write_text(config)
    argv = ["run", "--config", str(cfg), "--survival", "--seed", "42", "--report", str(report), "--quiet"]
    assert main([*argv, *extra]) == code
    data: dict[str, Any] = json.loads(report.read_text())
    return data


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _survive(tmp_path_factory.mktemp("default"), "--interval", "10s", "--duration", "10m")


@pytest.fixture(scope="module")
def stacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _survive(tmp_path_factory.mktemp("overlap"), "--interval", "10s", "--duration", "10m", "--overlap")


def test_by_default_no_two_survival_faults_are_active_at_once(one_at_a_time: dict[str, Any]) -> None:
    faults = one_at_a_time["faults"]
    assert len(faults) >= 40  # one every 10 s over 10 minutes, less the slots skipped or that could not apply
    for before, after in itertools.pairwise(faults):
        assert after["injected_at"] >= before["reverted_at"], (before, after)
    room = 3.0 + SURVIVAL_MARGIN  # recovery.confirm's default, and the margin
    assert all(SURVIVAL_MIN_TTL <= f["ttl"] <= 10.0 - room for f in faults)
    assert all(f["reverted_by"] == "ttl" for f in faults)


def test_every_fault_but_the_last_has_its_verdict_and_nothing_is_lost(one_at_a_time: dict[str, Any]) -> None:
    faults = one_at_a_time["faults"]
    assert all(f["outcome"] in TERMINAL for f in faults[:-1])
    assert one_at_a_time["tasks"]["lost"] == 0 and one_at_a_time["tasks"]["duplicated"] == 0
    injected = [a["fault"] for a in one_at_a_time["actions"] if a.get("ok")]
    assert injected == [f["id"] for f in faults]


def test_overlap_stacks_faults_that_last_twice_the_interval(stacked: dict[str, Any]) -> None:
    faults = stacked["faults"]
    assert all(f["ttl"] == 20.0 for f in faults)
    overlapping = [b for a, b in itertools.pairwise(faults) if b["injected_at"] < a["reverted_at"]]
    assert len(overlapping) >= len(faults) // 2
    assert stacked["tasks"]["lost"] == 0 and stacked["tasks"]["duplicated"] == 0


def test_overlapping_survival_faults_are_grouped_into_incidents(stacked: dict[str, Any]) -> None:
    faults = {f["id"]: f for f in stacked["faults"]}
    incidents = stacked["incidents"]
    assert {f["action"] for f in faults.values()} >= {"kill_leader", "load_spike", "pool_exhaustion"}  # all 17
    shared = [i for i in incidents if len(i["faults"]) > 1]
    assert shared and len(incidents) < len(faults)
    for incident in shared:
        members = [faults[i] for i in incident["faults"]]
        # Its members came one after another, each while the incident was still open …
        assert [m["injected_at"] for m in members] == sorted(m["injected_at"] for m in members)
        # … so none carries a recovery time of its own: the incident does.
        assert all(m["recovery_s"] is None for m in members)
        for kind in ("late", "failed", "refused", "degraded"):
            assert incident["impact_tasks"][kind] >= max(m["impact_tasks"][kind] for m in members)
    # … and an incident begins only once the one before it is over: the service was back for all its faults.
    for before, after in itertools.pairwise(incidents):
        first = faults[after["faults"][0]]
        if before["outcome"] == "recovered" and first["action"] != "resume_agent":
            back = max(faults[i]["service_recovered_at"] or 0.0 for i in before["faults"])
            assert first["injected_at"] >= back


def test_a_slot_whose_previous_fault_is_still_recovering_is_skipped_and_logged(tmp_path: Path) -> None:
    # An SLO no run can meet: every fault stays out of tolerance until recovery.limit (60 s) fails it.
    slo = "[load]\nrate = 50.0\n[slo]\np95 = 0.000001\n"
    report = _survive(tmp_path, "--interval", "10s", "--duration", "2m", config=slo, code=3)  # the run misses it too
    why = report["verdict"]["reason"]
    assert why.startswith("p95 sojourn ") and "> the SLO's 0.0 ms" in why, why
    first, second = report["faults"][:2]
    assert first["outcome"] == "failed" and first["injected_at"] == 10.0 and first["reverted_at"] == 16.0
    skips = [a for a in report["actions"] if a["action"] == "skip"]
    assert all(a["reason"] == SKIPPED and not a["ok"] for a in skips)
    # The slots at 20 … 70 s wait on the first fault; the one at 70 s waits until 75 s, the latest start.
    assert [(a["at"], a["previous"]) for a in skips[:6]] == [(t + 5.0, first["id"]) for t in range(20, 80, 10)]
    assert second["injected_at"] == 80.0  # the first slot after the verdict (failed at 76 s)
    assert len(report["faults"]) == 2 and all(a["previous"] == second["id"] for a in skips[6:])


def test_an_interval_too_short_to_see_a_recovery_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    code = main(["run", "--survival", "--interval", "4s", "--duration", "1m", "--report", str(report), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "--interval: 4 s is too short" in err and "at least 5 s" in err
    assert not report.exists()
    assert main(["run", "--overlap", "--duration", "1m", "--report", str(report), "--quiet"]) == 2
    assert "--overlap: only with --survival" in capsys.readouterr().err


def test_survival_timing_leaves_room_for_the_recovery_unless_faults_overlap() -> None:
    assert survival_timing(10.0, default_ttl=10.0, max_ttl=600.0, confirm=3.0) == (6.0, 4.0)
    assert survival_timing(5.0, default_ttl=10.0, max_ttl=600.0, confirm=3.0) == (1.0, 4.0)
    assert survival_timing(3600.0, default_ttl=10.0, max_ttl=600.0, confirm=3.0) == (600.0, 4.0)
    assert survival_timing(1.0, default_ttl=10.0, max_ttl=600.0, confirm=3.0, overlap=True) == (10.0, None)
    assert survival_timing(10.0, default_ttl=10.0, max_ttl=600.0, confirm=3.0, overlap=True) == (20.0, None)
    with pytest.raises(FaultError) as refused:
        survival_timing(4.9, default_ttl=10.0, max_ttl=600.0, confirm=3.0)
    assert refused.value.field == "interval" and status_of(refused.value) == 422


def test_stopping_survival_on_the_daemon_reverts_its_active_faults(tmp_path: Path) -> None:
    real = Daemon(tmp_path)
    try:
        code, refused = real.request("POST", "/api/v1/survival", {"interval": "2s"})
        assert code == 422 and refused["error"]["field"] == "interval"

        body = {"interval": "1s", "duration": "10m", "overlap": True, "actions": ["slow_agent", "latency_jitter"]}
        code, started = real.request("POST", "/api/v1/survival", body)
        assert code == 201 and started["state"] == "running"

        def active() -> list[int]:
            return [f["id"] for f in real.get("/api/v1/faults?active=true")[1]["faults"]]

        wait_for(lambda: len(active()) >= 2, 20, "two stacked survival faults")
        code, stopped = real.request("DELETE", "/api/v1/survival")
        assert code == 200 and stopped["state"] == "stopped"
        assert active() == []
        reverted = stopped["log"][-1]["reverted"]
        assert len(reverted) >= 2
        for fault_id in reverted:
            assert real.get(f"/api/v1/faults/{fault_id}")[1]["reverted_by"] == "revert"
    finally:
        real.kill()


def test_the_client_asks_for_overlap_only_when_told(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(plan_watch, "_POLL_S", 0.01)
    assert _cli("survival", "--interval", "2s", "--overlap", "--addr", daemon.addr)[0] == 0
    assert _cli("survival", "--addr", daemon.addr)[0] == 0
    posts = [r.json() for r in daemon.requests if r.method == "POST"]
    assert posts == [{"interval": "2s", "duration": "30m", "overlap": True}, {"interval": "10s", "duration": "30m"}]
