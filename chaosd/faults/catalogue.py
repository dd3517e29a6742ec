"""The fault catalogue: twenty-two reversible actions, each with its targets, parameters and recovery check.

An action resolves its target (an id, a kind, ``random`` or a percentage of its default kind),
applies itself through the part of the :class:`~chaosd.faults.runtime.Runtime` interface it acts on (never the
pipeline's internals), and can say when the runtime's own mechanism has healed the damage. Actions whose damage
nothing heals but their end (a pause, a partition, jitter) report the mechanism as recovered when
they are reverted.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from chaosd.config.problems import closest
from chaosd.core.durations import parse_duration
from chaosd.core.errors import Conflict, FaultError
from chaosd.faults.record import Memo, MemoValue
from chaosd.faults.runtime import Agents, AgentState, Dependencies, Load, Runtime, Stages, Workflow
from chaosd.views import ActionView

__all__ = ["CATALOGUE", "Action", "Param", "is_remedy", "target_problem"]


# What an action noted when applied, read back in its recovery checks: each reads what its own apply wrote.
def _noted(key: str, what: str, value: MemoValue) -> TypeError:
    return TypeError(f"memo[{key!r}] is not {what}: {value!r}")


def _count(memo: Memo, key: str) -> int:
    value = memo[key]
    if isinstance(value, int):
        return value
    raise _noted(key, "a count", value)


def _counts(memo: Memo, key: str) -> dict[str, int]:
    value = memo[key]
    if isinstance(value, dict):
        return value
    raise _noted(key, "counts by name", value)


def _hung(memo: Memo, stage: str) -> tuple[float, int]:
    """A hung tool's timeout before the fault, and its progress (degraded + successes) when it began."""
    value = memo[stage]
    if isinstance(value, tuple):
        return value
    raise _noted(stage, "a timeout and a count", value)


def _entries(memo: Memo, stage: str) -> list[int]:
    value = memo[stage]
    if isinstance(value, list):
        return value
    raise _noted(stage, "a list of entries", value)


@dataclass(frozen=True, slots=True)
class Param:
    default: float
    low: float
    high: float
    description: str
    integer: bool = False
    seconds: bool = False  # accepts durations such as "5ms"

    def check(self, name: str, value: object) -> float:
        if self.seconds and isinstance(value, str):
            try:
                value = parse_duration(value)
            except ValueError as exc:
                raise FaultError(f"params.{name}", str(exc)) from None
        elif isinstance(value, str):  # "10" is 10, as a duration "10" is 10 s: numbers as JSON or as text
            try:
                number = float(value.strip())
            except ValueError:
                raise FaultError(f"params.{name}", f"must be a number (got {value[:32]!r})") from None
            if not math.isfinite(number):
                raise FaultError(f"params.{name}", f"must be a finite number (got {value[:32]!r})")
            value = number
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FaultError(f"params.{name}", f"must be a number (got {value!r})")
        if self.integer and int(value) != value:
            raise FaultError(f"params.{name}", f"must be a whole number (got {value!r})")
        if not self.low <= value <= self.high:
            raise FaultError(f"params.{name}", f"must be between {self.low:g} and {self.high:g} (got {value!r})")
        return float(value)


class Action:
    """Base: agent-targeted. Subclasses override what they change."""

    name = ""
    description = ""
    kinds: tuple[str, ...] = ("worker", "producer")
    default_target = "worker"
    params: Mapping[str, Param] = {}
    heals_itself = False  # a mechanism of the runtime repairs the damage before the fault ends
    # What the fault does to its targets, as the event log says it ("kill_agent → worker-3 killed").
    verb = "hit"
    ares = False  # one of the ARES Arena's own actions; the rest are chaosd's queue and dependency faults
    # An instantaneous remedy (resume_agent), not a blow of its own: it takes no slot under the cap, opens no
    # incident and has no recovery to wait for.
    remedy = False
    heal_timer: str | None = None  # the setting whose timer paces the mechanism that heals it, as the summary names it

    def check_params(self, given: Mapping[str, object]) -> dict[str, float]:
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            valid = ", ".join(sorted(self.params)) or "none"
            near = closest(unknown[0], self.params)
            hint = f"; did you mean {near!r}?" if near is not None else ""
            raise FaultError(f"params.{unknown[0]}", f"unknown parameter for {self.name}{hint} (valid: {valid})")
        return {name: p.check(name, given.get(name, p.default)) for name, p in self.params.items()}

    def resolve(self, rt: Runtime, target: str, rng: random.Random) -> tuple[str, ...]:
        return _resolve_agents(rt, target, self.kinds, self.kinds[0], rng)

    def conflict(self, rt: Runtime, targets: tuple[str, ...], busy: set[tuple[str, str]]) -> str | None:
        """Why these targets cannot take this fault now (None if they can)."""
        for t in targets:
            if (self.group, t) in busy:
                return f"{t} already has an active {self.group} fault"
        return None

    @property
    def group(self) -> str:
        return self.name

    def apply(self, rt: Runtime, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        raise NotImplementedError

    def revert(self, rt: Runtime, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        """Undo what apply changed (idempotent)."""

    def heals(self, rt: Runtime, targets: tuple[str, ...]) -> bool:
        """Whether a mechanism of the runtime heals this fault on these targets (its clock: heal or restore)."""
        return self.heals_itself

    def healed(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """The runtime's own mechanism has repaired the damage (for actions that heal themselves)."""
        return False

    def lifted(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """For a fault nothing heals: has something ended it before its TTL (a resume ends a pause)?"""
        return False

    def restored(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """After the fault ended: is the damage gone? (A kill is not undone by its end; a pause is.)"""
        return True

    def describe(self) -> ActionView:
        return {
            "action": self.name,
            "description": self.description,
            "targets": list(self.kinds),
            "default_target": self.default_target,
            "params": {
                n: {"default": p.default, "min": p.low, "max": p.high, "description": p.description}
                for n, p in self.params.items()
            },
        }


def _resolve_agents(
    rt: Agents, target: str, kinds: tuple[str, ...], default_kind: str, rng: random.Random
) -> tuple[str, ...]:
    everyone = rt.agents
    agents = [a for a in everyone.values() if a.kind in kinds]
    live = [a for a in agents if a.alive]
    if target in everyone:
        agent = everyone[target]
        if agent.kind not in kinds:
            raise FaultError("target", f"{target} is a {agent.kind}; this action takes a {' or '.join(kinds)}")
        return (target,)
    if target.endswith("%"):
        try:
            share = float(target[:-1]) / 100
        except ValueError:
            raise FaultError("target", f"not a percentage: {target!r}") from None
        if not 0 < share <= 1:
            raise FaultError("target", f"a percentage must be in (0, 100] (got {target!r})")
        pool = sorted((a for a in live if a.kind == default_kind), key=lambda a: a.id)
        if not pool:
            raise Conflict("target", f"no live {default_kind} to target")
        count = max(1, math.ceil(share * len(pool)))
        return tuple(sorted(a.id for a in rng.sample(pool, count)))
    if target in kinds or target in ("random", "agent"):
        pool = sorted((a for a in live if target in ("random", "agent") or a.kind == target), key=lambda a: a.id)
        if not pool:
            raise Conflict("target", f"no live {target} agent to target")
        return (rng.choice(pool).id,)
    known = ", ".join(sorted(a.id for a in agents)[:12])
    raise FaultError(
        "target",
        f"unknown target {target!r} (an id such as {known}; a kind: {', '.join(kinds)}; random; or a percentage)",
    )


def _agents(rt: Agents, targets: tuple[str, ...]) -> list[AgentState]:
    agents = rt.agents
    return [agents[t] for t in targets]


# --- leadership and agents ---------------------------------------------------------------------


class KillLeader(Action):
    verb = "killed"
    ares = True
    heal_timer = "orchestrator.lease_ttl"
    name = "kill_leader"
    description = "Kill the orchestrator replica holding the dispatch lease; a standby is elected."
    kinds = ("orchestrator",)
    default_target = "leader"
    heals_itself = True

    def resolve(self, rt: Runtime, target: str, rng: random.Random) -> tuple[str, ...]:
        if target not in ("leader", "orchestrator"):
            raise FaultError("target", f"kill_leader targets the leader (got {target!r})")
        leader = rt.leader()
        if leader is None:
            raise Conflict("target", "no leader holds the lease right now")
        return (leader,)

    @property
    def group(self) -> str:
        return "kill"

    def apply(self, rt: Runtime, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        elections = rt.elections()
        for t in targets:
            rt.kill_agent(t)
        return {"elections": elections}

    def healed(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        return rt.leader() is not None and rt.elections() > _count(memo, "elections")

    def restored(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        return self.healed(rt, targets, memo)


class KillOrchestrator(KillLeader):
    verb = "killed"
    ares = True
    heal_timer = "orchestrator.lease_ttl"
    name = "kill_orchestrator"
    description = "Kill orchestrator replicas (the leader among them triggers an election)."
    default_target = "orchestrator"

    def resolve(self, rt: Agents, target: str, rng: random.Random) -> tuple[str, ...]:
        return _resolve_agents(rt, target, self.kinds, "orchestrator", rng)

    def healed(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        return rt.leader() is not None and all(a.alive for a in _agents(rt, targets))


class KillAgent(Action):
    verb = "killed"
    ares = True
    heal_timer = "supervisor.backoff"
    name = "kill_agent"
    description = "Kill workers or producers; the supervisor resurrects them."
    heals_itself = True

    @property
    def group(self) -> str:
        return "kill"

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        for agent in _agents(rt, targets):
            if agent.alive:
                rt.kill_agent(agent.id)
        return {"served": {t: rt.agents[t].served for t in targets}}

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        # Resurrected and working: alive again, and has done something since.
        served = _counts(memo, "served")
        return all(a.alive and a.served > served[a.id] for a in _agents(rt, targets))

    def restored(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        return self.healed(rt, targets, memo)


class PauseAgent(Action):
    verb = "paused"
    ares = True
    name = "pause_agent"
    description = "Pause workers or producers until resumed or the TTL ends."
    # Nothing in the runtime heals a pause: it is endured, and timed from when it is lifted (the TTL,
    # or an operator's resume_agent, whichever comes first).

    def lifted(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        return all(not a.paused for a in _agents(rt, targets))

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.pause(targets, True)
        return {}

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.pause(targets, False)


class ResumeAgent(Action):
    verb = "resumed"
    ares = True
    remedy = True
    name = "resume_agent"
    description = "Resume paused agents now; their pause_agent faults still end (as no-ops) at their TTL."

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.pause(targets, False)
        return {}

    def conflict(self, rt: Agents, targets: tuple[str, ...], busy: set[tuple[str, str]]) -> str | None:
        for agent in _agents(rt, targets):
            if not agent.paused:
                return f"{agent.id} is not paused"
        return None

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        return all(not a.paused for a in _agents(rt, targets))

    heals_itself = True


class SlowAgent(Action):
    verb = "slowed"
    ares = True
    name = "slow_agent"
    description = "Slow workers (service × factor) or producers (rate ÷ factor)."
    params = {"factor": Param(5.0, 1.0, 1000.0, "slowdown factor")}

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.slow(targets, params["factor"])
        return {}

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.slow(targets, 1.0)


class NetworkPartition(Action):
    verb = "cut off"
    ares = True
    heal_timer = "orchestrator.task_lease"
    name = "network_partition"
    description = "Cut workers or producers off: no dispatch, outcomes and offers lost; task leases expire."

    def heals(self, rt: Agents, targets: tuple[str, ...]) -> bool:
        # Cut-off workers: task leases expire and other workers take their tasks over (time to heal).
        # Nothing reconnects a cut-off producer: its offers are lost until the partition is lifted.
        return all(a.kind == "worker" for a in _agents(rt, targets))

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        held = rt.held_tasks(targets)
        rt.partition(targets, True)
        return {"held": held, "expired": rt.lease_expired()}

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        # The tasks the cut-off workers held have been taken back (their leases expired).
        return bool(rt.lease_expired() - _count(memo, "expired") >= _count(memo, "held"))

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.partition(targets, False)


class PoolExhaustion(Action):
    verb = "exhausted"
    name = "pool_exhaustion"
    description = "Take a share of the worker pool out of service (held by something else)."
    kinds = ("worker",)
    default_target = "75%"

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.exhaust(targets, True)
        return {}

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.exhaust(targets, False)


class DropMessages(Action):
    verb = "dropping messages"
    heal_timer = "orchestrator.task_lease"
    name = "drop_messages"
    description = "Lose a share of dispatch messages to workers; task leases bring the tasks back."
    kinds = ("worker",)
    default_target = "100%"
    params = {"probability": Param(0.3, 0.0, 1.0, "share of dispatches lost")}
    heals_itself = True

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.drop_dispatches(targets, params["probability"])
        return {"expired": rt.lease_expired(), "dropped": rt.dropped(targets)}

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.drop_dispatches(targets, 0.0)

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        # Redelivery works: something was lost, and as many leases expired since as dispatches were lost.
        dropped = rt.dropped(targets) - _count(memo, "dropped")
        return bool(dropped > 0 and rt.lease_expired() - _count(memo, "expired") >= dropped)

    def restored(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        dropped = rt.dropped(targets) - _count(memo, "dropped")
        return bool(rt.lease_expired() - _count(memo, "expired") >= dropped)


# --- the workflow DAG and its stages -----------------------------------------------------------


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
            rt.hang(name, False, _hung(memo, name)[0])

    def healed(self, rt: Stages, targets: tuple[str, ...], memo: Memo) -> bool:
        # Degrading (or succeeding) keeps tasks moving through the hung tool.
        stages = rt.stages
        return all(stages[n].degraded + stages[n].successes > _hung(memo, n)[1] for n in targets)


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
        return all(stages[n].fallback_served > _count(memo, n) for n in targets)


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
        return all(not set(_entries(memo, n)) & rt.corrupted(n) for n in targets)

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


CATALOGUE: dict[str, Action] = {
    a.name: a
    for a in (
        KillLeader(),
        KillOrchestrator(),
        KillAgent(),
        RemoveNode(),
        RemoveEdge(),
        PauseAgent(),
        ResumeAgent(),
        SlowAgent(),
        NetworkPartition(),
        ToolTimeout(),
        MemoryCorrupt(),
        McpDisconnect(),
        LlmFailure(),
        LoadSpike(),
        LatencyJitter(),
        DropMessages(),
        PoolExhaustion(),
        DependencyLatency(),
        DependencyError(),
        DependencyReset(),
        DependencyTimeout(),
        DependencySlice(),
    )
}


def target_problem(action: str, target: str | None, stages: Mapping[str, str]) -> str | None:
    """Why a stage action's target names no stage of this configuration (``stages``: name → kind), checked
    before a scenario runs; None when it does, or when the action's targets exist only at run time (agents)."""
    spec = CATALOGUE.get(action)
    if not isinstance(spec, StageAction) or target is None:
        return None
    return spec.target_problem(target, stages)


def is_remedy(action: str) -> bool:
    """Whether ``action`` is an instantaneous remedy (see :attr:`Action.remedy`) rather than a blow of its own."""
    spec = CATALOGUE.get(action)
    return spec is not None and spec.remedy
