"""Honest health and an orderly, durable lifecycle: crashes show in /healthz, shutdown keeps its order,
and what a client was told is stored survives ``kill -9``."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from daemon_harness import Daemon, wait_for
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from chaosd.api import build_app
from chaosd.api.keys import HTTP_STATS, LIMITS, STORAGE
from chaosd.api.server import FrontDoor
from chaosd.config.settings import Settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.daemon.control import Controller
from chaosd.daemon.lifecycle import LiveRun
from chaosd.experiment.runner import Experiment
from chaosd.exporters.tracing import Tracing
from chaosd.telemetry.snapshot import Snapshot


def test_faults_acknowledged_with_201_survive_kill_9(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    acknowledged: list[int] = []
    try:
        for _ in range(10):
            code, fault = d.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 300})
            assert code == 201
            acknowledged.append(fault["id"])
            code, _ = d.request("DELETE", f"/api/v1/faults/{fault['id']}")
            assert code == 200
        # Storage is slow for a moment (another process holds the write lock, as a backup would): the 201
        # waits for the record to be written, rather than answering first and losing it to the kill.
        blocker = sqlite3.connect(tmp_path / "data" / "chaosd.db", isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        release = threading.Timer(1.0, lambda: blocker.execute("COMMIT"))
        release.start()
        code, fault = d.request("POST", "/api/v1/faults", {"action": "pause_agent", "ttl": 300})
        assert code == 201
        acknowledged.append(fault["id"])
    finally:
        d.proc.kill()  # at once, right after the last 201: nothing gets a chance to flush
        d.proc.wait(10)
    release.join()
    blocker.close()
    with sqlite3.connect(tmp_path / "data" / "chaosd.db") as db:
        rows = db.execute("SELECT id, outcome, data FROM faults WHERE run_id = ? ORDER BY id", (d.run_id,)).fetchall()
    assert [r[0] for r in rows] == acknowledged
    reverted = [json.loads(r[2])["reverted_by"] for r in rows[:-1]]
    assert reverted == ["revert"] * 10  # each DELETE's answer was stored too
    assert rows[-1][1] == "active" and json.loads(rows[-1][2])["action"] == "pause_agent"


def _sse_lines(base: str, ready: list[bool], lines: list[str]) -> None:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET /api/v1/events?types=fault,survival HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        buffer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buffer += chunk
            if not ready[0] and b"retry:" in buffer:
                ready[0] = True
            if b"event: close" in buffer:
                break
    lines.extend(buffer.decode().splitlines())


def test_shutdown_stops_plans_and_reverts_faults_before_streams_close_and_the_pipeline_stops(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    try:
        assert d.request("POST", "/api/v1/faults", {"action": "latency_jitter", "ttl": 300})[0] == 201
        code, _ = d.request("POST", "/api/v1/survival", {"interval": "0.5s", "duration": "10m", "overlap": True})
        assert code == 201
        wait_for(lambda: d.get("/api/v1/survival")[1]["actions"] >= 1, 15, "survival to inject")
        ready, lines = [False], []
        reader = threading.Thread(target=_sse_lines, args=(d.base, ready, lines))
        reader.start()
        wait_for(lambda: ready[0], 10, "the stream to open")
        assert d.terminate() == 0
        reader.join(30)
    finally:
        d.kill()
    events = [json.loads(line[6:]) | {"kind": kind} for kind, line in _pairs(lines)]
    kinds = [(e["kind"], e.get("state")) for e in events]
    assert ("survival", "stopped") in kinds
    stopped_at = kinds.index(("survival", "stopped"))
    reverts = [i for i, (kind, state) in enumerate(kinds) if kind == "fault" and state == "reverted"]
    assert reverts  # streamed before the stream closed
    assert min(reverts) > stopped_at  # plans stop first: nothing is injected after the reverts begin
    assert not [k for k in kinds[stopped_at:] if k == ("fault", "injected")]
    assert lines[-2:] == ["event: close", "data: {}"] or "event: close" in lines
    report = json.loads((tmp_path / "daemon-report.json").read_text())
    at_shutdown = {f["id"] for f in report["faults"] if f.get("reverted_by") == "shutdown"}
    assert 1 in at_shutdown  # the jitter, still active at SIGTERM
    assert at_shutdown == {events[i]["id"] for i in reverts if events[i]["by"] == "shutdown"}
    assert not [f for f in report["faults"] if f["outcome"] == "active"]
    # The pipeline ran until after the reverts: the report's clock reaches past the last revert.
    last_revert = max(events[i]["t"] for i in reverts)
    assert report["duration_s"] >= last_revert
    with sqlite3.connect(tmp_path / "data" / "chaosd.db") as db:
        (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (d.run_id,)).fetchone()
    assert status == "finished"


def _pairs(lines: list[str]) -> list[tuple[str, str]]:
    out, kind = [], None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind not in (None, "close"):
            out.append((kind, line))
    return out


class _HungExporter(SpanExporter):
    """An exporter stuck in its export call, as one blocked on a dead collector without a timeout."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.release.wait(60)
        return SpanExportResult.SUCCESS


async def _healthz_during(tmp: Path, breaks: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    settings = Settings(storage={"path": str(tmp / "db")}, daemon={"report": str(tmp / "r.json")})  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    exp = Experiment(settings, clock, warmup=0.0, scenario=None, virtual=False)
    hung = _HungExporter()
    wall = [0.0]
    tracing = Tracing(clock, 0.0, 1000, hung, stall_after=300.0, wall=lambda: wall[0])
    app = build_app(settings, LiveRun(settings, Controller(exp), "run-health"), tracing)
    runner = web.AppRunner(app)
    await runner.setup()
    door = FrontDoor(runner, app[LIMITS], app[HTTP_STATS])
    [(host, port)] = await door.listen("127.0.0.1", 0)
    url = f"http://{host}:{port}/healthz"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as resp:
                before = await resp.json()
            if breaks == "pipeline":

                def boom(snap: Snapshot, **_: object) -> None:
                    raise RuntimeError("a bug in the tick")

                # The tick's own work, not an observer's: a raising listener is logged and counted, never fatal.
                exp.injector.on_tick = boom  # type: ignore[method-assign]
            elif breaks == "exporter":
                tracing.tracer.start_span("a span").end()  # queued for an exporter that never returns
                wall[0] += 301.0
            else:
                await app[STORAGE].close()  # the writer is gone
            deadline = time.monotonic() + 10
            while True:
                async with session.get(url) as resp:
                    after, status = await resp.json(), resp.status
                if status != 200 or time.monotonic() > deadline:
                    return before, after, status
                await asyncio.sleep(0.02)
    finally:
        hung.release.set()
        await door.close()
        await runner.cleanup()
        await asyncio.to_thread(tracing.close)


def test_healthz_fails_when_the_pipeline_crashes(tmp_path: Path) -> None:
    loop = new_event_loop(virtual=False)
    try:
        before, after, status = loop.run_until_complete(_healthz_during(tmp_path, "pipeline"))
    finally:
        loop.close()
    assert before == {"status": "ok", "problems": []}
    assert status == 503 and after["status"] == "failed"
    assert any("pipeline crashed" in p and "a bug in the tick" in p for p in after["problems"])


def test_healthz_fails_when_the_storage_writer_stops(tmp_path: Path) -> None:
    loop = new_event_loop(virtual=False)
    try:
        before, after, status = loop.run_until_complete(_healthz_during(tmp_path, "storage"))
    finally:
        loop.close()
    assert before["status"] == "ok"
    assert status == 503 and any(p.startswith("storage:") for p in after["problems"])


def test_healthz_fails_when_the_span_exporter_has_stopped(tmp_path: Path) -> None:
    loop = new_event_loop(virtual=False)
    try:
        before, after, status = loop.run_until_complete(_healthz_during(tmp_path, "exporter"))
    finally:
        loop.close()
    assert before["status"] == "ok"
    assert status == 503 and any("the exporter has stopped" in p for p in after["problems"])


class _Flaky(SpanExporter):
    def __init__(self) -> None:
        self.ok = False

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS if self.ok else SpanExportResult.FAILURE


def test_tracing_says_when_exports_keep_failing_and_when_they_work_again() -> None:
    wall = [0.0]
    flaky = _Flaky()
    loop = asyncio.new_event_loop()
    tracing = Tracing(LoopClock(loop), 0.0, 1, flaky, wall=lambda: wall[0])
    try:
        assert tracing.failing() is None and tracing.stalled() is None
        for n in range(3):
            tracing.tracer.start_span(f"span {n}").end()
            assert tracing.provider is not None and tracing.provider.force_flush()
        assert tracing.failing() == "tracing: the last 3 span exports failed"
        wall[0] += 1000.0
        assert tracing.stalled() is None  # failing, but not stuck: every span left the queue
        flaky.ok = True
        tracing.tracer.start_span("works").end()
        assert tracing.provider.force_flush()
        assert tracing.failing() is None and tracing.counts() == (1, 3)
    finally:
        tracing.close()
        loop.close()


def test_a_busy_port_exits_2_with_one_line_and_nothing_started(tmp_path: Path, daemon_env: dict[str, str]) -> None:
    """The port is bound before anything starts: no pipeline, no storage file, no report, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **daemon_env,
            "CHAOSD_API__PORT": str(port),
            "CHAOSD_STORAGE__PATH": str(tmp_path / "data" / "chaosd.db"),
        }
        done = subprocess.run(
            [sys.executable, "-m", "chaosd"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        f"chaosd: cannot listen on 127.0.0.1:{port} (api.host, api.port): {os.strerror(errno.EADDRINUSE)}"
    ]
    assert list(tmp_path.iterdir()) == []  # no storage directory, no report


@pytest.mark.parametrize(
    ("setting", "value", "line"),
    [
        (
            "CHAOSD_STORAGE__PATH",
            "{tmp}/a-file/chaosd.db",
            "chaosd: cannot open the history at {tmp}/a-file/chaosd.db (storage.path): {tmp}/a-file is not a directory",
        ),
        (
            "CHAOSD_DAEMON__REPORT",
            "{tmp}/a-file/report.json",
            "chaosd: cannot write the report to {tmp}/a-file/report.json (daemon.report):"
            " {tmp}/a-file is not a directory",
        ),
        (
            "CHAOSD_API__HOST",
            "no-such-host.invalid",
            "chaosd: cannot listen on no-such-host.invalid:0 (api.host, api.port): Name or service not known",
        ),
    ],
    ids=["unwritable-storage", "unwritable-report", "unknown-host"],
)
def test_a_daemon_that_cannot_start_says_why_in_one_line_and_starts_nothing(
    tmp_path: Path, daemon_env: dict[str, str], setting: str, value: str, line: str
) -> None:
    (tmp_path / "a-file").write_text("in the way")
    env = {**daemon_env, "CHAOSD_STORAGE__PATH": str(tmp_path / "data" / "chaosd.db"), "CHAOSD_API__PORT": "0"}
    env[setting] = value.format(tmp=tmp_path)
    env["CHAOSD_API__TOKEN"] = "a-token-for-a-non-loopback-host"
    done = subprocess.run(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == ""  # no traceback, no log line from a pipeline that never ran
    assert done.stdout.splitlines() == [line.format(tmp=tmp_path)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no history, no report
