"""Run history that survives restarts: runs, faults and events in one SQLite file (rollback journal).

Writes are queued and applied in order, in batches, by one writer thread; reads run in worker threads.
The journal is TRUNCATE, not WAL: WAL maps its index (the -shm file) into memory, and a read-only, full
or vanished file then kills the process with SIGBUS. Health is the storage's current state (the last
write, a probe write, and whether the path still names the file that is open): see docs/storage.md.

:class:`Storage` owns the file's lifecycle and judges its health; its parts are the file
(:mod:`~chaosd.daemon.storage_file`), the writer thread (:mod:`~chaosd.daemon.storage_writer`) and the
reads (:mod:`~chaosd.daemon.storage_reader`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path

from chaosd.core.clock import unix_time
from chaosd.core.errors import ChaosdError, Unavailable
from chaosd.daemon.storage_file import FileWatch, dumps, hold_lock, open_file, restore_file, unwritable
from chaosd.daemon.storage_reader import HistoryReader
from chaosd.daemon.storage_writer import Args, StorageWriter
from chaosd.views import EventKind, EventView, FaultView, ReportView, RunBody, RunStatus, RunSummary

__all__ = ["Storage", "unwritable"]

log = logging.getLogger("chaosd.daemon.storage")
_PROBE = (
    "INSERT INTO health (id, probed_unix) VALUES (1, ?)"
    " ON CONFLICT (id) DO UPDATE SET probed_unix = excluded.probed_unix"
)
OPS = ("run_started", "run_finished", "fault_changed", "event", "probe")  # the metric's op label
_RUN_STARTED = (
    "INSERT INTO runs (id, started_unix, status, config) VALUES (?, ?, 'running', ?) ON CONFLICT (id) DO UPDATE SET"
    " started_unix = excluded.started_unix, ended_unix = NULL, status = 'running', config = excluded.config,"
    " report = NULL, score = NULL"
)
_RUN_FINISHED = "UPDATE runs SET ended_unix = ?, status = ?, report = ?, score = ? WHERE id = ?"
_FAULT_CHANGED = (
    "INSERT INTO faults (run_id, id, action, outcome, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, id)"
    " DO UPDATE SET action = excluded.action, outcome = excluded.outcome, data = excluded.data"
)
# An event id the run already has is a replay of the same event: the first copy stays.
_EVENT = "INSERT OR IGNORE INTO events (run_id, id, t, kind, data) VALUES (?, ?, ?, ?, ?)"
# Rows are only ever appended (seq = max + 1) and trimmed from the oldest, so seq has no gaps: one index probe.
_TRIM_EVENTS = "DELETE FROM events WHERE seq <= (SELECT max(seq) FROM events) - ?"
_END_STATUSES: tuple[RunStatus, ...] = ("finished", "aborted", "failed")


class Storage:
    """History of runs, their faults and their events.

    Write calls only enqueue, and never raise: a write made before open() or after close(), or one that fails,
    is logged and counted in ``write_errors`` (and by operation in ``errors_by_op``). Whether what a caller
    wrote since :meth:`mark` is committed: :meth:`flush`, then :meth:`failed_since`. The current health:
    :attr:`problem` (what is known without writing) and :meth:`probe` (a write, now).
    """

    def __init__(
        self, path: str | Path, *, max_events: int = 100_000, wall_clock: Callable[[], float] = unix_time
    ) -> None:
        if max_events < 0:
            raise ValueError(f"max_events must be >= 0, got {max_events}")
        self.path = Path(path)
        self.max_events = max_events
        self.aborted_at_open: list[str] = []
        self.reads = HistoryReader(self.path)
        self._writer = StorageWriter(self.path, OPS)
        self._watch: FileWatch | None = None  # from open() on
        self._wall_clock = wall_clock
        self._state = "new"  # → opening → open → closed
        self._lock: int | None = None  # the storage path's lock, held from open() to close()
        self._not_restored: str | None = None  # why the last write-back of a deleted file failed

    async def open(self) -> None:
        """Create or migrate the file, abort what a dead process left running, then start the writer."""
        if self._state != "new":
            raise RuntimeError(f"storage {self.path} is {self._state}: open() runs once")
        self._state = "opening"
        try:
            # The lock first: a second daemon on this file stops here, before it marks the first one's run aborted.
            self._lock = await asyncio.to_thread(hold_lock, self.path)
            # Recovery runs before the writer starts: nothing this process enqueues is taken for a leftover.
            opened = await asyncio.to_thread(open_file, self.path, self._wall_clock)
        except (OSError, sqlite3.Error) as exc:
            self._unlock()
            self._state = "new"
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ChaosdError(f"cannot open the history at {self.path} (storage.path): {why}") from exc
        except BaseException:
            self._unlock()
            self._state = "new"
            raise
        self.aborted_at_open = opened.aborted
        self._watch = FileWatch(self.path, opened.identity)
        if self._state != "opening":  # close() came first
            opened.db.close()
            return
        self._writer.start(opened.db)
        self._state = "open"
        if self.aborted_at_open:
            log.warning("%s: runs left unfinished, now aborted: %s", self.path, ", ".join(self.aborted_at_open))

    async def close(self) -> None:
        """Write everything queued, stop the writer and close the file, then let the storage path go. Idempotent."""
        self._state = "closed"
        await self._writer.stop()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    @property
    def write_errors(self) -> int:
        return self._writer.write_errors

    @property
    def errors_by_op(self) -> dict[str, int]:
        return self._writer.errors_by_op

    @property
    def alive(self) -> bool:
        """Open, and its writer thread still running (it is what makes writes land)."""
        return self._state == "open" and self._writer.running

    @property
    def problem(self) -> str | None:
        """Why the storage is not healthy now, as far as is known without writing; None when it is."""
        if self._state != "open":
            return None if self._state == "closed" else f"storage is {self._state}"
        if not self._writer.running:
            return "the writer has stopped; history is no longer recorded"
        moved = None if self._watch is None else self._watch.moved()
        if moved is not None:
            if self._not_restored is not None and self._watch is not None and self._watch.gone():
                return f"{self.path} was deleted while open and cannot be written back: {self._not_restored}"
            return moved
        if self._writer.failing is not None:
            return f"writes fail: {self._writer.failing}"
        return None

    @property
    def unproven_s(self) -> float:
        """Seconds since a write last committed: how stale "healthy" is without a probe."""
        return self._writer.unproven_s

    def mark(self) -> int:
        """The number of writes submitted so far: what :meth:`failed_since` compares with."""
        return self._writer.mark()

    def failed_since(self, mark: int) -> bool:
        """A write submitted after ``mark`` failed (call after :meth:`flush`: it has been tried by then)."""
        return self._writer.failed_since(mark)

    async def flush(self) -> None:
        """Wait until everything enqueued so far is written (nothing to wait for unless the writer runs)."""
        await self._writer.flush()

    async def probe(self) -> str | None:
        """Write one row now, through the writer, in order after what is queued: None if it committed,
        else why not. What readiness asks: the storage's health now, not its errors since the start. A file
        deleted while open is written back first (:meth:`_write_back`)."""
        if self.alive and self._watch is not None and self._watch.gone():
            await self._write_back(self._watch)
        if (problem := self.problem) is not None and self._writer.failing is None:
            return problem  # not open, writer gone, or the file moved: a write would not tell more
        mark = self.mark()
        if (writer := self._open_writer("probe")) is not None:
            writer.submit("probe", _PROBE, lambda: (self._wall_clock(),))
        await self.flush()
        if self.failed_since(mark):
            return self.problem or "the probe write failed"
        return self.problem

    def run_started(self, run_id: str, started_unix: float, config: Mapping[str, object]) -> None:
        if (writer := self._open_writer("run_started")) is not None:
            writer.submit("run_started", _RUN_STARTED, lambda: (run_id, started_unix, dumps(config)))

    def run_finished(self, run_id: str, ended_unix: float, status: RunStatus, report: ReportView | None) -> None:
        def values() -> Args:
            if status not in _END_STATUSES:
                raise ValueError(f"run status {status!r} is not one of {', '.join(_END_STATUSES)}")
            score = None if report is None else report.get("score")
            return (ended_unix, status, dumps(report), dumps(score), run_id)

        if (writer := self._open_writer("run_finished")) is not None:
            writer.submit("run_finished", _RUN_FINISHED, values, must_match=True)

    def fault_changed(self, run_id: str, fault: FaultView) -> None:
        def values() -> Args:
            return (run_id, fault["id"], fault.get("action"), fault.get("outcome"), dumps(fault))

        if (writer := self._open_writer("fault_changed")) is not None:
            writer.submit("fault_changed", _FAULT_CHANGED, values)

    def event(self, run_id: str, event_id: int, t: float, kind: EventKind, data: Mapping[str, object]) -> None:
        trim = (_TRIM_EVENTS, (self.max_events,))  # once per batch that adds events: the newest max_events stay
        if (writer := self._open_writer("event")) is not None:
            writer.submit("event", _EVENT, lambda: (run_id, event_id, t, kind, dumps(data)), then=trim)

    async def _write_back(self, watch: FileWatch) -> None:
        """The file was deleted while open: the history the writer holds open is copied back to the path (nothing
        committed is lost) and written from then on; writes are refused meanwhile (SQLite's own rule)."""
        identity: list[tuple[int, int]] = []

        def reopen(db: sqlite3.Connection) -> sqlite3.Connection:
            if not watch.gone():
                return db  # written back by a check just before this one (or another file is there now)
            restored, ident = restore_file(self.path, db)
            identity.append(ident)
            return restored

        self._not_restored = await self._writer.swap(reopen)
        if identity:
            watch.adopt(identity[0])
            log.warning("storage: %s was written back from the open file; recording goes on", self.path)

    def _open_writer(self, what: str) -> StorageWriter | None:
        """The writer while storage is open; otherwise the write ``what`` is refused (counted, in its order)."""
        if self._state != "open":
            self._writer.refuse(what, f"storage is {self._state}")
            return None
        return self._writer

    # The reads, by the names the API has always called (the same as ``reads``'s). Each raises Unavailable (503)
    # when the path does not name the history being recorded (deleted, replaced) or cannot be read.
    def _readable(self) -> HistoryReader:
        moved = None if self._state != "open" or self._watch is None else self._watch.moved()
        if moved is not None:
            raise Unavailable("storage", f"the history cannot be read: {moved}")
        return self.reads

    async def runs(self, limit: int = 100) -> list[RunSummary]:
        """Newest first."""
        return await self._readable().runs(limit)

    async def run(self, run_id: str, faults_after: int = 0, faults_limit: int = 1000) -> RunBody | None:
        """A run with one page of its faults: ids above ``faults_after``, at most ``faults_limit`` of them."""
        return await self._readable().run(run_id, faults_after, faults_limit)

    async def faults(self, run_id: str | None = None, *, after: int = 0, limit: int = -1) -> list[FaultView]:
        """One run's faults by id (those above ``after``, ``limit`` at most), or every run's, oldest run first."""
        return await self._readable().faults(run_id, after=after, limit=limit)

    async def fault(self, run_id: str, fault_id: int) -> FaultView | None:
        return await self._readable().fault(run_id, fault_id)

    async def events(self, run_id: str, after_id: int = 0, limit: int = 1000) -> list[EventView]:
        return await self._readable().events(run_id, after_id, limit)
