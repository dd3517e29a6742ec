"""Assembles the agent runtime — producers, queue, orchestrator replicas, workers, supervisor — and owns its tasks."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from typing import TypeVar

from chaosd.clock import Clock
from chaosd.config import Settings
from chaosd.events import EventLog
from chaosd.handlers import refuse_virtual_time
from chaosd.histogram import LogHistogram
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.audit import Audit
from chaosd.pipeline.dag import Dag
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.producer import Admission, Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.resources import McpConnection, MemoryStore
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.supervisor import Supervisor
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter, Walk, Worker
from chaosd.rng import Streams

P = TypeVar("P", bound=Producer)

__all__ = ["Pipeline"]


class _Factor:
    """A shared multiplier (admission when nobody throttles; the load-spike surge)."""

    def __init__(self) -> None:
        self.factor = 1.0


class Pipeline:
    """The running system under test. ``async with pipeline.running():`` starts and stops it."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        admission: Admission | None = None,
        measure_from: float = 0.0,
        events: EventLog | None = None,
    ) -> None:
        if getattr(clock, "virtual", False):
            refuse_virtual_time(settings.stages)  # user handlers wait on the real clock
        self.settings = settings
        self.clock = clock
        self.t0 = clock.now()
        self.events = events if events is not None else EventLog()
        streams = Streams(settings.seed)
        load = settings.load
        self.shape = LoadShape(load.rate, load.phases)
        # The audit keeps its own books of effects owed and applied: it measures duplicates, the sink suppresses them.
        self.audit = Audit()
        self.ledger = Ledger(load.deadline, settings.sink.idempotent, self.audit)
        self.queue = IngressQueue(settings.queue.capacity, settings.queue.when_full, clock)
        self.busy = BusyMeter(self.t0)
        self.wait = LogHistogram()
        self.sojourn = LogHistogram()
        self.admission: Admission = admission if admission is not None else _Factor()
        self.surge = _Factor()
        self.mcp: dict[str, McpConnection] = {}
        self.memory: dict[str, MemoryStore] = {}
        self.stages: dict[str, StageRunner] = {}
        for stage in settings.stages:
            memory = mcp = None
            if stage.kind == "memory":
                memory = MemoryStore(stage.name, stage.entries, stage.checksums, streams.stream(f"memory:{stage.name}"))
                self.memory[stage.name] = memory
            if stage.kind == "mcp":
                mcp = McpConnection(
                    stage.name, stage.reconnect, clock, streams.stream(f"mcp:{stage.name}"), self.events
                )
                self.mcp[stage.name] = mcp
            rng = streams.stream(f"service:{stage.name}")
            runner = StageRunner(stage, rng, self.queue, self.ledger, clock, memory=memory, mcp=mcp)
            runner.on_trip = self._breaker_tripped
            self.stages[stage.name] = runner
        self.dag = Dag(settings.stages)
        self.route_names: tuple[str, ...] | None = None
        self.bypassed: tuple[str, ...] = ()  # optional stages the route skips: tasks complete degraded
        self.walk: Walk | None = None  # the route as workers walk it, read by each once per task
        self.dag_dirty = False
        self.avoided: frozenset[str] = frozenset()  # stages whose breaker is open
        self._reroute()

        replicas = [Agent(f"orchestrator-{i}", "orchestrator") for i in range(settings.orchestrator.replicas)]
        self.dispatcher = Dispatcher(settings.orchestrator, replicas, self.queue, clock, self.events, self.t0)
        self.dispatcher.on_tick.append(self._heartbeat)
        agents = [Agent(f"producer-{i}", "producer") for i in range(load.producers)]
        self.producers = self.make_producers(Producer, self.queue, agents, measure_from)
        self.workers = [self.make_worker(Agent(f"worker-{i}", "worker")) for i in range(settings.workers.count)]
        self.agents: dict[str, Agent] = {a.id: a for a in replicas}
        self.agents.update({w.agent.id: w.agent for w in self.workers})
        self.agents.update({p.agent.id: p.agent for p in self.producers})
        self._runners = {w.agent.id: w.run for w in self.workers} | {p.agent.id: p.run for p in self.producers}
        self.supervisor = Supervisor(
            settings.supervisor, clock, self.events, streams.stream("supervisor"), self.t0, self.start_agent
        )
        route_names: tuple[str, ...] = self.route_names or ()
        self.mean_service = sum(self.stages[name].cfg.service.expected() for name in route_names)
        self._group: asyncio.TaskGroup | None = None

    # --- routing ----------------------------------------------------------------------------------

    def make_producers(
        self, kind: type[P], queue: IngressQueue, agents: Sequence[Agent], measure_from: float
    ) -> list[P]:
        """One producer per agent, each offering an equal share of the load from its own arrival stream; task ids
        come from one counter. (The Redis backend makes its own kind, offering to the stream.)"""
        load = self.settings.load
        streams = Streams(self.settings.seed)
        ids = itertools.count(1)
        n = len(agents)
        return [
            kind(
                share=1.0 / n,
                shape=self.shape,
                arrival=load.arrival,
                burst_size=load.burst_size,
                rng=streams.stream(f"arrivals:{i}"),
                agent=agent,
                queue=queue,
                ledger=self.ledger,
                admission=self.admission,
                surge=self.surge,
                clock=self.clock,
                ids=ids,
                t0=self.t0,
                measure_from=self.t0 + measure_from,
                phase=i / n,
            )
            for i, agent in enumerate(agents)
        ]

    def make_worker(self, agent: Agent) -> Worker:
        """A worker for ``agent`` on this pipeline's queue, dispatch, books and route; its own network stream."""
        return Worker(
            agent=agent,
            routing=self,
            queue=self.queue,
            ledger=self.ledger,
            dispatcher=self.dispatcher,
            clock=self.clock,
            busy=self.busy,
            wait=self.wait,
            sojourn=self.sojourn,
            rng=Streams(self.settings.seed).stream(f"network:{agent.id}"),
        )

    def _reroute(self) -> None:
        found = self.dag.find(self.avoided)
        stages = self.stages
        if found is None:
            self.route_names, self.bypassed, self.walk = None, (), None
        else:
            self.route_names, self.bypassed = found.stages, found.bypassed
            self.walk = Walk(tuple(stages[n] for n in found.stages), tuple(stages[n] for n in found.bypassed))
        self.dag_dirty = False

    def mark_dag_changed(self) -> None:
        """The DAG changed; the leader reroutes on its next heartbeat."""
        self.dag_dirty = True

    def _breaker_tripped(self) -> None:
        """A stage's breaker opened: the leader (if there is one) steers around it now."""
        if self.dispatcher.leader_id is not None:
            self._update_route(self.clock.now())

    def _heartbeat(self, now: float) -> None:
        if self.dispatcher.leader_id is None:
            return
        self._update_route(now)
        for store in self.memory.values():
            if store.scrub():
                self.events.record(now - self.t0, "memory", stage=store.name, state="repaired")

    def _update_route(self, now: float) -> None:
        walked = self.route_names or ()
        avoided: set[str] = set()
        for name, stage in self.stages.items():
            if stage.kind == "llm":  # an open llm breaker sends calls to the fallback model instead
                continue
            if stage.is_open(now):
                avoided.add(name)
            elif name in self.avoided and name not in walked and not stage.probe(now):
                avoided.add(name)  # half-open, and the health check failed: open again
        if avoided != self.avoided:
            self.avoided = frozenset(avoided)
            self.dag_dirty = True
            self.events.record(now - self.t0, "breaker", open=sorted(avoided))
        if self.dag_dirty:
            before = (self.route_names, self.bypassed)
            self._reroute()
            if (self.route_names, self.bypassed) != before:  # a breaker with no way around it changes no route
                self.events.record(
                    now - self.t0,
                    "dag",
                    state="rerouted",
                    route=list(self.route_names or ()),
                    bypassed=list(self.bypassed),
                )

    # --- agents -----------------------------------------------------------------------------------

    def kill(self, agent: Agent) -> None:
        agent.alive = False
        agent.refresh()
        if agent.task is not None:
            agent.task.cancel()
            agent.task = None
        if agent.kind == "orchestrator":
            self.dispatcher.replica_died(agent)
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="dead")
        self.supervisor.died(agent)

    def start_agent(self, agent: Agent) -> None:
        """Bring a dead agent back (the supervisor's restart, or a fault's revert)."""
        agent.alive = True
        agent.gave_up = False
        agent.refresh()
        runner = self._runners.get(agent.id)
        if runner is not None and self._group is not None:
            agent.task = self._group.create_task(runner(), name=agent.id)
        self.events.record(self.elapsed(), "agent", agent=agent.id, state="alive")

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    # --- what faults act through (chaosd.faults.runtime.Runtime; ``agents`` and ``stages`` above) --------
    # Called when a fault is applied, reverted or checked, never per task.

    def kill_agent(self, agent_id: str) -> None:
        self.kill(self.agents[agent_id])

    def pause(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.paused = on
            agent.refresh()  # reopen or close its gate

    def partition(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.partitioned = on
            agent.refresh()

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.exhausted = on
            agent.refresh()

    def slow(self, ids: Collection[str], factor: float) -> None:
        for agent_id in ids:
            self.agents[agent_id].slow = factor

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        for worker in self.workers:
            if worker.agent.id in ids:
                worker.drop_probability = probability

    def dropped(self, ids: Collection[str]) -> int:
        return sum(w.dropped for w in self.workers if w.agent.id in ids)

    def held_tasks(self, ids: Collection[str]) -> int:
        return sum(1 for w in self.workers if w.agent.id in ids and w.current is not None)

    def leader(self) -> str | None:
        return self.dispatcher.leader_id

    def elections(self) -> int:
        return self.dispatcher.elections

    def lease_expired(self) -> int:
        return self.dispatcher.lease_expired

    def edges(self) -> tuple[tuple[str, str], ...]:
        return tuple((a, b) for a, successors in self.dag.edges.items() for b in successors)

    def remove_node(self, name: str, removed: bool) -> None:
        if removed:
            self.dag.removed_nodes.add(name)
        else:
            self.dag.removed_nodes.discard(name)
        stage = self.stages[name]
        stage.removed = removed
        stage.refresh()
        self.mark_dag_changed()

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        if removed:
            self.dag.removed_edges.add((a, b))
        else:
            self.dag.removed_edges.discard((a, b))
        self.mark_dag_changed()

    def settled_route(self) -> tuple[str, ...] | None:
        return None if self.dag_dirty else self.route_names

    def hang(self, name: str, on: bool, timeout: float) -> None:
        stage = self.stages[name]
        stage.hang, stage.hang_timeout = on, timeout
        stage.refresh()

    def llm_down(self, name: str, on: bool) -> None:
        stage = self.stages[name]
        stage.llm_down = on
        stage.refresh()

    def jitter(self, name: str, seconds: float) -> None:
        stage = self.stages[name]
        stage.jitter = seconds
        stage.refresh()

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        return self.memory[name].corrupt(entries)

    def corrupted(self, name: str) -> AbstractSet[int]:
        return self.memory[name].corrupted

    def mcp_drop(self, name: str, outage: float) -> None:
        self.mcp[name].drop(outage)

    def mcp_restore(self, name: str) -> None:
        self.mcp[name].server_up = True

    def mcp_connected(self, name: str) -> bool:
        return self.mcp[name].connected

    def spike_load(self, factor: float, on: bool) -> None:
        if on:
            self.surge.factor *= factor
        else:
            self.surge.factor /= factor

    # Tasks leave their holders only through faults here (a killed leader's dispatch state, a dropped dispatch):
    # between faults the last walk over the holders still counts the lost ones (Experiment.accounted).
    loss_needs_fault = True

    def holders(self) -> Iterator[Task]:
        """Every task somebody answers for: queued, blocked at admission, dispatched, or in service."""
        yield from self.queue.waiting()
        yield from self.dispatcher.held()
        for worker in self.workers:
            if worker.current is not None:
                yield worker.current

    def in_service(self) -> int:
        return sum(1 for w in self.workers if w.current is not None)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Run the agents for the body of the ``async with``; cancel and await them after.

        They live in a task group: if one crashes, the body is cancelled and the error propagates.
        """
        async with asyncio.TaskGroup() as group:
            self._group = group
            background = [group.create_task(self.dispatcher.run(), name="dispatcher")]
            background += [group.create_task(c.run(), name=f"mcp-{n}") for n, c in self.mcp.items()]
            for agent_id, runner in self._runners.items():
                agent = self.agents[agent_id]
                agent.task = group.create_task(runner(), name=agent_id)
            try:
                yield self
            finally:
                self._group = None
                self.supervisor.close()
                for task in background:
                    task.cancel()
                for agent in self.agents.values():
                    if agent.task is not None:
                        agent.task.cancel()
