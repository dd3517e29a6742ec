"""The report's sections measured over the run's measured window: readings at its two ends, and the load, tasks,
throughput, queue and latency they give."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chaosd.config.settings import Settings
from chaosd.experiment.report import latency_block
from chaosd.faults import Injector
from chaosd.pipeline import Pipeline
from chaosd.telemetry.stages import StageReading, read_stages
from chaosd.views import LatencyView, LoadView, QueueBlock, ReportTasks

__all__ = ["Mark", "MeasuredSpan", "load_view", "queue_block", "report_tasks"]


@dataclass(frozen=True, slots=True)
class Mark:
    """Cumulative readings at one instant; the report is the difference between two marks."""

    t: float
    queue_area: float
    busy_area: float
    wait: npt.NDArray[np.int64]
    wait_sum: float
    sojourn: npt.NDArray[np.int64]
    sojourn_sum: float
    completed: int
    good: int
    stages: Mapping[str, StageReading]  # each stage's counters: the report's per-stage table is their difference

    @classmethod
    def read(cls, p: Pipeline, now: float) -> Mark:
        """The pipeline's cumulative readings at clock time ``now``."""
        return cls(
            t=now - p.t0,
            queue_area=p.queue.area_now(),
            busy_area=p.busy.area_at(now),
            wait=p.wait.snapshot(),
            wait_sum=p.wait.sum,
            sojourn=p.sojourn.snapshot(),
            sojourn_sum=p.sojourn.sum,
            completed=p.ledger.total.completed,
            good=p.ledger.good,
            stages=read_stages(p.stages, now - p.t0),
        )


@dataclass(frozen=True, slots=True)
class MeasuredSpan:
    """The measured window, from the mark at the warm-up's end to the mark at the report: what passed between."""

    warm: Mark
    end: Mark

    @property
    def seconds(self) -> float:
        return self.end.t - self.warm.t

    def throughput(self) -> dict[str, float]:
        span, warm, end = self.seconds, self.warm, self.end
        return {
            "completed_per_s": (end.completed - warm.completed) / span if span else 0.0,
            "goodput_per_s": (end.good - warm.good) / span if span else 0.0,
        }

    def mean_depth(self) -> float:
        span = self.seconds
        return (self.end.queue_area - self.warm.queue_area) / span if span else 0.0

    def utilisation(self, workers: int) -> float:
        span = self.seconds
        return (self.end.busy_area - self.warm.busy_area) / (span * workers) if span else 0.0

    def latency(self) -> LatencyView:
        warm, end = self.warm, self.end
        return {
            "wait": latency_block(end.wait - warm.wait, end.wait_sum - warm.wait_sum),
            "sojourn": latency_block(end.sojourn - warm.sojourn, end.sojourn_sum - warm.sojourn_sum),
        }


def queue_block(s: Settings, p: Pipeline, span: MeasuredSpan) -> QueueBlock:
    """The queue's size, depth and overflow over the measured window."""
    queue = p.queue
    return {
        "capacity": s.queue.capacity,
        "when_full": s.queue.when_full,
        "mean_depth": span.mean_depth(),
        "max_depth": min(queue.max_depth, queue.capacity),
        "max_over_capacity": max(0, queue.max_depth - queue.capacity),
        "max_blocked": queue.max_blocked,
    }


def load_view(s: Settings, p: Pipeline, injector: Injector, span: MeasuredSpan) -> LoadView:
    """The load offered: configured, at its peak in the measured window, and what it asks of the workers."""
    workers = s.workers.count
    mean_service = p.mean_service
    # What producers offered at most in the measured window: phases (spikes too) times any load_spike surge.
    surges = [(f.injected_at, f.reverted_at, f.params["factor"]) for f in injector.faults if f.action == "load_spike"]
    peak = p.shape.peak(span.warm.t, span.end.t, surges)
    return {
        "arrival": s.load.arrival,
        "producers": s.load.producers,
        "base_rate": s.load.rate,
        "peak_rate": peak,
        "workers": workers,
        "mean_service_s": mean_service,
        "offered_rho": s.load.rate * mean_service / workers,
        "peak_rho": peak * mean_service / workers,
    }


def report_tasks(p: Pipeline, accounted: tuple[int, int, int]) -> ReportTasks:
    """The measured tasks' fates; ``accounted`` is ``Experiment.accounted()``'s (lost of all, lost measured,
    measured still held)."""
    measured = p.ledger.measured
    lost_all, lost_measured, in_flight = accounted
    return {
        "offered": measured.offered,
        "accepted": measured.accepted,
        "completed": measured.completed,
        "late": measured.late,
        "degraded": measured.degraded,
        "failed": measured.failed,
        "rejected": measured.rejected,
        "in_flight": in_flight,
        "lost": lost_measured,
        "duplicated": p.audit.measured.count,
        "rejected_by": dict(sorted(measured.rejected_by.items())),
        "failed_by": dict(sorted(measured.failed_by.items())),
        "lost_all_cohorts": lost_all,
        "retries": p.ledger.retries,
        "retried": measured.retried,
        "abandoned": measured.abandoned,
        "abandoned_by": dict(sorted(measured.abandoned_by.items())),
        "wasted": measured.wasted,
        "gave_up": measured.gave_up,
    }
