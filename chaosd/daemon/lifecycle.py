"""The daemon's one live run, from start to stored end: its history opened, the run recorded, its events stored as
they happen, the experiment's task supervised, and at the end the report written and the run's end stored.

The composition root (``chaosd serve``) builds it; the HTTP application enters its two contexts in order
(:meth:`LiveRun.stored`, then :meth:`LiveRun.running`) and reads its state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from chaosd.config.redact import redacted_settings
from chaosd.config.settings import Settings
from chaosd.core.clock import unix_time
from chaosd.daemon.control import Controller
from chaosd.daemon.storage import Storage
from chaosd.events.log import Event
from chaosd.experiment.report import write_report_or_keep
from chaosd.faults import FaultRecord
from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import ReportView, RunStatus

__all__ = ["FinalReport", "LiveRun"]

log = logging.getLogger("chaosd")
SCORE_EVERY = 5.0  # clock seconds between the live score's events


@dataclass
class FinalReport:
    """The run's report once the pipeline has stopped cleanly (None until then)."""

    report: ReportView | None = None
    # Where the report went (daemon.report, or a fallback when that could not be written) and, when it was not
    # where asked, the one line saying so; the run's result is in the history either way.
    written: Path | None = None
    trouble: str | None = None


def _cause(exc: BaseException) -> str:
    """What went wrong, from inside the task groups that wrap it."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_cause(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


class LiveRun:
    """One run of the daemon's pipeline: ``stop`` ends it; ``final`` holds its report once it has stopped."""

    def __init__(self, settings: Settings, controller: Controller, run_id: str) -> None:
        self.settings = settings
        self.controller = controller
        self.run_id = run_id
        self.started = unix_time()
        self.stop = asyncio.Event()
        self.final = FinalReport()
        self._storage: Storage | None = None

    @asynccontextmanager
    async def stored(self) -> AsyncIterator[Storage]:
        """The run history, open for the run's life; a run an earlier daemon left unfinished is marked aborted."""
        storage = Storage(self.settings.storage.path)
        await storage.open()
        for run_id in storage.aborted_at_open:
            log.warning("run %s did not end cleanly: marked aborted, with its active faults", run_id)
        self._storage = storage
        try:
            yield storage
        finally:
            await storage.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The pipeline, from its stages' setup to their teardown, inside :meth:`stored`.

        The stages' setup runs first, before the daemon serves or stores a run: one that fails stops the start,
        named, and leaves nothing behind; their teardown runs last, after the pipeline stopped.
        """
        async with self.controller.exp.pipeline.lifespan(), self._supervised():
            yield

    @asynccontextmanager
    async def _supervised(self) -> AsyncIterator[None]:
        """The experiment's task for the run's life, its events stored; at its end the report written and the
        run's end stored."""
        storage = self._storage
        assert storage is not None, "running() is entered inside stored()"
        storage.run_started(self.run_id, self.started, redacted_settings(self.settings))
        await storage.flush()  # the run is in the history before the first request can ask for it
        self._record_events(storage)
        task = asyncio.create_task(self.controller.exp.run(None, self.stop), name="experiment")
        task.add_done_callback(self._ended)
        yield
        await self.controller.shutdown()
        self.stop.set()
        report = await self._stopped(task)
        status: RunStatus = "finished" if report is not None else "failed"
        if report is not None:
            self.final.written, self.final.trouble = write_report_or_keep(report, Path(self.settings.daemon.report))
            if self.final.trouble is not None:
                self.final.trouble += f"; the run's result is in the history ({storage.path}, run {self.run_id})"
            self.final.report = report
        for record in self.controller.exp.injector.faults:
            storage.fault_changed(self.run_id, record.as_dict())
        storage.run_finished(self.run_id, unix_time(), status, report)

    def _record_events(self, storage: Storage) -> None:
        """Every event into the history as it happens, and the live score as an event every few seconds."""
        exp = self.controller.exp

        def persist(event: Event) -> None:
            storage.event(self.run_id, event.id, event.t, event.kind, dict(event.data))
            # The record travels with its event: a fault that has left the memory window (history.faults)
            # still has its verdict stored. Never looked up by id: what is gone from memory would raise.
            if event.kind == "fault" and isinstance(event.about, FaultRecord):
                storage.fault_changed(self.run_id, event.about.as_dict())

        next_score = [SCORE_EVERY]

        def score_events(snap: Snapshot) -> None:
            if snap.t >= next_score[0]:
                next_score[0] += SCORE_EVERY
                live = exp.live_score()
                total = None if live.total is None else round(live.total, 3)
                exp.events.record(snap.t, "score", total=total, grade=live.grade)

        exp.events.subscribe(persist)
        exp.telemetry.listen(score_events)

    def _ended(self, done: asyncio.Task[ReportView]) -> None:
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            self.controller.crashed.append(f"pipeline crashed: {_cause(exc)}")
            log.error("the pipeline crashed", exc_info=exc)
        elif not self.stop.is_set():
            self.controller.crashed.append("pipeline: ended while the daemon was running")

    async def _stopped(self, task: asyncio.Task[ReportView]) -> ReportView | None:
        """The report of the stopped pipeline, or None when it failed or did not stop within the grace."""
        grace = self.settings.daemon.shutdown_grace
        try:
            return await asyncio.wait_for(asyncio.shield(task), grace)
        except TimeoutError:
            log.error("the pipeline did not stop within %.1f s; cancelled", grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except Exception:
            log.exception("the pipeline failed while stopping")
        return None
