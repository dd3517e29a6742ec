"""The daemon's signals, on the real program: SIGHUP stops it like SIGTERM; two signals within a second are one
graceful stop; a span collector that never answers cannot hold the exit past ``daemon.shutdown_grace``; the
Redis backend's worker processes die with the daemon, even one that is SIGSTOPped."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import redis
from daemon_harness import TOKEN, Daemon, wait_for
from redis_harness import running_redis

pytestmark = pytest.mark.timeout(120)


def _report(tmp: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((tmp / "daemon-report.json").read_text())
    return data


def _run_status(tmp: Path, run_id: str) -> str:
    with sqlite3.connect(f"file:{tmp / 'data' / 'chaosd.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert row is not None, run_id
    return str(row[0])


def _inject(daemon: Daemon, action: str, target: str, ttl: float, **params: float) -> int:
    status, body = daemon.request(
        "POST", "/api/v1/faults", {"action": action, "target": target, "ttl": ttl, "params": params}
    )
    assert status == 201, body
    return int(body["id"])


def test_sighup_stops_gracefully_reverts_faults_writes_the_report_and_marks_the_run_finished(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        fault = _inject(daemon, "slow_agent", "worker-0", 600.0, factor=5.0)
        daemon.proc.send_signal(signal.SIGHUP)
        code = daemon.proc.wait(timeout=30)
        lines = daemon.drain()
    finally:
        daemon.kill()
    assert code == 0, lines[-20:]
    assert any("SIGHUP received, stopping" in line for line in lines), lines[-20:]
    assert any("reverted 1 active fault(s); report written to" in line for line in lines), lines[-20:]
    assert not any("forced" in line for line in lines)
    record = next(f for f in _report(tmp_path)["faults"] if f["id"] == fault)  # type: ignore[attr-defined]
    assert record["reverted_by"] == "shutdown", record
    assert _run_status(tmp_path, daemon.run_id) == "finished"


def test_two_sigints_10_ms_apart_are_one_graceful_stop(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        fault = _inject(daemon, "slow_agent", "worker-0", 600.0, factor=5.0)
        daemon.proc.send_signal(signal.SIGINT)
        time.sleep(0.01)  # the gap under test (what `timeout -s INT` leaves between its two signals), not a wait
        daemon.proc.send_signal(signal.SIGINT)
        code = daemon.proc.wait(timeout=30)
        lines = daemon.drain()
    finally:
        daemon.kill()
    assert code == 0, lines[-20:]
    assert sum("received, stopping" in line for line in lines) == 1, lines[-20:]
    assert not any("forced" in line or "no report written" in line for line in lines), lines[-20:]
    assert any("reverted 1 active fault(s); report written to" in line for line in lines), lines[-20:]
    record = next(f for f in _report(tmp_path)["faults"] if f["id"] == fault)  # type: ignore[attr-defined]
    assert record["reverted_by"] == "shutdown", record
    assert _run_status(tmp_path, daemon.run_id) == "finished"


class _Mute:
    """A collector that accepts connections and reads what is sent, and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.received = 0
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while chunk := _recv(conn):
            self.received += len(chunk)

    def close(self) -> None:
        self._closed = True
        self.sock.close()
        for conn in self._conns:
            conn.close()


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""


def test_sigterm_is_bounded_by_shutdown_grace_with_a_collector_that_never_answers(tmp_path: Path) -> None:
    grace = 1.0  # the exit waits for it: the exporter's own timeout (10 s) would be far past the bound
    mute = _Mute()
    env: dict[str, str | None] = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{mute.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # the batch goes out (and hangs) within a fraction of a second
        "CHAOSD_DAEMON__SHUTDOWN_GRACE": str(grace),
        "CHAOSD_TRACING__SAMPLE_EVERY": "1",
    }
    try:
        daemon = Daemon(tmp_path, env=env)
        try:
            _inject(daemon, "slow_agent", "worker-0", 600.0, factor=2.0)
            wait_for(lambda: mute.received > 0, 30, "an export request to reach the collector")
            sent = time.monotonic()
            daemon.proc.send_signal(signal.SIGTERM)
            code = daemon.proc.wait(timeout=60)
            took = time.monotonic() - sent
            lines = daemon.drain()
        finally:
            daemon.kill()
    finally:
        mute.close()
    assert code == 0, lines[-20:]
    print(f"SIGTERM to exit: {took:.2f} s (shutdown_grace {grace} s)")
    # Well under the exporter's own 10 s timeout, with room for the report and history writes of a busy host.
    assert took < grace + 4.0, f"SIGTERM took {took:.2f} s with shutdown_grace {grace} s"
    assert any("report written to" in line for line in lines), lines[-20:]
    assert any("span exporter did not finish within" in line for line in lines), lines[-20:]
    assert _report(tmp_path)["faults"]
    assert _run_status(tmp_path, daemon.run_id) == "finished"


# --- the Redis backend's processes -------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out |= {int(c) for c in (task / "children").read_text().split()}
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def _state(pid: int) -> str | None:
    """The process's state letter (``T`` stopped, ``Z`` zombie), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


def test_redis_workers_die_with_a_sigkilled_daemon_even_a_stopped_one(tmp_path: Path) -> None:
    with running_redis(tmp_path) as server:
        config = tmp_path / "redis.toml"
        config.write_text(
            f'[backend]\nkind = "redis"\nurl = "{server.url}"\npoll = 0.05\n'
            "[load]\nrate = 20.0\n[workers]\ncount = 2\n[orchestrator]\nreplicas = 2\n"
        )
        daemon = Daemon(tmp_path, config=config)
        client = redis.Redis.from_url(server.url, decode_responses=True)
        procs: set[int] = set()
        try:
            spawners = _children(daemon.proc.pid)
            assert len(spawners) == 1, spawners
            forks = _children(next(iter(spawners)))
            procs = spawners | forks
            assert len(forks) == 4, forks  # 2 workers and 2 orchestrator replicas
            worker = int(client.hget("chaosd:hb:worker-0", "pid") or 0)
            assert worker in forks
            status, body = daemon.request(
                "POST", "/api/v1/faults", {"action": "pause_agent", "target": "worker-0", "ttl": 600}, token=TOKEN
            )
            assert status == 201, body
            wait_for(lambda: _state(worker) == "T", 10, "worker-0 SIGSTOPped by pause_agent")
            daemon.proc.kill()  # SIGKILL: no handler, no cleanup, nobody left to SIGCONT or SIGTERM the workers
            daemon.proc.wait(timeout=10)
            killed = time.monotonic()

            def gone() -> bool:
                return all(_state(pid) in (None, "Z") for pid in procs)  # a zombie has exited; init reaps it

            wait_for(gone, 10, "the daemon's processes to exit", lambda: str({p: _state(p) for p in procs}))
            print(f"the daemon's {len(procs)} processes gone {time.monotonic() - killed:.2f} s after its SIGKILL")
        finally:
            daemon.kill()
            client.close()
            for pid in procs:  # this test's own processes, should they outlive the daemon (by their PIDs)
                if _state(pid) not in (None, "Z"):
                    os.kill(pid, signal.SIGKILL)
