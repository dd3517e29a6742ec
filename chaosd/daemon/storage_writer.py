"""The history's one writer thread: writes applied in the order submitted, in batches, one transaction each; a write
that fails is counted (a storage that keeps failing is logged once), never raised to the caller."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chaosd.core.clock import wall_time
from chaosd.daemon.storage_file import log, transaction

__all__ = ["Args", "StorageWriter"]

Args = tuple[object, ...]  # a statement's parameters
_MAX_BATCH = 5_000


@dataclass(slots=True)
class _Write:
    what: str
    sql: str
    args: Args
    must_match: bool = False  # an UPDATE that changes no row is an error (finishing an unknown run)
    then: tuple[str, Args] | None = None  # run once after the batch's writes, in its transaction (a trim)
    seq: int = 0  # its place in the order of writes (see StorageWriter.mark)


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


@dataclass(slots=True)
class _Swap:
    """Replace the connection (the file written back), in order after the writes before it."""

    reopen: Callable[[sqlite3.Connection], sqlite3.Connection]
    flush: _Flush
    error: str | None = None


class StorageWriter:
    """Applies writes on one thread, in the order submitted; counts those that fail, by operation.

    Whether what a caller wrote since :meth:`mark` is committed: :meth:`flush`, then :meth:`failed_since`.
    """

    def __init__(self, path: Path, ops: tuple[str, ...]) -> None:
        self.path = path  # named in log lines
        self.write_errors = 0
        self.errors_by_op: dict[str, int] = dict.fromkeys(ops, 0)
        self._seq = 0  # writes submitted so far (each gets the next number)
        self._failed_seq = 0  # the number of the newest write that failed
        self._failing: str | None = None  # why the newest write failed; None once one succeeds
        self._failing_logged = False
        self._ok_at = wall_time()  # when a write last committed
        self._queue: queue.SimpleQueue[_Write | _Flush | _Swap | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # write_errors is counted on the loop's thread and on the writer's
        self._thread: threading.Thread | None = None

    def start(self, db: sqlite3.Connection) -> None:
        """Start the thread that writes to ``db``, from now on its only user."""
        # A daemon thread, so a process that never calls close() can still exit; the journal keeps the file whole.
        self._thread = threading.Thread(target=self._loop, args=(db,), name="chaosd-storage", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Write everything queued, then stop the thread (which closes the file)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            await asyncio.to_thread(thread.join)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def failing(self) -> str | None:
        """Why the newest write failed for the storage's sake (SQLite, the disk); None once one commits."""
        return self._failing

    @property
    def unproven_s(self) -> float:
        """Seconds since a write last committed."""
        return wall_time() - self._ok_at

    def mark(self) -> int:
        """The number of writes submitted so far: what :meth:`failed_since` compares with."""
        return self._seq

    def failed_since(self, mark: int) -> bool:
        """A write submitted after ``mark`` failed (call after :meth:`flush`: it has been tried by then)."""
        return self._failed_seq > mark

    async def flush(self) -> None:
        """Wait until everything enqueued so far is written (nothing to wait for unless the thread runs)."""
        if self.running:
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            self._queue.put(_Flush(loop, done))
            await done

    async def swap(self, reopen: Callable[[sqlite3.Connection], sqlite3.Connection]) -> str | None:
        """On the writer's thread, after what is queued: ``reopen`` the file (it gets the connection, returns the
        one to use from then on; the old one is closed). None once done, else why not (the old one stays)."""
        if not self.running:
            return "the writer has stopped"
        loop = asyncio.get_running_loop()
        item = _Swap(reopen, _Flush(loop, loop.create_future()))
        self._queue.put(item)
        await item.flush.done
        return item.error

    def submit(
        self,
        what: str,
        sql: str,
        values: Callable[[], Args],
        *,
        must_match: bool = False,
        then: tuple[str, Args] | None = None,
    ) -> None:
        """Queue ``sql`` with the parameters ``values`` makes now, on the caller's thread."""
        self._seq += 1
        seq = self._seq
        try:
            # Serialised now: the row holds the value as it was at the call.
            args = values()
        except Exception:
            self._count_error(what, seq, "its values cannot be stored", caller=True)
            return
        self._queue.put(_Write(what, sql, args, must_match, then, seq))

    def refuse(self, what: str, why: str) -> None:
        """A write that cannot be queued: it takes its place in the order, and is counted as failed."""
        self._seq += 1
        self._count_error(what, self._seq, why, exc=False)

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

    def _loop(self, db: sqlite3.Connection) -> None:
        try:
            while True:
                batch = [self._queue.get()]
                with contextlib.suppress(queue.Empty):
                    while len(batch) < _MAX_BATCH and not isinstance(batch[-1], _Swap):  # a swap ends its batch
                        batch.append(self._queue.get_nowait())
                if writes := [item for item in batch if isinstance(item, _Write)]:
                    self._commit(db, writes)
                for item in batch:
                    if isinstance(item, _Swap):
                        db = self._swap(db, item)
                    elif isinstance(item, _Flush):
                        item.settle()
                if None in batch:
                    return
        finally:
            db.close()
            self._release_waiters()

    @staticmethod
    def _swap(db: sqlite3.Connection, swap: _Swap) -> sqlite3.Connection:
        try:
            new = swap.reopen(db)
        except (sqlite3.Error, OSError) as exc:
            swap.error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            new = db
        else:
            if new is not db:
                db.close()
        swap.flush.settle()
        return new

    def _release_waiters(self) -> None:
        """The thread is ending: whoever waits for a flush is told now, and what is left is counted lost."""
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if isinstance(item, _Flush):
                    item.settle()
                elif isinstance(item, _Swap):
                    item.error = "the writer stopped"
                    item.flush.settle()
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

    @staticmethod
    def _apply(db: sqlite3.Connection, writes: list[_Write]) -> None:
        with transaction(db):
            for w in writes:
                if db.execute(w.sql, w.args).rowcount == 0 and w.must_match:
                    raise LookupError(f"{w.what}: no run {w.args[-1]!r}")
            for sql, args in dict.fromkeys(w.then for w in writes if w.then is not None):
                db.execute(sql, args)
