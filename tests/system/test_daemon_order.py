"""The daemon's lifecycle in its documented order (docs/daemon.md, "Lifecycle"): a startup step that fails undoes
what had started and exits 2; a stop ends plans, then faults, then streams, then the pipeline, then storage."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Daemon, free_port, wait_for

from chaosd.cli.serve import Daemon as ChaosDaemon
from chaosd.config.settings import Settings
from chaosd.core.clock import new_event_loop

pytestmark = pytest.mark.timeout(120)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture
def own_signals() -> Iterator[None]:
    """The daemon runs in this process here: the test's own signal handlers are put back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _run_in_process(settings: Settings) -> tuple[int, list[str], set[asyncio.Task[Any]]]:
    """The daemon on a real-time loop of its own: its exit code, its lines, and the tasks it left on the loop."""
    lines: list[str] = []

    async def main() -> int:
        return await ChaosDaemon(settings, lines.append, "api.host, api.port").run()

    loop = new_event_loop(virtual=False)
    try:
        code = loop.run_until_complete(main())
        left = asyncio.all_tasks(loop)
        # The loop's own executor threads (getaddrinfo), let go as asyncio.run does: not the daemon's.
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    return code, lines, left


@pytest.mark.parametrize("fails", ["port-taken", "storage-unwritable"])
def test_a_startup_step_that_fails_leaves_nothing_started_and_exits_2(
    tmp_path: Path, own_signals: None, fails: str
) -> None:
    """The port is bound before storage opens: a busy port fails first; an unwritable history fails after the
    bind, and the port, the signal handlers and every task and thread are released again."""
    (tmp_path / "a-file").write_text("in the way")
    storage = tmp_path / ("a-file" if fails == "storage-unwritable" else "data") / "chaosd.db"
    threads = set(threading.enumerate())
    with socket.socket() as taken:
        if fails == "port-taken":
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = int(taken.getsockname()[1])
        else:
            port = free_port()
        settings = Settings(
            api={"host": "127.0.0.1", "port": port, "token": "a-token-0123456789"},  # type: ignore[arg-type]
            storage={"path": str(storage)},  # type: ignore[arg-type]
            daemon={"report": str(tmp_path / "report.json")},  # type: ignore[arg-type]
        )
        code, lines, left = _run_in_process(settings)
    assert code == 2, lines
    if fails == "port-taken":
        expected = f"chaosd: cannot listen on 127.0.0.1:{port} (api.host, api.port): {os.strerror(errno.EADDRINUSE)}"
    else:
        where = tmp_path / "a-file"
        expected = f"chaosd: cannot open the history at {storage} (storage.path): {where} is not a directory"
    assert lines == [expected]  # one line: no banner, no status line, no summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no history, no report
    assert left == set()  # no pipeline, no plan, no stream task still pending
    # No storage writer or span exporter thread is left; a thread an earlier test left behind may end meanwhile.
    assert set(threading.enumerate()) - threads == set()
    with socket.socket() as again:  # the port the daemon had bound is free again
        again.bind(("127.0.0.1", port))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1  # the loop's signal pipe was let go: no handler is left on it


def _stream(base: str, ready: threading.Event, frames: list[dict[str, Any]]) -> None:
    """Reads the event stream (with a backlog, so it holds the run's ``started`` too) until its ``close``."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET /api/v1/events?types=fault,survival,run&replay=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        buffer = b""
        while b"event: close" not in buffer:
            chunk = s.recv(65536)
            if not chunk:
                break
            buffer += chunk
            if b"retry:" in buffer:
                ready.set()
    frame: dict[str, Any] = {}
    for line in buffer.decode().partition("\r\n\r\n")[2].splitlines():  # between them, chunk sizes: ignored
        if line.startswith("id: "):
            frame["id"] = int(line[4:])
        elif line.startswith("event: "):
            frame["kind"] = line[7:]
        elif line.startswith("data: ") and "kind" in frame:
            frames.append({**frame, **json.loads(line[6:])})
            frame = {}


def test_a_stop_ends_plans_then_faults_then_streams_then_the_pipeline_then_storage(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    frames: list[dict[str, Any]] = []
    try:
        assert d.request("POST", "/api/v1/faults", {"action": "latency_jitter", "ttl": 300})[0] == 201
        code, _ = d.request("POST", "/api/v1/survival", {"interval": "0.5s", "duration": "10m", "overlap": True})
        assert code == 201
        wait_for(lambda: d.get("/api/v1/survival")[1]["actions"] >= 1, 15, "survival to inject")
        ready = threading.Event()
        reader = threading.Thread(target=_stream, args=(d.base, ready, frames))
        reader.start()
        assert ready.wait(10), "the stream to open"
        assert d.terminate() == 0, d.seen[-20:]
        reader.join(30)
    finally:
        d.kill()
    # What the daemon printed: the signal, then the summary, then the reverts and the report, last.
    lines = d.seen
    stopping = next(i for i, line in enumerate(lines) if "SIGTERM received, stopping" in line)
    summary = next(i for i, line in enumerate(lines) if line.startswith("chaosd run: config load"))
    assert stopping < summary < len(lines) - 1
    assert lines[-1].startswith("chaosd: reverted ")
    assert lines[-1].endswith(f"report written to {tmp_path / 'daemon-report.json'}")

    # What the stream carried: the run events reach it (the backlog), the plan stops, then the faults revert,
    # then the stream closes, before the pipeline has stopped.
    kinds = [(f["kind"], f.get("state")) for f in frames]
    assert ("run", "started") in kinds
    assert kinds[-1] == ("close", None)
    stopped = kinds.index(("survival", "stopped"))
    reverts = [i for i, f in enumerate(frames) if f["kind"] == "fault" and f.get("by") == "shutdown"]
    assert reverts and min(reverts) > stopped
    assert ("fault", "injected") not in kinds[stopped:]
    assert lines[-1].startswith(f"chaosd: reverted {len(reverts)} active fault(s);")
    assert ("run", "stopped") not in kinds  # the stream had closed by the time the pipeline stopped
    last_streamed = max(f["id"] for f in frames if "id" in f)

    # What storage kept, written after the stream closed: the pipeline's stop, then the run's end with the
    # report the daemon wrote to its file.
    report = json.loads((tmp_path / "daemon-report.json").read_text())
    with sqlite3.connect(f"file:{tmp_path / 'data' / 'chaosd.db'}?mode=ro", uri=True) as db:
        (stop_id, stop_t) = db.execute(
            "SELECT id, t FROM events WHERE run_id = ? AND kind = 'run' AND json_extract(data, '$.state') = 'stopped'",
            (d.run_id,),
        ).fetchone()
        status, stored = db.execute("SELECT status, report FROM runs WHERE id = ?", (d.run_id,)).fetchone()
    assert stop_id > last_streamed
    assert stop_t == report["duration_s"]
    assert status == "finished" and json.loads(stored) == report
