"""The control plane as users script it: a real daemon subprocess on loopback, driven over HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, get_args

import aiohttp
import pytest
from daemon_harness import ROOT, TOKEN, Daemon, wait_for
from openapi_spec_validator import validate

from chaosd.api.schemas import openapi_document
from chaosd.views import DetectorStateName


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    d = Daemon(tmp_path)
    yield d
    d.kill()


def _sse(
    base: str,
    *,
    last_id: int | None = None,
    types: str | None = None,
    replay: int | None = None,
    until: Any = None,
    max_s: float = 20.0,
) -> list[dict[str, Any]]:
    """Read the event stream until ``until(events)`` holds (or the deadline); return parsed events."""

    async def read() -> list[dict[str, Any]]:
        headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
        params: dict[str, str] = {"types": types} if types else {}
        if replay is not None:
            params["replay"] = str(replay)  # a new stream starts at the live edge unless it asks for history
        events: list[dict[str, Any]] = []
        current: dict[str, Any] = {}
        timeout = aiohttp.ClientTimeout(total=max_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(base + "/api/v1/events", headers=headers, params=params) as resp,
        ):
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("id: "):
                    current["id"] = int(line[4:])
                elif line.startswith("event: "):
                    current["event"] = line[7:]
                elif line.startswith("data: "):
                    current["data"] = json.loads(line[6:])
                elif line == "" and current:
                    events.append(current)
                    current = {}
                    if until is not None and until(events):
                        break
        return events

    return asyncio.run(read())


@pytest.mark.slow  # tens of seconds of real time
def test_the_flow_a_user_scripts(daemon: Daemon) -> None:
    code, status = daemon.get("/api/v1/status")
    # A new daemon on a loaded host may read as stalled (its process paused), never as overloaded.
    assert code == 200 and status["leader"] == "orchestrator-0" and status["detector"] in ("healthy", "stall")
    daemon.wait_for_baseline()  # a steady state to judge the kill's recovery against

    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "kill_leader", "ttl": "5s"})
    assert code == 201 and fault["targets"] == ["orchestrator-0"]

    def recovered(events: list[dict[str, Any]]) -> bool:
        return any(e["data"].get("state") == "recovered" and e["data"].get("id") == fault["id"] for e in events)

    # The verdict needs recovery.confirm of steady service after the election: seconds, more when both cores are
    # busy with the other test worker's daemons; the deadline bounds the wait, the verdict ends it.
    events = _sse(daemon.base, types="fault", replay=1000, until=recovered, max_s=60.0)
    states = [e["data"]["state"] for e in events if e["data"].get("id") == fault["id"]]
    assert states[0] == "injected" and "mechanism_recovered" in states and states[-1] == "recovered"
    code, status = daemon.get("/api/v1/status")
    assert status["leader"] not in (None, "orchestrator-0")

    code, score = daemon.get("/api/v1/score")
    assert code == 200 and score["faults_injected"] == 1 and score["faults_recovered"] == 1
    assert score["grade"] in ("A+", "A", "B", "C", "D", "F")

    code, run = daemon.request("POST", "/api/v1/scenarios/run", {"name": "leader_assassination", "speed": 15})
    assert code == 201 and run["state"] == "running"
    wait_for(lambda: daemon.get("/api/v1/scenarios/current")[1]["state"] != "running", 30, "the scenario")
    code, run = daemon.get("/api/v1/scenarios/current")
    # Three faults and a verify_leader, which waits out the failover bound for the new leader even at 15×.
    assert run["state"] == "finished" and run["actions"] == 4
    assert {e["check"] for e in run["expectations"]} >= {"lost_tasks", "duplicated_tasks", "checks_pass"}
    assert all(e["passed"] for e in run["expectations"] if e["check"] in ("lost_tasks", "duplicated_tasks"))

    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "pause_agent", "ttl": 60})
    code, lever = daemon.request("POST", "/api/v1/lever", {"reason": "game day over"})
    assert code == 200 and lever["reverted"] >= 1
    assert daemon.get(f"/api/v1/faults/{fault['id']}")[1]["reverted_by"] == "lever"
    code, refused = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent"})
    assert code == 409 and "lever" in refused["error"]["message"]
    assert daemon.request("DELETE", "/api/v1/lever")[0] == 200
    assert daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 1})[0] == 201

    code, survival = daemon.request("POST", "/api/v1/survival", {"interval": "1s", "duration": "10m", "overlap": True})
    assert code == 201 and survival["state"] == "running"
    wait_for(lambda: daemon.get("/api/v1/survival")[1]["actions"] >= 2, 15, "survival to inject")
    code, survival = daemon.request("DELETE", "/api/v1/survival")
    assert code == 200 and survival["state"] == "stopped" and survival["actions"] >= 2


def _unchanged_view(d: Daemon) -> tuple[Any, ...]:
    faults = d.get("/api/v1/faults")[1]
    return (
        len(faults["faults"]),
        faults["lever"],
        d.get("/api/v1/survival")[1]["state"],
        d.get("/api/v1/scenarios/current")[1]["state"],
    )


BAD = [
    ("no token", "POST", "/api/v1/faults", {"action": "kill_agent"}, None, {}, 401, "Authorization"),
    ("wrong token", "POST", "/api/v1/faults", {"action": "kill_agent"}, "wrong-token-xx", {}, 401, "Authorization"),
    ("unknown action", "POST", "/api/v1/faults", {"action": "nuke"}, TOKEN, {}, 422, "action"),
    ("bad target", "POST", "/api/v1/faults", {"action": "kill_agent", "target": "worker-99"}, TOKEN, {}, 422, "target"),
    ("bad percentage", "POST", "/api/v1/faults", {"action": "kill_agent", "target": "250%"}, TOKEN, {}, 422, "target"),
    ("negative ttl", "POST", "/api/v1/faults", {"action": "kill_agent", "ttl": -5}, TOKEN, {}, 422, "ttl"),
    ("ttl over max", "POST", "/api/v1/faults", {"action": "kill_agent", "ttl": 99999}, TOKEN, {}, 422, "ttl"),
    (
        "bad param",
        "POST",
        "/api/v1/faults",
        {"action": "slow_agent", "params": {"factor": 0.1}},
        TOKEN,
        {},
        422,
        "params.factor",
    ),
    (
        "unknown param",
        "POST",
        "/api/v1/faults",
        {"action": "slow_agent", "params": {"speed": 2}},
        TOKEN,
        {},
        422,
        "params.speed",
    ),
    ("wrong type", "POST", "/api/v1/faults", {"action": 42}, TOKEN, {}, 422, "action"),
    ("unknown field", "POST", "/api/v1/faults", {"action": "kill_agent", "blast": 1}, TOKEN, {}, 422, "blast"),
    ("malformed JSON", "POST", "/api/v1/faults", b"{action: kill", TOKEN, {}, 400, "body"),
    ("not an object", "POST", "/api/v1/faults", [1, 2], TOKEN, {}, 422, "body"),
    ("oversized body", "POST", "/api/v1/faults", b"{" + b" " * 70_000 + b"}", TOKEN, {}, 413, "body"),
    ("unknown route", "GET", "/api/v1/nothing", None, None, {}, 404, None),
    ("wrong method", "PUT", "/api/v1/faults", {"action": "kill_agent"}, TOKEN, {}, 405, None),
    ("unknown fault", "GET", "/api/v1/faults/999", None, None, {}, 404, "id"),
    ("fault id not int", "DELETE", "/api/v1/faults/abc", None, TOKEN, {}, 400, "id"),
    (
        "bad scenario YAML",
        "POST",
        "/api/v1/scenarios/run",
        b"name: [oops",
        TOKEN,
        {"Content-Type": "application/yaml"},
        422,
        None,
    ),
    (
        "scenario bad action",
        "POST",
        "/api/v1/scenarios/run",
        b"name: x\nduration: 10s\nactions:\n  - action: {type: explode}\n",
        TOKEN,
        {"Content-Type": "application/yaml"},
        422,
        "actions.0.action.type",
    ),
    ("unknown scenario", "POST", "/api/v1/scenarios/run", {"name": "no_such_thing"}, TOKEN, {}, 404, "name"),
    ("survival bad interval", "POST", "/api/v1/survival", {"interval": "-1s"}, TOKEN, {}, 422, "interval"),
    ("survival unknown action", "POST", "/api/v1/survival", {"actions": ["nuke"]}, TOKEN, {}, 422, "actions"),
    (
        "resume nothing paused",
        "POST",
        "/api/v1/faults",
        {"action": "resume_agent", "target": "worker-0"},
        TOKEN,
        {},
        409,
        "target",
    ),
    ("bad Last-Event-ID", "GET", "/api/v1/events", None, None, {"Last-Event-ID": "x"}, 400, None),
]


def test_bad_requests_get_a_json_4xx_and_change_nothing(daemon: Daemon) -> None:
    before = _unchanged_view(daemon)
    failures = []
    for name, method, path, body, token, headers, status, field in BAD:
        raw = body if isinstance(body, bytes) else None
        code, answer = daemon.request(
            method, path, None if raw is not None else body, token=token, raw=raw, headers=headers
        )
        ok = code == status and isinstance(answer, dict) and answer["error"]["status"] == status
        if ok and field is not None:
            ok = answer["error"]["field"] == field or field in (answer["error"]["field"] or "")
        if not ok:
            failures.append((name, code, answer))
    assert failures == []
    assert len(BAD) >= 15
    assert _unchanged_view(daemon) == before


def test_event_stream_is_ordered_and_resumes_from_last_event_id(daemon: Daemon) -> None:
    for _ in range(3):
        assert daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 0.3})[0] == 201
        wait_for(lambda: not daemon.get("/api/v1/faults?active=true")[1]["faults"], 10, "the fault to end")
    first = _sse(daemon.base, replay=1000, until=lambda ev: sum(e["event"] == "fault" for e in ev) >= 6)
    ids = [e["id"] for e in first]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    cut = first[len(first) // 2]["id"]
    # Missed while away: more faults.
    assert daemon.request("POST", "/api/v1/faults", {"action": "pause_agent", "ttl": 0.3})[0] == 201
    wait_for(lambda: not daemon.get("/api/v1/faults?active=true")[1]["faults"], 10, "the fault to end")
    latest = _sse(
        daemon.base,
        replay=1000,
        until=lambda ev: any(
            e["data"].get("action") == "pause_agent" and e["data"].get("state") == "reverted" for e in ev
        ),
    )
    newest = latest[-1]["id"]
    resumed = _sse(daemon.base, last_id=cut, until=lambda ev: ev[-1]["id"] >= newest)
    expected = [e["id"] for e in latest if cut < e["id"] <= newest]
    assert [e["id"] for e in resumed if e["id"] <= newest] == expected
    only_faults = _sse(daemon.base, types="fault", replay=3, until=lambda ev: len(ev) >= 3)
    assert {e["event"] for e in only_faults} == {"fault"}


def _stored(tmp: Path, run_id: str, fault_id: int) -> bool:
    """Whether the daemon's storage (a file of its own, read here read-only) holds the fault."""
    with closing(sqlite3.connect(f"file:{tmp / 'data' / 'chaosd.db'}?mode=ro", uri=True, timeout=5)) as db:
        return db.execute("SELECT 1 FROM faults WHERE run_id = ? AND id = ?", (run_id, fault_id)).fetchone() is not None


def test_history_survives_a_restart_and_a_kill_9_leaves_faults_aborted(tmp_path: Path) -> None:
    first = Daemon(tmp_path)
    try:
        code, fault = first.request("POST", "/api/v1/faults", {"action": "pause_agent", "ttl": 300})
        assert code == 201
        first_run = first.run_id
        wait_for(lambda: _stored(tmp_path, first_run, fault["id"]), 10, "the fault to be written")
    finally:
        first.kill()  # SIGKILL: no chance to revert or record anything
    second = Daemon(tmp_path)
    try:
        code, runs = second.get("/api/v1/runs")
        assert code == 200
        by_id = {r["id"]: r for r in runs["runs"]}
        assert by_id[first_run]["status"] == "aborted"
        assert second.run_id in by_id and by_id[second.run_id]["status"] == "running"
        code, old = second.get(f"/api/v1/runs/{first_run}")
        assert code == 200
        assert [f["outcome"] for f in old["faults"]] == ["aborted"]
        assert old["faults"][0]["action"] == "pause_agent"
    finally:
        second.terminate()
        second.kill()


def test_sigterm_with_three_active_faults_reverts_them_writes_the_report_and_exits_0(daemon: Daemon) -> None:
    for action in ("pause_agent", "slow_agent", "latency_jitter"):
        assert daemon.request("POST", "/api/v1/faults", {"action": action, "ttl": 300})[0] == 201
    assert len(daemon.get("/api/v1/faults?active=true")[1]["faults"]) == 3
    assert daemon.terminate() == 0
    report = json.loads((daemon.tmp / "daemon-report.json").read_text())
    assert [f["reverted_by"] for f in report["faults"]] == ["shutdown"] * 3
    assert report["tasks"]["lost"] == 0
    assert any("reverted 3 active fault(s)" in line for line in daemon.seen)


def test_two_hundred_clients_on_a_saturated_pipeline_get_no_5xx_and_lose_nothing(tmp_path: Path) -> None:
    # Admission control off: the point is a loop kept busy by a queue that stays full.
    d = Daemon(
        tmp_path, env={"CHAOSD_LOAD__RATE": "900", "CHAOSD_QUEUE__CAPACITY": "2000", "CHAOSD_THROTTLE__POLICY": "none"}
    )
    try:
        wait_for(lambda: d.get("/api/v1/status")[1]["queue"]["depth"] > 1000, 20, "the queue to fill")
        statuses: list[int] = []

        async def client(session: aiohttp.ClientSession, k: int, deadline: float) -> None:
            n = 0
            while time.monotonic() < deadline and n < 200:
                n += 1
                if k % 10 == 0:
                    async with session.post(
                        d.base + "/api/v1/faults",
                        json={"action": "slow_agent", "ttl": 1},
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    ) as r:
                        statuses.append(r.status)
                else:
                    path = ("/api/v1/status", "/api/v1/score", "/api/v1/faults")[k % 3]
                    async with session.get(d.base + path) as r:
                        statuses.append(r.status)
                        await r.read()

        async def main() -> None:
            connector = aiohttp.TCPConnector(limit=200)
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as s:
                deadline = time.monotonic() + 10.0
                await asyncio.gather(*(client(s, k, deadline) for k in range(200)))

        asyncio.run(main())
        assert statuses and not [s for s in statuses if s >= 500]
        # A loop this busy can read as a stall (its ticks run late): any of the states is an answer.
        assert d.get("/api/v1/status")[1]["detector"] in get_args(DetectorStateName)
        assert d.terminate() == 0
        report = json.loads((tmp_path / "daemon-report.json").read_text())
        assert report["tasks"]["lost"] == 0 and report["tasks"]["rejected"] > 0  # saturated, nothing lost
    finally:
        d.kill()


def test_openapi_document_validates_and_every_answer_conforms_to_it(daemon: Daemon) -> None:
    code, doc = daemon.get("/api/v1/openapi.json")
    assert code == 200
    validate(doc)
    assert doc == openapi_document()  # what the daemon serves is the document walked from the route table
    assert {"/api/v1/faults", "/api/v1/events", "/api/v1/survival", "/api/v1/lever"} <= set(doc["paths"])
    st = shutil.which("st") or shutil.which("schemathesis")
    assert st is not None, "schemathesis is a test dependency"
    result = subprocess.run(
        [
            st,
            "run",
            daemon.base + "/api/v1/openapi.json",
            "--checks",
            # Every answer is checked against the schema of its route and status (generated from the types
            # the handlers build), its status code and content type against the documented ones.
            "not_a_server_error,status_code_conformance,content_type_conformance,"
            "response_schema_conformance,response_headers_conformance",
            "-n",
            "15",
            "--phases",
            "examples,coverage,fuzzing",
            "--exclude-path",
            "/api/v1/events",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--generation-deterministic",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_cli_client_against_the_real_daemon(daemon: Daemon) -> None:
    def chaosd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chaosd", *args, "--addr", daemon.base, "--token", TOKEN],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=daemon.env,
            check=False,
        )

    done = chaosd("inject", "slow_agent", "--target", "worker-1", "--param", "factor=2", "--ttl", "30s")
    assert done.returncode == 0, done.stderr
    assert daemon.get("/api/v1/faults?active=true")[1]["faults"][0]["targets"] == ["worker-1"]
    listed = chaosd("faults", "--active")
    assert listed.returncode == 0 and "slow_agent" in listed.stdout
    rejected = chaosd("inject", "nuke")
    assert rejected.returncode == 5 and "action" in rejected.stderr
    assert chaosd("abort", "--reason", "stop").returncode == 0
    assert daemon.get("/api/v1/faults")[1]["lever"] == "stop"
    assert chaosd("inject", "slow_agent").returncode == 5  # refused while the lever is pulled
    assert chaosd("release").returncode == 0
    inspect = chaosd("inspect")
    assert inspect.returncode == 0 and "slow_agent" in inspect.stdout
    unreachable = subprocess.run(
        [sys.executable, "-m", "chaosd", "faults", "--addr", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
        env=daemon.env,
        check=False,
    )
    assert unreachable.returncode == 4
