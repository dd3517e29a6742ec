"""The exemplar store: one exemplar a bucket, the last traced task in it; bounded whatever the load."""

from __future__ import annotations

import numpy as np
import pytest

from chaosd.core.histogram import LogHistogram
from chaosd.exporters.exemplars import OPEN_SPANS, Exemplars

EDGES = (0.1, 0.25, 0.5, 1.0)


def test_the_last_traced_task_in_a_bucket_replaces_the_one_before() -> None:
    store = Exemplars(EDGES, ["search"])
    store.observe("sojourn", 0.2, trace_id=1, span_id=2, at_unix=10.0)
    store.observe("sojourn", 0.25, trace_id=3, span_id=4, at_unix=11.0)  # on the edge: the same bucket, replaced
    store.observe("sojourn", 0.3, trace_id=5, span_id=6, at_unix=12.0)
    store.observe("sojourn", 7.0, trace_id=7, span_id=8, at_unix=13.0)  # above every edge: the +Inf bucket
    found = store.at("sojourn", 0.25)
    assert found is not None and found.labels == {"trace_id": f"{3:032x}", "span_id": f"{4:016x}"}
    assert found.value == 0.25 and found.timestamp == 11.0
    assert store.at("sojourn", 0.5) is not None and store.at("sojourn", float("inf")) is not None
    assert store.at("sojourn", 0.1) is None and store.at("wait", 0.25) is None  # nothing fell there
    assert store.at("sojourn", 0.3) is None  # not an edge of this store
    store.observe("stage:other", 0.2, 1, 2, 10.0)  # a stage past those named: no exemplar, no new histogram
    assert store.at("stage:other", 0.25) is None and store.at("stage:search", 0.25) is None


def test_a_task_traced_from_start_to_end_gives_its_wait_and_sojourn_and_the_open_ones_are_bounded() -> None:
    store = Exemplars(EDGES)
    store.started(span_id=9, trace_id=10, accepted=100.0, at=100.3, at_unix=5.0, first=True)
    store.ended(span_id=9, trace_id=10, at=100.9, at_unix=6.0, completed=True)
    wait, sojourn = store.at("wait", 0.5), store.at("sojourn", 1.0)
    assert wait is not None and wait.value == pytest.approx(0.3)
    assert sojourn is not None and sojourn.value == pytest.approx(0.9)
    store.started(span_id=11, trace_id=12, accepted=200.0, at=200.05, at_unix=7.0, first=False)  # a retry: no wait
    store.ended(span_id=11, trace_id=12, at=200.07, at_unix=8.0, completed=False)  # failed: no sojourn
    assert store.at("wait", 0.1) is None and store.at("sojourn", 0.1) is None
    for span in range(3 * OPEN_SPANS):  # tasks that never end (lost): the oldest are forgotten
        store.started(span_id=1000 + span, trace_id=1, accepted=0.0, at=0.0, at_unix=0.0, first=False)
    assert len(store._accepted) == OPEN_SPANS


def test_pinned_edges_must_increase_and_counts_binned_elsewhere_are_placed_by_their_upper_edge() -> None:
    hist = LogHistogram()
    with pytest.raises(ValueError, match="increase"):
        hist.pin((0.5, 0.25))
    hist.pin(EDGES)
    # Another process's counts arrive as ×1.05 bucket indices: the bucket whose upper edge is the first above 0.25
    # straddles it, and its samples count above 0.25 (within one ×1.05 bucket of exact).
    upper = LogHistogram.low * LogHistogram.factor ** np.arange(len(hist.counts))
    straddling = int(np.searchsorted(upper, 0.25))
    hist.add_counts({straddling: 4, straddling - 1: 3}, total=1.75)
    assert hist.pinned() == [0, 3, 7, 7] and hist.count == 7
