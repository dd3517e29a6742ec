"""Latency histogram with fixed log-spaced buckets (×1.05): a C call per sample, binned in batches."""

from __future__ import annotations

import array
import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import ClassVar

import numpy as np
import numpy.typing as npt

__all__ = ["LogHistogram", "cumulative_percentile", "cumulative_percentiles", "lowest", "percentiles"]

_LOW = 1e-6  # seconds; bucket 0 holds [0, _LOW]
_HIGH = 1e5
_FACTOR = 1.05
_LOG_LOW = math.log(_LOW)
_INV_LOG = 1.0 / math.log(_FACTOR)
_SMALL = 24  # batches up to this size are binned in plain Python


class LogHistogram:
    """Counts samples in buckets ``(LOW·f^(i-1), LOW·f^i]``; bucket 0 is ``[0, LOW]``.

    ``add`` is a typed array's ``append``: a task pays for one C call that stores a raw double (no float object
    kept alive per sample), and the samples are binned in a batch (numpy, reading the array's buffer in place) when
    the histogram is next read or drained: a tick's worth of tasks for those telemetry reads every tick, a few
    seconds' worth for those it drains.
    """

    __slots__ = (
        "_count",
        "_counts",
        "_cum",
        "_cum_count",
        "_cuts",
        "_edges",
        "_edges_array",
        "_pending",
        "_pinned",
        "_shot",
        "_shot_count",
        "_sum",
        "_top",
        "_view",
        "add",
    )

    factor: ClassVar[float] = _FACTOR  # ClassVar: a class attribute in the compiled build too
    low: ClassVar[float] = _LOW

    def __init__(self) -> None:
        self._top = math.ceil((math.log(_HIGH) - _LOG_LOW) * _INV_LOG) + 1
        # A typed array, not a list: a tick's snapshot is one buffer copy instead of boxing ~530 ints.
        self._counts = array.array("q", bytes(8 * (self._top + 1)))
        # Its buffer, as numpy sees it: made once (the array is never resized, so the export may stay).
        self._view = np.frombuffer(self._counts, dtype=np.int64)
        self._count = 0
        self._sum = 0.0
        self._pending = array.array("d")
        self.add: Callable[[float], None] = self._pending.append
        self._cuts: list[array.array[float]] = []  # the samples :meth:`cut` handed out, to be binned here too
        self._shot: npt.NDArray[np.int64] | None = None  # the last snapshot, and the count it was taken at
        self._shot_count = -1
        self._cum: npt.NDArray[np.int64] | None = None  # the same for the cumulative counts
        self._cum_count = -1
        # Edges of its own a reader asked for (:meth:`pin`): samples counted in (edges[j-1], edges[j]], the last
        # count above every edge. Empty: none asked for, nothing more done per sample.
        self._edges: list[float] = []
        self._edges_array: npt.NDArray[np.float64] = np.empty(0)
        self._pinned = array.array("q")

    def pin(self, edges: Sequence[float]) -> None:
        """Also count samples at these increasing ``edges`` from now on, exactly (a sample equal to an edge is
        at or below it): edges the ×1.05 buckets do not have, such as round numbers and thresholds. Samples
        binned before are placed by their ×1.05 bucket's upper edge, as are those :meth:`add_counts` brings."""
        wanted = [float(e) for e in edges]
        if wanted == self._edges:
            return
        if any(b <= a for a, b in itertools.pairwise(wanted)) or (wanted and wanted[0] <= _LOW):
            raise ValueError(f"pinned edges must increase, from above {_LOW}")
        self._flush()
        self._edges = wanted
        self._edges_array = np.array(wanted, dtype=np.float64)
        self._pinned = array.array("q", bytes(8 * (len(wanted) + 1)))
        self._pin_binned({i: n for i, n in enumerate(self._counts) if n})

    def _pin_binned(self, counts: Mapping[int, int]) -> None:
        """Place counts of ×1.05 buckets at the pinned edges, by each bucket's upper edge."""
        if not self._edges:
            return
        for index, n in counts.items():
            upper = _LOW * _FACTOR ** min(max(index, 0), self._top)
            self._pinned[bisect.bisect_left(self._edges, upper)] += n

    def pinned(self) -> list[int]:
        """The samples at or below each pinned edge (cumulative, one per edge); empty when none are pinned."""
        self._flush()
        return list(itertools.accumulate(self._pinned[:-1]))

    def cut(self) -> array.array[float]:
        """The samples added since the last cut, as an array of their own that nobody changes: a reader keeps a
        window of them and bins them only if it is asked for that window (:meth:`window`). They are
        binned here as well, with the samples after them, at the next read or drain."""
        chunk = self._pending
        self._pending = array.array("d")
        self.add = self._pending.append
        self._cuts.append(chunk)
        return chunk

    def _flush(self) -> None:
        pending = self._pending
        if self._cuts:
            # One batch of the cut samples and those after them, in the order they came (the same sum, the same
            # bins); the cut arrays themselves stay as their readers hold them.
            pending = _joined([*self._cuts, pending])
            self._cuts.clear()
            del self._pending[:]
        if not pending:
            return
        self._count += len(pending)
        self._sum = sum(pending, self._sum)  # left to right, as adding them one by one would
        if len(pending) <= _SMALL:  # a light load: numpy's per-call cost would outweigh the work
            counts_ = self._counts
            top = self._top
            if self._edges:
                edges, pinned = self._edges, self._pinned
                for v in pending:
                    pinned[bisect.bisect_left(edges, v)] += 1
            _count_each(pending, counts_, top)
            del pending[:]
            return
        # A copy, not a view: no numpy array may hold the buffer of an array that grows and is emptied (a view kept
        # alive anywhere would make every later append raise BufferError).
        x = np.array(pending, dtype=np.float64)
        if self._edges:
            pinned_view = np.frombuffer(self._pinned, dtype=np.int64)
            pinned_view += np.bincount(self._edges_array.searchsorted(x, side="left"), minlength=len(pinned_view))
        indices = _indices(x, self._top)
        view = self._view
        view += np.bincount(indices, minlength=len(view))
        del pending[:]

    def window(self, chunks: Iterable[array.array[float]]) -> npt.NDArray[np.int64] | None:
        """The cumulative bucket counts of the samples in ``chunks`` (arrays :meth:`cut` handed out), binned as
        :meth:`_flush` bins them; None when there are none."""
        samples = _joined(chunks)
        if not samples:
            return None
        top = self._top
        return np.bincount(_indices(np.array(samples, dtype=np.float64), top), minlength=top + 1).cumsum()

    def drain(self) -> None:
        """Bin the samples added since the last read. Telemetry drains the histograms a pipeline fills and reads
        only at its end every few seconds: samples waiting for a reader would grow for the life of a daemon."""
        self._flush()

    @property
    def unbinned(self) -> int:
        """Samples added and not yet binned."""
        return len(self._pending) + sum(map(len, self._cuts))

    @property
    def counts(self) -> array.array[int]:
        self._flush()
        return self._counts

    @property
    def count(self) -> int:
        self._flush()
        return self._count

    @property
    def sum(self) -> float:
        self._flush()
        return self._sum

    def add_counts(self, counts: Mapping[int, int], total: float) -> None:
        """Add samples binned elsewhere (another process's histogram of the same buckets): ``counts`` maps a bucket
        index to how many samples it gained, ``total`` is their sum. Indices beyond the top go to the top."""
        buckets = self._counts
        top = self._top
        for index, n in counts.items():
            buckets[min(max(index, 0), top)] += n
            self._count += n
        self._sum += total
        self._pin_binned(counts)

    def snapshot(self) -> npt.NDArray[np.int64]:
        """The bucket counts now, read-only: the same array as last time while no sample has come since (an idle
        or slow pipeline's tick then copies nothing, and sees that nothing changed by identity)."""
        self._flush()
        if self._shot is None or self._shot_count != self._count:
            shot = self._view.copy()
            shot.flags.writeable = False
            self._shot, self._shot_count = shot, self._count
        return self._shot

    def cumulative(self) -> npt.NDArray[np.int64]:
        """The cumulative bucket counts now (samples at or below each bucket's upper edge), read-only and the same
        array while no sample has come since, as :meth:`snapshot`'s: the counts over a window are one subtraction
        of two, for :func:`cumulative_percentiles`."""
        self._flush()
        if self._cum is None or self._cum_count != self._count:
            cum = self._view.cumsum()
            cum.flags.writeable = False
            self._cum, self._cum_count = cum, self._count
        return self._cum


def _joined(chunks: Iterable[array.array[float]]) -> array.array[float]:
    """The samples of ``chunks`` in one new array, in order."""
    joined = array.array("d")
    for chunk in chunks:
        joined.extend(chunk)
    return joined


def _count_each(samples: array.array[float], counts: array.array[int], top: int) -> None:
    """Bin a few samples one by one (numpy's per-call cost would outweigh the work), as :func:`_indices` does: a
    bisection of the same edges finds the same bucket."""
    edges = _upper_floats(top)
    for v in samples:
        counts[bisect.bisect_left(edges, v)] += 1


def _indices(x: npt.NDArray[np.float64], top: int) -> npt.NDArray[np.intp]:
    """The bucket of each sample of ``x``: how many bucket edges lie below it (one search in C, where working out
    ``ceil(log(v / LOW) / log(f))`` took six numpy calls); above the last edge, the top bucket."""
    return _upper_bounds(top).searchsorted(x, side="left")


@cache
def _upper_bounds(n: int) -> npt.NDArray[np.float64]:
    """Bucket upper edges, computed once per length (the telemetry tick asks for them ten times a second)."""
    bounds = _LOW * _FACTOR ** np.arange(n, dtype=np.float64)
    bounds[0] = _LOW
    bounds.flags.writeable = False
    return bounds


@cache
def _upper_floats(n: int) -> list[float]:
    return _upper_bounds(n).tolist()  # type: ignore[no-any-return]


def percentiles(counts: npt.NDArray[np.int64], qs: tuple[float, ...]) -> tuple[float, ...]:
    """Percentiles (0–1) of a bucket-count vector, interpolated geometrically within a bucket."""
    return cumulative_percentiles(counts.cumsum(), qs)  # the method: np.cumsum adds a Python wrapper call


def cumulative_percentiles(cum: npt.NDArray[np.int64], qs: tuple[float, ...]) -> tuple[float, ...]:
    """:func:`percentiles` of the bucket counts whose running sums ``cum`` are (see :meth:`LogHistogram.cumulative`)."""
    return tuple(cumulative_percentile(cum, q) for q in qs)


def cumulative_percentile(cum: npt.NDArray[np.int64], q: float) -> float:
    """One percentile of :func:`cumulative_percentiles` (what a tick asks for: the p95)."""
    total = cum.item(-1)
    if total == 0:
        return 0.0
    rank = q * total
    # The first bucket whose running sum reaches the rank: the sums are integers, so reaching the rank is reaching
    # its ceiling, and searching with an integer spares numpy a cast of every sum to a float.
    last = len(cum) - 1
    i = min(int(cum.searchsorted(math.ceil(rank), side="left")), last)
    # Arithmetic on Python numbers (the same IEEE operations as on numpy's scalars, each of which costs a dispatch).
    if i == 0:
        first: int = cum.item(0)
        return _LOW * rank / first if first else 0.0
    below: int = cum.item(i - 1)
    inside = cum.item(i) - below
    frac = (rank - below) / inside if inside else 1.0
    within: float = _FACTOR**frac
    return _upper_floats(len(cum))[i - 1] * within


def lowest(counts: npt.NDArray[np.int64]) -> float:
    """Lower edge of the lowest non-empty bucket (0 when empty or the first bucket)."""
    nz = np.flatnonzero(counts)
    if len(nz) == 0 or nz[0] == 0:
        return 0.0
    return float(_LOW * _FACTOR ** (int(nz[0]) - 1))
