"""LogHistogram's cumulative counts: a window's percentiles from two of them are those of the window's own counts."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from chaosd.core.histogram import LogHistogram, cumulative_percentiles, percentiles

QS = (0.5, 0.95, 0.99)


def test_a_window_of_cumulative_counts_has_the_percentiles_of_its_own_samples() -> None:
    rng = random.Random(3)
    whole = LogHistogram()
    for _ in range(500):
        whole.add(rng.expovariate(10.0))
    start = whole.cumulative()
    window = LogHistogram()
    # Batches below and above the size binned in numpy, and samples at the histogram's ends.
    for n in (3, 40, 1, 120):
        for _ in range(n):
            v = rng.choice([0.0, 1e-7, rng.expovariate(100.0), 3e5])
            whole.add(v)
            window.add(v)
        whole.cumulative()  # read between batches, as the telemetry tick does
    end = whole.cumulative()
    assert cumulative_percentiles(end - start, QS) == percentiles(window.snapshot(), QS)
    assert np.array_equal(end, whole.snapshot().cumsum())
    # Control: the window's percentiles are not those of the whole history.
    assert cumulative_percentiles(end, QS) != percentiles(window.snapshot(), QS)


def test_cumulative_counts_are_the_same_array_until_a_sample_comes() -> None:
    hist = LogHistogram()
    hist.add(0.01)
    first = hist.cumulative()
    assert hist.cumulative() is first
    assert not first.flags.writeable
    hist.add(0.02)
    second = hist.cumulative()
    assert second is not first
    assert int(second[-1]) == 2 and int(first[-1]) == 1


def test_percentiles_of_nothing_are_zero() -> None:
    assert cumulative_percentiles(LogHistogram().cumulative(), QS) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("batch", [1, 500])  # one sample at a time (binned in Python) and in batches (numpy)
def test_a_sample_on_an_upper_edge_is_in_that_bucket_and_one_just_above_is_in_the_next(batch: int) -> None:
    probe = LogHistogram()
    top = len(probe.counts) - 1
    edges = (LogHistogram.low * LogHistogram.factor ** np.arange(top, dtype=np.float64)).tolist()
    samples = [x for edge in edges for x in (edge, math.nextafter(edge, math.inf))] + [0.0, 1e9]
    binned = []
    for start in range(0, len(samples), batch):
        hist = LogHistogram()
        for v in samples[start : start + batch]:
            hist.add(v)
        binned.append(np.asarray(hist.counts, dtype=np.int64))
    counts = np.sum(binned, axis=0)
    # Bucket i is (low·f^(i-1), low·f^i]: its own upper edge and the sample just above the edge below it. The first
    # holds low and 0; the top one, what lies just above the last edge and far above it.
    assert counts.tolist() == [2] * (top + 1)
    # Negative control: working the bucket out as ceil(log(v / low) / log(f)) misplaces some of those edges.
    by_log = [math.ceil((math.log(e) - math.log(LogHistogram.low)) / math.log(LogHistogram.factor)) for e in edges]
    assert sum(i != j for i, j in enumerate(by_log)) > 0
