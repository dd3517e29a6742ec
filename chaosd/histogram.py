"""Latency histogram with fixed log-spaced buckets (×1.05): O(1) per sample, percentiles on demand."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["LogHistogram", "lowest", "percentiles"]

_LOW = 1e-6  # seconds; bucket 0 holds [0, _LOW]
_HIGH = 1e5
_FACTOR = 1.05


class LogHistogram:
    """Counts samples in buckets ``(LOW·f^(i-1), LOW·f^i]``; bucket 0 is ``[0, LOW]``."""

    __slots__ = ("_inv_log", "_log_low", "_top", "count", "counts", "sum")

    factor = _FACTOR
    low = _LOW

    def __init__(self) -> None:
        self._inv_log = 1.0 / math.log(_FACTOR)
        self._log_low = math.log(_LOW)
        self._top = math.ceil((math.log(_HIGH) - self._log_low) * self._inv_log) + 1
        self.counts = [0] * (self._top + 1)
        self.count = 0
        self.sum = 0.0

    def add(self, x: float) -> None:
        self.count += 1
        self.sum += x
        if x <= _LOW:
            self.counts[0] += 1
            return
        i = math.ceil((math.log(x) - self._log_low) * self._inv_log)
        self.counts[i if i < self._top else self._top] += 1

    def snapshot(self) -> npt.NDArray[np.int64]:
        return np.array(self.counts, dtype=np.int64)

    @classmethod
    def upper_bounds(cls, n: int) -> npt.NDArray[np.float64]:
        bounds = _LOW * _FACTOR ** np.arange(n, dtype=np.float64)
        bounds[0] = _LOW
        return bounds


def percentiles(counts: npt.NDArray[np.int64], qs: tuple[float, ...]) -> tuple[float, ...]:
    """Percentiles (0–1) of a bucket-count vector, interpolated geometrically within a bucket."""
    total = int(counts.sum())
    if total == 0:
        return tuple(0.0 for _ in qs)
    cum = np.cumsum(counts)
    upper = LogHistogram.upper_bounds(len(counts))
    out = []
    for q in qs:
        rank = q * total
        i = int(np.searchsorted(cum, rank, side="left"))
        i = min(i, len(counts) - 1)
        if i == 0:
            out.append(float(_LOW * rank / counts[0]) if counts[0] else 0.0)
            continue
        below = int(cum[i - 1])
        inside = int(counts[i])
        frac = (rank - below) / inside if inside else 1.0
        lo = upper[i - 1]
        out.append(float(lo * _FACTOR**frac))
    return tuple(out)


def lowest(counts: npt.NDArray[np.int64]) -> float:
    """Lower edge of the lowest non-empty bucket (0 when empty or the first bucket)."""
    nz = np.flatnonzero(counts)
    if len(nz) == 0 or nz[0] == 0:
        return 0.0
    return float(_LOW * _FACTOR ** (int(nz[0]) - 1))
