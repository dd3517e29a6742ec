"""Exemplars: for each bucket of a latency histogram, the last traced task that fell in it, with its trace and span.

Bounded by the buckets whatever the load: one exemplar a bucket, replaced by the next; a histogram is the task wait,
the task sojourn, or one of the stages with a label of their own (the configuration's first 64).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from prometheus_client.samples import Exemplar

from chaosd.config.settings import Settings
from chaosd.exporters.buckets import latency_edges
from chaosd.exporters.stage_series import MAX_STAGE_LABELS

__all__ = ["OPEN_SPANS", "Exemplars"]

# Traced tasks whose acceptance time is kept until they end: past this many in flight, the oldest is forgotten (its
# sojourn gets no exemplar) rather than the memory growing with tasks that never end.
OPEN_SPANS = 1024


class Exemplars:
    """The exemplars of the task wait and sojourn histograms and of each stage's attempt histogram."""

    def __init__(self, edges: Sequence[float], stages: Sequence[str] = ()) -> None:
        self._edges = list(edges)
        self._slots: dict[str, list[Exemplar | None]] = {
            key: [None] * (len(self._edges) + 1) for key in ("wait", "sojourn", *(f"stage:{s}" for s in stages))
        }
        self._accepted: dict[int, float] = {}  # span id of a traced task's processing -> when it was accepted

    @classmethod
    def of(cls, settings: Settings) -> Exemplars:
        """For the histograms a registry exports for an experiment with these settings (the same edges)."""
        return cls(latency_edges(settings).values, [s.name for s in settings.stages[:MAX_STAGE_LABELS]])

    def observe(self, key: str, seconds: float, trace_id: int, span_id: int, at_unix: float) -> None:
        """A traced sample of ``seconds`` in histogram ``key`` (``wait``, ``sojourn``, ``stage:<name>``)."""
        slots = self._slots.get(key)
        if slots is None or seconds < 0:
            return
        labels = {"trace_id": f"{trace_id:032x}", "span_id": f"{span_id:016x}"}
        slots[bisect.bisect_left(self._edges, seconds)] = Exemplar(labels, seconds, at_unix)

    def started(self, span_id: int, trace_id: int, accepted: float, at: float, at_unix: float, *, first: bool) -> None:
        """A traced task's processing began at ``at`` (clock seconds): its wait when it is the first attempt, and
        its acceptance kept for the sojourn :meth:`ended` reads."""
        if first:
            self.observe("wait", at - accepted, trace_id, span_id, at_unix)
        accepted_at = self._accepted
        accepted_at[span_id] = accepted
        if len(accepted_at) > OPEN_SPANS:
            del accepted_at[next(iter(accepted_at))]

    def ended(self, span_id: int, trace_id: int, at: float, at_unix: float, *, completed: bool) -> None:
        accepted = self._accepted.pop(span_id, None)
        if accepted is not None and completed:
            self.observe("sojourn", at - accepted, trace_id, span_id, at_unix)

    def at(self, key: str, upper: float) -> Exemplar | None:
        """The exemplar of the bucket whose upper edge is ``upper`` (``inf`` for +Inf) in histogram ``key``; None
        where no traced task fell, or for a histogram or edge it does not know."""
        slots = self._slots.get(key)
        index = bisect.bisect_left(self._edges, upper)
        if slots is None or (index < len(self._edges) and self._edges[index] != upper):
            return None
        return slots[index]
