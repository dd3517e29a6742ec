"""The pipeline: the books, stages, DAG and supervisor every backend shares, assembled with one backend's parts
(queue, dispatch, busy meter, producers, workers, and the host that runs its agents)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager

from chaosd.config.handlers import refuse_virtual_time
from chaosd.config.settings import Settings, dependency_kind
from chaosd.core.clock import Clock
from chaosd.core.errors import Conflict
from chaosd.core.histogram import LogHistogram
from chaosd.core.rng import Streams
from chaosd.events.log import EventLog
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.audit import Audit
from chaosd.pipeline.dag import Dag
from chaosd.pipeline.in_memory import in_memory
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.lifespan import stage_lifespan
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.parts import Backend, Core
from chaosd.pipeline.producer import Admission
from chaosd.pipeline.resources import McpConnection, MemoryStore
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.supervisor import Supervisor
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import Walk, Worker

__all__ = ["Pipeline"]


class _Factor:
    """A shared multiplier (admission when nobody throttles; the load-spike surge)."""

    def __init__(self) -> None:
        self.factor = 1.0


class Pipeline:
    """The running system under test. ``async with pipeline.running():`` starts and stops it.

    The parts the backends differ in (queue, dispatch, busy meter, producers, workers, where agents run) come
    from ``backend``; the in-memory one unless told otherwise.
    """

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        admission: Admission | None = None,
        measure_from: float = 0.0,
        events: EventLog | None = None,
        backend: Backend = in_memory,
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
        self.wait = LogHistogram()
        self.sojourn = LogHistogram()
        self.admission: Admission = admission if admission is not None else _Factor()
        self.surge = _Factor()
        core = Core(
            settings=settings,
            clock=clock,
            t0=self.t0,
            events=self.events,
            ledger=self.ledger,
            shape=self.shape,
            admission=self.admission,
            surge=self.surge,
            wait=self.wait,
            sojourn=self.sojourn,
            measure_from=measure_from,
        )
        parts = backend(core)
        self.queue = parts.queue
        self.busy = parts.busy
        self.dispatcher = parts.dispatcher
        self.producers = list(parts.producers)
        self._worker = parts.worker
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
            kinds = {name: dependency_kind(settings.dependencies[name]) for name in stage.dependencies}
            runner = StageRunner(stage, rng, self.queue, self.ledger, clock, memory=memory, mcp=mcp, dependencies=kinds)
            runner.on_trip = self._breaker_tripped
            self.stages[stage.name] = runner
        self.dag = Dag(settings.stages)
        self.route_names: tuple[str, ...] | None = None
        self.bypassed: tuple[str, ...] = ()  # optional stages the route skips: tasks complete degraded
        self.walk: Walk | None = None  # the route as workers walk it, read by each once per task
        self.dag_dirty = False
        self.avoided: frozenset[str] = frozenset()  # stages whose breaker is open
        self._reroute()

        self.workers = [self.make_worker(Agent(f"worker-{i}", "worker")) for i in range(settings.workers.count)]
        self.agents: dict[str, Agent] = {a.id: a for a in self.dispatcher.replicas}
        self.agents.update({w.agent.id: w.agent for w in self.workers})
        self.agents.update({p.agent.id: p.agent for p in self.producers})
        # What a fault switch changed, for a backend whose agents must hear of it (``switch``, the agent ids).
        self.on_switch: list[Callable[[str, Collection[str]], None]] = []
        self.host = parts.host(self)
        self._in_lifespan = False
        self.supervisor = Supervisor(
            settings.supervisor, clock, self.events, streams.stream("supervisor"), self.t0, self.start_agent
        )
        route_names: tuple[str, ...] = self.route_names or ()
        self.mean_service = sum(self.stages[name].cfg.service.expected() for name in route_names)

    # --- routing ----------------------------------------------------------------------------------

    def make_worker(self, agent: Agent) -> Worker:
        """A worker for ``agent`` as this pipeline's backend makes them (not listed: the caller lists it)."""
        return self._worker(self, agent)

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
            self.update_route(self.clock.now())

    def heartbeat(self, now: float) -> None:
        """The leader's beat: steer around open breakers, reroute a changed DAG, repair memory stores."""
        if self.dispatcher.leader_id is None:
            return
        self.update_route(now)
        for store in self.memory.values():
            if store.scrub():
                self.events.record(now - self.t0, "memory", stage=store.name, state="repaired")

    def update_route(self, now: float) -> None:
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
        self.host.kill(agent)

    def start_agent(self, agent: Agent) -> None:
        """Bring a dead agent back (the supervisor's restart, or a fault's revert)."""
        self.host.start(agent)

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    def _switched(self, switch: str, ids: Collection[str] = ()) -> None:
        for callback in self.on_switch:
            callback(switch, ids)

    # --- what faults act through (chaosd.faults.runtime.Runtime; ``agents`` and ``stages`` above) --------
    # Called when a fault is applied, reverted or checked, never per task.

    def kill_agent(self, agent_id: str) -> None:
        agent = self.agents.get(agent_id)
        if agent is None:  # a replica started by hand can hold the lease without being an agent of ours
            raise Conflict("target", f"{agent_id} is not a process this daemon runs or has seen beat")
        self.kill(agent)

    def pause(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.paused = on
            agent.refresh()  # reopen or close its gate
        self._switched("pause", ids)

    def partition(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.partitioned = on
            agent.refresh()
        self._switched("partition", ids)

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        for agent_id in ids:
            agent = self.agents[agent_id]
            agent.exhausted = on
            agent.refresh()
        self._switched("exhaust", ids)

    def slow(self, ids: Collection[str], factor: float) -> None:
        for agent_id in ids:
            self.agents[agent_id].slow = factor
        self._switched("slow", ids)

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        for worker in self.workers:
            if worker.agent.id in ids:
                worker.drop_probability = probability
        self._switched("drop", ids)

    def dropped(self, ids: Collection[str]) -> int:
        return sum(w.dropped for w in self.workers if w.agent.id in ids)

    def held_tasks(self, ids: Collection[str]) -> int:
        return self.host.held_tasks(ids)

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
        self._switched("remove_node")

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        if removed:
            self.dag.removed_edges.add((a, b))
        else:
            self.dag.removed_edges.discard((a, b))
        self.mark_dag_changed()
        self._switched("remove_edge")

    def settled_route(self) -> tuple[str, ...] | None:
        return None if self.dag_dirty else self.route_names

    def hang(self, name: str, on: bool, timeout: float) -> None:
        stage = self.stages[name]
        stage.hang, stage.hang_timeout = on, timeout
        stage.refresh()
        self._switched("hang")

    def llm_down(self, name: str, on: bool) -> None:
        stage = self.stages[name]
        stage.llm_down = on
        stage.refresh()
        self._switched("llm_down")

    def jitter(self, name: str, seconds: float) -> None:
        stage = self.stages[name]
        stage.jitter = seconds
        stage.refresh()
        self._switched("jitter")

    # With remote stages (Redis) the pipeline's memory stores and MCP clients are the daemon's copies: a fault
    # changes them here and the switch takes it to the worker processes, whose heartbeats bring back the state.

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        picked = self.memory[name].corrupt(entries)
        self._switched("memory_corrupt", (name,))
        return picked

    def corrupted(self, name: str) -> AbstractSet[int]:
        return self.memory[name].corrupted

    def mcp_drop(self, name: str, outage: float) -> None:
        self.mcp[name].drop(outage)
        self._switched("mcp_disconnect", (name,))

    def mcp_restore(self, name: str) -> None:
        self.mcp[name].server_up = True
        self._switched("mcp_restore", (name,))

    def mcp_connected(self, name: str) -> bool:
        return self.mcp[name].connected

    def dependency_fault(self, stage: str, dependency: str, action: str, fields: Mapping[str, float] | None) -> None:
        self.stages[stage].dependency_fault(dependency, action, fields)
        self._switched("dependency")

    def spike_load(self, factor: float, on: bool) -> None:
        if on:
            self.surge.factor *= factor
        else:
            self.surge.factor /= factor

    # --- what the experiment reads ----------------------------------------------------------------

    @property
    def loss_needs_fault(self) -> bool:
        """Whether tasks leave their holders only through faults (Experiment.accounted)."""
        return self.host.loss_needs_fault

    def holders(self) -> Iterator[Task]:
        """Every task somebody answers for: queued, blocked at admission, dispatched, or in service."""
        return self.host.holders()

    def in_service(self) -> int:
        return sum(1 for w in self.workers if w.current is not None)

    def backend_health(self) -> str | None:
        """Why the backend cannot serve now (readiness and the status line say so), or None."""
        return self.host.health()

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """The python stages' proxies and setup for the body (see ``stage_lifespan``), where this process serves
        the stages (not a Redis daemon's mirror of them). Entered once: inside it, entering again does nothing,
        so a caller that must see a setup fail before it serves (the daemon) enters it before ``running``."""
        if self._in_lifespan or self.host.remote_stages:
            yield
            return
        self._in_lifespan = True
        try:
            async with stage_lifespan(tuple(self.stages.values()), self.settings.dependencies, self.settings.seed):
                yield
        finally:
            self._in_lifespan = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Run the agents for the body of the ``async with``; stop them all after (the host's ``running``).

        The stages' lifespan wraps the agents: set up before the first task, torn down after the last."""
        async with self.lifespan(), self.host.running():
            yield self
