"""The load spike: a multiplier on the offered rate that every producer applies (a fault's ``spike_load``)."""

from __future__ import annotations

__all__ = ["Surge"]


class Surge:
    """The load-spike multiplier producers apply to their offered rate; spikes stack and unstack exactly."""

    def __init__(self) -> None:
        self.factor = 1.0

    def spike_load(self, factor: float, on: bool) -> None:
        if on:
            self.factor *= factor
        else:
            self.factor /= factor
