"""The offered load over time: a base rate changed by steps, ramps and spikes."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from chaosd.config.settings import Phase

__all__ = ["LoadShape"]


@dataclass(frozen=True, slots=True)
class _Segment:
    start: float
    rate: float
    slope: float  # tasks/s per second; 0 except in a ramp


class LoadShape:
    """Piecewise-linear offered rate (tasks/s, all producers) as a function of run time."""

    def __init__(self, base_rate: float, phases: Sequence[Phase]) -> None:
        segments = [_Segment(0.0, base_rate, 0.0)]
        level = base_rate  # the rate a spike returns to
        for phase in phases:
            at = phase.at
            # A new phase cuts short whatever was scheduled after it.
            while segments and segments[-1].start > at:
                segments.pop()
            current = self._eval(segments, at)
            if phase.type == "step":
                segments.append(_Segment(at, phase.rate, 0.0))
                level = phase.rate
            elif phase.type == "ramp":
                slope = (phase.rate - current) / phase.duration
                segments.append(_Segment(at, current, slope))
                segments.append(_Segment(at + phase.duration, phase.rate, 0.0))
                level = phase.rate
            else:
                segments.append(_Segment(at, phase.rate, 0.0))
                segments.append(_Segment(at + phase.duration, level, 0.0))
        self._segments = segments
        self._starts = [s.start for s in segments]

    @staticmethod
    def _eval(segments: list[_Segment], t: float) -> float:
        for seg in reversed(segments):
            if seg.start <= t:
                return seg.rate + seg.slope * (t - seg.start)
        return segments[0].rate

    def rate_at(self, t: float) -> float:
        seg = self._segments[bisect.bisect_right(self._starts, t) - 1 if t >= 0 else 0]
        return max(0.0, seg.rate + seg.slope * (t - seg.start))

    def steady_until(self, t: float) -> tuple[float, float]:
        """The rate at ``t`` and until when it holds unchanged (the end of a flat segment, else ``t``)."""
        i = bisect.bisect_right(self._starts, t) - 1 if t >= 0 else 0
        seg = self._segments[i]
        if seg.slope != 0.0:
            return self.rate_at(t), t
        end = self._starts[i + 1] if i + 1 < len(self._starts) else float("inf")
        return max(0.0, seg.rate), end

    def next_change(self, t: float) -> float | None:
        """The start of the next segment after ``t``, if any."""
        i = bisect.bisect_right(self._starts, t)
        return self._starts[i] if i < len(self._starts) else None

    def peak(
        self,
        start: float = 0.0,
        end: float | None = None,
        surges: Sequence[tuple[float, float | None, float]] = (),
    ) -> float:
        """The highest offered rate over ``[start, end]`` (``end`` None: every phase, however late).

        Spike and step phases count like any other; each surge ``(from, until, factor)`` (a load spike,
        ``until`` None while it lasts) multiplies the rate while it is on, as producers apply it.
        """
        last = self._starts[-1]
        stop = max(start, last if end is None else end)
        cuts = {start, stop}
        cuts.update(t for t in self._starts if start < t < stop)
        for begun, until, _ in surges:
            cuts.update(t for t in (begun, until) if t is not None and start < t < stop)
        points = sorted(cuts)

        def surge(t: float) -> float:
            factor = 1.0
            for begun, until, f in surges:
                if begun <= t and (until is None or t < until):
                    factor *= f
            return factor

        # The rate is linear and the surge constant between cuts: a maximum sits at a cut or just before one.
        best = self.rate_at(stop) * surge(stop)
        for a, b in itertools.pairwise(points):
            seg = self._segments[bisect.bisect_right(self._starts, a) - 1]
            before_b = max(0.0, seg.rate + seg.slope * (b - seg.start))
            best = max(best, max(self.rate_at(a), before_b) * surge(a))
        return best
