"""Measurement windows: an experiment reads its own score while the daemon's lifetime score goes on."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from daemon_harness import Daemon, wait_for

TERMINAL = ("recovered", "failed", "unmeasured")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("windows"), env={"CHAOSD_QUEUE__CAPACITY": "50"})
    try:
        _outage(d)
        d.wait_for_baseline()  # then a steady state, which the kill's recovery is judged against
        yield d
    finally:
        d.kill()


def _outage(d: Daemon) -> None:
    # An outage before any window, at the daemon's start: every worker held for 4 s refuses most of the load. With
    # no steady state yet to judge it against, its verdict (unmeasured) comes at its end.
    code, fault = d.request("POST", "/api/v1/faults", {"action": "pool_exhaustion", "target": "100%", "ttl": 4})
    assert code == 201
    wait_for(lambda: d.get(f"/api/v1/faults/{fault['id']}")[1]["outcome"] in TERMINAL, 60, "the outage's verdict")


def _open(daemon: Daemon, name: str) -> dict[str, Any]:
    code, window = daemon.request("POST", "/api/v1/windows", {"name": name})
    assert code == 201 and window["state"] == "open" and window["name"] == name
    return window


def test_a_window_scores_only_what_happened_while_it_was_open(daemon: Daemon) -> None:
    window = _open(daemon, "calm")
    path = f"/api/v1/windows/{window['id']}"
    wait_for(lambda: daemon.get(path)[1]["tasks"]["offered"] >= 400, 30, "traffic in the window")
    code, closed = daemon.request("DELETE", path)
    assert code == 200 and closed["state"] == "closed" and closed["faults"] == []
    lifetime = daemon.get("/api/v1/score")[1]
    # The outage before it is the daemon's, not the window's.
    assert closed["score"]["availability"] >= 99 and closed["score"]["grade"] == "A+"
    # How far below depends on how long the daemon has run since the outage (the baseline after it takes 5 s,
    # longer on a busy host): even a minute on, the ~4 s of refusals keep it 5 points under.
    refused = daemon.get("/api/v1/report")[1]["tasks"]["rejected"]
    assert refused >= 300, "most of the outage's 4 s of load was refused"
    assert lifetime["availability"] < closed["score"]["availability"] - 3
    assert closed["tasks"]["offered"] >= 400 and closed["tasks"]["rejected"] == 0
    # Closed: the report stops moving, while the daemon's traffic goes on.
    wait_for(lambda: daemon.get("/api/v1/score")[1]["availability"] > lifetime["availability"], 30, "more traffic")
    assert daemon.get(path)[1] == closed


def test_a_windows_faults_are_those_injected_while_it_was_open(daemon: Daemon) -> None:
    before = _open(daemon, "before")
    daemon.request("DELETE", f"/api/v1/windows/{before['id']}")
    window = _open(daemon, "kill")
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "kill_agent", "target": "worker-1", "ttl": 3})
    assert code == 201
    wait_for(
        lambda: daemon.request("GET", f"/api/v1/faults/{fault['id']}?wait=30s", timeout=40)[1]["outcome"] in TERMINAL,
        60,
        "verdict",
    )
    code, closed = daemon.request("DELETE", f"/api/v1/windows/{window['id']}")
    assert [f["id"] for f in closed["faults"]] == [fault["id"]]
    assert [i["faults"] for i in closed["incidents"]] == [[fault["id"]]]
    assert closed["score"]["recovery_rate"] == 100.0
    assert daemon.get(f"/api/v1/windows/{before['id']}")[1]["faults"] == []
    listed = {w["id"]: w["state"] for w in daemon.get("/api/v1/windows")[1]["windows"]}
    assert listed[window["id"]] == listed[before["id"]] == "closed"


def test_windows_are_in_storage_with_their_score(daemon: Daemon) -> None:
    window = _open(daemon, "stored")
    code, closed = daemon.request("DELETE", f"/api/v1/windows/{window['id']}")
    assert code == 200
    db = daemon.tmp / "data" / "chaosd.db"
    with sqlite3.connect(db) as conn:
        rows = [json.loads(d) for (d,) in conn.execute("SELECT data FROM events WHERE kind = 'window' ORDER BY seq")]
    mine = [r for r in rows if r["id"] == window["id"]]
    assert [r["state"] for r in mine] == ["opened", "closed"]
    assert mine[1]["grade"] == closed["score"]["grade"] and mine[1]["name"] == "stored"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("GET", "/api/v1/windows/999", None, 404, "id"),
        ("GET", "/api/v1/windows/abc", None, 400, "id"),
        ("POST", "/api/v1/windows", {"name": ""}, 422, "name"),
        ("POST", "/api/v1/windows", {"name": "x", "extra": 1}, 422, "extra"),
    ],
)
def test_bad_window_requests_name_the_field(
    daemon: Daemon, method: str, path: str, body: Any, status: int, field: str
) -> None:
    count = len(daemon.get("/api/v1/windows")[1]["windows"])
    code, answer = daemon.request(method, path, body)
    assert code == status and answer["error"]["field"] == field, answer
    assert len(daemon.get("/api/v1/windows")[1]["windows"]) == count


def test_closing_a_closed_window_is_409(daemon: Daemon) -> None:
    window = _open(daemon, "twice")
    assert daemon.request("DELETE", f"/api/v1/windows/{window['id']}")[0] == 200
    code, answer = daemon.request("DELETE", f"/api/v1/windows/{window['id']}")
    assert code == 409 and answer["error"]["field"] == "id"
