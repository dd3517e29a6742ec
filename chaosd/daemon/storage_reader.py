"""Reading the history back: runs newest first, a run with a page of its faults, a fault, a run's events. Each read
opens its own read-only connection in a worker thread; a file that cannot be read is :class:`Unavailable` (503)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from chaosd.core.errors import Unavailable
from chaosd.daemon.storage_file import loads
from chaosd.views import EventKind, EventView, FaultView, RunBody, RunStatus, RunSummary

__all__ = ["HistoryReader"]

_T = TypeVar("_T")
_R = TypeVar("_R")
# The rows the reads select, column by column (chaosd.daemon.storage_file's schema: the JSON columns are TEXT).
_SummaryRow = tuple[str, float, float | None, RunStatus, str | None]  # id, started, ended, status, score
_RunRow = tuple[str, float, float | None, RunStatus, str, str | None]  # id, started, ended, status, config, report
_FaultRow = tuple[str, str]  # run_id, data
_EventRow = tuple[int, float, EventKind, str]  # id, t, kind, data
_FAULTS = "SELECT f.run_id, f.data FROM faults f LEFT JOIN runs r ON r.id = f.run_id"


def _summary(r: _SummaryRow) -> RunSummary:
    return {"id": r[0], "started_unix": r[1], "ended_unix": r[2], "status": r[3], "score": loads(r[4])}


def _run(r: _RunRow) -> RunBody:
    faults: list[FaultView] = []  # filled in by the caller
    return {
        "id": r[0],
        "started_unix": r[1],
        "ended_unix": r[2],
        "status": r[3],
        "config": loads(r[4]),
        "report": loads(r[5]),
        "faults": faults,
        "faults_next": None,
    }


def _fault(r: _FaultRow) -> FaultView:
    fault: FaultView = loads(r[1])
    fault["run_id"] = r[0]
    return fault


def _event(r: _EventRow) -> EventView:
    return {"id": r[0], "t": r[1], "kind": r[2], "data": loads(r[3])}


class HistoryReader:
    """Answers questions about the stored runs, their faults and their events, from the file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def runs(self, limit: int = 100) -> list[RunSummary]:
        """Newest first."""
        sql = "SELECT id, started_unix, ended_unix, status, score FROM runs"
        sql += " ORDER BY started_unix DESC, rowid DESC LIMIT ?"
        return await self._read(sql, (limit,), _summary)

    async def run(self, run_id: str, faults_after: int = 0, faults_limit: int = 1000) -> RunBody | None:
        """A run with one page of its faults: ids above ``faults_after``, at most ``faults_limit`` of them."""
        sql = "SELECT id, started_unix, ended_unix, status, config, report FROM runs WHERE id = ?"
        found = await self._read(sql, (run_id,), _run)
        if not found:
            return None
        page = await self.faults(run_id, after=faults_after, limit=faults_limit + 1)
        found[0]["faults"] = page[:faults_limit]
        found[0]["faults_next"] = page[faults_limit - 1]["id"] if len(page) > faults_limit else None
        return found[0]

    async def faults(self, run_id: str | None = None, *, after: int = 0, limit: int = -1) -> list[FaultView]:
        """One run's faults by id (those above ``after``, ``limit`` at most), or every run's, oldest run first."""
        if run_id is None:
            return await self._read(f"{_FAULTS} ORDER BY r.started_unix, f.run_id, f.id", (), _fault)
        sql = f"{_FAULTS} WHERE f.run_id = ? AND f.id > ? ORDER BY f.id LIMIT ?"
        return await self._read(sql, (run_id, after, limit), _fault)

    async def fault(self, run_id: str, fault_id: int) -> FaultView | None:
        found = await self._read(f"{_FAULTS} WHERE f.run_id = ? AND f.id = ?", (run_id, fault_id), _fault)
        return found[0] if found else None

    async def events(self, run_id: str, after_id: int = 0, limit: int = 1000) -> list[EventView]:
        sql = "SELECT id, t, kind, data FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?"
        return await self._read(sql, (run_id, after_id, limit), _event)

    async def _read(self, sql: str, args: tuple[object, ...], decode: Callable[[_R], _T]) -> list[_T]:
        """Rows decoded in the worker thread, off the event loop."""

        def read() -> list[_T]:
            # Waits (busy timeout) while the writer commits: with a rollback journal, a commit locks readers out.
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5.0)) as db:
                return [decode(row) for row in db.execute(sql, args)]

        try:
            return await asyncio.to_thread(read)
        except (sqlite3.Error, OSError) as exc:  # gone, unreadable, not a database, or not chaosd's
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise Unavailable("storage", f"the history at {self.path} cannot be read: {why}") from None
