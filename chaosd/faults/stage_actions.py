"""The actions on the stage DAG: remove a node or an edge, hang a tool, fail the LLM, corrupt memory, disconnect MCP,
jitter latency.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Mapping

from chaosd.config.problems import closest
from chaosd.core.errors import Conflict, FaultError
from chaosd.faults.action import (
    Action,
    Param,
    count_of,
    entries_of,
    hung_of,
)
from chaosd.faults.record import Memo
from chaosd.faults.runtime import Stages, Workflow


class StageAction(Action):
    """Targets stages: a name, a kind (all stages of it), or ``random``."""

    kinds: tuple[str, ...] = ("compute", "tool", "llm", "memory", "mcp", "python")
    default_target = "random"

    def resolve(self, rt: Stages, target: str, rng: random.Random) -> tuple[str, ...]:
        stages = rt.stages
        if target in stages:
            if stages[target].kind not in self.kinds:
                raise FaultError("target", f"{target} is a {stages[target].kind} stage; needs {'/'.join(self.kinds)}")
            return (target,)
        eligible = sorted(n for n, s in stages.items() if s.kind in self.kinds)
        if target == "random":
            if not eligible:
                raise Conflict("target", f"no {'/'.join(self.kinds)} stage to target")
            return (rng.choice(eligible),)
        if target in self.kinds or target == "all":
            picked = tuple(n for n in eligible if target == "all" or stages[n].kind == target)
            if not picked:
                raise Conflict("target", f"no {target} stage in the DAG")
            return picked
        raise FaultError("target", self._unknown(target, stages))

    def target_problem(self, target: str, stages: Mapping[str, str]) -> str | None:
        """Why ``target`` can name no stage of ``stages`` (name → kind), before anything runs; None if it can."""
        if target in stages:
            kind = stages[target]
            return None if kind in self.kinds else f"{target} is a {kind} stage; needs {'/'.join(self.kinds)}"
        if target in ("random", "all") or target in self.kinds:
            return None
        return self._unknown(target, stages)

    @staticmethod
    def _unknown(target: str, stages: Collection[str]) -> str:
        near = closest(target, stages)
        hint = f"; did you mean {near!r}?" if near is not None else ""
        return f"unknown stage {target!r}{hint} (stages: {', '.join(sorted(stages))}; or a kind; or random)"


class RemoveNode(StageAction):
    verb = "removed"
    ares = True
    name = "remove_node"
    description = "Remove a stage from the DAG; the leader reroutes around it where an alternate path exists."
    heals_itself = True

    def apply(self, rt: Workflow, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        for name in targets:
            rt.remove_node(name, True)
        return {}

    def revert(self, rt: Workflow, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for name in targets:
            rt.remove_node(name, False)

    def healed(self, rt: Workflow, targets: tuple[str, ...], memo: Memo) -> bool:
        route = rt.settled_route()
        return route is not None and not set(route) & set(targets)

    def restored(self, rt: Workflow, targets: tuple[str, ...], memo: Memo) -> bool:
        # No alternate path: the damage ends when the node is back and the leader has rerouted.
        return rt.settled_route() is not None


class RemoveEdge(Action):
    verb = "removed"
    ares = True
    name = "remove_edge"
    description = "Remove an edge a->b from the DAG; the leader reroutes where an alternate path exists."
    kinds = ("edge",)
    default_target = "random"
    heals_itself = True

    def resolve(self, rt: Workflow, target: str, rng: random.Random) -> tuple[str, ...]:
        known = rt.edges()
        edges = sorted(f"{a}->{b}" for a, b in known)
        if target == "random":
            if not edges:
                raise Conflict("target", "the DAG has no edges")
            return (rng.choice(edges),)
        a, sep, b = target.partition("->")
        if not sep or (a.strip(), b.strip()) not in known:
            raise FaultError("target", f"unknown edge {target!r} (edges: {', '.join(edges)}; or random)")
        return (f"{a.strip()}->{b.strip()}",)

    def apply(self, rt: Workflow, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        for edge in targets:
            a, _, b = edge.partition("->")
            rt.remove_edge(a, b, True)
        return {}

    def revert(self, rt: Workflow, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for edge in targets:
            a, _, b = edge.partition("->")
            rt.remove_edge(a, b, False)

    def healed(self, rt: Workflow, targets: tuple[str, ...], memo: Memo) -> bool:
        route = rt.settled_route()
        if route is None:
            return False
        used = set(itertools.pairwise(route))
        return not any(tuple(e.split("->")) in used for e in targets)

    def restored(self, rt: Workflow, targets: tuple[str, ...], memo: Memo) -> bool:
        return rt.settled_route() is not None


class ToolTimeout(StageAction):
    verb = "hanging"
    ares = True
    name = "tool_timeout"
    description = "Tool calls hang until their timeout; retried, then degraded."
    kinds = ("tool", "python")  # a python stage's calls hang in place of its handler
    default_target = "random"  # one tool: the breaker routes around it; "tool" hangs every tool stage
    params = {"timeout": Param(0.0, 0.0, 60.0, "seconds a hung call waits (0 = the stage's timeout)", seconds=True)}
    heals_itself = True

    def apply(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        memo: Memo = {}
        for name in targets:
            stage = rt.stages[name]
            memo[name] = (stage.hang_timeout, stage.degraded + stage.successes)
            rt.hang(name, True, params["timeout"] or stage.hang_timeout)
        return memo

    def revert(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for name in targets:
            rt.hang(name, False, hung_of(memo, name)[0])

    def healed(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        # Degrading (or succeeding) keeps tasks moving through the hung tool.
        stages = rt.stages
        return all(stages[n].degraded + stages[n].successes > hung_of(memo, n)[1] for n in targets)


class LlmFailure(StageAction):
    verb = "failing"
    ares = True
    name = "llm_failure"
    description = "The primary model errors; retries go to the fallback model."
    kinds = ("llm", "python")  # a python stage's calls fail in place of its handler
    default_target = "llm"
    heals_itself = True

    def heals(self, rt: Stages, targets: tuple[str, ...]) -> bool:
        # A python stage has no fallback model: nothing but the fault's end heals it.
        stages = rt.stages
        return all(stages[n].kind == "llm" for n in targets)

    def apply(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        memo: Memo = {}
        for name in targets:
            memo[name] = rt.stages[name].fallback_served
            rt.llm_down(name, True)
        return memo

    def revert(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for name in targets:
            rt.llm_down(name, False)

    def healed(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        stages = rt.stages
        return all(stages[n].fallback_served > count_of(memo, n) for n in targets)


class MemoryCorrupt(StageAction):
    verb = "corrupted"
    ares = True
    name = "memory_corrupt"
    description = "Silently corrupt memory entries; checksums catch them and the checkpoint restores them."
    kinds = ("memory",)
    default_target = "memory"
    params = {"entries": Param(10, 1, 1_000_000, "entries to corrupt", integer=True)}
    heals_itself = True

    def apply(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        return {name: rt.corrupt_memory(name, int(params["entries"])) for name in targets}

    def healed(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        return all(not set(entries_of(memo, n)) & rt.corrupted(n) for n in targets)

    def restored(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        return self.healed(rt, targets, memo)  # corruption outlives the fault until repaired


class McpDisconnect(StageAction):
    verb = "disconnected"
    ares = True
    heal_timer = "the stage's reconnect backoff"
    name = "mcp_disconnect"
    description = (
        "Drop the MCP connection; the server is unreachable for `outage` seconds (at most the TTL), "
        "and the client reconnects with backoff."
    )
    kinds = ("mcp",)
    default_target = "mcp"
    params = {
        "outage": Param(
            1.0, 0.0, 600.0, "seconds the server stays unreachable; the TTL ends an outage longer than it", seconds=True
        )
    }
    heals_itself = True

    def apply(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        for name in targets:
            rt.mcp_drop(name, params["outage"])
        return {}

    def revert(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for name in targets:
            rt.mcp_restore(name)

    def healed(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        return all(rt.mcp_connected(n) for n in targets)

    def restored(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        return self.healed(rt, targets, memo)


class LatencyJitter(StageAction):
    verb = "jittered"
    name = "latency_jitter"
    description = "Add a random delay in [0, jitter] to every attempt of the target stages."
    default_target = "all"
    params = {"jitter": Param(0.02, 0.0, 60.0, "largest extra delay, seconds", seconds=True)}

    def apply(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        for name in targets:
            rt.jitter(name, params["jitter"])
        return {}

    def revert(self, rt: Stages, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        for name in targets:
            rt.jitter(name, 0.0)


# --- a python stage's dependencies (its real outbound calls, through chaosd's fault proxy) ------------
