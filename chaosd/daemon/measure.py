"""The live experiment's task counts, and what a plan or a window measured since it began: its own window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from chaosd.experiment.plans import Tally, window_report
from chaosd.experiment.runner import Experiment
from chaosd.experiment.score import ScoreWeights
from chaosd.faults import FaultRecord
from chaosd.faults.incidents import IncidentBook
from chaosd.views import LiveCounts, LiveWindow, PlanReport, TaskCounts

__all__ = ["LiveMeasure", "Span"]


class Span(Protocol):
    """A stretch of the live run measured on its own: a plan run or a measurement window."""

    @property
    def started_at(self) -> float: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def before(self) -> Tally | None: ...  # the task counts when it started
    @property
    def book(self) -> IncidentBook | None: ...  # its incidents' running totals, for its score

    def owns(self, record: FaultRecord) -> bool: ...


class LiveMeasure:
    """Reads the live pipeline's counts and a span's own tasks, score, faults and incidents."""

    def __init__(self, experiment: Experiment) -> None:
        self._exp = experiment

    def counts(self) -> LiveCounts:
        """The live report's task counts (what :meth:`Tally.of` reads), without building the whole report.

        ``Experiment.report()`` also renders every fault, incident and the timeline: too much for a status
        that is polled. These are the same numbers (``tests/system/test_plan_status.py`` holds them equal).
        """
        p = self._exp.pipeline
        m = p.ledger.measured
        _, lost, in_flight = self._exp.accounted()
        tasks: TaskCounts = {
            "offered": m.offered,
            "accepted": m.accepted,
            "completed": m.completed,
            "late": m.late,
            "degraded": m.degraded,
            "failed": m.failed,
            "rejected": m.rejected,
            "duplicated": p.audit.measured.count,
            "lost": lost,
            "in_flight": in_flight,
        }
        undetected = sum(store.undetected_reads for store in p.memory.values())
        return {"tasks": tasks, "diagnostics": [{"cause": "corruption_undetected", "count": undetected}]}

    def tally(self) -> Tally:
        """The task counts now, as a span's starting point."""
        return Tally.of(self.counts())

    def owned(self, span: Span, *, pending: bool = False) -> list[FaultRecord]:
        """The span's faults still in memory (history.faults), or only those without a verdict."""
        injector = self._exp.injector
        return [f for f in (injector.in_play if pending else injector.faults) if span.owns(f)]

    def open_book(self, owns: Callable[[FaultRecord], bool]) -> IncidentBook:
        """A book the injector keeps counting the incidents of the faults ``owns`` picks in, until forgotten."""
        book = IncidentBook(owns)
        self._exp.injector.books.append(book)
        return book

    def keep_counting(self, book: IncidentBook | None) -> None:
        """Its span is open again (its end was not stored): the book counts on."""
        if book is not None:
            self._exp.injector.books.append(book)

    def forget_book(self, book: IncidentBook | None) -> None:
        """Its span has ended: the book stops counting (its plan's or window's report is final)."""
        books = self._exp.injector.books
        if book is not None and book in books:
            books.remove(book)

    def measures(self, span: Span, *, faults: bool) -> PlanReport:
        """The span's window now: task counts, score, incidents (and its faults as dicts, when ``faults``).

        The score needs the counts and the span's incidents only; rendering every fault (``faults``)
        costs far more, so a status, which is polled, goes without.
        """
        exp = self._exp
        records = self.owned(span)  # those still in memory: its score reads its book, which counted them all
        incidents = exp.injector.incidents
        numbers = sorted({f.incident for f in records if f.incident})
        now: LiveWindow = {
            **self.counts(),
            "faults": [f.as_dict() for f in records] if faults else [],
            "incidents": [i.as_dict() for n in numbers if (i := incidents.get(n)) is not None],
        }
        before = span.before or Tally()  # a plan without a snapshot: judged from the daemon's start
        ids = {f.id for f in records}
        weights = ScoreWeights.from_config(exp.settings.score)
        measures = window_report(before, now, ids, weights, span.book)
        end = span.ended_at if span.ended_at is not None else exp.pipeline.elapsed()
        return {
            "tasks": measures["tasks"],
            "score": measures["score"],
            "faults": measures["faults"],
            # The incidents holding its faults: what ``max_recovery_s`` judges (as the run report's do).
            "incidents": [i for i in now["incidents"] if ids.intersection(i["faults"])],
            "window": {"start_at": span.started_at, "end_at": end},
        }
