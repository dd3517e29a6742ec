"""The action on the offered load: a spike of arrivals."""

from __future__ import annotations

import random

from chaosd.core.errors import FaultError
from chaosd.faults.action import (
    Action,
    Param,
)
from chaosd.faults.record import Memo
from chaosd.faults.runtime import Load, Runtime


class LoadSpike(Action):
    verb = "flooded"
    name = "load_spike"
    description = "Multiply the offered load for the TTL."
    kinds = ("pipeline",)
    default_target = "pipeline"
    params = {"factor": Param(3.0, 1.0, 1000.0, "load multiplier")}

    def resolve(self, rt: Runtime, target: str, rng: random.Random) -> tuple[str, ...]:
        if target != "pipeline":
            raise FaultError("target", f"load_spike targets the pipeline (got {target!r})")
        return ("pipeline",)

    def apply(self, rt: Load, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.spike_load(params["factor"], True)
        return {}

    def revert(self, rt: Load, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.spike_load(params["factor"], False)
