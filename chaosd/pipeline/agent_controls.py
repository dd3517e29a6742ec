"""What faults do to the pipeline's agents (kill, pause, cut off, exhaust, slow, lose dispatches to) and the
dispatch lease as they read it: chaosd.faults.runtime.Runtime's agent and leadership operations."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from chaosd.core.errors import Conflict
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.parts import Host, Leadership
from chaosd.pipeline.switches import Switchboard
from chaosd.pipeline.worker import Worker

__all__ = ["AgentControls"]


class AgentControls:
    """Flips the agents' fault flags (and reopens or closes their gates); the host kills them and counts what
    its workers hold. Called when a fault is applied, reverted or checked, never per task."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        workers: Sequence[Worker],
        host: Host,
        dispatcher: Leadership,
        switches: Switchboard,
    ) -> None:
        self._agents = agents
        self._workers = workers  # the pipeline's list: a backend may append workers it adopts
        self._host = host
        self._dispatcher = dispatcher
        self._switches = switches

    def kill_agent(self, agent_id: str) -> None:
        agent = self._agents.get(agent_id)
        if agent is None:  # a replica started by hand can hold the lease without being an agent of ours
            raise Conflict("target", f"{agent_id} is not a process this daemon runs or has seen beat")
        self._host.kill(agent)

    def pause(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self._agents[agent_id]
            agent.paused = on
            agent.refresh()  # reopen or close its gate
        self._switches.switched("pause", ids)

    def partition(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self._agents[agent_id]
            agent.partitioned = on
            agent.refresh()
        self._switches.switched("partition", ids)

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self._agents[agent_id]
            agent.exhausted = on
            agent.refresh()
        self._switches.switched("exhaust", ids)

    def slow(self, ids: Collection[str], factor: float) -> None:
        for agent_id in ids:
            self._agents[agent_id].slow = factor
        self._switches.switched("slow", ids)

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        for worker in self._workers:
            if worker.agent.id in ids:
                worker.drop_probability = probability
        self._switches.switched("drop", ids)

    def dropped(self, ids: Collection[str]) -> int:
        return sum(w.dropped for w in self._workers if w.agent.id in ids)

    def held_tasks(self, ids: Collection[str]) -> int:
        return self._host.held_tasks(ids)

    # --- the lease ----------------------------------------------------------------------------------

    def leader(self) -> str | None:
        return self._dispatcher.leader_id

    def elections(self) -> int:
        return self._dispatcher.elections

    def lease_expired(self) -> int:
        return self._dispatcher.lease_expired
