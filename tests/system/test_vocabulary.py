"""One vocabulary: every answer matches the OpenAPI schema generated from the types the handlers build,
time fields say their unit and origin, bodies of the wrong type are refused, and docs/api.md lists the
routes the document describes."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, Daemon, ready_daemon, wait_for
from jsonschema import Draft202012Validator

from chaosd.api.schemas import openapi_document
from chaosd.daemon.storage import Storage

DOC = openapi_document()
TERMINAL = ("recovered", "failed", "unmeasured")


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    # References are "#/components/schemas/…": resolved against a root that holds the components.
    return Draft202012Validator({**schema, "components": DOC["components"]})


def _check(answer: Any, path: str, method: str = "get", status: str = "200") -> None:
    schema = DOC["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    errors = sorted(_validator(schema).iter_errors(answer), key=lambda e: list(e.absolute_path))
    assert not errors, f"{method.upper()} {path}: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5]
    )


def _schema(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _time_keys(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every (path, key, value) whose key names a time by the convention: t, at, *_at, *_unix, *_s."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("t", "at") or (key.endswith(("_at", "_unix", "_s")) and not key.endswith("_per_s")):
                yield path, key, inner
            yield from _time_keys(inner, f"{path}/{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _time_keys(inner, f"{path}/{i}")


def _assert_time_origins(body: Any, where: str) -> int:
    """Run-clock instants are small (seconds into the run), wall-clock ones are Unix times."""
    seen = 0
    for path, key, value in _time_keys(body):
        if value is None or isinstance(value, dict):
            continue
        assert isinstance(value, int | float), f"{where}{path}/{key} = {value!r}: a time is a number"
        seen += 1
        if key.endswith("_unix"):
            assert value > 1.5e9, f"{where}{path}/{key} = {value}: not a Unix time"
        else:
            assert 0 <= value < 1e8, f"{where}{path}/{key} = {value}: not seconds on the run clock / a duration"
    return seen


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from ready_daemon(tmp_path_factory.mktemp("vocabulary"))


def test_every_answer_matches_the_schema_generated_from_its_type(daemon: Daemon) -> None:
    code, fault = daemon.request(
        "POST", "/api/v1/faults", {"action": "kill_leader", "ttl": "2s", "labels": {"exp": "vocabulary"}}
    )
    assert code == 201
    _check(fault, "/api/v1/faults", "post", "201")
    code, window = daemon.request("POST", "/api/v1/windows", {"name": "vocabulary"})
    assert code == 201
    _check(window, "/api/v1/windows", "post", "201")
    code, done = daemon.request("GET", f"/api/v1/faults/{fault['id']}?wait=60s", timeout=70)
    assert code == 200 and done["outcome"] in TERMINAL
    _check(done, "/api/v1/faults/{id}")
    for path in (
        "/healthz",
        "/readyz",
        "/api/v1/status",
        "/api/v1/actions",
        "/api/v1/faults",
        "/api/v1/survival",
        "/api/v1/scenarios",
        "/api/v1/scenarios/current",
        "/api/v1/windows",
        "/api/v1/score",
        "/api/v1/report",
        "/api/v1/runs",
    ):
        code, answer = daemon.get(path)
        assert code == 200, (path, answer)
        _check(answer, path)
    code, report = daemon.get("/api/v1/report")
    assert report["faults"] and report["incidents"] and report["timeline"], "the report has something to check"
    code, status = daemon.get("/api/v1/status")
    assert status["telemetry"]["saturation"] == max(
        status["telemetry"][k] for k in ("queue_fill", "utilisation", "busy_share")
    ), "status shows the saturation the detector judges"
    code, closed = daemon.request("DELETE", f"/api/v1/windows/{window['id']}")
    assert code == 200
    _check(closed, "/api/v1/windows/{id}", "delete")
    code, pulled = daemon.request("POST", "/api/v1/lever", {"reason": "vocabulary"})
    _check(pulled, "/api/v1/lever", "post")
    code, released = daemon.request("DELETE", "/api/v1/lever")
    _check(released, "/api/v1/lever", "delete")
    # Instants on the run clock and on the wall clock are told apart by name, and hold what they say.
    assert _assert_time_origins(report, "report") >= 10
    assert _assert_time_origins(status, "status") >= 2 and status["started_unix"] > 1.5e9
    assert _assert_time_origins(closed, "window") >= 3


def test_a_body_of_the_wrong_type_is_415_and_changes_nothing(daemon: Daemon) -> None:
    before = len(daemon.get("/api/v1/faults")[1]["faults"])
    for path, body in (
        ("/api/v1/faults", b"action=kill_leader"),
        ("/api/v1/windows", b"name=x"),
        ("/api/v1/scenarios/run", b"name=baseline"),
    ):
        code, answer = daemon.request(
            "POST", path, raw=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert code == 415, (path, code, answer)
        assert answer["error"]["field"] == "Content-Type"
        assert "application/json" in answer["error"]["message"]
    code, _ = daemon.request(
        "POST", "/api/v1/faults", raw=b'{"action": "slow_agent"}', headers={"Content-Type": "text/plain"}
    )
    assert code == 415
    assert len(daemon.get("/api/v1/faults")[1]["faults"]) == before, "nothing injected"
    assert daemon.get("/api/v1/scenarios/current")[1]["state"] in ("idle", "finished", "stopped")
    # A typed JSON body (application/…+json) is JSON.
    code, _ = daemon.request(
        "POST", "/api/v1/windows", {"name": "typed"}, headers={"Content-Type": "application/vnd.x+json"}
    )
    assert code == 201


def test_a_finished_run_from_history_matches_its_schema(daemon: Daemon) -> None:
    """The module's daemon (it has its baseline) ends its run here: the last test to use it."""
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 1})
    assert code == 201
    wait_for(lambda: daemon.get(f"/api/v1/faults/{fault['id']}")[1]["outcome"] in TERMINAL, 60, "a verdict")
    assert daemon.terminate() == 0
    second = Daemon(daemon.tmp)
    try:
        code, runs = second.get("/api/v1/runs")
        _check(runs, "/api/v1/runs")
        code, run = second.get(f"/api/v1/runs/{daemon.run_id}")
        assert code == 200 and run["status"] == "finished" and run["report"]["faults"]
        _check(run, "/api/v1/runs/{id}")
        assert run["ended_unix"] > run["started_unix"] > 1.5e9
        assert _assert_time_origins(run, "run") >= 10
    finally:
        second.kill()


def test_a_scenario_report_matches_the_report_schema(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "chaosd", "run", "scenarios/leader_assassination.yaml", "--report", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    errors = list(_validator(_schema("ReportView")).iter_errors(report))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5]]
    assert report["collapse"] is not None and report["faults"]
    assert _assert_time_origins(report, "report") >= 10


def test_every_time_field_of_every_schema_says_its_unit_and_origin() -> None:
    checked = 0

    def walk(schema: Any, where: str) -> None:
        nonlocal checked
        if isinstance(schema, list):
            for i, inner in enumerate(schema):
                walk(inner, f"{where}/{i}")
            return
        if not isinstance(schema, dict):
            return
        for name, prop in (schema.get("properties") or {}).items():
            text = json.dumps(prop)
            if name.endswith("_per_s"):  # a rate: its unit is in its name
                continue
            if name in ("t", "at") or name.endswith("_at"):
                assert "run clock" in text, f"{where}.{name}: an instant must say it is on the run clock"
            elif name.endswith("_unix"):
                assert "Unix epoch" in text, f"{where}.{name}: must say it is Unix time"
            elif name.endswith("_s") or name in ("ttl", "interval", "duration"):
                assert "seconds" in text or "duration" in text, f"{where}.{name}: must say seconds"
            else:
                assert not re.search(r"(_time|timestamp|_ms|_ts)$", name), (
                    f"{where}.{name}: a time outside the convention"
                )
                continue
            checked += 1
        for key, inner in schema.items():
            if key != "properties":
                walk(inner, f"{where}/{key}")
        for name, prop in (schema.get("properties") or {}).items():
            walk(prop, f"{where}.{name}")

    for name, schema in DOC["components"]["schemas"].items():
        walk(schema, name)
    assert checked >= 30, checked  # the walk reached the time fields


def test_docs_api_lists_exactly_the_routes_of_the_openapi_document() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^\| (GET|POST|DELETE|PUT|PATCH) \| `([^`]+)` \|", text, re.M))
    served = {(method.upper(), path) for path, ops in DOC["paths"].items() for method in ops}
    assert documented == served, {"only in docs/api.md": documented - served, "only in OpenAPI": served - documented}


def test_history_written_before_the_vocabulary_is_read_with_it(tmp_path: Path) -> None:
    """A database of schema v1 (started_at, ended_at in Unix time) is migrated, its runs served as *_unix."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE runs (id TEXT PRIMARY KEY, started_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
                           config TEXT NOT NULL, report TEXT, score TEXT);
        CREATE INDEX runs_by_start ON runs (started_at);
        CREATE TABLE faults (run_id TEXT NOT NULL, id INTEGER NOT NULL, action TEXT, outcome TEXT,
                             data TEXT NOT NULL, PRIMARY KEY (run_id, id));
        CREATE TABLE events (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, id INTEGER NOT NULL, t REAL NOT NULL,
                             kind TEXT NOT NULL, data TEXT NOT NULL, UNIQUE (run_id, id));
        INSERT INTO runs VALUES ('old', 1700000000.0, 1700000060.0, 'finished', '{}', NULL, NULL);
        PRAGMA user_version = 1;
        """
    )
    db.close()

    async def main() -> list[dict[str, Any]]:
        storage = Storage(path)
        await storage.open()
        try:
            return [dict(r) for r in await storage.runs()]
        finally:
            await storage.close()

    runs = asyncio.run(main())
    assert runs == [
        {"id": "old", "started_unix": 1700000000.0, "ended_unix": 1700000060.0, "status": "finished", "score": None}
    ]
