"""The pipeline on Redis Streams: the daemon keeps producers, books and telemetry; workers and replicas are processes.

``redis_backend`` supplies the pipeline's parts: the stream as its queue (``RedisQueue``), the lease as its
dispatch (``RedisDispatch``), producers that offer to the stream, workers that mirror the processes, and
``RedisRuntime``, which runs those processes and a ``Monitor`` that reads back from Redis every
``backend.poll`` what the experiment, telemetry and injector read. Faults act on the processes: SIGKILL,
SIGSTOP/SIGCONT, and a control hash per worker.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaosd.backends.redis.books import RemoteBusy
from chaosd.backends.redis.clock import server_offset
from chaosd.backends.redis.control import Controls
from chaosd.backends.redis.dispatch import RedisDispatch
from chaosd.backends.redis.health import Health
from chaosd.backends.redis.monitor import Monitor
from chaosd.backends.redis.procs import LocalProcesses, children_settings
from chaosd.backends.redis.queue import RedisProducer, RedisQueue
from chaosd.backends.redis.scripts import Keys
from chaosd.config.redact import redact_url
from chaosd.core.errors import ConfigError
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.in_memory import AgentTasks, Runner, revive, stop_task, worker_for
from chaosd.pipeline.parts import Core, Parts, orchestrators, producers
from chaosd.pipeline.task import Task

__all__ = ["RedisDispatch", "RedisRuntime", "redis_backend"]

_SHUTDOWN_GRACE = 3.0  # seconds local processes get to exit on SIGTERM
_READY_TIMEOUT = 30.0  # seconds the local processes get to start before producers start anyway


def redis_backend(core: Core) -> Parts[Pipeline]:
    """The parts of the Redis runtime: the stream, the lease as the daemon reads it, producers offering to the
    stream, workers that stand for the processes, and the runtime that runs those."""
    settings = core.settings
    keys = Keys.of(settings.backend)
    queue = settings.queue
    stream = RedisQueue(
        queue.capacity, queue.when_full, core.clock, core.ledger, keys, settings.backend.poll, core.callers
    )
    lease = RedisDispatch(orchestrators(settings))
    busy = RemoteBusy(core.t0)
    feeders = producers(RedisProducer, core, stream)
    return Parts(
        queue=stream,
        busy=busy,
        dispatcher=lease,
        producers=feeders,
        worker=lambda agent, routing: worker_for(core, agent, routing, stream, None, busy),
        host=lambda pipeline: RedisRuntime(pipeline, keys, stream, lease, busy, feeders),
    )


class RedisRuntime:
    """Runs the local worker and replica processes and the monitor; the producers are tasks of the daemon."""

    # A Redis restart without persistence loses the stream's tasks with no fault in play: walk every time.
    loss_needs_fault = False
    remote_stages = True

    def __init__(
        self,
        pipeline: Pipeline,
        keys: Keys,
        stream: RedisQueue,
        lease: RedisDispatch,
        busy: RemoteBusy,
        feeders: list[RedisProducer],
    ) -> None:
        self._p = pipeline
        self.keys = keys
        self.stream = stream
        self.lease = lease
        self._busy = busy
        self._feeders = feeders
        backend = pipeline.settings.backend
        self._roles = {r.id: "orchestrator" for r in lease.replicas}
        if backend.local_workers:
            self._roles.update({w.agent.id: "worker" for w in pipeline.workers})
        else:
            for w in pipeline.workers:  # processes somebody else starts: alive once they beat
                w.agent.alive = False
                w.agent.refresh()
        runners: dict[str, Runner] = {p.agent.id: p.run for p in feeders}
        self._tasks = AgentTasks(runners, pipeline.agents)
        self.procs: LocalProcesses | None = None
        self.controls = Controls(pipeline, self._roles)
        self._health = Health(backend.url, pipeline.clock, pipeline.events, pipeline.elapsed)
        self.monitor = Monitor(pipeline, self, keys, stream, lease, busy, self.controls, self._health)
        pipeline.switches.listeners.append(self._switched)

    # --- agents are processes ----------------------------------------------------------------------

    def is_local(self, agent_id: str) -> bool:
        """A process this daemon started and supervises (its replicas, and its workers unless told otherwise)."""
        return agent_id in self._roles

    def pid(self, agent_id: str) -> int | None:
        """The OS process behind a local worker or replica (None when not running)."""
        return self.procs.pid(agent_id) if self.procs is not None else None

    @property
    def results_read(self) -> int:
        return self.monitor.books.read

    def kill(self, agent: Agent) -> None:
        p = self._p
        if agent.kind == "worker" and not self.is_local(agent.id):
            self._kill_remote(agent)
            return
        stop_task(agent)  # a producer's task (a process has none)
        if self.procs is not None and self.is_local(agent.id):
            self.procs.kill(agent.id)
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="dead", pid_killed=True)
        else:
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="dead")
        p.supervisor.died(agent)

    def _kill_remote(self, agent: Agent) -> None:
        """Ask the process behind the last heartbeat to exit now (its control hash); its own supervisor, not
        this daemon, starts it again, and the agent is alive once a heartbeat from another process arrives."""
        instance = self.monitor.instances.get(agent.id)
        if not agent.alive or instance is None:
            return
        self.controls.killed[agent.id] = instance
        agent.alive = False
        agent.refresh()
        self._p.events.record(self._p.elapsed(), "agent", agent=agent.id, state="dead", exit_requested=instance)
        self.controls.wake.set()

    def start(self, agent: Agent) -> None:
        p = self._p
        revive(agent)
        if self.procs is not None and self.is_local(agent.id):
            pid = self.procs.start(agent.id, self._roles[agent.id])
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="alive", pid=pid)
            return
        self._tasks.start(agent)
        p.events.record(p.elapsed(), "agent", agent=agent.id, state="alive")

    def adopt(self, agent_id: str) -> None:
        """A worker started elsewhere beats: list it, and let faults reach it through its control hash."""
        p = self._p
        agent = Agent(agent_id, "worker")
        worker = p.make_worker(agent)  # never run here: it carries the fault flags and what the heartbeats report
        p.workers.append(worker)
        p.agents[agent_id] = agent
        p.events.record(p.elapsed(), "agent", agent=agent_id, state="joined")

    def observe_remote(self, agent: Agent, instance: str | None) -> None:
        """A worker this daemon does not run is alive while it beats (and is not the process asked to exit)."""
        killed = self.controls.killed.get(agent.id)
        alive = instance is not None and instance != killed
        if alive == agent.alive:
            return
        agent.alive = alive
        agent.refresh()
        p = self._p
        if alive and instance is not None:  # alive implies an instance: the check narrows it
            if killed is not None:
                del self.controls.killed[agent.id]
                agent.restart_count += 1  # restarted by its own supervisor
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="alive", instance=instance)
        else:
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="dead", heartbeat="lost")

    def check_processes(self) -> None:
        procs = self.procs
        if procs is None:
            return
        p = self._p
        for agent_id in procs.exited():
            agent = p.agents[agent_id]
            if agent.alive:  # died by itself (or by a signal from outside): the supervisor's to restart
                agent.alive = False
                agent.refresh()
                p.events.record(p.elapsed(), "agent", agent=agent_id, state="dead")
                p.supervisor.died(agent)
        for agent_id in self._roles:
            self._signal_pause(agent_id)

    def _signal_pause(self, agent_id: str) -> None:
        """SIGSTOP a paused local process, SIGCONT a resumed one (no-op when it already matches)."""
        procs = self.procs
        agent = self._p.agents[agent_id]
        if procs is not None and agent.alive and agent.paused != procs.stopped(agent_id):
            procs.signal(agent_id, signal.SIGSTOP if agent.paused else signal.SIGCONT)

    def _switched(self, switch: str, ids: Collection[str]) -> None:
        if switch == "pause":
            for agent_id in ids:
                if self.is_local(agent_id):
                    self._signal_pause(agent_id)  # SIGSTOP / SIGCONT now
        self.controls.switched(switch, ids)  # the control hashes and the stage document, at the next pass

    # --- what the stream holds ----------------------------------------------------------------------

    def held_tasks(self, ids: Collection[str]) -> int:
        """The consumers' pending entries: read and not yet acknowledged, so lost if the worker is cut off."""
        return sum(self.monitor.pending_by.get(agent_id, 0) for agent_id in ids)

    def holders(self) -> Iterator[Task]:
        return self.monitor.holders()

    def health(self) -> str | None:
        return self._health.describe()

    async def refresh(self) -> None:
        """One monitor pass now (tests and reports that need the books current); waits for one under way."""
        await self.monitor.poll(snapshot=True)

    # --- lifecycle ----------------------------------------------------------------------------------

    async def _prepare(self, client: Redis) -> None:
        p = self._p
        keys = self.keys
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            url = redact_url(p.settings.backend.url)  # the server, never its password
            raise ConfigError([("configuration", "backend.url", f"cannot reach Redis at {url}: {exc}")]) from None
        offset = await server_offset(client, p.clock)
        await client.delete(*keys.wiped_at_start(), *(keys.control(w.agent.id) for w in p.workers))
        await client.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
        run_id = str(await client.incr(keys.run))
        self.stream.connect(client, offset, run_id)
        p.events.record(p.elapsed(), "backend", backend="redis", run=run_id)

    async def _until_ready(self) -> None:
        """Until every local worker beats and a replica holds the lease (a process takes a second or two to
        start): producers that began before would only build a backlog nobody serves."""
        p = self._p
        deadline = p.clock.now() + _READY_TIMEOUT
        local = [w for w in p.workers if w.agent.id in self._roles]
        while p.clock.now() < deadline:
            await self.monitor.poll(snapshot=False)
            if self.lease.holder is not None and all(w.agent.id in self.monitor.beating for w in local):
                p.events.record(p.elapsed(), "backend", state="ready")
                return
            await p.clock.sleep(p.settings.backend.poll)
        p.events.record(p.elapsed(), "backend", state="not_ready")

    def _restart_clock(self) -> None:
        """Time starts when the processes are ready: the seconds they took to start are nobody's load, and
        telemetry ticks, warm-up and load phases count from here, as they count from the start in memory."""
        p = self._p
        shift = p.clock.now() - p.t0
        p.t0 += shift
        for producer in self._feeders:
            producer.restart_clock(shift)
        self.stream.reset_area()
        self._busy.restart(p.t0)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Connect, start the local processes and the producers; stop them all after the body."""
        p = self._p
        client = Redis.from_url(
            p.settings.backend.url, decode_responses=True, socket_connect_timeout=1.0, socket_timeout=5.0
        )
        tmp = tempfile.TemporaryDirectory(prefix="chaosd-redis-")
        forget_url: Callable[[], None] = lambda: None  # noqa: E731
        monitor = self.monitor
        try:
            await self._prepare(client)
            monitor.client = client
            path = Path(tmp.name) / "settings.json"
            forget_url = children_settings(p.settings, path)
            self.procs = LocalProcesses(path, Path(tmp.name), p.clock)
            for agent_id, role in self._roles.items():
                self.procs.start(agent_id, role)
            await self._until_ready()
            self._restart_clock()
            async with asyncio.TaskGroup() as group:
                background = [
                    group.create_task(self.stream.flush(), name="redis-admission"),
                    group.create_task(monitor.run(), name="redis-monitor"),
                ]
                try:
                    with self._tasks.started(group, p.supervisor):
                        yield
                finally:
                    self.stream.close()
                    monitor.closed = True
                    for task in background:
                        task.cancel()
                    for producer in p.producers:
                        if producer.agent.task is not None:
                            producer.agent.task.cancel()
        finally:
            monitor.client = None
            if self.procs is not None:
                self.procs.close(_SHUTDOWN_GRACE)
            await client.aclose()
            tmp.cleanup()
            forget_url()
