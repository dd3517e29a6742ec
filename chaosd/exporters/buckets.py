"""The exported latency buckets: every 4th edge of LogHistogram (×1.05), so the exported buckets are exact and
×1.2155 apart, from 0.97 ms to ~37 s."""

from __future__ import annotations

import itertools
import math

import numpy as np

from chaosd.core.histogram import LogHistogram

__all__ = ["EDGE_INDEX", "EDGE_LABELS", "LATENCY_EDGES", "latency_buckets"]

# Exported latency buckets: internal edges LOW·1.05^i for i = 141, 145, … (0.97 ms … ~37 s).
_FIRST_EDGE = math.floor(math.log(1e-3 / LogHistogram.low) / math.log(LogHistogram.factor))
_LAST_EDGE = math.ceil(math.log(30.0 / LogHistogram.low) / math.log(LogHistogram.factor)) + 4
LATENCY_EDGES = tuple(range(_FIRST_EDGE, _LAST_EDGE + 1, 4))
# The same edges as label values, and as indices into LogHistogram.counts.
EDGE_LABELS = tuple(repr(LogHistogram.low * LogHistogram.factor**i) for i in LATENCY_EDGES)
EDGE_INDEX = np.array(LATENCY_EDGES, dtype=np.intp)


def latency_buckets(hist: LogHistogram) -> list[tuple[str, float]]:
    cumulative = list(itertools.accumulate(hist.counts))
    buckets = [(repr(LogHistogram.low * LogHistogram.factor**i), float(cumulative[i])) for i in LATENCY_EDGES]
    buckets.append(("+Inf", float(hist.count)))
    return buckets
