"""Run history that survives restarts: runs, faults and events in one SQLite file (rollback journal).

Writes are queued and applied in order, in batches, by one writer thread; reads run in worker threads.
The journal is TRUNCATE, not WAL: WAL maps its index (the -shm file) into memory, and a read-only, full
or vanished file then kills the process with SIGBUS. Health is the storage's current state (the last
write, a probe write, and whether the path still names the file that is open): see docs/storage.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from chaosd.core.clock import unix_time, wall_time
from chaosd.core.errors import ChaosdError
from chaosd.views import EventKind, EventView, FaultView, ReportView, RunBody, RunStatus, RunSummary

__all__ = ["Storage", "unwritable"]

log = logging.getLogger("chaosd.daemon.storage")
_T = TypeVar("_T")
_R = TypeVar("_R")
_Args = tuple[object, ...]  # a statement's parameters
# The rows the reads select, column by column (the schema below: the JSON columns are TEXT).
_SummaryRow = tuple[str, float, float | None, RunStatus, str | None]  # id, started, ended, status, score
_RunRow = tuple[str, float, float | None, RunStatus, str, str | None]  # id, started, ended, status, config, report
_FaultRow = tuple[str, str]  # run_id, data
_EventRow = tuple[int, float, EventKind, str]  # id, t, kind, data

# _MIGRATIONS[v] takes the schema from PRAGMA user_version v to v + 1.
_MIGRATIONS = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY, started_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
        config TEXT NOT NULL, report TEXT, score TEXT
    );
    CREATE INDEX runs_by_start ON runs (started_at);
    CREATE TABLE faults (
        run_id TEXT NOT NULL, id INTEGER NOT NULL, action TEXT, outcome TEXT, data TEXT NOT NULL,
        PRIMARY KEY (run_id, id)
    );
    -- seq is the arrival order across all runs: trimming keeps the newest rows overall.
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, id INTEGER NOT NULL, t REAL NOT NULL,
        kind TEXT NOT NULL, data TEXT NOT NULL, UNIQUE (run_id, id)
    );
    """,
    # One vocabulary of time: wall-clock instants end in _unix (run-clock ones in _at).
    """
    ALTER TABLE runs RENAME COLUMN started_at TO started_unix;
    ALTER TABLE runs RENAME COLUMN ended_at TO ended_unix;
    """,
    # One row a probe rewrites: a write that proves the storage takes writes now (readiness).
    """
    CREATE TABLE health (id INTEGER PRIMARY KEY CHECK (id = 1), probed_unix REAL NOT NULL);
    """,
)
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
_FAULTS = "SELECT f.run_id, f.data FROM faults f LEFT JOIN runs r ON r.id = f.run_id"
_END_STATUSES: tuple[RunStatus, ...] = ("finished", "aborted", "failed")
_MAX_BATCH = 5_000


def unwritable(path: Path) -> str | None:
    """Why a file could not be written at ``path`` (checked without creating anything), or None."""
    if path.is_dir():
        return "it is a directory"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable"
    return None


def _dumps(value: object) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _loads(text: str | None) -> Any:  # JSON in: the view it was written from (a score, a report, settings)
    return None if text is None else json.loads(text)


def _summary(r: _SummaryRow) -> RunSummary:
    return {"id": r[0], "started_unix": r[1], "ended_unix": r[2], "status": r[3], "score": _loads(r[4])}


def _run(r: _RunRow) -> RunBody:
    faults: list[FaultView] = []  # filled in by the caller
    return {
        "id": r[0],
        "started_unix": r[1],
        "ended_unix": r[2],
        "status": r[3],
        "config": _loads(r[4]),
        "report": _loads(r[5]),
        "faults": faults,
        "faults_next": None,
    }


def _fault(r: _FaultRow) -> FaultView:
    fault: FaultView = _loads(r[1])
    fault["run_id"] = r[0]
    return fault


def _event(r: _EventRow) -> EventView:
    return {"id": r[0], "t": r[1], "kind": r[2], "data": _loads(r[3])}


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


@dataclass(slots=True)
class _Write:
    what: str
    sql: str
    args: _Args
    must_match: bool = False  # an UPDATE that changes no row is an error (finishing an unknown run)
    seq: int = 0  # its place in the order of writes (see Storage.mark)


@dataclass(slots=True)
class _Flush:
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[None]

    def settle(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if not self.done.done():  # not if the waiter was cancelled
            self.done.set_result(None)


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
        self.write_errors = 0
        self.errors_by_op: dict[str, int] = dict.fromkeys(OPS, 0)
        self._seq = 0  # writes submitted so far (each gets the next number)
        self._failed_seq = 0  # the number of the newest write that failed
        self._failing: str | None = None  # why the newest write failed; None once one succeeds
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the writer has open
        self._logged: set[str] = set()  # health problems already logged (once each, until healthy again)
        self._failing_logged = False
        self._ok_at = wall_time()  # when a write last committed
        self._wall_clock = wall_clock
        self._queue: queue.SimpleQueue[_Write | _Flush | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # write_errors is counted on the loop's thread and on the writer's
        self._writer: threading.Thread | None = None
        self._state = "new"  # → opening → open → closed

    async def open(self) -> None:
        """Create or migrate the file, abort what a dead process left running, then start the writer."""
        if self._state != "new":
            raise RuntimeError(f"storage {self.path} is {self._state}: open() runs once")
        self._state = "opening"
        try:
            # Recovery runs before the writer starts: nothing this process enqueues is taken for a leftover.
            db, self.aborted_at_open = await asyncio.to_thread(self._prepare)
        except (OSError, sqlite3.Error) as exc:
            self._state = "new"
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ChaosdError(f"cannot open the history at {self.path} (storage.path): {why}") from exc
        except BaseException:
            self._state = "new"
            raise
        if self._state != "opening":  # close() came first
            db.close()
            return
        # A daemon thread, so a process that never calls close() can still exit; WAL keeps the file whole.
        self._writer = threading.Thread(target=self._write_loop, args=(db,), name="chaosd-storage", daemon=True)
        self._writer.start()
        self._state = "open"
        if self.aborted_at_open:
            log.warning("%s: runs left unfinished, now aborted: %s", self.path, ", ".join(self.aborted_at_open))

    async def close(self) -> None:
        """Write everything queued, stop the writer and close the file. Idempotent."""
        writer, self._writer, self._state = self._writer, None, "closed"
        if writer is not None:
            self._queue.put(None)
            await asyncio.to_thread(writer.join)

    @property
    def alive(self) -> bool:
        """Open, and its writer thread still running (it is what makes writes land)."""
        return self._state == "open" and self._writer is not None and self._writer.is_alive()

    @property
    def problem(self) -> str | None:
        """Why the storage is not healthy now, as far as is known without writing; None when it is."""
        if self._state != "open":
            return None if self._state == "closed" else f"storage is {self._state}"
        if self._writer is None or not self._writer.is_alive():
            return "the writer has stopped; history is no longer recorded"
        moved = self._moved()
        if moved is not None:
            return moved
        if self._failing is not None:
            return f"writes fail: {self._failing}"
        return None

    def _moved(self) -> str | None:
        """The path no longer names the file the writer has open (deleted, or replaced by another)."""
        if self._identity is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            why = f"{self.path} was deleted while open; nothing written now is kept (restart chaosd)"
        except OSError as exc:
            why = f"{self.path} cannot be examined: {exc.strerror or exc}"
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return None
            why = f"{self.path} was replaced by another file while open (restart chaosd)"
        self._log_once(why)
        return why

    def _log_once(self, why: str) -> None:
        if why not in self._logged:
            self._logged.add(why)
            log.error("storage: %s", why)

    @property
    def unproven_s(self) -> float:
        """Seconds since a write last committed: how stale "healthy" is without a probe."""
        return wall_time() - self._ok_at

    def mark(self) -> int:
        """The number of writes submitted so far: what :meth:`failed_since` compares with."""
        return self._seq

    def failed_since(self, mark: int) -> bool:
        """A write submitted after ``mark`` failed (call after :meth:`flush`: it has been tried by then)."""
        return self._failed_seq > mark

    async def probe(self) -> str | None:
        """Write one row now, through the writer, in order after what is queued: None if it committed,
        else why not. What readiness asks: the storage's health now, not its errors since the start."""
        if (problem := self.problem) is not None and self._failing is None:
            return problem  # not open, writer gone, or the file moved: a write would not tell more
        mark = self.mark()
        self._submit("probe", _PROBE, lambda: (self._wall_clock(),))
        await self.flush()
        if self.failed_since(mark):
            return self.problem or "the probe write failed"
        return self.problem

    async def flush(self) -> None:
        """Wait until everything enqueued so far is written (nothing to wait for unless the writer runs)."""
        if self._writer is not None and self._writer.is_alive():
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            self._queue.put(_Flush(loop, done))
            await done

    def run_started(self, run_id: str, started_unix: float, config: Mapping[str, object]) -> None:
        self._submit("run_started", _RUN_STARTED, lambda: (run_id, started_unix, _dumps(config)))

    def run_finished(self, run_id: str, ended_unix: float, status: RunStatus, report: ReportView | None) -> None:
        def values() -> _Args:
            if status not in _END_STATUSES:
                raise ValueError(f"run status {status!r} is not one of {', '.join(_END_STATUSES)}")
            score = None if report is None else report.get("score")
            return (ended_unix, status, _dumps(report), _dumps(score), run_id)

        self._submit("run_finished", _RUN_FINISHED, values, must_match=True)

    def fault_changed(self, run_id: str, fault: FaultView) -> None:
        def values() -> _Args:
            return (run_id, fault["id"], fault.get("action"), fault.get("outcome"), _dumps(fault))

        self._submit("fault_changed", _FAULT_CHANGED, values)

    def event(self, run_id: str, event_id: int, t: float, kind: EventKind, data: Mapping[str, object]) -> None:
        self._submit("event", _EVENT, lambda: (run_id, event_id, t, kind, _dumps(data)))

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

    def _submit(self, what: str, sql: str, values: Callable[[], _Args], *, must_match: bool = False) -> None:
        self._seq += 1
        seq = self._seq
        if self._state != "open":
            self._count_error(what, seq, f"storage is {self._state}", exc=False)
            return
        try:
            # Serialised now, on the caller's thread: the row holds the value as it was at the call.
            args = values()
        except Exception:
            self._count_error(what, seq, "its values cannot be stored", caller=True)
            return
        self._queue.put(_Write(what, sql, args, must_match, seq))

    def _count_error(
        self, what: str, seq: int, why: str, *, exc: bool = True, caller: bool = False, failing: bool = False
    ) -> None:
        """``caller``: the caller's mistake (bad values), not the storage's; ``failing``: SQLite itself failed."""
        with self._lock:
            self.write_errors += 1
            op = what if what in self.errors_by_op else "other"
            self.errors_by_op[op] = self.errors_by_op.get(op, 0) + 1
            self._failed_seq = max(self._failed_seq, seq)
            if failing:
                self._failing = why
        if failing and self._failing_logged:
            return  # a storage that keeps failing is logged once, then counted (and shown by /readyz)
        self._failing_logged = failing
        log.error("%s: write not stored: %s (%s)", self.path, what, why, exc_info=exc)

    def _prepare(self) -> tuple[sqlite3.Connection, list[str]]:
        if (problem := unwritable(self.path)) is not None:
            raise OSError(errno.ENOTDIR, problem)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Handed over to the writer thread, which is from then on its only user.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            # A rollback journal maps nothing into memory: a full, read-only or vanished file is an error
            # that a write returns, never a SIGBUS (WAL's -shm index is mmapped). A file left in WAL mode by
            # an older chaosd is converted here. Cost: docs/storage.md.
            db.execute("PRAGMA journal_mode = TRUNCATE")
            db.execute("PRAGMA synchronous = NORMAL")  # a killed process loses no committed write
            db.execute("PRAGMA busy_timeout = 5000")
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version > len(_MIGRATIONS):
                raise ChaosdError(f"{self.path}: history schema v{version} is newer than this chaosd knows")
            for v in range(version, len(_MIGRATIONS)):
                db.executescript(f"BEGIN; {_MIGRATIONS[v]} PRAGMA user_version = {v + 1}; COMMIT;")
            return db, self._recover(db)
        except BaseException:
            db.close()
            raise

    def _recover(self, db: sqlite3.Connection) -> list[str]:
        """A run with no end was cut short by a dead process: abort it, and the faults it left in play."""
        now = self._wall_clock()
        with _transaction(db):
            unfinished = "SELECT id FROM runs WHERE ended_unix IS NULL ORDER BY started_unix, rowid"
            run_ids: list[str] = [r for (r,) in db.execute(unfinished)]
            for run_id in run_ids:
                db.execute("UPDATE runs SET status = 'aborted', ended_unix = ? WHERE id = ?", (now, run_id))
                sql = "SELECT id, data FROM faults WHERE run_id = ? AND outcome IN ('active', 'recovering')"
                for fault_id, data in db.execute(sql, (run_id,)).fetchall():
                    fault: FaultView = _loads(data)
                    fault["outcome"] = "aborted"
                    if fault.get("reverted_by") is None:
                        fault["reverted_by"] = "aborted"
                    update = "UPDATE faults SET outcome = 'aborted', data = ? WHERE run_id = ? AND id = ?"
                    db.execute(update, (_dumps(fault), run_id, fault_id))
        return run_ids

    def _write_loop(self, db: sqlite3.Connection) -> None:
        try:
            while True:
                batch = [self._queue.get()]
                with contextlib.suppress(queue.Empty):
                    while len(batch) < _MAX_BATCH:
                        batch.append(self._queue.get_nowait())
                if writes := [item for item in batch if isinstance(item, _Write)]:
                    self._commit(db, writes)
                for item in batch:
                    if isinstance(item, _Flush):
                        item.settle()
                if None in batch:
                    return
        finally:
            db.close()
            self._release_waiters()

    def _release_waiters(self) -> None:
        """The writer is gone: whoever waits for a flush is told now, and what is left is counted lost."""
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if isinstance(item, _Flush):
                    item.settle()
                elif isinstance(item, _Write):
                    self._count_error(item.what, item.seq, "the writer stopped", exc=False)

    def _commit(self, db: sqlite3.Connection, writes: list[_Write]) -> None:
        try:
            self._apply(db, writes)
        except Exception as exc:
            if len(writes) == 1:
                self._failed(writes[0], exc)
                return
            # One bad write must not cost the rest of its batch: replay them, one transaction each.
            for write in writes:
                try:
                    self._apply(db, [write])
                except Exception as one:
                    self._failed(write, one)
                else:
                    self._succeeded()
        else:
            self._succeeded()

    def _failed(self, write: _Write, exc: Exception) -> None:
        storage = isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError | OSError)
        if isinstance(exc, sqlite3.IntegrityError):
            storage = False  # the write's own mistake, not the storage's
        why = str(exc) or type(exc).__name__
        self._count_error(write.what, write.seq, why, exc=not storage, failing=storage)

    def _succeeded(self) -> None:
        self._ok_at = wall_time()
        if self._failing is not None:
            with self._lock:
                self._failing = None
            self._failing_logged = False
            log.warning("%s: writes succeed again", self.path)

    def _apply(self, db: sqlite3.Connection, writes: list[_Write]) -> None:
        with _transaction(db):
            for w in writes:
                if db.execute(w.sql, w.args).rowcount == 0 and w.must_match:
                    raise LookupError(f"{w.what}: no run {w.args[-1]!r}")
            if any(w.sql == _EVENT for w in writes):
                db.execute(_TRIM_EVENTS, (self.max_events,))

    async def _read(self, sql: str, args: _Args, decode: Callable[[_R], _T]) -> list[_T]:
        """Each read opens its own read-only connection in a worker thread and decodes the rows there."""

        def read() -> list[_T]:
            # Waits (busy timeout) while the writer commits: with a rollback journal, a commit locks readers out.
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5.0)) as db:
                return [decode(row) for row in db.execute(sql, args)]

        return await asyncio.to_thread(read)
