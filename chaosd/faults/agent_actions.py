"""The ARES actions on agents: kill the leader, an orchestrator or an agent, pause and resume, slow, partition, exhaust
a pool, drop messages.
"""

from __future__ import annotations

import random

from chaosd.core.errors import Conflict, FaultError
from chaosd.faults.action import (
    Action,
    Param,
    agent_states,
    count_of,
    counts_of,
    resolve_agents,
)
from chaosd.faults.record import Memo
from chaosd.faults.runtime import Agents, Runtime


class KillLeader(Action):
    verb = "killed"
    ares = True
    heal_timer = "orchestrator.lease_ttl"
    name = "kill_leader"
    description = "Kill the orchestrator replica holding the dispatch lease; a standby is elected."
    kinds = ("orchestrator",)
    default_target = "leader"
    heals_itself = True

    def survival_target(self, rt: Runtime, rng: random.Random) -> str | None:
        return "leader" if rt.leader() is not None else None

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
        return rt.leader() is not None and rt.elections() > count_of(memo, "elections")

    def restored(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        return self.healed(rt, targets, memo)


class KillOrchestrator(KillLeader):
    verb = "killed"
    ares = True
    heal_timer = "orchestrator.lease_ttl"
    name = "kill_orchestrator"
    description = "Kill orchestrator replicas (the leader among them triggers an election)."
    default_target = "orchestrator"

    def survival_target(self, rt: Runtime, rng: random.Random) -> str | None:
        return self.default_target

    def resolve(self, rt: Agents, target: str, rng: random.Random) -> tuple[str, ...]:
        return resolve_agents(rt, target, self.kinds, "orchestrator", rng)

    def healed(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        return rt.leader() is not None and all(a.alive for a in agent_states(rt, targets))


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
        for agent in agent_states(rt, targets):
            if agent.alive:
                rt.kill_agent(agent.id)
        return {"served": {t: rt.agents[t].served for t in targets}}

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        # Resurrected and working: alive again, and has done something since.
        served = counts_of(memo, "served")
        return all(a.alive and a.served > served[a.id] for a in agent_states(rt, targets))

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
        return all(not a.paused for a in agent_states(rt, targets))

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.pause(targets, True)
        return {}

    def revert(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        rt.pause(targets, False)


class ResumeAgent(Action):
    verb = "resumed"
    ares = True
    name = "resume_agent"
    description = "Resume paused agents now; their pause_agent faults still end (as no-ops) at their TTL."
    remedies = "pause_agent"  # survival mode plays it right after the pause it can resume

    def survival_target(self, rt: Runtime, rng: random.Random) -> str | None:
        paused = sorted(a.id for a in rt.agents.values() if a.paused)
        return rng.choice(paused) if paused else None

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        rt.pause(targets, False)
        return {}

    def conflict(self, rt: Agents, targets: tuple[str, ...], busy: set[tuple[str, str]]) -> str | None:
        for agent in agent_states(rt, targets):
            if not agent.paused:
                return f"{agent.id} is not paused"
        return None

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        return all(not a.paused for a in agent_states(rt, targets))

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
        return all(a.kind == "worker" for a in agent_states(rt, targets))

    def apply(self, rt: Agents, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        held = rt.held_tasks(targets)
        rt.partition(targets, True)
        return {"held": held, "expired": rt.lease_expired()}

    def healed(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        # The tasks the cut-off workers held have been taken back (their leases expired).
        return bool(rt.lease_expired() - count_of(memo, "expired") >= count_of(memo, "held"))

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
        dropped = rt.dropped(targets) - count_of(memo, "dropped")
        return bool(dropped > 0 and rt.lease_expired() - count_of(memo, "expired") >= dropped)

    def restored(self, rt: Agents, targets: tuple[str, ...], memo: Memo) -> bool:
        dropped = rt.dropped(targets) - count_of(memo, "dropped")
        return bool(rt.lease_expired() - count_of(memo, "expired") >= dropped)


# --- the workflow DAG and its stages -----------------------------------------------------------
