"""The exported latency buckets: round numbers from 1 ms to 30 s, and every latency threshold the configuration
names, so that a share of tasks under a threshold is read from one bucket, not interpolated across one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from prometheus_client.utils import floatToGoString as _untyped_go

from chaosd.config.settings import Settings
from chaosd.core.histogram import LogHistogram

__all__ = ["ROUND_EDGES", "LatencyEdges", "latency_buckets", "latency_edges", "thresholds"]

# A decade's edges: 1-2-2.5-5 refined until no step is over ×1.2143, finer than log buckets ×1.2155 apart (11 a
# decade), so histogram_quantile's interpolation error is no larger (tests/unit/exporters/test_buckets.py).
_MANTISSAS = ("1", "1.2", "1.4", "1.7", "2", "2.2", "2.5", "3", "3.5", "4", "4.5", "5", "6", "7", "8.5")
_TOP = 30.0
# Built from their decimal text, so that 0.25 is the double a configuration's "250ms" parses to.
ROUND_EDGES = tuple(sorted(e for d in range(-3, 2) for m in _MANTISSAS if (e := float(f"{m}e{d}")) <= _TOP))
# How prometheus_client writes a float (Go's formatting), typed here: the library's is not.
_go_float = cast(Callable[[float], str], _untyped_go)
# Stage timeouts made edges: as many stages as get a label of their own (stage_series.MAX_STAGE_LABELS).
_STAGES = 64


@dataclass(frozen=True, slots=True)
class LatencyEdges:
    """The upper edges every latency histogram exports (+Inf apart), and their ``le`` label values."""

    values: tuple[float, ...]
    labels: tuple[str, ...]


def thresholds(settings: Settings) -> tuple[float, ...]:
    """The latency thresholds the configuration names: the p95 sojourn objective (``slo.p95``), the callers'
    deadline (``load.deadline``, past which a completion is late) and attempt timeout (``clients.timeout``), and
    each stage's attempt timeout (``stages[].timeout``); unset ones (None, 0) are not thresholds."""
    named = [settings.slo.p95, settings.load.deadline, settings.clients.timeout]
    named += [stage.timeout for stage in settings.stages[:_STAGES]]
    return tuple(sorted({float(t) for t in named if t}))


def latency_edges(settings: Settings | None = None) -> LatencyEdges:
    """:data:`ROUND_EDGES` and, when ``settings`` are given, their :func:`thresholds`."""
    values = tuple(sorted({*ROUND_EDGES, *(thresholds(settings) if settings is not None else ())}))
    return LatencyEdges(values, tuple(_go_float(v) for v in values))


def latency_buckets(hist: LogHistogram, edges: LatencyEdges) -> list[tuple[str, float]]:
    """The cumulative buckets of ``hist`` at ``edges`` (pinned on it from the first read: see LogHistogram.pin)."""
    hist.pin(edges.values)
    buckets = [(label, float(n)) for label, n in zip(edges.labels, hist.pinned(), strict=True)]
    buckets.append(("+Inf", float(hist.count)))
    return buckets
