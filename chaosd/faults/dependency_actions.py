"""The actions on a python stage's real dependencies, through its fault proxy: latency, errors, resets, timeouts,
slices.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from chaosd.core.errors import Conflict, FaultError
from chaosd.faults.action import (
    Action,
    Param,
)
from chaosd.faults.record import Memo
from chaosd.faults.runtime import Dependencies, Stages


class DependencyAction(Action):
    """Targets a python stage's dependencies, as ``stage/dependency`` pairs: a pair, a stage (all of its
    dependencies), a dependency (every stage calling it), ``all``, or ``random`` (one pair).

    Each action sets fields of its own on the pair's proxy, so different actions on one pair combine (latency
    and errors at once); the same action twice on a pair conflicts. Nothing heals them: the recovery is timed
    from the fault's end.
    """

    kinds: tuple[str, ...] = ("dependency",)
    default_target = "all"
    http_only = False  # a synthetic HTTP status means nothing to a raw TCP dependency

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        raise NotImplementedError

    def resolve(self, rt: Stages, target: str, rng: random.Random) -> tuple[str, ...]:
        pairs = [
            (stage, dep, kind)
            for stage, state in sorted(rt.stages.items())
            for dep, kind in sorted(state.dependencies.items())
        ]
        if not pairs:
            raise Conflict("target", "no stage calls a dependency (a python stage lists them in dependencies = [...])")
        stage, slash, dep = target.partition("/")
        if target == "all":
            picked = pairs
        elif target == "random":
            picked = [rng.choice(pairs)]
        elif slash:
            picked = [p for p in pairs if p[0] == stage and p[1] == dep]
        else:
            picked = [p for p in pairs if target in (p[0], p[1])]
        if not picked:
            known = ", ".join(f"{s}/{d}" for s, d, _ in pairs)
            raise FaultError(
                "target",
                f"unknown dependency target {target!r} (pairs: {known}; or a stage, a dependency, all, random)",
            )
        if self.http_only:
            raw = [f"{s}/{d}" for s, d, kind in picked if kind != "http"]
            if raw:
                raise Conflict("target", f"{self.name} acts on HTTP dependencies; {raw[0]} is raw TCP")
        return tuple(f"{s}/{d}" for s, d, _ in picked)

    def apply(self, rt: Dependencies, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        fields = self.fields(params)
        for pair in targets:
            stage, _, dep = pair.partition("/")
            rt.dependency_fault(stage, dep, self.name, fields)
        return {}

    def revert(self, rt: Dependencies, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for pair in targets:
            stage, _, dep = pair.partition("/")
            rt.dependency_fault(stage, dep, self.name, None)


class DependencyLatency(DependencyAction):
    name = "dependency_latency"
    description = "Delay each call to the dependency by latency plus a random extra in [0, jitter]."
    params = {
        "latency": Param(0.1, 0.0, 60.0, "seconds added to each call", seconds=True),
        "jitter": Param(0.0, 0.0, 60.0, "largest random extra, seconds", seconds=True),
    }

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        return {"latency": params["latency"], "jitter": params["jitter"]}


class DependencyError(DependencyAction):
    name = "dependency_error"
    description = "Answer calls to the HTTP dependency with an error status instead of calling it."
    http_only = True
    params = {
        "status": Param(503, 400, 599, "the HTTP status answered", integer=True),
        "probability": Param(1.0, 0.0, 1.0, "share of calls answered with it"),
    }

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        return {"error_status": params["status"], "error_probability": params["probability"]}


class DependencyReset(DependencyAction):
    name = "dependency_reset"
    description = "Reset the connection (TCP RST, no answer) on that share of the calls to the dependency."
    params = {"probability": Param(1.0, 0.0, 1.0, "share of calls (HTTP) or connections (TCP) reset")}

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        return {"reset_probability": params["probability"]}


class DependencyTimeout(DependencyAction):
    name = "dependency_timeout"
    description = "Hold every call to the dependency unanswered: the caller's own timeout ends it."

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        return {"timeout": 1.0}


class DependencySlice(DependencyAction):
    name = "dependency_slice"
    description = "Stream the dependency's answers in slices of `bytes`, `delay` seconds apart."
    params = {
        "bytes": Param(64, 1, 1_000_000, "bytes per slice", integer=True),
        "delay": Param(0.05, 0.0, 60.0, "seconds between slices", seconds=True),
    }

    def fields(self, params: Mapping[str, float]) -> dict[str, float]:
        return {"slice_bytes": params["bytes"], "slice_delay": params["delay"]}


# --- load ---------------------------------------------------------------------------------------
