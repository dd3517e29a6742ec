"""Measurement windows on the live run: opened and closed by request, each with its own score, tasks and faults."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from chaosd.core.errors import Conflict, NotFound
from chaosd.daemon.measure import LiveMeasure
from chaosd.experiment.plans import Tally
from chaosd.experiment.report import rounded
from chaosd.experiment.runner import Experiment
from chaosd.experiment.score import diagnose
from chaosd.faults import FaultRecord
from chaosd.faults.incidents import IncidentBook
from chaosd.views import WindowReport, WindowSummary

__all__ = ["MAX_WINDOWS", "Window", "Windows"]

MAX_WINDOWS = 100  # windows kept (open ones, then the newest closed); the oldest closed one goes first


@dataclass
class Window:
    """A measurement window an experiment opens and closes: its own score, tasks and faults.

    Its faults are those injected while it was open (ids count up from 1 in injection order); its score
    reads its book, which counts every incident holding one of them, whether or not still in memory.
    """

    id: int
    name: str
    started_at: float
    before: Tally
    after_fault: int  # faults with a larger id were injected while it was open
    ended_at: float | None = None
    until_fault: int | None = None  # the last fault id of a closed window
    final: WindowReport | None = None
    book: IncidentBook | None = None  # its incidents' running totals, for its score

    @property
    def open(self) -> bool:
        return self.ended_at is None

    def owns(self, record: FaultRecord) -> bool:
        return self.after_fault < record.id and (self.until_fault is None or record.id <= self.until_fault)

    def summary(self) -> WindowSummary:
        return {
            "id": self.id,
            "name": self.name,
            "state": "open" if self.open else "closed",
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


class Windows:
    """The windows kept (at most ``MAX_WINDOWS``), oldest first; the daemon's own score goes on beside them."""

    def __init__(self, experiment: Experiment, measure: LiveMeasure) -> None:
        self._exp = experiment
        self._measure = measure
        self._kept: dict[int, Window] = {}
        self._ids = 0

    def __iter__(self) -> Iterator[Window]:
        return iter(self._kept.values())

    def __len__(self) -> int:
        return len(self._kept)

    def open(self, name: str | None) -> Window:
        """Start measuring from now."""
        if sum(1 for w in self._kept.values() if w.open) >= MAX_WINDOWS:
            raise Conflict("window", f"{MAX_WINDOWS} windows are open; close one first")
        self._ids += 1
        window = Window(
            id=self._ids,
            name=name or f"window-{self._ids}",
            started_at=self._exp.pipeline.elapsed(),
            before=self._measure.tally(),
            after_fault=self._exp.injector.injected,
        )
        window.book = self._measure.open_book(window.owns)
        self._kept[window.id] = window
        closed = [w for w in self._kept.values() if not w.open]
        for old in closed[: max(0, len(self._kept) - MAX_WINDOWS)]:
            del self._kept[old.id]
        self._exp.events.record(window.started_at, "window", id=window.id, name=window.name, state="opened")
        return window

    def discard(self, window: Window) -> None:
        """Forget a window whose opening was not stored, as if it had never been opened."""
        if window.open:
            self.close(window.id)
        self._kept.pop(window.id, None)

    def reopen(self, window: Window) -> None:
        """Open again a window whose closing was not stored, counting on as if it had never closed."""
        window.ended_at = window.until_fault = window.final = None
        self._measure.keep_counting(window.book)

    def get(self, window_id: int) -> Window:
        found = self._kept.get(window_id)
        if found is None:
            raise NotFound("id", f"no window {window_id} (the newest {MAX_WINDOWS} are kept)")
        return found

    def report(self, window: Window) -> WindowReport:
        """The window's own tasks, score, faults, incidents and diagnostics (frozen once it is closed)."""
        if window.final is not None:
            return window.final
        report = self._measure.measures(window, faults=True)
        t = report["tasks"]
        causes = {
            "refused": t["rejected"],
            "failed": t["failed"],
            "late": t["late"],
            "degraded": t["degraded"],
            "lost": t["lost"],
            "duplicated": t["duplicated"],
            "faults_failed": sum(1 for f in report["faults"] if f["outcome"] == "failed"),
        }
        body: WindowReport = {
            **window.summary(),
            "tasks": report["tasks"],
            "score": report["score"],
            "faults": report["faults"],
            "incidents": report["incidents"],
            "window": report["window"],
            "diagnostics": [{"cause": c.cause, "count": c.count, "share": c.share} for c in diagnose(causes)],
        }
        return rounded(body)

    def close(self, window_id: int) -> WindowReport:
        window = self.get(window_id)
        if not window.open:
            raise Conflict("id", f"window {window_id} is already closed")
        window.ended_at = self._exp.pipeline.elapsed()
        window.until_fault = self._exp.injector.injected
        window.final = self.report(window)
        self._measure.forget_book(window.book)
        score = window.final["score"]
        self._exp.events.record(
            window.ended_at,
            "window",
            id=window.id,
            name=window.name,
            state="closed",
            score=score.get("total"),
            grade=score.get("grade"),
            availability=score.get("availability"),
        )
        return window.final
