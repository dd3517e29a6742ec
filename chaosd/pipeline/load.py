"""The offered load over time: a base rate changed by steps, ramps and spikes."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from chaosd.config import Phase

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

    def peak(self) -> float:
        ends = [s.rate for s in self._segments]
        ends += [
            s.rate + s.slope * (n.start - s.start) for s, n in zip(self._segments, self._segments[1:], strict=False)
        ]
        return max(ends)
