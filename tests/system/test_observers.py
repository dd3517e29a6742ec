"""Observers cannot crash the pipeline: a subscriber that raises is logged once and counted, never fatal; and a
fault that has left the memory window (history.faults) still has its verdict stored."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import live, settings
from daemon_harness import Daemon, wait_for

from chaosd.core.clock import LoopClock
from chaosd.daemon.control import Controller
from chaosd.events.log import Event
from chaosd.views.wire import PENDING, TERMINAL


def _script(raising: bool) -> Any:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        events = ctl.exp.events
        before = len(events.events())
        if raising:

            def broken(event: Event) -> None:
                raise RuntimeError(f"observer bug at event {event.id}")

            def broken_listener(snap: Any) -> None:
                raise KeyError(snap.t)

            events.subscribe(broken, name="broken")
            ctl.exp.telemetry.listen(broken_listener, "broken_listener")  # listen() itself keeps it from the tick
        await clock.sleep(8.0)  # a baseline first
        for _ in range(3):
            ctl.faults.inject("slow_agent", None, {}, 2.0)
            await clock.sleep(12.0)
        out["errors"] = dict(events.observers.errors)
        out["events"] = len(events.events())
        out["since"] = out["events"] - before  # recorded while the raising subscriber was subscribed

    return script


def test_a_raising_subscriber_is_logged_once_counted_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    s = settings({"seed": 7})
    with caplog.at_level(logging.ERROR, logger="chaosd.events.log"):
        clean = live(_script(raising=False), s)
        assert caplog.records == []  # negative control: nothing logged without the raising observers
        broken = live(_script(raising=True), s)
    assert clean["errors"] == {}  # negative control: nothing counted without the raising observers
    assert broken["errors"]["broken"] == broken["since"] > 10  # every event reached it, and each error was counted
    assert broken["errors"]["broken_listener"] > 30  # one per telemetry tick
    # Logged once per observer and kind of error, not once per event.
    assert sorted(r.getMessage().split()[1] for r in caplog.records) == ["broken", "broken_listener"]
    assert broken["events"] == clean["events"]
    assert json.dumps(broken["lifetime"], sort_keys=True) == json.dumps(clean["lifetime"], sort_keys=True)
    assert clean["lifetime"]["faults_summary"]["injected"] == 3


def test_faults_evicted_from_memory_while_recovering_keep_the_daemon_healthy_and_their_verdicts(
    tmp_path: Path,
) -> None:
    daemon = Daemon(tmp_path, env={"CHAOSD_HISTORY__FAULTS": "10"})
    try:
        daemon.wait_for_baseline()
        # Fault 1 lasts 3 s: it leaves the memory window (at the 11th fault) before it even has its verdict.
        code, first = daemon.request("POST", "/api/v1/faults", {"action": "llm_failure", "ttl": 3})
        assert code == 201, first
        ids = [first["id"]]
        for _ in range(14):
            code, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 0.1})
            assert code == 201, fault
            ids.append(fault["id"])
            wait_for(lambda f=fault: daemon.get(f"/api/v1/faults/{f['id']}")[1]["reverted_at"] is not None, 10, "TTL")
        listed = daemon.get("/api/v1/faults")[1]
        assert (listed["injected"], listed["first_in_memory"]) == (15, 6)  # faults 1..5 left the memory window
        evicted = {i: daemon.get(f"/api/v1/faults/{i}")[1] for i in ids[:5]}  # served from storage
        recovering = [i for i, f in evicted.items() if f["outcome"] in PENDING]
        assert 1 in recovering, f"fault 1 had its verdict before it left memory: {evicted[1]}"

        def stored_verdicts() -> bool:
            return all(daemon.get(f"/api/v1/faults/{i}")[1]["outcome"] in TERMINAL for i in recovering)

        wait_for(stored_verdicts, 90, "the evicted faults' verdicts in storage", lambda: str(daemon.get("/healthz")))
        code, health = daemon.get("/healthz")
        assert (code, health["status"]) == (200, "ok"), health
        assert daemon.get("/readyz")[0] == 200
        run = daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]
        stored = {f["id"]: f["outcome"] for f in run["faults"]}
        assert all(stored[i] in TERMINAL for i in recovering)
        observer_errors = {k: v for k, v in daemon.scrape().items() if k.startswith("chaosd_observer_errors_total")}
        assert 'chaosd_observer_errors_total{observer="LiveRun._record_events.persist"}' in observer_errors
        assert set(observer_errors.values()) == {0.0}  # nothing raised: the fix is the cause's, not the guard's
        assert daemon.terminate() == 0
        report = json.loads((tmp_path / "daemon-report.json").read_text())
        assert report["faults_summary"]["injected"] == 15
        assert not [line for line in daemon.seen if "crashed" in line or "Traceback" in line]
    finally:
        daemon.kill()
