"""The pipeline: the books, stages, route and supervisor every backend shares, assembled with one backend's parts
(queue, dispatch, busy meter, producers, workers, and the host that runs its agents)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

from chaosd.config.handlers import refuse_virtual_time
from chaosd.config.settings import ClientsConfig, Settings, dependency_kind
from chaosd.core.clock import Clock
from chaosd.core.histogram import LogHistogram
from chaosd.core.rng import Streams
from chaosd.events.log import EventLog
from chaosd.faults.call_tracing import CallTracer
from chaosd.pipeline.agent_controls import AgentControls
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.audit import Audit
from chaosd.pipeline.callers import Callers
from chaosd.pipeline.dag import Dag
from chaosd.pipeline.in_memory import in_memory
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.lifespan import stage_lifespan
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.parts import Core, Parts
from chaosd.pipeline.producer import Admission
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.resources import McpConnection, MemoryStore
from chaosd.pipeline.routing import Router
from chaosd.pipeline.stage_controls import StageControls
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.supervisor import Supervisor
from chaosd.pipeline.surge import Surge
from chaosd.pipeline.switches import Switchboard
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import Walk, Worker

__all__ = ["Backend", "Pipeline"]


class _Unthrottled:
    """Admission when nobody throttles: producers submit every task they offer."""

    def __init__(self) -> None:
        self.factor = 1.0


class _Stages:
    """The stages the settings name, each on the backend's queue, with the memory stores and MCP clients behind
    some of them."""

    def __init__(
        self, settings: Settings, clock: Clock, streams: Streams, events: EventLog, ledger: Ledger, queue: IngressQueue
    ) -> None:
        self.memory: dict[str, MemoryStore] = {}
        self.mcp: dict[str, McpConnection] = {}
        self.runners: dict[str, StageRunner] = {}
        for stage in settings.stages:
            memory = mcp = None
            if stage.kind == "memory":
                memory = MemoryStore(stage.name, stage.entries, stage.checksums, streams.stream(f"memory:{stage.name}"))
                self.memory[stage.name] = memory
            if stage.kind == "mcp":
                mcp = McpConnection(stage.name, stage.reconnect, clock, streams.stream(f"mcp:{stage.name}"), events)
                self.mcp[stage.name] = mcp
            rng = streams.stream(f"service:{stage.name}")
            kinds = {name: dependency_kind(settings.dependencies[name]) for name in stage.dependencies}
            runner = StageRunner(stage, rng, queue, ledger, clock, memory=memory, mcp=mcp, dependencies=kinds)
            self.runners[stage.name] = runner


class Pipeline:
    """The running system under test. ``async with pipeline.running():`` starts and stops it.

    The parts the backends differ in (queue, dispatch, busy meter, producers, workers, where agents run) come
    from ``backend``; the in-memory one unless told otherwise. It owns the route (``router``) and what faults
    act through, split by what they break: agents (``agent_controls``), the DAG (``router``), stages
    (``stage_controls``) and the load (``surge``); it answers for all of chaosd.faults.runtime.Runtime by
    handing out their operations.
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
        self.shape = LoadShape(settings.load.rate, settings.load.phases)
        # The audit keeps its own books of effects owed and applied: it measures duplicates, the sink suppresses them.
        self.audit = Audit()
        self.ledger = Ledger(settings.load.deadline, settings.sink.idempotent, self.audit)
        self.wait = LogHistogram()
        self.sojourn = LogHistogram()
        self.admission: Admission = admission if admission is not None else _Unthrottled()
        self.surge = Surge()
        self.callers = Callers(settings.clients, clock, streams.stream("callers"), self.ledger)
        self.call_tracer: CallTracer | None = None  # the dependency proxies' calls, traced when it is set
        parts = backend(self._core(measure_from))
        self.queue = parts.queue
        self.queue.on_renege = self._reneged
        self.busy = parts.busy
        self.dispatcher = parts.dispatcher
        self.producers = list(parts.producers)
        self._worker = parts.worker
        built = _Stages(settings, clock, streams, self.events, self.ledger, self.queue)
        self.stages, self.memory, self.mcp = built.runners, built.memory, built.mcp
        for runner in self.stages.values():
            runner.on_trip = self._breaker_tripped
        self.switches = Switchboard()  # a backend whose agents must hear of a fault switch listens here
        self.router = Router(Dag(settings.stages), self.stages, self.events, self.switches, lambda: self.t0)
        self.dag = self.router.dag
        self.workers = [self.make_worker(Agent(f"worker-{i}", "worker")) for i in range(settings.workers.count)]
        self.agents: dict[str, Agent] = {a.id: a for a in self.dispatcher.replicas}
        self.agents.update({w.agent.id: w.agent for w in self.workers})
        self.agents.update({p.agent.id: p.agent for p in self.producers})
        self.host = parts.host(self)
        self._in_lifespan = False
        self.supervisor = Supervisor(
            settings.supervisor, clock, self.events, streams.stream("supervisor"), self.t0, self.host.start
        )
        self._patience_rng = streams.stream("patience")
        self.configure_callers(settings.clients)
        self.mean_service = sum(self.stages[name].cfg.service.expected() for name in self.route_names or ())
        self._take_faults()

    def _core(self, measure_from: float) -> Core:
        return Core(
            settings=self.settings,
            clock=self.clock,
            t0=self.t0,
            events=self.events,
            ledger=self.ledger,
            shape=self.shape,
            admission=self.admission,
            surge=self.surge,
            wait=self.wait,
            sojourn=self.sojourn,
            measure_from=measure_from,
            callers=self.callers,
        )

    def _take_faults(self) -> None:
        """What faults act through (chaosd.faults.runtime.Runtime, with ``elapsed``, ``ledger``, ``audit``,
        ``memory``, ``workers``, ``agents`` and ``stages``): the operations of the controls that carry them out.
        Called when a fault is applied, reverted or checked, never per task."""
        agents = AgentControls(self.agents, self.workers, self.host, self.dispatcher, self.switches)
        self.agent_controls = agents
        self.kill_agent, self.pause, self.partition = agents.kill_agent, agents.pause, agents.partition
        self.exhaust, self.slow, self.drop_dispatches = agents.exhaust, agents.slow, agents.drop_dispatches
        self.dropped, self.held_tasks = agents.dropped, agents.held_tasks
        self.leader, self.elections, self.lease_expired = agents.leader, agents.elections, agents.lease_expired
        router = self.router
        self.edges, self.settled_route = router.edges, router.settled_route
        self.remove_node, self.remove_edge = router.remove_node, router.remove_edge
        stages = StageControls(self.stages, self.memory, self.mcp, self.switches)
        self.stage_controls = stages
        self.hang, self.llm_down, self.jitter = stages.hang, stages.llm_down, stages.jitter
        self.corrupt_memory, self.corrupted = stages.corrupt_memory, stages.corrupted
        self.mcp_drop, self.mcp_restore, self.mcp_connected = stages.mcp_drop, stages.mcp_restore, stages.mcp_connected
        self.dependency_fault = stages.dependency_fault
        self.spike_load = self.surge.spike_load

    def configure_callers(self, cfg: ClientsConfig) -> None:
        """Put the callers' policy ``cfg`` in force from now on."""
        self.callers.configure(cfg)
        patience = cfg.patience
        if patience is None:
            self.queue.patience = None
        elif patience.distribution == "constant":
            self.queue.patience = functools.partial(float, patience.mean)
        else:
            self.queue.patience = functools.partial(self._patience_rng.expovariate, 1.0 / patience.mean)

    def _reneged(self, task: Task) -> None:
        """An attempt left the queue unserved, its caller out of patience: it ends as abandoned."""
        self.callers.reneged(task)
        self.ledger.fail(task, "abandoned")

    def make_worker(self, agent: Agent) -> Worker:
        """A worker for ``agent`` as this pipeline's backend makes them (not listed: the caller lists it)."""
        return self._worker(agent, self.router)

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    # --- the route (``router``) -------------------------------------------------------------------

    @property
    def route_names(self) -> tuple[str, ...] | None:
        """The stages tasks walk now; None when no path is left."""
        return self.router.route_names

    @property
    def bypassed(self) -> tuple[str, ...]:
        """Optional stages the route skips: tasks complete degraded."""
        return self.router.bypassed

    @property
    def walk(self) -> Walk | None:
        """The route as workers walk it."""
        return self.router.walk

    @property
    def dag_dirty(self) -> bool:
        """The DAG changed and the leader has not rerouted yet."""
        return self.router.dirty

    @property
    def avoided(self) -> frozenset[str]:
        """Stages whose breaker is open."""
        return self.router.avoided

    def mark_dag_changed(self) -> None:
        """The DAG changed; the leader reroutes on its next heartbeat."""
        self.router.mark_changed()

    def update_route(self, now: float) -> None:
        self.router.update(now)

    def _breaker_tripped(self) -> None:
        """A stage's breaker opened: the leader (if there is one) steers around it now."""
        if self.dispatcher.leader_id is not None:
            self.router.update(self.clock.now())

    def heartbeat(self, now: float) -> None:
        """The leader's beat: steer around open breakers, reroute a changed DAG, repair memory stores."""
        if self.dispatcher.leader_id is None:
            return
        self.router.update(now)
        for store in self.memory.values():
            if store.scrub():
                self.events.record(now - self.t0, "memory", stage=store.name, state="repaired")

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
            stages = tuple(self.stages.values())
            async with stage_lifespan(stages, self.settings.dependencies, self.settings.seed, self.call_tracer):
                yield
        finally:
            self._in_lifespan = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Run the agents for the body of the ``async with``; stop them all after (the host's ``running``).

        The stages' lifespan wraps the agents: set up before the first task, torn down after the last."""
        async with self.lifespan(), self.host.running():
            yield self


# A backend: the parts it makes from the core (``chaosd.pipeline.in_memory.in_memory`` is the default). Its host
# is handed the whole pipeline (in memory it reads only chaosd.pipeline.parts.Assembly of it).
Backend = Callable[[Core], Parts[Pipeline]]
