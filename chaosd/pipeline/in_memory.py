"""The in-memory backend: every agent is a task of this process, on the queue and dispatch built here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager

from chaosd.core.rng import Streams
from chaosd.pipeline.agents import Activity, Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.parts import Assembly, Core, Parts, orchestrators, producers
from chaosd.pipeline.producer import Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.supervisor import Supervisor
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter, Routing, Worker

__all__ = ["AgentTasks", "InProcess", "Runner", "in_memory", "revive", "stop_task", "worker_for"]

# What runs an agent: a coroutine's function (an asyncio task runs it), or a callback agent's ``start``.
Runner = Callable[[], Coroutine[object, None, None] | Activity]


def in_memory(core: Core) -> Parts[Assembly]:
    """The parts of the in-memory runtime: one queue, the replicas' dispatcher, producers and workers on them."""
    settings, clock = core.settings, core.clock
    queue = IngressQueue(settings.queue.capacity, settings.queue.when_full, clock)
    busy = BusyMeter(core.t0)
    dispatcher = Dispatcher(settings.orchestrator, orchestrators(settings), queue, clock, core.events, core.t0)
    return Parts(
        queue=queue,
        busy=busy,
        dispatcher=dispatcher,
        producers=producers(Producer, core, queue),
        worker=lambda agent, routing: worker_for(core, agent, routing, queue, dispatcher, busy),
        host=lambda pipeline: InProcess(pipeline, dispatcher),
    )


def worker_for(
    core: Core, agent: Agent, routing: Routing, queue: IngressQueue, dispatcher: Dispatcher | None, busy: BusyMeter
) -> Worker:
    """A worker for ``agent`` on this queue and dispatch, the core's books, walking the route ``routing`` holds;
    its own network stream."""
    return Worker(
        agent=agent,
        routing=routing,
        queue=queue,
        ledger=core.ledger,
        dispatcher=dispatcher,
        clock=core.clock,
        busy=busy,
        wait=core.wait,
        sojourn=core.sojourn,
        rng=Streams(core.settings.seed).stream(f"network:{agent.id}"),
    )


class AgentTasks:
    """The agents that run as tasks of this process, in the task group of a running pipeline."""

    def __init__(self, runners: dict[str, Runner], agents: dict[str, Agent]) -> None:
        self._runners = runners
        self._agents = agents
        self._group: asyncio.TaskGroup | None = None

    def start_all(self, group: asyncio.TaskGroup) -> None:
        self._group = group
        for agent_id, runner in self._runners.items():
            self._agents[agent_id].task = _activity(group, runner, agent_id)

    def start(self, agent: Agent) -> None:
        """Run the agent again (no-op for one without a runner here, or outside ``running``)."""
        runner = self._runners.get(agent.id)
        if runner is not None and self._group is not None:
            agent.task = _activity(self._group, runner, agent.id)

    def close(self) -> None:
        self._group = None

    @contextmanager
    def started(self, group: asyncio.TaskGroup, supervisor: Supervisor) -> Iterator[None]:
        """Every agent with a runner started in ``group`` for the body; after it, none restarted again."""
        self.start_all(group)
        try:
            yield
        finally:
            self.close()
            supervisor.close()


def _activity(group: asyncio.TaskGroup, runner: Runner, name: str) -> Activity:
    started = runner()
    return group.create_task(started, name=name) if asyncio.iscoroutine(started) else started


def stop_task(agent: Agent) -> None:
    """Mark the agent dead and cancel its task."""
    agent.alive = False
    agent.refresh()
    if agent.task is not None:
        agent.task.cancel()
        agent.task = None


def revive(agent: Agent) -> None:
    """Mark the agent alive again (its task or process is the caller's to start)."""
    agent.alive = True
    agent.gave_up = False
    agent.refresh()


class InProcess:
    """Workers, producers and replicas as tasks of this process; the replicas' heartbeat is the dispatcher's."""

    # Tasks leave their holders only through faults here (a killed leader's dispatch state, a dropped dispatch):
    # between faults the last walk over the holders still counts the lost ones (Experiment.accounted).
    loss_needs_fault = True
    remote_stages = False

    def __init__(self, pipeline: Assembly, dispatcher: Dispatcher) -> None:
        self._p = pipeline
        self._dispatcher = dispatcher
        dispatcher.on_tick.append(pipeline.heartbeat)
        runners: dict[str, Runner] = {w.agent.id: w.start for w in pipeline.workers}
        runners.update({p.agent.id: p.start for p in pipeline.producers})
        self._tasks = AgentTasks(runners, pipeline.agents)

    def kill(self, agent: Agent) -> None:
        p = self._p
        stop_task(agent)
        if agent.kind == "orchestrator":
            self._dispatcher.replica_died(agent)
        p.events.record(p.elapsed(), "agent", agent=agent.id, state="dead")
        p.supervisor.died(agent)

    def start(self, agent: Agent) -> None:
        revive(agent)
        self._tasks.start(agent)
        self._p.events.record(self._p.elapsed(), "agent", agent=agent.id, state="alive")

    def held_tasks(self, ids: Collection[str]) -> int:
        return sum(1 for w in self._p.workers if w.agent.id in ids and w.current is not None)

    def holders(self) -> Iterator[Task]:
        """Every task somebody answers for: queued, blocked at admission, dispatched, or in service."""
        p = self._p
        yield from p.queue.waiting()
        yield from self._dispatcher.held()
        for worker in p.workers:
            if worker.current is not None:
                yield worker.current

    def health(self) -> str | None:
        return None  # nothing outside this process to lose

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the agents for the body of the ``async with``; cancel and await them after.

        They live in a task group: if one crashes, the body is cancelled and the error propagates.
        """
        p = self._p
        async with asyncio.TaskGroup() as group:
            background = [group.create_task(self._dispatcher.run(), name="dispatcher")]
            background += [group.create_task(c.run(), name=f"mcp-{n}") for n, c in p.mcp.items()]
            try:
                with self._tasks.started(group, p.supervisor):
                    yield
            finally:
                for task in background:
                    task.cancel()
                for agent in p.agents.values():
                    if agent.task is not None:
                        agent.task.cancel()
