"""The history store: what is written comes back, survives a restart and a kill -9, and never blocks the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from chaosd.core.errors import ChaosdError, Unavailable
from chaosd.daemon.storage import Storage

ROOT = Path(__file__).resolve().parents[2]


def _fault(fault_id: int, outcome: str = "active", **extra: Any) -> dict[str, Any]:
    return {"id": fault_id, "action": "kill_worker", "outcome": outcome, "reverted_by": None, **extra}


def _with_storage(path: Path, body: Callable[[Storage], Awaitable[None]], **kwargs: Any) -> Storage:
    """Open a store, run ``body`` against it, close it; the closed store is returned for its counters."""

    async def main() -> Storage:
        storage = Storage(path, **kwargs)
        await storage.open()
        try:
            await body(storage)
        finally:
            await storage.close()
        return storage

    return asyncio.run(main())


def test_runs_faults_and_events_round_trip(tmp_path: Path) -> None:
    async def body(s: Storage) -> None:
        s.run_started("r1", 1000.0, {"workers": 4})
        s.fault_changed("r1", _fault(2, "recovered", reverted_by="ttl"))
        s.fault_changed("r1", _fault(1, "failed"))
        s.event("r1", 1, 0.5, "fault", {"what": "injected", "id": 1})
        s.event("r1", 2, 1.5, "detector", {"state": "collapse"})
        s.run_finished("r1", 1060.0, "finished", {"score": {"total": 87.5, "grade": "B"}, "tasks": 10})
        s.run_started("r2", 2000.0, {"workers": 8})
        s.fault_changed("r2", _fault(1))
        await s.flush()

        assert await s.runs() == [
            {"id": "r2", "started_unix": 2000.0, "ended_unix": None, "status": "running", "score": None},
            {
                "id": "r1",
                "started_unix": 1000.0,
                "ended_unix": 1060.0,
                "status": "finished",
                "score": {"total": 87.5, "grade": "B"},
            },
        ]
        assert [r["id"] for r in await s.runs(limit=1)] == ["r2"]
        run = await s.run("r1")
        assert run is not None
        assert run["config"] == {"workers": 4}
        assert run["report"] == {"score": {"total": 87.5, "grade": "B"}, "tasks": 10}
        assert [(f["id"], f["outcome"], f["run_id"]) for f in run["faults"]] == [
            (1, "failed", "r1"),
            (2, "recovered", "r1"),
        ]
        assert run["faults"][1] == {**_fault(2, "recovered", reverted_by="ttl"), "run_id": "r1"}
        assert await s.run("nope") is None
        assert [(f["run_id"], f["id"]) for f in await s.faults()] == [("r1", 1), ("r1", 2), ("r2", 1)]
        assert [f["id"] for f in await s.faults("r2")] == [1]
        assert await s.events("r1") == [
            {"id": 1, "t": 0.5, "kind": "fault", "data": {"what": "injected", "id": 1}},
            {"id": 2, "t": 1.5, "kind": "detector", "data": {"state": "collapse"}},
        ]
        assert [e["id"] for e in await s.events("r1", after_id=1)] == [2]
        assert [e["id"] for e in await s.events("r1", limit=1)] == [1]
        assert await s.events("r2") == []

    assert _with_storage(tmp_path / "h.db", body).write_errors == 0


def test_fault_upsert_updates_in_place(tmp_path: Path) -> None:
    async def body(s: Storage) -> None:
        s.run_started("r", 1.0, {})
        s.fault_changed("r", _fault(7))
        s.fault_changed("r", _fault(7, "recovering", reverted_at=30.0, reverted_by="ttl"))
        s.fault_changed("r", _fault(7, "recovered", reverted_at=30.0, reverted_by="ttl", recovery_s=12.0))
        await s.flush()
        assert await s.faults("r") == [
            {**_fault(7, "recovered", reverted_at=30.0, reverted_by="ttl", recovery_s=12.0), "run_id": "r"}
        ]

    _with_storage(tmp_path / "h.db", body)


def test_events_keep_only_the_newest_max_events_overall(tmp_path: Path) -> None:
    async def body(s: Storage) -> None:
        for i in range(1, 4):
            s.event("old", i, float(i), "tick", {"i": i})
        await s.flush()  # a second batch must trim what the first one left
        for i in range(1, 6):
            s.event("new", i, float(i), "tick", {"i": i})
        await s.flush()
        assert [e["id"] for e in await s.events("old")] == [3]
        assert [e["id"] for e in await s.events("new")] == [1, 2, 3, 4, 5]

    _with_storage(tmp_path / "h.db", body, max_events=6)


def test_a_reopened_file_serves_the_first_instances_history(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "h.db"

    async def first(s: Storage) -> None:
        s.run_started("r", 10.0, {"seed": 1})
        s.fault_changed("r", _fault(1, "recovered", reverted_by="ttl"))
        s.event("r", 1, 0.1, "run", {"state": "started"})
        s.run_finished("r", 20.0, "failed", None)

    async def second(s: Storage) -> None:
        assert s.aborted_at_open == []
        assert await s.runs() == [
            {"id": "r", "started_unix": 10.0, "ended_unix": 20.0, "status": "failed", "score": None}
        ]
        run = await s.run("r")
        assert run is not None
        assert (run["config"], run["report"], run["faults"][0]["outcome"]) == ({"seed": 1}, None, "recovered")
        assert [e["kind"] for e in await s.events("r")] == ["run"]

    _with_storage(path, first)
    _with_storage(path, second)


CRASH = """
import asyncio, os, signal, sys
from chaosd.daemon.storage import Storage

async def main() -> None:
    s = Storage(sys.argv[1])
    await s.open()
    s.run_started("done", 100.0, {})
    s.run_finished("done", 150.0, "finished", {"score": {"total": 90.0}})
    s.run_started("crashed", 200.0, {"workers": 4})
    s.fault_changed("crashed", {"id": 1, "action": "kill_worker", "outcome": "active", "reverted_by": None})
    s.fault_changed("crashed", {"id": 2, "action": "slow_mcp", "outcome": "recovering", "reverted_by": "revert"})
    s.fault_changed("crashed", {"id": 3, "action": "latency", "outcome": "recovered", "reverted_by": "ttl"})
    await s.flush()
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_a_run_cut_short_by_kill_9_is_aborted_on_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    crash = [sys.executable, "-c", CRASH, str(path)]
    died = subprocess.run(crash, check=False, cwd=ROOT, capture_output=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()

    async def after_crash(s: Storage) -> None:
        assert s.aborted_at_open == ["crashed"]
        assert [(r["id"], r["status"], r["ended_unix"]) for r in await s.runs()] == [
            ("crashed", "aborted", 5000.0),
            ("done", "finished", 150.0),
        ]
        run = await s.run("crashed")
        assert run is not None
        assert [(f["id"], f["outcome"], f["reverted_by"]) for f in run["faults"]] == [
            (1, "aborted", "aborted"),
            (2, "aborted", "revert"),  # who reverted it is kept
            (3, "recovered", "ttl"),  # already settled: untouched
        ]

    _with_storage(path, after_crash, wall_clock=lambda: 5000.0)
    with contextlib.closing(sqlite3.connect(path)) as db:  # the column follows the JSON
        assert db.execute("SELECT id, outcome FROM faults ORDER BY id").fetchall() == [
            (1, "aborted"),
            (2, "aborted"),
            (3, "recovered"),
        ]

    async def later(s: Storage) -> None:
        assert s.aborted_at_open == []

    _with_storage(path, later)


def test_writes_only_enqueue_even_while_the_database_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    blocker = sqlite3.connect(path, isolation_level=None)

    async def body(s: Storage) -> None:
        # Another connection holds the write lock: a write call that waited for the database would hang here.
        blocker.execute("BEGIN IMMEDIATE")
        s.run_started("r", 1.0, {})
        for i in range(1, 10_001):
            s.event("r", i, i / 100, "tick", {"i": i})
        assert await s.events("r", limit=20_000) == []  # readers are not blocked by a writer; nothing committed yet
        blocker.execute("ROLLBACK")
        await s.flush()
        events = await s.events("r", limit=20_000)
        assert [e["id"] for e in events] == list(range(1, 10_001))
        assert events[-1] == {"id": 10_000, "t": 100.0, "kind": "tick", "data": {"i": 10_000}}

    try:
        assert _with_storage(path, body).write_errors == 0
    finally:
        blocker.close()


def test_close_flushes_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "h.db"

    async def main() -> None:
        s = Storage(path)
        await s.close()  # closing what was never opened is fine too
        s = Storage(path)
        await s.open()
        s.run_started("r", 1.0, {})
        for i in range(1, 101):
            s.event("r", i, float(i), "tick", {})
        await s.close()  # no flush() first
        await s.close()
        await s.flush()  # nothing left to wait for
        s.event("r", 101, 101.0, "tick", {})  # after close: dropped, counted
        assert s.write_errors == 1
        assert len(await s.events("r", limit=1000)) == 100
        with pytest.raises(RuntimeError):
            await s.open()

    asyncio.run(main())


def test_failed_writes_are_counted_and_later_writes_still_land(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(s: Storage) -> None:
        s.run_started("r", 1.0, {})
        s.event("r", 1, 0.1, "tick", {"bad": object()})  # not JSON: fails on the caller's side
        s.fault_changed("r", {"action": "no id"})
        s.run_finished("r", 2.0, "exploded", None)  # not a run status
        assert s.write_errors == 3
        # Fails in the writer, inside a batch with good writes around it.
        s.event("r", 2, 0.2, "tick", {"i": 2})
        s.run_finished("ghost", 2.0, "finished", None)
        s.event("r", 3, 0.3, "tick", {"i": 3})
        await s.flush()
        assert s.write_errors == 4
        assert s.errors_by_op == {"run_started": 0, "run_finished": 2, "fault_changed": 1, "event": 1, "probe": 0}
        assert s.problem is None  # the callers' mistakes, not the storage's: it is healthy
        s.run_finished("r", 9.0, "finished", {"score": None})
        await s.flush()
        assert [e["id"] for e in await s.events("r")] == [2, 3]
        assert [(r["id"], r["status"]) for r in await s.runs()] == [("r", "finished")]

    with caplog.at_level(logging.ERROR, logger="chaosd.daemon.storage"):
        assert _with_storage(tmp_path / "h.db", body).write_errors == 4
    assert len([r for r in caplog.records if r.name == "chaosd.daemon.storage"]) == 4
    assert "ghost" in caplog.text


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 99")

    async def main() -> None:
        with pytest.raises(ChaosdError, match="v99"):
            await Storage(path).open()

    asyncio.run(main())


def test_a_deleted_or_replaced_file_is_reported_and_a_mark_says_whether_writes_since_committed(tmp_path: Path) -> None:
    path = tmp_path / "h.db"

    async def body(s: Storage) -> None:
        mark = s.mark()
        s.run_started("r", 1.0, {})
        await s.flush()
        assert (s.problem, await s.probe(), s.failed_since(mark)) == (None, None, False)  # the negative control
        mark = s.mark()
        s.run_finished("ghost", 2.0, "finished", None)  # fails in the writer
        await s.flush()
        assert s.failed_since(mark) and not s.failed_since(s.mark())
        path.unlink()
        assert s.problem is not None and "was deleted" in s.problem
        assert await s.probe() is None  # written back from the open file: what was committed is there again
        assert [r["id"] for r in await s.runs()] == ["r"] and s.problem is None
        path.unlink()
        path.write_bytes(b"")
        assert s.problem is not None and "was replaced" in s.problem
        assert await s.probe() == s.problem  # another file is never written over
        assert path.read_bytes() == b""

    _with_storage(path, body)


def test_a_history_whose_folder_was_deleted_is_written_back_once_by_checks_at_the_same_time(tmp_path: Path) -> None:
    path = tmp_path / "data" / "h.db"

    async def body(s: Storage) -> None:
        s.run_started("r", 1.0, {})
        await s.flush()
        for name in os.listdir(path.parent):
            os.unlink(path.parent / name)
        os.rmdir(path.parent)
        s.run_started("lost", 2.0, {})  # refused by SQLite: the file was deleted
        await s.flush()
        assert await asyncio.gather(s.probe(), s.probe()) == [None, None]
        assert [r["id"] for r in await s.runs()] == ["r"] and s.problem is None
        assert sorted(os.listdir(path.parent)) == ["h.db", "h.db-journal"]  # no copy left beside it
        s.run_started("after", 3.0, {})
        await s.flush()
        assert [r["id"] for r in await s.runs()] == ["after", "r"]

    _with_storage(path, body)


def test_a_history_that_cannot_be_read_is_unavailable_not_an_internal_error(tmp_path: Path) -> None:
    path = tmp_path / "h.db"

    async def body(s: Storage) -> None:
        s.run_started("r", 1.0, {})
        await s.flush()
        assert [r["id"] for r in await s.runs()] == ["r"]  # the negative control
        with path.open("r+b") as f:  # the same file, its header overwritten: not a database any more
            f.write(b"\xff" * 100)
        for read in (s.runs(), s.run("r"), s.fault("r", 1), s.events("r")):
            with pytest.raises(Unavailable, match="cannot be read: file is not a database") as caught:
                await read
            assert caught.value.field == "storage"

    _with_storage(path, body)


def test_a_file_an_older_chaosd_left_in_wal_mode_is_converted_and_maps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")

    async def body(s: Storage) -> None:
        s.run_started("r", 1.0, {})
        await s.flush()
        maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
        assert str(path) not in maps  # no -shm mapped: a full or read-only disk cannot raise SIGBUS
        assert not path.with_name("h.db-shm").exists() and not path.with_name("h.db-wal").exists()

    _with_storage(path, body)
    with contextlib.closing(sqlite3.connect(path)) as db:
        # No longer WAL (which a file remembers); rollback modes are per connection, so a new one says "delete".
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root (CI is root)")
def test_a_probe_tells_a_full_disk_now_and_healthy_again_once_freed(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:

        async def body(s: Storage) -> None:
            s.run_started("r", 1.0, {})
            assert await s.probe() is None  # the negative control
            fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
            os.close(fd)
            assert (await s.probe() or "") == "writes fail: database or disk is full"
            assert s.errors_by_op["probe"] == 1
            for i in range(1, 201):  # events keep failing: logged once, counted each
                s.event("r", i, float(i), "tick", {"pad": "x" * 200})
            await s.flush()
            assert s.problem == "writes fail: database or disk is full"
            (mnt / "filler").unlink()
            assert await s.probe() is None
            assert s.problem is None

        with caplog_errors() as records:
            _with_storage(mnt / "h.db", body)
        failing = [r for r in records if "database or disk is full" in r.getMessage()]
        assert len(failing) == 1
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@contextlib.contextmanager
def caplog_errors() -> Any:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.ERROR)
    logger = logging.getLogger("chaosd.daemon.storage")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
