"""The history's SQLite file: where one can be made, its schema and migrations, the JSON columns, the recovery of
runs a dead process left open, and whether the path still names the file that is open."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaosd.core.errors import ChaosdError
from chaosd.views import FaultView

__all__ = ["FileWatch", "OpenedFile", "dumps", "loads", "open_file", "restore_file", "transaction", "unwritable"]

# The storage's logger, one name for all its parts: logging configurations select it by name.
log = logging.getLogger("chaosd.daemon.storage")

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


def dumps(value: object) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str | None) -> Any:  # JSON in: the view it was written from (a score, a report, settings)
    return None if text is None else json.loads(text)


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


@dataclass(frozen=True, slots=True)
class OpenedFile:
    db: sqlite3.Connection  # for the writer thread, from then on its only user
    identity: tuple[int, int]  # (st_dev, st_ino) of the file opened
    aborted: list[str]  # the runs a dead process left unfinished, aborted now


def hold_lock(path: Path) -> int:
    """An exclusive OS lock on ``path``'s lock file (``<path>.lock``, beside it), held through the returned file
    descriptor until it is closed or the process ends: one daemon per storage path. The holder's PID is written in
    it, so a second daemon can name it. Blocking (briefly). Raises ChaosdError when another process holds it."""
    if (problem := unwritable(path)) is not None:
        raise OSError(errno.ENOTDIR, problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise ChaosdError(
            f"the history at {path} (storage.path) is in use by another chaosd (PID {holder}): one daemon per "
            "storage path; stop it, or give this one another storage.path"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def open_file(path: Path, wall_clock: Callable[[], float]) -> OpenedFile:
    """Create or migrate the file at ``path``, then abort what a dead process left running. Blocking."""
    if (problem := unwritable(path)) is not None:
        raise OSError(errno.ENOTDIR, problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = _connect(path)
    try:
        st = os.stat(path)
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version > len(_MIGRATIONS):
            raise ChaosdError(f"{path}: history schema v{version} is newer than this chaosd knows")
        for v in range(version, len(_MIGRATIONS)):
            db.executescript(f"BEGIN; {_MIGRATIONS[v]} PRAGMA user_version = {v + 1}; COMMIT;")
        return OpenedFile(db, (st.st_dev, st.st_ino), _recover(db, wall_clock()))
    except BaseException:
        db.close()
        raise


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # A rollback journal maps nothing into memory: a full, read-only or vanished file is an error
        # that a write returns, never a SIGBUS (WAL's -shm index is mmapped). A file left in WAL mode by
        # an older chaosd is converted here. Cost: docs/storage.md.
        db.execute("PRAGMA journal_mode = TRUNCATE")
        db.execute("PRAGMA synchronous = NORMAL")  # a killed process loses no committed write
        db.execute("PRAGMA busy_timeout = 5000")
    except BaseException:
        db.close()
        raise
    return db


def restore_file(path: Path, db: sqlite3.Connection) -> tuple[sqlite3.Connection, tuple[int, int]]:
    """Write the history ``db`` holds open back at ``path``, whose file was deleted: copied whole (SQLite's backup)
    to a file beside it, then linked in only while the path is still free, never over a file put there meanwhile
    (FileExistsError). The connection to the copy, and its identity. Blocking: on the writer's thread."""
    copy = path.with_name(path.name + ".restoring")
    if (problem := unwritable(copy)) is not None:
        raise OSError(errno.EACCES, problem)
    path.parent.mkdir(parents=True, exist_ok=True)  # its whole folder may have been deleted
    copy.unlink(missing_ok=True)  # a copy left by a process killed mid-way
    try:
        with contextlib.closing(sqlite3.connect(copy)) as target:
            db.backup(target)  # committed and synced (journal DELETE, synchronous FULL) when it returns
        st = os.stat(copy)  # the identity of what is linked in, whatever the path names later
        os.link(copy, path)  # appears whole or not at all
    finally:
        copy.unlink(missing_ok=True)
    return _connect(path), (st.st_dev, st.st_ino)


def _recover(db: sqlite3.Connection, now: float) -> list[str]:
    """A run with no end was cut short by a dead process: abort it, and the faults it left in play."""
    with transaction(db):
        unfinished = "SELECT id FROM runs WHERE ended_unix IS NULL ORDER BY started_unix, rowid"
        run_ids: list[str] = [r for (r,) in db.execute(unfinished)]
        for run_id in run_ids:
            db.execute("UPDATE runs SET status = 'aborted', ended_unix = ? WHERE id = ?", (now, run_id))
            sql = "SELECT id, data FROM faults WHERE run_id = ? AND outcome IN ('active', 'recovering')"
            for fault_id, data in db.execute(sql, (run_id,)).fetchall():
                fault: FaultView = loads(data)
                fault["outcome"] = "aborted"
                if fault.get("reverted_by") is None:
                    fault["reverted_by"] = "aborted"
                update = "UPDATE faults SET outcome = 'aborted', data = ? WHERE run_id = ? AND id = ?"
                db.execute(update, (dumps(fault), run_id, fault_id))
    return run_ids


class FileWatch:
    """Whether the path still names the file opened there: one deleted or replaced while open is reported (and
    logged once), since SQLite refuses writes to it from then on (SQLITE_READONLY_DBMOVED)."""

    def __init__(self, path: Path, identity: tuple[int, int]) -> None:
        self.path = path
        self._identity = identity
        self._logged: set[str] = set()  # problems already logged, once each

    def gone(self) -> bool:
        """Nothing is at the path (deleted): the storage may write the open file back there."""
        return not os.path.lexists(self.path)

    def adopt(self, identity: tuple[int, int]) -> None:
        """The path names this file now (written back): watched from here on, and a new problem logged again."""
        self._identity = identity
        self._logged.clear()

    def moved(self) -> str | None:
        """Why the path no longer names the open file (deleted, replaced, or not examinable); None while it does."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            why = f"{self.path} was deleted while open; written back from the open file at the next check"
        except OSError as exc:
            why = f"{self.path} cannot be examined: {exc.strerror or exc}"
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return None
            why = f"{self.path} was replaced by another file while open (restart chaosd)"
        if why not in self._logged:
            self._logged.add(why)
            log.error("storage: %s", why)
        return why
